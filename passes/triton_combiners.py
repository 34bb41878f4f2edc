"""Reduction combiners of the Triton lowering: for each `arith` combining op of a reduction body
(reduction_body.combiner's kind), the `tl` reduction, the identity that masked lanes hold, and
the elementwise combine of a looped accumulator; unsigned kinds reduce zero-extended values.
`is_identity` decides on the kernel_ir node whether an initial value changes nothing.
"""
from __future__ import annotations

import math

from .kernel_ir import Const

# Reduction combiners: (tl reduction, identity for masked lanes (by float/int), elementwise)
COMBINE = {
    "addf": ("tl.sum", "0.0", "{a} + {b}"), "addi": ("tl.sum", "0", "{a} + {b}"),
    # maximumf/minimumf propagate NaN (amax, max.values): tl.max/tl.min do not, a reduce
    # with the prelude's branch-free combiner does (as Inductor's max2).
    "maximumf": ("_ember_nanmax_reduce", 'float("-inf")', "_ember_nanmax({a}, {b})"),
    "maxnumf": ("tl.max", 'float("-inf")', "tl.maximum({a}, {b})"),
    "minimumf": ("_ember_nanmin_reduce", 'float("inf")', "_ember_nanmin({a}, {b})"),
    "minnumf": ("tl.min", 'float("inf")', "tl.minimum({a}, {b})"),
    "maxsi": ("tl.max", "-(2**62)", "tl.maximum({a}, {b})"),
    "minsi": ("tl.min", "2**62", "tl.minimum({a}, {b})"),
    "ori": ("tl.max", "0", "{a} | {b}"), "andi": ("tl.min", "1", "{a} & {b}"),
    "mulf": ("_ember_prod_reduce", "1.0", "{a} * {b}"),
    "muli": ("_ember_prod_reduce", "1", "{a} * {b}"),
    # unsigned (uint8 amax/amin): reduced over the values zero-extended to a wider type
    # (UNSIGNED_WIDE), the identity in that type, the result truncated back
    "maxui": ("tl.max", "0", "tl.maximum({a}, {b})"),
    "minui": ("tl.min", None, "tl.minimum({a}, {b})"),
}
# signless type -> (the wider Triton type its unsigned values fit in, the mask that
# zero-extends; also the largest unsigned value, minui's identity)
_INT_WIDTH = {"i8": 8, "i16": 16, "i32": 32}
UNSIGNED_WIDE = {"i8": ("tl.int32", 0xFF), "i16": ("tl.int32", 0xFFFF),
                  "i32": ("tl.int64", 0xFFFFFFFF)}


def identity(kind: str, ty: str) -> str:
    """The identity of combiner `kind` for masked lanes, in type `ty`: an integer max/min's is
    the type's own extreme (2**62 does not fit an int32: the interpreter refuses it; nor is it
    int64's: fuzz seed 22), an
    unsigned one's that of the zero-extended values (UNSIGNED_WIDE)."""
    if kind in ("maxui", "minui"):
        return str(UNSIGNED_WIDE[ty][1] if kind == "minui" else 0)
    if kind in ("maxsi", "minsi") and ty in _INT_WIDTH:
        w = _INT_WIDTH[ty]
        return f"-(2**{w - 1})" if kind == "maxsi" else f"(2**{w - 1} - 1)"
    if kind in ("maxsi", "minsi") and ty == "i64":
        # int64's extremes (2**62 is no identity: amax of a row of INT64_MIN gave -2**62);
        # -2**63 spelled so that no literal leaves int64 (2**63 alone would be a uint64)
        return "(-9223372036854775807 - 1)" if kind == "maxsi" else "9223372036854775807"
    return COMBINE[kind][1]


def identity_value(kind: str, ty: str):
    """The value `identity(kind, ty)` spells."""
    if kind in ("maxui", "minui"):
        return UNSIGNED_WIDE[ty][1] if kind == "minui" else 0
    if kind in ("maxsi", "minsi"):
        top = 2 ** (_INT_WIDTH[ty] - 1) if ty in _INT_WIDTH else 2 ** 62
        return -top if kind == "maxsi" else top - (ty in _INT_WIDTH)
    return {"addf": 0.0, "addi": 0, "maximumf": -math.inf, "maxnumf": -math.inf,
            "minimumf": math.inf, "minnumf": math.inf, "ori": 0, "andi": 1,
            "mulf": 1.0, "muli": 1}[kind]


def is_identity(n, kind: str, ty: str) -> bool:
    """Whether node `n` is the constant identity of combiner `kind` in type `ty` (combining
    an accumulator with it changes nothing)."""
    if not isinstance(n, Const):
        return False
    value = identity_value(kind, ty)
    if isinstance(value, float):
        return n.dtype not in ("i1",) and isinstance(n.value, float) and \
            n.value == value and math.copysign(1, n.value) == math.copysign(1, value)
    return not isinstance(n.value, float) and int(n.value) == value
