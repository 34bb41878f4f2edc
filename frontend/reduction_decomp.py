"""Decompositions around reductions where torch-mlir's lowering differs from eager or does not
compile (applied while AOTAutograd traces, below autograd; NotImplemented leaves the op alone).

* `mean` of bf16/f16: torch-mlir sums into the 16-bit type and divides by the element count
  converted to that type: 65536 is inf in f16 (the mean of 65536 f16 values came out 0) and
  counts above 2048 (f16) or 256 (bf16) are rounded. Eager (CPU) sums in f32, divides in f32
  and rounds once (`cast_fp32 -> sum -> div -> cast`, ReduceOps.cpp); so does this.
* `norm` and `linalg_vector_norm` of bf16/f16 (`dist`'s decomposition makes a norm):
  torch-mlir's `aten.norm.Scalar` rejects 16-bit inputs, and its `linalg_vector_norm` raises
  to the power in the 16-bit type (||-8.5||_6 came out 8.5625, eager 8.5: a 4% gradient
  error); eager's kernel computes in f32 and rounds once, as `vector_norm` of the f32 input.
* `linalg_vector_norm` over one element per result: its magnitude, as eager (the formula's
  square underflowed for 1e-30). Not a 0-dim tensor over `dim=0`: eager computes the formula.
* `convolution_backward` on a GPU with the bias gradient asked for (`gpu_table`): the bias
  gradient is a sum of grad_output over all dims but the channels, a reduction ember fuses
  with grad_output's producer, and the library call computes the input and weight gradients
  only (as Inductor's decomposition does). ATen's cuDNN path sums it in an `at::sum` kernel of
  its own after the call (efficientnet_b0 bf16 training, H100: 28 such launches, 0.12 ms of a
  10.6 ms step, its squeeze-excitation 1x1 convolutions).
* `as_strided` that is a reshape (group norm's decomposition makes one: a contiguous input at
  offset 0, as many elements as the result, contiguous strides) is a `view`: torch-mlir turns
  as_strided into a gather through a constant index tensor, which no kernel can hold.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten
_NARROW = (torch.float16, torch.bfloat16)


def _mean(x, dim=None, keepdim=False, *, dtype=None):
    if not isinstance(x, torch.Tensor) or x.dtype not in _NARROW or \
            (dtype is not None and dtype != x.dtype):
        return NotImplemented
    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else \
        [d % max(1, x.dim()) for d in dim]
    n = math.prod(x.shape[d] for d in dims) if x.dim() else 1
    s = torch.sum(x, dims, keepdim, dtype=torch.float32) if x.dim() else x.float()
    return (s / n).to(x.dtype)


def _mean_default(x, *, dtype=None):
    return _mean(x, None, False, dtype=dtype)


def _norm(x, p=2, dim=None, keepdim=False):
    if not isinstance(x, torch.Tensor) or x.dtype not in _NARROW:
        return NotImplemented
    p = 2 if p is None else p
    return torch.linalg.vector_norm(x.float(), p, dim, keepdim).to(x.dtype)


def _one_element_norms(x, ord, dim, keepdim, dtype):
    """Eager's norm of a reduction over one element per result is that element's magnitude,
    not `(|x|^p)^(1/p)`: `vector_norm(tensor([1e-30]))` is 1e-30 where the formula's square
    underflows to 0 in f32 (ember gave 0; 3e19 gave inf). None where that does not apply."""
    named = dim is not None and (isinstance(dim, int) or len(dim) > 0)
    if not isinstance(x, torch.Tensor) or x.numel() == 0 or x.is_complex() or \
            (x.dim() == 0 and named):     # a 0-dim tensor over dim 0: eager's formula
        return None
    dims = list(range(x.dim())) if dim is None else \
        [d % x.dim() for d in ([dim] if isinstance(dim, int) else dim)] if x.dim() else []
    if dim is not None and len(dims) == 0 and x.dim() > 0:
        dims = list(range(x.dim()))                 # dim=[]: every dim, as dim=None
    if any(x.shape[d] != 1 for d in dims):
        return None
    out = (x != 0).to(x.dtype) if ord == 0 else x.abs()
    if dtype is not None:
        out = out.to(dtype)
    if not keepdim:
        for d in sorted(dims, reverse=True):
            out = out.squeeze(d)
    return out


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    one = _one_element_norms(x, ord, dim, keepdim, dtype)
    if one is not None:
        return one
    if dtype is not None and dtype != getattr(x, "dtype", None):
        return NotImplemented
    return _norm(x, ord, dim, keepdim)


def _norm_scalar(x, p=2):
    return _norm(x, p)


def _contiguous_strides(size) -> list[int]:
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(1, n)
    return strides[::-1]


def _as_strided(x, size, stride, storage_offset=None):
    size, stride = list(size), list(stride)
    if not all(isinstance(v, int) for v in size + stride) or storage_offset not in (None, 0):
        return NotImplemented
    if x.storage_offset() != 0 or not x.is_contiguous() or x.numel() != math.prod(size):
        return NotImplemented
    if any(n != 1 and s != c for n, s, c in zip(size, stride, _contiguous_strides(size))):
        return NotImplemented
    return aten.view.default(x, size)


def _convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                          transposed, output_padding, groups, output_mask):
    if not output_mask[2] or not isinstance(grad_output, torch.Tensor) or grad_output.dim() < 3:
        return NotImplemented
    dims = [0] + list(range(2, grad_output.dim()))
    grad_bias = aten.sum.dim_IntList(grad_output, dims)
    grad_input, grad_weight, _ = aten.convolution_backward.default(
        grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
        output_padding, groups, [output_mask[0], output_mask[1], False])
    return grad_input, grad_weight, grad_bias


def gpu_table() -> dict:
    """Decompositions for GPU code generators only."""
    return {aten.convolution_backward.default: _convolution_backward}


def table() -> dict:
    return {aten.mean.dim: _mean, aten.mean.default: _mean_default,
            aten.norm.Scalar: _norm_scalar, aten.norm.ScalarOpt_dim: _norm,
            aten.linalg_vector_norm.default: _vector_norm,
            aten.as_strided.default: _as_strided}
