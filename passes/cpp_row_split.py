"""Rows split across threads, for C++ reduction kernels with few rows.

cpp_emitter runs a row-wise kernel (softmax, layer_norm: reductions over a row, then the row's
outputs) as one `parallel for` over the rows, each thread walking whole rows. With fewer rows
than a few times the thread count, and not a multiple of it, threads idle: 3 rows on 2 threads
take as long as 4. `split_rows` gives such a kernel a second version of the row loop, chosen at
run time: the rows one after the other on the calling thread, each row loop inside split across
the threads (`parallel for simd` with the loop's reductions; a blocked sum's chunks in parallel,
their partial sums reduced into its double accumulator). A row's accumulators, declared
outside those parallel loops, are shared there as OpenMP reductions require; the results are
those of the row version up to the order of the additions (the per-lane partial sums of a simd
reduction are combined per thread, then across threads). Decided on the kernel_ir tree: the row
loops by their `Loop` fields (from 0 to a static bound, by 1 or by a blocked sum's chunk step),
the two versions an `If` on `ember_split_rows(rows)` (cpp_prelude)."""
from __future__ import annotations

from .kernel_ir import Assign, If, OmpPragma, Raw, Scope, int_value

# Threads are worth it for a row loop of at least this many elements (as cpp_emitter's
# omp_min_elements for a whole kernel): each row loop is a parallel region of its own.
SPLIT_MIN_ROW = 16384


def _clone(s: Scope) -> Scope:
    c = Scope(s.binds, s.loop)
    c.pragmas = list(s.pragmas)
    c.stmts = [_clone(x) if isinstance(x, Scope) else x for x in s.stmts]
    if hasattr(s, "trip"):
        c.trip = s.trip
    return c


def _long(loop: Scope, step_one: bool) -> bool:
    """`loop` counts from 0 to a static bound of at least SPLIT_MIN_ROW, by 1 (`step_one`) or
    by a static step of more than 1 (a blocked sum's chunks), with no span."""
    lp = loop.loop
    if lp is None or int_value(lp.start) != 0 or lp.span is not None:
        return False
    step = int_value(lp.step)
    if step is None or (step == 1) != step_one:
        return False
    n = int_value(lp.stop)
    return n is not None and n >= SPLIT_MIN_ROW


def _threaded(loop: Scope) -> bool:
    """Makes row loop `loop` (a child of the row's scope) a parallel loop; False if it is not
    a shape this knows (it then stays serial: correct, only slower)."""
    if _long(loop, True) and \
            [p for p in loop.pragmas if p.simd and not p.parallel] == loop.pragmas and \
            loop.pragmas and not any(isinstance(x, Scope) for x in loop.stmts):
        p = loop.pragmas[0]
        loop.pragmas = [OmpPragma(parallel=True, simd=True, reductions=p.reductions)]
        return True
    inner = [x for x in loop.stmts if isinstance(x, Scope)]
    if _long(loop, False) and not loop.pragmas and len(inner) == 1:
        adds = [x.name for x in loop.stmts if isinstance(x, Assign) and x.op == "+="]
        loop.pragmas = [OmpPragma(parallel=True, reductions=tuple(("+", a) for a in adds))]
        return True
    return False


def split_rows(root: Scope) -> bool:
    """Gives the kernel's parallel row loop (the one top-level loop of `root` with a plain
    `parallel for` pragma and a static trip count) a split-rows version (module docstring),
    chosen when the rows do not spread evenly over the threads. Returns whether it did."""
    tops = [(k, s) for k, s in enumerate(root.stmts) if isinstance(s, Scope)]
    if len(tops) != 1:
        return False
    k, rows = tops[0]
    trip = getattr(rows, "trip", None)
    if trip is None or len(rows.pragmas) != 1:
        return False
    p = rows.pragmas[0]
    if not p.parallel or p.simd or p.collapse != 1 or p.reductions or p.work:
        return False
    serial = _clone(rows)
    serial.pragmas = []
    loops = [x for x in serial.stmts if isinstance(x, Scope)]
    if not loops or not all([_threaded(x) for x in loops]):
        return False
    then, other = Scope(), Scope()
    then.stmts, other.stmts = [serial], [rows]
    root.stmts[k:k + 1] = [If(Raw(f"ember_split_rows({trip})"), then, other)]
    return True
