"""nn.TransformerEncoderLayer's inference fast path (frontend/transformer_decomp.py) on the CPU:
a short unmasked sequence's attention is two batched matmuls around ember's softmax kernel,
a longer one (or a masked one) SDPA; eager's result either way."""
import pytest
import torch
import torch.nn as nn

import ember
from conftest import check_fallbacks, clear_reports

from ember.frontend import transformer_decomp

SOFTMAX = ["amax", "sub", "exp", "sum", "div"]


def _layer():
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation="gelu",
                                      batch_first=True).eval()


def _compile_and_run(m, x, mask=None):
    torch._dynamo.reset()
    clear_reports()
    c = torch.compile(m, backend="ember", options={"target": "cpu"})
    with torch.no_grad():
        out = c(x, src_key_padding_mask=mask) if mask is not None else c(x)
        ref = m(x, src_key_padding_mask=mask) if mask is not None else m(x)
    check_fallbacks()
    (report,) = ember.last_reports()
    return out, ref, report


@pytest.mark.parametrize("long", [False, True])
def test_short_sequence_attention_as_matmuls(long, monkeypatch):
    """16 tokens: the attention is bmm, a fused softmax kernel, bmm (six matmul externs, no
    SDPA); with the threshold under 16, SDPA (four matmuls and the SDPA call, no softmax
    kernel)."""
    if long:
        monkeypatch.setattr(transformer_decomp, "MATH_ATTENTION_MAX_LEN", 8)
    m = _layer()
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(1))
    out, ref, report = _compile_and_run(m, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    groups = report["fused_groups"]
    assert (SOFTMAX in groups) != long, groups
    assert report["num_externs"] == (5 if long else 6), report["num_externs"]  # SDPA counts


def test_masked_attention_keeps_sdpa():
    """A key padding mask: SDPA with the additive mask, as before (no softmax kernel)."""
    m = _layer()
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(1))
    pad = torch.zeros(2, 16, dtype=torch.bool)
    pad[0, -3:] = True
    out, ref, report = _compile_and_run(m, x, pad)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert SOFTMAX not in report["fused_groups"], report["fused_groups"]
