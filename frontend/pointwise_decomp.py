"""Decompositions of ops torch-mlir has no lowering for (or lowers to something no kernel can
hold) into ATen ops it lowers, with eager's values exactly:

* fmax / fmin: `a` where a >= b (a <= b) or b is NaN, else `b`.

(roll: frontend/roll_decomp.py.)
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


def pointwise_decompositions() -> dict:
    return {
        aten.fmax.default: _fmax_fmin(torch.ge),
        aten.fmin.default: _fmax_fmin(torch.le),
    }
