"""The `ember` dialect, defined in Python through IRDL (`torch_mlir.dialects.ext`).

It says what upstream dialects cannot: on the host side of a compiled graph, which values come
from a fused kernel (`ember.fused`) and which from a vendor/library kernel (`ember.extern`).

    %r = "ember.fused"(%a, %b) {kernel = @ember_fused_add_gelu_0}
           : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    %m = "ember.extern"(%x, %w) {target = "aten.mm", params = {}}
           : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>

Kernels are private `func.func`s carrying the unit attribute `ember.kernel`; an `ember.fused`
names one with `kernel` and must match its signature. Extensible (IRDL) dialects have no
properties, so the attributes are written in the `{...}` dictionary.
"""

from typing import Any, Sequence

from torch_mlir import ir
from torch_mlir.dialects.ext import Dialect, DialectAlreadyLoadedError, Operand, Result, result

KERNEL_ATTR = "ember.kernel"

# Library kernels ember knows how to call, with their operand counts (min, max).
EXTERN_TARGETS: dict[str, tuple[int, int]] = {
    "aten.mm": (2, 2),            # C = A @ B
    "aten.addmm": (3, 3),         # C = acc + A @ B (acc: the linalg init operand)
    "aten.bmm": (2, 2),           # batched
    "aten.baddbmm": (3, 3),
    "aten.convolution": (2, 3),   # input, weight[, bias]; params: stride, padding, dilation, groups
    "aten.sdpa": (3, 4),          # scaled dot-product attention
}


class Ember(Dialect, name="ember"):
    pass


def _error(op, message: str) -> bool:
    op.location.emit_error(message)
    return False


def _find_symbol(op, name: str):
    """Finds `func.func @name` in the module that encloses `op`."""
    parent = op.parent
    while parent is not None and parent.name != "builtin.module":
        parent = parent.parent
    if parent is None:
        return None
    for candidate in parent.regions[0].blocks[0].operations:
        if candidate.operation.name == "func.func" and "sym_name" in candidate.attributes:
            if ir.StringAttr(candidate.attributes["sym_name"]).value == name:
                return candidate
    return None


class FusedOp(Ember.Operation, name="fused"):
    """A launch of a fused kernel: `kernel` names a private func.func marked `ember.kernel`."""

    kernel: ir.FlatSymbolRefAttr
    inputs: Sequence[Operand[Any]]
    outs: Sequence[Result[Any]] = result()

    def verify_invariants(self) -> bool:
        op = self.operation
        if len(op.results) == 0:
            return _error(op, "'ember.fused' must produce at least one result")
        name = ir.FlatSymbolRefAttr(op.attributes["kernel"]).value
        callee = _find_symbol(op, name)
        if callee is None:
            # Verification also runs on a detached op during parsing; the module-level check
            # (`verify_module`) catches dangling references once the module is complete.
            return True
        ftype = ir.FunctionType(ir.TypeAttr(callee.attributes["function_type"]).value)
        ins = [v.type for v in op.operands]
        outs = [v.type for v in op.results]
        if list(ftype.inputs) != ins or list(ftype.results) != outs:
            return _error(op, f"'ember.fused' types do not match kernel @{name}: "
                              f"expected {ftype}")
        return True


class ExternOp(Ember.Operation, name="extern"):
    """A call of a library kernel (matmul, batched matmul, convolution, attention)."""

    target: ir.StringAttr
    params: ir.DictAttr
    inputs: Sequence[Operand[Any]]
    outs: Sequence[Result[Any]] = result()

    def verify_invariants(self) -> bool:
        op = self.operation
        target = ir.StringAttr(op.attributes["target"]).value
        if target not in EXTERN_TARGETS:
            known = ", ".join(sorted(EXTERN_TARGETS))
            return _error(op, f"'ember.extern' has unknown target '{target}' (known: {known})")
        lo, hi = EXTERN_TARGETS[target]
        n = len(op.operands)
        if not lo <= n <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            return _error(op, f"'ember.extern' target '{target}' takes {want} operands, got {n}")
        if len(op.results) != 1:
            return _error(op, "'ember.extern' must produce exactly one result")
        return True


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


def verify_module(module_op) -> None:
    """Checks what op verifiers cannot see alone: every `ember.fused` names an existing kernel.

    Raises `ValueError` after emitting a located diagnostic for the first dangling reference.
    """
    kernels = set()
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            kernels.add(ir.StringAttr(op.attributes["sym_name"]).value)

    def walk(op):
        if op.name == "ember.fused":
            name = ir.FlatSymbolRefAttr(op.attributes["kernel"]).value
            if name not in kernels:
                op.location.emit_error(f"'ember.fused' refers to unknown kernel @{name}")
                raise ValueError(f"unknown kernel @{name}")
        return ir.WalkResult.ADVANCE

    module_op.walk(walk)
