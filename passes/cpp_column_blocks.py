"""Column blocks for C++ kernels whose parallel loop runs along memory and whose inner loops
cross it: `x.sum(0)` of a row-major matrix (bias and norm-weight gradients), and the pointwise
outputs fused beside such reductions.

cpp_emitter's loop order puts the parallel dims outside and the reduced dims inside, so for a
reduction over rows the inner loop walks down a column: one element per cache line, a stride of
a whole row. `block_columns` rewrites such a kernel's tree: the parallel loop steps over blocks
of COLUMN_BLOCK columns, the row loops stay as they were, and inside the innermost row loop a
new `simd` loop walks the block's columns, contiguous in memory. The column variable is
redefined inside that loop (`const int64_t j = jb + jj;`), so every expression of the kernel is
kept as it was; an accumulator becomes an array over the block's columns. The order of the
additions into each accumulator is the order of the rows, as before."""
from __future__ import annotations

from .cpp_row_chunks import chunk_rows
from .cpp_sweeps import merge_sweeps
from .kernel_ir import (INT, Assign, Const, Decl, Let, Line, Load, Loop, Op, OmpPragma, Scope,
                        Store, Var, deps_of, int_value, walk)

COLUMN_BLOCK = 64
# the locals a column block turns into arrays: those of float, double, int32_t, int64_t in C++
_ARRAY_TYPES = ("f32", "f16", "bf16", "f64", "i32", "i64", "index")


def _rename(n, names: dict, memo: dict):
    """`n` with each Var in `names` replaced by names[var] (a Var that prints as an element)."""
    if isinstance(n, Var):
        return names.get(n.name, n)
    key = id(n)
    if key in memo:
        return memo[key]
    if isinstance(n, Op):
        args = tuple(_rename(a, names, memo) for a in n.args)
        r = n if all(a is b for a, b in zip(args, n.args)) else Op(n.kind, args, n.dtype, n.atypes)
    elif isinstance(n, Load):
        off = _rename(n.offset, names, memo)
        r = n if off is n.offset else Load(n.buffer, off, n.dtype, n.masks)
    else:
        r = n
    memo[key] = r
    return r


def _stmt_rename(s, names: dict, memo: dict):
    if isinstance(s, Let):
        return Let(s.name, s.dtype, _rename(s.value, names, memo))
    if isinstance(s, Store):
        return Store(s.buffer, _rename(s.offset, names, memo), _rename(s.value, names, memo),
                     s.dtype)
    if isinstance(s, Assign):
        target = names[s.name].name if s.name in names else s.name
        return Assign(target, _rename(s.value, names, memo), s.op)
    raise TypeError(s)


def _offsets(stmts):
    """(offset, in a nested loop?) of every Load and Store of `stmts`, nested scopes included."""
    for s in stmts:
        if isinstance(s, Scope):
            for off, _ in _offsets(s.stmts):
                yield off, True
            continue
        nodes = []
        if isinstance(s, Store):
            yield s.offset, False
            nodes = [s.offset, s.value]
        elif isinstance(s, (Let, Assign)):
            nodes = [s.value]
        for n in nodes:
            for x in walk(n):
                if isinstance(x, Load):
                    yield x.offset, False


def _column_shaped(body, j: str, row_vars: set) -> bool:
    """Every access that depends on `j` is `X + j` with X free of j, and at least one access
    in a nested loop steps by rows (its X depends on a row loop's variable)."""
    strided = False
    for off, nested in _offsets(body):
        d = deps_of(off)
        if j not in d:
            continue
        if isinstance(off, Var) and off.name == j:
            continue
        if not (isinstance(off, Op) and off.kind == "idx.add" and isinstance(off.args[1], Var)
                and off.args[1].name == j and j not in deps_of(off.args[0])):
            return False
        if nested and deps_of(off.args[0]) & row_vars:
            strided = True
    return strided


def block_columns(root: Scope, show, simd: bool = True) -> int:
    """Rewrites each top-level column-shaped loop of `root` (see the module docstring), its
    column loops `simd` or not; returns how many it rewrote. `show`: the C++ printer (for the
    one line it writes, the last block's column count)."""
    done, stmts = 0, []
    for top in root.stmts:
        stmts.append(top)
        if not isinstance(top, Scope):
            continue
        lp = top.loop      # a plain `for (j = 0; j < bound; ++j)`
        if lp is None or int_value(lp.start) != 0 or int_value(lp.step) != 1 or \
                lp.span is not None or \
                any(p.simd or p.collapse > 1 or p.reductions for p in top.pragmas):
            continue
        new = _rewrite(top, lp.var, lp.stop, simd, show)
        if new is not None:
            stmts[-1:] = new if isinstance(new, list) else [new]
            done += 1
    root.stmts = stmts
    return done


def block_inner_columns(parent: Scope, loop: Scope, show, simd: bool = True) -> bool:
    """Rewrites `loop`, a plain loop among `parent`'s statements that is not a parallel
    loop's top (a window reduction's innermost outer loop: channels-last C inside the
    parallel N, OH, OW), into column blocks as block_columns does top-level loops; whether
    it did."""
    lp = loop.loop
    if lp is None or int_value(lp.start) != 0 or int_value(lp.step) != 1 or \
            lp.span is not None or loop.pragmas:
        return False
    new = _rewrite(loop, lp.var, lp.stop, simd, show, chunks=False)
    if new is None:
        return False
    parent.stmts[next(k for k, x in enumerate(parent.stmts) if x is loop)] = new
    return True


def _rewrite(top: Scope, j: str, bound, simd: bool, show, chunks: bool = True):
    """The column-block loop for `top`, or (`chunks`) the statements of its row-chunk form
    (cpp_row_chunks) where that applies; None if `top` is not column-shaped."""
    row_vars: set = set()

    def scan(stmts) -> bool:
        for s in stmts:
            if isinstance(s, Scope):
                if any(p.parallel for p in s.pragmas) or \
                        (s.loop is not None and j in s.loop.names()):
                    return False
                row_vars.update(s.binds)
                if not scan(s.stmts):
                    return False
            elif isinstance(s, Decl):
                if s.dtype not in _ARRAY_TYPES or s.length is not None:
                    return False
            elif not isinstance(s, (Let, Store, Assign)):
                return False
        return True

    if not scan(top.stmts) or not row_vars or not _column_shaped(top.stmts, j, row_vars):
        return None
    if chunks:
        plan = chunk_rows(top, j, bound, merge_sweeps(top.stmts)[0], simd)
        if plan is not None:
            blocked = _rewrite(plan[-1], j, bound, simd, show, chunks=False)
            return plan[:-1] + [blocked if blocked is not None else plan[-1]]
    jb, jj, jn = f"{j}_b", f"{j}_l", f"{j}_n"
    block = COLUMN_BLOCK
    static = int_value(bound)
    if static is not None and static >= 0:   # a block of all columns, or a constant trip
        block = min(block, static)
    out = Scope({jb}, Loop(jb, _int(0), bound, _int(block)))
    out.pragmas = [OmpPragma(parallel=p.parallel, work=p.work, min_work=p.min_work)
                   for p in top.pragmas]
    if static is not None and static >= 0 and static % block == 0:
        count = _int(block)
    else:
        count = Var(jn)
        out.stmts.append(Line(f"const int64_t {jn} = std::min<int64_t>({block}, "
                              f"({show(bound)}) - {jb});"))
    arrays: dict[str, Var] = {}        # per-column locals (accumulators) -> their element

    def column_loop(lets, body, hot) -> Scope:
        """A loop over the block's columns; `simd` in the innermost row loops (elsewhere it
        runs once per block or chunk, and gcc unrolls or vectorizes it by itself)."""
        memo: dict = {}
        lp = Scope({jj, j}, Loop(jj, _int(0), count))
        lp.pragmas = [OmpPragma(simd=True)] if simd and hot else []
        lp.stmts.append(Line(f"const int64_t {j} = {jb} + {jj};"))
        lp.stmts += [_stmt_rename(x, arrays, memo) for x in lets]
        lp.stmts += [_stmt_rename(x, arrays, memo) for x in body]
        return lp

    def convert(stmts, lets: list) -> list:
        """`stmts` with each run of non-loop statements in a column loop; the Lets before it
        (of this scope and the scopes around it) are recomputed in every column loop."""
        new, pending = [], []
        innermost = not any(isinstance(s, Scope) for s in stmts)

        def flush():
            if pending:
                new.append(column_loop(list(lets), list(pending), innermost))
                pending.clear()
        for s in stmts:
            if isinstance(s, Decl):      # a local per column: an array over the block
                flush()
                new.append(Decl(f"{s.name}_v", s.dtype, length=block))
                pending.append(Assign(f"{s.name}_v[{jj}]", _rename(s.value, arrays, {})))
                arrays[s.name] = Var(f"{s.name}_v[{jj}]")
                flush()
            elif isinstance(s, Let):
                lets = lets + [s]
            elif isinstance(s, (Store, Assign)):
                pending.append(s)
            else:
                flush()
                copy = Scope(s.binds, s.loop)
                copy.stmts = convert(s.stmts, lets)
                new.append(copy)
        flush()
        return new

    body, _ = merge_sweeps(top.stmts)
    out.stmts += convert(body, [])
    return out


def _int(n: int):
    return Const(n, INT)
