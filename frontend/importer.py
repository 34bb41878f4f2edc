"""FX graph -> linalg-on-tensors MLIR, in a context where the ember dialect is loaded.

`stateless_fx_import` keeps parameters as function arguments (never `export_and_import`, which
freezes weights into the IR as constants). It creates its own context unless given an importer,
so the importer is built on ember's context: the passes later parse/create ember ops there.
"""
from __future__ import annotations

import torch.fx as fx
from torch_mlir import ir
from torch_mlir.compiler_utils import OutputType
from torch_mlir.dialects import torch as torch_d
from torch_mlir.extras.fx_importer import FxImporter
from torch_mlir.fx import stateless_fx_import

from ..dialects import make_context


class FxImportError(RuntimeError):
    """torch-mlir could not import or lower the graph (an unsupported op, usually)."""


def new_context() -> ir.Context:
    ctx = make_context()
    torch_d.register_dialect(ctx)
    return ctx


def refuse_native_crashes(gm: fx.GraphModule) -> None:
    """Raises FxImportError for graphs torch-mlir's native code is known to crash on (a signal,
    not an exception, so nothing after it could fall back): compute on tensors without elements
    (SIGFPE in its reshape inference; fx_prep folds them away where it can) and a Python integer
    operand of an int8/uint8 op (SIGSEGV after "convertScalarToDtype" fails; fx_prep makes such
    operands 0-dim tensors)."""
    from .fx_prep import narrow_int_scalar_args
    from .zero_size import touches_empty
    for node in gm.graph.nodes:
        if touches_empty(node):
            raise FxImportError(f"{node.name} ({node.target}) reads or makes a tensor without "
                                f"elements next to ones with elements; torch-mlir cannot import it")
        if any(not is_tensor and node.target._overloadname == "Scalar"
               for _, is_tensor in narrow_int_scalar_args(node)):
            raise FxImportError(f"{node.name} ({node.target}) takes a Python integer in an "
                                f"int8/uint8 op; torch-mlir cannot import it")


def _import_symbolic(gm: fx.GraphModule, importer: FxImporter, func_name: str) -> ir.Module:
    """A graph with symbolic sizes (frontend/symbolic.py), lowered with torch-mlir's strict
    symbolic-shape semantics: its legacy `aten.view` lowering pairs up `?` dims by position
    (a `view(x, [-1, 4])` of a `?x?` tensor becomes the identity), while the strict one reshapes
    to the sizes computed on the host; and a symbolic dim is never 1 (Dynamo specializes 0 and
    1), so broadcasting needs no run-time test of it."""
    from torch_mlir import fx as torch_fx
    importer.import_stateless_graph(gm.graph, func_name=func_name)
    module = importer.module
    with module.context:
        for op in module.body.operations:
            if op.operation.name == "func.func":
                op.attributes["torch.disable_legacy_view"] = ir.UnitAttr.get()
                op.attributes["torch.assume_strict_symbolic_shapes"] = ir.UnitAttr.get()
    return torch_fx._module_lowering(False, False, OutputType.LINALG_ON_TENSORS, module)


def import_fx(gm: fx.GraphModule, context: ir.Context | None = None,
              func_name: str = "main", symbolic: bool = False) -> ir.Module:
    """Imports `gm` (tensor inputs and outputs; static shapes unless `symbolic`) to
    linalg-on-tensors."""
    refuse_native_crashes(gm)
    ctx = context or new_context()
    importer = FxImporter(context=ctx)
    try:
        if symbolic:
            return _import_symbolic(gm, importer, func_name)
        return stateless_fx_import(gm, output_type=OutputType.LINALG_ON_TENSORS,
                                   fx_importer=importer, model_name=func_name)
    except Exception as err:  # torch-mlir raises plain Exceptions with the diagnostics
        first = str(err).strip().splitlines()
        raise FxImportError(f"torch-mlir import failed: {first[0] if first else err!r}") from err
