"""What ember's kept transposed weight copies (CompileOptions.prepack_weights) are worth on the CPU.

    python benchmarks/weight_copies_bench.py [--rounds 40] [--clock cpu|wall] [--case encoder]
    OMP_NUM_THREADS=1 python benchmarks/weight_copies_bench.py --clock cpu   # load-robust

1. GEMMs alone, the encoder layer's four Linear shapes at 1024 rows: `mm(x, w.t())` (what a
   Linear reads), `mm(x, wt)` with `wt = w.t().contiguous()` (the kept copy) and MKL's packed
   GEMM (`_mkl_reorder_linear_weight` + `_mkl_linear`, Inductor's freezing), each bit-compared
   with the first.
2. A cpu_bench case (default `encoder`) compiled three ways: inductor, ember with
   prepack_weights=False, ember with True. One call of each per round, the order rotating;
   printed: each one's median ms and the median of the per-round ratios with its quartiles
   (pairing the calls of one round cancels the drift of a loaded machine).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_bench import cases  # noqa: E402


def _rounds(fns: dict, rounds: int, clock) -> dict:
    names, t = list(fns), {k: [] for k in fns}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            s = clock()
            fns[name]()
            t[name].append(clock() - s)
    return t


def _ratio(a: list, b: list) -> str:
    r = sorted(x / y for x, y in zip(a, b))
    n = len(r)
    return f"{statistics.median(r):.3f} (quartiles {r[n // 4]:.3f}-{r[(3 * n) // 4]:.3f})"


def gemms(rounds: int, clock) -> None:
    print("GEMMs, 1024 rows (median ms; ratio = mm(x, w.t()) / this, per round):")
    g = torch.Generator().manual_seed(0)
    m = 1024
    for name, (k, n) in {"qkv": (512, 1536), "out": (512, 512), "fc1": (512, 2048),
                         "fc2": (2048, 512)}.items():
        x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) * 0.05
        wt, out = w.t().contiguous(), torch.empty(m, n)
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
        fns = {"mm(x, w.t())": lambda: torch.mm(x, w.t(), out=out),
               "mm(x, wt)": lambda: torch.mm(x, wt, out=out),
               "mkl packed": lambda: torch.ops.mkl._mkl_linear(x, packed, w, None, m)}
        ref = torch.mm(x, w.t())
        same = {"mm(x, wt)": torch.equal(torch.mm(x, wt), ref),
                "mkl packed": torch.equal(torch.ops.mkl._mkl_linear(x, packed, w, None, m), ref)}
        for f in fns.values():
            f()
        t = _rounds(fns, rounds, clock)
        base = t["mm(x, w.t())"]
        print(f"  {name} ({k} x {n}): " + "; ".join(
            f"{f} {statistics.median(v) * 1e3:.3f}" + ("" if f not in same else
                                                       f" x{_ratio(base, v)}"
                                                       f"{'' if same[f] else ' NOT bit-equal'}")
            for f, v in t.items()))


def whole(case: str, rounds: int, clock) -> None:
    import ember  # noqa: F401
    fn, args, _, _ = cases(64 * 128)[case]
    fns = {}
    with torch.no_grad():
        for name, backend, opts in (("inductor", "inductor", None),
                                    ("ember, copies off", "ember", {"prepack_weights": False}),
                                    ("ember, copies on", "ember", {"prepack_weights": True})):
            torch._dynamo.reset()
            c = torch.compile(fn, backend=backend, **({"options": opts} if opts else {}))
            for _ in range(3):
                c(*args)
            fns[name] = (lambda c=c: c(*args))
        same = torch.equal(fns["ember, copies off"](), fns["ember, copies on"]())
        t = _rounds(fns, rounds, clock)
    print(f"{case} (median ms): " + "; ".join(f"{k} {statistics.median(v) * 1e3:.3f}"
                                              for k, v in t.items()))
    print(f"  copies on vs off bit-equal: {same}")
    print(f"  inductor / ember off {_ratio(t['inductor'], t['ember, copies off'])}")
    print(f"  inductor / ember on  {_ratio(t['inductor'], t['ember, copies on'])}")
    print(f"  ember off / ember on {_ratio(t['ember, copies off'], t['ember, copies on'])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (with OMP_NUM_THREADS=1)")
    ap.add_argument("--case", default="encoder", help="a cpu_bench inference case")
    ap.add_argument("--no-gemms", action="store_true")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, clock {args.clock}, "
          f"load average {[round(v, 2) for v in os.getloadavg()]}")
    if not args.no_gemms:
        gemms(args.rounds, clock)
    whole(args.case, args.rounds, clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
