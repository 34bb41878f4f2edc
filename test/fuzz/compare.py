"""One fuzz graph through ember against eager: values, dtypes, shapes, strides, aliasing and
raised errors. `check(source, target)` runs in a worker process (runner.py)."""
from __future__ import annotations

import math
import warnings

import torch

from .graphs import load

# ||out - ref|| <= rtol * ||ref|| + atol * sqrt(n) over the finite elements of a float output
# that is not bit-exact (docs/design.md "Numerics"; opdb_harness uses the same bound).
TOLERANCE = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-4, 1e-5),
             torch.bfloat16: (2e-2, 1e-3), torch.float16: (1e-2, 1e-3)}


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _strides(t: torch.Tensor) -> tuple:
    """Strides a user can observe: dims of size 1 (and empty tensors) have no meaningful one."""
    if t.numel() == 0:
        return ()
    return tuple(s if n > 1 else None for s, n in zip(t.stride(), t.shape))


def _aliases(outs: list, inputs: list) -> list:
    """For each output: the earlier outputs and the inputs it shares storage with (by index)."""
    def ptr(t):
        return t.untyped_storage().data_ptr() if t.numel() else None
    rel = []
    for i, o in enumerate(outs):
        p = ptr(o)
        same_out = tuple(j for j in range(i) if p is not None and ptr(outs[j]) == p)
        same_in = tuple(j for j, a in enumerate(inputs) if p is not None and ptr(a) == p)
        rel.append((same_out, same_in, o.storage_offset() if same_in else None))
    return rel


def value_diff(out: torch.Tensor, ref: torch.Tensor, exact) -> str | None:
    """`exact`: True (bit for bit), False (tolerance of the dtype) or "low" (bf16's)."""
    if out.dtype != ref.dtype:
        return f"dtype {out.dtype} != eager {ref.dtype}"
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)} != eager {tuple(ref.shape)}"
    if not ref.dtype.is_floating_point:
        bad = int((out != ref).sum())
        return f"{bad} of {ref.numel()} {ref.dtype} elements differ" if bad else None
    o, r = out.double(), ref.double()
    if not torch.equal(torch.isnan(o), torch.isnan(r)):
        return f"NaN positions differ ({int(torch.isnan(o).sum())} NaN, eager {int(torch.isnan(r).sum())})"
    inf = torch.isinf(r) | torch.isinf(o)
    if not torch.equal(o[inf], r[inf]):
        return "infinities differ"
    finite = ~(inf | torch.isnan(r))
    o, r = o[finite], r[finite]
    if exact is True:
        bad = int((o != r).sum())
        if bad:
            return f"{bad} of {r.numel()} exact {ref.dtype} elements differ"
        # == treats -0.0 as 0.0; an exact result keeps eager's sign of zero too (1 / x and
        # atan2 of it tell them apart; issue 9, seed 25 index 1625's trunc)
        zero = r == 0
        bad = int((torch.signbit(o[zero]) != torch.signbit(r[zero])).sum())
        return f"{bad} of {int(zero.sum())} exact {ref.dtype} zeros have the other sign " \
               f"(-0.0 vs 0.0)" if bad else None
    # "low": computed from inexact bf16/fp16 values, whatever its own type
    rtol, atol = TOLERANCE[torch.bfloat16 if exact == "low" else ref.dtype]
    err, den = torch.linalg.vector_norm(o - r).item(), torch.linalg.vector_norm(r).item()
    if err > rtol * den + atol * math.sqrt(max(r.numel(), 1)):
        return f"relative error {err / den if den else err:.2e} > {rtol:.0e} ({ref.dtype})"
    return None


def diff(outs: list, refs: list, out_inputs: list, ref_inputs: list, exact: list,
         judged=()) -> str | None:
    """The first difference; the values of the outputs in `judged` (indices) are not compared
    (the float64 rule has judged them), their dtype, shape, strides and aliasing are."""
    if len(outs) != len(refs):
        return f"{len(outs)} outputs, eager {len(refs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(o, torch.Tensor):
            return f"out[{i}]: {type(o).__name__}, eager a tensor"
        d = value_diff(o, r, exact[i]) if i not in judged else (
            f"dtype {o.dtype} != eager {r.dtype}" if o.dtype != r.dtype else
            f"shape {tuple(o.shape)} != eager {tuple(r.shape)}" if o.shape != r.shape else None)
        if d:
            return f"out[{i}]: {d}"
        if _strides(o) != _strides(r):
            return f"out[{i}]: strides {o.stride()} != eager {r.stride()} (shape {tuple(r.shape)})"
    a, b = _aliases(outs, out_inputs), _aliases(refs, ref_inputs)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return (f"out[{i}]: aliases outputs {x[0]} / inputs {x[1]} (offset {x[2]}), "
                    f"eager {y[0]} / {y[1]} (offset {y[2]})")
    return None


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = next((ln for ln in lines[:8] if "Error" in ln), lines[0] if lines else "")
    return f"{type(e).__name__}: {text}"[:300]


def _fallbacks() -> tuple[list, dict]:
    """The ops that ran eagerly, and why (op -> the first reason given)."""
    import ember
    ops, why = [], {}
    for r in ember.last_reports():
        fb = list(r.get("eager_fallback_ops") or [])
        if fb or r.get("status") in ("eager", "partitioned"):
            ops.extend(map(str, fb or [r.get("status")]))
            for op, reason in (r.get("fallback_reasons") or {}).items():
                why.setdefault(str(op), str(reason)[:300])
    return ops, why


def variant_options(variant: str, target: str) -> dict:
    """The compile options of a variant (issue 11, item 4): "nofuse" is ember-fuse with
    max-group-size=1 (one linalg op per kernel: every intermediate is a buffer, which the
    planner then packs), "noplan" is the default pipeline without ember-buffer-reuse (every
    buffer its own allocation). A wrong fusion or a wrong reuse shows as a value that
    differs from eager."""
    if variant == "nofuse":
        return {"max_group_size": 1}
    if variant == "noplan":
        from ember.frontend.options import CompileOptions, default_pipeline
        from ember.passes.pipeline import split_top_level, strip_anchor
        passes = split_top_level(strip_anchor(default_pipeline(CompileOptions(target=target),
                                                               target)))
        kept = [p for p in passes if p.split("{")[0] != "ember-buffer-reuse"]
        assert len(kept) == len(passes) - 1, f"no ember-buffer-reuse in {passes}"
        return {"pipeline": f"builtin.module({','.join(kept)})"}
    raise ValueError(f"unknown fuzz variant {variant!r} (nofuse, noplan)")


VARIANTS = ("nofuse", "noplan")


def _same_program(variant: str, reports: list) -> bool:
    """True when the default compile shows that `variant` compiles to the same program (then
    it is not run again): "nofuse" where every kernel already holds one op, "noplan" where
    the planner had no intermediate to place (ember.unplanned_bytes 0: every buffer is its
    own allocation either way). A graph not wholly compiled always runs its variants."""
    if not reports or any(r.get("status") != "compiled" for r in reports):
        return False
    if variant == "nofuse":
        return all(len(g) <= 1 for r in reports for g in r.get("fused_groups") or [])
    if variant == "noplan":
        return all(not r.get("unplanned_peak_bytes") for r in reports)
    return False


def _compiled(fn, make, target: str, options: dict):
    """ember's outputs (or the error it raised) and its inputs after the call."""
    import ember
    torch._dynamo.reset()
    ember.clear_reports()
    compiled = torch.compile(fn, backend="ember", options={"target": target, **options})
    out_inputs = make()
    try:
        outs, err = _flat(compiled(*out_inputs)), None
    except Exception as e:  # noqa: BLE001
        outs, err = None, e
    return outs, err, out_inputs


def check(source: str, target: str, variants=()) -> dict:
    """{'status': 'pass'|'mismatch'|'error', 'reason': ..., 'fallback': [...]}: 'error' is an
    error raised by one side only. Each of `variants` (VARIANTS) compiles the graph again with
    its options and is compared with eager the same way (unless it would compile to the same
    program: `_same_program`; 'variants_run' lists those run); the first that fails is the
    result, its reason prefixed with `[variant]`."""
    import ember
    ns = load(source)
    fn, make, exact_map = ns["fn"], ns["make_inputs"], ns["EXACT"]
    exact = list(exact_map)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_inputs = make()
        try:
            refs, ref_err = _flat(fn(*ref_inputs)), None
        except Exception as e:  # noqa: BLE001
            refs, ref_err = None, e
        outs, err, out_inputs = _compiled(fn, make, target, {})
        fallback, fallback_reasons = _fallbacks()
        reports = list(ember.last_reports())
    torch._dynamo.reset()
    r = _judge(source, fn, make, ref_err, err, refs, outs, ref_inputs, out_inputs, exact, target)
    notes = [r[2]] if r[2] else []
    ran = []
    for variant in variants if r[0] == "pass" else ():
        if _same_program(variant, reports):
            continue
        ran.append(variant)
        # the worker's log names the variant a crash happened in
        print(f"fuzz variant {variant}", flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs, err, out_inputs = _compiled(fn, make, target, variant_options(variant, target))
        torch._dynamo.reset()
        v = _judge(source, fn, make, ref_err, err, refs, outs, ref_inputs, out_inputs, exact,
                   target, variant_options(variant, target))
        if v[0] != "pass":
            r = (v[0], f"[{variant}] {v[1]}", None)
            break
        if v[2]:
            notes.append(f"[{variant}] {v[2]}")
    if r[0] != "pass" and _upstream(fn, make, ref_err, refs, ref_inputs, exact):
        r = ("upstream", f"torch.compile(backend='aot_eager') differs from eager too: {r[1]}",
             None)
    # `accepted`: the rules that passed a difference from eager (counted in the summary)
    return dict(status=r[0], reason=r[1], fallback=fallback, fallback_reasons=fallback_reasons,
                variants_run=ran, accepted=notes if r[0] == "pass" else [])


def _judge(source, fn, make, ref_err, err, refs, outs, ref_inputs, out_inputs, exact,
           target, options=None) -> tuple:
    """(status, reason, note): `note` names the rule that accepted a difference from eager
    (an eager quirk, or "eager-less-exact"), None for a plain pass or a failure."""
    r = _verdict(ref_err, err, refs, outs, ref_inputs, out_inputs, exact, target)
    if r[0] != "mismatch":
        return (*r, None)
    quirk = _eager_quirk(source, fn, make, outs, out_inputs, exact, target)
    if quirk:
        return "pass", f"eager quirk {quirk}: {r[1]}", f"eager quirk {quirk}"
    closer = _closer_than_eager(fn, make, refs, outs, ref_inputs, out_inputs, exact)
    if closer:
        return "pass", f"eager-less-exact: {r[1]}; {closer}", "eager-less-exact"
    return (*r, None)


def _f64_inputs(inputs: list) -> list:
    """Float inputs as float64 copies with the same sizes, strides and offset (the whole
    storage converted, then viewed the same way: an expanded or offset input stays one)."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64:
            base = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())
            x = base.double().as_strided(x.size(), x.stride(), x.storage_offset())
        out.append(x)
    return out


def _classes_differ(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Where x is NaN and ref is not (or the reverse), or either is infinite and they differ."""
    return (torch.isnan(x) != torch.isnan(ref)) | \
        ((torch.isinf(x) | torch.isinf(ref)) & (x != ref) & ~(torch.isnan(x) & torch.isnan(ref)))


def _closer_than_eager(fn, make, refs, outs, ref_inputs, out_inputs, exact) -> str | None:
    """The float64 rule (issue 9): where ember's and eager's values differ beyond tolerance,
    the graph's own source runs again on float64 copies of the float inputs (integer inputs as
    they are; casts written in the graph still happen) and each result is cast to eager's dtype
    once: the value the op graph means, rounded once. ember's output is accepted when it is at
    least as close to that reference as eager's is: no element is NaN/inf where the reference
    is not (or finite where it is not) unless eager's is too; where ember's is of the right
    class and eager's is not, ember's is within the dtype's tolerance of the reference; over
    the elements finite in all three, ||ember - ref|| <= ||eager - ref||, or ember's is within
    the dtype's tolerance of the reference there. Only outputs compared
    by tolerance qualify: integer, bool and bit-exact outputs must still equal eager's, and
    dtypes, shapes, strides and aliasing are compared as always. Returns the distances (the
    mismatch's note) or None."""
    if outs is None or refs is None or len(outs) != len(refs):
        return None
    bad = [i for i, (o, r) in enumerate(zip(outs, refs))
           if isinstance(o, torch.Tensor) and value_diff(o, r, exact[i])]
    if not bad or any(exact[i] is True or not refs[i].is_floating_point()
                      or outs[i].dtype != refs[i].dtype or outs[i].shape != refs[i].shape
                      for i in bad):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wide = _flat(fn(*_f64_inputs(make())))
    except Exception:  # noqa: BLE001 - no float64 reference for this graph
        return None
    if len(wide) != len(refs):
        return None
    notes = []
    for i in bad:
        w = wide[i]
        if not isinstance(w, torch.Tensor) or tuple(w.shape) != tuple(refs[i].shape) \
                or not w.is_floating_point():
            return None
        rounded = w.to(refs[i].dtype)
        ref, o, e = rounded.double(), outs[i].double(), refs[i].double()
        wrong_o, wrong_e = _classes_differ(o, ref), _classes_differ(e, ref)
        if bool((wrong_o & ~wrong_e).any()):
            return None
        fixed = wrong_e & ~wrong_o & torch.isfinite(ref)
        if bool(fixed.any()) and value_diff(outs[i][fixed], rounded[fixed], exact[i]):
            return None
        common = torch.isfinite(o) & torch.isfinite(e) & torch.isfinite(ref)
        d_o = torch.linalg.vector_norm(o[common] - ref[common]).item()
        d_e = torch.linalg.vector_norm(e[common] - ref[common]).item()
        # where ember is within the dtype's tolerance of the reference over those elements,
        # which of two such errors is smaller does not decide (log(gelu(x)), x near -5.5:
        # eager's -inf where the reference's and ember's are NaN, 7.6e-7 against 7.1e-7 over
        # the finite rest: fuzz seed 71 index 530)
        if d_o > d_e and value_diff(outs[i][common], rounded[common], exact[i]):
            return None
        notes.append(f"out[{i}] to the float64 reference: ember {d_o:.3g}, eager {d_e:.3g}"
                     + (f", {int(wrong_e.sum())} eager elements NaN/inf where it is not"
                        if bool(wrong_e.any()) else ""))
    d = diff(outs, refs, out_inputs, ref_inputs, exact, judged=set(bad))
    if d is None:
        for x, y in zip(out_inputs, ref_inputs):
            if value_diff(x, y, True):
                return None
    return None if d else "; ".join(notes)


def _gelu_inf(original):
    """gelu with +inf -> +inf (its value: x * 0.5 * (1 + erf(x / sqrt 2)) = inf)."""
    def gelu(x, approximate="none"):
        y = original(x, approximate=approximate)
        return torch.where(torch.isposinf(x), x, y) if x.is_floating_point() else y
    return gelu


def _gelu_f64(original):
    """float32 gelu computed in float64 and rounded once."""
    def gelu(x, approximate="none"):
        if x.dtype != torch.float32:
            return original(x, approximate=approximate)
        return original(x.double(), approximate=approximate).float()
    return gelu


def _prod_f32(original):
    """prod of bf16/f16 accumulated in f32 and rounded once (eager's CUDA kernel)."""
    def prod(x, *args, **kwargs):
        if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16) \
                and "dtype" not in kwargs:
            return original(x.float(), *args, **kwargs).to(x.dtype)
        return original(x, *args, **kwargs)
    return prod


def _on_zero_ties(original, first: bool):
    """A binary max/min that returns one operand (the first, else the second) where the
    operands compare equal (+0.0 and -0.0: the only ties whose results differ)."""
    def pick(a, b, *args, **kwargs):
        r = original(a, b, *args, **kwargs)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and r.is_floating_point():
            r.copy_(torch.where(a == b, a if first else b, r))   # in place: eager's layout
        return r
    return pick


def _second_on_zero_ties(original):
    """maximum/minimum as eager's vectorized CPU loop: the second operand on ties."""
    return _on_zero_ties(original, first=False)


def _first_on_zero_ties(original):
    """fmax/fmin as ember's select: the first operand on ties."""
    return _on_zero_ties(original, first=True)


def _zero_ties(maximum: bool, negative_at):
    """A max/min reduction (amax, amin, max, min: values) whose result is a zero taken from a
    slice holding both +0.0 and -0.0 gets the zero `negative_at(original, x, args, kwargs)`
    chooses (a bool tensor of the result's shape: -0.0 where true). Which of the two eager's
    CPU reduction returns depends on its loop (first of a tie in the scalar loop, the vector
    lanes' order otherwise): amax and max of the same [-0.0, 0.0] give -0.0 and 0.0."""
    def wrap(original):
        def red(x, *args, **kwargs):
            r = original(x, *args, **kwargs)
            vals = r[0] if isinstance(r, tuple) else r      # max(dim): (values, indices)
            if not isinstance(x, torch.Tensor) or not x.is_floating_point() or \
                    not isinstance(vals, torch.Tensor) or vals.numel() == 0 or \
                    (args and isinstance(args[0], torch.Tensor)):     # max(a, b): not this
                return r

            def has(mask):      # per slice: any (a max of the mask, a min of its negation)
                m = original((mask if maximum else -mask.to(torch.int8)).to(x.dtype), *args,
                             **kwargs)
                return (m[0] if isinstance(m, tuple) else m) != 0
            zero = x == 0
            tie = (vals == 0) & has(zero & torch.signbit(x)) & has(zero & ~torch.signbit(x))
            negative = negative_at(original, x, args, kwargs)     # broadcast to vals
            vals.copy_(torch.where(tie, torch.where(negative, -0.0, 0.0).to(vals.dtype), vals))
            return r
        return red
    return wrap


def _zero_ties_to(sign: float, maximum: bool):
    """Every such tie gets the zero of `sign`."""
    return _zero_ties(maximum, lambda original, x, args, kwargs: torch.tensor(sign < 0))


def _zero_ties_at_end(maximum: bool, last: bool):
    """Every such tie gets the sign of its slice's first (`last`: last) zero, row-major over
    the reduced dims. Eager's CPU scalar loop keeps the first of a tie; ember's reduction under
    the Triton interpreter the last: rows of [0.0, 0.0, 0.0, -0.0] and [-0.0, 0.0, 0.0, -inf]
    in one graph gave eager 0.0 and -0.0, ember -0.0 and 0.0 (fuzz seed 72 index 727), which no
    one sign for every tie explains."""
    def negative_at(original, x, args, kwargs):
        n = x.numel()
        # each zero's key: n - its flat index (first) or its flat index + 1 (last), 0 elsewhere;
        # the same reduction over the same dims keeps each slice's end zero (the flat order
        # within a slice is its order along the reduced dims)
        pos = torch.arange(n, dtype=torch.float64).reshape(x.shape)
        key = torch.where(x == 0, pos + 1.0 if last else float(n) - pos, torch.zeros_like(pos))
        m = original(key, *args, **kwargs) if maximum else -original(-key, *args, **kwargs)
        m = m[0] if isinstance(m, tuple) else m
        at = (m - 1.0 if last else float(n) - m).clamp(0, n - 1).long()
        return torch.signbit(x.reshape(-1)[at.reshape(-1)]).reshape(m.shape)
    return _zero_ties(maximum, negative_at)


def _fmod(p: float, q: float) -> float:
    """C's fmod (exact; NaN for an infinite dividend, a zero divisor or a NaN)."""
    try:
        return math.fmod(p, q)
    except ValueError:
        return math.nan


def _exact_fmod(remainder: bool, swapped: bool = False):
    """fmod (remainder: corrected towards the divisor's sign, as eager's loops do) of floats
    exactly, as eager's scalar CPU loop and CUDA kernels compute it: eager's vectorized CPU
    loop gives NaN where both operands are finite but their quotient overflows the dtype
    (float32 1e10 fmod 2.9e-29; 4 % 2**-128 in a uint8 % float32 graph). `swapped`: the
    operands come as __rmod__ gets them (divisor, dividend)."""
    def wrap(original):
        def op(a, b, *args, **kwargs):
            r = original(a, b, *args, **kwargs)
            if not isinstance(r, torch.Tensor) or not r.is_floating_point() or args or kwargs \
                    or r.device.type != "cpu":
                return r
            x, y = (v.detach().to(r.dtype) if isinstance(v, torch.Tensor)
                    else torch.tensor(v, dtype=r.dtype) for v in ((b, a) if swapped else (a, b)))
            x, y = torch.broadcast_tensors(x, y)
            m = torch.tensor([_fmod(p, q) for p, q in zip(x.double().flatten().tolist(),
                                                          y.double().flatten().tolist())],
                             dtype=torch.float64).reshape(x.shape).to(r.dtype)
            if remainder:
                m = torch.where((m != 0) & ((y < 0) != (m < 0)), m + y, m)
            r.copy_(m)    # in place: eager's layout
            return r
        return op
    return wrap


# Eager results that are eager's kernels' own accidents or its CPU kernels' choices, not the
# op's semantics; each is named, accepted only where it explains the whole difference (ember
# matches eager run with the op replaced by the other value), and pinned by a test that fails
# once torch changes (test_fuzz_regressions_22.py). name -> (targets, what the source must
# call, torch attribute owner, attribute, replacement).
QUIRKS = {
    # eager's CPU gelu of +inf is NaN in its vectorized loop (float32 tensors of two elements
    # or more, bf16 rows long enough), +inf in its scalar one (fuzz seed 22 index 794)
    "cpu_gelu_inf_nan": (("cpu", "triton"), "torch.nn.functional.gelu(", torch.nn.functional,
                         "gelu", _gelu_inf),
    # eager's CPU float32 erf-GELU loses ~1e-4 relative in the negative tail (x < -3: the
    # cancellation in 1 + erf(x / sqrt 2) magnifies its erf's error), ember's is within 1e-5 of
    # float64 there; 1 / gelu(x) carries that into a whole output (fuzz seed 22 index 197)
    "cpu_gelu_f32_tail_error": (("cpu", "triton"), "torch.nn.functional.gelu(",
                                torch.nn.functional, "gelu", _gelu_f64),
    # the triton target has eager CUDA's semantics: a bf16/f16 product accumulates in f32
    # (eager's CPU kernel rounds each partial product to the 16-bit type, so one past 65504 is
    # inf: fuzz seed 22 index 729); the cpu target calls eager's CPU kernel
    "cuda_prod_f32_accumulation": (("triton",), ".prod(", torch.Tensor, "prod", _prod_f32),
    # eager's CPU maximum/minimum of +0.0 and -0.0 return the second operand in the vectorized
    # loop (max_ps) and the first in the scalar one (std::max: a strided operand, a row's
    # tail), so the sign of such a zero depends on where it lies; ember's select always takes
    # the second (fuzz seed 31 index 148)
    "cpu_maximum_signed_zero_tie": (("cpu", "triton"), "torch.maximum(", torch, "maximum",
                                    _second_on_zero_ties),
    "cpu_minimum_signed_zero_tie": (("cpu", "triton"), "torch.minimum(", torch, "minimum",
                                    _second_on_zero_ties),
    # eager's CPU fmax/fmin of +0.0 and -0.0 return the first operand for float32 and the
    # second for bfloat16 (IEEE's maxNum/minNum leave the sign of such a zero open); ember's
    # select always takes the first (fuzz seed 42 index 1761)
    "cpu_fmax_signed_zero_tie": (("cpu", "triton"), "torch.fmax(", torch, "fmax",
                                 _first_on_zero_ties),
    "cpu_fmin_signed_zero_tie": (("cpu", "triton"), "torch.fmin(", torch, "fmin",
                                 _first_on_zero_ties),
    # eager's CPU max/min reductions over a slice holding both +0.0 and -0.0 return either,
    # by its loop's order (amax and max of the same values differ); ember's Triton reduction
    # tree picks by its own order (fuzz seed 40 index 1688): accepted where one sign for every
    # such tie explains the whole difference
    **{f"cpu_{op}_signed_zero_tie_{name}": (("cpu", "triton"), f".{op}(", torch.Tensor, op,
                                            _zero_ties_to(sign, op in ("amax", "max")))
       for op in ("amax", "amin", "max", "min") for name, sign in (("pos", 1.0), ("neg", -1.0))},
    # ... or where each such tie takes the sign of its slice's first or last zero (eager's
    # scalar loop keeps the first, ember's reduction under the interpreter the last)
    **{f"cpu_{op}_signed_zero_tie_{end}": (("cpu", "triton"), f".{op}(", torch.Tensor, op,
                                           _zero_ties_at_end(op in ("amax", "max"),
                                                             end == "last"))
       for op in ("amax", "amin", "max", "min") for end in ("first", "last")},
    # eager's CPU fmod/remainder of floats is NaN in its vectorized loop where the operands are
    # finite and their quotient overflows the dtype (4 % 2**-128 in float32), exact in its
    # scalar loop (one element) and on CUDA, as ember's are (fuzz seed 50 index 287)
    "cpu_fmod_quotient_overflow_nan": (("cpu", "triton"), "torch.fmod(", torch, "fmod",
                                       _exact_fmod(False)),
    "cpu_remainder_quotient_overflow_nan": (("cpu", "triton"), " % ", torch.Tensor, "__mod__",
                                            _exact_fmod(True)),
    "cpu_rremainder_quotient_overflow_nan": (("cpu", "triton"), " % ", torch.Tensor, "__rmod__",
                                             _exact_fmod(True, swapped=True)),
}


def _eager_quirk(source, fn, make, outs, out_inputs, exact, target) -> str | None:
    """The name of the eager quirk that explains a mismatch, or None."""
    for name, (targets, call, owner, attr, replacement) in QUIRKS.items():
        if target not in targets or call not in source:
            continue
        original = getattr(owner, attr)
        setattr(owner, attr, replacement(original))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                inputs = make()
                refs = _flat(fn(*inputs))
        except Exception:  # noqa: BLE001 - no alternative reference: not this quirk
            continue
        finally:
            setattr(owner, attr, original)
        if _verdict(None, None, refs, outs, inputs, out_inputs, exact, target)[0] == "pass":
            return name
    return None


def _verdict(ref_err, err, refs, outs, ref_inputs, out_inputs, exact, target) -> tuple:
    if ref_err is not None and err is None:
        if target == "triton" and "ZeroDivisionError" in str(ref_err):
            # The triton target has eager CUDA's semantics: an integer division by zero does
            # not raise (the quotient is unspecified), under the interpreter too.
            return "pass", "integer division by zero: CUDA semantics"
        return "error", f"eager raised {_one_line(ref_err)}; ember did not"
    if ref_err is None and err is not None:
        return "error", f"ember raised {_one_line(err)}"
    if ref_err is not None:
        # a user's `except IndexError` must catch ember's error as it catches eager's
        if not isinstance(err, type(ref_err)):
            return "error", (f"ember raised {_one_line(err)}; eager raised "
                             f"{_one_line(ref_err)}")
        return "pass", "both raised"
    d = diff(outs, refs, out_inputs, ref_inputs, exact)
    # the inputs must come out as eager leaves them (no op here mutates)
    if d is None:
        for i, (x, y) in enumerate(zip(out_inputs, ref_inputs)):
            if value_diff(x, y, True):
                d = f"input {i} modified"
                break
    return ("mismatch", d) if d else ("pass", "")


def _upstream(fn, make, ref_err, refs, ref_inputs, exact) -> bool:
    """True when Dynamo + AOTAutograd without ember already differ from eager (not ember's
    bug: e.g. `True - int_tensor` raises in eager and not once traced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
        inputs = make()
        try:
            outs, err = _flat(torch.compile(fn, backend="aot_eager")(*inputs)), None
        except Exception as e:  # noqa: BLE001
            outs, err = None, e
        torch._dynamo.reset()
    return _verdict(ref_err, err, refs, outs, ref_inputs, inputs, exact, "cpu")[0] != "pass"
