"""Makes any ATen FX graph importable (docs/internals.md, stage 1).

torch-mlir's importer cannot return `None`, graph inputs, views of graph inputs or Python
scalars, and dynamic graphs carry SymInt placeholders. `specialize` turns a dynamic graph into a
static one for concrete inputs; `prepare` splits the outputs into those ember computes (unique,
tensors made by real compute) and those the host produces (constants, inputs and their views).
"""
from __future__ import annotations

import copy
import operator
from contextlib import nullcontext as _nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .decomp_layouts import EagerLayouts
from .output_layouts import alias_geometry, permute_inputs, plan_computed, replay
from .strided_views import as_strided_to_view
from .rank_zero import lift_rank_zero
from .zero_size import fold_zero_size
from .const_fold import evaluate as evaluate_input_free, fold_input_free, input_free, static_inputs


def new_module(root, graph: fx.Graph) -> fx.GraphModule:
    """`fx.GraphModule(root, graph)` whose Python code is generated when first needed (called,
    or `.code` read) rather than at once: most graphs made on the way to the importer are only
    read as graphs, and generating a large graph's code took a third of a second each time."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:     # another torch
        return fx.GraphModule(root, graph)
    return _LazyGraphModule(root, graph)


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def input_key(args) -> tuple:
    """What a static compile depends on: per tensor its shape, dtype, device and whether it
    is contiguous (kernels take contiguous data); per scalar its value."""
    key = []
    for a in args:
        if _is_tensor(a):
            key.append((tuple(a.shape), a.dtype, a.device.type, a.is_contiguous()))
        else:
            key.append((type(a).__name__, a))
    return tuple(key)


def _val_is_static(val) -> bool:
    if _is_tensor(val):
        return all(isinstance(s, int) for s in val.shape)
    return False


def needs_specialization(gm: fx.GraphModule) -> bool:
    """True when a placeholder is not a tensor with a static meta shape (SymInt placeholders,
    symbolic sizes, or a graph without meta, e.g. a partition's submodule)."""
    for node in gm.graph.nodes:
        if node.op == "placeholder" and not _val_is_static(node.meta.get("val")):
            return True
    return False


def specialize(gm: fx.GraphModule, args, decompositions=None) -> tuple[fx.GraphModule, list[int]]:
    """A static-shape graph for the concrete `args`, taking only the tensor args; returns it and
    the positions of those tensor args in `args`. Scalars (SymInt values) become constants."""
    from torch.fx.experimental.proxy_tensor import make_fx

    tensor_pos = [i for i, a in enumerate(args) if _is_tensor(a)]

    def run(*tensors):
        full = list(args)
        for i, t in zip(tensor_pos, tensors):
            full[i] = t
        return fx.Interpreter(gm).run(*full)

    tensors = [args[i] for i in tensor_pos]
    try:
        static = make_fx(run, decomposition_table=decompositions, tracing_mode="fake")(*tensors)
    except Exception:
        # Data-dependent graphs cannot run on fake tensors; real tracing runs the graph once.
        static = make_fx(run, decomposition_table=decompositions, tracing_mode="real")(*tensors)
    return static, tensor_pos


_NARROW_INTS = (torch.int8, torch.uint8)


def narrow_int_scalar_args(node: fx.Node) -> list[tuple[int | str, bool]]:
    """The Python-number operands of an op with an int8/uint8 result, as (position or keyword,
    whether the schema types it Tensor). torch-mlir's lowering converts such a number to the
    narrow type without its original dtype, which it cannot do (and then crashes)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return []
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype not in _NARROW_INTS:
        return []
    found = []
    for i, arg in enumerate(node.target._schema.arguments):
        if arg.kwarg_only or i >= len(node.args):
            key, value = arg.name, node.kwargs.get(arg.name)
        else:
            key, value = i, node.args[i]
        if isinstance(value, (bool, int, float)):
            kind = str(arg.type)
            if kind in ("Tensor", "number"):    # "number": a Scalar argument
                found.append((key, kind == "Tensor"))
    return found


def _tensor_twin(op, key):
    """`op`'s `.Tensor` overload when `op` is a `.Scalar` one whose argument `key` is the
    Tensor in the twin, with the same argument names otherwise; else None."""
    if not isinstance(key, int) or op._overloadname != "Scalar":
        return None
    twin = getattr(op.overloadpacket, "Tensor", None)
    if twin is None:
        return None
    a, b = op._schema.arguments, twin._schema.arguments
    if [x.name for x in a] != [x.name for x in b] or str(b[key].type) != "Tensor":
        return None
    return twin


def _fake_scalar(value, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    """A 0-dim fake tensor (the importer types values from fake tensors) in `like`'s mode."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = getattr(like, "fake_mode", None) or FakeTensorMode()
    with mode:
        return torch.scalar_tensor(value, dtype=dtype)


def _tensorize_narrow_int_scalars(gm: fx.GraphModule) -> None:
    """`int8_tensor * 2` -> `int8_tensor * scalar_tensor(2, int8)`: the same result in eager
    (a 0-dim tensor does not promote a dimensioned one of its category, just as a Python number
    does not; the value is cast to int8 either way), and one torch-mlir imports."""
    changed = False
    for node in list(gm.graph.nodes):
        for key, is_tensor in narrow_int_scalar_args(node):
            if not is_tensor:
                twin = _tensor_twin(node.target, key)
                if twin is None:
                    continue
                node.target = twin      # remainder.Scalar -> remainder.Tensor, same arguments
            value = node.args[key] if isinstance(key, int) else node.kwargs[key]
            if isinstance(value, float):
                continue    # cannot happen: a float operand makes the result a float
            # Eager casts the number to the op's int8/uint8 type (wrapping) before computing;
            # a constant already of that type needs no conversion in torch-mlir either.
            dtype = node.meta["val"].dtype
            value = int(torch.tensor(int(value)).to(dtype))
            with gm.graph.inserting_before(node):
                const = gm.graph.call_function(torch.ops.aten.scalar_tensor.default, (value,),
                                               {"dtype": dtype})
            const.meta["val"] = _fake_scalar(value, dtype, node.meta["val"])
            if isinstance(key, int):
                node.update_arg(key, const)
            else:
                node.update_kwarg(key, const)
            changed = True
    if changed:
        gm.recompile()


_ARANGES = (torch.ops.aten.arange.default, torch.ops.aten.arange.start,
            torch.ops.aten.arange.start_step)


def _widen_narrow_int_aranges(gm: fx.GraphModule) -> None:
    """`arange(..., dtype=uint8)` -> `arange(..., dtype=int64).to(uint8)` (int8 too): torch-mlir
    crashes the process (SIGSEGV) converting the bounds to the narrow type; `eye(n,
    dtype=int8)` and `linalg.matrix_power(x, 0)` make such aranges. Eager computes the values
    in int64 too (arange's accumulate type) and wraps them to the narrow type, as the cast does."""
    changed = False
    for node in list(gm.graph.nodes):
        val = node.meta.get("val")
        if node.op != "call_function" or node.target not in _ARANGES or \
                not isinstance(val, torch.Tensor) or val.dtype not in _NARROW_INTS:
            continue
        node.update_kwarg("dtype", torch.int64)
        with val.fake_mode if getattr(val, "fake_mode", None) else _nullcontext():
            node.meta["val"] = torch.empty(val.shape, dtype=torch.int64, device=val.device)
        node.meta.pop("tensor_meta", None)
        with gm.graph.inserting_after(node):
            cast = gm.graph.call_function(torch.ops.prims.convert_element_type.default,
                                          (node, val.dtype))
        cast.meta["val"] = val
        node.replace_all_uses_with(cast, delete_user_cb=lambda u: u is not cast)
        changed = True
    if changed:
        gm.recompile()


_ACCUMULATE = ("sum", "prod", "cumsum", "cumprod", "nansum")
_CASTS = (torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default)
# Tensor operands that are not promoted with the others (a condition, a mask).
_NOT_PROMOTED = {"where": (0,), "masked_fill": (1,)}


def _insert_cast(gm: fx.GraphModule, before: fx.Node, arg: fx.Node, dtype) -> fx.Node:
    """`convert_element_type(arg, dtype)` inserted before `before`, with its fake value."""
    with gm.graph.inserting_before(before):
        c = gm.graph.call_function(torch.ops.prims.convert_element_type.default, (arg, dtype))
    aval = arg.meta["val"]
    with aval.fake_mode if getattr(aval, "fake_mode", None) else _nullcontext():
        c.meta["val"] = aval.to(dtype)
    return c


def _cast_operands_torch_mlir_mispromotes(gm: fx.GraphModule) -> None:
    """`torch.maximum(bool_t, int8_t)` -> `torch.maximum(bool_t.to(int8), int8_t)` (and integer
    0-dim tensors of another type): eager promotes the operand to the result's int8/uint8 type before computing, and torch-mlir's
    lowering, asked to convert it itself, fails without the original dtype and then crashes
    (SIGSEGV; fuzz seed 1 index 145, seed 2 index 123). And a uint8 operand of an op that
    computes in a wider type: torch-mlir widens its signless i8 as signed (`f32 * uint8(254)`
    gave -3 * f; fuzz seed 4 indices 2, 176), while the explicit conversion is unsigned.
    Pointwise ops (their condition/mask operands apart) and `cat`."""
    changed = False

    def cast(node, arg, dtype):
        return _insert_cast(gm, node, arg, dtype)

    def other_int(arg, dtype):
        """A bool or integer tensor operand of another dtype than the result's (a 0-dim int32
        next to an int8 tensor does not promote it, as a Python int does not)."""
        val = arg.meta.get("val") if isinstance(arg, fx.Node) else None
        return (isinstance(val, torch.Tensor) and val.dtype != dtype
                and not val.dtype.is_floating_point and not val.dtype.is_complex)

    def is_uint8(arg):
        val = arg.meta.get("val") if isinstance(arg, fx.Node) else None
        return isinstance(val, torch.Tensor) and val.dtype == torch.uint8

    def wider_int(arg, common):
        """A 0-dim integer tensor of a wider type than the integer type the op computes in
        (int64 next to an int32 tensor): eager converts it to that type first, wrapping;
        torch-mlir compared in the wider type (`int32_t >= int64(MIN + 12)` is `0 >= 12` in
        eager: fuzz seed 31 index 30)."""
        return other_int(arg, common) and common != torch.bool and \
            not common.is_floating_point and not common.is_complex and \
            arg.meta["val"].dtype.itemsize > common.itemsize

    def needs_cast(arg, common):
        if common in _NARROW_INTS:
            return other_int(arg, common)
        if wider_int(arg, common):
            return True
        # uint8, and bool next to wider integers (`bool_t >= int64_t` compared True as -1:
        # fuzz seed 5 index 240)
        return is_uint8(arg) or common != torch.bool and other_int(arg, common) and \
            arg.meta["val"].dtype == torch.bool

    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        if node.target is torch.ops.aten.cat.default:
            if any(needs_cast(a, val.dtype) for a in node.args[0]):
                node.update_arg(0, [cast(node, a, val.dtype) if needs_cast(a, val.dtype) else a
                                    for a in node.args[0]])
                changed = True
            continue
        if val.is_floating_point() and node.target not in _CASTS and (
                torch.Tag.pointwise in node.target.tags
                or node.target.overloadpacket.__name__ == "mean"):
            # A float result from uint8 operands (`uint8_t / 2`, `true_divide`, `mean(dtype=)`):
            # eager converts them to the result's type first; torch-mlir widened them as signed
            # (254 / 2 gave -1.0; fuzz seed 8 index 467).
            # An integer operand of a half/bf16 result likewise: eager converts it to half first
            # (int32 2**31 - 2 is inf there: inf - it is NaN; fuzz seed 21 index 1035), ember
            # would compute with its f32 value.
            low = val.dtype in (torch.float16, torch.bfloat16)
            ups = [i for i, a in enumerate(node.args) if is_uint8(a) or low and other_int(
                a, val.dtype) and a.meta["val"].dtype != torch.bool]
            for i in ups:
                node.update_arg(i, cast(node, node.args[i], val.dtype))
            changed = changed or bool(ups)
            if ups:
                continue
        if node.target.overloadpacket.__name__ in _ACCUMULATE:
            # sum(uint8) accumulates in int64: torch-mlir widened the elements as signed
            # (sum([254, 1, 200]) was -57)
            if is_uint8(node.args[0]) and val.dtype != torch.uint8:
                node.update_arg(0, cast(node, node.args[0], val.dtype))
                changed = True
            continue
        if torch.Tag.pointwise not in node.target.tags or node.target in _CASTS:
            continue
        skip = _NOT_PROMOTED.get(node.target.overloadpacket.__name__, ())
        promoted = [(i, a) for i, a in enumerate(node.args) if i not in skip and
                    (isinstance(a, (bool, int, float)) or
                     isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor))]
        if len(promoted) < 2:
            continue
        # the type the op computes in: a comparison's bool result says nothing of it
        try:
            _, common = elementwise_dtypes(
                *[a.meta["val"] if isinstance(a, fx.Node) else a for _, a in promoted],
                type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        except Exception:  # noqa: BLE001 - an op whose operands do not promote: left alone
            continue
        for i, arg in promoted:
            if needs_cast(arg, common):
                node.update_arg(i, cast(node, arg, common))
                changed = True
    if changed:
        gm.recompile()


_COMPARE_SCALAR = {getattr(torch.ops.aten, n).Scalar for n in ("lt", "le", "gt", "ge", "eq", "ne")}


def _float_compare_scalars(gm: fx.GraphModule) -> None:
    """`float_tensor < 0` -> `float_tensor < 0.0`: the same in eager (the number is converted to
    the tensor's type), and it keeps torch-mlir's folder off a wrong path: it folds a comparison
    of a constant float tensor with an integer scalar to the wrong answer
    (`torch.full([5], 1.0) < 0` folded to all True; zero-size sums feeding a clamp gave 0)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _COMPARE_SCALAR or len(node.args) < 2:
            continue
        val = getattr(node.args[0], "meta", {}).get("val")
        other = node.args[1]
        if isinstance(val, torch.Tensor) and val.is_floating_point() \
                and isinstance(other, int) and not isinstance(other, bool):
            node.update_arg(1, float(other))
            changed = True
        elif isinstance(val, torch.Tensor) and not val.is_floating_point() \
                and not val.is_complex() and isinstance(other, float):
            # `int_tensor >= 0.001`: eager compares in the promoted float type; torch-mlir's
            # integer-tensor-with-float-scalar path crashed the process (SIGSEGV in the import
            # when a constant fed it: fuzz seed 21 index 2399). Converted explicitly first.
            node.update_arg(0, _insert_cast(gm, node, node.args[0],
                                            torch.result_type(val, other)))
            changed = True
    if changed:
        gm.recompile()


# The ops whose CPU kernels read a 0-dim second operand at opmath (probed: add and sub round it)
_OPMATH_BINARY = (torch.ops.aten.mul.Tensor, torch.ops.aten.div.Tensor)


def _wide_rank_zero_operands(gm: fx.GraphModule) -> None:
    """`bf16_t * f32_0dim` -> `(bf16_t.float() * f32_0dim.float()).to(bf16)`: eager's CPU kernels
    of mul and div read a 0-dim CPU operand in the second place at the op's compute
    precision (TensorIterator's `original_scalar_value<opmath_t>`: f32 for bf16/f16), as they
    read a Python float, and divide by it as a multiplication by its reciprocal; torch-mlir
    rounds it to bf16/f16 first. In the first place, on the GPU (a 0-dim GPU tensor), or in
    add/sub, eager rounds it too, and so does ember. Dynamo's tensorified float constants take this form under
    dynamic shapes (GPT-2's `math.sqrt(2 / math.pi) * x` in bf16 differed from eager)."""
    changed = False
    for node in list(gm.graph.nodes):
        if (node.op != "call_function" or node.target not in _OPMATH_BINARY
                or len(node.args) < 2 or not isinstance(node.args[1], fx.Node)):
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype not in (torch.bfloat16, torch.float16):
            continue
        x, c = (a.meta.get("val") if isinstance(a, fx.Node) else None for a in node.args[:2])
        if not (isinstance(x, torch.Tensor) and isinstance(c, torch.Tensor) and c.dim() == 0
                and c.is_floating_point() and c.dtype.itemsize > val.dtype.itemsize
                and c.device.type == "cpu"):
            continue
        for i, v in enumerate((x, c)):
            if v.dtype != torch.float32:
                node.update_arg(i, _insert_cast(gm, node, node.args[i], torch.float32))
        if node.target is torch.ops.aten.div.Tensor and not node.kwargs:
            # x / c as eager's CPU kernel: x * (1 / c), the reciprocal at f32
            with gm.graph.inserting_before(node):
                inv = gm.graph.call_function(torch.ops.aten.reciprocal.default, (node.args[1],))
            cval = node.args[1].meta["val"]
            with cval.fake_mode if getattr(cval, "fake_mode", None) else _nullcontext():
                inv.meta["val"] = torch.reciprocal(cval)
            node.target = torch.ops.aten.mul.Tensor
            node.update_arg(1, inv)
        with val.fake_mode if getattr(val, "fake_mode", None) else _nullcontext():
            node.meta["val"] = val.to(torch.float32)
        with gm.graph.inserting_after(node):
            out = gm.graph.call_function(torch.ops.prims.convert_element_type.default,
                                         (node, val.dtype))
        out.meta["val"] = val
        node.replace_all_uses_with(out, delete_user_cb=lambda u: u is not out)
        changed = True
    if changed:
        gm.recompile()


def _is_view_op(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


@dataclass
class PreparedGraph:
    """`gm` returns the unique compute outputs (or is None when there are none); `plan[i]` says
    where original output i comes from: ("compiled", j), ("host", j) from `host_gm`,
    ("view", j, steps): output_layouts.replay of compiled output j, ("const", value) or
    ("value", tensor): a copy of the tensor computed once (const_fold.py)."""

    gm: fx.GraphModule | None
    host_gm: fx.GraphModule | None
    plan: list[tuple[str, Any]] = field(default_factory=list)
    single: bool = False            # the original graph returned one bare value, not a tuple
    in_perms: dict[int, list[int]] = field(default_factory=dict)   # gm takes input i permuted
    # values computed from no input, made the last inputs of `gm` (const_fold.py)
    folded: list = field(default_factory=list)
    # input -> (size, strides) it has in `gm` for the inputs in `in_perms`, where `gm` is not
    # kept (a build record's: host_calls.permuted_geometry); None: read from `gm`
    in_geometry: dict[int, tuple] | None = None


# Placement kwargs of factory ops: the compiled graph runs where its inputs are, and torch-mlir
# cannot lower a `device=cuda` constant (it leaves `torch.constant.int` behind).
_PLACEMENT_KWARGS = ("device", "layout", "pin_memory")


def drop_placement(node: fx.Node) -> None:
    """`node` without placement kwargs (in place: a node of a copy for the importer)."""
    if node.op == "call_function" and any(k in node.kwargs for k in _PLACEMENT_KWARGS):
        node.kwargs = {k: v for k, v in node.kwargs.items() if k not in _PLACEMENT_KWARGS}


def strip_placement(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of `gm` whose factory ops have no placement kwargs: what the importer gets. The
    graphs `prepare` returns keep them, because an eager fallback runs those graphs and an
    `arange(device="cuda")` made on the CPU breaks the user's program (index_select on mixed
    devices)."""
    if not any(n.op == "call_function" and any(k in n.kwargs for k in _PLACEMENT_KWARGS)
               for n in gm.graph.nodes):
        return gm
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
        drop_placement(env[node])
    return new_module(gm, graph)


def _constants(gm: fx.GraphModule) -> dict[fx.Node, bool]:
    return input_free(gm)


def _mutates(node: fx.Node) -> bool:
    """Whether `node` must survive dead-code elimination of the host half: placeholders, the
    output, and ops that write memory. Unlike FX's default purity rule, ops that draw random
    numbers (`nondeterministic_seeded`: SDPA, dropout's rand) whose results nobody reads are
    dead here: the compiled half already runs them once; running them again would recompute
    the graph up to them eagerly on every call and draw from the generator twice."""
    if node.op in ("placeholder", "output"):
        return True
    if node.op != "call_function":
        return node.op == "call_module"
    target = node.target
    if target in getattr(fx.node, "_side_effectful_functions", ()):
        return True
    schema = getattr(target, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def _subgraph(gm: fx.GraphModule, outputs: list[fx.Node], host: bool = False) -> fx.GraphModule:
    """A copy of `gm` returning `outputs` (nodes of gm), with dead code removed; all
    placeholders stay so that both graphs take the original inputs. Placement kwargs stay
    (`strip_placement` drops them for the importer only). The `host` half (views of the
    inputs, run by torch on every call) keeps nothing but what its outputs read."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in outputs))
    graph.eliminate_dead_code(is_impure_node=_mutates if host else None)
    return new_module(gm, graph)


def _drop_unused_pool_indices(gm: fx.GraphModule) -> None:
    """`max_pool2d_with_indices` whose indices nobody reads (inference) becomes `max_pool2d`,
    which ember compiles (a library call) instead of running the indices variant in torch."""
    aten = torch.ops.aten
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.max_pool2d_with_indices.default:
            continue
        users = list(node.users)
        if not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
            continue
        with gm.graph.inserting_before(node):
            pool = gm.graph.call_function(aten.max_pool2d.default, node.args, node.kwargs)
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)):
            pool.meta["val"] = val[0]
        for u in users:
            u.replace_all_uses_with(pool)
            gm.graph.erase_node(u)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()


def _fold_copy_into_empty(gm: fx.GraphModule) -> None:
    """`copy(empty_strided(size, stride), src)` (how AOTAutograd writes `empty_strided(...)
    .copy_(src)` and some layout changes) -> `clone(src)` carrying the copy's strides in its
    meta: torch-mlir cannot lower a non-empty `empty_strided`, and the output plan gives the
    result eager's strides (output_layouts.py)."""
    aten = torch.ops.aten
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy.default:
            continue
        dst, src = node.args[0], node.args[1]
        if (not isinstance(dst, fx.Node) or not isinstance(src, fx.Node) or len(dst.users) != 1
                or dst.target not in (aten.empty_strided.default, aten.empty.memory_format)):
            continue
        dv, sv = dst.meta.get("val"), src.meta.get("val")
        if not (_is_tensor(dv) and _is_tensor(sv)) or dv.shape != sv.shape or dv.dtype != sv.dtype:
            continue
        with gm.graph.inserting_before(node):
            clone = gm.graph.call_function(aten.clone.default, (src,))
        clone.meta["val"] = node.meta["val"]
        node.replace_all_uses_with(clone)
        gm.graph.erase_node(node)
        gm.graph.erase_node(dst)
        changed = True
    if changed:
        gm.recompile()


_aten = torch.ops.aten
# Ops whose result is their operand's value where dtype and shape are kept: torch-mlir folds
# them away (clone, alias, a cast to the same type, a slice, view or expand to the same shape;
# floor, ceil, round and trunc of integers). Not a permutation: [2, 2] transposed is another.
_SAME_VALUE = (_aten.clone.default, _aten.alias.default, torch.ops.prims.convert_element_type.default,
               _aten._to_copy.default, _aten.slice.Tensor, _aten.view.default,
               _aten._unsafe_view.default, _aten.reshape.default, _aten.expand.default)
_INTEGER_IDENTITY = (_aten.floor.default, _aten.ceil.default, _aten.round.default,
                     _aten.trunc.default)
_CONSTANTS = (_aten.scalar_tensor.default, _aten.full.default)


def _value_root(node: fx.Node) -> fx.Node:
    while node.op == "call_function" and node.args and isinstance(node.args[0], fx.Node):
        src, v = node.args[0].meta.get("val"), node.meta.get("val")
        # (static sizes only: comparing symbolic ones would add guards)
        if not (_val_is_static(src) and _val_is_static(v) and src.dtype == v.dtype
                and src.shape == v.shape):
            break
        if node.target in _SAME_VALUE or (node.target in _INTEGER_IDENTITY
                                          and not v.is_floating_point()):
            node = node.args[0]
            continue
        break
    return node


def _maybe_one_value(a, b) -> bool:
    """Whether torch-mlir may find the tensors `a` and `b` to be one value: the same node
    once copies and identities are passed, or equal constants."""
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
        return False
    a, b = _value_root(a), _value_root(b)
    return a is b or (a.op == b.op == "call_function" and a.target is b.target
                      and a.target in _CONSTANTS and a.args == b.args and a.kwargs == b.kwargs)


def _where_of_one_value_at_its_shape(gm: fx.GraphModule) -> None:
    """`where(c, x, x)` -> `where(c, expand(x), expand(x))` at the result's shape, where the
    condition broadcasts `x`. torch-mlir folds a `where` of one value into that value, its
    shape unbroadcast: the import failed ("type of return operand ... doesn't match function
    result type", fuzz seed 46 index 1363: `where(c, x, floor(x))` of integers; `where(c, 2.0,
    2.0)`) and the graph fell back. An expand changes no value."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _aten.where.self or \
                len(node.args) != 3 or not _maybe_one_value(node.args[1], node.args[2]):
            continue
        val = node.meta.get("val")
        if not _val_is_static(val):
            continue    # (symbolic sizes: left as they are)
        for i in (1, 2):
            arg = node.args[i]
            v = arg.meta.get("val")
            if not _val_is_static(v) or v.shape == val.shape:
                continue
            with gm.graph.inserting_before(node):
                wide = gm.graph.call_function(_aten.expand.default, (arg, list(val.shape)))
            with v.fake_mode if getattr(v, "fake_mode", None) else _nullcontext():
                wide.meta["val"] = v.expand(val.shape)
            node.update_arg(i, wide)
            changed = True
    if changed:
        gm.recompile()


def _true_divide_as_div(gm: fx.GraphModule) -> None:
    """`aten.true_divide.Tensor` -> `aten.div.Tensor` (the same op; torch-mlir lowers only the
    latter). Dynamo's tensorified float sizes trace as true_divide: nearest upsampling's
    `in / (scale * in)` with symbolic sizes."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.true_divide.Tensor:
            node.target = torch.ops.aten.div.Tensor
            changed = True
    if changed:
        gm.recompile()


def prepare(gm: fx.GraphModule, fold_constants: bool = False,
            shared_outputs=()) -> PreparedGraph:
    """`fold_constants`: values computed from no input become inputs of the compiled half,
    computed once here (const_fold.py); so are such outputs among `shared_outputs` (output
    indices that nothing but ember's own graphs read: a training forward's saved
    activations), each handed out as a copy per call instead of eager's ops recomputing it
    (an attention mask: an arange, a cumsum, comparisons; one copy kernel instead)."""
    _true_divide_as_div(gm)
    _drop_unused_pool_indices(gm)
    _fold_copy_into_empty(gm)
    as_strided_to_view(gm)
    fold_zero_size(gm)
    lift_rank_zero(gm)
    _tensorize_narrow_int_scalars(gm)
    _widen_narrow_int_aranges(gm)
    _cast_operands_torch_mlir_mispromotes(gm)
    _float_compare_scalars(gm)
    _wide_rank_zero_operands(gm)
    _where_of_one_value_at_its_shape(gm)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    single = not isinstance(outs, (tuple, list))
    if single:
        outs = (outs,)

    host_only: dict[fx.Node, bool] = {}
    constant = _constants(gm)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            host_only[node] = True
        elif node.op == "output":
            continue
        elif node.target is torch.ops.aten.empty_strided.default:
            host_only[node] = True      # a tensor without elements (zero_size.py)
        else:
            ins = node.all_input_nodes
            host_only[node] = _is_view_op(node) and bool(ins) and all(host_only[n] for n in ins)

    plan, compiled, host = [], [], []
    bases: dict[fx.Node, tuple[int, tuple, bool]] = {}
    shared = set(shared_outputs or ()) if fold_constants and static_inputs(gm) else set()
    values: dict = {}
    eager_layout = EagerLayouts()
    for i, out in enumerate(outs):
        value = (evaluate_input_free(out, values) if i in shared and isinstance(out, fx.Node)
                 and constant.get(out) else None)
        if value is not None:
            plan.append(("value", value))
        elif not isinstance(out, fx.Node):
            plan.append(("const", out))
        elif host_only[out] or constant.get(out) or not _is_tensor(out.meta.get("val")):
            # Inputs, their views and scalars: eager torch makes them for free (and keeps the
            # aliasing that autograd may expect). Constants too: they cost eager's fill, and
            # torch-mlir folds a returned uint8 constant into a literal it then rejects
            # (`si8` for `ui8`: `full`, `full_like`, `scalar_tensor` ran eagerly).
            if out not in host:
                host.append(out)
            plan.append(("host", host.index(out)))
        else:
            # Views of computed values stay views, and values keep eager's strides.
            plan.append(plan_computed(gm, out, _is_view_op, host_only, compiled, bases,
                                      eager_layout))
    sub = _subgraph(gm, compiled) if compiled else None
    folded = fold_input_free(sub) if sub is not None and fold_constants else []
    return PreparedGraph(
        gm=sub, host_gm=_subgraph(gm, host, host=True) if host else None,
        plan=plan, single=single, in_perms=permute_inputs(sub) if sub is not None else {},
        folded=folded)


def compiled_inputs(prep: PreparedGraph, tensors) -> list:
    """The tensors `prep.gm` takes: inputs it reads in their physical order permuted so
    (output_layouts.permute_inputs), then the folded values."""
    if not prep.in_perms:
        return list(tensors) + prep.folded if prep.folded else tensors
    return [t.permute(prep.in_perms[i]) if i in prep.in_perms else t
            for i, t in enumerate(tensors)] + prep.folded


def program_args(prep: PreparedGraph, tensors) -> list:
    """The example tensors `prep.gm` is compiled for: the graph's, then the folded values."""
    return list(tensors) + prep.folded


def assemble(prep: PreparedGraph, compiled_outs, host_outs):
    """The original graph's outputs from the two halves."""
    result = []
    for entry in prep.plan:
        kind, x = entry[0], entry[1]
        if kind == "compiled":
            result.append(compiled_outs[x])
        elif kind == "host":
            result.append(host_outs[x])
        elif kind == "view":
            t, geometry = compiled_outs[x], entry[3]
            # the common case inline (a training forward returns a hundred such views per
            # call): one as_strided on a base the program returned contiguous
            if geometry is not None and t.is_contiguous():
                size, stride, offset = geometry
                result.append(t.as_strided(size, stride, t.storage_offset() + offset))
            else:
                result.append(replay(t, entry[2]))
        elif kind == "value":       # computed once (prepare's shared_outputs), copied per call:
            result.append(x.clone())    # the backward may write into a donated saved tensor
        else:
            result.append(copy.copy(x))
    return result[0] if prep.single else result
