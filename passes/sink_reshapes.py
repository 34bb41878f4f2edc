"""Pointwise ops move above the `tensor.collapse_shape` they read (ember-fuse's first step).

A layer norm over 2x32x768 whose result is cast to bf16 for a matmul that reads it as 64x768:
the cast iterates over 64x768, the norm's kernel over rows of 2x32, and a reduction kernel's
results must be indexed by its whole outer space, so the cast was a kernel of its own (one
launch per layer norm of a bf16 transformer; Inductor fuses it). Computed over 2x32x768 and
collapsed after, the cast is one more result of the norm's kernel, and the collapse a view on
the host (or index arithmetic in a kernel that reads it).

`sink_collapses(block)` rewrites, in program order, each all-parallel `linalg.generic` of static
shape that reads a `tensor.collapse_shape` of a computed value (not an argument: the rewrite
exists to bring the op next to its producer) with an identity map, when its body has no
`linalg.index`, its inits are not read, and each other operand is read through the identity (it
is then read through an `expand_shape`: a view) or through a map whose dims are not merged
ones (a bias broadcast along the rows). Its result is collapsed after it, so a chain of
pointwise ops moves above the collapse one op at a time.
"""
from __future__ import annotations

from torch_mlir import ir

from .graph_utils import defining_op
from .ir_queries import indexing_maps, iterator_types, op_name, reassociation


def sink_collapses(block) -> int:
    """Rewrites the block's eligible generics (see the module docstring); returns how many."""
    n = 0
    for op in list(block.operations):
        if op_name(op) == "linalg.generic" and _sink(op):
            n += 1
    return n


def _static(t) -> bool:
    return isinstance(t, ir.RankedTensorType) and ir.RankedTensorType(t).has_static_shape


def _collapse_of_computed(value):
    """(source, groups) when `value` is a collapse_shape of an op's result, else None."""
    op = defining_op(value)
    if op is None or op_name(op) != "tensor.collapse_shape":
        return None
    src = op.operands[0]
    if defining_op(src) is None or not _static(src.type):
        return None
    return src, reassociation(op)


def _sink(op) -> bool:
    from torch_mlir.dialects import linalg, tensor

    if any(t != "parallel" for t in iterator_types(op)):
        return False
    if not all(_static(v.type) for v in list(op.operands) + list(op.results)):
        return False
    body = op.regions[0].blocks[0]
    if any(op_name(b) == "linalg.index" or len(b.regions) for b in body.operations):
        return False
    ins, outs = list(op.inputs), list(op.outputs)
    args = list(body.arguments)
    if any(any(True for _ in args[len(ins) + k].uses) for k in range(len(outs))):
        return False        # an init that is read (an accumulation)
    maps = indexing_maps(op)
    rank = len(iterator_types(op))
    if any(m != ir.AffineMap.get_identity(rank) for m in maps[len(ins):]):
        return False
    groups = src_shape = None
    for v, m in zip(ins, maps):
        got = _collapse_of_computed(v)
        if got is not None and m == ir.AffineMap.get_identity(rank):
            groups, src_shape = got[1], ir.RankedTensorType(got[0].type).shape
            break
    if groups is None or len(groups) != rank:
        return False
    new_rank = len(src_shape)
    # old loop dim k -> its new dim, where it is not a merge of several
    single = {k: g[0] for k, g in enumerate(groups) if len(g) == 1}
    new_ins, new_maps = [], []
    for v, m in zip(ins, maps):
        if m == ir.AffineMap.get_identity(rank):
            got = _collapse_of_computed(v)
            if got is not None and got[1] == groups and \
                    ir.RankedTensorType(got[0].type).shape == src_shape:
                new_ins.append(got[0])
            else:
                new_ins.append(("expand", v))
            new_maps.append(ir.AffineMap.get_identity(new_rank))
            continue
        exprs = []
        for e in m.results:
            if isinstance(e, ir.AffineDimExpr):
                k = ir.AffineDimExpr(e).position
                if k not in single:
                    return False
                exprs.append(ir.AffineDimExpr.get(single[k]))
            elif isinstance(e, ir.AffineConstantExpr):
                exprs.append(e)
            else:
                return False
        new_ins.append(v)
        new_maps.append(ir.AffineMap.get(new_rank, 0, exprs))
    reassoc = ir.ArrayAttr.get([ir.ArrayAttr.get(
        [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i) for i in g]) for g in groups])
    par = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(op), op.location:
        operands = []
        for v in new_ins:
            if isinstance(v, tuple):
                t = ir.RankedTensorType(v[1].type)
                v = tensor.ExpandShapeOp(ir.RankedTensorType.get(src_shape, t.element_type),
                                         v[1], reassoc, [], src_shape).result
            operands.append(v)
        inits, types = [], []
        for r in op.results:
            elem = ir.RankedTensorType(r.type).element_type
            types.append(ir.RankedTensorType.get(src_shape, elem))
            inits.append(tensor.EmptyOp(src_shape, elem).result)
        gen = linalg.GenericOp(types, operands, inits,
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in
                                                 new_maps + [ir.AffineMap.get_identity(
                                                     new_rank)] * len(inits)]),
                               ir.ArrayAttr.get([par] * new_rank))
        new_body = gen.regions[0].blocks.append(*[a.type for a in args])
        for old, new in zip(args, new_body.arguments):
            old.replace_all_uses_with(new)
        for b in list(body.operations):
            new_body.append(b)
        for old, new in zip(op.results, gen.results):
            collapsed = tensor.CollapseShapeOp(old.type, new, reassoc).result
            old.replace_all_uses_with(collapsed)
    op.operation.erase()
    return True
