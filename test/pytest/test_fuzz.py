"""The differential fuzzer, CI-sized (issue 9, item 2): a fixed range of random graphs
(test/fuzz) through ember on each target, compared with eager for values, dtypes, shapes,
strides, aliasing and raised errors, in a pool of child processes so that a crash is a finding.
Zero mismatches and zero crashes. The long run is benchmarks/fuzz_run.py; every bug it finds
gets a named test in test_fuzz_regressions.py."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fuzz import runner  # noqa: E402

SEED, COUNT = 0, 30     # ~60 s for cpu + triton with 2 workers on the 2-core CI machine


@pytest.fixture(scope="module")
def fuzz_results(request, tmp_path_factory):
    from conftest import selected_targets
    targets = [t for t in selected_targets(request.config) if t in ("cpu", "triton")]
    cases = [(SEED, i, t) for i in range(COUNT) for t in targets]
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
