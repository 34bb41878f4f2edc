"""Reductions: accuracy of large float sums, 16-bit means, and the reductions that fell back
(group norm, sums of expanded reads, masked reductions of embedding_bag / adaptive max pool,
circular padding), forward and backward against eager on every target, with no eager fallback.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_close, check_fallbacks, ember_compile, rel_err


def _randn(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def _fwd_bwd(fn, args, target, tol=None, grads=True):
    """fn(*args) compiled vs eager, then the gradients of the floating inputs through a fixed
    random cotangent; nothing may run eagerly. Tensors go to the target's device."""
    dev = "cuda" if target != "cpu" and torch.cuda.is_available() else "cpu"
    args = [a.to(dev) for a in args]
    ref_in = [a.detach().clone().requires_grad_(grads and a.is_floating_point()) for a in args]
    out_in = [a.detach().clone().requires_grad_(grads and a.is_floating_point()) for a in args]
    ref = fn(*ref_in)
    out = ember_compile(fn, target)(*out_in)
    assert_close(out, ref, tol=tol)
    if not grads:
        check_fallbacks()
        return
    cot = _randn(ref.shape, seed=7).to(dev, ref.dtype)
    (ref * cot).sum().backward()
    (out * cot).sum().backward()
    for i, (o, r) in enumerate(zip(out_in, ref_in)):
        if r.grad is not None:
            assert_close(o.grad, r.grad, tol=tol, what=f"grad of input {i}")
    check_fallbacks()


# --- accuracy of large sums ----------------------------------------------------------------

@pytest.mark.targets("cpu")
def test_expand_sum_does_not_saturate(target):
    """2^32 + 2^16 ones: float accumulators (one per SIMD lane and thread) stopped at 2^24 each
    and gave 536870912; eager's cascade sum gives the exact count."""
    x = torch.ones(65536)
    fn = lambda x: x.expand(65537, 65536).sum()  # noqa: E731
    out = ember_compile(fn, target)(x)
    assert out.item() == fn(x).item() == 65537 * 65536
    check_fallbacks()


@pytest.mark.targets("cpu")
@pytest.mark.parametrize("case", ["flat", "rows", "expand"])
def test_large_f32_sum_within_eager_rounding(case, target):
    """Sums of 2^22 values near 1.5: ember's error against float64 stays at eager's level (a
    float accumulator per lane was ~50x eager's error, 1.4e-4 for the expanded read)."""
    g = torch.Generator().manual_seed(0)
    if case == "flat":
        x, fn = 1 + torch.rand(1 << 22, generator=g), lambda x: x.sum()
    elif case == "rows":
        x, fn = 1 + torch.rand(4, 1 << 20, generator=g), lambda x: x.sum(1)
    else:
        x, fn = 1 + torch.rand(2048, generator=g), lambda x: x.expand(2048, 2048).sum()
    out = ember_compile(fn, target)(x)
    exact = fn(x.double())
    assert rel_err(out, exact) <= max(2 * rel_err(fn(x), exact), 2e-7)
    check_fallbacks()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mean_var_sum_16bit(dtype, target, interpreted, device):
    """16-bit reductions accumulate in f32 and round once, as eager: the mean of 65536 f16
    values was 0 (torch-mlir divided by the count in f16, where 65536 is inf), and a count
    above 256 (bf16) was rounded."""
    n = 4099 if interpreted else 65536
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(3, n, generator=g) + 0.5).to(device, dtype)
    for fn in (lambda x: x.mean(), lambda x: x.mean(1), lambda x: x.sum(1),
               lambda x: x.var(1)):
        out = ember_compile(fn, target)(x)
        ref = fn(x)
        assert_close(out, ref)
        if fn(x).numel() > 1 or out.dtype == dtype:
            # bit-equal to eager but for a last-place difference of the f32 sum's rounding
            assert rel_err(out, ref) < 2 * torch.finfo(dtype).eps
        check_fallbacks()


# --- reductions that fell back -------------------------------------------------------------

def test_group_norm(target, device):
    """Forward and backward: as_strided reshapes became gathers with constant index tensors
    (eager aten.index), and on Triton a dim that only a loop has had no size."""
    gn = torch.nn.GroupNorm(4, 16).to(device)
    with torch.no_grad():
        gn.weight.copy_(_randn(16, seed=1))
        gn.bias.copy_(_randn(16, seed=2))
    _fwd_bwd(lambda x: gn(x), [_randn((2, 16, 4, 4))], target)


def test_sum_of_expanded_read(target):
    _fwd_bwd(lambda x: x.expand(33, 64).sum(), [_randn(64)], target)
    _fwd_bwd(lambda x: torch.logsumexp(x.t().unsqueeze(0).expand(3, 12, 8), dim=1),
             [_randn((8, 12))], target)


def test_embedding_bag_sum(target, device):
    """A masked update select(in_bag, w + acc, acc): the Triton lowering had no combiner for it.
    Forward only: aten._embedding_bag_backward still runs eagerly (torch-mlir cannot import it)."""
    idx = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], device=device)
    offsets = torch.tensor([0, 3, 7], device=device)
    _fwd_bwd(lambda w: F.embedding_bag(idx, w, offsets, mode="sum"), [_randn((10, 8))], target,
             grads=False)


@pytest.mark.parametrize("out_size", [(3, 3), (5, 4)])
def test_adaptive_max_pool(out_size, target):
    _fwd_bwd(lambda x: F.adaptive_max_pool2d(x, out_size), [_randn((2, 3, 10, 8))], target)


@pytest.mark.parametrize("pad", [(1, 2, 2, 1), (3, 0, 0, 6)])
def test_circular_pad(pad, target):
    """torch fills an empty tensor through selects that read it before it is written: the
    read is of unspecified values that the selects then replace."""
    _fwd_bwd(lambda x: F.pad(x, pad, mode="circular") * 2, [_randn((2, 3, 6, 7))], target)


def test_prod(target, device):
    """Products: the Triton lowering had no `mulf` combiner. Forward only: prod's backward is a
    cumprod (tm_tensor.scan), which runs eagerly."""
    x = 0.5 + torch.rand(6, 12, generator=torch.Generator().manual_seed(0))
    _fwd_bwd(lambda x: x.prod(1), [x], target, grads=False)
    ints = torch.arange(1, 9, device=device).view(2, 4)
    _fwd_bwd(lambda x: ints.mul(x.shape[0]).prod(1), [x], target, grads=False)
