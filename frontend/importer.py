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
from torch_mlir.extras.fx_importer import (TORCH_DTYPE_TO_MLIR_TYPE, TORCH_DTYPE_TO_NPY_TYPE,
                                           FxImporter, FxImporterHooks)
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


# Up to this many elements, a tensor literal (an index list, `x[[0, 2]]`) is imported as an
# inline `dense<...>` rather than torch-mlir's default `dense_resource` blob, which ember's
# schedule cannot read back: it runs as a host constant (passes/fusion_legality.cloneable).
INLINE_LITERAL_ELEMENTS = 1 << 14


class _Hooks(FxImporterHooks):
    def resolve_literal(self, gni, literal, info):
        import numpy as np
        import torch
        if not isinstance(literal, torch.Tensor) or not 1 < literal.numel() <= INLINE_LITERAL_ELEMENTS:
            return None
        npy = TORCH_DTYPE_TO_NPY_TYPE.get(literal.dtype)
        mlir_type = TORCH_DTYPE_TO_MLIR_TYPE.get(literal.dtype)
        if npy is None or mlir_type is None or literal.dtype in (torch.bfloat16, torch.float16) \
                or literal.is_complex():
            return None
        arr = np.array(literal.tolist()).astype(npy)
        attr = ir.DenseElementsAttr.get(arr, type=mlir_type(), shape=list(arr.shape))
        return ir.Operation.create("torch.vtensor.literal",
                                   results=[gni._cc.tensor_to_vtensor_type(literal)],
                                   attributes={"value": attr}).result


def import_fx(gm: fx.GraphModule, context: ir.Context | None = None,
              func_name: str = "main") -> ir.Module:
    """Imports `gm` (static shapes, tensor inputs and outputs) to linalg-on-tensors."""
    refuse_native_crashes(gm)
    ctx = context or new_context()
    importer = FxImporter(context=ctx, hooks=_Hooks())
    try:
        return stateless_fx_import(gm, output_type=OutputType.LINALG_ON_TENSORS,
                                   fx_importer=importer, model_name=func_name)
    except Exception as err:  # torch-mlir raises plain Exceptions with the diagnostics
        first = str(err).strip().splitlines()
        raise FxImportError(f"torch-mlir import failed: {first[0] if first else err!r}") from err
