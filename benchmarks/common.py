"""Timing and comparison helpers shared by ember's benchmarks and main.py.

Times are wall-clock (`time.perf_counter`), medians of N repeats after warm-up; on CUDA tensors
every repeat is bracketed by `torch.cuda.synchronize()` so asynchronous launches are counted.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field

import torch


def ensure_bytecode(roots=None, force: bool = False) -> list[str]:
    """Compiles ember's and torch-mlir's Python modules to bytecode where this interpreter
    writes none itself (PYTHONDONTWRITEBYTECODE, as on the GPU machine; `force`: anyway), as an
    installed package has it. Otherwise every process a benchmark starts compiles them from
    source: 278 modules against Inductor's 51 in a warm training start on the H100 (1.87 s
    against 0.19 under cProfile), a cost of the machine, not of either backend. Returns the
    directories compiled; never raises."""
    if not (force or sys.flags.dont_write_bytecode):
        return []
    import compileall
    import importlib.util
    if roots is None:
        roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]     # ember
        spec = importlib.util.find_spec("torch_mlir")
        if spec is not None and spec.submodule_search_locations:
            roots += list(spec.submodule_search_locations)
    done = []
    for root in roots:
        try:
            # the package's own modules: not its tests, benchmarks' scratch trees or builds
            if compileall.compile_dir(str(root), quiet=2, workers=1,
                                      rx=re.compile(r"[/\\](test|scratch|build)[/\\]")):
                done.append(str(root))
        except Exception:   # noqa: BLE001 -- a read-only tree: compiled per process as before
            pass
    return done


def outer_timer(fn, add, clock=time.perf_counter):
    """`fn` wrapped so that each outermost call (not the recursive or nested ones inside it)
    passes its `clock` seconds to `add`: a stage timer for first_call_profile and
    warm_start."""
    import functools
    depth = [0]

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        if depth[0]:
            return fn(*args, **kwargs)
        depth[0] += 1
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            add(clock() - t0)
            depth[0] -= 1
    return timed


def import_torchvision():
    """torchvision, also where its compiled extension does not match the installed torch (PyPI's
    CPU-side wheel beside torch's CPU build: 'operator torchvision::nms does not exist'). The
    models are pure Python; only the detection ops' fake kernels need the extension, and their
    registration is skipped when it fails."""
    try:
        import torchvision
        return torchvision
    except RuntimeError:
        pass
    import sys
    import torch.library as lib
    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[mod]
    register_fake = lib.register_fake

    def tolerant(op, *args, **kwargs):
        def decorate(fn):
            try:
                return register_fake(op, *args, **kwargs)(fn)
            except RuntimeError:
                return fn
        return decorate

    lib.register_fake = tolerant
    try:
        import torchvision
    finally:
        lib.register_fake = register_fake
    return torchvision


def sync(device: str | torch.device = "cpu") -> None:
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


def median_ms(fn, *args, warmup: int = 3, repeats: int = 20, device="cpu",
              max_seconds: float | None = None) -> float:
    """Median wall time of `fn(*args)` in milliseconds. `max_seconds` caps the repeats (at
    least 3) for slow cases."""
    for _ in range(warmup):
        fn(*args)
    sync(device)
    times, start = [], time.perf_counter()
    for i in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        sync(device)
        times.append(time.perf_counter() - t0)
        if max_seconds is not None and i >= 2 and time.perf_counter() - start > max_seconds:
            break
    return statistics.median(times) * 1e3


def interleaved_median_ms(fns, *args, warmup: int = 3, repeats: int = 20, device="cpu",
                          clock=time.perf_counter):
    """Median ms of each of `fns`, timed in alternation (one call of each per round) so that load
    from other processes on a shared machine falls on all of them alike. The order rotates
    from round to round, so that no fn always runs after the same other one: what a call
    leaves behind counts against the next (on the CPU, a backend whose freed buffers make
    glibc trim the heap makes the next one fault its output's pages in again: rms_norm
    4096x1024, one thread, ember 9.0 ms after inductor, 2.5 ms after eager). `clock`:
    time.thread_time counts the calling thread's CPU time instead (with one thread it is the
    work done, whatever else the machine runs)."""
    for fn in fns:
        for _ in range(warmup):
            fn(*args)
    sync(device)
    times = [[] for _ in fns]
    order = list(zip(fns, times))
    for r in range(repeats):
        k = r % len(order)
        for fn, ts in order[k:] + order[:k]:
            t0 = clock()
            fn(*args)
            sync(device)
            ts.append(clock() - t0)
    return [statistics.median(ts) * 1e3 for ts in times]


def timed_first_call(fn, *args, device="cpu"):
    """(output, seconds) of the first call: for a compiled fn this includes the compile."""
    t0 = time.perf_counter()
    out = fn(*args)
    sync(device)
    return out, time.perf_counter() - t0


def flatten(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in flatten(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in flatten(item)]
    return []


def rel_err(out, ref) -> float:
    """max over outputs of ||out - ref|| / ||ref|| in float64; NaN if shapes differ or NaN appears
    where the reference has none."""
    worst = 0.0
    outs, refs = flatten(out), flatten(ref)
    if len(outs) != len(refs):
        return float("nan")
    for o, r in zip(outs, refs):
        if o.shape != r.shape:
            return float("nan")
        o64, r64 = o.detach().cpu().double(), r.detach().cpu().double()
        if torch.isnan(o64).sum() > torch.isnan(r64).sum():
            return float("nan")
        den = torch.linalg.vector_norm(torch.nan_to_num(r64)).item()
        num = torch.linalg.vector_norm(torch.nan_to_num(o64 - r64)).item()
        worst = max(worst, num / den if den > 0 else num)
    return worst


def train_err(model, ref_model, loss, ref_loss) -> float:
    """Worst of: the loss, the gradients taken together, each buffer (BatchNorm running
    statistics; integer buffers must be equal), and each gradient whose eager norm is
    at least 1e-3 of the largest. Gradients that are zero in exact arithmetic (a bias before a
    normalization, attention's key bias) hold only rounding noise, and their relative error
    says nothing; they still count in the joint norm. Parameters are not compared after the
    step: Adam scales such noise up to a full-size step."""
    pairs = [(p.grad, q.grad) for p, q in zip(model.parameters(), ref_model.parameters())
             if q.grad is not None]
    if any(a is None for a, _ in pairs):
        return float("inf")
    top = max(b.double().norm().item() for _, b in pairs)
    errs = [rel_err(loss, ref_loss),
            rel_err(torch.cat([a.flatten().double() for a, _ in pairs]),
                    torch.cat([b.flatten().double() for _, b in pairs]))]
    errs += [rel_err(a, b) for a, b in pairs if b.double().norm().item() >= 1e-3 * top]
    # Buffers updated in place by the step (BatchNorm running statistics, counters).
    for a, b in zip(model.buffers(), ref_model.buffers()):
        if b.is_floating_point():
            errs.append(rel_err(a, b))
        elif not torch.equal(a.cpu(), b.cpu()):
            errs.append(float("inf"))
    return float("nan") if any(e != e for e in errs) else max(errs)    # max() can skip a NaN


def tolerance(dtype: torch.dtype, matmul: bool = False) -> float:
    """The numerics bar (docs/design.md): fp32 1e-4 (1e-3 with matmuls), bf16/fp16 1e-2."""
    if dtype in (torch.bfloat16, torch.float16):
        return 1e-2
    return 1e-3 if matmul else 1e-4


@dataclass
class Result:
    case: str
    backend: str
    ms: float | None = None          # median steady-state time
    compile_s: float | None = None   # first call (compile + run)
    rel_err: float | None = None     # vs eager
    error: str | None = None
    extra: dict = field(default_factory=dict)


def prepare_backend(case: str, backend: str, fn, args, ref, device="cpu", options=None):
    """Compiles `fn` with `backend` ("eager" runs it as is), runs it once (the compile) and checks
    it against `ref`. Returns (Result, callable or None on failure); a failure is recorded in
    `Result.error`, not raised, so one broken case doesn't stop a table."""
    res = Result(case, backend)
    try:
        torch._dynamo.reset()
        if backend == "eager":
            compiled = fn
        else:
            kwargs = {"options": options} if options else {}
            compiled = torch.compile(fn, backend=backend, **kwargs)
        if backend == "ember":
            _clear_ember_reports()
        with torch.no_grad():
            out, res.compile_s = timed_first_call(compiled, *args, device=device)
            if backend == "ember":
                res.extra.update(ember_summary())
        res.rel_err = rel_err(out, ref) if ref is not None else 0.0
        return res, compiled
    except Exception as err:  # noqa: BLE001 - a benchmark table reports, it doesn't crash
        res.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        traceback.print_exc()
        return res, None


def time_interleaved(prepared, args, repeats: int = 20, device="cpu",
                     clock=time.perf_counter) -> None:
    """Fills `Result.ms` for each (Result, callable) that compiled, timing them in alternation."""
    ok = [(r, f) for r, f in prepared if f is not None]
    with torch.no_grad():
        times = interleaved_median_ms([f for _, f in ok], *args, repeats=repeats, device=device,
                                      clock=clock)
    for (r, _), ms in zip(ok, times):
        r.ms = ms


def _clear_ember_reports() -> None:
    try:
        from ember.frontend.report import clear_reports
        clear_reports()
    except Exception:  # noqa: BLE001
        pass


def ember_summary() -> dict:
    """What ember's compile reports say about the graphs compiled since the last clear."""
    try:
        import ember
        reports = ember.last_reports()
    except Exception:  # noqa: BLE001
        return {}
    ops = [op for r in reports for op in r.get("eager_fallback_ops", [])]
    reasons = {op: why for r in reports for op, why in (r.get("fallback_reasons") or {}).items()}
    stages: dict[str, float] = {}
    for r in reports:
        for stage, s in (r.get("stage_seconds") or {}).items():
            stages[stage] = round(stages.get(stage, 0.0) + s, 2)
    return {"fallback_reasons": {op: str(why)[:200] for op, why in sorted(reasons.items())},
            "stage_seconds": stages,
"graphs": len(reports), "statuses": sorted({r.get("status") for r in reports}),
            "kernels": sum(r.get("num_kernels", 0) for r in reports),
            "externs": sum(r.get("num_externs", 0) for r in reports),
            # each capture's new bytes: a pool the graphs of a step share counts once
            "graph_pool_bytes": sum(r.get("graph_pool_bytes", 0) for r in reports),
            "ungraphed_calls": sum(r.get("ungraphed_calls", 0) for r in reports),
            # graphs run without their CUDA graph for good (runtime/cuda_graphs.COPY_MAX_BYTES)
            "graphs_dropped": sorted(r.get("graph_id", "?") for r in reports
                                     if r.get("graph_dropped")),
            "eager_fallback_ops": sorted(set(ops))}


def format_table(results: list[Result]) -> str:
    """Markdown table: one row per (case, backend), speed-up over the case's eager row."""
    eager = {r.case: r.ms for r in results if r.backend == "eager" and r.ms}
    lines = ["| case | backend | median ms | speed-up | first call s | rel. err vs eager | note |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        if r.error or r.ms is None:
            lines.append(f"| {r.case} | {r.backend} | failed | | | | {(r.error or '')[:80]} |")
            continue
        base = eager.get(r.case)
        speed = f"x{base / r.ms:.2f}" if base and r.ms else ""
        err = "" if r.backend == "eager" else f"{r.rel_err:.1e}"
        comp = f"{r.compile_s:.1f}" if r.compile_s is not None else ""
        note = ""
        if "kernels" in r.extra:
            note = f"{r.extra['kernels']} kernels, {r.extra['externs']} externs"
        if r.extra.get("eager_fallback_ops"):
            note = "EAGER FALLBACK: " + ", ".join(r.extra["eager_fallback_ops"])[:70]
        lines.append(f"| {r.case} | {r.backend} | {r.ms:.3f} | {speed} | {comp} | {err} | {note} |")
    return "\n".join(lines)


def write_json(path: str, results: list[Result], meta: dict | None = None) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta or {}, "results": [asdict(r) for r in results]}, f, indent=2)


def machine_info() -> dict:
    import os
    import platform
    info = {"torch": torch.__version__, "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    try:
        from importlib.metadata import version
        info["ember"] = version("ember")
    except Exception:  # noqa: BLE001
        info["ember"] = None
    return info
