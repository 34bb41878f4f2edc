"""CPU kernels for torch's memory-efficient attention (`_scaled_dot_product_efficient_attention`
and its backward, which torch builds for CUDA only), so that the CPU machine traces and runs a
training step through the ops a GPU's SDPA picks for training, with their layouts: the output
and the three gradients are [B, S, H, D] buffers handed out as [B, H, S, D] views, whatever the
layouts of q, k and v (aten/src/ATen/native/transformers/cuda/attention_backward.cu; torch's
meta functions say the same). Math in f32, the log-sum-exp padded to a multiple of 32 rows as
the CUDA kernel's is.

    with efficient_attention_on_cpu():
        ...   # torch.ops.aten._scaled_dot_product_efficient_attention(...) runs on CPU tensors
"""
from __future__ import annotations

import contextlib
import math

import torch


def _scores(q, k, bias, is_causal, scale):
    scale = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    a = (q.float() @ k.float().transpose(-1, -2)) * scale
    if bias is not None:
        a = a + bias.float()
    if is_causal:
        mask = torch.ones(a.shape[-2:], dtype=torch.bool, device=a.device).triu(1)
        a = a.masked_fill(mask, float("-inf"))
    return a, scale


def _bshd(shape, dtype, device):
    """An empty [B, H, S, D] tensor laid out [B, S, H, D], as the CUDA kernels allocate."""
    return torch.empty_permuted(shape, (0, 2, 1, 3), dtype=dtype, device=device)


def _forward(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
             scale=None):
    assert dropout_p == 0.0, "the CPU stand-in has no dropout"
    a, _ = _scores(q, k, attn_bias, is_causal, scale)
    lse = torch.logsumexp(a, -1)
    b, h, m, _ = q.shape
    out = _bshd((b, h, m, v.shape[-1]), q.dtype, q.device)
    out.copy_(torch.exp(a - lse[..., None]) @ v.float())
    rows = math.ceil(m / 32) * 32 if compute_log_sumexp else 0
    lse_out = torch.zeros(b, h, rows, device=q.device)
    lse_out[..., :m] = lse[..., :rows]
    seed = torch.zeros((), dtype=torch.long)
    return out, lse_out, seed, seed.clone()


def _backward(grad_out, q, k, v, attn_bias, out, lse, philox_seed, philox_offset, dropout_p,
              grad_input_mask, is_causal=False, scale=None):
    a, scale = _scores(q, k, attn_bias, is_causal, scale)
    p = torch.exp(a - lse[..., :q.shape[2], None])
    do = grad_out.float()
    dp = do @ v.float().transpose(-1, -2)
    ds = p * (dp - (do * out.float()).sum(-1, keepdim=True))
    grads = (ds @ k.float() * scale, ds.transpose(-1, -2) @ q.float() * scale,
             p.transpose(-1, -2) @ do)
    return (*(_bshd(t.shape, t.dtype, t.device).copy_(g) for g, t in zip(grads, (q, k, v))),
            None)


@contextlib.contextmanager
def efficient_attention_on_cpu():
    """Registers the CPU kernels for the duration (the CPU dispatch key only: CUDA tensors keep
    torch's own kernels)."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("_scaled_dot_product_efficient_attention", _forward, "CPU")
        lib.impl("_scaled_dot_product_efficient_attention_backward", _backward, "CPU")
        yield
    finally:
        lib._destroy()
