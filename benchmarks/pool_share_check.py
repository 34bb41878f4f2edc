"""A training step's CUDA-graph pools with and without sharing (issue 11: the graph pool is the
arena): per model, the eager step, then ember with `shared_graph_pool` on and off, each from
the same weights and inputs.

    python benchmarks/pool_share_check.py                       # resnet18, gpt2, mlp
    python benchmarks/pool_share_check.py --models gpt2 --optimizer adamw --compile-optimizer

A step is the harness's training step (benchmarks/measure.py: bf16 autocast over fp32
parameters, the model's loss, backward) and an optimizer step (`--optimizer`, eager unless
`--compile-optimizer`), after zeroing the gradients (set_to_none). Per setting it prints:
  * per compiled graph: `graph_pool_bytes` (what its capture added to its pool), whether it
    was graphed, `ungraphed_calls` (replays given up: a live alias), `shared_pool_bytes`;
  * pools: the graphs' pool bytes summed (a shared pool once);
  * peak: max_memory_allocated over steady-state steps above what was allocated before the
    setting's first step (a pool's free blocks are not allocated memory);
  * reserved / reserved_peak: torch.cuda.memory_reserved (and its peak) above the same base,
    after emptying the cache (every pool once, with its free blocks);
  * step ms: median of `--repeats` steps timed with CUDA events;
  * params vs eager: the largest absolute difference of the parameters after `--steps` steps
    (warm-up, captures and replays among them) from eager's; and, for sharing on, the same
    against sharing off, which must be 0 (the same kernels; only where memory lies differs;
    unless Triton's autotuning picked other configurations in the two compiles).
`--json FILE` writes the rows.
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys

import torch

try:
    from .models import FULL_TEXT_SHAPE, build
except ImportError:     # run as a script
    from models import FULL_TEXT_SHAPE, build

MB = 2 ** 20


def _optimizer(kind: str, model):
    if kind == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-3)
    return torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)


def _stepper(model, fwd, inputs, loss_fn, opt_step, opt):
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(fwd(*inputs))
        loss.backward()
        opt_step()
        return loss.detach()
    return step


def _graphs() -> list[dict]:
    import ember
    keys = ("graph_id", "status", "cudagraphs", "graph_pool_bytes", "shared_pool_bytes",
            "shared_pool_graphs", "ungraphed_calls")
    return [{k: r[k] for k in keys if k in r} for r in ember.last_reports()]


def run_setting(name, base, inputs, loss_fn, setting, args):
    """One setting ("eager", "shared", "private"): its figures and final parameters (CPU)."""
    import ember
    torch._dynamo.reset()
    ember.clear_reports()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_alloc = torch.cuda.memory_allocated()
    base_reserved = torch.cuda.memory_reserved()
    model = copy.deepcopy(base).train()
    opt = _optimizer(args.optimizer, model)
    fwd = model
    opt_step = opt.step
    if setting != "eager":
        options = {"shared_graph_pool": setting == "shared"}
        fwd = torch.compile(model, backend="ember", options=options)
        if args.compile_optimizer:
            opt_step = torch.compile(opt.step, backend="ember", options=options)
    step = _stepper(model, fwd, inputs, loss_fn, opt_step, opt)
    losses = [float(step()) for _ in range(args.steps)]
    torch.cuda.synchronize()
    params = [p.detach().float().cpu() for p in model.parameters()]
    for _ in range(3):      # steady state, then the measured steps
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    row = {"model": name, "setting": setting, "losses": losses,
           "peak_mb": round((torch.cuda.max_memory_allocated() - base_alloc) / MB, 2),
           "reserved_mb": round((torch.cuda.memory_reserved() - base_reserved) / MB, 2),
           "reserved_peak_mb": round((torch.cuda.max_memory_reserved() - base_reserved) / MB, 2),
           "step_ms": round(statistics.median(times), 4)}
    if setting != "eager":
        graphs = _graphs()
        row["graphs"] = graphs
        row["pools_mb"] = round(sum(g.get("graph_pool_bytes", 0) for g in graphs) / MB, 2)
        row["ungraphed_calls"] = sum(g.get("ungraphed_calls", 0) for g in graphs)
    del step, fwd, opt_step, opt, model
    torch._dynamo.reset()
    gc.collect()
    return row, params


def _max_diff(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def check_model(name, args) -> list[dict]:
    base, inputs, loss_fn = build(name, "cuda", text_shape=FULL_TEXT_SHAPE.get(name))
    rows, params = [], {}
    for setting in ("eager", "shared", "private"):
        try:
            row, params[setting] = run_setting(name, base, inputs, loss_fn, setting, args)
        except Exception as err:    # noqa: BLE001 - report the row, go on
            row = {"model": name, "setting": setting,
                   "error": f"{type(err).__name__}: {str(err)[:300]}"}
        if setting in params and setting != "eager" and "eager" in params:
            row["params_vs_eager"] = _max_diff(params[setting], params["eager"])
        rows.append(row)
    if "shared" in params and "private" in params:
        rows[1]["params_vs_private"] = _max_diff(params["shared"], params["private"])
    return rows


def _print(rows) -> None:
    for row in rows:
        head = f"{row['model']:10s} {row['setting']:8s}"
        if "error" in row:
            print(f"{head} error: {row['error']}")
            continue
        extra = ""
        if "pools_mb" in row:
            extra = (f" pools {row['pools_mb']:9.2f} MB  ungraphed {row['ungraphed_calls']}"
                     f"  params vs eager {row['params_vs_eager']:.3e}")
            if "params_vs_private" in row:
                extra += f"  vs private {row['params_vs_private']:.3e}"
        print(f"{head} peak {row['peak_mb']:9.2f} MB  reserved {row['reserved_mb']:9.2f} MB "
              f"(peak {row['reserved_peak_mb']:9.2f})  step {row['step_ms']:8.3f} ms{extra}")
        for g in row.get("graphs", []):
            print("    " + ", ".join(f"{k}={v}" for k, v in g.items()))
    sys.stdout.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,gpt2,mlp")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    ap.add_argument("--compile-optimizer", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("pool_share_check: needs a CUDA device")
        return 2
    all_rows = []
    for name in args.models.split(","):
        rows = check_model(name.strip(), args)
        _print(rows)
        all_rows += rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_rows, f, indent=1)
    bad = [r for r in all_rows if r.get("params_vs_private", 0) != 0]
    if bad:     # (or Triton's autotuning chose other configurations in the two compiles)
        print("MISMATCH: sharing on and off gave different parameters: "
              + ", ".join(r["model"] for r in bad))
    return 1 if bad or any("error" in r for r in all_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
