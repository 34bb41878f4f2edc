"""The differential fuzzer's long run (issue 9, item 2): random graphs through ember against eager.

    python benchmarks/fuzz_run.py --seed 0 --count 1000 --targets cpu,triton --jobs 2 --out fuzz-out

Graph (seed, i) for i in [start, start + count) runs on each target (with `--variants all`
also with fusion off and with the buffer planner off, each compared with eager) in a pool of
child processes (test/fuzz/runner.py; a crash or a hang is a finding). Prints graphs tried, mismatches, errors,
crashes and time; each failing case is written to --out as `seed<S>_<i>_<target>.py`: the
graph's source (a runnable reproducer) with the finding in its header, and each graph with an
eager fallback is a line of --out/fallbacks.jsonl (seed, index, target, op -> reason). A case
that passed by a named rule of the comparator (an eager quirk, or "eager-less-exact": ember at
least as close to the graph's float64 result as eager, test/fuzz/compare.py) is counted in the
summary and is a line of --out/accepted.jsonl with its reason. The last line is the summary:
seed, graphs, cases, mismatches, accepted differences, errors, crashes, timeouts, wall time
and the git commit of the tree. Exit status 1 if any failure.

Each worker is one thread (OMP_NUM_THREADS=1 and torch.set_num_threads(1): test/fuzz/runner.py),
so `--jobs` up to the machine's cores does not oversubscribe it; `--timeout` is per case,
measured in the worker from the case's start.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--start", type=int, default=0, help="first graph index")
    p.add_argument("--targets", default="cpu,triton")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    p.add_argument("--out", default="fuzz-out", help="folder for the reproducers")
    p.add_argument("--variants", default="",
                   help="also compile each graph with these variants and compare with eager: "
                        "nofuse (ember-fuse max-group-size=1), noplan (no ember-buffer-reuse); "
                        "'all' for both (issue 11, item 4)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "test"))
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from fuzz import runner

    from fuzz import compare
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    variants = compare.VARIANTS if args.variants == "all" else \
        tuple(v.strip() for v in args.variants.split(",") if v.strip())
    for v in variants:
        compare.variant_options(v, "cpu")   # an unknown name fails here, not in every worker
    cases = [(args.seed, i, t, variants) for i in range(args.start, args.start + args.count)
             for t in targets]
    out = Path(args.out)
    counts: collections.Counter = collections.Counter()
    seconds: collections.Counter = collections.Counter()
    ran: collections.Counter = collections.Counter()     # (target, variant) compiled
    fallback_ops = collections.defaultdict(collections.Counter)
    start = time.time()

    accepted: collections.Counter = collections.Counter()   # rule -> cases

    def on_result(r: dict) -> None:
        counts[(r["target"], r["status"])] += 1
        for note in r.get("accepted") or ():
            accepted[note.split("] ")[-1]] += 1
        if r.get("accepted"):
            out.mkdir(parents=True, exist_ok=True)
            with open(out / "accepted.jsonl", "a") as f:
                f.write(json.dumps({k: r.get(k) for k in ("seed", "index", "target",
                                                          "accepted", "reason")}) + "\n")
        for v in r.get("variants_run") or ():
            ran[(r["target"], v)] += 1
        seconds[r["target"]] += r.get("seconds", 0.0)
        if r["fallback"]:
            counts[(r["target"], "fallback")] += 1
            fallback_ops[r["target"]].update(set(r["fallback"]))
            # why each op ran eagerly, one line per graph (triage: benchmarks/README)
            out.mkdir(parents=True, exist_ok=True)
            with open(out / "fallbacks.jsonl", "a") as f:
                f.write(json.dumps({k: r.get(k) for k in ("seed", "index", "target",
                                                          "fallback_reasons")}) + "\n")
        if r["status"] in runner.FAILURES or r["status"] == "upstream":
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"seed{r['seed']}_{r['index']}_{r['target']}.py"
            header = "".join(f"# {ln}\n" for ln in
                             f"target={r['target']} status={r['status']}\n{r['reason']}".splitlines())
            options = {"target": r["target"]}
            failed = r["reason"][1:].split("]")[0] if r["reason"].startswith("[") else None
            if failed in compare.VARIANTS:
                options.update(compare.variant_options(failed, r["target"]))
            path.write_text(header + r["source"] + _FOOTER.format(options=options))
            print(f"{r['status']:8} {r['target']:6} seed={r['seed']} index={r['index']}: "
                  f"{r['reason'][:300]}", flush=True)
        elif not args.quiet and sum(counts.values()) % 100 == 0:
            print(f"... {sum(v for (t, s), v in counts.items() if s != 'fallback')} cases, "
                  f"{time.time() - start:.0f} s", flush=True)

    runner.run(cases, jobs=args.jobs, timeout=args.timeout, on_result=on_result)
    wall = time.time() - start
    failures = 0
    print(f"seed {args.seed}, graphs {args.start}..{args.start + args.count - 1}, "
          f"{args.jobs} jobs, {wall:.1f} s wall, variants: {', '.join(variants) or 'none'}")
    for t in targets:
        row = {s: counts[(t, s)] for s in ("pass", "upstream", *runner.FAILURES, "fallback")}
        tried = sum(row[s] for s in ("pass", "upstream", *runner.FAILURES))
        failures += sum(row[s] for s in runner.FAILURES)
        rate = tried / seconds[t] if seconds[t] else 0.0
        print(f"  {t:6}: {tried} graphs tried, {row['mismatch']} mismatches, {row['error']} "
              f"error mismatches, {row['crash']} crashes, {row['timeout']} timeouts "
              f"({row['fallback']} with an eager fallback, {row['upstream']} where "
              f"aot_eager differs from eager too); {seconds[t]:.1f} s in workers, "
              f"{rate:.2f} graphs/s per worker")
        if variants:
            text = ", ".join(f"{v} {ran[(t, v)]}" for v in variants)
            print(f"          variants compiled and compared (the others compile to the "
                  f"default's program): {text}")
        if fallback_ops[t]:
            top = ", ".join(f"{op} x{n}" for op, n in fallback_ops[t].most_common(8))
            print(f"          eager fallbacks (graphs): {top}")
    total = {s: sum(counts[(t, s)] for t in targets)
             for s in ("pass", "upstream", *runner.FAILURES)}
    rules = ", ".join(f"{k} {v}" for k, v in sorted(accepted.items())) or "none"
    print(f"SUMMARY seed={args.seed} graphs={args.count} ({args.start}..{args.start + args.count - 1}) "
          f"targets={','.join(targets)} variants={','.join(variants) or 'none'} "
          f"cases={sum(total.values())} mismatches={total['mismatch']} "
          f"eager-less-exact={accepted['eager-less-exact']} "
          f"accepted={sum(accepted.values())} ({rules}) errors={total['error']} "
          f"crashes={total['crash']} timeouts={total['timeout']} upstream={total['upstream']} "
          f"wall={wall:.0f}s jobs={args.jobs} commit={_commit()}", flush=True)
    return 1 if failures else 0


def _commit() -> str:
    """The tree's git commit, with '+dirty' when tracked files differ from it."""
    import subprocess
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


_FOOTER = '''

if __name__ == "__main__":
    ref = fn(*make_inputs())
    out = torch.compile(fn, backend="ember", options={options!r})(*make_inputs())
    print("eager:", ref)
    print("ember:", out)
'''

if __name__ == "__main__":
    sys.exit(main())
