"""ember-shifted-variance: a two-pass variance (a BatchNorm's batch statistics) becomes two sums
of one pass over the data, shifted by a sample of it.

The decomposition of a training BatchNorm computes the mean first and the variance from it:

    s1 = sum(x)                    (reduced over N, H, W; one result per channel)
    mean = s1 / n
    s2 = sum((x - mean) * (x - mean))

The second sum cannot start before the first is complete: on a GPU each is a split reduction
(a partial kernel and a final one), four kernels before the normalisation's, where Inductor's
one-pass Welford reduction makes two. With k = x at the first reduced index of each channel
(one element of the data),

    t1 = sum(x - k),  t2 = sum((x - k)^2)
    s1 = t1 + n * k,  s2 = max(t2 - t1 * t1 / n, 0)

are equal in exact arithmetic, and t1 and t2 are two reductions of one value over one loop
nest: one kernel (and one final kernel) for both. Shifting by a sample keeps the cancellation
of `t2 - t1^2 / n` small (it grows with ((mean - k) / std)^2, about 1 for a sample of the
data), where the textbook `sum(x^2) - sum(x)^2 / n` loses every digit of a variance that is
small next to the mean squared (the shifted-data algorithm; f32 accumulation as before).

Only a variance of bf16/f16 data widened to f32 (a BatchNorm under autocast) is rewritten. The
shifted sums lose about ((mean - k) / std)^2 * 2^-24 relative to the variance: near f32
rounding for a typical sample, n * 2^-24 at worst (a lone outlier sampled as k, whose z-score
is at most sqrt(n)), against the 2^-9 rounding of every 16-bit input. f32 data keeps eager's
two-pass numbers, unless `f32` (a GPU's default pipeline: frontend/options.py
`one_pass_variance`; two kernels less per BatchNorm of an f32 training step, as Inductor's
one-pass Welford statistics): then an f32 x is shifted by a sample of itself.

Invariant established: no `linalg.generic` sum `s2` of static shape is left that reduces
`d * d`, `d = x - s1 / n` (x a widened bf16/f16 value, or with `f32` an f32 one; pointwise, the mean read broadcast
through the output map of `s1`),
where `s1` is a sum of `x` over the same loops with the same maps and `n` the reduced extent;
it is replaced as above (s1's readers read `t1 + n * k`), where ember-split-reductions (the
same options) splits `s2`. Nothing else changes; `x - mean` keeps its other readers (the
normalisation). Triton pipeline only (ember-split-reductions
then makes one partial kernel of t1 and t2): the C++ code generator splits rows across threads
and has no kernel-count to save.
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from torch_mlir import ir
from torch_mlir.dialects import arith, linalg, tensor

from .base import Pass, option
from .ember_split_reductions import EmberSplitReductions
from .externs import narrow_source
from .graph_utils import defining_op, is_zero_constant, op_name, outer_generics, users
from .ir_queries import indexing_maps, iterator_types


@dataclasses.dataclass(frozen=True)
class EmberShiftedVariance(Pass):
    """Rewrites two-pass variances into shifted one-pass sums (see the module docstring)."""

    name = "ember-shifted-variance"
    dynamic_shapes: ClassVar[bool] = True   # only static variances match; others are left alone
    summary = ("A two-pass variance (sum of (x - mean)^2 after sum of x) becomes two sums of "
               "x shifted by a sample of it, one pass over x")

    # Only variances that ember-split-reductions (with these options, its defaults) splits:
    # an unsplit reduction is one kernel either way (a layer norm's row: both sums in the
    # row's kernel), and keeps the two-pass numerics.
    min_work: int = option(1 << 18, min=1)
    min_programs: int = option(256, min=1)
    target_programs: int = option(1024, min=1)
    min_chunk: int = option(64, min=2)
    # f32 data too (see the module docstring): two kernels less per training BatchNorm of a
    # GPU's f32 step, at the shifted sums' rounding instead of the two-pass one
    f32: bool = option(False)

    def run(self, module: ir.Operation) -> None:
        split = EmberSplitReductions(min_work=self.min_work, min_programs=self.min_programs,
                                     target_programs=self.target_programs,
                                     min_chunk=self.min_chunk)
        todo = outer_generics(module)
        with module.context:
            for op in todo:
                match = _match(op, self.f32)
                if match is not None and split._plan(op) is not None:
                    with op.location:
                        _rewrite(op, *match)


# ----------------------------------------------------------------------------- matching

def _body(op) -> list:
    return list(op.regions[0].blocks[0].operations)


def _args(op) -> list:
    return list(op.regions[0].blocks[0].arguments)


def _identity(amap) -> bool:
    return amap == ir.AffineMap.get_identity(amap.n_dims)


def _sum(op):
    """(input, output map, reduced loop positions) of a static one-input `linalg.generic` that
    sums its identity-mapped input into a zero fill, else None."""
    if op is None or op_name(op) != "linalg.generic":
        return None
    op = op.opview
    if len(op.inputs) != 1 or len(op.results) != 1:
        return None
    its = iterator_types(op)
    if "reduction" not in its:
        return None
    maps = indexing_maps(op)
    body, args = _body(op), _args(op)
    if not _identity(maps[0]) or len(body) != 2 or op_name(body[0]) != "arith.addf" or \
            set(body[0].operands) != {args[0], args[1]} or \
            body[1].operands[0] != body[0].results[0]:
        return None
    fill = defining_op(op.outputs[0])
    if fill is None or op_name(fill) != "linalg.fill" or not is_zero_constant(fill.operands[0]):
        return None
    for e in maps[1].results:
        if isinstance(e, ir.AffineDimExpr):
            if its[ir.AffineDimExpr(e).position] != "parallel":
                return None
        elif not (isinstance(e, ir.AffineConstantExpr) and ir.AffineConstantExpr(e).value == 0):
            return None
    src = ir.RankedTensorType(op.inputs[0].type)
    if not src.has_static_shape or not isinstance(src.element_type, ir.F32Type):
        return None
    return op.inputs[0], maps[1], [j for j, t in enumerate(its) if t == "reduction"]


def _single_input_of(op, name: str):
    """The input of a one-input pointwise generic (identity maps) whose body is `name(in, c)`
    with c a constant, and that constant's value; else None."""
    if op is None or op_name(op) != "linalg.generic" or len(op.opview.inputs) != 1 or \
            any(t != "parallel" for t in iterator_types(op)) or \
            not all(_identity(m) for m in indexing_maps(op)):
        return None
    body, args = _body(op), _args(op)
    if len(body) != 2 or op_name(body[0]) != name or body[0].operands[0] != args[0]:
        return None
    c = defining_op(body[0].operands[1])
    if c is None or op_name(c) != "arith.constant" or \
            not isinstance(c.attributes["value"], ir.FloatAttr):
        return None
    return op.opview.inputs[0], ir.FloatAttr(c.attributes["value"]).value


def _match(r2, f32: bool = False):
    """(x, r1, out map, reduced dims, n) when `r2` is a two-pass variance's second sum."""
    got = _sum(r2)
    if got is None:
        return None
    sq, out_map, reduced = got
    q = defining_op(sq)
    if q is None or op_name(q) != "linalg.generic" or \
            any(t != "parallel" for t in iterator_types(q)) or \
            not all(_identity(m) for m in indexing_maps(q)):
        return None
    body, args = _body(q), _args(q)
    if len(body) != 2 or op_name(body[0]) != "arith.mulf":
        return None
    a, b = body[0].operands
    ins = list(q.opview.inputs)
    if a == b and a in args[:len(ins)]:
        d = ins[args.index(a)]
    elif len(ins) == 2 and ins[0] == ins[1] and {a, b} == set(args[:2]):
        d = ins[0]
    else:
        return None
    s = defining_op(d)
    if s is None or op_name(s) != "linalg.generic" or len(s.opview.inputs) != 2 or \
            any(t != "parallel" for t in iterator_types(s)):
        return None
    smaps = indexing_maps(s)
    sbody, sargs = _body(s), _args(s)
    if len(sbody) != 2 or op_name(sbody[0]) != "arith.subf" or \
            list(sbody[0].operands) != sargs[:2] or not _identity(smaps[0]) or \
            not _identity(smaps[2]) or smaps[1] != out_map:
        return None
    x, mean = s.opview.inputs
    got = _single_input_of(defining_op(mean), "arith.divf")
    if got is None:
        return None
    r1_value, n = got
    r1 = defining_op(r1_value)
    got1 = _sum(r1)
    if got1 is None or got1[0] != x or got1[1] != out_map or got1[2] != reduced or \
            iterator_types(r1) != iterator_types(r2):
        return None
    shape = ir.RankedTensorType(x.type).shape
    if n != math.prod(shape[j] for j in reduced):
        return None
    if narrow_source(x) is None and not (f32 and _is_f32(x)):
        return None     # f32 data keeps the two-pass numbers (see the module docstring)
    return x, r1.opview, out_map, reduced, float(n)


def _is_f32(x) -> bool:
    return isinstance(ir.RankedTensorType(x.type).element_type, ir.F32Type)


# ----------------------------------------------------------------------------- rewriting

def _iters(kinds) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


def _generic(result_type, ins, maps, kinds, build):
    """A linalg.generic into a fresh `tensor.empty` (a zero fill for a reduction); `build(args)`
    makes the body from the block arguments and returns the yielded value."""
    f32 = ir.F32Type.get()
    empty = tensor.EmptyOp(list(result_type.shape), result_type.element_type).result
    init = empty
    if "reduction" in kinds:
        zero = arith.ConstantOp(f32, ir.FloatAttr.get(f32, 0.0)).result
        init = linalg.fill(zero, outs=[empty])
    op = linalg.GenericOp([result_type], ins, [init],
                          ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]), _iters(kinds))
    block = op.regions[0].blocks.append(*[ir.RankedTensorType(v.type).element_type for v in ins],
                                        result_type.element_type)
    with ir.InsertionPoint(block):
        linalg.YieldOp([build(list(block.arguments))])
    return op.results[0]


def _sample(x, reduced):
    """k: x at index 0 of every reduced dim (x's shape with those dims 1), in f32. A widened
    bf16/f16 x is sliced before its widening (the slice is index arithmetic in a kernel)."""
    f32 = ir.F32Type.get()
    src = narrow_source(x) or x
    t = ir.RankedTensorType(src.type)
    sizes = [1 if j in reduced else n for j, n in enumerate(t.shape)]
    k = tensor.ExtractSliceOp(ir.RankedTensorType.get(sizes, t.element_type), src, [], [], [],
                              [0] * t.rank, sizes, [1] * t.rank).result
    if src is x:
        return k
    ident = ir.AffineMap.get_identity(t.rank)
    return _generic(ir.RankedTensorType.get(sizes, f32), [k], [ident, ident],
                    ["parallel"] * t.rank, lambda a: arith.ExtFOp(f32, a[0]).result)


def _rewrite(r2, x, r1, out_map, reduced, n: float) -> None:
    f32 = ir.F32Type.get()
    xt = ir.RankedTensorType(x.type)
    rank, loops = xt.rank, out_map.n_dims
    stat_t = ir.RankedTensorType(r1.results[0].type)
    kinds = iterator_types(r1)
    d = [ir.AffineDimExpr.get(j) for j in range(loops)]
    zero_e = ir.AffineConstantExpr.get(0)
    # k read over x's loops (its reduced dims are 1) and over the statistic's own loops
    over_x = ir.AffineMap.get(loops, 0, [zero_e if j in reduced else d[j] for j in range(rank)])
    stat_pos = {ir.AffineDimExpr(e).position: p for p, e in enumerate(out_map.results)
                if isinstance(e, ir.AffineDimExpr)}
    srank = stat_t.rank
    e = [ir.AffineDimExpr.get(p) for p in range(srank)]
    over_stat = ir.AffineMap.get(srank, 0, [zero_e if j in reduced else e[stat_pos[j]]
                                            for j in range(rank)])
    ident_x = ir.AffineMap.get_identity(loops)
    ident_s = ir.AffineMap.get_identity(srank)
    par_x, par_s = ["parallel"] * loops, ["parallel"] * srank

    def const(v):
        return arith.ConstantOp(f32, ir.FloatAttr.get(f32, v)).result

    with ir.InsertionPoint(r1):
        k = _sample(x, reduced)
        y = _generic(ir.RankedTensorType.get(list(xt.shape), f32), [x, k],
                     [ident_x, over_x, ident_x], par_x,
                     lambda a: arith.SubFOp(a[0], a[1]).result)
        t1 = _generic(stat_t, [y], [ident_x, out_map], kinds,
                      lambda a: arith.AddFOp(a[0], a[1]).result)
        t2 = _generic(stat_t, [y], [ident_x, out_map], kinds,
                      lambda a: arith.AddFOp(arith.MulFOp(a[0], a[0]).result, a[1]).result)
        s1 = _generic(stat_t, [t1, k], [ident_s, over_stat, ident_s], par_s,
                      lambda a: arith.AddFOp(a[0], arith.MulFOp(a[1], const(n)).result).result)

        def centred(a):
            t1, t2 = a[0], a[1]
            v = arith.SubFOp(t2, arith.DivFOp(arith.MulFOp(t1, t1).result, const(n)).result)
            return arith.MaximumFOp(v.result, const(0.0)).result

        s2 = _generic(stat_t, [t1, t2], [ident_s, ident_s, ident_s], par_s, centred)
    r1.results[0].replace_all_uses_with(s1)
    r2.results[0].replace_all_uses_with(s2)
    _erase_dead(r2)
    _erase_dead(r1)


def _erase_dead(op) -> None:
    """Erases `op` when nothing reads it, then the producers of its operands left without
    readers (the square and the difference of the old second sum, fills, empties), in turn."""
    erasable = ("linalg.generic", "linalg.fill", "tensor.empty", "arith.constant")
    work = [op]
    while work:
        cur = work.pop()
        if any(users(r) for r in cur.results):
            continue
        producers = []
        for v in cur.operands:
            p = defining_op(v)
            if p is not None and op_name(p) in erasable and \
                    not any(p == q for q in producers + work):
                producers.append(p)
        cur.erase()
        work.extend(producers)
