"""Sibling sweeps over the same rows walked once, in C++ column-block kernels.

cpp_emitter builds one loop nest per output group and one per reduction, so a kernel that
stores a pointwise value and also sums it down the columns (a GELU backward with its bias
gradient: `g * gelu'(x + b)` stored and `sum(0)` of it) walks the rows twice, computing the
value (two erf and an exp per element) in both sweeps; a layer-norm backward's weight and bias
gradients beside its stored output walk them three times. `merge_sweeps` rewrites the body of
one column loop (cpp_column_blocks, before it makes the column blocks): a later sweep whose
loop nest has the same headers as an earlier one, and that neither reads what the earlier one
(or anything left between them) writes nor writes what they read, joins the earlier sweep's
innermost body, its loop variables renamed; its lets equal to a let already there (the value
computed twice) are dropped for that one. Lets and declarations between the two sweeps that do
not read what the earlier sweep writes move in front of it (an accumulator's initial value).
Per column, each accumulator still adds the rows in their order; the values added are now
those stored (a separate sweep let gcc contract the value's last multiply into the add)."""
from __future__ import annotations

from .kernel_ir import Assign, Decl, Let, Load, Op, Scope, Store, Var, deps_of


def _subst(n, names: dict, loops: dict, memo: dict):
    """`n` with Var names in `names` replaced by that node, loop variables renamed by `loops`
    (also in the Vars' dependence sets)."""
    if isinstance(n, Var):
        if n.name in names:
            return names[n.name]
        if n.name in loops or n.deps & loops.keys():
            return Var(loops.get(n.name, n.name), frozenset(loops.get(d, d) for d in n.deps))
        return n
    key = id(n)
    if key in memo:
        return memo[key]
    if isinstance(n, Op):
        args = tuple(_subst(a, names, loops, memo) for a in n.args)
        r = n if all(a is b for a, b in zip(args, n.args)) else Op(n.kind, args, n.dtype, n.atypes)
    elif isinstance(n, Load):
        off = _subst(n.offset, names, loops, memo)
        r = n if off is n.offset else Load(n.buffer, off, n.dtype, n.masks)
    else:
        r = n
    memo[key] = r
    return r


def _stmt_subst(s, names: dict, loops: dict, memo: dict):
    if isinstance(s, Let):
        return Let(s.name, s.dtype, _subst(s.value, names, loops, memo))
    if isinstance(s, Decl):
        v = None if s.value is None else _subst(s.value, names, loops, memo)
        return Decl(s.name, s.dtype, v, s.const, s.length)
    if isinstance(s, Store):
        return Store(s.buffer, _subst(s.offset, names, loops, memo),
                     _subst(s.value, names, loops, memo), s.dtype)
    if isinstance(s, Assign):
        return Assign(s.name, _subst(s.value, names, loops, memo), s.op)
    raise TypeError(s)


def _nest(s):
    """The levels of loop nest `s`: a list of Scopes from `s` down, each (but the innermost)
    holding Lets and exactly one nested Scope, the innermost Lets, Stores and Assigns; None if
    `s` is not such a nest (a blocked sum's chunk partials, a parallel loop, a branch). Its
    `simd` pragmas are the row loops' own, which the column blocks replace (cpp_column_blocks
    vectorizes the column loop inside instead) and which joining drops."""
    levels = []
    while True:
        if not isinstance(s, Scope) or s.loop is None or any(p.parallel for p in s.pragmas):
            return None
        levels.append(s)
        inner = [x for x in s.stmts if isinstance(x, Scope)]
        if not inner:
            ok = all(isinstance(x, (Let, Store, Assign)) for x in s.stmts)
            return levels if ok else None
        if len(inner) != 1 or not all(isinstance(x, (Let, Scope)) for x in s.stmts):
            return None
        s = inner[0]


def _reads(stmts) -> set:
    """Variable names and ("buf", name) that statements `stmts` read (loop headers included)."""
    out: set = set()

    def node(n):
        work = [n]
        while work:
            x = work.pop()
            if isinstance(x, Var):
                out.add(x.name)
            elif isinstance(x, Op):
                work.extend(x.args)
            elif isinstance(x, Load):
                out.add(("buf", x.buffer))
                work.append(x.offset)
    for s in stmts:
        if isinstance(s, Scope):
            if s.loop is not None:
                for n in (s.loop.start, s.loop.stop, s.loop.step, s.loop.span):
                    if n is not None:
                        node(n)
            out |= _reads(s.stmts)
        elif isinstance(s, (Let, Assign)):
            node(s.value)
        elif isinstance(s, Decl):
            if s.value is not None:
                node(s.value)
        elif isinstance(s, Store):
            node(s.offset)
            node(s.value)
    return out


def _writes(stmts) -> set:
    """Names that statements `stmts` define or assign, and ("buf", name) of what they store."""
    out: set = set()
    for s in stmts:
        if isinstance(s, Scope):
            out |= s.binds | _writes(s.stmts)
        elif isinstance(s, (Let, Decl, Assign)):
            out.add(s.name)
        elif isinstance(s, Store):
            out.add(("buf", s.buffer))
    return out


def _same_headers(a: list, b: list):
    """{b's loop variable: a's} when nests `a` and `b` have the same depth and loop headers
    (b's bounds read with its outer variables renamed to a's), else None."""
    if len(a) != len(b):
        return None
    loops: dict = {}
    for la, lb in zip(a, b):
        x, y = la.loop, lb.loop
        memo: dict = {}
        for p, q in ((x.start, y.start), (x.stop, y.stop), (x.step, y.step), (x.span, y.span)):
            if (p is None) != (q is None) or \
                    (p is not None and p != _subst(q, {}, loops, memo)):
                return None
        loops[y.var] = x.var
    return loops


def _join(a: list, b: list, loops: dict, names: dict) -> None:
    """Appends each level of nest `b` (its loop variables renamed by `loops`) to the same level
    of nest `a`: Lets before a's nested loop, the innermost statements after a's. A let whose
    value equals a let of `a`'s level (or of an outer level) becomes a name for that one
    (recorded in `names`)."""
    seen: dict = {}
    for la, lb in zip(a, b):
        for s in la.stmts:
            if isinstance(s, Let):
                seen.setdefault(s.value, s.name)
        memo: dict = {}
        nested = [k for k, s in enumerate(la.stmts) if isinstance(s, Scope)]
        at = nested[0] if nested else len(la.stmts)
        new = []
        for s in lb.stmts:
            if isinstance(s, Scope):
                continue
            t = _stmt_subst(s, names, loops, memo)
            if isinstance(t, Let):
                if t.value in seen:
                    names[t.name] = Var(seen[t.value], deps_of(t.value))
                    continue
                seen[t.value] = t.name
            new.append(t)
        la.stmts[at:at] = new


def merge_sweeps(stmts: list) -> tuple:
    """(new statement list, how many sweeps were joined) for the body `stmts` of a column loop
    (see the module docstring). The statements are not changed in place."""
    out: list = []
    cur = None          # (index in out, nest levels) of the sweep later ones may join
    after: list = []    # statements kept after `cur` (they read what it computes)
    names: dict = {}    # let names dropped for an equal earlier let -> that let's Var
    joined = 0
    for s in stmts:
        memo: dict = {}
        if not isinstance(s, Scope):
            if isinstance(s, (Let, Decl, Store, Assign)):
                s = _stmt_subst(s, names, {}, memo)
            if cur is not None and isinstance(s, (Let, Decl)) and \
                    not (_reads([s]) & (_writes([out[cur[0]]]) | _writes(after))):
                out.insert(cur[0], s)            # independent of the sweep: before it
                cur = (cur[0] + 1, cur[1])
                continue
            out.append(s)
            if cur is not None:
                after.append(s)
            continue
        levels = _nest(s)
        if cur is not None and levels is not None:
            loops = _same_headers(cur[1], levels)
            if loops is not None:
                mine = _reads([s]) - set(loops)
                theirs = _writes([out[cur[0]]]) | _writes(after)
                mine_w = _writes([s])
                if not (mine & theirs) and not (mine_w & (_reads([out[cur[0]]]) | _reads(after))):
                    _join(cur[1], levels, loops, names)
                    joined += 1
                    continue
        s = _scope_subst(s, names)
        out.append(s)
        levels = _nest(s)
        cur, after = ((len(out) - 1, levels), []) if levels is not None else (None, [])
    return out, joined


def _scope_subst(s: Scope, names: dict) -> Scope:
    """A copy of Scope `s` (its nested Scopes copied too) with `names` substituted (lets
    dropped earlier in the body)."""
    c = Scope(s.binds, s.loop)
    c.pragmas = list(s.pragmas)
    if hasattr(s, "trip"):
        c.trip = s.trip
    memo: dict = {}
    c.stmts = [_scope_subst(x, names) if isinstance(x, Scope) else
               _stmt_subst(x, names, {}, memo) if isinstance(x, (Let, Decl, Store, Assign)) else x
               for x in s.stmts]
    return c
