"""ember-library-views: a library call reads a transposed or sliced operand as a strided view of
the buffer it comes from, instead of a copy a kernel would make.

Attention is the case: `q, k, v = qkv.split(...)`, each `.view(B, S, H, D).transpose(1, 2)`,
then `scaled_dot_product_attention(q, k, v)`. In linalg the operands are `tensor.extract_slice`
/ `tensor.expand_shape` / `linalg.transpose` of the projection's result, which ember-fuse would
turn into a copy kernel per operand; eager hands the attention kernel strided views of the one
projection buffer, and so does ember after this pass.

Invariant established: every `func.call` in a public function of a library declaration of a
fused-attention forward or backward op (`ATTENTION`, `ATTENTION_BACKWARD`), whose declaration has that one call and no
`ember.view`, takes for each operand that was a chain of `tensor.extract_slice` (static, unit
or larger steps), `tensor.expand_shape`, `tensor.collapse_shape` and `linalg.transpose` ops
whose composed view is strided (a collapse of dims that are not one stride apart, as
nn.MultiheadAttention's [S, B, E] -> [S, B * H, D], counts where a later expand splits the
merged dim back along its parts: `Layout`) of a statically shaped value R that is a buffer
in any case (a graph input, an `ember.extern` or library call result: the pass runs after
ember-convert-externs) — with at least one slice or transpose in the chain, and its innermost
stride 1 — the value R itself; the same for a `BROADCAST_OPERANDS` op (scatter_add) whose
operand chain also holds broadcasting copies (a `linalg.generic` yielding its one input
through a projection: stride 0 for the broadcast dims, innermost stride 0 allowed), and an
attention's mask or bias operand (`BIAS_OPERANDS`, cuDNN's attention excepted) whose chain
holds them (innermost stride 1); the
declaration's argument type is R's type and `ember.operand_views` holds, per such operand,
`[operand, element offset, sizes..., strides...]`: the view of R's row-major buffer that the
chain computed. Chain ops left without users are erased. Each result whose one user is a
`linalg.transpose` becomes that transpose (`ember.result_views`: the runtime permutes the op's
tensor) where the op lays the result out so that the permuted tensor is row-major: a forward's
output (every kernel writes it [B, S, H, D]), a backward's gradient where `GRADIENT_LAYOUT`
says its kernel gives it that layout for the operand it was handed (an argument the
function's `ember.arg_strides` names is handed as it comes, with those strides). Everything
else is left alone.

The runtime (runtime/externs.py) makes that view with `as_strided` before the call; every
buffer ember allocates is row-major, which is what the strides assume. Eager passed the same
strided views (the FX graph is eager's program), so the library kernel eager chose is chosen.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from torch_mlir import ir

from ..dialects.contract import (ARG_STRIDES, EXTERN_OP, LIBRARY, OPERAND_VIEWS, RESULT_VIEWS,
                                 RESULTS, TENSOR_ARGS, VIEW, is_library)
from .base import Pass
from .graph_utils import defining_op, op_name

# the fused attention forwards (torch's dispatcher re-picks among them: runtime/externs.py)
ATTENTION = ("aten._scaled_dot_product_efficient_attention.default",
             "aten._scaled_dot_product_flash_attention.default",
             "aten._scaled_dot_product_cudnn_attention.default",
             "aten._scaled_dot_product_flash_attention_for_cpu.default")
# and their backward, which eager also hands strided views (the saved output and the incoming
# gradient transposed to [B, H, S, D]; on the CPU the saved logsumexp too), and whose
# gradients the next ops transpose back
ATTENTION_BACKWARD = ("aten._scaled_dot_product_efficient_attention_backward.default",
                      "aten._scaled_dot_product_flash_attention_backward.default",
                      "aten._scaled_dot_product_cudnn_attention_backward.default",
                      "aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
_CHAIN = ("tensor.extract_slice", "tensor.expand_shape", "tensor.collapse_shape",
          "linalg.transpose", "linalg.generic")
# library ops whose operands may be broadcasts (stride-0 views): torch reads any strides, and
# the embedding backward's `scatter_add` index is the token ids broadcast over the hidden dim
# (a copy kernel per embedding before)
BROADCAST_OPERANDS = ("aten.scatter_add.default",)
# and the attention operands that may be (innermost stride 1: the kernels read the bias's rows
# as vectors)
BIAS_OPERANDS = ("attn_bias", "attn_mask")


def _broadcast_map(op) -> list[int | None] | None:
    """For a `linalg.generic` that only broadcasts its one input (all loops parallel, the body
    yields the input, the output map the identity): per result dim, the input dim it reads
    (None: broadcast). None for any other op."""
    if op_name(op) != "linalg.generic" or len(op.operands) != 2 or len(op.results) != 1:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    kinds = [str(k) for k in ir.ArrayAttr(op.attributes["iterator_types"])]
    if any("parallel" not in k for k in kinds):
        return None
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    if len(body) != 1 or op_name(body[0]) != "linalg.yield" or \
            body[0].operands[0] != block.arguments[0]:
        return None
    out_map, in_map = maps[1], maps[0]
    out_dims, in_dims = _dim_positions(out_map), _dim_positions(in_map)
    if out_dims != list(range(out_map.n_dims)) or in_dims is None or \
            len(set(in_dims)) != len(in_dims):
        return None
    dims: list[int | None] = [None] * out_map.n_dims
    for p, d in enumerate(in_dims):
        dims[d] = p
    return dims


def _dim_positions(amap) -> list[int] | None:
    """The dim each result of an affine map is, or None if one is not a plain dim."""
    out = []
    for e in amap.results:
        try:
            out.append(ir.AffineDimExpr(e).position)
        except (ValueError, TypeError):
            return None
    return out


def _static_shape(value) -> list[int] | None:
    t = value.type
    if not isinstance(t, ir.RankedTensorType):
        return None
    t = ir.RankedTensorType(t)
    return list(t.shape) if t.has_static_shape else None


def _row_major(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def _i64s(op, name: str) -> list[int]:
    return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[name])]


def _groups(op) -> list[list[int]]:
    return [[int(ir.IntegerAttr(d).value) for d in ir.ArrayAttr(g)]
            for g in ir.ArrayAttr(op.attributes["reassociation"])]


def _simplify(parts: list) -> list:
    """A dim's (size, stride) parts, outer to inner, without unit parts (the last one kept
    where all are) and with neighbours that are one stride merged."""
    keep = [p for p in parts if p[0] != 1] or parts[-1:]
    out = [keep[0]]
    for n, st in keep[1:]:
        m, so = out[-1]
        if m != 1 and so == st * n:
            out[-1] = (m * n, st)
        else:
            out.append((n, st))
    return out


@dataclasses.dataclass
class Layout:
    """A view of a row-major buffer: per dim, its (size, stride) parts, outer to inner. A dim
    of several parts (a collapse of dims that are not one stride apart: GPT-2's or
    nn.MultiheadAttention's [S, B, 3E] projection read as [S, B * H, D]) is no strided view
    itself, but a later expand may split it back into dims of one stride each (`strides`)."""
    parts: list
    offset: int = 0

    @classmethod
    def row_major(cls, shape: list[int]) -> "Layout":
        return cls([[(n, st)] for n, st in zip(shape, _row_major(shape))])

    @property
    def sizes(self) -> list[int]:
        out = []
        for dim in self.parts:
            n = 1
            for m, _ in dim:
                n *= m
            out.append(n)
        return out

    @property
    def strides(self) -> list[int] | None:
        """One stride per dim; None where a dim is still of several parts."""
        dims = [_simplify(d) for d in self.parts]
        return None if any(len(d) != 1 for d in dims) else [d[0][1] for d in dims]

    def apply(self, op, result_shape: list[int]) -> "Layout | None":
        """The layout of `op`'s result given this one for its source; None: not a view."""
        name = op_name(op)
        parts = [_simplify(d) for d in self.parts]
        sizes = self.sizes
        if name == "linalg.transpose":
            return Layout([parts[p] for p in _i64s(op, "permutation")], self.offset)
        if name == "tensor.extract_slice":
            if len(op.operands) != 1:       # dynamic offsets, sizes or strides
                return None
            offs, new_sizes, steps = (_i64s(op, k) for k in
                                      ("static_offsets", "static_sizes", "static_strides"))
            offset, dims = self.offset, []
            for d, (o, n, k) in enumerate(zip(offs, new_sizes, steps)):
                if (o, n, k) == (0, sizes[d], 1):
                    dims.append(parts[d])           # untouched, whatever its parts
                elif len(parts[d]) == 1:
                    offset += o * parts[d][0][1]
                    dims.append([(n, parts[d][0][1] * k)])
                else:
                    return None
            if new_sizes != result_shape:   # rank-reducing: drop the unit dims it drops
                keep, j = [], 0
                for d, n in enumerate(new_sizes):
                    if j < len(result_shape) and result_shape[j] == n:
                        keep.append(d)
                        j += 1
                    elif n != 1:
                        return None
                if j != len(result_shape):
                    return None
                dims = [dims[d] for d in keep]
            return Layout(dims, offset)
        if name == "tensor.expand_shape":
            groups = _groups(op)
            if len(groups) != len(parts):
                return None     # a 0-dim source expanded to [1] (no reassociation groups)
            dims = []
            for d, group in enumerate(groups):
                split = _split(list(parts[d]), [result_shape[r] for r in group])
                if split is None:
                    return None
                dims += split
            return Layout(dims, self.offset) if len(dims) == len(result_shape) else None
        if name == "linalg.generic":
            dmap = _broadcast_map(op)
            if dmap is None or len(dmap) != len(result_shape) \
                    or any(p is not None and not 0 <= p < len(parts) for p in dmap):
                return None     # (a 0-dim index broadcast: embedding of one id, op_db)
            dims = []
            for j, p in enumerate(dmap):
                if p is not None and sizes[p] != result_shape[j]:
                    return None
                dims.append([(result_shape[j], 0)] if p is None else parts[p])
            return Layout(dims, self.offset)
        if name == "tensor.collapse_shape":
            return Layout([_simplify([x for d in group for x in parts[d]])
                           for group in _groups(op)], self.offset)
        return None


def _split(parts: list, sizes: list[int]) -> list | None:
    """`parts` of one dim (outer to inner) cut into dims of `sizes` (outer to inner): each
    new dim takes whole parts or an outer share of one; None where a size straddles a part
    boundary unevenly. A unit dim's stride is the span of what follows it (row-major)."""
    out = []
    for t in sizes:
        parts = [p for p in parts if p[0] != 1] or parts[-1:]
        if t == 1:
            n, st = parts[0] if parts else (1, out[-1][-1][1])
            out.append([(1, n * st if parts and n != 1 else st)])
            continue
        acc, need = [], t
        while need > 1:
            if not parts or parts[0][0] == 1:
                return None
            n, st = parts[0]
            if need % n == 0:
                acc.append((n, st))
                need //= n
                parts = parts[1:]
            elif n % need == 0:
                acc.append((need, st * (n // need)))
                parts = [(n // need, st)] + parts[1:]
                need = 1
            else:
                return None
        out.append(acc)
    return out if all(p[0] == 1 for p in parts) else None


def _chain(value, broadcasts: bool = False) -> tuple[object, list]:
    """(root value, view ops from the root towards `value`) along single-source view ops
    (`broadcasts`: and broadcasting copies)."""
    ops = []
    while True:
        owner = defining_op(value)
        if owner is None or op_name(owner) not in _CHAIN:
            break
        if op_name(owner) == "linalg.generic" and (not broadcasts
                                                    or _broadcast_map(owner) is None):
            break
        ops.append(owner)
        value = owner.operands[0]
    return value, ops[::-1]


def _materialized(value) -> bool:
    """Whether `value` is a buffer whatever ember-fuse decides: a graph input, a library call's
    or an `ember.extern`'s result. (A pointwise value could instead be computed inside the copy
    kernel this pass removes: making it a buffer of its own would cost more than it saves.)"""
    owner = defining_op(value)
    return owner is None or op_name(owner) in (EXTERN_OP, "func.call")


def _view_of(operand, broadcasts: bool = False,
             inner_broadcast: bool = True) -> tuple[object, Layout, list] | None:
    root, ops = _chain(operand, broadcasts)
    if not ops or not any(op_name(o) in ("tensor.extract_slice", "linalg.transpose",
                                         "linalg.generic") for o in ops):
        return None         # reshapes only: already a free view
    if not _materialized(root):
        return None
    shape = _static_shape(root)
    if shape is None or _static_shape(operand) is None:
        return None
    if ir.RankedTensorType(root.type).element_type != \
            ir.RankedTensorType(operand.type).element_type:
        return None
    layout = Layout.row_major(shape)
    for op in ops:
        layout = layout.apply(op, _static_shape(op.results[0]))
        if layout is None:
            return None
    inner = (1, 0) if broadcasts and inner_broadcast else (1,)
    strides = layout.strides
    if strides is None or layout.sizes != _static_shape(operand) or \
            (strides and strides[-1] not in inner and layout.sizes[-1] != 1):
        return None
    return root, layout, ops


def _erase_dead(ops: list) -> None:
    """Erases those of `ops` (chains, possibly sharing ops) that nothing uses any more."""
    live = list(dict.fromkeys(ops))
    changed = True
    while changed:
        changed = False
        for op in list(live):
            if all(len(list(r.uses)) == 0 for r in op.results):
                live.remove(op)
                op.erase()
                changed = True


@dataclasses.dataclass(frozen=True)
class EmberLibraryViews(Pass):
    name = "ember-library-views"
    summary = ("Library calls (attention) read transposed / sliced operands as strided views of "
               "their source buffer instead of copies")
    # operands of dynamic shape are left as they are (`_view_of` needs static shapes)
    dynamic_shapes: ClassVar[bool] = True

    def run(self, module: ir.Operation) -> None:
        wanted = set(ATTENTION) | set(ATTENTION_BACKWARD) | set(BROADCAST_OPERANDS)
        decls, calls, homes = {}, {}, {}
        for op in module.regions[0].blocks[0].operations:
            if op_name(op) != "func.func":
                continue
            sym = ir.StringAttr(op.attributes["sym_name"]).value
            if is_library(op):
                decls[sym] = op
                continue
            for block in op.regions[0].blocks:
                for inner in block.operations:
                    if op_name(inner) == "func.call":
                        callee = ir.FlatSymbolRefAttr(inner.attributes["callee"]).value
                        calls.setdefault(callee, []).append(inner)
                        homes[callee] = op
        for sym, decl in decls.items():
            sites = calls.get(sym, [])
            if len(sites) != 1 or VIEW.has(decl) or LIBRARY.get(decl) not in wanted:
                continue
            with module.context, ir.Location.unknown():
                self._rewrite(decl, sites[0])
                backward = LIBRARY.get(decl) in ATTENTION_BACKWARD
                strided = {a: s for a, *s in ARG_STRIDES.get(homes[sym], [])}
                _fold_result_transposes(
                    decl, sites[0],
                    _gradient_layouts(decl, sites[0], strided) if backward else None)

    @staticmethod
    def _rewrite(decl, call) -> None:
        views, dead = [], []
        ftype = ir.FunctionType(ir.TypeAttr(decl.attributes["function_type"]).value)
        inputs = list(ftype.inputs)
        lib = LIBRARY.get(decl)
        names = TENSOR_ARGS.get(decl, [])
        for k, operand in enumerate(call.operands):
            # an attention's mask or bias may be a broadcast too (its innermost stride 1):
            # memory-efficient attention's bias is the [B, 1, S, S] mask expanded over the
            # heads, which eager hands the kernel as a stride-0 view (SDPA's preprocess_mask);
            # a copy kernel of [B, H, S, S] before (25 MB a forward in GPT-2 fp32)
            # (not cuDNN's: how its graphs take a stride-0 bias is not measured)
            bias = lib in ATTENTION + ATTENTION_BACKWARD and "cudnn" not in lib \
                and k < len(names) and names[k] in BIAS_OPERANDS
            found = _view_of(operand, lib in BROADCAST_OPERANDS or bias,
                             inner_broadcast=not bias)
            if found is None:
                continue
            root, layout, ops = found
            call.operands[k] = root
            inputs[k] = root.type
            views.append([k, layout.offset, *layout.sizes, *layout.strides])
            dead += ops
        if not views:
            return
        decl.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(inputs, list(ftype.results)))
        OPERAND_VIEWS.set(decl, views)
        _erase_dead(dead)


# an attention backward's gradients, by result index, and the operand each is laid out like
_GRADIENT_OF = {0: "query", 1: "key", 2: "value"}
# How each backward lays its gradients out (torch 2.11; cuDNN's and flash's measured on an H100
# for packed, dense [B, S, H, D] and plain [B, H, S, D] q, k, v; the CPU kernel here):
# "order": dense, in the operand's own dim order (its strides where it is dense; GPT-2's q
# sliced from the packed projection gets a dense [B, S, H, D] gradient); "bshd": always
# [B, S, H, D]. The memory-efficient backward is "bshd" whatever q, k, v are: its SDPA entry
# transposes them to [B, S, H, D] and `_efficient_attention_backward` allocates each gradient
# `empty(query.sizes())` of that transpose (aten/src/ATen/native/transformers/cuda/
# attention_backward.cu; torch's meta function says the same, `empty_permuted(..., (0, 2, 1,
# 3))`). It was taken for "the operand's strides where dense": GPT-2's packed q, k, v then got
# no result view and the runtime copied each gradient contiguous, 3 copy kernels a layer (the
# 36 aten copies of ~5.7 us in GPT-2's bf16 training step profiled on an H200). Where a kernel
# lays a gradient out otherwise, the runtime still copies it (`_permuted`): slower, not wrong.
GRADIENT_LAYOUT = {
    "aten._scaled_dot_product_cudnn_attention_backward.default": "order",
    "aten._scaled_dot_product_flash_attention_backward.default": "order",
    "aten._scaled_dot_product_efficient_attention_backward.default": "bshd",
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": "bshd",
}


def _gradient_layouts(decl, call, strided: dict | None = None) -> dict[int, list[int]]:
    """Result position -> the strides an attention backward gives that gradient
    (`GRADIENT_LAYOUT`), from the operand it is laid out like: the operand's view
    (`ember.operand_views`), the strides the caller passes it with where it is an argument
    of the function that `strided` names (`ember.arg_strides`: the runtime hands it to the
    op as it comes), or its row-major buffer. A position is missing where the layout is not
    known."""
    kind = GRADIENT_LAYOUT.get(LIBRARY.get(decl))
    names = TENSOR_ARGS.get(decl, [])
    views = {v[0]: v for v in OPERAND_VIEWS.get(decl, [])}
    out = {}
    for pos, index in enumerate(RESULTS.get(decl, [])):
        name = _GRADIENT_OF.get(index)
        if kind is None or name not in names:
            continue
        k = names.index(name)
        shape = _static_shape(call.operands[k]) if k not in views else None
        arg = _argument_number(call.operands[k])
        if k in views:
            rank = (len(views[k]) - 2) // 2
            sizes, strides = views[k][2:2 + rank], views[k][2 + rank:]
        elif shape is not None and strided and arg in strided \
                and len(strided[arg]) == len(shape):
            sizes, strides = shape, list(strided[arg])
        elif shape is not None:
            sizes, strides = shape, _row_major(shape)
        else:
            continue
        if len(sizes) != 4:
            continue
        order = sorted(range(4), key=lambda d: -strides[d])
        ordered = _row_major([sizes[d] for d in order])
        in_order = [0] * 4      # dense strides in the operand's dim order
        for pos_, d in enumerate(order):
            in_order[d] = ordered[pos_]
        bshd = _row_major([sizes[0], sizes[2], sizes[1], sizes[3]])
        if kind == "bshd":
            out[pos] = [bshd[0], bshd[2], bshd[1], bshd[3]]
        elif kind == "order":
            out[pos] = in_order
    return out


def _argument_number(value) -> int | None:
    """The position of `value` among its block's arguments, None for an op's result."""
    if not isinstance(value.owner, ir.Block):
        return None
    return ir.BlockArgument(value).arg_number


def _fold_result_transposes(decl, call, layouts: dict[int, list[int]] | None = None) -> None:
    """Each result of `call` whose one user is a `linalg.transpose` becomes the transposed
    value itself, `ember.result_views` naming the permutation: the runtime permutes the op's
    tensor, a free view where the op lays its result out that way (attention's output, which
    the next projection reads as [B, S, H * D]: a copy kernel each before, and a copy the
    runtime made to hand the result on contiguous)."""
    from torch_mlir.dialects import func

    perms, types, folded = [], [], {}
    for k, r in enumerate(call.results):
        uses = list(r.uses)
        t = uses[0].owner if len(uses) == 1 else None
        perm = _i64s(t, "permutation") if t is not None and \
            op_name(t) == "linalg.transpose" else None
        if perm is not None and layouts is not None:
            # a backward's gradient: only where the op lays it out transposed (a free view;
            # otherwise the runtime would copy it, slower than the kernel reading the transpose)
            strides = layouts.get(k)
            shape = _static_shape(r)
            if strides is None or shape is None or \
                    [strides[d] for d in perm] != _row_major([shape[d] for d in perm]):
                perm = None
        if perm is not None and uses[0].operand_number == 0 \
                and _static_shape(t.results[0]) is not None:
            perms.append([k, *perm])
            types.append(t.results[0].type)
            folded[k] = t
        else:
            types.append(r.type)
    if not perms:
        return
    with ir.InsertionPoint(call), call.location:
        new = func.CallOp(types, ir.FlatSymbolRefAttr(call.attributes["callee"]),
                          list(call.operands))
    for name in [a if isinstance(a, str) else a.name for a in call.attributes]:
        if name not in new.attributes:
            new.attributes[name] = call.attributes[name]
    for k, r in enumerate(call.results):
        source = folded[k].results[0] if k in folded else r
        source.replace_all_uses_with(new.results[k])
    for t in folded.values():
        t.erase()
    call.erase()
    ftype = ir.FunctionType(ir.TypeAttr(decl.attributes["function_type"]).value)
    decl.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(list(ftype.inputs), types))
    RESULT_VIEWS.set(decl, perms)
