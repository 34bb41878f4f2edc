"""The operator conformance sweep: PyTorch's OpInfo database (op_db) through torch.compile,
ember and Inductor against eager, every case in a child process (crash = a result).

    python benchmarks/opdb_sweep.py --backend ember,inductor --jobs 2 --limit-samples 2 \
        --ops 'add|mul|nn.functional.*' --json out.json [--zero-size] [--resume out.json]
    python benchmarks/opdb_sweep.py --backend ember --dtypes float32 --modes '' --zero-size \
        --target triton --jobs 1 --json zero-triton.json   # the GPU program, interpreted

Prints one row per op / variant / dtype with each backend's status per mode (fwd, bwd, zero),
the failures with their reasons, the totals per backend (pass / mismatch / error / fell back /
crash / timeout / skip over (op, variant, dtype, mode) cases) and the headline: the share of
the cases Inductor passes that ember passes. Harness and statuses: test/pytest/opdb_harness.py;
the CI shard over a fixed subset: test/pytest/test_opdb.py.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test" / "pytest"))

import opdb_harness as H  # noqa: E402
from opdb_pool import Pool  # noqa: E402

COLUMNS = ("pass", "mismatch", "error", "fallback", "crash", "timeout", "skip")


def select_cases(args) -> list[dict]:
    import torch
    ops = sorted(H.op_table().items())
    if args.ops:
        pat = re.compile(args.ops)
        ops = [(k, op) for k, op in ops if pat.fullmatch(k[0]) or pat.fullmatch(".".join(k).strip("."))]
    if args.max_ops and len(ops) > args.max_ops:  # an even spread over the alphabet
        step = len(ops) / args.max_ops
        ops = [ops[int(i * step)] for i in range(args.max_ops)]
    modes = [m for m in args.modes.split(",") if m] + (["zero"] if args.zero_size else [])
    cases = []
    for (name, variant), op in ops:
        supported = op.supported_dtypes("cpu")
        for dtype in args.dtypes.split(","):
            if getattr(torch, dtype) not in supported:
                continue
            for mode in modes:
                if mode == "bwd" and not (op.supports_autograd and getattr(torch, dtype)
                                          in op.supported_backward_dtypes("cpu")):
                    continue
                if mode == "zero" and dtype != args.dtypes.split(",")[0]:
                    continue  # shapes, not dtypes, are what the zero-size sweep varies
                for backend in args.backend.split(","):
                    cases.append(dict(backend=backend, op=name, variant=variant, dtype=dtype,
                                      mode=mode, limit=args.limit_samples, target=args.target))
    return cases


def key(r):
    return (r["backend"], r["op"], r["variant"], r["dtype"], r["mode"])


def print_table(results: list[dict], backends: list[str]) -> None:
    rows = collections.OrderedDict()
    for r in sorted(results, key=lambda r: (r["op"], r["variant"], r["dtype"])):
        rows.setdefault((r["op"], r["variant"], r["dtype"]), {})[(r["backend"], r["mode"])] = r
    modes = [m for m in ("fwd", "bwd", "zero") if any(r["mode"] == m for r in results)]
    head = f"{'op':34} {'variant':22} {'dtype':9} " + " ".join(
        f"{b + ':' + '/'.join(modes):>28}" for b in backends)
    print(head)
    print("-" * len(head))
    for (op, variant, dtype), by in rows.items():
        cells = []
        for b in backends:
            cells.append("/".join(by[(b, m)]["status"] if (b, m) in by else "-" for m in modes))
        print(f"{op[:34]:34} {variant[:22]:22} {dtype:9} " + " ".join(f"{c:>28}" for c in cells))


def print_failures(results: list[dict]) -> None:
    bad = [r for r in results if r["status"] not in ("pass", "skip")]
    if not bad:
        return
    print("\nfailures (backend op[.variant]-dtype-mode: status: reason)")
    for r in sorted(bad, key=lambda r: (r["backend"], r["status"], r["op"])):
        print(f"  {r['backend']:8} {H.case_id(r)}: {r['status']}: {r['reason'][:400]}")


def totals(results: list[dict], backends: list[str]) -> dict:
    out = {}
    print(f"\ntotals over (op, variant, dtype, mode) cases\n{'backend':9} {'mode':5} " +
          " ".join(f"{c:>9}" for c in COLUMNS))
    for b in backends:
        for mode in sorted({r["mode"] for r in results}) + ["all"]:
            rs = [r for r in results if r["backend"] == b and mode in ("all", r["mode"])]
            count = collections.Counter(r["status"] for r in rs)
            out[f"{b}/{mode}"] = {c: count.get(c, 0) for c in COLUMNS}
            print(f"{b:9} {mode:5} " + " ".join(f"{count.get(c, 0):>9}" for c in COLUMNS))
    return out


def headline(results: list[dict]) -> dict | None:
    by = {key(r): r for r in results}
    base = [k for k in by if k[0] == "inductor" and by[k]["status"] == "pass"
            and k[4] != "zero" and ("ember",) + k[1:] in by]
    if not base:
        return None
    ember = [by[("ember",) + k[1:]]["status"] for k in base]
    strict = sum(s == "pass" for s in ember)
    lenient = sum(s in ("pass", "fallback") for s in ember)
    n = len(base)
    print(f"\nember passes {100 * strict / n:.1f}% of the {n} fwd/bwd cases inductor passes "
          f"({strict}/{n}; with clean fallbacks counted as correct: {100 * lenient / n:.1f}%)")
    return {"inductor_pass": n, "ember_pass": strict, "ember_pass_or_fallback": lenient}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backend", default="ember", help="comma-separated: ember,inductor")
    p.add_argument("--ops", default="", help="regex over op names (or name.variant), full match")
    p.add_argument("--max-ops", type=int, default=0, help="an even sample of this many op variants")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--modes", default="fwd,bwd", help="fwd, bwd (zero: see --zero-size)")
    p.add_argument("--zero-size", action="store_true",
                   help="also zero-size / 0-dim / broadcast-to-zero inputs (mode 'zero')")
    p.add_argument("--target", default="cpu", choices=("cpu", "triton"),
                   help="ember's target; triton runs the GPU program under TRITON_INTERPRET=1")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--limit-samples", type=int, default=3, help="samples per case")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per case")
    p.add_argument("--json", default="", help="write every case's result here (as they finish)")
    p.add_argument("--resume", default="", help="a previous --json: its cases are not run again")
    p.add_argument("--quiet", action="store_true", help="no line per finished case")
    args = p.parse_args(argv)
    backends = args.backend.split(",")
    if args.target == "triton":
        os.environ["TRITON_INTERPRET"] = "1"  # read by the spawned workers as triton imports
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          os.path.join(os.environ.get("EMBER_CACHE_DIR", "/tmp"), "inductor"))

    cases = select_cases(args)
    done = []
    if args.resume and os.path.exists(args.resume):
        done = json.load(open(args.resume))["results"]
        seen = {key(r) for r in done}
        cases = [c for c in cases if key(c) not in seen]
    print(f"{len(cases)} cases to run ({len(done)} from {args.resume or 'nothing'})", flush=True)
    results = list(done)
    start = time.time()

    def save(final=False):
        if args.json:
            data = {"argv": sys.argv[1:], "seconds": round(time.time() - start, 1),
                    "complete": final, "results": results}
            if final:
                data["totals"] = totals_
                data["headline"] = headline_
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(data, f, indent=0, default=str)
            os.replace(tmp, args.json)

    def on_result(r):
        results.append(r)
        if not args.quiet:
            print(f"[{len(results) - len(done)}/{len(cases)} {time.time() - start:.0f}s] "
                  f"{r['backend']} {H.case_id(r)}: {r['status']} {r['reason'][:160]}", flush=True)
        if len(results) % 10 == 0:
            save()

    totals_ = headline_ = None
    Pool(jobs=args.jobs, timeout=args.timeout).run(cases, on_result)
    print()
    print_table(results, backends)
    print_failures(results)
    totals_ = totals(results, backends)
    headline_ = headline(results)
    print(f"\n{len(results)} cases, {time.time() - start:.0f} s")
    save(final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
