"""ember-channels-last end to end (issue 12): a convolution network runs channels-last as a
whole. Every convolution gets channels-last operands and writes a channels-last result, the
kernels between convolutions (BatchNorm, ReLU, residual add) read and write NHWC buffers with no
layout copy kernel between them, and the results are eager's, with eager's strides, inference
and training, fp32 and bf16, on both targets (the CPU target with `channels_last=True`: "auto"
leaves it NCHW there, where channels-last was measured slower)."""
import copy

import pytest
import torch
import torch.nn as nn

import ember
from conftest import TOL_MATMUL_FP32, assert_close, check_fallbacks, clear_reports, rel_err

C = 8


class Block(nn.Module):
    """resnet's stem and one basic block: conv-bn-relu-maxpool, conv-bn-relu, conv + residual."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, C, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(C)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(C, C, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(C)
        self.conv3 = nn.Conv2d(C, C, 3, padding=1)
        self.fc = nn.Linear(C, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        y = torch.relu(self.bn2(self.conv2(x)))
        y = torch.relu(self.conv3(y) + x)
        return self.fc(y.mean((2, 3)))


def _model(dtype, device, train=False):
    torch.manual_seed(0)
    m = Block()
    for bn in (m.bn1, m.bn2):
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
    m = m.to(device, dtype)
    return m.train() if train else m.eval()


@pytest.fixture
def spy(monkeypatch):
    """The layouts each convolution library call is handed: (input, weight, result) each
    channels-last or not."""
    from ember.runtime import externs
    seen = []
    real = externs.library_convolution

    def watch(*args):
        r = real(*args)
        cl = torch.channels_last
        seen.append(tuple(t.is_contiguous(memory_format=cl) for t in (args[0], args[1], r)))
        return r
    monkeypatch.setattr(externs, "library_convolution", watch)
    return seen


def _compile(model, target, **options):
    torch._dynamo.reset()
    clear_reports()
    return torch.compile(model, backend="ember", options={"target": target, **options})


def _pipeline_has_pass(target, **options):
    from ember.frontend.options import CompileOptions, default_pipeline
    return "ember-channels-last" in default_pipeline(CompileOptions(**options), target)


def test_auto_is_on_for_gpu_targets_only():
    assert _pipeline_has_pass("cuda") and _pipeline_has_pass("rocm")
    assert _pipeline_has_pass("triton")
    assert not _pipeline_has_pass("cpu")
    assert _pipeline_has_pass("cpu", channels_last=True)
    assert not _pipeline_has_pass("cuda", channels_last=False)
    from ember.frontend.options import CompileOptions, default_pipeline
    # training graphs (a forward's batch statistics over NHWC buffers): with True, and with
    # "auto" on the GPUs (measured on an H100: options.CHANNELS_LAST_TRAINING_TARGETS), not on
    # the GPU's program run on the CPU ("triton", the interpreter)
    assert "ember-channels-last{with-statistics=true}" in \
        default_pipeline(CompileOptions(), "cuda")
    assert "ember-channels-last{with-statistics=true}" in \
        default_pipeline(CompileOptions(), "rocm")
    assert "ember-channels-last," in default_pipeline(CompileOptions(), "triton")
    assert "ember-channels-last," in \
        default_pipeline(CompileOptions(channels_last="auto"), "triton")
    assert "ember-channels-last{with-statistics=true}" in \
        default_pipeline(CompileOptions(channels_last=True), "cuda")
    assert "ember-channels-last{with-statistics=true}" in \
        default_pipeline(CompileOptions(channels_last=True), "cpu")
    with pytest.raises(ember.OptionsError, match="channels_last"):
        ember.CompileOptions(channels_last="yes")


def test_f32_convolutions_stay_nchw_on_cuda_without_tf32():
    """cuDNN's NHWC f32 convolutions without TF32 are slower than its NCHW ones (H100, fp32
    inference, TF32 off: densenet121 15.34 ms channels-last vs 11.31 NCHW): "auto" on CUDA
    then lays out only low-precision convolutions (the pass's `f32` option); an explicit
    True, other targets and TF32 on are unchanged."""
    from ember.frontend.options import CompileOptions, default_pipeline
    flag = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        assert "ember-channels-last{with-statistics=true f32=false}," in \
            default_pipeline(CompileOptions(), "cuda")
        assert "ember-channels-last{with-statistics=true}," in \
            default_pipeline(CompileOptions(channels_last=True), "cuda")
        assert "ember-channels-last{with-statistics=true}," in \
            default_pipeline(CompileOptions(), "rocm")
        assert "ember-channels-last," in default_pipeline(CompileOptions(), "triton")
        torch.backends.cudnn.allow_tf32 = True
        assert "ember-channels-last{with-statistics=true}," in \
            default_pipeline(CompileOptions(), "cuda")
    finally:
        torch.backends.cudnn.allow_tf32 = flag


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_runs_channels_last(target, device, dtype, spy):
    model = _model(dtype, device)
    x = torch.randn(2, 3, 16, 16, device=device, dtype=dtype)
    compiled = _compile(model, target, channels_last=True)
    with torch.no_grad():
        out = compiled(x)
        ref = model(x)
    assert_close(out, ref)
    check_fallbacks()
    # every convolution: channels-last input, weight and result
    assert spy == [(True, True, True)] * 3, spy
    (report,) = ember.last_reports()
    groups = report["fused_groups"]
    # the only layout copies: the NCHW graph input (once) and the three weights; the kernels
    # between convolutions hold no transpose (they read and write NHWC buffers directly), nor
    # does the mean at the end (a column reduction over the last NHWC buffer).
    copies = [g for g in groups if set(g) == {"transpose"}]
    assert len(copies) == 4, groups
    between = [g for g in groups if "transpose" in g and set(g) != {"transpose"}]
    assert not between, groups


class MBConv(nn.Module):
    """efficientnet's block: 1x1 expansion, depthwise 3x3, squeeze-excitation (mean, two 1x1
    convolutions with biases), 1x1 projection, residual."""

    def __init__(self, c=8, e=32):
        super().__init__()
        self.expand, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.dw, self.bn2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
        self.se1, self.se2 = nn.Conv2d(e, 4, 1), nn.Conv2d(4, e, 1)
        self.project, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.nn.functional.silu(self.bn1(self.expand(x)))
        y = torch.nn.functional.silu(self.bn2(self.dw(y)))
        w = torch.sigmoid(self.se2(torch.nn.functional.silu(self.se1(y.mean((2, 3), True)))))
        return x + self.bn3(self.project(y * w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unit_dim_weights_are_views_not_copies(target, device, dtype, spy):
    """1x1 and depthwise weights (OIHW and OHWI hold the same bytes in the same order) and the
    squeeze's [n, c, 1, 1] value reach their channels-last convolutions as views: the only
    layout copy left is the NCHW graph input's (there was one kernel per convolution)."""
    torch.manual_seed(0)
    model = MBConv().to(device, dtype).eval()
    x = torch.randn(2, 8, 8, 8, device=device, dtype=dtype)
    compiled = _compile(model, target, channels_last=True)
    with torch.no_grad():
        out = compiled(x)
        ref = model(x)
    assert_close(out, ref)
    check_fallbacks()
    assert spy == [(True, True, True)] * 5, spy
    (report,) = ember.last_reports()
    copies = [g for g in report["fused_groups"] if set(g) == {"transpose"}]
    assert len(copies) == 1, report["fused_groups"]


def test_nchw_without_the_pass(target, device, spy):
    """channels_last=False: the library gets NCHW tensors (what the pass changes)."""
    model = _model(torch.float32, device)
    x = torch.randn(2, 3, 16, 16, device=device)
    with torch.no_grad():
        out = _compile(model, target, channels_last=False)(x)
    assert_close(out, model(x))
    assert spy == [(False, False, False)] * 3, spy


def _assert_grads(model, ref_model, x, cot, dtype, tol):
    """fp32: ember's gradients are eager's. bf16: eager's own gradients of the first
    convolution are 2-4e-2 off the exact ones (a BatchNorm backward in bf16); ember's must be
    as close to float64's as eager's are (model: after its step; cot: the loss's weights)."""
    if dtype == torch.float32:
        for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
            assert_close(p.grad, q.grad, what=name, tol=tol)
        return
    exact = copy.deepcopy(model).double()
    exact.zero_grad()
    (exact(x.double()) * cot.double()).sum().backward()
    for (name, p), q, e in zip(model.named_parameters(), ref_model.parameters(),
                               exact.parameters()):
        assert rel_err(p.grad, e.grad) <= 2 * rel_err(q.grad, e.grad) + 1e-3, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_step_matches_eager(target, device, dtype, interpreted):
    if interpreted and dtype == torch.bfloat16:
        pytest.skip("interpreter: the bf16 step runs on the cpu target (same library calls)")
    model = _model(dtype, device, train=True)
    ref_model = copy.deepcopy(model)
    x = torch.randn(4, 3, 16, 16, device=device, dtype=dtype)
    compiled = _compile(model, target, channels_last=True)
    out = compiled(x)
    ref = ref_model(x)
    cot = torch.randn(ref.shape, generator=torch.Generator().manual_seed(7)).to(device, dtype)
    (out * cot).sum().backward()
    (ref * cot).sum().backward()
    check_fallbacks()
    # fp32 convolutions on a GPU run in TF32 (cudnn.allow_tf32, on by default) in both, with
    # algorithms cuDNN picks per layout: matmul-grade tolerance (H100: conv2.weight 2.3e-4)
    tol = TOL_MATMUL_FP32 if device == "cuda" and dtype == torch.float32 else None
    assert_close(out, ref, tol=tol)
    assert_close(model.bn1.running_mean, ref_model.bn1.running_mean, what="running_mean", tol=tol)
    _assert_grads(model, ref_model, x, cot, dtype, tol)


def test_mbconv_training_step_matches_eager(target, device):
    """efficientnet's block trained channels-last: its BatchNorm backwards recompute the SiLU
    and squeeze-excite gradients in their partial sums and input gradients, reusing the values
    those kernels compute themselves (fusion_recompute's value numbering); gradients are
    eager's."""
    torch.manual_seed(0)
    model = MBConv(8, 16).to(device).train()
    ref_model = copy.deepcopy(model)
    x = torch.randn(4, 8, 8, 8, device=device)
    compiled = _compile(model, target, channels_last=True)
    out, ref = compiled(x), ref_model(x)
    cot = torch.randn(ref.shape, generator=torch.Generator().manual_seed(7)).to(device)
    (out * cot).sum().backward()
    (ref * cot).sum().backward()
    check_fallbacks()
    tol = TOL_MATMUL_FP32 if device == "cuda" else None
    assert_close(out, ref, tol=tol)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert_close(p.grad, q.grad, what=name, tol=tol)


class Features(nn.Module):
    """A feature extractor: its result is a convolution's activation."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, C, 3, padding=1)
        self.conv2 = nn.Conv2d(C, C, 1)

    def forward(self, x):
        return torch.relu(self.conv2(torch.relu(self.conv1(x)))) * 2.0


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_outputs_have_eager_strides(target, device, memory_format, spy):
    """An NCHW network returns NCHW activations, a channels-last one (input and weights
    channels-last, as `model.to(memory_format=torch.channels_last)` makes) channels-last ones:
    eager's strides either way."""
    torch.manual_seed(0)
    model = Features().to(device, memory_format=memory_format)
    x = torch.randn(2, 3, 8, 8, device=device).contiguous(memory_format=memory_format)
    with torch.no_grad():
        out = _compile(model, target, channels_last=True)(x)
        ref = model(x)
    check_fallbacks()
    assert_close(out, ref)
    assert out.stride() == ref.stride(), (out.stride(), ref.stride())
    assert spy == [(True, True, True)] * 2, spy


class Pools(nn.Module):
    """Max pooling with ceil mode and dilation, average pooling with padding (counted and not),
    each after a convolution's pointwise epilogue."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, C, 3)
        self.conv2 = nn.Conv2d(C, C, 1)

    def forward(self, x):
        y = torch.relu(self.conv1(x))
        a = nn.functional.max_pool2d(y, 3, 2, 1, ceil_mode=True)
        b = nn.functional.max_pool2d(y - 1.0, 2, 1, 0, dilation=2)
        z = self.conv2(a)
        c = nn.functional.avg_pool2d(z, 3, 2, 1, count_include_pad=False)
        d = nn.functional.avg_pool2d(z * z, 2, ceil_mode=True)
        return a.sum() + b.mean(), c, d


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pooling_kernels(target, device, dtype, interpreted):
    """Channels-last pooling is a generated window reduction over the NHWC buffer (no
    library pooling call left), with eager's results, ceil mode, dilation and padding."""
    if interpreted and dtype == torch.bfloat16:
        pytest.skip("interpreter: the bf16 pools run on the cpu target (same kernels' IR)")
    torch.manual_seed(0)
    model = Pools().to(device, dtype)
    x = torch.randn(2, 3, 11, 11, device=device, dtype=dtype)
    with torch.no_grad():
        out = _compile(model, target, channels_last=True)(x)
        ref = model(x)
    check_fallbacks()
    assert_close(out, ref)
    (report,) = ember.last_reports()
    # the two convolutions (bf16 average pooling is eager's own library call, which rounds
    # as eager does: those two stay)
    assert report["num_externs"] == (2 if dtype == torch.float32 else 4), report
    assert sum("amax" in g for g in report["fused_groups"]) == 2, report["fused_groups"]


@pytest.fixture
def backward_spy(monkeypatch):
    """The layouts each convolution_backward library call is handed: (grad_output, input)
    each channels-last or not."""
    from ember.runtime import externs
    seen = []
    real = externs.library_convolution_backward

    def watch(*args, **kwargs):
        cl = torch.channels_last
        seen.append(tuple(kwargs[k].is_contiguous(memory_format=cl)
                          for k in ("grad_output", "input")))
        return real(*args, **kwargs)
    monkeypatch.setattr(externs, "library_convolution_backward", watch)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_step_runs_channels_last(target, device, dtype, spy, backward_spy, interpreted,
                                          monkeypatch):
    """A training step of a conv-bn-relu-maxpool-residual net runs channels-last in both graphs
    (`channels_last=True`; "auto" does so on the GPUs only): every convolution and
    convolution_backward
    gets channels-last activations, the saved activations cross to the backward channels-last
    (no layout copy kernel for them in either graph), the weight gradients come back in the
    parameters' layout, and loss, gradients and running statistics are eager's. (bf16: a bf16
    model; bf16 autocast with BatchNorm does not run on CPU tensors: eager's CPU
    native_batch_norm_backward rejects the mixed dtypes, with or without channels-last.)"""
    if interpreted and dtype == torch.bfloat16:
        pytest.skip("interpreter: the bf16 step runs on the cpu target (same library calls)")
    # fp32 on a GPU: full-precision convolutions on both sides (with TF32, cuDNN's algorithms,
    # picked per layout, gave conv1's weight gradient 1.2e-2 apart on the H100)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    model = _model(dtype, device, train=True)
    ref_model = copy.deepcopy(model)
    x = torch.randn(2, 3, 12, 12, device=device, dtype=dtype)   # C = 8, spatial 12 and 6
    cot = torch.randn(2, 5, generator=torch.Generator().manual_seed(7)).to(device, dtype)
    options = {"channels_last": True} if target == "cpu" else \
        {"fallback": False, "channels_last": True}
    compiled = _compile(model, target, **options)

    def step(m):
        loss = (m(x) * cot).sum()
        loss.backward()
        return loss

    loss = step(compiled)
    ref = step(ref_model)
    check_fallbacks()
    tol = None
    assert_close(loss, ref, what="loss", tol=tol)
    for bn, rbn in ((model.bn1, ref_model.bn1), (model.bn2, ref_model.bn2)):
        assert_close(bn.running_mean, rbn.running_mean, what="running_mean", tol=tol)
        assert_close(bn.running_var, rbn.running_var, what="running_var", tol=tol)
    _assert_grads(model, ref_model, x, cot, dtype, tol)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert p.grad.stride() == q.grad.stride(), name     # OIHW weight gradients
    assert spy == [(True, True, True)] * 3, spy
    # conv3, conv2, conv1 (conv1's input is the NCHW graph input: transposed once)
    assert backward_spy == [(True, True)] * 3, backward_spy
    forward, backward = ember.last_reports()[-2:]
    copies = [g for g in forward["fused_groups"] if "transpose" in g]
    # the graph input and the three weights: none for the activations saved for backward
    assert len(copies) == 4 and all(set(g) == {"transpose"} for g in copies), \
        forward["fused_groups"]
    copies = [g for g in backward["fused_groups"] if set(g) == {"transpose"}]
    # only the graph input, for conv1's weight gradient: the saved activations are read as
    # they come, and the kernels between the backward's library calls write NHWC (a transpose
    # inside a computing kernel is its index arithmetic: the GPU's max-pool backward permutes
    # its [N, C, Q, s, Q', s] residue grid, frontend/pool_decomp.py)
    assert len(copies) == 1, backward["fused_groups"]
    assert all(set(g) == {"transpose"} or "pad" in g for g in backward["fused_groups"]
               if "transpose" in g), backward["fused_groups"]


@pytest.mark.targets("cpu")
def test_backward_reads_saved_activations_in_any_layout(target, device, monkeypatch):
    """The backward is compiled for the saved activations' reported (channels-last) layout; one
    that comes in another layout (here: the forward returns eager's NCHW while reporting
    channels-last, as a forward that ran eagerly would) is copied, never misread."""
    from ember.frontend import saved_layouts
    real = saved_layouts.lay_out_saved

    def report_only(gm, saved):
        vals = {n: n.meta.get("val") for n in gm.graph.nodes}
        strides = real(gm, saved)
        for n, v in vals.items():
            n.meta["val"] = v
        return strides
    monkeypatch.setattr(saved_layouts, "lay_out_saved", report_only)
    model = _model(torch.float32, device, train=True)
    ref_model = copy.deepcopy(model)
    x = torch.randn(2, 3, 12, 12, device=device)
    (_compile(model, target, channels_last=True)(x).sum()).backward()
    ref_model(x).sum().backward()
    check_fallbacks()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert_close(p.grad, q.grad, what=name)     # (the cpu target only: no TF32)
    forward, backward = ember.last_reports()[-2:]
    # the forward wrote NCHW saved activations (transposes beyond the input's and weights'),
    # the backward was compiled for NHWC ones (no transpose of them in its kernels)
    assert sum("transpose" in g for g in forward["fused_groups"]) > 4, forward["fused_groups"]
    assert sum("transpose" in g for g in backward["fused_groups"]) == 1, \
        backward["fused_groups"]
