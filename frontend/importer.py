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


def import_fx(gm: fx.GraphModule, context: ir.Context | None = None,
              func_name: str = "main") -> ir.Module:
    """Imports `gm` (static shapes, tensor inputs and outputs) to linalg-on-tensors."""
    ctx = context or new_context()
    importer = FxImporter(context=ctx)
    try:
        return stateless_fx_import(gm, output_type=OutputType.LINALG_ON_TENSORS,
                                   fx_importer=importer, model_name=func_name)
    except Exception as err:  # torch-mlir raises plain Exceptions with the diagnostics
        first = str(err).strip().splitlines()
        raise FxImportError(f"torch-mlir import failed: {first[0] if first else err!r}") from err
