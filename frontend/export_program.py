"""Lowered module -> `runtime.Program` (docs/internals.md, stage 5): plain data, no MLIR.

Walks `@main` in order. Block arguments are value ids 0..n-1; every host op result gets the next
id. The host side holds only kernel launches (`func.call` of a func marked `ember.kernel`; the
older `ember.fused` is read too), library calls (`func.call` of a declaration marked
`ember.library`), ember.extern, views, constants and tensor.empty.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
from torch_mlir import ir

from ..dialects import contract as C
from ..dialects import extern_callee
from ..passes.backends import backend_named
from ..passes.dynamic_sizes import HOST_FLOAT_OPS
from ..runtime.externs import DYNAMIC_EXTERNS  # externs sized at run time
from ..runtime.externs import IN_PLACE
from ..runtime.program import Program, Step, ValueInfo
from .signedness import restore_signedness  # noqa: F401 -- its home before

_FLOAT_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
                "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2"}
_INT_NAMES = {1: "bool", 8: "int8", 16: "int16", 32: "int32", 64: "int64"}
_UINT_NAMES = {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}


class ScheduleError(RuntimeError):
    """The lowered module breaks the host-side contract (an op the runtime cannot run)."""


def dtype_name(elem: ir.Type) -> str:
    """MLIR element type -> torch dtype name without 'torch.' (i1 -> bool)."""
    text = str(elem)
    if text in _FLOAT_NAMES:
        return _FLOAT_NAMES[text]
    if isinstance(elem, ir.IntegerType):
        it = elem
        names = _UINT_NAMES if it.is_unsigned else _INT_NAMES
        if it.width in names:
            return names[it.width]
    if isinstance(elem, ir.ComplexType):
        inner = str(elem.element_type)
        return {"f16": "complex32", "f32": "complex64", "f64": "complex128"}.get(
            inner, f"complex_{inner}")
    raise ScheduleError(f"element type {text} has no torch dtype")


def value_info(ty: ir.Type, offset: int | None = None, dims=None) -> ValueInfo:
    """`dims`: for each dynamic dim, the value id of the host scalar holding its size (a str
    "vN" in the shape), or None where the runtime finds it (an extern's or a view's result)."""
    if isinstance(ty, (ir.IndexType, ir.IntegerType)) and not isinstance(ty, ir.ShapedType):
        return ValueInfo(shape=(), dtype="index", offset=None)
    if not isinstance(ty, ir.RankedTensorType):
        raise ScheduleError(f"host value of type {ty} is not a ranked tensor")
    t = ty
    if not t.has_static_shape:
        dims = dims or {}
        shape = tuple(t.get_dim_size(i) if not t.is_dynamic_dim(i)
                      else (f"v{dims[i]}" if dims.get(i) is not None else None)
                      for i in range(t.rank))
        return ValueInfo(shape=shape, dtype=dtype_name(t.element_type), offset=None)
    return ValueInfo(shape=tuple(t.shape), dtype=dtype_name(t.element_type), offset=offset)


# Host-side size arithmetic of a dynamic graph (ember-fuse leaves it on the host); the runtime
# evaluates it on Python ints (runtime/executor.py, `_SCALAR_OPS`).
SCALAR_OPS = {"arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui",
              "arith.floordivsi", "arith.ceildivsi", "arith.remsi", "arith.remui", "arith.maxsi",
              "arith.minsi", "arith.index_cast", "arith.index_castui", "arith.extsi",
              "arith.extui", "arith.trunci", "arith.cmpi", "arith.select", "arith.andi",
              "arith.ori", "arith.xori"} | HOST_FLOAT_OPS


def attr_to_python(attr: ir.Attribute) -> Any:
    """Extern params (DictAttr entries) -> plain Python values."""
    for cls, conv in (
        (ir.BoolAttr, lambda a: bool(a.value)),
        (ir.IntegerAttr, lambda a: int(a.value)),
        (ir.FloatAttr, lambda a: float(a.value)),
        (ir.StringAttr, lambda a: a.value),
        (ir.DenseI64ArrayAttr, lambda a: [int(x) for x in a]),
        (ir.DenseI32ArrayAttr, lambda a: [int(x) for x in a]),
        (ir.DenseF32ArrayAttr, lambda a: [float(x) for x in a]),
        (ir.DenseF64ArrayAttr, lambda a: [float(x) for x in a]),
        (ir.DenseBoolArrayAttr, lambda a: [bool(x) for x in a]),
        (ir.ArrayAttr, lambda a: [attr_to_python(x) for x in a]),
        (ir.DictAttr, lambda a: {na.name: attr_to_python(na.attr) for na in a}),
        (ir.DenseElementsAttr, lambda a: dense_to_python(a)),
        (ir.UnitAttr, lambda a: True),
    ):
        if isinstance(attr, cls):
            return conv(attr)
    return str(attr)


def _is_resource(attr) -> bool:
    try:
        ir.DenseResourceElementsAttr(attr)
    except (ValueError, TypeError):
        return False
    return True


def _resource_to_python(op) -> Any:
    """The elements of `arith.constant dense_resource<blob>` (torch-mlir's form for tensor
    constants: a relative-position index, as_strided's gather indices) as nested lists. The
    bindings give no access to a blob's bytes, so a clone of the op is printed alone in a
    module: the text ends with its blob in hex, after a 4-byte alignment header."""
    import torch
    tmp = ir.Module.create(op.location)
    with ir.InsertionPoint(tmp.body):
        op.operation.clone()
    text = str(tmp)
    found = re.search(r'dialect_resources:.*?:\s*"0x([0-9A-Fa-f]*)"', text, re.S)
    ty = ir.RankedTensorType(op.results[0].type)
    if found is None:
        raise ScheduleError(f"{op.location}: cannot read the data of a resource constant")
    dtype = getattr(torch, dtype_name(ty.element_type))
    raw = bytearray(bytes.fromhex(found.group(1))[4:])
    return torch.frombuffer(raw, dtype=dtype).reshape(list(ty.shape)).tolist()


def dense_to_python(attr) -> Any:
    """A DenseElementsAttr -> nested lists (or a scalar for rank 0)."""
    shape = list(attr.type.shape)
    if attr.is_splat:
        v = attr.get_splat_value()
        scalar = attr_to_python(v)
        if not shape:
            return scalar
        if type(scalar) in (bool, float) or (type(scalar) is int and -2**63 <= scalar < 2**63):
            return _full_lists(shape, scalar)
        return np.full(shape, scalar).tolist()
    try:
        arr = np.array(attr)
    except Exception:
        # numpy's buffer protocol takes no f16/bf16 here, nor element access: read the text.
        arr = _parse_half_dense(str(attr), str(attr.type.element_type)).reshape(shape)
    return arr.tolist()


def _splat_scalar(attr):
    """A splat constant's one value (a Python bool, float or int64), which the runtime fills the
    tensor with (executor `_make_const`); None for anything else. BERT's backward held splats
    of ~25M elements (the embedding gradient's zeros): as nested lists they took ~1.2 s to
    turn back into tensors on a cold start and ~230 MB of program cache."""
    if not isinstance(attr, ir.DenseElementsAttr) or not attr.is_splat \
            or not list(attr.type.shape):
        return None
    scalar = attr_to_python(attr.get_splat_value())
    if type(scalar) in (bool, float) or (type(scalar) is int and -2**63 <= scalar < 2**63):
        return scalar
    return None


def _full_lists(shape: list[int], scalar) -> list:
    """`np.full(shape, scalar).tolist()` for a Python bool, float or int64 `scalar`, without
    making one Python number per element (a 30522x768 zero splat took ~0.6 s): the same nested
    lists, every list a distinct object (as tolist makes them, and as pickle writes them)."""
    if len(shape) == 1:
        return [scalar] * shape[0]
    if len(shape) == 2:
        return list(map(list.copy, [[scalar] * shape[1]] * shape[0]))
    return [_full_lists(shape[1:], scalar) for _ in range(shape[0])]


def _half_bits_to_float(bits: np.ndarray, elem: str) -> np.ndarray:
    bits = bits.astype(np.uint16)
    if elem == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(np.float16).astype(np.float32)


def _parse_half_dense(text: str, elem: str) -> np.ndarray:
    """`dense<[1.0, 0x7F80]> : tensor<2xbf16>` or `dense<"0x...">` -> float32 values."""
    body = text[text.index("dense<") + 6:text.rindex(">", 0, text.rindex(":"))]
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        return _half_bits_to_float(np.frombuffer(raw, dtype="<u2"), elem)
    out = []
    for tok in re.findall(r"0x[0-9A-Fa-f]+|[-+]?[0-9.]+(?:e[-+]?[0-9]+)?|inf|nan", body):
        if tok.startswith("0x"):
            out.append(float(_half_bits_to_float(np.array([int(tok, 16)]), elem)[0]))
        else:
            out.append(float(tok))
    return np.array(out, dtype=np.float32)


def _str_attr(op, name: str, default: str = "") -> str:
    if name not in op.attributes:
        return default
    return ir.StringAttr(op.attributes[name]).value


def find_funcs(module: ir.Module) -> dict[str, ir.Operation]:
    funcs = {}
    for op in module.body.operations:
        if op.operation.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op.operation
    return funcs


def kernel_funcs(module: ir.Module) -> list[ir.Operation]:
    """The kernels, in module order (each carries `ember.kernel`)."""
    return [f for f in find_funcs(module).values() if C.is_kernel(f)]


def kernel_ops(func) -> list[str]:
    return C.OPS.get(func, [])


def library_params(decl) -> dict[str, Any]:
    """What the runtime needs to call an `ember.library` declaration's ATen op (see
    frontend/library_calls.py): operand names, other arguments, which outputs are results."""
    params = {"tensor_args": attr_to_python(C.TENSOR_ARGS.raw(decl)),
              "kwargs": attr_to_python(C.PARAMS.raw(decl)),
              "results": attr_to_python(C.RESULTS.raw(decl))}
    if C.OPERAND_VIEWS.has(decl):       # ember-library-views
        params["views"] = [list(v) for v in C.OPERAND_VIEWS.get(decl)]
    if C.RESULT_VIEWS.has(decl):        # ember-library-views
        params["result_views"] = [list(v) for v in C.RESULT_VIEWS.get(decl)]
    if C.CHANNELS_LAST.has(decl):       # ember-channels-last
        params["channels_last"] = [list(v) for v in C.CHANNELS_LAST.get(decl)]
    return params


def _result_dims(op, ins, values) -> list[dict]:
    """Per result of a host op, {dynamic dim: value id of the scalar holding its size}: a kernel
    call's `ember.result_dims` (call operands), a `tensor.empty`'s or `tensor.expand_shape`'s
    size operands. Dims it does not name are found by the runtime (externs, collapses)."""
    name = op.operation.name
    out: list[dict] = [{} for _ in op.results]
    if name == "func.call" and C.RESULT_DIMS.has(op):
        for k, arr in enumerate(C.RESULT_DIMS.get(op)):
            out[k] = {i: ins[j] for i, j in enumerate(arr) if j >= 0}
    elif name in ("tensor.empty", "tensor.expand_shape") and op.results:
        t = ir.RankedTensorType(op.results[0].type)
        sizes = list(ins) if name == "tensor.empty" else list(ins[1:])
        dyn = [i for i in range(t.rank) if t.is_dynamic_dim(i)]
        if len(dyn) == len(sizes):
            out[0] = dict(zip(dyn, sizes))
    return out


def _fill_in_place(steps: list[Step], values: list[ValueInfo], outputs: list[int]) -> None:
    """A splat constant whose one reader is a library op that writes a copy of it (`self` of
    `scatter_add`, `index_put`, ...: runtime/externs.IN_PLACE) becomes a "fill" step, a new
    tensor each call, and the op runs in place on it (`params["in_place"]`: the operand).
    The embedding backward's weight gradient is `scatter_add` into zeros of vocabulary x hidden
    (154 MB for GPT-2 small in f32): a constant the program kept for its whole life, which the
    op copied on every call before scattering; now one fill (a memset on a GPU), written once."""
    readers: dict[int, list[tuple[int, int]]] = {}
    for k, s in enumerate(steps):
        for pos, i in enumerate(s.inputs):
            readers.setdefault(i, []).append((k, pos))
    moved: dict[int, int] = {}      # the fill step at k runs right before its reader
    for k, s in enumerate(steps):
        if s.kind != "const" or type(s.params.get("value")) not in (bool, int, float):
            continue
        (o,) = s.outputs
        found = readers.get(o, [])
        if len(found) != 1 or o in outputs or not _static(values[o].shape) or \
                values[o].offset is not None:
            continue
        j, pos = found[0]
        lib = steps[j]
        names = list(lib.params.get("tensor_args", []))
        if lib.kind != "library" or lib.name not in IN_PLACE or pos >= len(names) or \
                names[pos] != "self" or list(lib.params.get("results", [0])) != [0] or \
                len(lib.outputs) != 1 or values[lib.outputs[0]].shape != values[o].shape or \
                values[lib.outputs[0]].dtype != values[o].dtype or \
                any(v[0] == pos for v in lib.params.get("views", [])) or \
                lib.params.get("result_views") or lib.params.get("channels_last"):
            continue
        steps[k] = Step("fill", "full", (), s.outputs, {"value": s.params["value"]})
        steps[j] = dataclasses.replace(lib, params={**lib.params, "in_place": pos})
        moved[k] = j
    if moved:
        # made where it is needed, not where the constant was hoisted (the function's top):
        # the gradient-sized fill would be alive through the whole backward
        before = {j: k for k, j in moved.items()}
        order = list(steps)
        steps.clear()
        for k, s in enumerate(order):
            if k in moved:
                continue
            if k in before:
                steps.append(order[before[k]])
            steps.append(s)


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def export_program(module: ir.Module, func_name: str = "main") -> Program:
    funcs = find_funcs(module)
    if func_name not in funcs:
        raise ScheduleError(f"lowered module has no @{func_name}")
    main = funcs[func_name]
    mod_op = module.operation
    target = C.TARGET.get(mod_op, "cpu")
    block = main.regions[0].blocks[0]

    ids: dict[Any, int] = {}
    values: list[ValueInfo] = []

    def new_value(v, offset=None, dims=None) -> int:
        ids[v] = len(values)
        values.append(value_info(v.type, offset, dims))
        return ids[v]

    def new_scalar(v) -> int:     # a host size, or a tuple of sizes (tensor.from_elements)
        ids[v] = len(values)
        values.append(ValueInfo(shape=(), dtype="index"))
        return ids[v]

    def vid(v) -> int:
        if v not in ids:
            raise ScheduleError(f"host value {v.get_name()} is used before it is defined")
        return ids[v]

    for arg in block.arguments:
        new_value(arg)
    num_inputs = len(values)
    for arg, *strides in C.ARG_STRIDES.get(main, []):
        if 0 <= arg < num_inputs and len(strides) == len(values[arg].shape):
            values[arg] = dataclasses.replace(values[arg], strides=tuple(strides))

    steps: list[Step] = []
    kernel_names: list[str] = []
    outputs: list[int] = []
    for op in block.operations:
        name = op.operation.name
        ins = tuple(vid(v) for v in op.operands)
        if name == "func.return":
            outputs = list(ins)
            continue
        if name == "arith.constant" and not isinstance(op.results[0].type, ir.RankedTensorType):
            if isinstance(op.results[0].type, (ir.IndexType, ir.IntegerType)):
                (o,) = (new_value(op.results[0]),)
                steps.append(Step("scalar", "constant", (), (o,),
                                  {"value": int(ir.IntegerAttr(op.attributes["value"]).value)}))
            elif any(u.owner.operation.name in HOST_FLOAT_OPS and
                     u.owner.operation.parent.name == "func.func" for u in op.results[0].uses):
                (o,) = (new_scalar(op.results[0]),)     # read by a float step of a size
                steps.append(Step("scalar", "constant", (), (o,),
                                  {"value": float(ir.FloatAttr(op.attributes["value"]).value)}))
            continue  # other scalars on the host feed nothing the runtime runs
        if name in SCALAR_OPS or name in ("tensor.dim", "cf.assert", "tensor.from_elements"):
            outs = tuple(new_scalar(r) for r in op.results)
            params = {}
            if name == "arith.cmpi":
                params["predicate"] = int(ir.IntegerAttr(op.attributes["predicate"]).value)
            if name == "cf.assert":
                params["msg"] = _str_attr(op, "msg")
            if name in HOST_FLOAT_OPS and isinstance(op.results[0].type, ir.FloatType):
                params["bits"] = ir.FloatType(op.results[0].type).width   # rounded to it
            steps.append(Step("scalar", name.split(".")[1], ins, outs, params))
            continue
        offsets = C.OFFSETS.get(op, None) or [-1] * len(op.results)
        dims = _result_dims(op, ins, values)
        outs = tuple(new_value(r, off if off >= 0 else None, d)
                     for r, off, d in zip(op.results, offsets, dims))
        for o, a in zip(outs, C.IN_ARGS.get(op, None) or ()):
            if a >= 0:          # in a donated input's memory (ember-buffer-reuse)
                values[o] = dataclasses.replace(values[o], in_input=a)
        if name == "func.call":
            ref = op.attributes["callee"]
            callee = funcs.get(ir.FlatSymbolRefAttr(ref).value)
            if callee is not None and C.is_library(callee):
                steps.append(Step("library", C.LIBRARY.get(callee), ins, outs,
                                  library_params(callee)))
                continue
            if callee is None or not C.is_kernel(callee):
                raise ScheduleError(f"{op.location}: {name} of {ref}, which is not an ember "
                                    f"kernel")
            symbol = C.SYMBOL.get(callee, ir.StringAttr(callee.attributes["sym_name"]).value)
            if symbol not in kernel_names:
                kernel_names.append(symbol)
            # scalar operands (sizes, symbolic ints) go after every tensor dim in the kernel's
            # sizes table (kernel_schedule.scalar_args)
            tensors_in = tuple(i for i in ins if values[i].dtype != "index")
            scalars = [i for i in ins if values[i].dtype == "index"]
            steps.append(Step("kernel", symbol, tensors_in, outs,
                              {"scalars": scalars} if scalars else {}))
        elif name == C.EXTERN_OP:
            params = {}
            if "params" in op.attributes:
                params = attr_to_python(op.attributes["params"])
            target_name = extern_callee(op)
            if any(None in values[o].shape for o in outs) and target_name not in DYNAMIC_EXTERNS:
                raise ScheduleError(f"{op.location}: extern {target_name} with a result of "
                                    f"dynamic shape")
            steps.append(Step("extern", target_name, ins, outs, params))
        elif name in ("tensor.expand_shape", "tensor.collapse_shape"):
            vparams = {}
            if None in values[outs[0]].shape:
                vparams["reassociation"] = [[int(ir.IntegerAttr(i).value) for i in ir.ArrayAttr(g)]
                                            for g in ir.ArrayAttr(op.attributes["reassociation"])]
            steps.append(Step("view", name.split(".")[1], ins[:1], outs, vparams))
        elif name == "tensor.cast":     # between `?` and static dims: the same tensor
            steps.append(Step("view", "cast", ins[:1], outs))
        elif name == "tensor.reshape":
            steps.append(Step("view", "reshape", ins[:1], outs, {"shape_from": ins[1]}))
        elif name == "arith.constant":
            value = op.attributes["value"]
            if _is_resource(value):
                data = _resource_to_python(op)
            else:
                data = _splat_scalar(value)
                data = dense_to_python(value) if data is None else data
            steps.append(Step("const", "constant", (), outs, {"value": data}))
        elif name == "tensor.empty":
            steps.append(Step("empty", "empty", (), outs))
        else:
            raise ScheduleError(f"{op.location}: '{name}' cannot run on the host; every compute "
                                f"op must be inside a kernel (ember-fuse's contract)")

    _fill_in_place(steps, values, outputs)
    written = C.WRITES_ARGS.get(main, [])
    for arg, res in zip(written[0::2], written[1::2]):   # ember-buffer-reuse accepted these
        out = outputs[res]
        values[out] = dataclasses.replace(values[out], into_input=arg)
    prelude = C.PRELUDE.get(mod_op, "")
    sources = [C.SOURCE.get(f, "") for f in kernel_funcs(module)]
    lang = backend_named(target).lang
    return Program(
        target=target, lang=lang,
        source="\n".join([prelude] + [s for s in sources if s]),
        values=values, num_inputs=num_inputs, steps=steps, outputs=outputs,
        arena_bytes=C.ARENA_BYTES.get(main, 0),
        kernel_names=kernel_names,
        donated_inputs=list(C.DONATED_ARGS.get(main, [])))
