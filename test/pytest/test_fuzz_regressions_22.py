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
from fuzz.graphs import load  # noqa: E402
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


# seed 22 index 424 (and 894, 1001): `bf16_t - True` raises in eager ("Subtraction, the `-`
# operator, with a bool tensor is not supported"), whatever the tensor's dtype: the probe's
# controls changed the tensor dtypes only, so the refusal was taken for a shape problem. And an
# op a decomposition hides was never probed: `gelu` and `log_softmax` of int64 (eager: "not
# implemented for 'Long'") were computed. eager_rejects.guard judges the op before it is
# decomposed (in a thread of its own, outside AOTAutograd's tracing modes) and keeps it whole.
REJECTED_22 = {
    "sub_true": ("torch.sqrt(a0)[0:] - True", "bfloat16"),
    # seed 23 index 556: a float number | an (empty) int64 tensor ("bitwise_or_cpu" not
    # implemented for 'Float'): the float number is an argument type too
    "or_float_number_empty": ("-2.5 | a0[:0]", "int64"),
    "rsub_true": ("True - a0", "float32"),
    "gelu_int": ("torch.nn.functional.gelu(a0)", "int64"),
    "log_softmax_int": ("a0.log_softmax(-1)", "int64"),
}


@pytest.mark.filterwarnings("ignore:ember.*eager rejects:UserWarning")
@pytest.mark.parametrize("case", sorted(REJECTED_22))
def test_eager_rejects_before_decomposition(target, case):
    import ember
    expr, dtype = REJECTED_22[case]
    src = _case(f"a0 = torch.tensor([1.0, 2.0, 4.0]).to(torch.{dtype})",
                f"v0 = a0.flip(0)\nreturn ({expr}, v0)", exact=(True, True))
    ns = load(src)
    with pytest.raises(Exception) as ref:
        ns["fn"](*ns["make_inputs"]())
    ember.clear_reports()
    compiled = torch.compile(ns["fn"], backend="ember", options={"target": target})
    with pytest.raises(Exception) as got:
        compiled(*ns["make_inputs"]())
    assert type(got.value) is type(ref.value)
    assert str(got.value) == str(ref.value)
    assert "eager rejects" in ember.last_reports()[0]["error"]


# The guard keeps every decomposition where eager accepts the op: gelu of float32 and
# `x - 1` (an int, not a bool) are still compiled, no eager fallback.
def test_eager_rejects_guard_keeps_decompositions(target):
    src = _case("a0 = torch.tensor([1.0, -2.0, 4.0])",
                "return (torch.nn.functional.gelu(a0) - 1, a0.log_softmax(-1))",
                exact=(False, False))
    _no_fallback(_assert_matches(src, target))


# seed 22 index 794: eager's CPU gelu of float32 +inf is NaN (its vectorized loop), where the
# formula gives +inf, as ember does. compare.py accepts this one named quirk, and only where it
# explains the whole difference; the first assertion fails once torch changes (then drop it).
def test_eager_quirk_gelu_inf_is_nan(target):
    from fuzz import compare
    inf = float("inf")
    # the vectorized loop (two elements or more) gives NaN, the scalar one (one element) +inf
    assert torch.nn.functional.gelu(torch.tensor([inf])).item() == inf
    assert torch.isnan(torch.nn.functional.gelu(torch.tensor([inf, 1.0, 2.0, 3.0]))[0])
    src = _case("a0 = torch.tensor([-1.7, inf, -0.6, 0.38])\n"
                "a1 = torch.tensor([True, True, False, True])",
                "v0 = torch.nn.functional.gelu(a0)\nreturn (torch.where(a1, v0, a1),)",
                exact=(False,))
    r = _assert_matches(src, target)
    assert r["reason"].startswith("eager quirk cpu_gelu_inf_nan"), r["reason"]
    # narrowly: outputs the quirk does not explain are no pass
    ns = load(src)
    wrong = [torch.tensor([-0.0757, 7.0, 0.0, 0.2470])]
    assert compare._eager_quirk(src, ns["fn"], ns["make_inputs"], wrong, ns["make_inputs"](),
                                [False], target) is None


# seed 22 indices 639 and 724: a decomposed pointwise op took the layout of its last `where`'s
# condition, not eager's: float `a // b` (after `fmax(a, b)`; with a contiguous a and a
# permuted b) came back laid out as b (eager: as a). decomp_layouts.keep_layout gives a
# decomposition's results the layout eager's op gives (probed on small CPU tensors: the meta
# kernel of floor_divide is laid out as b, unlike eager's).
LAYOUTS_22 = {
    "fmax_floor_divide": ("a0 = torch.arange(50.0).reshape(5, 5, 2, 1).permute(0, 2, 1, 3) - 24\n"
             "a1 = torch.arange(200).reshape(4, 2, 5, 5).permute(3, 1, 2, 0) - 100",
             "v0 = torch.fmax(a0, a1) // a1\nreturn (v0, torch.clamp(v0, -1, 1).select(0, -2))"),
    "floor_divide": ("a0 = torch.arange(27.0).reshape(3, 3, 3) - 13\n"
                     "a1 = (torch.arange(27.0).reshape(3, 3, 3).permute(1, 2, 0) - 12.5)"
                     ".to(torch.float16)",
                     "return (a0 // a1, torch.exp(a0 // a1))"),
}


@pytest.mark.parametrize("case", sorted(LAYOUTS_22))
def test_decomposed_pointwise_keeps_eager_layout(target, case):
    inputs, body = LAYOUTS_22[case]
    _no_fallback(_assert_matches(_case(inputs, body, exact=(True, False)), target))


# seed 22 index 729: eager's CPU prod of f16 rounds each partial product to f16 (60000 * -1.24
# is -inf, though the whole product is finite); the C++ kernel multiplied in f32. On the cpu
# target a bf16/f16 prod is a library call (eager's kernel, bit for bit). The triton target has
# eager CUDA's f32 accumulation: compare.py accepts that as the named quirk
# cuda_prod_f32_accumulation, where it explains the whole difference (the first assertion
# pins eager's CPU behaviour).
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_prod_cpu_rounds_each_product(target, dtype):
    import ember
    x = torch.tensor([[60000.0, -1.7490234375], [-1.2421875, 3.796875],
                      [1.52587890625e-05, 1.0]]).to(getattr(torch, dtype))
    if dtype == "float16":
        assert x.prod(0)[0].item() == float("-inf")
    src = _case(f"a0 = torch.tensor([[60000.0, -1.7490234375], [-1.2421875, 3.796875], "
                f"[1.52587890625e-05, 1.0]]).to(torch.{dtype})\n"
                f"a1 = torch.tensor([0, 0, 0])",
                "return (torch.index_select(a0.prod(-2, keepdim=True), 0, a1), a0.prod())",
                exact=(False, False))
    r = _assert_matches(src, target)
    if target == "cpu":
        calls = [c for rep in ember.last_reports() for c in rep.get("library_calls") or []]
        assert "aten.prod.dim_int" in calls and "aten.prod.default" in calls, calls
    elif dtype == "float16":
        assert r["reason"].startswith("eager quirk cuda_prod_f32_accumulation"), r["reason"]


# seed 22: the triton target's int64 amax/amin took -2**62 / 2**62 as the identity of masked
# lanes, so a row of INT64_MIN had the amax -2**62 (and a row of INT64_MAX the amin 2**62);
# triton_combiners' `identity` now gives int64's own extremes.
@pytest.mark.parametrize("expr", ["a0.amax(-1)", "a0.amin(-1)", "a0.amax()", "a0.max(-1)[0]",
                                  "a1.amin(0)"])
def test_int64_max_min_identity(target, expr):
    src = _case("a0 = torch.full((3, 2), -9223372036854775808)\n"
                "a1 = torch.full((3, 5), 9223372036854775807)", f"return ({expr},)")
    _no_fallback(_assert_matches(src, target))


# seed 22: the triton target's `round` (math.roundeven as floor(x + 0.5) with a half-way
# test) lost the sign of a zero (round(-0.4) is -0.0) and rounded the sum first
# (round(0.49999997) gave 1, round(2**23 + 1) gave 2**23 + 2); triton_lang now rounds from
# floor(x) and the exact x - floor(x), half to even, a zero with x's sign.
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_round_half_even_and_sign_of_zero(target, dtype):
    src = _case(f"a0 = torch.tensor([-0.4, -0.5, 0.5, 1.5, 2.5, -2.5, -0.0, 0.0, -1.5, "
                f"0.49999997, -0.6, 8388609.0, -8388609.0, 1e30, -inf, nan, 3.5, -3.5])"
                f".to(torch.{dtype})", "return (torch.round(a0),)")
    _no_fallback(_assert_matches(src, target))
    # the comparator takes -0.0 == 0.0: the sign is checked here
    ns = load(src)
    ref = ns["fn"](*ns["make_inputs"]())[0]
    torch._dynamo.reset()
    out = torch.compile(ns["fn"], backend="ember", options={"target": target})(
        *ns["make_inputs"]())[0]
    assert torch.equal(torch.signbit(out), torch.signbit(ref))


# seed 22 index 197: `1 / gelu(x)` of float32 with x = -3.26: eager's CPU gelu is 1.1e-4
# (relative) from the exact value there (1 + erf(x / sqrt 2) cancels), ember's 7e-6; the
# reciprocal made that the whole output's error. compare.py accepts it as the named quirk
# cpu_gelu_f32_tail_error, where eager with gelu computed in float64 explains the difference.
def test_eager_quirk_gelu_f32_tail_error(target):
    x = torch.tensor([-3.261227607727051, 1.0, 2.0])
    exact = torch.nn.functional.gelu(x.double())
    eager_err = ((torch.nn.functional.gelu(x).double() - exact) / exact).abs()[0].item()
    assert eager_err > 5e-5          # eager's own error; fails once torch's gelu is exact here
    src = _case("a0 = torch.tensor([-3.261227607727051, 2.762643337249756, -1.746936321258545,"
                " 4.329131603240967])",
                "return (torch.reciprocal(torch.nn.functional.gelu(a0)),)", exact=(False,))
    r = _assert_matches(src, target)
    assert r["reason"].startswith("eager quirk cpu_gelu_f32_tail_error"), r["reason"]


# seed 23 index 3: the triton target's pow gave NaN for (-inf) ** -0.486 (eager: 0; a negative
# base to a non-integer power is NaN only when finite), and 1 ** nan, (-1) ** inf were NaN
# (C's pow: 1).
def test_pow_special_values(target):
    vals = "[-inf, inf, nan, -0.0, 0.0, -1.0, 1.0, -0.5, 0.5, -2.0, 2.0, -2.5, 1e30]"
    src = _case(f"a0 = torch.tensor({vals}).repeat_interleave(13)\n"
                f"a1 = torch.tensor({vals}).repeat(13)",
                "return (torch.pow(a0, a1), torch.pow(a0.half(), a1.bfloat16()))",
                exact=(False, False))     # NaN and infinity positions are compared exactly
    _no_fallback(_assert_matches(src, target))


# The special cases above, with a scalar exponent: under the Triton interpreter a flag from a
# scalar comparison next to a block's (`block & scalar`) is rejected by NumPy's bitwise_and
# unless each is normalised with `!= 0` (test_triton_aot's pointwise graph found it).
def test_pow_special_values_scalar_exponent(target):
    vals = "[-inf, inf, nan, -0.0, 0.0, -1.0, 1.0, -0.5, 0.5, -2.0, 2.0, -2.5, 1e30]"
    for e in ("1.5", "-0.49", "float('inf')", "2.0", "float('nan')"):
        src = _case(f"a0 = torch.tensor({vals})", f"return (torch.pow(a0, {e}),)", exact=(False,))
        _no_fallback(_assert_matches(src, target))


# seed 25 index 429: `-1 // uint8_t` divided -1 where eager divides 255 (a Python int operand is
# wrapped to the uint8 result type first); 300, 256 and -200 as well.
def test_uint8_division_by_a_python_int_wraps_it(target):
    src = _case("a0 = torch.tensor([1, 8, 200, 3, 255, 128], dtype=torch.uint8)",
                "return (-1 // a0, 300 // a0, torch.remainder(-200, a0), a0 // -1, 256 + 0 * a0)",
                exact=(True, True, True, True, True))
    _no_fallback(_assert_matches(src, target))


# seed 25 index 1625: bf16 `rsqrt(div(a0, clamp_min(a0.squeeze(), 0), rounding_mode='trunc'))`
# gave +inf where eager gives -inf: -1.2e-38 / inf and -0.0 / 0.68 truncate to -0.0, and
# torch-mlir's trunc, sign(x) * floor(|x|), made it +0.0 (sign(-0.0) is 0). eager_semantics
# decomposes trunc as ceil / floor from each side. The comparator takes -0.0 == 0.0: rsqrt (and
# the signbit check) turn the sign into a value.
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_trunc_keeps_the_sign_of_zero(target, dtype):
    src = _case(f"a0 = torch.tensor([-0.0, -1.1754943508222875e-38, -0.5, 0.0, 0.5, -2.5, 2.5, "
                f"-inf, inf, nan, 1e30, -0.0]).to(torch.{dtype})\n"
                f"a1 = torch.tensor([0.68, inf, 3.0, 1.0, 1.0, 1.0, -1.0, 2.0, 1.0, 1.0, 1.0, "
                f"-2.0]).to(torch.{dtype})",
                "v0 = torch.div(a0, a1, rounding_mode='trunc')\n"
                "return (torch.rsqrt(v0), torch.trunc(a0), torch.rsqrt(torch.trunc(a0)), v0)",
                exact=(False, True, False, True))
    _no_fallback(_assert_matches(src, target))
    ns = load(src)
    refs = ns["fn"](*ns["make_inputs"]())
    torch._dynamo.reset()
    outs = torch.compile(ns["fn"], backend="ember", options={"target": target})(
        *ns["make_inputs"]())
    for out, ref in zip(outs, refs):     # a NaN's sign bit means nothing
        assert torch.equal(torch.signbit(out) & ~ref.isnan(), torch.signbit(ref) & ~ref.isnan())


def test_fuzz_seed25_index1625_trunc_division_of_zero(target):
    from fuzz.graphs import generate
    _no_fallback(_assert_matches(generate(25, 1625).source(), target))


# Known from seed 25's run: bf16/f16 floor division (`//`, div rounding_mode='floor') by a
# tensor: eager's CPU kernel rounds every step of c10::div_floor_floating to the 16-bit type
# (a - fmod(a, b), its quotient by b, ...), in its vectorized and its scalar loop alike; ember
# computed the formula in f32 and rounded once (bf16 -144 // 0.5586: eager -260, ember -258; 2%
# of random bf16 pairs differed). A one-value divisor (a number, one element, stride 0) is read
# at f32 and the formula taken in f32, rounded once, as before. No bf16 subnormals: the Triton
# interpreter loads them wrongly (test/fuzz/graphs.py leaves them out too).
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_floor_division_rounds_each_step(target, dtype):
    rand = ("(torch.randn(512, generator=torch.Generator().manual_seed({s})) * 2.0 ** torch.randint("
            "{lo}, {hi}, (512,), generator=torch.Generator().manual_seed({s})).float())")
    special = "[-144.0, -39.125, 0.0, -0.0, inf, -inf, nan, 1e4, 3.0, -3.0, 0.5, 2.5]"
    inputs = (f"a0 = torch.cat([{rand.format(s=0, lo=-8, hi=8)}, torch.tensor({special})"
              f".repeat_interleave(12)]).to(torch.{dtype})\n"
              f"a1 = torch.cat([{rand.format(s=1, lo=-6, hi=4)}, torch.tensor([0.55859375, "
              f"0.01959228515625, 0.0, -0.0, inf, -inf, nan, 1e-3, 3.0, -3.0, 0.5, -2.5])"
              f".repeat(12)]).to(torch.{dtype})")
    body = ("return (a0 // a1, torch.div(a0[::3], a1[::3], rounding_mode='floor'), "
            "a0 // a1[3:4], a0 // a1[3:4].expand(656), a0 // 0.3, 2.7 // a1)")
    _no_fallback(_assert_matches(_case(inputs, body, exact=(True,) * 6), target))


# seed 26 index 273: `index_select(uint8[1], 0, tensor([-2]))` returned the element where eager
# raises IndexError: torch-mlir folds index_select of a size-1 dim by one index to its source,
# and the bounds check with it. In range, values and layouts as eager's (a size-1 dim inside).
@pytest.mark.parametrize("dim,index", [(0, "[-2]"), (0, "[-1]"), (0, "[1]"), (0, "-1"),
                                       (1, "[3]"), (1, "[0]"), (0, "[0]"), (0, "0")])
def test_index_select_of_a_size_one_dim_checks_the_index(target, dim, index):
    perm = (0, 2, 1) if dim == 0 else (1, 0, 2)       # size 1 at `dim`, not contiguous
    inputs = (f"a0 = torch.tensor([[[8.0, -1.5], [2.0, 3.0]]]).permute{perm}\n"
              f"a1 = torch.tensor({index})")
    body = f"return (torch.index_select(a0, {dim}, a1), torch.index_select(a0.to(torch.uint8), " \
           f"{dim}, a1) * 2)"
    _no_fallback(_assert_matches(_case(inputs, body, exact=(True, True)), target))
    ns = load(_case(inputs, body))
    try:
        ns["fn"](*ns["make_inputs"]())
    except Exception as e:           # noqa: BLE001 - eager's error type, not only an error
        torch._dynamo.reset()
        with pytest.raises(type(e)):
            torch.compile(ns["fn"], backend="ember", options={"target": target})(
                *ns["make_inputs"]())


# seed 26 index 1996: `True // int8_t` raised "Subtraction ... with a bool tensor is not
# supported" from ember's integer floor division (the Python bool stayed a bool); eager
# divides 1.
def test_python_bool_floor_divided_by_int_tensor(target):
    src = _case("a0 = torch.tensor([127, 4, -1, 2, -6, 3, 1, -6, -4], dtype=torch.int8)",
                "v0 = True // a0\nreturn (v0 * -1, False // a0, a0 // True)",
                exact=(True, True, True))
    _no_fallback(_assert_matches(src, target))


# seed 27 index 801, cpu target: int64 `(v0 + a0) < a0` with 6 + (2^63 - 2) was False, eager True
# (wrapped): signed overflow is undefined in C++ and g++ folded the compare; the C++ is built
# with -fwrapv now.
def test_int64_overflow_wraps_before_a_compare(target):
    src = _case("a0 = torch.tensor([6, 2, 9223372036854775806], dtype=torch.int64).reshape(3, 1, 1)",
                "v0 = a0.select(0, -3)\nreturn ((v0 + a0) < a0, (a0 * 4) > a0)",
                exact=(True, True))
    _no_fallback(_assert_matches(src, target))


# seed 27 index 906: `clamp(exp(clamp_max(a0, 0.5)), 2, -2)` of an int8 (2, 3, 2, 1) expanded
# from (1, 3, 1, 1) (strides (0, 1, 0, 1)) came back with strides (6, 1, 3, 3), eager's are
# contiguous. decomp_layouts probed eager's int8 -> f32 conversion on a stand-in with strides
# (0, 1, 0, 2): the size-1 dim's stride, tied with dim 1's in the argument, was not tied in the
# probe, and TensorIterator (which compares every dim's stride) then laid the result out as
# channels-last; keep_layout copied ember's contiguous result into that layout.
@pytest.mark.parametrize("body", [
    "v0 = torch.clamp_max(a0, 0.5)\nreturn (torch.clamp(torch.exp(v0), 2, -2),)",
    "return (a0.to(torch.float32), torch.clamp(a0, -2.5, 1.5))",
])
def test_fuzz_seed27_index906_expanded_int8_pointwise_strides(target, body):
    inputs = "a0 = torch.tensor([0, -3, -6], dtype=torch.int8).reshape(1, 3, 1, 1).expand(2, 3, 2, 1)"
    _no_fallback(_assert_matches(_case(inputs, body, exact=(False, True)), target))


def _random_layout(rng, shape, dtype):
    """A tensor of `shape` in a random layout: dims permuted, maybe a gap (sliced), size-1 dims
    with any stride, maybe a dim broadcast."""
    import math
    r = len(shape)
    perm = list(range(r))
    rng.shuffle(perm)
    phys = [shape[p] for p in perm]
    pad = [n + (rng.random() < 0.2) for n in phys]
    t = torch.arange(1, 1 + math.prod(pad)).to(dtype).reshape(pad)
    t = t[tuple(slice(0, n) for n in phys)].permute([perm.index(i) for i in range(r)])
    stride = [rng.choice([0, 1, 2, 3, 5, 12, 100]) if n == 1 and rng.random() < 0.7 else s
              for n, s in zip(shape, t.stride())]
    t = t.as_strided(shape, stride, t.storage_offset())
    if rng.random() < 0.4:
        d = rng.randrange(r)
        t = t.narrow(d, 0, 1).expand(shape)
    return t


# The probe behind seed 27 index 906: decomp_layouts predicts the observable strides of eager's
# result from eager run on small stand-ins; over random layouts (permuted, with gaps, size-1
# dims of any stride, broadcast dims, two dtypes) the prediction is eager's own (the probe before
# this fix missed 5 of 2566 and 8 of 2617 such cases).
def test_layout_probe_predicts_eager_strides():
    import random
    from ember.frontend import decomp_layouts as dl
    aten = torch.ops.aten
    ops = [(aten._to_copy.default, 1, lambda a: ((a[0],), {"dtype": torch.float32})),
           (aten.clamp_max.default, 1, lambda a: ((a[0], 0.5), {})),
           (aten.exp.default, 1, lambda a: ((a[0],), {})),
           (aten.add.Tensor, 2, lambda a: ((a[0], a[1]), {})),
           (aten.maximum.default, 2, lambda a: ((a[0], a[1]), {})),
           (aten.where.self, 3, lambda a: ((a[0] > 0, a[1], a[2]), {}))]

    def seen(shape, stride):
        return tuple(s if n > 1 else None for s, n in zip(stride, shape))
    rng = random.Random(906)
    checked, wrong = 0, []
    for _ in range(1500):
        shape = tuple(rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 4)))
        op, k, make = rng.choice(ops)
        ins = [_random_layout(rng, shape if j == 0 or rng.random() < 0.7 else
                              tuple(n if rng.random() < 0.6 else 1 for n in shape),
                              rng.choice([torch.float32, torch.int8])) for j in range(k)]
        args, kwargs = make(ins)
        ref = op(*args, **kwargs)
        perms = dl._eager_perms(op, args, kwargs)
        if perms is None or ref.numel() == 0:
            continue
        checked += 1
        shape = tuple(ref.shape)
        if seen(shape, dl._strides_of(shape, perms[0])) != seen(shape, ref.stride()):
            wrong.append((op, [(tuple(a.shape), a.stride(), a.dtype) for a in ins],
                          ref.stride(), perms[0]))
    assert checked > 1000
    assert wrong == [], wrong[:4]


# seeds 26 index 1783 and 27 index 602, triton target: an f32 subnormal cast to bf16 came back
# 0.0 (and, stored as a bf16 intermediate and read again, 0.0 in an f32 output). The fault is
# the Triton interpreter's: its `_convert_float` maps every f32 subnormal to a bf16 zero and
# every bf16 subnormal to an f32 zero (this test: fails once triton fixes it, and then the
# interpreter bodies of triton_prelude's `_ember_to_bf16` / `_ember_from_bf16` can go). ember's
# kernels convert by those helpers: under the interpreter by the bits, exactly; compiled for
# sm_90 `cvt.rn.bf16.f32`, which keeps subnormals (test_bf16_conversion_compiles_to_cvt_rn_for_sm90).
def test_triton_interpreter_bf16_subnormal_fault():
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import _convert_float
    f32 = np.array([2.938735877055719e-39, -5.877471754111438e-39, 1.5], dtype=np.float32)
    out = _convert_float(f32, tl.float32, tl.bfloat16, None)
    assert out.tolist() == [0, 0x8000, 0x3FC0]             # eager: 0x0020, 0x8040, 0x3FC0
    assert torch.from_numpy(f32).to(torch.bfloat16).view(torch.int16).tolist() == \
        [0x0020, -0x8000 + 0x0040, 0x3FC0]
    bf16 = np.array([0x0020, 0x8040], dtype=np.uint16)
    assert _convert_float(bf16, tl.bfloat16, tl.float32, None).tolist() == [0, 0x80000000]


SUBNORMAL_BF16 = {
    "seed26_1783": ("a0 = torch.tensor([2.938735877055719e-39, 1.17, -0.707, -1.639]).reshape(1, 4, 1)\n"
                    "a1 = torch.tensor([-1, 0, -1, 0, 0])",
                    "v0 = a0[a1]\nreturn (v0.to(torch.bfloat16), v0 * 2)"),
    "seed27_602": ("a0 = torch.tensor([0.25, -5.877471754111438e-39, 0.18, -0.99, 2.8, 2.88, 0.0])"
                   "[1:].view(1, 3, 2)",
                   "v0 = torch.nn.functional.hardtanh(a0)\nv3 = v0.to(torch.bfloat16)\n"
                   "return (torch.cat([v0, v3], 1), v3)"),
}


@pytest.mark.parametrize("case", sorted(SUBNORMAL_BF16))
def test_fuzz_f32_subnormal_to_bf16(target, case):
    inputs, body = SUBNORMAL_BF16[case]
    r = _assert_matches(_case(inputs, body, exact=(True, True)), target)
    assert r["accepted"] == [], r["reason"]     # bit for bit, under the interpreter too


def test_bf16_conversion_compiles_to_cvt_rn_for_sm90(exported_sources):
    """The kernels of the graphs above, compiled for sm_90 (no GPU needed): every f32 -> bf16
    conversion is `cvt.rn.bf16.f32` (round to nearest even, subnormals kept: no .ftz), every
    bf16 read widens exactly (`cvt.f32.bf16` or a 16-bit shift)."""
    import re
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import triton_aot
    sources = exported_sources
    for case in sorted(SUBNORMAL_BF16):
        ns = load(_case(*SUBNORMAL_BF16[case], exact=(True, True)))
        torch._dynamo.reset()
        torch.compile(ns["fn"], backend="ember", options={"target": "triton",
                                                          "max_group_size": 1})(*ns["make_inputs"]())
    assert sources
    ptx = []
    for text in dict.fromkeys(sources):
        res = triton_aot.compile_isolated(text, targets=(("cuda", 90, 32),), asm="ptx")
        for per in res.values():
            assert per["cuda:90"].lstrip().startswith("//"), per["cuda:90"][:2000]
            ptx.append(per["cuda:90"])
    text = "\n".join(ptx)
    stores = re.findall(r"cvt\.[a-z.]*bf16\.f32", text)
    assert stores and set(stores) == {"cvt.rn.bf16.f32"}, stores
    assert "ftz" not in " ".join(re.findall(r"cvt[^\s]*", text))
    assert "st.global.b16" in text or "st.global.v" in text


# seed 28 index 9, cpu target: `int32_t // int8_t` of [MIN, MAX] by [-1, 0] killed the process
# (SIGFPE). ember's checked kernel saw the zero divisor and the call was redone eagerly on the
# decomposed graph, whose trunc division of MIN by -1 traps in eager's kernel (eager's floor
# division wraps there). A divisor of -1 is now a negation, never a division. In a child
# process (runner.run): a crash is a finding, not the end of the test session.
def test_fuzz_seed28_index9_min_floordiv_minus_one_next_to_zero_divisor(target):
    from fuzz import runner
    [r] = runner.run([(28, 9, target, ("nofuse",))], jobs=1, timeout=300)
    assert r["status"] == "pass", r["reason"]


def test_integer_floordiv_of_min_by_minus_one_wraps(target):
    src = _case("a0 = torch.tensor([-2147483648, 7, -7, 2147483647], dtype=torch.int32)\n"
                "a1 = torch.tensor([-1, 2, -1, -1], dtype=torch.int8)\n"
                "a2 = torch.tensor([-9223372036854775808, 5, -5])",
                "return (a0 // a1, a2 // -1, a2 // a2[1:2].neg().clamp(max=-1), -7 // a1)",
                exact=(True, True, True, True))
    _no_fallback(_assert_matches(src, target))


# The comparator (issue 9): torch.equal and == take -0.0 for 0.0; an exact result must keep
# eager's sign of zero (1 / x, atan2 and copysign tell them apart: seed 25 index 1625's trunc
# gave +0.0 for -0.0, which only the rsqrt after it showed). Inexact results keep their
# tolerance, sign of zero included.
def test_comparator_checks_the_sign_of_exact_zeros():
    from fuzz.compare import value_diff
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        ref = torch.tensor([0.0, -0.0, 1.0, float("nan")], dtype=dtype)
        assert value_diff(ref.clone(), ref, True) is None
        flipped = torch.tensor([-0.0, -0.0, 1.0, float("nan")], dtype=dtype)
        assert "zeros have the other sign" in value_diff(flipped, ref, True)
        assert "zeros have the other sign" in value_diff(ref.abs(), ref, True)
        assert value_diff(flipped, ref, False) is None


# seed 28 index 840: `torch.pow(True, a0)` of a permuted a0 came back permuted (strides
# (1, 5, 5)); eager's pow(number, tensor) is contiguous whatever the tensor's layout (its meta
# function follows the tensor's, which is what the graph said). The exponent is made
# contiguous first (eager_semantics._pow_base_in_dtype).
@pytest.mark.parametrize("base", ["True", "2.0", "nan", "1"])
def test_fuzz_seed28_index840_pow_of_a_number_is_contiguous(target, base):
    inputs = ("a0 = torch.tensor([1.3, -1.66, -0.33, 0.2, -2.07, -inf, 3.05, 4.1, 1.49, 0.0])"
              ".reshape(2, 1, 5).permute(2, 0, 1)\n"
              "a1 = torch.tensor([0.5, -1.5, 2.0, 3.0, 0.0, 1.0], dtype=torch.bfloat16).reshape(2, 3).t()")
    body = f"return (torch.pow({base}, a0), torch.pow({base}, a1), torch.pow(2.1, a1))"
    _no_fallback(_assert_matches(_case(inputs, body, exact=(False, False, False)), target))


# seed 30 index 410: `a0 > a1` of an expanded (5, 3, 3) f16 (strides (0, 1, 0)) and a permuted
# (1, 5, 3, 3) f16 with strides (15, 1, 5, 15) came back contiguous, eager laid out as a1: the
# fake tensor's meta kernel breaks the tie of the size-1 dim's stride otherwise (f32 takes the
# fake fast path, which agrees). A pointwise output's layout is now the probe's (eager run on
# stand-ins, decomp_layouts.eager_layout) where it disagrees with the graph's.
@pytest.mark.parametrize("op", ["a0 > a1", "a0 + a1", "torch.maximum(a0, a1)"])
def test_fuzz_seed30_index410_broadcast_output_strides(target, op):
    inputs = ("a0 = torch.tensor([-1.375, 1.775, -0.757], dtype=torch.float16)"
              ".reshape(1, 3, 1).expand(5, 3, 3)\n"
              "a1 = torch.linspace(-4, 4, 45, dtype=torch.float16)"
              ".reshape(3, 1, 3, 5).permute(1, 3, 2, 0)")
    _assert_matches(_case(inputs, f"v0 = {op}\nreturn (v0, a1, v0)", exact=(True, True, True)),
                    target)


# The probe behind seed 30 index 410: a broadcasting op's stand-ins must broadcast. Each probe
# sized its dims for its own strides (an expanded dim kept its full size, a permuted argument's
# dims were clamped to 2), eager refused them and the layout went unchecked. Over random
# layouts where one operand is expanded along dims of size 3 to 5, every case is predicted now,
# and eager's own layout (before the fix 471 of these 583 cases went unpredicted).
def test_layout_probe_broadcast_operands_agree():
    import random
    from ember.frontend import decomp_layouts as dl
    aten = torch.ops.aten
    ops = [aten.add.Tensor, aten.gt.Tensor, aten.maximum.default, aten.mul.Tensor]

    def seen(shape, stride):
        return tuple(s if n > 1 else None for s, n in zip(stride, shape))
    rng = random.Random(410)
    checked, unpredicted, wrong = 0, 0, []
    for _ in range(600):
        shape = tuple(rng.choice([1, 3, 4, 5]) for _ in range(rng.randint(2, 4)))
        big = [d for d, n in enumerate(shape) if n > 2]
        if not big:
            continue
        op = rng.choice(ops)
        dtype = rng.choice([torch.float16, torch.float32, torch.int8])
        keep = [d for d in range(len(shape)) if d not in big or rng.random() < 0.5]
        small = tuple(n if d in keep else 1 for d, n in enumerate(shape))
        a = _random_layout(rng, small, dtype).expand(shape)
        b = _random_layout(rng, shape, dtype)
        args = (a, b) if rng.random() < 0.5 else (b, a)
        ref = op(*args)
        if len({s for s, n in zip(b.stride(), shape) if n > 1 and s}) < \
                sum(1 for s, n in zip(b.stride(), shape) if n > 1 and s):
            continue                        # overlapping dims: not probed by design
        perms = dl._eager_perms(op, args, {})
        if perms is None:
            unpredicted += 1
            continue
        checked += 1
        if seen(shape, dl._strides_of(shape, perms[0])) != seen(shape, ref.stride()):
            wrong.append((op, [(tuple(x.shape), x.stride(), x.dtype) for x in args],
                          ref.stride(), perms[0]))
    assert checked > 300
    assert unpredicted == 0
    assert wrong == [], wrong[:4]


# seed 31 index 148: maximum(relu(x), y) of +0.0 and -0.0 (a permuted y) was -0.0, eager +0.0.
# eager's CPU maximum/minimum return the second operand of a +0.0/-0.0 tie in their vectorized
# loop (max_ps) and the first in the scalar one (std::max: strided operands, a row's tail), so
# the sign depends on where the element lies; ember's select always takes the second. The
# comparator accepts exactly that difference as `cpu_maximum_signed_zero_tie` (first test: the
# fault, which fails once eager is consistent; then the comparator can drop the rule).
def test_eager_maximum_signed_zero_tie_depends_on_the_loop():
    a, b = torch.full((17,), -0.0), torch.zeros(17)
    for op in (torch.maximum, torch.minimum):
        signs = torch.signbit(op(a, b))
        assert not signs[:16].any() and signs[16], (op, signs)    # vector loop: b; tail: a


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_fuzz_seed31_index148_maximum_signed_zero_tie(target, op):
    inputs = ("a0 = torch.tensor([0.0, -0.0, 1.0, -0.0, 0.0, -0.0]).reshape(3, 2).t()\n"
              "a1 = torch.tensor([[-0.0, 0.0, -0.0], [0.0, -0.0, 2.0]])")
    r = _assert_matches(_case(inputs, f"return (torch.{op}(torch.relu(a0), a1), "
                                      f"torch.{op}(a1, a0 * 1))", exact=(True, True)), target)
    assert r["reason"] == "" or r["reason"].startswith(f"eager quirk cpu_{op}_signed_zero_tie")
