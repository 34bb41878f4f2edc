"""A training forward saves a contiguous copy of a transposed tensor in the tensor's own order.

Attention written with 4-d matmuls (swin_t: `q @ k.transpose(-2, -1)`) reaches bmm through
`clone(expand(permute(k)), memory_format=contiguous)` and a `view` to 3-d; AOTAutograd saves
that view, transposed back, for the backward (`bmm(grad, permute(view_7, [0, 2, 1]))`). The
contiguous clone is k^T written out: a kernel whose stores are strided by k's last dim (one
`ember_fused_transpose_extract_slice_mul` per block on swin_t, several times slower than a
copy), next to the copy of k in its own order that the bmm itself reads (ember-convert-externs
reads k transposed).

`keep_clone_layouts` (forward): such a clone, when what it feeds is only views leading to saved
outputs (never a user-visible output) and compute ops (value semantics: layout-blind), is
written with its last two dims in X's order: `transpose(clone(transpose(X)))`, a contiguous
copy in X's own order and a view; the views' values are propagated again (a view the new
layout cannot take leaves the clone alone). output_layouts then returns the clone
in that physical order (k's: the same copy the bmm reads, and coalesced), and the saved view's
strides are reported to AOTAutograd (as saved_layouts does for channels-last activations).
`take_dense_input_strides` (backward): a placeholder traced in a permuted layout whose example
input comes contiguous takes that layout, when no view reads it (views' traced strides would be
stale); else the runtime copies it into the traced layout, as it always did: never misread.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .saved_layouts import _is_view

aten = torch.ops.aten


def _static(val) -> bool:
    return isinstance(val, torch.Tensor) and all(
        isinstance(s, int) for s in (*val.shape, *val.stride()))


def _fake(val: torch.Tensor, stride) -> torch.Tensor:
    from contextlib import nullcontext
    mode = getattr(val, "fake_mode", None)
    with mode if mode is not None else nullcontext():
        return torch.empty_strided(val.shape, stride, dtype=val.dtype, device=val.device)


# views whose result is computed from the input's strides (as_strided and the like, which
# address storage directly, are not: a clone read by one is left alone)
_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.permute.default,
          aten.transpose.int, aten.t.default, aten.expand.default, aten.unsqueeze.default,
          aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.select.int,
          aten.slice.Tensor, aten.alias.default}


def _views_after(node: fx.Node) -> list[fx.Node] | None:
    """The view ops reading `node` (through views), in graph order; None when one of them is
    not a plain single-input view op of `_VIEWS`."""
    found, todo = [], [node]
    while todo:
        n = todo.pop()
        for user in n.users:
            if user.op == "call_function" and _is_view(user):
                ins = [a for a in user.all_input_nodes]
                if user.target not in _VIEWS or ins != [n] or user.args[0] is not n:
                    return None
                found.append(user)
                todo.append(user)
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return sorted(set(found), key=order.__getitem__)


def _repropagate(views: list[fx.Node]) -> bool:
    """Each view's value computed again from its (new) input value; False if one fails."""
    for v in views:
        src = v.args[0].meta["val"]
        mode = getattr(src, "fake_mode", None)
        from contextlib import nullcontext
        try:
            with mode if mode is not None else nullcontext():
                val = v.target(src, *v.args[1:], **v.kwargs)
        except Exception:   # a view the new layout cannot take (RuntimeError in view)
            return False
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(v.meta["val"].shape):
            return False
        v.meta["val"] = val
        v.meta.pop("tensor_meta", None)
    return True


def _stride_order(val: torch.Tensor) -> list[int] | None:
    """The last two dims swapped, when `val` is a transposed view there (its last dim strided
    more widely than the one before: `k.transpose(-2, -1)`); None otherwise. Only that pair:
    the leading dims keep their order, so a view merging them (to bmm's 3-d) still takes it."""
    if val.dim() < 2 or val.shape[-1] <= 1 or val.shape[-2] <= 1:
        return None
    if not val.stride()[-1] > val.stride()[-2] > 0:
        return None
    r = val.dim()
    return list(range(r - 2)) + [r - 1, r - 2]


def keep_clone_layouts(gm: fx.GraphModule, saved: range) -> list | None:
    """Rewrites the eligible clones (see the module docstring); returns every output's strides
    (None: unchanged) or None when nothing changed."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    visible = {o for i, o in enumerate(outs) if i not in saved and isinstance(o, fx.Node)}
    saved_nodes = {outs[i] for i in saved if isinstance(outs[i], fx.Node)}
    changed: set[fx.Node] = set()
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.clone.default \
                or node.kwargs.get("memory_format") is not torch.contiguous_format \
                or not isinstance(node.args[0], fx.Node) or node in visible:
            continue
        val, src = node.meta.get("val"), node.args[0].meta.get("val")
        if not _static(val) or not _static(src) or val.numel() <= 1 or not val.is_contiguous():
            continue
        perm = _stride_order(src)
        if perm is None:
            continue
        views = _views_after(node)
        if views is None or any(v in visible for v in views) \
                or not any(v in saved_nodes for v in [node, *views]):
            continue
        old = {v: v.meta["val"] for v in views}
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        mode = getattr(val, "fake_mode", None)
        from contextlib import nullcontext
        with mode if mode is not None else nullcontext():
            physical = aten.clone.default(src.permute(perm), memory_format=torch.contiguous_format)
            node.meta["val"] = physical.permute(inv)
        # every saved value it reaches comes out no less contiguous (one saved as the clone
        # itself, or a view of it in the clone's order, would come to the backward strided,
        # and be copied there), and one of them more
        reached = [(v, old.get(v, val)) for v in [node, *views] if v in saved_nodes]
        if not _repropagate(views) or any(
                ov.is_contiguous() and not v.meta["val"].is_contiguous() for v, ov in reached) \
                or not any(v.meta["val"].is_contiguous() and not ov.is_contiguous()
                           for v, ov in reached):
            node.meta["val"] = val
            for v, ov in old.items():
                v.meta["val"] = ov
            continue
        # clone(X) -> permute(clone(permute(X, perm)), inv): the copy is written in X's own
        # order (a permute is an indexing map in the kernel, a view on the host)
        with gm.graph.inserting_before(node):
            p1 = gm.graph.call_function(aten.permute.default, (node.args[0], list(perm)))
            c = gm.graph.call_function(aten.clone.default, (p1,),
                                       {"memory_format": torch.contiguous_format})
            p2 = gm.graph.call_function(aten.permute.default, (c, inv))
        p1.meta = {**node.meta, "val": src.permute(perm)}
        c.meta = {**node.meta, "val": physical}
        p2.meta = {**node.meta, "val": node.meta["val"]}
        for m in (p1, c, p2):
            m.meta.pop("tensor_meta", None)
        node.replace_all_uses_with(p2)
        gm.graph.erase_node(node)
        changed.update([p2, *views])
    if not changed:
        return None
    gm.recompile()
    return [tuple(o.meta["val"].stride()) if i in saved and o in changed else None
            for i, o in enumerate(outs)]


def take_dense_input_strides(gm: fx.GraphModule, inputs) -> None:
    """The backward's placeholders that no view reads, traced permuted, take the example
    inputs' contiguous strides (keep_clone_layouts' reported ones)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        return
    for ph, t in zip(placeholders, inputs):
        val = ph.meta.get("val")
        if not _static(val) or not isinstance(t, torch.Tensor) or not _static(t) \
                or tuple(t.shape) != tuple(val.shape) or tuple(t.stride()) == tuple(val.stride()) \
                or t.numel() <= 1:
            continue
        if not t.is_contiguous() or val.is_contiguous():
            continue    # (only a traced permuted layout that comes contiguous: no copy then)
        if any(u.op == "call_function" and _is_view(u) for u in ph.users) \
                or any(u.op == "output" for u in ph.users):
            continue
        ph.meta["val"] = _fake(val, t.stride())
        ph.meta.pop("tensor_meta", None)
