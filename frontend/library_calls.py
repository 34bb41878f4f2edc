"""ATen library kernels (attention, convolution backward, pooling with indices, scatter, scans)
as calls inside the compiled program, not as graph breaks.

torch-mlir cannot lower these ops to linalg, and generated code would be slower than the
vendor kernels anyway. Rather than splitting the graph around them (one ember program per piece,
torch glue between), each such node is cut out of the FX graph before import and put back into
the imported module as a call of a body-less private function:

    %o = func.call @ember_lib_0(%q, %k, %v) : (...) -> tensor<8x12x256x64xbf16>
    func.func private @ember_lib_0(...) -> (...) attributes {
        ember.library = "aten._scaled_dot_product_efficient_attention.default",
        ember.tensor_args = ["query", "key", "value"],          // operands, in order
        ember.params = {compute_log_sumexp = false, dropout_p = 0.0, is_causal = true,
                        none_args = ["attn_bias"]},                 // passed as None
        ember.results = array<i64: 0>}                          // which op outputs are results

`func.call` is used for the same reason kernels use it (an IRDL op's variadic operands must share
one type; see dialects/ember.py). The whole graph is then one program: one arena, one CUDA
graph, no per-piece Python. `outline` does the FX half, `stitch` the MLIR half.
"""
from __future__ import annotations

import operator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

# MLIR only in `stitch` (the FX outlining runs on a warm start too, which loads no MLIR).



@dataclass
class LibraryCall:
    op: str                                   # "aten.cumsum.default"
    tensor_args: list[str]                    # schema names of the operands ("indices[0]")
    params: dict[str, Any]                    # the other arguments, by schema name
    results: list[int]                        # indices into the op's outputs
    operand_slots: list[int] = field(default_factory=list)   # graph-output index per operand
    result_slots: list[int] = field(default_factory=list)    # placeholder index per result
    view: bool = False                        # a result aliases an operand (view_as_real)


# Library ops whose named operands the runtime hands over in their traced strides
# (`<operand>.strides` params)
TRACED_STRIDES = {"aten._scaled_dot_product_cudnn_attention_backward.default": ("grad_out",)}


def _is_tensor(v) -> bool:
    return isinstance(v, torch.Tensor)


def _plain(v) -> bool:
    if isinstance(v, (bool, int, float, complex, str)) or v is None:
        return True
    if isinstance(v, (list, tuple)):
        return all(isinstance(x, (bool, int, float)) for x in v)
    return isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format))


def _split_args(node: fx.Node):
    """(tensor operands [(name, node)], params {name: value}) by the op's schema, or None when an
    argument is neither (a list mixing tensors and None, a symbolic size)."""
    schema = node.target._schema
    given = dict(zip((a.name for a in schema.arguments), node.args))
    given.update(node.kwargs)
    tensors, params = [], {}
    for arg in schema.arguments:
        if arg.name not in given:
            continue
        v = given[arg.name]
        if isinstance(v, fx.Node):
            if not _is_tensor(v.meta.get("val")):
                return None
            tensors.append((arg.name, v))
        elif isinstance(v, (list, tuple)) and any(isinstance(x, fx.Node) for x in v):
            # a list of (optional) tensors, e.g. index_put's [None, None, ih, iw] (the
            # backward of upsampling): the Nones are the positions no operand names
            if not all(x is None or (isinstance(x, fx.Node) and _is_tensor(x.meta.get("val")))
                       for x in v):
                return None
            tensors.extend((f"{arg.name}[{i}]", x) for i, x in enumerate(v) if x is not None)
            params[f"{arg.name}.len"] = len(v)
        elif v is None:
            params.setdefault("none_args", []).append(arg.name)   # e.g. attn_bias=None
        elif _plain(v):
            params[arg.name] = v
        else:
            return None
    return tensors, params


def _used_results(node: fx.Node):
    """[(output index, node whose value it is)] for the tensor outputs used, or None when a use
    is not a getitem of a tensor (a tuple escaping, a symbolic int output used)."""
    val = node.meta.get("val")
    if _is_tensor(val):
        return [(0, node)]
    if not isinstance(val, (tuple, list)):
        return None
    used = []
    for user in node.users:
        if user.target is operator.getitem and not user.users:
            continue    # an output nobody reads (attention's log-sum-exp and RNG state)
        if user.target is not operator.getitem or not _is_tensor(user.meta.get("val")):
            return None
        used.append((user.args[1], user))
    return sorted(used, key=lambda p: p[0])


# Unsigned types torch-mlir has no type for (uint8 it imports as a signless i8): a library
# call's result of one of these is imported as its signed twin (the same bits), which is right
# only where no compiled op reads it: export_program.restore_signedness gives the output back
# its unsigned type.
_UNIMPORTED_UNSIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32,
                        torch.uint64: torch.int64}


def _only_returned(node: fx.Node) -> bool:
    return all(u.op == "output" for u in node.users)


def outline_blocker(node: fx.Node) -> str | None:
    """Why `node` cannot become a call inside the program (None: it can)."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return "not an ATen overload"
    if _split_args(node) is None:
        return "an argument is neither a tensor nor a plain value"
    results = _used_results(node)
    if results is None:
        uses = [(u.name, type(u.meta.get("val")).__name__) for u in node.users]
        return f"a result that is read is not a tensor: {uses}"
    for _, user in results:
        if user.meta["val"].dtype in _UNIMPORTED_UNSIGNED and not _only_returned(user):
            return f"compiled code reads its {user.meta['val'].dtype} result"
    return None


def can_outline(node: fx.Node) -> bool:
    return outline_blocker(node) is None


def strided_library_args(gm: fx.GraphModule, nodes) -> list[list[int]]:
    """[placeholder position, strides...] of each placeholder of `gm` that comes strided (not
    contiguous, static) and that only library `nodes` read: eager hands those ops the strided
    tensor itself (a backward's saved q, k, v are views of the forward's packed projection),
    and so may the runtime, instead of a contiguous copy of each per call (`ember.arg_strides`).
    """
    out = []
    for pos, ph in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        val = ph.meta.get("val")
        if not isinstance(val, torch.Tensor) or not ph.users or \
                not all(u in nodes for u in ph.users):
            continue
        geometry = (*val.shape, *val.stride())
        if not all(isinstance(x, int) for x in geometry) or val.numel() <= 1 or \
                val.is_contiguous():
            continue
        out.append([pos, *val.stride()])
    return out


def outline(gm: fx.GraphModule, nodes, each=None) -> tuple[fx.GraphModule, list[LibraryCall]]:
    """A copy of `gm` where each node of `nodes` is cut out: its used tensor outputs become new
    placeholders (after the others) and its tensor operands new outputs (after the others).
    `each`, where given, is applied to every node of the copy first (as if to `gm`'s)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    nodes = sorted(nodes, key=order.__getitem__)     # program order: a stable numbering
    cut = {n.name for n in nodes}
    root, graph = gm, _copy_graph(gm.graph, each)   # the module is made once the graph is done
    by_name = {n.name: n for n in graph.nodes}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = out_node.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    n_in, calls = len(placeholders), []
    replaced: dict[fx.Node, fx.Node] = {}
    last = placeholders[-1] if placeholders else None
    for old in nodes:
        node = by_name[old.name]
        tensors, params = _split_args(node)
        if str(node.target) in TRACED_STRIDES:
            # the operand's strides as traced: eager's layout (runtime/externs._grad_as_traced)
            for name, arg in tensors:
                val = arg.meta.get("val")
                if name in TRACED_STRIDES[str(node.target)] and _is_tensor(val) and all(
                        isinstance(x, int) for x in val.stride()):
                    params[f"{name}.strides"] = [int(x) for x in val.stride()]
        results = _used_results(node)
        call = LibraryCall(str(node.target), [t for t, _ in tensors], params,
                           [i for i, _ in results],
                           view=any(r.alias_info is not None for r in node.target._schema.returns))
        for t, arg in tensors:
            call.operand_slots.append(len(outs))
            outs.append(arg)
        for i, user in results:
            ctx = graph.inserting_after(last) if last is not None else graph.inserting_before(
                next(iter(graph.nodes)))
            with ctx:
                ph = graph.placeholder(f"ember_lib{len(calls)}_out{i}")
            val = user.meta["val"]
            if val.dtype in _UNIMPORTED_UNSIGNED:     # only returned (outline_blocker)
                with val.fake_mode if getattr(val, "fake_mode", None) else nullcontext():
                    val = torch.empty_strided(val.shape, val.stride(), device=val.device,
                                              dtype=_UNIMPORTED_UNSIGNED[val.dtype])
            ph.meta["val"] = val
            last = ph
            call.result_slots.append(n_in)
            n_in += 1
            user.replace_all_uses_with(ph)
            replaced[user] = ph
        calls.append(call)
    out_node.args = (tuple(replaced.get(o, o) for o in outs),)
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and not node.users and (
                node.target is operator.getitem or node.name in cut):
            graph.erase_node(node)
    graph.lint()
    from .fx_prep import new_module
    return new_module(root, graph), calls


def _copy_graph(graph: fx.Graph, each=None) -> fx.Graph:
    """A copy with every placeholder first, in their order. The submodules of a split graph
    (partition.partition_graph) create placeholders where first used, between other nodes;
    `outline` adds its placeholders after the last one, which must precede every use.
    `each`: applied to every new node."""
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    nodes = list(graph.nodes)
    for n in [n for n in nodes if n.op == "placeholder"] + \
            [n for n in nodes if n.op != "placeholder"]:
        env[n] = new.node_copy(n, lambda x: env[x])   # node_copy keeps `meta`
        if each is not None:
            each(env[n])
    return new


def _attr(v: Any) -> ir.Attribute:
    from torch_mlir import ir
    from ..dialects.contract import COMPLEX_KEY
    if isinstance(v, bool):
        return ir.BoolAttr.get(v)
    if isinstance(v, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    if isinstance(v, float):
        return ir.FloatAttr.get(ir.F64Type.get(), v)
    if isinstance(v, complex):          # a complex scalar (`z + 1j`): runtime/externs.py
        return ir.DictAttr.get({COMPLEX_KEY: _attr([v.real, v.imag])})
    if isinstance(v, (list, tuple)):
        return ir.ArrayAttr.get([_attr(x) for x in v])
    return ir.StringAttr.get(str(v))


def stitch(module: ir.Module, calls: list[LibraryCall], func_name: str = "main") -> None:
    """Puts the outlined calls back into `@main`: each becomes a `func.call` of a private
    `ember.library` declaration; the extra arguments and results `outline` added are removed."""
    from torch_mlir import ir
    from ..dialects.contract import LIBRARY, PARAMS, RESULTS, TENSOR_ARGS, VIEW
    if not calls:
        return
    from ..passes.graph_utils import stable_topological_sort

    main = next(op for op in module.body.operations if op.operation.name == "func.func"
                and ir.StringAttr(op.attributes["sym_name"]).value == func_name)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    ret_vals = list(ret.operands)
    extra_out = {s for c in calls for s in c.operand_slots}
    extra_in = sorted({s for c in calls for s in c.result_slots})
    with main.location, ir.InsertionPoint.at_block_begin(module.body):
        decls = []
        for i, c in enumerate(calls):
            arg_types = [ret_vals[s].type for s in c.operand_slots]
            res_types = [block.arguments[s].type for s in c.result_slots]
            decl = ir.Operation.create(
                "func.func", regions=1,
                attributes={
                    "sym_name": ir.StringAttr.get(f"ember_lib_{i}"),
                    "sym_visibility": ir.StringAttr.get("private"),
                    "function_type": ir.TypeAttr.get(ir.FunctionType.get(arg_types, res_types)),
                    **dict([LIBRARY.make(c.op), TENSOR_ARGS.make(list(c.tensor_args)),
                            PARAMS.make(ir.DictAttr.get({k: _attr(v) for k, v in c.params.items()})),
                            RESULTS.make(list(c.results))]),
                    # the results alias the operands: ember-buffer-reuse keeps those alive
                    **(dict([VIEW.make(True)]) if c.view else {}),
                })
            decls.append((decl, arg_types, res_types))
    # Each call goes where its first user is (the sort below then only moves what its operands
    # need): at the end, every op not depending on it was sorted above it — a backward's later
    # layers' work (their weight casts) hoisted above each attention backward, alive from there
    # to their use (BERT-base bf16 16x128: most of the backward's 172 MiB arena).
    pos = {op.operation: k for k, op in enumerate(block.operations)}
    with main.location:
        for i, (c, (_, _, res_types)) in enumerate(zip(calls, decls)):
            users = [getattr(u.owner, "operation", u.owner)
                     for s in c.result_slots for u in block.arguments[s].uses]
            users = [u for u in users if u in pos]
            at = min(users, key=pos.__getitem__) if users else ret
            call = ir.Operation.create(
                "func.call", results=res_types,
                # read the return's operands now: an operand may be an earlier call's result
                operands=[ret.operands[s] for s in c.operand_slots],
                attributes={"callee": ir.FlatSymbolRefAttr.get(f"ember_lib_{i}")},
                ip=ir.InsertionPoint(at))
            for k, s in enumerate(c.result_slots):
                block.arguments[s].replace_all_uses_with(call.results[k])
        # (read back: the uses of the replaced arguments in the return are the calls now)
        keep = [v for k, v in enumerate(ret.operands) if k not in extra_out]
        ir.Operation.create("func.return", operands=keep, ip=ir.InsertionPoint(ret))
    ret.erase()
    for s in reversed(extra_in):
        block.erase_argument(s)
    inputs = [a.type for a in block.arguments]
    results = [v.type for v in keep]
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
    stable_topological_sort(block)
