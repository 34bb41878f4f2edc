"""ember-channels-last: a convolution network runs channels-last (NHWC) as a whole, as Inductor's
layout optimisation does.

cuDNN (and oneDNN) compute bf16/f16 2-d convolutions in NHWC; handed NCHW tensors, each call
transforms its input, weight and result (nchwToNhwc / nhwcToNchw kernels: 0.41 of the 1.33 ms
of resnet18's bf16 device time on an H200). This pass gives every 2-d `aten.convolution` extern
its input and weight as channels-last buffers and has it write a channels-last result, and makes
the pointwise kernels between convolutions (BatchNorm, ReLU, residual adds, casts) iterate over
and write NHWC buffers, so that no layout transform is left between two convolutions. ember's
buffers are row-major in the IR's shapes, so a channels-last buffer is a value of NHWC *type*;
its NCHW meaning is a `linalg.transpose` (permutation [0, 3, 1, 2]) of it, which a kernel reads
as an indexing map and which this pass reads through.

Which functions: those with at least `min-convs` (2) eligible convolutions (2-d, not
transposed, static shapes; f32 ones only with `f32`, the default) whose flops, weighted by Inductor's measured channels-last factors
per kind of convolution (`pays_off`: grouped convolutions with several input channels per group
run slower channels-last), do not grow. Others are left as they are.

A function that computes batch statistics (a reduction of a 4-d tensor over its batch and
spatial dims: a training forward's BatchNorm) is left as it is unless `with-statistics` (the
default pipeline passes it: training graphs run channels-last too).

Invariant established, in every such public function, for statically shaped values:

* every `aten.convolution` extern of a 4-d input that is not transposed takes its input as an
  NHWC value (the source X of an `nchw = linalg.transpose(X) [0, 3, 1, 2]` operand, otherwise a
  new transpose of the operand) and its weight as an OHWI value (a new transpose: a small copy
  kernel inside the graph, as Inductor makes), has an NHWC result and `channels_last = true`
  in its params; its former result is the transpose of the new one;
* likewise `aten.max_pool2d` / `aten.sum_pool2d` externs whose input is such a transpose; with
  `pool-kernels` (the default) they are then a `linalg.generic` window reduction (max / add
  over (kh, kw)) of a `tensor.pad` (the identity as padding) of the NHWC buffer: one kernel
  that reads the buffer with clamped window indices (the pad is index arithmetic) and writes
  no int64 indices, unlike the library's max pooling;
* a `linalg.generic` with four parallel loops, identity output maps and 4-d results, reading at
  least one such transpose, used by something other than `func.return`, iterates (n, h, w, c):
  its results are NHWC values (their former values are transposes of them) and it reads the
  transposes' sources through composed maps;
* a `linalg.generic` reduction with four loops (n, c, h, w), c parallel, no `linalg.index`,
  reading such a transpose through the identity map, iterates (n, h, w, c) and reads the
  transpose's source: the kept channel loop is innermost (a column reduction: BatchNorm's
  statistics and their gradients, a mean over H and W); its results keep their types;
* every `func.call` of a library declaration in `_LIBRARY_LAYOUTS` (a training graph's
  `convolution_backward`, always; max pooling with indices and its backward, where an operand
  is such a transpose already) takes the NHWC values of its 4-d activation operands and gives
  NHWC results, its declaration's type says so and `ember.channels_last = [operands,
  results]` records which (the weight and its gradient stay OIHW);
* a static `tensor.pad` / rank-keeping `tensor.extract_slice` of such a transpose is the
  transpose of the same op on the NHWC buffer (sizes, offsets and strides permuted), and a
  `tensor.extract` of such a transpose inside a 4-d parallel generic (a gather) reads the
  buffer at the permuted position, the generic then iterating (n, h, w, c): max pooling with
  indices and its backward (frontend/pool_decomp.py: window slices of a padded activation; a
  gather of the gradient and the window offsets) read and write NHWC buffers;
* a transpose of a transpose whose permutations compose to the identity is its source (a result
  eager lays out channels-last is returned as a permute of the NCHW value: no copy is left);
* a transpose that moves only unit dims (the OIHW -> OHWI weight of a 1x1 or a depthwise
  convolution, a pooled [n, c, 1, 1] value into a convolution) is a `tensor.collapse_shape` +
  `tensor.expand_shape` view: the same bytes in the same order, no copy kernel (there was one
  per such convolution and call: 81 of efficientnet_b0's 180 kernels).

The runtime (runtime/externs.py) calls the library on `permute(0, 3, 1, 2)` views of the NHWC
buffers (channels-last strides, what eager passes a channels-last network) and keeps its
channels-last result as the NHWC buffer. Nothing else changes meaning: the pass only moves
where a transpose sits. Graph inputs and outputs keep eager's layouts; a reduction (a mean over
H and W, BatchNorm's training statistics) reads the NHWC buffer through its map.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from torch_mlir import ir

from ..dialects.contract import (CHANNELS_LAST, EXTERN_OP, LIBRARY, OPERAND_VIEWS, PARAMS,
                                 RESULT_VIEWS, RESULTS, TENSOR_ARGS, VIEW, is_library)
from ..dialects.ember import extern_callee
from .base import Pass, option
from .graph_utils import defining_op, op_name
from .ir_queries import iterator_types

TO_NHWC = [0, 2, 3, 1]      # linalg.transpose permutation NCHW -> NHWC (weights: OIHW -> OHWI)
TO_NCHW = [0, 3, 1, 2]      # NHWC -> NCHW
_CONV = "aten.convolution"
_POOLS = ("aten.max_pool2d", "aten.sum_pool2d")


def _perm(op) -> list[int]:
    return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes["permutation"])]


def _static4(value) -> bool:
    t = value.type
    return (isinstance(t, ir.RankedTensorType) and ir.RankedTensorType(t).rank == 4
            and ir.RankedTensorType(t).has_static_shape)


def nhwc_source(value):
    """X when `value` is `linalg.transpose ins(X) permutation = [0, 3, 1, 2]` (an NHWC buffer
    read as NCHW), else None."""
    op = defining_op(value)
    if op is None or op_name(op) != "linalg.transpose" or _perm(op) != TO_NCHW:
        return None
    src = op.operands[0]
    return src if _static4(src) else None


def _transpose(value, perm: list[int], anchor, after: bool = False):
    """`linalg.transpose(value)` by `perm`, inserted before (or after) `anchor`."""
    from torch_mlir.dialects import linalg, tensor
    t = ir.RankedTensorType(value.type)
    shape = [t.shape[p] for p in perm]
    point = ir.InsertionPoint.after(anchor) if after else ir.InsertionPoint(anchor)
    with point, anchor.location:
        empty = tensor.EmptyOp(shape, t.element_type)
        made = linalg.transpose(value, outs=[empty.result], permutation=perm)
    return made if isinstance(made, ir.Value) else made.results[0]


def _nhwc_type(t) -> ir.RankedTensorType:
    t = ir.RankedTensorType(t)
    return ir.RankedTensorType.get([t.shape[p] for p in TO_NHWC], t.element_type)


def _to_nhwc_result(op, index: int) -> None:
    """Result `index` of `op` becomes NHWC; its users read the transpose back to NCHW."""
    res = op.results[index]
    res.set_type(_nhwc_type(res.type))
    back = _transpose(res, TO_NCHW, op, after=True)
    res.replace_all_uses_except(back, defining_op(back))


def _set_param(op, name: str, attr) -> None:
    params = {a.name: a.attr for a in ir.DictAttr(op.attributes["params"])} \
        if "params" in op.attributes else {}
    params[name] = attr
    op.attributes["params"] = ir.DictAttr.get(params)


def _params(op) -> dict:
    if "params" not in op.attributes:
        return {}
    return {a.name: a.attr for a in ir.DictAttr(op.attributes["params"])}


def _rewrite_conv(op, weights: bool) -> bool:
    x, w = op.operands[0], op.operands[1]
    p = _params(op)
    if ("transposed" in p and ir.BoolAttr(p["transposed"]).value) or "channels_last" in p:
        return False
    if not (_static4(x) and _static4(w) and _static4(op.results[0])):
        return False
    src = nhwc_source(x)
    op.operands[0] = src if src is not None else _transpose(x, TO_NHWC, op)
    if weights:
        op.operands[1] = _transpose(w, TO_NHWC, op)
        _set_param(op, "ohwi_weight", ir.BoolAttr.get(True))
    _set_param(op, "channels_last", ir.BoolAttr.get(True))
    _to_nhwc_result(op, 0)
    return True


def _rewrite_pool(op) -> bool:
    src = nhwc_source(op.operands[0])
    if src is None or "channels_last" in _params(op) or not _static4(op.results[0]):
        return False
    op.operands[0] = src
    _set_param(op, "channels_last", ir.BoolAttr.get(True))
    _to_nhwc_result(op, 0)
    return True


# Library calls (frontend/library_calls.py: a training graph's ops with indices or several
# results) that take channels-last views of their 4-d NCHW tensors: op -> (operands by schema
# name, op outputs). cuDNN's convolution backward and ATen's max pooling with indices and its
# backward compute channels-last natively (eager's kernels for a channels-last network).
_LIBRARY_LAYOUTS = {
    "aten.convolution_backward.default": (("grad_output", "input"), (0,)),
    "aten.max_pool2d_with_indices.default": (("self",), (0, 1)),
    "aten.max_pool2d_with_indices_backward.default": (("grad_output", "self", "indices"), (0,)),
}
_CONV_BACKWARD = "aten.convolution_backward.default"


def _library_decls(fn) -> dict:
    module = fn.operation.parent
    while module is not None and op_name(module) != "builtin.module":
        module = module.parent
    if module is None:
        return {}
    return {ir.StringAttr(op.attributes["sym_name"]).value: op
            for op in module.regions[0].blocks[0].operations if is_library(op)}


def _library_layout(op, decls):
    """(decl, NCHW operand positions, NCHW result positions) when `op` is a call of a library
    op in _LIBRARY_LAYOUTS whose those values are statically shaped 4-d tensors, else None."""
    if op_name(op) != "func.call":
        return None
    decl = decls.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
    if decl is None or any(a.has(decl) for a in (VIEW, OPERAND_VIEWS, RESULT_VIEWS,
                                                  CHANNELS_LAST)):
        return None
    layout = _LIBRARY_LAYOUTS.get(LIBRARY.get(decl))
    if layout is None:
        return None
    names, outs = layout
    args = TENSOR_ARGS.get(decl)
    ins = [k for k, n in enumerate(args) if n in names]
    res = [k for k, i in enumerate(RESULTS.get(decl)) if i in outs]
    if LIBRARY.get(decl) == _CONV_BACKWARD:
        p = {a.name: a.attr for a in ir.DictAttr(PARAMS.get(decl))}
        if ("transposed" in p and ir.BoolAttr(p["transposed"]).value) \
                or "weight" not in args or not _static4(op.operands[args.index("weight")]):
            return None
    if not all(_static4(op.operands[k]) for k in ins) or \
            not all(_static4(op.results[k]) for k in res):
        return None
    return decl, ins, res


def _rewrite_library(op, decl, ins: list[int], res: list[int]) -> bool:
    """The call takes the NHWC buffers of its NCHW operands (a transpose where there is none)
    and gives NHWC results; the declaration records which (`ember.channels_last`)."""
    for k in ins:
        src = nhwc_source(op.operands[k])
        op.operands[k] = src if src is not None else _transpose(op.operands[k], TO_NHWC, op)
    for k in res:
        _to_nhwc_result(op, k)
    decl.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [v.type for v in op.operands], [r.type for r in op.results]))
    CHANNELS_LAST.set(decl, [ins, res])
    return True


def _int_list(attr) -> list[int]:
    return [int(ir.IntegerAttr(a).value) for a in ir.ArrayAttr(attr)]


def _pool_kernel(op) -> bool:
    """A channels-last `aten.max_pool2d` / `aten.sum_pool2d` extern as a window reduction over
    the NHWC buffer, padded with the reduction's identity:
    out[n, oh, ow, c] = max over (kh, kw) of pad(X)[n, oh*s + kh*d, ow*s + kw*d, c]. ember-fuse
    puts the pad in the reduction's kernel (clamped, selected reads); X's producers (BatchNorm,
    ReLU) stay a kernel of their own (kernel_schedule: each element is read by several
    windows). No index tensor is written (the library's max pooling writes int64 indices)."""
    from torch_mlir.dialects import arith, linalg, tensor
    p = _params(op)
    if "channels_last" not in p:
        return False
    x = op.operands[0]
    xt, rt = ir.RankedTensorType(x.type), ir.RankedTensorType(op.results[0].type)
    kh, kw = ir.RankedTensorType(op.operands[1].type).shape
    stride, padding, dilation = (_int_list(p[k]) for k in ("stride", "padding", "dilation"))
    elt = xt.element_type
    is_max = extern_callee(op) == "aten.max_pool2d"
    # a max is exact in any float type; a sum only in f32 (the library accumulates a narrow
    # sum in f32 and rounds once)
    if not (isinstance(elt, ir.F32Type) or (is_max and isinstance(elt, (ir.BF16Type, ir.F16Type)))):
        return False
    n, h, w, c = xt.shape
    _, oh, ow, _ = rt.shape
    high = [max(0, (o - 1) * s + d * (k - 1) + 1 - (size + q))
            for o, s, d, k, size, q in zip((oh, ow), stride, dilation, (kh, kw), (h, w), padding)]
    low = [0, padding[0], padding[1], 0]
    high = [0, high[0], high[1], 0]
    padded = [n, h + low[1] + high[1], w + low[2] + high[2], c]
    with ir.InsertionPoint(op), op.location:
        ident = arith.ConstantOp(elt, float("-inf") if is_max else 0.0).result
        if low != [0] * 4 or high != [0] * 4:
            pad = tensor.PadOp(ir.RankedTensorType.get(padded, elt), x, [], [], low, high)
            block = pad.regions[0].blocks.append(*[ir.IndexType.get()] * 4)
            with ir.InsertionPoint(block):
                tensor.YieldOp(ident)
            x = pad.result
        empty = tensor.EmptyOp(list(rt.shape), elt)
        init = linalg.fill(ident, outs=[empty.result])
        init = init if isinstance(init, ir.Value) else init.results[0]
        dim = ir.AffineExpr.get_dim
        read = ir.AffineMap.get(6, 0, [dim(0), dim(1) * stride[0] + dim(4) * dilation[0],
                                       dim(2) * stride[1] + dim(5) * dilation[1], dim(3)])
        out = ir.AffineMap.get(6, 0, [dim(0), dim(1), dim(2), dim(3)])
        par = ir.Attribute.parse("#linalg.iterator_type<parallel>")
        red = ir.Attribute.parse("#linalg.iterator_type<reduction>")
        win = tensor.EmptyOp([kh, kw], elt)     # the window's shape, as linalg pooling takes it
        win_map = ir.AffineMap.get(6, 0, [dim(4), dim(5)])
        gen = linalg.GenericOp([rt], [x, win.result], [init],
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m)
                                                 for m in (read, win_map, out)]),
                               ir.ArrayAttr.get([par] * 4 + [red] * 2))
        body = gen.regions[0].blocks.append(elt, elt, elt)
        with ir.InsertionPoint(body):
            a, acc = body.arguments[0], body.arguments[2]
            v = arith.MaximumFOp(a, acc) if is_max else arith.AddFOp(a, acc)
            linalg.YieldOp([v.result])
    op.results[0].replace_all_uses_with(gen.results[0])
    op.erase()
    return True


def _maps(op) -> list:
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _compose(m, inner) -> "ir.AffineMap":
    """m after `inner` (dims of `inner` substituted into m's results)."""
    return ir.AffineMap.get(inner.n_dims, inner.n_symbols, [e.compose(inner) for e in m.results])


def _permuted_results(m, perm: list[int]) -> "ir.AffineMap":
    results = list(m.results)
    return ir.AffineMap.get(m.n_dims, m.n_symbols, [results[p] for p in perm])


def _rewritable_generic(op, gathers: bool = False) -> bool:
    # a body that reads its loop indices is re-iterated too: `_renumber_index_ops`
    if iterator_types(op) != ["parallel"] * 4:
        return False
    gen = op.opview
    n_in, outs = len(gen.inputs), list(gen.outputs)
    maps = _maps(op)
    ident = ir.AffineMap.get_identity(4)
    if not outs or any(maps[n_in + k] != ident for k in range(len(outs))):
        return False
    if not all(_static4(r) for r in op.results):
        return False
    if not gathers and not any(nhwc_source(v) is not None for v in gen.inputs):
        return False
    block = op.regions[0].blocks[0]
    if any(len(list(block.arguments[n_in + k].uses)) for k in range(len(outs))):
        return False        # the body reads its init: keep (not a pure pointwise op)
    return any(op_name(u.owner) != "func.return" for r in op.results for u in r.uses)


def _rewrite_generic(op) -> bool:
    """Iterates `op` over (n, h, w, c) instead of (n, c, h, w), writing NHWC results."""
    from torch_mlir.dialects import tensor
    gathers = _rewritable_generic(op, gathers=True) and bool(_nhwc_extracts(op))
    if not gathers and not _rewritable_generic(op):
        return False
    if gathers:
        _rewrite_extracts(op)
    gen = op.opview
    n_in = len(gen.inputs)
    # new loop e = (n, h, w, c); old loop d = (n, c, h, w) = (e0, e3, e1, e2)
    d_of_e = ir.AffineMap.get(4, 0, [ir.AffineExpr.get_dim(i) for i in TO_NCHW])
    maps = _maps(op)
    new_maps = []
    for k in range(n_in):
        m = _compose(maps[k], d_of_e)
        src = nhwc_source(op.operands[k])
        if src is not None and maps[k].n_dims == 4 and len(maps[k].results) == 4:
            op.operands[k] = src                     # read X[r0, r2, r3, r1] for T(X)[r]
            m = _permuted_results(m, TO_NHWC)
        new_maps.append(m)
    ident = ir.AffineMap.get_identity(4)
    for k, res in enumerate(op.results):
        nt = _nhwc_type(res.type)
        with ir.InsertionPoint(op), op.location:
            empty = tensor.EmptyOp(list(nt.shape), nt.element_type)
        op.operands[n_in + k] = empty.result
        new_maps.append(ident)
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
    _renumber_index_ops(op.regions[0].blocks[0])
    for k in range(len(op.results)):
        _to_nhwc_result(op, k)
    return True


def _permute_attr(op, name: str) -> None:
    vals = [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[name])]
    op.attributes[name] = ir.DenseI64ArrayAttr.get([vals[p] for p in TO_NHWC])


def _rewrite_window_view(op) -> bool:
    """`tensor.pad` / `tensor.extract_slice` (static, rank kept) of an NHWC buffer's transpose
    is the transpose of the same op on the buffer, its sizes permuted: the views a max pooling
    window is made of (frontend/pool_decomp.py) stay on the NHWC buffer, so that the kernel
    reading them iterates NHWC too."""
    name = op_name(op)
    if len(op.operands) != 1 or not _static4(op.results[0]):
        return False
    src = nhwc_source(op.operands[0])
    if src is None:
        return False
    attrs = ("static_low", "static_high") if name == "tensor.pad" else \
        ("static_offsets", "static_sizes", "static_strides")
    if not all(a in op.attributes for a in attrs):
        return False
    if name == "tensor.pad" and any(len(list(a.uses))
                                    for a in op.regions[0].blocks[0].arguments):
        return False        # a padding value computed from its (NCHW) position
    op.operands[0] = src
    for a in attrs:
        _permute_attr(op, a)
    _to_nhwc_result(op, 0)
    return True


def _nhwc_extracts(op) -> list:
    """The `tensor.extract`s in `op`'s body (a gather) that read an NHWC buffer's transpose."""
    found = []

    def walk(block):
        for inner in block.operations:
            if op_name(inner) == "tensor.extract" and len(inner.operands) == 5 and \
                    nhwc_source(inner.operands[0]) is not None:
                found.append(inner)
            for region in inner.regions:
                for b in region.blocks:
                    walk(b)
    walk(op.regions[0].blocks[0])
    return found


def _rewrite_extracts(op) -> bool:
    """A gather's element reads of T(X) (X an NHWC buffer, T its NCHW transpose) read X at the
    permuted position: no transpose kernel is left for the gather to read (the backward of max
    pooling, frontend/pool_decomp.py)."""
    from torch_mlir.dialects import tensor
    extracts = _nhwc_extracts(op)
    for ex in extracts:
        src = nhwc_source(ex.operands[0])
        idx = list(ex.operands)[1:]
        with ir.InsertionPoint(ex), ex.location:
            new = tensor.ExtractOp(src, [idx[p] for p in TO_NHWC])
        ex.results[0].replace_all_uses_with(new.result)
        ex.erase()
    return bool(extracts)


def _uses_index(op) -> bool:
    """Whether the body reads its loop indices (`linalg.index`): re-iterating would change them."""
    return any(op_name(inner) == "linalg.index" for inner in op.regions[0].blocks[0].operations)


def _rewrite_reduction(op) -> bool:
    """A reduction with four loops (n, c, h, w) that reads an NHWC buffer through its
    transpose (BatchNorm's batch statistics and their gradients: a sum over n, h, w; a mean
    over h, w) iterates (n, h, w, c) instead: the kept channel loop is the innermost, so the
    reduction is a column reduction over rows of the buffer (coalesced loads, Triton's column
    configurations), not a strided read per channel. Its results keep their types."""
    types = iterator_types(op)
    if len(types) != 4 or "reduction" not in types or types[1] != "parallel" or \
            _uses_index(op):
        return False
    gen = op.opview
    n_in = len(gen.inputs)
    maps = _maps(op)
    ident = ir.AffineMap.get_identity(4)
    reads = [k for k in range(n_in) if nhwc_source(op.operands[k]) is not None
             and maps[k] == ident]
    if not reads:
        return False
    d_of_e = ir.AffineMap.get(4, 0, [ir.AffineExpr.get_dim(i) for i in TO_NCHW])
    new_maps = []
    for k, m in enumerate(maps):
        m = _compose(m, d_of_e)
        if k in reads:
            op.operands[k] = nhwc_source(op.operands[k])
            m = _permuted_results(m, TO_NHWC)
        new_maps.append(m)
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
    op.attributes["iterator_types"] = ir.ArrayAttr.get([
        ir.Attribute.parse(f"#linalg.iterator_type<{types[j]}>") for j in TO_NHWC])
    return True


def _renumber_index_ops(block) -> None:
    """`linalg.index d` of the old loop d = (n, c, h, w) is loop TO_NCHW[d] of the new
    (n, h, w, c): a body that computes from its indices (avg pooling's divisor without the
    padding, count_include_pad=False) keeps reading the same position."""
    i64 = ir.IntegerType.get_signless(64)
    for inner in block.operations:
        if op_name(inner) == "linalg.index":
            old = ir.IntegerAttr(inner.attributes["dim"]).value
            inner.attributes["dim"] = ir.IntegerAttr.get(i64, TO_NCHW[old])
        for region in inner.regions:
            for b in region.blocks:
                _renumber_index_ops(b)


def _fold_transposes(fn) -> None:
    """transpose(transpose(X, p1), p2) with p1 o p2 the identity is X."""
    for block in fn.regions[0].blocks:
        for op in list(block.operations):
            if op_name(op) != "linalg.transpose":
                continue
            inner = defining_op(op.operands[0])
            if inner is None or op_name(inner) != "linalg.transpose":
                continue
            p1, p2 = _perm(inner), _perm(op)
            if [p1[i] for i in p2] == list(range(len(p2))):
                op.results[0].replace_all_uses_with(inner.operands[0])


def _erase_dead(fn) -> None:
    changed = True
    while changed:
        changed = False
        for block in fn.regions[0].blocks:
            for op in reversed(list(block.operations)):
                if op_name(op) in ("linalg.transpose", "tensor.empty") and \
                        all(len(list(r.uses)) == 0 for r in op.results):
                    op.erase()
                    changed = True


def _eligible(op) -> bool:
    p = _params(op)
    return (not ("transposed" in p and ir.BoolAttr(p["transposed"]).value)
            and "channels_last" not in p
            and all(_static4(v) for v in (op.operands[0], op.operands[1], op.results[0])))


# Inductor's measured channels-last speed-up per kind of convolution (its layout
# optimisation, torch/_inductor/graph.py `decide_layout_opt`: < 1 is faster channels-last)
_GROUPED, _SMALL, _IN_OUT, _DEFAULT = 1.358, 0.783, 0.725, 0.823


def _conv_geometry(op, decls) -> tuple:
    """(weight shape, result shape, groups) of a convolution extern or a convolution_backward
    library call (its grad_output is the forward's result)."""
    if op_name(op) == EXTERN_OP:
        p = _params(op)
        w, out = op.operands[1], op.results[0]
    else:
        decl = decls[ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
        p = {a.name: a.attr for a in ir.DictAttr(PARAMS.get(decl))}
        args = TENSOR_ARGS.get(decl)
        w, out = op.operands[args.index("weight")], op.operands[args.index("grad_output")]
    groups = int(ir.IntegerAttr(p["groups"]).value) if "groups" in p else 1
    return (tuple(ir.RankedTensorType(w.type).shape), tuple(ir.RankedTensorType(out.type).shape),
            groups)


def pays_off(geometries: list) -> bool:
    """Whether channels-last is expected to be faster for these convolutions as a whole
    ((weight shape, result shape, groups) each): their flops weighted by Inductor's per-kind
    factors (grouped convolutions with more than one input channel per group run slower
    channels-last) do not exceed the plain flops."""
    total = weighted = 0.0
    for (f, cg, kh, kw), (n, fo, oh, ow), groups in geometries:
        flops = 2.0 * n * fo * oh * ow * cg * kh * kw
        if groups > 1 and cg > 1:
            factor = _GROUPED
        elif f <= 64 and cg <= 64:
            factor = _SMALL
        elif f * 2 <= cg and kh > 1:
            factor = _IN_OUT
        else:
            factor = _DEFAULT
        total += flops
        weighted += flops * factor
    return weighted <= total


def batch_statistics(fn) -> bool:
    """Whether `fn` reduces a 4-d tensor over its batch and spatial dims (training BatchNorm's
    mean and variance): such a reduction would read an NHWC buffer across its rows."""
    for block in fn.regions[0].blocks:
        for op in block.operations:
            if op_name(op) != "linalg.generic" or "reduction" not in iterator_types(op):
                continue
            red = {i for i, t in enumerate(iterator_types(op)) if t == "reduction"}
            for m, v in zip(_maps(op), op.opview.inputs):
                dims = [ir.AffineDimExpr(e).position if isinstance(e, ir.AffineDimExpr)
                        else None for e in m.results]
                if len(dims) == 4 and dims[0] in red and dims[2] in red:
                    return True
    return False


def _f32(value) -> bool:
    return isinstance(ir.RankedTensorType(value.type).element_type, ir.F32Type)


def channels_last(fn, weights: bool = True, pool_kernels: bool = True,
                  min_convs: int = 2, with_statistics: bool = False, f32: bool = True) -> int:
    """Rewrites one function body (see the module docstring); returns the convolutions made
    channels-last (none: nothing else is touched)."""
    decls = _library_decls(fn)
    ops = [op for block in fn.regions[0].blocks for op in block.operations]
    convs = [op for op in ops if op_name(op) == EXTERN_OP and extern_callee(op) == _CONV
             and _eligible(op) and (f32 or not _f32(op.operands[0]))]
    # a backward's convolutions: convolution_backward library calls
    convs += [op for op in ops if (lay := _library_layout(op, decls)) is not None
              and LIBRARY.get(lay[0]) == _CONV_BACKWARD
              and (f32 or not _f32(op.operands[0]))]
    if len(convs) < max(1, min_convs) or \
            not pays_off([_conv_geometry(op, decls) for op in convs]):
        return 0
    if not with_statistics and batch_statistics(fn):
        return 0
    n = sum(_rewrite_conv(op, weights) for op in convs if op_name(op) == EXTERN_OP)
    # program order: a kernel's NHWC result makes its consumers NHWC in turn
    for block in fn.regions[0].blocks:
        for op in list(block.operations):
            name = op_name(op)
            if name == "linalg.generic":
                _rewrite_generic(op) or _rewrite_reduction(op) or _rewrite_extracts(op)
            elif name in ("tensor.pad", "tensor.extract_slice"):
                _rewrite_window_view(op)
            elif name == EXTERN_OP and extern_callee(op) in _POOLS:
                if _rewrite_pool(op) and pool_kernels:
                    _pool_kernel(op)
            elif (lay := _library_layout(op, decls)) is not None:
                decl, ins, res = lay
                conv = LIBRARY.get(decl) == _CONV_BACKWARD
                # pooling: where an operand is NHWC already (as the pooling externs)
                if conv or any(nhwc_source(op.operands[k]) is not None for k in ins):
                    n += _rewrite_library(op, decl, ins, res) and conv
    _fold_transposes(fn)
    _erase_dead(fn)
    _unit_transposes_to_views(fn)
    _erase_dead(fn)
    return n


def _unit_groups(shape) -> list[list[int]] | None:
    """`shape`'s dims grouped onto its non-unit dims (a unit dim joins the next group, trailing
    ones the last); None when every dim is a unit."""
    groups, cur = [], []
    for i, size in enumerate(shape):
        cur.append(i)
        if size != 1:
            groups.append(cur)
            cur = []
    if not groups:
        return None
    groups[-1] += cur
    return groups


def _unit_transposes_to_views(fn) -> None:
    """A static transpose that keeps the order of its non-unit dims is a reshape: the source
    collapsed onto those dims, expanded to the result's shape (views, no copy)."""
    from .externs import _collapse, _expand
    for block in fn.regions[0].blocks:
        for op in list(block.operations):
            if op_name(op) != "linalg.transpose":
                continue
            src, res = op.operands[0], op.results[0]
            t, rt = ir.RankedTensorType(src.type), ir.RankedTensorType(res.type)
            if not (t.has_static_shape and rt.has_static_shape):
                continue
            kept = [p for p in _perm(op) if t.shape[p] != 1]
            groups, res_groups = _unit_groups(t.shape), _unit_groups(rt.shape)
            if kept != sorted(kept) or groups is None or res_groups is None:
                continue
            view = src if len(groups) == t.rank else _collapse(src, groups, op)
            if len(res_groups) != rt.rank:
                view = _expand(view, res_groups, list(rt.shape), op)
            res.replace_all_uses_with(view)


@dataclasses.dataclass(frozen=True)
class EmberChannelsLast(Pass):
    """Convolution networks run channels-last (see the module docstring)."""

    name = "ember-channels-last"
    summary = ("2-d convolutions, pooling and the pointwise kernels between them read and "
               "write channels-last (NHWC) buffers; no layout transform between convolutions")
    # statically shaped values only; others are left as they are
    dynamic_shapes: ClassVar[bool] = True

    # weights transposed to OHWI inside the graph (GPU targets); false: the library takes the
    # OIHW weight beside the channels-last input (oneDNN reorders its weights itself anyway)
    transpose_weights: bool = True
    # channels-last pooling as a generated window reduction (fused with its producers) instead
    # of the library's kernel
    pool_kernels: bool = True
    # a function with fewer eligible convolutions is left NCHW: converting its input and
    # weights costs what cuDNN's own transforms cost, in more kernels
    min_convs: int = option(2, min=1)
    # lay out functions that compute batch statistics too (a training forward's BatchNorm: its
    # reductions become column reductions over the NHWC buffers); the default pipeline passes it
    with_statistics: bool = False
    # f32 convolutions count as eligible; false where the library computes them without TF32
    # (the default pipeline on CUDA when `torch.backends.cudnn.allow_tf32` is off): cuDNN's
    # NHWC f32 kernels are slower than its NCHW ones then. Measured on an H100 (2026-11-26,
    # batch 32, fp32 inference, TF32 off): densenet121 15.34 ms channels-last vs 11.31 NCHW
    # (eager 14.10); resnet50 13.10 vs 10.96 (eager 12.53)
    f32: bool = True

    def run(self, module: ir.Operation) -> None:
        from .ember_convert_externs import public_functions
        with module.context, ir.Location.unknown():
            for fn in public_functions(module):
                channels_last(fn, self.transpose_weights, self.pool_kernels, self.min_convs,
                              self.with_statistics, self.f32)
