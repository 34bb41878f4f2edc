"""The Triton matmul template with its epilogue fused (ember-matmul-template, passes/triton_matmul.py):
numerics against eager under the Triton interpreter (or on a GPU), for both variants a `matmul`
kernel carries (the template, and the library call followed by the epilogue kernel), f32 and
bf16, ragged sizes (M, N, K not multiples of the first configuration's 64 x 64 x 32 blocks),
batched products and operands read transposed. Every case also checks that the product went
through a `matmul` kernel (no library extern left in the program)."""
import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import assert_close, clear_reports

pytestmark = pytest.mark.targets("triton", "cuda")
# Under the interpreter "auto" runs the template; on a GPU it may pick either, so the template
# is also forced there.
CHOICES = ["auto", "library"] + (["template"] if torch.cuda.is_available() else [])


def _compile(fn, target, choice="auto", exact=True):
    torch._dynamo.reset()
    clear_reports()
    return torch.compile(fn, backend="ember", options={
        "target": target, "matmul_template": choice, "exact_low_precision": exact})


def _used_template(n_products: int = 1):
    reports = list(ember.last_reports())
    assert reports and all(r["status"] == "compiled" for r in reports), reports
    groups = [g for r in reports for g in r["fused_groups"]]
    assert sum(1 for g in groups if g and g[0] == "mm") == n_products, groups
    assert sum(r["num_externs"] for r in reports) == 0, reports


def _r(*shape, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


# (name, fn, operand shapes): M = 70, N = 50, K = 40 unless said otherwise
CASES_F32 = [
    ("bias_relu", lambda x, w, b: torch.relu(F.linear(x, w, b)), [(70, 40), (50, 40), (50,)]),
    ("bias_gelu_erf", lambda x, w, b: F.gelu(x @ w.t() + b), [(70, 40), (50, 40), (50,)]),
    ("bias_gelu_tanh", lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
     [(70, 40), (50, 40), (50,)]),
    ("silu_residual", lambda x, w, r: F.silu(x @ w) + r, [(70, 40), (40, 50), (70, 50)]),
    ("cast_bf16", lambda x, w: (x @ w * 0.5).to(torch.bfloat16), [(70, 40), (40, 50)]),
    ("cast_only", lambda x, w: (x @ w).to(torch.float16), [(70, 40), (40, 50)]),
    ("residual_only", lambda x, w, r: x @ w + r, [(70, 40), (40, 50), (70, 50)]),
    ("rows_3d_residual", lambda x, w, b: F.linear(x, w, b) + x[..., :50] * 2,
     [(4, 17, 72), (50, 72), (50,)]),
    ("bmm_affine", lambda a, b: torch.bmm(a, b) * 2.0 + 1.0, [(3, 33, 40), (3, 40, 20)]),
    ("bmm_transposed_b", lambda a, b: torch.sigmoid(a @ b.transpose(-1, -2)),
     [(2, 33, 24), (2, 65, 24)]),
]


@pytest.mark.parametrize("name,fn,shapes", CASES_F32, ids=[c[0] for c in CASES_F32])
@pytest.mark.parametrize("choice", CHOICES)
def test_f32(target, device, name, fn, shapes, choice):
    args = [_r(*s, device=device, seed=i) for i, s in enumerate(shapes)]
    ref = fn(*args)
    out = _compile(fn, target, choice)(*args)
    # IEEE f32 dots (TF32 only where torch allows it; off by default): eager's f32 tolerance
    assert_close(out, ref, tol=1e-4)
    _used_template()


CASES_BF16 = [
    ("bias_gelu", lambda x, w, b: F.gelu(F.linear(x, w, b)), [(70, 40), (50, 40), (50,)]),
    ("silu_residual", lambda x, w, r: F.silu(x @ w) + r, [(70, 40), (40, 50), (70, 50)]),
    ("bias_residual_3d", lambda x, w, b, r: F.linear(x, w, b) + r,
     [(3, 30, 40), (50, 40), (50,), (3, 30, 50)]),
    ("bmm_relu", lambda a, b: torch.relu(torch.bmm(a, b)), [(2, 33, 40), (2, 40, 20)]),
]


@pytest.mark.parametrize("name,fn,shapes", CASES_BF16, ids=[c[0] for c in CASES_BF16])
@pytest.mark.parametrize("choice", CHOICES)
def test_bf16(target, device, name, fn, shapes, choice):
    args = [_r(*s, dtype=torch.bfloat16, device=device, seed=i) for i, s in enumerate(shapes)]
    ref = fn(*args)
    out = _compile(fn, target, choice, exact=False)(*args)
    assert_close(out, ref)
    _used_template()


def test_mlp_block_two_products(target, device):
    """Linear - GELU - Linear + residual on 3-D tokens: both products become matmul kernels."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(24, 72), torch.nn.GELU(),
                              torch.nn.Linear(72, 24)).to(device)

    def block(x):
        return mlp(x) + x
    x = _r(2, 35, 24, device=device)
    with torch.no_grad():
        ref = block(x)
        out = _compile(block, target)(x)
    assert_close(out, ref, tol=1e-4)
    _used_template(2)
    # the bias is added in the product's 2-D shape, GELU on the 3-D view: one epilogue
    groups = [g for r in ember.last_reports() for g in r["fused_groups"]]
    assert any(g[0] == "mm" and "gelu" in g for g in groups), groups


@pytest.mark.targets("cpu", "triton", "cuda")
def test_3d_linear_bias_and_activation_share_a_kernel(target, device):
    """ember-fuse: a [B*S, N] bias add and the GELU on its [B, S, N] view are one kernel (the
    schedule reaches the 2-D op through the reshape), on both code generators."""
    lin = torch.nn.Linear(16, 40).to(device)
    fn = lambda x: F.gelu(lin(x)) * 2
    x = _r(3, 11, 16, device=device)
    with torch.no_grad():
        ref = fn(x)
        out = _compile(fn, target, choice="off")(x)
    assert_close(out, ref, tol=1e-4)
    groups = [g for r in ember.last_reports() for g in r["fused_groups"]]
    assert len(groups) == 1 and "add" in groups[0] and "gelu" in groups[0], groups


def test_exact_low_precision_keeps_library_bf16(target, device):
    """Under exact_low_precision (the default) a bf16 product stays cuBLAS's call."""
    x, w = _r(70, 40, dtype=torch.bfloat16, device=device), _r(40, 50, dtype=torch.bfloat16,
                                                               device=device)
    fn = lambda x, w: torch.relu(x @ w) + 1
    out = _compile(fn, target)(x, w)
    assert torch.equal(out, fn(x, w))
    reports = list(ember.last_reports())
    assert sum(r["num_externs"] for r in reports) == 1, reports


def test_off_keeps_library_call(target, device):
    x, w = _r(70, 40, device=device), _r(40, 50, device=device)
    fn = lambda x, w: torch.relu(x @ w)
    out = _compile(fn, target, choice="off")(x, w)
    assert_close(out, fn(x, w), tol=1e-4)
    reports = list(ember.last_reports())
    assert sum(r["num_externs"] for r in reports) == 1, reports
