"""The `ember` dialect, defined in Python through IRDL (`torch_mlir.dialects.ext`).

It says what upstream dialects cannot: which values of a compiled graph's host side come from
a vendor/library kernel, and which functions are ember's fused kernels.

    %m = "ember.extern"(%x, %w) {target = "aten.mm", params = {}}
           : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %r = func.call @ember_fused_add_gelu_0(%m, %b) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    func.func private @ember_fused_add_gelu_0(...) attributes {ember.kernel = "pointwise", ...}

A fused kernel is a private `func.func` carrying `ember.kernel = "pointwise" | "reduction"`
(checked by `verify_module`), launched by a plain `func.call`. Why not an `ember.fused` op with a
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
from torch_mlir.dialects.ext import Dialect, DialectAlreadyLoadedError, Operand, Result, result

KERNEL_ATTR = "ember.kernel"
LIBRARY_ATTR = "ember.library"

# Library kernels ember knows how to call, with their operand counts (min, max).
EXTERN_TARGETS: dict[str, tuple[int, int]] = {
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
    """A call of a library kernel (matmul, batched matmul, convolution, attention)."""

    target: ir.StringAttr
    params: ir.DictAttr
    # One field per operand: IRDL binds a constraint variable to the first type it meets, so a
    # single variadic field would force all operands to share one type (see module docstring).
    a: Operand[Any]
    b: Operand[Any]
    out: Result[Any] = result()
    c: Optional[Operand[Any]] = None

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


KERNEL_KINDS = ("pointwise", "reduction")


def verify_module(module_op) -> None:
    """Checks what op verifiers cannot see alone: every function marked `ember.kernel` is private,
    has a body and a known kind; every `ember.library` declaration is private, body-less and
    describes its arguments and results. Emits a located diagnostic and raises `ValueError`."""
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and LIBRARY_ATTR in op.attributes:
            _verify_library(op)
            continue
        if op.operation.name != "func.func" or KERNEL_ATTR not in op.attributes:
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        attr = op.attributes[KERNEL_ATTR]
        kind = ir.StringAttr(attr).value if isinstance(attr, ir.StringAttr) else None
        problem = None
        if kind not in KERNEL_KINDS:
            problem = f"kernel @{name}: 'ember.kernel' must be one of {', '.join(KERNEL_KINDS)}"
        elif "sym_visibility" not in op.attributes or \
                ir.StringAttr(op.attributes["sym_visibility"]).value != "private":
            problem = f"kernel @{name} must be private"
        elif len(op.regions[0].blocks) == 0:
            problem = f"kernel @{name} has no body"
        if problem:
            op.location.emit_error(problem)
            raise ValueError(problem)


def _verify_library(op) -> None:
    """A library declaration (frontend/library_calls.py): private, no body, an op overload
    name (ATen's or a custom op's), one `ember.tensor_args` name per argument, one `ember.results` index per result."""
    name = ir.StringAttr(op.attributes["sym_name"]).value
    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    target = op.attributes[LIBRARY_ATTR]
    target = ir.StringAttr(target).value if isinstance(target, ir.StringAttr) else ""
    problem = None
    if len(target.split(".")) != 3 or not all(target.split(".")):
        # ATen's ops, or a registered custom op (torch.ops.<namespace>) ember cannot compile
        problem = (f"library @{name}: 'ember.library' must name an op overload "
                   "(<namespace>.<op>.<overload>, e.g. aten.sort.default)")
    elif "sym_visibility" not in op.attributes or \
            ir.StringAttr(op.attributes["sym_visibility"]).value != "private":
        problem = f"library @{name} must be private"
    elif len(op.regions[0].blocks) != 0:
        problem = f"library @{name} is a declaration: it must have no body"
    elif "ember.tensor_args" not in op.attributes or \
            len(ir.ArrayAttr(op.attributes["ember.tensor_args"])) != len(ftype.inputs):
        problem = f"library @{name}: 'ember.tensor_args' must name each of its {len(ftype.inputs)} arguments"
    elif "ember.results" not in op.attributes or \
            len(ir.DenseI64ArrayAttr(op.attributes["ember.results"])) != len(ftype.results):
        problem = f"library @{name}: 'ember.results' must give an output index for each of its {len(ftype.results)} results"
    if problem:
        op.location.emit_error(problem)
        raise ValueError(problem)
