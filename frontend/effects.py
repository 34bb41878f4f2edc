"""Effect tokens (`with_effects`): linear algebra's error checks as eager does them.

AOTAutograd functionalizes ops with side effects into `with_effects(token, op, *args)`, with a
token placeholder in front of the graph's inputs and a token in front of its outputs; at run
time it passes `None` for each input token and drops the output ones. The only such op in
ATen graphs is `_linalg_check_errors(info, api_name, is_matrix=)` after the `*_ex` linear
algebra ops (cholesky, inv, solve, lu_factor, ldl_factor): eager raises `LinAlgError` from it
when `info` is not zero.

Invariant of `lower_effect_tokens`: the returned graph has no `with_effects` node and no token
placeholder; each check's arguments become extra graph outputs, and the returned wrapper takes
the original calling convention (tokens included), runs the graph, runs each check on the
host in program order (raising eager's error), and returns the original outputs (tokens as
None). A graph with an effect other than these checks is returned unchanged (it then runs
eagerly, as before).
"""
from __future__ import annotations

import contextlib
import operator
from typing import Callable

import torch
import torch.fx as fx

_CHECKS = (torch.ops.aten._linalg_check_errors.default,)


@contextlib.contextmanager
def effectful_checks():
    """The checks registered as effectful ops while ember traces a graph, where this torch
    does not register them itself (torch 2.13 does; 2.11, the GPU machine's, does not): an
    unregistered `_linalg_check_errors` returns nothing, so AOTAutograd's dead-code elimination
    dropped it and a compiled cholesky of a matrix that is not positive-definite returned
    NaNs where eager raises. Registered only for ember's own trace (deregistered after), so
    that other backends see torch as it is."""
    try:
        from torch._higher_order_ops import effects as hop_effects
        get, register = hop_effects._get_effect, hop_effects._register_effectful_op
        ordered = hop_effects._EffectType.ORDERED
    except (ImportError, AttributeError):      # a torch without effect tokens: nothing to do
        yield
        return
    handles = []
    for op in _CHECKS:
        try:
            if get(op) is None:
                handles.append(register(op._schema.name, ordered))
        except Exception:  # noqa: BLE001 - a registry this code does not know: leave it
            pass
    try:
        yield
    finally:
        for h in handles:
            h.destroy()


class _Out:
    """A check's argument that the graph returns as its output number `index`."""

    def __init__(self, index: int):
        self.index = index


def _with_effects_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    hop = getattr(torch.ops.higher_order, "with_effects", None)
    return [n for n in gm.graph.nodes if n.op == "call_function" and hop is not None
            and n.target is hop]


def lower_effect_tokens(gm: fx.GraphModule) -> tuple[fx.GraphModule, Callable | None]:
    """(graph, wrap): `wrap(fn)` gives the caller of the graph with the original calling
    convention; `wrap` is None when the graph has no effect to lower (nothing changed)."""
    effects = _with_effects_nodes(gm)
    if not effects or any(n.args[1] not in _CHECKS for n in effects):
        return gm, None
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    def chained(t):     # the token a previous check returned
        return t.target is operator.getitem and t.args[0] in effects
    if not all(n.args[0] in placeholders or chained(n.args[0]) for n in effects):
        return gm, None     # a token made inside the graph: not AOTAutograd's convention
    tokens = {n.args[0] for n in effects if n.args[0] in placeholders}
    for n in effects:
        for user in n.users:    # a token goes only to the next check or out of the graph
            if user.target is not operator.getitem or user.args[1] != 0 or any(
                    u.op != "output" and (u not in effects or u.args[0] is not user)
                    for u in user.users):
                return gm, None
    for t in tokens:
        if any(u.op != "output" and u not in effects for u in t.users):
            return gm, None
    token_pos = [i for i, p in enumerate(placeholders) if p in tokens]
    output = graph.output_node()
    outs = list(output.args[0])
    # token outputs: the first result of a with_effects node (the checks return nothing else)
    token_outs = set()
    for i, o in enumerate(outs):
        if isinstance(o, fx.Node) and (o in tokens or (
                o.target is operator.getitem and o.args[0] in effects)):
            token_outs.add(i)
    checks = []     # (op, args with graph outputs as _Out(k), kwargs)
    extra: list[fx.Node] = []

    def as_ref(a):
        if isinstance(a, fx.Node):
            extra.append(a)
            return _Out(len(outs) - len(token_outs) + len(extra) - 1)
        return a
    for n in effects:
        op, args = n.args[1], n.args[2:]
        checks.append((op, [as_ref(a) for a in args],
                       {k: as_ref(v) for k, v in n.kwargs.items()}))
    kept = [o for i, o in enumerate(outs) if i not in token_outs]
    output.args = (tuple(kept + extra),)
    for n in reversed(effects):
        for user in list(n.users):
            graph.erase_node(user)
        graph.erase_node(n)
    for t in tokens:
        graph.erase_node(t)
    graph.lint()
    gm.recompile()
    n_out = len(kept)

    def wrap(fn: Callable) -> Callable:
        def call(*args):
            inputs = [a for i, a in enumerate(args) if i not in token_pos]
            results = list(fn(*inputs))
            for op, cargs, ckwargs in checks:
                def get(a):
                    return results[a.index] if isinstance(a, _Out) else a
                op(*[get(a) for a in cargs], **{k: get(v) for k, v in ckwargs.items()})
            kept_iter = iter(results[:n_out])
            return [None if i in token_outs else next(kept_iter) for i in range(len(outs))]
        return call
    return gm, wrap
