"""Errors that generated kernels find in the user's data, raised on the host as eager raises them.

A kernel cannot throw. It records the first error it meets in a 4-slot int64 record
(kind, value, dim, size) and goes on with an in-bounds stand-in value: the C++ translation unit
keeps it in `ember_error`, returned by `ember_error_record()` (passes/cpp_prelude.py); a Triton
module keeps one record per device (`_ember_error_buffer` in passes/triton_lang.py; read under
the interpreter only: on a GPU the kernel's device-side assert reports, as eager's CUDA kernels
do). After a kernel that checks, the runtime reads the record, clears it and raises:

  kind 1  an index out of range (gather, embedding, index_select, indexing): `IndexError`
          (also a `RuntimeError`: eager's gather raises that type), message as eager's;
  kind 2  an integer division or remainder by zero: `RuntimeError("ZeroDivisionError")`, the
          type and message of eager's CPU kernels.
"""
from __future__ import annotations


class KernelDataError(Exception):
    """Base of the errors above: the user's data is wrong, not ember. (The frontend redoes a
    call that raised eagerly, and eager's own error, the same one, is what the user sees.)"""


class KernelIndexError(KernelDataError, IndexError, RuntimeError):
    pass


class KernelZeroDivisionError(KernelDataError, RuntimeError):
    pass


INDEX, ZERO_DIVISION = 1, 2


def error_for(record) -> KernelDataError | None:
    """The exception a (kind, value, dim, size) record stands for; None when it holds none."""
    kind, value, dim, size = (int(x) for x in record)
    if kind == 0:
        return None
    if kind == INDEX:
        return KernelIndexError(f"index out of range in self: index {value} is out of bounds "
                                f"for dimension {dim} with size {size}")
    if kind == ZERO_DIVISION:
        return KernelZeroDivisionError("ZeroDivisionError")
    return KernelDataError(f"ember kernel reported error kind {kind} ({value}, {dim}, {size})")
