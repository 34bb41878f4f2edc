"""The differential fuzzer, CI-sized (issue 9, item 2): a fixed range of random graphs
(test/fuzz) through ember on each target, compared with eager for values, dtypes, shapes,
strides, aliasing and raised errors, in a pool of child processes so that a crash is a finding.
Zero mismatches and zero crashes. The first VARIANT_COUNT graphs also run with fusion off and with
the buffer planner off (issue 11, item 4: a wrong fusion or reuse shows as a wrong value). The long run is benchmarks/fuzz_run.py; every bug it finds
gets a named test in test_fuzz_regressions.py."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fuzz import runner  # noqa: E402

SEED, COUNT = 0, 30     # ~60 s for cpu + triton with 2 workers on the 2-core CI machine
VARIANT_COUNT = 12      # of those, compiled again per variant where it differs: ~15 s more


@pytest.fixture(scope="module")
def fuzz_results(request, tmp_path_factory):
    from conftest import selected_targets
    targets = [t for t in selected_targets(request.config) if t in ("cpu", "triton")]
    from fuzz.compare import VARIANTS
    cases = [(SEED, i, t, VARIANTS if i < VARIANT_COUNT else ()) for i in range(COUNT)
             for t in targets]
    return runner.run(cases, jobs=2, timeout=120.0,
                      log_dir=str(tmp_path_factory.mktemp("fuzz-logs")))


# On a GPU machine the inputs would have to move there, and an out-of-range index then is a
# device-side assert that poisons the process's CUDA context: the fuzzer runs on CPU tensors.
@pytest.mark.targets("cpu", "triton")
def test_fuzz(target, fuzz_results):
    mine = [r for r in fuzz_results if r["target"] == target]
    assert len(mine) == COUNT
    bad = [r for r in mine if r["status"] in runner.FAILURES]
    text = "\n\n".join(f"# {r['status']}: {r['reason']}\n{r['source']}" for r in bad[:3])
    assert not bad, f"{len(bad)} of {COUNT} fuzz graphs differ from eager on {target}:\n{text}"


@pytest.mark.targets("cpu", "triton")
def test_fuzz_variants_ran(target, fuzz_results):
    """Each variant was compiled and compared for some graph (not all skipped as the default's
    program)."""
    from fuzz.compare import VARIANTS
    ran = [v for r in fuzz_results if r["target"] == target for v in r.get("variants_run", ())]
    assert all(ran.count(v) >= 1 for v in VARIANTS), ran


@pytest.mark.targets("cpu", "triton")
def test_fuzz_variant_options_change_the_program(target):
    """nofuse gives one kernel per op, noplan plans no arena; both still eager's values."""
    import ember
    from fuzz.compare import variant_options

    def f(x, y):
        a = torch.sin(x) * y
        b = a.sum(-1, keepdim=True)
        return torch.relu(a - b) * 2, b.t()

    x, y = torch.randn(8, 16), torch.randn(8, 16)
    ref = f(x, y)
    kernels = {}
    # a pipeline overrides max_group_size: both variants at once spell it in the pipeline
    both = variant_options("noplan", target)["pipeline"].replace("max-group-size=64",
                                                                 "max-group-size=1")
    assert both != variant_options("noplan", target)["pipeline"]
    for name, opts in (("default", {}), ("nofuse", variant_options("nofuse", target)),
                       ("nofuse+noplan", {"pipeline": both})):
        torch._dynamo.reset()
        ember.clear_reports()
        out = torch.compile(f, backend="ember", options={"target": target, **opts})(x, y)
        for o, r in zip(out, ref):
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
        (report,) = ember.last_reports()
        assert report["status"] == "compiled"
        kernels[name] = report["num_kernels"]
        if name == "nofuse":
            assert 0 < report["planned_peak_bytes"] < report["unplanned_peak_bytes"], report
        if name == "nofuse+noplan":        # no arena: the planner did not run
            assert report["planned_peak_bytes"] == 0, report
    torch._dynamo.reset()
    assert kernels["nofuse"] == kernels["nofuse+noplan"] > kernels["default"] == 1
    assert "ember-buffer-reuse" not in variant_options("noplan", target)["pipeline"]


def test_fuzz_compares_error_types():
    """Both sides raising passes only when ember's error is an instance of eager's type."""
    from fuzz.compare import _verdict
    args = (None, None, [], [], [], "cpu")
    assert _verdict(IndexError("x"), RuntimeError("x"), *args)[0] == "error"
    assert _verdict(RuntimeError("x"), IndexError("x"), *args)[0] == "error"
    assert _verdict(IndexError("x"), IndexError("y"), *args)[0] == "pass"


def test_generator_skips_a_line_eager_dies_on():
    """Eager's truncating division of an int64 MIN by -1 raises SIGFPE (x86's idiv): the
    generator, which runs each line eagerly, died on seed 49 index 848. It skips such a line
    now; run in a child process, so that the old behaviour fails this test instead of killing
    pytest's worker."""
    import subprocess
    code = ("from fuzz import graphs, ops\nimport torch\n"
            "g = graphs.generate(49, 848)\n"
            "assert not any(\"rounding_mode='trunc'\" in ln for ln in g.lines), g.lines\n"
            "mn = torch.tensor([torch.iinfo(torch.int64).min, 3])\n"
            "assert ops._eager_traps(\"torch.div({x}, {y}, rounding_mode='trunc')\", mn, -1)\n"
            "assert not ops._eager_traps(\"torch.div({x}, {y}, rounding_mode='trunc')\", mn, 2)\n"
            "assert not ops._eager_traps('{x} // {y}', mn, -1)\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=str(Path(__file__).resolve().parents[1]))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode,
                                                                   proc.stderr[-2000:])
