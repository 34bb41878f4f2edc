"""Innermost C++ loops split where their variable is read through `/ K` and `% K`.

A pointwise kernel that moves heads between layouts (the attention in-projection's gradient:
q, k and v gradients of [batch, heads, seq, head_dim] gathered into [seq, batch, 3, heads *
head_dim]) walks its inner dim `c` of heads * head_dim elements and reads its operands at
`((b * H + c / D) * S + s) * D + c % D`: within a run of D elements that is contiguous, but
gcc cannot see it through the division, so the `simd` loop gathers element by element.
`split_div_loops` rewrites such a loop `for c in [0, N)` (N a multiple of K, every division
and remainder of `c` by the one constant K) into `for c_h in [0, N / K) { simd for c_l in
[0, K) }`, with `c / K` read as `c_h`, `c % K` as `c_l` and `c` itself as `c_h * K + c_l`.
`(P * M + c) / K` with M a multiple of K is first read as `P * (M / K) + c / K` and its
remainder as `c % K` when P is built from loop variables and non-negative constants only (so
the sum is non-negative and C's truncating division distributes). Decided on the kernel_ir
tree: Loop fields, idx.div / idx.rem nodes."""
from __future__ import annotations

from .kernel_ir import (INT, Assign, Const, Decl, Let, Load, Loop, Op, OmpPragma, Scope, Store,
                        Var, int_value)

# The run K must hold a vector's worth of floats for the split to pay (AVX-512: 16).
MIN_RUN = 16


def _nonneg(n, loop_vars: set) -> bool:
    if isinstance(n, Var):
        return n.name in loop_vars
    if isinstance(n, Const):
        v = int_value(n)
        return v is not None and v >= 0
    if isinstance(n, Op) and n.kind in ("idx.add", "idx.mul"):
        return all(_nonneg(a, loop_vars) for a in n.args)
    return False


def _idx(kind, a, b):
    return Op("idx." + kind, (a, b), "index", ("index", "index"))


def _distribute(n, v: str, loop_vars: set):
    """`n` with each `(P * M + v) / K` read as `P * (M / K) + v / K` and its `% K` as `v % K`
    (M a multiple of K, P non-negative, see the module docstring)."""
    if isinstance(n, Op):
        args = tuple(_distribute(a, v, loop_vars) for a in n.args)
        if n.kind in ("idx.div", "idx.rem") and int_value(args[1]) and int_value(args[1]) > 0:
            k, num = int_value(args[1]), args[0]
            if isinstance(num, Op) and num.kind == "idx.add":
                for p, q in (num.args, num.args[::-1]):
                    if isinstance(q, Var) and q.name == v and isinstance(p, Op) and \
                            p.kind == "idx.mul" and int_value(p.args[1]) is not None and \
                            int_value(p.args[1]) % k == 0 and _nonneg(p.args[0], loop_vars):
                        if n.kind == "idx.rem":
                            return _idx("rem", q, args[1])
                        m = int_value(p.args[1]) // k
                        scaled = p.args[0] if m == 1 else _idx("mul", p.args[0], Const(m, INT))
                        return _idx("add", scaled, _idx("div", q, args[1]))
        return n if args == n.args else Op(n.kind, args, n.dtype, n.atypes)
    if isinstance(n, Load):
        off = _distribute(n.offset, v, loop_vars)
        return n if off is n.offset else Load(n.buffer, off, n.dtype, n.masks)
    return n


def _replace(n, v: str, k: int, hi: Var, lo: Var, whole):
    """`n` with `v / k` -> hi, `v % k` -> lo, any other `v` -> `whole`."""
    if isinstance(n, Var):
        return whole if n.name == v else n
    if isinstance(n, Op):
        if n.kind in ("idx.div", "idx.rem") and isinstance(n.args[0], Var) and \
                n.args[0].name == v and int_value(n.args[1]) == k:
            return hi if n.kind == "idx.div" else lo
        args = tuple(_replace(a, v, k, hi, lo, whole) for a in n.args)
        return n if args == n.args else Op(n.kind, args, n.dtype, n.atypes)
    if isinstance(n, Load):
        return Load(n.buffer, _replace(n.offset, v, k, hi, lo, whole), n.dtype, n.masks)
    return n


def _map_stmt(s, f):
    if isinstance(s, Let):
        return Let(s.name, s.dtype, f(s.value))
    if isinstance(s, Store):
        return Store(s.buffer, f(s.offset), f(s.value), s.dtype)
    if isinstance(s, Assign):
        return Assign(s.name, f(s.value), s.op)
    return None


def _divisors(n, v: str, out: set) -> bool:
    """Adds to `out` the K of every `v / K` and `v % K` in `n`; False if `v` is divided by
    anything else (a non-constant) or read under another division."""
    if isinstance(n, Op):
        if n.kind in ("idx.div", "idx.rem"):
            a, b = n.args
            if isinstance(a, Var) and a.name == v:
                k = int_value(b)
                if k is None or k <= 0:
                    return False
                out.add(k)
                return True
            if any(isinstance(x, Var) and x.name == v for x in _vars(a)):
                return False
        return all(_divisors(a, v, out) for a in n.args)
    if isinstance(n, Load):
        return _divisors(n.offset, v, out)
    return True


def _vars(n):
    work = [n]
    while work:
        x = work.pop()
        if isinstance(x, Var):
            yield x
        elif isinstance(x, Op):
            work.extend(x.args)
        elif isinstance(x, Load):
            work.append(x.offset)


def split_div_loops(root: Scope, loop_vars: frozenset = frozenset()) -> int:
    """Splits every innermost loop of `root` that the module docstring describes; returns
    how many."""
    done = 0
    for k, s in enumerate(root.stmts):
        if not isinstance(s, Scope):
            continue
        inner = loop_vars | ({s.loop.var} if s.loop is not None else set())
        if any(isinstance(x, Scope) for x in s.stmts):
            done += split_div_loops(s, frozenset(inner))
            continue
        new = _split(s, inner)
        if new is not None:
            root.stmts[k] = new
            done += 1
    return done


def _split(s: Scope, loop_vars: set):
    lp = s.loop
    if lp is None or int_value(lp.start) != 0 or int_value(lp.step) != 1 or lp.span is not None \
            or any(p.parallel for p in s.pragmas) or \
            not all(isinstance(x, (Let, Store)) for x in s.stmts):
        return None      # (an accumulator's loop is left alone)
    n, v = int_value(lp.stop), lp.var
    if n is None:
        return None
    stmts = [_map_stmt(x, lambda e: _distribute(e, v, loop_vars)) for x in s.stmts]
    ks: set = set()
    for x in stmts:
        for e in ([x.value] if isinstance(x, (Let, Assign)) else [x.offset, x.value]):
            if not _divisors(e, v, ks):
                return None
    if len(ks) != 1:
        return None
    (kk,) = ks
    if kk < MIN_RUN or n % kk or n == kk:
        return None
    hi, lo = Var(f"{v}_h", frozenset({f"{v}_h"})), Var(f"{v}_l", frozenset({f"{v}_l"}))
    whole = Var(v, frozenset({f"{v}_h", f"{v}_l"}))
    outer = Scope({hi.name}, Loop(hi.name, Const(0, INT), Const(n // kk, INT)))
    outer.trip = n // kk
    body = Scope({lo.name, v}, Loop(lo.name, Const(0, INT), Const(kk, INT)))
    body.trip = kk
    body.pragmas = [OmpPragma(simd=p.simd, reductions=p.reductions) for p in s.pragmas]
    body.stmts.append(Let(v, "index", _idx("add", _idx("mul", hi, Const(kk, INT)), lo)))
    body.stmts += [_map_stmt(x, lambda e: _replace(e, v, kk, hi, lo, whole)) for x in stmts]
    outer.stmts.append(body)
    return outer
