"""Row scalars recomputed per vector in C++ reduce-then-broadcast kernels.

A row kernel derives row scalars from its accumulators between its loops (rms_norm's
`rsqrt(sum / n + eps)`) and its output loop reads them. Printed as they are, the scalars are
computed once a row and the output loop stores the row back to back. Here, when the row is
read twice (one reduction loop, then the output loop), the output loop walks chunks of one
SIMD vector (EMBER_VEC_F32 floats: cpp_prelude), each chunk deriving the row scalars again
from an opaque copy of the accumulators (`ember_opaque`: the compiler cannot hoist them out
of the chunk loop), as Inductor's C++ does (it reads the reduction back from memory for every
vector, so its sqrt and divide run per vector).

Why (benchmarks/RESULTS.md, "rms13g"; the 2-core AMD EPYC, one thread,
benchmarks/row_store_probe.py --pacing): a row's stores issued back to back retire slower
than the same stores paced by the per-vector sqrt and divide when they miss the cache. With
only the output streaming (every row reads one cached input row) 1.79-1.96 ms against
1.03-1.13 paced; the rms_norm kernel 2.05-2.12 ms against 1.35-1.38 (Inductor's own kernel
1.37-1.41 in the same runs). With only the input streaming (the output row stays in L1) the
pacing costs 5-10%, with a third pass over the row it gains nothing, and in layer_norm's
kernel (two reduction loops) it lost 10-18% (1.13-1.20 -> 1.31-1.34 ms): a kernel with a
second reduction loop keeps its scalars once a row.

Where (cpp_prelude's EMBER_ROW_CHUNK): the chunk is one vector on AMD Zen cores, where the
above was measured; elsewhere it is the whole row, so the scalars are computed once a row. On
the 2-vCPU Intel Xeon (AVX-512, AMX) the paced loop is the slower one: rms_norm 4096x1024
kernel alone, one thread, CPU min of 60: paced 1.28-1.65 ms, once a row 1.14-1.17, Inductor's
kernel 1.39-1.66.

Invariant: only constant locals (Lets) of the row's scope that the output loop reads and that
depend on an accumulator declared in that scope are recomputed, from the same accumulator
values, by the same expressions (no loads, no target text): the results are bit for bit those
of the unchunked loop. A loop is left as it is when those expressions hold more than arith
ops, conversions and square roots (`_cheap`). The chunk loop covers the output loop's range
exactly (a static trip count; the chunk's loop runs the chunk's elements, the last chunk cut
at the row's end unless 16 divides the row)."""
from __future__ import annotations

from .kernel_ir import (CONVERT, INT, Const, Decl, If, Let, Load, Loop, Op, Raw, Scope, Store, Var,
                        all_nodes, fold_index, int_value, nested_scopes, walk)

_ROOT_TYPES = ("f32", "f64")       # accumulator types ember_opaque takes
_CHEAP = (CONVERT, "math.sqrt", "math.rsqrt")
_ALL_WIDTHS = 16                   # a row that 16 divides is cut exactly by every width (4, 8, 16)


def _names(n) -> set:
    return {x.name for x in walk(n) if isinstance(x, Var)}


def _cheap(n) -> bool:
    """No loads, no target text, and only ops of a few instructions: arith ops, conversions,
    the hardware's square root (a math function of the prelude is a polynomial of 20 to 40
    instructions: log_softmax's log(sum) recomputed per vector made it slower, not faster)."""
    return all(not isinstance(x, (Load, Raw)) and
               (not isinstance(x, Op) or x.kind.startswith("arith.") or x.kind in _CHEAP)
               for x in walk(n))


def _subst(n, names: dict):
    if isinstance(n, Var):
        return names.get(n.name, n)
    if isinstance(n, Op):
        return Op(n.kind, tuple(_subst(a, names) for a in n.args), n.dtype, n.atypes)
    return n


def _output_loop(s) -> "int | None":
    """The static trip count of `s` when it is a row's output loop this rewrites: a loop from
    0 by 1 to a static bound, with no nested loop, under a plain `simd` pragma, storing to
    an output buffer; else None."""
    if not isinstance(s, Scope) or s.loop is None or s.loop.span is not None:
        return None
    lp = s.loop
    if int_value(lp.start) != 0 or int_value(lp.step) != 1 or int_value(lp.stop) is None:
        return None
    if len(s.pragmas) != 1 or not s.pragmas[0].simd or s.pragmas[0].parallel:
        return None
    if any(isinstance(x, (Scope, If)) for x in s.stmts):
        return None
    if not any(isinstance(x, Store) and x.buffer.startswith("out") for x in s.stmts):
        return None
    return int_value(lp.stop)


def _chunked(loop: Scope, trip: int, roots: dict, chain: list) -> Scope:
    """`loop` walked in chunks of EMBER_ROW_CHUNK(trip), each chunk recomputing `chain` (Lets,
    in order) from opaque copies of the accumulators `roots` (name -> dtype)."""
    lp = loop.loop
    c = f"{lp.var}_c"
    step = Var(f"EMBER_ROW_CHUNK({trip})")
    chunk = Scope({c}, Loop(c, Const(0, INT), Const(trip, INT), step))
    copies = {r: Var(f"{r}_v") for r in roots}
    chunk.stmts = [Let(f"{r}_v", ty, Raw(f"ember_opaque({r})")) for r, ty in roots.items()]
    chunk.stmts += [Let(x.name, x.dtype, _subst(x.value, copies)) for x in chain]
    if trip % _ALL_WIDTHS == 0:
        # a constant trip count (a whole chunk): the element index is the chunk's plus the lane
        o = f"{lp.var}_o"
        inner = Scope({o}, Loop(o, Const(0, INT), step))
        inner.stmts = [Let(lp.var, "index", fold_index("add", Var(c), Var(o)))] + loop.stmts
    else:
        inner = Scope(loop.binds, Loop(lp.var, Var(c), Const(trip, INT), span=step))
        inner.stmts = loop.stmts
    inner.pragmas = loop.pragmas
    chunk.stmts.append(inner)
    return chunk


def _rewrite(scope: Scope) -> int:
    done = sum(_rewrite(inner) for inner in nested_scopes(scope))
    roots, lets = {}, {}
    for k, s in enumerate(scope.stmts):
        if isinstance(s, Decl) and s.length is None:
            roots[s.name] = s.dtype
        elif isinstance(s, Let):
            lets[s.name] = s
        trip = _output_loop(s)
        # the row's second pass: one loop (its reduction) before the output loop
        if trip is None or sum(isinstance(x, Scope) for x in scope.stmts[:k]) != 1:
            continue
        # the Lets the loop reads, through other Lets, that depend on an accumulator
        on_acc: dict = {}

        def depends(name) -> bool:
            if name in roots:
                return True
            if name not in lets:
                return False
            if name not in on_acc:
                on_acc[name] = any(depends(v) for v in _names(lets[name].value))
            return on_acc[name]

        want, work = set(), [v for n in all_nodes(s.stmts) if isinstance(n, Var)
                             for v in (n.name,)]
        while work:
            v = work.pop()
            if v in want or v not in lets or not depends(v):
                continue
            want.add(v)
            work.extend(_names(lets[v].value))
        chain = [x for x in scope.stmts[:k] if isinstance(x, Let) and x.name in want]
        used = {r: roots[r] for r in roots if any(r in _names(x.value) for x in chain)}
        if not chain or not used or any(not _cheap(x.value) for x in chain) or \
                any(ty not in _ROOT_TYPES for ty in used.values()):
            continue
        scope.stmts[k] = _chunked(s, trip, used, chain)
        done += 1
    return done


def recompute_row_scalars(root: Scope) -> int:
    """Walks every row output loop of the kernel tree `root` that reads row scalars derived
    from the row's accumulators in vector chunks, each recomputing them (module docstring).
    Returns how many loops it rewrote."""
    return _rewrite(root)
