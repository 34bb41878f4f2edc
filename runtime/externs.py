"""Library ops behind "extern" steps (docs/internals.md, stage 2): each is resolved once at load
time into `fn(ins, outs)` that writes into the planned output tensors."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from .weight_copies import reading_packed

# run(inputs, planned outputs): writes the outputs, or returns the library's own result tensors
# (a list) when writing into the planned buffers would cost a copy (the executor keeps them)
ExternFn = Callable[[list, list], "list | None"]


def _operands(p: dict[str, Any], first: int):
    """Matmul operands `a`, `b` at ins[first], ins[first+1], read transposed (a strided view,
    no copy: BLAS takes it as is) where params say `transpose_a` / `transpose_b`."""
    ta, tb = bool(p.get("transpose_a", False)), bool(p.get("transpose_b", False))

    def get(ins):
        a, b = ins[first], ins[first + 1]
        return (a.transpose(-1, -2) if ta else a), (b.transpose(-1, -2) if tb else b)
    return get


def _matmul(op: Callable, widened: Callable) -> Callable[[dict[str, Any]], ExternFn]:
    """torch.mm / torch.bmm into the planned output. bf16/f16 operands with an f32 result
    (ember-fuse reads a low-precision matmul's operands narrow): the f32 accumulator itself,
    as eager's GEMM keeps it before its epilogue rounds, through the `out_dtype` overload (a
    bf16 tensor-core GEMM, CUDA) or, where that has no kernel, on widened copies."""
    def make(p: dict[str, Any]) -> ExternFn:
        ab = _operands(p, 0)
        narrow_ok = [True]

        def run(ins, outs):
            a, b = ab(ins)
            out = outs[0]
            if out.dtype == a.dtype == b.dtype:
                op(a, b, out=out)
                return
            if a.dtype != b.dtype:
                # one operand's widening folded into the matmul (`mm(x_f32, w_bf16.float())`):
                # eager's f32 GEMM of the widened operand, -0.0 included
                op(a.to(out.dtype), b.to(out.dtype), out=out)
                return
            if narrow_ok[0] and a.is_cuda:
                try:
                    widened(a, b, out.dtype, out=out)
                    return
                except (NotImplementedError, RuntimeError):
                    narrow_ok[0] = False
            op(a.to(out.dtype), b.to(out.dtype), out=out)
            # An f32 GEMM writes -0.0 where every product is -0.0 (a k=1 outer product of a
            # zero); eager's bf16/f16 GEMM adds the products to a +0.0 accumulator: +0.0
            # (rsqrt of it is +inf, not -inf; fuzz seed 13 index 29).
            out.add_(0.0)
        if _weight_copy(p) and op is torch.mm:  # b: a parameter read transposed, packed
            return reading_packed(run, 1)         # (runtime/weight_copies.py)
        return run
    return make


def _weight_copy(p: dict[str, Any]) -> bool:
    """The executor marks an inference matmul whose transposed operand b is a program input
    (`weight_copy`): a parameter there may be read packed (runtime/weight_copies.py)."""
    return bool(p.get("weight_copy")) and bool(p.get("transpose_b")) \
        and not p.get("transpose_a")


_mm = _matmul(torch.mm, torch.ops.aten.mm.dtype_out)
_bmm = _matmul(torch.bmm, torch.ops.aten.bmm.dtype_out)


def _addmm(p: dict[str, Any]) -> ExternFn:
    beta, alpha = p.get("beta", 1), p.get("alpha", 1)
    ab = _operands(p, 1)

    def run(ins, outs):
        torch.addmm(ins[0], *ab(ins), beta=beta, alpha=alpha, out=outs[0])
    if _weight_copy(p) and beta == 1 and alpha == 1:
        return reading_packed(run, 2, bias=True)
    return run


def _baddbmm(p: dict[str, Any]) -> ExternFn:
    beta, alpha = p.get("beta", 1), p.get("alpha", 1)
    ab = _operands(p, 1)
    return lambda ins, outs: torch.baddbmm(ins[0], *ab(ins), beta=beta, alpha=alpha,
                                           out=outs[0])


def library_convolution(*args):
    """torch's convolution, as every `aten.convolution` extern calls it (looked up per call: a
    test watches which layouts the library is handed)."""
    return torch.ops.aten.convolution(*args)


def library_convolution_backward(*args, **kwargs):
    """torch's convolution_backward, as every such library call makes it (looked up per call: a
    test watches which layouts the library is handed)."""
    return torch.ops.aten.convolution_backward.default(*args, **kwargs)


def _convolution(p: dict[str, Any]) -> ExternFn:
    stride, padding, dilation = list(p["stride"]), list(p["padding"]), list(p["dilation"])
    groups = int(p.get("groups", 1))
    transposed = bool(p.get("transposed", False))
    output_padding = list(p.get("output_padding", [0] * len(stride)))

    nhwc = bool(p.get("channels_last", False))
    ohwi = bool(p.get("ohwi_weight", False))

    def run(ins, outs):
        x, w = ins[0], ins[1]
        if nhwc:    # NHWC / OHWI buffers (ember-channels-last): channels-last views of them
            x = x.permute(0, 3, 1, 2)
        if ohwi:
            w = w.permute(0, 3, 1, 2)
        bias = ins[2] if len(ins) > 2 else None
        if bias is not None and bias.dtype != x.dtype:
            # a bf16 conv's bias widened to the f32 accumulator type: cuDNN/oneDNN take it
            # in the input's type and add it before their one rounding, as eager does
            bias = bias.to(x.dtype)
        if nhwc and x.dtype == torch.bfloat16 and x.device.type == "cpu" and \
                bool(torch.isinf(x).any()):
            # oneDNN's CPU bf16 channels-last convolution (AVX512) writes NaN into the element
            # before an infinite input's (test_eager_cpu_bf16_channels_last_conv_puts_nan_before_an_inf);
            # its NCHW one does not, and NCHW is what a user's NCHW tensor gets in eager. Such
            # an input is convolved NCHW (one read of the input to find it; finite inputs, the
            # common case, keep the channels-last kernel). Copies with NCHW's own strides:
            # `.contiguous()` keeps a (8, 1, 3, 3) weight of strides (9, 1, 3, 1), which the
            # library takes for channels-last (targeted conv 17, fuzz9g).
            x = x.clone(memory_format=torch.contiguous_format)
            w = w.clone(memory_format=torch.contiguous_format)
        r = library_convolution(x, w, bias, stride, padding, dilation, transposed,
                                output_padding, groups)
        if nhwc:    # the library's channels-last result is the NHWC buffer (a copy if not)
            r = r.permute(0, 2, 3, 1)
        if outs[0].dtype == x.dtype:
            # aten.convolution.out is the functional op plus a copy into `out` (an autogen'd
            # out= kernel): a whole extra pass over every convolution's output
            return [r]
        # bf16/f16 input, f32 accumulator type in the IR: round as eager does
        outs[0].copy_(r)
    return run


def _sdpa(p: dict[str, Any]) -> ExternFn:
    is_causal, scale = bool(p.get("is_causal", False)), p.get("scale")

    def run(ins, outs):
        mask = ins[3] if len(ins) > 3 else None
        outs[0].copy_(F.scaled_dot_product_attention(ins[0], ins[1], ins[2], attn_mask=mask,
                                                     is_causal=is_causal, scale=scale))
    return run


def _pool(kind: str):
    def make(p: dict[str, Any]) -> ExternFn:
        stride, padding, dilation = list(p["stride"]), list(p["padding"]), list(p["dilation"])
        # ceil_mode: the IR padded the end with the reduction's identity for a last, partial
        # window; the library's ceil mode computes the same windows (it must give the IR's size)
        ceil_mode = bool(p.get("ceil_mode", False))
        nhwc = bool(p.get("channels_last", False))

        def run(ins, outs):
            kernel = list(ins[1].shape)  # the window operand carries only its shape
            # an NHWC buffer (ember-channels-last): pooled as a channels-last view of it
            x = ins[0].permute(0, 3, 1, 2) if nhwc else ins[0]
            if kind == "max":
                r = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode)
            else:
                if dilation != [1, 1]:
                    raise ValueError("ember runtime: dilated sum pooling is not supported")
                r = F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode,
                                 count_include_pad=True, divisor_override=1)
            if nhwc:
                r = r.permute(0, 2, 3, 1)
            if r.shape != outs[0].shape:
                raise ValueError(f"ember runtime: {kind} pooling gave {tuple(r.shape)}, the "
                                 f"program expects {tuple(outs[0].shape)}")
            return [r]      # kept as the output buffer when row-major (the executor checks)
        return run
    return make


_TABLE: dict[str, Callable[[dict[str, Any]], ExternFn]] = {
    "aten.mm": _mm, "aten.bmm": _bmm, "aten.addmm": _addmm, "aten.baddbmm": _baddbmm,
    "aten.convolution": _convolution, "aten.sdpa": _sdpa,
    "aten.max_pool2d": _pool("max"), "aten.sum_pool2d": _pool("sum"),
}


def _generic(name: str, p: dict[str, Any]) -> ExternFn:
    """Any other `aten.X`: call the ATen op with params as keyword arguments and copy its
    result(s) in, so the frontend can route a new library op without a runtime change."""
    packet = getattr(torch.ops.aten, name.split(".", 1)[1], None)
    if packet is None:
        raise ValueError(f"ember runtime: unknown extern op {name!r} (no torch.ops.aten entry)")

    def run(ins, outs):
        r = packet(*ins, **p)
        for o, t in zip(outs, r if isinstance(r, (tuple, list)) else (r,)):
            o.copy_(t)
    return run


def _window_out(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    """Output length of a convolution / pooling window sweep (torch's formula; with
    `ceil_mode` a last, partial window counts if it starts inside the input or left padding)."""
    span = n + 2 * p - d * (k - 1) - 1
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    return out - 1 if (out - 1) * s >= n + p else out


def _conv_shape(p: dict[str, Any]) -> Callable[[list], tuple]:
    stride, padding, dilation = list(p["stride"]), list(p["padding"]), list(p["dilation"])
    groups = int(p.get("groups", 1))
    transposed = bool(p.get("transposed", False))
    out_pad = list(p.get("output_padding", [0] * len(stride)))

    def shape(ins):
        x, w = ins[0], ins[1]
        if transposed:
            spatial = [(n - 1) * s - 2 * q + d * (k - 1) + op + 1 for n, k, s, q, d, op in
                       zip(x.shape[2:], w.shape[2:], stride, padding, dilation, out_pad)]
            return (x.shape[0], w.shape[1] * groups, *spatial)
        spatial = [_window_out(n, k, s, q, d) for n, k, s, q, d in
                   zip(x.shape[2:], w.shape[2:], stride, padding, dilation)]
        return (x.shape[0], w.shape[0], *spatial)
    return shape


def _pool_shape(p: dict[str, Any]) -> Callable[[list], tuple]:
    stride, padding, dilation = list(p["stride"]), list(p["padding"]), list(p["dilation"])
    ceil_mode = bool(p.get("ceil_mode", False))

    def shape(ins):
        x, window = ins[0], ins[1]     # the window operand carries only its shape
        spatial = [_window_out(n, k, s, q, d, ceil_mode) for n, k, s, q, d in
                   zip(x.shape[-2:], window.shape, stride, padding, dilation)]
        return (*x.shape[:-2], *spatial)
    return shape


def _matmul_shape(first: int) -> Callable[[dict[str, Any]], Callable[[list], tuple]]:
    def make(p: dict[str, Any]) -> Callable[[list], tuple]:
        ab = _operands(p, first)

        def shape(ins):       # (..., rows of a, columns of b), through transpose_a / _b
            a, b = ab(ins)
            return tuple(a.shape[:-1]) + (b.shape[-1],)
        return shape
    return make


# Externs whose result shape the runtime computes from their operands' run-time sizes, so a
# program with symbolic sizes allocates them per call (frontend/export_program.py accepts these with
# `?` result dims; any other extern of dynamic size makes the graph compile per shape).
_SHAPES: dict[str, Callable[[dict[str, Any]], Callable[[list], tuple]]] = {
    "aten.mm": _matmul_shape(0), "aten.bmm": _matmul_shape(0),
    "aten.addmm": _matmul_shape(1), "aten.baddbmm": _matmul_shape(1),
    "aten.convolution": _conv_shape,
    "aten.max_pool2d": _pool_shape, "aten.sum_pool2d": _pool_shape,
    # attention: the query's sizes but the last, which is the value's
    "aten.sdpa": lambda p: lambda ins: tuple(ins[0].shape[:-1]) + (ins[2].shape[-1],),
}
DYNAMIC_EXTERNS = frozenset(_SHAPES)


def extern_result_shape(name: str, params: dict[str, Any]) -> Callable[[list], tuple]:
    """The result shape of extern `name` from its operands (a dynamic program allocates it
    at run time)."""
    if name not in _SHAPES:
        raise ValueError(f"ember runtime: extern {name} has no dynamic result shape")
    return _SHAPES[name](params)


def resolve(name: str, params: dict[str, Any]) -> ExternFn:
    make = _TABLE.get(name)
    if make is not None:
        return make(params)
    if name.startswith("aten."):
        return _generic(name, params)
    raise ValueError(f"ember runtime: unknown extern op {name!r}; known: {sorted(_TABLE)}")


# Library ops that write a copy of their first operand: where that operand is a fill made for
# them alone (a "fill" step: the embedding backward's `scatter_add` into zeros, vocabulary x
# hidden), the runtime calls the in-place overload on the fill instead (`params["in_place"]`):
# no constant kept for the program's life and no copy of it per call.
IN_PLACE = {
    "aten.scatter_add.default": "aten.scatter_add_.default",
    "aten.scatter.src": "aten.scatter_.src",
    "aten.scatter.value": "aten.scatter_.value",
    "aten.scatter_reduce.two": "aten.scatter_reduce_.two",
    "aten.index_put.default": "aten.index_put_.default",
    "aten.index_add.default": "aten.index_add_.default",
}


# The fused attention kernels AOTAutograd may trace `scaled_dot_product_attention` to. It picks
# one at trace time from fake tensors; eager picks at run time (and may pick another: cuDNN
# where the trace said memory-efficient). When only the attention output is used, the call
# goes back through torch's dispatcher so it runs the kernel eager would, bit for bit.
_SDPA_FORWARD = {
    "aten._scaled_dot_product_efficient_attention.default": "attn_bias",
    "aten._scaled_dot_product_flash_attention.default": None,
    "aten._scaled_dot_product_cudnn_attention.default": "attn_bias",
    "aten._scaled_dot_product_flash_attention_for_cpu.default": "attn_mask",
}


def _sdpa_as_eager(name: str, names: list, kwargs: dict, results: list):
    if name not in _SDPA_FORWARD or results != [0] or kwargs.get("dropout_p", 0.0) != 0.0:
        return None
    mask_name = _SDPA_FORWARD[name]
    is_causal, scale = bool(kwargs.get("is_causal", False)), kwargs.get("scale")
    if not set(names) <= {"query", "key", "value", mask_name}:
        return None

    def run(ins: list) -> list:
        t = dict(zip(names, ins))
        out = F.scaled_dot_product_attention(t["query"], t["key"], t["value"],
                                             attn_mask=t.get(mask_name), is_causal=is_causal,
                                             scale=scale)
        return [out if out.is_contiguous() else out.contiguous()]
    return run


def resolve_library(name: str, params: dict[str, Any]) -> Callable[[list], list]:
    """A library step (`Step.kind == "library"`): `name` is an ATen overload
    ("aten._scaled_dot_product_efficient_attention.default"). Returns `run(inputs) -> outputs`:
    the op's own result tensors (made contiguous, the layout every kernel assumes)."""
    if params.get("in_place") is not None and name in IN_PLACE:
        # operand `in_place` (the op's `self`) is a fresh fill that only this call reads: the
        # in-place overload writes it and returns it, the op's result
        name = IN_PLACE[name]
    parts = name.split(".")
    if len(parts) != 3:
        raise ValueError(f"ember runtime: library op {name!r} is not '<namespace>.<op>.<overload>'")
    # ATen's ops, and registered custom ops (torch.library) that ember cannot compile
    namespace = getattr(torch.ops, parts[0], None)
    packet = getattr(namespace, parts[1], None) if namespace is not None else None
    op = getattr(packet, parts[2], None) if packet is not None else None
    if op is None:
        raise ValueError(f"ember runtime: unknown library op {name!r}")
    names = list(params.get("tensor_args", []))
    kwargs = dict(params.get("kwargs", {}))
    for arg in kwargs.pop("none_args", []):
        kwargs[arg] = None
    lists = {k[:-4]: v for k, v in kwargs.items() if k.endswith(".len")}
    for k in lists:
        del kwargs[k + ".len"]
    # operands' strides in the traced graph (what eager's autograd hands the op), by name
    traced = {k[:-8]: v for k, v in kwargs.items() if k.endswith(".strides")}
    for k in traced:
        del kwargs[k + ".strides"]
    for k, v in kwargs.items():   # dtypes, layouts, memory formats travel as "torch.float64"
        if isinstance(v, dict) and list(v) == ["ember.complex"]:   # a complex scalar
            kwargs[k] = complex(*v["ember.complex"])
        if isinstance(v, str) and v.startswith("torch."):
            obj = getattr(torch, v[6:], None)
            if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)):
                kwargs[k] = obj
    results = list(params.get("results", [0]))
    plain = [n for n in names if "[" not in n]
    if name == "aten.convolution_backward.default":
        def op(**kw):
            return library_convolution_backward(**kw)
    # results handed on permuted (ember-library-views' `ember.result_views`)
    perms = {v[0]: tuple(v[1:]) for v in params.get("result_views", [])}
    # ember-channels-last: [operands, results] that are NHWC buffers of the op's NCHW tensors
    # (a result: the library's channels-last tensor permuted, no copy)
    nhwc_in, nhwc_out = (list(x) for x in params.get("channels_last", ([], [])))
    perms.update({k: (0, 2, 3, 1) for k in nhwc_out})
    sdpa = None if perms else _sdpa_as_eager(name, names, kwargs, results)
    run = sdpa if sdpa is not None else _call_op(op, names, plain, lists, kwargs, results,
                                                 contiguous=not perms)
    if perms:
        run = _permuted(run, perms)
    if nhwc_in:
        run = _channels_last_operands(run, nhwc_in)
    if name == _CUDNN_BACKWARD and traced.get("grad_out"):
        run = _grad_as_traced(run, names, "grad_out", traced["grad_out"])
    elif name in _GRAD_LIKE_OUT:
        run = _grad_like_out(run, names, *_GRAD_LIKE_OUT[name])
    if name == _CUDNN_BACKWARD:
        run = _out_as_forward_made_it(run, names)   # (before the gradient copies its strides)
    views = params.get("views")
    return run if not views else _with_views(run, views)


# The fused attention backwards read the incoming gradient in the saved output's layout: eager
# hands them both in one layout (the gradient of `out.transpose(1, 2)...` is transposed like
# `out`), and cuDNN's backward computes wrong gradients when the two differ (BERT-base bf16 on
# an H200: relative error 1.0 with a row-major gradient beside an output viewed [B, S, H, D]).
_GRAD_LIKE_OUT = {
    "aten._scaled_dot_product_efficient_attention_backward.default": ("grad_out_", "out"),
    "aten._scaled_dot_product_flash_attention_backward.default": ("grad_out", "out"),
    "aten._scaled_dot_product_cudnn_attention_backward.default": ("grad_out", "out"),
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": ("grad_out", "out"),
}


# cuDNN's attention backward caches its execution graph under the sizes and strides of q, k, v
# and the bias only: the strides of the output, its gradient and the statistics it was built
# with are baked into the graph and not in the key (aten/src/ATen/native/cudnn/MHA.cpp). A
# call with the same q, k, v layouts but the output in another layout than the graph's first
# caller's reads the output with the wrong strides: dQ and dK come out wrong (their
# rowsum(dO * O) term), dV right (whisper encoder, bf16 training on an H100: q/k gradients 0.99
# relative error). Eager's backward gets the output cuDNN's forward allocated, in q's stride
# order (`alloc_with_matching_layout`); ember's executor may have made it contiguous. So the
# output goes in that layout (and the gradient, by _grad_like_out, in the output's strides, as
# eager hands it): every caller then builds and finds the same graph.
_CUDNN_BACKWARD = "aten._scaled_dot_product_cudnn_attention_backward.default"


def _dense(t: torch.Tensor) -> bool:
    """Whether `t` covers its storage span exactly once (non-overlapping and dense)."""
    expect = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expect:
            return False
        expect *= size
    return True


def matching_layout(q: torch.Tensor, shape) -> tuple[int, ...] | None:
    """The strides cuDNN's attention forward gives its output of `shape` for query `q`: q's
    own where the shapes agree (`empty_like`), else dense in q's stride order (a stable sort);
    None where q is not dense (empty_like's choice then is not q's order)."""
    if not _dense(q):
        return None
    if tuple(shape) == tuple(q.shape):
        return tuple(q.stride())
    order = sorted(range(q.dim()), key=lambda i: q.stride()[i])
    strides, step = [0] * q.dim(), 1
    for d in order:
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def _restriding(run: Callable[[list], list], k: int,
                want: Callable[[list], Any]) -> Callable[[list], list]:
    """`run` with its operand `k` copied into the strides `want(ins)` gives, where they differ
    (None: the operand as it comes)."""
    def run_restrided(ins: list) -> list:
        stride = want(ins)
        if stride is not None and tuple(ins[k].stride()) != tuple(stride):
            ins = list(ins)
            ins[k] = _restrided(ins[k], stride)
        return run(ins)
    return run_restrided


def _out_as_forward_made_it(run: Callable[[list], list], names: list) -> Callable[[list], list]:
    if "out" not in names or "query" not in names:
        return run
    o, q = names.index("out"), names.index("query")
    return _restriding(run, o, lambda ins: matching_layout(ins[q], ins[o].shape))


def _grad_like_out(run: Callable[[list], list], names: list, grad: str,
                   out: str) -> Callable[[list], list]:
    """The operand `grad` copied into the strides of operand `out` where they differ (a copy
    eager's autograd would not need: its gradient arrives in that layout)."""
    if grad not in names or out not in names:
        return run
    g, o = names.index(grad), names.index(out)
    return _restriding(run, g, lambda ins: ins[o].stride()
                       if ins[g].shape == ins[o].shape else None)


def _grad_as_traced(run: Callable[[list], list], names: list, grad: str,
                    strides) -> Callable[[list], list]:
    """The operand `grad` copied into `strides` (its layout in the traced graph: what eager's
    autograd hands the op) where it differs. cuDNN's attention backward finds its cached graph
    by q/k/v's layouts alone, with the gradient's strides baked in: a process that also runs
    the same attention eagerly (a benchmark's reference, an evaluation loop) shares that cache,
    so ember calls it with eager's gradient layout (the whisper encoder: eager's [B, S, H, D]
    gradient beside ember's row-major one gave q/k gradients 0.99 off on an H200)."""
    if grad not in names:
        return run
    g, want = names.index(grad), tuple(strides)
    return _restriding(run, g, lambda ins: want if len(want) == ins[g].dim() else None)


def _restrided(t: torch.Tensor, stride) -> torch.Tensor:
    """A copy of `t` laid out with `stride`."""
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _channels_last_operands(run: Callable[[list], list], which: list) -> Callable[[list], list]:
    """The op reads NHWC buffers as channels-last views of its NCHW tensors (no copy: the
    library computes channels-last, as eager does for a channels-last network)."""
    def run_nhwc(ins: list) -> list:
        ins = list(ins)
        for k in which:
            ins[k] = ins[k].permute(0, 3, 1, 2)
        return run(ins)
    return run_nhwc


def _permuted(run: Callable[[list], list], perms: dict) -> Callable[[list], list]:
    """Result k handed on as the op's own tensor permuted by perms[k]: contiguous, so no copy,
    where the op lays it out that way (attention's output: [B, H, S, D] over a [B, S, H, D]
    buffer); made contiguous otherwise, as every other result."""
    def run_permuted(ins: list) -> list:
        out = []
        for k, t in enumerate(run(ins)):
            if k in perms:
                t = t.permute(perms[k])
            out.append(t if t.is_contiguous() else t.contiguous())
        return out
    return run_permuted


def _with_views(run: Callable[[list], list], views: list) -> Callable[[list], list]:
    """Operands read as strided views of their row-major buffers (ember-library-views):
    each entry is [operand, element offset, sizes..., strides...]."""
    made = []
    for v in views:
        rank = (len(v) - 2) // 2
        made.append((v[0], v[1], tuple(v[2:2 + rank]), tuple(v[2 + rank:])))

    def run_views(ins: list) -> list:
        ins = list(ins)
        for k, offset, sizes, strides in made:
            t = ins[k] if ins[k].is_contiguous() else ins[k].contiguous()
            ins[k] = t.as_strided(sizes, strides, t.storage_offset() + offset)
        return run(ins)
    return run_views


def _call_op(op, names, plain, lists, kwargs, results,
             contiguous: bool = True) -> Callable[[list], list]:
    def run(ins: list) -> list:
        args = dict(kwargs)
        args.update(zip(plain, (t for n, t in zip(names, ins) if "[" not in n)))
        for k, n in lists.items():
            items = [None] * n    # positions no operand names are None (Optional[Tensor])
            for nm, t in zip(names, ins):
                if nm.startswith(k + "["):
                    items[int(nm[len(k) + 1:-1])] = t
            args[k] = items
        r = op(**args)
        r = r if isinstance(r, (tuple, list)) else (r,)
        if not contiguous:
            return [r[i] for i in results]
        return [r[i] if r[i].is_contiguous() else r[i].contiguous() for i in results]
    return run
