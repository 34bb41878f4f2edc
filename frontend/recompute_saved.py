"""Saved activations that are pointwise functions of other saved values, recomputed in the
backward instead of saved (issue 11: a training step's peak memory).

AOTAutograd's min-cut partitioner (Inductor's) saves a value a matmul of the backward reads
("materialized in backward": recomputing it is not free there), even where every input of its
computation is saved anyway: a transformer MLP's GELU output, read by the down projection's
weight gradient, is a pointwise function of the up projection's result, which the backward
keeps for the GELU's derivative. Both are [tokens, 4 x hidden]: GPT-2 and BERT-base save 24 MB
per layer twice in fp32 (12 MB in bf16), 288 MB of their ~1.1 GB of fp32 activations. With
CUDA graphs the forward's saved activations stay in its graph pool between steps, so every
byte saved is a byte of the step's peak.

`partition_recomputing_saved(partition, joint, inputs, **kw)` partitions once, finds each saved
value of at least MIN_BYTES that a matmul reads and that is a chain of at most MAX_OPS
pointwise ops (views between them; no library call, no weight's cast) whose leaves are all
saved values or inputs of the forward (parameters), marks the chain
PREFER_RECOMPUTE (the partitioner then recomputes it from its leaves in the backward, which are
saved anyway) and partitions again; the second split is kept when it saves fewer bytes. The
recomputed value is the same sequence of the same ops on the same inputs: the same bits as the
forward's.

On by default where the forward's saved activations stay in a CUDA-graph pool between steps
(frontend/options.recompute_saved_on). Its cost there is the recomputed values' writes in the
backward, no launch more: each recomputation joins a kernel the backward has anyway (GELU's
with GELU's backward and the bias gradient's partial sums, once ember-split-reductions splits
those along the tokens' own dims; a LayerNorm output's with that norm's backward).
"""
from __future__ import annotations

import copy

import torch
import torch.fx as fx

from .partition import is_library_node

# ops of one recomputed chain (views not counted): GELU (erf form) is 5, its tanh form 8
MAX_OPS = 12
# a saved value smaller than this is kept: its recomputation may be a launch of its own (BERT's
# pooler reads the last LayerNorm's output at token 0, 48 KB: a slice no other kernel makes)
MIN_BYTES = 1 << 20


def _pointwise(node: fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and torch.Tag.pointwise in tags


def _view(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return (node.op == "call_function" and schema is not None and bool(schema.returns)
            and schema.returns[0].alias_info is not None
            and not schema.returns[0].alias_info.is_write)


def _forward_inputs(graph: fx.Graph) -> set[fx.Node]:
    return {n for n in graph.nodes if n.op == "placeholder"
            and not str(n.target).startswith("tangents")}


def _chain(node: fx.Node, saved: set[fx.Node], inputs: set[fx.Node]) -> list[fx.Node] | None:
    """The pointwise ops (and views between them) that compute `node` from saved values and
    forward inputs only, or None."""
    ops, seen, todo, count = [], set(), [node], 0
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n is not node and (n in saved or n in inputs):
            continue        # a leaf the backward has anyway
        if n.op == "get_attr":
            continue
        if not (_pointwise(n) or _view(n)) or is_library_node(n):
            # a library call (bf16 erf-GELU, eager's kernel for its bits) would be a launch
            # more in the backward, not part of a kernel it has anyway
            return None
        if n.target is torch.ops.prims.convert_element_type.default and \
                n.all_input_nodes and n.all_input_nodes[0] in inputs:
            # a weight's cast: frontend/backend._partition_recomputing_casts decides those
            # (the one the backward's first matmul reads stays saved: a launch fewer)
            return None
        if not _view(n):
            count += 1
            if count > MAX_OPS:
                return None
        ops.append(n)
        todo.extend(n.all_input_nodes)
    return ops if count else None


def _saved_names(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    out = next(n for n in fw.graph.nodes if n.op == "output").args[0]
    return [n.name for n in out[num_fwd_outputs:]
            if isinstance(n, fx.Node) and isinstance(n.meta.get("val"), torch.Tensor)]


def _saved_bytes(fw: fx.GraphModule, num_fwd_outputs: int) -> int | None:
    """Bytes of the distinct storages the forward saves (views of one counted once; inputs
    not counted)."""
    out = next(n for n in fw.graph.nodes if n.op == "output").args[0]
    seen, total = set(), 0
    for n in out[num_fwd_outputs:]:
        if not isinstance(n, fx.Node) or n.op == "placeholder":
            continue
        base = n
        while _view(base) and isinstance(base.args[0], fx.Node):
            base = base.args[0]
        val = base.meta.get("val")
        if base.op == "placeholder" or base in seen or not isinstance(val, torch.Tensor):
            continue
        seen.add(base)
        if val.is_sparse:
            continue
        nbytes = _nbytes(val)
        if nbytes is None:
            return None     # no size hint: the first split stays
        total += nbytes
    return total


def _nbytes(val) -> int | None:
    """A tensor value's bytes; under dynamic shapes its size hint (a comparison of the size
    itself would add a guard), None when there is none."""
    if not isinstance(val, torch.Tensor):
        return None
    n = val.numel()
    if not isinstance(n, int):
        n = getattr(getattr(n, "node", None), "hint", None)
        if not isinstance(n, int):
            return None
    return n * val.element_size()


_MATMULS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.bmm.default,
                      torch.ops.aten.addmm.default})


def _read_by_matmul(node: fx.Node) -> bool:
    """Whether a matmul reads `node` (through views): a weight gradient's operand, whose
    recomputation joins the kernel of the pointwise backward beside it. A convolution's input
    (a ReLU after a BatchNorm) is left saved: its recomputation took kernels of its own
    (resnet18 bf16 training, Triton: 150 -> 161 launches)."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        for u in n.users:
            if u in seen:
                continue
            seen.add(u)
            if u.target in _MATMULS:
                return True
            if _view(u):
                todo.append(u)
    return False


def candidates(joint: fx.GraphModule, saved_names: list[str]) -> list[list[fx.Node]]:
    """Per saved value that is a pointwise function of other saved values and forward inputs:
    the joint graph's nodes that compute it."""
    by_name = {n.name: n for n in joint.graph.nodes}
    saved = {by_name[s] for s in saved_names if s in by_name}
    inputs = _forward_inputs(joint.graph)
    out = []
    for s in saved:
        if not (_pointwise(s) or _view(s)):
            continue
        nbytes = _nbytes(s.meta.get("val"))
        if nbytes is None or nbytes < MIN_BYTES:
            continue
        if not _read_by_matmul(s):
            continue
        chain = _chain(s, saved - {s}, inputs)
        if chain:
            out.append(chain)
    return out


def _copy_graph(graph: fx.Graph) -> fx.Graph:
    """`copy.deepcopy(graph)` (torch.fx's Graph.__deepcopy__: the nodes copied, their meta
    shallowly) but for its code generator, shared: deep-copying a pytree code generator
    rebuilds its TreeSpecs, whose LeafSpec torch deprecates with a FutureWarning the user saw
    at every training compile on a GPU."""
    g = fx.Graph(tracer_cls=graph._tracer_cls)
    out = g.graph_copy(graph, {}, return_output_node=True)
    g._codegen = copy.copy(graph._codegen)
    if out is not None:
        value, old_output = out
        g.output(value, type_expr=getattr(old_output, "type", None)).meta = \
            copy.copy(old_output.meta)
    return g


def partition_recomputing_saved(partition, joint_module, joint_inputs, **kwargs):
    """`partition` (a min-cut partition function) with the saved pointwise functions of saved
    values recomputed in the backward (module docstring)."""
    from torch.utils.checkpoint import CheckpointPolicy
    num_fwd_outputs = kwargs["num_fwd_outputs"]
    # the partitioner rewrites the joint graph it is given (CSE, its recompute tags): the first
    # split works on a copy
    first = fx.GraphModule(joint_module, _copy_graph(joint_module.graph))
    fw, bw = partition(first, joint_inputs, **kwargs)
    chains = candidates(joint_module, _saved_names(fw, num_fwd_outputs))
    if not chains:
        return fw, bw
    for chain in chains:
        for n in chain:
            if not _view(n) and "recompute" not in n.meta:
                n.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
    fw2, bw2 = partition(joint_module, joint_inputs, **kwargs)
    after, before = _saved_bytes(fw2, num_fwd_outputs), _saved_bytes(fw, num_fwd_outputs)
    if after is not None and before is not None and after < before:
        return fw2, bw2
    return fw, bw
