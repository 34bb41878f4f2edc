"""`aten._transformer_encoder_layer_fwd` (nn.TransformerEncoderLayer's inference fast path:
eval mode, no grad) as the layer's own ops: layer norms, the QKV projection, scaled dot-product
attention, the output projection, the ReLU/GELU feed-forward block and the residual additions,
in the order the fast path applies them (`norm_first` or not). torch-mlir has no lowering for
the fused op; decomposed, it compiles as the training path does (matmul externs, an attention
library call, fused kernels), with symbolic batch and sequence sizes too.

Attention over a short sequence without a mask (at most `MATH_ATTENTION_MAX_LEN` tokens, a
static size) is written as the fast path computes it: q scaled, `q @ k^T`, softmax, `@ v`
(two batched matmuls around a fused softmax kernel; the bias add and the heads' relayout of
q, k, v fuse into one kernel after a plain `mm`). The CPU's flash attention kernel splits such
a sequence into 32-row blocks of small GEMMs; measured <see benchmarks/RESULTS.md, enc19>.
Longer or symbolic sequences, masked attention and a GPU's attention (not measured
there) call SDPA.

The merged mask the fast path passes (nn.MultiheadAttention.merge_masks) is additive (float):
type 0 is [L, L], type 1 a key padding mask [B, L], type 2 [B, H, L, L]. A boolean mask, a
nested tensor or another rank stays the fused op (NotImplemented)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

aten = torch.ops.aten

MATH_ATTENTION_MAX_LEN = 256


def _encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                       proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
                       norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2,
                       ffn_bias_2, mask=None, mask_type=None):
    if src.is_nested or src.dim() != 3 or embed_dim % num_heads:
        return NotImplemented
    if mask is not None and (not mask.is_floating_point() or mask_type not in (0, 1, 2)):
        return NotImplemented
    b, t, e = src.shape
    heads, head_dim = num_heads, embed_dim // num_heads

    def norm(x, w, bias):
        return F.layer_norm(x, [e], w, bias, eps)

    attn_mask = None
    if mask is not None:
        attn_mask = {0: lambda: mask, 1: lambda: mask.view(b, 1, 1, t),
                     2: lambda: mask.view(b, -1, t, t)}[mask_type]()
    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    qkv = F.linear(x, qkv_weight, qkv_bias).view(b, t, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    if (attn_mask is None and isinstance(t, int) and t <= MATH_ATTENTION_MAX_LEN
            and q.device.type == "cpu"):    # measured on the CPU only
        # the scale is the fast path's (on q): 1/sqrt(head_dim), exact for a power-of-4 width
        scores = torch.matmul(q * head_dim ** -0.5, k.transpose(-1, -2))
        a = torch.matmul(torch.softmax(scores, -1), v)
    else:
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    x = F.linear(a.transpose(1, 2).reshape(b, t, e), proj_weight, proj_bias) + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    h = F.linear(x, ffn_weight_1, ffn_bias_1)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn_weight_2, ffn_bias_2) + residual
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x


def transformer_decompositions() -> dict:
    return {aten._transformer_encoder_layer_fwd.default: _encoder_layer_fwd}
