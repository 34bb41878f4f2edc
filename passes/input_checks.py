"""Input contracts of ember's passes, checked before a pass runs.

A pass declares what it handles (`Pass.dynamic_shapes`, `Pass.scalar_kernel_args`);
`unsupported_input` finds the first place in the module that the pass does not handle and
returns a `PassError` located there, so that such IR gets one `file:line:col: error:` line
instead of reaching code that assumes static tensors (and failing there with a Python
exception).
"""
from torch_mlir import ir

from ..dialects import verify_module
from ..dialects.contract import is_kernel
from .errors import PassError, Reported


def _dynamic(t: ir.Type) -> bool:
    if not isinstance(t, ir.ShapedType):
        return False
    return not t.has_rank or not t.has_static_shape


def _func_type(op: ir.Operation):
    attr = op.attributes["function_type"] if "function_type" in op.attributes else None
    return ir.FunctionType(ir.TypeAttr(attr).value) if attr is not None else None


def _arg_location(op: ir.Operation, i: int) -> ir.Location:
    if op.regions and op.regions[0].blocks:
        args = op.regions[0].blocks[0].arguments
        if i < len(args):
            return args[i].location
    return op.location


def _first_dynamic(module: ir.Operation) -> tuple[ir.Type, ir.Location] | None:
    found: list = []

    def visit(op):
        op = op.operation
        if op.name == "func.func":
            ft = _func_type(op)
            if ft is not None:
                for i, t in enumerate(ft.inputs):
                    if _dynamic(t):
                        found.append((t, _arg_location(op, i)))
                        return ir.WalkResult.INTERRUPT
                for t in ft.results:
                    if _dynamic(t):
                        found.append((t, op.location))
                        return ir.WalkResult.INTERRUPT
        for v in list(op.results) + list(op.operands):
            if _dynamic(v.type):
                found.append((v.type, op.location))
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found[0] if found else None


def _shape_arg(arg) -> bool:
    """A size or symbolic int (`index`, `i64`): the lowerings read such scalar arguments from
    the sizes table (kernel_schedule.scalar_args)."""
    t = arg.type
    return isinstance(t, ir.IndexType) or (isinstance(t, ir.IntegerType)
                                           and ir.IntegerType(t).width == 64)


def _first_scalar_kernel_arg(module: ir.Operation):
    """(kernel name, arg index, type, location of its first call, else of the kernel)."""
    kernels: dict[str, tuple[int, ir.Type, ir.Location]] = {}
    calls: dict[str, ir.Location] = {}

    def visit(op):
        op = op.operation
        if is_kernel(op):
            ft = _func_type(op)
            args = op.regions[0].blocks[0].arguments if op.regions[0].blocks else ()
            for i, t in enumerate(ft.inputs if ft is not None else ()):
                if not isinstance(t, ir.ShapedType) and not (i < len(args) and _shape_arg(args[i])):
                    name = ir.StringAttr(op.attributes["sym_name"]).value
                    kernels[name] = (i, t, op.location)
                    break
        elif op.name == "func.call" and "callee" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            calls.setdefault(callee, op.location)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    for name, (i, t, loc) in kernels.items():
        return name, i, t, calls.get(name, loc)
    return None


def unsupported_input(module: ir.Operation, p) -> PassError | None:
    """`p`: the pass (a base.Pass) about to run on `module`."""
    # Kernel and library declarations well-formed (e.g. a kernel has a body): every pass
    # relies on it; verify_module emits its own located error.
    try:
        verify_module(module, attributes=False)     # the attributes: after each pass
    except (ValueError, RuntimeError):
        return Reported()
    if not p.dynamic_shapes:
        hit = _first_dynamic(module)
        if hit is not None:
            t, loc = hit
            return PassError(f"{p.name}: dynamic shapes are not supported by this pass (found "
                             f"{t}); ember compiles static shapes", loc)
    if not p.scalar_kernel_args:
        hit = _first_scalar_kernel_arg(module)
        if hit is not None:
            name, i, t, loc = hit
            return PassError(f"{p.name}: kernel @{name} takes a scalar argument (#{i}: {t}); "
                             f"scalar kernel arguments are not supported by this pass", loc)
    return None
