"""Triton kernels compile ahead of time for GPUTarget("cuda", 90, 32) and
GPUTarget("hip", "gfx942", 64) (CI without a GPU: the numerics suites run target "triton"
through the interpreter, which neither lowers to LLVM nor checks what only the real compiler
rejects).

Self-contained: a fixed set of graphs, chosen to reach every kind of kernel the Triton lowering
writes (pointwise over each dtype family and math function, inner / outer / full / looped
reductions and arg-reductions, normalisations, gathers, concatenation and padding, library-call
epilogues, matmul templates (f32, bf16, f16), pooling and resampling, a channels-last network
(NHWC epilogues, a fused pooling window), a training step's backward, symbolic sizes), is compiled with
target "triton"; every generated module is recorded as the exporter hands it over, and each
distinct kernel is compiled for both targets in fresh subprocesses (the interpreter patches
triton in place), failing on any error. Graphs are small: the interpreter runs them once.
"""
import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

import triton_aot  # noqa: E402  (test/pytest/triton_aot.py)


def _pointwise_f32(x, y):
    a = F.gelu(x * 1.7 + 0.3) * torch.sigmoid(y) + torch.tanh(x) - torch.log1p(x.abs())
    b = torch.expm1(y.clamp(-3, 3)) + torch.sin(x) * torch.cos(y) + torch.rsqrt(x * x + 1)
    c = torch.sqrt(y.abs()) + torch.floor(x) - torch.ceil(y) + torch.round(x * 3) + torch.sign(y)
    return a * b + c + torch.pow(x.abs() + 1, 1.5) + torch.erf(y) + torch.exp(-x * x)


def _trig(x, y):
    # the math functions with libdevice spellings only (acosf, ..., log10f, atan2f)
    u = torch.tanh(x) * 0.9
    a = torch.acos(u) + torch.asin(u) + torch.atan(y) + torch.atanh(u) + torch.atan2(x, y)
    b = torch.acosh(y.abs() + 1) + torch.asinh(x) + torch.cosh(u) + torch.sinh(u) + torch.tan(u)
    return a * b + torch.log10(y.abs() + 1)


def _pointwise_low(x, y):
    return F.silu(x) * torch.tanh(y) + torch.exp(x.clamp(max=4)) / (1 + y * y)


def _integer(i, j):
    q = torch.div(i, j.clamp(min=1), rounding_mode="floor") + torch.remainder(i, 7)
    b = (i & 12) | (j ^ 5) | (i << 2) | (j >> 1)
    return torch.maximum(q, b) - torch.minimum(i, j).abs()


def _casts_and_masks(x, m, u):
    y = torch.where(m, x, torch.nan_to_num(x / (x - x), nan=0.5))
    keep = torch.isnan(y) | (y > 0.25) & ~m
    return y.to(torch.float16).float() + keep.float() + u.to(torch.float32) + x.to(torch.int32)


def _reductions(x):
    return (x.sum(-1), x.mean(0), x.amax(-1), x.amin(0), x.argmax(-1), x.argmin(0),
            x.prod(-1), x.var(-1), x.std(0), torch.logsumexp(x, -1), x.sum())


def _normalisations(x, w, b):
    return (torch.softmax(x, -1), torch.log_softmax(x, 0),
            F.layer_norm(x, (x.shape[-1],), w, b), F.normalize(x, dim=-1))


def _long_rows(x):      # rows longer than one block: the looped reduction
    return torch.softmax(x, -1), x.sum(), (x * x).mean(-1)


def _indexing(idx, w, x):
    e = F.embedding(idx, w) * 2.0
    g = torch.gather(x, 1, idx[:, :3] % x.shape[1])
    s = torch.index_select(w, 0, idx[0])
    return e, g + 1, s.flip(0), torch.roll(x, 2, 1), x.t().contiguous() + 1


def _shapes(x, y):
    c = torch.cat([x, y * 2, x - y], dim=1)
    p = F.pad(x, (1, 2, 0, 1), value=-1.0)
    r = F.pad(x[None], (2, 2), mode="reflect")[0]
    return c, p * 2, r + 1, x[:, :, None] * y[:, None, :]


def _library_epilogues(x, w, b, img, k):
    mm = torch.relu(x @ w + b)
    conv = F.relu(F.conv2d(img, k, padding=1)) * 0.5
    return mm, conv, torch.bmm(x[None], w[None]).sigmoid() + 1


def _matmul_templates(x, w, b, r, a3, b3):
    """Matmul templates (ember-matmul-template): bias + GELU (erf and tanh), SiLU + residual,
    a batched product read transposed, a cast."""
    h = F.gelu(F.linear(x, w, b))      # (distinct products: a shared one has several readers)
    t = F.gelu(F.linear(x * 0.5, w, b), approximate="tanh") + r
    s = F.silu((x + 1) @ w.t()) * 2 + r
    c = ((x - 1) @ w.t()).to(torch.float16)
    return h, t, s, torch.relu(a3 @ b3.transpose(-1, -2)), c


def _pool_resample(img):
    return (F.max_pool2d(img, 3, 2, 1), F.avg_pool2d(img, 2), F.adaptive_avg_pool2d(img, 1),
            F.interpolate(img, scale_factor=2, mode="nearest"),
            F.interpolate(img, size=(7, 9), mode="bilinear", align_corners=False))


def _scatter_scan(x, idx):
    z = torch.zeros(5, x.shape[1]).index_add(0, idx % 5, x)
    return z, torch.cumsum(x, 1), torch.scatter_add(torch.zeros_like(x), 1, idx[:, None]
                                                    .expand(-1, x.shape[1]) % x.shape[1], x)


def _args(seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*s, dtype=torch.float32):
        return torch.randn(*s, generator=g).to(dtype)

    def i(lo, hi, *s, dtype=torch.int64):
        return torch.randint(lo, hi, s, generator=g).to(dtype)
    return {
        "pointwise_f32": (_pointwise_f32, (r(9, 33), r(9, 33))),
        "trig_f32": (_trig, (r(9, 33), r(9, 33))),
        "trig_f64": (_trig, (r(5, 7, dtype=torch.float64), r(5, 7, dtype=torch.float64))),
        "trig_bf16": (_trig, (r(6, 40, dtype=torch.bfloat16), r(40, dtype=torch.bfloat16))),
        "pointwise_f64": (_pointwise_f32, (r(5, 7, dtype=torch.float64), r(5, 7, dtype=torch.float64))),
        "pointwise_f16": (_pointwise_low, (r(6, 40, dtype=torch.float16), r(40, dtype=torch.float16))),
        "pointwise_bf16": (_pointwise_low, (r(6, 40, dtype=torch.bfloat16), r(40, dtype=torch.bfloat16))),
        "integer_i64": (_integer, (i(-50, 50, 8, 12), i(-9, 9, 8, 12))),
        "integer_i32": (_integer, (i(-50, 50, 8, 12, dtype=torch.int32),
                                   i(-9, 9, 12, dtype=torch.int32))),
        "casts_masks": (_casts_and_masks, (r(7, 10), r(7, 10) > 0, i(0, 255, 7, 10, dtype=torch.uint8))),
        "reductions": (_reductions, (r(12, 30),)),
        "reductions_bf16": (_reductions, (r(6, 20, dtype=torch.bfloat16),)),
        "normalisations": (_normalisations, (r(10, 48), r(48), r(48))),
        "long_rows": (_long_rows, (r(3, 5000),)),
        "indexing": (_indexing, (i(0, 10, 4, 6), r(10, 16), r(4, 9))),
        "shapes": (_shapes, (r(6, 5), r(6, 5))),
        "library_epilogues": (_library_epilogues, (r(8, 16), r(16, 12), r(12), r(2, 3, 9, 9),
                                                   r(4, 3, 3, 3))),
        "pool_resample": (_pool_resample, (r(2, 3, 10, 11),)),
        "scatter_scan": (_scatter_scan, (r(6, 8), i(0, 50, 6))),
    }


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.ln = torch.nn.LayerNorm(16)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)          # 2x4x4x4
        h = self.ln(h.flatten(1)[:, :16])
        return F.cross_entropy(self.fc(F.gelu(h)), torch.tensor([1, 3]))


class _ConvNet(torch.nn.Module):
    """Channels-last (ember-channels-last): NHWC epilogues, BN + ReLU + max pooling as one
    window reduction, a residual add; in training, BatchNorm's statistics and gradients as
    column reductions over NHWC buffers."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 3, 2, 1)
        return F.relu(self.conv2(h) + h).mean((2, 3))


def _generated_sources(sources: list) -> list[str]:
    """Every Triton module the graphs above generate (`sources`: the exported_sources fixture)."""
    # (an op the lowering cannot take would run eagerly with ember's warning: an error here)
    opts = {"target": "triton"}
    for name, (fn, args) in _args().items():
        torch._dynamo.reset()
        torch.compile(fn, backend="ember", options=opts)(*args)
    # bf16 / f16 products become templates only without eager's bit-exactness
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        torch._dynamo.reset()
        g = torch.Generator().manual_seed(1)
        mm_args = [torch.randn(*s, generator=g).to(dtype) for s in
                   ((20, 24), (36, 24), (36,), (20, 36), (2, 9, 16), (2, 12, 16))]
        torch.compile(_matmul_templates, backend="ember",
                      options={**opts, "exact_low_precision": False,
                               "matmul_template": "auto"})(*mm_args)
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = _Net()
    torch.compile(net, backend="ember", options=opts)(torch.randn(2, 3, 8, 8)).backward()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(_ConvNet().eval().to(torch.bfloat16), backend="ember", options=opts)(
            torch.randn(2, 3, 8, 8).to(torch.bfloat16))
    torch._dynamo.reset()     # channels-last training: column reductions, NHWC backward
    torch.compile(_ConvNet().train(), backend="ember", options=opts)(
        torch.randn(2, 3, 8, 8)).sum().backward()
    for n in (6, 9):        # symbolic sizes: the sizes are kernel arguments
        torch._dynamo.reset()
        f = torch.compile(lambda x: torch.softmax(x * 2, -1) + x.mean(0), backend="ember",
                          options=opts, dynamic=True)
        f(torch.randn(n, n + 3))
    return list(dict.fromkeys(sources))


def test_triton_kernels_compile_ahead_of_time(exported_sources):
    if os.environ.get("EMBER_TEST_AOT", "1") == "0":
        pytest.skip("EMBER_TEST_AOT=0")
    sources = _generated_sources(exported_sources)
    results = triton_aot.compile_sources_isolated(sources)
    print(f"AOT: {len(sources)} generated modules, {len(results)} distinct kernels, "
          f"targets cuda:90 and hip:gfx942")
    # The graphs reach far more kernels than this; far fewer means the generator was bypassed.
    assert len(sources) >= 15 and len(results) >= 40, (len(sources), len(results))
    bad = triton_aot.failures(results)
    if bad:
        lines = []
        for label, per in sorted(bad.items()):
            i = int(label.split(":", 1)[0])
            for target, err in per.items():
                lines.append(f"{label} [{target}]: {err[:1500]}")
            lines.append(f"  (module {i}: {len(sources[i])} chars; last lines:\n"
                         + "\n".join(sources[i].splitlines()[-30:]) + ")")
        pytest.fail(f"{len(bad)} of {len(results)} Triton kernels do not compile ahead of "
                    "time:\n" + "\n".join(lines))
    assert all(set(per) == {"cuda:90", "hip:gfx942"} for per in results.values()), results
