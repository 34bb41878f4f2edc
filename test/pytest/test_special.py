"""Special functions (frontend/special_decomp.py; the rest as library calls, frontend/partition.py
LIBRARY_OPS) and linear algebra's error checks (frontend/effects.py), on both targets: values
as eager's on edge inputs (poles, zeros, +-inf, NaN, tiny and huge values: NaN and infinities
in the same places, finite values to a relative norm of 1e-4), no eager fallback, and the
decomposed functions generated as kernels, not called."""
import math

import pytest
import torch

import ember
from conftest import check_fallbacks, ember_compile

EDGE = [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 0.5, 1e-30, -1e-30, 1e-8, 10.0, 10.5, 30.0, 88.0,
        89.0, 100.0, 1e10, -1e10, 4e36, -1e38, math.inf, -math.inf, math.nan, -3.3, 7.99, 8.0,
        8.01, 0.4999, 0.5001]
UNIT = [0.0, -0.0, 1.0, -1.0, 0.99999994, -0.99999994, 0.7, 0.7000001, 0.69999, math.nan, 2.0,
        -2.0, 1e-30, 0.5, -0.25]


def _inputs(edge, lo, hi):
    torch.manual_seed(0)
    return torch.cat([torch.tensor(edge), torch.rand(64) * (hi - lo) + lo])


X = _inputs(EDGE, -12.0, 12.0)
U = _inputs(UNIT, -1.0, 1.0)

# name -> (fn, input, generated: no library call in the forward graph, differentiable)
CASES = {
    "digamma": (torch.digamma, X, True, True),
    "trigamma": (lambda x: torch.polygamma(1, x), X, True, True),
    "lgamma": (torch.lgamma, X, True, True),
    "mvlgamma": (lambda x: torch.mvlgamma(x.abs() + 2, 3), X, True, True),
    "erfinv": (torch.erfinv, U, True, True),
    "erfc": (torch.erfc, X, True, True),
    "i0": (torch.i0, X, True, True),
    "i0e": (torch.special.i0e, X, True, True),
    "i1": (torch.special.i1, X, True, True),
    "i1e": (torch.special.i1e, X, True, True),
    "spherical_bessel_j0": (torch.special.spherical_bessel_j0, X, True, False),
    "hypot": (lambda x: torch.hypot(x, x.flip(0) * 0.5), X, True, True),
    # library calls (data-dependent loops or long coefficient tables)
    "polygamma3": (lambda x: torch.polygamma(3, x), X, False, False),
    "bessel_j1": (torch.special.bessel_j1, X, False, False),
    "igammac": (lambda x: torch.igammac(x.abs(), x.flip(0).abs()), X, False, False),
    "chebyshev_w": (lambda x: torch.special.chebyshev_polynomial_w(x / 12, 3), X, False, False),
    "frexp": (lambda x: torch.frexp(x), X, False, False),
}


def _same(out, ref, what):
    if isinstance(ref, (tuple, list)):
        for i, (o, r) in enumerate(zip(out, ref)):
            _same(o, r, f"{what}[{i}]")
        return
    assert out.dtype == ref.dtype and out.shape == ref.shape, what
    if not ref.is_floating_point():
        assert torch.equal(out, ref), what
        return
    o, r = out.detach().double(), ref.detach().double()
    assert torch.equal(torch.isnan(o), torch.isnan(r)), f"{what}: NaN positions differ"
    inf = torch.isinf(o) | torch.isinf(r)
    assert torch.equal(o[inf], r[inf]), f"{what}: infinities differ"
    fin = ~(inf | torch.isnan(r))
    err = (o[fin] - r[fin]).norm() / r[fin].norm().clamp_min(1e-30)
    assert err < 1e-4, f"{what}: relative error {err:.2e}"


def _library_calls():
    return sorted({c for r in ember.last_reports() for c in r.get("library_calls", [])})


@pytest.mark.parametrize("name", sorted(CASES))
def test_special_forward(name, target):
    fn, x, generated, _ = CASES[name]
    f = (lambda t: fn(t)) if name == "frexp" else (lambda t: fn(t) * 2 + 1)
    compiled = ember_compile(f, target)
    _same(compiled(x), f(x), name)
    check_fallbacks()
    if generated:
        assert _library_calls() == [], f"{name} was called, not generated"


@pytest.mark.targets("cpu")
@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c[3]))
def test_special_backward(name, target):
    fn, x, _, _ = CASES[name]
    x = x[~torch.isinf(x)]       # inf * 0 in the chain rule: NaN in eager and ember alike
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = ember_compile(lambda t: fn(t).nan_to_num(0, 0, 0).sum(), target)
    compiled(a).backward()
    fn(b).nan_to_num(0, 0, 0).sum().backward()
    _same(a.grad, b.grad, f"{name} grad")
    check_fallbacks()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int64])
def test_special_dtypes(dtype):
    # bf16 computes in f32 and rounds once, integers promote to the default float: as eager
    x = (torch.arange(-6, 26) * 0.75).to(dtype)
    for fn in (torch.digamma, torch.lgamma, torch.special.i1e, torch.erfc):
        compiled = ember_compile(lambda t: fn(t) + 1, "cpu")
        out, ref = compiled(x), fn(x) + 1
        assert out.dtype == ref.dtype
        _same(out.float(), ref.float(), f"{fn.__name__} {dtype}")
        check_fallbacks()
        assert _library_calls() == []


def test_special_without_an_eager_kernel_raises_as_eager():
    # spherical_bessel_j0 has no bf16 kernel: the op stays (a library call) and raises the same
    x = torch.randn(8, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError):
        torch.special.spherical_bessel_j0(x)
    with pytest.raises(NotImplementedError):
        ember_compile(torch.special.spherical_bessel_j0, "cpu")(x)


def test_linalg_error_checks(target):
    # with_effects(_linalg_check_errors): the factorization compiles (a library call), the
    # check runs as eager's and raises eager's error
    a = torch.randn(5, 5)
    a = a @ a.T + torch.eye(5)
    b = torch.randn(5, 3)

    def f(m, r):
        return torch.linalg.cholesky(m).sin() + torch.linalg.solve(m, r).sum() + torch.linalg.inv(m)
    compiled = ember_compile(f, target)
    _same(compiled(a, b), f(a, b), "linalg")
    check_fallbacks()
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        compiled(-a, b)


@pytest.mark.targets("cpu")
def test_linalg_cholesky_backward(target):
    a = torch.randn(5, 5)
    a = a @ a.T + torch.eye(5)
    x, y = a.clone().requires_grad_(), a.clone().requires_grad_()
    ember_compile(lambda m: torch.linalg.cholesky(m).sum(), target)(x).backward()
    torch.linalg.cholesky(y).sum().backward()
    _same(x.grad, y.grad, "cholesky grad")
    check_fallbacks()


@pytest.mark.targets("cpu")     # Triton: max.dim over booleans still runs eagerly (combiner)
def test_cumprod_backward(target):
    # the backward's "any zero before" is a max over booleans (arith.maxui on i1)
    x = torch.randn(4, 6)
    x[1, 2] = 0
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ember_compile(lambda t: torch.cumprod(t, 1).sum(), target)(a).backward()
    torch.cumprod(b, 1).sum().backward()
    _same(a.grad, b.grad, "cumprod grad")
    check_fallbacks()


@pytest.mark.parametrize("name", ["eq_self", "eq_view", "isfinite"])
def test_nan_is_not_equal_to_itself(name, target):
    # torch-mlir folded eq(x, x) to true; isfinite (x == x & |x| != inf) was true for NaN
    fns = {"eq_self": lambda t: t == t, "eq_view": lambda t: t == t.view(2, 3),
           "isfinite": torch.isfinite}
    x = torch.tensor([[math.nan, 0.0, 1.0], [math.inf, -math.inf, -0.0]])
    compiled = ember_compile(fns[name], target)
    assert torch.equal(compiled(x), fns[name](x))
    check_fallbacks()
