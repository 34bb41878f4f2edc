"""Decomposed ops keep eager's output layout.

A decomposition computes an op from other ops, and the layout (strides) of its result is
whatever the last of them gives: `fmax(a, b)` as `where(a >= b | isnan(b), a, b)` or float
floor division as a chain of `where`s take the layout of the condition, and TensorIterator
orders a condition's dims by its own operands, not by the op's. eager's `fmax` of a permuted
and a contiguous tensor is laid out as the first; the decomposed one was laid out as the
second (fuzz seed 22 indices 639, 724). A user sees an output's strides, so they must be
eager's (frontend/output_layouts.py hands out what the graph's values say).

Invariant: `keep_layout(op, decomposition)` returns tensors whose observable strides (dims of
size > 1) are those eager's `op` gives on the same arguments, where that is a permutation of a
dense layout (TensorIterator's results always are): eager's op runs once on small CPU tensors
laid out like the arguments (sizes clamped to 2, every comparison of two strides kept; meta
kernels are not eager's: floor_divide's meta result is laid out as its second operand, eager's
as its first), in a thread of its own outside the tracing modes, cached; a result laid out
otherwise is permuted, made contiguous and permuted back (one copy, which the fusion pass
folds into the producing kernel). Arguments all contiguous with contiguous results need no
check; symbolic sizes are not checked.
"""
from __future__ import annotations

import threading

import torch
from torch.fx.node import map_aggregate

from .eager_rejects import outside_tracing
from .output_layouts import dense_permutation

_PERMS: dict[tuple, list | None] = {}
_LOCK = threading.Lock()


class _Skip(Exception):
    pass


def _static(xs) -> tuple:
    if any(not isinstance(x, int) for x in xs):
        raise _Skip
    return tuple(xs)


def _observable(shape, stride) -> tuple:
    if 0 in shape:
        return ()
    return tuple(s if n > 1 else None for s, n in zip(stride, shape))


def _tensors(tree) -> list:
    found = []
    map_aggregate(tree, lambda a: found.append(a) if isinstance(a, torch.Tensor) else a)
    return found


class _Probe:
    """A tensor argument, made in the probe's thread: sizes clamped (1 and 0 kept), strides in
    the argument's own stride order, so that TensorIterator orders the dims as it would for
    the argument itself. TensorIterator compares every dim's stride, a size-1 dim's too (equal
    strides: the smaller size goes inner), so the probe keeps each comparison of the
    argument's nonzero strides, ties included: a size-1 dim whose stride equals another dim's
    keeps it equal, one between two dims' strides stays between (fuzz seed 27 index 906: an
    expanded (2, 3, 2, 1) int8 with strides (0, 1, 0, 1) probed as (0, 1, 0, 2) made eager's
    conversion channels-last, where the argument itself gives a contiguous result). Zero
    strides (broadcasts) stay zero; dims of size > 1 are dense in their order (sizes clamped
    to 2, more where size-1 strides must fit between), with a gap where the argument has one."""
    __slots__ = ("shape", "stride", "dtype", "full")

    def __init__(self, t: torch.Tensor, at_least: tuple = ()):
        """`at_least`: per dim, a size the probe's dim takes at least (a broadcast dim: every
        argument's must agree; `_broadcast_sizes`), 0 for none."""
        shape, stride = _static(t.shape), _static(t.stride())
        self.full = shape
        if 0 in shape or any(s < 0 for s in stride):
            raise _Skip                        # an empty result has no layout to see
        moving = [d for d in range(len(shape)) if shape[d] > 1 and stride[d] != 0]
        if len({stride[d] for d in moving}) != len(moving):
            raise _Skip                        # overlapping dims: no order to keep
        mover = {stride[d]: d for d in moving}
        values = sorted({s for s in stride if s != 0})
        new_of: dict[int, int] = {}
        # size-1 strides below the innermost moving dim's: 1, 2, ...; that dim after them
        below = [v for v in values if not moving or v < min(mover)]
        for j, v in enumerate(below):
            new_of[v] = 1 + j
        # a gap (no dim of stride 1, a dim's stride past the extent of those inside it) stays
        # a gap: whether the argument is dense decides how eager copies it (`.to`, a cast to
        # the common dtype keep a dense layout, and lay out anything else afresh)
        step = 1 + len(below) + (1 if moving and not below and min(mover) != 1 else 0)
        sizes = list(shape)
        for i, m in enumerate(sorted(mover)):
            d = mover[m]
            nxt = min((w for w in mover if w > m), default=None)
            between = [v for v in values if v > m and (nxt is None or v < nxt)]
            new_of[m] = step
            if nxt is None:
                sizes[d] = max(min(shape[d], 2), at_least[d] if at_least else 0)
                for j, v in enumerate(between):     # past the extent: any larger stride
                    new_of[v] = step * sizes[d] + j
            else:
                # room for the size-1 strides strictly between this dim's and the next's
                sizes[d] = max(min(shape[d], 2), len(between) + 2,
                               at_least[d] if at_least else 0)
                for j, v in enumerate(between):
                    new_of[v] = step * (j + 2)
            gap = nxt is not None and nxt > m * shape[d]
            step = step * sizes[d] + (1 if gap else 0)
        for d in range(len(shape)):             # a broadcast dim of size > 1: any size
            if stride[d] == 0 and shape[d] > 1:
                sizes[d] = max(2, at_least[d] if at_least else 0)
        self.shape = tuple(sizes)
        self.stride = tuple(new_of[s] if s != 0 else 0 for s in stride)
        self.dtype = t.dtype

    def key(self) -> tuple:
        return (self.shape, self.stride, self.dtype)

    def make(self) -> torch.Tensor:
        numel = 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride))
        return torch.ones(numel, dtype=self.dtype).as_strided(self.shape, self.stride)


def _broadcast_sizes(tensors: list) -> dict:
    """{id(tensor): the sizes its probe takes at least}: a broadcasting op's probes agree in
    every dim (aligned from the right) where the arguments' sizes are > 1. Each probe sizes its
    dims for its own strides (an expanded (5, 3, 3) with strides (0, 1, 0) kept its broadcast
    sizes, a permuted (1, 5, 3, 3) became (1, 2, 2, 2)), and eager refused stand-ins that do
    not broadcast: the layout went unchecked (fuzz seed 30 index 410)."""
    probes = []
    for t in tensors:
        if t.layout != torch.strided or t.is_quantized:
            raise _Skip
        probes.append(_Probe(t))
    if not probes:
        return {}
    rank = max(len(p.shape) for p in probes)
    need = [0] * rank
    for p in probes:
        off = rank - len(p.shape)
        for d, (n, full) in enumerate(zip(p.shape, p.full)):
            if full > 1:
                need[off + d] = max(need[off + d], n)
    return {id(t): tuple(need[rank - len(p.shape):]) for t, p in zip(tensors, probes)}


def _eager_perms(op, args, kwargs) -> list | None:
    """[the dim order (outermost first) of each tensor result] of eager's `op` on small CPU
    tensors laid out like the arguments; None if that cannot be told."""
    key: list = [id(op)]
    at_least: dict = {}

    def spec(a):
        if isinstance(a, torch.Tensor):
            if a.layout != torch.strided or a.is_quantized:
                raise _Skip
            p = _Probe(a, at_least.get(id(a), ()))
            key.append(p.key())
            return p
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise _Skip
        if isinstance(a, torch.device):
            return torch.device("cpu")
        key.append((type(a), a) if isinstance(a, (int, float, bool, str, type(None)))
                   else repr(a))
        return a

    try:
        if isinstance(op, torch._ops.OpOverload) and torch.Tag.pointwise in op.tags \
                or op in _FOLLOWING:    # (a cat's pieces agree in every dim but the cat dim)
            at_least = _broadcast_sizes(_tensors((args, kwargs)))
        pargs = map_aggregate(args, spec)
        pkwargs = map_aggregate(dict(kwargs), spec)
    except _Skip:
        return None
    key = tuple(key)
    with _LOCK:
        if key in _PERMS:
            return _PERMS[key]

    def run():
        def make(a):
            return a.make() if isinstance(a, _Probe) else a
        out = op(*map_aggregate(pargs, make), **map_aggregate(pkwargs, make))
        return [_dim_order(t) for t in _tensors(out)]
    try:
        perms = outside_tracing(run)
    except Exception:  # noqa: BLE001 - eager refuses the probe: not checked
        perms = None
    with _LOCK:
        _PERMS[key] = perms
    return perms


def _dim_order(t: torch.Tensor) -> tuple | None:
    """The dim order (outermost first) of a dense result, size-1 dims placed by their strides
    too (`is_contiguous` ignores them: eager's (2, 1, 1) with strides (1, 1, 2) is dim order
    (2, 0, 1), which a later broadcasting op's layout follows); a size-1 dim whose stride ties
    with a larger dim's sits inside it. None when `t` is not a permutation of a dense layout."""
    stride = t.stride()
    perm = tuple(sorted(range(t.dim()), key=lambda d: (-stride[d], t.shape[d] == 1, d)))
    return perm if t.permute(perm).is_contiguous() else dense_permutation(t)


def _relayout(t: torch.Tensor, perm) -> torch.Tensor:
    if list(perm) == list(range(t.dim())):
        return t.contiguous()
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return t.permute(perm).contiguous().permute(inverse)


def _strides_of(shape, perm) -> tuple:
    """Strides of a dense tensor of `shape` laid out in dim order `perm`."""
    stride = [0] * len(shape)
    step = 1
    for d in reversed(perm):
        stride[d] = step
        step *= shape[d]
    return tuple(stride)


def keep_layout(op, decomposition):
    """`decomposition` of `op`, its tensor results laid out as `op`'s own."""
    if not isinstance(op, torch._ops.OpOverload) or op._schema.is_mutable or any(
            r.alias_info is not None for r in op._schema.returns):
        return decomposition

    def run(*args, **kwargs):
        out = decomposition(*args, **kwargs)
        if out is NotImplemented:
            return out
        results = _tensors(out)
        if not results or all(_is_contiguous(t) for t in _tensors((args, kwargs)) + results):
            return out
        want = _eager_perms(op, args, kwargs)
        if want is None or len(want) != len(results):
            return out
        fixed = {}
        for t, perm in zip(results, want):
            try:
                shape, stride = _static(t.shape), _static(t.stride())
            except _Skip:
                continue
            if perm is None or len(perm) != len(shape):
                continue
            if _observable(shape, stride) != _observable(shape, _strides_of(shape, perm)):
                fixed[id(t)] = _relayout(t, perm)
        if not fixed:
            return out
        return map_aggregate(out, lambda a: fixed.get(id(a), a)
                             if isinstance(a, torch.Tensor) else a)
    run.__wrapped__ = decomposition
    run.__name__ = getattr(decomposition, "__name__", "decomposition")
    return run


def _is_plain(t: torch.Tensor) -> bool:
    """Contiguous, the strides of size-1 dims too (those decide a later op's layout)."""
    if not _is_contiguous(t):
        return False
    try:
        shape, stride = _static(t.shape), _static(t.stride())
    except _Skip:
        return True
    return 0 in shape or stride == _strides_of(shape, tuple(range(len(shape))))


def _is_contiguous(t: torch.Tensor) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return statically_known_true(t.is_contiguous())


def _pointwise_node(node) -> bool:
    op = getattr(node, "target", None)
    return node.op == "call_function" and isinstance(op, torch._ops.OpOverload) and \
        torch.Tag.pointwise in op.tags and not op._schema.is_mutable and \
        not any(r.alias_info is not None for r in op._schema.returns)


# Non-pointwise ops whose result's layout follows their operands' as eager lays them out:
# `cat` suggests a memory format from its inputs' strides, size-1 dims' included (a uint8
# comparison of a permuted (1, 5, 1, 5) is (5, 1, 25, 5) in eager and (25, 1, 25, 5) in the
# graph, where Dynamo traced with symbolic sizes: the cat of two was channels-last in the
# graph, contiguous in eager; fuzz seed 61 index 1236).
_FOLLOWING = (torch.ops.aten.cat.default,)


def _layout_node(node) -> bool:
    """Whether EagerLayouts probes `node`: a pointwise op or one of _FOLLOWING."""
    return _pointwise_node(node) or (node.op == "call_function" and node.target in _FOLLOWING)


class EagerLayouts:
    """`layouts(node)`, for an FX node computing a pointwise op: a meta tensor laid out as
    eager's op lays out its result, when the graph's value (the fake tensor's meta kernel or
    PrimTorch reference) has another observable layout; None when they agree or it cannot be
    told. The fake kernels break TensorIterator's ties otherwise: `a + b` of an expanded
    (5, 3, 3) f16 and a permuted (1, 5, 3, 3) with strides (15, 1, 5, 15) is contiguous in the
    graph, laid out as the second operand by eager (fuzz seed 30 index 410; f32 takes the fake
    fast path, which agrees).

    The operands are eager's too: a pointwise operand is probed first (memoised, over the
    chain of pointwise producers), and its eager strides, those of size-1 dims included, stand
    in for the graph's. A difference no one sees decides a later op's layout: fake `x >= 2.5` of
    a (2, 1, 1) int8 with strides (1, 1, 2) is (1, 1, 1) where eager's keeps (1, 1, 2), so a
    `where` broadcasting it to (2, 2, 1) was contiguous in the graph and (1, 2, 4) in eager, as
    the `|` after it (fuzz seed 43 index 377)."""

    def __init__(self):
        self._memo: dict = {}

    def __call__(self, node) -> torch.Tensor | None:
        if not _layout_node(node) or node.meta.get("ember_saved_channels_last"):
            return None     # a saved activation handed over channels-last (saved_layouts.py)
        val = node.meta.get("val")
        eager = self.value(node)
        if eager is val or not isinstance(val, torch.Tensor):
            return None
        try:
            shape, stride = _static(val.shape), _static(val.stride())
        except _Skip:
            return None
        if _observable(shape, stride) == _observable(shape, _static(eager.stride())):
            return None
        return eager

    def value(self, node):
        """The node's value laid out as eager's (its graph value where they agree or it cannot
        be told). Iterative over the pointwise producers: a chain may be thousands long."""
        stack = [node]
        while stack:
            n = stack[-1]
            if n in self._memo:
                stack.pop()
                continue
            if not _layout_node(n):
                self._memo[n] = n.meta.get("val")
                stack.pop()
                continue
            todo = [a for a in n.all_input_nodes if a not in self._memo]
            if todo:
                stack.extend(todo)
                continue
            self._memo[n] = self._probe(n)
            stack.pop()
        return self._memo[node]

    def _probe(self, node):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return val
        args, kwargs = torch.fx.node.map_arg((node.args, dict(node.kwargs)),
                                             lambda n: self._memo.get(n, n.meta.get("val")))
        inputs = _tensors((args, kwargs))
        if not inputs or all(_is_plain(t) for t in inputs):
            return val
        want = _eager_perms(node.target, args, kwargs)
        if want is None or len(want) != 1 or want[0] is None:
            return val
        try:
            shape, stride = _static(val.shape), _static(val.stride())
        except _Skip:
            return val
        perm = want[0]
        if len(perm) != len(shape) or stride == _strides_of(shape, perm):
            return val
        return torch.empty_strided(shape, _strides_of(shape, perm), dtype=val.dtype,
                                   device="meta")


def eager_layout(node) -> torch.Tensor | None:
    """`EagerLayouts()(node)`: one node, nothing memoised across calls."""
    return EagerLayouts()(node)
