"""Row chunks for C++ kernels that sum down the columns of a row-major buffer (bias and
norm-weight gradients) beside pointwise outputs over the same rows (a GELU backward).

cpp_column_blocks walks such a kernel in blocks of 64 columns, each block going down all the
rows: 256 bytes of each row, then the next row a whole row further on, a new page every row.
The hardware prefetchers do not follow that and every row costs a TLB miss: a GELU backward
with its bias gradient over 1024 x 4096 floats took 17-19 ms of one core's CPU time where the
same arithmetic walked row by row takes 5.5 ms (1024 x 2048: 4.8-7.4 vs 2.6 ms; measured on
the 2-core development machine, 2026-11-26, a C++ harness). `chunk_rows` rewrites the kernel
instead as

  a `parallel for` over fixed chunks of rows (CHUNK_ROWS rows, a count that depends on the
  shapes only, never on the thread count), each chunk walking its rows in memory order, a
  `simd` loop over all the columns inside: the pointwise outputs stored as before, each sum
  added into the chunk's own row of partial sums (scratch memory, `ember_scratch`);
  then the original column loop with each row loop replaced by a loop over the chunks, adding
  the partial sums in chunk order into the accumulator (which starts at its initial value):
  cpp_column_blocks makes that a column-block loop (it is short: one row per chunk).

Invariant: the same values are stored; each sum is the same sum of the same terms, grouped by
chunks of rows (float addition regrouped, as any split reduction; the grouping is fixed by the
shapes, so results do not depend on the thread count). Applies only where that is certain: a
static column count, a parallel column loop, every local of the loop an f32/f64 accumulator
updated in exactly one row nest by `acc = x + acc` (x free of accumulators) and read nowhere
else in the nests, nothing between the nests reading an accumulator, no nest reading a buffer
the kernel stores, every store in a nest at an offset of the nest's outer row variable, and
plain nests (cpp_sweeps' `_nest`: static loops from 0 by 1). Anything else keeps the column
blocks."""
from __future__ import annotations

from .cpp_sweeps import _nest, _reads
from .kernel_ir import (INT, Assign, Const, Decl, Let, Line, Load, Loop, Op, OmpPragma, Scope,
                        Store, Var, deps_of, fold_index, int_value, walk)

CHUNK_ROWS = 32         # rows of one chunk (at least: a chunk is whole iterations of the outer loop)
MIN_ELEMENTS = 1 << 16  # smaller kernels keep the column blocks (their rows stay in cache)
_ACC_TYPES = {"f32": ("float", 4), "f64": ("double", 8)}


def _stores(stmts):
    for s in stmts:
        if isinstance(s, Scope):
            yield from _stores(s.stmts)
        elif isinstance(s, Store):
            yield s


def _loads(stmts):
    for s in stmts:
        if isinstance(s, Scope):
            yield from _loads(s.stmts)
            continue
        nodes = [s.value] if isinstance(s, (Let, Assign)) else \
            [s.offset, s.value] if isinstance(s, Store) else \
            [s.value] if isinstance(s, Decl) and s.value is not None else []
        for n in nodes:
            for x in walk(n):
                if isinstance(x, Load):
                    yield x


def _var_names(n) -> set:
    return {x.name for x in walk(n) if isinstance(x, Var)}


def _static_loop(lp: Loop) -> int | None:
    if int_value(lp.start) != 0 or int_value(lp.step) != 1 or lp.span is not None:
        return None
    n = int_value(lp.stop)
    return n if n is not None and n > 0 else None


def _plan_nest(levels, accs: set, stored: set):
    """{accumulator: the name of the Let that adds into it} for row nest `levels`, or None if
    the nest is not one `chunk_rows` may split."""
    trips = [_static_loop(lv.loop) for lv in levels]
    if None in trips:
        return None
    outer = levels[0].loop.var
    if any(ld.buffer in stored for ld in _loads(levels[0].stmts)):
        return None
    if any(outer not in deps_of(st.offset) for st in _stores(levels[0].stmts)):
        return None
    inner = levels[-1].stmts
    lets = {s.name: s for s in inner if isinstance(s, Let)}
    updates: dict = {}
    for s in inner:
        if not isinstance(s, Assign):
            continue
        if s.op != "=" or s.name not in accs or s.name in updates or \
                not isinstance(s.value, Var) or s.value.name not in lets:
            return None
        v = lets[s.value.name].value
        if not (isinstance(v, Op) and v.kind == "arith.addf" and len(v.args) == 2):
            return None
        a, b = v.args
        x = b if isinstance(a, Var) and a.name == s.name else \
            a if isinstance(b, Var) and b.name == s.name else None
        if x is None or _var_names(x) & accs:
            return None
        updates[s.name] = s.value.name
    if not updates:
        return None
    # an accumulator is read only by its own update's add
    for lv in levels:
        for s in lv.stmts:
            if isinstance(s, Scope):
                continue
            if isinstance(s, Let) and s.name in updates.values():
                continue
            if isinstance(s, Assign):
                if s.name not in updates:
                    return None
                continue
            if _reads([s]) & accs:
                return None
    return updates


def chunk_rows(top: Scope, j: str, bound, body: list, simd: bool):
    """The statements that replace column loop `top` (see the module docstring): `body` is its
    statement list after cpp_sweeps.merge_sweeps; None when the loop does not qualify. The last
    statement is the combining column loop, for cpp_column_blocks to block."""
    ncols = int_value(bound)
    if ncols is None or ncols <= 0 or not any(p.parallel for p in top.pragmas):
        return None
    decls = {s.name: s for s in body if isinstance(s, Decl)}
    if not decls or any(d.length is not None or d.dtype not in _ACC_TYPES
                        for d in decls.values()):
        return None
    accs = set(decls)
    nests = [(k, _nest(s)) for k, s in enumerate(body) if isinstance(s, Scope)]
    if not nests or any(levels is None for _, levels in nests):
        return None
    last = nests[-1][0]
    for k, s in enumerate(body):
        if isinstance(s, Scope):
            continue
        if k < last and (not isinstance(s, (Let, Decl)) or _reads([s]) & accs):
            return None
        if k > last and isinstance(s, Decl):
            return None
    stored = {st.buffer for st in _stores(body)}
    owner: dict = {}
    plans = {}
    for k, levels in nests:
        updates = _plan_nest(levels, accs, stored)
        if updates is None or owner.keys() & updates.keys():
            return None
        owner.update({a: k for a in updates})
        plans[k] = updates
    if owner.keys() != accs:
        return None
    rows = {k: 1 for k, _ in nests}
    for k, levels in nests:
        for lv in levels:
            rows[k] *= int_value(lv.loop.stop)
        if rows[k] * ncols < MIN_ELEMENTS:
            return None

    jv = Var(j, frozenset({j}))
    ch = f"{j}_c"
    chv = Var(ch, frozenset({ch}))
    at = fold_index("add", fold_index("mul", chv, Const(ncols, INT)), jv)
    out: list = []
    # scratch: one [chunks, columns] array of partial sums per accumulator, 64-byte aligned
    offsets, total, chunks = {}, 0, {}
    for k, levels in nests:
        n0 = int_value(levels[0].loop.stop)
        inner_rows = rows[k] // n0
        per = max(1, -(-CHUNK_ROWS // inner_rows))
        chunks[k] = (per, -(-n0 // per))
        for a in plans[k]:
            offsets[a] = total
            total += -(-chunks[k][1] * ncols * _ACC_TYPES[decls[a].dtype][1] // 64) * 64
    scr = f"{j}_scr"
    out.append(Line(f"char* __restrict__ {scr} = (char*)ember_scratch({total});"))
    for a, off in offsets.items():
        ct = _ACC_TYPES[decls[a].dtype][0]
        out.append(Line(f"{ct}* __restrict__ {a}_p = ({ct}*)({scr} + {off});"))
    lets_before: list = []
    final: list = []
    pragma = [OmpPragma(parallel=True, work=p.work, min_work=p.min_work)
              for p in top.pragmas if p.parallel][:1]
    for k, s in enumerate(body):
        if not isinstance(s, Scope):
            if isinstance(s, Let) and k < last:
                lets_before.append(s)
            final.append(s)
            continue
        levels, updates = _nest(s), plans[k]
        per, nch = chunks[k]
        out.append(_chunk_pass(levels, updates, decls, lets_before, jv, ncols, chv, nch, per,
                               at, pragma, simd))
        # the row nest in the combining loop: the chunks' partial sums in chunk order
        comb = Scope({ch}, Loop(ch, Const(0, INT), Const(nch, INT)))
        for a in updates:
            dt = decls[a].dtype
            t = f"{a}_sum"
            comb.stmts.append(Let(t, dt, Op("arith.addf", (Var(a, frozenset({ch})),
                                                           Load(f"{a}_p", at, dt)), dt, (dt, dt))))
            comb.stmts.append(Assign(a, Var(t, frozenset({ch, j}))))
        final.append(comb)
    new_top = Scope(top.binds, top.loop)
    new_top.pragmas = list(top.pragmas)
    new_top.stmts = final
    out.append(new_top)
    return out


def _chunk_pass(levels, updates, decls, lets_before, jv, ncols, chv, nch, per, at, pragma,
                simd) -> Scope:
    """`parallel for` over the chunks of one row nest: the chunk's partial sums zeroed, then its
    rows in order, a loop over all the columns innermost."""
    j, ch = jv.name, chv.name
    sc = Scope({ch}, Loop(ch, Const(0, INT), Const(nch, INT)))
    sc.pragmas = list(pragma)
    zero = Scope({j}, Loop(j, Const(0, INT), Const(ncols, INT)))
    zero.stmts = [Store(f"{a}_p", at, Const(0.0, decls[a].dtype), decls[a].dtype)
                  for a in updates]
    sc.stmts.append(zero)
    parent, lets = sc, list(lets_before)
    for d, lv in enumerate(levels):
        lp = lv.loop
        if d == 0:
            start = fold_index("mul", chv, Const(per, INT))
            loop = Loop(lp.var, start, lp.stop, Const(1, INT), Const(per, INT))
        else:
            loop = Loop(lp.var, lp.start, lp.stop, lp.step, lp.span)
        new = Scope(lv.binds, loop)
        parent.stmts.append(new)
        parent = new
        lets += [s for s in lv.stmts if isinstance(s, Let)]
    cols = Scope({j}, Loop(j, Const(0, INT), Const(ncols, INT)))
    cols.pragmas = [OmpPragma(simd=True)] if simd else []
    adds = set(updates.values())
    for s in lets:
        if s.name in adds:
            a = next(a for a, t in updates.items() if t == s.name)
            dt = decls[a].dtype
            x = s.value.args[1] if isinstance(s.value.args[0], Var) and \
                s.value.args[0].name == a else s.value.args[0]
            cols.stmts.append(Let(s.name, s.dtype, Op("arith.addf", (x, Load(f"{a}_p", at, dt)),
                                                      s.value.dtype, s.value.atypes)))
        else:
            cols.stmts.append(s)
    for s in levels[-1].stmts:
        if isinstance(s, Store):
            cols.stmts.append(s)
        elif isinstance(s, Assign):
            cols.stmts.append(Store(f"{s.name}_p", at, s.value, decls[s.name].dtype))
    parent.stmts.append(cols)
    return sc
