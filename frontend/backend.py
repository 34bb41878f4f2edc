"""The `torch.compile` backend: AOTAutograd hands ember ATen-level forward and backward graphs
(parameters are graph inputs, never constants), each becomes an `EmberGraph`."""
from __future__ import annotations

import functools

import torch

from .compile import EmberGraph
from .options import CompileOptions
from .report import new_graph_id

# Backward (and a few forward) ops torch-mlir's table leaves alone; torch's core-ATen
# decompositions of them import cleanly, whereas their composite forms do not always lower.
_EXTRA = ("max_pool2d_with_indices_backward", "avg_pool2d_backward", "_adaptive_avg_pool2d_backward",
          "native_batch_norm", "native_batch_norm_backward", "native_layer_norm_backward",
          "_softmax_backward_data", "_log_softmax_backward_data", "gelu_backward",
          "threshold_backward", "embedding_dense_backward", "silu_backward", "sigmoid_backward",
          "tanh_backward", "nll_loss_backward", "nll_loss_forward", "hardtanh_backward",
          "leaky_relu_backward", "mse_loss_backward", "_to_copy", "clone")
# Left to torch-mlir's own lowering (its decomposition of convolution_backward is conv ops), or
# kept whole: attention traces to the fused kernel torch picks (flash, memory-efficient,
# cuDNN; flash-for-CPU), which runs as a library call, instead of a softmax(QK^T)V in
# unfused-precision math that also rounds the probabilities to bf16 where eager does not.
_KEEP = ("convolution_backward", "convolution", "scaled_dot_product_attention",
         "_scaled_dot_product_flash_attention_for_cpu")


def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    """var_mean in the input's computation type (f32 for f32/bf16/f16), two-pass as eager's
    kernels are accurate: torch-mlir's own lowering accumulates in f64, which GPUs run slowly
    and eager never does."""
    dims = list(range(x.dim())) if dim is None else [d % max(x.dim(), 1) for d in dim]
    n = 1
    for d in dims:
        n *= x.shape[d]
    c = 1 if correction is None else correction
    xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    mean = xf.sum(dims, keepdim=True) / n
    var = (xf - mean).square().sum(dims, keepdim=True) / max(n - c, 0)
    if not keepdim:
        mean, var = mean.squeeze(dims), var.squeeze(dims)
    return var.to(x.dtype), mean.to(x.dtype)


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    from torch._decomp import core_aten_decompositions
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = dict(get_decomposition_table())
    core = core_aten_decompositions()
    aten = torch.ops.aten
    for name in _EXTRA:
        packet = getattr(aten, name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if op not in table and op in core:
                table[op] = core[op]
    table[aten.var_mean.correction] = _var_mean
    for name in _KEEP:
        packet = getattr(aten, name, None)
        for overload in (packet.overloads() if packet is not None else ()):
            table.pop(getattr(packet, overload), None)
    return table


def ember_backend(gm: torch.fx.GraphModule, example_inputs, options=None, **kwargs):
    """`torch.compile(model, backend="ember", options={...})`."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    if kwargs.pop("mode", None) not in (None, "default"):
        raise ValueError("ember: torch.compile(mode=...) is not supported; use options={...}")
    if kwargs:
        raise TypeError(f"ember_backend: unexpected arguments {sorted(kwargs)}")
    opts = CompileOptions.from_user(options)
    decomps = decomposition_table()
    base = new_graph_id("dynamo")

    def compiler(kind):
        def compile_graph(fx_gm, inputs):
            graph = EmberGraph(fx_gm, opts, kind=kind, decompositions=decomps,
                               graph_id=f"{base}-{kind}")
            boxed = make_boxed_func(graph)  # AOTAutograd's calling convention: one list
            boxed.ember_graph = graph       # reports: boxed.ember_graph.reports
            return boxed
        return compile_graph

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=compiler("inference"), decompositions=decomps)
    return backend(gm, example_inputs)
