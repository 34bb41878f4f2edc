"""A CPU inference matmul's parameter weight packed once into MKL's GEMM panels and kept
across calls (CompileOptions.prepack_weights).

An inference program's `mm(x, w.t())` / `addmm(b, x, w.t())` whose `w` is an `nn.Parameter`
(a Linear layer's [N, K] weight) hands MKL its weight as is, and MKL repacks it into its
panels on every call. Packed once (`cblas_sgemm_pack`, the weight as the transposed B
operand, for the call's row count) and kept, each call runs `cblas_sgemm_compute` on the
packed panels straight into the planned output: Inductor's freezing calls the same MKL API
(`mkl::_mkl_linear`). The encoder layer of cpu_bench (four Linear layers, 1024 rows) took
<see benchmarks/RESULTS.md, enc19> less per call.

Invariants:
  - Every call that can read a packed weight reads one (it is packed on first sight), so a
    program's results do not depend on the cache's state: the packed GEMM sums in another
    order than `mm`'s for some shapes (K = 2048 here, another K blocking), within fp32
    tolerance of it (the tests compare with eager as for any matmul); prepack_weights=False
    gives the library call's bits.
  - A packed weight is read only while it holds the weight's current value. Each belongs to
    the parameter's (data pointer, shape, version counter): every in-place update autograd
    sees (an optimizer step, `p.add_` / `p.copy_` under no_grad, an ember program writing
    its input) bumps the version, `p.data = t` changes the pointer, and the weight is packed
    again. Writes through `p.data` (`p.data.add_(...)`, which bypass the version counter)
    are caught by a probe: the weight's first and last rows, compared bit for bit on every
    call with their bytes when it was packed (a dense update changes them; one that leaves
    both rows alone is not seen).
  - The packing is MKL's for the call's (rows, N, K) and thread count (MKL's packed storage
    holds a threading plan: "use the same number of threads for packing and computing"): a
    call with another row count or `torch.get_num_threads()` packs again (dynamic shapes).
    The buffer stays where MKL packed it (the packed format must not move). At most `BUDGET_BYTES` of packed weights live in the process
    (past it, matmuls read the weight as is); a packed weight is dropped with its parameter
    (weak keys).
"""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import Callable

import torch
from torch.utils.weak import WeakIdKeyDictionary

BUDGET_BYTES = 1 << 30          # the most bytes of packed weights kept at once, process-wide
_PROBE_BYTES = 1024             # bytes of each probed row compared per call (its start)

# CBLAS enums (mkl_cblas.h)
_ROW_MAJOR, _NO_TRANS, _TRANS, _PACKED, _B_MATRIX = 101, 111, 112, 151, 162


def _mkl():
    """MKL's packed-GEMM entry points, from the libtorch_cpu that carries MKL, or None."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        lib = ctypes.CDLL(path)
        size, pack, compute = (lib.cblas_sgemm_pack_get_size, lib.cblas_sgemm_pack,
                               lib.cblas_sgemm_compute)
    except (OSError, AttributeError):
        return None
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    size.restype, size.argtypes = ctypes.c_size_t, [i, i, i, i]
    pack.restype, pack.argtypes = None, [i, i, i, i, i, i, f, p, i, p]
    compute.restype, compute.argtypes = None, [i, i, i, i, i, i, p, i, p, i, f, p, i]
    return size, pack, compute


_MKL = _mkl() if torch.backends.mkl.is_available() else None


class _Entry:
    """A parameter's packed weight and what it was packed from. Reset in place when the
    parameter changes (call sites keep the entry itself)."""
    __slots__ = ("ptr", "version", "shape", "plan", "packed", "probe")

    def __init__(self, w: torch.Tensor):
        self.reset(w)

    def reset(self, w: torch.Tensor) -> None:
        self.ptr, self.version, self.shape = w.data_ptr(), w._version, w.shape
        self.plan: tuple = ()        # (rows, threads) it was packed for
        self.packed: torch.Tensor | None = None
        self.probe: tuple | None = None


_ENTRIES = WeakIdKeyDictionary()            # parameter -> _Entry
# Per-process counters (tests read them): weights packed, matmuls that read a packed weight,
# packed weights dropped because the weight changed behind the version counter (the probe).
stats = {"packs": 0, "reads": 0, "probe_drops": 0}


def _probe(w: torch.Tensor) -> tuple:
    """The first bytes of the weight's first and last rows, as bytes (a bitwise snapshot)."""
    row = w.shape[1] * w.element_size()
    n = min(row, _PROBE_BYTES)
    p = w.data_ptr()
    return ctypes.string_at(p, n), ctypes.string_at(p + (w.shape[0] - 1) * row, n)


def live_bytes() -> int:
    """Bytes held by the packed weights alive now."""
    return sum(e.packed.nbytes for e in _ENTRIES.values() if e.packed is not None)


def _eligible(w) -> bool:
    return (_MKL is not None and isinstance(w, torch.nn.Parameter)
            and w.dtype == torch.float32 and w.dim() == 2 and w.device.type == "cpu"
            and w.is_contiguous() and w.numel() > 0)


def _pack(e: _Entry, w: torch.Tensor, rows: int, plan: tuple) -> torch.Tensor | None:
    n, k = w.shape
    size = _MKL[0](_B_MATRIX, rows, n, k)
    held = e.packed.nbytes if e.packed is not None else 0
    if live_bytes() - held + size > BUDGET_BYTES:
        return None
    buf = torch.empty(size, dtype=torch.uint8)
    _MKL[1](_ROW_MAJOR, _B_MATRIX, _TRANS, rows, n, k, 1.0, w.data_ptr(), k, buf.data_ptr())
    e.packed, e.plan, e.probe = buf, plan, _probe(w)
    stats["packs"] += 1
    return buf


def _current(e: _Entry, w: torch.Tensor, rows: int) -> torch.Tensor | None:
    """The entry's packed weight for `rows` rows, packed now if it is missing, stale or
    packed for another row count or thread count; None past the budget."""
    if e.ptr != w.data_ptr() or e.version != w._version or e.shape != w.shape:
        e.reset(w)
    elif e.packed is not None and _probe(w) != e.probe:
        e.reset(w)          # written through `.data`: unseen by the version counter
        stats["probe_drops"] += 1
    plan = (rows, torch.get_num_threads())
    if e.packed is None or e.plan != plan:
        return _pack(e, w, rows, plan)
    return e.packed


def _entry(w: torch.Tensor) -> _Entry | None:
    e = _ENTRIES.get(w)
    if e is None and _eligible(w):
        e = _ENTRIES[w] = _Entry(w)
    return e


def packed(w: torch.Tensor, rows: int) -> torch.Tensor | None:
    """`w` packed by MKL as the transposed B operand of a `rows`-row GEMM (kept), or None:
    `w` is not a 2-d contiguous f32 CPU parameter, or the budget is spent."""
    e = _entry(w)
    return None if e is None else _current(e, w, rows)


def _plain_f32(a: torch.Tensor, out: torch.Tensor, k: int) -> bool:
    """a [M, K] with unit column stride, out [M, N] row-major, both f32: what the packed GEMM
    takes as they are."""
    return (a.dtype == out.dtype == torch.float32 and a.dim() == 2 and a.shape[1] == k
            and a.shape[0] > 0 and (a.stride(1) == 1 or k == 1) and a.stride(0) >= max(k, 1)
            and out.is_contiguous() and a.device.type == "cpu")


def reading_packed(run: Callable, w_at: int, bias: bool = False) -> Callable:
    """`run(ins, outs)` (the library call `mm(a, w.t())`, or `addmm(bias, a, w.t())` with beta
    and alpha 1 where `bias`; a = ins[w_at - 1], w = ins[w_at]) that reads w packed where it
    is a parameter: the product is MKL's packed GEMM, written into outs[0] (prefilled with
    the bias, beta 1, as addmm does)."""
    site = [None, None]     # the last weight (a weakref) and its entry

    def run_packed(ins, outs):
        w = ins[w_at]
        ref, e = site[0], site[1]
        if ref is None or ref() is not w:   # another weight than last call's (or none yet)
            e = _entry(w)
            site[0], site[1] = (weakref.ref(w) if e is not None else None), e
        out, a = outs[0], ins[w_at - 1]
        if e is None or not _plain_f32(a, out, w.shape[1]):
            return run(ins, outs)
        m = a.shape[0]
        pk = _current(e, w, m)
        if pk is None:
            return run(ins, outs)
        n, k = w.shape
        beta = 0.0
        if bias:
            b = ins[0]
            if b.dtype != torch.float32:
                return run(ins, outs)
            out.copy_(b.expand(m, n))
            beta = 1.0
        _MKL[2](_ROW_MAJOR, _NO_TRANS, _PACKED, m, n, k, a.data_ptr(), a.stride(0),
                pk.data_ptr(), k, beta, out.data_ptr(), n)
        stats["reads"] += 1
        return None
    return run_packed
