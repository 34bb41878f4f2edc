"""Reductions over 0-dim tensors (and over all dims, `dim=None`) never reach torch-mlir.

torch-mlir fails on several of them, and one way hangs the process: `_softmax` of a 0-dim
tensor makes its decomposition print "failed to get softmax result" forever (issue 8, item 7);
`amax`/`amin`/`prod` of a 0-dim tensor and `argmax`/`argmin` with `dim=None` do not lower to
linalg (the graph fell back), nor does `index_select` from a 0-dim source or `flip` of a 0-dim
tensor. `lift_rank_zero` rewrites such a node `op(x, dim, ...)` as

    view(op(view(x, [numel]), 0 or [0], ...), result shape)

(each 0-dim tensor operand becomes 1-d of one element, each dim argument names that dim): the
same values by construction, since reducing a one-element dim is what reducing a 0-dim tensor
(or flattening, for `dim=None`) means. Only the ops below are rewritten; anything else on 0-dim
tensors lowers already.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

# op -> index of its dim argument (an int, a list of ints, or None)
_DIM_ARG = {
    aten.amax.default: 1, aten.amin.default: 1,
    aten.argmax.default: 1, aten.argmin.default: 1,
    aten.prod.dim_int: 1, aten.logsumexp.default: 1,
    aten._softmax.default: 1, aten._log_softmax.default: 1, aten._safe_softmax.default: 1,
    aten._softmax_backward_data.default: 2, aten._log_softmax_backward_data.default: 2,
    aten.any.dim: 1, aten.all.dim: 1, aten.any.dims: 1, aten.all.dims: 1,
    # a gather from a 0-dim source (index_add / index_copy backward): torch-mlir's lowering
    # fails to legalize it
    aten.index_select.default: 1,
    # flip of a 0-dim tensor (op_db's 0-dim samples; torch-mlir fails to lower it): dims [0]
    # or [-1], one of them (eager rejects [0, -1] as a repeated dim, so that stays the op's)
    aten.flip.default: 1,
}
_FLATTEN_WHEN_NONE = {aten.argmax.default, aten.argmin.default}


def _tensor_val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _needs_lift(node: fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _DIM_ARG:
        return False
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    ins = [_tensor_val(a) for a in node.args if isinstance(a, fx.Node)]
    if not ins or any(v is None for v in ins):
        return False
    if node.target is aten.flip.default:
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dims", ())
        return ins[0].dim() == 0 and len(dims) <= 1
    if all(v.dim() == 0 for v in ins):
        return True
    if node.target is aten.index_select.default:
        return ins[0].dim() == 0 and ins[0].numel() == 1
    i = _DIM_ARG[node.target]
    dim = node.args[i] if len(node.args) > i else node.kwargs.get("dim")
    return node.target in _FLATTEN_WHEN_NONE and dim is None and len(ins) == 1


def _fake(val: torch.Tensor, shape) -> torch.Tensor:
    mode = getattr(val, "fake_mode", None)
    if mode is not None:
        with mode:
            return torch.empty(shape, dtype=val.dtype, device=val.device)
    return torch.empty(shape, dtype=val.dtype, device="meta")


def _view(graph: fx.Graph, x: fx.Node, shape: list[int], like: torch.Tensor) -> fx.Node:
    op = aten.view.default if like.is_contiguous() else aten.reshape.default
    v = graph.call_function(op, (x, shape))
    v.meta["val"] = _fake(like, shape)
    return v


def lift_rank_zero(gm: fx.GraphModule) -> bool:
    """Rewrites `gm` in place as the module docstring says; True when anything changed."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if not _needs_lift(node):
            continue
        val = node.meta["val"]
        i = _DIM_ARG[node.target]
        with graph.inserting_before(node):
            args = []
            for k, a in enumerate(node.args):
                if isinstance(a, fx.Node):
                    v = _tensor_val(a)
                    a = _view(graph, a, [v.numel()], v)
                elif k == i and a is not None:
                    a = [0] if isinstance(a, (list, tuple)) and len(a) else (
                        [] if isinstance(a, (list, tuple)) else 0)
                elif k == i and node.target in _FLATTEN_WHEN_NONE:
                    a = 0
                args.append(a)
            if len(node.args) <= i and node.target in _FLATTEN_WHEN_NONE:
                args += [0] * (i + 1 - len(node.args))
            kwargs = dict(node.kwargs)
            if "dim" in kwargs:
                kwargs["dim"] = 0 if not isinstance(kwargs["dim"], (list, tuple)) else [0]
            if "dims" in kwargs:
                kwargs["dims"] = [0] if len(kwargs["dims"]) else []
            if node.target in _FLATTEN_WHEN_NONE:
                kwargs["keepdim"] = False
                if len(args) > 2:
                    args = args[:2]
            new = graph.call_function(node.target, tuple(args), kwargs)
            fake_args = fx.node.map_arg(tuple(args), lambda n: n.meta["val"])
            fake_kwargs = fx.node.map_arg(kwargs, lambda n: n.meta["val"])
            mode = getattr(val, "fake_mode", None)
            if mode is not None:
                with mode:
                    new.meta["val"] = node.target(*fake_args, **fake_kwargs)
            else:
                meta = fx.node.map_aggregate(
                    (fake_args, fake_kwargs),
                    lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t)
                new.meta["val"] = node.target(*meta[0], **meta[1])
            out = _view(graph, new, list(val.shape), val)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.lint()
        gm.recompile()
    return changed
