"""The `ember` dialect, defined in Python through IRDL (`torch_mlir.dialects.ext`).

It says what upstream dialects cannot: which values of a compiled graph's host side come from
a vendor/library kernel, and which functions are ember's fused kernels.

    %m = "ember.extern"(%x, %w) {callee = "aten.mm", params = {}}
           : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %r = func.call @ember_fused_add_gelu_0(%m, %b) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    func.func private @ember_fused_add_gelu_0(...) attributes {ember.kernel = "pointwise", ...}

A fused kernel is a private `func.func` carrying `ember.kernel = "pointwise" | "reduction"`
(checked by `contract.verify`), launched by a plain `func.call`. Why not an `ember.fused` op with a
variadic operand list: IRDL binds each constraint variable to the first type it verifies, so the
values of one variadic field must all have the same type (llvm-project
mlir/lib/Dialect/IRDL/IRDLLoading.cpp, `ConstraintVerifier`), and kernels take and return
tensors of different shapes. `func.call` carries any signature and its callee is verified.
A library kernel called with arguments of any types (attention, convolution backward, scans)
is likewise a `func.call` of a private, body-less `func.func` marked `ember.library` (see
frontend/library_calls.py). Extensible (IRDL) dialects have no properties, so attributes go in the `{...}` dictionary.
"""

from typing import Any, Optional

from torch_mlir import ir
from torch_mlir.dialects.ext import (Dialect, DialectAlreadyLoadedError, Operand, Result, attribute,
                                     result)

from .contract import EXTERN_OP

# Library kernels ember knows how to call, with their operand counts (min, max).
EXTERN_CALLEES: dict[str, tuple[int, int]] = {
    "aten.mm": (2, 2),            # C = A @ B
    "aten.addmm": (3, 3),         # C = acc + A @ B (acc: the linalg init operand)
    "aten.bmm": (2, 2),           # batched
    "aten.baddbmm": (3, 3),
    "aten.convolution": (2, 3),   # input, weight[, bias]; params: stride, padding, dilation, groups
    "aten.sdpa": (3, 3),          # scaled dot-product attention (q, k, v)
    "aten.max_pool2d": (2, 2),    # input, window (its shape is the kernel size); params as conv
    "aten.sum_pool2d": (2, 2),    # windowed sum (avg_pool2d with divisor 1)
}


class Ember(Dialect, name="ember"):
    pass


def _register_search_prefix() -> None:
    """Wrapping an op in Python (`value.owner`, `block.operations`) first imports the module of
    its dialect, `<prefix>.<dialect>`, for each search prefix; a failed import is not remembered,
    so every `ember.*` op retried `torch_mlir.dialects.ember` through importlib (~100 us each,
    seconds per model). This module, found under its own package, ends the search once."""
    from torch_mlir._mlir_libs import _mlir
    prefix = __name__.rpartition(".")[0]
    if prefix and prefix not in _mlir.globals.dialect_search_modules:
        _mlir.globals.append_dialect_search_prefix(prefix)


_register_search_prefix()


def _error(op, message: str) -> bool:
    op.location.emit_error(message)
    return False


class ExternOp(Ember.Operation, name="extern"):
    """A call of a library kernel (matmul, batched matmul, convolution, pooling): `callee` names
    it (a key of EXTERN_CALLEES), `params` holds its non-tensor arguments."""

    callee: ir.StringAttr
    # One field per operand: IRDL binds a constraint variable to the first type it meets, so a
    # single variadic field would force all operands to share one type (see module docstring).
    a: Operand[Any]
    b: Operand[Any]
    out: Result[Any] = result()
    c: Optional[Operand[Any]] = None
    # ext's builder treats an empty dictionary as "not given" (`if attr:`); the factory turns
    # that back into the empty dictionary.
    params: ir.DictAttr = attribute(default_factory=lambda: ir.DictAttr.get({}))

    def verify_invariants(self) -> bool:
        op = self.operation
        attrs = op.attributes
        if "callee" not in attrs or not isinstance(attrs["callee"], ir.StringAttr):
            return _error(op, f"'{EXTERN_OP}' needs a string attribute 'callee' (the library "
                              "kernel's name)")
        if "params" in attrs and not isinstance(attrs["params"], ir.DictAttr):
            return _error(op, f"'{EXTERN_OP}' attribute 'params' must be a dictionary")
        callee = ir.StringAttr(attrs["callee"]).value
        if callee not in EXTERN_CALLEES:
            known = ", ".join(sorted(EXTERN_CALLEES))
            return _error(op, f"'{EXTERN_OP}' has unknown callee '{callee}' (known: {known})")
        lo, hi = EXTERN_CALLEES[callee]
        n = len(op.operands)
        if not lo <= n <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            return _error(op, f"'{EXTERN_OP}' callee '{callee}' takes {want} operands, got {n}")
        if len(op.results) != 1:
            return _error(op, f"'{EXTERN_OP}' must produce exactly one result")
        return True


def make_extern(callee: str, operands, result_type, params: dict, anchor) -> ir.Operation:
    """An `ember.extern` calling `callee` on `operands`, inserted before `anchor` at its
    location (`params`: name -> attribute)."""
    operands = list(operands)
    with ir.InsertionPoint(anchor), anchor.location:
        op = ExternOp(ir.StringAttr.get(callee), operands[0], operands[1], result_type,
                      c=operands[2] if len(operands) > 2 else None,
                      params=ir.DictAttr.get(params))
    # The builder records the optional operand's presence as `operandSegmentSizes`; the op's
    # verifier and every reader go by the operand count, and the text form (what lit tests and
    # parsed inputs hold) has none, so it is dropped to keep one spelling.
    del op.operation.attributes["operandSegmentSizes"]
    return op.operation


def extern_callee(op) -> str:
    return ir.StringAttr(op.attributes["callee"]).value


def load(context: "ir.Context | None" = None) -> None:
    """Loads the ember dialect into `context` (or the current one); loading twice is harmless."""
    ctx = context or ir.Context.current
    with ctx:
        try:
            Ember.load()
        except DialectAlreadyLoadedError:
            pass


def make_context() -> ir.Context:
    """A context with every upstream dialect (from torch-mlir's wheel) and ember loaded."""
    ctx = ir.Context()
    load(ctx)
    return ctx
