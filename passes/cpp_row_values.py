"""Row values kept from a reduction loop for the loop after it, in C++ kernels: a
reduce-then-broadcast kernel (softmax: max, sum of exp(x - max), exp(x - max) / sum) walks one
row in sibling loops; the output loop recomputes what the reduction loop computed for the same
element (the exp). `reuse_row_values` keeps costly values (a math op) and reads them back
instead: in a row array on the stack (per thread: the row's scope is the body of the parallel
loop) while the rows of one scope fit ROW_CACHE_MAX elements, else in the output element the
later loop stores (the row is still in cache: softmax over 8x65536 stores exp(x - max) in the
sum loop and divides it in place). Decided on the kernel_ir tree (canonical forms of the loops'
lets, the loops' Loop headers, the Decls of locals)."""
from __future__ import annotations

from .cpp_lang import CTYPE
from .kernel_ir import Assign, Const, Decl, Let, Line, Load, Op, Scope, Store, Var, int_value

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


def _at(n, var: str):
    """Canonical index tree `n` (no loads) with "@" renamed `var`."""
    if isinstance(n, Var):
        return Var(var) if n.name == "@" else n
    if isinstance(n, Op):
        return Op(n.kind, tuple(_at(a, var) for a in n.args), n.dtype, n.atypes)
    return n


def _walk_canon(n):
    """Every node of canonical tree `n` once: a shared subtree is walked once (a chain of
    `where(bit, r * c, r)` reads each `r` twice, so a walk of the tree is exponential in its
    depth: an integer pow's 31 squarings never finished lowering)."""
    work, seen = [n], set()
    while work:
        x = work.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
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
    """(body, loop variable, trip count) of a loop over one row from 0 with a static trip
    count, made by _Emitter.loop: a flat loop (its body: itself), or a blocked sum's chunk loop
    over the row whose one nested loop walks a chunk (its body: that loop); else None."""
    if not isinstance(s, Scope):
        return None
    trip = getattr(s, "trip", None)
    if trip is not None and len(s.binds) == 1 and not any(isinstance(x, Scope) for x in s.stmts):
        return s, next(iter(s.binds)), trip
    chunk = _chunk_loop(s)
    inner = [x for x in s.stmts if isinstance(x, Scope)]
    if chunk is None or len(inner) != 1 or any(isinstance(x, Scope) for x in inner[0].stmts):
        return None
    lp = inner[0].loop       # for (v = c; v < min(c + span, n); ++v): the chunk's elements
    if lp is not None and isinstance(lp.start, Var) and lp.start.name == s.loop.var and \
            int_value(lp.step) == 1 and int_value(lp.span) is not None and \
            int_value(lp.stop) == chunk:
        return inner[0], lp.var, chunk
    return None


def _chunk_loop(s):
    """The trip count n of a blocked sum's chunk loop `for (c = 0; c < n; c += step)` with
    static n and step (step > 1), else None."""
    lp = s.loop
    if lp is None or int_value(lp.start) != 0 or lp.span is not None or \
            int_value(lp.step) in (None, 1):
        return None
    return int_value(lp.stop)


def _written(stmts, out):
    """Names assigned and buffers stored to by `stmts` (nested scopes included); _OPAQUE for
    a statement of target text."""
    for s in stmts:
        if isinstance(s, Scope):
            _written(s.stmts, out)
        elif isinstance(s, Store):
            out.add(("buffer", s.buffer))
        elif isinstance(s, (Assign, Decl)):
            out.add(s.name)
        elif not isinstance(s, Let):
            out.add(_OPAQUE)
    return out


def _out_row(second, body2, var2, env2, memo2, dtype, taken, blocked):
    """(buffer, canonical offset) of an output element that loop `second` stores in each
    iteration, of type `dtype`, at an offset of its loop variable and variables bound outside
    it (so the loop before can store there first); None if there is none free."""
    for st in body2.stmts:
        if not isinstance(st, Store) or st.dtype != dtype or not st.buffer.startswith("out") \
                or st.buffer in taken or ("buffer", st.buffer) in blocked:
            continue
        off = _canon(st.offset, env2, var2, memo2)
        if off is None or "@" not in _reads(off) or \
                any(isinstance(x, Load) for x in _walk_canon(off)):
            continue
        inner = set(second.binds) - {var2}
        if _reads(off) & inner:
            continue
        return st.buffer, off
    return None


def reuse_row_values(root: Scope) -> int:
    """Keeps the costly values (a math op) that a row loop computes and a later sibling loop
    over the same row recomputes: the first stores them (in a stack row, or in the output
    element the second stores: see the module docstring), the second reads them. Only values
    of the loops' own lets are shared, and only when neither the first loop nor anything
    between the two writes what they read (statements of target text count as writing
    anything). Returns how many values it shared."""
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
        body1, var1, trip1 = r1
        env, memo, lets = {}, {}, {}
        bad = _written(first.stmts, set())
        for st in body1.stmts:
            if isinstance(st, Let):
                c = _canon(st.value, env, var1, memo)
                if c is None:
                    continue
                env[st.name] = c
                if any(isinstance(x, Op) and x.kind.startswith("math.") for x in _walk_canon(c)):
                    lets.setdefault(c, st)
        between = set()
        for j in range(i + 1, len(stmts)):
            second = stmts[j]
            r2 = _row_loop(second)
            if r2 is not None and r2[0] is second and r2[2] == trip1 and lets and \
                    _OPAQUE not in bad | between:
                var2 = r2[1]
                env2, memo2, taken = {}, {}, set()
                for k, st in enumerate(second.stmts):
                    if not isinstance(st, Let):
                        continue
                    c = _canon(st.value, env2, var2, memo2)
                    if c is None:
                        continue
                    env2[st.name] = c
                    src = lets.get(c)
                    if src is None or _reads(c) & (bad | between):
                        continue
                    row = getattr(src, "row", None)
                    if row is None and kept + trip1 <= ROW_CACHE_MAX:
                        kept += trip1
                        row = src.row = f"row_{src.name}"
                        decls.append((first, Line(f"alignas(64) {CTYPE.get(src.dtype, 'float')} "
                                                  f"{row}[{trip1}];")))
                        body1.stmts.insert(body1.stmts.index(src) + 1,
                                           Store(row, Var(var1), Var(src.name), "f32"))
                        shared += 1
                    if row is not None:
                        second.stmts[k] = Let(st.name, st.dtype, Load(row, Var(var2), "f32"))
                        env2[st.name] = Var(f"{row}[@]")     # later lets read the kept value
                        continue
                    out = _out_row(second, second, var2, env2, memo2, src.dtype, taken,
                                   bad | between)
                    if out is None:
                        continue
                    buf, off = out
                    taken.add(buf)
                    body1.stmts.insert(body1.stmts.index(src) + 1,
                                       Store(buf, _at(off, var1), Var(src.name), src.dtype))
                    second.stmts[k] = Let(st.name, st.dtype, Load(buf, _at(off, var2), src.dtype))
                    env2[st.name] = Var(f"{buf}[@]")
                    shared += 1
            _written([second], between)
    for loop, decl in decls:
        stmts.insert(next(k for k, x in enumerate(stmts) if x is loop), decl)
    return shared
