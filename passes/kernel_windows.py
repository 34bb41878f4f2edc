"""Which reductions are small windows over strided elements (a pooling window over a
channels-last tensor), shared by the Triton and C++ lowerings: both write them with the window
innermost and unrolled and the outputs' contiguous axis vectorized (triton_blocks'
`window_rnumel`, cpp_emitter's column blocks). Nothing here builds code.
"""
from __future__ import annotations

from typing import Optional


def window_extent(sched, limit: int, sliding: bool) -> Optional[int]:
    """The reduced extent of a kernel whose reduction is a small window over strided elements
    (a pooling window over a channels-last tensor), which the lowerings write with the window
    innermost and unrolled and the outputs' contiguous axis vectorized: every reduced dim
    static, at most `limit` elements, an outer space, no output over inner dims, and no
    argument contiguous along the reduced dims alone (the innermost non-unit dim of each is an
    outer one, or with `sliding` a window's moving with one: NCHW's W at ow * s + kw); None
    otherwise."""
    if sched.kind != "reduction":
        return None
    rdims = [g for g in sched.reductions[0].reduced if not sched.unit(g)]
    if not rdims or any(sched.size(g) is None for g in rdims) or any(
            set(g for g in r.reduced if not sched.unit(g)) != set(rdims)
            for r in sched.reductions[1:]):
        return None
    rnumel = 1
    for g in rdims:
        rnumel *= sched.size(g)
    outer = set(g for g in sched.outer if not sched.unit(g))
    if rnumel > limit or not outer:
        return None
    if any(not sched.unit(g) for o in sched.outputs for g in o.inner):
        return None
    ok = outer | sched.sliding_dims(outer) if sliding else outer
    for v in sched.args:
        gs = [g for g in sched.dims(v) if not sched.unit(g)]
        if gs and gs[-1] not in ok:
            return None
    return rnumel
