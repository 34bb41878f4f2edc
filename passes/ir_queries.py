"""Questions about single ops that every pass asks, answered once: an op's name, a
`linalg.generic`'s iterator types and whether it reduces, and which ops are views.

Ops may be given as `ir.Operation` or OpView.
"""
from torch_mlir import ir

# Views of a contiguous value: no data moves (the same set for fusion, outlining and lowering).
VIEW_OPS = frozenset({"tensor.expand_shape", "tensor.collapse_shape", "tensor.cast"})
# On the host, with dynamic shapes, a `tensor.reshape` (sizes computed on the host) is a view too.
HOST_VIEW_OPS = VIEW_OPS | {"tensor.reshape"}

_ITERATOR = {"#linalg.iterator_type<parallel>": "parallel",
             "#linalg.iterator_type<reduction>": "reduction",
             "#linalg.iterator_type<window>": "window"}


def op_name(op) -> str:
    return op.operation.name


def iterator_types(op) -> list[str]:
    """'parallel' / 'reduction' per loop of a `linalg.generic` ([] for other ops)."""
    if op_name(op) != "linalg.generic":
        return []
    return [_ITERATOR[str(a)] for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def is_reduction(op) -> bool:
    """A `linalg.generic` with a reduction loop."""
    return "reduction" in iterator_types(op)


def is_view(op) -> bool:
    return op_name(op) in VIEW_OPS
