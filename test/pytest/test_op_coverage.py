"""Ops the operator conformance sweep found falling back (issue 8, item 5), now compiled: sorts,
scatters and linear algebra as library calls (frontend/partition.py LIBRARY_OPS), fmax/fmin
and roll decomposed (frontend/pointwise_decomp.py), constant index lists as host constants
(frontend/importer.py). Each test checks values against eager and that nothing fell back."""
import pytest
import torch

import ember
from conftest import assert_close, check, check_fallbacks, ember_compile

NAN, INF = float("nan"), float("inf")


def _bitwise_equal(out, ref):
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    keep = ~torch.isnan(ref)
    assert torch.equal(out[keep], ref[keep]) and torch.equal(torch.signbit(out[keep]),
                                                             torch.signbit(ref[keep]))


@pytest.mark.parametrize("op", [torch.fmax, torch.fmin])
def test_fmax_fmin_nan_and_signed_zero(op, target):
    a = torch.tensor([1., -2., NAN, 0., -0., 3., NAN, INF])
    b = torch.tensor([NAN, 5., 1., -0., 0., -1., NAN, -INF])
    out = ember_compile(lambda a, b: op(a, b) * 1, target)(a, b)
    _bitwise_equal(out, op(a, b))
    check_fallbacks()


def test_fmax_int_and_broadcast(target):
    check(lambda a, b: torch.fmax(a, b) + torch.fmin(b, a[:1]), (torch.tensor([1, -3, 4]),
                                                            torch.tensor([[-2], [5]])), target)


@pytest.mark.parametrize("shifts,dims", [(2, 1), ((-1, 7), (0, 1)), (4, None)])
def test_roll(shifts, dims, target):
    x = torch.arange(30.).view(5, 6)
    fn = (lambda x: torch.roll(x, shifts, dims) + 1) if dims is not None else \
        (lambda x: torch.roll(x, shifts) + 1)
    out = check(fn, (x,), target)
    assert torch.equal(out, fn(x))


def test_constant_index_list(target):
    x = torch.randn(5, 4, 3)
    check(lambda x: x[[0, 2, 4]] * 2 + x[:3, [3, 1]].sum(1, keepdim=True), (x,), target)


def test_sort_topk_scatter_are_library_calls():
    x = torch.randn(6, 9, requires_grad=True)

    def fn(x):
        s, i = torch.sort(x, dim=1)
        return s[:, :3] * 2 + torch.topk(x, 3).values + torch.gather(x, 1, i[:, :3])
    ref = fn(x)
    (gref,) = torch.autograd.grad(ref.sum(), x)
    out = ember_compile(fn, "cpu")(x)
    (g,) = torch.autograd.grad(out.sum(), x)
    assert_close(out, ref)
    assert_close(g, gref)
    check_fallbacks()
    calls = {c for r in ember.last_reports() for c in r.get("library_calls", [])}
    assert {"aten.sort.default", "aten.topk.default"} <= calls, calls
    assert calls & {"aten.scatter_add.default", "aten.scatter.src"}, calls
