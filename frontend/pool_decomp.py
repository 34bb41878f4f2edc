"""2-d max pooling with indices and its backward as pointwise code and gathers that fuse
(applied while AOTAutograd traces, below autograd; NotImplemented leaves the op alone, for
the library call of frontend/partition.py LIBRARY_OPS: 3-d and adaptive pooling, windows over
`MAX_WINDOW` elements, symbolic sizes). Under `torch.no_grad()` the forward is left alone:
inference drops the unread indices (fx_prep) and keeps its `max_pool2d` path (a window
reduction over the NHWC buffer, ember-channels-last `_pool_kernel`).

Forward (`max_pool2d_with_indices`), ATen's semantics on both targets (its CPU and CUDA kernels
agree): the window is scanned in (kh, kw) order from maxval = -inf and index = the window's
first in-bounds position; an element updates both where `val > maxval || isnan(val)` (the
first maximum wins, the last NaN wins). Here the input is padded with -inf (a padded element
never updates: -inf > m is false, and it is no NaN), and the window's kh * kw elements are
strided slices of the padded input chained by `where`: one kernel, fused with the producer.
The scan keeps the winner's int8 window offset `kh_i * kw + kw_i` (Inductor's
`_low_memory_max_pool2d_with_offsets`); the flat index h * W + w is computed from it by index
arithmetic, so that the min-cut partitioner may save the 1-byte offsets for the backward and
recompute the indices there (a graph that returns the indices returns ATen's).

Backward (`max_pool2d_with_indices_backward`) as a gather, no scatter: input element (h, w)
sums grad_output over the windows (oh, ow) that may cover it (ATen's phstart..phend, at most
ceil(((k - 1) * d + 1) / s) per dim) whose saved index is h * W + w, in ATen's order (oh, then
ow ascending). On the GPU, with the offsets of this trace's forward, it is written without a
gather (`_backward_by_residue`): h + p = q * s + r lies in windows q - a only, and the offset
it has in window q - a depends on r alone, so the candidates are grad_output and the offsets
shifted by a (pads) compared with a constant [sh, sw] table; every index is affine, so the
kernel loads no index table and checks no bound (the gather form's kernel took 0.50 ms on an
H100 for resnet's stem, the residue form's 0.11-0.19 ms, Inductor's 0.18-0.26 ms). The C++
target keeps the gather form, which it fuses with BatchNorm's sums into one row kernel. `f32_sum` (the GPU's code generator): summed in f32 and rounded once, as
eager's CUDA kernels (a gather too); otherwise (the CPU's) rounded to the gradient's type after
every addition, as eager's CPU kernel does (`grad_input[index] += grad_output[...]` on a
bf16/f16 tensor, output positions in row-major order). Either way bf16 is eager's bit for bit.
"""
from __future__ import annotations

import weakref

import torch

aten = torch.ops.aten

# Windows up to this many elements are unrolled into the kernel (Inductor's limit for its
# own max-pool code is 25, and the offsets must fit in an int8).
MAX_WINDOW = 64


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    return (v[0], v[0]) if len(v) == 1 else v if len(v) == 2 else None


def _params(kernel_size, stride, padding, dilation):
    k = _pair(kernel_size)
    s = _pair(stride, k)
    p = _pair(padding, (0, 0))
    d = _pair(dilation, (1, 1))
    if any(v is None for v in (k, s, p, d)):
        return None
    if not all(isinstance(v, int) for v in k + s + p + d):
        return None
    if min(k) < 1 or min(s) < 1 or min(d) < 1 or min(p) < 0 or k[0] * k[1] > MAX_WINDOW:
        return None
    return k, s, p, d


def out_size(size: int, k: int, p: int, s: int, d: int, ceil_mode: bool) -> int:
    """ATen's pooling_output_shape."""
    n = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = n // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _supported(x) -> bool:
    return (isinstance(x, torch.Tensor) and x.dim() in (3, 4) and x.is_floating_point()
            and all(isinstance(n, int) for n in x.shape) and x.numel() > 0)


def _window_offsets(n_out: int, size: int, k: int, p: int, s: int, d: int, device):
    """(start, skip): per output position along one dim, the window's first element
    `o * s - p` (may be negative) and how many of its elements lie before the image (ATen's
    `while (start < 0) start += d`), as int64 tensors."""
    start = torch.arange(n_out, device=device, dtype=torch.int64) * s - p
    skip = torch.clamp(-start + (d - 1), min=0) // d       # elements before the image
    return start, skip


def _max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    params = _params(kernel_size, stride, padding, dilation)
    if params is None or not _supported(x) or not torch.is_grad_enabled():
        return NotImplemented
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = params
    if 2 * ph > kh or 2 * pw > kw:
        return NotImplemented               # ATen rejects it: eager's error
    H, W = x.shape[-2:]
    OH, OW = (out_size(H, kh, ph, sh, dh, ceil_mode), out_size(W, kw, pw, sw, dw, ceil_mode))
    if OH <= 0 or OW <= 0:
        return NotImplemented
    # pad so that every window lies inside: -inf, which never updates the maximum
    hi_h = max(0, (OH - 1) * sh + (kh - 1) * dh + 1 - H - ph)
    hi_w = max(0, (OW - 1) * sw + (kw - 1) * dw + 1 - W - pw)
    xp = aten.constant_pad_nd.default(x, [pw, hi_w, ph, hi_h], float("-inf")) \
        if ph or pw or hi_h or hi_w else x
    m = off = None
    for i in range(kh):
        for j in range(kw):
            v = xp[..., i * dh: i * dh + (OH - 1) * sh + 1: sh,
                   j * dw: j * dw + (OW - 1) * sw + 1: sw]
            here = i * kw + j
            if m is None:
                m = v
                first = _first_offset(OH, OW, H, W, params, x.device)
                # (against a tensor of x's type: a float scalar compares in f64)
                ninf = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
                off = torch.where(v != ninf, here, first)
                continue
            upd = (v > m) | torch.isnan(v)
            m = torch.where(upd, v, m)
            off = torch.where(upd, here, off)
    if kh * kw == 1:
        m = m.clone()       # a slice of the input: the op's result owns its storage
    indices = offsets_to_indices(off, (H, W), params)
    _remember(indices, off, params)
    return m, indices


# indices made by `_max_pool2d_with_indices` while AOTAutograd traces a joint graph -> their
# int8 offsets: the backward (traced in the same joint graph) gathers the offsets instead.
_OFFSETS: dict[int, tuple] = {}


def _remember(indices, off, params) -> None:
    for key in [k for k, v in _OFFSETS.items() if v[0]() is None]:
        del _OFFSETS[key]
    _OFFSETS[id(indices)] = (weakref.ref(indices), off, params)


def _offsets_of(indices, params):
    """The int8 offsets `indices` were computed from (this trace, same pooling), else None."""
    entry = _OFFSETS.get(id(indices))
    if entry is None or entry[0]() is not indices or entry[2] != params:
        return None
    return entry[1]


def _first_offset(OH, OW, H, W, params, device):
    """The window offset of each window's first in-bounds element (ATen's initial index,
    which stays where no element beats -inf), [OH, OW] int8."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = params
    _, skip_h = _window_offsets(OH, H, kh, ph, sh, dh, device)
    _, skip_w = _window_offsets(OW, W, kw, pw, sw, dw, device)
    return (skip_h[:, None] * kw + skip_w[None, :]).to(torch.int8)


def offsets_to_indices(off, hw, params):
    """The flat input index h * W + w of each window offset (`off`: int8, [..., OH, OW])."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = params
    H, W = hw
    OH, OW = off.shape[-2:]
    o = off.to(torch.int64)
    start_h = torch.arange(OH, device=off.device, dtype=torch.int64) * sh - ph
    start_w = torch.arange(OW, device=off.device, dtype=torch.int64) * sw - pw
    kh_i = torch.div(o, kw, rounding_mode="trunc")
    kw_i = o - kh_i * kw
    return (start_h[:, None] + kh_i * dh) * W + start_w[None, :] + kw_i * dw


def _candidates(size: int, n_out: int, k: int, p: int, s: int, d: int):
    """The most output positions along one dim whose windows may cover one input position
    (ATen's phend - phstart over every input position)."""
    span = (k - 1) * d + 1
    starts = [0 if h + p < span else (h + p - span) // s + 1 for h in range(size)]
    ends = [min((h + p) // s + 1, n_out) for h in range(size)]
    return max([e - b for b, e in zip(starts, ends)] + [0])


def _covers(size: int, n_out: int, k: int, p: int, s: int, d: int, a: int, device):
    """Along one dim, the a-th output position whose window may cover each input position
    (ATen's phstart + a), clamped into range, and the input position's element index in that
    window (0 <= k_i < k), or -1000 where that window does not hold it: int64 tensors [size]."""
    h = torch.arange(size, device=device, dtype=torch.int64)
    span = (k - 1) * d + 1
    start = torch.div(torch.clamp(h + (p - span + s), min=0), s, rounding_mode="trunc")
    end = torch.clamp(torch.div(h + p, s, rounding_mode="trunc") + 1, max=n_out)
    o = start + a
    rel = h - (o * s - p)                   # the position's distance from the window start
    held = (o < end) & (rel >= 0) & (rel < span)
    if d > 1:
        held = held & (torch.remainder(rel, d) == 0)
    k_i = torch.div(torch.clamp(rel, min=0), d, rounding_mode="trunc")
    return torch.clamp(o, max=n_out - 1), torch.where(held, k_i, -1000)


def _backward(f32_sum: bool):
    def run(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
        params = _params(kernel_size, stride, padding, dilation)
        if params is None or not _supported(x) or not isinstance(grad_output, torch.Tensor) \
                or grad_output.dim() != x.dim() or grad_output.dtype != x.dtype \
                or not all(isinstance(n, int) for n in grad_output.shape) \
                or grad_output.numel() == 0:
            return NotImplemented
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = params
        H, W = x.shape[-2:]
        OH, OW = grad_output.shape[-2:]
        dev = x.device
        off = _offsets_of(indices, params)
        if off is not None and tuple(off.shape) != tuple(grad_output.shape):
            off = None
        if off is not None and f32_sum:
            # the GPU's: no gather (see _backward_by_residue). The C++ code generator fuses
            # the gather, the BatchNorm sums and the input gradient into one row kernel; the
            # residue form's reshape would keep it a pointwise kernel of its own there.
            return _backward_by_residue(grad_output, off, x, params, f32_sum)
        pos = None
        if off is None:     # indices from elsewhere: compare them with h * W + w
            pos = torch.arange(H, device=dev, dtype=torch.int64)[:, None] * W + \
                torch.arange(W, device=dev, dtype=torch.int64)[None, :]
        lead = [None] * (x.dim() - 2)
        acc_type = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
        acc = None
        for a in range(_candidates(H, OH, kh, ph, sh, dh)):
            oh, k_h = _covers(H, OH, kh, ph, sh, dh, a, dev)
            for b in range(_candidates(W, OW, kw, pw, sw, dw)):
                ow, k_w = _covers(W, OW, kw, pw, sw, dw, b, dev)
                at = lead + [oh[:, None], ow[None, :]]
                g = aten.index.Tensor(grad_output, at)
                if off is not None:
                    # the window offset the position has in window (oh, ow): negative where
                    # the window does not hold it
                    hit = aten.index.Tensor(off, at) == k_h[:, None] * kw + k_w[None, :]
                else:
                    hit = (k_h[:, None] >= 0) & (k_w[None, :] >= 0) & \
                        (aten.index.Tensor(indices, at) == pos)
                term = torch.where(hit, g.to(acc_type), 0.0)
                acc = term if acc is None else acc + term
                if not f32_sum:     # eager's CPU kernel: += on the gradient's own type
                    acc = acc.to(x.dtype).to(acc_type)
        if acc is None:
            return torch.zeros_like(x)
        return acc.to(x.dtype)
    return run


def _shifted(t, a: int, b: int, q_h: int, q_w: int, value):
    """`t` ([..., OH, OW]) moved down by `a` rows and right by `b` columns into a [..., q_h,
    q_w] grid: t[..., q - a, q' - b] at (q, q'), `value` where that lies outside `t`; None
    where nothing of `t` lands in the grid."""
    OH, OW = t.shape[-2:]
    hi_h, hi_w = q_h - a - OH, q_w - b - OW
    if OH + hi_h <= 0 or OW + hi_w <= 0 or a >= q_h or b >= q_w:
        return None
    if hi_h < 0 or hi_w < 0:
        t = t[..., :OH + min(hi_h, 0), :OW + min(hi_w, 0)]
    pad = [b, max(hi_w, 0), a, max(hi_h, 0)]
    return aten.constant_pad_nd.default(t, pad, value) if any(pad) else t


def _window_element(r, a, s, k, d):
    """Along one dim, the element index in window `q - a` of the input position `q * s + r`
    (padded coordinates; r an arange over [0, s)), or -1000 where that window does not hold it."""
    rel = r + a * s
    held = rel < (k - 1) * d + 1
    if d > 1:
        held = held & (torch.remainder(rel, d) == 0)
    return torch.where(held, torch.div(rel, d, rounding_mode="trunc"), -1000)


def _backward_by_residue(grad_output, off, x, params, f32_sum: bool):
    """The gather with no gathered index: padded input position h + p = q * s + r is covered
    by windows q - a (a < ceil(span / s)) only, and whether window q - a holds it at all, and at
    which window offset, depends on the residue r alone. So the gradient over a [..., Q, sh,
    Q', sw] grid is, per candidate (a, b), the grad_output and the offsets shifted by (a, b)
    (padded: a window outside contributes nothing) compared with an [sh, sw] table of expected
    offsets; reshaped to [..., Q * sh, Q' * sw] and sliced at the padding. Every index is
    affine in the loop indices (pads, broadcasts, reshapes): no gather, no bounds check, no
    index table. The sum runs over windows in ATen's order (oh, then ow ascending)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = params
    H, W = x.shape[-2:]
    dev = x.device
    q_h, q_w = (ph + H - 1) // sh + 1, (pw + W - 1) // sw + 1
    n_a, n_b = ((kh - 1) * dh) // sh + 1, ((kw - 1) * dw) // sw + 1
    r_h = torch.arange(sh, device=dev, dtype=torch.int64)
    r_w = torch.arange(sw, device=dev, dtype=torch.int64)
    acc_type = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
    acc = None
    for a in reversed(range(n_a)):          # oh = q - a ascending
        k_h = _window_element(r_h, a, sh, kh, dh)
        for b in reversed(range(n_b)):
            k_w = _window_element(r_w, b, sw, kw, dw)
            g = _shifted(grad_output, a, b, q_h, q_w, 0.0)
            if g is None:
                continue
            o = _shifted(off, a, b, q_h, q_w, -1)
            want = torch.where((k_h[:, None] >= 0) & (k_w[None, :] >= 0),
                               k_h[:, None] * kw + k_w[None, :], -2).to(off.dtype)
            hit = o[..., :, None, :, None] == want[:, None, :]
            term = torch.where(hit, g[..., :, None, :, None].to(acc_type), 0.0)
            acc = term if acc is None else acc + term
            if not f32_sum:     # eager's CPU kernel: += on the gradient's own type
                acc = acc.to(x.dtype).to(acc_type)
    if acc is None:
        return torch.zeros_like(x)
    lead = acc.shape[:-4]
    acc = acc.reshape(*lead, q_h * sh, q_w * sw)[..., ph:ph + H, pw:pw + W]
    return acc.to(x.dtype) if acc.dtype != x.dtype else acc.clone()


def pool_decompositions(gpu: bool) -> dict:
    return {aten.max_pool2d_with_indices.default: _max_pool2d_with_indices,
            aten.max_pool2d_with_indices_backward.default: _backward(f32_sum=gpu)}
