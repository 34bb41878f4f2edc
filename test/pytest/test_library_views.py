"""ember-library-views end to end: attention reads q, k, v as strided views of the packed
projection (no copy kernels), with eager's result, on every target, forward and training."""
import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import check_fallbacks, clear_reports

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
    assert plain.startswith("builtin.module(ember-convert-externs,ember-library-views,")
    out0, report0 = _run(model, x, target, plain.replace("ember-library-views,", ""))
    with torch.no_grad():
        ref = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out0, ref, rtol=1e-5, atol=1e-6)
    # attention's output, transposed back for the projection, is a view of the op's result
    # (`ember.result_views`: no transpose kernel); with no bias, the q/k/v copy kernel is gone
    # too (attention reads views of the product); with one, the projection is mm + a pointwise
    # bias add, which the copy kernel computes anyway: left alone (a buffer of its own would
    # cost more than it saves)
    assert ["transpose"] in report0["fused_groups"]
    assert ["transpose"] not in report["fused_groups"]
    assert report["num_kernels"] == report0["num_kernels"] - (1 if bias else 2), \
        (report["fused_groups"], report0["fused_groups"])


def test_training_step_with_views_matches_eager(target, device):
    torch.manual_seed(0)
    model = PackedAttention(True).to(device)
    ref_model = PackedAttention(True).to(device)
    ref_model.load_state_dict(model.state_dict())
    x = torch.randn(B, S, H * D, device=device)
    torch._dynamo.reset()
    clear_reports()
    compiled = torch.compile(model, backend="ember", options={"target": target})
    compiled(x).square().mean().backward()
    ref_model(x).square().mean().backward()
    check_fallbacks()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
