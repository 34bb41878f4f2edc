"""Views made on every call of a compiled graph, without the dispatcher.

`reinterpret(t, size, stride, offset)` is `t.as_strided(size, stride, t.storage_offset() +
offset)` made by torch's C++ helper that Inductor's generated wrappers use
(`torch._C._dynamo.guards._reinterpret_tensor`, torch >= 2.2): a new tensor on `t`'s storage
with that geometry, without the dispatcher, autograd or view tracking — several times cheaper
than `Tensor.as_strided` from Python, which matters when a training forward hands out a hundred
views per call.

Invariant: the result has the size, stride, storage offset, dtype, device and storage (hence
data_ptr) that `as_strided` gives. What it does not have: autograd history (it never requires
grad), a `_base`, and `t`'s version counter (a fresh one). So callers use it only where nothing
can tell: views that only ember's own graphs read (a training forward's saved activations),
inputs handed to a compiled program (read as memory), views of a graph's own pool.
"""
from __future__ import annotations

import torch

try:
    from torch._C._dynamo.guards import _reinterpret_tensor as _fast
except ImportError:     # another torch: the same geometry through as_strided
    _fast = None


def _slow(t: torch.Tensor, size, stride, offset: int = 0) -> torch.Tensor:
    return t.as_strided(size, stride, t.storage_offset() + offset)


reinterpret = _fast if _fast is not None else _slow
