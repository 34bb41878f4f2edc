"""One model in one process: every backend compiled on the same model and inputs, then timed in
alternation (the harness's child; `harness.py` starts one per model).

Prints JSON lines on stdout: `{"event": "progress", ...}` as each step starts (the parent's
progress bar), `{"event": "row", ...}` per (dtype, backend), `{"event": "warm", ...}` in the
warm-start process. Anything else on stdout is ignored by the parent.

What a row holds:
  ms         median over `repeats` rounds; each round calls every backend once, in turn (load
             from other processes falls on all alike). GPU: CUDA events around each call with
             the device idle before it, so launch overhead counts; CPU: perf_counter.
  cold_s     the first call (Dynamo, AOTAutograd, the backend's compile and one run) with the
             caches the parent made empty for this model. The first dtype's also pays the
             process's one-time costs (importing the compiler, starting its workers), as a
             user's first compile does; a later dtype's does not.
  warm_s     the same first call in a new process whose caches the cold run filled.
  peak_mb    GPU: the most memory allocated above what was allocated before the backend's first
             call, over steady-state calls after the warm-up (a CUDA-graph pool's blocks that
             hold no live tensor are not allocated memory: see reserved_peak_mb). CPU: the
             peak of one call's allocations through torch's allocator (profiler memory events).
  reserved_peak_mb  GPU: the most memory reserved over the same calls above what was reserved
             before the backend's first call (after emptying the cache): every CUDA-graph pool
             counted once, with its free blocks, and the blocks the caching allocator keeps.
  kernels    per call, from the profiler: GPU kernels, memcpy and memset on the device; on the
             CPU only library (aten) calls are visible, generated C++ is not.
  rel_err    ||out - eager|| / ||eager|| (training: worst of the loss and the gradients, see
             common.train_err).
  fp32_err   bf16/fp16 rows: the same against the model in fp32 (training: an fp32 step without
             autocast); the eager row's is the dtype's own rounding noise.
"""
from __future__ import annotations

import copy
import gc
import json
import statistics
import sys
import time
import traceback

import torch

from . import breakdown
from .common import ember_summary, flatten, rel_err, train_err
from .models import FULL_TEXT_SHAPE, build, label

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
INDUCTOR_MODES = {"inductor": None, "inductor-ro": "reduce-overhead", "inductor-ma": "max-autotune"}
EMBER_MODES = {"ember": None, "ember-ma": "max-autotune", "ember-nchw": None, "ember-cl": None,
               "ember-fast": None, "ember-tail0": None, "ember-effattn": None,
               "ember-cudnn": None, "ember-loop": None, "ember-saveall": None,
               "ember-loop192": None, "ember-serial": None}
# ember's variants that differ by a compile option, to compare with "ember" in one process:
# "ember-nchw" keeps convolution networks NCHW (ember-channels-last off), "ember-cl" lays them
# out channels-last in training graphs too (the default, "auto", does so for inference only),
# "ember-fast" fuses bf16/f16 layer norms and GELU instead of calling eager's kernels for
# bit-exact results (exact_low_precision=False: within 16-bit rounding of eager), "ember-tail0"
# runs a CUDA graph's last step after the replay whatever the size of its outputs
# (graph_tail_min_bytes=0: no copy kernel out of the pool), "ember-effattn" traces training
# graphs' attention to memory-efficient attention (training_cudnn_attention=False, the
# default), "ember-cudnn" keeps eager's choice there (cuDNN's on an H100/H200), "ember-loop" writes a strided reduction of more than 256
# loads as a loop, not unrolled (max_unrolled_loads=256: Triton's build time), "ember-saveall"
# saves what the min-cut partitioner saves (recompute_saved=False; the default recomputes saved
# pointwise functions of saved values under CUDA graphs: peak memory against step time);
# "ember-loop192" at 192, where GPT-2's two 32-row sums of 7 and 8 gradients become loops
# (cold18: 1.3-1.75 s a configuration unrolled, 0.11 s as loops; their GPU time is not measured
# yet); "ember-serial" waits for every kernel's build before the first call's launches
# (precompile_overlap=False, the default before the fifteenth session: only the first backend
# of a process compiles cold: compare it in a process of its own, or with
# first_call_profile.py --options)
EMBER_OPTIONS = {"ember-nchw": {"channels_last": False}, "ember-cl": {"channels_last": True},
                 "ember-fast": {"exact_low_precision": False},
                 "ember-tail0": {"graph_tail_min_bytes": 0},
                 "ember-effattn": {"training_cudnn_attention": False},
                 "ember-cudnn": {"training_cudnn_attention": True},
                 "ember-loop": {"max_unrolled_loads": 256},
                 "ember-saveall": {"recompute_saved": False},
                 "ember-loop192": {"max_unrolled_loads": 192},
                 "ember-serial": {"precompile_overlap": False}}


def emit(kind: str, **fields) -> None:
    print(json.dumps({"event": kind, **fields}, default=_json_default), flush=True)


def _json_default(v):
    return None if isinstance(v, float) and v != v else str(v)


def compile_fn(backend: str):
    """model -> the callable for `backend` (eager: the model itself)."""
    if backend == "eager":
        return lambda m: m
    if backend == "dynamo-eager":     # Dynamo's frame and guards, the graph run eagerly: the
        return lambda m: torch.compile(m, backend="eager")   # floor of every compiled backend
    if backend in INDUCTOR_MODES:
        mode = INDUCTOR_MODES[backend]
        return lambda m: torch.compile(m, backend="inductor", mode=mode)
    if backend in EMBER_MODES:
        mode = EMBER_MODES[backend]
        kwargs = {"options": EMBER_OPTIONS[backend]} if backend in EMBER_OPTIONS else {}
        return lambda m: torch.compile(m, backend="ember", mode=mode, **kwargs)
    raise KeyError(f"unknown backend {backend!r}; known: eager, dynamo-eager, "
                   f"{', '.join([*INDUCTOR_MODES, *EMBER_MODES])}")


def _outputs(out) -> list[torch.Tensor]:
    return flatten(out.to_tuple() if hasattr(out, "to_tuple") else out)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def interleaved_ms(fns, repeats: int, device: str, warmup: int = 3) -> list[float]:
    """Median ms of each of `fns`, one call of each per round."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    sync(device)
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                fn()
                end.record()
                end.synchronize()
                ts.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(ts) for ts in times]


def _cpu_peak_mb(fn) -> float | None:
    """Peak of one call's allocations through torch's CPU allocator, from profiler events."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # each op's own net allocation (its children's are theirs) at its start; "[memory]" events
    # are frees and allocations outside any op
    deltas = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events()
                    if e.self_cpu_memory_usage)
    cur = peak = 0
    for _, d in deltas:
        cur += d
        peak = max(peak, cur)
    return round(peak / 2**20, 2)


class Case:
    """One (model, dtype, mode): `make(backend)` -> (step, check) where `step()` runs one call
    and `check(first result)` gives {"rel_err": against eager in the same dtype} and, for bf16
    and fp16, {"fp32_err": against the fp32 model}: eager's own fp32_err is the rounding noise
    that a low-precision row's rel_err is to be read against."""

    def __init__(self, name, dtype, mode, device, small):
        self.device, self.mode, self.dtype = device, mode, dtype
        base, inputs, self.loss_fn = build(name, device, small,
                                           text_shape=None if small else FULL_TEXT_SHAPE.get(name))
        self.label = label(name, inputs)
        narrow = dtype != "fp32"
        self.truth = None
        if mode == "inference":
            if narrow:
                with torch.no_grad():
                    self.truth = [t.clone() for t in _outputs(base.eval()(*inputs))]
            self.model = base.to(DTYPES[dtype]).eval()
            self.inputs = tuple(t.to(DTYPES[dtype]) if t.is_floating_point() else t
                                for t in inputs)
            with torch.no_grad():
                self.ref = [t.clone() for t in _outputs(self.model(*self.inputs))]
        else:
            self.base, self.inputs = base.train(), inputs
            self.ref_model = copy.deepcopy(base)
            self.ref_loss = self._train_step(self.ref_model, self.ref_model)()
            if narrow:
                model = copy.deepcopy(base)
                self.truth = (model, self._train_step(model, model, autocast=False)())

    def _train_step(self, model, fwd, mark_step=False, autocast=True):
        narrow = autocast and self.dtype != "fp32"
        kind = DTYPES[self.dtype]

        def step():
            if mark_step:       # Inductor's CUDA graphs: a new iteration
                torch.compiler.cudagraph_mark_step_begin()
            for p in model.parameters():
                p.grad = None
            with torch.autocast(self.device, dtype=kind, enabled=narrow):
                loss = self.loss_fn(fwd(*self.inputs))
            loss.backward()
            return loss.detach()
        return step

    def make(self, backend: str):
        """(step, first result -> {"rel_err", "fp32_err"})."""
        wrap = compile_fn(backend)
        ro = backend == "inductor-ro"
        if self.mode == "inference":
            fn = wrap(self.model)
            ins = self.inputs

            def step():
                if ro:
                    torch.compiler.cudagraph_mark_step_begin()
                with torch.no_grad():
                    return fn(*ins)

            def check(out):
                # cloned right after the call: Inductor's CUDA-graph outputs are overwritten by
                # the next call (of any backend sharing the graph pool's memory)
                outs = [t.clone() for t in _outputs(out)]
                errs = {"rel_err": rel_err(outs, self.ref)}
                if self.truth is not None:
                    errs["fp32_err"] = rel_err(outs, self.truth)
                return errs
            return step, check
        model = copy.deepcopy(self.base)
        step = self._train_step(model, wrap(model), mark_step=ro)

        def check(loss):
            errs = {"rel_err": train_err(model, self.ref_model, loss, self.ref_loss)}
            if self.truth is not None:
                errs["fp32_err"] = train_err(model, self.truth[0], loss, self.truth[1])
            return errs
        return step, check


def _clear_ember():
    try:
        import ember
        ember.clear_reports()
    except Exception:  # noqa: BLE001
        pass


def _ember_fields(summary: dict) -> dict:
    statuses = summary.get("statuses", [])
    status = ("eager" if statuses == ["eager"] else
              "partitioned" if "partitioned" in statuses or "eager" in statuses else "compiled")
    return {"status": status, "fallback_ops": summary.get("eager_fallback_ops", []),
            "ember_kernels": summary.get("kernels"), "ember_externs": summary.get("externs"),
            "stage_seconds": summary.get("stage_seconds", {})}


def _compile_order(backends):
    # ember first: in an earlier run ember's tracing failed after Inductor had run in the same
    # process (benchmarks/README.md); its rows then carry the eager status, not a wrong time.
    return sorted(backends, key=lambda b: (b not in EMBER_MODES, backends.index(b)))


def run_model(name, dtypes, mode, backends, device, small, repeats, profile=False,
              warmup=3) -> None:
    """Every (dtype, backend) of one model: rows on stdout (see the module docstring)."""
    for dtype in dtypes:
        emit("progress", what=f"{name} {dtype}: building")
        try:
            case = Case(name, dtype, mode, device, small)
        except ImportError as err:
            for be in backends:
                emit("row", model=name, dtype=dtype, mode=mode, backend=be, status="skipped",
                     error=f"{type(err).__name__}: {err}")
            continue
        rows, steps = {}, {}
        for be in _compile_order(backends):
            emit("progress", what=f"{name} {dtype}: compiling {be}", step=True)
            row = rows[be] = {"model": name, "label": case.label, "dtype": dtype, "mode": mode,
                              "backend": be, "status": "ok", "device": device}
            try:
                _clear_ember()
                step, check = case.make(be)
                if device == "cuda":
                    # the shared model's gradients of the previous backend's steps are freed by
                    # this backend's first step: not part of its base
                    for m in (getattr(case, "base", None), getattr(case, "model", None)):
                        for p in (m.parameters() if isinstance(m, torch.nn.Module) else ()):
                            p.grad = None
                    gc.collect()
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()    # the previous backend's cached blocks
                    base = torch.cuda.memory_allocated()
                    base_reserved = torch.cuda.memory_reserved()
                t0 = time.perf_counter()
                out = step()
                sync(device)
                row["cold_s"] = round(time.perf_counter() - t0, 3)
                row.update(check(out))
                del out
                if be in EMBER_MODES:
                    row.update(_ember_fields(ember_summary()))
                if device == "cuda":
                    # The peak of steady-state steps: CUDA-graph warm-up and capture (ember's
                    # calls 2-3, Inductor's cudagraph trees' first calls) are not a step's cost.
                    for _ in range(3):
                        step()
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    for _ in range(3):
                        step()
                    torch.cuda.synchronize()
                    row["peak_mb"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 2)
                    # reserved: every CUDA-graph pool once (its free blocks too), and what the
                    # caching allocator keeps cached for eager's and Inductor's allocations
                    row["reserved_peak_mb"] = round(
                        (torch.cuda.max_memory_reserved() - base_reserved) / 2**20, 2)
                    if be in EMBER_MODES:   # the graph pools (the arena) and replays given up
                        late = ember_summary()
                        # (each capture's new bytes: a pool shared by a step's graphs once)
                        row["graph_pool_mb"] = round(late.get("graph_pool_bytes", 0) / 2**20, 2)
                        row["ungraphed_calls"] = late.get("ungraphed_calls", 0)
                steps[be] = step
            except Exception as err:  # noqa: BLE001 - a table reports, it does not stop
                row.update(status="error", error=f"{type(err).__name__}: {str(err)[:300]}")
                traceback.print_exc()
        timed = [be for be in backends if be in steps]
        if timed and repeats > 0:
            emit("progress", what=f"{name} {dtype}: timing {', '.join(timed)}", step=True)
            try:
                for be, ms in zip(timed, interleaved_ms([steps[b] for b in timed], repeats,
                                                        device, warmup)):
                    rows[be]["ms"] = round(ms, 4)
            except Exception as err:  # noqa: BLE001
                for be in timed:
                    rows[be].update(status="error", error=f"timing: {type(err).__name__}: {err}")
                traceback.print_exc()
        for be in timed:
            try:
                counts = breakdown.profile_calls(steps[be], device, calls=1)
                rows[be]["kernels"] = counts["launches"]
                if device != "cuda":
                    rows[be]["peak_mb"] = _cpu_peak_mb(steps[be])
                if profile:
                    rows[be]["profile"] = breakdown.breakdown(steps[be], device,
                                                              rows[be].get("ms"))
            except Exception as err:  # noqa: BLE001
                rows[be]["profile_error"] = f"{type(err).__name__}: {err}"
                traceback.print_exc()
        for be in backends:
            emit("row", **rows[be])
        del case, steps
        if device == "cuda":
            torch.cuda.empty_cache()


def warm_start(name, dtypes, mode, backends, device, small) -> None:
    """The first call of each compiled backend again, in a new process whose caches the cold run
    filled: `{"event": "warm", ..., "warm_s": seconds}` per (dtype, backend)."""
    for dtype in dtypes:
        try:
            case = Case(name, dtype, mode, device, small)
        except ImportError:
            continue
        for be in _compile_order([b for b in backends if b != "eager"]):
            emit("progress", what=f"{name} {dtype}: warm start {be}", step=True)
            try:
                step, _ = case.make(be)
                t0 = time.perf_counter()
                step()
                sync(device)
                emit("warm", model=name, dtype=dtype, mode=mode, backend=be,
                     warm_s=round(time.perf_counter() - t0, 3))
            except Exception as err:  # noqa: BLE001
                emit("warm", model=name, dtype=dtype, mode=mode, backend=be, warm_s=None,
                     error=f"{type(err).__name__}: {err}")
                traceback.print_exc()
        del case


def setup(device: str, tf32: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    # every backend keeps its own compiled code for the same forward (one cache entry each)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    if hasattr(torch._dynamo.config, "accumulated_recompile_limit"):
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 256)


def main_child(args) -> None:
    if any(b in EMBER_MODES for b in args.backends):
        import torch_mlir  # noqa: F401  -- without it every ember row would silently run eagerly
    setup(args.device, args.tf32)
    if args.warm_only:
        warm_start(args.one, args.dtypes, args.mode, args.backends, args.device, args.small)
    else:
        run_model(args.one, args.dtypes, args.mode, args.backends, args.device, args.small,
                  args.repeats, args.profile, args.warmup)
    sys.stdout.flush()
