"""Eager fallback: find the nodes ember cannot compile, so that just those run in eager torch.

`blame` probes each call_function node alone (a one-node graph whose placeholders carry the
node's input `meta['val']`, imported and run through the pipeline up to code generation; no
build). Verdicts (None, or the reason) are cached per (op overload, input dtypes, ranks, target,
pipeline), so a model probes each kind of node once. Probes print nothing: MLIR's diagnostics
and native stderr are captured (report.NativeOutput) into the reason.

A failing node that `can_call` becomes an ATen call inside the compiled program (the same
mechanism as library ops, frontend/library_calls.py): the program stays one host schedule and
costs the op's eager time and nothing more. Only the others (a tuple or symbolic value escaping,
a dtype argument, a mutating or aliasing op) split the graph: `partition_graph` groups the rest
with torch's CapabilityBasedPartitioner into submodules, each compiled lazily by ember (with no
further splitting: a submodule ember still fails on runs eagerly as a whole).
"""
from __future__ import annotations

import operator
import threading

import torch
import torch.fx as fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from . import fx_prep
from .complex_values import is_complex_library_node
from .options import CompileOptions, default_pipeline
from .report import describe_error
from .zero_size import touches_empty

_VERDICTS: dict[tuple, str | None] = {}    # key -> None (supported) or the reason it is not
_LOCK = threading.Lock()


def op_name(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)                  # aten.sort.default
    return getattr(target, "__name__", str(target))


def eager_ops(gm: fx.GraphModule) -> list[str]:
    return sorted({op_name(n) for n in gm.graph.nodes
                   if n.op == "call_function" and n.target is not operator.getitem})


def _val_key(v):
    if isinstance(v, torch.Tensor):
        return (str(v.dtype), v.dim())
    return type(v).__name__


def _probe_key(node: fx.Node, target: str, pipeline: str) -> tuple:
    ins = tuple(_val_key(n.meta.get("val")) for n in node.all_input_nodes)
    return (op_name(node), ins, target, pipeline)


def _one_node_graph(node: fx.Node) -> fx.GraphModule:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for i, inp in enumerate(node.all_input_nodes):
        val = inp.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise TypeError(f"input {inp.name} of {node.name} is not a tensor ({type(val)})")
        ph = graph.placeholder(f"in{i}")
        ph.meta["val"] = val
        env[inp] = ph
    new = graph.node_copy(node, lambda n: env[n])
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        outs = []
        for i, v in enumerate(val):
            if isinstance(v, torch.Tensor):
                g = graph.call_function(operator.getitem, (new, i))
                g.meta["val"] = v
                outs.append(g)
        graph.output(tuple(outs))
    else:
        graph.output((new,))
    return fx.GraphModule(torch.nn.Module(), graph)


def probe(node: fx.Node, options: CompileOptions, target: str) -> str | None:
    """None when ember compiles `node` alone, else the reason it cannot."""
    from .compile_module import compile_module

    pipeline = default_pipeline(options, target)
    key = _probe_key(node, target, pipeline)
    with _LOCK:
        if key in _VERDICTS:
            return _VERDICTS[key]
    try:
        prep = fx_prep.prepare(_one_node_graph(node))
        if prep.gm is not None:
            compile_module(prep.gm, pipeline)
        verdict = None
    except Exception as err:  # any failure means: not this node through ember
        verdict = describe_error(err)
    with _LOCK:
        _VERDICTS[key] = verdict
    return verdict


class _Support(OperatorSupportBase):
    def __init__(self, unsupported: set[fx.Node]):
        self.unsupported = unsupported

    def is_node_supported(self, submodules, node: fx.Node) -> bool:
        if node.op != "call_function" or node in self.unsupported:
            return False
        if node.target is operator.getitem:
            # A getitem belongs with its producer: a tuple cannot cross into a submodule.
            return node.args[0] not in self.unsupported
        return True


class _Compiled(torch.nn.Module):
    """Holds an EmberGraph where the split graph expects a submodule."""

    def __init__(self, graph):
        super().__init__()
        self.graph_fn = graph

    def forward(self, *args):
        return self.graph_fn(*args)


# ATen ops that ember calls as library kernels, as Inductor does with its fallback kernels:
# cuDNN/oneDNN/flash own these, and generated code would only be slower. Where their arguments
# and results are plain tensors they are calls inside the compiled program
# (library_calls.py); otherwise the graph is split around them. Either way they are reported as
# library calls, not fallbacks.
LIBRARY_OPS = frozenset({
    "aten.convolution_backward.default",
    # where frontend/pool_decomp.py leaves them (windows over 64 elements, symbolic sizes)
    "aten.max_pool2d_with_indices.default",
    "aten.max_pool2d_with_indices_backward.default",
    # pooling that torch-mlir does not lower (3-d average pooling, the backward of average
    # and adaptive pooling, 3-d max pooling's backward), or lowers to loops ember's Triton
    # lowering cannot schedule (windows of varying size: adaptive average pooling whose sizes
    # do not divide, see backend._adaptive_avg_pool; max with its index: adaptive max pooling
    # and 3-d max pooling with indices)
    "aten._adaptive_avg_pool2d.default",
    "aten.adaptive_max_pool2d.default",
    "aten.max_pool3d_with_indices.default",
    "aten.avg_pool3d.default",
    "aten.avg_pool2d_backward.default",
    "aten.avg_pool3d_backward.default",
    "aten._adaptive_avg_pool2d_backward.default",
    "aten._adaptive_avg_pool3d.default",
    "aten._adaptive_avg_pool3d_backward.default",
    "aten.adaptive_max_pool2d_backward.default",
    "aten.adaptive_max_pool3d.default",
    "aten.adaptive_max_pool3d_backward.default",
    "aten.max_pool3d_with_indices_backward.default",
    # the backward of replicate padding (Conv2d(padding_mode="replicate"))
    "aten.replication_pad1d_backward.default",
    "aten.replication_pad2d_backward.default",
    "aten.replication_pad3d_backward.default",
    "aten.index_put.default",          # scatter(-add): embedding backward
    "aten.cumsum.default",             # scans (position ids from an attention mask)
    # bf16/f16 layer norm and erf-GELU with exact_low_precision (otherwise, and in f32, they
    # are decomposed before they get here; see backend.decomposition_table)
    "aten.native_layer_norm.default",
    "aten.gelu.default",
    # random ops (dropout, stochastic depth): torch's own generator, in program order, gives
    # eager's random numbers exactly
    "aten.bernoulli.p", "aten.bernoulli.default", "aten.bernoulli.Tensor",
    "aten.native_dropout.default", "aten.rand_like.default", "aten.randn_like.default",
    "aten.randint_like.default", "aten.randint_like.low_dtype",
    # Ops torch-mlir has no lowering for (or lowers to `tm_tensor` sorts, scans and scatters
    # that no ember kernel can hold), which no fused kernel would speed up: Inductor too calls
    # ATen for sorts, scatters with a reduction and the linear-algebra decompositions. Some
    # of their backward graphs crash torch-mlir's lowering in native code (a 1-d
    # `scatter.src`: SIGSEGV), so they must never reach it.
    # sorting, selection, scans
    "aten.sort.default", "aten.sort.stable", "aten.topk.default", "aten.kthvalue.default",
    "aten.mode.default", "aten.median.default", "aten.median.dim", "aten.nanmedian.default",
    "aten.nanmedian.dim", "aten.cummax.default", "aten.cummin.default", "aten.cumprod.default",
    "aten.logcumsumexp.default", "aten.searchsorted.Tensor", "aten.bucketize.Tensor",
    "aten.histc.default",
    # scatters (the backward of gathers, sorts and selections)
    "aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce", "aten.scatter.value_reduce",
    "aten.scatter_add.default", "aten.scatter_reduce.two", "aten.index_reduce.default",
    "aten.masked_scatter.default", "aten.masked_scatter_backward.default",
    "aten.diagonal_scatter.default", "aten.put.default",
    # linear algebra: LAPACK / cuSOLVER
    "aten._linalg_svd.default", "aten._linalg_eigh.default", "aten.linalg_inv_ex.default",
    "aten._linalg_det.default", "aten._linalg_slogdet.default", "aten.linalg_lu.default",
    "aten.linalg_lu_factor_ex.default", "aten.linalg_lu_solve.default", "aten.lu_unpack.default",
    "aten.linalg_solve_triangular.default", "aten._linalg_solve_ex.default",
    "aten.linalg_cholesky_ex.default", "aten.cholesky.default", "aten.cholesky_inverse.default",
    "aten.cholesky_solve.default", "aten.linalg_qr.default", "aten.geqrf.default",
    "aten.ormqr.default", "aten.linalg_householder_product.default",
    "aten.linalg_ldl_factor_ex.default", "aten.linalg_ldl_solve.default",
    "aten.linalg_matrix_exp.default", "aten.triangular_solve.default",
    "aten.linalg_pinv.atol_rtol_tensor",
    # a uint64 result (torch-mlir has no unsigned 64-bit type: "'torch.uint64'" at import)
    "aten.hash_tensor.default",
    # segment reductions, embedding bags, distances, sampling
    "aten.segment_reduce.default", "aten._segment_reduce_backward.default",
    "aten._embedding_bag.default", "aten._embedding_bag_forward_only.default",
    "aten._embedding_bag_backward.default", "aten._embedding_bag_dense_backward.default",
    "aten._embedding_bag_per_sample_weights_backward.default",
    "aten._cdist_forward.default", "aten._cdist_backward.default",
    "aten._pdist_forward.default", "aten._pdist_backward.default",
    "aten.grid_sampler_2d_backward.default", "aten.grid_sampler_3d.default",
    "aten.grid_sampler_3d_backward.default",
    "aten._upsample_bilinear2d_aa.default", "aten._upsample_bilinear2d_aa_backward.default",
    # attention: flash / memory-efficient / cuDNN kernels (and their backward)
    "aten.scaled_dot_product_attention.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_flash_attention_backward.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_efficient_attention_backward.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "aten._scaled_dot_product_cudnn_attention_backward.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
}) | frozenset(
    # --- special functions (helper `special`) ---------------------------------------------
    # Those not decomposed into fusible code (frontend/special_decomp.py), or only in part
    # (polygamma of order >= 2: a Hurwitz zeta): their algorithms loop a data-dependent number
    # of times (igamma's series and continued fraction, zeta's sum for negative arguments, the
    # polynomials' recurrences of tensor length) or need long coefficient tables (Bessel J/Y/K,
    # Airy); eager's kernel as one call inside the program (Inductor too calls ATen for some,
    # libdevice routines for others). Every overload but `out`.
    f"aten.{packet}.{overload}"
    for packet in (
        "polygamma", "special_zeta", "igamma", "igammac", "frexp", "nextafter",
        "special_airy_ai", "special_bessel_j0", "special_bessel_j1", "special_bessel_y0",
        "special_bessel_y1", "special_modified_bessel_i0", "special_modified_bessel_i1",
        "special_modified_bessel_k0", "special_modified_bessel_k1",
        "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1",
        "special_erfcx", "special_ndtri", "special_log_ndtr",
        "special_chebyshev_polynomial_t", "special_chebyshev_polynomial_u",
        "special_chebyshev_polynomial_v", "special_chebyshev_polynomial_w",
        "special_shifted_chebyshev_polynomial_t", "special_shifted_chebyshev_polynomial_u",
        "special_shifted_chebyshev_polynomial_v", "special_shifted_chebyshev_polynomial_w",
        "special_hermite_polynomial_h", "special_hermite_polynomial_he",
        "special_laguerre_polynomial_l", "special_legendre_polynomial_p",
        # those special_decomp.py decomposes, where it does not (NotImplemented)
        "lgamma", "digamma", "erfinv", "erfc", "i0", "special_i0e", "special_i1",
        "special_i1e", "special_spherical_bessel_j0", "hypot", "copysign", "signbit",
        # histograms: a scatter-add into data-dependent bins (as histc, above)
        "histogram", "_histogramdd_bin_edges", "_histogramdd_from_bin_cts",
        "_histogramdd_from_bin_tensors")
    for overload in getattr(torch.ops.aten, packet).overloads() if "out" not in overload
    # --- end of special functions -----------------------------------------------------------
)


def _conv_needs_library(node: fx.Node) -> bool:
    """A convolution that torch-mlir does not lower to one named linalg conv op (which
    ember-fuse turns into an `aten.convolution` extern, passes/externs.py): transposed ones
    (lowered to a scatter into zeros and a flipped-weight conv over the 2^d times larger
    input) and grouped 3-d ones (a generic, or not at all)."""
    args = dict(zip(("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
                     "output_padding", "groups"), node.args))
    args.update(node.kwargs)
    weight = getattr(args.get("weight"), "meta", {}).get("val")
    rank = weight.dim() if isinstance(weight, torch.Tensor) else 0
    return bool(args.get("transposed")) or rank not in (3, 4, 5) or (
        rank == 5 and args.get("groups", 1) != 1)


def _narrow(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype in (torch.bfloat16, torch.float16)


# A product of bf16/f16 values on the CPU: eager's CPU kernel multiplies in the 16-bit type,
# rounding after each product (an intermediate past 65504 is inf, even where the whole product
# is finite: fuzz seed 22 index 729), in its own order; the C++ kernel multiplies in f32. As a
# library call, eager's kernel computes it, bit for bit. (Eager's CUDA kernel accumulates in
# f32, as the Triton kernel does.)
_CPU_NARROW_LIBRARY = ("aten.prod.default", "aten.prod.dim_int")


def _narrow_input(node: fx.Node) -> bool:
    x = node.args[0] if node.args else None
    val = getattr(x, "meta", {}).get("val")
    return isinstance(val, torch.Tensor) and val.dtype in (torch.bfloat16, torch.float16)


# Custom ops that torch itself registers through torch.library (`torch_nn::` holds the chunked
# `linear_cross_entropy`): part of PyTorch's operator surface (op_db tests them), kernels of
# ATen ops run from Python, and nothing torch-mlir can import ("failed to legalize operation
# 'torch.operator'"). Like ATen's library ops (and as Inductor calls them, as extern kernels),
# they are calls inside the program, not fallbacks. A user's own custom op is called inside the
# program too where it can be (`can_call`), but reported as a fallback: ember cannot compile it.
_TORCH_CUSTOM_NAMESPACES = frozenset({"torch_nn"})


def _is_torch_custom_op(node: fx.Node) -> bool:
    target = node.target
    return (isinstance(target, torch._ops.OpOverload)
            and target.namespace in _TORCH_CUSTOM_NAMESPACES and can_call(node))


def is_library_node(node: fx.Node, target: str | None = None) -> bool:
    if node.op != "call_function":
        return False
    if is_complex_library_node(node):       # FFTs, ops on complex values (complex_values.py)
        return True
    if _is_torch_custom_op(node):
        return True
    name = op_name(node)
    if name == "aten.convolution.default":
        return _conv_needs_library(node)
    if name == "aten.avg_pool2d.default" and _narrow(node):
        # torch-mlir's sum pooling rounds the window sum to bf16/f16 before the division;
        # eager's kernel divides the f32 sum and rounds once
        return True
    if name == "aten.grid_sampler_2d.default" and _narrow(node):
        return True     # kept whole for bf16/f16 (backend.decomposition_table)
    if name == "aten.addbmm.default" and _narrow(node):
        # torch-mlir lowers addbmm (an mm of the batches laid side by side) for f32 only; for
        # bf16/f16 it fails to legalize. Eager's kernel adds the batches' products one by one.
        return True
    if target == "cpu" and name in _CPU_NARROW_LIBRARY and _narrow_input(node):
        return True
    if name in LIBRARY_OPS:
        return True
    # A compute op fold_zero_size kept on a tensor without elements (it reads integer indices
    # that eager validates: a gather or an upsampling's index from an empty source): eager's
    # kernel inside the program, as torch-mlir cannot import it (importer.refuse_native_crashes).
    return touches_empty(node) and can_call(node)


def library_nodes(gm: fx.GraphModule, target: str | None = None) -> set[fx.Node]:
    """The nodes that run as eager's kernels inside the program (`target`: what the graph is
    compiled for; some ops are library calls on one target only)."""
    return {n for n in gm.graph.nodes if is_library_node(n, target)}


def _is_view(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None)


def compute_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The nodes that do work: calls other than getitems and views."""
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and n.target is not operator.getitem and not _is_view(n)]


def _foreign(node: fx.Node) -> bool:
    """An op outside ATen and prims that is not one of torch's own library ops (a user's
    custom op): torch-mlir imports it as `torch.operator`, which never legalizes."""
    target = node.target
    return (isinstance(target, torch._ops.OpOverload)
            and target.namespace not in ("aten", "prims")
            and target.namespace not in _TORCH_CUSTOM_NAMESPACES)


def known_all_eager(gm: fx.GraphModule, options: CompileOptions,
                    target: str) -> dict[fx.Node, str] | None:
    """{node: reason} when it is known before any call that no op of `gm` compiles: every
    compute node is either an op torch-mlir cannot import (`_foreign`, its probe confirms) or
    a library node, and at least one is foreign. That is the graph `EmberGraph` would run
    wholly in eager torch at its first call ("no op of the graph compiles"), decided from the
    ops alone, so that the backend can hand Dynamo its own graph as `backend="eager"` does.
    None otherwise (a graph with any op ember might compile is left to the first call)."""
    nodes = compute_nodes(gm)
    foreign = [n for n in nodes if _foreign(n)]
    if not foreign or any(not _foreign(n) and not is_library_node(n, target) for n in nodes):
        return None
    reasons = {}
    for node in foreign:
        why = probe(node, options, target)
        if why is None:
            return None
        reasons[node] = why
    return reasons


def blame(gm: fx.GraphModule, options: CompileOptions, target: str,
          exclude=()) -> dict[fx.Node, str]:
    """{node: reason} for each node of `gm` (other than `exclude`) that ember cannot compile."""
    reasons = {}
    for node in gm.graph.nodes:
        if (node.op == "call_function" and node.target is not operator.getitem
                and node not in exclude):
            why = probe(node, options, target)
            if why is not None:
                reasons[node] = why
    return reasons


def _round_trips(value) -> bool:
    """Whether an argument survives the trip through an MLIR attribute to the runtime's call
    (a device would come back as a string)."""
    if value is None or isinstance(value, (bool, str, float)):
        return True
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return True     # as "torch.float32", read back by runtime/externs.resolve_library
    if isinstance(value, int):
        return -2**63 <= value < 2**63
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (bool, float)) or (isinstance(v, int) and _round_trips(v))
                   for v in value)
    return False


def can_call(node: fx.Node) -> bool:
    """Whether `node` can run as an ATen call inside the compiled program: plain tensors in and
    out (library_calls.outline_blocker), static result shapes, arguments that survive the
    attribute round trip, and no mutation or aliasing (the runtime's buffers are not the
    tensors eager would have mutated, and an aliasing result would outlive the arena slot
    it points into)."""
    from .library_calls import _split_args, can_outline
    if not isinstance(node.target, torch._ops.OpOverload) or not can_outline(node):
        return False
    schema = node.target._schema
    if any(a.alias_info is not None for a in schema.arguments) or \
            any(r.alias_info is not None for r in schema.returns):
        return False
    _, params = _split_args(node)
    if not all(_round_trips(v) for k, v in params.items() if k != "none_args"):
        return False
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else [val]
    return all(not isinstance(v, torch.Tensor) or all(isinstance(d, int) for d in v.shape)
               for v in vals)


def partition_graph(gm: fx.GraphModule, split: set[fx.Node], options: CompileOptions,
                    graph_id: str, EmberGraph, decompositions=None,
                    kind: str = "graph") -> fx.GraphModule:
    """`gm` split around the nodes `split` (run by torch): the other nodes are grouped into
    submodules, each an `EmberGraph` (compile.EmberGraph, passed in: compile.py imports this
    module) compiled lazily (one that needs no split of its own: any node ember cannot compile
    in it becomes a call inside its program)."""

    partitioner = CapabilityBasedPartitioner(gm, _Support(set(split)),
                                             allows_single_node_partition=True)
    module = partitioner.fuse_partitions(partitioner.propose_partitions())
    for i, node in enumerate(n for n in module.graph.nodes if n.op == "call_module"):
        sub = module.get_submodule(node.target)
        setattr(module, node.target, _Compiled(EmberGraph(
            sub, options, kind=kind, graph_id=f"{graph_id}.p{i}", allow_partition=False,
            decompositions=decompositions)))
    module.recompile()
    return module
