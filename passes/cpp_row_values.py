"""Row values kept from a reduction loop for the loop after it, in C++ kernels: a
reduce-then-broadcast kernel (softmax: max, sum of exp(x - max), exp(x - max) / sum) walks one
row in sibling loops; the output loop recomputes what the reduction loop computed for the same
element (the exp). `reuse_row_values` keeps costly values (a math call) in a row array on the
stack (per thread: the row's scope is the body of the parallel loop) and reads them back
instead; decided on the kernel_ir tree (canonical forms of the loops' lets)."""
from __future__ import annotations

from .cpp_lang import CTYPE
from .kernel_ir import Assign, Const, Let, Line, Load, Op, Scope, Store, Var

ROW_CACHE_MAX = 16384     # elements kept in the rows of one scope (64 KiB of floats a thread)
_OPAQUE = ("opaque",)     # a statement of target text: what it writes is unknown


def _canon(n, env, var, memo):
    """`n` with the loop's lets inlined, its loop variable renamed "@" and other variables
    compared by name; None if it holds anything else (target text)."""
    key = id(n)
    if key in memo:
        return memo[key]
    if isinstance(n, Var):
        r = Var("@") if n.name == var else env.get(n.name, Var(n.name))
    elif isinstance(n, Op):
        args = [_canon(a, env, var, memo) for a in n.args]
        r = None if any(a is None for a in args) else Op(n.kind, tuple(args), n.dtype, n.atypes)
    elif isinstance(n, Load):
        off = _canon(n.offset, env, var, memo)
        r = None if off is None else Load(n.buffer, off, n.dtype, n.masks)
    elif isinstance(n, Const):
        r = n
    else:
        r = None
    memo[key] = r
    return r


def _walk_canon(n):
    work = [n]
    while work:
        x = work.pop()
        yield x
        if isinstance(x, Op):
            work.extend(x.args)
        elif isinstance(x, Load):
            work.append(x.offset)


def _reads(n) -> set:
    """Variable names and ("buffer", name) of what canonical tree `n` reads."""
    out = set()
    for x in _walk_canon(n):
        if isinstance(x, Var):
            out.add(x.name)
        elif isinstance(x, Load):
            out.add(("buffer", x.buffer))
    return out


def _row_loop(s):
    """(loop variable, trip count) of a flat loop from 0 with a static trip count of at most
    ROW_CACHE_MAX, made by _Emitter.loop; else None."""
    trip = getattr(s, "trip", None)
    if not isinstance(s, Scope) or trip is None or trip > ROW_CACHE_MAX or len(s.binds) != 1 \
            or any(isinstance(x, Scope) for x in s.stmts):
        return None
    return next(iter(s.binds)), trip


def _written(stmts, out):
    """Names assigned and buffers stored to by `stmts` (nested scopes included); _OPAQUE for
    a statement of target text."""
    for s in stmts:
        if isinstance(s, Scope):
            _written(s.stmts, out)
        elif isinstance(s, Store):
            out.add(("buffer", s.buffer))
        elif isinstance(s, Assign):
            out.add(s.name)
        elif not isinstance(s, Let):
            out.add(_OPAQUE)
    return out


def reuse_row_values(root: Scope) -> int:
    """Keeps the costly values (a math op) that a flat row loop computes and a later sibling
    loop over the same row recomputes: the first stores them in a stack row, the second reads
    them. Only values of the loops' own lets are shared, and only when neither the first loop
    nor anything between the two writes what they read (statements of target text count as
    writing anything). Returns how many values it shared."""
    shared = 0
    for s in root.stmts:
        if isinstance(s, Scope):
            shared += reuse_row_values(s)
    stmts = root.stmts
    decls = []       # (loop, declaration of its row), inserted after the walk
    kept = 0         # elements of the rows declared in this scope
    for i, first in enumerate(stmts):
        r1 = _row_loop(first)
        if r1 is None:
            continue
        env, memo, lets = {}, {}, {}
        bad = _written(first.stmts, set())
        for st in first.stmts:
            if isinstance(st, Let):
                c = _canon(st.value, env, r1[0], memo)
                if c is None:
                    continue
                env[st.name] = c
                if any(isinstance(x, Op) and x.kind.startswith("math.") for x in _walk_canon(c)):
                    lets.setdefault(c, st)
        between = set()
        for j in range(i + 1, len(stmts)):
            second = stmts[j]
            r2 = _row_loop(second)
            if r2 is not None and r2[1] == r1[1] and lets and _OPAQUE not in bad | between:
                env2, memo2 = {}, {}
                for k, st in enumerate(second.stmts):
                    if not isinstance(st, Let):
                        continue
                    c = _canon(st.value, env2, r2[0], memo2)
                    if c is None:
                        continue
                    env2[st.name] = c
                    src = lets.get(c)
                    if src is None or _reads(c) & (bad | between):
                        continue
                    row = getattr(src, "row", None)
                    if row is None and kept + r1[1] > ROW_CACHE_MAX:
                        continue            # the rows of one scope stay within the budget
                    if row is None:
                        kept += r1[1]
                        row = src.row = f"row_{src.name}"
                        decls.append((first, Line(f"alignas(64) {CTYPE.get(src.dtype, 'float')} "
                                                  f"{row}[{r1[1]}];")))
                        first.stmts.insert(first.stmts.index(src) + 1,
                                           Store(row, Var(r1[0]), Var(src.name), "f32"))
                        shared += 1
                    second.stmts[k] = Let(st.name, st.dtype, Load(row, Var(r2[0]), "f32"))
                    env2[st.name] = Var(f"{row}[@]")     # later lets read the kept value
            _written([second], between)
    for loop, decl in decls:
        stmts.insert(next(k for k, x in enumerate(stmts) if x is loop), decl)
    return shared
