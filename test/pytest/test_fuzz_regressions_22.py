"""Bugs the differential fuzzer found from seed 22 on (test/fuzz, benchmarks/fuzz_run.py), one
test each, named after the bug; the comment gives the fuzz graph (seed, index) that found it or
how it was found. Same comparator and helpers as test_fuzz_regressions.py."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz.compare import check  # noqa: E402,F401
from test_fuzz_regressions import _assert_matches, _case, _no_fallback  # noqa: E402


# Known from seed 22's run, the cpu target: half `torch.div(x, 0.3, rounding_mode='trunc')` of
# 3.0 gave 9 (the C++ rounded the number to half, 0.30005), eager 10: eager's kernel reads a
# one-value divisor at f32 and truncates the f32 quotient; with a tensor divisor it rounds the
# quotient to the type first (bf16 9.75 / -0.2871 is -34, not trunc(-33.96) = -33).
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("divisor", ["0.3", "a1", "a1[:1]", "torch.tensor(0.3)"])
def test_low_precision_trunc_division(target, dtype, divisor):
    inputs = (f"a0 = torch.tensor([3.0, -3.0, 9.75, 1.5703125, 2.9, -0.0, 0.6]).to(torch.{dtype})\n"
              f"a1 = torch.tensor([0.3, 0.3, -0.287109375, -0.033447265625, 0.3, 0.3, 0.3])"
              f".to(torch.{dtype})")
    body = f"return (torch.div(a0, {divisor}, rounding_mode='trunc'),)"
    _no_fallback(_assert_matches(_case(inputs, body), target))
