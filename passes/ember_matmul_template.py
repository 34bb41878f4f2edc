"""ember-matmul-template: a library matmul and the pointwise kernel that consumes it become one
`matmul` kernel, so that a Triton matmul template can compute the product tile by tile and
apply the epilogue (bias, activation, residual add, cast) before the single store
(docs/internals.md, "Matmul templates").

Invariant established: every `ember.extern` `aten.mm` / `aten.bmm` / `aten.addmm` of static
shape in a public function whose result's only use is one operand of the only call of a
pointwise kernel K, where K reads that operand elementwise in its own order (every use is
through `expand_shape` / `collapse_shape` views into `linalg.generic` inputs with identity maps,
every generic of K has an identity output map, nothing K computes from it passes through a
transpose, broadcast or slice, and every result of K has the product's element count, split
as rows x columns of the product), is gone: K takes the product's operands instead (after its
own), its body starts with the product as linalg (`linalg.transpose` for an operand read
transposed, a zero-filled f32 `linalg.matmul` / `linalg.batch_matmul`, then the bias add and
rounding the library call did) and it is marked `ember.kernel = "matmul"`. Anything else is left
alone. With `narrow=false` bf16/f16 products stay library calls (cuBLAS's summation order is
what makes them bit-identical to eager; a template rounds the same f32 sum differently).

The lowering (ember-lower-to-triton, passes/triton_matmul.py) emits for such a kernel both the
template and the library call followed by the epilogue alone, and the launcher keeps whichever
ran faster on the first call.
"""
from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from ..dialects.contract import EXTERN_OP, KERNEL, OPS, is_kernel
from .base import Pass
from .graph_utils import op_name, users

_CALLEES = ("aten.mm", "aten.bmm", "aten.addmm")
_NARROW = ("bf16", "f16")
_VIEWS = ("tensor.expand_shape", "tensor.collapse_shape")


def _elt(value) -> str:
    return str(ir.RankedTensorType(value.type).element_type)


def _static(value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and \
        ir.RankedTensorType(value.type).has_static_shape


def _shape(value) -> list[int]:
    return list(ir.RankedTensorType(value.type).shape)


def _maps(op) -> list:
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _identity(m) -> bool:
    return m == ir.AffineMap.get_identity(m.n_dims)


def _elementwise_reader(kernel, arg) -> bool:
    """Whether `kernel` reads `arg` only at the point it writes (see the module docstring)."""
    block = kernel.regions[0].blocks[0]
    derived, work = {arg}, [arg]
    while work:
        v = work.pop()
        for use in list(v.uses):
            user = use.owner
            name = op_name(user)
            if name in _VIEWS:
                r = user.results[0]
            elif name == "linalg.generic":
                n_in = len(user.opview.inputs)
                if use.operand_number >= n_in or not _identity(_maps(user)[use.operand_number]):
                    return False
                r = user.results[0]
                if len(user.results) != 1:
                    return False
            elif name == "func.return":
                continue
            else:
                return False
            if r not in derived:
                derived.add(r)
                work.append(r)
    for op in block.operations:
        if op_name(op) == "linalg.generic" and not _identity(_maps(op)[-1]):
            return False
    return True


def _splits(shape: list[int], rows: int, cols: int) -> bool:
    """Whether a result of `shape` is the product's rows x cols in row-major order with a dim
    boundary between rows and columns (the template's tile decomposes into its dims)."""
    if math.prod(shape) != rows * cols:
        return False
    return any(math.prod(shape[k:]) == cols for k in range(len(shape) + 1))


def _generic(inputs, maps, out_type, body):
    """A parallel `linalg.generic` over `out_type`'s shape whose body is `body(args) -> value`."""
    from torch_mlir.dialects import linalg, tensor
    rank = ir.RankedTensorType(out_type).rank
    empty = tensor.EmptyOp(_shape_of(out_type), ir.RankedTensorType(out_type).element_type)
    par = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    gen = linalg.GenericOp([out_type], list(inputs), [empty.result],
                           ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                           ir.ArrayAttr.get([par] * rank))
    types = [ir.RankedTensorType(v.type).element_type for v in inputs] + \
        [ir.RankedTensorType(out_type).element_type]
    block = gen.regions[0].blocks.append(*types)
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(list(block.arguments))])
    return gen.results[0]


def _shape_of(t) -> list[int]:
    return list(ir.RankedTensorType(t).shape)


class _Product:
    """What one extern computes, in the terms the kernel body is built from."""

    def __init__(self, ext):
        self.ext = ext
        self.callee = ir.StringAttr(ext.attributes["callee"]).value
        params = ir.DictAttr(ext.attributes["params"])
        self.transpose = [("transpose_a" in params and ir.BoolAttr(params["transpose_a"]).value),
                          ("transpose_b" in params and ir.BoolAttr(params["transpose_b"]).value)]
        self.other_params = [params[i].name for i in range(len(params))
                             if params[i].name not in ("transpose_a", "transpose_b")]
        ops = list(ext.operands)
        self.bias = ops[0] if self.callee == "aten.addmm" else None
        self.a, self.b = (ops[1], ops[2]) if self.bias is not None else (ops[0], ops[1])
        self.result = ext.results[0]

    def operands(self) -> list:
        return [self.a, self.b] + ([self.bias] if self.bias is not None else [])

    def legal(self, narrow: bool) -> bool:
        vals = self.operands() + [self.result]
        if self.other_params or not all(_static(v) for v in vals):
            return False         # alpha / beta, symbolic sizes: the library call stays
        ta, tb, tr = _elt(self.a), _elt(self.b), _elt(self.result)
        if ta != tb or ta not in ("f32",) + _NARROW or tr not in ("f32", ta):
            return False
        if ta in _NARROW and not narrow:
            return False
        if self.bias is not None:
            rows_cols = _shape(self.result)
            bshape = _shape(self.bias)
            if bshape not in (rows_cols, rows_cols[-1:]):
                return False
            if _elt(self.bias) != tr:
                return False
        return True

    def build(self, args):
        """The product as linalg ops at the current insertion point, from `args` (a, b[, bias])
        of the kernel: returns the value of the extern's result type."""
        from torch_mlir.dialects import arith, linalg, tensor
        batched = self.callee == "aten.bmm"
        operands = []
        for v, t in zip(args[:2], self.transpose):
            if t:
                shape = _shape(v)
                perm = list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2]
                init = tensor.EmptyOp([shape[p] for p in perm],
                                      ir.RankedTensorType(v.type).element_type)
                v = linalg.transpose(v, outs=[init.result], permutation=perm)
            operands.append(v)
        rshape = _shape(self.result)
        f32 = ir.F32Type.get()
        empty = tensor.EmptyOp(rshape, f32)
        zero = arith.ConstantOp(f32, 0.0)
        fill = linalg.fill(zero.result, outs=[empty.result])
        mm = (linalg.batch_matmul if batched else linalg.matmul)(*operands, outs=[fill])
        rtype = self.result.type
        rank = len(rshape)
        ident = ir.AffineMap.get_identity(rank)
        narrow = _elt(self.result) != "f32"
        if self.bias is not None:
            bias = args[2]
            bmap = ident if _shape(bias) == rshape else \
                ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)])
            btype = ir.RankedTensorType(bias.type).element_type

            def add(xs):
                c = xs[1] if not narrow else arith.ExtFOp(f32, xs[1]).result
                s = arith.AddFOp(xs[0], c).result
                return arith.TruncFOp(btype, s).result if narrow else s
            return _generic([mm, bias], [ident, bmap, ident], rtype, add)
        if narrow:
            etype = ir.RankedTensorType(rtype).element_type
            return _generic([mm], [ident, ident], rtype,
                            lambda xs: arith.TruncFOp(etype, xs[0]).result)
        return mm


def _calls_of(module_body, sym: str) -> list:
    out = []
    for fn in module_body.operations:
        if op_name(fn) != "func.func" or not fn.regions[0].blocks:
            continue
        for op in fn.regions[0].blocks[0].operations:
            if op_name(op) == "func.call" and \
                    ir.FlatSymbolRefAttr(op.attributes["callee"]).value == sym:
                out.append(op)
    return out


def _fuse(product: _Product, call, kernel, module_body) -> bool:
    from torch_mlir.dialects import func
    ops = list(call.operands)
    if ops.count(product.result) != 1 or len(_calls_of(module_body, _sym(kernel))) != 1:
        return False
    j = ops.index(product.result)
    block = kernel.regions[0].blocks[0]
    if not _elementwise_reader(kernel, block.arguments[j]):
        return False
    rshape = _shape(product.result)
    rows, cols = math.prod(rshape[:-1]), rshape[-1]
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    if not all(_static(r) and _splits(_shape(r), rows, cols) for r in call.results):
        return False
    loc = kernel.location
    new_args = [block.add_argument(v.type, loc) for v in product.operands()]
    first = list(block.operations)[0]
    with ir.InsertionPoint(first), loc:
        value = product.build(new_args)
    block.arguments[j].replace_all_uses_with(value)
    block.erase_argument(j)
    inputs = [a.type for a in block.arguments]
    kernel.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(inputs, list(ftype.results)))
    KERNEL.set(kernel, "matmul")
    old = _sym(kernel)
    name = "ember_mm_" + old[len("ember_fused_"):] if old.startswith("ember_fused_") \
        else "ember_mm_" + old
    kernel.attributes["sym_name"] = ir.StringAttr.get(name)
    OPS.set(kernel, ["mm"] + list(OPS.get(kernel)) if OPS.has(kernel) else ["mm"])
    with ir.InsertionPoint(call), call.location:
        new = func.CallOp(list(ftype.results), ir.FlatSymbolRefAttr.get(name),
                          ops[:j] + ops[j + 1:] + product.operands())
    for key in list(call.attributes):
        if key != "callee":
            new.attributes[key] = call.attributes[key]
    for old_r, new_r in zip(call.results, new.results):
        old_r.replace_all_uses_with(new_r)
    call.erase()
    product.ext.erase()
    return True


def _sym(fn) -> str:
    return ir.StringAttr(fn.attributes["sym_name"]).value


@dataclasses.dataclass(frozen=True)
class EmberMatmulTemplate(Pass):
    """Folds a library matmul into the pointwise kernel that consumes it (module docstring)."""

    name = "ember-matmul-template"
    summary = ("A matmul extern and its pointwise consumer kernel become one 'matmul' kernel "
               "(a Triton template with the epilogue fused)")

    dynamic_shapes = True     # products of symbolic sizes are left alone (see `legal`)

    # bf16/f16 products too (within bf16 rounding of eager, not bit-identical to cuBLAS)
    narrow: bool = True

    def run(self, module: ir.Operation) -> None:
        body = module.regions[0].blocks[0]
        kernels = {_sym(op): op for op in body.operations if is_kernel(op)}
        with module.context, ir.Location.unknown():
            for fn in list(body.operations):
                if op_name(fn) != "func.func" or "sym_visibility" in fn.attributes \
                        or not fn.regions[0].blocks:
                    continue
                for op in list(fn.regions[0].blocks[0].operations):
                    if op_name(op) != EXTERN_OP:
                        continue
                    product = _Product(op)
                    if product.callee not in _CALLEES or not product.legal(self.narrow):
                        continue
                    us = users(product.result)
                    if len(us) != 1 or op_name(us[0]) != "func.call":
                        continue
                    kernel = kernels.get(ir.FlatSymbolRefAttr(us[0].attributes["callee"]).value)
                    if kernel is None or KERNEL.get(kernel) != "pointwise":
                        continue
                    _fuse(product, us[0], kernel, body)
