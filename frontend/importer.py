"""FX graph -> linalg-on-tensors MLIR, in a context where the ember dialect is loaded.

The graph is imported stateless, as torch-mlir's `stateless_fx_import` does (parameters stay
function arguments; never `export_and_import`, which freezes weights into the IR as constants),
on ember's context (the passes later parse/create ember ops there), and lowered by torch-mlir's
two pipelines run here: its own runner writes a repro file into /tmp for every failed lowering.
"""
from __future__ import annotations

import torch
import torch.fx as fx
from torch_mlir import ir, passmanager
from torch_mlir.dialects import torch as torch_d
from torch_mlir.extras.fx_importer import (TORCH_DTYPE_TO_MLIR_TYPE, TORCH_DTYPE_TO_NPY_TYPE,
                                           FxImporter, FxImporterHooks)

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


# torch-mlir's lowering of an imported FX graph (torch_mlir.fx._module_lowering and
# compiler_utils.lower_mlir_module for OutputType.LINALG_ON_TENSORS, default options).
TORCH_MLIR_PIPELINES = (
    "builtin.module(func.func(torch-match-quantized-custom-ops), "
    "torchdynamo-export-to-torch-backend-pipeline{ extra-library=})",
    "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline{allow-non-finites=True})",
)


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


def _strict_symbolic(module: ir.Module) -> None:
    """A graph with symbolic sizes (frontend/symbolic.py) is lowered with torch-mlir's strict
    symbolic-shape semantics: its legacy `aten.view` lowering pairs up `?` dims by position
    (a `view(x, [-1, 4])` of a `?x?` tensor becomes the identity), while the strict one reshapes
    to the sizes computed on the host; and a symbolic dim is never 1 (Dynamo specializes 0 and
    1), so broadcasting needs no run-time test of it."""
    for op in module.body.operations:
        if op.operation.name == "func.func":
            op.attributes["torch.disable_legacy_view"] = ir.UnitAttr.get()
            op.attributes["torch.assume_strict_symbolic_shapes"] = ir.UnitAttr.get()


def drop_stale_tensor_meta(gm: fx.GraphModule) -> None:
    """torch-mlir's importer types a node by its `tensor_meta` before its `val`: where a rewrite
    changed `val` (fx_prep computing a bf16 op in f32, a placeholder taken permuted, ...) a
    stale `tensor_meta` would type the op as before (`bf16_t * f32_0dim` was imported as a bf16
    multiply again: a wrong answer), so it is dropped wherever it disagrees with `val`."""
    for node in gm.graph.nodes:
        meta, val = node.meta.get("tensor_meta"), node.meta.get("val")
        if meta is None or not isinstance(val, torch.Tensor):
            continue
        if (getattr(meta, "dtype", None) != val.dtype
                or tuple(getattr(meta, "shape", ())) != tuple(val.shape)
                or tuple(getattr(meta, "stride", ())) != tuple(val.stride())):
            del node.meta["tensor_meta"]


def import_fx(gm: fx.GraphModule, context: ir.Context | None = None,
              func_name: str = "main", symbolic: bool = False) -> ir.Module:
    """Imports `gm` (tensor inputs and outputs; static shapes unless `symbolic`) to
    linalg-on-tensors."""
    refuse_native_crashes(gm)
    drop_stale_tensor_meta(gm)
    ctx = context or new_context()
    try:
        importer = FxImporter(context=ctx, hooks=_Hooks())
        importer.import_stateless_graph(gm.graph, func_name=func_name)
        module = importer.module
        with ctx:
            if symbolic:
                _strict_symbolic(module)
            # Passes can emit errors without signalling failure (torch-mlir #3506): report them.
            ctx.emit_error_diagnostics = True
            for pipeline in TORCH_MLIR_PIPELINES:
                passmanager.PassManager.parse(pipeline).run(module.operation)
        return module
    except Exception as err:  # torch-mlir raises plain Exceptions with the diagnostics
        first = str(err).strip().splitlines()
        raise FxImportError(f"torch-mlir import failed: {first[0] if first else err!r}") from err
