"""Makes any ATen FX graph importable (docs/internals.md, stage 1).

torch-mlir's importer cannot return `None`, graph inputs, views of graph inputs or Python
scalars, and dynamic graphs carry SymInt placeholders. `specialize` turns a dynamic graph into a
static one for concrete inputs; `prepare` splits the outputs into those ember computes (unique,
tensors made by real compute) and those the host produces (constants, inputs and their views).
"""
from __future__ import annotations

import copy
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def input_key(args) -> tuple:
    """What a static compile depends on: per tensor its shape, dtype, device and whether it
    is contiguous (kernels take contiguous data); per scalar its value."""
    key = []
    for a in args:
        if _is_tensor(a):
            key.append((tuple(a.shape), a.dtype, a.device.type, a.is_contiguous()))
        else:
            key.append((type(a).__name__, a))
    return tuple(key)


def _val_is_static(val) -> bool:
    if _is_tensor(val):
        return all(isinstance(s, int) for s in val.shape)
    return False


def needs_specialization(gm: fx.GraphModule) -> bool:
    """True when a placeholder is not a tensor with a static meta shape (SymInt placeholders,
    symbolic sizes, or a graph without meta, e.g. a partition's submodule)."""
    for node in gm.graph.nodes:
        if node.op == "placeholder" and not _val_is_static(node.meta.get("val")):
            return True
    return False


def specialize(gm: fx.GraphModule, args, decompositions=None) -> tuple[fx.GraphModule, list[int]]:
    """A static-shape graph for the concrete `args`, taking only the tensor args; returns it and
    the positions of those tensor args in `args`. Scalars (SymInt values) become constants."""
    from torch.fx.experimental.proxy_tensor import make_fx

    tensor_pos = [i for i, a in enumerate(args) if _is_tensor(a)]

    def run(*tensors):
        full = list(args)
        for i, t in zip(tensor_pos, tensors):
            full[i] = t
        return fx.Interpreter(gm).run(*full)

    tensors = [args[i] for i in tensor_pos]
    try:
        static = make_fx(run, decomposition_table=decompositions, tracing_mode="fake")(*tensors)
    except Exception:
        # Data-dependent graphs cannot run on fake tensors; real tracing runs the graph once.
        static = make_fx(run, decomposition_table=decompositions, tracing_mode="real")(*tensors)
    return static, tensor_pos


def _is_view_op(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


@dataclass
class PreparedGraph:
    """`gm` returns the unique compute outputs (or is None when there are none); `plan[i]` says
    where original output i comes from: ("compiled", j), ("host", j) from `host_gm`, or
    ("const", value)."""

    gm: fx.GraphModule | None
    host_gm: fx.GraphModule | None
    plan: list[tuple[str, Any]] = field(default_factory=list)
    single: bool = False            # the original graph returned one bare value, not a tuple


# Placement kwargs of factory ops: the compiled graph runs where its inputs are, and torch-mlir
# cannot lower a `device=cuda` constant (it leaves `torch.constant.int` behind).
_PLACEMENT_KWARGS = ("device", "layout", "pin_memory")


def _strip_placement(node: fx.Node) -> None:
    if node.op == "call_function" and any(k in node.kwargs for k in _PLACEMENT_KWARGS):
        node.kwargs = {k: v for k, v in node.kwargs.items() if k not in _PLACEMENT_KWARGS}


def strip_placement(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of `gm` whose factory ops have no placement kwargs: what the importer gets. The
    graphs `prepare` returns keep them, because an eager fallback runs those graphs and an
    `arange(device="cuda")` made on the CPU breaks the user's program (index_select on mixed
    devices)."""
    if not any(n.op == "call_function" and any(k in n.kwargs for k in _PLACEMENT_KWARGS)
               for n in gm.graph.nodes):
        return gm
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
        _strip_placement(env[node])
    sub = fx.GraphModule(gm, graph)
    sub.recompile()
    return sub


def _subgraph(gm: fx.GraphModule, outputs: list[fx.Node]) -> fx.GraphModule:
    """A copy of `gm` returning `outputs` (nodes of gm), with dead code removed; all
    placeholders stay so that both graphs take the original inputs. Placement kwargs stay
    (`strip_placement` drops them for the importer only)."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in outputs))
    graph.eliminate_dead_code()
    sub = fx.GraphModule(gm, graph)
    sub.recompile()
    return sub


def _drop_unused_pool_indices(gm: fx.GraphModule) -> None:
    """`max_pool2d_with_indices` whose indices nobody reads (inference) becomes `max_pool2d`,
    which ember compiles (a library call) instead of running the indices variant in torch."""
    aten = torch.ops.aten
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.max_pool2d_with_indices.default:
            continue
        users = list(node.users)
        if not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
            continue
        with gm.graph.inserting_before(node):
            pool = gm.graph.call_function(aten.max_pool2d.default, node.args, node.kwargs)
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)):
            pool.meta["val"] = val[0]
        for u in users:
            u.replace_all_uses_with(pool)
            gm.graph.erase_node(u)
        gm.graph.erase_node(node)
    gm.recompile()


def prepare(gm: fx.GraphModule) -> PreparedGraph:
    _drop_unused_pool_indices(gm)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    single = not isinstance(outs, (tuple, list))
    if single:
        outs = (outs,)

    host_only: dict[fx.Node, bool] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            host_only[node] = True
        elif node.op == "output":
            continue
        else:
            ins = node.all_input_nodes
            host_only[node] = _is_view_op(node) and bool(ins) and all(host_only[n] for n in ins)

    plan, compiled, host = [], [], []
    for out in outs:
        if not isinstance(out, fx.Node):
            plan.append(("const", out))
        elif host_only[out] or not _is_tensor(out.meta.get("val")):
            # Inputs, their views and scalars: eager torch makes them for free (and keeps the
            # aliasing that autograd may expect).
            if out not in host:
                host.append(out)
            plan.append(("host", host.index(out)))
        else:
            if out not in compiled:
                compiled.append(out)
            plan.append(("compiled", compiled.index(out)))
    return PreparedGraph(
        gm=_subgraph(gm, compiled) if compiled else None,
        host_gm=_subgraph(gm, host) if host else None,
        plan=plan, single=single)


def assemble(prep: PreparedGraph, compiled_outs, host_outs):
    """The original graph's outputs from the two halves."""
    result = []
    for kind, x in prep.plan:
        if kind == "compiled":
            result.append(compiled_outs[x])
        elif kind == "host":
            result.append(host_outs[x])
        else:
            result.append(copy.copy(x))
    return result[0] if prep.single else result
