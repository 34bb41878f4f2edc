"""The compile of one prepared FX graph, shared by the normal path (frontend/compile.py), the
symbolic-shape path (frontend/symbolic.py) and partition probing (frontend/partition.py):

    compile_module: import -> pass pipeline -> Program (the IR -> Program exporter is
                    export_program.export_program), in a fresh MLIR context;
    compile_static: compile_module, then the runtime build and load (plus CUDA graphs).

Nothing here imports compile.py, symbolic.py or partition.py (they import this module).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.fx as fx

# No MLIR at module level: a warm start (frontend/program_cache.py) takes its programs from the
# cache and never loads torch-mlir's native libraries (test_program_cache.py).
from ..passes.backends import backend_named
from . import fx_prep
from .options import SPLIT_PASS, CompileOptions, default_pipeline, run_devices
from .report import DebugDump, NativeOutput, compact_diagnostic, describe_error


def run_device(target: str, devices) -> torch.device:
    """Where a program runs: the GPU among its tensors' devices (a graph's first input may be
    a 0-dim CPU scalar beside GPU tensors), else their device, else (no tensor at all) the
    GPU for a GPU target, the CPU otherwise."""
    devices = list(devices)
    for d in devices:
        if d.type == "cuda":
            return d
    if devices:
        return devices[0]
    if target in ("cuda", "rocm", "triton") and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class PipelineFailure(RuntimeError):
    """A pass failed; carries the diagnostics it emitted (`diagnostics`, in full). Its text
    gives each diagnostic's message first and its location shortened (report.
    compact_diagnostic: `msg (at swin_transformer.py:85,453)`), so that reports and warnings,
    which keep one line of it, keep the message; format_error (error.txt) adds the full ones."""

    def __init__(self, stage: str, diagnostics: list[str]):
        def short(d: str) -> str:
            text = compact_diagnostic(d)
            return text[len(stage) + 2:] if text.startswith(f"{stage}: ") else text
        first = short(diagnostics[0]) if diagnostics else "(no diagnostic)"
        super().__init__(f"{stage} failed: {first}"
                         + "".join(f"\n  {short(d)}" for d in diagnostics[1:]))
        self.stage = stage
        self.diagnostics = list(diagnostics)


def stage_label(element: str) -> str:
    from ..passes.pipeline import parse_element
    return parse_element(element)[0]


def run_pipeline(module, pipeline: str, dump: DebugDump | None = None,
                 seconds: dict[str, float] | None = None,
                 remarks: list | None = None) -> None:
    """Runs `pipeline` element by element so that the IR after each one can be dumped;
    `seconds` (when given) gets each element's wall time, by stage label; `remarks` (when
    given) the passes' remarks (passes/remarks.py: ember-fuse{explain=true}, ...), which
    otherwise are dropped: a user's program prints nothing."""
    from ..passes import remarks as pass_remarks
    from ..passes.pipeline import build_pass_manager, split_top_level, strip_anchor
    ctx = module.context
    kept = [] if remarks is None else remarks
    diagnostics: list[str] = []

    def collect(d):
        # Python passes emit located errors; keep them for the exception (and the report)
        # instead of letting them go to stderr, which a user's program should not see.
        diagnostics.append(f"{d.location}: {d.message}")
        return True

    handler = ctx.attach_diagnostic_handler(collect)
    try:
        with pass_remarks.handler(ctx, kept.append):
            for element in split_top_level(strip_anchor(pipeline)):
                pm = build_pass_manager(f"builtin.module({element})", context=ctx)
                t0 = time.perf_counter()
                try:
                    pm.run(module.operation)
                except Exception as err:
                    # A Python pass that raises (a bug, not a diagnostic) still names its error.
                    raise PipelineFailure(stage_label(element),
                                          diagnostics or [describe_error(err)]) from err
                if seconds is not None:
                    label = stage_label(element)
                    seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t0
                if dump is not None:
                    dump.stage(stage_label(element), module)
    finally:
        handler.detach()


def explained(remarks: list) -> dict[str, Any]:
    """The report fields of the passes' remarks: `unfused` (ember-fuse's producer -> consumer
    pairs left in different kernels, each with its reason), `unfused_reasons` (how many pairs
    per reason), `recomputed` (values computed again in the kernels that read them instead of
    stored: what, in which consumers, how many ops, bytes saved) and `memory_plan` (ember-buffer-reuse's buffers: name, bytes, offset, live
    range, escapes, in_place_of; and the arena)."""
    fused = [dict(r.data) for r in remarks if r.pass_name == "ember-fuse"]
    unfused = [d for d in fused if "reason" in d]
    recomputed = [d for d in fused if "recomputed" in d]
    reasons: dict[str, int] = {}
    for pair in unfused:
        reasons[pair["reason"]] = reasons.get(pair["reason"], 0) + 1
    buffers = [dict(r.data) for r in remarks
               if r.pass_name == "ember-buffer-reuse" and "offset" in r.data]
    arena = [r.data for r in remarks
             if r.pass_name == "ember-buffer-reuse" and "arena_bytes" in r.data]
    out: dict[str, Any] = {"unfused": unfused, "unfused_reasons": reasons,
                           "recomputed": recomputed}
    if arena:
        out["memory_plan"] = {"arena_bytes": arena[-1]["arena_bytes"],
                              "unplanned_bytes": arena[-1]["unplanned_bytes"],
                              # planned in donated inputs' memory instead of the arena
                              "in_inputs_bytes": arena[-1].get("in_args_bytes", 0),
                              "buffers": [{**b, "live": list(b["live"])} for b in buffers]}
    return out


def _summary(module) -> dict[str, Any]:
    from ..dialects.contract import ARENA_BYTES, UNPLANNED_BYTES, is_extern
    from .export_program import find_funcs, kernel_funcs, kernel_ops
    main = find_funcs(module).get("main")
    externs = []
    if main is not None:
        for op in main.regions[0].blocks[0].operations:
            if is_extern(op):
                externs.append(op.operation)
    kernels = kernel_funcs(module)
    return {
        "num_kernels": len(kernels),
        "num_externs": len(externs),
        "fused_groups": [kernel_ops(k) for k in kernels],
        "planned_peak_bytes": ARENA_BYTES.get(main, 0) if main else 0,
        "unplanned_peak_bytes": UNPLANNED_BYTES.get(main, 0) if main else 0,
    }


# What a CUDA graph saves per launch it replaces (the host side of a Triton launch or a library
# call from Python, with the driver's), and the device bandwidth its copies cost; measured on an
# H100 (docs/internals.md, CUDA graphs): a resnet50 backward ran 215 launches in 18 ms of host time.
LAUNCH_OVERHEAD_S = 40e-6
COPY_BYTES_PER_S = 2e12
# A replay's copies live in the graph's private pool beside the tensors handed out: no graph whose
# copies would take more than this share of the device's memory.
MAX_COPY_SHARE = 0.25


def _unread_host_inputs(program) -> frozenset[int]:
    """Inputs that may arrive as 0-dim host tensors whose value no step reads: the philox seed
    and offset an attention backward takes, where its dropout_p is 0. A CUDA graph may capture
    them (a replay would bake in the seed read at capture: harmless when it is never used)."""
    unread = set()
    for i in range(program.num_inputs):
        if program.values[i].shape:
            continue
        readers = [s for s in program.steps if i in s.inputs]
        if readers and all(s.kind == "library" and "scaled_dot_product" in s.name
                           and dict(s.params).get("kwargs", {}).get("dropout_p", None) == 0.0
                           for s in readers):
            unread.add(i)
    return frozenset(unread)


def _launches(program) -> int:
    """Kernels, externs and library calls a call of `program` launches without a graph."""
    return sum(1 for s in program.steps if s.kind in ("kernel", "extern", "library"))


def graph_pays_off(program, kind: str = "inference", device_bytes: int | None = None) -> bool:
    """Whether replaying `program` as one CUDA graph beats launching its steps one by one: the
    launches saved against the copies a replay adds (outputs cloned out of the graph's pool;
    a backward graph's inputs, the saved activations, copied into its static buffers; a
    forward's inputs are mostly parameters, read in place)."""
    launches = _launches(program)

    def nbytes(vids) -> int:
        total = 0
        for vid in vids:
            v = program.values[vid]
            n = 1
            for d in v.shape:
                n *= d
            total += n * getattr(torch, v.dtype).itemsize
        return total
    copied = nbytes(program.outputs)
    if kind == "backward":
        copied += nbytes(range(program.num_inputs))
    if device_bytes is not None and copied > MAX_COPY_SHARE * device_bytes:
        return False
    return launches * LAUNCH_OVERHEAD_S > 2 * copied / COPY_BYTES_PER_S


def import_graph(gm: fx.GraphModule, ctx, native: NativeOutput | None = None,
                 symbolic: bool = False):
    """`gm` imported to linalg in `ctx` (placement kwargs dropped: fx_prep.strip_placement).
    MLIR's diagnostics are caught by `native`; an import failure names the first of them (the
    illegal op) rather than torch-mlir's "failed with the following diagnostics"."""
    from .importer import FxImportError, import_fx
    try:
        return import_fx(fx_prep.strip_placement(gm), ctx, symbolic=symbolic)
    except FxImportError as err:
        first = native.first() if native is not None else None
        if first is None:
            raise
        raise FxImportError(f"torch-mlir import failed: {_short_diagnostic(first)}") from err


def _short_diagnostic(line: str) -> str:
    """`loc(...): failed to legalize operation 'torch.operator' ...{name = "torch.aten.X"}...`
    -> `no lowering for torch.aten.X (failed to legalize operation 'torch.operator')`."""
    import re
    text = re.sub(r'^loc\(.*?\):\s*(error:\s*)?', "", line.strip())
    name = re.search(r'name = "([\w.]+)"', text)
    if name and "failed to legalize" in text:
        return f"no lowering for {name.group(1)} ({text.split(' that was')[0]})"
    return text[:300]


def compile_module(gm: fx.GraphModule, pipeline: str, *, calls=(), symbolic: bool = False,
                   dump: DebugDump | None = None,
                   seconds: dict[str, float] | None = None, donate=(), reuse=(),
                   strided=(), cache=None, remember_failure: bool = False):
    """`gm` imported (with the library `calls` stitched in), run through `pipeline` and
    exported: (Program, the report fields the IR knows). MLIR's diagnostics and fd 2 are
    captured (written to the dump's diagnostics.txt); raises on any failure. `donate`: pairs
    (input, output) of `gm` where the output is the input's new value (`ember.donate`);
    `reuse`: inputs whose memory may hold other values once read (`ember.donated_args`);
    `strided`: [input, strides...] of inputs only library calls read, passed strided
    (`ember.arg_strides`).
    `cache` (an ArtifactCache, a directory, or None for none): a warm start reads the result
    from there instead of compiling (frontend/program_cache.py); not with a debug dump, nor
    for a `symbolic` graph (compiling it may add a guard on a size, which frontend/symbolic.py
    watches for: a cached program would hide it). `remember_failure`: a PipelineFailure is
    kept in the cache too, and a warm start raises it again without compiling."""
    seconds = {} if seconds is None else seconds
    if cache is None or symbolic or (dump is not None and dump.dir is not None):
        return _compile_module(gm, pipeline, calls, symbolic, dump, seconds, donate, reuse,
                               strided)
    from ..runtime.cache import as_cache
    from . import program_cache
    t0 = time.perf_counter()
    cache = as_cache(cache)
    key = program_cache.program_key(gm, pipeline, calls, symbolic, donate, reuse, strided)
    hit = program_cache.load(cache, key) if key is not None else None
    failed = (program_cache.load_failure(cache, key)
              if hit is None and remember_failure and key is not None else None)
    seconds["program_cache"] = time.perf_counter() - t0
    if hit is not None:
        hit[1]["program_cache"] = "hit"
        hit[1]["program_key"] = key     # (a build record names it: build_records.py)
        return hit
    if failed is not None:
        raise PipelineFailure(*failed)
    try:
        program, summary = _compile_module(gm, pipeline, calls, symbolic, dump, seconds, donate,
                                           reuse, strided)
    except PipelineFailure as err:
        if remember_failure and key is not None:
            program_cache.store_failure(cache, key, err.stage, err.diagnostics)
        raise
    if key is not None:
        t0 = time.perf_counter()
        program_cache.store(cache, key, program, summary)
        seconds["program_cache"] += time.perf_counter() - t0
    summary["program_cache"] = "miss" if key is not None else "uncacheable"
    if key is not None:
        summary["program_key"] = key
    return program, summary


def _compile_module(gm, pipeline, calls, symbolic, dump, seconds, donate, reuse, strided=()):
    from .importer import new_context
    from .library_calls import stitch
    from .export_program import export_program

    ctx = new_context()
    t0 = time.perf_counter()
    native = NativeOutput(ctx)
    try:
        with native, ctx, torch.no_grad():
            module = import_graph(gm, ctx, native, symbolic)
            stitch(module, list(calls))
            if donate or reuse or strided:
                _mark_donated(module, gm, donate, reuse, calls, strided)
            seconds["import"] = time.perf_counter() - t0
            if dump is not None:
                dump.stage("import", module)
            remarks: list = []
            run_pipeline(module, pipeline, dump, seconds, remarks)
            t0 = time.perf_counter()
            program = export_program(module)
            summary = _summary(module)
            summary.update(explained(remarks))
            seconds["export"] = time.perf_counter() - t0
    finally:
        if native.lines and dump is not None:
            dump.write("diagnostics.txt", "\n".join(native.lines) + "\n")
    return program, summary


def _mark_donated(module, gm: fx.GraphModule, donate, reuse=(), calls=(), strided=()) -> None:
    """`ember.donate` (pairs), `ember.donated_args` (`reuse`) and `ember.arg_strides`
    (`strided`) on @main, when its arguments
    and results are `gm`'s placeholders and outputs one to one, less those that outlining the
    library `calls` added after them (else nothing is donated: a wrong pairing would write the
    wrong input)."""
    from torch_mlir import ir
    from ..dialects.contract import ARG_STRIDES, DONATE, DONATED_ARGS
    from .export_program import find_funcs
    main = find_funcs(module).get("main")
    if main is None:
        return
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    n_out = len(out) if isinstance(out, (list, tuple)) else 1
    n_in = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    n_in -= len({s for c in calls for s in c.result_slots})
    n_out -= len({s for c in calls for s in c.operand_slots})
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    if len(ftype.inputs) != n_in or len(ftype.results) != n_out:
        return
    if donate:
        DONATE.set(main, [x for pair in donate for x in pair])
    if reuse:
        DONATED_ARGS.set(main, sorted(reuse))
    if strided:
        ARG_STRIDES.set(main, [list(s) for s in strided])


def outline_library(gm: fx.GraphModule, library) -> tuple[fx.GraphModule, list, list]:
    """`gm` with its `library` nodes outlined as calls (frontend/library_calls.py): (graph, the
    calls, the strided library arguments), for compile_module. Library calls lose placement
    kwargs too: the runtime calls them where their inputs are, and a layout or device would not
    survive the trip through an attribute."""
    from .library_calls import outline, strided_library_args
    if not library:
        return fx_prep.strip_placement(gm), [], []
    # outlining copies the graph: its copy loses the placement kwargs (one copy of a large
    # graph, not two: densenet121's graphs have 5,000 to 6,000 nodes)
    strided = strided_library_args(gm, library)
    gm, calls = outline(gm, library, each=fx_prep.drop_placement)
    return gm, calls, strided


def output_dtypes(gm: fx.GraphModule) -> list:
    """The dtypes of a prepared graph's outputs (None for a non-tensor), which the program's
    signedness is restored to (signedness.py)."""
    outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return [getattr(n.meta.get("val"), "dtype", None) if isinstance(n, fx.Node) else None
            for n in (outs if isinstance(outs, (tuple, list)) else (outs,))]


def compile_static(gm: fx.GraphModule, tensors, options: CompileOptions, target: str,
                   dump: DebugDump, kind: str = "graph",
                   library=(), symbolic: bool = False,
                   donate=(), reuse=(), devices=None) -> tuple[Callable, dict[str, Any]]:
    """Compiles a prepared static graph (tensor inputs, unique tensor outputs); raises on any
    failure. `library`: nodes called as ATen kernels inside the program
    (frontend/library_calls.py): library ops and ops ember cannot compile. `devices`: where
    the graph's tensors live (options.run_devices; default: the tensor inputs'). Returns the
    runtime's callable and the report fields it knows."""
    from ..runtime.cache import as_cache

    t_prep = time.perf_counter()
    out_dtypes = output_dtypes(gm)
    gm, calls, strided = outline_library(gm, library)
    # Wall seconds per stage (FX preparation, import, each pipeline element, export, build),
    # for the report.
    seconds: dict[str, float] = {"fx_prep": time.perf_counter() - t_prep}
    pipeline = default_pipeline(options, target)
    unsplit = pipeline.replace(SPLIT_PASS + ",", "")
    cache = as_cache(options.cache_dir) if options.program_cache else None
    try:
        program, summary = compile_module(gm, pipeline, calls=calls, symbolic=symbolic,
                                          dump=dump, seconds=seconds, donate=donate, reuse=reuse,
                                          strided=strided, cache=cache,
                                          remember_failure=unsplit != pipeline)
    except PipelineFailure as err:
        # ember-split-reductions is an optimisation: a graph it leaves unlowerable compiles
        # unsplit (the report says why) rather than running eagerly. The failed attempt's
        # seconds are `split_retry`; a warm start (program cache) knows the verdict and
        # spends no time on it.
        if unsplit == pipeline:
            raise
        prep = seconds.pop("fx_prep")
        failed = sum(seconds.values())
        seconds.clear()
        seconds.update(fx_prep=prep, split_retry=failed)
        program, summary = compile_module(gm, unsplit, calls=calls, symbolic=symbolic,
                                          dump=dump, seconds=seconds, donate=donate, reuse=reuse,
                                          strided=strided, cache=cache)
        summary["split_reductions_off"] = str(err)[:300]
        warn_split_off(summary["split_reductions_off"])
    return load_static(program, summary, tensors, out_dtypes, options, dump, kind, seconds,
                       devices=devices)


def warn_split_off(why: str) -> None:
    """The warning for a graph compiled without ember-split-reductions because that left it
    unlowerable (`why`): correct, but its long reductions run unsplit (efficientnet_b0's
    training ran x0.19 of eager so, on an H200): an ember bug worth one line, not a silent
    slowdown. Also where a warm start builds such a graph from its build record."""
    import warnings
    warnings.warn(f"ember: {SPLIT_PASS} left this graph unlowerable, so it was compiled "
                  f"without it and its long reductions run unsplit (slower); this is an "
                  f"ember bug, please report it: {why[:200]}", UserWarning, stacklevel=3)


def load_static(program, summary: dict[str, Any], tensors, out_dtypes, options: CompileOptions,
                dump, kind: str = "graph", seconds: dict[str, float] | None = None,
                devices=None) -> tuple[Callable, dict[str, Any]]:
    """compile_static's second half: the program compile_module returned (or the program cache
    holds: a build record's, build_records.py) loaded for the devices of `tensors`, CUDA-graphed
    where that pays off. `out_dtypes`: the graph's output dtypes (signedness.py)."""
    from ..runtime.executor import load
    from .signedness import restore_signedness

    seconds = {} if seconds is None else seconds
    restore_signedness(program, [getattr(t, "dtype", None) for t in tensors], out_dtypes)
    dump.write(backend_named(program.target).source_file, program.source)
    device = run_device(program.target, run_devices(tensors) if devices is None else devices)
    t0 = time.perf_counter()
    compiled = load(program, device, cache=options.cache_dir,
                    parallel_compile=options.parallel_compile,
                    precompile_overlap=options.precompile_overlap,
                    weight_copies=options.prepack_weights and kind == "inference")
    seconds["build"] = time.perf_counter() - t0
    # What the runtime really allocates per call for the planned values, next to the plan's
    # planned_peak_bytes. (With CUDA graphs the arena comes from the graph's private pool,
    # whose size torch does not expose; it is not reported.)
    summary["runtime_arena_bytes"] = compiled.arena_bytes
    pre = getattr(compiled, "precompiled", None)
    if pre is not None:     # runtime/triton_warm.py: Triton compiles before the first launch
        summary["triton_precompile"] = {"compiled": pre.get("ok", 0),
                                        "cached": pre.get("cached", 0),
                                        "errors": len(pre.get("errors", ())),
                                        "seconds": pre.get("seconds"),
                                        "stamped": bool(pre.get("stamped")),
                                        "pending": bool(pre.get("pending"))}
    if compiled.freed_inputs:     # donated inputs freed after their last use (not graphed)
        summary["inputs_freed"] = compiled.freed_inputs
    summary["stage_seconds"] = {k: round(v, 4) for k, v in seconds.items()}
    # Inference and training graphs alike, where the launches saved outweigh the copies a
    # replay adds (a training forward's saved activations are cloned out of the graph's
    # memory, and copied into the backward graph's static inputs): Python-driven launches of
    # a training step cost more than the step's GPU time on small and mid-sized models.
    written = frozenset(v.into_input for v in program.values if v.into_input is not None)
    if written:
        summary["inputs_written_in_place"] = len(written)
    # donated inputs whose memory holds later values (the warm-up before a CUDA-graph capture
    # runs on copies of them too: the capture must read their values)
    reused = frozenset(v.in_input for v in program.values if v.in_input is not None)
    if reused:
        summary["inputs_reused"] = len(reused)
    written |= reused
    static = all(isinstance(d, int) for v in program.values for d in v.shape)
    if (options.cudagraphs and device.type == "cuda" and static
            and graph_pays_off(program, kind,
                               torch.cuda.get_device_properties(device).total_memory)):
        from ..runtime.cuda_graphs import GraphedProgram
        compiled = GraphedProgram(compiled, unread_host_inputs=_unread_host_inputs(program),
                                  written_inputs=written,
                                  # a training step's forward and backward share one pool;
                                  # other graphs (an optimizer step reading the gradients in
                                  # place) keep their own: the narrower claim, the one the GPU
                                  # tests check (test_shared_graph_pool.py)
                                  share_pool=options.shared_graph_pool
                                  and kind in ("forward", "backward"),
                                  tail_min_bytes=graph_tail_min_bytes(options, kind),
                                  # (an explicit option holds for a generated kernel too)
                                  tail_kernel_min_bytes=options.graph_tail_min_bytes,
                                  # a backward's gradients may come from its tail (new memory
                                  # per call: the embedding gradients, runtime/executor's
                                  # _fill_tail), not held in the pool between steps
                                  tail_guarded=kind == "backward" and options.backward_tail,
                                  copy_max_bytes=options.graph_copy_max_bytes,
                                  # its launches' host time without the graph (its copies'
                                  # cost: runtime/cuda_graphs.COPY_MAX_BYTES)
                                  ungraphed_host_s=_launches(program) * LAUNCH_OVERHEAD_S,
                                  copy_bytes_per_s=COPY_BYTES_PER_S)
        summary["cudagraphs"] = True
    return compiled, summary


# `graph_tail_min_bytes=None`: an inference graph's last library call or matmul runs after the
# replay whatever its outputs' size (measured on the H200: no slower, one copy kernel fewer),
# a generated kernel only from 4 MiB (GraphedProgram.TAIL_KERNEL_MIN_BYTES), a training
# graph's last step only from 4 MiB (GraphedProgram.TAIL_MIN_BYTES: not measured lower)
def graph_tail_min_bytes(options, kind: str) -> int | None:
    if options.graph_tail_min_bytes is not None:
        return options.graph_tail_min_bytes
    return 0 if kind == "inference" else None


def format_error(err: BaseException) -> str:
    """The error with its traceback, as a debug dump writes it."""
    import traceback
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    seen, e = set(), err
    while e is not None and id(e) not in seen:     # the diagnostics, with their full locations
        seen.add(id(e))
        if isinstance(e, PipelineFailure) and e.diagnostics:
            text += f"\n{e.stage} diagnostics:\n" + "\n".join(e.diagnostics) + "\n"
        e = e.__cause__ or e.__context__
    return text


