"""One FX graph through ember: specialize -> prep -> import -> pipeline -> Program -> runtime.

`EmberGraph` is the callable handed back to AOTAutograd. It compiles lazily, per concrete input
signature (shapes, dtypes, devices, contiguity, scalar values), because ember's IR is static
(docs/internals.md, stage 1) and only real inputs say which device/target to build for.

Invariant: the user's program never breaks because of ember (with `fallback`, the default).
  * A node ember cannot compile runs in eager torch inside the compiled program (a library
    call, frontend/library_calls.py); only a node that cannot be a call (a tuple or symbolic
    value escaping) splits the graph (frontend/partition.py).
  * Any other compile failure (specialization, import, a pass, export, build, load) runs the
    whole graph eagerly: the ORIGINAL graph, with its placement kwargs, as AOTAutograd gave it.
  * An error from a compiled graph at run time (any call) reruns the call eagerly: if eager
    raises too, eager's error is the user's; otherwise the graph runs eagerly from then on.
  * Diagnostics go to the debug dump and one warning per op kind (report.warn_once), never
    raw to stderr (report.NativeOutput).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.fx as fx

from . import fx_prep, symbolic
from .input_mutations import lift_input_mutations, write_back
from .options import CompileOptions, default_pipeline, resolve_target
from .report import DebugDump, NativeOutput, describe_error, new_graph_id, record, warn_once


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


def run_pipeline(module, pipeline: str, dump: DebugDump | None = None,
                 seconds: dict[str, float] | None = None) -> None:
    """Runs `pipeline` element by element so that the IR after each one can be dumped;
    `seconds` (when given) gets each element's wall time, by stage label."""
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


def graph_pays_off(program, kind: str = "inference") -> bool:
    """Whether replaying `program` as one CUDA graph beats launching its steps one by one: the
    launches saved against the copies a replay adds (outputs cloned out of the graph's pool;
    a backward graph's inputs, the saved activations, copied into its static buffers; a
    forward's inputs are mostly parameters, read in place)."""
    launches = sum(1 for s in program.steps if s.kind in ("kernel", "extern", "library"))

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


def compile_static(gm: fx.GraphModule, tensors, options: CompileOptions, target: str,
                   dump: DebugDump, kind: str = "graph",
                   library=(), symbolic: bool = False) -> tuple[Callable, dict[str, Any]]:
    """Compiles a prepared static graph (tensor inputs, unique tensor outputs); raises on any
    failure. `library`: nodes called as ATen kernels inside the program
    (frontend/library_calls.py): library ops and ops ember cannot compile. Returns the runtime's
    callable and the report fields it knows."""
    from ..runtime.executor import load
    from .importer import new_context
    from .library_calls import outline, stitch
    from .schedule import export_program, restore_signedness

    outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    out_dtypes = [getattr(n.meta.get("val"), "dtype", None) if isinstance(n, fx.Node) else None
                  for n in (outs if isinstance(outs, (tuple, list)) else (outs,))]
    calls = []
    # Library calls lose placement kwargs too: the runtime calls them where their inputs are,
    # and a layout or device would not survive the trip through an attribute.
    stripped = fx_prep.strip_placement(gm)
    if stripped is not gm:
        by_name = {n.name: n for n in stripped.graph.nodes}
        library = {by_name[n.name] for n in library}
        gm = stripped
    if library:
        gm, calls = outline(gm, library)
    ctx = new_context()
    # Wall seconds per stage (import, each pipeline element, export, build), for the report.
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    # MLIR's part (import, passes, export) runs with its diagnostics and fd 2 captured; the
    # build captures the compiler's output itself, and its errors carry it (error.txt).
    native = NativeOutput(ctx)
    try:
        with native, ctx, torch.no_grad():
            module = import_graph(gm, ctx, native, symbolic)
            stitch(module, calls)
            seconds["import"] = time.perf_counter() - t0
            dump.stage("import", module)
            run_pipeline(module, default_pipeline(options, target), dump, seconds)
            t0 = time.perf_counter()
            program = export_program(module)
            restore_signedness(program, [getattr(t, "dtype", None) for t in tensors], out_dtypes)
            summary = _summary(module)
            seconds["export"] = time.perf_counter() - t0
    finally:
        if native.lines:
            dump.write("diagnostics.txt", "\n".join(native.lines) + "\n")
    dump.write("kernels.cpp" if program.lang == "cpp" else "kernels.py", program.source)
    device = (_devices(tensors) or [torch.device("cpu")])[0]
    t0 = time.perf_counter()
    compiled = load(program, device, cache=options.cache_dir,
                    parallel_compile=options.parallel_compile)
    seconds["build"] = time.perf_counter() - t0
    summary["stage_seconds"] = {k: round(v, 4) for k, v in seconds.items()}
    # Inference and training graphs alike, where the launches saved outweigh the copies a
    # replay adds (a training forward's saved activations are cloned out of the graph's
    # memory, and copied into the backward graph's static inputs): Python-driven launches of
    # a training step cost more than the step's GPU time on small and mid-sized models.
    static = all(isinstance(d, int) for v in program.values for d in v.shape)
    if (options.cudagraphs and device.type == "cuda" and static
            and graph_pays_off(program, kind)):
        from ..runtime.cuda_graphs import GraphedProgram
        compiled = GraphedProgram(compiled, unread_host_inputs=_unread_host_inputs(program))
        summary["cudagraphs"] = True
    return compiled, summary


class _WholeGraphEager(Exception):
    """Raised inside a compile when the whole graph should run eagerly (`reason` says why)."""

    def __init__(self, reason: BaseException | str | None, ops_blamed: bool = False):
        super().__init__(str(reason))
        self.reason = reason
        self.ops_blamed = ops_blamed     # the warning already named the ops


class EmberGraph:
    """A compiled ATen graph: specializes and compiles per input signature, then runs.

    `allow_partition`: whether a node that cannot become a call inside the program may split
    the graph (False for the pieces of a split graph). `on_eager(graph)`: called when this graph
    turns out to run wholly in eager torch (the backend then calls the user's Dynamo graph
    directly, without AOTAutograd's wrappers, so that a graph ember cannot compile at all costs
    what eager costs)."""

    def __init__(self, gm: fx.GraphModule, options: CompileOptions, kind: str = "graph",
                 allow_partition: bool = True, decompositions=None,
                 graph_id: str | None = None, on_eager: Callable | None = None):
        # copy_ into inputs (kept by AOTAutograd) -> extra outputs, written back after each call
        self._mutations = lift_input_mutations(gm)
        self.gm = gm
        self.options = options
        self.kind = kind
        self.allow_partition = allow_partition
        self.decompositions = decompositions
        self.graph_id = graph_id or new_graph_id(kind)
        self.on_eager = on_eager
        self._cache: dict[tuple, Callable] = {}
        self.reports: list[dict[str, Any]] = []
        self.eager_modules: list[fx.GraphModule] = []    # what runs in torch (tests, debugging)
        # Dynamo guards shapes, dtypes and strides of a static graph already: no per-call key.
        self._static_graph = not fx_prep.needs_specialization(gm)
        # A graph with symbolic sizes is first compiled once with them (frontend/symbolic.py);
        # what that cannot handle is compiled per input shape.
        self._try_symbolic = not self._static_graph and symbolic.has_symbols(gm)
        self._static: Callable | None = None
        self._eager = _eager_call(gm)
        self._rejects: str | None | bool = False     # not judged yet (eager_rejects.py)

    def __call__(self, *args):
        out = self._call(args)
        return out if self._mutations is None else write_back(self._mutations, args, out)

    def _call(self, args):
        fn = self._static
        if fn is None and self._try_symbolic:
            self._try_symbolic = False
            if self._eager_rejects() is None:
                fn = self._static = symbolic.build(self, args)
        if fn is None:
            key = fx_prep.input_key(args)
            fn = self._cache.get(key)
            if fn is None:
                fn = self._cache[key] = self._build(args)
                if self._static_graph:
                    self._static = fn
        try:
            return fn(*args)
        except Exception as err:
            if fn is self._eager or not self.options.fallback:
                raise
            return self._failed_at_run_time(fn, err, args)

    def _eager_rejects(self) -> str | None:
        """Why eager's kernels reject an op of this graph for its dtypes (then the graph runs
        eagerly, so that a call raises eager's error), or None; judged once."""
        if self._rejects is False:
            from .eager_rejects import rejection
            self._rejects = rejection(self.gm)
        return self._rejects

    @property
    def report(self) -> dict[str, Any] | None:
        return self.reports[-1] if self.reports else None

    def _failed_at_run_time(self, fn: Callable, err: Exception, args):
        """A compiled call raised. The graph is functional, so eager can redo the call: if
        eager raises as well, the error is the program's (an index out of range) and eager's
        exception is what the user sees; if not, ember was wrong and this graph runs eagerly
        from now on."""
        try:
            out = self._eager(*args)
        except Exception as eager_err:
            raise eager_err from None
        report = getattr(fn, "ember_report", None)
        if report is not None:
            report["status"] = "eager"
            report["error"] = f"at run time: {describe_error(err)}"
            report["eager_fallback_ops"] = _compute_ops(self.gm)
            report["fallback_reasons"] = {op: report["error"]
                                          for op in report["eager_fallback_ops"]}
            dump = DebugDump(self.options.debug_dir, report["graph_id"])
            dump.write("error.txt", _format(err))
            dump.report(report)
        warn_once(f"run:{self.graph_id}", f"ember: graph {self.graph_id} failed at run time "
                  f"({describe_error(err)}); it runs in eager torch from now on")
        if self._static is fn:
            self._static = self._eager
            if self.on_eager is not None:
                self.on_eager(self)
        for k, v in list(self._cache.items()):
            if v is fn:
                self._cache[k] = self._eager
        return out

    def _build(self, args) -> Callable:
        t0 = time.perf_counter()
        n = len(self._cache)
        graph_id = self.graph_id if n == 0 else f"{self.graph_id}-s{n}"
        dump = DebugDump(self.options.debug_dir, graph_id)
        report: dict[str, Any] = {
            "graph_id": graph_id, "target": None, "status": "compiled",
            "input_shapes": [list(t.shape) for t in args if isinstance(t, torch.Tensor)],
            "num_kernels": 0, "num_externs": 0, "fused_groups": [], "eager_fallback_ops": [],
            "fallback_reasons": {}, "planned_peak_bytes": 0, "unplanned_peak_bytes": 0,
            "input_mutations": len(self._mutations.targets) if self._mutations else 0,
        }
        try:
            run = self._compile(args, report, dump)
        except Exception as err:
            if not self.options.fallback:
                if isinstance(err, (EmberCompileError, _WholeGraphEager)):
                    raise EmberCompileError(f"ember: compiling graph {graph_id} failed: "
                                            f"{err}") from err
                raise EmberCompileError(f"ember: compiling graph {graph_id} failed: "
                                        f"{describe_error(err)}") from err
            run = self._whole_graph_eager(err, report, dump)
        report["compile_seconds"] = round(time.perf_counter() - t0, 4)
        dump.report(report)
        record(report)
        self.reports.append(report)
        if run is not self._eager:
            run.ember_report = report
        elif self._static_graph and self.on_eager is not None:
            self.on_eager(self)
        return run

    def _whole_graph_eager(self, err: BaseException, report: dict[str, Any],
                           dump: DebugDump) -> Callable:
        reason = err.reason if isinstance(err, _WholeGraphEager) else err
        text = reason if isinstance(reason, str) else describe_error(reason)
        if isinstance(reason, BaseException):
            dump.write("error.txt", _format(reason))
        report["status"] = "eager"
        report["error"] = text
        ops = _compute_ops(self.gm)
        report["eager_fallback_ops"] = ops
        reasons = report["fallback_reasons"]
        report["fallback_reasons"] = {op: reasons.get(op, text) for op in ops}
        if not (isinstance(err, _WholeGraphEager) and err.ops_blamed):
            warn_once(f"graph:{text}", f"ember: graph {report['graph_id']} runs in eager "
                      f"torch: {text}")
        self.eager_modules.append(self.gm)
        return self._eager

    def _compile(self, args, report: dict[str, Any], dump: DebugDump) -> Callable:
        rejected = self._eager_rejects()
        if rejected is not None:
            raise _WholeGraphEager(rejected)
        gm, pos = self.gm, None
        if fx_prep.needs_specialization(gm):
            gm, pos = fx_prep.specialize(gm, args, self.decompositions)
        tensors = list(args) if pos is None else [args[i] for i in pos]
        target = resolve_target(self.options.target, _devices(tensors))
        report["target"] = target
        report["input_shapes"] = [list(t.shape) for t in tensors if isinstance(t, torch.Tensor)]
        dump.write("fx_graph.txt", gm.code)
        prep = fx_prep.prepare(gm)
        if target == "cpu" and prep.gm is not None:
            # No working C++/OpenMP compiler: one clear warning, and the graph runs eagerly.
            from ..runtime.cpp_build import check_compiler
            check_compiler(self.options.cache_dir)

        run: Callable | None = None
        from .library_calls import can_outline, outline_blocker
        from .partition import library_nodes, op_name
        library = library_nodes(prep.gm, target) if prep.gm is not None else set()
        # Library ops whose arguments and results are plain tensors become calls inside the
        # program; any other (a tuple or symbolic int escaping) splits the graph around it.
        inline = {n for n in library if can_outline(n)}
        if library:
            report["library_calls"] = sorted(op_name(n) for n in library)
        if library - inline:
            report["library_splits"] = {n.name: outline_blocker(n) for n in library - inline}
            report["num_externs"] = len(library)
            run = self._fallback(prep.gm, tensors, target, None, report, dump, inline)
        elif prep.gm is not None:
            try:
                run, summary = compile_static(prep.gm, tensors, self.options, target, dump,
                                              self.kind, library=inline)
                report.update(summary)
                report["num_externs"] = report.get("num_externs", 0) + len(inline)
            except Exception as err:
                if not self.options.fallback:
                    raise EmberCompileError(f"ember: compiling graph {report['graph_id']} "
                                            f"failed: {describe_error(err)}") from err
                dump.write("error.txt", _format(err))
                run = self._fallback(prep.gm, tensors, target, err, report, dump, inline)
        else:
            report["status"] = "host-only"

        host = prep.host_gm
        if run is None and host is None:
            return lambda *call_args: fx_prep.assemble(prep, (), ())

        def call(*call_args):
            ts = call_args if pos is None else [call_args[i] for i in pos]
            c = run(*fx_prep.compiled_inputs(prep, ts)) if run is not None else ()
            h = host(*ts) if host is not None else ()
            return fx_prep.assemble(prep, c, h)
        return call

    def _fallback(self, gm: fx.GraphModule, tensors, target: str, err: Exception | None,
                  report: dict[str, Any], dump: DebugDump, inline: set) -> Callable:
        """The prepared graph `gm` did not compile as it is (`err`), or holds library nodes that
        cannot be calls (`err` None). Finds the nodes ember cannot compile (partition.probe)
        and, in order of preference: compiles one program in which they are library calls;
        splits the graph around the nodes that cannot be calls; runs the whole graph eagerly
        (raises _WholeGraphEager)."""
        from .partition import (blame, can_call, compute_nodes, library_nodes, op_name,
                                partition_graph)
        library = library_nodes(gm, target)
        reasons = blame(gm, self.options, target, exclude=library)
        if err is not None and not reasons:
            raise _WholeGraphEager(err)     # no op to blame: a build, load or pass failure
        names: dict[str, str] = {}
        for node, why in reasons.items():
            names.setdefault(op_name(node), why)
        report["eager_fallback_ops"] = sorted(names)
        report["fallback_reasons"] = dict(sorted(names.items()))
        if err is not None:
            report["error"] = describe_error(err)   # why the graph did not compile as one
        for op, why in sorted(names.items()):
            warn_once(f"op:{op}", f"ember: {op} runs in eager torch ({why})")
        if reasons and not [n for n in compute_nodes(gm) if n not in reasons and n not in library]:
            raise _WholeGraphEager("no op of the graph compiles", ops_blamed=True)

        calls = {n for n in reasons if can_call(n)}
        split = (set(reasons) - calls) | (library - inline)
        report["status"] = "partitioned"
        if not split:
            try:
                run, summary = compile_static(gm, tensors, self.options, target, dump, self.kind,
                                              library=inline | calls)
                report.update(summary)
                report["num_externs"] = report.get("num_externs", 0) + len(inline)
                return run
            except Exception as perr:   # fall through: split around every failing node
                dump.write("error-with-calls.txt", _format(perr))
                report["error"] = describe_error(perr)
                split = set(reasons) | (library - inline)
        if not self.allow_partition:
            raise _WholeGraphEager(report.get("error") or "cannot split", ops_blamed=True)
        try:
            module = partition_graph(gm, split, self.options, report["graph_id"],
                                     self.decompositions, self.kind)
        except Exception as perr:
            raise _WholeGraphEager(perr) from perr
        self.eager_modules.append(module)
        return _as_list(module)


def _compute_ops(gm: fx.GraphModule) -> list[str]:
    from .partition import eager_ops
    return eager_ops(gm)


def _format(err: BaseException) -> str:
    import traceback
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


def _eager_call(gm: fx.GraphModule) -> Callable:
    """The graph as torch runs it, returning what a compiled call returns (a list, or the one
    value of a graph that returns a bare value)."""
    def call(*args):
        out = gm(*args)
        return list(out) if isinstance(out, (tuple, list)) else out
    return call


def _as_list(fn: Callable) -> Callable:
    """Graph modules return a tuple (or one value); compiled programs return a list."""
    def call(*args):
        out = fn(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]
    return call
