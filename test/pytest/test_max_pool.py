"""2-d max pooling with indices and its backward as generated code (frontend/pool_decomp.py):
eager's values, indices and gradients (bf16 bit for bit where eager's is deterministic), with
ties, padding, ceil mode, dilation, NaN and channels-last inputs, on every target; no library
call left for them, and the 3-d / adaptive ones still library calls (not fallbacks)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from conftest import TOL_MATMUL_FP32, assert_close, check_fallbacks, ember_compile
from ember.frontend import pool_decomp

# (kernel, stride, padding, dilation, ceil_mode)
CASES = [((3, 3), (2, 2), (1, 1), (1, 1), False),     # resnet's stem
         ((2, 2), (2, 2), (0, 0), (1, 1), False),
         ((3, 3), (2, 2), (0, 0), (1, 1), True),
         ((3, 2), (1, 2), (1, 1), (2, 1), True),
         ((2, 2), (1, 1), (0, 0), (2, 2), False),
         ((5, 5), (2, 3), (2, 1), (1, 2), True),
         ((1, 1), (2, 2), (0, 0), (1, 1), False)]


def _ties(shape, dtype, seed=0, nan=False):
    """Small integers: many equal maxima in overlapping windows (the first one wins), a
    -inf block (the window's first in-bounds element wins) and, with `nan`, NaNs (the last
    one wins)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 3, shape, generator=g).to(dtype)
    x[..., :3, :3] = float("-inf")
    if nan:
        x[0, 0, 2, 3] = x[-1, -1, 5, 5] = x[-1, -1, 5, 6] = float("nan")
    return x


def _grads(shape, dtype, seed=7):
    """Multiples of 1/8: their sums are exact in f32 (a GPU-order reference is exact)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-80, 80, shape, generator=g).float() / 8).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_decomposition_is_atens(dtype, channels_last):
    """The decompositions themselves, run eagerly, against ATen's CPU kernels: values and
    indices equal (NaN where eager's are), the CPU backward bit for bit, the GPU backward (f32
    sum, rounded once) equal to the exactly summed gradient rounded once."""
    for k, s, p, d, ceil in CASES:
        x = _ties((2, 3, 11, 10), dtype, nan=True)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        want, want_i = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
        with torch.enable_grad():
            got, got_i = pool_decomp._max_pool2d_with_indices(x, k, s, p, d, ceil)
        case = (k, s, p, d, ceil)
        assert torch.equal(got_i, want_i), case
        assert torch.equal(got.isnan(), want.isnan()) and \
            torch.equal(got.nan_to_num(), want.nan_to_num()), case
        g = _grads(want.shape, dtype)
        ref = torch.ops.aten.max_pool2d_with_indices_backward(g, x, k, s, p, d, ceil, want_i)
        cpu = pool_decomp._backward(f32_sum=False)(g, x, k, s, p, d, ceil, want_i)
        assert torch.equal(cpu, ref), case
        exact = torch.ops.aten.max_pool2d_with_indices_backward(
            g.double(), x.double(), k, s, p, d, ceil, want_i).to(dtype)
        gpu = pool_decomp._backward(f32_sum=True)(g, x, k, s, p, d, ceil, want_i)
        assert torch.equal(gpu, exact), case


# the residue form's cases: odd sizes, ceil mode with padding, windows wider than their stride
# by more than one (k4 s3: a position in up to two windows per dim), stride = kernel, k2x3
RESIDUE_CASES = CASES + [((3, 3), (2, 2), (1, 1), (1, 1), True),
                         ((4, 4), (3, 3), (2, 2), (1, 1), True),
                         ((3, 3), (3, 3), (1, 1), (1, 1), False),
                         ((2, 3), (1, 1), (1, 1), (1, 1), False)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 3, 11, 10), (1, 2, 7, 13), (2, 1, 5, 5)])
def test_residue_backward_is_atens(dtype, shape):
    """The GPU's backward (`_backward_by_residue`: shifted grad_output and offsets compared
    with a table per residue, no gather), from the offsets of the forward decomposition, run
    eagerly: with the CPU's rounding bit for bit ATen's CPU kernel, with the f32 sum equal to
    the exact sum rounded once; ties, a -inf block, NaN (the last one wins), odd sizes."""
    for k, s, p, d, ceil in RESIDUE_CASES:
        x = _ties(shape, dtype, nan=shape == (2, 3, 11, 10))
        try:
            want, want_i = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
        except RuntimeError:        # eager rejects the case at this size
            continue
        with torch.enable_grad():
            _, got_i = pool_decomp._max_pool2d_with_indices(x, k, s, p, d, ceil)
        params = pool_decomp._params(k, s, p, d)
        off = pool_decomp._offsets_of(got_i, params)
        assert off is not None and off.dtype == torch.int8
        case = (shape, k, s, p, d, ceil)
        g = _grads(want.shape, dtype)
        ref = torch.ops.aten.max_pool2d_with_indices_backward(g, x, k, s, p, d, ceil, want_i)
        cpu = pool_decomp._backward_by_residue(g, off, x, params, f32_sum=False)
        assert cpu.shape == x.shape and torch.equal(cpu, ref), case
        exact = torch.ops.aten.max_pool2d_with_indices_backward(
            g.double(), x.double(), k, s, p, d, ceil, want_i).to(dtype)
        gpu = pool_decomp._backward_by_residue(g, off, x, params, f32_sum=True)
        assert torch.equal(gpu, exact), case


def _no_pool_library_calls():
    calls = [c for r in ember.last_reports() for c in r.get("library_calls", [])]
    assert not [c for c in calls if "max_pool2d" in c], calls


@pytest.mark.parametrize("case", CASES[:4] + CASES[-1:], ids=["stem", "k2", "ceil", "dilated",
                                                              "k1"])
def test_values_indices_and_gradient(target, device, interpreted, case):
    """A graph returning the values and the indices (a user sees ATen's indices) and the
    input's gradient, through ember: equal to eager's, ties and -inf windows included."""
    k, s, p, d, ceil = case
    x = _ties((2, 3, 9, 8) if interpreted else (2, 4, 13, 12), torch.float32).to(device)

    def fn(t):
        v, i = F.max_pool2d(t * 2.0, k, s, p, d, ceil_mode=ceil, return_indices=True)
        return v + 1.0, i

    xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref = fn(xr)
    out = ember_compile(fn, target)(xc)
    assert torch.equal(out[1], ref[1])
    assert torch.equal(out[0], ref[0])
    cot = _grads(ref[0].shape, torch.float32).to(device)
    (ref[0] * cot).sum().backward()
    (out[0] * cot).sum().backward()
    assert torch.equal(xc.grad, xr.grad)
    check_fallbacks()
    _no_pool_library_calls()


@pytest.mark.targets("cpu")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_narrow_gradient_bit_exact(target, dtype, channels_last):
    """bf16/f16: values, indices and the gradient (overlapping windows: several terms per
    input element, each rounded as eager's CPU kernel rounds) bit for bit eager's."""
    x = _ties((2, 4, 13, 12), dtype, nan=True)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def fn(t):
        return F.max_pool2d(torch.relu(t) * 3.0, 3, 1, 1, return_indices=True)

    xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref = fn(xr)
    out = ember_compile(fn, target)(xc)
    assert torch.equal(out[1], ref[1])
    assert torch.equal(out[0].isnan(), ref[0].isnan())
    assert torch.equal(out[0].nan_to_num(), ref[0].nan_to_num())
    cot = (torch.randn(ref[0].shape, generator=torch.Generator().manual_seed(3)) * 100).to(dtype)
    (ref[0] * cot).sum().backward()
    (out[0] * cot).sum().backward()
    assert torch.equal(xc.grad.isnan(), xr.grad.isnan())
    assert torch.equal(xc.grad.nan_to_num(), xr.grad.nan_to_num())
    check_fallbacks()
    _no_pool_library_calls()


class Stem(nn.Module):
    """torchvision resnet's stem (7x7/2 conv, BN, ReLU, 3x3/2 max pool) and a basic block."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, c, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        y = torch.relu(self.bn2(self.conv2(x)) + x)
        return self.fc(y.mean((2, 3)))


class ConvBnReluPool(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(c, c, 3, padding=1))
        self.fc = nn.Linear(c, 5)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


@pytest.mark.parametrize("net, channels_last", [(Stem, True), (ConvBnReluPool, False)],
                         ids=["stem-nhwc", "conv_bn_relu_pool-nchw"])
def test_training_step(target, device, interpreted, net, channels_last, monkeypatch):
    """A training step of a conv-BN-ReLU-maxpool net and of resnet's stem: loss and every
    gradient as eager's, nothing eager, no max-pooling library call in either graph."""
    # f32 on a GPU: full-precision convolutions on both sides. With TF32 (cudnn.allow_tf32, on
    # by default) cuDNN's algorithms, picked per layout, put the channels-last step's gradients
    # apart from eager's NCHW ones by more than f32's tolerance (test_channels_last does the same)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    tol = TOL_MATMUL_FP32 if device == "cuda" and channels_last else None
    torch.manual_seed(0)
    model = net().to(device)
    ref_model = copy.deepcopy(model)
    size = 16 if interpreted else 32
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1)).to(device)
    compiled = torch.compile(model, backend="ember",
                             options={"target": target, "channels_last": channels_last})
    ember.clear_reports()

    def step(m):
        loss = m(x).square().sum()
        loss.backward()
        return loss

    assert_close(step(compiled), step(ref_model), tol=tol, what="loss")
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert_close(p.grad, q.grad, tol=tol, what=f"grad of {name}")
    check_fallbacks()
    _no_pool_library_calls()
    kinds = [r["graph_id"].rsplit("-", 1)[-1] for r in ember.last_reports()]
    assert kinds == ["forward", "backward"], kinds
    if target != "cpu":     # the GPU's backward: no gather (the residue form), no bounds check
        groups = ember.last_reports()[-1]["fused_groups"]
        assert not [g for g in groups if "gather" in g], groups
        assert [g for g in groups if "cmp" in g], groups     # the offsets compared


@pytest.mark.targets("cpu")
def test_uncovered_pooling_stays_a_library_call(target):
    """3-d max pooling, adaptive max pooling and windows over MAX_WINDOW elements keep the
    library call, and are reported as library calls, not fallbacks."""
    big = pool_decomp.MAX_WINDOW + 17
    side = int(big ** 0.5) + 1
    x = torch.randn(2, 3, 4, 2 * side, 2 * side, requires_grad=True)

    def fn(t):
        a = F.max_pool3d(t, 2)
        b = F.adaptive_max_pool2d(t[:, :, 0], 3)
        c = F.max_pool2d(t[:, :, 1], side)
        return a.sum() + b.sum() + c.sum()

    out = ember_compile(fn, target)(x)
    out.backward()
    assert torch.allclose(out, fn(x.detach()))
    check_fallbacks()
    calls = {c for r in ember.last_reports() for c in r.get("library_calls", [])}
    assert {"aten.max_pool3d_with_indices.default", "aten.adaptive_max_pool2d.default",
            "aten.max_pool2d_with_indices.default"} <= calls, calls
