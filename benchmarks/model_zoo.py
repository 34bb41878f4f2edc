"""The model zoo: every model people commonly run, through ember, against eager (and Inductor).

    python benchmarks/model_zoo.py [--models resnet50,bert] [--modes infer-fp32,infer-bf16,train-bf16]
                                   [--backends ember,inductor,inductor-ro] [--small] [--out DIR]

Models are built from code or configs with random weights (nothing is downloaded):
torchvision resnet50, mobilenet_v3_large, efficientnet_b0, regnet_y_400mf, swin_t, densenet121;
transformers BERT-base, GPT-2 small, DistilBERT, a Llama decoder (LlamaForCausalLM from a small
LlamaConfig: RMSNorm, rotary embedding, SwiGLU, grouped-query causal attention) and the
Whisper-tiny encoder. A model whose package is missing is reported as skipped. On the CPU
machine, `pip install --no-deps torchvision==0.28.0 pillow` gives the models: the wheel's compiled
extension does not load beside torch's CPU build, and `common.import_torchvision` skips it.

Modes: `infer-fp32`, `infer-bf16` (inference under no_grad), `train-bf16` (autocast bf16 with
fp32 weights: forward + backward + one AdamW step, the optimizer step compiled too) and
`train-sgd` (fp32, SGD with momentum). For each, every backend is checked against eager and
timed in alternation with eager in the same process (median). Inference: the outputs. Training
(benchmarks/train_check.py; the vision models' loss is cross-entropy on fixed labels): the loss,
the output, every gradient and BatchNorm's batch statistics, before the optimizer step, each
within tol of eager or no further from a float64 step than 1.5x eager's own distance (a bf16
step of a deep BatchNorm network is chaotic in its rounding: two correct ones differ by as much
as either differs from float64); and the compiled optimizer step against eager's optimizer on
the same gradients.

One child process per model (`--one`), so a crash or hang in one model does not hide the others;
each prints one JSON line per (mode, backend), gathered into a table (and `DIR/zoo.json`).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ember_summary, flatten, interleaved_median_ms, rel_err, sync  # noqa: E402
import train_check  # noqa: E402
from models import TRANSFORMERS, build  # noqa: E402,F401  (build: the zoo's models, shared)

VISION = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "swin_t",
          "densenet121")
TEXT = TRANSFORMERS
MODES = ("infer-fp32", "infer-bf16", "train-bf16", "train-sgd")


def _first(out) -> list[torch.Tensor]:
    return [t for t in flatten(out if not hasattr(out, "to_tuple") else out.to_tuple())]


def _classification_loss(model, inputs):
    """Cross-entropy on fixed labels, as a classifier is trained (models.build's mean square of
    the logits seeds the backward with the logits themselves, noise and all)."""
    classes = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].out_features
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, classes, (inputs[0].shape[0],), generator=g).to(inputs[0].device)

    def loss(out):
        return F.cross_entropy(out.to(torch.promote_types(out.dtype, torch.float32)), labels)
    return loss


def _backend(name: str):
    if name == "ember":
        return lambda f: torch.compile(f, backend="ember")
    if name == "ember-triton":   # the GPU path's Triton kernels (interpreted on CPU tensors)
        return lambda f: torch.compile(f, backend="ember", options={"target": "triton"})
    if name == "inductor":
        return lambda f: torch.compile(f, backend="inductor")
    if name == "inductor-ro":
        return lambda f: torch.compile(f, backend="inductor", mode="reduce-overhead")
    raise KeyError(name)


def _train_fns(model, inputs, loss_fn, mode, compile_fn):
    """step(record=None) -> loss: one forward, backward and optimizer step; `compile_fn` wraps
    the model and the optimizer step (None: eager). With a dict `record`, the step leaves there
    what train_check compares ("q": loss, output, gradients and buffer updates, taken before
    the optimizer step) and what the optimizer did ("params" before, "grads", "after")."""
    bf16 = mode == "train-bf16"
    fwd = compile_fn(model) if compile_fn else model
    if mode == "train-sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    opt_step = compile_fn(opt.step) if compile_fn else opt.step
    params = [p for p in model.parameters() if p.requires_grad]

    def step(record=None):
        torch.manual_seed(0)    # dropout and stochastic depth draw the same masks on both sides
        opt.zero_grad(set_to_none=True)
        before = train_check.snapshot(model) if record is not None else None
        with torch.autocast(inputs[0].device.type, dtype=torch.bfloat16, enabled=bf16):
            out = fwd(*inputs)
            loss = loss_fn(out)
        loss.backward()
        if record is not None:
            record["q"] = train_check.capture(model, before, loss, _first(out)[0])
            record["params"] = [p.detach().clone() for p in params]
            record["grads"] = [None if p.grad is None else p.grad.detach().clone() for p in params]
        opt_step()
        if record is not None:
            record["after"] = [p.detach().clone() for p in params]
        return loss.detach()
    return step, opt


def _noise(check, eager_check) -> dict:
    """What the step's dtype lets the check see: eager's own distance from the float64 step
    (loss, output, median over gradients), and among the checked quantities beyond tol of
    eager the worst ratio of ember's distance from float64 to eager's."""
    by = {r["name"]: r["direct"] for r in eager_check["rows"]}
    grads = sorted(v for k, v in by.items() if k.startswith("grad:"))
    ratio = check["worst_ratio"]
    return {"eager_fp64": {"loss": by.get("loss"), "out": by.get("out"),
                           "grad_median": grads[len(grads) // 2] if grads else None},
            "worst_ratio": None if ratio is None else [round(ratio[0], 3), ratio[1]]}


def _perturbed_steps(base, inputs, loss_fn, mode, n=6) -> list[dict]:
    """Eager steps of the model with every parameter moved by about an ulp (a relative 2^-24
    normal draw): other roundings of the same step, as valid as eager's, for the spread of
    what the dtype can tell (train_check.compare's `others`). Six: with two, densenet121's
    fp32 step failed one run of two at x1.70 of the worst eager error on its last layer's
    gradients (x1.42 in the other), a ReLU mask away from any of three samples."""
    out = []
    for seed in range(n):
        model = copy.deepcopy(base).train()
        g = torch.Generator().manual_seed(100 + seed)
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point():
                    noise = torch.randn(p.shape, generator=g).to(p.device, p.dtype)
                    p.mul_(1 + 2.0 ** -24 * noise)
        rec = {}
        _train_fns(model, inputs, loss_fn, mode, None)[0](rec)
        out.append(rec["q"])
    return out


def _opt_err(record, opt) -> tuple[float, float]:
    """The compiled optimizer step against eager's optimizer applied to the same parameters and
    the same gradients (the compiled step's own), so that no gradient noise can hide or fake a
    difference (the first AdamW update is ~lr * sign(g): two gradients that differ near zero
    give updates that differ by a full step there). Returns (worst relative error of a
    parameter's update, worst element's difference over its bar: 4 ulps of the parameter plus
    1e-4 of its update). The bar allows the last-place rounding of a parameter (an update 1e-4
    of a parameter 1 is ~800 of its ulps) and the traced step's float32 bias corrections (eager
    takes `1 - beta2 ** step` in double: updates differ by ~7e-6 of themselves); a missing weight
    decay (1e-6 of the parameter with lr 1e-4, wd 1e-2: 8 ulps) is over it."""
    clones = [p.clone().requires_grad_(True) for p in record["params"]]
    for c, g in zip(clones, record["grads"]):
        c.grad = None if g is None else g.clone()
    hyper = {k: v for k, v in opt.param_groups[0].items() if k != "params"}
    ref = type(opt)([{"params": clones, **hyper}])
    ref.step()
    rel, over = 0.0, 0.0
    for got, c, p0 in zip(record["after"], clones, record["params"]):
        want = c.detach()
        if not want.numel():
            continue
        rel = max(rel, rel_err(got - p0, want - p0))
        # the ulp of the parameter's magnitude, before or after (an update may cross zero)
        mag = torch.maximum(want.abs(), p0.abs())
        bar = 4 * torch.finfo(want.dtype).eps * mag + 1e-4 * (want - p0).abs()
        over = max(over, ((got - want).abs() / bar.clamp(min=torch.finfo(want.dtype).tiny))
                   .max().item())
    return rel, over


def run_one(name: str, modes, backends, device: str, small: bool, repeats: int,
            tiny: bool = False) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        base, inputs, loss_fn = build(name, device, small, tiny)
        if name in VISION:
            loss_fn = _classification_loss(base, inputs)
    except ImportError as err:
        print(json.dumps({"model": name, "mode": "*", "backend": "*", "status": "skipped",
                          "error": f"{type(err).__name__}: {err}"}), flush=True)
        return
    for mode in modes:
        for be in backends:
            row = {"model": name, "mode": mode, "backend": be}
            try:
                row.update(_measure(base, inputs, loss_fn, mode, be, device, repeats))
            except Exception as err:  # noqa: BLE001 - a table reports, it does not stop
                row.update(status="error", error=f"{type(err).__name__}: {str(err)[:300]}")
                traceback.print_exc()       # into the model's log
            print(json.dumps(row), flush=True)


def _measure(base, inputs, loss_fn, mode, be, device, repeats) -> dict:
    torch._dynamo.reset()
    _clear()
    compile_fn = _backend(be)
    noise = None        # bf16: (backend, eager) relative error against fp32
    if mode.startswith("infer"):
        dtype = torch.bfloat16 if mode == "infer-bf16" else torch.float32
        model = copy.deepcopy(base).to(dtype).eval()
        ins = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
        compiled = compile_fn(model)
        with torch.no_grad():
            ref = _first(model(*ins))
            t0 = time.perf_counter()
            # cloned: Inductor's CUDA-graph outputs are overwritten by the next call
            out = [t.clone() for t in _first(compiled(*ins))]
            sync(device)
            first_s = time.perf_counter() - t0
            err = rel_err(out, ref)
            eager_ms, ms = _timed([lambda: model(*ins), lambda: compiled(*ins)], repeats, device)
        tol = 1e-2 if dtype == torch.bfloat16 else 1e-3
        if dtype == torch.bfloat16:
            with torch.no_grad():
                truth = _first(copy.deepcopy(base).eval()(*inputs))
            noise = (rel_err(out, truth), rel_err(ref, truth))
    else:
        ref_model, model = copy.deepcopy(base).train(), copy.deepcopy(base).train()
        ref_step, _ = _train_fns(ref_model, inputs, loss_fn, mode, None)
        step, opt = _train_fns(model, inputs, loss_fn, mode, compile_fn)
        rec_ref, rec = {}, {}
        ref_step(rec_ref)
        t0 = time.perf_counter()
        step(rec)
        sync(device)
        first_s = time.perf_counter() - t0
        # the float64 step: the scale of what the step's dtype can tell (train_check)
        model64 = copy.deepcopy(base).double().train()
        ins64 = tuple(t.double() if t.is_floating_point() else t for t in inputs)
        rec64 = {}
        _train_fns(model64, ins64, loss_fn, "train-fp64", None)[0](rec64)
        tol = 1e-2 if mode == "train-bf16" else 1e-3
        others = _perturbed_steps(base, inputs, loss_fn, mode)
        check = train_check.compare(rec["q"], rec_ref["q"], rec64["q"], tol, others=others)
        # the control: one valid rounding (a perturbed eager step) judged by the same check
        # against eager and the other perturbed steps: the worst ratio chance alone gives
        control = train_check.compare(others[-1], rec_ref["q"], rec64["q"], tol,
                                      others=others[:-1])
        err = check["worst"][1]
        opt_err, opt_over = _opt_err(rec, opt)
        eager_step_err = train_check.compare(rec_ref["q"], rec64["q"], None, tol)
        eager_ms, ms = _timed([ref_step, step], repeats, device)
    summary = ember_summary() if be.startswith("ember") else {}
    statuses = summary.get("statuses", [])
    status = ("eager" if statuses == ["eager"] else
              "partitioned" if "partitioned" in statuses or "eager" in statuses else "compiled")
    row = {"status": status if be.startswith("ember") else "compiled", "rel_err": err,
           "ok": bool(err <= tol)}
    if noise is not None:
        # ok also when ember's error against fp32 is within twice eager-bf16's own error.
        row.update(fp32_err=noise[0], eager_fp32_err=noise[1],
                   ok=bool(err <= tol or noise[0] <= 2 * noise[1]))
    if mode.startswith("train"):
        row.update(ok=bool(check["ok"] and opt_over <= 1), opt_err=opt_err, opt_over=opt_over,
                   worst=check["worst"][0], quantities=check["n"], over_tol=check["over_tol"],
                   unverified=check["unverified"],
                   failed=check["failed"][:20], **_noise(check, eager_step_err),
                   control_ratio=None if control["worst_ratio"] is None else
                   [round(control["worst_ratio"][0], 3), control["worst_ratio"][1]],
                   control_failed=len(control["failed"]))
    return {**row, "eager_ms": round(eager_ms, 3), "ms": round(ms, 3),
            "speedup": round(eager_ms / ms, 3), "first_call_s": round(first_s, 2),
            "fallback_ops": summary.get("eager_fallback_ops", []),
            "fallback_reasons": summary.get("fallback_reasons", {}),
            "stage_seconds": summary.get("stage_seconds", {}),
            "kernels": summary.get("kernels"),
            "graphs_dropped": summary.get("graphs_dropped", [])}


def _timed(fns, repeats, device):
    """Median ms of each of `fns` in alternation; `--repeats 0`: not timed (the interpreter)."""
    if repeats <= 0:
        return float("nan"), float("nan")
    return interleaved_median_ms(fns, repeats=repeats, device=device)


def _clear() -> None:
    try:
        import ember
        ember.clear_reports()
    except Exception:  # noqa: BLE001
        pass


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def _fp32(r) -> str:
    return f"{r['fp32_err']:.1e} ({r['eager_fp32_err']:.1e})" if "fp32_err" in r else ""


def _e(x) -> str:
    return "" if x is None else f"{x:.1e}"


def _train(r) -> str:
    """A training row's check: quantities beyond tol of eager, the worst ratio of ember's
    distance from the float64 step to eager's among them, eager's own distance (loss, output,
    median gradient) and the optimizer update's error."""
    if "quantities" not in r:
        return ""
    ratio = r.get("worst_ratio")
    n = f"{r['over_tol']}/{r['quantities']} beyond tol"
    if r.get("unverified"):
        n += f" ({r['unverified']} unverified: eager's own >= 0.5 from fp64)"
    if ratio:
        n += f", worst x{ratio[0]:.2f} of eager's fp64 error ({ratio[1]})"
    control = r.get("control_ratio")
    if control:     # a perturbed eager step judged alike: what chance alone scores
        n += f" (a valid rounding: x{control[0]:.2f})"
    e = r["eager_fp64"]
    return (f"{n}; eager vs fp64: loss {_e(e['loss'])}, out {_e(e['out'])}, grad median "
            f"{_e(e['grad_median'])}; optimizer {r['opt_err']:.0e} "
            f"(x{r['opt_over']:.2f} of its bar)")


def table(rows) -> str:
    lines = ["| model | mode | backend | status | fallbacks | rel err | vs fp32 (eager's) / "
             "training check | ok | eager ms | ms | x eager | first s |",
             "| --- | --- | --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("status") in ("error", "skipped", "crashed"):
            lines.append(f"| {r['model']} | {r['mode']} | {r['backend']} | {r['status']} | | | | | | | | "
                         f"{r.get('error', '')[:90]} |")
            continue
        lines.append(f"| {r['model']} | {r['mode']} | {r['backend']} | {r['status']} | "
                     f"{len(r['fallback_ops'])} | {r['rel_err']:.1e} | {_fp32(r) or _train(r)} | "
                     f"{'yes' if r['ok'] else 'NO'} | "
                     f"{r['eager_ms']} | {r['ms']} | {r['speedup']} | {r['first_call_s']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(VISION + TEXT))
    ap.add_argument("--modes", default="infer-fp32,infer-bf16,train-bf16")
    ap.add_argument("--backends", default="ember,inductor,inductor-ro")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="small sizes (the CPU machine)")
    ap.add_argument("--tiny", action="store_true",
                    help="batch 1, smallest sizes (backend ember-triton under the interpreter)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per model")
    ap.add_argument("--out", default=None, help="directory for zoo.json and the logs")
    ap.add_argument("--jobs", type=int, default=1, help="models run at once (timings: 1)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    modes, backends = args.modes.split(","), args.backends.split(",")
    if "ember-triton" in backends and args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")     # before triton is imported
    if any(b.startswith("ember") for b in backends):
        import torch_mlir  # noqa: F401  -- without it every ember row would silently run eagerly
    if args.one:
        run_one(args.one, modes, backends, args.device, args.small, args.repeats, args.tiny)
        return
    def child(name):
        cmd = [sys.executable, __file__, "--one", name, "--modes", args.modes, "--backends",
               args.backends, "--device", args.device, "--repeats", str(args.repeats)]
        cmd += ["--small"] if args.small else []
        cmd += ["--tiny"] if args.tiny else []
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out, err, rc = _text(exc.stdout), _text(exc.stderr), "timeout"
        got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if rc != 0:
            last = err.strip().splitlines()[-1] if err.strip() else ""
            got.append({"model": name, "mode": "*", "backend": "*", "status": "crashed",
                        "error": f"exit {rc}: {last}"})
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, f"{name}.log"), "w") as f:
                f.write(err)
        for r in got:
            print(json.dumps(r), flush=True)
        if args.out:        # rows as each model finishes: a run cut short keeps what it measured
            with open(os.path.join(args.out, "rows.jsonl"), "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in got)
        return got

    # --jobs > 1 runs models side by side: for finding failures fast, not for timings.
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = [r for got in pool.map(child, args.models.split(",")) for r in got]
    print(table(rows))
    if args.out:
        with open(os.path.join(args.out, "zoo.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
