"""Bugs and comparator rules from the fuzz runs of 2026-11-26 (fuzz9g, issue 9): one test each,
named after the bug; the comment gives the fuzz graph (seed, index) or the targeted case that
found it. Same comparator and helpers as test_fuzz_regressions.py."""
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz import compare, graphs  # noqa: E402
from test_fuzz_regressions import _assert_matches, _case, _no_fallback  # noqa: E402


# seed 32 index 832, triton: pow(hardtanh(tanh(x)), -2.5) with x = -5.877e-39 (an f32
# subnormal) was +inf, eager NaN: the f32 kernels' tanh, (1 - e) / (1 + e) with e = exp(-2|x|),
# is 0 for |x| below 2^-25 (e rounds to 1), so tanh(-5.9e-39) came back -0.0 (where eager's
# keeps the subnormal, whose pow is NaN), and it cancels for small |x| (tanh(1e-5) was 3e-3
# off, relative). Not the interpreter's fault: the same formula is the GPU's f32 tanh. Now tanh's
# odd series below |x| = 0.125.
def test_fuzz_seed32_index832_tanh_of_a_subnormal(target):
    r = _assert_matches(graphs.generate(32, 832).source(), target)
    assert r["accepted"] == [], r["reason"]


def test_tanh_of_small_values_is_exact(target):
    """f32 tanh: eager's value (bit for bit where |x| <= 2^-12: x itself, -0.0 and subnormals
    included), within 2e-6 relative of float64's elsewhere (the formula before: 0.0 for
    subnormals, 3e-3 off at 1e-5)."""
    mags = [0.0, 1e-45, 5.877471754111438e-39, 1.1754942e-38, 1e-30, 1e-12, 1e-8, 1e-5, 2.0 ** -12,
            3e-4, 1e-3, 0.01, 0.05, 0.1, 0.12, 0.1249, 0.125, 0.1251, 0.13, 0.2, 0.5, 1.0, 3.0,
            9.0, 10.0, 20.0, math.inf]
    mags += [10.0 ** (k / 50) for k in range(-300, 60)]
    vals = [v for m in mags for v in (m, -m)] + [math.nan]
    x = torch.tensor(vals, dtype=torch.float32)
    ember = torch.compile(torch.tanh, backend="ember", options={"target": target})(x)
    eager = torch.tanh(x)
    small = x.abs() <= 2.0 ** -12
    assert torch.equal(ember[small].view(torch.int32), eager[small].view(torch.int32))
    assert torch.equal(ember[small].view(torch.int32), x[small].view(torch.int32))
    ref = torch.tanh(x.double())
    finite = torch.isfinite(x) & ~small
    rel = ((ember[finite].double() - ref[finite]).abs() / ref[finite].abs()).max().item()
    assert rel < 2e-6, rel
    assert torch.equal(ember[~finite & ~small].isnan(), eager[~finite & ~small].isnan())
    assert torch.equal(ember[torch.isinf(x)], eager[torch.isinf(x)])


# seeds 26 index 1783, 27 index 602 (triton): the Triton interpreter's own f32 <-> bf16
# conversion flushes subnormals (test_fuzz_regressions_22.test_triton_interpreter_bf16_subnormal_fault);
# ember's kernels convert with triton_prelude's `_ember_to_bf16` / `_ember_from_bf16`, by the
# bits under the interpreter (a plain cast on a GPU). Every bf16 value read, and f32 values
# written as bf16 (every bf16 value widened, the midpoints between neighbours: ties to even,
# subnormal and normal), bit for bit as eager's.
def test_bf16_conversions_of_every_value(target):
    bits = "torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)"
    read = _case(f"a0 = {bits}", "return (a0.float() * 1.0,)")
    _no_fallback(_assert_matches(read, target))
    # each bf16 value widened (i), and f32 values at and beside the midpoints to the next one
    near = ", ".join(f"(i + {d:#x}).view(torch.float32)" for d in (0x7FFF, 0x8000, 0x8001))
    write = _case(f"a0 = (lambda i: torch.cat([i.view(torch.float32), {near}]))"
                  f"({bits}.float().view(torch.int32))", "return ((a0 * 1.0).to(torch.bfloat16),)")
    r = _assert_matches(write, target)
    _no_fallback(r)
    assert r["accepted"] == [], r["reason"]


# seed 31 index 1773: bf16 logsumexp of [-0.4785, -inf, -1.2266]: eager -0.09375 (its CPU kernel
# rounds its steps to bf16), ember -0.0908203125, the correctly rounded value (float64: -0.0910176);
# relative difference 3.1e-2 > bf16's 2e-2. The comparator's float64 rule (compare._closer_than_eager):
# the graph rerun on float64 copies of its inputs, cast once; ember's is at least as close to it
# as eager's, so the case passes, counted as "eager-less-exact" (never silently).
def test_fuzz_seed31_index1773_bf16_logsumexp_is_eager_less_exact(target):
    r = _assert_matches(graphs.generate(31, 1773).source(), target)
    assert r["accepted"] == ["eager-less-exact"], r["reason"]
    assert "ember 0, eager 0.00293" in r["reason"], r["reason"]


def _lse():
    src = _case("a0 = torch.tensor([-0.478515625, -inf, -1.2265625], dtype=torch.bfloat16)",
                "return (torch.logsumexp(a0, -1), a0 > -1)", exact=("low", True))
    ns = compare.load(src)
    return ns["fn"], ns["make_inputs"]


def _rule(outs, exact=("low", True)):
    fn, make = _lse()
    ref_inputs, out_inputs = make(), make()
    refs = list(fn(*ref_inputs))
    return compare._closer_than_eager(fn, make, refs, outs, ref_inputs, out_inputs, list(exact))


def test_float64_rule_accepts_only_what_is_closer():
    """The rule passes ember's value only where it is no farther from the float64 result than
    eager's, and never for integer, bool or bit-exact outputs."""
    bf = torch.bfloat16
    n = torch.tensor([True, False, False])     # eager's bool output
    assert _rule([torch.tensor(-0.0908203125, dtype=bf), n]) is not None    # ember's value
    assert _rule([torch.tensor(-0.0986328125, dtype=bf), n]) is None        # farther than eager
    assert _rule([torch.tensor(math.nan, dtype=bf), n]) is None             # NaN: the ref is not
    assert _rule([torch.tensor(-0.0908203125, dtype=bf), ~n]) is None       # a bool differs
    assert _rule([torch.tensor(-0.0908203125, dtype=bf), n], exact=(True, True)) is None
    assert _rule([torch.tensor(-0.0908203125, dtype=bf).reshape(1), n]) is None   # shape


def test_float64_rule_on_nonfinite_elements():
    """Where eager's element is NaN and the float64 result's is not (oneDNN's bf16 fault below),
    ember's must be the reference's value within tolerance; ember's NaN where eager's and the
    reference's are finite is a mismatch."""
    src = _case("a0 = torch.tensor([1.0, 2.0, inf, 4.0], dtype=torch.bfloat16)",
                "return (a0 * 0.5,)", exact=("low",))
    ns = compare.load(src)
    fn, make = ns["fn"], ns["make_inputs"]
    eager_nan = [torch.tensor([0.5, math.nan, math.inf, 2.0], dtype=torch.bfloat16)]

    def rule(outs, refs):
        return compare._closer_than_eager(fn, make, refs, outs, make(), make(), ["low"])
    good = [torch.tensor([0.5, 1.0, math.inf, 2.0], dtype=torch.bfloat16)]
    assert rule(good, eager_nan) is not None
    assert rule([torch.tensor([0.5, 1.5, math.inf, 2.0], dtype=torch.bfloat16)], eager_nan) is None
    assert rule(eager_nan, good) is None


# targeted conv 17 and 116 (fuzz9f, open until fuzz9g): a bf16 conv chain with -inf in its input,
# channels-last (the triton target's default under the interpreter, and channels_last=True on
# the cpu target): NaN where eager's and float64's values are finite. oneDNN's CPU bf16
# channels-last convolution writes NaN before an infinite input (test_fuzz_regressions'
# test_eager_cpu_bf16_channels_last_conv_puts_nan_before_an_inf); ember chose that layout, eager
# (an NCHW tensor) does not, so it was ember's wrong answer to fix, not a comparator rule: the
# extern convolves such an input NCHW. Also a depthwise weight (8, 1, 3, 3) whose strides,
# (9, 1, 3, 1), pass `is_contiguous()` but read as channels-last to the library.
CONV_INF = ("a0 = torch.linspace(-2, 2, 336).index_fill(0, torch.tensor([75]), -inf)"
            ".index_fill(0, torch.tensor([250]), inf).reshape(2, 4, 7, 6).to(torch.bfloat16)\n"
            "a1 = (torch.linspace(-1, 1, 8 * 9).reshape(8, 1, 3, 3) * 0.3).to(torch.bfloat16)\n"
            "a2 = (torch.linspace(-1, 1, 16 * 8).reshape(16, 8, 1, 1)).to(torch.bfloat16)")
CONV_BODY = ("x = torch.nn.functional.conv2d(a0, a1, None, padding=1, groups=4)\n"
             "x = torch.relu(-x) + x\n"
             "return (torch.nn.functional.conv2d(x, a2).float(),)")


@pytest.mark.parametrize("channels_last", [None, True])
@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_channels_last_bf16_conv_of_an_infinite_input(target, channels_last):
    src = _case(CONV_INF, CONV_BODY, exact=("low",))
    ns = compare.load(src)
    ref = ns["fn"](*ns["make_inputs"]())[0]
    assert ref.isnan().sum() < ref.numel()      # finite values for the fault to spoil
    options = {"target": target} if channels_last is None else \
        {"target": target, "channels_last": True}
    out = torch.compile(ns["fn"], backend="ember", options=options)(*ns["make_inputs"]())[0]
    assert torch.equal(out.isnan(), ref.isnan()), (int(out.isnan().sum()), int(ref.isnan().sum()))
    assert torch.equal(out.isinf(), ref.isinf())
    fin = torch.isfinite(ref)
    assert torch.allclose(out[fin], ref[fin], rtol=2e-2, atol=1e-2)


# seed 40 index 665, both targets: `int64 != float16` of 2^63 - 1 / -2^63 beside inf / -inf: eager
# converts the integer to the promoted float16 first (MIN is -inf there, equal to -inf), ember
# compared the f32 value (-9.2e18 != -inf). Every integer converted to a 16-bit float was kept
# at f32 (computed in f32, never rounded): 2049 as float16 was 2049, not 2048; 257 as bf16 was
# 257, not 256. Both printers now round an integer's conversion to f16/bf16 (through f32, as
# c10's Half(float(x)) / BFloat16(float(x))).
@pytest.mark.parametrize("itype", ["int64", "int32", "int16"])
@pytest.mark.parametrize("ftype", ["float16", "bfloat16"])
def test_fuzz_seed40_index665_integer_to_16_bit_float_rounds(target, itype, ftype):
    info = torch.iinfo(getattr(torch, itype))
    vals = [info.min, info.max, 0, 257, 259, -257, 2049, -2049, 4097, 65519, 65520, 70000,
            16777217, 123456789]
    ints = ", ".join(str(max(info.min, min(info.max, v))) for v in vals)
    inputs = (f"a0 = torch.tensor([{ints}], dtype=torch.{itype})\n"
              f"a1 = torch.tensor([-inf, inf, 0.0, 256.0, 260.0, -256.0, 2048.0, -2048.0, 4096.0, "
              f"65504.0, inf, inf, 16777216.0, 123456789.0]).to(torch.{ftype})")
    body = (f"return (a0.to(torch.{ftype}), a0 != a1, a0 == a1, a0 + a1, "
            f"torch.where(a0 > 0, a0, a1))")
    _no_fallback(_assert_matches(_case(inputs, body, exact=(True,) * 5), target))


def test_fuzz_seed40_index665_graph(target):
    _no_fallback(_assert_matches(graphs.generate(40, 665).source(), target))


# seed 40 index 1688, triton: `amax` of [-inf, -0.0, 0.0, -inf] (bf16): eager -0.0, ember +0.0.
# Which zero a max/min reduction returns for a +0.0/-0.0 tie is eager's loop's accident: the
# first test pins it (amax and max of the same values disagree; fails once torch is
# consistent). The comparator's named quirks `cpu_{amax,amin,max,min}_signed_zero_tie_{pos,neg}`
# rerun eager with every such tie given one sign and accept ember only where that explains the
# whole difference.
def test_eager_max_reductions_signed_zero_tie_depends_on_the_loop():
    t = torch.tensor([-0.0, 0.0])
    assert torch.signbit(t.amax()) and not torch.signbit(t.max())
    assert not torch.signbit(t.flip(0).amax()) and torch.signbit(t.flip(0).max())


def test_fuzz_seed40_index1688_amax_signed_zero_tie(target):
    r = _assert_matches(graphs.generate(40, 1688).source(), target)
    assert r["accepted"] in ([], ["eager quirk cpu_amax_signed_zero_tie_pos"]), r["reason"]


def test_signed_zero_tie_quirk_changes_only_ties():
    f = compare._zero_ties_to(1.0, True)(torch.Tensor.amax)
    x = torch.tensor([[-0.0, 0.0, -1.0], [-0.0, -0.0, -2.0], [-0.0, 0.5, 0.0]])
    r = f(x, 1)
    assert r.tolist() == [0.0, 0.0, 0.5]
    assert torch.signbit(r).tolist() == [False, True, False]     # row 1: no tie, -0.0 kept
    g = compare._zero_ties_to(-1.0, False)(torch.Tensor.min)
    v = g(torch.tensor([[0.0, -0.0], [0.0, 0.0]]), 1)
    assert torch.signbit(v.values).tolist() == [True, False] and v.indices.tolist() == [0, 0]


# seed 42 index 1761: `torch.fmin` of a +0.0/-0.0 tie. eager's CPU fmin/fmax return the first
# operand for float32 and the second for bfloat16 (pinned below: fails once torch is
# consistent); ember's select takes the first. The comparator's quirks
# `cpu_{fmax,fmin}_signed_zero_tie` rerun eager taking the first on such ties.
def test_eager_fmin_signed_zero_tie_depends_on_the_dtype():
    for dt, first in ((torch.float32, True), (torch.bfloat16, False)):
        a, b = torch.zeros(40, dtype=dt), -torch.zeros(40, dtype=dt)
        assert bool(torch.signbit(torch.fmin(a, b)).any()) is not first
        assert bool(torch.signbit(torch.fmin(b, a)).any()) is first


def test_fuzz_seed42_index1761_fmin_signed_zero_tie(target):
    r = _assert_matches(graphs.generate(42, 1761).source(), target)
    assert r["accepted"] in ([], ["eager quirk cpu_fmin_signed_zero_tie"]), r["reason"]


def test_fmin_zero_tie_quirk_changes_only_ties():
    f = compare._first_on_zero_ties(torch.fmin)
    a = torch.tensor([0.0, -0.0, 1.0, float("nan"), 2.0], dtype=torch.bfloat16)
    b = torch.tensor([-0.0, 0.0, 0.5, 3.0, float("nan")], dtype=torch.bfloat16)
    r = f(a, b)
    assert torch.signbit(r[:2]).tolist() == [False, True]
    assert r[2:].tolist() == [0.5, 3.0, 2.0]


# seed 41 index 4305 (the final 10,000-graph run, cpu): rsqrt(expm1(div(-0.0136, 0.5, 'trunc')))
# was +inf, eager -inf: the trunc division of a float took torch-mlir's sign * floor(|q|)
# (+0.0 for -0.0), and the C++ expm1 of -0.0 gave +0.0.
def test_fuzz_seed41_index4305_trunc_division_and_expm1_keep_negative_zero(target):
    _assert_matches(graphs.generate(41, 4305).source(), target)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_trunc_division_of_floats_keeps_the_sign_of_zero(target, dtype):
    a = torch.tensor([-0.0136, 0.0136, -0.0, 7.5, -7.5, 3.0], dtype=dtype)
    f = lambda x: (torch.div(x, 0.5, rounding_mode="trunc"),
                   torch.div(x, torch.full_like(x, -4.0), rounding_mode="trunc"),
                   torch.expm1(torch.div(x, 0.5, rounding_mode="trunc")))
    ref = f(a)
    out = torch.compile(f, backend="ember", options={"target": target})(a)
    for k, (o, r) in enumerate(zip(out, ref)):
        exact = k < 2       # the quotients exactly; expm1 within its accuracy
        torch.testing.assert_close(o, r, rtol=0 if exact else 1e-6, atol=0)
        assert torch.equal(torch.signbit(o), torch.signbit(r)), k


# seed 41 index 58 (the final 10,000-graph run, both targets): `min(-1, keepdim=True)` of a
# (0, 2, 0) tensor raises in eager (a reduction over an empty dim) although its result has no
# elements either; ember folded the result to an empty tensor and did not raise. Now the
# reduction stays, the graph runs eagerly (a node reading a tensor without elements) and
# raises eager's IndexError. (amax, argmax: Dynamo's fake tensors raise first, not ember's.)
@pytest.mark.filterwarnings("ignore:ember")
@pytest.mark.parametrize("op", ["min", "max"])
def test_empty_reduction_with_an_empty_result_raises_as_eager(target, op):
    f = {"min": lambda x: x.min(-1, keepdim=True).indices,
         "max": lambda x: x.max(-1).values}[op]
    x = torch.zeros(0, 2, 0)
    with pytest.raises(IndexError):
        f(x)
    torch._dynamo.reset()
    with pytest.raises(IndexError):
        torch.compile(f, backend="ember", options={"target": target})(x)
    # an empty result of a reduction over a dim that is not empty still folds (no raise)
    torch._dynamo.reset()
    y = torch.compile(f, backend="ember", options={"target": target})(torch.zeros(0, 2, 3))
    assert y.shape == f(torch.zeros(0, 2, 3)).shape


# seed 71 index 530, triton: log(cat(v0, gelu(v0))) of a float32 tensor holding +inf and values
# near -5.5. Eager's CPU gelu is NaN at +inf (a named quirk) and -0.0 at -5.5384 (its vectorized
# erf rounds 1 + erf(x / sqrt 2) to 0; float64: -8.45e-8), so eager's log is -inf where the
# float64 reference's and ember's are NaN. The float64 rule compared the norms of two errors
# within tolerance over the finite rest (ember 7.6e-7, eager 7.1e-7) and refused; there, ember
# within the dtype's tolerance of the reference is enough.
def test_fuzz_seed71_index530_float64_rule_within_tolerance(target):
    r = _assert_matches(graphs.generate(71, 530).source(), target)
    assert r["status"] == "pass", r["reason"]
    _no_fallback(r)


def test_float64_rule_still_refuses_worse_values():
    """The tolerance clause does not accept ember's finite values beyond tolerance of the
    reference where eager's are closer."""
    src = ("import torch\nnan, inf = float('nan'), float('inf')\nEXACT = [False]\n\n\n"
           "def make_inputs():\n    return [torch.tensor([1.0, 2.0, 3.0, 4.0])]\n\n\n"
           "def fn(a0):\n    return (torch.log(a0),)\n")
    ns = graphs.load(src)
    refs = [ns["fn"](*ns["make_inputs"]())[0]]
    worse = [refs[0] * torch.tensor([1.0, 1.1, 1.0, 1.0])]
    assert compare._closer_than_eager(ns["fn"], ns["make_inputs"], refs, worse,
                                      ns["make_inputs"](), ns["make_inputs"](), [False]) is None


# seed 72 index 727, triton: ceil(minimum(x, False)).max(-1) over rows holding both +0.0 and
# -0.0: eager's CPU scalar loop keeps each row's first zero (0.0 for [0.0, 0.0, 0.0, -0.0],
# -0.0 for [-0.0, 0.0, 0.0, -inf]), ember's reduction under the interpreter the last; no one
# sign for every tie explained it. The tie's sign is the op's to choose (eager's vectorized loop
# takes its lanes' order).
def test_fuzz_seed72_index727_max_zero_tie_by_position(target):
    r = _assert_matches(graphs.generate(72, 727).source(), target)
    assert r["status"] == "pass", r["reason"]
    _no_fallback(r)


def test_zero_ties_at_either_end():
    x = torch.tensor([[0.0, 0.0, 0.0, -0.0], [-0.0, 0.0, 0.0, -math.inf], [0.0, -1.0, 2.0, -0.0],
                      [-0.0, -0.0, -3.0, -0.0]])
    for last, want in ((False, [False, True]), (True, [True, False])):
        red = compare._zero_ties_at_end(True, last)(torch.Tensor.max)
        vals = red(x.clone(), -1, keepdim=True).values.flatten()
        assert torch.signbit(vals[:2]).tolist() == want
        assert vals[2].item() == 2.0                          # no zero result: as it was
        assert torch.signbit(vals[3]).item()                  # one sign only: no tie
        mn = compare._zero_ties_at_end(False, last)(torch.amin)(-x.clone(), dim=1)
        assert torch.signbit(mn[:2]).tolist() == [not w for w in want]
