"""What the fuzzer found from seed 50 on (2026-11-28). Same comparator and helpers as
test_fuzz_regressions.py."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz import compare  # noqa: E402
from fuzz.graphs import load  # noqa: E402
from test_fuzz_regressions import _assert_matches, _case  # noqa: E402


# seed 50 index 287: `(uint8 % float32) > bf16` differed in one element: 4 % 2**-128 is 0
# (IEEE fmod: 4 is a multiple of 2**-128), ember's value on both targets and eager's in its scalar
# CPU loop and on CUDA; eager's vectorized CPU loop gives NaN wherever a finite quotient
# overflows the dtype. compare.py accepts exactly that as the named quirk (the first test fails
# once torch changes: then drop the rule).
def test_eager_fmod_nan_where_the_quotient_overflows():
    # (64 elements: two vectors of 16 lanes or more; ATen's loop runs a tail through the scalar one)
    a, b = torch.full((64,), 4.0), torch.full((64,), 2.0 ** -128)
    for op in (torch.fmod, torch.remainder):
        assert torch.isnan(op(a, b)).all(), op            # vectorized loop
        assert op(a[:1], b[:1]).item() == 0.0, op          # scalar loop
    assert torch.fmod(torch.full((64,), 1e10), torch.full((64,), 1e-28)).isfinite().all()


@pytest.mark.parametrize("expr,name", [
    ("a0 % a1", "cpu_remainder_quotient_overflow_nan"),
    ("torch.fmod(a0, a1)", "cpu_fmod_quotient_overflow_nan"),
    ("-4.0 % a1", "cpu_rremainder_quotient_overflow_nan"),
])
def test_fuzz_seed50_index287_fmod_quotient_overflow(target, expr, name):
    inputs = ("a0 = torch.tensor([4, 3, 250, 7, 1, 9, 2, 5], dtype=torch.uint8).repeat(8)\n"
              "a1 = torch.tensor([2.0 ** -128, 0.75, -2.5e-38, 3.0, 1e-30, -1.5, 0.0, 2.0])"
              ".repeat(8)\n"
              "a2 = torch.tensor([0.0, 0.5, -1.0, 1.0, 0.0, -0.5, 0.0, 1.0], "
              "dtype=torch.bfloat16).repeat(8)")
    src = _case(inputs, f"v0 = {expr}\nreturn (v0 > a2, v0 * 1)", exact=(True, False))
    r = _assert_matches(src, target)
    assert r["reason"].startswith(f"eager quirk {name}"), r["reason"]
    # narrowly: outputs the quirk does not explain are no pass
    ns = load(src)
    refs = [t.clone() for t in ns["fn"](*ns["make_inputs"]())]
    wrong = [refs[0].logical_not(), refs[1]]
    assert compare._eager_quirk(src, ns["fn"], ns["make_inputs"], wrong, ns["make_inputs"](),
                                [True, False], target) is None


def test_fuzz_seed50_index287(target):
    from fuzz import graphs
    r = _assert_matches(graphs.generate(50, 287).source(), target)
    assert r["reason"].startswith("eager quirk cpu_remainder_quotient_overflow_nan"), r["reason"]


# seed 51 index 618: `1e-3 // x.argmin()` (an argmin of 0) fell back on the triton target: the
# division of two literals was left as `_ember_div(0.001, 0.0)`, which the interpreter ran as
# Python's `/` (ZeroDivisionError) and Triton rejects (div_rn wants tensors). Literals now fold
# with IEEE results (inf, NaN) for every operand, non-finite ones included.
def test_fuzz_seed51_index618_literal_division_by_zero(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(51, 618).source(), target)


@pytest.mark.parametrize("body", [
    "z = a1.argmin()\nreturn (1e-3 // z, -2.5 / z + a0, a0 * 0.0 + 7.5 % z)",
    "z = a1.argmin()\nreturn (torch.sqrt(z - 1.0) + a0, torch.log(z * 1.0) + a0, -z / 0.0 + a0)",
    "z = a1.argmin() * float('inf')\nreturn (z + a0, z * 0.0 + a0, torch.fmod(z, 2.0) + a0)",
])
def test_literal_math_folds_to_ieee_values(target, body):
    # (the argmin of a 0-dim tensor is the literal 0)
    _assert_matches(_case("a0 = torch.tensor([0.5, 3.0, 2.0])\na1 = torch.tensor(2.0)", body,
                          exact=(True, True, True)), target)


# seed 52 index 765: `torch.pow(0, x)` fell back on the triton target: the literal base 0.0
# reached the prelude's _ember_pow, whose `1.0 / a` (the sign of a zero base) was Python's
# division of the literal under the interpreter (ZeroDivisionError) and at compile time on a
# GPU. A literal base is now a block of the exponent's shape; two literals fold.
def test_fuzz_seed52_index765_pow_of_a_literal_zero(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(52, 765).source(), target)


def test_pow_of_literal_bases(target):
    body = ("return (torch.pow(0, a0), torch.pow(-0.0, a0), torch.pow(2.5, a0), "
            "torch.pow(-2.0, a1), a0 * 0 + torch.pow(torch.tensor(0.0), -1.5))")
    _assert_matches(_case("a0 = torch.tensor([-1.0, 0.0, 0.5, 3.0, float('inf'), float('nan')])\n"
                          "a1 = torch.tensor([-3, 0, 2, 5])", body, exact=(True,) * 5), target)


# Found while making integer pow compile (2026-11-28): a select of two literals was typed by
# Triton from the literals (int32 for Python ints, f32 for floats), so what followed computed
# in that type: int64 `where(t > 0, 2000000000, 1) * 2` wrapped at 32 bits (-294967295 where
# eager gives 4000000001), int8 compared 200 > 0 where eager's wrapped -56 is not, a float64
# where of 0.1 took f32's 0.1. The triton target only (the C++ types its constants).
@pytest.mark.parametrize("dtype,body", [
    ("int64", "return (torch.where(a0 > 0, 2000000000, 1) * 2 + a0,)"),
    ("int64", "return (torch.where(a0 > 0, torch.full_like(a0, 2000000000), "
              "torch.ones_like(a0)) * 3,)"),
    ("int8", "return ((torch.where(a0 > 0, 100, 1).to(torch.int8) * 2 > 0), "
             "torch.where(a0 > 0, 100, 1).to(torch.int8) * 2 // 3)"),
    ("float64", "return (torch.where(a0 > 0, 0.1, 0.2) * 3 - a0,)"),
])
def test_select_of_two_literals_has_the_result_type(target, dtype, body):
    inputs = f"a0 = torch.tensor([0, 1, -2, 5], dtype=torch.{dtype})"
    _assert_matches(_case(inputs, body, exact=(True, True)), target)


# Integer base to an integer tensor power (torch.pow(3, int64 tensor)) ran eagerly: torch-mlir
# has no integer pow. eager_semantics._int_pow_of_number: squarings over the exponent's bits,
# wrapping as eager's powi; negative exponents, bases 0 / 1 / -1, the number wrapped to the type.
# Its 63 squarings also made ember-lower-to-cpp's tree walk exponential (cpp_row_values).
@pytest.mark.parametrize("dtype,exps", [
    ("int64", "[-3, -2, -1, 0, 1, 2, 3, 5, 63, 64, 100]"),
    ("int8", "[-1, 0, 1, 2, 7, 8, 100, 127]"),
    ("uint8", "[0, 1, 2, 7, 8, 200, 255]"),
])
@pytest.mark.parametrize("base", [0, 1, -1, 2, 3, 10, 300])
def test_integer_pow_of_a_number(target, dtype, exps, base):
    inputs = f"a0 = torch.tensor({exps}, dtype=torch.{dtype})"
    _assert_matches(_case(inputs, f"return (torch.pow({base}, a0), {base} ** a0[::2])",
                          exact=(True, True)), target)


# A uint8 full_like (ones_like, zeros_like, 1 ** x) ran eagerly: torch-mlir folds it into a
# literal typed si8 that it rejects for the ui8 result. eager_semantics._full_like_uint8 makes
# it a full of a new tensor (folded by the host); a transposed input keeps eager's strides.
@pytest.mark.parametrize("body", [
    "return (torch.ones_like(a0),)",
    "return (torch.full_like(a0, 7) + a0, torch.zeros_like(a0) * a0)",
    "return (torch.ones_like(a0[::2]), torch.full_like(a0, 200, dtype=torch.uint8) - a0)",
    "return (torch.ones_like(a0.reshape(2, 3).t()) + a0.reshape(2, 3).t(),)",
    "return (torch.ones_like(a0.reshape(2, 3).t()) * 2, torch.zeros_like(a0.reshape(3, 2).t()))",
])
def test_uint8_full_like_compiles(target, body):
    inputs = "a0 = torch.tensor([0, 1, 2, 7, 200, 255], dtype=torch.uint8)"
    _assert_matches(_case(inputs, body, exact=(True, True)), target)


# atan2 with a literal operand (a mean over an empty dim, NaN, folded to a literal) failed at run
# time in Triton ('float' object has no attribute 'handle': the helper broadcasts two blocks)
# and the graph ran eagerly: the literal is made a block of the other operand's shape, as for
# the float remainder.
def test_atan2_of_a_literal_compiles(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(57, 844).source(), target)


@pytest.mark.parametrize("body", [
    "return (torch.atan2(torch.full_like(a0, -0.0), a0), torch.atan2(a0, torch.full_like(a0, 2.0)))",
    "return (torch.atan2(a0.new_zeros(()) - 0.0, a0),)",
])
def test_atan2_literal_operands(target, body):
    inputs = "a0 = torch.tensor([-1.0, -0.0, 0.0, 2.5, float('nan'), -float('inf')])"
    _assert_matches(_case(inputs, body, exact=(True, True)), target)


# A concat read inside an unrolled window reduction (`any` over a cat of a slice and the input):
# the piece's guard is a Python bool there (the window index is a constexpr), and the
# interpreter types `xmask & True` int32: "mask has unsupported dtype", the graph ran eagerly.
def test_window_guard_mask_is_a_mask(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(59, 1030).source(), target)


# `bool_tensor - True` was computed where eager refuses it ("Subtraction ... with two bool
# tensors"): eager_rejects' controls kept the Python bool (a float32 tensor minus True is
# refused too) and the meta probe of two bool tensors failed (no verdict). A control with
# float32 tensors and the bool read as an int, and controls on the meta device, judge it.
def test_bool_minus_true_raises_as_eager(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(60, 1200).source(), target, allow_fallback=True)


# Two logsumexps over the same rows, the second's max reached while the first's sum was being
# built: the max joined the first sum's loop (it reads no reduction), but the column values it
# shares with that sum had been bound after the loop (the sum is built later), so the Triton
# kernel read them before their definition (UnboundLocalError 't25'; the graph ran eagerly).
# Such values are built again before the loop it joins (triton_writer._forget_after).
def test_reduction_joining_a_loop_rebuilds_what_lies_after_it(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(61, 982).source(), target)


# A cat of a uint8 comparison of a permuted (1, 5, 1, 5) (strides (5, 1, 25, 5)) and a broadcast
# row: eager's comparison keeps (5, 1, 25, 5), the graph's value (Dynamo traced it with
# symbolic sizes) is (25, 1, 25, 5), and cat suggests its memory format from those size-1
# strides: channels-last in the graph, contiguous in eager, and ember handed out the graph's.
# EagerLayouts now probes a cat as it probes pointwise ops.
def test_cat_keeps_eager_memory_format_over_size_one_strides(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(61, 1236).source(), target)


# An int8 amax squared inside the kernel that reduces it (`where(a0 > 0, a0.amax() ** 2, f16)`):
# Triton's tl.max widens int8 to int32, and so did the Python-int identity of the masked lanes,
# so the square was 16129 where eager's int8 wraps to 1 (a wrong answer, triton target only).
# The identity is an int8 and the reduction's result is narrowed back.
def test_narrow_int_reduction_wraps_as_eager(target):
    from fuzz import graphs
    _assert_matches(graphs.generate(63, 215).source(), target)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16])
def test_narrow_int_amax_used_in_its_kernel(target, dtype):
    inputs = (f"a0 = (torch.arange(3 * 700) % 251 - 120).to({dtype}).reshape(3, 700)\n"
              f"a1 = torch.tensor([1, -1, 2], dtype={dtype})")
    body = ("m = a0.amax(1)\n"
            "return (m * m + a1, a0.amin(1) * 3 - a1, (a0 - a0.amax(1, keepdim=True)) * 5)")
    _assert_matches(_case(inputs, body, exact=(True, True, True)), target)
