"""Ops the bfloat16 op_db sweep of 2026-11-26 (benchmarks/results/opdb-2026-11-26.md) found
falling back to eager where Inductor compiles them, now compiled. Each test compares with eager
(bit for bit where ember's lowering is eager's own arithmetic) and checks nothing fell back."""
import pytest
import torch

import ember
from conftest import assert_close, check, check_fallbacks, ember_compile

NAN, INF = float("nan"), float("inf")


def _grads(fn, args):
    args = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    out = fn(*args)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    grads = torch.autograd.grad(out, [a for a in args if a.requires_grad], g)
    return out, grads


def test_addbmm_bf16_is_a_library_call():
    """torch-mlir lowers addbmm for f32 only: bf16 failed to legalize and ran eagerly."""
    torch.manual_seed(0)
    args = [torch.randn(5, 10), torch.randn(5, 5, 5), torch.randn(5, 5, 10)]
    args = [a.bfloat16() for a in args]
    fn = lambda a, b, c: torch.addbmm(a, b, c, beta=0.5, alpha=2) * 2   # noqa: E731
    ref, gref = _grads(fn, args)
    out, g = _grads(ember_compile(fn, "cpu"), args)
    assert torch.equal(out, ref)     # eager's own kernel, in the program
    assert_close(list(g), list(gref))
    check_fallbacks()
    calls = {c for r in ember.last_reports() for c in r.get("library_calls", [])}
    assert "aten.addbmm.default" in calls, calls


@pytest.mark.parametrize("p", [2, INF])
def test_norm_and_dist_bf16(p, target):
    """`aten.norm.Scalar` (dist's decomposition) of bf16: torch-mlir's verifier rejected it."""
    torch.manual_seed(0)
    a, b = torch.randn(5, 5, 5).bfloat16(), torch.randn(5, 5, 5).bfloat16()
    check(lambda a, b: torch.dist(a, b, p) + 1, (a, b), target)
    check(lambda a: torch.norm(a, p, dim=1) * 2, (a,), target)
    ref, gref = _grads(lambda a, b: torch.dist(a, b, p), (a, b))
    out, g = _grads(ember_compile(lambda a, b: torch.dist(a, b, p), target), (a, b))
    assert_close(out, ref)
    assert_close(list(g), list(gref))
    check_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_angle_real(dtype, target):
    """torch-mlir has no lowering of aten.angle: NaN stays NaN, pi below zero, else 0 (-0.0
    included); integers give the default float type."""
    x = torch.tensor([1.5, -2., 0., -0., NAN, -INF, INF, -1e-30])
    if not dtype.is_floating_point:
        x = torch.tensor([3, -2, 0, -7])
    x = x.to(dtype)
    fn = lambda x: torch.angle(x) * 1   # noqa: E731
    out = ember_compile(fn, target)(x)
    ref = fn(x)
    assert out.dtype == ref.dtype and torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.equal(out.nan_to_num(), ref.nan_to_num())
    check_fallbacks()
