"""Questions about single ops that every pass asks, answered once: an op's name, a
`linalg.generic`'s iterator types and whether it reduces, which ops are views, a value's
element type name and static shape, an op's indexing maps / reassociation / integer-array
attributes, the (source, result) dim pairs of an extract_slice, and the `arith.cmpf` /
`arith.cmpi` predicate names by number.

Ops may be given as `ir.Operation` or OpView.
"""
import contextlib
from typing import Optional

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


# The attribute's text -> its loops' kinds: printing the whole array once is cheaper than
# wrapping and printing each element (ember-fuse asks for every candidate kernel).
_ITERATORS_OF: dict[str, tuple[str, ...]] = {}
# Within `attribute_memo`: the attribute itself -> its loops' kinds. Printing it costs ~13 us,
# hashing it ~1 us (resnet18's training graphs: ~37k questions, a sixth of ember-fuse).
_ITERATORS_BY_ATTR: dict | None = None


@contextlib.contextmanager
def attribute_memo():
    """Within, `iterator_types` is memoized by the attribute object (its uniqued storage, equal
    for equal attributes): valid while one MLIR context lives, as during one pass (base.Pass
    runs every pass inside it). Outside, a new context could reuse a freed attribute's
    address, so the memo is dropped on exit."""
    global _ITERATORS_BY_ATTR
    outer = _ITERATORS_BY_ATTR
    if outer is None:
        _ITERATORS_BY_ATTR = {}
    try:
        yield
    finally:
        if outer is None:
            _ITERATORS_BY_ATTR = None


def iterator_types(op) -> list[str]:
    """'parallel' / 'reduction' per loop of a `linalg.generic` ([] for other ops)."""
    if op_name(op) != "linalg.generic":
        return []
    attr = op.attributes["iterator_types"]
    memo = _ITERATORS_BY_ATTR
    if memo is not None:
        kinds = memo.get(attr)
        if kinds is None:
            kinds = memo[attr] = _iterator_kinds(attr)
        return list(kinds)
    return list(_iterator_kinds(attr))


def _iterator_kinds(attr) -> tuple[str, ...]:
    text = str(attr)
    kinds = _ITERATORS_OF.get(text)
    if kinds is None:
        kinds = _ITERATORS_OF[text] = tuple(_ITERATOR[str(a)] for a in ir.ArrayAttr(attr))
    return kinds


def is_reduction(op) -> bool:
    """A `linalg.generic` with a reduction loop."""
    return "reduction" in iterator_types(op)


def is_view(op) -> bool:
    return op_name(op) in VIEW_OPS


CMPF = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult",
        "ule", "une", "uno", "true"]
CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]


def type_name(t: ir.Type) -> str:
    """'f32', 'bf16', 'i1', 'i64', 'index', ... (the element type if `t` is a tensor)."""
    if isinstance(t, ir.ShapedType):
        t = ir.RankedTensorType(t).element_type
    return str(t)


def int_array(attr) -> list[int]:
    if attr is None:
        return []
    try:
        return list(ir.DenseI64ArrayAttr(attr))
    except (ValueError, TypeError):
        return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attr)]


def reassociation(op) -> list[list[int]]:
    return [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)]
            for g in ir.ArrayAttr(op.attributes["reassociation"])]


def indexing_maps(op) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def shape(v: ir.Value) -> list[Optional[int]]:
    t = ir.RankedTensorType(v.type)
    return [None if t.is_dynamic_dim(i) else t.get_dim_size(i) for i in range(t.rank)]


def slice_dims(op) -> list[tuple[int, int]]:
    """(source dim, result dim) pairs of an extract_slice (rank-reducing drops unit sizes)."""
    res = op.results[0]
    sizes = int_array(op.attributes["static_sizes"])
    rr = len(shape(res))
    pairs, r = [], 0
    for s, n in enumerate(sizes):
        if r < rr and (len(sizes) == rr or n != 1 or shape(res)[r] == 1 and len(sizes) - s <= rr - r):
            pairs.append((s, r))
            r += 1
    return pairs
