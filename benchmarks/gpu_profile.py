"""Where a model's time goes under ember on a GPU, and how far bf16 drifts from fp32.

    python benchmarks/gpu_profile.py --out DIR [--models gpt,bert] [--dtypes float32,bfloat16]

For each model and dtype: compiles with ember (debug dump under DIR/<case>/), prints what the
compile reports say (graphs, statuses, kernels, externs, library calls, eager fallbacks, CUDA
graphs), the median time of eager and ember, the GPU-busy time per call from torch.profiler
(kernel time summed; wall minus busy is host overhead) and the top GPU kernels. For bf16 it also
prints each backend's error against the same model in fp32 (the precision bf16 can reach), beside
the error against eager bf16 that gpu_bench.py reports.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from gpu_bench import _busy_ms, _median_ms, _models, _rel_err  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="gpt,bert")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    import ember
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    results = []
    for name, build in _models():
        if not any(m.lower() in name.lower() for m in args.models.split(",")):
            continue
        for tag in args.dtypes.split(","):
            dtype = getattr(torch, tag)
            case = f"{name.split()[0]}-{tag}"
            torch.manual_seed(0)
            model, inputs = build(dtype)
            row = {"case": case}
            with torch.no_grad():
                ref = model(*inputs)
                if dtype != torch.float32:
                    model32 = type(model)(model.config).eval().cuda() if hasattr(model, "config") \
                        else None
                    if model32 is not None:
                        model32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
                        ref32 = model32(*inputs)
                        row["eager_vs_fp32"] = _rel_err(ref, ref32)
                        del model32
                torch._dynamo.reset()
                ember.clear_reports()
                compiled = torch.compile(model, backend="ember",
                                         options={"debug_dir": os.path.join(args.out, case)})
                t0 = time.perf_counter()
                out = compiled(*inputs)
                torch.cuda.synchronize()
                row["compile_s"] = round(time.perf_counter() - t0, 1)
                row["ember_vs_eager"] = _rel_err(out, ref)
                if "eager_vs_fp32" in row:
                    row["ember_vs_fp32"] = _rel_err(out, ref32)
                reps = ember.last_reports()
                row["graphs"] = [{k: r.get(k) for k in ("graph_id", "status", "num_kernels",
                                                        "num_externs", "library_calls",
                                                        "eager_fallback_ops", "cudagraphs",
                                                        "compile_seconds")} for r in reps]
                row["eager_ms"] = _median_ms(lambda: model(*inputs), args.reps)
                row["ember_ms"] = _median_ms(lambda: compiled(*inputs), args.reps)
                busy, top = _busy_ms(lambda: compiled(*inputs))
                row["ember_gpu_busy_ms"] = round(busy, 3)
                row["ember_top_kernels"] = [(k[:70], round(ms, 4), n) for k, ms, n in top]
                busy_e, top_e = _busy_ms(lambda: model(*inputs))
                row["eager_gpu_busy_ms"] = round(busy_e, 3)
                row["eager_top_kernels"] = [(k[:70], round(ms, 4), n) for k, ms, n in top_e]
            print(json.dumps(row, indent=1, default=str), flush=True)
            results.append(row)
            del model, compiled
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "profile.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
