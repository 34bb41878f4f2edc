"""A CPU inference matmul's weight kept transposed across calls (CompileOptions.prepack_weights).

An inference program's `mm(x, w.t())` / `addmm(b, x, w.t())` whose `w` is an `nn.Parameter`
(a Linear layer's [N, K] weight) hands MKL its weight transposed, which MKL repacks into its
panels on every call. A contiguous copy of `w.t()` ([K, N]), made once and kept, is read
through MKL's plain (NN) path instead: the transformer encoder layer of cpu_bench (four
Linear layers, 1024 rows) took <see benchmarks/RESULTS.md, enc17> less per call.

Invariants:
  - The result is the library call's, bit for bit: the first call that could read a copy
    computes both (library call, then the copy's matmul) for its shapes, operand strides and
    thread count and compares their bits; where they differ, that matmul keeps the library
    call. MKL's blocking depends on shapes, layout and threads, not on the data.
  - A copy is read only while it holds the weight's current value. Each copy belongs to the
    parameter's (data pointer, shape, version counter): every in-place update autograd sees
    (an optimizer step, `p.add_` / `p.copy_` under no_grad, an ember program writing its
    input) bumps the version, `p.data = t` changes the pointer. Writes through `p.data`
    (`p.data.add_(...)`, which bypass the version counter) are caught by a probe: the
    weight's first and last rows, compared bit for bit on every call with their bytes when
    the copy was made (a dense update changes them; one that leaves both rows alone is not
    seen).
  - A copy is made on the second call that finds the same version, so a weight updated
    before every call (a training loop's eval of a model it is training) is never copied;
    at most `BUDGET_BYTES` of copies live in the process (the rest read the weight as is).
    A copy is dropped with its parameter (weak keys).
"""
from __future__ import annotations

import ctypes
import weakref
from typing import Callable

import torch
from torch.utils.weak import WeakIdKeyDictionary

BUDGET_BYTES = 1 << 30          # the most bytes of copies kept at once, process-wide
_PROBE_BYTES = 1024             # bytes of each probed row compared per call (its start)


class _Entry:
    """A parameter's copy and what it was made from. Reset in place when the parameter
    changes (call sites keep the entry itself)."""
    __slots__ = ("ptr", "version", "shape", "copy", "probe")

    def __init__(self, w: torch.Tensor):
        self.reset(w)

    def reset(self, w: torch.Tensor) -> None:
        self.ptr, self.version, self.shape = w.data_ptr(), w._version, w.shape
        self.copy: torch.Tensor | None = None
        self.probe: tuple | None = None


_ENTRIES = WeakIdKeyDictionary()            # parameter -> _Entry
# Per-process counters (tests read them): copies made, matmuls that read one, copies dropped
# because the weight changed behind the version counter (the probe), call shapes where the
# copy's result differed from the library call's.
stats = {"copies": 0, "reads": 0, "probe_drops": 0, "differ": 0}


def _probe(w: torch.Tensor) -> tuple:
    """The first bytes of the weight's first and last rows, as bytes (a bitwise snapshot)."""
    row = w.shape[1] * w.element_size()
    n = min(row, _PROBE_BYTES)
    p = w.data_ptr()
    return ctypes.string_at(p, n), ctypes.string_at(p + (w.shape[0] - 1) * row, n)


def live_bytes() -> int:
    """Bytes held by the copies alive now."""
    return sum(e.copy.nbytes for e in _ENTRIES.values() if e.copy is not None)


def _eligible(w) -> bool:
    return (isinstance(w, torch.nn.Parameter) and w.dtype == torch.float32 and w.dim() == 2
            and w.device.type == "cpu" and w.is_contiguous() and w.numel() > 0)


def _current(e: _Entry, w: torch.Tensor) -> torch.Tensor | None:
    """The entry's copy if it still holds `w`'s value (else the entry is reset or the copy
    made: see `transposed`)."""
    if e.ptr != w.data_ptr() or e.version != w._version or e.shape != w.shape:
        e.reset(w)
        return None
    if e.copy is None:
        if live_bytes() + w.nbytes > BUDGET_BYTES:
            return None
        e.copy = w.t().contiguous()
        e.probe = _probe(w)
        stats["copies"] += 1
        return e.copy
    if _probe(w) != e.probe:        # written through `.data`: unseen by the version counter
        e.reset(w)
        stats["probe_drops"] += 1
        return None
    return e.copy


def _entry(w: torch.Tensor) -> _Entry | None:
    e = _ENTRIES.get(w)
    if e is None and _eligible(w):
        e = _ENTRIES[w] = _Entry(w)
        e.version = -1              # first sight: nothing is copied at this call
    return e


def transposed(w: torch.Tensor) -> torch.Tensor | None:
    """The kept contiguous copy of `w.t()`, or None: `w` is not a 2-d contiguous f32 CPU
    parameter, was first seen at this version (nothing is copied yet), changed since the
    copy was made (the copy is dropped), or the budget is spent."""
    e = _entry(w)
    return None if e is None else _current(e, w)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.dtype == torch.float32 else t


def reading_copy(run: Callable, w_at: int,
                 run_copy: Callable[[list, torch.Tensor, "torch.Tensor | None"], torch.Tensor],
                 tag: tuple = ()) -> Callable:
    """`run(ins, outs)` (the library call, reading ins[w_at] transposed) that reads the kept
    copy of ins[w_at]'s transpose instead where it exists and gives the same bits:
    `run_copy(ins, copy, out)` computes the same product from the copy, into `out` (or a new
    tensor when `out` is None). `tag` names the call's other arguments (addmm's beta and
    alpha) in the key of the bitwise check."""
    same_bits: dict[tuple, bool] = {}     # (operand shapes and strides, threads) -> verdict
    # the last weight (a weakref) and its entry; the last verdict as (threads, a's shape, a's
    # strides, verdict), one tuple (a thread reading it never sees one call's shape with
    # another's verdict); a (ins[w_at - 1]) is the operand whose rows vary (dynamic shapes)
    site = [None, None, None]

    def run_weight_copy(ins, outs):
        w = ins[w_at]
        ref, e = site[0], site[1]
        if ref is None or ref() is not w:   # another weight than last call's (or none yet)
            e = _entry(w)
            site[0], site[1], site[2] = (weakref.ref(w) if e is not None else None), e, None
            if e is None:
                return run(ins, outs)
        wt = _current(e, w)
        if wt is None:
            return run(ins, outs)
        out = outs[0]
        a, threads, last = ins[w_at - 1], torch.get_num_threads(), site[2]
        if last is None or last[0] != threads or last[1] != a.shape or last[2] != a.stride():
            if out.dtype != torch.float32 or any(t.dtype != torch.float32 for t in ins):
                return run(ins, outs)
            key = (threads, tag, w_at, tuple(tuple(t.shape) + t.stride() for t in ins),
                   tuple(out.shape))
            same = same_bits.get(key)
            if same is None:
                run(ins, outs)
                same = same_bits[key] = torch.equal(_bits(run_copy(ins, wt, None)), _bits(out))
                stats["differ"] += not same
                site[2] = (threads, a.shape, a.stride(), same)
                return None
            last = site[2] = (threads, a.shape, a.stride(), same)
        if not last[3]:
            return run(ins, outs)
        run_copy(ins, wt, out)
        stats["reads"] += 1
        return None
    return run_weight_copy
