"""The contract between ember's stages: every `ember.*` name the IR carries, declared once.

Each attribute is one `Attr` record: its name, where it may sit, its type, which stage writes it,
which read it, and what it means (docs/internals.md tells the same story stage by stage). Passes
and the frontend read and write these attributes only through the records (`KERNEL.get(func)`,
`OFFSETS.set(op, [...])`), never by spelling the string; a test greps the package for that.

`verify(module)` checks the whole contract: no undeclared `ember.*` attribute, each declared one
on the kind of op it belongs to with its declared type, kernels private with a body,
library declarations well formed. `ember-opt` and the frontend's pipeline run it after every
pass (`--verify-each`, on by default), so a stage that breaks the contract fails right there
with the op's file:line:col.

Only ops that live at module level or directly in a function body carry `ember.*` attributes,
so the verifier looks at those (a kernel's loop bodies are not walked: it stays cheap).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from torch_mlir import ir

PREFIX = "ember."
# Op names of the ember dialect (dialects/ember.py defines the op classes).
EXTERN_OP = PREFIX + "extern"

# Where an attribute may sit.
MODULE = "module"                   # the builtin.module
FUNC = "func"                       # a public host function (@main)
KERNEL_FUNC = "kernel func"         # a private func.func marked `ember.kernel`
LIBRARY_FUNC = "library func"       # a private, body-less func.func marked `ember.library`
CALL = "call"                       # a func.call on the host
LAUNCH = "launch"                   # a host op that produces buffers: func.call or ember.extern

_WHERE_OPS = {
    MODULE: ("builtin.module",),
    FUNC: ("func.func",),
    KERNEL_FUNC: ("func.func",),
    LIBRARY_FUNC: ("func.func",),
    CALL: ("func.call",),
    LAUNCH: ("func.call", EXTERN_OP),
}

_MISSING = object()


class ContractError(ValueError):
    """The IR breaks the stage contract; the located diagnostic has been emitted already."""


def _i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


# type name -> (is this attribute of the type?, attribute -> Python, Python -> attribute)
_TYPES = {
    "str": (lambda a: isinstance(a, ir.StringAttr),
            lambda a: ir.StringAttr(a).value,
            lambda v: ir.StringAttr.get(v)),
    "str-list": (lambda a: isinstance(a, ir.ArrayAttr)
                 and all(isinstance(x, ir.StringAttr) for x in ir.ArrayAttr(a)),
                 lambda a: [ir.StringAttr(x).value for x in ir.ArrayAttr(a)],
                 lambda v: ir.ArrayAttr.get([ir.StringAttr.get(x) for x in v])),
    "i64": (lambda a: isinstance(a, ir.IntegerAttr),
            lambda a: int(ir.IntegerAttr(a).value),
            _i64),
    "i64-array": (lambda a: isinstance(a, ir.DenseI64ArrayAttr),
                  lambda a: [int(x) for x in ir.DenseI64ArrayAttr(a)],
                  lambda v: ir.DenseI64ArrayAttr.get([int(x) for x in v])),
    "i64-array-list": (lambda a: isinstance(a, ir.ArrayAttr)
                       and all(isinstance(x, ir.DenseI64ArrayAttr) for x in ir.ArrayAttr(a)),
                       lambda a: [[int(y) for y in ir.DenseI64ArrayAttr(x)]
                                  for x in ir.ArrayAttr(a)],
                       lambda v: ir.ArrayAttr.get([ir.DenseI64ArrayAttr.get(list(x)) for x in v])),
    "dict": (lambda a: isinstance(a, ir.DictAttr), lambda a: a, lambda v: v),
    "unit": (lambda a: isinstance(a, ir.UnitAttr), lambda a: True,
             lambda v: ir.UnitAttr.get()),
}


@dataclasses.dataclass(frozen=True)
class Attr:
    """One `ember.*` attribute of the contract."""

    name: str                       # the full attribute name, e.g. "ember.kernel"
    on: str                         # where it sits (MODULE, FUNC, KERNEL_FUNC, ...)
    type: str                       # a key of _TYPES
    writer: str                     # the stage that writes it
    readers: tuple[str, ...]        # the stages that read it
    doc: str
    choices: tuple[str, ...] = ()   # for "str": the values allowed (empty: any)

    def __str__(self) -> str:
        return self.name

    def has(self, op) -> bool:
        return self.name in op.attributes

    def raw(self, op) -> ir.Attribute:
        return op.attributes[self.name]

    def get(self, op, default: Any = _MISSING) -> Any:
        """The attribute's value as Python (str, int, list; a DictAttr stays an attribute);
        `default` when absent (KeyError without one)."""
        if self.name not in op.attributes:
            if default is _MISSING:
                raise KeyError(f"{self.name} missing on {op.operation.name}")
            return default
        return _TYPES[self.type][1](op.attributes[self.name])

    def set(self, op, value: Any) -> None:
        """Sets the attribute from a Python value (or an `ir.Attribute` of the declared type)."""
        attr = value if isinstance(value, ir.Attribute) else _TYPES[self.type][2](value)
        op.attributes[self.name] = attr

    def make(self, value: Any) -> tuple[str, ir.Attribute]:
        """(name, attribute) for building an op's attribute dictionary."""
        return self.name, value if isinstance(value, ir.Attribute) else _TYPES[self.type][2](value)

    def problem(self, op, op_name: str | None = None) -> str | None:
        """Why this attribute on `op` (named `op_name`) breaks the contract (None when it
        does not)."""
        op_name = op_name or op.operation.name
        if op_name not in _WHERE_OPS[self.on]:
            return f"'{self.name}' belongs on a {self.on}, not on '{op_name}'"
        attr = op.attributes[self.name]
        if not _TYPES[self.type][0](attr):
            return f"'{self.name}' must be a {self.type} attribute, got {attr}"
        if self.choices and _TYPES[self.type][1](attr) not in self.choices:
            return f"'{self.name}' must be one of {', '.join(self.choices)}"
        return None


# matmul: a product and its pointwise epilogue (ember-matmul-template)
KERNEL_KINDS = ("pointwise", "reduction", "matmul")

# --- the contract, in pipeline order -------------------------------------------------------

LIBRARY = Attr(PREFIX + "library", LIBRARY_FUNC, "str", "frontend (library_calls.stitch)",
               ("ember-fuse", "ember-buffer-reuse", "frontend export"),
               "the op overload a library declaration calls (<namespace>.<op>.<overload>)")
TENSOR_ARGS = Attr(PREFIX + "tensor_args", LIBRARY_FUNC, "str-list", "frontend (library_calls)",
                   ("frontend export",), "the schema argument name of each of its arguments")
PARAMS = Attr(PREFIX + "params", LIBRARY_FUNC, "dict", "frontend (library_calls)",
              ("frontend export",), "the op's non-tensor arguments")
RESULTS = Attr(PREFIX + "results", LIBRARY_FUNC, "i64-array", "frontend (library_calls)",
               ("frontend export",), "which output of the op each result is")
VIEW = Attr(PREFIX + "view", LIBRARY_FUNC, "unit", "frontend (library_calls)",
            ("ember-buffer-reuse",), "its results alias its operands (view_as_real)")
OPERAND_VIEWS = Attr(PREFIX + "operand_views", LIBRARY_FUNC, "i64-array-list",
                     "ember-library-views", ("frontend export",),
                     "per operand read as a strided view of its (row-major) buffer: [operand, "
                     "element offset, sizes..., strides...]")
RESULT_VIEWS = Attr(PREFIX + "result_views", LIBRARY_FUNC, "i64-array-list",
                    "ember-library-views", ("frontend export",),
                    "per result handed on transposed: [result, permutation...] (the op's "
                    "tensor permuted: a free view where the op lays it out that way)")
CHANNELS_LAST = Attr(PREFIX + "channels_last", LIBRARY_FUNC, "i64-array-list",
                     "ember-channels-last", ("frontend export",),
                     "[operands, results]: the positions whose buffers are NHWC, the op's NCHW "
                     "tensors permuted: the runtime calls the op on channels-last views of them")
# A key inside `ember.params`, not an attribute: {ember.complex = [re, im]} is a complex
# scalar argument (the runtime decodes it: runtime/externs.py).
COMPLEX_KEY = PREFIX + "complex"

KERNEL = Attr(PREFIX + "kernel", KERNEL_FUNC, "str", "ember-fuse, ember-matmul-template",
              ("ember-buffer-reuse", "lowerings", "frontend export"),
              "the kernel's shape: pointwise, reduction or matmul", KERNEL_KINDS)
OPS = Attr(PREFIX + "ops", KERNEL_FUNC, "str-list", "ember-fuse", ("frontend report",),
           "readable names of what the kernel fuses (report.json fused_groups)")
RESULT_DIMS = Attr(PREFIX + "result_dims", CALL, "i64-array-list", "ember-fuse",
                   ("frontend export",),
                   "per result, per dim: the call operand holding that dim's size (-1: static)")

OFFSETS = Attr(PREFIX + "offsets", LAUNCH, "i64-array", "ember-buffer-reuse",
               ("frontend export",), "arena byte offset per result (-1: own allocation); with "
               "`ember.in_args`, the offset in that donated argument's memory")
ARENA_BYTES = Attr(PREFIX + "arena_bytes", FUNC, "i64", "ember-buffer-reuse",
                   ("frontend export", "frontend report"), "planned peak bytes of intermediates")
UNPLANNED_BYTES = Attr(PREFIX + "unplanned_bytes", FUNC, "i64", "ember-buffer-reuse",
                       ("frontend report",), "bytes of all intermediates without reuse")

SOURCE = Attr(PREFIX + "source", KERNEL_FUNC, "str", "lowerings", ("frontend export",),
              "the kernel's code ('' when an earlier kernel with the same code is reused)")
SYMBOL = Attr(PREFIX + "symbol", KERNEL_FUNC, "str", "lowerings", ("frontend export",),
              "the entry point's name in the built code")
TARGET = Attr(PREFIX + "target", MODULE, "str", "lowerings", ("frontend export",),
              "which code generator produced the sources (passes/backends.py)")
PRELUDE = Attr(PREFIX + "prelude", MODULE, "str", "lowerings", ("frontend export",),
               "text that goes before the kernels' sources (includes, helpers)")

DONATE = Attr(PREFIX + "donate", FUNC, "i64-array", "frontend (compile_static)",
              ("ember-buffer-reuse",),
              "pairs (argument, result): the result is the argument's new value (a mutated "
              "input), so it may be written into the argument's memory")
WRITES_ARGS = Attr(PREFIX + "writes_args", FUNC, "i64-array", "ember-buffer-reuse",
                   ("frontend export",),
                   "the `ember.donate` pairs accepted: the result's kernel writes it into the "
                   "argument's memory (it reads the argument elementwise, and last)")

DONATED_ARGS = Attr(PREFIX + "donated_args", FUNC, "i64-array", "frontend (compile_static)",
                    ("ember-buffer-reuse",),
                    "arguments the caller hands over (a backward's saved activations that only "
                    "it reads: AOTAutograd's bw_donated_idxs): their memory may hold other "
                    "values after their last use")
ARG_STRIDES = Attr(PREFIX + "arg_strides", FUNC, "i64-array-list", "frontend (compile_static)",
                   ("ember-library-views", "ember-buffer-reuse", "frontend export"),
                   "arguments the caller passes strided that only library calls read, each "
                   "[argument, strides...]: the runtime hands such an argument to them as it "
                   "comes (no contiguous copy) when it arrives with these strides (a "
                   "backward's saved q, k, v: views of the forward's packed projection)")
IN_ARGS = Attr(PREFIX + "in_args", LAUNCH, "i64-array", "ember-buffer-reuse",
               ("frontend export",),
               "per result, the donated argument whose memory holds it at the byte offset "
               "`ember.offsets` gives (-1: the arena or its own allocation)")

ATTRS: dict[str, Attr] = {a.name: a for a in (
    LIBRARY, TENSOR_ARGS, PARAMS, RESULTS, VIEW, OPERAND_VIEWS, RESULT_VIEWS, CHANNELS_LAST,
    KERNEL, OPS, RESULT_DIMS, OFFSETS, ARENA_BYTES, UNPLANNED_BYTES, DONATE, WRITES_ARGS,
    DONATED_ARGS, ARG_STRIDES, IN_ARGS, SOURCE,
    SYMBOL, TARGET, PRELUDE)}


# --- queries every stage shares ------------------------------------------------------------

def is_kernel(op) -> bool:
    return op.operation.name == "func.func" and KERNEL.name in op.attributes


def is_library(op) -> bool:
    return op.operation.name == "func.func" and LIBRARY.name in op.attributes


def is_extern(op) -> bool:
    return op.operation.name == EXTERN_OP


def is_ember_op(op) -> bool:
    return op.operation.name.startswith(PREFIX)


# --- the verifier --------------------------------------------------------------------------

def _fail(op, message: str) -> None:
    message = _context + message
    op.location.emit_error(message)
    raise ContractError(message)


_context = ""       # "after <stage>: " while verify() runs for a pipeline stage


def _private(op) -> bool:
    return "sym_visibility" in op.attributes and \
        ir.StringAttr(op.attributes["sym_visibility"]).value == "private"


def _sym(op) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _attr_names(op) -> list[str]:
    return list(op.attributes)          # iterating an attribute map yields the names


def _check_attrs(op, where: str, op_name: str) -> None:
    for name in _attr_names(op):
        if not name.startswith(PREFIX):
            continue
        decl = ATTRS.get(name)
        if decl is None:
            _fail(op, f"unknown attribute '{name}' (the ember contract, "
                      f"dialects/contract.py, declares: {', '.join(sorted(ATTRS))})")
        if decl.on != where and not (decl.on == LAUNCH and where == CALL):
            _fail(op, f"'{decl.name}' belongs on a {decl.on}, not on a {where}")
        problem = decl.problem(op, op_name)
        if problem:
            _fail(op, problem)


def _check_kernel(op) -> None:
    name = _sym(op)
    if not isinstance(op.attributes[KERNEL.name], ir.StringAttr) or \
            KERNEL.get(op) not in KERNEL_KINDS:
        _fail(op, f"kernel @{name}: '{KERNEL}' must be one of {', '.join(KERNEL_KINDS)}")
    if not _private(op):
        _fail(op, f"kernel @{name} must be private")
    if len(op.regions[0].blocks) == 0:
        _fail(op, f"kernel @{name} has no body")


def _check_library(op) -> None:
    """A library declaration (frontend/library_calls.py): private, no body, an op overload
    name, one `ember.tensor_args` name per argument, one `ember.results` index per result."""
    name = _sym(op)
    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    target = LIBRARY.get(op) if isinstance(LIBRARY.raw(op), ir.StringAttr) else ""
    if len(target.split(".")) != 3 or not all(target.split(".")):
        # ATen's ops, or a registered custom op (torch.ops.<namespace>) ember cannot compile
        _fail(op, f"library @{name}: '{LIBRARY}' must name an op overload "
                  "(<namespace>.<op>.<overload>, e.g. aten.sort.default)")
    if not _private(op):
        _fail(op, f"library @{name} must be private")
    if len(op.regions[0].blocks) != 0:
        _fail(op, f"library @{name} is a declaration: it must have no body")
    if not TENSOR_ARGS.has(op) or not isinstance(TENSOR_ARGS.raw(op), ir.ArrayAttr) or \
            len(ir.ArrayAttr(TENSOR_ARGS.raw(op))) != len(ftype.inputs):
        _fail(op, f"library @{name}: '{TENSOR_ARGS}' must name each of its "
                  f"{len(ftype.inputs)} arguments")
    if not RESULTS.has(op) or not isinstance(RESULTS.raw(op), ir.DenseI64ArrayAttr) or \
            len(ir.DenseI64ArrayAttr(RESULTS.raw(op))) != len(ftype.results):
        _fail(op, f"library @{name}: '{RESULTS}' must give an output index for each of its "
                  f"{len(ftype.results)} results")


def verify(module_op, attributes: bool = True, after: str | None = None) -> None:
    """Checks the contract on `module_op` (see the module docstring): emits a located
    diagnostic and raises `ContractError` at the first violation. `attributes=False` checks
    only kernels and library declarations; `after` names the stage that produced the IR
    (the message then starts with "after <stage>: ")."""
    global _context
    _context = f"after {after}: " if after else ""
    try:
        _verify(module_op.operation, attributes)
    finally:
        _context = ""


def _verify(module_op, attributes: bool) -> None:
    if attributes:
        _check_attrs(module_op, MODULE, "builtin.module")
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name != "func.func":
            continue
        if LIBRARY.name in op.attributes:
            _check_library(op)
            where = LIBRARY_FUNC
        elif KERNEL.name in op.attributes:
            _check_kernel(op)
            where = KERNEL_FUNC
        else:
            where = FUNC
        if not attributes:
            continue
        _check_attrs(op, where, "func.func")
        if where == FUNC and len(op.regions[0].blocks):
            for inner in op.regions[0].blocks[0].operations:
                names = _attr_names(inner)
                if not any(a.startswith(PREFIX) for a in names):
                    continue
                name = inner.operation.name
                _check_attrs(inner, CALL if name in ("func.call", EXTERN_OP) else name, name)


def describe() -> str:
    """The contract as a table (docs, `ember-opt --list-attributes`)."""
    rows = [f"{'attribute':<24} {'on':<14} {'type':<15} {'writer':<34} doc"]
    for a in ATTRS.values():
        rows.append(f"{a.name:<24} {a.on:<14} {a.type:<15} {a.writer:<34} {a.doc}")
    return "\n".join(rows) + "\n"
