"""ember-convert-externs: library-call patterns, each op kind that a vendor library computes
better than generated code becomes an `ember.extern` (docs/internals.md, stage 2, "Matmul-like
named ops").

Invariant established: in every public function, each `linalg.matmul` / `linalg.batch_matmul`
with the default indexing maps, each convolution torch-mlir emits for a forward
`aten.convolution`, and each 2-D max / sum pooling whose init and padding are the reduction's
identity is gone, replaced by an `ember.extern` (`callee` aten.mm / addmm / bmm / baddbmm /
convolution / max_pool2d / sum_pool2d) plus the views, widenings and adds that keep the
results' types; an f32/f64 product's bias add (maybe of its rows viewed as [S, B, N], torch's
`linear` on a 3-D input) whose sum only library calls, externs or the return read (through
views) is the addmm's bias, no add left (the row view a view of the addmm's result); ops left dead are erased.
Nothing else changes. With `conv-bias=after` or `after-wide`, a convolution's bias (of the kinds
that option names) is not an operand of the call but a `linalg.generic` add right after it,
which ember-fuse fuses into the consumer's kernel: on CUDA, ATen's cuDNN path adds it in a
kernel of its own (Inductor peels it likewise).

One pattern class per library op (`MatmulToExtern`, `ConvolutionToExtern`, `PoolingToExtern`),
each with the op names it roots at and `rewrite(op) -> bool`. They are applied by one walk over
the function body in program order, not by MLIR's greedy driver: the greedy driver also folds
and reorders, which would change the IR that kernels are generated from. The dead ops are
erased by that driver with no patterns and folding off (`erase_dead`). ember-fuse applies the
same patterns first unless `externs=false`.
"""
import dataclasses

from torch_mlir import ir, rewrite
from torch_mlir.dialects import tensor

from ..dialects.contract import EXTERN_OP
from . import externs
from .base import Pass, option
from .externs import fill_is_zero, make_extern, narrow_source
from .graph_utils import defining_op, op_name, users
from .ir_queries import is_reduction


def _transposed_source(value):
    """If `value` is a 2-D transpose of X (last two dims swapped), returns X. Also through a
    collapse of the leading dims after the transpose (torch's 4-D `k.transpose(-2, -1)`
    viewed as 3-D for bmm): collapse(transpose(X)) is transpose(collapse(X)), and the new
    collapse of X is returned; the transposed copy a kernel would write (its stores strided by
    the last dim) is then no copy, or one in X's order."""
    op = defining_op(value)
    if op is not None and op_name(op) == "tensor.collapse_shape":
        groups = [[int(ir.IntegerAttr(d).value) for d in ir.ArrayAttr(g)]
                  for g in ir.ArrayAttr(op.attributes["reassociation"])]
        rank = ir.RankedTensorType(op.operands[0].type).rank
        if rank < 3 or groups[-2:] != [[rank - 2], [rank - 1]]:
            return None
        src = _transposed_source(op.operands[0])
        if src is None or defining_op(op.operands[0]) is None \
                or op_name(defining_op(op.operands[0])) != "linalg.transpose":
            return None
        from torch_mlir.dialects import tensor
        t = ir.RankedTensorType(value.type)
        shape = list(t.shape[:-2]) + [t.shape[-1], t.shape[-2]]
        if any(n == ir.ShapedType.get_dynamic_size() for n in shape):
            return None     # (a dynamic collapse needs its sizes: left as it was)
        with ir.InsertionPoint(op), op.location:
            return tensor.CollapseShapeOp(ir.RankedTensorType.get(shape, t.element_type), src,
                                          op.attributes["reassociation"]).result
    if op is None or op_name(op) != "linalg.transpose":
        return None
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    rank = len(perm)
    if rank >= 2 and perm == list(range(rank - 2)) + [rank - 1, rank - 2]:
        return op.operands[0]
    return None


def _matmul_operand(value):
    """(the value a library matmul reads, whether it is read transposed) for a matmul operand:
    looks through a last-two-dims transpose and a widening to f32, in either order."""
    transposed = False
    src = _transposed_source(value)
    if src is not None:
        value, transposed = src, True
    narrow = narrow_source(value)
    if narrow is not None:
        value = narrow
        src = _transposed_source(value) if not transposed else None
        if src is not None:
            value, transposed = src, True
    return value, transposed


def _single_user(value):
    us = users(value)
    return us[0] if len(us) == 1 and len(list(value.uses)) == 1 else None


def _generic_body(op, n_inputs: int):
    """The body ops of an all-parallel, identity-output `linalg.generic` with `n_inputs`
    inputs (None for anything else)."""
    if op is None or op_name(op) != "linalg.generic" or len(op.opview.inputs) != n_inputs \
            or len(op.results) != 1:
        return None
    if is_reduction(op):
        return None
    out_map = ir.AffineMapAttr(list(ir.ArrayAttr(op.attributes["indexing_maps"]))[-1]).value
    if out_map != ir.AffineMap.get_identity(out_map.n_dims):
        return None
    return list(op.regions[0].blocks[0].operations)


def _narrow_epilogue(result, narrow_a, batched: bool):
    """For an f32 matmul of two bf16/f16 operands whose result is only rounded back to that
    type, optionally after adding a bias vector given in that type (torch-mlir's import of
    eager's `mm` / `bmm` / `addmm(bias, ...)`, computed in f32): (narrow bias or None, the
    rounding generic). None for anything else (the f32 result is read otherwise)."""
    narrow = ir.RankedTensorType(narrow_a.type).element_type
    bias = None
    op = _single_user(result)
    body = _generic_body(op, 2)
    if body is not None and not batched:
        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        args = list(op.regions[0].blocks[0].arguments)
        ins = list(op.opview.inputs)
        row = ir.AffineMap.get(2, 0, [ir.AffineDimExpr.get(1)])
        if (len(body) != 2 or op_name(body[0]) != "arith.addf"
                or set(body[0].operands) != {args[0], args[1]} or ins[0] != result
                or maps[0] != ir.AffineMap.get_identity(2) or maps[1] != row):
            return None
        bias = narrow_source(ins[1])
        if bias is None or ir.RankedTensorType(bias.type).element_type != narrow:
            return None
        op = _single_user(op.results[0])
    body = _generic_body(op, 1)
    if body is None or len(body) != 2 or op_name(body[0]) != "arith.truncf" \
            or body[0].operands[0] != op.regions[0].blocks[0].arguments[0]:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if maps[0] != ir.AffineMap.get_identity(maps[0].n_dims) \
            or ir.RankedTensorType(op.results[0].type).element_type != narrow:
        return None
    return bias, op


# ops through which a value is only viewed on the host or by a library call's strided
# operand (ember-library-views), never computed on
_VIEW_OPS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice",
             "linalg.transpose")
# readers that take a buffer as it is: a library call, an extern, the return; and matmuls
# (`_only_viewed`: the walk is in program order, so later ones become externs)
_BUFFER_READERS = ("func.call", EXTERN_OP, "func.return")


def _only_viewed(value) -> bool:
    """Whether every reader of `value`, through view ops, takes it as a buffer (no kernel
    computes on it): then a pointwise op that makes it is a kernel of its own."""
    for use in value.uses:
        user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        name = op_name(user)
        if name in _VIEW_OPS:
            if name == "linalg.transpose" and use.operand_number != 0:
                return False
            if not _only_viewed(user.results[0]):
                return False
        elif name in ("linalg.matmul", "linalg.batch_matmul"):
            if use.operand_number > 1 or not _default_matmul_maps(user):
                return False
        elif name not in _BUFFER_READERS:
            return False
    return True


def _row_split(result):
    """(the `tensor.expand_shape` that is `result`'s one user, its reassociation) where it
    only splits the rows of a 2-D `result` and keeps the columns as the last dim (torch's
    `linear` on a 3-D input: `mm` of the flattened rows, viewed back as [S, B, N]); None
    otherwise."""
    op = _single_user(result)
    if op is None or op_name(op) != "tensor.expand_shape" \
            or ir.RankedTensorType(result.type).rank != 2:
        return None
    groups = [[int(ir.IntegerAttr(d).value) for d in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(op.attributes["reassociation"])]
    if len(groups) != 2 or len(groups[1]) != 1:
        return None
    return op, groups


def _bias_epilogue(result):
    """For a matmul result whose one reader adds a bias vector over its columns (torch-mlir's
    import of `addmm(bias, a, b)`: `mm` then an add, maybe of the rows viewed as [S, B, N]:
    `_row_split`) and whose sum is only viewed (the q/k/v split of an attention projection,
    handed to the attention call as strided views; a returned value): (bias, the add, the
    row split or None). None for anything else: an add that a kernel fuses with a consumer
    costs no launch of its own, and stays generated code."""
    split = _row_split(result)
    added = split[0].results[0] if split is not None else result
    op = _single_user(added)
    body = _generic_body(op, 2)
    if body is None or len(body) != 2 or op_name(body[0]) != "arith.addf":
        return None
    args = list(op.regions[0].blocks[0].arguments)
    ins = list(op.opview.inputs)
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if added not in ins or set(body[0].operands) != {args[0], args[1]} \
            or body[1].operands[0] != body[0].results[0]:
        return None
    i = ins.index(added)
    bias = ins[1 - i]
    rank = ir.RankedTensorType(added.type).rank
    row = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)])
    element = ir.RankedTensorType(result.type).element_type
    # f32/f64 only: product and sum stay in the accumulator's type either way (and addmm is
    # the call eager made, which torch-mlir split); a bf16/f16 product would round once
    # instead of twice
    if maps[i] != ir.AffineMap.get_identity(rank) or maps[1 - i] != row \
            or ir.RankedTensorType(bias.type).rank != 1 or op.results[0].type != added.type \
            or ir.RankedTensorType(bias.type).element_type != element \
            or not isinstance(element, (ir.F32Type, ir.F64Type)):
        return None
    if not _only_viewed(op.results[0]):
        return None
    return bias, op, split


def _narrow_product(a, b, result) -> bool:
    """Operands already bf16/f16 (of one type) and an f32 result: torch-mlir's import of
    eager's narrow `mm` when neither operand needed a widening (a backward's input gradient,
    `grad @ w`, whose operands are bf16 values as they come). Like a widened product, it is
    eager's narrow call when the f32 result is only rounded back (`_narrow_epilogue`): cuBLAS
    writes the bf16 result itself, which a strided library call can read as a view. (Only for
    a zero-filled init: the narrow call has no accumulator operand.)"""
    def elem(v):
        return ir.RankedTensorType(v.type).element_type
    return str(elem(a)) in externs._NARROW and elem(a) == elem(b) \
        and isinstance(elem(result), ir.F32Type)


def _strip_transpose(value):
    src = _transposed_source(value)
    return (value, False) if src is None else (src, True)


def _default_maps(rank: int, batched: bool) -> list:
    """linalg's own maps of (batch_)matmul: A[.., m, k] * B[.., k, n] -> C[.., m, n]."""
    n = rank + 1
    d = [ir.AffineDimExpr.get(i) for i in range(n)]
    lead = d[:1] if batched else []
    m, nn, k = d[-3], d[-2], d[-1]
    return [ir.AffineMap.get(n, 0, lead + [m, k]), ir.AffineMap.get(n, 0, lead + [k, nn]),
            ir.AffineMap.get(n, 0, lead + [m, nn])]


def _default_matmul_maps(op) -> bool:
    if "indexing_maps" not in op.attributes:
        return True
    batched = op_name(op) == "linalg.batch_matmul"
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return maps == _default_maps(3 if batched else 2, batched)


class Pattern:
    """Rewrites one kind of op into library calls; `rewrite` returns whether it did."""

    roots: tuple[str, ...] = ()

    def rewrite(self, op) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class MatmulToExtern(Pattern):
    """`linalg.matmul` -> aten.mm (zero-filled init) / aten.addmm (any other init: operands
    init, a, b); `linalg.batch_matmul` -> aten.bmm / aten.baddbmm. Operands read transposed
    (last two dims) become `transpose_a/b` params; a bf16/f16 product widened to f32 and only
    rounded back (maybe after a bias add) is eager's own narrow call. An f32/f64 product
    plus a bias row whose sum is only viewed or returned (an attention projection's q/k/v, a
    classifier's `linear`) is one aten.addmm too (`_bias_epilogue`)."""

    roots = ("linalg.matmul", "linalg.batch_matmul")

    def rewrite(self, op) -> bool:
        if not _default_matmul_maps(op):
            return False  # transposed/broadcast variants stay generic code
        a, b, init = op.operands[0], op.operands[1], op.operands[2]
        params = {}
        (na, ta), (nb, tb) = _matmul_operand(a), _matmul_operand(b)
        if na.type != a.type and (ir.RankedTensorType(na.type).element_type !=
                                  ir.RankedTensorType(nb.type).element_type
                                  or not fill_is_zero(init)):
            # Only a plain product of two operands of one low precision reads them narrow.
            (na, ta), (nb, tb) = _strip_transpose(a), _strip_transpose(b)
        narrow = na.type != a.type or (fill_is_zero(init)
                                       and _narrow_product(na, nb, op.results[0]))
        a, b = na, nb
        if ta:
            params["transpose_a"] = ir.BoolAttr.get(True)
        if tb:
            params["transpose_b"] = ir.BoolAttr.get(True)
        batched = op_name(op) == "linalg.batch_matmul"
        epilogue = _narrow_epilogue(op.results[0], a, batched) if narrow else None
        if epilogue is not None:
            # eager's own call (mm/bmm, or addmm with the bias) with the narrow result
            # cuBLAS rounds once: the same kernel, so the same bits.
            bias, final = epilogue
            callee = "aten.addmm" if bias is not None else ("aten.bmm" if batched else "aten.mm")
            operands = [bias, a, b] if bias is not None else [a, b]
            new = make_extern(callee, operands, final.results[0].type, params, final)
            final.results[0].replace_all_uses_with(new.results[0])
            return True   # the f32 matmul, bias add and rounding are dead now
        # (not for narrow operands whose f32 product is read otherwise: that is mm's
        # widening overload, which addmm has not)
        bias = None if batched or narrow or not fill_is_zero(init) \
            else _bias_epilogue(op.results[0])
        if bias is not None:
            # eager's addmm: the bias in the library call's epilogue, the sum a buffer that
            # library calls read as strided views (no kernel for the add)
            bias, add, split = bias
            new = make_extern("aten.addmm", [bias, a, b], op.results[0].type, params, add)
            value = new.results[0]
            if split is not None:   # the sum viewed as the add saw it: [S, B, N]
                with ir.InsertionPoint(add), add.location:
                    value = tensor.ExpandShapeOp(
                        add.results[0].type, value, split[0].attributes["reassociation"],
                        [], split[0].attributes["static_output_shape"]).result
            add.results[0].replace_all_uses_with(value)
            return True   # the matmul, its row split and the add are dead now
        if fill_is_zero(init):
            callee, operands = ("aten.bmm" if batched else "aten.mm"), [a, b]
        else:
            callee, operands = ("aten.baddbmm" if batched else "aten.addmm"), [init, a, b]
        new = make_extern(callee, operands, op.results[0].type, params, op)
        op.results[0].replace_all_uses_with(new.results[0])
        op.operation.erase()
        return True


@dataclasses.dataclass(frozen=True)
class ConvolutionToExtern(Pattern):
    """Every linalg convolution of a forward `aten.convolution` -> one aten.convolution extern
    (passes/externs.py `conv_extern`; the replacement may be a view of its result). `bias`:
    where its bias is added (externs.CONV_BIAS)."""

    bias: str = "library"
    roots = tuple(externs.CONV_KINDS)

    def rewrite(self, op) -> bool:
        result = externs.conv_extern(op, self.bias)
        if not _replace(op, result):
            return False
        _fold_roundings(result)
        return True


def _fold_roundings(wide):
    """A bf16/f16 convolution's result is the library's narrow tensor widened to the IR's f32
    accumulator (`externs.widen`); torch-mlir rounds that f32 value straight back to the
    narrow type (its import of the bf16 `aten.convolution`). Widening then rounding to the
    same type is the identity, so those roundings read the library's tensor itself: without
    this, the rounded copy (the tensor eager's convolution returns, saved for the backward)
    was a kernel of its own per convolution, a full copy of its output (resnet50's training
    forward: 53 of them)."""
    narrow = narrow_source(wide)
    if narrow is None:
        return
    for user in users(wide):
        body = _generic_body(user, 1)
        if body is None or len(body) != 2 or op_name(body[0]) != "arith.truncf" or \
                body[0].operands[0] != user.regions[0].blocks[0].arguments[0] or \
                user.opview.inputs[0] != wide or user.results[0].type != narrow.type or \
                not _identity_maps(user):
            continue
        user.results[0].replace_all_uses_with(narrow)


def _identity_maps(op) -> bool:
    return all(ir.AffineMapAttr(m).value == ir.AffineMap.get_identity(
        ir.AffineMapAttr(m).value.n_dims) for m in ir.ArrayAttr(op.attributes["indexing_maps"]))


class PoolingToExtern(Pattern):
    """2-D max / sum pooling with the identity as init and padding -> aten.max_pool2d /
    aten.sum_pool2d (passes/externs.py `pooling_extern`)."""

    roots = ("linalg.pooling_nchw_max", "linalg.pooling_nchw_sum")

    def rewrite(self, op) -> bool:
        return _replace(op, externs.pooling_extern(op))


def _replace(op, result) -> bool:
    if result is None:
        return False
    op.results[0].replace_all_uses_with(result)
    op.operation.erase()
    return True


PATTERNS: tuple[Pattern, ...] = (MatmulToExtern(), ConvolutionToExtern(), PoolingToExtern())


def erase_dead(fn) -> None:
    """Erases the ops of `fn` left without users, by MLIR's greedy rewrite driver with no
    patterns, no folding, no constant CSE and no region simplification: all it does then is
    erase trivially dead ops (no uses, no side effects; `ember.extern` declares none, so it
    stays), repeatedly, in place, without reordering anything."""
    config = rewrite.GreedyRewriteConfig()
    config.enable_folding = False
    config.enable_constant_cse = False
    config.region_simplification_level = rewrite.GreedySimplifyRegionLevel.DISABLED
    rewrite.apply_patterns_and_fold_greedily(fn, rewrite.RewritePatternSet().freeze(), config)


def apply_patterns(fn, patterns=PATTERNS) -> None:
    """One walk over `fn`'s body in program order: the first pattern rooted at an op's name
    that rewrites it wins; dead ops are erased afterwards."""
    by_root: dict[str, list[Pattern]] = {}
    for p in patterns:
        for root in p.roots:
            by_root.setdefault(root, []).append(p)
    block = fn.regions[0].blocks[0]
    for op in list(block.operations):
        for p in by_root.get(op_name(op), ()):
            if p.rewrite(op):
                break
    erase_dead(fn)


def convert_externs(fn, conv_bias: str = "library") -> None:
    """Applies the library-call patterns to one function (ember-fuse's first step)."""
    apply_patterns(fn, (MatmulToExtern(), ConvolutionToExtern(conv_bias),
                        PoolingToExtern()))


def public_functions(module):
    for op in module.regions[0].blocks[0].operations:
        if op_name(op) == "func.func" and "sym_visibility" not in op.attributes \
                and len(op.regions[0].blocks) > 0:
            yield op


@dataclasses.dataclass(frozen=True)
class EmberConvertExterns(Pass):
    """Turns library-computed ops into `ember.extern` calls (see the module docstring)."""

    name = "ember-convert-externs"
    summary = ("Matmul, batched matmul, convolution and 2-D pooling become ember.extern "
               "library calls")

    dynamic_shapes = True
    # where a convolution's bias is added: in the library call, or in a generic after it that
    # fuses into the consumer kernel (f32/f64 only with "after-wide"; see externs.CONV_BIAS).
    # The default pipeline passes "after" on CUDA, where cuDNN takes no bias and ATen adds it
    # in a kernel of its own, "after-wide" on the other Triton targets
    conv_bias: str = option("library", choices=externs.CONV_BIAS)

    def run(self, module: ir.Operation) -> None:
        with module.context, ir.Location.unknown():
            for fn in public_functions(module):
                convert_externs(fn, self.conv_bias)
