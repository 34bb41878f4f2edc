"""`roll` as a concatenation of two slices per rolled dim, which fuse with their neighbours
(kernel_schedule takes `tensor.concat` and `tensor.extract_slice`). torch-mlir's own lowering
of `aten.roll` leaves dynamic-size slices behind, which ember-fuse rejects.

roll(x, s, d) == cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d) with s taken mod n;
roll without dims rolls the flattened tensor. Symbolic sizes are left alone (NotImplemented)."""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _roll(x, shifts, dims=()):
    if not all(isinstance(s, int) for s in x.shape):
        return NotImplemented
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(s, int) for s in shifts):
        return NotImplemented
    if not dims:
        if len(shifts) != 1:
            return NotImplemented
        return _roll(x.reshape(-1), shifts, [0]).view(x.shape)
    if len(shifts) != len(dims):
        return NotImplemented
    y = x
    for s, d in zip(shifts, dims):
        d = d % max(x.dim(), 1)
        n = x.shape[d] if x.dim() else 1
        if n == 0 or s % n == 0:
            continue
        s %= n
        y = torch.cat([y.narrow(d, n - s, s), y.narrow(d, 0, n - s)], d)
    return x.clone() if y is x else y


def roll_decompositions() -> dict:
    return {aten.roll.default: _roll}
