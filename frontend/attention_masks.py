"""Attention masks that hide nothing are dropped before tracing (a Dynamo-graph rewrite).

Invariant established: no `scaled_dot_product_attention` call in the graph has an `attn_mask`
that is computed from constants alone (no graph input, parameter or buffer) and lets every query
see every key. Such a mask is passed as None instead.

Why: libraries build the "everything visible" mask when they are traced, because they cannot
look at the padding mask's values then; run eagerly they look and pass None. transformers' BERT
does this: under torch.compile it builds where(arange(S) >= 0, 0, -inf) expanded to (B,1,S,S).
With that mask attention takes a different kernel (a stride-0 mask rules out the fused kernels,
so AOTAutograd traces the unfused math in f32) than eager's, which sees None: another result in
bf16 (a quarter of BERT's first-layer outputs differ by an ulp, ~1e-2 at the output) and a
slower program. Adding an all-zero bias changes no score, so dropping it is exact.
"""
from __future__ import annotations

import logging

import torch
import torch.fx as fx
import torch.nn.functional as F

log = logging.getLogger(__name__)

_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention,
         torch.ops.aten.scaled_dot_product_attention.default}
_MASK_POSITION = 3                  # scaled_dot_product_attention(query, key, value, attn_mask)
_MAX_ELEMENTS = 1 << 26             # larger constant masks are left alone (evaluating costs)
_IMPURE = ("rand", "dropout", "bernoulli", "normal", "empty", "uniform", "exponential", "seed")


def _name(target) -> str:
    return getattr(target, "__name__", None) or str(target)


def _pure(node: fx.Node) -> bool:
    if node.op == "call_method":
        name = str(node.target)
    elif node.op == "call_function":
        name = _name(node.target)
    else:
        return False
    return not name.endswith("_") and not any(word in name for word in _IMPURE)


def _evaluate(node: fx.Node, memo: dict):
    """The value of `node` when it depends on no graph input (computed here, once), else None."""
    if node in memo:
        return memo[node]
    memo[node] = None
    if not _pure(node):
        return None
    ok = True

    def value(a):
        nonlocal ok
        if isinstance(a, fx.Node):
            v = _evaluate(a, memo)
            if v is None:
                ok = False
            return v
        return a

    args = fx.node.map_aggregate(node.args, value)
    kwargs = fx.node.map_aggregate(node.kwargs, value)
    if not ok:
        return None
    try:
        if node.op == "call_method":
            result = getattr(args[0], node.target)(*args[1:], **kwargs)
        else:
            result = node.target(*args, **kwargs)
    except Exception:                 # anything unusual: not a constant we understand
        return None
    if isinstance(result, torch.Tensor) and result.numel() > _MAX_ELEMENTS:
        return None
    memo[node] = result
    return result


def _hides_nothing(mask) -> bool:
    if not isinstance(mask, torch.Tensor):
        return False
    if mask.dtype == torch.bool:
        return bool(mask.all())
    return bool((mask == 0).all())


def drop_visible_attention_masks(gm: fx.GraphModule) -> int:
    """Rewrites `gm` in place; returns how many masks were dropped."""
    memo: dict = {}
    dropped = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SDPA:
            continue
        if "attn_mask" in node.kwargs:
            mask = node.kwargs["attn_mask"]
        elif len(node.args) > _MASK_POSITION:
            mask = node.args[_MASK_POSITION]
        else:
            continue
        if not isinstance(mask, fx.Node) or not _hides_nothing(_evaluate(mask, memo)):
            continue
        if "attn_mask" in node.kwargs:
            node.kwargs = {**node.kwargs, "attn_mask": None}
        else:
            args = list(node.args)
            args[_MASK_POSITION] = None
            node.args = tuple(args)
        dropped += 1
    if dropped:
        # erase the mask computations nothing reads now (only those evaluated here: pure ops)
        for node in reversed(list(gm.graph.nodes)):
            if node in memo and memo[node] is not None and not node.users:
                gm.graph.erase_node(node)
        gm.recompile()
        log.debug("ember: dropped %d attention mask(s) that hide nothing", dropped)
    return dropped

