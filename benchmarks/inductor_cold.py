"""Inductor's cold compile of a model's first call on this machine, for comparison with
cold_compile.py's per-stage figures for ember (the same models, sizes and bf16-autocast training
step).

    python benchmarks/inductor_cold.py [--models resnet18,efficientnet_b0] [--modes train]
                                       [--runs 3] [--small] [--json FILE]

Each run is a fresh process with a fresh, empty TORCHINDUCTOR_CACHE_DIR (and Triton cache),
`torch._inductor.config` at its defaults, `torch.compile(model)` (Inductor, default mode) on this
machine's device (the CPU here: Inductor's C++ code generator and compiler). Figures, in CPU
seconds of the process and every process it waited for (Inductor's compile workers and the C++
compiler included):

  first      the first call (training: forward, loss and backward) end to end
  second     the same call again (compiled code only)
  compile    first - second: what compiling cost beside running the step once
  inductor   Inductor's compile of each forward and backward graph (compile_fx_inner: the
             lowering, code generation and the C++/Triton compiles it waits for)
  aot        the rest of Inductor's backend call: AOTAutograd (shared with ember)
  dynamo     compile - inductor - aot: Dynamo's tracing and the rest (shared with ember)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def one_run(name: str, mode: str, small: bool) -> dict:
    import torch
    import torch._inductor.compile_fx as cfx
    from models import FULL_TEXT_SHAPE, build
    shape = None if small else FULL_TEXT_SHAPE.get(name)
    model, inputs, loss_fn = build(name, "cpu", small=small, text_shape=shape)
    model = model.train() if mode == "train" else model.eval()
    times = {"backend": 0.0, "inner": 0.0, "inner_in_backend": 0.0}
    depth = [0]

    def timed_inner(*a, **kw):   # each forward / backward graph's Inductor compile
        t0 = _cpu()
        try:
            return cfx.compile_fx_inner(*a, **kw)
        finally:
            dt = _cpu() - t0
            times["inner"] += dt
            if depth[0]:
                times["inner_in_backend"] += dt

    def timed_compile_fx(gm, example_inputs):
        t0 = _cpu()
        depth[0] += 1
        try:
            return cfx.compile_fx(gm, example_inputs, inner_compile=timed_inner)
        finally:
            depth[0] -= 1
            times["backend"] += _cpu() - t0
    def step(fn):
        if mode == "infer":
            with torch.no_grad():
                fn(*inputs)
            return
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(fn(*inputs))
        loss.backward()
    fn = torch.compile(model, backend=timed_compile_fx)
    t0 = _cpu()
    step(fn)
    first = _cpu() - t0
    t0 = _cpu()
    step(fn)
    second = _cpu() - t0
    return {"model": name, "mode": mode, "first": first, "second": second,
            "compile": first - second, "inductor": times["inner"],
            "aot": times["backend"] - times["inner_in_backend"],
            "dynamo": first - second - times["inner"]
            - (times["backend"] - times["inner_in_backend"])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,efficientnet_b0")
    ap.add_argument("--modes", default="train")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        name, mode = args.one.split(":")
        sys.stdout.write("ROW " + json.dumps(one_run(name, mode, args.small)) + "\n")
        return
    rows = []
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            runs = []
            for i in range(args.runs):
                env = dict(os.environ)
                env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_cold_")
                env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_cold_triton_")
                cmd = [sys.executable, os.path.abspath(__file__), "--one", f"{name}:{mode}"]
                if args.small:
                    cmd.append("--small")
                k0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
                out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                line = [x for x in out.stdout.splitlines() if x.startswith("ROW ")]
                if not line:
                    sys.stderr.write(out.stderr[-3000:])
                    raise SystemExit(f"{name} {mode}: the child failed")
                r = json.loads(line[0][4:])
                r["process_cpu"] = (k1.ru_utime + k1.ru_stime) - (k0.ru_utime + k0.ru_stime)
                r["wall"] = time.monotonic() - w0
                runs.append(r)
                print(f"{name:<16} {mode:<6} run {i}: first {r['first']:7.2f} second "
                      f"{r['second']:7.2f} compile {r['compile']:7.2f} (inductor "
                      f"{r['inductor']:7.2f}, aot {r['aot']:6.2f}, dynamo {r['dynamo']:6.2f}) process CPU "
                      f"{r['process_cpu']:7.2f} wall {r['wall']:7.2f}", flush=True)
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("first", "second", "compile", "inductor", "aot", "dynamo",
                             "process_cpu")}
            med.update(model=name, mode=mode, runs=runs)
            rows.append(med)
            print(f"{name:<16} {mode:<6} median: compile {med['compile']:.2f} (inductor "
                  f"{med['inductor']:.2f}, aot {med['aot']:.2f}, dynamo {med['dynamo']:.2f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
