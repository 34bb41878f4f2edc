"""Float row sums in C++ kernels accumulated in two vectors of lanes, added up as a tree.

A row sum (`acc += f(x)` under `#pragma omp simd reduction(+:acc)`) vectorizes into one vector
accumulator: every iteration waits for the previous add (an FMA's 4 cycles on the AVX-512
EPYC), and g++ (12, no -ffast-math) adds the vector's 16 lanes into the scalar one after the
other (16 dependent adds). Inductor's C++ keeps one `Vectorized<float>` accumulator too but adds
its lanes as a tree (`vec_reduce_all`). Here such a loop walks its row in chunks of
2 * EMBER_VEC_F32 elements, each lane of a local array `acc_l` (two vectors: two independent
add chains) accumulating its own elements; after the loop the lanes are added pairwise, width
halving (log2 steps), and the sum added to the accumulator.

Why (issue 13; the 2-core AMD EPYC, 2 threads, wall time of the kernel alone called through
ctypes, rms_norm 4096x1024 with its rows in L3, 2000 interleaved calls on a loaded machine,
min / p10 / p25 ms): ember's kernel 0.493 / 0.505 / 0.534, with two lane vectors and the tree
0.439 / 0.452 / 0.490, Inductor's 0.449 / 0.467 / 0.512. With one thread (CPU time) the three
run alike: the difference is the add latency that two threads, each on a core, expose.

Softmax's sum loop also stores each exp in the row it keeps for the output loop
(cpp_row_values); such stores (reading no accumulator) stay in the chunked loop as they are. The
same 2-vCPU Intel Xeon as cpp_build's flags, softmax 4096x1024 kernel alone, one thread, CPU
min of 60: 2.45-2.50 ms with one vector accumulator and 16 in-order lane adds a row, 2.27-2.29
with the lanes (Inductor's kernel 2.57-2.66).

Invariant: only a loop from 0 by 1 to a static bound that 2 * 16 divides (every
EMBER_VEC_F32 cuts it into whole chunks), with no nested loop or branch, under a plain
`simd` pragma whose reductions are all `+` on f32/f64 accumulators declared before the loop
in the enclosing scope, each assigned once in the body, is rewritten. Each lane's partial
sum starts at 0 and sums its elements in order; the lanes are then summed as a tree, and
the accumulator's own initial value added last (a sum in another order: the same
reassociation licence `omp simd reduction` gives the compiler). Nothing else changes."""
from __future__ import annotations

from .kernel_ir import (INT, Assign, Const, Decl, If, Let, Line, Load, Loop, OmpPragma, Op, Raw,
                        Scope, Store, Var, fold_index, int_value, nested_scopes)

LANES = Var("(2 * EMBER_VEC_F32)")   # two SIMD vectors of floats (cpp_prelude)
_ALL_WIDTHS = 32                     # 2 * the widest vector: cut exactly by every width
_TYPES = {"f32": "float", "f64": "double"}


def _subst(n, names: dict):
    if isinstance(n, Var):
        return names.get(n.name, n)
    if isinstance(n, Op):
        return Op(n.kind, tuple(_subst(a, names) for a in n.args), n.dtype, n.atypes)
    if isinstance(n, Load):
        return n        # an index never reads an accumulator
    return n


def _sum_loop(s, decls: dict) -> "list | None":
    """The accumulators (name, dtype) of `s` when it is a row sum this rewrites, else None."""
    if not isinstance(s, Scope) or s.loop is None or s.loop.span is not None:
        return None
    lp = s.loop
    trip = int_value(lp.stop)
    if int_value(lp.start) != 0 or int_value(lp.step) != 1 or trip is None \
            or trip % _ALL_WIDTHS != 0:
        return None
    if len(s.pragmas) != 1:
        return None
    p = s.pragmas[0]
    if not p.simd or p.parallel or p.collapse != 1 or p.work or not p.reductions:
        return None
    if any(op != "+" or v not in decls or decls[v] not in _TYPES for op, v in p.reductions):
        return None
    names = [v for _, v in p.reductions]
    if any(isinstance(x, (Scope, If, Line, Decl)) or
           (isinstance(x, Store) and _reads(x, names)) or
           (isinstance(x, Assign) and (x.name not in names or x.op != "="))
           for x in s.stmts):
        return None
    assigns = [x.name for x in s.stmts if isinstance(x, Assign)]
    if sorted(assigns) != sorted(names):
        return None
    if any(isinstance(x, Let) and isinstance(x.value, Raw) for x in s.stmts):
        return None
    return [(v, decls[v]) for v in names]


def _reads(store: Store, names: list) -> bool:
    """Whether `store` reads an accumulator (its value or offset names one)."""
    seen = [store.offset, store.value]
    while seen:
        n = seen.pop()
        if isinstance(n, Var) and n.name in names:
            return True
        if isinstance(n, Op):
            seen.extend(n.args)
        elif isinstance(n, (Raw, Load)):
            return True     # opaque text or an indexed read: not proven free of them
    return False


def _laned(loop: Scope, accs: list) -> list:
    """`loop` as statements: the lane arrays, the chunked loop, the tree and the final adds."""
    lp = loop.loop
    c, o = f"{lp.var}_c", f"{lp.var}_o"
    lane = {a: Raw(f"{a}_l[{o}]") for a, _ in accs}
    out = [Line(f"{_TYPES[ty]} {a}_l[2 * EMBER_VEC_F32] = {{}};") for a, ty in accs]
    chunk = Scope({c}, Loop(c, Const(0, INT), lp.stop, LANES))
    inner = Scope({o}, Loop(o, Const(0, INT), LANES))
    inner.stmts = [Let(lp.var, "index", fold_index("add", Var(c), Var(o)))]
    for x in loop.stmts:
        if isinstance(x, Let):
            inner.stmts.append(Let(x.name, x.dtype, _subst(x.value, lane)))
        elif isinstance(x, Store):  # a row value kept (cpp_row_values): reads no accumulator
            inner.stmts.append(x)
        else:       # an accumulator's Assign
            inner.stmts.append(Assign(f"{x.name}_l[{o}]", _subst(x.value, lane)))
    inner.pragmas = [OmpPragma(simd=True)]
    chunk.stmts.append(inner)
    out.append(chunk)
    w = f"{lp.var}_w"
    for a, _ in accs:
        out.append(Line(f"for (int64_t {w} = EMBER_VEC_F32; {w} >= 1; {w} /= 2) {{"))
        out.append(Line("  #pragma omp simd"))
        out.append(Line(f"  for (int64_t {o} = 0; {o} < {w}; ++{o}) "
                        f"{a}_l[{o}] = {a}_l[{o}] + {a}_l[{o} + {w}];"))
        out.append(Line("}"))
        out.append(Line(f"{a} = {a} + {a}_l[0];"))
    return out


def _rewrite(scope: Scope) -> int:
    done = sum(_rewrite(inner) for inner in nested_scopes(scope))
    decls, out = {}, []
    for s in scope.stmts:
        if isinstance(s, Decl) and s.length is None and not s.const:
            decls[s.name] = s.dtype
        accs = _sum_loop(s, decls)
        if accs is None:
            out.append(s)
            continue
        out.extend(_laned(s, accs))
        done += 1
    scope.stmts = out
    return done


def lane_sums(root: Scope) -> int:
    """Rewrites every row sum loop of the kernel tree `root` (module docstring); returns how
    many it rewrote."""
    return _rewrite(root)
