"""ember-buffer-reuse writes a pointwise kernel's result over a dying buffer it reads through a
reshape (the encoder MLP's fc1 matmul result, 2-D, and its bias + GELU, 3-D): the numbers stay
eager's and the planned arena holds one buffer where it held two. The C++ target's pipeline
turns that off (`reshape-in-place=false`: slower on the CPU), so it is checked through the
Triton target's (interpreted on the CPU), and the CPU's plan keeps the two buffers."""
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


def test_gelu_overwrites_matmul_result_through_reshape(target):
    torch.manual_seed(0)
    m = _MLP().eval()
    x = torch.randn(4, 16, 32)
    clear_reports()
    f = torch.compile(m, backend="ember", options={"target": target})
    with torch.no_grad():
        out, ref = f(x), m(x)
        out2 = f(x)                   # the pooled arena a second time
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out2, ref, rtol=1e-5, atol=1e-5)
    check_fallbacks()
    (report,) = ember.last_reports()
    # fc1's result (64x128 floats, 32 KiB) and the GELU of it share their bytes: the arena is
    # that one buffer plus fc2's result (8 KiB), not both 32 KiB buffers (on the CPU: both,
    # fc2's result in fc1's after it).
    want = 64 * 128 * 4 + 64 * 32 * 4 if target == "triton" else 2 * 64 * 128 * 4
    assert report["planned_peak_bytes"] == want, report["planned_peak_bytes"]
