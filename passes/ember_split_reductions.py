"""ember-split-reductions: a long reduction with few results becomes two reductions, so that a
GPU has enough programs to run it.

A generated reduction kernel runs one program per block of results and loops over the reduced
extent. The column sums of a backward graph (a bias gradient: `sum(dim=0)` of 8192 x 4096) have
few results and a long reduced extent: 4096 / 64 = 64 programs each looping over 8192 rows
leave most of an H100 idle, and the kernel (with the pointwise producer fused into it) took
1.1 ms where a bandwidth-bound one takes 0.07 ms. Splitting the outermost reduced dim R into
S x (R / S) gives a first reduction over (R / S) with S times more results (the partials; the
producer still fuses into it, read through an `expand_shape` view) and a second over S.

Invariant established: every `linalg.generic` of static shapes with one result, whose body
ends in a combiner `c = kind(a, acc)` (`kind` in `COMBINERS`; `acc` the output block argument,
used only there; no `linalg.index`), whose reduced dims' total extent R and parallel dims'
total extent P satisfy `P * R >= min-work` and `programs(P) < min-programs`, and whose
outermost reduced dim d (extent E) appears in every operand's indexing map only as a whole
result, is replaced by

  partial = generic over (dims before d, s, r, dims after d): the original body, reading
            each operand that indexes d through `tensor.expand_shape` (E -> S x E/S), writing
            [S] + result shape from an identity-filled init; an f16/bf16 `addf` accumulates in
            f32 (the partials are f32, as the unsplit kernel's accumulator is). When S = E
            (other reduced dims make the chunks), d itself becomes parallel: no view;
  total   = generic reducing `partial` over s into the original init (for a widened sum: into
            an f32 zero, then a pointwise generic rounding it to the result type);

where S is the smallest power of two dividing E with `programs(P) * S >= target-programs`,
and no larger than leaves each partial `min-chunk` elements to reduce; when no power of two
divides E (2401 = 7^4), the smallest divisor of E reaching target-programs, else the largest
one that keeps `min-chunk` (no split when there is none). `programs(P)` is P when the
innermost dim is reduced (one program a row) and P / 64 otherwise (64 results a program).
When the partials are still fewer than `min-programs` programs (the outermost reduced dim split
whole: a channels-last batch-norm gradient over [N, H, W, C] leaves N * C / 64 programs), the
partial reduction is split again at its next reduced dim, and the two final reductions become
one, over both partial dims.
The result is the same reduction regrouped (floating-point sums round differently, as any
other order of the reduction would); everything else is left alone.
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from torch_mlir import ir
from torch_mlir.dialects import arith, linalg, tensor

from .base import Pass, PassError, option  # noqa: F401  (PassError: the pass API)
from .graph_utils import defining_op, is_zero_constant, outer_generics
from .ir_queries import indexing_maps, iterator_types, op_name

# combiner op -> identity (None: the element type's; see _identity)
COMBINERS = {"arith.addf": 0.0, "arith.maximumf": -math.inf, "arith.maxnumf": -math.inf,
             "arith.minimumf": math.inf, "arith.minnumf": math.inf, "arith.addi": 0}
_NARROW = ("bf16", "f16")


@dataclasses.dataclass(frozen=True)
class EmberSplitReductions(Pass):
    name = "ember-split-reductions"
    summary = ("Split a long reduction with few results into partial reductions and a final "
               "one (GPU parallelism)")
    # a generic with a dynamic dim is left alone (`_static_loops`)
    dynamic_shapes: ClassVar[bool] = True

    min_work: int = option(1 << 18, min=1)
    min_programs: int = option(256, min=1)
    target_programs: int = option(1024, min=1)
    min_chunk: int = option(64, min=2)

    def run(self, module: ir.Operation) -> None:
        todo = outer_generics(module)
        with module.context:
            for op in todo:
                plan, outer = self._plan(op), None
                while plan is not None:
                    # the partials may still be too few programs (a channels-last batch-norm
                    # gradient: the batch dim split whole leaves N*C/64 programs, each over
                    # H*W): their next reduced dim is split in turn, and the two final
                    # reductions become one (over both partial dims)
                    with op.location:
                        op, total = _split(op, *plan)
                        outer = total if outer is None else _merge_totals(total, outer, plan[3])
                    plan = self._plan(op, odd=False)

    def programs(self, op, parallel_numel: int) -> int:
        inner_reduced = iterator_types(op)[-1] == "reduction"
        return parallel_numel if inner_reduced else max(1, parallel_numel // 64)

    def _plan(self, op, odd: bool = True):
        """(d, S, S == E, combiner op, widen) when `op` is split, else None. `odd`: a split by
        a divisor that is no power of two is allowed (a first split only: a third level of
        splits, a channels-last batch-norm statistic over [32, 112, 112, C] whose 112 split by
        16 left a dim of 7, made totals `_merge_totals` cannot combine, invalid IR: the whole
        pass was dropped for efficientnet_b0's graphs, x0.19 of eager on an H200)."""
        if len(op.results) != 1 or len(op.regions[0].blocks) != 1:
            return None
        its = iterator_types(op)
        if "reduction" not in its:
            return None
        loops = _static_loops(op)
        if loops is None:
            return None
        red = [i for i, t in enumerate(its) if t == "reduction"]
        rnum = math.prod(loops[i] for i in red)
        pnum = math.prod(loops[i] for i, t in enumerate(its) if t == "parallel")
        if pnum * rnum < self.min_work:
            return None
        programs = self.programs(op, pnum)
        if programs >= self.min_programs:
            return None
        comb = _combiner(op)
        if comb is None:
            return None
        d = red[0]
        if not _plain_maps(op):
            return None
        extent = loops[d]
        rest = rnum // extent       # the other reduced dims' extent: each chunk has them all

        def fits(s):
            return extent % s == 0 and (extent // s) * rest >= self.min_chunk

        splits = 2
        while programs * splits < self.target_programs and fits(splits * 2):
            splits *= 2
        while splits >= 2 and not fits(splits):
            splits //= 2
        if splits < 2 and odd:
            # No power of two divides E (swin_t's relative-position-bias gradient reduces the
            # 49 x 49 = 7^4 positions): the smallest divisor reaching target-programs, else
            # the largest one that leaves min-chunk elements a partial.
            divisors = [s for s in _divisors(extent) if s >= 2 and fits(s)]
            if not divisors:
                return None
            enough = [s for s in divisors if programs * s >= self.target_programs]
            splits = enough[0] if enough else divisors[-1]
        if splits < 2:
            return None
        aligned = [s for s in _collapse_aligned(op, d)
                   if fits(s) and programs * s >= self.min_programs]
        if aligned and splits not in aligned:
            # the chunks follow the collapsed tensor's own dims (rows 8 x 128 of a [1024, C]
            # view split 8 ways): the partials read it as it was made, and a pointwise kernel
            # that makes it and another result of its shape (GELU's backward with the GELU
            # recomputed for a weight gradient) stays one kernel with them
            splits = min(aligned, key=lambda s: abs(math.log2(s / splits)))
        out_ty = ir.RankedTensorType(op.results[0].type).element_type
        widen = op_name(comb) == "arith.addf" and str(out_ty) in _NARROW
        if widen and not _zero_fill(op.outputs[0]):
            return None
        return d, splits, splits == extent, comb, widen


def _collapse_aligned(op, d: int) -> list:
    """The splits S of reduced dim `d` at which every operand that reads `d` through a static
    `tensor.collapse_shape` of several dims (a [8, 128, C] tensor read as [1024, C]) is
    chunked along its source's dims: the products of the group's leading source extents
    (8 there). [] when no operand reads `d` so, or their groups agree on none."""
    found = None
    for value, amap in zip(op.inputs, indexing_maps(op)[:len(op.inputs)]):
        for pos, expr in enumerate(amap.results):
            if not (isinstance(expr, ir.AffineDimExpr) and expr.position == d):
                continue
            src = _collapse_source(value)
            if src is None:
                continue
            coll, source = src
            group = _reassociation(coll)[pos]
            sizes = [ir.RankedTensorType(source.type).get_dim_size(k) for k in group]
            prefixes = {math.prod(sizes[:k]) for k in range(1, len(sizes))}
            found = prefixes if found is None else found & prefixes
    return sorted(s for s in (found or ()) if s >= 2)


def _collapse_source(value):
    """(collapse op, its source) when `value` is a static `tensor.collapse_shape`'s result."""
    coll = defining_op(value)
    if coll is None or op_name(coll) != "tensor.collapse_shape":
        return None
    source = coll.operands[0]
    if not ir.RankedTensorType(source.type).has_static_shape:
        return None
    return coll, source


def _reassociation(coll) -> list:
    return [[ir.IntegerAttr(k).value for k in g] for g in coll.attributes["reassociation"]]


def _divisors(n: int) -> list:
    """The divisors of n, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _static_loops(op):
    """Each loop dim's extent, from the operands' shapes (None: a dynamic or unknown one)."""
    maps = indexing_maps(op)
    loops = [None] * maps[0].n_dims
    for value, amap in zip(list(op.inputs) + list(op.outputs), maps):
        if not isinstance(value.type, ir.RankedTensorType):
            return None
        t = ir.RankedTensorType(value.type)
        for pos, expr in enumerate(amap.results):
            if isinstance(expr, ir.AffineDimExpr):
                if t.is_dynamic_dim(pos):
                    return None
                loops[expr.position] = t.get_dim_size(pos)
    return None if any(x is None for x in loops) else loops


def _combiner(op):
    """The combiner of the body's yielded value, when it is `kind(a, acc)` with `acc` (the
    output block argument) used there only and the body has no `linalg.index`."""
    block = op.regions[0].blocks[0]
    acc = block.arguments[len(block.arguments) - 1]
    ops = list(block.operations)
    if any(op_name(o) == "linalg.index" for o in ops):
        return None
    term = ops[-1]
    comb = defining_op(term.operands[0])
    if comb is None or op_name(comb) not in COMBINERS:
        return None
    uses = [u for u in acc.uses]
    if len(uses) != 1 or uses[0].owner != comb:
        return None
    if comb.operands[1] != acc and comb.operands[0] != acc:
        return None
    return comb


def _plain_maps(op) -> bool:
    """Every map's results are dims or constants, so each dim is read as a whole result (or
    not at all)."""
    for amap in indexing_maps(op):
        for expr in amap.results:
            if isinstance(expr, ir.AffineDimExpr) or isinstance(expr, ir.AffineConstantExpr):
                continue
            return False
    return True


def _zero_fill(value) -> bool:
    fill = defining_op(value)
    if fill is None or op_name(fill) != "linalg.fill":
        return False
    return is_zero_constant(fill.operands[0])


def _identity_const(kind: str, ty: ir.Type):
    value = COMBINERS[kind]
    if isinstance(ty, ir.IntegerType):
        return arith.ConstantOp(ty, ir.IntegerAttr.get(ty, int(value))).result
    return arith.ConstantOp(ty, ir.FloatAttr.get(ty, value)).result


def _filled(shape, ty, kind):
    empty = tensor.EmptyOp(shape, ty).result
    return linalg.fill(_identity_const(kind, ty), outs=[empty])


def _affine(n_dims: int, exprs) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get(n_dims, 0, list(exprs)))


def _iters(kinds) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


def _split(op, d: int, splits: int, whole: bool, comb, widen: bool):
    """`op` split at `d` (see the module docstring); the partial reduction (a generic)."""
    maps = indexing_maps(op)
    n = maps[0].n_dims
    its = iterator_types(op)
    res_ty = ir.RankedTensorType(op.results[0].type)
    acc_ty = ir.F32Type.get() if widen else res_ty.element_type
    kind = op_name(comb)
    # whole (S == E): dim d itself becomes the partials' dim (parallel), no view, no new dim
    new_dim = [i if i < d or whole else i + 1 for i in range(n)]   # old dim -> new dim
    n_new = n if whole else n + 1

    def renumber(expr):
        if isinstance(expr, ir.AffineDimExpr):
            return ir.AffineDimExpr.get(new_dim[expr.position])
        return expr

    with ir.InsertionPoint(op):
        ins, in_maps = [], []
        for value, amap in zip(op.inputs, maps[:len(op.inputs)]):
            exprs, groups, shape, j = [], [], [], 0
            t = ir.RankedTensorType(value.type)
            for pos, expr in enumerate(amap.results):
                if not whole and isinstance(expr, ir.AffineDimExpr) and expr.position == d:
                    size = t.get_dim_size(pos)
                    exprs += [ir.AffineDimExpr.get(d), ir.AffineDimExpr.get(d + 1)]
                    groups.append([j, j + 1])
                    shape += [splits, size // splits]
                    j += 2
                else:
                    exprs.append(renumber(expr))
                    groups.append([j])
                    shape.append(t.get_dim_size(pos))
                    j += 1
            src = _collapse_source(value) if len(shape) != t.rank else None
            if src is not None and _reassociation(src[0]) == groups and \
                    list(ir.RankedTensorType(src[1].type).shape) == shape:
                value = src[1]      # expand_shape(collapse_shape(x)) is x
            elif len(shape) != t.rank:
                i64 = ir.IntegerType.get_signless(64)
                reassoc = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k)
                                                              for k in g]) for g in groups])
                value = tensor.ExpandShapeOp(ir.RankedTensorType.get(shape, t.element_type),
                                             value, reassoc, [], shape).result
            ins.append(value)
            in_maps.append(_affine(n_new, exprs))
        out_map = maps[len(op.inputs)]
        out_shape = list(res_ty.shape)
        part_shape = [splits] + out_shape
        part_map = _affine(n_new, [ir.AffineDimExpr.get(d)] + [renumber(e) for e in out_map.results])
        part_init = _filled(part_shape, acc_ty, kind)
        part_its = its[:d] + (["parallel"] if whole else ["parallel", "reduction"]) + its[d + 1:]
        part = linalg.GenericOp([ir.RankedTensorType.get(part_shape, acc_ty)], ins, [part_init],
                                ir.ArrayAttr.get(in_maps + [part_map]), _iters(part_its))
        old_block = op.regions[0].blocks[0]
        arg_types = [a.type for a in old_block.arguments]
        arg_types[-1] = acc_ty
        block = part.regions[0].blocks.append(*arg_types)
        for old, new in zip(old_block.arguments, block.arguments):
            old.replace_all_uses_with(new)
        body_ip = ir.InsertionPoint(block)
        for inner in list(old_block.operations):
            body_ip.insert(inner.detach_from_parent())
        if widen:
            acc = block.arguments[len(block.arguments) - 1]
            other = comb.operands[0] if comb.operands[1] == acc else comb.operands[1]
            with ir.InsertionPoint(comb), comb.location:
                wide = arith.ExtFOp(acc_ty, other).result
                new = arith.AddFOp(wide, acc).result
            comb.results[0].replace_all_uses_with(new)
            comb.erase()

        # the final reduction over s
        rank = len(out_shape)
        ident = _affine(rank + 1, [ir.AffineDimExpr.get(i) for i in range(rank + 1)])
        drop_s = _affine(rank + 1, [ir.AffineDimExpr.get(i + 1) for i in range(rank)])
        init = _filled(out_shape, acc_ty, kind) if widen else op.outputs[0]
        total = linalg.GenericOp([ir.RankedTensorType.get(out_shape, acc_ty)], [part.results[0]],
                                 [init], ir.ArrayAttr.get([ident, drop_s]),
                                 _iters(["reduction"] + ["parallel"] * rank))
        tb = total.regions[0].blocks.append(acc_ty, acc_ty)
        with ir.InsertionPoint(tb):
            combined = ir.Operation.create(kind, results=[acc_ty],
                                           operands=[tb.arguments[0], tb.arguments[1]]).result
            linalg.YieldOp([combined])
        result = total.results[0]
        if widen:
            same = _affine(rank, [ir.AffineDimExpr.get(i) for i in range(rank)])
            empty = tensor.EmptyOp(out_shape, res_ty.element_type).result
            narrow = linalg.GenericOp([res_ty], [result], [empty], ir.ArrayAttr.get([same, same]),
                                      _iters(["parallel"] * rank))
            nb = narrow.regions[0].blocks.append(acc_ty, res_ty.element_type)
            with ir.InsertionPoint(nb):
                linalg.YieldOp([arith.TruncFOp(res_ty.element_type, nb.arguments[0]).result])
            result = narrow.results[0]
    op.results[0].replace_all_uses_with(result)
    op.erase()
    return part, total


def _merge_totals(inner, outer, comb):
    """`inner` reduces partials [S2, S1, ...] over S2 into an identity fill, which `outer` then
    reduces over S1: one generic reducing both, into `outer`'s init. Returns it."""
    part = inner.inputs[0]
    o_ty = ir.RankedTensorType(outer.results[0].type)
    rank = o_ty.rank
    ident = _affine(rank + 2, [ir.AffineDimExpr.get(i) for i in range(rank + 2)])
    drop = _affine(rank + 2, [ir.AffineDimExpr.get(i + 2) for i in range(rank)])
    kind = op_name(comb)
    with ir.InsertionPoint(outer):
        merged = linalg.GenericOp([o_ty], [part], [outer.outputs[0]],
                                  ir.ArrayAttr.get([ident, drop]),
                                  _iters(["reduction", "reduction"] + ["parallel"] * rank))
        acc_ty = o_ty.element_type     # the partials' type: both splits accumulate in it
        mb = merged.regions[0].blocks.append(acc_ty, acc_ty)
        with ir.InsertionPoint(mb):
            combined = ir.Operation.create(kind, results=[acc_ty],
                                           operands=[mb.arguments[0], mb.arguments[1]]).result
            linalg.YieldOp([combined])
    outer.results[0].replace_all_uses_with(merged.results[0])
    fill = defining_op(inner.outputs[0])
    outer.erase()
    inner.erase()
    if fill is not None and not list(fill.results[0].uses):
        empty = defining_op(fill.operands[1]) if len(fill.operands) > 1 else None
        fill.erase()
        if empty is not None and not list(empty.results[0].uses):
            empty.erase()
    return merged
