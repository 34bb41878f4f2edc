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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pow_number_rounded_to_tensor_type(dtype, target):
    """Eager's pow kernels (CPU and CUDA) read a Python-number exponent (and a number base) in
    the bf16/f16 tensor's type: bf16 x ** 3.1 is x ** 3.09375 (752 for 8.5, exact: 760), 2.1 ** x
    is 2.09375 ** x (1.236e32 for 100, exact: 1.673e32). ember used the unrounded number."""
    x = torch.tensor([8.5, 3.3, 100., 0.7, 5., 0.], dtype=dtype)
    if dtype == torch.float16:
        x = x.clamp(max=20)
    for fn in (lambda x: x.pow(3.1) + 0, lambda x: torch.pow(2.1, x) + 0,
               lambda x: x.pow(-1.7) * 1, lambda x: x.pow(257) * 0 + x.pow(0.3)):
        ref = fn(x)
        out = ember_compile(fn, target)(x)
        assert torch.equal(torch.isnan(out), torch.isnan(ref))
        assert torch.equal(out.nan_to_num(), ref.nan_to_num()), (out, ref)
        check_fallbacks()


def test_vector_norm_bf16_in_f32_and_fractional_order(target):
    """bf16 vector norms are computed in f32 and rounded once, as eager (torch-mlir's lowering
    raised to the power in bf16: ||-8.5||_6 was 8.5625); a fractional order's root 1 / 0.9 is a
    host scalar from constants, which ember-fuse now clones into the kernel (it made a kernel
    with a scalar result: 'Cannot cast type to RankedTensorType', the graph ran eagerly)."""
    for dtype, ords in ((torch.bfloat16, (6, -2.1, 0.9)), (torch.float32, (0.9, 2.5))):
        x = torch.tensor(-8.5, dtype=dtype)
        for o in ords:
            fn = lambda x: torch.linalg.vector_norm(x, o)    # noqa: E731
            ref, gref = _grads(fn, [x])
            out, g = _grads(ember_compile(fn, target), [x])
            if dtype == torch.bfloat16:
                assert torch.equal(out, ref), (o, out, ref)
            assert_close(out, ref)
            assert_close(g[0], gref[0])
            check_fallbacks()
    y = torch.randn(4, 7).bfloat16()
    check(lambda y: torch.linalg.vector_norm(y, 3.5, dim=1) + 1, (y,), target)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_view_copies_and_batch_norm_with_update(dtype):
    """The *_copy ops (functionalization's out-of-place views) and `_batch_norm_with_update`
    with its backward ran eagerly: no torch-mlir lowering; torch's reference decompositions
    (the view and a clone; the batch norm's arithmetic) compile."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5).to(dtype)

    def views(x):
        return (torch.permute_copy(x, (0, 2, 3, 1)) * 2, torch.view_copy(x, (6, 20)) + 1,
                torch.narrow_copy(x, 2, 1, 2) - 1, torch.unbind_copy(x, 1)[2] * 3,
                torch.as_strided_copy(x, (3, 3), (2, 1), 1) + 0)
    ref = views(x)
    out = ember_compile(views, "cpu")(x)
    for o, r in zip(out, ref):
        assert torch.equal(o, r)
    check_fallbacks()

    w, b = torch.randn(3).to(dtype), torch.randn(3).to(dtype)

    def bn(x, w, b, rm, rv):
        return torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)[0]
    stats = lambda: (torch.zeros(3).to(dtype), torch.ones(3).to(dtype))   # noqa: E731
    rm, rv = stats()
    ref, gref = _grads(lambda x, w, b: bn(x, w, b, rm, rv), (x, w, b))
    rm2, rv2 = stats()
    out, g = _grads(ember_compile(lambda x, w, b: bn(x, w, b, rm2, rv2), "cpu"), (x, w, b))
    assert_close(out, ref)
    assert_close(list(g), list(gref))
    assert_close([rm2, rv2], [rm, rv])
    check_fallbacks()


def test_grid_sample_bf16_is_eagers_kernel():
    """Eager's bf16 grid sampler computes the sampling positions in bf16; the f32 decomposition
    differed from it by 5e-2 (a mismatch in the op_db sweep, Inductor's too): a library call."""
    torch.manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 20).bfloat16(), (torch.rand(2, 13, 10, 2) * 2.2 - 1.1).bfloat16()
    fn = lambda x, g: torch.nn.functional.grid_sample(x, g, align_corners=False) * 2   # noqa: E731
    ref, gref = _grads(fn, (x, grid))
    out, g = _grads(ember_compile(fn, "cpu"), (x, grid))
    assert torch.equal(out, ref)
    assert_close(list(g), list(gref))
    check_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_index_add_backward_of_0dim_and_put(dtype):
    """index_add / index_copy of 0-dim tensors: their backward's index_select from a 0-dim
    source did not legalize in torch-mlir (now lifted to one element, frontend/rank_zero.py);
    put is eager's kernel, a library call (no torch-mlir lowering)."""
    x, src, idx = torch.tensor(1.5).to(dtype), torch.tensor(-2.25).to(dtype), torch.tensor([0])
    for fn in (lambda x, s: torch.index_add(x, 0, idx, s, alpha=-1) * 2,
               lambda x, s: torch.index_copy(x, 0, idx, s) * 2):
        ref, gref = _grads(fn, (x, src))
        out, g = _grads(ember_compile(fn, "cpu"), (x, src))
        assert torch.equal(out, ref) and all(torch.equal(a, b) for a, b in zip(g, gref))
        check_fallbacks()
    y, v = torch.randn(3, 3).to(dtype), torch.randn(3).to(dtype)
    pidx = torch.tensor([1, 7, 1])
    fn = lambda y, v: torch.put(y, pidx, v, accumulate=True) + 1   # noqa: E731
    ref, gref = _grads(fn, (y, v))
    out, g = _grads(ember_compile(fn, "cpu"), (y, v))
    assert torch.equal(out, ref)
    assert_close(list(g), list(gref))
    check_fallbacks()


def test_group_norm_backward_with_statistics_compiles():
    """native_group_norm's backward with gradients of its mean and rstd outputs too: ember-fuse
    merged two groups that a third (non-contiguous) group connected, a cycle of kernels ('cycle
    in function body', the whole graph ran eagerly); its cycle check now looks past the last op
    of the target group to the end of every group that overlaps it."""
    torch.manual_seed(0)
    args = (torch.randn(1, 6, 3), torch.randn(6), torch.randn(6))
    fn = lambda x, w, b: torch.native_group_norm(x, w, b, 1, 6, 3, 2, 0.5)   # noqa: E731

    def grads(f):
        xs = [a.clone().requires_grad_() for a in args]
        ys = f(*xs)
        gen = torch.Generator().manual_seed(1)
        return torch.autograd.grad(ys, xs, [torch.randn(y.shape, generator=gen) for y in ys])
    gref = grads(fn)
    g = grads(ember_compile(fn, "cpu"))
    assert_close(list(g), list(gref))
    check_fallbacks()
