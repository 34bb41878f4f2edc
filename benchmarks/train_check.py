"""Is a compiled training step right? Each quantity a step makes is compared with eager's and,
where the two differ by more than the dtype's bar, both are measured against a float64 step.

What a step makes (`capture`): the loss, the model's output, every gradient (before the optimizer
step), the batch statistics that BatchNorm folded into its running buffers (recovered from the
buffers before and after: `(after - (1 - m) * before) / m`), other float buffers' changes, and
integer buffers (counters, which must be equal).

Why not "within 1e-2 of eager" alone (benchmarks/RESULTS.md, bn18): a bf16 step of a deep ReLU
network is chaotic in its rounding. One bf16 ulp added to 3 of the 32768 activations after
mobilenet_v3_large's first block moves eager's own logits by 5.5e-2 and its gradients by 0.17;
eager NCHW against eager channels-last differs as much (4.6e-2, 0.15). Every later rounding that
the perturbation crosses is a new 1-ulp error, and every ReLU / hardswish / max-pool mask that
flips sends a whole gradient element the other way. Two correct bf16 implementations that are
not bit-identical everywhere are therefore as far apart as either is from float64.

So a quantity passes when it is within `tol` of eager's, or when the compiled step's distance
from float64 is at most `factor` times eager's own (the rule of torch._dynamo.utils.same with
fp64_ref, per tensor). What the rule can see is bounded by eager's own error on each quantity;
the figures say how much it is (eager_err), and a quantity whose eager value is half its size
or more away from float64 is reported as unverified in this dtype rather than passed: the
float32 step (the zoo's train-sgd mode, chaotic too but at float32's ulp) checks it.

Quantities that are zero in exact arithmetic are noise in every precision: a BatchNorm's bias
gradient when a convolution and another BatchNorm follow it, and the batch mean after a
convolution of zero-mean inputs (the 7.9e3 "error" of mobilenet's old row, a running_mean of
norm 1e-17). The batch mean is measured in units of the channel's standard deviation (against
float64's), which is what a mean is worth to the normalization, and a gradient below 1e-3 of
the largest against 1e-3 of the largest (absolute, so a gross error there still shows).
"""
from __future__ import annotations

import math

import torch


def snapshot(model) -> dict[str, torch.Tensor]:
    """The buffers before a step (the running statistics' starting point)."""
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def _momentum(model) -> dict[str, float]:
    """buffer prefix -> momentum, for the BatchNorm-like modules with an exponential average."""
    out = {}
    for name, mod in model.named_modules():
        m = getattr(mod, "momentum", None)
        if isinstance(m, float) and m > 0 and getattr(mod, "running_mean", None) is not None \
                and getattr(mod, "running_var", None) is not None:
            out[f"{name}." if name else ""] = m
    return out


def capture(model, before: dict[str, torch.Tensor], loss, out=None) -> dict[str, torch.Tensor]:
    """The step's quantities by name, as float64 CPU tensors (integer buffers as they are)."""
    q = {"loss": loss.detach().double().cpu().reshape(-1)}
    if out is not None:
        q["out"] = out.detach().double().cpu()
    for n, p in model.named_parameters():
        if p.grad is not None:
            q[f"grad:{n}"] = p.grad.detach().double().cpu()
        elif p.requires_grad:
            q[f"grad:{n}"] = None           # a missing gradient fails the check
    moms = _momentum(model)
    for n, b in model.named_buffers():
        b0 = before[n]
        if not b.is_floating_point():
            q[f"int:{n}"] = b.detach().cpu().clone()
            continue
        a64, b64 = b.detach().double().cpu(), b0.double().cpu()
        prefix, leaf = n.rsplit(".", 1) if "." in n else ("", n)
        m = moms.get(f"{prefix}." if prefix else "")
        if m is not None and leaf in ("running_mean", "running_var"):
            kind = "bn-mean" if leaf == "running_mean" else "bn-var"
            q[f"{kind}:{prefix}"] = (a64 - (1 - m) * b64) / m
        else:
            q[f"buf:{n}"] = a64 - b64
    return q


def _err(a, b, scale=None) -> float:
    """||a - b|| / scale (default ||b||); NaN where a has NaNs b lacks, inf on a shape change
    or a missing tensor."""
    if a is None or b is None:
        # no gradient and an all-zero one are the same value (AOTAutograd gives zeros to the
        # parameters behind an output the loss does not use, eager leaves them None: BERT's
        # pooler; torch.compile(backend="aot_eager") does the same)
        other = b if a is None else a
        return 0.0 if other is None or not other.is_floating_point() or \
            not other.count_nonzero().item() else math.inf
    if not a.is_floating_point():
        return 0.0 if torch.equal(a, b) else math.inf
    if a.shape != b.shape:
        return math.inf
    if torch.isnan(a).sum() > torch.isnan(b).sum():
        return math.nan
    num = torch.linalg.vector_norm(torch.nan_to_num(a - b)).item()
    den = scale if scale is not None else torch.linalg.vector_norm(torch.nan_to_num(b)).item()
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


GRAD_FLOOR = 1e-3


def _top(ref: dict) -> float:
    """The largest gradient's norm."""
    return max((torch.linalg.vector_norm(g).item() for k, g in ref.items()
                if k.startswith("grad:") and g is not None), default=0.0)


def _scale(name: str, ref: dict, top: float | None = None) -> float | None:
    """A batch mean is measured against the channel's standard deviation; a gradient below
    GRAD_FLOOR of the largest against GRAD_FLOOR of the largest. Such a gradient is what is left
    of terms that cancel (densenet121's norm0.weight: BatchNorm follows it on every path, so it
    is zero but for eps, 1.4e-6 of the largest; eager's fp32 value is 2.4e-2 off float64's,
    ember's 0.15: its BatchNorm reductions are float32 where ATen's CPU kernel accumulates in
    double, 9e-7 against 6e-6 on a block's BatchNorm weight gradients with a random upstream
    gradient, where nothing cancels)."""
    if name.startswith("bn-mean:"):
        var = ref.get("bn-var:" + name.split(":", 1)[1])
        if var is not None:
            return torch.linalg.vector_norm(var.clamp(min=0).sqrt()).item()
    if name.startswith("grad:") and ref.get(name) is not None:
        top = _top(ref) if top is None else top
        return max(torch.linalg.vector_norm(ref[name]).item(), GRAD_FLOOR * top) or None
    return None


def compare(got: dict, eager: dict, ref64: dict | None, tol: float, factor: float = 1.5,
            chaos: float = 0.5, gross: float = 5.0, others: tuple = ()) -> dict:
    """Per quantity: `direct` (got vs eager), and with a float64 step `err` (got vs float64) and
    `eager_err` (eager vs float64; with `others`, eager steps of the model with its parameters
    moved by an ulp, the largest of their distances: one sample can miss a ReLU mask that any
    other rounding flips, densenet121's fp32 step by 7e-3 on a layer's gradients, where eager's
    own was 3e-5 and ember's and three perturbed eager steps' were 7e-3). A quantity is ok when
    direct <= tol or err <= factor * eager_err; NaN never passes. Where eager's own error is `chaos` or more (its value says
    little about the true one: regnet_y_400mf's bf16 gradients are 1.3 from float64, at cosine
    0.1), the quantity cannot be checked in this dtype: it is counted as `unverified` (the
    float32 step checks it) instead of passing or failing on chance (the rank-2 gradients of
    regnet's squeeze-excitation fc1 were 2.8x and 3.4x eager's error in two runs, where each
    block alone, compiled, is within 8e-3 of eager); beyond `gross` * eager_err it still fails
    (a gradient 10x too large). Returns {ok, rows, worst (name,
    direct), over_tol (rows beyond tol), unverified, worst_ratio (err / eager_err, name among
    the checked rows beyond tol), failed}."""
    rows = []
    base = ref64 if ref64 is not None else eager
    top = _top(base)
    for name in eager:
        a, b = got.get(name), eager[name]
        scale = _scale(name, base, top)
        direct = _err(a, b, scale)
        row = {"name": name, "direct": direct}
        ok = direct <= tol
        if not ok and ref64 is not None and name in ref64 and not name.startswith("int:") \
                and a is not None and not math.isinf(direct):
            r = ref64[name]
            row["err"] = _err(a, r, scale)
            row["eager_err"] = max([_err(b, r, scale)] + [_err(o.get(name), r, scale)
                                                          for o in others])
            ok = row["err"] <= factor * row["eager_err"]
            # chaotic: not checkable here, though a gross error (gross x eager's) still fails
            row["unverified"] = row["eager_err"] >= chaos and \
                row["err"] <= gross * row["eager_err"]
        row["ok"] = bool(ok) and not math.isnan(direct)
        rows.append(row)
    missing = [n for n in got if n not in eager]
    rows += [{"name": n, "direct": math.inf, "ok": False} for n in missing]
    over = [r for r in rows if not r["direct"] <= tol]
    worst = max(rows, key=lambda r: (math.isnan(r["direct"]), r["direct"]))
    ratios = [(r["err"] / r["eager_err"] if r["eager_err"] > 0 else math.inf, r["name"])
              for r in over if "err" in r and not r.get("unverified")]
    failed = [r["name"] for r in rows if not r["ok"] and not r.get("unverified")]
    return {"ok": not failed, "rows": rows, "worst": (worst["name"], worst["direct"]),
            "over_tol": len(over), "n": len(rows),
            "unverified": sum(bool(r.get("unverified")) for r in rows),
            "worst_ratio": max(ratios) if ratios else None, "failed": failed}
