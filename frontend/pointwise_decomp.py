"""Decompositions of ops torch-mlir has no lowering for (or lowers to something no kernel can
hold) into ATen ops it lowers, with eager's values exactly:

* fmax / fmin: `a` where a >= b (a <= b) or b is NaN, else `b`.
* float `eq.Tensor(a, b)` as `not(a != b)`: torch-mlir folds `eq(x, x)` (and `x == x.view(..)`)
  to true, which is false for NaN; `isfinite`'s decomposition (`x == x & |x| != inf`) came out
  true for NaN with it. `ne` (unordered) is not folded, and `not ne` is eager's `eq` on every
  input, NaN included.

* bool `add` as `|`: eager's bool + bool is a logical or; the triton target's i1 add wrapped
  (`any() + True` gave False: fuzz seed 21 index 1824).
* integer `neg` as `~x + 1`: torch-mlir negates integers through f32 (sitofp, negf, fptosi):
  -(2**63 - 2) gave -2**63, and any |x| > 2**24 lost its low bits (fuzz seed 20 index 2480).

* `angle` of a real tensor (torch-mlir has no lowering): NaN where x is NaN, pi where x < 0,
  else 0, in the result's float type (integer inputs: the default float type), as eager's
  kernel (`angle_impl`).

(roll: frontend/roll_decomp.py.)
"""
from __future__ import annotations

import math

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


def _eq_tensor(a, b):
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or \
            not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return NotImplemented
    return torch.logical_not(torch.ne(a, b))


def _logical(combine):
    """logical_and / or / xor of two tensors as `combine(a != 0, b != 0)`: the same values,
    and as a decomposition the result gets eager's layout (decomp_layouts.keep_layout): the
    ops' meta function lays a mixed-layout result out contiguous where eager's TensorIterator
    follows the operands (fuzz seed 29 index 860: strides (6, 2, 1), eager (1, 3, 9))."""
    def run(a, b):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or \
                a.dtype.is_complex or b.dtype.is_complex:
            return NotImplemented
        return combine(torch.ne(a, 0), torch.ne(b, 0))
    return run


def _neg(a):
    if not isinstance(a, torch.Tensor) or a.dtype.is_floating_point or a.dtype.is_complex \
            or a.dtype == torch.bool:
        return NotImplemented
    return torch.bitwise_not(a) + 1      # two's complement: wraps as eager's -x does


def _bool_add(a, b, *, alpha=1):
    a_bool = isinstance(a, torch.Tensor) and a.dtype == torch.bool
    b_bool = isinstance(b, bool) or isinstance(b, torch.Tensor) and b.dtype == torch.bool
    if not (a_bool and b_bool and alpha == 1):
        return NotImplemented
    return torch.bitwise_or(a, b)


def _angle(x):
    if not isinstance(x, torch.Tensor) or x.dtype.is_complex:
        return NotImplemented
    dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    xf = x.to(dtype)
    pi = torch.full((), math.pi, dtype=dtype)
    zero = torch.zeros((), dtype=dtype)
    return torch.where(torch.isnan(xf), xf, torch.where(xf < 0, pi, zero))


def pointwise_decompositions() -> dict:
    return {
        aten.angle.default: _angle,
        aten.add.Tensor: _bool_add,
        aten.neg.default: _neg,
        aten.eq.Tensor: _eq_tensor,
        aten.logical_and.default: _logical(torch.bitwise_and),
        aten.logical_or.default: _logical(torch.bitwise_or),
        aten.logical_xor.default: _logical(torch.ne),
        aten.fmax.default: _fmax_fmin(torch.ge),
        aten.fmin.default: _fmax_fmin(torch.le),
    }
