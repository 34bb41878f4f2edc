"""One FX graph through ember: specialize -> prep -> import -> pipeline -> Program -> runtime.

`EmberGraph` is the callable handed back to AOTAutograd. It compiles lazily, per concrete input
signature (shapes, dtypes, devices, contiguity, scalar values), because ember's IR is static
(docs/internals.md, stage 1) and only real inputs say which device/target to build for.

Invariant: the user's program never breaks because of ember (with `fallback`, the default).
  * A node ember cannot compile runs in eager torch inside the compiled program (a library
    call, frontend/library_calls.py); only a node that cannot be a call (a tuple or symbolic
    value escaping) splits the graph (frontend/partition.py).
  * A pass failure that no node alone explains (a fused kernel a lowering cannot code) is
    traced back to the nodes of the failing kernel, which become calls the same way
    (frontend/kernel_blame.py); the rest stays one compiled program.
  * Any other compile failure (specialization, import, a pass, export, build, load) runs the
    whole graph eagerly: the ORIGINAL graph, with its placement kwargs, as AOTAutograd gave it.
  * An error from a compiled graph at run time (any call) reruns the call eagerly: if eager
    raises too, eager's error is the user's; otherwise the graph runs eagerly from then on.
  * Diagnostics go to the debug dump and one warning per op kind (report.warn_once), never
    raw to stderr (report.NativeOutput).
"""
from __future__ import annotations

import contextlib
import gc
import time
from typing import Any, Callable

import torch
import torch.fx as fx

from . import fx_prep, host_calls, symbolic
from .compile_module import (COPY_BYTES_PER_S, LAUNCH_OVERHEAD_S, PipelineFailure,  # noqa: F401
                             _unread_host_inputs, compile_static, format_error as _format,
                             graph_pays_off, import_graph, run_pipeline)
from .input_mutations import lift_input_mutations, write_back
from .options import CompileOptions, resolve_target, run_devices
from .report import DebugDump, describe_error, new_graph_id, record, warn_once


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off while a graph compiles (and while AOTAutograd
    traces it in the backend). The compile allocates millions of small objects (FX nodes,
    MLIR handles, schedule keys) and, with Dynamo's and AOTAutograd's objects alive, every
    full collection it triggers walks the whole heap: a quarter of GPT-2's training compile was
    spent there. Reference counting frees nearly everything; the cycles left (discarded FX
    graphs, fake tensors) are collected once it is back on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class EmberCompileError(RuntimeError):
    """ember could not compile a graph (and fallback is off)."""


def _output_sizes(gm: fx.GraphModule) -> dict[str, int]:
    """How many tensors the graph returns and their bytes (static sizes): for a training
    forward, mostly the values saved for the backward."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    vals = [getattr(o, "meta", {}).get("val") for o in (out if isinstance(out, (list, tuple))
                                                         else (out,))]
    nodes = out if isinstance(out, (list, tuple)) else (out,)
    nbytes = passed = count = 0
    for node, v in zip(nodes, vals):
        if not isinstance(v, torch.Tensor):
            continue
        count += 1
        try:
            size = int(v.numel()) * v.element_size()
        except (TypeError, RuntimeError):       # a symbolic size
            continue
        nbytes += size
        if getattr(node, "op", None) == "placeholder":
            passed += size
    # input_output_bytes: outputs that are inputs returned as they are (a training forward's
    # saved parameters): no new memory
    return {"num_outputs": count, "output_bytes": nbytes, "input_output_bytes": passed}


def _plan_users(prep) -> dict[int, set[int]]:
    """Program output -> the graph outputs made from it (itself or a view of it)."""
    users: dict[int, set[int]] = {}
    for i, entry in enumerate(prep.plan):
        if entry[0] in ("compiled", "view"):
            users.setdefault(entry[1], set()).add(i)
    return users


def _host_reads(prep) -> set[int]:
    """The graph inputs the host half reads (placeholders of `prep.host_gm` with users)."""
    if prep.host_gm is None:
        return set()
    return {i for i, n in enumerate(n for n in prep.host_gm.graph.nodes
                                    if n.op == "placeholder") if n.users}


def _lend(run, prep, mutations, guarded: range | None, pos=None) -> None:
    """A CUDA-graphed program hands some outputs out of its pool uncloned
    (runtime/cuda_graphs.py):
      * the new values of mutated inputs: `write_back` copies them into the inputs before the
        next replay can overwrite them, and nothing else sees them (an AdamW step: hundreds of
        parameters and moments, each otherwise allocated and copied twice per step);
      * as guarded aliases (`guarded`: graph output indices): a replay while one of them is
        still alive runs without the graph. A training forward's saved activations
        (AOTAutograd's slice of its outputs): only the backward reads them, in place — not
        cloned out, not copied into the backward; a backward's gradients: autograd adds them to
        `.grad` or hands them on, and they are dead by the next backward unless kept
        (accumulation). A program output that also feeds another output is not lent."""
    from ..runtime.cuda_graphs import GraphedProgram
    if not isinstance(run, GraphedProgram) or prep.single:
        return
    users = _plan_users(prep)
    written = {k for _, k in mutations.targets} if mutations is not None else set()
    lent = {prep.plan[k][1] for k in written
            if prep.plan[k][0] == "compiled" and len(users[prep.plan[k][1]]) == 1}
    aliases = {j for j, slots in users.items()
               if guarded is not None and all(i in guarded for i in slots)}
    # made only into views by fx_prep.assemble (a saved activation's transposes): the views
    # are the aliases, the program's own tensor is not handed on
    bare = {j for j in aliases if all(prep.plan[i][0] == "view" for i in users[j])}
    if lent or aliases:
        run.lend(lent, guarded=aliases, bare=bare,
                 write_into=_write_into(prep, mutations, lent, pos))


def _write_into(prep, mutations, lent, pos) -> dict[int, int]:
    """Program output -> program input for the lent new values of mutated inputs that a
    CUDA graph may copy into their inputs itself (GraphedProgram.lend): inputs the program
    takes as they are (not permuted) and no host-side view reads (it would read them after
    the replay wrote them)."""
    if mutations is None:
        return {}
    host_reads = _host_reads(prep)
    where = {a: b for b, a in enumerate(pos)} if pos is not None else None
    pairs = {}
    for i, k in mutations.targets:
        entry = prep.plan[k]
        if entry[0] != "compiled" or entry[1] not in lent or i in host_reads:
            continue
        j = i if where is None else where.get(i)
        if j is not None and j not in prep.in_perms:
            pairs[entry[1]] = j
    return pairs


def _donations(prep, mutations) -> list[tuple[int, int]]:
    """(input, program output) pairs where the output is a mutated input's new value that the
    program may write into the input's memory (ember-buffer-reuse checks the kernel side): the
    output feeds nothing else, and the input is taken as it is (not permuted) by the program
    and read by no host-side view."""
    if mutations is None or prep.single or prep.gm is None:
        return []
    users = _plan_users(prep)
    host_reads = _host_reads(prep)
    pairs = []
    for i, k in mutations.targets:
        entry = prep.plan[k]
        if (entry[0] == "compiled" and len(users[entry[1]]) == 1 and i not in prep.in_perms
                and i not in host_reads):
            pairs.append((i, entry[1]))
    return pairs


def donated_backward_inputs() -> frozenset[int]:
    """The inputs of the backward graph being compiled that AOTAutograd donates (its tracing
    context's `bw_donated_idxs`, with `torch._functorch.config.donated_buffer`): saved
    activations whose storage nothing but this backward reads (no forward input or user
    output, no gradient aliases it). torch compiles the backward when it first runs and sets
    none when that backward keeps its graph (`retain_graph=True`); a later backward that
    keeps it raises torch's own error."""
    try:
        from torch._guards import TracingContext
        ctx = TracingContext.try_get()
        idxs = ctx.fw_metadata.bw_donated_idxs if ctx is not None and ctx.fw_metadata else None
        return frozenset(int(i) for i in idxs or ())
    except Exception:   # noqa: BLE001 - another torch: nothing is donated
        return frozenset()


def _reused_inputs(prep, mutations, donated: frozenset[int], pos) -> list[int]:
    """Program inputs whose memory the program may reuse after reading them: the `donated`
    graph inputs (placeholder indices; `pos`: the program's tensor inputs' placeholders when
    the graph was specialized) that no host-side view reads (it runs after the program) and
    that are not mutated."""
    if not donated or prep.single or prep.gm is None:
        return []
    host_reads = _host_reads(prep)
    mutated = {i for i, _ in mutations.targets} if mutations is not None else set()
    n = sum(1 for node in prep.gm.graph.nodes if node.op == "placeholder") - len(prep.folded)
    return [j for j in range(n)
            if (j if pos is None else pos[j]) in donated and j not in host_reads
            and j not in mutated]


def saved_output_slice(num_outputs: int) -> range | None:
    """The outputs of the forward graph being compiled that AOTAutograd saves for the backward
    (its tracing context's metadata), or None when that is not known for sure."""
    try:
        from torch._guards import TracingContext
        meta = TracingContext.try_get().fw_metadata
        if meta.tokens or getattr(meta, "num_opaque_objects_saved_for_bw", 0):
            return None
        cut = meta.tensors_saved_for_backwards_slice     # (stop None: up to the end)
        stop = num_outputs - meta.num_symints_saved_for_bw
        if cut.start is None or not 0 <= cut.start <= stop or cut.stop not in (None, stop):
            return None
        return range(cut.start, stop)
    except Exception:   # noqa: BLE001 - another torch: nothing is lent
        return None


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
    what eager costs). `decompositions`: the table a graph with symbolic sizes is traced again
    with (fx_prep.specialize), or a function that builds it then.

    `record_to`: (artifact cache, key) where the first build writes its build record
    (build_records.py), which a later process's `from_record` makes the graph's call from
    without reading the graph."""

    def __init__(self, gm: fx.GraphModule | None, options: CompileOptions, kind: str = "graph",
                 allow_partition: bool = True, decompositions=None,
                 graph_id: str | None = None, on_eager: Callable | None = None, *,
                 record=None, load_graph: Callable[[], fx.GraphModule] | None = None):
        # copy_ into inputs (kept by AOTAutograd) -> extra outputs, written back after each call
        # (a build record's graph: as the record's build lifted them, `from_record`)
        self._mutations = lift_input_mutations(gm) if gm is not None else record.mutations
        self._gm: fx.GraphModule | None = gm
        self._load_graph = load_graph
        self._record = record       # a build record to build from (from_record)
        self.record_to: tuple | None = None
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
        # (Records are of static graphs only.)
        self._static_graph = gm is None or not fx_prep.needs_specialization(gm)
        # A graph with symbolic sizes is first compiled once with them (frontend/symbolic.py);
        # what that cannot handle is compiled per input shape.
        self._try_symbolic = not self._static_graph and symbolic.has_symbols(gm)
        self._static: Callable | None = None
        self._eager = _eager_call(self)
        # not judged yet (eager_rejects.py); a record's build passed eager's check
        self._rejects: str | None | bool = False if gm is not None else None
        # Outputs a CUDA-graphed program may hand out of its pool as guarded aliases
        # (compile._lend): a training forward's saved activations, a backward's gradients.
        self.lent_outputs: range | None = None
        # Placeholders whose memory the program may reuse once read (a backward's donated
        # saved activations: donated_backward_inputs).
        self.donated_inputs: frozenset[int] = frozenset()

    @classmethod
    def from_record(cls, record, load_graph: Callable[[], fx.GraphModule],
                    options: CompileOptions, kind: str, decompositions=None,
                    graph_id: str | None = None, on_eager: Callable | None = None):
        """The graph whose first build `record` describes (build_records.py): its build loads
        the record's program and makes the call from the record; `load_graph()` gives the graph
        (as `EmberGraph(gm)` holds it: input mutations lifted) only where something needs it:
        the program is gone from the cache (built from the graph then), a failed call redone
        eagerly, an eager fallback."""
        return cls(None, options, kind, decompositions=decompositions, graph_id=graph_id,
                   on_eager=on_eager, record=record, load_graph=load_graph)

    @property
    def gm(self) -> fx.GraphModule:
        """The graph (input mutations lifted: `_mutations`); a build record's reads it when
        first needed."""
        if self._gm is None:
            gm = self._load_graph()
            self._gm, self._load_graph = gm, None
        return self._gm

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
            done = getattr(fn, "ember_report", None) or {}
            if done.get("inputs_reused") or done.get("inputs_freed"):
                # The call may have written over (or freed) its donated inputs: eager cannot
                # redo it.
                raise RuntimeError(
                    f"ember: graph {self.graph_id} failed at run time "
                    f"({describe_error(err)}) after reusing the memory of its saved inputs, "
                    f"so it cannot be redone eagerly; compile with "
                    f"options={{'donate_saved': False}} to keep them") from err
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
        from now on. The graph redone is the decomposed one, whose op may raise another type
        than the user's op (index_add out of range: RuntimeError; its decomposition's index_put:
        IndexError): an IndexError is raised as one that is a RuntimeError too, with eager's
        message (what ember's own checked kernels raise)."""
        try:
            out = self._eager(*args)
        except IndexError as eager_err:
            if isinstance(eager_err, RuntimeError):
                raise eager_err from None
            from ..runtime.kernel_errors import KernelIndexError
            raise KernelIndexError(str(eager_err)) from None
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
            **(self._record.report_sizes if self._record is not None
               else _output_sizes(self.gm)),
        }
        if self.kind == "forward" and self.lent_outputs is not None:
            report["saved_outputs"] = len(self.lent_outputs)
        try:
            with gc_paused():
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
        if self._record is not None:
            record, self._record = self._record, None
            try:
                return self._compile_recorded(record, args, report, dump)
            except Exception:   # noqa: BLE001 -- the program gone, a load failing: the graph
                pass            # is read and built as without a record (and fails alike)
        t_prep = time.perf_counter()
        rejected = self._eager_rejects()
        if rejected is not None:
            raise _WholeGraphEager(rejected)
        gm, pos = self.gm, None
        if fx_prep.needs_specialization(gm):
            decompositions = self.decompositions
            if callable(decompositions):    # a kept graph's (backend: built only if needed)
                decompositions = self.decompositions = decompositions()
            gm, pos = fx_prep.specialize(gm, args, decompositions)
        tensors = list(args) if pos is None else [args[i] for i in pos]
        devices = run_devices(tensors, gm)
        target = resolve_target(self.options.target, devices)
        report["target"] = target
        report["input_shapes"] = [list(t.shape) for t in tensors if isinstance(t, torch.Tensor)]
        if dump.dir is not None:    # (gm.code generates the graph's Python code)
            dump.write("fx_graph.txt", gm.code)
        prep = fx_prep.prepare(gm, fold_constants=self.options.fold_constants,
                               shared_outputs=self.lent_outputs if pos is None else ())
        program_tensors = fx_prep.program_args(prep, tensors)
        shared = sum(1 for entry in prep.plan if entry[0] == "value")
        if prep.folded or shared:
            report["folded_constants"] = len(prep.folded) + shared
        if target == "cpu" and prep.gm is not None:
            # No working C++/OpenMP compiler: one clear warning, and the graph runs eagerly.
            from ..runtime.cpp_build import check_compiler
            check_compiler(self.options.cache_dir)

        run: Callable | None = None
        from .library_calls import can_outline, outline_blocker
        from .partition import library_nodes, op_name
        library = library_nodes(prep.gm, target) if prep.gm is not None else set()
        # the FX side before compile_static (specialize, prepare): added to its `fx_prep`
        t_prep = time.perf_counter() - t_prep
        # Library ops whose arguments and results are plain tensors become calls inside the
        # program; any other (a tuple or symbolic int escaping) splits the graph around it.
        inline = {n for n in library if can_outline(n)}
        if library:
            report["library_calls"] = sorted(op_name(n) for n in library)
        if library - inline:
            report["library_splits"] = {n.name: outline_blocker(n) for n in library - inline}
            report["num_externs"] = len(library)
            run = self._fallback(prep.gm, program_tensors, target, None, report, dump, inline)
        elif prep.gm is not None:
            try:
                run, summary = compile_static(
                    prep.gm, program_tensors, self.options, target, dump, self.kind,
                    library=inline,
                    donate=_donations(prep, self._mutations),
                    reuse=_reused_inputs(prep, self._mutations, self.donated_inputs, pos),
                    devices=devices)
                _lend(run, prep, self._mutations, self.lent_outputs, pos)
                if hasattr(run, "stats"):
                    run.stats = report
                report.update(summary)
                stages = report.get("stage_seconds")
                if stages is not None:
                    stages["fx_prep"] = round(stages.get("fx_prep", 0.0) + t_prep, 4)
                report["num_externs"] = report.get("num_externs", 0) + len(inline)
                if self.record_to is not None and pos is None:
                    self._write_record(prep, report, target, len(inline))
            except Exception as err:
                if not self.options.fallback:
                    raise EmberCompileError(f"ember: compiling graph {report['graph_id']} "
                                            f"failed: {describe_error(err)}") from err
                dump.write("error.txt", _format(err))
                run = self._fallback(prep.gm, program_tensors, target, err, report, dump,
                                     inline)
        else:
            report["status"] = "host-only"
        return self._calling(prep, run, pos)

    def _write_record(self, prep, report: dict[str, Any], target: str, inline: int) -> None:
        """The build record of this (first, whole, static) build: see build_records.py."""
        import dataclasses
        from . import build_records
        from .compile_module import output_dtypes
        key = report.get("program_key")
        if key is None or report.get("status") != "compiled" or prep.gm is None:
            return
        try:
            record = build_records.BuildRecord(
                program_key=key, target=target, out_dtypes=output_dtypes(prep.gm),
                prepared=dataclasses.replace(prep, gm=None,
                                             in_geometry=host_calls.permuted_geometry(prep)),
                mutations=self._mutations, inline_calls=inline,
                report_sizes={k: report[k] for k in ("num_outputs", "output_bytes",
                                                     "input_output_bytes")},
                report={k: report[k] for k in ("folded_constants", "library_calls",
                                               "split_reductions_off") if k in report})
        except Exception:   # noqa: BLE001 -- no record: the next start reads the graph
            return
        build_records.store(*self.record_to, record)

    def _compile_recorded(self, record, args, report: dict[str, Any],
                          dump: DebugDump) -> Callable:
        """The call of a build `record` describes (from_record): its program from the program
        cache, loaded as compile_static loads it. Raises where that program is gone or does
        not load; `report` is updated only once it has."""
        from ..runtime.cache import as_cache
        from . import program_cache
        from .compile_module import load_static, warn_split_off
        t0 = time.perf_counter()
        tensors = list(args)
        target = resolve_target(self.options.target, run_devices(tensors))
        if target != record.target:
            raise LookupError(f"ember: a build record for {record.target}, not {target}")
        hit = program_cache.load(as_cache(self.options.cache_dir), record.program_key)
        if hit is None:
            raise LookupError("ember: the build record's program is not in the cache")
        program, summary = hit
        summary["program_cache"] = "hit"
        summary["program_key"] = record.program_key
        prep = record.prepared
        seconds = {"program_cache": time.perf_counter() - t0}
        run, summary = load_static(program, summary, fx_prep.program_args(prep, tensors),
                                   record.out_dtypes, self.options, dump, self.kind, seconds)
        _lend(run, prep, self._mutations, self.lent_outputs)
        report["target"] = target
        report.update(record.report)
        report.update(summary)
        report["num_externs"] = report.get("num_externs", 0) + record.inline_calls
        report["build_record"] = True
        if "split_reductions_off" in record.report:     # (as compile_static warns)
            warn_split_off(record.report["split_reductions_off"])
        if hasattr(run, "stats"):
            run.stats = report
        return self._calling(prep, run, None)

    def _calling(self, prep, run: Callable | None, pos) -> Callable:
        """The graph's call: the program's (`run`, or None for none), the host half's, the
        outputs assembled; `pos`: the program's tensor inputs' placeholders where the graph
        was specialized."""
        host = prep.host_gm
        # a training forward's saved activations: only ember's backward reads them
        private = self.lent_outputs if self.kind == "forward" and pos is None else ()
        assemble = host_calls.assembler(prep, private, gradients=self.kind == "backward")
        if run is None and host is None:
            return lambda *call_args: assemble((), ())
        take = host_calls.input_taker(prep)
        if pos is None and host is None:
            return lambda *call_args: assemble(run(*take(call_args)), ())

        if host is not None:    # the generated code itself: no nn.Module call machinery
            realize = getattr(host, "real_recompile", None)     # (a lazy graph module)
            if realize is not None:
                realize()
            host = host.forward

        def call(*call_args):
            ts = call_args if pos is None else [call_args[i] for i in pos]
            c = run(*take(ts)) if run is not None else ()
            h = host(*ts) if host is not None else ()
            return assemble(c, h)
        return call

    def _fallback(self, gm: fx.GraphModule, tensors, target: str, err: Exception | None,
                  report: dict[str, Any], dump: DebugDump, inline: set) -> Callable:
        """The prepared graph `gm` did not compile as it is (`err`), or holds library nodes that
        cannot be calls (`err` None). Finds the nodes ember cannot compile (partition.probe;
        for a pipeline failure no node alone explains, the nodes of the failing kernel:
        kernel_blame) and, in order of preference: compiles one program in which they are
        library calls; splits the graph around the nodes that cannot be calls; runs the whole
        graph eagerly (raises _WholeGraphEager)."""
        from .partition import (blame, can_call, compute_nodes, library_nodes, op_name,
                                partition_graph)
        library = library_nodes(gm, target)
        reasons = blame(gm, self.options, target, exclude=library)
        in_kernel = False
        if err is not None and not reasons and isinstance(err, PipelineFailure):
            from .kernel_blame import blame_kernels
            reasons = blame_kernels(gm, self.options, target, library)
            in_kernel = bool(reasons)
        if err is not None and not reasons:
            raise _WholeGraphEager(err)     # no op to blame: a build, load or pass failure
        names: dict[str, str] = {}
        for node, why in reasons.items():
            names.setdefault(op_name(node), why)
        report["eager_fallback_ops"] = sorted(names)
        report["fallback_reasons"] = dict(sorted(names.items()))
        if err is not None:
            report["error"] = describe_error(err)   # why the graph did not compile as one
        if in_kernel:
            # One warning for the group: its ops compile alone, only their kernel failed.
            report["fallback_nodes"] = sorted(n.name for n in reasons)
            why = next(iter(reasons.values()))
            warn_once(f"kernel:{why}", f"ember: {', '.join(sorted(names))} run in eager torch "
                      f"in graph {report['graph_id']} ({why})")
        else:
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
            module = partition_graph(gm, split, self.options, report["graph_id"], EmberGraph,
                                     self.decompositions, self.kind)
        except Exception as perr:
            raise _WholeGraphEager(perr) from perr
        self.eager_modules.append(module)
        return _as_list(module)


def _compute_ops(gm: fx.GraphModule) -> list[str]:
    from .partition import eager_ops
    return eager_ops(gm)


def _eager_call(graph: EmberGraph) -> Callable:
    """The graph as torch runs it, returning what a compiled call returns (a list, or the one
    value of a graph that returns a bare value)."""
    def call(*args):
        out = graph.gm(*args)
        return list(out) if isinstance(out, (tuple, list)) else out
    return call


def _as_list(fn: Callable) -> Callable:
    """Graph modules return a tuple (or one value); compiled programs return a list."""
    def call(*args):
        out = fn(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]
    return call
