"""Per-element expressions of kernel values, by walking the MLIR ops (part of the
kernel_schedule API; import from there).

`ExprBuilder.value_at(v, idx)` returns an `Expr` computing tensor value `v` at index `idx`
(one Expr per tensor dim). Pointwise producers are inlined (recomputed per consumer index);
reductions go through `reduce_hook`; kernel arguments are loaded from `buffers`. Every
intermediate is bound to a local (`lang.let`) in the innermost `Scope` that binds one of its
loop variables, so loop-invariant work (broadcast loads, per-row scalars) is hoisted, and is
memoised per (value, index) while that scope is open.

`Lang` is what a target supplies (C++ or Triton spelling):
    op(kind, args, rtype, atypes) -> str   kind: full MLIR op name ("arith.addf", "math.exp",
                                           "arith.cmpf.ogt", "arith.select", casts ...) or an
                                           index op "idx.add|mul|div|rem|min|max|lt|ge"
    constant(value, type) -> str           value: Python float/int/bool
    load(buffer, offset, type) -> str
    let(name, type, text) -> str           a statement binding a local
    dim_size(g, k) -> str                  size of dynamic global dim g (sizes[k] in the ABI)
    check_index(i, n, dim) -> str          index i (from data) checked against size n: records
                                           an out-of-range index, returns one in bounds
Types are spelled as type_name() strings: 'f32', 'bf16', 'i1', 'i64', 'index', ...
"""
from __future__ import annotations

from typing import Callable, Optional

from torch_mlir import ir

from .kernel_schedule import (CMPF, CMPI, Expr, KernelSchedule, Unschedulable, _int_array,
                              _slice_dims, indexing_maps, is_reduction, op_name, reassociation,
                              shape, type_name)


class Lang:  # documentation of the protocol; targets subclass or duck-type it
    def op(self, kind, args, rtype, atypes): raise NotImplementedError
    def constant(self, value, type): raise NotImplementedError
    def load(self, buffer, offset, type): raise NotImplementedError
    def let(self, name, type, text): raise NotImplementedError
    def dim_size(self, g, k): raise NotImplementedError
    def check_index(self, i, n, dim): raise NotImplementedError


class Scope:
    """A block of statements; `binds` are the loop variables it introduces."""

    def __init__(self, binds=(), header: str = "", kind: str = ""):
        self.binds, self.header, self.kind = set(binds), header, kind
        self.stmts: list = []      # str or nested Scope


class ExprBuilder:
    def __init__(self, sched: KernelSchedule, lang, buffers: dict,
                 reduce_hook: Optional[Callable] = None):
        self.sched, self.lang, self.buffers = sched, lang, buffers
        self.reduce_hook = reduce_hook
        self.stack = [Scope()]
        self.preamble: list = []   # loop-free locals (constants); render before stack[0]
        self.memo: dict = {}
        self.counter = 0
        # index texts built by iop: div/rem text -> (X, n text); (X / n) * n text -> (X, n)
        self._divs: dict = {}
        self._rems: dict = {}
        self._floors: dict = {}
        self._adds: dict = {}
        self._data_memo: dict = {}
        self.checks = False        # a checked index (Lang.check_index) was emitted

    # --- scopes and locals -----------------------------------------------------------------
    def push(self, scope: Scope, parent: Optional[Scope] = None) -> Scope:
        """Opens `scope`; attaches it to `parent` (default: the current innermost) first."""
        self.emit_into(parent or self.stack[-1], scope)
        scope.open = True
        self.stack.append(scope)
        return scope

    def pop(self) -> Scope:
        s = self.stack.pop()
        s.open = False
        return s

    def emit_into(self, scope: Scope, stmt) -> None:
        """Appends to `scope`, but before a still-open nested scope: what is hoisted out of a
        loop must precede it."""
        for i, s in enumerate(scope.stmts):
            if isinstance(s, Scope) and getattr(s, "open", False):
                scope.stmts.insert(i, stmt)
                return
        scope.stmts.append(stmt)

    def scope_for(self, deps) -> Scope:
        for s in reversed(self.stack):
            if s.binds & deps:
                return s
        return self.stack[0]

    def fresh(self, hint="t") -> str:
        self.counter += 1
        return f"{hint}{self.counter}"

    def bind(self, text: str, deps, type: str, hint="t") -> Expr:
        name = self.fresh(hint)
        if deps:
            self.emit_into(self.scope_for(deps), self.lang.let(name, type, text))
        else:
            self.preamble.append(self.lang.let(name, type, text))
        return Expr(name, frozenset(deps))

    def _get(self, key):
        hit = self.memo.get(key)
        if hit and any(s is hit[1] for s in self.stack):
            return hit[0]
        return None

    def _put(self, key, e: Expr) -> Expr:
        self.memo[key] = (e, self.scope_for(e.deps))
        return e

    # --- index arithmetic (folds the trivial cases so the code stays readable) -----------
    def iop(self, kind, a: Expr, b: Expr) -> Expr:
        ai, bi = _as_int(a.text), _as_int(b.text)
        if ai is not None and bi is not None:
            return Expr(str({"add": ai + bi, "mul": ai * bi, "div": ai // max(bi, 1),
                             "rem": ai % max(bi, 1), "min": min(ai, bi),
                             "max": max(ai, bi)}[kind]))
        if kind == "add" and ai == 0 or kind == "mul" and ai == 1:
            return b
        if kind in ("add", "sub") and bi == 0 or kind in ("mul", "div") and bi == 1:
            return a
        if kind == "mul" and (ai == 0 or bi == 0) or kind == "rem" and bi == 1:
            return Expr("0")
        # Delinearize/linearize round trips fold back: (X / n) * n + X % n == X (for any sign,
        # C and Python alike), so a flattened loop index reads contiguous operands directly.
        # Row-major offsets nest as ((P + X / n) * n + X % n), so (P + X / n) * n distributes.
        if kind == "mul" and self._divs.get(a.text, (None, None))[1] == b.text:
            e = Expr(self.lang.op("idx.mul", [a.text, b.text], "index", ["index", "index"]),
                     a.deps | b.deps)
            self._floors[e.text] = (self._divs[a.text][0], b.text)
            return e
        if kind == "mul" and a.text in self._adds:
            p, q = self._adds[a.text]
            for d, o in ((q, p), (p, q)):
                if self._divs.get(d.text, (None, None))[1] == b.text:
                    return self.iop("add", self.iop("mul", o, b), self.iop("mul", d, b))
        if kind == "add":
            for f, r in ((a, b), (b, a)):
                rm = self._rems.get(r.text)
                if rm is None:
                    continue
                if self._floors.get(f.text) == rm:
                    return rm[0]
                if f.text in self._adds:                  # (P + floor) + rem -> P + X
                    p, q = self._adds[f.text]
                    for fl, o in ((q, p), (p, q)):
                        if self._floors.get(fl.text) == rm:
                            return self.iop("add", o, rm[0])
        e = Expr(self.lang.op("idx." + kind, [a.text, b.text], "index", ["index", "index"]),
                 a.deps | b.deps)
        if kind == "div":
            self._divs[e.text] = (a, b.text)
        elif kind == "rem":
            self._rems[e.text] = (a, b.text)
        elif kind == "add":
            self._adds[e.text] = (a, b)
        return e

    def size(self, g) -> Expr:
        s = self.sched.size(g)
        if s is not None:
            return Expr(str(s))
        return Expr(self.lang.dim_size(g, self.sched.size_index(g)))

    def dim(self, v, i) -> Expr:
        s = shape(v)[i]
        if s is not None:
            return Expr(str(s))
        return self.size(self.sched.gid(v, i))

    def offset(self, v, idx) -> Expr:
        """Row-major linear offset of `idx` in the contiguous tensor `v`."""
        off = Expr("0")
        for i, e in enumerate(idx):
            off = self.iop("add", self.iop("mul", off, self.dim(v, i)), e)
        return off

    def apply_map(self, m: ir.AffineMap, loops) -> list[Expr]:
        return [self._affine(e, loops) for e in m.results]

    def _affine(self, e, loops) -> Expr:
        if isinstance(e, ir.AffineDimExpr):
            return loops[ir.AffineDimExpr(e).position]
        if isinstance(e, ir.AffineConstantExpr):
            return Expr(str(ir.AffineConstantExpr(e).value))
        for cls, kind in ((ir.AffineAddExpr, "add"), (ir.AffineMulExpr, "mul"),
                          (ir.AffineFloorDivExpr, "div"), (ir.AffineModExpr, "rem")):
            if isinstance(e, cls):
                b = cls(e)
                return self.iop(kind, self._affine(b.lhs, loops), self._affine(b.rhs, loops))
        raise Unschedulable(f"unsupported affine expression {e}")

    # --- values --------------------------------------------------------------------------
    def value_at(self, v: ir.Value, idx: list[Expr]) -> Expr:
        """Expr of tensor `v` at `idx`; a unit dim's index may be anything (it reads 0)."""
        idx = [Expr("0") if s == 1 else e for s, e in zip(shape(v), idx)]
        key = (v, tuple(e.text for e in idx))
        hit = self._get(key)
        if hit is not None:
            return hit
        return self._put(key, self._value_at(v, idx))

    def _value_at(self, v, idx) -> Expr:
        ty = type_name(v.type)
        if v in self.buffers:
            off = self.offset(v, idx)
            deps = frozenset().union(*[e.deps for e in idx]) if idx else frozenset()
            return self.bind(self.lang.load(self.buffers[v], off.text, ty), deps, ty, "x")
        op = v.owner
        name = op_name(op)
        if name == "linalg.generic":
            k = list(op.results).index(v)
            maps = indexing_maps(op)
            out_map = maps[len(op.inputs) + k]
            loops: list = [None] * out_map.n_dims
            for pos, e in enumerate(out_map.results):
                if isinstance(e, ir.AffineDimExpr):
                    loops[ir.AffineDimExpr(e).position] = idx[pos]
            if is_reduction(op):
                return self.reduction(op, loops)[k]
            for j, l in enumerate(loops):
                if l is None:
                    if self.sched.unit(self.sched.loop_gid(op, j)):
                        loops[j] = Expr("0")
                    else:
                        raise Unschedulable("loop dim not determined by the result index",
                                            op.location)
            e = self.generic_yield(op, k, loops)
            return self._round_narrow(op, k, e, ty)
        if name == "linalg.fill":
            return self.scalar(op.operands[0], {})
        if name == "linalg.transpose":
            perm = _int_array(op.attributes["permutation"])
            src = [None] * len(perm)
            for i, p in enumerate(perm):
                src[p] = idx[i]
            return self.value_at(op.operands[0], src)
        if name == "linalg.broadcast":
            added = set(_int_array(op.attributes["dimensions"]))
            return self.value_at(op.operands[0], [e for i, e in enumerate(idx) if i not in added])
        if name == "tensor.cast":
            return self.value_at(op.operands[0], idx)
        if name == "tensor.expand_shape":
            src = op.operands[0]
            return self.value_at(src, [self._linearize(v, g, idx) for g in reassociation(op)])
        if name == "tensor.collapse_shape":
            src = op.operands[0]
            out = [Expr("0")] * len(shape(src))
            for r, group in enumerate(reassociation(op)):
                rest = idx[r]
                for i in reversed(group):
                    n = self.dim(src, i)
                    out[i] = self.iop("rem", rest, n) if i != group[0] else rest
                    rest = self.iop("div", rest, n)
            return self.value_at(src, out)
        if name == "tensor.extract_slice":
            src = op.operands[0]
            offs = _int_array(op.attributes["static_offsets"])
            strides = _int_array(op.attributes["static_strides"])
            if any(x < -(2 ** 62) for x in strides):
                raise Unschedulable("dynamic extract_slice strides", op.location)
            dyn = iter(op.operands[1:])     # dynamic offsets come first among the operands
            off = [self.scalar(next(dyn), {}) if o < -(2 ** 62) else Expr(str(o)) for o in offs]
            out = list(off)
            for s, r in _slice_dims(op):
                out[s] = self.iop("add", off[s], self.iop("mul", idx[r], Expr(str(strides[s]))))
            return self.value_at(src, out)
        if name == "tensor.pad":
            return self._pad(op, idx, ty)
        if name == "tensor.concat":
            return self._concat(op, idx, ty)
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr) and ir.DenseElementsAttr(attr).is_splat:
                return Expr(self.lang.constant(_py(ir.DenseElementsAttr(attr).get_splat_value()),
                                               ty))
            raise Unschedulable("non-splat tensor constant inside a kernel", op.location)
        if name == "tensor.empty":
            # Its contents are unspecified (MLIR's tensor.empty; eager's torch.empty): any value
            # is a valid refinement, and 0 is the one code generation can fold. Decompositions
            # that fill an empty tensor piece by piece read it through selects whose other arm
            # wins wherever the result is defined (circular padding: where(mask, part, empty)).
            return Expr(self.lang.constant(0, ty))
        raise Unschedulable(f"cannot compute '{name}' per element", op.location)

    def _round_narrow(self, op, k, e: Expr, ty: str) -> Expr:
        """A bf16/f16 tensor between ops holds rounded values: the IR's type says so, and eager
        rounds every op's result. Bodies compute in f32 (a bf16 op's arithmetic is exact in
        f32 before its one rounding), so a generic's narrow result is rounded here, where a
        fused consumer reads it, unless it is an input element or a rounding already."""
        if ty not in ("bf16", "f16"):
            return e
        yielded = list(op.regions[0].blocks[0].operations)[-1].operands[k]
        owner = yielded.owner
        if isinstance(owner, ir.Block) or op_name(owner) in ("arith.truncf", "arith.constant"):
            return e
        return self.bind(self.lang.op("arith.truncf", [e.text], ty, ["f32"]), e.deps, ty)

    def _linearize(self, res, group, idx) -> Expr:
        e = Expr("0")
        for i in group:
            e = self.iop("add", self.iop("mul", e, self.dim(res, i)), idx[i])
        return e

    def _pad(self, op, idx, ty) -> Expr:
        src = op.operands[0]
        lo = _int_array(op.attributes["static_low"])
        inside, sidx = None, []
        for i, e in enumerate(idx):
            if lo[i] == 0 and shape(src)[i] == shape(op.results[0])[i]:
                sidx.append(e)
                continue
            n = self.dim(src, i)
            shifted = self.iop("add", e, Expr(str(-lo[i])))
            # Clamped so the load is always in bounds; the select picks the pad value outside.
            clamped = self.iop("min", self.iop("max", shifted, Expr("0")),
                               self.iop("add", n, Expr("-1")))
            sidx.append(clamped)
            ok = self._and(self._cmp("ge", shifted, Expr("0")), self._cmp("lt", shifted, n))
            inside = ok if inside is None else self._and(inside, ok)
        val = self.value_at(src, sidx)
        if inside is None:
            return val
        block = op.regions[0].blocks[0]
        ctx = {a: (lambda e=e: e) for a, e in zip(block.arguments, idx)}
        padv = self.scalar(list(block.operations)[-1].operands[0], ctx)
        return self.bind(self.lang.op("arith.select", [inside.text, val.text, padv.text], ty,
                                      ["i1", ty, ty]),
                         inside.deps | val.deps | padv.deps, ty)

    def _concat(self, op, idx, ty) -> Expr:
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        start, pieces = Expr("0"), []
        for v in op.operands:
            n = self.dim(v, dim)
            local = self.iop("add", idx[dim], Expr(f"-{start.text}") if _as_int(start.text) is not None
                             else Expr(self.lang.op("idx.mul", [start.text, "-1"], "index", ["index"] * 2)))
            clamped = self.iop("min", self.iop("max", local, Expr("0")), self.iop("add", n, Expr("-1")))
            sidx = list(idx)
            sidx[dim] = clamped
            pieces.append((self.value_at(v, sidx), self.iop("add", start, n)))
            start = self.iop("add", start, n)
        out = pieces[-1][0]
        for val, end in reversed(pieces[:-1]):
            c = self._cmp("lt", idx[dim], end)
            out = Expr(self.lang.op("arith.select", [c.text, val.text, out.text], ty, ["i1", ty, ty]),
                       c.deps | val.deps | out.deps)
        return self.bind(out.text, out.deps, ty)

    def _cmp(self, kind, a, b) -> Expr:
        return Expr(self.lang.op("idx." + kind, [a.text, b.text], "i1", ["index", "index"]),
                    a.deps | b.deps)

    def _and(self, a, b) -> Expr:
        return Expr(self.lang.op("arith.andi", [a.text, b.text], "i1", ["i1", "i1"]),
                    a.deps | b.deps)

    def reduction(self, op, loops) -> list[Expr]:
        """Accumulators of reduction generic `op` at the outer point given by `loops`
        (None for reduced loops), computed once per point and memoised."""
        key = (op, tuple(l.text if l is not None else None for l in loops))
        hit = self._get(key)
        if hit is not None:
            return hit
        if self.reduce_hook is None:
            raise Unschedulable("reduction without a reduce hook", op.location)
        accs = self.reduce_hook(self, op, loops)
        deps = frozenset().union(*[l.deps for l in loops if l is not None])
        self.memo[key] = (accs, self.scope_for(deps))
        return accs

    def generic_yield(self, op, k, loops, outs: Optional[list] = None) -> Expr:
        """The k-th yielded value of generic `op` with loop indices `loops`; `outs` overrides
        the output block arguments (accumulators in a reduction)."""
        term = list(op.regions[0].blocks[0].operations)[-1]
        return self.generic_value(op, term.operands[k], loops, outs)

    def generic_value(self, op, value, loops, outs: Optional[list] = None) -> Expr:
        """Any scalar `value` of generic `op`'s body, as generic_yield evaluates yields."""
        block = op.regions[0].blocks[0]
        n_in = len(op.inputs)
        maps = indexing_maps(op)
        operands = list(op.inputs) + list(op.outputs)
        ctx = {"loops": loops, "key": tuple(l.text for l in loops) +
               tuple(o.text for o in outs or [])}
        for i, arg in enumerate(block.arguments):
            if outs is not None and i >= n_in:
                ctx[arg] = (lambda e=outs[i - n_in]: e)
            elif isinstance(operands[i].type, ir.RankedTensorType):
                ctx[arg] = (lambda v=operands[i], m=maps[i]: self.value_at(v, self.apply_map(m, loops)))
            else:
                ctx[arg] = (lambda v=operands[i]: self.scalar(v, {}))
        return self.scalar(value, ctx)

    def scalar(self, v: ir.Value, ctx: dict) -> Expr:
        """A scalar SSA value: a block argument in `ctx`, a constant, or an arith/math op."""
        if v in ctx:
            return ctx[v]()
        owner = v.owner
        if not hasattr(owner, "operation") and not hasattr(owner, "name"):
            g = self.sched.scalar_gid.get(v)
            if g is None:
                raise Unschedulable("scalar kernel arguments are not supported")
            return self.size(g)       # from the sizes table, as an int64
        key = (v, ctx.get("key", ()))
        hit = self._get(key)
        if hit is not None:
            return hit
        return self._put(key, self._scalar_op(owner, v, ctx))

    def checked_index(self, i: Expr, d: int, src, op) -> Expr:
        """Index `i` into dim `d` of `src`, computed from tensor data (a gather, an embedding):
        an index outside [0, size) is the user's error, which eager raises (IndexError). The
        target's `Lang.check_index` records it for the host and yields an index that is in
        bounds either way, so that nothing is ever read out of bounds."""
        n = self.dim(src, d)
        if n.text == "0":   # nothing to read at all: let eager raise its error
            raise Unschedulable("gather from an empty dim", op.location)
        self.checks = True
        return self.bind(self.lang.check_index(i.text, n.text, d), i.deps | n.deps, "index", "ix")

    def _scalar_op(self, op, v, ctx) -> Expr:
        name = op.name
        ty = type_name(v.type)
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr):
                attr = ir.DenseElementsAttr(attr).get_splat_value()
            return Expr(self.lang.constant(_py(attr), ty))
        if name == "linalg.index":
            return ctx["loops"][ir.IntegerAttr(op.attributes["dim"]).value]
        if name == "tensor.extract":
            src, idx = op.operands[0], []
            for d, i in enumerate(list(op.operands)[1:]):
                e = self.scalar(i, ctx)
                if _from_data(i, self._data_memo):
                    e = self.checked_index(e, d, src, op)
                idx.append(e)
            return self.value_at(src, idx)
        if name == "tensor.dim":     # a size (dynamic broadcasting tests it against 1)
            k = op.operands[1].owner
            if isinstance(k, ir.Block) or k.name != "arith.constant":
                raise Unschedulable("tensor.dim of a computed dim", op.location)
            return self.dim(op.operands[0], int(ir.IntegerAttr(k.attributes["value"]).value))
        if not (name.startswith("arith.") or name.startswith("math.")):
            raise Unschedulable(f"'{name}' is not allowed in a kernel body", op.location)
        if name == "arith.truncf" and not isinstance(op.operands[0].owner, ir.Block) and \
                op_name(op.operands[0].owner) == "arith.constant":
            # A Python scalar in a bf16 op: eager computes with it unrounded (opmath), while
            # torch-mlir narrows it to the tensor's type first. Follow eager.
            return Expr(self.lang.constant(_py(op.operands[0].owner.attributes["value"]), ty))
        args = [self.scalar(a, ctx) for a in op.operands]
        kind = name
        if name in ("arith.cmpf", "arith.cmpi"):
            pred = ir.IntegerAttr(op.attributes["predicate"]).value
            kind = f"{name}.{(CMPF if name == 'arith.cmpf' else CMPI)[pred]}"
        text = self.lang.op(kind, [a.text for a in args], ty,
                            [type_name(a.type) for a in op.operands])
        deps = frozenset().union(*[a.deps for a in args]) if args else frozenset()
        return self.bind(text, deps, ty)


def _from_data(v: ir.Value, memo: dict) -> bool:
    """Whether scalar `v` of a generic body depends on tensor contents (a block argument or an
    extracted element) rather than only on loop indices and constants (an upsampling's source
    index is in bounds by construction and needs no check)."""
    if v in memo:
        return memo[v]
    memo[v] = False
    if isinstance(v, ir.BlockArgument):
        r = True
    else:
        op = v.owner
        name = op.name
        if name in ("linalg.index", "arith.constant"):
            r = False
        elif name == "tensor.extract":
            r = True
        else:
            r = any(_from_data(o, memo) for o in op.operands)
    memo[v] = r
    return r


def _as_int(text: str):
    try:
        return int(text)
    except ValueError:
        return None


def _py(attr):
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value
    if isinstance(attr, ir.BoolAttr):
        return ir.BoolAttr(attr).value
    if isinstance(attr, ir.IntegerAttr):
        t = ir.IntegerAttr(attr).type
        if isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 1:
            return bool(ir.IntegerAttr(attr).value & 1)
        return ir.IntegerAttr(attr).value
    raise Unschedulable(f"unsupported constant {attr}")
