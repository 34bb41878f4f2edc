"""eager, Inductor and ember on the same models and inputs: `python -m ember.benchmarks`.

    python -m ember.benchmarks [--models mlp,resnet18,...] [--dtypes fp32,bf16]
                               [--mode inference|train] [--out DIR] [--profile] [--max-autotune]
                               [--repeats N] [--timeout S] [--no-warm] [--warm-shared]
                               [--backends ...]

Backends: eager, inductor (default mode), inductor-ro (mode="reduce-overhead", CUDA graphs: GPU
only), ember, and with --max-autotune inductor-ma and ember-ma (mode="max-autotune"); ember's
option variants by name (measure.EMBER_OPTIONS: ember-nchw, ember-cl, ember-fast, ember-tail0). Each model
runs in its own child process (a crash or hang in one does not hide the others), which compiles
every backend on the same model and inputs and times them in alternation (measure.py); then,
unless --no-warm, new children compile them again with the caches the first one filled (warm
start): one child per (dtype, backend), so that every row's warm seconds pay the process's
one-time costs (Dynamo's first trace, imports) as a warm start does; `--warm-shared`: one child
for them all (cheaper; then the first row pays those costs and the later ones do not). The caches (ember's, Inductor's, Triton's) are fresh per model, so `cold s` is a cold
compile.

Outputs: a progress bar (tqdm when installed, plain lines otherwise) on stderr; markdown tables
on stdout; with --out DIR: results.json, results.csv, rows.jsonl (appended as each model
finishes), speedup.png (matplotlib, when installed), one log per model, and with --profile
profile.md (the per-model breakdown of breakdown.py, ember and Inductor side by side).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from . import models, report
from .common import ensure_bytecode

GPU_DEFAULT = ("resnet18", "resnet50", "efficientnet_b0", "swin_t", "bert", "gpt2", "llama", "mlp")
CPU_DEFAULT = ("mlp", "transformer_block", "cnn")
DTYPE_ALIASES = {"fp32": "fp32", "float32": "fp32", "float": "fp32", "bf16": "bf16",
                 "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ember.benchmarks",
                                 description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="models: " + ", ".join(models.ALL))
    ap.add_argument("--models", default=None,
                    help=f"comma-separated (default: GPU {','.join(GPU_DEFAULT)}; "
                         f"CPU {','.join(CPU_DEFAULT)}); 'all' for every model")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16, fp16")
    ap.add_argument("--mode", choices=("inference", "train"), default="inference",
                    help="train: forward + backward (bf16/fp16: autocast, fp32 weights)")
    ap.add_argument("--backends", default=None,
                    help="comma-separated (default: eager,inductor,inductor-ro,ember on a GPU, "
                         "eager,inductor,ember on the CPU; --max-autotune adds inductor-ma, "
                         "ember-ma)")
    ap.add_argument("--max-autotune", action="store_true",
                    help="also mode='max-autotune' of Inductor (inductor-ma) and of ember "
                         "(ember-ma: a wider Triton configuration search)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    ap.add_argument("--size", choices=("full", "small"), default=None,
                    help="model sizes (default: full on a GPU, small on the CPU)")
    ap.add_argument("--out", default=None, help="directory for JSON, CSV, chart, logs")
    ap.add_argument("--profile", action="store_true",
                    help="per-model breakdown: library calls, generated kernels, copies, gaps")
    ap.add_argument("--repeats", type=int, default=20, help="timed rounds (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls per backend")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per model process")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm-start processes")
    ap.add_argument("--warm-shared", action="store_true",
                    help="one warm-start process for every (dtype, backend) of a model")
    ap.add_argument("--no-tf32", dest="tf32", action="store_false",
                    help="fp32 matmuls and convolutions without TF32 (default: TF32 on, as the "
                         "reference figures)")
    ap.add_argument("--cache-dir", default=None,
                    help="keep the compile caches here (default: a temporary directory)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device is None:
        import torch
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device == "cuda"
    if args.size is None:
        args.size = "full" if gpu else "small"
    args.small = args.size == "small"
    default = GPU_DEFAULT if gpu else CPU_DEFAULT
    names = default if args.models is None else \
        models.ALL if args.models == "all" else [m.strip() for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in models.ALL]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(models.ALL)}")
    args.models = list(names)
    try:
        args.dtypes = [DTYPE_ALIASES[d.strip()] for d in args.dtypes.split(",") if d.strip()]
    except KeyError as err:
        ap.error(f"unknown dtype {err}; use fp32, bf16 or fp16")
    if args.backends is None:
        bes = ["eager", "inductor"] + (["inductor-ro"] if gpu else []) + ["ember"]
    else:
        bes = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.max_autotune:       # both compilers' max-autotune, beside their defaults
        for extra, after in (("inductor-ma", "inductor-ro" if "inductor-ro" in bes else
                              "inductor"), ("ember-ma", "ember")):
            if extra not in bes and after in bes:
                bes.insert(bes.index(after) + 1, extra)
    known = report.ORDER
    if any(b not in known for b in bes):
        ap.error(f"unknown backend(s) {[b for b in bes if b not in known]}; known: {known}")
    if "eager" not in bes:
        bes.insert(0, "eager")      # every speed-up is over eager
    if not gpu and "inductor-ro" in bes:
        ap.error("inductor-ro (CUDA graphs) needs --device cuda")
    args.backends = bes
    return args


class Progress:
    """tqdm's bar when tqdm is installed, else one plain line per step (stderr)."""

    def __init__(self, total: int):
        try:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr)
        except ImportError:
            self.bar = None
        self.total, self.n = total, 0

    def step(self, what: str, advance: bool = True) -> None:
        if advance:
            self.n += 1
        if self.bar is not None:
            self.bar.set_description_str(what[:60])
            if advance:
                self.bar.update(1)
        else:
            print(f"[{self.n}/{self.total}] {what}", file=sys.stderr, flush=True)

    def finish_model(self, done_for_model: int, planned: int) -> None:
        """A model that stopped early (crash, timeout) moves the bar by its planned steps."""
        for _ in range(max(planned - done_for_model, 0)):
            self.n += 1
            if self.bar is not None:
                self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _child_env(cache: str) -> dict:
    """The child imports this ember and compiles into `cache` (fresh per model)."""
    import ember
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))
    if os.path.basename(os.path.dirname(os.path.abspath(ember.__file__))) == "ember":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    for var, sub in (("EMBER_CACHE_DIR", "ember"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                     ("TRITON_CACHE_DIR", "triton")):
        env[var] = os.path.join(cache, sub)
    return env


def _run_child(cmd, env, timeout, on_event, log):
    """Runs `cmd`, calling `on_event(dict)` per JSON event line; returns (exit code or
    "timeout", last stderr line). stderr goes to `log`."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    lines: queue.Queue = queue.Queue()

    def reader():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.05, min(1.0, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                return "timeout"
            continue
        if line is None:
            break
        if line.startswith('{"event"'):
            try:
                on_event(json.loads(line))
            except json.JSONDecodeError:
                pass
    return proc.wait()


def run(args) -> list[dict]:
    """Every model in its own processes; the rows (see measure.py) with warm_s merged in."""
    me = [sys.executable, "-m", __package__]
    common = ["--dtypes", ",".join(args.dtypes), "--mode", args.mode, "--backends",
              ",".join(args.backends), "--device", args.device, "--size", args.size,
              "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    common += [] if args.tf32 else ["--no-tf32"]
    common += ["--profile"] if args.profile else []
    compiled = [b for b in args.backends if b != "eager"]
    per_model = len(args.dtypes) * (len(args.backends) + 1) + \
        (0 if args.no_warm else len(args.dtypes) * len(compiled))
    bar = Progress(per_model * len(args.models))
    cache_root = args.cache_dir or tempfile.mkdtemp(prefix="ember-bench-cache-")
    rows: list[dict] = []
    try:
        for name in args.models:
            why = models.available(name)
            if why:
                got = [{"model": name, "label": name, "dtype": d, "mode": args.mode,
                        "backend": b, "status": "skipped", "error": why}
                       for d in args.dtypes for b in args.backends]
                bar.finish_model(0, per_model)
                bar.step(f"{name}: skipped ({why})", advance=False)
                rows += got
                _append_rows(args.out, got)
                continue
            got, warm, done = [], {}, [0]

            def on_event(ev, got=got, warm=warm, done=done):
                kind = ev.pop("event")
                if kind == "progress":
                    if ev.get("step"):
                        done[0] += 1
                    bar.step(ev["what"], advance=bool(ev.get("step")))
                elif kind == "row":
                    got.append(ev)
                elif kind == "warm":
                    warm[(ev["dtype"], ev["backend"])] = ev

            env = _child_env(os.path.join(cache_root, name))
            log = _log(args.out, name)
            rc = _run_child(me + ["--one", name] + common, env, args.timeout, on_event, log)
            if rc != 0:
                got += _crashed(name, args, rc, got, log)
            elif not args.no_warm and compiled:
                for dtypes, backends in warm_children(args.dtypes, compiled, args.warm_shared):
                    rc = _run_child(me + ["--one", name, "--warm-only"]
                                    + _with(common, dtypes=dtypes, backends=backends),
                                    env, args.timeout, on_event, log)
                    if rc != 0:
                        print(f"{name}: warm-start process ({','.join(dtypes)} "
                              f"{','.join(backends)}) ended with {rc}", file=sys.stderr)
            log.close()
            merge_warm(got, warm.values())
            bar.finish_model(done[0], per_model)
            rows += got
            _append_rows(args.out, got)
    finally:
        bar.close()
        if args.cache_dir is None:
            shutil.rmtree(cache_root, ignore_errors=True)
    return report.derive(rows)


def warm_children(dtypes, backends, shared: bool = False) -> list[tuple[list, list]]:
    """(dtypes, backends) of each warm-start process: one per (dtype, backend), or with
    `shared` one for all."""
    if shared:
        return [(list(dtypes), list(backends))]
    return [([d], [b]) for d in dtypes for b in backends]


def _with(argv: list[str], **values) -> list[str]:
    """`argv` with the value after `--NAME` replaced for each NAME=list given."""
    out = list(argv)
    for name, value in values.items():
        k = out.index(f"--{name}")
        out[k + 1] = ",".join(value)
    return out


def merge_warm(rows, warm_events) -> None:
    """Puts each warm-start event's seconds (and error) on its (dtype, backend) row."""
    by = {(w["dtype"], w["backend"]): w for w in warm_events}
    for r in rows:
        w = by.get((r["dtype"], r["backend"]))
        if w is not None:
            r["warm_s"] = w.get("warm_s")
            if w.get("error"):
                r["warm_error"] = w["error"]


def _log(out, name):
    if out:
        os.makedirs(os.path.join(out, "logs"), exist_ok=True)
        return open(os.path.join(out, "logs", f"{name}.log"), "w")
    return open(os.devnull, "w")


def _crashed(name, args, rc, got, log) -> list[dict]:
    """Rows for what the child did not report, saying how it ended."""
    have = {(r["dtype"], r["backend"]) for r in got}
    why = f"process {'timed out' if rc == 'timeout' else f'exited with {rc}'}"
    if log.name != os.devnull:
        why += f" (see logs/{name}.log)"
    return [{"model": name, "label": name, "dtype": d, "mode": args.mode, "backend": b,
             "status": "crashed", "error": why}
            for d in args.dtypes for b in args.backends if (d, b) not in have]


def _append_rows(out, rows) -> None:
    """rows.jsonl grows as each model finishes: a run cut short keeps what it measured."""
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "rows.jsonl"), "a") as f:
            f.writelines(json.dumps(r, default=str) + "\n" for r in rows)


def meta(args) -> dict:
    import platform
    import torch
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "device": torch.cuda.get_device_name() if args.device == "cuda" else
            f"CPU ({os.cpu_count()} cores)", "torch": torch.__version__,
            "python": platform.python_version(), "mode": args.mode, "size": args.size,
            "repeats": args.repeats, "tf32": args.tf32, "backends": args.backends}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
        info["commit"] = rev.stdout.strip() or None
    except OSError:
        pass
    return info


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.one:
        from .measure import main_child
        main_child(args)
        return 0
    ensure_bytecode()       # once, here: every model's process then imports ember from bytecode
    rows = run(args)
    info = meta(args)
    timing = "CUDA events" if args.device == "cuda" else "perf_counter"
    print(f"ember benchmarks, {info['date']}, {info['device']}, torch {info['torch']}, "
          f"{args.mode}, median of {args.repeats} ({timing}, backends interleaved)\n")
    print(report.summary_table(rows))
    print()
    print(report.detail_table(rows))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        report.write_json(os.path.join(args.out, "results.json"), rows, info)
        report.write_csv(os.path.join(args.out, "results.csv"), rows)
        wrote = ["results.json", "results.csv", "rows.jsonl"]
        if report.write_chart(os.path.join(args.out, "speedup.png"), rows):
            wrote.append("speedup.png")
        if args.profile:
            from .breakdown import markdown
            with open(os.path.join(args.out, "profile.md"), "w") as f:
                f.write(f"# Where the time goes ({info['date']}, {info['device']})\n\n")
                f.write(markdown(rows) + "\n")
            wrote.append("profile.md")
        print(f"\nwrote {', '.join(wrote)} in {args.out}", file=sys.stderr)
    if args.profile and not args.out:
        from .breakdown import markdown
        print("\n" + markdown(rows))
    return 0
