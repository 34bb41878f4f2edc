"""One compile for every size: a graph with symbolic sizes (`torch.compile(dynamic=True)`, or
Dynamo's automatic dynamic after a second size) compiled with `?` dims (issue 8, item 4).

torch-mlir imports SymInt placeholders as `i64` arguments and symbolic dims as `?`; ember-fuse
keeps the size computations on the host and gives kernels sizes as shape arguments; kernels read
their sizes from the tensors at run time (the C++ `sizes` table, Triton launcher arguments and
grid); the runtime binds the symbols from the actual inputs, evaluates the host's size
arithmetic and allocates dynamic buffers when they are made (frontend/export_program.py,
runtime/executor.py). Buffers of static shape keep their arena offsets.

Invariant: a symbolic compile is used only when it is valid for every size Dynamo's guards
admit. Anything it cannot do, or any decision that would have to read a size (a guard added to
the ShapeEnv while compiling, which Dynamo would not check), makes the graph compile per input
shape instead (one warning), as it did before: never a wrong answer, never an error.

What is symbolic: pointwise and reduction kernels (any dims), externs whose result size the
runtime computes from their operands (runtime/externs.py `DYNAMIC_EXTERNS`: matmuls,
convolutions, pooling, attention), library calls (eager ops inside the program, which size
their own results), host views (expand/collapse), `tensor.empty`, size arithmetic (float steps
included), SymInt inputs, outputs computed by the program or taken from inputs on the host,
outputs that are views of computed values (their view arguments are evaluated for each call's
sizes), inputs taken permuted. Not (compiled per shape): scatters over a symbolic dim, dynamic
slices of a kernel result.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import torch
import torch.fx as fx

from . import fx_prep
from .options import resolve_target, run_devices
from .report import DebugDump, describe_error, record, warn_once


class NotSymbolic(Exception):
    """This graph is compiled per input shape instead (the reason says why)."""


def _shape_env(gm: fx.GraphModule):
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return val.node.shape_env
        if isinstance(val, torch.Tensor):
            for d in val.shape:
                if isinstance(d, torch.SymInt):
                    return d.node.shape_env
    return None


def has_symbols(gm: fx.GraphModule) -> bool:
    """True when every placeholder has a meta value (a tensor or a SymInt) and some size is
    symbolic (a graph without meta, such as a partition's piece, compiles per shape)."""
    found = False
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            found = True
        elif isinstance(val, torch.Tensor):
            found = found or any(isinstance(d, torch.SymInt) for d in val.shape)
        else:
            return False
    return found and _shape_env(gm) is not None


def _symbolic_shapes(gm: fx.GraphModule) -> list:
    out = []
    for node in gm.graph.nodes:
        if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor):
            out.append([int(d) if isinstance(d, int) or d.node.expr.is_Integer else str(d)
                        for d in node.meta["val"].shape])
    return out


def build(graph, args) -> Callable | None:
    """The symbolic compile of `graph` (an EmberGraph), or None (then it compiles per shape)."""
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "graph_id": graph.graph_id, "target": None, "status": "compiled", "symbolic": True,
        "input_shapes": _symbolic_shapes(graph.gm), "num_kernels": 0, "num_externs": 0,
        "fused_groups": [], "eager_fallback_ops": [], "fallback_reasons": {},
        "planned_peak_bytes": 0, "unplanned_peak_bytes": 0,
    }
    dump = DebugDump(graph.options.debug_dir, f"{graph.graph_id}-symbolic")
    env = _shape_env(graph.gm)
    guards = len(env.guards) if env is not None else 0
    try:
        run = _compile(graph, args, report, dump)
        if env is not None and len(env.guards) != guards:
            import traceback
            g = env.guards[-1]
            where = "".join(traceback.format_list(g.stack.summary()[-6:])) if getattr(g, "stack", None) else ""
            dump.write("symbolic-guard.txt", f"{g.expr}\n{where}")
            raise NotSymbolic(f"compiling read a symbolic size (a new guard on {g.expr})")
    except Exception as err:
        from .compile_module import format_error
        dump.write("error-symbolic.txt", format_error(err))
        why = describe_error(err)
        warn_once(f"symbolic:{why}", f"ember: graph {graph.graph_id} is compiled for each input "
                  f"shape (symbolic sizes: {why})")
        return None
    report["compile_seconds"] = round(time.perf_counter() - t0, 4)
    dump.report(report)
    record(report)
    graph.reports.append(report)
    run.ember_report = report
    return run


def _compile(graph, args, report: dict[str, Any], dump: DebugDump) -> Callable:
    from .compile_module import compile_static
    from .partition import library_nodes, op_name
    devices = run_devices(args, graph.gm)
    target = resolve_target(graph.options.target, devices)
    report["target"] = target
    if dump.dir is not None:
        dump.write("fx_graph.txt", graph.gm.code)
    prep = fx_prep.prepare(graph.gm)
    if prep.gm is None:
        raise NotSymbolic("nothing to compile")
    sizes = _Sizes(graph.gm)
    sizes.check(prep.plan)
    explicit_view_sizes(prep.gm)
    from .library_calls import can_outline
    library = library_nodes(prep.gm, target)
    if any(not can_outline(n) for n in library):
        raise NotSymbolic("a library op that cannot be a call inside the program")
    if library:
        report["library_calls"] = sorted(op_name(n) for n in library)
    run, summary = compile_static(prep.gm, list(args), graph.options, target, dump, graph.kind,
                                  library=library, symbolic=True, devices=devices)
    report.update(summary)
    report["num_externs"] = report.get("num_externs", 0) + len(library)
    host = prep.host_gm

    plans: dict[tuple, Any] = {}
    symbolic_plan = sizes.symbolic(prep.plan)

    def call(*call_args):
        c = run(*fx_prep.compiled_inputs(prep, call_args))
        h = host(*call_args) if host is not None else ()
        p = prep
        if symbolic_plan:       # output views whose arguments are sizes: this call's sizes
            key = sizes.key(call_args)
            p = plans.get(key)
            if p is None:
                p = plans[key] = dataclasses.replace(prep, plan=sizes.concrete(prep.plan, key))
        return fx_prep.assemble(p, c, h)
    return call


class _Sizes:
    """Binds the graph's symbols to the sizes of a call's inputs: each symbol is read from the
    first placeholder (a SymInt) or tensor dim that is exactly that symbol."""

    def __init__(self, gm: fx.GraphModule):
        self.sources: list[tuple[Any, int, int | None]] = []
        seen = set()
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i, node in enumerate(placeholders):
            val = node.meta.get("val")
            dims = [(None, val)] if isinstance(val, torch.SymInt) else (
                list(enumerate(val.shape)) if isinstance(val, torch.Tensor) else [])
            for d, n in dims:
                if isinstance(n, torch.SymInt) and n.node.expr.is_Symbol \
                        and n.node.expr not in seen:
                    seen.add(n.node.expr)
                    self.sources.append((n.node.expr, i, d))
        self.symbols = [s for s, _, _ in self.sources]

    def key(self, args) -> tuple:
        return tuple(int(args[i]) if d is None else args[i].shape[d] for _, i, d in self.sources)

    def _walk(self, obj, fn):
        if isinstance(obj, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return fn(obj)
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._walk(x, fn) for x in obj)
        if isinstance(obj, dict):
            return {k: self._walk(v, fn) for k, v in obj.items()}
        return obj

    def symbolic(self, obj) -> bool:
        found = []
        self._walk(obj, lambda v: found.append(v) or v)
        return bool(found)

    def check(self, obj) -> None:
        def ok(v):
            free = v.node.expr.free_symbols
            if not free <= set(self.symbols):
                raise NotSymbolic(f"size {v} is not a function of the inputs' sizes")
            return v
        self._walk(obj, ok)

    def concrete(self, obj, key: tuple):
        env = dict(zip(self.symbols, key))
        kinds = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}
        return self._walk(obj, lambda v: kinds[type(v)](v.node.expr.xreplace(env)))


_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
          torch.ops.aten.reshape.default)


def explicit_view_sizes(gm: fx.GraphModule) -> None:
    """`view(x, [-1, 4])` of a tensor with symbolic sizes -> `view(x, [s0*s1//4, 4])`, the size
    built in the graph from the inputs' sizes (torch-mlir's strict view lowering does not infer
    a -1 from `?` dims). A size it cannot build stays -1 (the import then fails and the graph
    compiles per shape)."""
    import operator

    import sympy
    from torch.utils._sympy.functions import FloorDiv

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sources = _Sizes(gm).sources
    first = next((n for n in gm.graph.nodes if n.op != "placeholder"), None)
    if first is None:
        return
    made: dict = {}

    def build(expr):
        if expr in made:
            return made[expr]
        if expr.is_Integer:
            return int(expr)
        node = None
        if expr.is_Symbol:
            src = next(((i, d) for s, i, d in sources if s == expr), None)
            if src is None:
                return None
            i, d = src
            ph = placeholders[i]
            if d is None:
                node = ph
            else:
                with gm.graph.inserting_before(first):
                    node = gm.graph.call_function(torch.ops.aten.sym_size.int, (ph, d))
                node.meta["val"] = ph.meta["val"].shape[d]
        else:
            fn = {sympy.Mul: operator.mul, sympy.Add: operator.add, FloorDiv: operator.floordiv}
            op = next((f for cls, f in fn.items() if isinstance(expr, cls)), None)
            args = [build(a) for a in expr.args] if op is not None else [None]
            if any(a is None for a in args):
                return None
            node = args[0]
            for a in args[1:]:
                val = op(_val(node), _val(a))
                with gm.graph.inserting_before(first):
                    node = gm.graph.call_function(op, (node, a))
                node.meta["val"] = val
        made[expr] = node
        return node

    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _VIEWS or len(node.args) < 2:
            continue
        sizes, val = node.args[1], node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not any(isinstance(d, int) and d == -1
                                                         for d in sizes):
            continue
        new = list(sizes)
        for k, d in enumerate(sizes):
            if isinstance(d, int) and d == -1:
                n = val.shape[k]
                built = n if isinstance(n, int) else build(n.node.expr)
                new[k] = -1 if built is None else built
        node.args = (node.args[0], new) + tuple(node.args[2:])
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def _val(x):
    return x.meta["val"] if isinstance(x, fx.Node) else x
