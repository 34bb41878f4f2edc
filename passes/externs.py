"""Library-call patterns of ember-fuse: convolutions and pooling -> `ember.extern`, and the
helpers the matmul patterns share (docs/internals.md, stage 2, "Matmul-like named ops").

Every forward convolution torch-mlir emits as a named linalg op becomes one
`aten.convolution` extern whose operands are the tensors eager's call takes (the NC[D]HW input,
the [F, C/groups, *K] weight, the optional bias), with the padding torch-mlir materialised as a
`tensor.pad` folded back into `padding`:

* `linalg.conv_{1,2,3}d_nc*_fc*`                 groups = 1
* `linalg.depthwise_conv_{1,2,3}d_nc*_c*`        groups = C (the weight, collapsed to [C, *K]
                                                 by torch-mlir, is read as [C, 1, *K])
* `linalg.conv_2d_ngchw_gfchw`                   groups = G (torch-mlir's grouped form: input,
                                                 weight and result split G ways by views, which
                                                 the extern reads unsplit)

An accumulator that is neither zero nor a broadcast bias is added after the call (an f32
generic that fuses into the consumer); a padding that is not symmetric with zero in the spatial
dims stays a `tensor.pad` kernel before the call. Transposed and 3-d grouped convolutions never reach linalg as one op
(torch-mlir lowers them to scatter + flipped conv, or to a generic); the frontend keeps those
whole as library calls (frontend/partition.py, `is_library_node`).
"""
from torch_mlir import ir

from ..dialects import make_extern
from .graph_utils import defining_op, is_float_constant, is_zero_constant, op_name

_NARROW = ("bf16", "f16")


def fill_is_zero(value) -> bool:
    op = defining_op(value)
    return op is not None and op_name(op) == "linalg.fill" and is_zero_constant(op.operands[0])


def narrow_source(value):
    """If `value` is X (bf16/f16) widened to f32 elementwise (torch-mlir's lowering of a
    low-precision matmul widens both operands), returns X: the library call reads X itself,
    with f32 accumulation, as eager does, and no widened copy is made."""
    op = defining_op(value)
    if op is None or op_name(op) != "linalg.generic" or len(op.opview.inputs) != 1:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(m != ir.AffineMap.get_identity(m.n_dims) for m in maps):
        return None
    body = [o for o in op.regions[0].blocks[0].operations]
    if len(body) != 2 or op_name(body[0]) != "arith.extf" or \
            body[0].operands[0] != op.regions[0].blocks[0].arguments[0]:
        return None
    src = op.opview.inputs[0]
    if str(ir.RankedTensorType(src.type).element_type) not in _NARROW:
        return None
    return src


def _sizes_of(value) -> list:
    """`value`'s shape for a `tensor.empty` at the current insertion point: static dims as
    ints, a dynamic one (symbolic sizes) as a `tensor.dim` of `value`."""
    from torch_mlir.dialects import arith, tensor
    t = ir.RankedTensorType(value.type)
    return [tensor.DimOp(value, arith.ConstantOp(ir.IndexType.get(), i).result).result
            if t.is_dynamic_dim(i) else t.get_dim_size(i) for i in range(t.rank)]


def widen(value, wide_type, anchor):
    """An elementwise `linalg.generic` widening `value` (bf16/f16) to `wide_type` (f32)."""
    from torch_mlir.dialects import arith, linalg, tensor
    rank = len(wide_type.shape)
    ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    par = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(anchor), anchor.location:
        empty = tensor.EmptyOp(_sizes_of(value), wide_type.element_type)
        gen = linalg.GenericOp([wide_type], [value], [empty.result], ir.ArrayAttr.get([ident] * 2),
                               ir.ArrayAttr.get([par] * rank))
        block = gen.regions[0].blocks.append(ir.RankedTensorType(value.type).element_type,
                                             wide_type.element_type)
        with ir.InsertionPoint(block):
            linalg.YieldOp([arith.ExtFOp(wide_type.element_type, block.arguments[0]).result])
    return gen


def _add(acc, value, anchor):
    """An elementwise `linalg.generic` computing `acc + value` (same type): a convolution
    accumulating into an arbitrary init is the library's convolution plus that add."""
    from torch_mlir.dialects import arith, linalg, tensor
    t = ir.RankedTensorType(value.type)
    ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(t.rank))
    par = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(anchor), anchor.location:
        empty = tensor.EmptyOp(_sizes_of(value), t.element_type)
        gen = linalg.GenericOp([t], [acc, value], [empty.result], ir.ArrayAttr.get([ident] * 3),
                               ir.ArrayAttr.get([par] * t.rank))
        block = gen.regions[0].blocks.append(t.element_type, t.element_type, t.element_type)
        with ir.InsertionPoint(block):
            linalg.YieldOp([arith.AddFOp(block.arguments[0], block.arguments[1]).result])
    return gen.results[0]


def _add_bias(value, bias, anchor):
    """An elementwise `linalg.generic` computing `value + bias` with the [C] vector `bias` read
    along dim 1 (channels) of `value` ([N, C, *S], same element type): a convolution's bias
    added after the library call, as ATen's cuDNN path adds it (`output.add_(bias)`)."""
    from torch_mlir.dialects import arith, linalg, tensor
    t = ir.RankedTensorType(value.type)
    ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(t.rank))
    chan = ir.AffineMapAttr.get(ir.AffineMap.get(t.rank, 0, [ir.AffineDimExpr.get(1)]))
    par = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(anchor), anchor.location:
        empty = tensor.EmptyOp(_sizes_of(value), t.element_type)
        gen = linalg.GenericOp([t], [value, bias], [empty.result],
                               ir.ArrayAttr.get([ident, chan, ident]),
                               ir.ArrayAttr.get([par] * t.rank))
        block = gen.regions[0].blocks.append(t.element_type, t.element_type, t.element_type)
        with ir.InsertionPoint(block):
            linalg.YieldOp([arith.AddFOp(block.arguments[0], block.arguments[1]).result])
    return gen.results[0]


def _ints(vals) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, int(v)) for v in vals])


# ----------------------------------------------------------------------------- views

def _reassociation(groups) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([_ints(g) for g in groups])


def _view_source(value, name: str, groups):
    """X if `value` is `name`(X) with exactly this reassociation, else None."""
    op = defining_op(value)
    if op is None or op_name(op) != name:
        return None
    got = [[int(i) for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]
    return op.operands[0] if got == groups else None


def _collapse(value, groups, anchor):
    """A host-side `tensor.collapse_shape` view of `value` (contiguous, so free)."""
    from torch_mlir.dialects import tensor
    t = ir.RankedTensorType(value.type)
    shape = []
    for g in groups:
        n = 1
        for i in g:
            n *= t.shape[i]
        shape.append(n)
    with ir.InsertionPoint(anchor), anchor.location:
        return tensor.CollapseShapeOp(ir.RankedTensorType.get(shape, t.element_type), value,
                                      _reassociation(groups)).result


def _expand(value, groups, shape, anchor):
    """A new expand_shape view of `value` to `shape`; a dynamic dim (symbolic sizes) is the
    source dim of its group divided by the group's static sizes (one dynamic dim a group)."""
    from torch_mlir.dialects import arith, tensor
    t = ir.RankedTensorType(value.type)
    dyn = ir.ShapedType.get_dynamic_size()
    with ir.InsertionPoint(anchor), anchor.location:
        sizes = []
        for j, group in enumerate(groups):
            if not any(shape[i] == dyn for i in group):
                continue
            if sum(shape[i] == dyn for i in group) > 1:
                raise ValueError("expand_shape with two dynamic dims in one group")
            size = tensor.DimOp(value, arith.ConstantOp(ir.IndexType.get(), j).result).result
            rest = 1
            for i in group:
                rest *= shape[i] if shape[i] != dyn else 1
            if rest != 1:
                size = arith.DivUIOp(size, arith.ConstantOp(ir.IndexType.get(), rest).result).result
            sizes.append(size)
        return tensor.ExpandShapeOp(ir.RankedTensorType.get(shape, t.element_type), value,
                                    _reassociation(groups), sizes, shape).result


def _unsplit(value, groups, anchor):
    """`value` with the dims of each group merged: the source of a matching expand_shape when
    there is one, else a new collapse_shape view."""
    src = _view_source(value, "tensor.expand_shape", groups)
    return src if src is not None else _collapse(value, groups, anchor)


# ----------------------------------------------------------------------------- convolution

CONV_KINDS = {
    "linalg.conv_1d_ncw_fcw": "plain",
    "linalg.conv_2d_nchw_fchw": "plain",
    "linalg.conv_3d_ncdhw_fcdhw": "plain",
    "linalg.depthwise_conv_1d_ncw_cw": "depthwise",
    "linalg.depthwise_conv_2d_nchw_chw": "depthwise",
    "linalg.depthwise_conv_3d_ncdhw_cdhw": "depthwise",
    "linalg.conv_2d_ngchw_gfchw": "grouped",
}


def is_conv(op) -> bool:
    return op_name(op) in CONV_KINDS


def absorb_pad(x, is_pad_value):
    """`tensor.pad` of an N-C-spatial input, symmetric in the spatial dims only, with the given
    padding value, becomes the library call's padding: (unpadded input, spatial padding)."""
    spatial = ir.RankedTensorType(x.type).rank - 2
    op = defining_op(x)
    if op is None or op_name(op) != "tensor.pad" or len(op.operands) != 1:
        return x, [0] * spatial
    low = list(ir.DenseI64ArrayAttr(op.attributes["static_low"]))
    high = list(ir.DenseI64ArrayAttr(op.attributes["static_high"]))
    yield_op = list(op.regions[0].blocks[0].operations)[-1]
    if low != high or low[:2] != [0, 0] or not is_pad_value(yield_op.operands[0]):
        return x, [0] * spatial
    return op.operands[0], low[2:]


def _bias_of_broadcast(value, rank: int):
    """Conv init `linalg.broadcast ins(%b : tensor<F>) dimensions = [0, 2, ...]` -> %b."""
    op = defining_op(value)
    if op is None or op_name(op) != "linalg.broadcast":
        return None
    if list(ir.DenseI64ArrayAttr(op.attributes["dimensions"])) == [0] + list(range(2, rank)):
        return op.operands[0]
    return None


# Where a convolution's bias is added (ember-convert-externs' `conv-bias` option):
#   library     the library call takes it (oneDNN adds it inside, before its one rounding)
#   after-wide  f32/f64 convolutions add it in a generic after the call, which fuses into the
#               consumer kernel; bf16/f16 ones keep it in the call
#   after       every 2-d+ convolution with groups = 1 adds it after the call: what ATen does
#               on CUDA, where cuDNN computes no bias and `output.add_(bias)` is a second
#               kernel (rounded apart for bf16/f16, which the generic repeats: the narrow
#               result widened, plus the bias, rounded by the IR's own truncation). Grouped
#               and depthwise narrow ones keep it (ATen's depthwise kernel adds it inside).
CONV_BIAS = ("library", "after-wide", "after")


def _bias_after(mode: str, narrow: bool, groups: int) -> bool:
    if mode == "library":
        return False
    return not narrow or (mode == "after" and groups == 1)


def conv_extern(op, bias_mode: str = "library"):
    """The `aten.convolution` extern replacing the linalg conv `op` (a value to replace op's
    result with), or None when `op` stays generic code. `bias_mode`: one of CONV_BIAS."""
    kind = CONV_KINDS[op_name(op)]
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    rtype = ir.RankedTensorType(op.results[0].type)
    if kind == "grouped":
        # [N, G, C/G, *S] x [G, F/G, C/G, *K] -> [N, G, F/G, *O]: read unsplit as
        # [N, C, *S] x [F, C/G, *K] -> [N, F, *O] with groups = G.
        rank = rtype.rank
        groups = rtype.shape[1]
        split = [[0], [1, 2]] + [[i] for i in range(3, rank)]
        x = _unsplit(x, split, op)
        w = _unsplit(w, [[0, 1]] + [[i] for i in range(2, rank)], op)
        if not fill_is_zero(init):
            init = _unsplit(init, split, op)
        out_shape = [rtype.shape[0], rtype.shape[1] * rtype.shape[2]] + list(rtype.shape[3:])
    else:
        out_shape = list(rtype.shape)
        groups = 1
        if kind == "depthwise":
            # torch-mlir collapses eager's [C, 1, *K] depthwise weight to [C, *K]
            groups = rtype.shape[1]
            wt = ir.RankedTensorType(w.type)
            split = [[0, 1]] + [[i] for i in range(2, wt.rank + 1)]
            src = _view_source(w, "tensor.collapse_shape", split)
            if src is not None and ir.RankedTensorType(src.type).shape[1] != 1:
                src = None    # [1, C, *K] collapses to [C, *K] too, but is not eager's layout
            w = src if src is not None else _expand(
                w, split, [wt.shape[0], 1] + list(wt.shape[1:]), op)
    x, padding = absorb_pad(x, is_zero_constant)
    bias = _bias_of_broadcast(init, len(out_shape))
    acc = None if bias is not None or fill_is_zero(init) else init
    narrow = ir.RankedTensorType(x.type).element_type
    if acc is not None and (str(narrow) in _NARROW or str(rtype.element_type) in _NARROW):
        return None   # an accumulator would round differently: keep as generic code
    params = {
        "stride": _ints(ir.DenseIntElementsAttr(op.attributes["strides"])),
        "padding": _ints(padding),
        "dilation": _ints(ir.DenseIntElementsAttr(op.attributes["dilations"])),
        "groups": _ints([groups])[0],
    }
    widened = str(narrow) in _NARROW and str(rtype.element_type) == "f32"
    after = None
    if bias is not None and (widened or str(rtype.element_type) not in _NARROW) and \
            _bias_after(bias_mode, widened, groups):
        bias, after = None, bias
    operands = [x, w] if bias is None else [x, w, bias]
    out_type = ir.RankedTensorType.get(out_shape, rtype.element_type)
    if widened:
        if bias is not None and narrow_source(bias) is not None:
            operands[2] = narrow_source(bias)   # cuDNN takes the bias narrow
        # the library rounds a low-precision conv's result as eager's call does (oneDNN once,
        # after the bias; on CUDA ATen adds the bias in a second rounding): the library writes
        # that narrow tensor, and the widening to the IR's f32 accumulator type is a generic
        # that fuses into the consumer.
        conv = make_extern("aten.convolution", operands,
                           ir.RankedTensorType.get(out_shape, narrow), params, op)
        result = widen(conv.results[0], out_type, op).results[0]
    else:
        result = make_extern("aten.convolution", operands, out_type, params, op).results[0]
    if after is not None:
        result = _add_bias(result, after, op)
    if acc is not None:
        result = _add(acc, result, op)
    if kind == "grouped":
        split = [[0], [1, 2]] + [[i] for i in range(3, rtype.rank)]
        result = _expand(result, split, list(rtype.shape), op)
    return result


# ----------------------------------------------------------------------------- pooling

def neg_inf_constant(value) -> bool:
    return is_float_constant(value, float("-inf"))


def _absorb_pool_pad(x, is_pad_value):
    """Like `absorb_pad`, but a pad that is larger at the end (torch-mlir's form of
    `ceil_mode=True`: enough identity elements for the last, partial window) is absorbed too:
    (input, low padding, ceil_mode). The library's ceil-mode output then has the IR's size
    (the runtime checks), and windows that reach past the input read only identities."""
    op = defining_op(x)
    spatial = ir.RankedTensorType(x.type).rank - 2
    if op is None or op_name(op) != "tensor.pad" or len(op.operands) != 1:
        return x, [0] * spatial, False
    low = list(ir.DenseI64ArrayAttr(op.attributes["static_low"]))
    high = list(ir.DenseI64ArrayAttr(op.attributes["static_high"]))
    yield_op = list(op.regions[0].blocks[0].operations)[-1]
    if (low[:2] != [0, 0] or high[:2] != [0, 0] or any(h < l for l, h in zip(low, high))
            or not is_pad_value(yield_op.operands[0])):
        return x, [0] * spatial, False
    return op.operands[0], low[2:], low != high


def pooling_extern(op):
    """2-D max / sum pooling -> a library call, when the init and the padding are the
    reduction's identity (-inf for max, 0 for sum), as torch-mlir emits them."""
    x, window, init = op.operands[0], op.operands[1], op.operands[2]
    is_max = op_name(op) == "linalg.pooling_nchw_max"
    fill = defining_op(init)
    if fill is None or op_name(fill) != "linalg.fill":
        return None
    identity = neg_inf_constant if is_max else is_zero_constant
    if not identity(fill.operands[0]):
        return None
    x, padding, ceil_mode = _absorb_pool_pad(x, identity)
    params = {
        "stride": _ints(ir.DenseIntElementsAttr(op.attributes["strides"])),
        "padding": _ints(padding),
        "dilation": _ints(ir.DenseIntElementsAttr(op.attributes["dilations"])),
    }
    if ceil_mode:
        params["ceil_mode"] = ir.BoolAttr.get(True)
    target = "aten.max_pool2d" if is_max else "aten.sum_pool2d"
    return make_extern(target, [x, window], op.results[0].type, params, op).results[0]
