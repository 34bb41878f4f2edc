"""What ember's packed weights (CompileOptions.prepack_weights) and the encoder's short-sequence
attention as matmuls (frontend/transformer_decomp.py) are worth on the CPU.

    python benchmarks/weight_copies_bench.py [--rounds 40] [--clock cpu|wall] [--case encoder]
    OMP_NUM_THREADS=1 python benchmarks/weight_copies_bench.py --clock cpu   # load-robust

1. GEMMs alone, the encoder layer's four Linear shapes at 1024 rows: `mm(x, w.t())` (what a
   Linear reads), `mm(x, wt)` with `wt = w.t().contiguous()` (the kept copy) and MKL's packed
   GEMM (`_mkl_reorder_linear_weight` + `_mkl_linear`, Inductor's freezing), each bit-compared
   with the first.
2. A cpu_bench case (default `encoder`) compiled four ways: inductor; ember with
   prepack_weights=False and SDPA (main before enc19); packed weights and SDPA; ember's default
   (packed, attention as matmuls). One call of each per round, the order rotating; printed:
   each one's median ms and the median of the per-round ratios inductor / it with quartiles
   (pairing the calls of one round cancels the drift of a loaded machine), and its error.
   `--idle-only SECONDS` keeps only bursts of rounds run while the machine was otherwise idle
   (how RESULTS.md's enc19 two-thread figures were taken while other sessions ran).
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
import types

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


def _busy(dt: float = 0.5) -> float:
    """The machine's busy fraction over `dt` seconds (/proc/stat) while this process sleeps:
    the other processes' share."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)
    i0, t0 = snap()
    time.sleep(dt)
    i1, t1 = snap()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def _idle_rounds(fns: dict, rounds: int, clock, seconds: float, burst: int = 5) -> dict:
    """`_rounds` in bursts, each kept only when the machine was idle (< 8% busy) just before
    and just after it; gives up after `seconds` with what it has."""
    t, end = {k: [] for k in fns}, time.time() + seconds
    while len(t[next(iter(fns))]) < rounds and time.time() < end:
        if _busy() > 0.08:
            time.sleep(1)
            continue
        got = _rounds(fns, burst, clock)
        if _busy(0.3) <= 0.08:
            for k in t:
                t[k] += got[k]
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


def _fresh(fn):
    """A function calling `fn` with a code object of its own: Dynamo keys its cache on the
    code object and (nn modules inlined) not on the module, so each variant compiled from
    this gets its own graph instead of the first variant's."""
    def call(*a):
        return fn(*a)
    name = f"variant_{next(_COUNT)}"
    return types.FunctionType(call.__code__.replace(co_name=name), {"fn": fn, "__builtins__": __builtins__},
                              name, None, call.__closure__)


_COUNT = itertools.count()


def whole(case: str, rounds: int, clock, idle_seconds: float = 0) -> None:
    import ember  # noqa: F401
    from ember.frontend import transformer_decomp
    fn, args, _, _ = cases(64 * 128)[case]
    fns, outs = {}, {}
    variants = (("inductor", "inductor", None, None),
                ("ember, packing off, SDPA", "ember", {"prepack_weights": False}, 0),
                ("ember, packed, SDPA", "ember", {"prepack_weights": True}, 0),
                ("ember (default)", "ember", None, None))
    max_len = transformer_decomp.MATH_ATTENTION_MAX_LEN
    with torch.no_grad():
        ref = fn(*args)
        for name, backend, opts, att_len in variants:
            # the decomposition reads MATH_ATTENTION_MAX_LEN when it traces (0: always SDPA)
            transformer_decomp.MATH_ATTENTION_MAX_LEN = max_len if att_len is None else att_len
            try:
                c = torch.compile(_fresh(fn), backend=backend,
                                  **({"options": opts} if opts else {}))
                for _ in range(3):
                    outs[name] = c(*args)
            finally:
                transformer_decomp.MATH_ATTENTION_MAX_LEN = max_len
            fns[name] = (lambda c=c: c(*args))
        t = _idle_rounds(fns, rounds, clock, idle_seconds) if idle_seconds else \
            _rounds(fns, rounds, clock)
    if not t["inductor"]:
        print(f"{case}: the machine was never idle")
        return
    base = t["inductor"]
    print(f"{case}: median ms of {len(base)} rounds, inductor / this (median of per-round "
          "ratios, quartiles), rel. err vs eager")
    for name, v in t.items():
        err = ((outs[name] - ref).norm() / ref.norm()).item()
        print(f"  {name:26s} {statistics.median(v) * 1e3:8.3f}  {_ratio(base, v)}  {err:.2e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (with OMP_NUM_THREADS=1)")
    ap.add_argument("--case", default="encoder", help="a cpu_bench inference case")
    ap.add_argument("--no-gemms", action="store_true")
    ap.add_argument("--idle-only", type=float, default=0, metavar="SECONDS",
                    help="time the case's rounds in bursts of 5, each kept only when the "
                         "machine was idle before and after it (a shared machine), for at "
                         "most SECONDS")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, clock {args.clock}, "
          f"load average {[round(v, 2) for v in os.getloadavg()]}")
    if not args.no_gemms:
        gemms(args.rounds, clock)
    whole(args.case, args.rounds, clock, args.idle_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
