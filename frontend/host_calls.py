"""The per-call host work of a compiled graph, decided once (issue 12: training host overhead).

`fx_prep.compiled_inputs` and `fx_prep.assemble` say what a call does: permute some inputs into
their physical order, then build the graph's outputs from the program's and the host half's
(views, copies). Both walk the plan per call and decide per entry; a GPT-2 training forward
hands out about a hundred views, and that walk cost more host time than the program's launches.
`input_taker` and `assembler` return closures that do the same work with every decision that
does not depend on the call (which entry is what, view geometry, which views may skip the
dispatcher) made when they are built.

Invariant: a closure's results equal the reference functions' in every tensor's size, stride,
storage offset, dtype and storage; they differ only in how the tensors are made:
  * `private` outputs (a training forward's saved activations: only ember's backward reads
    them) that are views of a program output no other output shows are made with
    runtime.fast_views.reinterpret (no `_base`, own version counter). Nothing but the backward
    sees them, and no one writes through them or their base. So is a backward's gradient that
    is the one view of its program output (`gradients`). Any other view is `as_strided` as
    before: a user may see its `_base`, or write through an alias of it.
  * permuted inputs are read as memory by the program: reinterpret when the input has the
    strides it was compiled for, else `permute` (the runtime then copies it if needed).
"""
from __future__ import annotations

import copy
import operator
from typing import Callable, Sequence

import torch

from ..runtime.fast_views import reinterpret
from .output_layouts import replay


# constants handed out as they are (fx_prep.assemble copies the others per call)
_IMMUTABLE = (bool, int, float, complex, str, torch.dtype, torch.device, torch.layout,
              torch.memory_format)


_SHAPE = operator.attrgetter("shape")


def _static(xs) -> bool:
    return all(isinstance(x, int) for x in xs)


def permuted_geometry(prep) -> dict[int, tuple]:
    """For each input the program takes permuted (`prep.in_perms`) with static sizes, the size
    and strides it has in the program (its placeholder's value, or `prep.in_geometry` where the
    compiled graph is not kept: a build record's)."""
    if prep.in_geometry is not None:
        return prep.in_geometry
    placeholders = [n for n in prep.gm.graph.nodes if n.op == "placeholder"]
    geometry = {}
    for i in prep.in_perms:
        phys = placeholders[i].meta.get("val")      # the permuted (contiguous) value
        if isinstance(phys, torch.Tensor) and _static(phys.shape) and _static(phys.stride()):
            geometry[i] = (tuple(phys.shape), tuple(phys.stride()))
    return geometry


def input_taker(prep) -> Callable[[Sequence], list]:
    """`tensors -> fx_prep.compiled_inputs(prep, tensors)`."""
    folded = list(prep.folded)
    if not prep.in_perms:
        if folded:
            return lambda tensors: list(tensors) + folded
        return lambda tensors: tensors
    geometry = permuted_geometry(prep)
    fast = {}
    for i, perm in prep.in_perms.items():
        if i not in geometry:
            continue
        size, stride = geometry[i]
        logical_size = [0] * len(perm)
        logical_stride = [0] * len(perm)
        for k, p in enumerate(perm):
            logical_size[p], logical_stride[p] = size[k], stride[k]
        fast[i] = (torch.Size(logical_size), tuple(logical_stride), size, stride)
    perms = sorted(prep.in_perms.items())
    # the inputs with a known geometry, checked all at once (a ResNet-50 backward takes a
    # hundred channels-last saved activations): one list compare in the common case
    known = [i for i, _ in perms if i in fast]
    strides = [fast[i][1] for i in known]
    sizes = [fast[i][0] for i in known]
    physical = [(i, fast[i][2], fast[i][3]) for i in known]
    others = [(i, perm) for i, perm in perms if i not in fast]
    pick = operator.itemgetter(*known) if len(known) > 1 else None

    def take_each(ts):
        for i, perm in perms:
            t = ts[i]
            geometry = fast.get(i)
            if geometry is not None and t.stride() == geometry[1] and t.shape == geometry[0]:
                ts[i] = reinterpret(t, geometry[2], geometry[3], 0)
            else:
                ts[i] = t.permute(perm)

    def take(tensors):
        ts = list(tensors)
        if pick is None:
            take_each(ts)
            return ts + folded if folded else ts
        picked = pick(ts)
        if list(map(torch.Tensor.stride, picked)) != strides or \
                list(map(_SHAPE, picked)) != sizes:
            take_each(ts)
            return ts + folded if folded else ts
        for (i, size, stride), t in zip(physical, picked):
            ts[i] = reinterpret(t, size, stride, 0)
        for i, perm in others:
            ts[i] = ts[i].permute(perm)
        return ts + folded if folded else ts
    return take


def assembler(prep, private=(), gradients: bool = False) -> Callable[[Sequence, Sequence], object]:
    """`(compiled_outs, host_outs) -> fx_prep.assemble(prep, compiled_outs, host_outs)`.
    `private`: output positions only ember's own graphs read (see the module docstring).
    `gradients`: the graph is a backward, whose outputs autograd takes as gradients (never
    tracked themselves: AOTAutograd compiles no double backward); a view that is the only
    output made from its program output skips the dispatcher too: its base is unreachable
    once the call returns, so a `_base` and a shared version counter are all that differ."""
    private = frozenset(private or ())
    users: dict[int, set[int]] = {}
    for i, entry in enumerate(prep.plan):
        if entry[0] in ("compiled", "view"):
            users.setdefault(entry[1], set()).add(i)
    # per position: taken as is (compiled, host), a constant (filled in once), or made
    template: list = [None] * len(prep.plan)
    compiled, hosted, makers = [], [], []
    for i, entry in enumerate(prep.plan):
        kind, x = entry[0], entry[1]
        if kind == "compiled":
            compiled.append((i, x))
        elif kind == "host":
            hosted.append((i, x))
        elif kind == "const" and (x is None or type(x) in _IMMUTABLE):
            template[i] = x     # (a backward's None gradients: one per buffer)
        elif kind == "view" and entry[3] is not None:
            size, stride, offset = entry[3]
            steps = entry[2]
            if users[x] <= private or gradients and users[x] == {i}:
                def view(c, h, x=x, size=size, stride=stride, offset=offset, steps=steps):
                    t = c[x]
                    return (reinterpret(t, size, stride, offset) if t.is_contiguous()
                            else replay(t, steps))
            else:
                def view(c, h, x=x, size=size, stride=stride, offset=offset, steps=steps):
                    t = c[x]
                    return (t.as_strided(size, stride, t.storage_offset() + offset)
                            if t.is_contiguous() else replay(t, steps))
            makers.append((i, view))
        elif kind == "view":
            makers.append((i, lambda c, h, x=x, steps=entry[2]: replay(c[x], steps)))
        elif kind == "value":       # computed once, copied per call (fx_prep.assemble)
            makers.append((i, lambda c, h, x=x: x.clone()))
        else:
            makers.append((i, lambda c, h, x=x: copy.copy(x)))
    if prep.single:
        x = prep.plan[0][1]
        if compiled:
            return lambda c, h: c[x]
        if hosted:
            return lambda c, h: h[x]
        if makers:
            return makers[0][1]
        return lambda c, h, x=x: x

    def assemble(c, h):
        out = template.copy()
        for i, x in compiled:
            out[i] = c[x]
        for i, x in hosted:
            out[i] = h[x]
        for i, make in makers:
            out[i] = make(c, h)
        return out
    return assemble
