"""eager vs inductor vs ember on the CPU: median ms, speed-up over eager, ember's error vs eager.

    python benchmarks/cpu_bench.py [--cases chain,softmax,layer_norm,mlp] [--backends ...]
                                   [--repeats 20] [--json results.json]

Cases (fp32, inference, torch.no_grad):
  chain       gelu(x*1.7+0.3)*sigmoid(x) over 2^22 elements (docs/design.md, 2-core CPU:
              eager 19.2 ms, inductor 1.5 ms)
  softmax     softmax over the last dim of 4096x1024
  layer_norm  layer_norm over the last dim of 4096x1024 (with weight and bias)
  mlp         Linear(1024,4096)-GELU-Linear(4096,1024)-LayerNorm(1024) on 64*128 = 8192 rows
              (`--mlp-rows` to change; the GPU table uses the same 64x128 tokens)
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (format_table, machine_info, prepare_backend, time_interleaved,  # noqa: E402
                    tolerance, write_json)


def chain(x):
    return F.gelu(x * 1.7 + 0.3) * torch.sigmoid(x)


def softmax(x):
    return torch.softmax(x, dim=-1)


class MLPBlock(nn.Module):
    def __init__(self, d=1024, h=4096):
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(d, h), nn.Linear(h, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(self.fc2(F.gelu(self.fc1(x))))


def cases(mlp_rows: int):
    """name -> (fn, args, matmul?)"""
    g = torch.Generator().manual_seed(0)
    x22 = torch.randn(2 ** 22, generator=g)
    x2d = torch.randn(4096, 1024, generator=g)
    ln = nn.LayerNorm(1024)
    with torch.no_grad():
        ln.weight.normal_(1.0, 0.1)
        ln.bias.normal_(0.0, 0.1)
    torch.manual_seed(0)
    mlp = MLPBlock().eval()
    return {
        "chain": (chain, (x22,), False),
        "softmax": (softmax, (x2d,), False),
        "layer_norm": (ln, (x2d,), False),
        "mlp": (mlp, (torch.randn(mlp_rows, 1024, generator=g),), True),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default="chain,softmax,layer_norm,mlp")
    ap.add_argument("--backends", default="eager,inductor,ember")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--mlp-rows", type=int, default=64 * 128)
    ap.add_argument("--target", default="cpu", help="ember target (cpu | triton)")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "ember" in backends:
        import ember  # noqa: F401  (the entry point registers it too; importing surfaces errors)
    all_cases = cases(args.mlp_rows)
    results = []
    for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
        fn, inputs, matmul = all_cases[name]
        with torch.no_grad():
            ref = fn(*inputs)
        prepared = []
        for backend in backends:
            opts = {"target": args.target} if backend == "ember" else None
            r, compiled = prepare_backend(name, backend, fn, inputs, ref, options=opts)
            if r.rel_err is not None and backend != "eager":
                r.extra["tolerance"] = tolerance(torch.float32, matmul)
                r.extra["ok"] = (r.rel_err < r.extra["tolerance"]
                                 and not r.extra.get("eager_fallback_ops"))
            prepared.append((r, compiled))
        # Backends are timed in alternation: load from other processes falls on all alike.
        time_interleaved(prepared, inputs, repeats=args.repeats)
        for r, _ in prepared:
            results.append(r)
            status = r.error or f"{r.ms:.3f} ms (first call {r.compile_s:.1f} s)"
            print(f"  {name:11s} {r.backend:9s} {status}", file=sys.stderr, flush=True)

    info = machine_info()
    print(f"CPU benchmark: torch {info['torch']}, {info['threads']} threads, median of "
          f"{args.repeats} (backends interleaved) after warm-up; rel. err = ||out-eager||/||eager||")
    print(format_table(results))
    if args.json:
        write_json(args.json, results, {**info, "mlp_rows": args.mlp_rows, "target": args.target})
        print(f"wrote {args.json}")
    bad = [r for r in results if r.backend == "ember" and (r.error or not r.extra.get("ok"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
