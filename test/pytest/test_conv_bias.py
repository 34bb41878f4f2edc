"""A convolution's bias added in ember's next kernel, not by the library (issue 11:
efficientnet_b0's launches; passes/externs.py CONV_BIAS, ember-convert-externs' `conv-bias`
option), and a returned f32 `linear` as one addmm (ember-convert-externs' bias epilogue).

cuDNN computes no bias: on CUDA, ATen's `aten.convolution` runs the convolution, then
`output.add_(bias)` as a second kernel (Inductor peels the bias off for that reason). Each of
efficientnet_b0's 16 squeeze-excite blocks has two convolutions with a bias: 32 of the GPU's
214 fp32 kernels (233 bf16) were those adds. The Triton targets now call the library without
the bias and add it in the consumer's kernel (the SiLU after the squeeze, the sigmoid-multiply
after the excite): the launches ATen makes on CUDA, counted here as ember's kernels + library
calls + one per library convolution still given a bias, drop from 13 to 11 for one block.
bf16 is rounded as on CUDA (the product rounded by the library, plus the bias, rounded again);
off CUDA a bf16 convolution keeps its bias in the call (oneDNN adds it before its one
rounding), so every target stays bit-exact with its own eager.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from conftest import assert_close, check_fallbacks, clear_reports


class MBConv(nn.Module):
    """efficientnet's block: 1x1 expansion, depthwise 3x3, squeeze-excitation (mean, two 1x1
    convolutions with biases), 1x1 projection, residual. `cuda_bias`: the squeeze-excite
    biases added after bias-free convolutions, as ATen does on CUDA (eager's CUDA rounding,
    computed on any device)."""

    def __init__(self, c=8, e=32, s=4, cuda_bias=False):
        super().__init__()
        self.cuda_bias = cuda_bias
        self.expand, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.dw, self.bn2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
        self.se1, self.se2 = nn.Conv2d(e, s, 1), nn.Conv2d(s, e, 1)
        self.project, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)

    def _se(self, conv, x):
        if not self.cuda_bias:
            return conv(x)
        return F.conv2d(x, conv.weight) + conv.bias.view(1, -1, 1, 1)

    def forward(self, x):
        y = F.silu(self.bn1(self.expand(x)))
        y = F.silu(self.bn2(self.dw(y)))
        w = torch.sigmoid(self._se(self.se2, F.silu(self._se(self.se1, y.mean((2, 3), True)))))
        return x + self.bn3(self.project(y * w))


def _model(dtype, device, cuda_bias=False):
    torch.manual_seed(0)
    m = MBConv(cuda_bias=cuda_bias)
    for bn in (m.bn1, m.bn2, m.bn3):
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
    return m.to(device, dtype).eval()


@pytest.fixture
def biased(monkeypatch):
    """Per library convolution call: whether it was given a bias."""
    from ember.runtime import externs
    seen = []
    real = externs.library_convolution

    def watch(*args):
        seen.append(args[2] is not None)
        return real(*args)
    monkeypatch.setattr(externs, "library_convolution", watch)
    return seen


def _run(model, x, target, **options):
    torch._dynamo.reset()
    clear_reports()
    compiled = torch.compile(model, backend="ember",
                             options={"target": target, "fallback": False, **options})
    with torch.no_grad():
        out = compiled(x)
    check_fallbacks()
    (report,) = ember.last_reports()
    return out, report


def _cuda_launches(report, biased) -> int:
    """The kernels ATen and ember launch on CUDA: ember's, one per library call, and the bias
    add of each library convolution given a bias."""
    return report["num_kernels"] + report["num_externs"] + sum(biased)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_squeeze_excite_bias_joins_the_next_kernel(target, device, dtype, biased):
    """Default options on every target: eager's results (bf16 bit for bit), and on the Triton
    targets no f32 convolution is given its bias (on CUDA, none at all): 11 launches on CUDA
    for the block, where ATen's bias adds made 13."""
    model = _model(dtype, device)
    x = torch.randn(2, 8, 8, 8, device=device, dtype=dtype)
    out, report = _run(model, x, target)
    with torch.no_grad():
        ref = model(x)
    if dtype == torch.bfloat16:
        assert torch.equal(out, ref), (out - ref).abs().max()
    else:
        assert_close(out, ref)
    assert len(biased) == 5, biased
    if target == "cpu":
        assert sum(biased) == 2     # oneDNN adds it inside the call: nothing to launch
        return
    on_cuda = device == "cuda" and torch.version.hip is None
    if dtype == torch.float32 or on_cuda:
        assert not any(biased), biased
        assert _cuda_launches(report, biased) == 11, report["fused_groups"]
        # the biases are added in the SiLU after the squeeze and the sigmoid-multiply after
        # the excite: no kernel of its own
        assert sum(g[0] == "add" or g[:2] == ["convert", "add"]
                   for g in report["fused_groups"]) >= 2, report["fused_groups"]
    else:
        assert sum(biased) == 2     # a CPU tensor's bf16 conv: oneDNN rounds once


@pytest.mark.targets("triton", "cuda")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_pipeline_adds_the_bias_as_cuda_rounds(target, device, dtype, biased):
    """The CUDA pipeline (`conv-bias=after`) on any device: every squeeze-excite convolution
    runs without its bias and the block's results are those of eager's CUDA arithmetic (the
    bias added to the library's rounded product, then rounded: bit for bit in bf16)."""
    from ember.frontend.options import CompileOptions, default_pipeline
    pipeline = default_pipeline(CompileOptions(), "cuda")
    assert "ember-convert-externs{conv-bias=after}" in pipeline
    assert "conv-bias" not in default_pipeline(CompileOptions(), "cpu")
    model = _model(dtype, device)
    x = torch.randn(2, 8, 8, 8, device=device, dtype=dtype)
    out, report = _run(model, x, target, pipeline=pipeline)
    with torch.no_grad():
        ref = _model(dtype, device, cuda_bias=True)(x)
    if dtype == torch.bfloat16:
        assert torch.equal(out, ref), (out - ref).abs().max()
    else:
        assert_close(out, ref)
    assert biased == [False] * 5, biased
    assert _cuda_launches(report, biased) == 11, report["fused_groups"]


class Classifier(nn.Module):
    """efficientnet's head: the last block, global average pooling, a linear classifier whose
    result is returned."""

    def __init__(self):
        super().__init__()
        self.block, self.fc = MBConv(), nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.block(x).mean((2, 3)))


def test_returned_linear_is_one_addmm(target, device, biased):
    """An f32 classifier's `linear`, only returned: one aten.addmm on the Triton targets (the
    GEMM's epilogue adds the bias, as eager's and Inductor's call does) where it was an mm and
    a kernel of its own for the bias add: 12 CUDA launches for the block and head (was 15 with
    ATen's two bias adds)."""
    torch.manual_seed(0)
    model = Classifier().to(device).eval()
    x = torch.randn(2, 8, 8, 8, device=device)
    out, report = _run(model, x, target)
    with torch.no_grad():
        ref = model(x)
    assert_close(out, ref, matmul=True)
    if target == "cpu":
        return
    lone_adds = [g for g in report["fused_groups"] if g == ["add"]]
    assert not lone_adds, report["fused_groups"]
    assert _cuda_launches(report, biased) == 12, report["fused_groups"]


def test_gpu_decomposition_sums_the_conv_bias_gradient():
    """On GPU targets a convolution's bias gradient is a sum ember generates (fused with
    grad_output's producer); the library call computes the input and weight gradients only.
    CPU graphs keep the library's bias gradient (oneDNN computes it in the same call)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ember.frontend.backend import decomposition_table
    aten = torch.ops.aten
    torch.manual_seed(0)
    g, x, w = torch.randn(2, 4, 6, 6), torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)

    def f(g, x, w):
        return aten.convolution_backward.default(g, x, w, [4], [1, 1], [1, 1], [1, 1], False,
                                                 [0, 0], 1, [True, True, True])
    for gpu in (True, False):
        gm = make_fx(f, decomposition_table=decomposition_table(gpu=gpu))(g, x, w)
        calls = [n for n in gm.graph.nodes if n.target is aten.convolution_backward.default]
        assert len(calls) == 1
        assert list(calls[0].args[-1]) == [True, True, not gpu], gm.graph
        assert any(n.target is aten.sum.dim_IntList for n in gm.graph.nodes) == gpu, gm.graph
        for got, want in zip(gm(g, x, w), f(g, x, w)):
            assert_close(got, want)


@pytest.mark.targets("triton", "cuda")
def test_conv_bias_gradient_trains_as_eager(target, device):
    """The squeeze-excite block's training step with the bias gradients as generated sums."""
    model = _model(torch.float32, device).train()
    ref = _model(torch.float32, device).train()
    x = torch.randn(2, 8, 8, 8, device=device)
    torch._dynamo.reset()
    clear_reports()
    compiled = torch.compile(model, backend="ember", options={"target": target, "fallback": False})
    compiled(x).square().mean().backward()
    ref(x).square().mean().backward()
    check_fallbacks()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, matmul=True, what=name)
