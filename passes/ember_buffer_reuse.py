"""`ember-buffer-reuse`: plans one arena for the intermediates of `@main` (docs/internals.md,
Stage 3).

Invariant established: every result of a kernel launch (`func.call` of an `ember.kernel` func) or an
`ember.extern` in `@main` carries an
entry of `ember.offsets = array<i64: ...>` on its op — a byte offset into one arena, a multiple
of `alignment`, or -1 when the result gets its own allocation: it escapes (is returned, directly
or through `tensor.expand_shape`/`collapse_shape` views) or its size is unknown (not a
statically shaped tensor/memref; the frontend specializes shapes, so this is rare and stays
correct, just unplanned). Two results whose live ranges overlap never share bytes, except
in-place: a single-result pointwise kernel may write over an operand buffer that dies at that
kernel and has the same shape and element size, when the kernel reads it only elementwise
(identity indexing maps), so no element is overwritten before it is read. `@main` gets
`ember.arena_bytes` (the arena's size) and `ember.unplanned_bytes` (the sum of the aligned
sizes of the planned results: the memory without reuse).

Live range of a buffer: from its defining op to the last op (in `@main`'s order) that uses it or
a view of it (a view op, or a library call marked `ember.view`), both ends inclusive (an op's inputs and outputs are live together).
Mutated inputs: `@main` may carry `ember.donate = array<i64: arg, result, ...>` (the frontend:
result is arg's new value, written back after the call). A pair is accepted into
`ember.writes_args` when the result comes from a pointwise kernel whose results all have the
argument's type, that reads the argument only elementwise, and whose result is computed from
the argument or is the only one that could be (the code generators compute the results that
read the argument in one loop nest, each element of every result before any of them is
stored: an optimizer step's new parameter and moments, all read by the parameter's update, are
all written in place), and nothing else in `@main` uses the
argument (no view, no other reader, not returned) and the result is returned once: the
runtime then lets that kernel write into the argument's memory (an optimizer step updates each
parameter and moment where it lies, with no new buffer and no copy back).

Placement is best-fit, as in XLA's / TFLite's heap simulators: buffers largest first (ties by
start), each at the lowest-waste gap between already placed buffers it overlaps in time.
With `print-plan`, the plan is also emitted as remarks (passes/remarks.py): one per buffer at
its defining op, one for the arena at @main.
"""
import dataclasses

from torch_mlir import ir

from ..dialects.contract import (ARENA_BYTES, DONATE, KERNEL, OFFSETS, UNPLANNED_BYTES, VIEW,
                                 WRITES_ARGS, is_extern, is_kernel)
from . import remarks
from .base import OptionError, Pass, option
from .ir_queries import HOST_VIEW_OPS

VIEWS = HOST_VIEW_OPS


@dataclasses.dataclass
class Buffer:
    op_index: int
    result: int
    nbytes: int          # exact
    size: int            # rounded up to the alignment
    start: int
    end: int
    escapes: bool = False
    in_place_of: "Buffer | None" = None
    offset: int = -1
    name: str = ""


def _element_bytes(t: ir.Type) -> int | None:
    for cls in (ir.FloatType, ir.IntegerType):
        try:
            return (cls(t).width + 7) // 8
        except (ValueError, TypeError):
            pass
    if ir.IndexType.isinstance(t):
        return 8
    try:
        inner = _element_bytes(ir.ComplexType(t).element_type)
        return None if inner is None else 2 * inner
    except (ValueError, TypeError):
        return None


def byte_size(t: ir.Type) -> int | None:
    """Bytes of a statically shaped tensor/memref, None when unknown."""
    try:
        shaped = ir.ShapedType(t)
    except (ValueError, TypeError):
        return None
    if not shaped.has_rank or not shaped.has_static_shape:
        return None
    elem = _element_bytes(shaped.element_type)
    if elem is None:
        return None
    n = 1
    for d in shaped.shape:
        n *= d
    return n * elem


def _find_func(module: ir.Operation, name: str):
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def _kernel_funcs(module: ir.Operation) -> dict:
    """name -> func.func for every `ember.kernel` function of `module` (one walk, not one per
    call site)."""
    out = {}
    for op in module.regions[0].blocks[0].operations:
        if is_kernel(op):
            out.setdefault(ir.StringAttr(op.attributes["sym_name"]).value, op)
    return out


def _view_calls(module: ir.Operation) -> set:
    """Names of the library declarations whose results alias their operands (`ember.view`:
    view_as_real of a complex tensor, frontend/library_calls.py)."""
    return {ir.StringAttr(op.attributes["sym_name"]).value
            for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func" and VIEW.has(op)}


def _kernel_of(kernels: dict, op):
    """The kernel func an op on the host launches (`func.call` of an `ember.kernel` func in
    `kernels`, from _kernel_funcs), or None."""
    if op.operation.name != "func.call":
        return None
    return kernels.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)


def _is_identity(attr) -> bool:
    m = ir.AffineMapAttr(attr).value
    return m == ir.AffineMap.get_identity(m.n_dims)


def results_from(kernel, arg_index: int) -> set[int]:
    """Positions of the kernel's results computed (through any chain of ops) from argument
    `arg_index`."""
    if not kernel.regions[0].blocks:
        return set()
    derived = [kernel.regions[0].blocks[0].arguments[arg_index]]
    found: set[int] = set()

    def visit(op):
        if not any(any(v == d for d in derived) for v in op.operands):
            return ir.WalkResult.ADVANCE
        if op.name == "func.return":
            found.update(k for k, v in enumerate(op.operands) if any(v == d for d in derived))
        else:
            derived.extend(op.results)
        return ir.WalkResult.ADVANCE

    kernel.operation.walk(visit, ir.WalkOrder.POST_ORDER)
    return found


def reads_elementwise(kernel, arg_index: int, one_space: bool = False) -> bool:
    """True if every value the kernel derives from argument `arg_index` is computed
    elementwise: the argument and everything computed from it are read only as identity-map
    inputs of linalg.generics with identity output maps (so result element i depends on input
    element i alone, and writing it after reading that element is safe), and the kernel has one
    result (no later loop could read the overwritten input). A transpose, pad, slice or view
    on that path (a pointwise kernel ending in `linalg.transpose`) breaks it. `one_space`:
    several results are allowed when all have the argument's type (one loop nest over one
    space: each element of every result is stored after its elements were read)."""
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    if not kernel.regions[0].blocks:
        return False
    if len(ftype.results) != 1 and not (
            one_space and all(r == ftype.inputs[arg_index] for r in ftype.results)):
        return False
    derived = [kernel.regions[0].blocks[0].arguments[arg_index]]
    ok = True
    uses = 0

    def visit(op):
        nonlocal ok, uses
        if op.name == "func.return":
            return ir.WalkResult.ADVANCE
        hits = [k for k, v in enumerate(op.operands) if any(v == d for d in derived)]
        if not hits:
            return ir.WalkResult.ADVANCE
        uses += len(hits)
        if op.name != "linalg.generic":
            ok = False
            return ir.WalkResult.INTERRUPT
        maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
        n_in = len(op.operands) - len(op.results)
        outs_identity = all(_is_identity(m) for m in maps[n_in:])
        if not outs_identity or any(k >= n_in or not _is_identity(maps[k]) for k in hits):
            ok = False
            return ir.WalkResult.INTERRUPT
        derived.extend(op.results)
        return ir.WalkResult.ADVANCE

    kernel.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return ok and uses > 0


def _align(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _place(groups: list[list[Buffer]], alignment: int) -> int:
    """Best-fit offsets for groups (buffers sharing storage in place); returns the arena size."""
    spans = []
    for g in groups:
        spans.append((min(b.start for b in g), max(b.end for b in g), max(b.size for b in g), g))
    spans.sort(key=lambda s: (-s[2], s[0]))
    placed: list[tuple[int, int, int, int]] = []   # start, end, offset, size
    arena = 0
    for start, end, size, group in spans:
        busy = sorted((o, o + s) for (a, b, o, s) in placed if a <= end and start <= b and s > 0)
        best, best_waste, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best_waste is None or gap - size < best_waste):
                best, best_waste = cursor, gap - size
            cursor = max(cursor, hi)
        offset = best if best is not None else cursor
        offset = _align(offset, alignment)
        placed.append((start, end, offset, size))
        for b in group:
            b.offset = offset
        arena = max(arena, offset + size)
    return arena


def plan(module, alignment: int = 64, in_place: bool = True) -> dict:
    """The arena plan of `module`'s @main, without changing the IR (plain data, for reports):
    `arena_bytes`, `unplanned_bytes`, `alignment`, `buffers` (one dict per result of
    kernel call / ember.extern in op order: `op` (index in @main), `result`, `name`, `bytes`,
    `offset` (-1: own allocation), `live` (first, last op index), `escapes`, `in_place_of`)."""
    return _plan(module, alignment, in_place)[0]


def _plan(module, alignment: int, in_place: bool):
    module = getattr(module, "operation", module)
    main = _find_func(module, "main")
    if main is None or not main.regions[0].blocks:
        return {"arena_bytes": 0, "unplanned_bytes": 0, "alignment": alignment, "buffers": []}, [], {}
    ops = list(main.regions[0].blocks[0].operations)
    kernels = _kernel_funcs(module)
    view_calls = _view_calls(module)
    # One numbering of the module's values: `Value.get_name()` without a state numbers the
    # whole module again on every call (quadratic: minutes for an optimizer step's graph).
    names = ir.AsmState(module) if hasattr(ir, "AsmState") else None
    root: dict = {}              # value -> Buffer it lives in (results and views of them)
    buffers: list[Buffer] = []
    per_op: dict[int, list[Buffer | None]] = {}
    for i, op in enumerate(ops):
        name = op.operation.name
        operands = []

        def collect(inner):
            operands.extend(inner.operands)
            return ir.WalkResult.ADVANCE

        op.operation.walk(collect)
        for v in operands:
            buf = root.get(v)
            if buf is not None:
                buf.end = max(buf.end, i)
                if name == "func.return":
                    buf.escapes = True
        if is_extern(op) or _kernel_of(kernels, op) is not None:
            per_op[i] = []
            for k, r in enumerate(op.results):
                nbytes = byte_size(r.type)
                if nbytes is None:
                    per_op[i].append(None)
                    continue
                buf = Buffer(i, k, nbytes, _align(nbytes, alignment), i, i,
                             name=r.get_name(names) if names is not None else f"op{i}#{k}")
                buffers.append(buf)
                per_op[i].append(buf)
                root[r] = buf
        elif name in VIEWS and op.operands[0] in root:
            root[op.results[0]] = root[op.operands[0]]
        elif (name == "func.call" and len(op.operands) >= 1 and op.operands[0] in root
              and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in view_calls):
            for r in op.results:        # a library view: the first operand is the one viewed
                root[r] = root[op.operands[0]]

    planned = [b for b in buffers if not b.escapes]
    if in_place:
        _match_in_place(kernels, ops, root, per_op)
    # Union the in-place chains into groups that share one offset.
    groups: dict[int, list[Buffer]] = {}
    for b in planned:
        head = b
        while head.in_place_of is not None:
            head = head.in_place_of
        groups.setdefault(id(head), []).append(b)
    arena = _align(_place(list(groups.values()), alignment), alignment)
    unplanned = sum(b.size for b in planned)
    rows = [{"op": b.op_index, "result": b.result, "name": b.name, "bytes": b.nbytes,
             "offset": b.offset, "live": (b.start, b.end), "escapes": b.escapes,
             "in_place_of": None if b.in_place_of is None else b.in_place_of.name}
            for b in buffers]
    report = {"arena_bytes": arena, "unplanned_bytes": unplanned, "alignment": alignment,
              "buffers": rows}
    return report, ops, per_op


def _match_in_place(kernels, ops, root, per_op) -> None:
    taken = set()
    for i, outs in per_op.items():
        op = ops[i]
        if len(outs) != 1 or outs[0] is None or outs[0].escapes:
            continue
        kernel = _kernel_of(kernels, op)
        if kernel is None:
            continue
        if KERNEL.get(kernel) != "pointwise":
            continue
        out = outs[0]
        result_type = op.results[0].type
        for k, v in enumerate(op.operands):
            src = root.get(v)
            if (src is None or src.escapes or src.end != i or id(src) in taken
                    or src.nbytes != out.nbytes):
                continue
            # Every operand that reads this buffer (it may come twice, or through a view) must
            # read it elementwise in the result's shape.
            readers = [j for j, w in enumerate(op.operands) if root.get(w) is src]
            if all(op.operands[j].type == result_type and reads_elementwise(kernel, j)
                   for j in readers):
                out.in_place_of = src
                taken.add(id(src))
                break


def _derived_with(kernel, arg_index: int, pos: int) -> bool:
    """Result `pos` is computed from the argument, or no result is."""
    found = results_from(kernel, arg_index)
    return pos in found or not found


def written_args(module, main, ops, donate) -> list[int]:
    """The `ember.donate` pairs (flat: arg, result, ...) whose result may be written into the
    argument's memory (see the module docstring), flat in the same form."""
    kernels = _kernel_funcs(module)
    ret = ops[-1]
    if ret.operation.name != "func.return":
        return []
    args = main.regions[0].blocks[0].arguments
    accepted, taken = [], set()
    for a, r in zip(donate[0::2], donate[1::2]):
        if a in taken or not 0 <= a < len(args) or not 0 <= r < len(ret.operands):
            continue
        arg, v = args[a], ret.operands[r]
        if sum(1 for w in ret.operands if w == v) != 1:
            continue
        launch = v.owner if isinstance(v, ir.OpResult) else None   # not an argument
        kernel = _kernel_of(kernels, launch) if launch is not None else None
        if (kernel is None or KERNEL.get(kernel) != "pointwise" or arg.type != v.type
                or byte_size(v.type) is None or any(r.type != v.type for r in launch.results)):
            continue
        if any(u.owner != launch.operation for u in arg.uses):
            continue            # read elsewhere, viewed or returned: its old value must stay
        readers = [j for j, w in enumerate(launch.operands) if w == arg]
        pos = next(k for k, res in enumerate(launch.results) if res == v)
        # The results computed from the argument, elementwise, have its loop dims: the code
        # generators compute them in one loop nest, with every value of an element before any
        # store (cpp_emitter, the Triton pointwise kernel). The result written over it must
        # be one of them (or the only one): a result that does not read the argument may be
        # in a loop nest of its own (C++), which would overwrite it before their loop.
        if readers and all(reads_elementwise(kernel, j, one_space=True)
                           and _derived_with(kernel, j, pos) for j in readers):
            accepted += [a, r]
            taken.add(a)
    return accepted


@dataclasses.dataclass(frozen=True)
class EmberBufferReuse(Pass):
    """Assigns arena offsets to @main's intermediates (see the module docstring)."""

    name = "ember-buffer-reuse"
    summary = ("Assigns arena offsets (ember.offsets) to non-escaping kernel results by "
               "liveness; sets ember.arena_bytes / ember.unplanned_bytes on @main")

    dynamic_shapes = True       # a result of unknown size gets its own allocation

    alignment: int = option(64, min=1, max=1 << 20)
    in_place: bool = True
    # a remark (passes/remarks.py) per planned buffer and one for the arena
    print_plan: bool = False

    def __post_init__(self):
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise OptionError(f"{self.name}: option 'alignment' must be a positive power of "
                              f"two, got {self.alignment}")

    def run(self, module: ir.Operation) -> None:
        result, ops, per_op = _plan(module, self.alignment, self.in_place)
        if not ops:
            return
        main = ops[0].operation.parent
        if DONATE.has(main):
            WRITES_ARGS.set(main, written_args(module, main, ops, DONATE.get(main)))
        for i, outs in per_op.items():
            offsets = [-1 if b is None or b.escapes else b.offset for b in outs]
            OFFSETS.set(ops[i], offsets)
        main = ops[0].operation.parent
        ARENA_BYTES.set(main, result["arena_bytes"])
        UNPLANNED_BYTES.set(main, result["unplanned_bytes"])
        if self.print_plan:
            self._remarks(main, ops, result)

    def _remarks(self, main, ops, result) -> None:
        """`buffer %3: 1024 bytes at offset 0, live [2, 5]` at each buffer's defining op
        (live: first and last op of @main, counted from 0), then the arena's size at @main."""
        rows = result["buffers"]
        for row in rows:
            if row["escapes"]:
                where = ", own allocation (escapes)"
            elif row["offset"] < 0:
                where = ", own allocation"
            else:
                where = f" at offset {row['offset']}"
                if row["in_place_of"] is not None:
                    where += f" (in place of {row['in_place_of']})"
            first, last = row["live"]
            remarks.emit(ops[row["op"]].location, self.name,
                         f"buffer {row['name']}: {row['bytes']} bytes{where}, "
                         f"live [{first}, {last}]", **row)
        planned = sum(1 for r in rows if not r["escapes"])
        remarks.emit(main.location, self.name,
                     f"arena {result['arena_bytes']} bytes for {planned} of {len(rows)} "
                     f"buffers ({result['unplanned_bytes']} bytes without reuse)",
                     arena_bytes=result["arena_bytes"],
                     unplanned_bytes=result["unplanned_bytes"], buffers=len(rows))
