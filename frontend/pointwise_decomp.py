"""Decompositions of ops torch-mlir has no lowering for (or lowers to something no kernel can
hold) into ATen ops it lowers, with eager's values exactly:

* fmax / fmin: `a` where a >= b (a <= b) or b is NaN, else `b`;
* roll: a gather (`index_select` of a rotated `arange`) per rolled dim, which fuses; torch's own
  decomposition takes an integer `fmod` that torch-mlir does not lower.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _fmax_fmin(keep_a):
    def decomp(a, b):
        # eager keeps `a` on ties (fmax(0.0, -0.0) is 0.0, fmax(-0.0, 0.0) is -0.0)
        dtype = torch.result_type(a, b)
        pick_a = keep_a(a, b)
        if dtype.is_floating_point:
            pick_a = pick_a | torch.isnan(b)
        return torch.where(pick_a, a, b).to(dtype)
    return decomp


def _roll(x, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(v, int) for v in [*shifts, *dims, *x.shape]):
        return NotImplemented
    if not dims:
        if len(shifts) != 1:
            return NotImplemented
        return _roll(x.reshape(-1), shifts, [0]).view(x.shape)
    out = x
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        if n == 0 or s % n == 0:
            continue
        idx = torch.arange(n, device=x.device) + (n - s % n)
        idx = torch.where(idx >= n, idx - n, idx)
        out = torch.index_select(out, d, idx)
    return out.clone() if out is x else out


def pointwise_decompositions() -> dict:
    return {
        aten.fmax.default: _fmax_fmin(torch.ge),
        aten.fmin.default: _fmax_fmin(torch.le),
        aten.roll.default: _roll,
    }
