"""One compile for every size: a graph with symbolic sizes (`torch.compile(dynamic=True)`, or
Dynamo's automatic dynamic after a second size) compiled with `?` dims (issue 8, item 4).

torch-mlir imports SymInt placeholders as `i64` arguments and symbolic dims as `?`; ember-fuse
keeps the size computations on the host and gives kernels sizes as shape arguments; kernels read
their sizes from the tensors at run time (the C++ `sizes` table, Triton launcher arguments and
grid); the runtime binds the symbols from the actual inputs, evaluates the host's size
arithmetic and allocates dynamic buffers when they are made (frontend/schedule.py,
runtime/executor.py). Buffers of static shape keep their arena offsets.

Invariant: a symbolic compile is used only when it is valid for every size Dynamo's guards
admit. Anything it cannot do, or any decision that would have to read a size (a guard added to
the ShapeEnv while compiling, which Dynamo would not check), makes the graph compile per input
shape instead (one warning), as it did before: never a wrong answer, never an error.

What is symbolic: pointwise and reduction kernels (any dims), matmul externs (mm, addmm, bmm,
baddbmm), host views (expand/collapse), `tensor.empty`, size arithmetic, SymInt inputs, outputs
computed by the program or taken from inputs on the host. Not (compiled per shape): library
calls (eager ops inside the program), convolution/pooling/attention externs with dynamic
results, outputs that are views or re-laid-out copies of computed values, permuted inputs.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.fx as fx

from . import fx_prep
from .options import resolve_target
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
            out.append([d if isinstance(d, int) else str(d) for d in node.meta["val"].shape])
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
    dump = DebugDump(graph.options.debug_dir, graph.graph_id)
    env = _shape_env(graph.gm)
    guards = len(env.guards) if env is not None else 0
    try:
        run = _compile(graph, args, report, dump)
        if env is not None and len(env.guards) != guards:
            raise NotSymbolic("compiling read a symbolic size (a new guard on "
                              f"{env.guards[-1].expr})")
    except Exception as err:
        from .compile import _format
        dump.write("error-symbolic.txt", _format(err))
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
    from .compile import compile_static
    from .partition import library_nodes, op_name
    target = resolve_target(graph.options.target,
                            [a.device for a in args if isinstance(a, torch.Tensor)])
    report["target"] = target
    dump.write("fx_graph.txt", graph.gm.code)
    prep = fx_prep.prepare(graph.gm)
    if prep.gm is None:
        raise NotSymbolic("nothing to compile")
    if prep.in_perms:
        raise NotSymbolic("inputs laid out permuted")
    if any(entry[0] == "view" for entry in prep.plan):
        raise NotSymbolic("an output is a view or a re-laid-out copy of a computed value")
    library = library_nodes(prep.gm)
    if library:
        raise NotSymbolic(f"library calls ({', '.join(sorted({op_name(n) for n in library}))})")
    run, summary = compile_static(prep.gm, list(args), graph.options, target, dump, graph.kind)
    report.update(summary)
    host = prep.host_gm

    def call(*call_args):
        c = run(*call_args)
        h = host(*call_args) if host is not None else ()
        return fx_prep.assemble(prep, c, h)
    return call
