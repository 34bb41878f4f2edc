"""What the fuzzer found in seed-45 and seed-46 runs (2026-11-28): graphs ember can compile that
ran eagerly, and an error eager raises that the first fix for them lost. Same comparator and
helpers as test_fuzz_regressions.py."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz import graphs  # noqa: E402
from test_fuzz_regressions import _assert_matches, _case  # noqa: E402


# seed 45 index 46: `fmod(int64_t, 2)` fell back: torch-mlir fails to legalize an int64 fmod by
# a number ("failed to legalize operation 'torch.constant.int'"). eager_semantics._fmod: by a
# 0-dim tensor of the result type, the number wrapped to it as eager converts it.
# seed 45 index 246: `where(empty > 0, empty, int64_t)` fell back: zero_size kept the node as
# an index check for its int64 operand with elements (zero_size._checks_indices).
@pytest.mark.parametrize("index", [46, 246])
def test_fuzz_seed45_fallbacks(target, index):
    _assert_matches(graphs.generate(45, index).source(), target)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8"])
def test_integer_fmod_by_a_number_wraps_it_as_eager(target, dtype):
    """The number converted to the tensor's type as eager converts it: int8 by 300 is by 44,
    int32 by 2**32 + 3 by 3; negative operands and divisors keep fmod's sign rule (a's)."""
    inputs = f"a0 = torch.tensor([100, -7, 5, -128], dtype=torch.{dtype})"
    body = "return (torch.fmod(a0, 3), torch.fmod(a0, -4), torch.fmod(a0, 300), " \
           "torch.fmod(a0, 2 ** 32 + 3), torch.fmod(a0[1], 2))"
    _assert_matches(_case(inputs, body, exact=(True,) * 5), target)


# seed 46 index 1471: `log(zeros(0, 0, 3))[tensor([-1, 0])]` raises in eager ("index is out of
# bounds for dimension with size 0", an index with elements into an empty dim) though its
# result [2, 0, 3] has no elements; zero_size folded the index away when it first let an index
# with no element to read fold (zero_size._index_reads_nothing).
def test_fuzz_seed46_index_into_an_empty_dim_raises(target):
    # (the comparator's pass here: both raised IndexError; the index runs as eager's kernel)
    _assert_matches(graphs.generate(46, 1471).source(), target, allow_fallback=True)


# seed 46, graphs that fell back where they need not:
# - 302, 740: `div(True, half_t, rounding_mode="trunc")`, `div(-1, ...)`: tracing failed in
#   eager_semantics._trunc_div_low (a Python dividend has no `.to`);
# - 378, 1091: an empty tensor that an index check inside the program reads (embedding,
#   index_select) was an `empty_strided` with torch's strides for a size 0 ([1, 1, 1] for
#   [1, 1, 0]), which torch-mlir's lowering refuses (zero_size._dense_stride);
# - 1363: `where(c, x, floor(x))` of integers: torch-mlir folds a `where` of one value into
#   that value without the condition's broadcast (fx_prep._where_of_one_value_at_its_shape).
@pytest.mark.parametrize("index", [302, 378, 740, 1091, 1363])
def test_fuzz_seed46_fallbacks(target, index):
    _assert_matches(graphs.generate(46, index).source(), target)


@pytest.mark.parametrize("expr", ["torch.where(a1, a0, a0)", "torch.where(a1, a0, a0.clone())",
                                  "torch.where(a1, 2.0, 2.0) + a0",
                                  "torch.where(a1, a2, torch.floor(a2))"])
def test_where_of_one_value_broadcasts(target, expr):
    inputs = ("a0 = torch.tensor([1.5, -2.0, 3.0])\n"
              "a1 = torch.tensor([[True, False, True], [False, False, True]])\n"
              "a2 = torch.tensor([4, -5, 6])")
    _assert_matches(_case(inputs, f"return ({expr},)"), target)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("number", ["True", "-1", "2.5"])
def test_trunc_division_of_a_number(target, dtype, number):
    inputs = f"a0 = torch.tensor([-0.59, 1.74, -0.618, 3.0, 0.3, -7.5]).to(torch.{dtype})"
    body = (f"return (torch.div({number}, a0, rounding_mode='trunc'), "
            f"torch.div({number}, a0, rounding_mode='floor'))")
    _assert_matches(_case(inputs, body, exact=(True, True)), target)


# seed 47: 258, `fmod(uint8_t, True)` (int16 by a bool, in eager_semantics' widened uint8
# arithmetic) fell back as int64 by a number did; 751, `where(c, x[-2:3], x)`, a slice to the
# same shape that torch-mlir folds away, then the `where` of one value; 1395 (triton), `isinf`
# of an integer cast as the literal `(False).to(tl.int1)` (passes/triton_writer._cast).
@pytest.mark.parametrize("index", [258, 751, 1395])
def test_fuzz_seed47_fallbacks(target, index):
    _assert_matches(graphs.generate(47, index).source(), target)
