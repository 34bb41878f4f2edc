"""One FX graph through ember: specialize -> prep -> import -> pipeline -> Program -> runtime.

`EmberGraph` is the callable handed back to AOTAutograd. It compiles lazily, per concrete input
signature (shapes, dtypes, devices, contiguity, scalar values), because ember's IR is static
(docs/internals.md, stage 1) and only real inputs say which device/target to build for. Any
failure inside ember falls back to eager torch (a partition, or the whole graph) with one
warning; the user's program never breaks because ember cannot compile something.
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable

import torch
import torch.fx as fx

from . import fx_prep
from .options import CompileOptions, default_pipeline, resolve_target
from .report import DebugDump, describe_error, new_graph_id, record


class EmberCompileError(RuntimeError):
    """ember could not compile a graph (and fallback is off)."""


class PipelineFailure(RuntimeError):
    """A pass failed; carries the diagnostics it emitted."""

    def __init__(self, stage: str, diagnostics: list[str]):
        first = diagnostics[0] if diagnostics else "(no diagnostic)"
        super().__init__(f"{stage} failed: {first}" + "".join(f"\n  {d}" for d in diagnostics[1:]))
        self.stage = stage
        self.diagnostics = list(diagnostics)


def _devices(tensors) -> list[torch.device]:
    return [t.device for t in tensors if isinstance(t, torch.Tensor)]


def stage_label(element: str) -> str:
    from ..passes.pipeline import parse_element
    return parse_element(element)[0]


def run_pipeline(module, pipeline: str, dump: DebugDump | None = None) -> None:
    """Runs `pipeline` element by element so that the IR after each one can be dumped."""
    from ..passes.pipeline import build_pass_manager, split_top_level, strip_anchor
    ctx = module.context
    diagnostics: list[str] = []

    def collect(d):
        # Python passes emit located errors; keep them for the exception (and the report)
        # instead of letting them go to stderr, which a user's program should not see.
        diagnostics.append(f"{d.location}: {d.message}")
        return True

    handler = ctx.attach_diagnostic_handler(collect)
    try:
        for element in split_top_level(strip_anchor(pipeline)):
            pm = build_pass_manager(f"builtin.module({element})", context=ctx)
            try:
                pm.run(module.operation)
            except Exception as err:
                raise PipelineFailure(stage_label(element), diagnostics) from err
            if dump is not None:
                dump.stage(stage_label(element), module)
    finally:
        handler.detach()


def _summary(module) -> dict[str, Any]:
    from .schedule import find_funcs, kernel_funcs, kernel_ops, _int_attr
    main = find_funcs(module).get("main")
    externs = []
    if main is not None:
        for op in main.regions[0].blocks[0].operations:
            if op.operation.name == "ember.extern":
                externs.append(op.operation)
    kernels = kernel_funcs(module)
    return {
        "num_kernels": len(kernels),
        "num_externs": len(externs),
        "fused_groups": [kernel_ops(k) for k in kernels],
        "planned_peak_bytes": _int_attr(main, "ember.arena_bytes") if main else 0,
        "unplanned_peak_bytes": _int_attr(main, "ember.unplanned_bytes") if main else 0,
    }


# What a CUDA graph saves per launch it replaces (Python + driver), and the device bandwidth its
# output copies cost; both rough, measured on an H200 (docs/internals.md, CUDA graphs).
LAUNCH_OVERHEAD_S = 5e-6
COPY_BYTES_PER_S = 2e12


def graph_pays_off(program) -> bool:
    launches = sum(1 for s in program.steps if s.kind in ("kernel", "extern"))
    out_bytes = 0
    for vid in program.outputs:
        v = program.values[vid]
        n = 1
        for d in v.shape:
            n *= d
        out_bytes += n * getattr(torch, v.dtype).itemsize
    return launches * LAUNCH_OVERHEAD_S > 2 * out_bytes / COPY_BYTES_PER_S


def compile_static(gm: fx.GraphModule, tensors, options: CompileOptions, target: str,
                   dump: DebugDump, kind: str = "graph",
                   library=()) -> tuple[Callable, dict[str, Any]]:
    """Compiles a prepared static graph (tensor inputs, unique tensor outputs); raises on any
    failure. `library`: nodes called as ATen library kernels inside the program
    (frontend/library_calls.py). Returns the runtime's callable and the report fields it knows."""
    from ..runtime.executor import load
    from .importer import import_fx, new_context
    from .library_calls import outline, stitch
    from .schedule import export_program

    calls = []
    if library:
        gm, calls = outline(gm, library)
    ctx = new_context()
    with ctx, torch.no_grad():
        module = import_fx(gm, ctx)
        stitch(module, calls)
        dump.stage("import", module)
        run_pipeline(module, default_pipeline(options, target), dump)
        program = export_program(module)
        summary = _summary(module)
    dump.write("kernels.cpp" if program.lang == "cpp" else "kernels.py", program.source)
    device = (_devices(tensors) or [torch.device("cpu")])[0]
    compiled = load(program, device, cache=options.cache_dir)
    # Only inference graphs (a training forward returns its saved activations, which the
    # graph's outputs would have to copy out on every step), and only where the launches saved
    # outweigh that copy: a replay clones its outputs out of the graph's memory.
    if (options.cudagraphs and kind == "inference" and device.type == "cuda"
            and graph_pays_off(program)):
        from ..runtime.cuda_graphs import GraphedProgram
        compiled = GraphedProgram(compiled)
        summary["cudagraphs"] = True
    return compiled, summary


class EmberGraph:
    """A compiled ATen graph: specializes and compiles per input signature, then runs."""

    def __init__(self, gm: fx.GraphModule, options: CompileOptions, kind: str = "graph",
                 allow_partition: bool = True, decompositions=None,
                 graph_id: str | None = None):
        self.gm = gm
        self.options = options
        self.kind = kind
        self.allow_partition = allow_partition
        self.decompositions = decompositions
        self.graph_id = graph_id or new_graph_id(kind)
        self._cache: dict[tuple, Callable] = {}
        self.reports: list[dict[str, Any]] = []
        # Dynamo guards shapes, dtypes and strides of a static graph already: no per-call key.
        self._static_graph = not fx_prep.needs_specialization(gm)
        self._static: Callable | None = None

    def __call__(self, *args):
        if self._static is not None:
            return self._static(*args)
        key = fx_prep.input_key(args)
        fn = self._cache.get(key)
        if fn is None:
            fn = self._cache[key] = self._build(args)
            if self._static_graph:
                self._static = fn
        return fn(*args)

    @property
    def report(self) -> dict[str, Any] | None:
        return self.reports[-1] if self.reports else None

    def _build(self, args) -> Callable:
        t0 = time.perf_counter()
        n = len(self._cache)
        graph_id = self.graph_id if n == 0 else f"{self.graph_id}-s{n}"
        gm, pos = self.gm, None
        if fx_prep.needs_specialization(gm):
            gm, pos = fx_prep.specialize(gm, args, self.decompositions)
        tensors = list(args) if pos is None else [args[i] for i in pos]
        target = resolve_target(self.options.target, _devices(tensors))
        dump = DebugDump(self.options.debug_dir, graph_id)
        dump.write("fx_graph.txt", gm.code)
        prep = fx_prep.prepare(gm)

        report: dict[str, Any] = {
            "graph_id": graph_id, "target": target, "status": "compiled",
            "input_shapes": [list(t.shape) for t in tensors if isinstance(t, torch.Tensor)],
            "num_kernels": 0, "num_externs": 0, "fused_groups": [], "eager_fallback_ops": [],
            "planned_peak_bytes": 0, "unplanned_peak_bytes": 0,
        }
        run: Callable | None = None
        from .library_calls import can_outline, outline_blocker
        from .partition import library_nodes, op_name
        library = library_nodes(prep.gm) if prep.gm is not None and self.allow_partition else set()
        # Library ops whose arguments and results are plain tensors become calls inside the
        # program; any other (a tuple or symbolic int escaping) splits the graph around it.
        inline = {n for n in library if can_outline(n)}
        if library:
            report["library_calls"] = sorted(op_name(n) for n in library)
        if library - inline:
            report["library_splits"] = {n.name: outline_blocker(n) for n in library - inline}
            report["num_externs"] = len(library)
            run = self._fallback(prep.gm, tensors, target, graph_id, None, report)
        elif prep.gm is not None:
            try:
                run, summary = compile_static(prep.gm, tensors, self.options, target, dump,
                                              self.kind, library=inline)
                report.update(summary)
                report["num_externs"] = report.get("num_externs", 0) + len(inline)
            except Exception as err:
                if not self.options.fallback:
                    raise EmberCompileError(f"ember: compiling graph {graph_id} failed: "
                                            f"{err}") from err
                dump.write("error.txt", _format(err))
                run = self._fallback(prep.gm, tensors, target, graph_id, err, report)
        else:
            report["status"] = "host-only"
        report["compile_seconds"] = round(time.perf_counter() - t0, 4)
        dump.report(report)
        record(report)
        self.reports.append(report)

        host = prep.host_gm
        checked = run is None or report["status"] != "compiled"

        def call(*call_args):
            nonlocal run, checked
            ts = call_args if pos is None else [call_args[i] for i in pos]
            cs = fx_prep.compiled_inputs(prep, ts)
            if not checked:
                # The first run is the last place an ember bug can show (a kernel or an extern
                # failing on real data); the graph is functional, so eager can redo it.
                try:
                    c = run(*cs)
                except Exception as err:
                    if not self.options.fallback:
                        raise
                    dump.write("error.txt", _format(err))
                    run = self._fallback(prep.gm, ts, target, graph_id, err, report)
                    dump.report(report)
                    c = run(*cs)
                checked = True
            else:
                c = run(*cs) if run is not None else ()
            h = host(*ts) if host is not None else ()
            return fx_prep.assemble(prep, c, h)
        return call

    def _fallback(self, gm: fx.GraphModule, tensors, target: str, graph_id: str,
                  err: Exception, report: dict[str, Any]) -> Callable:
        from .partition import eager_ops, partition_graph
        if self.allow_partition:
            try:
                split, ops = partition_graph(gm, self.options, target, graph_id,
                                             self.decompositions, self.kind)
            except Exception as perr:  # probing itself failed: the whole graph runs eagerly
                split, ops = None, None
                err = perr
            if split is not None:
                report["status"] = "partitioned"
                report["eager_fallback_ops"] = ops
                if err is not None:     # why the whole graph did not compile as one program
                    report["error"] = _first_line(err)
                if ops:
                    warnings.warn(f"ember: graph {graph_id}: ops run by eager torch (ember "
                                  f"cannot compile them): {', '.join(ops)}", stacklevel=2)
                return _as_list(split)
        ops = eager_ops(gm)
        report["status"] = "eager"
        report["eager_fallback_ops"] = ops
        report["error"] = _first_line(err)
        warnings.warn(f"ember: graph {graph_id} runs by eager torch ({_first_line(err)}); "
                      f"ops: {', '.join(ops)}", stacklevel=2)
        return _as_list(gm)


def _format(err: BaseException) -> str:
    import traceback
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


_first_line = describe_error


def _as_list(fn: Callable) -> Callable:
    """Graph modules return a tuple (or one value); compiled programs return a list."""
    def call(*args):
        out = fn(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]
    return call
