"""Per-element expressions of kernel values, by walking the MLIR ops (over a kernel_schedule
schedule). `Expr` is the handle every expression travels as (a kernel_ir node, its spelling,
its loop dependences); `const(n)` / `var(name)` make index literals and loop variables.

    b = ExprBuilder(sched, lang, buffers={arg_value: "in0", ...}, reduce_hook=...)
    b.push(Scope(binds={"i0"}))            # a loop over global dim 0 named "i0"
    e = b.value_at(result_value, [var("i0")])   # -> Expr (kernel_ir node, its text, deps)
    # reduce_hook(builder, op, idx) returns one Expr per op result (the accumulators), placed
    # in the scope the index depends on.

`ExprBuilder.value_at(v, idx)` returns an `Expr` computing tensor value `v` at index `idx`
(one Expr per tensor dim). Pointwise producers are inlined (recomputed per consumer index);
reductions go through `reduce_hook`; kernel arguments are loaded from `buffers`. Every
intermediate is bound to a local (kernel_ir.Let) in the innermost `Scope` that binds one of its
loop variables, so loop-invariant work (broadcast loads, per-row scalars) is hoisted, and is
memoised per (value, index) while that scope is open.

`Lang` is what a target supplies (C++ or Triton spelling):
    op(kind, args, rtype, atypes, nodes) -> str
                                           kind: full MLIR op name ("arith.addf", "math.exp",
                                           "arith.cmpf.ogt", "arith.select", casts ...) or an
                                           index op "idx.add|mul|div|rem|min|max|lt|ge";
                                           args: the operands' spellings, nodes: their
                                           kernel_ir nodes (a spelling may depend on a Const)
    fold(kind, nodes, rtype, atypes) -> Const|None
                                           a constant the target folds the op to, if any
    plain_int(type) -> bool                whether integer constants of `type` are spelled as
                                           bare literals (then they fold as index integers)
    constant(value, type) -> str           value: Python float/int/bool
    load(buffer, offset, type, masks) -> str   masks: names of tile masks (Triton)
    let(name, type, text) -> str           a statement binding a local
    store(buffer, offset, value, type) -> str   a statement storing an element (C++)
    assign(name, op, value) -> str         an accumulator update (C++)
    decl(name, type, text, const, length) -> str   a mutable local (an accumulator) or, with
                                           `length`, an array of that many elements (C++)
    loop(var, start, stop, step, span) -> str   a loop header (kernel_ir.Loop, bounds printed;
                                           step None: 1; span: also stop at start + span)
    dim_size(g, k) -> str                  size of dynamic global dim g (sizes[k] in the ABI)
    check_index(i, n, dim) -> str          index i (from data) checked against size n: records
                                           an out-of-range index, returns one in bounds
Types are spelled as type_name() strings: 'f32', 'bf16', 'i1', 'i64', 'index', ...
Expressions are kernel_ir trees (`Expr.node`); index arithmetic is folded on them
(kernel_ir.fold_index), and `Expr.text` is the tree printed by `Lang`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional

from torch_mlir import ir

from .ir_queries import (CMPF, CMPI, indexing_maps, int_array, is_reduction, op_name,
                         reassociation, shape, slice_dims, type_name)
from .kernel_ir import (CHECK_INDEX, INT, Const, Let, Load, Op, Printer, Raw, Scope, Var,
                        deps_of, fold_index, int_value)
from .graph_utils import is_float_constant
from .kernel_schedule import KernelSchedule, Unschedulable
from .softmax_sums import divides_by_own_sum


@dataclasses.dataclass(frozen=True)
class Expr:
    """A kernel_ir expression `node`, its spelling `text` in the kernel's language, and the
    loop variables it depends on (used for hoisting/placement). Decisions read `node`; an
    Expr made from a name alone is that variable."""
    text: str
    deps: frozenset = frozenset()
    node: object = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.node is None:
            object.__setattr__(self, "node", Var(self.text, frozenset(self.deps)))

    def __str__(self):
        return self.text


@functools.lru_cache(maxsize=4096)
def const(n: int) -> Expr:
    """An index-arithmetic integer literal."""
    return Expr(str(n), frozenset(), Const(int(n), INT))


def var(name: str, deps=None) -> Expr:
    """A loop variable (depends on itself unless `deps` says otherwise)."""
    deps = frozenset({name}) if deps is None else frozenset(deps)
    return Expr(name, deps, Var(name, deps))


class Lang:  # documentation of the protocol; targets subclass or duck-type it
    def op(self, kind, args, rtype, atypes, nodes): raise NotImplementedError
    def fold(self, kind, nodes, rtype, atypes): return None
    def plain_int(self, type): return False
    def constant(self, value, type): raise NotImplementedError
    def load(self, buffer, offset, type, masks): raise NotImplementedError
    def let(self, name, type, text): raise NotImplementedError
    def dim_size(self, g, k): raise NotImplementedError
    def check_index(self, i, n, dim): raise NotImplementedError


# Ops whose value at an index is their first operand's value at another index (ExprBuilder's
# `_value_at` moves the index through them): reading through them reads the buffer below.
INDEX_ONLY_OPS = ("linalg.transpose", "linalg.broadcast", "tensor.cast", "tensor.expand_shape",
                  "tensor.collapse_shape", "tensor.extract_slice")


def _slices_of_one(op, dim: int):
    """(source, offsets, [(offset, extent) per operand along `dim`]) where every operand of
    concat `op` is a static, unit-stride, full-rank extract_slice of one source taking the
    same range of every other dim; else None."""
    src, offsets, pieces = None, None, []
    for v in op.operands:
        owner = v.owner
        if isinstance(owner, ir.Block) or op_name(owner) != "tensor.extract_slice" or \
                len(owner.operands) != 1:
            return None
        offs = int_array(owner.attributes["static_offsets"])
        sizes = int_array(owner.attributes["static_sizes"])
        if any(x != 1 for x in int_array(owner.attributes["static_strides"])) or \
                list(sizes) != list(shape(v)) or any(x < 0 for x in offs + sizes):
            return None
        if src is None:
            src, offsets = owner.operands[0], offs
        elif owner.operands[0] != src or any(
                a != b for d, (a, b) in enumerate(zip(offs, offsets)) if d != dim):
            return None
        pieces.append((offs[dim], sizes[dim]))
    return (src, offsets, pieces) if src is not None else None


class ExprBuilder:
    # Read a concat of slices of one value as that value at a piecewise index
    # (`_concat_of_slices`); a target whose vectorizer wants affine offsets leaves it off.
    concat_as_gather = False
    # An f32 sigmoid's reciprocal, `1 / (1 + exp(y))`, spelled with the target's fast division
    # ("arith.divf.fast") where the kernel's transcendental functions are the fast ones anyway
    # (the Triton target's f32 kernels: the exp is already not eager's bits); off elsewhere.
    fast_sigmoid = False

    def __init__(self, sched: KernelSchedule, lang, buffers: dict,
                 reduce_hook: Optional[Callable] = None, reciprocal_sums: bool = False):
        self.sched, self.lang, self.buffers = sched, lang, buffers
        self.reduce_hook = reduce_hook
        # f32 `x / sum(x)` (softmax's normalization) as `x * (1 / sum(x))`, the reciprocal
        # once per row: what eager's CPU softmax computes (`tmp_sum = 1 / tmp_sum` then a
        # multiply, SoftMaxKernel.cpp); a vector divide per element is the row's dearest op.
        self.reciprocal_sums = reciprocal_sums
        self.stack = [Scope()]
        self.preamble: list = []   # loop-free locals (constants); render before stack[0]
        self.memo: dict = {}
        self.counter = 0
        self.show = Printer(lang)
        self._data_memo: dict = {}
        self.checks = False        # a checked index (Lang.check_index) was emitted
        # a bound i1 Expr: the buffer reads being built are only made where it holds
        # (guarded_value_at of a target with masked loads); part of every value_at memo key
        self.load_guard: Optional[Expr] = None

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

    def bind(self, value, deps, type: str, hint="t") -> Expr:
        """A local bound to `value` (an Expr, a node, or target text) in the scope of `deps`."""
        node = value.node if isinstance(value, Expr) else Raw(value) if isinstance(value, str) \
            else value
        name = self.fresh(hint)
        if deps:
            self.emit_into(self.scope_for(deps), Let(name, type, node))
        else:
            self.preamble.append(Let(name, type, node))
        return Expr(name, frozenset(deps))

    # --- expression nodes --------------------------------------------------------------------
    def expr(self, node) -> Expr:
        return Expr(self.show(node), deps_of(node), node)

    def constant(self, value, type: str) -> Expr:
        if self.lang.plain_int(type):
            return self.expr(Const(int(value), INT))
        return self.expr(Const(value, type))

    def op(self, kind: str, args: list, rtype: str, atypes: list) -> Expr:
        """`kind` applied to Exprs `args`, folded to a constant where the target folds it."""
        nodes = tuple(a.node for a in args)
        c = self.lang.fold(kind, nodes, rtype, list(atypes))
        if c is not None:
            return self.constant(c.value, c.dtype)
        return self.expr(Op(kind, nodes, rtype, tuple(atypes)))

    def _get(self, key):
        hit = self.memo.get(key)
        if hit and any(s is hit[1] for s in self.stack):
            return hit[0]
        return None

    def _put(self, key, e: Expr) -> Expr:
        self.memo[key] = (e, self.scope_for(e.deps))
        return e

    # --- index arithmetic (folded on the tree: kernel_ir.fold_index) ------------------------
    def iop(self, kind, a: Expr, b: Expr) -> Expr:
        return self.expr(fold_index(kind, a.node, b.node))

    def size(self, g) -> Expr:
        s = self.sched.size(g)
        if s is not None:
            return const(s)
        return Expr(self.lang.dim_size(g, self.sched.size_index(g)))

    def dim(self, v, i) -> Expr:
        s = shape(v)[i]
        if s is not None:
            return const(s)
        return self.size(self.sched.gid(v, i))

    def offset(self, v, idx) -> Expr:
        """Row-major linear offset of `idx` in the contiguous tensor `v`."""
        off = const(0)
        for i, e in enumerate(idx):
            off = self.iop("add", self.iop("mul", off, self.dim(v, i)), e)
        return off

    def apply_map(self, m: ir.AffineMap, loops) -> list[Expr]:
        return [self._affine(e, loops) for e in m.results]

    def _affine(self, e, loops) -> Expr:
        if isinstance(e, ir.AffineDimExpr):
            return loops[ir.AffineDimExpr(e).position]
        if isinstance(e, ir.AffineConstantExpr):
            return const(ir.AffineConstantExpr(e).value)
        for cls, kind in ((ir.AffineAddExpr, "add"), (ir.AffineMulExpr, "mul"),
                          (ir.AffineFloorDivExpr, "div"), (ir.AffineModExpr, "rem")):
            if isinstance(e, cls):
                b = cls(e)
                return self.iop(kind, self._affine(b.lhs, loops), self._affine(b.rhs, loops))
        raise Unschedulable(f"unsupported affine expression {e}")

    # --- values --------------------------------------------------------------------------
    def value_at(self, v: ir.Value, idx: list[Expr]) -> Expr:
        """Expr of tensor `v` at `idx`; a unit dim's index may be anything (it reads 0)."""
        idx = [const(0) if s == 1 else e for s, e in zip(shape(v), idx)]
        key = (v, tuple(e.node for e in idx),
               None if self.load_guard is None else self.load_guard.text)
        hit = self._get(key)
        if hit is not None:
            return hit
        return self._put(key, self._value_at(v, idx))

    def _value_at(self, v, idx) -> Expr:
        ty = type_name(v.type)
        if v in self.buffers:
            off = self.offset(v, idx)
            deps = frozenset().union(*[e.deps for e in idx]) if idx else frozenset()
            return self.bind(Load(self.buffers[v], off.node, ty), deps, ty, "x")
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
                        loops[j] = const(0)
                    else:
                        raise Unschedulable("loop dim not determined by the result index",
                                            op.location)
            e = self.generic_yield(op, k, loops)
            return self._round_narrow(op, k, e, ty)
        if name == "linalg.fill":
            return self.scalar(op.operands[0], {})
        if name == "linalg.transpose":
            perm = int_array(op.attributes["permutation"])
            src = [None] * len(perm)
            for i, p in enumerate(perm):
                src[p] = idx[i]
            return self.value_at(op.operands[0], src)
        if name == "linalg.broadcast":
            added = set(int_array(op.attributes["dimensions"]))
            return self.value_at(op.operands[0], [e for i, e in enumerate(idx) if i not in added])
        if name == "tensor.cast":
            return self.value_at(op.operands[0], idx)
        if name == "tensor.expand_shape":
            src = op.operands[0]
            return self.value_at(src, [self._linearize(v, g, idx) for g in reassociation(op)])
        if name == "tensor.collapse_shape":
            src = op.operands[0]
            out = [const(0)] * len(shape(src))
            for r, group in enumerate(reassociation(op)):
                rest = idx[r]
                for i in reversed(group):
                    n = self.dim(src, i)
                    out[i] = self.iop("rem", rest, n) if i != group[0] else rest
                    rest = self.iop("div", rest, n)
            return self.value_at(src, out)
        if name == "tensor.extract_slice":
            src = op.operands[0]
            offs = int_array(op.attributes["static_offsets"])
            strides = int_array(op.attributes["static_strides"])
            if any(x < -(2 ** 62) for x in strides):
                raise Unschedulable("dynamic extract_slice strides", op.location)
            dyn = iter(op.operands[1:])     # dynamic offsets come first among the operands
            off = [self.scalar(next(dyn), {}) if o < -(2 ** 62) else const(o) for o in offs]
            out = list(off)
            for s, r in slice_dims(op):
                out[s] = self.iop("add", off[s], self.iop("mul", idx[r], const(strides[s])))
            return self.value_at(src, out)
        if name == "tensor.pad":
            return self._pad(op, idx, ty)
        if name == "tensor.concat":
            return self._concat(op, idx, ty)
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr) and ir.DenseElementsAttr(attr).is_splat:
                return self.constant(_py(ir.DenseElementsAttr(attr).get_splat_value()), ty)
            raise Unschedulable("non-splat tensor constant inside a kernel", op.location)
        if name == "tensor.empty":
            # Its contents are unspecified (MLIR's tensor.empty; eager's torch.empty): any value
            # is a valid refinement, and 0 is the one code generation can fold. Decompositions
            # that fill an empty tensor piece by piece read it through selects whose other arm
            # wins wherever the result is defined (circular padding: where(mask, part, empty)).
            return self.constant(0, ty)
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
        return self.bind(self.op("arith.truncf", [e], ty, ["f32"]), e.deps, ty)

    def _linearize(self, res, group, idx) -> Expr:
        e = const(0)
        for i in group:
            e = self.iop("add", self.iop("mul", e, self.dim(res, i)), idx[i])
        return e

    def _pad(self, op, idx, ty) -> Expr:
        src = op.operands[0]
        lo = int_array(op.attributes["static_low"])
        inside, sidx, bounds = None, [], {}
        for i, e in enumerate(idx):
            if lo[i] == 0 and shape(src)[i] == shape(op.results[0])[i]:
                sidx.append(e)
                continue
            n = self.dim(src, i)
            shifted = self.iop("add", e, const(-lo[i]))
            sidx.append(shifted)
            bounds[i] = n
            ok = self._and(self._cmp("ge", shifted, const(0)), self._cmp("lt", shifted, n))
            inside = ok if inside is None else self._and(inside, ok)
        if inside is None:
            return self.value_at(src, sidx)
        # read only inside (the select picks the pad value outside)
        val = self.guarded_value_at(src, sidx, bounds, inside)
        block = op.regions[0].blocks[0]
        ctx = {a: (lambda e=e: e) for a, e in zip(block.arguments, idx)}
        padv = self.scalar(list(block.operations)[-1].operands[0], ctx)
        return self.bind(self.op("arith.select", [inside, val, padv], ty, ["i1", ty, ty]),
                         inside.deps | val.deps | padv.deps, ty)

    def _concat(self, op, idx, ty) -> Expr:
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        if self.concat_as_gather:
            one = _slices_of_one(op, dim)
            if one is not None:
                return self._concat_of_slices(idx, dim, *one)
        start, pieces = const(0), []
        last = len(op.operands) - 1
        for j, v in enumerate(op.operands):
            n = self.dim(v, dim)
            s0 = int_value(start.node)
            neg = const(-s0) if s0 is not None else \
                self.expr(Op("idx.mul", (start.node, Const(-1, INT)), "index", ("index", "index")))
            local = self.iop("add", idx[dim], neg)
            sidx = list(idx)
            sidx[dim] = local
            end = self.iop("add", start, n)
            # read only where the piece is selected: local in [0, n) (the concat's index is in
            # [0, total), so the first piece needs no lower test, the last no upper one)
            tests = ([] if j == 0 else [self._cmp("ge", local, const(0))]) + \
                ([] if j == last else [self._cmp("lt", local, n)])
            guard = tests[0] if len(tests) == 1 else self._and(*tests) if tests else None
            val = self.value_at(v, sidx) if guard is None else \
                self.guarded_value_at(v, sidx, {dim: n}, guard)
            pieces.append((val, end))
            start = end
        out = pieces[-1][0]
        for val, end in reversed(pieces[:-1]):
            c = self._cmp("lt", idx[dim], end)
            out = self.op("arith.select", [c, val, out], ty, ["i1", ty, ty])
        return self.bind(out, out.deps, ty)

    def _concat_of_slices(self, idx, dim, src, offsets, pieces) -> Expr:
        """A concat of static slices of one value `src` (roll: `cat([x[n - s:], x[:n - s]])`)
        read as `src` at a piecewise index: `src`'s producers computed once, where one
        select per piece would compute them once per piece (swin's shifted windows: a
        rolled layer norm computed four times). `offsets`: the slices' common offsets (the
        concat dim's is unused); `pieces`: (offset in `src`, extent) along the concat dim,
        in order. Every index it makes is in range: no guard."""
        sidx = [e if d == dim or not offsets[d] else self.iop("add", e, const(offsets[d]))
                for d, e in enumerate(idx)]
        starts, s = [], 0
        for _, n in pieces:
            starts.append(s)
            s += n
        (o, _), start = pieces[-1], starts[-1]
        at = self.iop("add", idx[dim], const(o - start))
        for (o, n), start in reversed(list(zip(pieces[:-1], starts[:-1]))):
            inside = self._cmp("lt", idx[dim], const(start + n))
            at = self.op("arith.select", [inside, self.iop("add", idx[dim], const(o - start)),
                                          at], "index", ["i1", "index", "index"])
        sidx[dim] = at
        return self.value_at(src, sidx)

    def guarded_value_at(self, v: ir.Value, idx: list[Expr], bounds: dict, guard: Expr) -> Expr:
        """`v` at `idx` where `guard` holds; elsewhere any value (the caller selects another
        there). `bounds`: dim -> extent of the dims whose index may leave [0, extent) where
        the guard fails. Here those indices are clamped into range, so that every read is in
        bounds (a target with masked loads reads unclamped under the guard instead:
        triton_writer's TileBuilder, where a clamp hides the index's contiguity)."""
        sidx = list(idx)
        for d, n in bounds.items():
            sidx[d] = self.iop("min", self.iop("max", idx[d], const(0)),
                               self.iop("add", n, const(-1)))
        return self.value_at(v, sidx)

    def _cmp(self, kind, a, b) -> Expr:
        return self.op("idx." + kind, [a, b], "i1", ["index", "index"])

    def _and(self, a, b) -> Expr:
        return self.op("arith.andi", [a, b], "i1", ["i1", "i1"])

    def reduction(self, op, loops) -> list[Expr]:
        """Accumulators of reduction generic `op` at the outer point given by `loops`
        (None for reduced loops), computed once per point and memoised."""
        key = (op, tuple(l.node if l is not None else None for l in loops))
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
        ctx = {"loops": loops, "key": tuple(l.node for l in loops) +
               tuple(o.node for o in outs or [])}
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
        if int_value(n.node) == 0:   # nothing to read at all: let eager raise its error
            raise Unschedulable("gather from an empty dim", op.location)
        self.checks = True
        return self.bind(Op(CHECK_INDEX, (i.node, n.node, Const(d, INT)), "index"),
                         i.deps | n.deps, "index", "ix")

    def _scalar_op(self, op, v, ctx) -> Expr:
        name = op.name
        ty = type_name(v.type)
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr):
                attr = ir.DenseElementsAttr(attr).get_splat_value()
            return self.constant(_py(attr), ty)
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
            return self.constant(_py(op.operands[0].owner.attributes["value"]), ty)
        if name == "arith.select" and _relu_select(op):
            # torch-mlir's relu, `x > 0 (or NaN) ? x : 0`, is +0.0 at x = -0.0; eager's kernels
            # (CPU: `x < 0 ? 0 : x`, max_ps(0, x)) return x there. The same select with the
            # compare turned around differs only in that sign (fuzz seed 29 index 1110).
            x, zero = (self.scalar(a, ctx) for a in list(op.operands)[1:])
            xt = type_name(op.operands[1].type)
            lt = self.bind(self.op("arith.cmpf.olt", [x, zero], "i1", [xt, xt]), x.deps, "i1")
            e = self.op("arith.select", [lt, zero, x], ty, ["i1", xt, xt])
            return self.bind(e, x.deps, ty)
        if name == "arith.divf" and ty == "f32" and self.reciprocal_sums and \
                divides_by_own_sum(op):
            x, total = (self.scalar(a, ctx) for a in op.operands)
            inv = self.bind(self.op("arith.divf", [self.constant(1.0, ty), total], ty, [ty, ty]),
                            total.deps, ty)
            return self.bind(self.op("arith.mulf", [x, inv], ty, [ty, ty]), x.deps | inv.deps, ty)
        args = [self.scalar(a, ctx) for a in op.operands]
        kind = name
        if name == "arith.divf" and ty == "f32" and self.fast_sigmoid and _sigmoid_reciprocal(op):
            kind = "arith.divf.fast"
        if name in ("arith.cmpf", "arith.cmpi"):
            pred = ir.IntegerAttr(op.attributes["predicate"]).value
            kind = f"{name}.{(CMPF if name == 'arith.cmpf' else CMPI)[pred]}"
        e = self.op(kind, args, ty, [type_name(a.type) for a in op.operands])
        deps = frozenset().union(*[a.deps for a in args]) if args else frozenset()
        return self.bind(e, deps, ty)


def _relu_select(op) -> bool:
    """Whether `op` (an arith.select) is `select(cmpf ugt(x, +0.0), x, +0.0)`, torch-mlir's relu."""
    c, x, k = op.operands
    cmp = c.owner
    if isinstance(cmp, ir.Block) or op_name(cmp) != "arith.cmpf" or \
            CMPF[ir.IntegerAttr(cmp.attributes["predicate"]).value] != "ugt":
        return False
    if cmp.operands[0] != x or cmp.operands[1] != k or isinstance(k.owner, ir.Block) or \
            op_name(k.owner) != "arith.constant":
        return False
    attr = k.owner.attributes["value"]
    if not isinstance(attr, ir.FloatAttr):
        return False
    v = ir.FloatAttr(attr).value
    return v == 0.0 and math.copysign(1.0, v) > 0


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


def _sigmoid_reciprocal(op) -> bool:
    """Whether `op` (an arith.divf) is `1 / (1 + exp(y))`: torch-mlir's sigmoid (and SiLU's)."""
    one, den = op.operands
    if not is_float_constant(one, 1.0) or isinstance(den.owner, ir.Block) or \
            op_name(den.owner) != "arith.addf":
        return False
    a, b = den.owner.operands
    return any(is_float_constant(k, 1.0) and not isinstance(e.owner, ir.Block)
               and op_name(e.owner) == "math.exp" for k, e in ((a, b), (b, a)))


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
