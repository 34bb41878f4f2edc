"""Special functions as elementary ATen ops torch-mlir lowers, so that they fuse into kernels
(Inductor generates code for them too): digamma, trigamma (polygamma of order 0 and 1), lgamma,
erfinv, erfc, i0 / i0e / i1 / i1e, spherical_bessel_j0, hypot. By default only those whose
kernel is not slower than eager's (`GENERATED`); the others stay library calls for now.

Invariant: each decomposition computes what eager's kernel computes, on every input (negatives,
poles, 0, +-inf, NaN), in eager's computation type (f32 for f32 / bf16 / f16 and for integer
inputs, f64 for f64), rounded once to the result type; piecewise forms are `torch.where`s and
loops are unrolled to their fixed bound (no data-dependent control flow). What has no such
form returns NotImplemented: the op stays whole and runs as a library call
(frontend/partition.py LIBRARY_OPS, the special functions block).

Algorithms (ATen's, aten/src/ATen/native/Math.h, unless said otherwise):
* digamma: reflection for x < 0 with the fractional part, the recurrence up to x >= 10
  (10 steps at most), the asymptotic series (Cephes' coefficients; they are the Bernoulli
  numbers B_2k / 2k); psi(10) exactly at 10.
* trigamma: reflection below 1/2, six steps of the recurrence, the asymptotic series.
* lgamma: reflection below 1/2 (with sin(pi x) of the reduced argument), the recurrence up to
  x >= 8 as one product, then Stirling's series (eager calls libm's lgammaf, whose algorithm
  differs; the results agree to a few ulp).
* i0e / i1e: Chebyshev expansions on [0, 8] and [8, inf) (in 16/x - 1) fitted to torch's
  float64 functions (special_fits.py); i0 = i0e * exp|x|, i1 = i1e * exp|x|, as eager's
  Cephes forms multiply exp(x) by the same kind of expansion.
* erfinv: a first guess from fitted rational forms, then two Newton steps on erf, as ATen.
* erfc: 1 - erf(x) where that loses nothing (x < 1/2); else t exp(-x^2 + P(t)), t = 2/(2+x)
  (Numerical Recipes' erfc form, P fitted to float64 erfc), and 2 - erfc(-x) for x < 0.
"""
from __future__ import annotations

import functools
import math

import torch

from .special_fits import (ERFC_T, ERFINV_CENTRAL, ERFINV_TAIL, ERFINV_Z_HIGH, ERFINV_Z_LOW,
                           I0E_HIGH, I0E_LOW, I1E_HIGH, I1E_LOW)

aten = torch.ops.aten
_NARROW = (torch.bfloat16, torch.float16)
_ARITY = {aten.hypot.default: 2}


def _compute(x):
    """(x in its computation type, result dtype): f32 for 16-bit floats and integers."""
    if x.dtype == torch.float64:
        return x, x.dtype
    if x.dtype.is_floating_point:
        return x.float(), x.dtype
    return x.float(), torch.get_default_dtype()


@functools.lru_cache(maxsize=None)
def eager_supports(op, dtype: torch.dtype) -> bool:
    """Whether eager's CPU kernel of the unary `op` takes `dtype` (spherical_bessel_j0 has no
    bf16/f16 kernel, hypot no integer one): where it does not, the op stays, to raise as eager."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():     # a real call, also from inside a trace
        try:
            op(*[torch.ones(1, dtype=dtype)] * _ARITY.get(op, 1))
            return True
        except Exception:
            return False


def _pointwise(op, fn, f64=True):
    """`fn` in the computation type; `f64=False`: float64 inputs keep eager's kernel (the
    fitted expansions and Stirling's series are float32-accurate)."""
    def decomp(x):
        if x.dtype.is_complex or (x.dtype == torch.float64 and not f64) or \
                not eager_supports(op, x.dtype):
            return NotImplemented
        xc, out = _compute(x)
        return fn(xc).to(out)
    return decomp


def _horner(z, coeffs):
    acc = torch.full_like(z, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * z + c
    return acc


def _chebyshev(t, coeffs):
    """sum c_k T_k(t) (Clenshaw), t in [-1, 1]; coeffs[0] is the constant term (not halved)."""
    b1 = torch.zeros_like(t)
    b2 = torch.zeros_like(t)
    t2 = 2 * t
    for c in reversed(coeffs[1:]):
        b1, b2 = t2 * b1 - b2 + c, b1
    return t * b1 - b2 + coeffs[0]


# --- gamma family -----------------------------------------------------------------------------

_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = (8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
              -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
              8.33333333333333333333e-2)


def _digamma(x):
    neg = x < 0
    # tan has period pi: the reduced argument in [-1/2, 1/2] is exact, and pi * r then rounds
    # as little as eager's double computation (which uses the fractional part)
    r = x - torch.round(x)
    pi_over_tan = math.pi * torch.cos(math.pi * r) / torch.sin(math.pi * r)   # no tan in Triton
    y = torch.where(neg, 1 - x, x)
    acc = torch.zeros_like(x)
    for _ in range(10):                 # x >= 10 after ten steps of psi(x+1) = psi(x) + 1/x
        small = y < 10
        acc = acc - torch.where(small, 1 / y, 0)
        y = torch.where(small, y + 1, y)
    z = 1 / (y * y)
    series = torch.where(y < 1e17, z * _horner(z, _DIGAMMA_A), 0)
    val = acc + torch.where(y == 10, _PSI_10, torch.log(y) - 0.5 / y - series)
    val = torch.where(neg, val - pi_over_tan, val)
    val = torch.where(neg & (x == torch.trunc(x)), math.nan, val)   # poles: NaN, as eager
    return torch.where(x == 0, -1 / x, val)    # +-0: -+inf


def _trigamma(x):
    refl = x < 0.5
    s = torch.sin(math.pi * x)
    acc = torch.where(refl, -(math.pi * math.pi) / (s * s), 0)
    y = torch.where(refl, 1 - x, x)
    for _ in range(6):
        acc = acc + 1 / (y * y)
        y = y + 1
    ixx = 1 / (y * y)
    acc = acc + (1 + 1 / (2 * y) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / y
    return torch.where(refl, -acc, acc)


_HALF_LOG_2PI = 0.91893853320467274178


def _lgamma_positive(y):
    """lgamma(y) for y >= 1/2: the recurrence up to 8 (one product, one log), then Stirling."""
    prod = torch.ones_like(y)
    for _ in range(8):
        small = y < 8
        prod = torch.where(small, prod * y, prod)
        y = torch.where(small, y + 1, y)
    iy = 1 / y
    iy2 = iy * iy
    series = iy * (1 / 12 - iy2 * (1 / 360 - iy2 * (1 / 1260 - iy2 * (1 / 1680))))
    return (y - 0.5) * torch.log(y) - y + _HALF_LOG_2PI + series - torch.log(prod)


def _lgamma(x):
    refl = x < 0.5
    pos = _lgamma_positive(torch.where(refl, 1 - x, x))
    r = x - torch.round(x)                  # |sin(pi x)| = |sin(pi r)|, r in [-1/2, 1/2]
    log_pi_over_sin = math.log(math.pi) - torch.log(torch.abs(torch.sin(math.pi * r)))
    val = torch.where(refl, log_pi_over_sin - pos, pos)
    # poles (non-positive integers, every float below -2^23 included) and +-inf: +inf
    return torch.where(torch.isinf(x) | (refl & (r == 0)), math.inf, val)


def _polygamma(n, x):
    if not isinstance(n, int) or n not in (0, 1) or x.dtype.is_complex or \
            not eager_supports(aten.digamma.default, x.dtype):
        return NotImplemented       # a Hurwitz zeta: a library call
    xc, out = _compute(x)
    return (_digamma(xc) if n == 0 else _trigamma(xc)).to(out)


# --- error function -------------------------------------------------------------------------

_TWO_OVER_SQRT_PI = 1.12837916709551257390


def _erfinv(y):
    a = torch.abs(y)
    w = y * y
    central = y * _chebyshev(w / 0.245 - 1, ERFINV_CENTRAL)
    z = torch.sqrt(-torch.log((1 - torch.clamp(a, min=0.7, max=1)) / 2))
    s = 2 * (z - ERFINV_Z_LOW) / (ERFINV_Z_HIGH - ERFINV_Z_LOW) - 1
    tail = torch.sign(y) * _chebyshev(torch.clamp(s, -1, 1), ERFINV_TAIL)
    x = torch.where(a <= 0.7, central, tail)
    for _ in range(2):      # Newton on erf(x) = y, as ATen does
        x = x - (torch.erf(x) - y) / (_TWO_OVER_SQRT_PI * torch.exp(-x * x))
    x = torch.where(a == 1, torch.where(y > 0, math.inf, -math.inf), x)
    return torch.where(a > 1, math.nan, x)


def _erfc_positive(x):
    t = 2 / (2 + x)
    return t * torch.exp(-x * x + _chebyshev(2.5 * t - 1, ERFC_T))


def _erfc(x):
    near = 1 - torch.erf(x)
    far = _erfc_positive(torch.clamp(torch.abs(x), min=0.5))
    far = torch.where(x < 0, 2 - far, far)
    return torch.where(torch.abs(x) < 0.5, near, far)


# --- Bessel functions -----------------------------------------------------------------------

def _bessel_e(low, high, odd):
    """x -> I_nu(x) exp(-|x|) from the two fitted expansions (odd: I_1, whose sign is x's)."""
    def run(x):
        a = torch.abs(x)
        inner = _chebyshev(a / 4 - 1, low)
        if odd:
            inner = inner * a
        outer = _chebyshev(16 / torch.clamp(a, min=8) - 1, high) / torch.sqrt(a)
        val = torch.where(a <= 8, inner, outer)
        val = torch.where(torch.isinf(a), 0, val)
        return torch.sign(x) * val if odd else val
    return run


_i0e = _bessel_e(I0E_LOW, I0E_HIGH, odd=False)
_i1e = _bessel_e(I1E_LOW, I1E_HIGH, odd=True)


def _i0(x):
    return _i0e(x) * torch.exp(torch.abs(x))


def _i1(x):
    return _i1e(x) * torch.exp(torch.abs(x))


def _spherical_bessel_j0(x):
    """sin(x)/x; the Taylor series where |x| < 1/2 (ATen's form); 0 at +-inf."""
    x2 = x * x
    series = 1 + x2 * (-1 / 6 + x2 * (1 / 120 + x2 * (-1 / 5040 + x2 * (
        1 / 362880 + x2 * (-1 / 39916800 + x2 * (1 / 6227020800))))))
    val = torch.where(torch.abs(x) < 0.5, series, torch.sin(x) / x)
    return torch.where(torch.isinf(x), 0, val)


def _hypot(a, b):
    """sqrt(a^2 + b^2) without overflow or underflow: m sqrt(1 + (n/m)^2), m = max(|a|, |b|);
    inf if either is infinite (even with a NaN), as C's hypot."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return NotImplemented
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point or not eager_supports(aten.hypot.default, dtype):
        return NotImplemented
    ct = torch.float32 if dtype in _NARROW else dtype
    a, b = torch.abs(a.to(ct)), torch.abs(b.to(ct))
    m = torch.maximum(a, b)
    n = torch.minimum(a, b)
    q = n / torch.where(m == 0, 1, m)
    val = m * torch.sqrt(1 + q * q)
    val = torch.where(torch.isinf(a) | torch.isinf(b), math.inf, val)
    return val.to(dtype)


# Generated by default: those whose fused kernel is at least as fast as eager's kernel (CPU, one
# thread, 2^18 f32 elements, min of 30, 2026-11-23; eager / ember ms): trigamma 2.7 / 2.8,
# spherical_bessel_j0 2.4 / 2.5, hypot 0.48 / 0.23, i0e 5.6 / 3.0. The others are exact (the
# same tests check them) but slower today: split into 2-3 kernels by ember-fuse's
# max_group_size=64 (digamma 10.7 / 35, i1 3.1 / 7.8; in one kernel 11 / 9.9 and 2.9 / 0.8),
# or slower per element even in one kernel (lgamma 2.1 / 18.5, erfinv 0.57 / 3.8, erfc 3.0 /
# 5.0): they stay library calls (eager's speed) until then. `generate_all=True` gives them all.
GENERATED = frozenset({"polygamma_1", "special_spherical_bessel_j0", "hypot", "special_i0e"})


def special_decompositions(generate_all: bool = False) -> dict:
    table = {
        aten.digamma.default: _pointwise(aten.digamma.default, _digamma),
        aten.polygamma.default: _polygamma,
        aten.lgamma.default: _pointwise(aten.lgamma.default, _lgamma, f64=False),
        aten.erfinv.default: _pointwise(aten.erfinv.default, _erfinv),
        aten.erfc.default: _pointwise(aten.erfc.default, _erfc, f64=False),
        aten.i0.default: _pointwise(aten.i0.default, _i0, f64=False),
        aten.special_i0e.default: _pointwise(aten.special_i0e.default, _i0e, f64=False),
        aten.special_i1.default: _pointwise(aten.special_i1.default, _i1, f64=False),
        aten.special_i1e.default: _pointwise(aten.special_i1e.default, _i1e, f64=False),
        aten.special_spherical_bessel_j0.default: _pointwise(
            aten.special_spherical_bessel_j0.default, _spherical_bessel_j0),
        aten.hypot.default: _hypot,
    }
    if generate_all:
        return table
    table = {op: fn for op, fn in table.items() if op._schema.name.split("::")[1] in GENERATED}

    def polygamma_1(n, x):      # order 1 only: order 0 is digamma (a library call by default)
        return _polygamma(n, x) if n == 1 else NotImplemented
    table[aten.polygamma.default] = polygamma_1
    return table
