"""Outputs with eager's layout and aliasing (issue 9, item 1; issue 8, item 3).

ember's kernels write contiguous tensors, but eager's results are not always contiguous (a
pointwise op on a channels-last or permuted input keeps that layout) and some outputs are views
of others (`y, y.t()`). A user sees both (strides, `add_` through one output showing in the
other), and so does AOTAutograd: a backward graph or a `.view` after the graph assumes eager's
strides, and fails ("view size is not compatible with input tensor's size and stride") when a
transposed result comes back contiguous. `fx_prep.prepare` uses these helpers so that:

* an output that is a chain of view ops over a computed value is rebuilt on the host by running
  the same view ops on the computed value (same storage, strides and storage offset as eager);
* a computed value whose eager strides are a permutation of a contiguous layout is computed
  permuted (the kernel writes the physical order; the permute is an indexing map, no copy) and
  handed out through the inverse permute: eager's strides, without a copy;
* any other layout (gaps, overlaps) is copied into `empty_strided` with eager's strides.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx as fx

aten = torch.ops.aten

Step = tuple[Callable, tuple, dict]     # fn(t, *args, **kwargs)


def _known(cond) -> bool:
    """`cond` for static sizes; for symbolic ones, whether it holds for every size, decided
    without adding a guard (frontend/symbolic.py: a compile may not depend on a size)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return statically_known_true(cond)


def dense_permutation(val: torch.Tensor) -> tuple[int, ...] | None:
    """The dim order (outermost first) in which `val` is laid out contiguously, when that is
    not the logical order; None when `val` is contiguous or not a permutation of a dense layout
    (callers copy then)."""
    if _known(val.is_contiguous()):
        return None
    stride = val.stride()
    perm = tuple(sorted(range(val.dim()), key=lambda d: (-stride[d], d)))
    return perm if val.permute(perm).is_contiguous() else None


def _inverse(perm: tuple[int, ...]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _restride(t: torch.Tensor, size, stride) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


def layout_steps(val: torch.Tensor) -> tuple[tuple[int, ...] | None, tuple[Step, ...]]:
    """(perm, steps): compute `permute(value, perm)` (contiguous) when perm is not None, then
    `steps` give eager's layout back from what the program returns."""
    if _known(val.numel() <= 1) or _known(val.is_contiguous()):
        return None, ()
    perm = dense_permutation(val)
    if perm is not None:
        return perm, ((aten.permute.default, (_inverse(perm),), {}),)
    return None, ((_restride, (tuple(val.shape), tuple(val.stride())), {}),)


def _size_arg(x):
    """A view's argument with its symbolic sizes (a SymInt placeholder of a dynamic graph) as
    their SymInt values (frontend/symbolic.py evaluates them for each call)."""
    if isinstance(x, fx.Node):
        return x.meta.get("val")
    if isinstance(x, (list, tuple)):
        return type(x)(_size_arg(a) for a in x)
    return x


def _is_size(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.SymInt)


def _is_single_view(node: fx.Node, is_view: Callable[[fx.Node], bool]) -> bool:
    if node.target is operator.getitem or not is_view(node):
        return False
    ins = [n for n in node.all_input_nodes if not _is_size(n)]
    return (len(ins) == 1 and bool(node.args) and node.args[0] is ins[0]
            and isinstance(node.meta.get("val"), torch.Tensor)
            and isinstance(ins[0].meta.get("val"), torch.Tensor))


def _pick(t: torch.Tensor, op, args: tuple, kwargs: dict, index: int) -> torch.Tensor:
    """Result `index` of a view op with several results (`split`, `unbind`, `chunk`)."""
    return op(t, *args, **kwargs)[index]


def _multi_view_source(node: fx.Node, is_view: Callable[[fx.Node], bool]) -> fx.Node | None:
    """For `getitem(split(x, ...), i)` (a view op with several results, one tensor operand):
    the split node; None otherwise."""
    if node.target is not operator.getitem or not isinstance(node.args[0], fx.Node) \
            or not isinstance(node.args[1], int):
        return None
    src = node.args[0]
    if src.op != "call_function" or not is_view(src) or not src.args \
            or not isinstance(src.args[0], fx.Node) \
            or not isinstance(src.args[0].meta.get("val"), torch.Tensor) \
            or [n for n in src.all_input_nodes if not _is_size(n)] != [src.args[0]] \
            or not isinstance(node.meta.get("val"), torch.Tensor):
        return None
    return src


def view_chain(out: fx.Node, is_view: Callable[[fx.Node], bool],
               host_only: dict[fx.Node, bool]) -> tuple[fx.Node, tuple[Step, ...]]:
    """(base, steps): `out` is `steps` applied to `base`, a computed (not view) value. A result
    of a view op with several results (q, k, v split from one projection) is a step too: the
    outputs stay views of the one buffer, as eager's are (no copy into eager's strides each)."""
    chain = []
    node = out
    while True:
        if _is_single_view(node, is_view) and not host_only[node.args[0]]:
            chain.append((node.target, _size_arg(tuple(node.args[1:])), dict(node.kwargs)))
            node = node.args[0]
            continue
        src = _multi_view_source(node, is_view)
        if src is not None and not host_only[src.args[0]]:
            chain.append((_pick, (src.target, _size_arg(tuple(src.args[1:])),
                                  dict(src.kwargs), node.args[1]), {}))
            node = src.args[0]
            continue
        return node, tuple(reversed(chain))


def replay(t: torch.Tensor, steps: tuple[Step, ...]) -> torch.Tensor:
    for fn, args, kwargs in steps:
        t = fn(t, *args, **kwargs)
    return t


def add_permuted(gm: fx.GraphModule, node: fx.Node, perm: tuple[int, ...]) -> fx.Node:
    """A `permute(node, perm)` right after `node`, the value the program returns instead."""
    with gm.graph.inserting_after(node):
        p = gm.graph.call_function(aten.permute.default, (node, list(perm)))
    p.meta["val"] = node.meta["val"].permute(perm)
    return p


def plan_computed(gm: fx.GraphModule, out: fx.Node, is_view, host_only,
                  compiled: list[fx.Node], bases: dict[fx.Node, tuple[int, tuple, bool]],
                  eager_layout: Callable[[fx.Node], Any] = lambda node: None) -> Any:
    """The plan entry for a computed output: ("compiled", j) or ("view", j, steps); appends
    what the program must return to `compiled`. `eager_layout(base)`: a tensor laid out as
    eager lays out the base value where the graph's value says otherwise (decomp_layouts);
    the views over such a base are replayed on it (their graph values have the other layout)."""
    base, chain = view_chain(out, is_view, host_only)
    if base not in bases:
        eager = eager_layout(base)
        perm, steps = layout_steps(base.meta["val"] if eager is None else eager)
        target = add_permuted(gm, base, perm) if perm is not None else base
        compiled.append(target)
        bases[base] = (len(compiled) - 1, steps, eager is None)
    j, steps, graph_layout = bases[base]
    steps = steps + chain
    if graph_layout:
        steps = fold_views(base.meta["val"], steps, out.meta.get("val"))
    return ("view", j, steps, alias_geometry(steps)) if steps else ("compiled", j)


def alias_geometry(steps: tuple[Step, ...]):
    """(size, stride, offset) when `steps` is fold_views' one `_alias`: fx_prep.assemble
    applies it inline (its own check of the base's layout); None otherwise."""
    if len(steps) == 1 and steps[0][0] is _alias:
        size, stride, offset, _ = steps[0][1]
        return size, stride, offset
    return None


def _alias(t: torch.Tensor, size, stride, offset: int, steps: tuple[Step, ...]) -> torch.Tensor:
    if t.is_contiguous():
        return t.as_strided(size, stride, t.storage_offset() + offset)
    return replay(t, steps)     # a library call's result in another layout: the views themselves


def fold_views(base_val, steps: tuple[Step, ...], out_val) -> tuple[Step, ...]:
    """`steps`, when they are all views and the sizes static, as one `as_strided` with the
    output's eager geometry: the program returns the base in eager's memory layout (contiguous,
    or a dense permutation returned in physical order), so eager's sizes, strides and offset
    relative to the base address the same elements (checked per call: a base that comes back in
    another layout replays the views). One call in place of a chain of view ops,
    some of which (prims views from decompositions) cost a Python autograd wrapper each: a
    training forward returns hundreds of such views, and their replay dominated its host time."""
    if (not steps or any(fn is _restride for fn, _, _ in steps)
            or not isinstance(out_val, torch.Tensor) or not isinstance(base_val, torch.Tensor)
            # a dtype-changing view (view_as_real, view(dtype)) or a conj/neg bit: not geometry
            or out_val.dtype != base_val.dtype or out_val.is_complex()
            or out_val.is_conj() or out_val.is_neg()):
        return steps
    geometry = (*out_val.shape, *out_val.stride(), out_val.storage_offset(),
                base_val.storage_offset())
    if not all(isinstance(x, int) for x in geometry):       # symbolic: replay the views
        return steps
    offset = out_val.storage_offset() - base_val.storage_offset()
    return ((_alias, (tuple(out_val.shape), tuple(out_val.stride()), offset, steps), {}),)


def permute_inputs(sub: fx.GraphModule) -> dict[int, list[int]]:
    """Inputs laid out as a permutation of a contiguous layout (channels-last, a transposed
    activation) are taken in their physical order, a contiguous view that costs no copy (the
    runtime copies non-contiguous inputs), and permuted back inside the graph, where the permute
    is only an indexing map. Rewrites the placeholders of `sub` (the compiled half); returns
    {placeholder position: perm}, what `fx_prep.compiled_inputs` applies at each call."""
    perms: dict[int, list[int]] = {}
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for i, ph in enumerate(placeholders):
        val = ph.meta.get("val")
        if not isinstance(val, torch.Tensor) or _known(val.numel() <= 1) or not ph.users:
            continue
        perm = dense_permutation(val)
        if perm is None:
            continue
        with sub.graph.inserting_after(ph):
            back = sub.graph.call_function(aten.permute.default, (ph, _inverse(perm)))
        back.meta["val"] = val
        ph.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
        ph.meta = {k: v for k, v in ph.meta.items() if k != "tensor_meta"}
        ph.meta["val"] = val.permute(perm)
        perms[i] = list(perm)
    if perms:
        sub.recompile()
    return perms
