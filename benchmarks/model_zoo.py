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
`train-sgd` (fp32, SGD with momentum). For each, every backend is checked against eager
(outputs; for training the loss, every gradient and every updated parameter, the worst
relative error is shown) and timed in alternation with eager in the same process (median).

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ember_summary, flatten, interleaved_median_ms, rel_err, sync  # noqa: E402
from common import train_err as _train_err  # noqa: E402
from models import TRANSFORMERS, build  # noqa: E402,F401  (build: the zoo's models, shared)

VISION = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "swin_t",
          "densenet121")
TEXT = TRANSFORMERS
MODES = ("infer-fp32", "infer-bf16", "train-bf16", "train-sgd")


def _first(out) -> list[torch.Tensor]:
    return [t for t in flatten(out if not hasattr(out, "to_tuple") else out.to_tuple())]


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
    """step() -> (loss, grads, params after the step): one forward, backward and optimizer
    step; `compile_fn` wraps the model and the optimizer step (None: eager)."""
    bf16 = mode == "train-bf16"
    fwd = compile_fn(model) if compile_fn else model
    if mode == "train-sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    opt_step = compile_fn(opt.step) if compile_fn else opt.step

    def step():
        torch.manual_seed(0)    # dropout and stochastic depth draw the same masks on both sides
        opt.zero_grad(set_to_none=True)
        with torch.autocast(inputs[0].device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(fwd(*inputs))
        loss.backward()
        opt_step()
        return loss.detach()
    return step, opt


def run_one(name: str, modes, backends, device: str, small: bool, repeats: int,
            tiny: bool = False) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        base, inputs, loss_fn = build(name, device, small, tiny)
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
        step, _ = _train_fns(model, inputs, loss_fn, mode, compile_fn)
        ref_loss = ref_step()
        t0 = time.perf_counter()
        loss = step()
        sync(device)
        first_s = time.perf_counter() - t0
        err = _train_err(model, ref_model, loss, ref_loss)
        if mode == "train-bf16":
            # fp32 (no autocast) gradients: bf16 rounding differences, amplified through deep
            # networks and training-mode BatchNorm, make two bf16 runs differ by more than 1e-2
            # per gradient; ember is then judged by being no less accurate than eager.
            fp32_model = copy.deepcopy(base).train()
            truth_loss = _train_fns(fp32_model, inputs, loss_fn, "train-fp32", None)[0]()
            noise = (_train_err(model, fp32_model, loss, truth_loss),
                     _train_err(ref_model, fp32_model, ref_loss, truth_loss))
        eager_ms, ms = _timed([ref_step, step], repeats, device)
        tol = 1e-2
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
    return {**row, "eager_ms": round(eager_ms, 3), "ms": round(ms, 3),
            "speedup": round(eager_ms / ms, 3), "first_call_s": round(first_s, 2),
            "fallback_ops": summary.get("eager_fallback_ops", []),
            "fallback_reasons": summary.get("fallback_reasons", {}),
            "stage_seconds": summary.get("stage_seconds", {}),
            "kernels": summary.get("kernels")}


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


def table(rows) -> str:
    lines = ["| model | mode | backend | status | fallbacks | rel err | vs fp32 (eager's) | ok | eager ms "
             "| ms | x eager | first s |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("status") in ("error", "skipped", "crashed"):
            lines.append(f"| {r['model']} | {r['mode']} | {r['backend']} | {r['status']} | | | | | | | | "
                         f"{r.get('error', '')[:90]} |")
            continue
        lines.append(f"| {r['model']} | {r['mode']} | {r['backend']} | {r['status']} | "
                     f"{len(r['fallback_ops'])} | {r['rel_err']:.1e} | {_fp32(r)} | "
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
