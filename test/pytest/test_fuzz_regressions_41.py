"""The final 10,000-graph run's findings (seed 41, GPU host toolchain: torch 2.11, triton 3.6;
fuzz9h, issue 9): one test each, named after the bug. Same comparator and helpers as
test_fuzz_regressions.py.

Eleven triton-target graphs gave zeros of the wrong sign under triton 3.6 and passed under 3.9.
Not the interpreter's fault: triton 3.6's frontend (language/semantic.py, shared by the compiler
and the interpreter) builds every zero constant as the null value, so the literal `-0.0` is
+0.0 (`scalar_constant`: `if value == 0: get_null_value`), and a float's unary minus is
`0 - x` (`minus`), +0.0 for x = +0.0. Triton 3.9 keeps -0.0 and negates with an fneg. For
sm_90, triton 3.6 compiles `tl.where(c, -0.0, 1.0)` to `selp.f32 0f00000000, ...` and `-x` to
`sub.f32 0f00000000, x`: a GPU gives the same wrong zeros. ember's Triton now spells -0.0
`_ember_neg_zero()` (the bits, through an int32 constant) and negation `x * -1.0` (exact;
an xor of the sign bit in PTX with both versions)."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz import graphs  # noqa: E402
from test_fuzz_regressions import _assert_matches, _case  # noqa: E402


# seed 41: floor division (69, 1265, 2766, 2865, 3870, 4202, 6266; 108 through atan2 of the
# zero, 22 relative), trunc division and trunc (858, 5055, 7561: the negation of its zero) and
# round (2210: `neg(round(x))`). Triton target, triton 3.6: a zero of the other sign (an exact
# output: the comparator checks the sign of zeros). Floor division's zero is torch's
# `copysign(0, a / b)`, printed `tl.where(neg, -0.0, 0.0)`.
SEED41 = [69, 108, 858, 1265, 2210, 2766, 2865, 3870, 4202, 5055, 6266, 7561]


@pytest.mark.parametrize("index", SEED41)
def test_fuzz_seed41_signed_zero_of_division_and_round(target, index):
    # (108's atan2 ran eagerly on the Triton target until atan2 got a Triton spelling)
    r = _assert_matches(graphs.generate(41, index).source(), target, allow_fallback=True)
    assert r["fallback"] == []
    assert r["accepted"] == [], r["reason"]


ZEROS = "a0 = torch.tensor([-0.0, 0.0, -0.3, 0.3, -1e-30, 1e-30, -2.5, 2.5, -7.0, 7.0])"


@pytest.mark.parametrize("body", [
    "return (-(a0 * 1.0),)",                                  # negation of both zeros
    "return (torch.round(a0).neg(), torch.trunc(a0).neg())",
    "return (a0 // 1.5, a0 // -1.5, a0 // a0.flip(0))",       # copysign(0, a / b)
    "return (torch.div(a0, -2.0, rounding_mode='trunc'), torch.div(a0, 3.0, rounding_mode='floor'))",
    "return (torch.where(a0 > 0, a0, -0.0), a0 + -0.0)",      # a -0.0 constant
], ids=["neg", "neg_round_trunc", "floordiv", "div_rounding", "neg_zero_constant"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_signed_zeros_of_negation_and_constants(target, body, dtype):
    r = _assert_matches(_case(f"{ZEROS}.to(torch.{dtype})", body, exact=(True, True, True)), target)
    assert r["accepted"] == [], r["reason"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_signed_zeros_of_odd_powers(target, dtype):
    """(-0.0) ** 5 is -0.0 (and ** -5 -inf), as an underflowing negative base's: the prelude's
    pow negated its magnitude with `-mag`, +0.0 under triton 3.6 (values where ember's pow,
    exp(b * log|a|), is exact: its f64 pow is not correctly rounded elsewhere)."""
    inputs = f"a0 = torch.tensor([-0.0, 0.0, -1.0, 1.0, -1e-200, 1e-200]).to(torch.{dtype})"
    body = "return (torch.pow(a0, 5.0), torch.pow(a0, -5.0), torch.pow(a0, 7.0))"
    r = _assert_matches(_case(inputs, body, exact=(True, True, True)), target)
    assert r["accepted"] == [], r["reason"]


def test_negation_and_neg_zero_compile_to_sign_bits_for_sm90(exported_sources):
    """The PTX of such a graph's kernel (sm_90, no GPU needed): the negation is a flip of the
    sign bit, never a subtraction from zero, and the -0.0 constant is there (triton 3.6 printed
    `-x` as `sub.f32 0f00000000, x` and `-0.0` as 0f00000000)."""
    import triton_aot
    sources = exported_sources
    torch._dynamo.reset()
    x = torch.tensor([-0.0, 0.0, -0.5, 0.5])
    torch.compile(lambda a: (-(a * 2.0), torch.where(a > 0, a, -0.0)), backend="ember",
                  options={"target": "triton"})(x)
    assert sources
    ptx = []
    for text in dict.fromkeys(sources):
        res = triton_aot.compile_isolated(text, targets=(("cuda", 90, 32),), asm="ptx")
        for per in res.values():
            assert per["cuda:90"].lstrip().startswith("//"), per["cuda:90"][:2000]
            ptx.append(per["cuda:90"])
    text = "\n".join(ptx)
    assert "sub.f32" not in text, text
    assert "0f80000000" in text or "-2147483648" in text, text


# seed 43 index 377, both targets (both triton versions): `where(x >= -2.5, x[:3:2], i) | x`
# with x a permuted (2, 1, 1) int8 of strides (1, 1, 2) and i a (2, 1) int64: eager's result
# (2, 2, 1) has strides (1, 2, 4), ember's came back (2, 1, 1). The fake tensor of `x >= -2.5`
# is (1, 1, 1) where eager's keeps (1, 1, 2): unobservable there (size-1 dims), but the
# `where` broadcasting it orders its dims by it. decomp_layouts.EagerLayouts now probes the
# pointwise producers of an output with eager's layouts of their own operands, size-1 strides
# included.
def test_fuzz_seed43_index377_size_one_strides_decide_a_later_layout(target):
    r = _assert_matches(graphs.generate(43, 377).source(), target)
    assert r["accepted"] == [], r["reason"]


def test_layout_follows_size_one_strides_through_a_chain(target):
    inputs = ("a0 = torch.tensor([3, -1], dtype=torch.int8).reshape(1, 2, 1).permute(1, 2, 0)\n"
              "a1 = torch.tensor([5, 7], dtype=torch.int64).reshape(2, 1)")
    body = ("v0 = a0 >= 0\n"
            "v1 = torch.where(v0, a0, a1)\n"
            "return (v1 * 3, v1 + a0, (v0 & (a1 > 6)).float())")
    r = _assert_matches(_case(inputs, body, exact=(True, True, True)), target)
    assert r["accepted"] == [], r["reason"]
