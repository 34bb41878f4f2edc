"""Values a graph computes from no input at all, computed once at compile time.

A causal attention mask, position ids, the `arange`s and comparisons transformers builds them
from: none of them reads a graph input, yet each call ran them again, several kernels (and a
library `cumsum`) per forward. `fold_input_free(gm)` evaluates, with eager torch, each such
value that a computation on the inputs reads, and makes it a new input of `gm` (the last
placeholders, in order): the caller passes the tensors it returns on every call. They keep
their storage from call to call, as parameters do, so a CUDA graph reads them in place.

Invariant: after it, no node of `gm` that an input-dependent node reads is input-free, except
values with one repeated element (a `full`, `zeros_like`: ember keeps those as splat constants,
free in the kernels that read them), uninitialised memory (`empty*`), and values over
FOLD_BYTES, or past FOLD_TOTAL_BYTES for the graph (kept computed per call rather than held
in memory). A value over FOLD_BYTES is computed per call from the input-free values it reads,
which fold in its place (each under the same rules: a broadcast of a folded mask is one
launch or none, the mask's own aranges, comparisons and cumsum none). Equal folded values
(each layer's copy of one mask) are one input. Random ops (`nondeterministic_seeded`) are never input-free: their draws keep
program order. `evaluate` also serves fx_prep.prepare for input-free outputs (a training
forward's saved attention mask), computed once and copied per call.

Only graphs whose inputs all have static shapes are folded (a symbolic size could make the
value's shape differ from call to call).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

FOLD_BYTES = 4 << 20       # one folded value at most: larger ones are recomputed per call
FOLD_TOTAL_BYTES = 64 << 20     # all of a graph's folded values at most
_UNINITIALISED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                  "empty_permuted"}


def input_free(gm: fx.GraphModule) -> dict[fx.Node, bool]:
    """The nodes whose value does not depend on the graph's inputs (factory ops and what is
    computed from them alone), random ops excepted (their draws keep program order)."""
    constant: dict[fx.Node, bool] = {}
    for node in gm.graph.nodes:
        op = node.target
        if node.op == "get_attr":
            # a tensor constant the trace lifted (`torch.tensor(count)` in swin_t's shifted-
            # window mask, `self._tensor_constant0`): the graph module's own, no input
            constant[node] = isinstance(_attr(gm, op), torch.Tensor)
            continue
        constant[node] = (node.op == "call_function" and (
            op is operator.getitem or isinstance(op, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded not in op.tags)
            and all(constant.get(n, False) for n in node.all_input_nodes))
    return constant


def _attr(gm: fx.GraphModule, target: str):
    try:
        return operator.attrgetter(target)(gm)
    except AttributeError:
        return None


def static_inputs(gm: fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not all(isinstance(s, int) for s in val.shape):
            return False
    return True


def _uniform(t: torch.Tensor) -> bool:
    if t.numel() <= 1:
        return True
    flat = t.reshape(-1)
    same = flat == flat[0]
    if t.is_floating_point() or t.is_complex():
        same = same | (torch.isnan(flat) & torch.isnan(flat[0]))
    return bool(same.all())


def _packet_name(node: fx.Node) -> str:
    target = node.target
    return getattr(getattr(target, "overloadpacket", None), "__name__", "")


def evaluate(node: fx.Node, values: dict) -> torch.Tensor | None:
    """`node`'s value (an input-free node), computed by eager torch on real tensors: a
    contiguous tensor of its meta shape and dtype, or None (larger than FOLD_BYTES, not a
    tensor, or eager raises on it: left for the call to raise). `values` memoises."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.numel() == 0 \
            or val.numel() * val.element_size() > FOLD_BYTES:
        return None

    def run(n: fx.Node):
        if n not in values:
            if n.op == "get_attr":
                values[n] = _attr(n.graph.owning_module, n.target)
                return values[n]
            for m in n.all_input_nodes:
                run(m)
            args = fx.node.map_arg(n.args, lambda m: values[m])
            kwargs = fx.node.map_arg(n.kwargs, lambda m: values[m])
            values[n] = n.target(*args, **kwargs)
        return values[n]
    try:
        with unset_fake_temporarily(), torch.no_grad():
            value = run(node)
    except Exception:   # noqa: BLE001 - eager raises on it: the call raises it as before
        return None
    if (not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(val.shape)
            or value.dtype != val.dtype):
        return None
    with unset_fake_temporarily():
        return value.contiguous().clone()


def _too_large(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.numel() * val.element_size() > FOLD_BYTES


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two folded values are the same bit for bit (`torch.equal` takes -0.0 for 0.0,
    and an additive mask of `0 * finfo.min` holds -0.0)."""
    return (a.shape == b.shape and a.dtype == b.dtype
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def fold_input_free(gm: fx.GraphModule) -> list[torch.Tensor]:
    """Folds `gm` in place (see the module docstring); returns the values of the new inputs."""
    if not static_inputs(gm):
        return []
    constant = input_free(gm)
    boundary = [n for n in gm.graph.nodes
                if constant[n] and any(not constant[u] for u in n.users)
                and isinstance(n.meta.get("val"), torch.Tensor)
                and _packet_name(n) not in _UNINITIALISED]
    if not boundary:
        return []
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
    values: dict[fx.Node, object] = {}
    folded: list[tuple[list[fx.Node], torch.Tensor]] = []   # the nodes of one value
    total = 0
    seen = set(boundary)
    for node in boundary:       # grows: see _too_large
        value = evaluate(node, values)
        if value is None and _too_large(node):
            # a broadcast or a computation of smaller input-free values (memory-efficient
            # attention's bias: the causal mask [B, 1, S, S] expanded to [B, H, S, S] for
            # the call, 25 MB in GPT-2's fp32 forward on a GPU): those values fold instead,
            # and only what is computed from them runs per call; before, nothing of the mask
            # folded and each forward ran three kernels and a cumsum for it
            for m in node.all_input_nodes:
                if constant[m] and m not in seen and isinstance(m.meta.get("val"), torch.Tensor) \
                        and _packet_name(m) not in _UNINITIALISED:
                    seen.add(m)
                    boundary.append(m)
            continue
        if value is None or _uniform(value):
            continue
        same = next((g for g in folded if _same_bits(g[1], value)), None)
        if same is not None:
            # the same value again (each layer's SDPA converts the one causal mask to its
            # own bias: GPT-2's 12 layers, 12 copies of 2 MB): one input for all of them
            same[0].append(node)
            continue
        total += value.numel() * value.element_size()
        if total > FOLD_TOTAL_BYTES:
            break
        folded.append(([node], value))
    if not folded:
        return []
    last = [n for n in gm.graph.nodes if n.op == "placeholder"]
    at = last[-1] if last else None
    taken = {n.name for n in gm.graph.nodes}
    out = []
    for k, (nodes, value) in enumerate(folded):
        node = nodes[0]
        name = f"ember_folded_{k}"
        while name in taken:
            name += "_"
        taken.add(name)
        ctx = gm.graph.inserting_after(at) if at is not None else \
            gm.graph.inserting_before(next(iter(gm.graph.nodes)))
        with ctx:
            ph = gm.graph.placeholder(name)
        old = node.meta["val"]
        mode = getattr(old, "fake_mode", None) or FakeTensorMode()
        with unset_fake_temporarily():
            ph.meta["val"] = mode.from_tensor(value, static_shapes=True)
        from torch.fx.passes.shape_prop import _extract_tensor_metadata
        ph.meta["tensor_meta"] = _extract_tensor_metadata(value)
        for n in nodes:
            n.replace_all_uses_with(ph)
        at = ph
        out.append(value)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return out
