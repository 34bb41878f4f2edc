"""The `torch.compile` backend: AOTAutograd hands ember ATen-level forward and backward graphs
(parameters are graph inputs, never constants), each becomes an `EmberGraph`."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
from typing import Any

import torch

from .attention_masks import drop_visible_attention_masks
from . import (build_records, eager_rejects, inference_cache, saved_clones, saved_layouts,
               training_cache)
from .compile import donated_backward_inputs, gc_paused, saved_output_slice, EmberGraph
from .decomp_layouts import keep_layout
from .eager_semantics import int_pow, narrow_pow_exponent, table as eager_semantics_table
from .effects import effectful_checks, lower_effect_tokens
from .foreach_decomp import foreach_decompositions
from .roll_decomp import roll_decompositions
from .pointwise_decomp import pointwise_decompositions
from .pool_decomp import pool_decompositions
from .recompute_saved import partition_recomputing_saved
from .scatter_decomp import dense_index_put_decompositions, scatter_decompositions
from .special_decomp import special_decompositions
from .tensor_scalars import specialize_tensor_scalars
from .transformer_decomp import transformer_decompositions
from .zero_size import keep_indexing_whole
from .reduction_decomp import gpu_table as gpu_reduction_table
from .reduction_decomp import table as reduction_table
from .options import CompileOptions, recompute_saved_on, resolve_target
from .report import describe_error, new_graph_id, record, warn_once

# Backward (and a few forward) ops torch-mlir's table leaves alone; torch's core-ATen
# decompositions of them import cleanly, whereas their composite forms do not always lower.
_EXTRA = ("max_pool2d_with_indices_backward", "avg_pool2d_backward", "_adaptive_avg_pool2d_backward",
          "native_batch_norm", "native_batch_norm_backward", "native_layer_norm_backward",
          "_softmax_backward_data", "_log_softmax_backward_data", "gelu_backward",
          "threshold_backward", "embedding_dense_backward", "silu_backward", "sigmoid_backward",
          "tanh_backward", "nll_loss_backward", "nll_loss_forward", "hardtanh_backward",
          "leaky_relu_backward", "mse_loss_backward", "_to_copy", "clone",
          # data movement torch-mlir lowers to slices and concatenations no kernel can hold (or
          # not at all): as gathers and selects they fuse
          "block_diag", "eye", "narrow_copy")
# Composite ops torch-mlir has no lowering for, whose reference decompositions (torch._decomp's
# full table, not the core one) are plain ATen ops that it lowers.
_EXTRA_REFS = ("addmv", "dist", "diag_embed",
               # the out-of-place copies of views (functionalization's *_copy ops): the view,
               # then a clone
               "as_strided_copy", "narrow_copy", "permute_copy", "unbind_copy", "view_copy",
               # training-mode batch norm with its running statistics' update
               "_batch_norm_with_update_functional", "batch_norm_backward")
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


_NARROW = (torch.bfloat16, torch.float16)
_M_SQRT1_2 = 0.70710678118654752440
_GELU_TANH_BETA = 1.41421356237309504880 * 1.12837916709551257390 * 0.5   # sqrt(2/pi)


def _gelu(x, approximate="none"):
    """GELU with eager's operations in eager's order (its CUDA and CPU kernels), in the
    computation type (f32 for bf16/f16) and rounded once: x * 0.5 * (1 + erf(x * M_SQRT1_2)),
    or 0.5 * x * (1 + tanh(beta * (x + 0.044715 * x^3))). torch-mlir's own lowering divides
    by sqrt(2), which rounds differently from eager's multiplication now and then."""
    xf = x.float() if x.dtype in _NARROW else x
    if approximate == "tanh":
        cube = xf * xf * xf
        y = 0.5 * xf * (1 + torch.tanh(_GELU_TANH_BETA * (xf + 0.044715 * cube)))
    else:
        y = xf * 0.5 * (1 + torch.erf(xf * _M_SQRT1_2))
    return y.to(x.dtype)


def _gelu_keep_erf_narrow(x, approximate="none"):
    """`_gelu`, except that the erf form on bf16/f16 stays eager's kernel (a library call):
    CUDA's erff, which eager's kernel is built with, and the libdevice erf a Triton kernel links
    differ in the last place for ~12% of inputs (measured on an H200), and 1 + erf(x) near
    x = -3 magnifies that into a different bf16 result for 11 of the 65280 finite inputs."""
    if x.dtype in _NARROW and approximate == "none":
        return NotImplemented
    return _gelu(x, approximate)


def _pow_scalar(x, exponent):
    """pow(float tensor, number) as eager's kernels compute it (aten's pow_tensor_scalar), for
    both targets in one place:

    * 0.5, -0.5 and -1 are sqrt, rsqrt and reciprocal (f32, f64 and bf16; f16 too on a GPU):
      sqrt(-0.0) is -0.0 and sqrt(-inf) NaN where pow gives +0.0 and +inf. eager's CPU f16
      kernel is pow itself, so f16 on the CPU keeps the op (torch.pow(half([-0.]), 0.5) is 0.);
    * 2, 3 and -2 are x * x, x * x * x and 1 / (x * x) in the tensor's type, rounding after each
      product for bf16 (and f16 on a GPU); eager's CPU f16 kernel is pow in f32 rounded once,
      which for 3 is (x * x * x) in f32 (x * x is exact), rounded to f16 once.

    Anything else is left alone (NotImplemented: the op stays for the next decomposition or
    torch-mlir), the number first rounded to a bf16/f16 tensor's type as eager reads it."""
    rounded = narrow_pow_exponent(x, exponent)   # the number as eager's kernel reads it
    if rounded is not None:
        return rounded
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or \
            isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        return int_pow(x, exponent)     # integer tensors (eager_semantics)
    cpu_half = x.dtype == torch.float16 and x.device.type == "cpu"
    if exponent in (0.5, -0.5, -1) and not cpu_half:
        return {0.5: torch.sqrt, -0.5: torch.rsqrt, -1: torch.reciprocal}[exponent](x)
    if exponent in (2, 3, -2):
        if cpu_half and exponent == 3:
            xf = x.float()
            return (xf * xf * xf).to(x.dtype)
        if cpu_half and exponent == -2:
            return NotImplemented           # pow in f32, rounded once
        y = x * x
        return y * x if exponent == 3 else y if exponent == 2 else torch.reciprocal(y)
    return NotImplemented


def _keep_narrow(decomp):
    """`decomp` for f32/f64 inputs; bf16/f16 inputs keep the op (eager's own kernel runs it as a
    library call, so its rounding is eager's bit for bit)."""
    def run(x, *args, **kwargs):
        if x.dtype in _NARROW:
            return NotImplemented
        return decomp(x, *args, **kwargs)
    return run


def _adaptive_avg_pool(decomp):
    """`decomp` where the input's sizes divide the output's (it is then an average pooling
    with fixed windows, or a mean); otherwise the op stays whole, a library call: windows of
    varying size are loops whose bounds depend on the output index, which the Triton lowering
    cannot schedule. A symbolic size is not tested (that would add a guard, and Dynamo would
    compile again for sizes that do not divide): the op stays whole unless the output is 1x1,
    a mean for every size."""
    def run(x, output_size):
        sizes = list(x.shape[-len(output_size):])
        if all(o == 1 for o in output_size) or (
                all(isinstance(i, int) for i in sizes)
                and all(o > 0 and i % o == 0 for i, o in zip(sizes, output_size))):
            return decomp(x, output_size)
        return NotImplemented
    return run


def _core_decompositions() -> dict:
    """torch's core ATen decompositions that are registered functions (not the
    CompositeImplicitAutograd ops' own `decompose`, which `core_aten_decompositions()` adds by
    walking every op namespace: 0.6 s at each process's first compile, for entries the
    `_EXTRA` ops never take)."""
    import torch._decomp as decomp
    post_autograd = getattr(decomp, "_core_aten_decompositions_post_autograd", None)
    return post_autograd() if post_autograd is not None else decomp.core_aten_decompositions()


@functools.lru_cache(maxsize=None)     # four variants at most
def decomposition_table(exact_low_precision: bool = True, gpu: bool = False) -> dict:
    """The ATen decompositions applied while AOTAutograd traces. With `exact_low_precision`,
    layer norm and erf-GELU of bf16/f16 tensors are not decomposed: they run as eager's kernels
    (library calls), since no fused reduction reproduces eager's summation order bit for bit and
    erf's last place depends on the CUDA math library eager was built with. `gpu`: for a GPU
    code generator (scatter_decomp.dense_index_put_decompositions)."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = dict(get_decomposition_table())
    core = _core_decompositions()
    aten = torch.ops.aten
    for name in _EXTRA:
        packet = getattr(aten, name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if op not in table and op in core:
                table[op] = core[op]
    from torch._decomp import decomposition_table as refs
    for name in _EXTRA_REFS:
        packet = getattr(aten, name, None)
        for overload in (packet.overloads() if packet is not None else ()):
            op = getattr(packet, overload)
            if op not in table and op in refs:
                table[op] = refs[op]
    table.update(foreach_decompositions())     # optimizer steps (AdamW, SGD) fuse
    table.update(scatter_decompositions())     # slicing backward: concatenations that fuse
    table.update(roll_decompositions())        # shifted windows (swin): slices + concat
    table.update(pointwise_decompositions())   # fmax/fmin, roll
    table.update(special_decompositions())     # trigamma, i0e, hypot, ...: they fuse
    table.update(transformer_decompositions())  # nn.TransformerEncoderLayer's fast path
    table.update(pool_decompositions(gpu))     # max pooling with indices and its backward
    # lerp's reference decomposes into prims.fma, which torch-mlir cannot lower; a product and
    # a sum differ from the fused form by one rounding (and code generators may contract it).
    fma = getattr(torch.ops.prims, "fma", None)   # registered where Inductor's prims are loaded
    if fma is not None:
        table[fma.default] = lambda a, b, c: a * b + c
    table[aten.var_mean.correction] = _var_mean
    table[aten.gelu.default] = _gelu
    table[aten.pow.Tensor_Scalar] = _pow_scalar
    table.update(eager_semantics_table())   # NaN propagation, integer floor division
    table.update(reduction_table())         # 16-bit mean in f32; as_strided reshapes
    table[aten._adaptive_avg_pool2d.default] = _adaptive_avg_pool(
        table[aten._adaptive_avg_pool2d.default])
    if exact_low_precision:
        table[aten.native_layer_norm.default] = _keep_narrow(table[aten.native_layer_norm.default])
        table[aten.gelu.default] = _gelu_keep_erf_narrow
        # eager's bf16/f16 grid sampler computes the sampling positions in the 16-bit type
        # (the f32 decomposition differed by 5e-2 in the op_db sweep): its kernel, a library call
        table[aten.grid_sampler_2d.default] = _keep_narrow(table[aten.grid_sampler_2d.default])
    for name in _KEEP:
        packet = getattr(aten, name, None)
        for overload in (packet.overloads() if packet is not None else ()):
            table.pop(getattr(packet, overload), None)
    if gpu:     # an accumulating index_put as a reduction (its GPU kernel sorts first)
        table.update(dense_index_put_decompositions())
        table.update(gpu_reduction_table())     # a convolution's bias gradient as a sum
    # An op eager's kernel rejects for its dtypes is not decomposed (eager_rejects.guard): it
    # stays in the graph, which then runs eagerly and raises eager's error. A decomposed op's
    # results keep the op's own layout (decomp_layouts).
    # An op reading indices next to a tensor without elements is not decomposed either
    # (zero_size.keep_indexing_whole): eager's kernel, a library call, decides whether it raises.
    return {op: eager_rejects.guard(op, keep_layout(op, keep_indexing_whole(op, fn)))
            for op, fn in table.items()}


_MATMULS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
            torch.ops.aten.baddbmm.default)


def _first_backward_casts(graph, casts) -> set:
    """Those of `casts` that the backward's first matmul reads (through views): the last
    layer's weights. A recomputed copy of one would be made right there, at the start of
    the backward, with every saved activation still alive, the step's peak; saved, it is
    alive at that point all the same (made at the end of the forward): saving it costs no
    peak memory and spares the backward a cast kernel."""
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    backward = set()
    for n in nodes:
        if (n.op == "placeholder" and str(n.target).startswith("tangents")) or \
                any(a in backward for a in n.all_input_nodes):
            backward.add(n)
    first_mm = next((n for n in nodes if n in backward and n.target in _MATMULS), None)
    if first_mm is None:
        return set()
    keep = set()
    for cast in casts:
        stack, reads = [cast], []
        while stack:
            n = stack.pop()
            for u in n.users:
                schema = getattr(u.target, "_schema", None)
                aliasing = schema is not None and schema.returns and \
                    schema.returns[0].alias_info is not None
                if aliasing and u not in backward:
                    stack.append(u)
                elif aliasing:
                    stack.append(u)
                    reads.append(u)
                else:
                    reads.append(u)
        if first_mm in reads:
            keep.add(cast)
    return keep


def _convolution_weight_casts(casts) -> set:
    """The casts a convolution reads as its weight (a conv weight's bf16 copy): saved for the backward, not
    recomputed there. A convolution's weight is small beside the activation it saves (resnet18
    at batch 32: 22 MB of bf16 weights against ~0.9 GB of activations), and recomputing it was
    a launch per convolution in the backward (efficientnet_b0: 81 of its 471, each reading the
    f32 weight again) where the forward had written the same copy already."""
    conv = torch.ops.aten.convolution.default
    return {c for c in casts
            if any(u.target is conv and len(u.args) > 1 and u.args[1] is c for u in c.users)}


def _reading_mutated_inputs(graph) -> list:
    """The forward's nodes that read an input the forward mutates (a buffer's `add_`: the
    joint graph's `copy_` into its placeholder at the end), through views. The backward must
    not recompute them: by then the input holds its new value (torch's own partitioner
    recomputed `cnt + 1` from a buffer `cnt` the forward had already set to that value: the
    gradients were 1.5x eager's, Inductor's and aot_eager's alike). Saved instead."""
    copy_ = torch.ops.aten.copy_.default
    mutated = {n.args[0] for n in graph.nodes
               if n.op == "call_function" and n.target is copy_ and n.args
               and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"}
    out, todo, seen = [], [u for p in mutated for u in p.users], set()
    while todo:
        node = todo.pop()
        if node in seen or node.op != "call_function" or node.target is copy_:
            continue
        seen.add(node)
        out.append(node)
        schema = getattr(node.target, "_schema", None)
        if schema is not None and schema.returns and schema.returns[0].alias_info is not None:
            todo.extend(node.users)     # a view of the input: its readers read the input too
    return out


def _partition_recomputing_casts(joint_module, joint_inputs, *, recompute_saved=False,
                                  **kwargs):
    """AOTAutograd's min-cut partitioner (Inductor's), with each dtype cast of a forward
    input (autocast's bf16 copy of a weight) recomputed in the backward instead of saved: the
    input is alive anyway, and the saved copies were most of what a transformer's forward
    saves (BERT-base: ~210 of 338 MB at 4x128). The partitioner bans their recomputation
    because a matmul consumes them (materialized in the backward); a cast costs one read.
    Except the casts the backward's first matmul reads (`_first_backward_casts`): saved, as
    the partitioner chooses, at no cost in peak memory (the MLP block: one launch fewer); and
    the casts a convolution reads (`_convolution_weight_casts`), saved too. With
    `recompute_saved`, saved pointwise functions of saved values are recomputed as well
    (frontend/recompute_saved.py). Never recomputed: what the forward computes from an input it
    mutates (`_reading_mutated_inputs`)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.utils.checkpoint import CheckpointPolicy
    casts = [node for node in joint_module.graph.nodes
             if node.op == "call_function"
             and node.target is torch.ops.prims.convert_element_type.default
             and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder"
             and str(node.args[0].target).startswith("primals")
             and "recompute" not in node.meta]
    saved = _first_backward_casts(joint_module.graph, casts) | _convolution_weight_casts(casts)
    for node in casts:
        if node not in saved:
            node.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
    for node in _reading_mutated_inputs(joint_module.graph):
        node.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    if not recompute_saved:
        return min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)
    return partition_recomputing_saved(min_cut_rematerialization_partition, joint_module,
                                       joint_inputs, **kwargs)


def _tangent_inputs(fx_gm) -> frozenset[int]:
    """The placeholders of a backward graph that are gradients of the forward's outputs
    (AOTAutograd's `tangents_*`)."""
    names = [n.name for n in fx_gm.graph.nodes if n.op == "placeholder"]
    return frozenset(i for i, name in enumerate(names) if name.startswith("tangents"))


def _donating_tangents(graph, tangents: list[int]):
    """A boxed backward (one list of inputs, as AOTAutograd calls it) that donates its
    gradient inputs where nothing but that list holds them (the autograd engine hands a
    gradient it made, as the bf16 logits' gradient of `logits.float()`, to the backward and
    keeps no reference): the program may then place its values in their memory and frees
    them after their last use, as Inductor's backward drops its arguments, instead of holding
    them to the call's end (Llama bf16 training: the logits' gradient, [B*S, vocab] bf16, was
    alive at the backward's peak). A gradient anything else still references (the caller's
    `backward(gradient=g)`, a retained `.grad`, a view of another tensor) is lent for the
    call only (runtime.executor.BORROWED): its memory is neither reused nor freed."""
    import sys
    from ..runtime.executor import BORROWED
    use = torch._C._storage_Use_Count

    def owned(args, i) -> bool:
        # the list's reference and getrefcount's own; the tensor's storage, and the
        # temporary storage object's
        return (sys.getrefcount(args[i]) == 2 and isinstance(args[i], torch.Tensor)
                and args[i]._base is None and use(args[i].untyped_storage()._cdata) == 2)

    def call(args):
        lent = frozenset(id(args[i]) for i in tangents if i < len(args) and not owned(args, i))
        token = BORROWED.set(lent)
        try:
            return graph(*args)
        finally:
            BORROWED.reset(token)
    call._boxed_call = True
    return call


def _take_facts(graph, kind: str, facts: dict):
    """Gives a training graph what its facts say (those compile_graph finds, which a training
    cache entry and a build record keep): a forward's outputs saved for the backward (lent),
    a backward's gradients (lent) and the inputs it may write over (donated: saved values and
    tangents). Returns the call that donates the tangents where there are any, else None."""
    if kind == "forward" and facts.get("lent") is not None:
        graph.lent_outputs = range(*facts["lent"])
    if kind == "backward" and facts.get("outputs") is not None:
        graph.lent_outputs = range(facts["outputs"])     # gradients
        if "donated" in facts:
            tangents = frozenset(facts.get("tangents", ()))
            graph.donated_inputs = frozenset(facts["donated"]) | tangents
            if tangents:
                return _donating_tangents(graph, sorted(tangents))
    return None


def _warmup_target(device: torch.device) -> str | None:
    """The Triton target ("cuda:90:32") the compile workers warm up for, on an NVIDIA GPU (its
    capability is known once a tensor is on it); None elsewhere (no warm-up)."""
    if getattr(torch.version, "hip", None) or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return f"cuda:{major * 10 + minor}:32"


def _start_compile_workers(opts: CompileOptions, example_inputs) -> None:
    """A graph bound for a GPU on a cold start (Triton's cache empty): the Triton compile
    workers start now (once per process), so that they import while AOTAutograd and the passes
    run (runtime/triton_warm.WorkerPool). With a cache, they start only when a graph has
    something to compile: a warm start starts none, but Triton's key of itself, which every
    first launch's cache lookup needs, is computed in a thread while the graph is traced."""
    if not opts.parallel_compile:
        return
    devices = [x.device for x in example_inputs if isinstance(x, torch.Tensor)]
    if not any(d.type == "cuda" for d in devices):
        return
    from .options import resolve_target
    from ..runtime.env import triton_interpreted
    try:
        if resolve_target(opts.target, devices) in ("cuda", "rocm") and not triton_interpreted():
            from ..runtime.triton_warm import (start_pool, start_triton_key,
                                               triton_cache_is_empty)
            if triton_cache_is_empty():
                start_pool(warmup=_warmup_target(next(d for d in devices if d.type == "cuda")))
            else:
                start_triton_key()
    except Exception:   # noqa: BLE001 -- an optimisation: precompile starts workers itself
        pass


@contextlib.contextmanager
def _efficient_attention_for_training(example_inputs, cudnn: bool = False):
    """Flash attention (and cuDNN's, unless `cudnn`: the `training_cudnn_attention` option)
    off while a graph that needs gradients is traced, so that SDPA traces to cuDNN's or
    memory-efficient attention (or, where neither applies, to the math form, which compiles).
    Measured on the H100 (whisper encoder, bf16 training, whose unmasked, non-causal attention
    eager runs through cuDNN):
    - flash attention's backward graph carries its RNG state as uint64 tensors, which
      torch-mlir cannot import: the whole backward ran eagerly (x0.30 of eager);
    - ember's call of `_scaled_dot_product_cudnn_attention_backward` gave wrong q/k gradients
      (relative error 0.99; its v gradients and the loss were right): cuDNN caches its
      backward graph under q/k/v's layouts only, and ember handed it the attention output
      and its gradient in other layouts than eager's (runtime/externs.py
      `_out_as_forward_made_it` and `_grad_as_traced` hand it eager's now: the whisper
      encoder's gradients match, 2.8e-3 on an H100; the option stays off: Llama's step is
      slower with it);
    - traced to memory-efficient attention, the step compiled and matched eager (2.8e-3).
    Inference graphs and CPU graphs (the flash flag also chooses the CPU's fused kernel) keep
    eager's choice. The settings are restored either way."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    grads = torch.is_grad_enabled() and any(t.requires_grad for t in tensors) \
        and any(t.device.type == "cuda" for t in tensors)    # the flag also picks CPU's kernel
    cuda = torch.backends.cuda
    cudnn_on = getattr(cuda, "cudnn_sdp_enabled", lambda: False)()
    flash = cuda.flash_sdp_enabled()
    if not grads or not ((cudnn_on and not cudnn) or flash):
        yield
        return
    if not cudnn:
        cuda.enable_cudnn_sdp(False)
    cuda.enable_flash_sdp(False)
    try:
        yield
    finally:
        cuda.enable_cudnn_sdp(cudnn_on)
        cuda.enable_flash_sdp(flash)


def _whole_graph_eager(gm: torch.fx.GraphModule, base: str, why: str, warn_key: str):
    """Dynamo's graph itself, run as eager runs it, with one warning (per `warn_key`) and a
    report that names every op of the graph as fallen back (so a test asserting "no fallback"
    sees it)."""
    warn_once(warn_key, f"ember: graph {base} runs in eager torch ({why})")
    ops = sorted({getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
                  if n.op in ("call_function", "call_method", "call_module")}) or ["<graph>"]
    record({"graph_id": base, "target": None, "status": "eager", "eager_fallback_ops": ops,
            "fallback_reasons": {op: why for op in ops}, "error": why})
    return gm.forward


def _dynamo_forward(gm: torch.fx.GraphModule):
    """Dynamo's graph's generated `forward`, what Dynamo itself calls for `backend="eager"`
    (its output_graph recompiles a lazy graph module and takes the real forward). A lazy
    module's `forward` before that is `_lazy_forward`, which calls the module: nn.Module's
    call machinery and GraphModule's wrapper, 3 µs more per call on the CPU machine."""
    from torch.fx._lazy_graph_module import _LazyGraphModule
    if isinstance(gm, _LazyGraphModule):
        _LazyGraphModule.force_recompile(gm)
    return gm.forward


def _known_eager_graph(gm: torch.fx.GraphModule, graph_id: str, target: str,
                       reasons: dict, example_inputs):
    """Dynamo's graph, for a graph none of whose ATen ops compiles (partition.known_all_eager,
    `reasons`): reported and warned about as EmberGraph reports a graph that falls back whole
    at its first call (one warning per op kind), and returned as `backend="eager"` returns
    it, so that every call costs what torch.compile(backend="eager") costs."""
    from .partition import op_name
    names: dict[str, str] = {}
    for node, why in reasons.items():
        names.setdefault(op_name(node), why)
    for op, why in sorted(names.items()):
        warn_once(f"op:{op}", f"ember: {op} runs in eager torch ({why})")
    record({"graph_id": graph_id, "target": target, "status": "eager",
            "input_shapes": [list(t.shape) for t in example_inputs
                             if isinstance(t, torch.Tensor)],
            "num_kernels": 0, "num_externs": 0, "fused_groups": [],
            "eager_fallback_ops": sorted(names), "fallback_reasons": dict(sorted(names.items())),
            "error": "no op of the graph compiles", "dynamo_graph": True})
    return gm.forward


def _aot_wrappers_pass_through(fx_gm: torch.fx.GraphModule, num_inputs: int) -> bool:
    """Whether AOTAutograd's runtime wrappers around this inference graph (being compiled now,
    with no autocast on: AOTAutograd's own check, whose state it hides by now) do nothing but
    turn grad mode off around it: no input mutated, no output aliasing an input or another
    output, no effect tokens, RNG state, tensor subclass or duplicated input, and Dynamo's
    inputs are the graph's own. Read from AOTAutograd's metadata for this graph
    (`TracingContext.fw_metadata`, what Inductor reads too); anything missing or unknown
    means no."""
    try:
        from torch._functorch._aot_autograd.schemas import OutputType
        from torch._guards import TracingContext
        ctx = TracingContext.try_get()
        meta = getattr(ctx, "fw_metadata", None)
        if meta is None:
            return False
        placeholders = sum(1 for n in fx_gm.graph.nodes if n.op == "placeholder")
        if placeholders != num_inputs or len(meta.input_info) != num_inputs:
            return False    # deduplicated inputs, a module's own tensors, tokens, RNG seeds
        if any(i.mutates_data or i.mutates_metadata or getattr(i, "mutates_storage_metadata",
                                                                False)
               for i in meta.input_info):
            return False
        if any(o.output_type != OutputType.non_alias for o in meta.output_info):
            return False
        if meta.num_intermediate_bases or meta.tokens or meta.is_rng_op_functionalized or \
                getattr(meta, "dynamic_outputs", False) or \
                getattr(meta, "grad_enabled_mutation", None) is not None or \
                getattr(meta, "num_graphsafe_rng_states", 0):
            return False
        metas = [*(meta.subclass_inp_meta or ()), *(meta.subclass_fw_graph_out_meta or ())]
        return not any(type(m).__name__ == "SubclassCreationMeta" for m in metas)
    except Exception:   # noqa: BLE001 -- another torch's metadata: keep AOTAutograd's wrappers
        return False


# Guards that cannot make Dynamo trace the frame's code into another graph: on the frame's
# local tensors, their own properties; on globals, the identity of the functions and modules
# the code calls and torch's global state. Any other guard on a local (a closure's function,
# `self` of a module, a flag's value, a length) can: a code object is shared by every
# closure of one `def` and every instance of one module class, and Dynamo skips the code.
_LOCAL_SKIP_GUARDS = frozenset({"TENSOR_MATCH", "NO_TENSOR_ALIASING"})
_GLOBAL_SKIP_GUARDS = frozenset({
    "TYPE_MATCH", "ID_MATCH", "FUNCTION_MATCH", "BUILTIN_MATCH", "CLOSURE_MATCH",
    "MODULE_MATCH", "NOT_PRESENT_IN_GENERIC_DICT", "HASATTR", "SHAPE_ENV",
    "DETERMINISTIC_ALGORITHMS", "GRAD_MODE", "DEFAULT_DEVICE", "GLOBAL_STATE",
    "TORCH_FUNCTION_STATE", "AUTOGRAD_SAVED_TENSORS_HOOKS", "BACKEND_MATCH"})


def _graph_is_whole_frame(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's graph is all of the frame being compiled (it ends at the frame's
    return, not at a graph break) and the frame's code traces to this graph whatever calls
    it: its guards on locals are tensors' (`_LOCAL_SKIP_GUARDS`), the others are on globals
    (`_GLOBAL_SKIP_GUARDS`). Such a frame none of whose ops compiles is skipped by Dynamo from
    then on: what backend="eager" returns would still cost Dynamo's guards and frame on every
    call (12 of the 17 µs it adds to a small call on the CPU machine). A module's forward
    (guards on `self`) or a closure is never skipped. Tensor properties are guarded but not
    told apart: a function that branches on a dtype or shape stays skipped for the other
    branch too (run as eager runs it). Read from Dynamo's own graph and tracing context;
    anything missing means no."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or getattr(reason, "graph_break", True) is not False:
        return False
    try:
        from torch._guards import GuardSource, TracingContext
        outer = (GuardSource.GLOBAL, GuardSource.SHAPE_ENV)
        for g in TracingContext.get().guards_context.dynamo_guards:
            kind = g.create_fn_name()
            if kind not in (_GLOBAL_SKIP_GUARDS if g.source in outer else _LOCAL_SKIP_GUARDS):
                return False
        return True
    except Exception:   # noqa: BLE001 -- another torch's internals: the frame is not skipped
        return False


def _grad_off_call(graph):
    """`graph(*args)` with grad mode off, as AOTAutograd's wrappers of an inference graph
    call it."""
    grad_enabled, set_grad = torch.is_grad_enabled, torch._C._set_grad_enabled

    def direct(*args):
        if not grad_enabled():
            return graph(*args)
        set_grad(False)
        try:
            return graph(*args)
        finally:
            set_grad(True)
    return direct


def _skipping_aot_wrappers(state: dict, aot, graph):
    """The calls of an inference graph whose AOTAutograd wrappers pass it through
    (`_aot_wrappers_pass_through`): the first call goes through them (their first-call work,
    and ember's own: a graph that falls back whole replaces `state["fn"]`), later ones call
    the graph itself with grad mode off as the wrappers would (half of the host time of a
    small graph's call: 18 of 40 µs on the CPU machine)."""
    direct = _grad_off_call(graph)

    def first(*args):
        out = aot(*args)
        if state["fn"] is first:
            state["fn"] = direct
        return out
    return first


def ember_backend(gm: torch.fx.GraphModule, example_inputs, options=None, **kwargs):
    """`torch.compile(model, backend="ember", options={...})`.

    Nothing in here may break the user's program (with `fallback`, the default): if tracing
    through AOTAutograd fails, Dynamo's graph runs as it is, with one warning. A forward (or
    inference) graph none of whose ops compiles, known from its ops (partition.known_all_eager:
    a user's custom ops), gets exactly what backend="eager" returns, Dynamo's graph's
    forward, or, where the graph is the whole frame of a function whose code traces to it
    whatever calls it (`_graph_is_whole_frame`), Dynamo is asked to skip the frame (SkipFrame),
    which then runs as eager runs it; one that turns out at its first call to run wholly in
    eager torch sends later calls straight to Dynamo's generated forward. No AOTAutograd
    wrappers, no decomposed ops: such a graph costs what torch.compile(backend="eager") costs,
    a skipped frame less.

    With the program cache on, a warm start skips AOTAutograd's trace: an inference graph's
    traced graph is kept by inference_cache, a training graph's forward and backward by
    AOTAutograd's own cache (training_cache), whose hits make ember's graphs again through
    `compile_graph(..., replay=facts)`."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.exc import RestartAnalysis
    from torch._functorch.aot_autograd import make_boxed_func

    mode = kwargs.pop("mode", None)
    if kwargs:
        raise TypeError(f"ember_backend: unexpected arguments {sorted(kwargs)}")
    if mode is not None:    # torch.compile(mode=...) (torch allows mode or options, not both)
        if isinstance(options, CompileOptions):
            off = {"cudagraphs": False} if mode == "max-autotune-no-cudagraphs" else {}
            options = dataclasses.replace(options, mode=mode, **off)
        else:
            options = {**(options or {}), "mode": mode}
    opts = CompileOptions.from_user(options)
    _start_compile_workers(opts, example_inputs)
    if opts.program_cache:      # a warm start: eager_rejects' verdicts from the cache too
        try:
            from ..runtime.cache import as_cache
            eager_rejects.keep_verdicts(as_cache(opts.cache_dir).root)
        except Exception:   # noqa: BLE001 -- a cache: the ops are probed as without one
            pass
    base = new_graph_id("dynamo")
    # Where calls go: AOTAutograd's function, until a forward graph falls back whole.
    state: dict[str, Any] = {}

    def to_eager(graph):
        if graph.kind in ("forward", "inference") and not flat_inputs:
            state["fn"] = _dynamo_forward(gm)

    def compiler(kind):
        def compile_graph(fx_gm, inputs, replay=None):
            """ember's compile of one graph AOTAutograd made; `replay`: the facts a training
            graph's cached entry recorded (training_cache), read instead of AOTAutograd's
            tracing context."""
            live = replay is None
            if kind in ("forward", "inference") and not flat_inputs and opts.fallback and live:
                # Known from its ops that nothing compiles: Dynamo's graph from the start
                from .partition import known_all_eager
                reasons = known_all_eager(fx_gm, opts, target)
                if reasons is not None:
                    state["known_eager"] = (f"{base}-{kind}", reasons)
            kept = None     # a training graph's cache entry: the graph as given
            if cache_training and live and kind in ("forward", "backward"):
                kept = training_cache.pickle_graph(fx_gm)
            fx_gm, wrap = lower_effect_tokens(fx_gm)    # linalg error checks: on the host
            graph = EmberGraph(fx_gm, opts, kind=kind, decompositions=decomps,
                               graph_id=f"{base}-{kind}", on_eager=to_eager)
            out = next(n for n in fx_gm.graph.nodes if n.op == "output").args[0]
            facts: dict[str, Any] = {}
            if kind == "forward":
                # (AOTAutograd's outputs: the new values of the inputs ember lifted out of the
                # graph (input_mutations) follow them and are not saved for the backward)
                own = len(out) if graph._mutations is None else graph._mutations.num_outputs
                lent = saved_output_slice(own) if live else \
                    (range(*replay["lent"]) if replay["lent"] is not None else None)
                facts["lent"] = (lent.start, lent.stop) if lent is not None else None
                _take_facts(graph, kind, facts)
                strides = None
                if wrap is None and graph.lent_outputs is not None and \
                        saved_layouts.applies(fx_gm, opts, inputs):
                    strides = saved_layouts.lay_out_saved(fx_gm, graph.lent_outputs)
                if wrap is None and graph.lent_outputs is not None:
                    kept_layouts = saved_clones.keep_clone_layouts(fx_gm, graph.lent_outputs)
                    if kept_layouts is not None:
                        strides = kept_layouts if strides is None else \
                            [s if k is None else k for s, k in zip(strides, kept_layouts)]
                if strides is not None and live:
                    saved_layouts.report_output_strides(strides)
            if kind == "backward":
                saved_layouts.take_input_strides(fx_gm, inputs)
                saved_clones.take_dense_input_strides(fx_gm, inputs)
            result = None
            if kind == "backward" and isinstance(out, (list, tuple)):
                facts["outputs"] = len(out)
                if opts.donate_saved and wrap is None:
                    saved = donated_backward_inputs() if live else frozenset(replay["donated"])
                    facts["donated"] = tuple(sorted(saved))
                    # none where torch donates none (a backward that keeps its graph)
                    tangents = _tangent_inputs(fx_gm) if saved and opts.donate_gradients \
                        else frozenset()
                    facts["tangents"] = tuple(sorted(tangents))
                result = _take_facts(graph, kind, facts)
            if kind == "inference" and wrap is None and not (gm_holds_tensors or amp) and \
                    _aot_wrappers_pass_through(fx_gm, len(example_inputs)):
                state["direct"] = graph
                if aot_kept is not None and "known_eager" not in state:
                    # nothing of ember has changed the traced graph yet (its build is at the
                    # first call): the next process skips this trace
                    inference_cache.store(*aot_kept, fx_gm)
                    graph.record_to = build_records.inference_record_to(*aot_kept)
            if result is None:
                result = make_boxed_func(graph if wrap is None else wrap(graph))  # one list in
            result.ember_graph = graph       # reports: result.ember_graph.reports
            if not (cache_training and live):
                return result
            # (an inference graph here: inputs that need gradients, no output that does; an
            # OutputCode that declines its entry, which AOTAutograd's bundled form needs)
            # the entry names the graph, which ember's cache keeps (not the entry: torch keeps
            # a hit's entry bytes in memory), and the first build writes its record, which
            # the next process builds from without reading the graph (build_records.py)
            digest = hashlib.sha256(kept).hexdigest() if kept is not None else None
            keep = (kept is not None and wrap is None and "known_eager" not in state
                    and build_records.store_graph(artifacts, digest, kept))
            del kept
            code = training_cache.output_code_class()(
                kind=kind, digest=digest, facts=training_cache.facts_of(inputs, **facts),
                keep=keep)
            code.fn, code.ember_graph = result, graph
            if keep:
                graph.record_to = (artifacts, build_records.record_key(
                    artifacts, digest, kind, code.facts, record_tag))
            if kind == "backward" and keep:
                training_cache.bundle_for_the_save()
            return code
        return compile_graph

    def recorded_graph(record, load_graph, kind, facts):
        """compile_graph's warm start from a build record (training_cache): the graph, read
        only if needed, is `load_graph()`'s."""
        graph = EmberGraph.from_record(record, load_graph, opts, kind=kind,
                                       decompositions=decomps, graph_id=f"{base}-{kind}",
                                       on_eager=to_eager)
        result = _take_facts(graph, kind, facts)
        if result is None:
            result = make_boxed_func(graph)
        result.ember_graph = graph
        return result

    flat_inputs = any(isinstance(x, (list, tuple, dict)) for x in example_inputs)
    cache_training = False
    # AOTAutograd puts a module's own parameters and buffers before Dynamo's inputs
    gm_holds_tensors = next(iter(gm.parameters()), None) is not None or \
        next(iter(gm.buffers()), None) is not None
    amp = torch._C._is_any_autocast_enabled()   # AOTAutograd's wrappers turn it off: kept
    try:
        specialize_tensor_scalars(gm)   # narrow(x, d, tensor(2), n): its int, guarded
    except Exception:   # noqa: BLE001 -- the graph stays as Dynamo gave it
        pass
    rejected = eager_rejects.dynamo_rejection(gm) if opts.fallback else None
    if rejected is not None:    # eager raises on a tensor without elements: so must the call
        return _whole_graph_eager(gm, base, rejected, f"aot:{rejected}")
    try:
        drop_visible_attention_masks(gm)
        devices = [t.device for t in example_inputs if isinstance(t, torch.Tensor)]
        target = resolve_target(opts.target, devices)
        table = functools.partial(decomposition_table, opts.exact_low_precision,
                                  gpu=target in ("cuda", "rocm", "triton"))
        aot_kept = None     # (cache, key) of this graph's traced inference graph
        if opts.program_cache and opts.debug_dir is None and not flat_inputs and \
                not (gm_holds_tensors or amp):
            key = inference_cache.inference_key(gm, example_inputs, opts)
            if key is not None:
                from ..runtime.cache import as_cache
                aot_kept = (as_cache(opts.cache_dir), key)
                record = build_records.load_inference(*aot_kept)
                if record is not None:      # a warm start that reads no graph
                    graph = EmberGraph.from_record(
                        record, functools.partial(_kept_inference_graph, aot_kept),
                        opts, kind="inference", decompositions=table,
                        graph_id=f"{base}-inference", on_eager=to_eager)
                    state["fn"] = _grad_off_call(graph)
                    return _calling_state(state)
                traced = inference_cache.load(*aot_kept, example_inputs)
                if traced is not None:      # a warm start: AOTAutograd's trace skipped
                    # (the decompositions: only were a piece of it to be traced again, which a
                    # static graph's never is; 0.1-0.25 s of a process's first compile)
                    graph = EmberGraph(traced, opts, kind="inference", decompositions=table,
                                       graph_id=f"{base}-inference", on_eager=to_eager)
                    graph.record_to = build_records.inference_record_to(*aot_kept)
                    state["fn"] = _grad_off_call(graph)
                    return _calling_state(state)
        # a training graph's warm start skips AOTAutograd's trace through its own cache
        # (training_cache): the table is built only where a trace needs it
        cache_training = not flat_inputs and training_cache.applies(opts, gm, example_inputs)
        decomps = training_cache.LazyTable(table) if cache_training else table()
        # build records' part of their key (build_records.py): read before AOTAutograd's call
        record_tag = training_cache.tag(opts, target) if cache_training else None
        artifacts = None    # ember's artifact cache: the kept graphs and build records
        if cache_training:
            from ..runtime.cache import as_cache
            artifacts = as_cache(opts.cache_dir)
        split = {}
        if opts.recompute:      # saves fewer values: recomputes cheap ones in the backward
            split["partition_fn"] = functools.partial(_partition_recomputing_casts,
                                                      recompute_saved=recompute_saved_on(
                                                          opts, target))
        fw_compiler, bw_compiler = compiler("forward"), compiler("backward")
        loading = contextlib.nullcontext()
        if cache_training:
            def make_graph(fx_gm, inputs, kind, facts):
                return compiler(kind)(fx_gm, inputs, replay=facts)

            def find_record(digest, kind, facts):
                record = build_records.load(artifacts, build_records.record_key(
                    artifacts, digest, kind, facts, record_tag))
                return (artifacts, record) if record is not None and \
                    build_records.usable(artifacts, record, digest) else None
            loading = training_cache.scope(opts, target, artifacts, make_graph,
                                           find_record=find_record,
                                           recorded_graph=recorded_graph)
            fw_compiler = training_cache.serializable(fw_compiler)
            bw_compiler = training_cache.serializable(bw_compiler)
        backend = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                               inference_compiler=compiler("inference"),
                               decompositions=decomps, **split,
                               # an optimizer step's parameter updates stay in the graph as
                               # copy_ (frontend/input_mutations.py): one multi-tensor copy
                               keep_inference_input_mutations=True)
        with gc_paused(), effectful_checks(), _efficient_attention_for_training(
                example_inputs, opts.training_cudnn_attention), loading:
            compiled = backend(gm, example_inputs)   # AOTAutograd's tracing (gc: compile.py)
    except RestartAnalysis:
        raise                                  # Dynamo's control flow, not a failure
    except Exception as err:
        if not opts.fallback:
            raise
        return _whole_graph_eager(gm, base, f"tracing failed: {describe_error(err)}",
                                  f"aot:{describe_error(err)}")
    if flat_inputs:
        return compiled
    if "known_eager" in state:
        graph_id, reasons = state["known_eager"]
        fn = _known_eager_graph(gm, graph_id, target, reasons, example_inputs)  # reported
        if _graph_is_whole_frame(gm):     # (`known_eager` implies fallback, no flat inputs)
            # nothing of the frame compiles: Dynamo skips it from now on (no guards, no
            # graph call: plain eager torch under torch.compile's own wrapper)
            from torch._dynamo.exc import SkipFrame
            raise SkipFrame(f"ember: no op of graph {graph_id} compiles: the frame runs in "
                            f"eager torch")
        return fn
    state["fn"] = compiled
    if "direct" in state:
        state["fn"] = _skipping_aot_wrappers(state, compiled, state.pop("direct"))
    return _calling_state(state, compiled)


def _kept_inference_graph(kept) -> torch.fx.GraphModule:
    """The traced inference graph inference_cache keeps under `kept` (cache, key), as an
    EmberGraph holds it, its values in a fake tensor mode of its own (Dynamo's is not there
    after the compile): what a build record's EmberGraph reads when it needs its graph."""
    from torch._subclasses import FakeTensorMode
    from .input_mutations import lift_input_mutations
    data = kept[0].read_verified(inference_cache.KIND, kept[1], inference_cache.SUFFIX,
                                 warn=False)
    if data is None:
        raise LookupError("ember: the kept inference graph is gone from the cache")
    gm = inference_cache.loads_graph(data, FakeTensorMode())
    if lift_input_mutations(gm) is not None:    # (inference_cache keeps none with mutations)
        raise LookupError("ember: the kept inference graph mutates its inputs")
    return gm


def _calling_state(state: dict, compiled=None):
    """What Dynamo calls: `state["fn"]`, which a graph that falls back whole (or the first
    call of a direct one) replaces; with AOTAutograd's methods where it made the function."""
    def run(*args):
        return state["fn"](*args)
    run.ember_state = state     # tests: where calls go
    for name in ("zero_grad", "named_parameters", "named_buffers"):   # as AOTAutograd's has
        if hasattr(compiled, name):
            setattr(run, name, getattr(compiled, name))
    return run
