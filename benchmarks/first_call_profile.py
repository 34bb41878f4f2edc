"""Where a backend's first call goes on the machine it runs on (the GPU's, above all): the parts
of a cold first call that the CPU machine cannot time (waiting for the Triton compile workers,
autotuning, the first launches' loads, library set-up, CUDA-graph capture).

    python benchmarks/first_call_profile.py --model gpt2 [--backend ember|inductor|inductor-ro]
                                            [--mode train|infer] [--dtype fp32|bf16] [--small] [--top 40]
                                            [--options '{"precompile_overlap": false}']
                                            [--out FILE.prof] [--choices FILE.json]
                                            [--timers] [--cache-dir DIR]

A fresh process with empty caches (ember's, Inductor's, Triton's: temporary directories), the
model and inputs of models.py on the GPU (the CPU without one), one eager step first (CUDA, cuDNN
and cuBLAS set up, as the harness's reference step does), then the backend's first call (a
bf16-autocast training step, or the forward under no_grad) under cProfile with the wall clock.
Printed: the first call's wall seconds, then the seconds spent inside the functions that make
up a cold call (cumulative, so nested ones count in both: `ember: compile` holds `ember:
precompile (waiting for workers)`), then the top functions by cumulative time. `--out` keeps the
profile (`python -m pstats FILE`); `--choices` (ember) the autotuner's choices after two more
calls: which of each kernel's configurations won, per autotuning key.

`--cache-dir DIR` keeps the caches under DIR instead (ember's program cache on): the same
command run a second time times a warm start (a new process, the caches filled).

`--timers` replaces cProfile by wall-clock timers around the functions of TIMERS (their outermost
entries; a function another module imported by name is not seen), so that Python-heavy parts
are not inflated; the rest of the first call (library first runs, Dynamo's own work) is what
the timers leave. ember's report's `stage_seconds` are summed over the graphs beside them.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time



def _cache_dir(argv) -> str | None:
    """`--cache-dir DIR` (read before torch is imported: the caches' variables are read then)."""
    for i, a in enumerate(argv):
        if a == "--cache-dir" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--cache-dir="):
            return a.split("=", 1)[1]
    return None


_KEPT = _cache_dir(sys.argv[1:])
if _KEPT is None:   # the caches empty before anything reads their variables
    os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="first_call_ember_")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="first_call_triton_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="first_call_inductor_")
    os.environ.setdefault("EMBER_PROGRAM_CACHE", "0")
else:               # kept caches, the program cache on: the second such run is a warm start
    for var, sub in (("EMBER_CACHE_DIR", "ember"), ("TRITON_CACHE_DIR", "triton"),
                     ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        os.environ[var] = os.path.join(os.path.abspath(_KEPT), sub)
        os.makedirs(os.environ[var], exist_ok=True)
    os.environ["EMBER_PROGRAM_CACHE"] = "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ensure_bytecode, outer_timer  # noqa: E402
from models import FULL_TEXT_SHAPE, build  # noqa: E402

# (label, file suffix, function name): cumulative seconds of each, summed over its entries
PARTS = [
    ("dynamo: convert_frame (the whole compile)", "_dynamo/convert_frame.py", "_compile"),
    ("aot_autograd: aot_module_simplified (forward)", "_functorch/aot_autograd.py",
     "aot_module_simplified"),
    ("ember: compile (EmberGraph._build)", "frontend/compile.py", "_build"),
    ("ember: import + passes + code (compile_module)", "frontend/compile_module.py",
     "compile_module"),
    ("ember: precompile (find requests + wait for workers)", "runtime/triton_warm.py",
     "precompile"),
    ("ember: compile_requests", "runtime/triton_warm.py", "compile_requests"),
    ("ember: waiting for workers (compile_pool)", "runtime/triton_warm.py", "compile_pool"),
    ("triton: autotuner run", "triton/runtime/autotuner.py", "run"),
    ("triton: autotune benchmarks (_bench)", "triton/runtime/autotuner.py", "_bench"),
    ("triton: JIT run (launch path)", "triton/runtime/jit.py", "run"),
    ("triton: compile() (cache hits on a precompiled kernel)", "triton/compiler/compiler.py",
     "compile"),
    ("triton: load kernels (_init_handles)", "triton/compiler/compiler.py", "_init_handles"),
    ("ember: CUDA graph capture", "runtime/cuda_graphs.py", "_capture"),
    ("torch: CUDA graph capture_end", "torch/cuda/graphs.py", "capture_end"),
    ("inductor: compile_fx_inner", "_inductor/compile_fx.py", "compile_fx_inner"),
    ("inductor: async_compile wait", "_inductor/async_compile.py", "wait"),
    ("inductor: autotune (benchmark_all_configs)", "_inductor/runtime/triton_heuristics.py",
     "benchmark_all_configs"),
    ("cuDNN/cuBLAS: convolution", "", "convolution"),
    ("gc: collect", "", "<built-in method gc.collect>"),
]


# (label, module, attribute path): wall seconds of the outermost entries (--timers)
TIMERS = [
    ("dynamo: _compile (the whole compile)", "torch._dynamo.convert_frame", "_compile"),
    ("aot_autograd: aot_module_simplified (trace + backend)", "torch._dynamo.backends.common",
     "aot_module_simplified"),
    ("aot_autograd: graph capture (the joint or inference trace)",
     "torch._functorch.aot_autograd", "aot_stage1_graph_capture"),
    ("aot_autograd: min-cut partition", "torch._functorch.partitioners",
     "min_cut_rematerialization_partition"),
    ("ember: decomposition_table", "ember.frontend.backend", "decomposition_table"),
    ("ember: EmberGraph._build", "ember.frontend.compile", "EmberGraph._build"),
    ("ember: program cache load", "ember.frontend.program_cache", "load"),
    ("ember: runtime load (executor.load)", "ember.runtime.executor", "load"),
    ("ember: eager_rejects device probes", "ember.frontend.eager_rejects", "outside_tracing"),
    ("ember: CompiledProgram._precompile (requests + wait)", "ember.runtime.executor",
     "CompiledProgram._precompile"),
    ("ember: first CompiledProgram calls (run, autotune, loads)", "ember.runtime.executor",
     "CompiledProgram.__call__"),
    ("ember: CUDA graph capture", "ember.runtime.cuda_graphs", "GraphedProgram._capture"),
    ("triton: Autotuner.run", "triton.runtime.autotuner", "Autotuner.run"),
    ("triton: do_bench (autotune benchmarks)", "triton.testing", "do_bench"),
    ("triton: JIT _do_compile (a first launch: cache lookup, load)", "triton.runtime.jit",
     "JITFunction._do_compile"),
    ("triton: triton_key (any thread)", "triton.runtime.cache", "triton_key"),
    ("triton: load kernels (_init_handles)", "triton.compiler.compiler",
     "CompiledKernel._init_handles"),
    # Triton 3.6's per-signature C launchers (built with the host compiler, or found cached)
    ("triton: C launchers (compile_module_from_src)", "triton.backends.nvidia.driver",
     "compile_module_from_src"),
    ("inductor: compile_fx_inner", "torch._inductor.compile_fx", "compile_fx_inner"),
    ("inductor: benchmark_all_configs", "torch._inductor.runtime.triton_heuristics",
     "CachingAutotuner.benchmark_all_configs"),
]


def install_timers() -> dict[str, list]:
    """Wrap each TIMERS function with a wall-clock timer; returns label -> [seconds, calls]."""
    import importlib
    out: dict[str, list] = {}
    for label, modname, attr in TIMERS:
        try:
            owner = importlib.import_module(modname)
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            fn = getattr(owner, name)
        except (ImportError, AttributeError):
            continue
        slot = out.setdefault(label, [0.0, 0])

        def add(seconds, _slot=slot):
            _slot[0] += seconds
            _slot[1] += 1
        setattr(owner, name, outer_timer(fn, add))
    return out


def parts(stats: pstats.Stats) -> list[tuple[str, float, int]]:
    out = []
    for label, suffix, name in PARTS:
        total, calls = 0.0, 0
        for (path, _, fn), (cc, nc, tt, ct, callers) in stats.stats.items():
            if fn == name and path.endswith(suffix):
                # a recursive function's cumulative time counts once: only its outer entries
                outer = [c for c in callers if c[2] != fn]
                if outer or not callers:
                    total += ct
                    calls += cc
        out.append((label, total, calls))
    return out


def autotune_choices() -> list[dict]:
    """Every autotuned kernel of the process's generated modules (runtime/py_module) with its
    configurations and, per autotuning key, the one chosen (its index): which configurations
    ever win, to prune the lists of passes/triton_blocks.py with data instead of guesses."""
    try:
        import triton
        from ember.runtime import py_module
    except ImportError:
        return []
    out = []
    for mod in list(py_module._modules.values()):
        for name, obj in vars(mod).items():
            if not isinstance(obj, triton.runtime.Autotuner) or not name.endswith("_kernel"):
                continue
            configs = [str(c) for c in obj.configs]
            chosen = {str(k): configs.index(str(c)) if str(c) in configs else str(c)
                      for k, c in getattr(obj, "cache", {}).items()}
            out.append({"module": mod.__name__, "kernel": name, "configs": configs,
                        "chosen": chosen})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--backend", default="ember",
                    choices=("ember", "inductor", "inductor-ro", "aot_eager"))
    ap.add_argument("--mode", default="train", choices=("train", "infer"))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"),
                    help="inference: the model and its floating inputs in this dtype (as the "
                         "harness's rows); training runs under bf16 autocast either way")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--options", default="",
                    help="ember options, JSON (e.g. '{\"precompile_overlap\": false}')")
    ap.add_argument("--out", default=None)
    ap.add_argument("--choices", default=None,
                    help="ember: after the first call and two more, write every autotuned "
                         "kernel's configurations and the ones chosen (JSON) here")
    ap.add_argument("--timers", action="store_true",
                    help="wall-clock timers around TIMERS instead of cProfile")
    ap.add_argument("--cache-dir", default=None,
                    help="keep the caches (ember's, Triton's, Inductor's) under this directory, "
                         "with ember's program cache on: run twice, the second run is a warm "
                         "start (issue 12: at most 1 s per graph)")
    args = ap.parse_args(argv)
    ensure_bytecode()   # the GPU machine writes none: ember's modules from bytecode, as installed
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = None if args.small else FULL_TEXT_SHAPE.get(args.model)
    model, inputs, loss_fn = build(args.model, device, small=args.small, text_shape=shape)
    model = model.train() if args.mode == "train" else model.eval()
    if args.mode == "infer" and args.dtype == "bf16":
        model = model.to(torch.bfloat16)
        inputs = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs)

    def step(fn):
        if args.mode == "infer":
            with torch.no_grad():
                return fn(*inputs)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = loss_fn(fn(*inputs))
        loss.backward()
        return loss

    step(model)                 # eager: the device's libraries set up, as the harness's step
    if device == "cuda":
        torch.cuda.synchronize()
    if args.backend == "ember":
        import ember  # noqa: F401
        import json
        fn = torch.compile(model, backend="ember",
                           options=json.loads(args.options) if args.options else None)
    elif args.backend == "aot_eager":
        fn = torch.compile(model, backend="aot_eager")
    else:
        fn = torch.compile(model, backend="inductor",
                           mode="reduce-overhead" if args.backend == "inductor-ro" else None)
    if args.timers:
        timers = install_timers()
        t0 = time.perf_counter()
        step(fn)
        if device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        print(f"{args.model} {args.mode} {args.backend} on {device}: first call {wall:.2f} s "
              f"(wall-clock timers)")
        for label, (sec, calls) in timers.items():
            if calls:
                print(f"  {label:<58} {sec:8.2f} s  ({calls} calls)")
        if args.backend == "ember":
            import ember
            stages: dict[str, float] = {}
            for rep in ember.last_reports():
                for k, v in (rep.get("stage_seconds") or {}).items():
                    stages[k] = stages.get(k, 0.0) + v
            for k, v in sorted(stages.items(), key=lambda kv: -kv[1])[:25]:
                print(f"  stage {k:<52} {v:8.2f} s")
        return
    prof = cProfile.Profile(time.perf_counter)
    t0 = time.perf_counter()
    prof.enable()
    step(fn)
    if device == "cuda":
        torch.cuda.synchronize()
    prof.disable()
    wall = time.perf_counter() - t0
    print(f"{args.model} {args.mode} {args.backend} on {device}: first call {wall:.2f} s "
          f"(under cProfile: Python-heavy parts inflated)")
    stats = pstats.Stats(prof)
    for label, total, calls in parts(stats):
        if calls:
            print(f"  {label:<58} {total:8.2f} s  ({calls} calls)")
    if args.out:
        stats.dump_stats(args.out)
    stats.sort_stats("cumulative").print_stats(args.top)
    if args.choices:
        import json
        for _ in range(2):
            step(fn)
        choices = autotune_choices()
        with open(args.choices, "w") as f:
            json.dump(choices, f, indent=1)
        won = sum(1 for c in choices for v in c["chosen"].values() if v == 0)
        print(f"autotuned kernels: {len(choices)}; keys where the first configuration won: "
              f"{won} of {sum(len(c['chosen']) for c in choices)}")


if __name__ == "__main__":
    main()
