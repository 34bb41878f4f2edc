"""Checks that a compile-time optimisation changed no output: compiles each model's first call
(cold_compile.py's stub: no kernel built) with two ember trees and compares every graph's
Program (kernel sources, steps, values, the pickle's sha256: cold_compile.program_text).

    python benchmarks/same_output.py --before /tmp/base --after /tmp/pp-branch \\
        [--models efficientnet_b0,resnet18,gpt2] [--modes train] [--small]

`--before` / `--after`: directories that hold the package as `ember` (on PYTHONPATH). Exits 1
and names the files that differ when any does."""
from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def sources(tree: str, model: str, mode: str, small: bool, out: str) -> None:
    env = dict(os.environ, PYTHONPATH=tree,
               EMBER_CACHE_DIR=tempfile.mkdtemp(prefix="same_output_cache_"))
    cmd = [sys.executable, os.path.join(HERE, "cold_compile.py"), "--one", f"{model}:{mode}",
           "--sources", out] + (["--small"] if small else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"{model} {mode}: the compile failed under {tree}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--models", default="efficientnet_b0,resnet18,gpt2")
    ap.add_argument("--modes", default="train")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args(argv)
    bad = 0
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            a, b = tempfile.mkdtemp(prefix="before_"), tempfile.mkdtemp(prefix="after_")
            sources(args.before, model, mode, args.small, a)
            sources(args.after, model, mode, args.small, b)
            names = sorted(set(os.listdir(a)) | set(os.listdir(b)))
            differ = [n for n in names if not (os.path.exists(os.path.join(a, n))
                                              and os.path.exists(os.path.join(b, n))
                                              and filecmp.cmp(os.path.join(a, n),
                                                              os.path.join(b, n), shallow=False))]
            print(f"{model} {mode}: {len(names)} programs, "
                  + ("identical" if not differ else f"DIFFER: {', '.join(differ)} ({a} {b})"),
                  flush=True)
            bad += bool(differ)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
