"""Shared fixtures for ember's pytest suites: target selection, compile helper, numerics checks.

Targets: `--target cpu,triton` (or env `EMBER_TEST_TARGETS`). Default: `cuda` on a machine with
a CUDA device, else `cpu,triton` where `triton` runs its kernels through the Triton interpreter
on CPU tensors (TRITON_INTERPRET=1 must be set before triton is imported, hence here, at import).
"""
import math
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests compile the same graphs under monkeypatched passes and runtimes: each compiles for
# itself (test_program_cache.py turns the compiled-program cache on where it tests it).
os.environ.setdefault("EMBER_PROGRAM_CACHE", "0")

import pytest  # noqa: E402

# Relative-error tolerances ||out - ref|| / ||ref|| in float64 (docs/design.md, "Numerics").
TOL = {torch.float32: 1e-4, torch.float64: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-2}
TOL_MATMUL_FP32 = 1e-3


def pytest_addoption(parser):
    parser.addoption("--target", action="store", default=None,
                     help="comma-separated ember targets to test (cpu, triton, cuda); "
                          "default: env EMBER_TEST_TARGETS, else cuda if available else cpu,triton")


def selected_targets(config) -> list[str]:
    text = config.getoption("--target") or os.environ.get("EMBER_TEST_TARGETS")
    if text:
        return [t.strip() for t in text.split(",") if t.strip()]
    return ["cuda"] if torch.cuda.is_available() else ["cpu", "triton"]


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        targets = selected_targets(metafunc.config)
        marker = metafunc.definition.get_closest_marker("targets")
        if marker is not None:  # @pytest.mark.targets("cpu", "cuda"): restrict to these
            targets = [t for t in targets if t in marker.args]  # none left: reported as skipped
        metafunc.parametrize("target", targets)


def pytest_configure(config):
    config.addinivalue_line("markers", "targets(*names): run this test only on these targets")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def device(target) -> str:
    """Where test tensors live: CUDA for GPU targets on a GPU machine, else CPU."""
    return "cuda" if target != "cpu" and torch.cuda.is_available() else "cpu"


@pytest.fixture
def exported_sources(monkeypatch) -> list:
    """The source of every Triton (Python) program exported while the test runs, in order (as
    the exporter hands it to the runtime)."""
    from ember.frontend import export_program as exporter
    sources, real = [], exporter.export_program

    def record(module):
        program = real(module)
        if program.lang == "python":
            sources.append(program.source)
        return program
    monkeypatch.setattr(exporter, "export_program", record)
    return sources


@pytest.fixture
def graphs(monkeypatch):
    """Every GraphedProgram made during the test (its __init__ spied on, restored after)."""
    from ember.runtime.cuda_graphs import GraphedProgram
    made, init = [], GraphedProgram.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        made.append(self)
    monkeypatch.setattr(GraphedProgram, "__init__", spy)
    return made


@pytest.fixture
def interpreted(target) -> bool:
    """True when kernels run in the (slow) Triton interpreter: tests pick their smallest sizes."""
    return target != "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


# ---------------------------------------------------------------------------------------------
# Compile reports: did any op fall back to eager?

def _find_reports_api():
    """ember exposes the reports of its last compiles; returns a callable giving them or None."""
    import ember
    for owner, name in ((ember, "last_reports"), (getattr(ember, "frontend", None), "last_reports")):
        fn = getattr(owner, name, None) if owner is not None else None
        if callable(fn):
            return fn
    return None


def _report_fallbacks(report) -> list:
    """Names of ops that ran eagerly according to one compile report (dict or object)."""
    for key in ("eager_fallback_ops", "fallback_ops"):
        value = report.get(key) if isinstance(report, dict) else getattr(report, key, None)
        if value is not None:
            return list(value)
    raise AssertionError(f"ember compile report has no fallback list: {report!r}")


def clear_reports():
    import ember
    fn = getattr(ember, "clear_reports", None)
    if fn is None:
        from ember.frontend import report
        fn = getattr(report, "clear_reports", None)
    if callable(fn):
        fn()


def check_fallbacks(expect_fallback: bool = False, split_off: bool = False):
    """Asserts that ember compiled at least one graph and, unless expected, ran nothing eagerly;
    unless `split_off`, no graph was compiled again without ember-split-reductions (a silent
    retry after the split made invalid IR: correct, but its long reductions unsplit ran
    efficientnet_b0's training at x0.19 of eager on an H200)."""
    api = _find_reports_api()
    if api is None:
        pytest.fail("ember exposes no compile reports (expected ember.last_reports()); "
                    "cannot check for eager fallbacks")
    reports = list(api())
    assert reports, "ember.last_reports() is empty: the ember backend compiled nothing"
    fallbacks = [op for r in reports for op in _report_fallbacks(r)]
    if not expect_fallback:
        why = "; ".join(f"{r.get('graph_id')}: {r.get('status')} {r.get('error', '')}"
                        for r in reports if isinstance(r, dict) and _report_fallbacks(r))
        assert not fallbacks, f"ops fell back to eager: {fallbacks} ({why})"
    if not split_off:
        off = [r.get("split_reductions_off") for r in reports
               if isinstance(r, dict) and r.get("split_reductions_off")]
        assert not off, f"compiled again without ember-split-reductions: {off}"
    return fallbacks


# ---------------------------------------------------------------------------------------------
# Compile + compare

def ember_compile(fn, target: str, **kwargs):
    """`torch.compile` through the public API, with a fresh Dynamo."""
    torch._dynamo.reset()
    clear_reports()
    return torch.compile(fn, backend="ember", options={"target": target}, **kwargs)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if torch.isnan(o).any() and not torch.equal(torch.isnan(o), torch.isnan(r)):
        return math.nan
    num = torch.linalg.vector_norm(torch.nan_to_num(o - r, nan=0.0)).item()
    den = torch.linalg.vector_norm(torch.nan_to_num(r, nan=0.0)).item()
    return num / den if den > 0 else num


def assert_close(out, ref, tol: float | None = None, matmul: bool = False, what: str = "output"):
    """Exact dtype/shape equality, then rel. error under the dtype's tolerance (exact for ints).
    NaN fails unless the reference has NaN in the same places; `tol` overrides."""
    if isinstance(ref, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(ref), \
            f"{what}: structure {type(out).__name__}[{len(out)}] vs {type(ref).__name__}[{len(ref)}]"
        for i, (o, r) in enumerate(zip(out, ref)):
            assert_close(o, r, tol, matmul, f"{what}[{i}]")
        return
    if not isinstance(ref, torch.Tensor):
        assert out == ref, f"{what}: {out!r} != {ref!r}"
        return
    assert isinstance(out, torch.Tensor), f"{what}: got {type(out).__name__}, expected a tensor"
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != {ref.dtype}"
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.device.type == ref.device.type, f"{what}: device {out.device} != {ref.device}"
    if not (ref.is_floating_point() or ref.is_complex()):
        mismatch = (out.cpu() != ref.cpu()).sum().item()
        assert mismatch == 0, f"{what}: {mismatch} of {ref.numel()} {ref.dtype} elements differ"
        return
    if tol is None:
        tol = TOL_MATMUL_FP32 if matmul and ref.dtype == torch.float32 else TOL[ref.dtype]
    err = rel_err(out, ref)
    assert not math.isnan(err) and not torch.isnan(out.detach().cpu().float()).sum() > \
        torch.isnan(ref.detach().cpu().float()).sum(), f"{what}: NaN in output"
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol:.0e} ({ref.dtype})"


def check(fn, args, target, tol=None, matmul=False, expect_fallback=False):
    """Compiles `fn` with ember, runs it on `args`, compares with eager; returns the output."""
    ref = fn(*args)
    compiled = ember_compile(fn, target)
    out = compiled(*args)
    assert_close(out, ref, tol=tol, matmul=matmul)
    check_fallbacks(expect_fallback)
    return out


# An op that ember never compiles (torch-mlir has no lowering for a test's own custom op), for
# the tests of the eager fallback: `unlowered(x)` is bessel_j0(x) run by torch, differentiable,
# and its gradient is a second such op (`unlowered_grad`). Real ATen ops without a lowering
# get one sooner or later (bessel_j0 and digamma were these tests' ops until they compiled).
UNLOWERED = "ember_test.unlowered.default"
UNLOWERED_GRAD = "ember_test.unlowered_grad.default"


@torch.library.custom_op("ember_test::unlowered", mutates_args=())
def unlowered(x: torch.Tensor) -> torch.Tensor:
    return torch.special.bessel_j0(x)


@unlowered.register_fake
def _unlowered_fake(x):
    return torch.empty_like(x)


@torch.library.custom_op("ember_test::unlowered_grad", mutates_args=())
def unlowered_grad(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return -torch.special.bessel_j1(x) * grad


@unlowered_grad.register_fake
def _unlowered_grad_fake(x, grad):
    return torch.empty_like(x)


def _unlowered_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


unlowered.register_autograd(lambda ctx, grad: unlowered_grad(ctx.saved_tensors[0], grad),
                            setup_context=_unlowered_setup)


@pytest.fixture
def recorded(monkeypatch):
    """The EmberGraphs made from build records (frontend/build_records.py) during the test, in
    order (EmberGraph.from_record spied on, restored after)."""
    from ember.frontend.compile import EmberGraph
    made = []
    real = EmberGraph.from_record.__func__

    def from_record(cls, *args, **kwargs):
        graph = real(cls, *args, **kwargs)
        made.append(graph)
        return graph
    monkeypatch.setattr(EmberGraph, "from_record", classmethod(from_record))
    return made
