"""`slice_scatter` and `select_scatter` (what autograd makes of slicing and indexing: the
backward of `x[:, a:b]`, of rotary embeddings' half-splits) as pointwise ops, which fuse with
their neighbours, instead of `tensor.insert_slice`, which no kernel body takes.

slice_scatter(base, src, dim, start, end, 1) ==
    where(start <= i < end along dim, pad(src, start before, size - end after), base);
select_scatter(base, src, dim, i) == slice_scatter(base, src.unsqueeze(dim), dim, i, i + 1).
Strided slices (step > 1) are left alone (NotImplemented)."""
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
    if step != 1 or not all(isinstance(b, (int, type(None))) for b in (start, end)):
        return NotImplemented
    dim = dim % base.dim()
    size = base.shape[dim]
    if not isinstance(size, int):
        # A symbolic size (frontend/symbolic.py): the whole dim only (the backward of `x[:, 0]`
        # slices every row); other dims may be symbolic anyway.
        if start in (None, 0) and (end is None or end >= 2 ** 62):
            return src.to(base.dtype).expand(base.shape).clone()
        return NotImplemented
    start, end = _bounds(size, start, end)
    if start == 0 and end == size:
        return src.to(base.dtype).expand(base.shape).clone()
    pad = [0, 0] * (base.dim() - 1 - dim) + [start, size - end]
    spread = torch.nn.functional.pad(src.to(base.dtype), pad)
    i = torch.arange(size, device=base.device).view([-1] + [1] * (base.dim() - 1 - dim))
    return torch.where((i >= start) & (i < end), spread, base)


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


def scatter_decompositions() -> dict:
    return {aten.slice_scatter.default: _slice_scatter,
            aten.select_scatter.default: _select_scatter}
