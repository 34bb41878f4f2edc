"""A 0-dim integer tensor passed where an op takes an int (`narrow(x, 1, torch.tensor(2), 3)`,
`tensor_split(x, torch.tensor(3))`) becomes that int in Dynamo's graph, before AOTAutograd.

The ops' Tensor overloads read the value with `.item()`. Dynamo traces that through the fake
input's `item_memo`, a backed SymInt with a guard on the value (tensor_split: `s.item() == 3`,
the number of outputs depends on it; narrow: a range). AOTAutograd's functionalization reads
`.item()` of another fake (an alias without the memo) and raises DataDependentOutputException,
so the whole graph ran eagerly (Inductor graph-breaks there). `specialize_tensor_scalars`
replaces each such argument by `int(memo)`: that adds Dynamo's guard `s.item() == value` (the
guards are built after the backend returns), so the graph is only run for that value, and
another value compiles again, as tensor_split already did under Dynamo. The result is the op's
int overload, a view as the Tensor overload's is.

Only arguments whose memo has a hint (a graph input's value, not one computed in the graph: an
unbacked value cannot be guarded) are replaced.
"""
from __future__ import annotations

import torch
import torch.fx as fx

# op -> (position, keyword) of the int argument its Tensor overload takes as a 0-dim tensor
_INT_ARGS = {
    torch.narrow: (2, "start"), "narrow": (2, "start"),
    torch.tensor_split: (1, "indices_or_sections"), "tensor_split": (1, "indices_or_sections"),
}


def _spec(node: fx.Node):
    if node.op == "call_function" and node.target in (torch.narrow, torch.tensor_split):
        return _INT_ARGS[node.target]
    if node.op == "call_method" and node.target in ("narrow", "tensor_split"):
        return _INT_ARGS[node.target]
    return None


def _value(arg) -> int | None:
    """The int a 0-dim integer tensor argument holds, guarded, or None."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    if not isinstance(arg, fx.Node):
        return None
    val = arg.meta.get("example_value", arg.meta.get("val"))
    if not isinstance(val, torch.Tensor) or val.dim() != 0 or val.is_floating_point() or \
            val.is_complex() or val.dtype is torch.bool:
        return None
    memo = getattr(val, "item_memo", None)
    if isinstance(memo, int):
        return memo
    if not isinstance(memo, torch.SymInt) or free_unbacked_symbols(memo) or \
            not memo.node.has_hint():
        return None
    return int(memo)        # guard_int: Dynamo guards `x.item() == value`


def specialize_tensor_scalars(gm: fx.GraphModule) -> int:
    """Rewrites `gm` in place; returns the number of arguments replaced."""
    count = 0
    for node in gm.graph.nodes:
        spec = _spec(node)
        if spec is None:
            continue
        pos, key = spec
        if len(node.args) > pos:
            value = _value(node.args[pos])
            if value is not None:
                args = list(node.args)
                args[pos] = value
                node.args = tuple(args)
                count += 1
        elif key in node.kwargs:
            value = _value(node.kwargs[key])
            if value is not None:
                node.kwargs = {**node.kwargs, key: value}
                count += 1
    if count:
        gm.recompile()
    return count
