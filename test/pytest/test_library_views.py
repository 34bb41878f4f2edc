"""ember-library-views end to end: attention reads q, k, v as strided views of the packed
projection (no copy kernels), with eager's result, on every target, forward and training."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import ember
from conftest import check_fallbacks, clear_reports
from efficient_attention_cpu import efficient_attention_on_cpu

B, S, H, D = 2, 16, 4, 8


class PackedAttention(torch.nn.Module):
    """GPT-2's attention: one projection to q, k, v, split, heads transposed, causal SDPA."""

    def __init__(self, bias: bool):
        super().__init__()
        self.qkv = torch.nn.Linear(H * D, 3 * H * D, bias=bias)
        self.proj = torch.nn.Linear(H * D, H * D, bias=False)

    def forward(self, x):
        q, k, v = self.qkv(x).split(H * D, dim=2)
        q, k, v = (t.view(B, S, H, D).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(B, S, H * D))


def _run(model, x, target, pipeline=None):
    torch._dynamo.reset()
    clear_reports()
    options = {"target": target} if pipeline is None else {"target": target, "pipeline": pipeline}
    with torch.no_grad():
        out = torch.compile(model, backend="ember", options=options)(x)
    check_fallbacks()
    (report,) = [r for r in ember.last_reports() if r.get("status") == "compiled"]
    return out, report


@pytest.mark.parametrize("bias", [False, True])
def test_attention_reads_views_of_the_projection(target, device, bias):
    from ember.frontend.options import CompileOptions, default_pipeline, resolve_target
    torch.manual_seed(0)
    model = PackedAttention(bias).eval().to(device)
    x = torch.randn(B, S, H * D, device=device)
    out, report = _run(model, x, target)
    plain = default_pipeline(CompileOptions(), resolve_target(target, [x.device]))
    assert plain.startswith("builtin.module(ember-convert-externs") and \
        ",ember-library-views," in plain
    out0, report0 = _run(model, x, target, plain.replace("ember-library-views,", ""))
    with torch.no_grad():
        ref = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out0, ref, rtol=1e-5, atol=1e-6)
    # attention's output, transposed back for the projection, is a view of the op's result
    # (`ember.result_views`: no transpose kernel), and the q/k/v copy kernel is gone too
    # (attention reads views of the product); with a bias, the projection is eager's addmm
    # (ember-convert-externs: the bias add, only viewed, would be a kernel of its own)
    assert ["transpose"] in report0["fused_groups"]
    assert ["transpose"] not in report["fused_groups"]
    assert report["num_kernels"] == report0["num_kernels"] - 2, \
        (report["fused_groups"], report0["fused_groups"])
    assert report["num_kernels"] == 0, report["fused_groups"]


def _twins(make, device):
    """(a model from `make`, a second one with its weights, an input) on `device`, Dynamo
    and the reports reset: a step through ember beside the same step in eager."""
    torch.manual_seed(0)
    model, ref_model = make().to(device), make().to(device)
    ref_model.load_state_dict(model.state_dict())
    x = torch.randn(B, S, H * D, device=device)
    torch._dynamo.reset()
    clear_reports()
    return model, ref_model, x


def _packed_training_step(target, device, bias: bool) -> None:
    """One training step of PackedAttention through ember and eager: no fallback, eager's
    gradients."""
    model, ref_model, x = _twins(lambda: PackedAttention(bias), device)
    compiled = torch.compile(model, backend="ember", options={"target": target})
    compiled(x).square().mean().backward()
    ref_model(x).square().mean().backward()
    check_fallbacks()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_training_step_with_views_matches_eager(target, device):
    _packed_training_step(target, device, True)


class SeparateAttention(torch.nn.Module):
    """BERT's attention: q, k, v from three projections, heads transposed, SDPA with no mask,
    the output made contiguous [B, S, H, D] for the next projection."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(H * D, H * D) for _ in range(3))
        self.proj = torch.nn.Linear(H * D, H * D)

    def forward(self, x):
        q, k, v = (f(x).view(B, S, H, D).transpose(1, 2) for f in (self.q, self.k, self.v))
        o = F.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).contiguous().view(B, S, H * D))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_backward_gradients_in_any_layout_match_eager(target, device, dtype):
    """The attention backward gets the incoming gradient in the saved output's layout
    (runtime/externs `_grad_like_out`): cuDNN's backward (bf16 on a GPU) gave BERT-base's
    q/k/v weight gradients with relative error 1.0 when ember's row-major gradient met the
    output read as a [B, S, H, D] view."""
    torch.manual_seed(0)
    model = SeparateAttention().to(device)
    ref_model = SeparateAttention().to(device)
    ref_model.load_state_dict(model.state_dict())
    x = torch.randn(B, S, H * D, device=device)
    torch._dynamo.reset()
    clear_reports()
    compiled = torch.compile(model, backend="ember", options={"target": target})
    autocast = dtype != torch.float32 and device == "cuda"     # as a bf16 GPU model trains
    if dtype != torch.float32 and not autocast:
        model.to(dtype), ref_model.to(dtype)
        x = x.to(dtype)
    for f in (compiled, ref_model):
        with torch.autocast(device, dtype=dtype, enabled=autocast):
            out = f(x)
        out.float()[..., ::2].square().mean().backward()
    check_fallbacks()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        if q.grad.double().norm() < 1e-3 * max(r.grad.double().norm() for r in ref_model.parameters()):
            continue    # a gradient zero in exact arithmetic (the key bias): rounding noise
        err = (p.grad.double() - q.grad.double()).norm() / q.grad.double().norm()
        assert err < tol, (name, err.item())


def test_attention_backward_gradient_takes_the_outputs_strides():
    from ember.runtime import externs
    seen = []
    run = externs._grad_like_out(lambda ins: seen.append(ins) or [],
                                 ["grad_out", "query", "out"], "grad_out", "out")
    out = torch.randn(B, S, H, D).transpose(1, 2)       # [B, H, S, D] over a [B, S, H, D] buffer
    grad = torch.randn(B, H, S, D)                       # row-major
    run([grad, torch.randn(B, H, S, D), out])
    assert seen[0][2] is out and seen[0][0].stride() == out.stride()
    torch.testing.assert_close(seen[0][0], grad, rtol=0, atol=0)
    alike = grad.transpose(1, 2).contiguous().transpose(1, 2)
    run([alike, grad, out])     # already in the output's strides: handed on, no copy
    assert seen[1][0] is alike


class EfficientAttention(torch.nn.Module):
    """GPT-2's attention (`packed`: one projection split to q, k, v; causal) or BERT's (three
    projections), through the memory-efficient kernel that SDPA picks for training on a GPU."""

    def __init__(self, packed: bool):
        super().__init__()
        self.packed = packed
        if packed:
            self.qkv = torch.nn.Linear(H * D, 3 * H * D)
        else:
            self.q, self.k, self.v = (torch.nn.Linear(H * D, H * D) for _ in range(3))
        self.proj = torch.nn.Linear(H * D, H * D)

    def forward(self, x):
        if self.packed:
            q, k, v = self.qkv(x).split(H * D, dim=2)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = (t.view(B, S, H, D).transpose(1, 2) for t in (q, k, v))
        o = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, self.packed)[0]
        return self.proj(o.transpose(1, 2).reshape(B, S, H * D))


class _ExternCopies(TorchDispatchMode):
    """Records the copies runtime/externs.py makes around library calls (a result made
    contiguous, an operand copied into another's strides); a kernel's own copies (the Triton
    interpreter's) are not counted."""

    def __init__(self):
        super().__init__()
        self.copies = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.copy_.default, torch.ops.aten.clone.default):
            frame = sys._getframe(1)
            while frame is not None and not frame.f_code.co_filename.endswith(
                    os.path.join("runtime", "externs.py")):
                frame = frame.f_back
            if frame is not None:
                self.copies.append((frame.f_code.co_name, tuple(args[0].shape)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("packed", [True, False], ids=["gpt2", "bert"])
def test_efficient_attention_backward_copies_nothing(target, device, packed, monkeypatch):
    """The memory-efficient backward lays its gradients out [B, S, H, D] for any q, k, v, and
    the attention output's gradient arrives in the saved output's strides: the runtime copies
    nothing around it (GPT-2's packed q, k, v had each gradient copied contiguous, 3 copy
    kernels a layer on the GPU; `_restrided`, the gradient's copy into the output's strides,
    stays uncalled). Eager's gradients."""
    import ember.runtime.executor as ex
    from ember.runtime import externs
    restrided, programs = [], []
    real, real_load = externs._restrided, ex.load
    monkeypatch.setattr(externs, "_restrided",
                        lambda t, stride: restrided.append(tuple(t.shape)) or real(t, stride))
    monkeypatch.setattr(ex, "load", lambda program, *a, **k: programs.append(program) or
                        real_load(program, *a, **k))
    model, ref_model, x = _twins(lambda: EfficientAttention(packed), device)
    with efficient_attention_on_cpu():
        compiled = torch.compile(model, backend="ember", options={"target": target})
        compiled(x).square().mean().backward()      # compiles the forward and the backward
        model.zero_grad()
        loss = compiled(x).square().mean()
        with _ExternCopies() as seen:
            loss.backward()
        ref_model(x).square().mean().backward()
    check_fallbacks()
    # the three gradients handed on as the op's tensors permuted to [B, S, H, D] (a CUDA
    # graph's replay would hide the copies from the count below: this holds there too)
    (attention,) = [s for s in programs[-1].steps if s.kind == "library"
                    and s.name.endswith("efficient_attention_backward.default")]
    assert sorted(v[0] for v in attention.params.get("result_views", [])) == [0, 1, 2]
    assert seen.copies == [] and restrided == [], (seen.copies, restrided)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "separate"])
def test_cuda_efficient_attention_backward_lays_gradients_out_bshd(packed):
    """What ember-library-views assumes of torch's memory-efficient backward (GRADIENT_LAYOUT
    "bshd"): each gradient is a [B, S, H, D] buffer viewed [B, H, S, D], for q, k, v sliced
    from one packed projection as for separate ones."""
    x = torch.randn(B, S, 3 * H * D if packed else H * D, device="cuda")
    parts = x.split(H * D, dim=2) if packed else (x, x.clone(), x.clone())
    q, k, v = (t.view(B, S, H, D).transpose(1, 2) for t in parts)
    o = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)
    grads = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        torch.randn_like(o[0]), q, k, v, None, o[0], o[1], o[2], o[3], 0.0,
        [True, True, True, False], True)
    bshd = torch.empty(B, S, H, D).transpose(1, 2).stride()
    assert [g.stride() for g in grads[:3]] == [bshd] * 3


def test_embedding_backward_of_one_id_compiles(target, device):
    """A 0-dim id: the backward's scatter_add index is a 0-dim tensor expanded to [1, D]
    (`expand_shape` without reassociation groups); ember-library-views crashed on it (op_db's
    nn.functional.embedding sample 0). It is left as it is and the graph compiles."""
    w = torch.randn(10, 5, device=device, requires_grad=True)
    w2 = w.detach().clone().requires_grad_(True)
    i = torch.tensor(3, device=device)
    scale = torch.arange(5., device=device)
    torch._dynamo.reset()
    clear_reports()
    f = torch.compile(lambda w, i: F.embedding(i, w), backend="ember", options={"target": target})
    (f(w, i) * scale).sum().backward()
    (F.embedding(i, w2) * scale).sum().backward()
    check_fallbacks()
    torch.testing.assert_close(w.grad, w2.grad, rtol=0, atol=0)


@pytest.mark.parametrize("bias", [False, True])
def test_backward_reads_saved_qkv_as_they_come(target, device, bias, monkeypatch):
    """The backward's saved q, k, v are views of the forward's packed projection (the forward
    hands them out as views of one buffer). The backward program declares their strides
    (ValueInfo.strides, `ember.arg_strides`) and the runtime hands them to the attention
    backward as they come: no contiguous copy of each per call (three per layer in GPT-2's
    training step before), and eager's gradients."""
    import ember.runtime.executor as ex
    programs, taken = [], []
    real_load, real_take = ex.load, ex.CompiledProgram._take_inputs

    def load(program, *a, **k):
        programs.append(program)
        return real_load(program, *a, **k)

    def take(self, inputs, vals):
        real_take(self, inputs, vals)
        taken.append([vals[i] is t for i, t in enumerate(inputs)])

    monkeypatch.setattr(ex, "load", load)
    monkeypatch.setattr(ex.CompiledProgram, "_take_inputs", take)
    _packed_training_step(target, device, bias)
    backward = programs[-1]
    (attention,) = [s for s in backward.steps if s.kind == "library"
                    and s.name.endswith("attention_backward.default")
                    or "attention_for_cpu_backward" in s.name]
    names = attention.params["tensor_args"]
    qkv = [attention.inputs[names.index(n)] for n in ("query", "key", "value")]
    assert all(i < backward.num_inputs for i in qkv), qkv
    # strided as eager saved them: [B, H, S, D] over the [B, S, 3 * H * D] projection
    assert [backward.values[i].strides for i in qkv] == [(S * 3 * H * D, D, 3 * H * D, 1)] * 3
    assert all(taken[-1][i] for i in qkv), taken[-1]


def test_embedding_backward_scatters_into_a_fill_in_place(target, device, monkeypatch):
    """The embedding backward's weight gradient is `scatter_add` into zeros of the weight's
    shape (vocabulary x hidden: 154 MB for GPT-2 small in f32). The zeros are a "fill" step
    made per call and the scatter runs in place on them (`in_place`): no constant the program
    keeps for its life, no copy of it per call; eager's gradient."""
    import ember.runtime.executor as ex
    loaded = []
    real_load = ex.load

    def load(program, *a, **k):
        loaded.append(real_load(program, *a, **k))
        return loaded[-1]

    monkeypatch.setattr(ex, "load", load)
    torch.manual_seed(0)
    emb = torch.nn.Embedding(100, 16).to(device)
    ref = torch.nn.Embedding(100, 16).to(device)
    ref.load_state_dict(emb.state_dict())
    ids = torch.randint(0, 100, (2, 24), device=device)
    scale = torch.arange(16.0, device=device)
    torch._dynamo.reset()
    clear_reports()
    f = torch.compile(lambda i: emb(i) * scale, backend="ember", options={"target": target})
    for _ in range(2):      # the second call reuses the program: the fill is new each call
        emb.zero_grad()
        f(ids).square().sum().backward()
    (ref(ids) * scale).square().sum().backward()
    check_fallbacks()
    torch.testing.assert_close(emb.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-5)
    backward = loaded[-1]
    steps = backward.program.steps
    (scatter,) = [s for s in steps if s.name == "aten.scatter_add.default"]
    base = scatter.inputs[scatter.params["in_place"]]
    (fill,) = [s for s in steps if base in s.outputs]
    assert fill.kind == "fill" and fill.params["value"] == 0
    assert backward.program.values[base].shape == (100, 16)
    assert not any(s.kind == "const" and backward.program.values[s.outputs[0]].shape == (100, 16)
                   for s in steps)
    assert all(t is None or t.shape != (100, 16) for t in backward._init)


class MultiheadAttention(torch.nn.Module):
    """nn.MultiheadAttention (batch_first, as nn.TransformerEncoderLayer has it): the packed
    projection is `linear` on [S, B, E] (mm of the flattened rows viewed back, then the bias
    add), split to q, k, v with batch and heads merged ([S, B * H, D])."""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(H * D, H, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def test_multihead_attention_reads_views_of_the_projection():
    """The projection is eager's addmm (the bias add on the rows viewed [S, B, 3E]) and the
    attention reads q, k, v as strided views of it (B and H merged and split back): no bias-add
    kernel and no q/k/v copy kernel in the forward (before: [add, transpose] and
    [extract_slice, transpose]); loss and gradients are eager's."""
    torch.manual_seed(0)
    model = MultiheadAttention()
    ref_model = MultiheadAttention()
    ref_model.load_state_dict(model.state_dict())
    x = torch.randn(B, S, H * D)
    torch._dynamo.reset()
    clear_reports()
    loss = torch.compile(model, backend="ember").forward(x).square().mean()
    loss.backward()
    ref = ref_model(x).square().mean()
    ref.backward()
    check_fallbacks()
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    (fwd,) = [r for r in ember.last_reports() if r["graph_id"].endswith("forward")]
    groups = fwd["fused_groups"]
    assert not any("extract_slice" in g or "add" in g for g in groups), groups
    # left: the input's [B, S, E] -> [S, B, E] copy and q, k, v saved for the backward
    assert groups == [["transpose"], ["transpose"]], groups
