"""Complex tensors: which nodes run as ATen calls inside the compiled program.

No ember kernel reads or writes complex elements (neither code generator has a complex type),
so every node whose inputs or results hold complex values is a library call
(frontend/library_calls.py): the FFTs (pocketfft / MKL / cuFFT; Inductor calls ATen for them
too), complex pointwise ops, conversions to complex. `view_as_real` / `view_as_complex` and the
other views of complex tensors are calls too, whose result aliases the operand: the
declaration is marked `ember.view`, and ember-buffer-reuse keeps the viewed buffer alive as long
as the view is (passes/ember_buffer_reuse.py). The real-valued arithmetic on the other side of a
`view_as_real` is generated code, as in Inductor, which views complex tensors as real ones.

Complex values flow between calls and in and out of the program through host-side buffers
(the runtime's dtype names `complex64` / `complex128`, frontend/export_program.py dtype_name).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx


# node.meta key (set by zero_size.py): the node reads a library call that will raise
AFTER_RAISING = "ember_after_raising"
# Ops on complex values (or producing them from real ones) that are library calls whatever
# their dtypes: the FFTs and the eigendecomposition, whose results are complex.
COMPLEX_LIBRARY_OPS = frozenset({
    "aten._fft_r2c.default", "aten._fft_c2c.default", "aten._fft_c2r.default",
    "aten.linalg_eig.default",
})


def _vals(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (tuple, list)):
        return [x for x in v if isinstance(x, torch.Tensor)]
    return []


def touches_complex(node: fx.Node) -> bool:
    """Whether an input or a result of `node` is a complex tensor."""
    vals = _vals(node.meta.get("val"))
    for inp in node.all_input_nodes:
        vals.extend(_vals(inp.meta.get("val")))
    return any(v.dtype.is_complex for v in vals)


def _mutates(node: fx.Node) -> bool:
    schema = node.target._schema
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def is_view(node: fx.Node) -> bool:
    """An ATen op whose result aliases an operand (`view_as_real`, `permute`, `_conj`)."""
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and
                any(r.alias_info is not None for r in schema.returns) and not _mutates(node))


def is_complex_library_node(node: fx.Node) -> bool:
    """A node that must be an ATen call because of complex values (see the module docstring):
    not a getitem (it goes with its producer), not a mutation."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    name = str(node.target)
    if name in COMPLEX_LIBRARY_OPS:
        return True
    if node.meta.get(AFTER_RAISING):     # see zero_size._library_raises
        return True
    if node.target is torch.ops.aten.empty_strided.default and any(
            str(u.target) in COMPLEX_LIBRARY_OPS for u in node.users):
        # the empty operand of an FFT that raises (zero_size._library_raises): made by the call
        return True
    return touches_complex(node) and not _mutates(node)
