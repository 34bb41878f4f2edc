"""ember-buffer-reuse writes a pointwise kernel's result over a dying buffer it reads through a
reshape (the encoder MLP's fc1 matmul result, 2-D, and its bias + GELU, 3-D): the numbers stay
eager's and the planned arena holds one buffer where it held two."""
import torch
import torch.nn.functional as F

import ember
from conftest import check_fallbacks, clear_reports


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 128), torch.nn.Linear(128, 32)

    def forward(self, x):             # x: (batch, tokens, 32); the matmuls see (batch*tokens, .)
        return self.fc2(F.gelu(self.fc1(x))) + x


def test_gelu_overwrites_matmul_result_through_reshape():
    torch.manual_seed(0)
    m = _MLP().eval()
    x = torch.randn(4, 16, 32)
    clear_reports()
    f = torch.compile(m, backend="ember", options={"target": "cpu"})
    with torch.no_grad():
        out, ref = f(x), m(x)
        out2 = f(x)                   # the pooled arena a second time
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out2, ref, rtol=1e-5, atol=1e-5)
    check_fallbacks()
    (report,) = ember.last_reports()
    # fc1's result (64x128 floats, 32 KiB) and the GELU of it share their bytes: the arena is
    # that one buffer plus fc2's result (8 KiB), not both 32 KiB buffers.
    assert report["planned_peak_bytes"] == 64 * 128 * 4 + 64 * 32 * 4, report["planned_peak_bytes"]
