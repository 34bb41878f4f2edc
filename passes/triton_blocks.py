"""Block shapes of the Triton lowering: which configurations (constexpr block sizes, warps) a
kernel is autotuned over, and whether a reduction is persistent (the whole reduced row in one
RBLOCK). The first configuration of each list is what the Triton interpreter and the AOT builds
use; `autotune=False` keeps only it, `max_autotune` widens the search.
"""
from __future__ import annotations

import math
from typing import Optional

from .ir_queries import iterator_types
from .kernel_windows import window_extent


def pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def pointwise_configs(autotune: bool, max_autotune: bool) -> list:
    """[(constexprs, num_warps)] of a pointwise kernel (1-D tiles of XBLOCK)."""
    configs = [({"XBLOCK": 1024}, 4), ({"XBLOCK": 2048}, 8), ({"XBLOCK": 512}, 4)]
    if max_autotune:
        configs += [({"XBLOCK": 4096}, 8), ({"XBLOCK": 2048}, 4), ({"XBLOCK": 1024}, 8),
                    ({"XBLOCK": 256}, 2), ({"XBLOCK": 128}, 4)]
    if not autotune:
        configs = configs[:1]
    return configs


# A kernel whose whole iteration space (outputs x reduced elements x window) is at most this
# many elements is launch-bound: with the smallest default tile (512 elements) it is at most
# 128 programs, one wave of an H100/H200's 132 SMs, a few elements a thread, whatever the
# configuration. Such a kernel gets one configuration and no autotuning (each configuration
# is one more Triton compile, load and benchmark); max-autotune keeps its whole search. The
# one kept is the one with the most programs (the smallest XBLOCK) among those the
# autotuner's pruning (the prelude's `_ember_prune`) keeps, the list's order between equals.
# From the autotuner's choices on an H200 (efficientnet_b0's training step, bf16,
# first_call_profile --choices, 2026-11-27): of the 211 benchmarked keys of pointwise kernels of
# 513 to 2^16 elements, XBLOCK 512 (4 warps) won 93, 1024 (4 warps) 75, 2048 (8 warps)
# 43; looped column sums of up to 2^16 elements chose 32 columns (the smallest) 9 times of 17.
LAUNCH_BOUND = 1 << 16


def fitting(configs: list, numels: dict) -> list:
    """The configurations the prelude's `_ember_prune` keeps for these static extents
    ({"xnumel": n, "rnumel": m}): no block larger than its extent rounded up to a power of
    two (or than the list's smallest), at least the first."""
    def fits(c, block, numel):
        if block not in c[0] or numel not in numels:
            return True
        least = min(x[0].get(block, 1) for x in configs)
        return c[0][block] <= max(pow2(numels[numel]), least)
    kept = [c for c in configs if fits(c, "XBLOCK", "xnumel") and fits(c, "RBLOCK", "rnumel")]
    return kept or configs[:1]


def launch_bound_configs(configs: list, numels: dict, work: Optional[int],
                         max_autotune: bool) -> list:
    """`configs` (the autotuned list), or only the fitting one with the smallest XBLOCK
    where the kernel is launch-bound (`work`, its static iteration space, at most
    LAUNCH_BOUND; None: dynamic) and max-autotune is off."""
    if max_autotune or len(configs) < 2 or work is None or work > LAUNCH_BOUND:
        return configs
    return [min(fitting(configs, numels), key=lambda c: c[0].get("XBLOCK", 1))]


def persistent_rnumel(sched, rdims, max_rblock: int) -> Optional[int]:
    """The reduced extent when the reduction is persistent: static, at most `max_rblock`, and
    every output with inner dims is indexed by exactly the reduced dims (so it is stored from
    the same registers); None when the reduced space is looped over."""
    rstatic = all(sched.size(g) is not None for g in rdims)
    rnumel = math.prod(sched.size(g) for g in rdims) if rstatic else None
    persistent = rstatic and rnumel <= max_rblock and all(
        not o.inner or set(g for g in o.inner if not sched.unit(g)) == set(rdims)
        for o in sched.outputs)
    return rnumel if persistent else None


# A persistent reduction's registers grow with the elements each thread holds (every live value
# of the body, once per element). At 16 a thread (4096 elements in 8 warps, what every row up to
# 4096 used to get) swin_t's window-attention softmax, with its gathered position bias and
# shift mask, needed 156 registers a thread on sm_90: one 8-warp program per SM, so one
# program's loads never overlapped another's reductions (0.23 ms where Inductor's took 0.085).
# Rows up to SHORT_ROW take SHORT_ROW elements a program in 8 warps: 4 a thread (48 registers,
# 40 warps an SM for that kernel; a layer norm's row of 768 gets one row in 8 warps, as
# Inductor's persistent reduction gives it). Longer rows keep one or two rows a program.
SHORT_ROW = 1024
SHORT_ROW_WARPS = 8
# A persistent row at least this long (with rows beside it) also times half its warps.
LONG_ROW = 4096


# A persistent column reduction (at most COLUMN_PERSISTENT_MAX rows, the columns contiguous)
# takes COLUMN_WIDTH columns a program in 4 warps: each row's load a 128-byte (f32) or 256-byte
# run. The row heuristic above gave GPT-2's q/k/v bias gradient (a [32 x 64, 2304] bf16 column
# sum) 16 columns in 8 warps: 28.7 us on an H200, 17.5 with 64 columns in 4 warps (scratch
# microbenchmark, eleventh session).
COLUMN_WIDTH = 64


def persistent_configs(rnumel: int, has_outer: bool, max_autotune: bool,
                       column: bool = False, autotune: bool = False) -> list:
    """[(constexprs, num_warps)] of a persistent reduction: RBLOCK covers the row (for a
    `column` reduction: the rows, many columns a program)."""
    rb = max(16, pow2(rnumel))
    if column and has_outer:
        xb = max(COLUMN_WIDTH, min(256, 4096 // rb))
        configs = [({"XBLOCK": xb, "RBLOCK": rb}, 4)]
        if autotune or max_autotune:
            # in place on an H200, GPT-2's column sums chose 32 columns (q/k/v bias, GELU
            # backward); a third width cost Triton compiles (cold +8%) and was never chosen
            configs.append(({"XBLOCK": xb // 2, "RBLOCK": rb}, 4))
        if max_autotune:
            configs.append(({"XBLOCK": xb * 2, "RBLOCK": rb}, 8))
        return configs
    if has_outer and rb <= SHORT_ROW:
        xb, warps = SHORT_ROW // rb, SHORT_ROW_WARPS
    else:
        # A full reduction (no outer space) is one row: more rows would only repeat it.
        xb = max(1, min(pow2(max(1, 4096 // rb)), 64)) if has_outer else 1
        warps = max(1, min(16, pow2(xb * rb // 512)))
    configs = [({"XBLOCK": xb, "RBLOCK": rb}, warps)]
    if (autotune or max_autotune) and has_outer and rb >= LONG_ROW and warps > 4:
        # half the warps (twice the elements a thread) timed beside: on an H200 a layer norm's
        # f32 row of 4096 (8192 rows) took 0.0702 ms in 4 warps against 0.0721 in 8, bf16 as
        # fast either way (gpu_bench kernels, twenty-sixth session); a body with many live
        # values a thread keeps the 8 warps
        configs.append(({"XBLOCK": xb, "RBLOCK": rb}, warps // 2))
    if max_autotune and has_outer:
        # other warp counts, fewer rows, and more rows (up to 4096 elements a program)
        more = [(xb, warps * 2), (xb, warps // 2), (xb // 2, warps), (xb * 4, warps),
                (xb // 4, warps // 2)]
        for x, w in more:
            if x * rb > 4096 or x > 64:
                continue
            c = ({"XBLOCK": max(1, x), "RBLOCK": rb}, max(1, min(16, w)))
            if c not in configs:
                configs.append(c)
    elif max_autotune:
        for w in (warps * 2, warps // 2):
            c = ({"XBLOCK": 1, "RBLOCK": rb}, max(1, min(16, w)))
            if c not in configs:
                configs.append(c)
    return configs


def looped_configs(autotune: bool, max_autotune: bool) -> list:
    """[(constexprs, num_warps)] of a reduction that loops over its row in RBLOCK steps."""
    configs = [({"XBLOCK": 1, "RBLOCK": 2048}, 8), ({"XBLOCK": 1, "RBLOCK": 1024}, 4),
               ({"XBLOCK": 8, "RBLOCK": 512}, 8), ({"XBLOCK": 64, "RBLOCK": 16}, 4)]
    if max_autotune:
        configs += [({"XBLOCK": 1, "RBLOCK": 4096}, 16), ({"XBLOCK": 4, "RBLOCK": 256}, 4),
                    ({"XBLOCK": 16, "RBLOCK": 128}, 4), ({"XBLOCK": 32, "RBLOCK": 64}, 8)]
    if not autotune:
        configs = configs[:1]
    return configs


# A column reduction (the innermost loop is a kept dim: `x.sum(0)` of a row-major x) reduces
# across rows: a program takes many adjacent columns, so that each row's load is one contiguous
# run. Up to this many rows it keeps them all in registers (persistent), beyond it loops.
COLUMN_PERSISTENT_MAX = 64


def is_column(sched) -> bool:
    """Whether the first reduction's innermost non-unit loop is a kept (parallel) dim."""
    r = sched.reductions[0]
    for j in reversed(range(len(iterator_types(r.op)))):
        g = sched.loop_gid(r.op, j)
        if not sched.unit(g):
            return g not in set(r.reduced)
    return False


def column_configs(autotune: bool, max_autotune: bool) -> list:
    """[(constexprs, num_warps)] of a looped column reduction: wide in XBLOCK (the columns)."""
    configs = [({"XBLOCK": 64, "RBLOCK": 16}, 4), ({"XBLOCK": 128, "RBLOCK": 8}, 4),
               ({"XBLOCK": 32, "RBLOCK": 32}, 4), ({"XBLOCK": 256, "RBLOCK": 8}, 8)]
    if max_autotune:
        configs += [({"XBLOCK": 128, "RBLOCK": 16}, 8), ({"XBLOCK": 64, "RBLOCK": 32}, 8),
                    ({"XBLOCK": 512, "RBLOCK": 4}, 8)]
    if not autotune:
        configs = configs[:1]
    return configs


# A small static reduction whose elements are strided in memory (a pooling window over a
# channels-last tensor: the contiguous axis is a kept one) is written like a pointwise kernel:
# 1-D over the outputs, the contiguous axis fastest, the window an unrolled `tl.static_range`
# of loads combined in window order (kernel_schedule's reduced loops, row-major: kh then kw,
# ATen's order). A [XBLOCK, RBLOCK] tile puts adjacent lanes along r instead: neighbouring
# lanes a window position apart (no coalescing), and RBLOCK's padding lanes masked (7 of 16
# for a 3x3 window). Inductor unrolls pooling windows up to 25 elements (beyond it calls
# ATen); the unrolled body grows with the window, so past WINDOW_MAX the tile form is kept.
WINDOW_MAX = 64


# A window that does not slide (no input index moves with an output one: a global pool, or the
# chunks of rows ember-split-reductions makes of a column sum) of at least this many elements
# is a column reduction, not a window: one output a thread there left GPT-2's LayerNorm
# weight-gradient partials ([32 chunks of 64 rows, 768] over bf16 and f32 [2048, 768]) at 26 us
# a call on an H200 (4.8 MB: ~185 GB/s), where the [columns x rows] tile loads a row's run of
# columns as vectors and reduces the rows across lanes. ember-split-reductions' chunks have at
# least its min-chunk (64) elements; a global average pool of a 7 x 7 map (49) stays a window.
COLUMN_NOT_WINDOW = 64


def window_rnumel(sched) -> Optional[int]:
    """The reduced extent when the reduction is written as an unrolled window
    (kernel_windows.window_extent, at most WINDOW_MAX elements, and sliding unless fewer than
    COLUMN_NOT_WINDOW); None otherwise."""
    n = window_extent(sched, WINDOW_MAX, sliding=True)
    if n is not None and n >= COLUMN_NOT_WINDOW and not sched.sliding_dims(
            set(g for g in sched.outer if not sched.unit(g))):
        return None
    return n


def window_configs(xnumel: Optional[int], autotune: bool, max_autotune: bool) -> list:
    """[(constexprs, num_warps)] of an unrolled window reduction (1-D tiles of XBLOCK outputs,
    each reading the whole window), fewer outputs a program when the outputs are too few to
    give every SM of a large GPU a few programs (a global average pool's N x C)."""
    # 8 outputs a thread first, as pointwise kernels: 16-byte loads of bf16 along channels
    configs = [({"XBLOCK": 1024}, 4), ({"XBLOCK": 512}, 4), ({"XBLOCK": 256}, 4),
               ({"XBLOCK": 128}, 4)]
    if max_autotune:
        configs += [({"XBLOCK": 1024}, 8), ({"XBLOCK": 2048}, 8), ({"XBLOCK": 256}, 2),
                    ({"XBLOCK": 64}, 2)]
    if xnumel is not None:
        # at least ~512 programs where the space allows it (132 SMs of an H100/H200, 304 CUs
        # of an MI300X), never under 64 outputs a program
        xb = max(64, min(1024, pow2(max(1, xnumel // 512))))
        if xb < 1024:
            first = ({"XBLOCK": xb}, 4 if xb >= 128 else 2)
            configs = [first] + [c for c in configs if c != first and c[0]["XBLOCK"] <= 2 * xb]
    if not autotune:
        configs = configs[:1]
    return configs
