"""`aten._foreach_*` ops (what optimizers such as AdamW and SGD run on CUDA, `foreach=True`)
decomposed into one ordinary ATen op per tensor, so that an optimizer step compiles into fused
kernels instead of falling back to eager op by op.

`_foreach_op(lists..., scalars...)[i] == op(lists[i]..., scalars...)`: every `Tensor[]` or
`Scalar[]` argument is indexed by the list position, every other argument is passed to each
call as it is. The few forms with no single-op equivalent (`addcdiv`/`addcmul` with a tensor of
scalars, `powsum`) are left alone (NotImplemented), and then run as eager library ops.
"""
from __future__ import annotations

import torch

# foreach name -> (base op name, index of a positional argument the base op takes by keyword)
_RENAMED = {"norm": ("linalg_vector_norm", None), "addcdiv": ("addcdiv", 3),
            "addcmul": ("addcmul", 3)}
_SKIP = {"powsum"}


def _is_list(ty) -> bool:
    return isinstance(ty, torch.ListType)


def _decomposition(overload: torch._ops.OpOverload, base, kw_at: int | None):
    schema = overload._schema
    listed = [_is_list(a.type) for a in schema.arguments if not a.kwarg_only]
    kw_listed = {a.name: _is_list(a.type) for a in schema.arguments if a.kwarg_only}
    kw_name = None
    if kw_at is not None:
        arg = [a for a in schema.arguments if not a.kwarg_only][kw_at]
        if arg.type.kind() == "TensorType":        # addcdiv.Tensor: a tensor of scalars
            return None
        kw_name = "value"

    def run(*args, **kwargs):
        n = next(len(a) for a, is_list in zip(args, listed) if is_list)
        out = []
        for i in range(n):
            pos = [a[i] if is_list else a for a, is_list in zip(args, listed)]
            kw = {k: (v[i] if kw_listed.get(k) else v) for k, v in kwargs.items()}
            if kw_name is not None and len(pos) > kw_at:
                kw[kw_name] = pos.pop(kw_at)
            out.append(base(*pos, **kw))
        return out
    return run


def foreach_decompositions() -> dict:
    """{_foreach overload: decomposition} for every functional `_foreach_*` op torch has."""
    aten = torch.ops.aten
    table = {}
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name
        if not name.startswith("aten::_foreach_") or name.endswith("_"):
            continue
        short = name[len("aten::_foreach_"):]
        if short in _SKIP or "out" in schema.overload_name:
            continue
        base_name, kw_at = _RENAMED.get(short, (short, None))
        packet = getattr(aten, "_foreach_" + short, None)
        base = getattr(aten, base_name, None)
        if packet is None or base is None:
            continue
        overload = getattr(packet, schema.overload_name or "default", None)
        if overload is None:
            continue
        fn = _decomposition(overload, base, kw_at)
        if fn is not None:
            table[overload] = fn
    return table
