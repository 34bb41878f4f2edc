"""Warm-start seconds per stage: a new process compiling models whose compiled programs are in
the cache (issue 12: at most 1 s per graph).

    python benchmarks/warm_start.py [--models mlp,llama,gpt2] [--target cpu|triton]
                                    [--backend ember|inductor] [--runs 3] [--json FILE]

One cold process fills a fresh cache (EMBER_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR in a temporary
directory), then `--runs` warm processes compile the same models again, in the given order:
the first model of a process pays the process's one-time costs, the later ones do not. Small
models (models.build(small=True)), inference, CPU seconds of the process (`time.process_time`:
the machine is shared). `--target triton`: ember's frontend and passes for the GPU, with
`runtime.executor.load` stubbed as in kernel_count.py (no kernel is built or loaded). Stages:

  imports     `import ember` and the modules a compile imports (ember only)
  decomp      ember's decomposition table (once per process)
  aot         AOTAutograd (for Inductor: its whole compile_fx, which skips AOTAutograd's tracing
              on a hit of its AOTAutogradCache)
  build       ember's compile of the graph (EmberGraph._build: on a warm start the program
              cache's key and lookup, FX preparation, the runtime's load)
  run         the first run of the compiled graph (ember; the stub's eager run for triton)
  dynamo      what is left of the first call: Dynamo's tracing and guards
  first_call  the first call, end to end
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_WARM_PATH = ("ember.frontend.backend", "ember.frontend.program_cache", "ember.runtime.executor",
              "ember.frontend.library_calls")


def _timed(owner, attr: str, acc: dict, label: str) -> None:
    from common import outer_timer     # (on the path once one_process set it)
    acc.setdefault(label, 0.0)

    def add(seconds):
        acc[label] += seconds
    setattr(owner, attr, outer_timer(getattr(owner, attr), add, time.process_time))


def one_process(models: list[str], target: str, backend: str) -> list[dict]:
    import importlib
    import torch
    import torch._dynamo.backends.common as common
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from models import build
    torch.set_num_threads(1)
    acc: dict[str, float] = {}
    imports = 0.0
    if backend == "ember":
        t0 = time.process_time()
        import ember
        for name in _WARM_PATH:
            importlib.import_module(name)
        imports = time.process_time() - t0
        import ember.frontend.backend as eb
        from ember.frontend.compile import EmberGraph
        _timed(eb, "decomposition_table", acc, "decomp")
        _timed(EmberGraph, "_build", acc, "build")
        _timed(EmberGraph, "__call__", acc, "graph_call")
    real_aot = common.aot_autograd

    def timed_aot(**kw):
        inner = real_aot(**kw)

        def run(gm, example_inputs):
            t0 = time.process_time()
            try:
                return inner(gm, example_inputs)
            finally:
                acc["aot"] = acc.get("aot", 0.0) + time.process_time() - t0
        return run
    if backend == "ember":
        common.aot_autograd = timed_aot
    else:   # (compile_fx calls AOTAutograd itself)
        import torch._inductor.compile_fx as cfx
        _timed(cfx, "compile_fx", acc, "aot")
    stub = contextlib.nullcontext()
    if backend == "ember" and target == "triton":
        from kernel_count import compile_only
        stub = compile_only([])
    rows = []
    with stub:
        for i, name in enumerate(models):
            model, inputs, _ = build(name, "cpu", small=True)
            model = model.eval()
            for k in acc:
                acc[k] = 0.0
            options = {"options": {"target": target}} if backend == "ember" else {}
            fn = torch.compile(model, backend=backend, **options)
            t0 = time.process_time()
            with torch.no_grad():
                fn(*inputs)
            first = time.process_time() - t0
            caches = []
            if backend == "ember":
                caches = [r.get("program_cache") for r in ember.last_reports()
                          if "compile_seconds" in r]
                ember.clear_reports()
            row = {"model": name, "position": "first" if i == 0 else "later",
                   "first_call": first, "imports": imports if i == 0 else 0.0,
                   "decomp": acc.get("decomp", 0.0), "aot": acc.get("aot", 0.0),
                   "build": acc.get("build", 0.0),
                   "run": acc.get("graph_call", 0.0) - acc.get("build", 0.0),
                   "program_cache": caches}
            row["dynamo"] = first - row["decomp"] - row["aot"] - row["build"] - row["run"]
            rows.append(row)
    return rows


STAGES = ("imports", "decomp", "dynamo", "aot", "build", "run", "first_call")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,llama,gpt2")
    ap.add_argument("--target", default="cpu", choices=("cpu", "triton"))
    ap.add_argument("--backend", default="ember", choices=("ember", "inductor"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    models = args.models.split(",")
    if args.child:
        rows = one_process(models, args.target, args.backend)
        sys.stdout.write("ROWS " + json.dumps(rows) + "\n")
        return
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--models", args.models,
           "--target", args.target, "--backend", args.backend]
    runs: dict[str, list] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="ember-warm-") as tmp:
        env = {**os.environ, "EMBER_CACHE_DIR": os.path.join(tmp, "ember"),
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
               "EMBER_PROGRAM_CACHE": "1"}
        for phase, n in (("cold", 1), ("warm", args.runs)):
            for _ in range(n):
                out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                line = [x for x in out.stdout.splitlines() if x.startswith("ROWS ")]
                if not line:
                    sys.stderr.write(out.stderr[-3000:])
                    raise SystemExit(f"{phase}: the child failed")
                runs[phase].append(json.loads(line[0][5:]))
    print(f"{args.backend} {args.target}, CPU seconds (warm: median of {args.runs})")
    print("| phase | graph | " + " | ".join(STAGES) + " | program cache |")
    print("| --- | --- | " + " | ".join("---:" for _ in STAGES) + " | --- |")
    table = []
    for phase, procs in runs.items():
        for k, name in enumerate(models):
            rows = [p[k] for p in procs]
            med = {s: statistics.median(r[s] for r in rows) for s in STAGES}
            med.update(phase=phase, model=name, position=rows[0]["position"],
                       program_cache=rows[0]["program_cache"])
            table.append(med)
            print(f"| {phase} | {name} ({med['position']}) | "
                  + " | ".join(f"{med[s]:.3f}" for s in STAGES)
                  + f" | {','.join(map(str, med['program_cache']))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": table, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
