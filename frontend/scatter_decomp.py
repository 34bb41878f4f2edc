"""`slice_scatter` and `select_scatter` (what autograd makes of slicing and indexing: the
backward of `x[:, a:b]`, of rotary embeddings' half-splits) as pointwise ops, which fuse with
their neighbours, instead of `tensor.insert_slice`, which no kernel body takes.

slice_scatter(base, src, dim, start, end, 1) ==
    where(start <= i < end along dim, pad(src, start before, size - end after), base);
select_scatter(base, src, dim, i) == slice_scatter(base, src.unsqueeze(dim), dim, i, i + 1).
as_strided_scatter that covers `base` in its own order is `src` reshaped (others stay).
A strided slice (step > 1) spreads `src` first: `step - 1` zeros after each element."""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _bounds(size: int, start, end) -> tuple[int, int]:
    start = 0 if start is None else start
    end = size if end is None else end
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start = min(max(start, 0), size)
    return start, min(max(end, start), size)


def _slice_scatter(base, src, dim=0, start=None, end=None, step=1):
    if not isinstance(step, int) or step < 1 \
            or not all(isinstance(b, (int, type(None))) for b in (start, end)):
        return NotImplemented
    dim = dim % base.dim()
    size = base.shape[dim]
    if not isinstance(size, int):
        if step != 1:
            return NotImplemented
        # A symbolic size (frontend/symbolic.py): the whole dim only (the backward of `x[:, 0]`
        # slices every row); other dims may be symbolic anyway.
        if start in (None, 0) and (end is None or end >= 2 ** 62):
            return src.to(base.dtype).expand(base.shape).clone()
        return NotImplemented
    start, end = _bounds(size, start, end)
    src = src.to(base.dtype)
    if step > 1:
        # src[k] goes to start + k * step: interleave step - 1 zeros after each element
        # (unsqueeze, pad the new dim, merge it back), then place as for step 1.
        m = src.shape[dim]
        if m == 0:
            return base.clone()
        wide = torch.nn.functional.pad(src.unsqueeze(dim + 1),
                                       [0, 0] * (src.dim() - 1 - dim) + [0, step - 1])
        src = wide.flatten(dim, dim + 1).narrow(dim, 0, min(m * step, size - start))
        end = start + src.shape[dim]
    elif start == 0 and end == size:
        return src.expand(base.shape).clone()
    pad = [0, 0] * (base.dim() - 1 - dim) + [start, size - end]
    spread = torch.nn.functional.pad(src, pad)
    i = torch.arange(size, device=base.device).view([-1] + [1] * (base.dim() - 1 - dim))
    inside = (i >= start) & (i < end)
    if step > 1:
        inside = inside & ((i - start) % step == 0)
    return torch.where(inside, spread, base)


def _select_scatter(base, src, dim, index):
    if not isinstance(index, int):
        return NotImplemented
    dim = dim % base.dim()
    if not isinstance(base.shape[dim], int):
        if index < 0:
            return NotImplemented
        # a symbolic size: the same `where`, the position compared with the index
        i = torch.arange(base.shape[dim], device=base.device)
        i = i.view([-1] + [1] * (base.dim() - 1 - dim))
        return torch.where(i == index, src.unsqueeze(dim).to(base.dtype), base)
    index = index + base.shape[dim] if index < 0 else index
    return _slice_scatter(base, src.unsqueeze(dim), dim, index, index + 1)


def _as_strided_scatter(base, src, size, stride, storage_offset=None):
    """Where the strides restate `base`'s own layout (strided_views.restates_layout: the
    backward of a squeeze or of an `as_strided` that AOTAutograd wrote for a layout change),
    `src` overwrites every element of `base` in order: the result is `src` in `base`'s shape."""
    from .strided_views import restates_layout
    if not restates_layout(base, size, stride, storage_offset):
        return NotImplemented
    return src.to(base.dtype).reshape(base.shape).clone()


def _embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The embedding's weight gradient as `scatter_add` into zeros (a library call: atomic
    adds on a GPU), accumulated in f32 for 16-bit gradients as torch's decomposition does.
    torch's own decomposition is `index_put(accumulate=True)`, whose CUDA kernel sorts the
    indices and serialises the duplicates of each row: BERT's token-type embedding (2 rows,
    2048 tokens) took 0.9 ms of a 12 ms training step on an H200 that way."""
    if scale_grad_by_freq or not isinstance(num_weights, int):
        return NotImplemented
    dim = grad.shape[-1]
    flat = indices.reshape(-1)
    src = grad.reshape(-1, dim)
    compute = torch.float32 if grad.dtype in (torch.bfloat16, torch.float16) else grad.dtype
    src = src.to(compute)
    if padding_idx is not None and padding_idx >= 0:
        src = torch.where((flat == padding_idx).unsqueeze(-1), 0, src)
    index = flat.unsqueeze(-1).expand(src.shape)
    out = aten.scatter_add.default(src.new_zeros((num_weights, dim)), 0, index, src)
    return out.to(grad.dtype)


# rows x indices x the rest at most: the one-hot reduction's work, next to a GPU's sort-based
# index_put (radix sort passes, then a kernel per run of duplicates) a few microseconds
DENSE_INDEX_PUT_MAX = 1 << 24


def _index_put_dense(self, indices, values, accumulate=False):
    """`index_put(self, [idx], values, accumulate=True)` of one 1-d index into dim 0 (the
    backward of `table[idx]`: swin_t's relative-position bias, 2401 positions into 169 rows) as
    one reduction: `self + sum_i where(idx[i] == r, values[i], 0)` over r, which fuses into one
    generated kernel. On a GPU, eager's kernel sorts the indices first (several library kernels
    a call). f32/f64 only: a 16-bit accumulation rounds after each add in eager's order, which a
    reduction does not follow; the sum's order differs from eager's sequential one by f32
    rounding. Negative indices wrap, as index_put's do; an index out of range still raises
    (the wrapped indices are read through a gather of `arange(rows)`, which checks them)."""
    if not accumulate or len(indices) != 1 or indices[0] is None:
        return NotImplemented
    idx = indices[0]
    if idx.dtype not in (torch.int64, torch.int32) or idx.dim() != 1 \
            or self.dtype not in (torch.float32, torch.float64) or values.dtype != self.dtype:
        return NotImplemented
    shape = [*self.shape, *values.shape, idx.shape[0]]
    if not all(isinstance(n, int) for n in shape) or self.dim() < 1 \
            or tuple(values.shape) != (idx.shape[0], *self.shape[1:]):
        return NotImplemented
    rows, n = self.shape[0], idx.shape[0]
    idx = idx.to(torch.int64)   # (an int32 gather index does not import)
    rest = 1
    for d in self.shape[1:]:
        rest *= d
    if rows * n * rest > DENSE_INDEX_PUT_MAX or n == 0:
        return NotImplemented
    row = torch.arange(rows, device=idx.device, dtype=idx.dtype)
    wrapped = row[torch.where(idx < 0, idx + rows, idx)]
    hit = (wrapped.unsqueeze(0) == row.unsqueeze(1)).reshape(rows, n, *([1] * (self.dim() - 1)))
    return self + torch.where(hit, values.unsqueeze(0), 0).sum(1)


def dense_index_put_decompositions() -> dict:
    """For GPU code generators only: on the CPU eager's index_put is a loop of adds, cheaper
    than a one-hot reduction."""
    return {aten.index_put.default: _index_put_dense}


def scatter_decompositions() -> dict:
    return {aten.embedding_dense_backward.default: _embedding_backward,
            aten.slice_scatter.default: _slice_scatter,
            aten.select_scatter.default: _select_scatter,
            aten.as_strided_scatter.default: _as_strided_scatter}
