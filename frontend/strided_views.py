"""`as_strided` that only restates a layout, as a `view`.

AOTAutograd writes some layout changes as `as_strided(x, size, stride)` (the adaptive pooling
of a permuted tensor: `as_strided(mean, [1, 768, 1, 1], [768, 1, 768, 768])`). torch-mlir lowers
`as_strided` to a gather with constant indices; when the strides describe the same elements in
the same order as `x`'s own layout, it is `x` itself (same shape) or a reshape of a contiguous
`x`, and a `view` says so (no kernel at all). Strides of size-1 dims do not matter."""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten


def _strides(shape, stride) -> list:
    return [s for n, s in zip(shape, stride) if n != 1]


def _contiguous(shape) -> list[int]:
    out, acc = [], 1
    for n in reversed(list(shape)):
        out.append(acc)
        acc *= n
    return list(reversed(out))


def restates_layout(x: torch.Tensor, size, stride, offset) -> bool:
    if not all(isinstance(v, int) for v in list(x.shape) + list(x.stride()) + list(size)
               + list(stride)):
        return False
    if offset is not None and offset != x.storage_offset():
        return False
    if list(size) == list(x.shape):
        return _strides(size, stride) == _strides(x.shape, x.stride())
    return (x.is_contiguous() and x.numel() == torch.Size(size).numel()
            and _strides(size, stride) == _strides(size, _contiguous(size)))


def as_strided_to_view(gm: fx.GraphModule) -> None:
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.as_strided.default:
            continue
        x, size, stride = node.args[:3]
        offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
        val = x.meta.get("val") if isinstance(x, fx.Node) else None
        if isinstance(val, torch.Tensor) and restates_layout(val, size, stride, offset):
            node.target, node.args, node.kwargs = aten.view.default, (x, list(size)), {}
            changed = True
    if changed:
        gm.recompile()
