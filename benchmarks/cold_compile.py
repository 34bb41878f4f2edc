"""Cold compile seconds per stage, ember's own part (no kernel is built: runtime.executor.load is
stubbed as in kernel_count.py, so the figures hold on the CPU machine for the GPU's code
generator).

    python benchmarks/cold_compile.py [--models bert,gpt2] [--modes infer,train]
                                      [--runs 3] [--small] [--json FILE] [--sources DIR]

Each run is a fresh process (a cold start: nothing of ember's, Dynamo's or torch-mlir's is
warm; the program cache is off) that compiles the model's first call with
`options={"target": "triton", "program_cache": False}` (a training step: forward, loss and
backward; `infer`: the forward under no_grad). Stages, in seconds:

  step        the first call (training: forward + backward) end to end
  dynamo      Dynamo's tracing and the rest of torch around the graphs (what is left of step)
  aot         AOTAutograd (decomposition, joint tracing, partitioning), inside the backend call
  eager       the stub's eager run of each graph (not a compile cost; subtracted from step)
  ember       ember's compile of every graph (EmberGraph._build), split into its report's
              stage_seconds: fx_prep, import (torch-mlir), each pass, export, build (stubbed)

`--clock cpu` measures every stage in this process's CPU seconds (time.perf_counter is made
time.process_time in the child, ember's stage timers included): on a machine shared with other
jobs, wall seconds measure the neighbours as much as the compile. `step_wall` is wall time
either way.

With `--triton` the child then compiles, one at a time in this process, every Triton compile
request that the first call of each graph's Program would send to the compile workers
(runtime/triton_warm.compile_requests: every autotuning configuration) for an H100/H200
(`GPUTarget("cuda", 90, 32)`, a stand-in driver: no GPU needed), into an empty Triton cache:
`triton` is their CPU seconds (this process's and ptxas's), `triton_requests` their number,
`triton_shared` the kernels bound to an earlier one, `triton_first` the first request's seconds (Triton's own first-use cost in a process, beside
its compile), `triton_rr16` / `triton_queue16` / `triton_lpt16` the seconds those compiles would take on 16
workers (per graph, summed) with request k on worker k % 16 (compile_pool before cold18),
from a queue in launch order, longest first; `triton_pool16` as this tree's compile_pool
hands them out (a queue, its estimated longest first); the same on 8 workers (`..8`);
`triton_slowest` the slowest requests (seconds, graph, kernel, constexprs),
`triton_distinct` the number left when kernels that differ only in their name and
module are counted once (what a compile shared across graphs would leave). The kernels are bound
as the runtime binds them (runtime/py_module.share_identical_kernels; `--no-share`: as before it).

With `--requests` besides, the child only counts those requests (`triton_requests`,
`triton_kernels`, and `triton_per_kernel`: how many kernels send 1, 2, ... requests, one per
autotuning configuration kept) and builds none: seconds, not minutes.

`--one MODEL:MODE --profile FILE` writes a cProfile of ember's compiles alone (pstats format).

With `--sources DIR` each graph's Program (kernel sources, schedule) is written to DIR, to
prove that an optimisation changed no output (diff two such directories).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_count import compile_only  # noqa: E402
from models import FULL_TEXT_SHAPE, build  # noqa: E402


def program_text(program) -> str:
    """Everything a Program holds that the runtime uses, as text: the kernel source, then each
    field (a long one as its sha256), then the sha256 of the pickled Program."""
    import dataclasses
    import hashlib
    import pickle

    def short(text: str) -> str:
        return text if len(text) < 2000 else "sha256 " + hashlib.sha256(text.encode()).hexdigest()
    out = [program.source]
    for f in dataclasses.fields(program):
        if f.name == "source":
            continue
        v = getattr(program, f.name)
        if isinstance(v, list) and f.name in ("values", "steps"):
            out += [f"{f.name}[{i}]: {short(repr(x))}" for i, x in enumerate(v)]
        else:
            out.append(f"{f.name}: {short(repr(v))}")
    out.append("pickle: " + hashlib.sha256(pickle.dumps(program, protocol=4)).hexdigest())
    return "\n".join(out) + "\n"


def _launches(program) -> list:
    """[(launcher name, [(shape, torch dtype, pointer offset)])] of a Program's first call, as
    runtime/executor.CompiledProgram._precompile builds them (a view's offset is its root's)."""
    view_src = {s.outputs[0]: s.inputs[0] for s in program.steps if s.kind == "view"}

    def root(v):
        while v in view_src:
            v = view_src[v]
        return v
    launches, seen = [], set()
    for s in program.steps:
        if s.kind != "kernel":
            continue
        args = [(tuple(program.values[i].shape), getattr(torch, program.values[i].dtype),
                 program.values[root(i)].offset or 0) for i in tuple(s.inputs) + tuple(s.outputs)]
        key = (s.name, tuple((a[0], str(a[1]), a[2] % 16) for a in args))
        if key not in seen:
            seen.add(key)
            launches.append((s.name, args))
    return launches


def _sm90_here(prefix: str) -> None:
    """Triton builds for sm_90 on this machine, into an empty cache of its own: no
    interpreter, a stand-in driver that names the target."""
    import tempfile
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=prefix)
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class FakeDriver:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)
    driver.set_active(FakeDriver())


def triton_compile_cost(programs: list, share: bool = True, build: bool = True) -> dict:
    """Compiles each Program's compile requests for sm_90 here, one at a time (see __doc__);
    `build=False` only counts them (`triton_requests`, and `triton_per_kernel`: how many
    kernels send 1, 2, ... requests)."""
    import hashlib
    import re
    import resource
    import tempfile
    _sm90_here("cold_compile_triton_")
    from ember.runtime import py_module, triton_warm
    share = share and hasattr(py_module, "share_identical_kernels")

    def cpu():
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + c.ru_utime + c.ru_stime
    out = {"triton": 0.0, "triton_requests": 0, "triton_first": None, "triton_find": 0.0,
           "triton_errors": 0, "triton_shared": 0, "triton_each": []}
    distinct = set()
    slowest: list = []     # (seconds, graph, kernel, constexprs) of every request
    tmp = tempfile.mkdtemp(prefix="cold_compile_src_")
    for k, program in enumerate(programs):
        if program.lang != "python" or not program.kernel_names:
            continue
        modname = f"ember_cold_{k}_" + hashlib.sha256(program.source.encode()).hexdigest()[:12]
        path = os.path.join(tmp, modname + ".py")
        with open(path, "w") as f:
            f.write(program.source)
        mod = triton_warm.load_as(program.source, path, modname)
        if share:   # as runtime/py_module.load_python_module binds them
            out["triton_shared"] += len(py_module.share_identical_kernels(mod))
        t0 = cpu()
        requests = triton_warm.compile_requests(mod, _launches(program), "cuda")
        out["triton_find_requests"] = out.get("triton_find_requests", 0.0) + cpu() - t0
        # as triton_warm.precompile: what Triton's cache holds already (an earlier graph's
        # kernel, bound here by share_identical_kernels) is not compiled again
        requests = [r for r in requests if not triton_warm.in_triton_cache(mod, *r)]
        out["triton_find"] += cpu() - t0
        each = []
        out["triton_each"].append(each)
        # the order this tree's compile_pool hands them out in (a queue, longest estimated
        # first), where it has one: triton_pool8/16 below
        ordered = triton_warm.longest_first(program.source, requests) \
            if hasattr(triton_warm, "longest_first") else None
        secs: dict = {}
        out.setdefault("triton_order", []).append((ordered, secs))
        if not build:
            out["triton_order"].pop()
            per = out.setdefault("triton_per_kernel", {})
            for n in __import__("collections").Counter(r[0] for r in requests).values():
                per[n] = per.get(n, 0) + 1
            out["triton_requests"] += len(requests)
            out["triton_kernels"] = out.get("triton_kernels", 0) + len({r[0] for r in requests})
            out.setdefault("triton_first", 0.0)
            continue
        for fn_name, spec in requests:
            jit = triton_warm._jit(getattr(mod, fn_name))
            body = re.sub(r"\b%s\b" % re.escape(fn_name), "K", jit.src) if jit else fn_name
            obj = json.loads(spec)
            obj.pop("name", None)
            obj.pop("key", None)
            distinct.add((body, json.dumps(obj, sort_keys=True)))
            t0 = cpu()
            try:
                triton_warm.compile_request(mod, fn_name, spec)
            except Exception:   # noqa: BLE001 -- counted; the launch would compile it again
                out["triton_errors"] += 1
            dt = cpu() - t0
            if out["triton_first"] is None:
                out["triton_first"] = dt
            out["triton"] += dt
            out["triton_requests"] += 1
            each.append(dt)
            secs[(fn_name, spec)] = dt
            slowest.append((round(dt, 2), k, fn_name, obj.get("constants")))
            out.setdefault("triton_all", []).append((round(dt, 3), k, fn_name,
                                                     obj.get("constants")))
    out["triton_distinct"] = len(distinct)
    # the slowest requests: one can be a graph's whole precompile on 16 workers (swin_t's
    # backward: 24 column sums over an unrolled 64-row window, 91 s)
    out["triton_slowest"] = sorted(slowest, key=lambda x: -x[0])[:8]
    orders = out.pop("triton_order", [])
    for jobs in (8, 16):
        # as this tree's pool assigns them: a queue in its order, else request k to worker k % jobs
        out[f"triton_pool{jobs}"] = sum(
            _makespan([secs[r] for r in ordered], jobs, "queue") if ordered is not None
            else _makespan(list(secs.values()), jobs, "static") for ordered, secs in orders)
        out[f"triton_rr{jobs}"] = sum(_makespan(e, jobs, "static") for e in out["triton_each"])
        out[f"triton_queue{jobs}"] = sum(_makespan(e, jobs, "queue") for e in out["triton_each"])
        out[f"triton_lpt{jobs}"] = sum(_makespan(e, jobs, "lpt") for e in out["triton_each"])
    return out


def pool_compile_cost(programs: list, jobs: int, settle: float = 5.0) -> dict:
    """Each Program's precompile through the runtime's own worker pool of `jobs` workers
    (runtime/triton_warm.compile_pool: whatever assignment the tree under test has), for sm_90
    into an empty Triton cache, as a GPU process's first call would: the pool started (with
    its warm-up where the tree has one), `settle` seconds for the workers' start (the parent
    traces meanwhile on a GPU host), then each graph's requests; wall seconds per graph, and
    the CPU seconds of the workers."""
    import hashlib
    import resource
    import tempfile
    _sm90_here("cold_compile_pool_")
    from ember.runtime import py_module, triton_warm
    try:
        pool = triton_warm.start_pool(jobs, warmup="cuda:90:32")
    except TypeError:       # a tree without the warm-up
        pool = triton_warm.start_pool(jobs)
    time.sleep(settle)
    out = {"pool_jobs": jobs, "pool_wall": [], "pool_errors": 0}
    tmp = tempfile.mkdtemp(prefix="cold_compile_pool_src_")
    for k, program in enumerate(programs):
        if program.lang != "python" or not program.kernel_names:
            continue
        modname = f"ember_pool_{k}_" + hashlib.sha256(program.source.encode()).hexdigest()[:12]
        path = os.path.join(tmp, modname + ".py")
        with open(path, "w") as f:
            f.write(program.source)
        mod = triton_warm.load_as(program.source, path, modname)
        py_module.share_identical_kernels(mod)
        requests = triton_warm.compile_requests(mod, _launches(program), "cuda")
        send = [r for r in requests if not triton_warm.in_triton_cache(mod, *r)
                and not triton_warm.foreign(mod, r[0])]
        w0 = time.monotonic()
        res = triton_warm.compile_pool(program.source, path, modname, send, jobs)
        out["pool_wall"].append(round(time.monotonic() - w0, 3))
        out["pool_errors"] += len(res["errors"])
    pool.close()
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["pool_worker_cpu"] = c.ru_utime + c.ru_stime
    return out


def _makespan(costs: list, jobs: int, how: str) -> float:
    """The seconds one graph's precompile would take on `jobs` workers given each request's
    serial seconds: `static` as runtime/triton_warm.compile_pool assigns them (request k to
    worker k % jobs), `queue` each request to the first worker free (in order), `lpt` the
    longest first to the least loaded (a bound a scheduler that knew the costs could reach)."""
    if not costs:
        return 0.0
    if how == "static":
        return max(sum(costs[k::jobs]) for k in range(jobs))
    import heapq
    order = sorted(costs, reverse=True) if how == "lpt" else costs
    load = [0.0] * jobs
    for c in order:
        heapq.heapreplace(load, load[0] + c)
    return max(load)


def one_run(name: str, mode: str, small: bool, sources: str | None, clock: str = "wall",
            debug_dir: str | None = None, triton: bool = False, share: bool = True,
            profile: str | None = None, pool: int = 0, options: dict | None = None,
            build_kernels: bool = True) -> dict:
    if clock == "cpu":
        time.perf_counter = time.process_time
    import ember
    from ember.frontend.backend import ember_backend
    import torch._dynamo.backends.common as common

    torch._dynamo.reset()
    shape = None if small else FULL_TEXT_SHAPE.get(name)
    model, inputs, loss_fn = build(name, "cpu", small=small, text_shape=shape)
    model = model.train() if mode == "train" else model.eval()
    times = {"aot": 0.0, "backend": 0.0, "eager": 0.0, "gc": 0.0, "gc_ember": 0.0}
    gc_start = []
    in_ember = [0]

    def on_gc(phase, info):
        if phase == "start":
            gc_start.append(time.perf_counter())
        elif gc_start:
            dt = time.perf_counter() - gc_start.pop()
            times["gc"] += dt
            if in_ember[0]:
                times["gc_ember"] += dt
    gc.callbacks.append(on_gc)
    from ember.frontend.compile import EmberGraph
    real_build = EmberGraph._build

    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile(time.process_time if clock == "cpu" else time.perf_counter)

    def build_timed(self, args):
        in_ember[0] += 1
        if prof is not None:
            prof.enable()
        try:
            return real_build(self, args)
        finally:
            if prof is not None:
                prof.disable()
            in_ember[0] -= 1
    EmberGraph._build = build_timed
    real_aot = common.aot_autograd

    def timed_aot(**kw):
        inner = real_aot(**kw)

        def run(gm, example_inputs):
            t0 = time.perf_counter()
            try:
                return inner(gm, example_inputs)
            finally:
                times["aot"] += time.perf_counter() - t0
        return run

    def backend(gm, example_inputs):
        t0 = time.perf_counter()
        try:
            return ember_backend(gm, example_inputs,
                                 options={"target": "triton", "program_cache": False,
                                          "debug_dir": debug_dir, **(options or {})})
        finally:
            times["backend"] += time.perf_counter() - t0

    records: list = []
    ember.clear_reports()
    common.aot_autograd = timed_aot
    try:
        with compile_only(records, timing=times):
            fwd = torch.compile(model, backend=backend)
            t0, w0 = time.perf_counter(), time.monotonic()
            if mode == "infer":
                with torch.no_grad():
                    fwd(*inputs)
            else:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = loss_fn(fwd(*inputs))
                loss.backward()
            step, step_wall = time.perf_counter() - t0, time.monotonic() - w0
    finally:
        common.aot_autograd = real_aot
    reports = [r for r in ember.last_reports() if "compile_seconds" in r]
    stages: dict[str, float] = {}
    for r in reports:
        for k, v in (r.get("stage_seconds") or {}).items():
            stages[k] = stages.get(k, 0.0) + v
    ember_s = sum(r["compile_seconds"] for r in reports)
    stages["other"] = ember_s - sum(stages.values())
    if prof is not None:
        prof.dump_stats(profile)
    if sources:
        os.makedirs(sources, exist_ok=True)
        for i, rec in enumerate(records):
            path = os.path.join(sources, f"{name}-{mode}-{i}-{rec['kind']}.txt")
            with open(path, "w") as f:
                f.write(program_text(rec["program"]))
    extra = triton_compile_cost([rec["program"] for rec in records], share,
                                build_kernels) \
        if triton else {}
    if pool:
        extra.update(pool_compile_cost([rec["program"] for rec in records], pool))
    return {**extra, "model": name, "mode": mode, "clock": clock, "step_wall": step_wall, "step": step, "aot": times["aot"],
            "eager": times["eager"], "ember": ember_s, "gc": times["gc"],
            "gc_ember": times["gc_ember"],
            "dynamo": step - times["aot"] - times["eager"] - ember_s,
            "graphs": [{"graph_id": r["graph_id"], "status": r["status"],
                        "kernels": r.get("num_kernels"),
                        "split_reductions_off": bool(r.get("split_reductions_off"))}
                       for r in reports],
            "stages": stages}


def _median_rows(runs: list[dict]) -> dict:
    keys = ("step_wall", "step", "dynamo", "aot", "eager", "ember", "gc", "gc_ember", "triton",
            "triton_requests", "triton_distinct", "triton_first", "triton_find", "triton_rr16",
            "triton_queue16", "triton_lpt16", "triton_rr8", "triton_queue8", "triton_lpt8", "triton_pool8",
            "triton_pool16")
    out = {k: statistics.median(r[k] for r in runs) for k in keys if k in runs[0]}
    names = sorted({k for r in runs for k in r["stages"]})
    out["stages"] = {k: statistics.median(r["stages"].get(k, 0.0) for r in runs) for k in names}
    out["graphs"] = runs[0]["graphs"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert,gpt2")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--clock", default="wall", choices=("wall", "cpu"))
    ap.add_argument("--json", default="")
    ap.add_argument("--sources", default=None, help="write each graph's Program here")
    ap.add_argument("--debug-dir", default=None, help="ember's debug dump (with --one)")
    ap.add_argument("--triton", action="store_true",
                    help="also compile each graph's Triton kernels for sm_90, one at a time")
    ap.add_argument("--requests", action="store_true",
                    help="with --triton: count the compile requests (per kernel) without building")
    ap.add_argument("--no-share", action="store_true",
                    help="--triton without runtime/py_module.share_identical_kernels (before it)")
    ap.add_argument("--profile", default=None,
                    help="cProfile of ember's compiles only (EmberGraph._build) to this file "
                         "(with --one: `--one efficientnet_b0:train --profile p.out`)")
    ap.add_argument("--options", default="",
                    help="more ember options, JSON (e.g. '{\"max_unrolled_loads\": 192}')")
    ap.add_argument("--pool", type=int, default=0,
                    help="also compile each graph's requests through the runtime's worker pool "
                         "of this many workers (wall seconds per graph: pool_wall)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)   # model:mode, in a child
    args = ap.parse_args(argv)
    if args.one:
        name, mode = args.one.split(":")
        row = one_run(name, mode, args.small, args.sources, args.clock, args.debug_dir,
                      args.triton, not args.no_share, args.profile, args.pool,
                      json.loads(args.options) if args.options else None, not args.requests)
        sys.stdout.write("ROW " + json.dumps(row) + "\n")
        return
    rows = []
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            runs = []
            for i in range(args.runs):
                cmd = [sys.executable, os.path.abspath(__file__), "--one", f"{name}:{mode}",
                       "--clock", args.clock]
                if args.small:
                    cmd.append("--small")
                if args.triton:
                    cmd.append("--triton")
                if args.no_share:
                    cmd.append("--no-share")
                if args.requests:
                    cmd.append("--requests")
                if args.pool:
                    cmd += ["--pool", str(args.pool)]
                if args.options:
                    cmd += ["--options", args.options]
                if args.sources and i == 0:
                    cmd += ["--sources", args.sources]
                out = subprocess.run(cmd, capture_output=True, text=True)
                line = [x for x in out.stdout.splitlines() if x.startswith("ROW ")]
                if not line:
                    sys.stderr.write(out.stderr[-3000:])
                    raise SystemExit(f"{name} {mode}: the child failed")
                runs.append(json.loads(line[0][4:]))
                r = runs[-1]
                print(f"{name:<6} {mode:<6} run {i}: wall {r['step_wall']:7.2f}  step "
                      f"{r['step']:7.2f}  dynamo "
                      f"{r['dynamo']:6.2f}  aot {r['aot']:6.2f}  eager {r['eager']:6.2f}  "
                      f"ember {r['ember']:6.2f}  (gc {r['gc']:5.2f}, in ember {r['gc_ember']:5.2f})"
                      + (f"  triton {r['triton']:6.2f} ({r['triton_requests']} requests, "
                         f"{r['triton_distinct']} distinct, first {r['triton_first'] or 0:.2f}, "
                         f"find {r['triton_find']:.2f} (requests "
                         f"{r.get('triton_find_requests', 0):.2f}), errors {r['triton_errors']}, "
                         f"shared {r['triton_shared']}; on 16 workers: as assigned "
                         f"{r.get('triton_rr16', 0):.2f}, queue {r.get('triton_queue16', 0):.2f}, "
                         f"longest first {r.get('triton_lpt16', 0):.2f}, this tree's pool "
                         f"{r.get('triton_pool16', 0):.2f}; on 8: k % 8 "
                         f"{r.get('triton_rr8', 0):.2f}, longest first "
                         f"{r.get('triton_lpt8', 0):.2f}, this tree's pool "
                         f"{r.get('triton_pool8', 0):.2f})"
                         if "triton" in r else ""), flush=True)
                if "pool_wall" in r:
                    print(f"    pool of {r['pool_jobs']}: wall per graph {r['pool_wall']} "
                          f"(sum {sum(r['pool_wall']):.2f}), workers' CPU "
                          f"{r['pool_worker_cpu']:.2f}, errors {r['pool_errors']}", flush=True)
                if r.get("triton_per_kernel"):
                    print(f"    {r['triton_kernels']} kernels; requests a kernel: "
                          f"{dict(sorted(r['triton_per_kernel'].items()))}", flush=True)
                if r.get("triton_slowest"):
                    print("    slowest Triton compiles: " + ", ".join(
                        f"{name_} (graph {g}) {sec:.2f}" for sec, g, name_, _ in
                        r["triton_slowest"][:5]), flush=True)
            med = _median_rows(runs)
            med.update(model=name, mode=mode, runs=runs)
            rows.append(med)
            stages = "  ".join(f"{k} {v:.2f}" for k, v in
                               sorted(med["stages"].items(), key=lambda kv: -kv[1]))
            print(f"{name:<6} {mode:<6} median: step {med['step']:.2f} dynamo {med['dynamo']:.2f}"
                  f" aot {med['aot']:.2f} eager {med['eager']:.2f} ember {med['ember']:.2f}"
                  f"\n    ember stages: {stages}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
