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
kernel and has the same element type and count (the same shape, or a reshape of it), when the
kernel reads it only elementwise (identity indexing maps, through reshapes: row-major element i
feeds result element i alone), so no element is overwritten before it is read. `@main` gets
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

Donated arguments: `@main` may carry `ember.donated_args = array<i64: ...>` (the frontend: a
backward's saved activations that only it reads). Each is a region of its own bytes, free after
its last use (through views, and through any other op's results, which may alias it); a buffer
that starts after that may lie in it (`ember.in_args` names the argument per result, -1 for
none, and `ember.offsets` then holds the byte offset in it), a single-result pointwise kernel
may overwrite it in place at its last use (as for arena buffers; never through a value that
only may alias it), and a returned buffer (a backward's gradient) may lie in it when it is at
least `donated-outputs-fill` percent of its size (`donated-outputs`; default 50: the caller
keeps the whole argument as long as it keeps the buffer; 0, any size, several side by side,
where the arguments stay allocated anyway: a CUDA-graphed backward, whose arguments are the
forward's saved activations in its graph pool). Buffers sharing a region never overlap in
bytes while both are live.
An argument `ember.arg_strides` names (passed strided, a view of a larger buffer) holds none.

Placement is best-fit, as in XLA's / TFLite's heap simulators: buffers largest first (ties by
start), each at the lowest-waste gap between already placed buffers it overlaps in time, in the
arena or a free donated argument. At `donated-outputs-fill=0` the returned buffers are placed
first, largest first, then the others: there a gradient not in an argument is memory held
after the call (a static output of the graph), an intermediate only the graph pool's arena.
With `print-plan`, the plan is also emitted as remarks (passes/remarks.py): one per buffer at
its defining op, one for the arena at @main.
"""
import dataclasses

from torch_mlir import ir

from ..dialects.contract import (ARENA_BYTES, ARG_STRIDES, DONATE, DONATED_ARGS, IN_ARGS, KERNEL,
                                 OFFSETS, UNPLANNED_BYTES, VIEW, WRITES_ARGS, is_extern,
                                 is_kernel)
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
    arg: int | None = None      # a donated argument's memory (this buffer), or the one it lies in


def _element_bytes(t: ir.Type) -> int | None:
    for cls in (ir.FloatType, ir.IntegerType):
        try:
            return (cls(t).width + 7) // 8
        except (ValueError, TypeError):
            pass
    if str(t) == "index":      # (IndexType.isinstance is gone from these bindings)
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


_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def reads_elementwise(kernel, arg_index: int, one_space: bool = False) -> bool:
    """True if every value the kernel derives from argument `arg_index` is computed
    elementwise: the argument and everything computed from it are read only as identity-map
    inputs of linalg.generics with identity output maps, or reshaped (`tensor.expand_shape` /
    `collapse_shape`: the same elements in the same row-major order), so result element i (in
    row-major order) depends on input element i alone, and writing it after reading that
    element is safe, and the kernel has one
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
        if op.name in _RESHAPES:
            # A kernel's tensors are dense row-major: a reshape keeps every element's linear
            # index, so element i of what is computed from it still reads element i alone.
            derived.extend(op.results)
            return ir.WalkResult.ADVANCE
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


def _place(groups: list[list[Buffer]], alignment: int,
           regions: dict[int, Buffer] | None = None, escaping=(), fill: int = 50) -> int:
    """Best-fit offsets for groups (buffers sharing storage in place); returns the arena size.
    `regions`: donated arguments (argument index -> its Buffer, live from the call's start to
    its last use): a group that starts after an argument's last use may lie in its memory,
    within its bytes; the best fit over the arena's gaps and the arguments' decides. A group
    written in place of an argument lies in it at offset 0. `escaping`: returned buffers that
    may lie in a region (never the arena) when one fits and they are at least `fill` percent
    of its size (the caller keeps the whole argument's memory alive as long as it keeps the
    buffer; 0: any size, several side by side); the others keep their own allocation
    (offset -1)."""
    regions = regions or {}
    spans = []
    # A placement depends on the groups alone, never on an earlier one (own-allocation trials
    # place the arena again and again): every buffer's offset and argument are set afresh.
    for b in escaping:
        b.offset, b.arg = -1, None
        spans.append((b.start, b.end, b.size, b.nbytes, "escapes", [b]))
    for g in groups:
        head = g[0]
        while head.in_place_of is not None:
            head = head.in_place_of
        for b in g:
            b.offset, b.arg = -1, None
        # written in place of a donated argument: the chain's head is the argument's Buffer
        # (op_index -1), not a result an earlier placement put in an argument
        fixed = head.arg if head.op_index < 0 and head.arg is not None else None
        spans.append((min(b.start for b in g), max(b.end for b in g), max(b.size for b in g),
                      max(b.nbytes for b in g), fixed, g))
    # placed per region (None: the arena): start, end, offset, size
    placed: dict[int | None, list[tuple[int, int, int, int]]] = {None: []}
    for a in regions:
        placed[a] = []
    for start, end, size, nbytes, fixed, group in spans:
        if isinstance(fixed, int):      # in place of a donated argument
            placed[fixed].append((start, end, 0, size))
            for b in group:
                b.offset, b.arg = 0, fixed
    spans = [s for s in spans if s[4] is None or s[4] == "escapes"]
    # at fill 0 (a CUDA-graphed backward) the gradients choose first: one left out is held
    # after the call, an intermediate left out only grows the arena (the graph's pool)
    spans.sort(key=lambda s: (fill > 0 or s[4] != "escapes", -s[2], s[0]))
    arena = 0

    def best_gap(where, start, end, size, limit):
        """(waste, offset) of the best gap of `where` for [start, end], or None."""
        busy = sorted((o, o + s) for (a, b, o, s) in placed[where] if a <= end and start <= b and s > 0)
        best, cursor = None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best is None or gap - size < best[0]):
                best = (gap - size, cursor)
            cursor = max(cursor, _align(hi, alignment))
        if limit is not None and limit - cursor >= size and (
                best is None or limit - cursor - size < best[0]):
            best = (limit - cursor - size, cursor)
        if limit is None and best is None:
            best = (None, cursor)
        return best

    for start, end, size, nbytes, kind, group in spans:
        where, offset = None, None
        choice = None
        for a, buf in regions.items():
            if start <= buf.end:
                continue            # the argument is still read
            if kind == "escapes" and 100 * nbytes < fill * buf.nbytes:
                continue
            # the last buffer in an argument may end in its unaligned tail
            fit = best_gap(a, start, end, size, buf.nbytes + (size - nbytes))
            if fit is not None and (choice is None or fit[0] < choice[0]):
                choice = (fit[0], a, fit[1])
        if choice is not None:
            _, where, offset = choice
        elif kind == "escapes":
            continue                # its own allocation
        else:
            offset = _align(best_gap(None, start, end, size, None)[1], alignment)
        placed[where].append((start, end, offset, size))
        for b in group:
            b.offset, b.arg = offset, where
        if where is None:
            arena = max(arena, offset + size)
    return arena


def plan(module, alignment: int = 64, in_place: bool = True, donate_args: bool = True,
         donated_outputs: bool = True, own_min_bytes: int | None = None,
         donated_outputs_fill: int = 50) -> dict:
    """The arena plan of `module`'s @main, without changing the IR (plain data, for reports):
    `arena_bytes`, `unplanned_bytes`, `alignment`, `buffers` (one dict per result of
    kernel call / ember.extern in op order: `op` (index in @main), `result`, `name`, `bytes`,
    `offset` (-1: own allocation), `live` (first, last op index), `escapes`, `in_place_of`,
    `in_arg` (the donated argument whose memory holds it, at `offset`; None: the arena)), and
    for donated arguments (`ember.donated_args`): `donated_args`, `reused_args` (those holding
    buffers), `reused_arg_bytes` (their bytes), `in_args_bytes` (the buffers' bytes there)."""
    return _plan(module, alignment, in_place, donate_args, donated_outputs, own_min_bytes,
                 fill=donated_outputs_fill)[0]


def _plan(module, alignment: int, in_place: bool, donate_args: bool = True,
          donated_outputs: bool = True, own_min_bytes: int | None = None,
          reshape_in_place: bool = True, fill: int = 50):
    module = getattr(module, "operation", module)
    main = _find_func(module, "main")
    if main is None or not main.regions[0].blocks:
        return {"arena_bytes": 0, "unplanned_bytes": 0, "alignment": alignment, "buffers": [],
                "donated_args": 0, "reused_args": 0, "reused_arg_bytes": 0,
                "in_args_bytes": 0, "escaping_in_args_bytes": 0}, [], {}
    ops = list(main.regions[0].blocks[0].operations)
    kernels = _kernel_funcs(module)
    view_calls = _view_calls(module)
    # One numbering of the module's values: `Value.get_name()` without a state numbers the
    # whole module again on every call (quadratic: minutes for an optimizer step's graph).
    names = ir.AsmState(module) if hasattr(ir, "AsmState") else None
    root: dict = {}              # value -> Buffer it lives in (results and views of them)
    buffers: list[Buffer] = []
    per_op: dict[int, list[Buffer | None]] = {}
    # Donated arguments: live from the call's start (-1) to their last use, then free memory.
    donated: dict[int, Buffer] = {}
    maybe: set = set()          # values that may alias a donated argument (never in place)
    if donate_args and DONATED_ARGS.has(main):
        args = main.regions[0].blocks[0].arguments
        # an argument passed strided (a view of a larger buffer, handed to library calls as
        # it comes) is no row-major buffer of its size: nothing is planned in it
        strided = {x[0] for x in ARG_STRIDES.get(main, [])}
        for a in DONATED_ARGS.get(main):
            if a in strided:
                continue
            nbytes = byte_size(args[a].type) if 0 <= a < len(args) else None
            if nbytes and a not in donated:
                donated[a] = root[args[a]] = Buffer(-1, 0, nbytes, _align(nbytes, alignment),
                                                    -1, -1, name=f"%arg{a}", arg=a)
    made_at: dict = {}           # a result of any op -> its index (what the return keeps)
    view_of: dict = {}
    for i, op in enumerate(ops):
        name = op.operation.name
        for r in op.results:
            made_at[r] = i
        if name in VIEWS and op.operands:
            view_of[op.results[0]] = op.operands[0]
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
        if donated and not (is_extern(op) or _kernel_of(kernels, op) is not None):
            # Any other op (a library call, a view) may return an alias of a donated
            # argument: its results keep the argument alive.
            arg_bufs = list({id(root[v]): root[v] for v in operands
                             if root.get(v) is not None and root[v].arg is not None
                             and root[v].op_index < 0}.values())
            for other in arg_bufs[1:]:
                other.escapes = True    # one root per value: the others are never reused
            arg_buf = arg_bufs[0] if arg_bufs else None
            if arg_buf is not None:
                for r in op.results:
                    if r not in root:
                        root[r] = arg_buf
                        maybe.add(r)
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
    regions = {a: b for a, b in donated.items() if not b.escapes}
    if in_place:
        _match_in_place(kernels, ops, root, per_op, regions, maybe, reshape_in_place)
    # Union the in-place chains into groups that share one offset.
    groups: dict[int, list[Buffer]] = {}
    for b in planned:
        head = b
        while head.in_place_of is not None:
            head = head.in_place_of
        groups.setdefault(id(head), []).append(b)
    escaping = [b for b in buffers if b.escapes] if donated_outputs and regions else []
    group_list = list(groups.values())
    arena = _align(_place(group_list, alignment, regions, escaping, fill), alignment)
    own: list[Buffer] = []
    if own_min_bytes is not None and group_list:
        kept = _returned_bytes(ops, made_at, view_of, root)
        arena, own = _own_allocations(group_list, alignment, regions, escaping, buffers, kept,
                                      len(ops), own_min_bytes, arena, fill=fill)
    unplanned = sum(b.size for b in planned)
    own_ids = set(map(id, own))
    rows = [{"op": b.op_index, "result": b.result, "name": b.name, "bytes": b.nbytes,
             "offset": b.offset, "live": (b.start, b.end), "escapes": b.escapes,
             "in_place_of": None if b.in_place_of is None else b.in_place_of.name,
             "in_arg": b.arg, "own": id(b) in own_ids}
            for b in buffers]
    in_args = {b.arg for b in buffers if b.arg is not None}
    report = {"arena_bytes": arena, "unplanned_bytes": unplanned, "alignment": alignment,
              "buffers": rows,
              # donated arguments (their bytes) whose memory holds planned buffers
              "donated_args": len(regions),
              "reused_args": len(in_args),
              "reused_arg_bytes": sum(regions[a].nbytes for a in in_args),
              "in_args_bytes": sum(b.size for b in buffers if b.arg is not None),
              "escaping_in_args_bytes": sum(b.size for b in buffers
                                            if b.arg is not None and b.escapes)}
    return report, ops, per_op


def _returned_bytes(ops, made_at, view_of, root) -> list[tuple[int, int]]:
    """(first op, bytes) of each value the function returns that is no kernel or extern result
    (those are Buffers that escape): a library call's result, through views, kept from where
    it is made to the end of the call. Arguments are the caller's."""
    ret = ops[-1] if ops and ops[-1].operation.name == "func.return" else None
    if ret is None:
        return []
    seen, out = set(), []
    for v in ret.operands:
        while v in view_of:
            v = view_of[v]
        if v in root or v not in made_at or v in seen:
            continue
        seen.add(v)
        out.append((made_at[v], byte_size(v.type) or 0))
    return out


def _modeled_peak(n: int, arena: int, arena_bufs, own, regions, kept) -> int:
    """The call's peak as the runtime makes it: the arena from the call's start to the last
    op that uses it, each own allocation over its live range, the returned values from where
    they are made to the end, donated arguments until their last use."""
    delta = [0] * (n + 2)

    def add(first, last, nbytes):
        first = max(first, 0)
        delta[first] += nbytes
        delta[min(max(last, first), n) + 1] -= nbytes
    if arena and arena_bufs:
        add(0, max(b.end for b in arena_bufs), arena)
    for b in own:
        add(b.start, b.end, b.size)
    for r in regions.values():
        add(0, r.end, r.size)
    for first, nbytes in kept:
        add(first, n, nbytes)
    peak = cur = 0
    for d in delta:
        cur += d
        peak = max(peak, cur)
    return peak


def _own_allocations(groups, alignment, regions, escaping, buffers, kept, n, min_bytes,
                     arena, max_tries: int = 8, fill: int = 50):
    """Buffers taken out of the arena into allocations of their own, freed after their last
    use, where that lowers the call's modeled peak (`_modeled_peak`): the arena is allocated
    for the whole call, so a large buffer that dies early (a backward's bf16 weight and weight
    gradient of an LM head, before its float gradient is made) keeps its bytes in the arena
    while the gradients made later pile up beside it. Largest first, each kept when the peak
    goes down (or stays, while the arena shrinks by its bytes); only single buffers (not in-place
    chains) of at least `min_bytes`. Returns the
    arena's size and the buffers taken out (offset -1)."""
    def arena_of(gs):
        return [b for g in gs for b in g if b.arg is None and not b.escapes]
    returned = [b for b in buffers if b.escapes and b.op_index >= 0]

    def peak_of(gs, size, own):
        # a returned buffer costs its own bytes unless placed in a donated argument
        return _modeled_peak(n, size, arena_of(gs), own, regions,
                             kept + [(b.start, b.size) for b in returned if b.arg is None])
    best = peak_of(groups, arena, [])
    own: list[Buffer] = []
    current = list(groups)
    # one that lives until the arena's last use frees nothing earlier; each try places the
    # arena again (a large backward: ~0.1 s), so only the largest few are tried
    arena_end = max((b.end for b in arena_of(groups)), default=-1)
    candidates = sorted((g for g in groups if len(g) == 1 and g[0].arg is None
                         and g[0].size >= min_bytes and g[0].end < arena_end),
                        key=lambda g: (-g[0].size, g[0].start))[:max_tries]
    # the buffers the kept placement puts in donated arguments (a trial's, kept or not, moves
    # every offset: _place sets them all)
    in_args = {id(g[0]) for g in groups if g[0].arg is not None}
    for g in candidates:
        if id(g[0]) in in_args:         # moved into a donated argument by a re-placement
            continue
        trial = [x for x in current if x is not g]
        size = _align(_place(trial, alignment, regions, escaping, fill), alignment)
        peak = peak_of(trial, size, own + g)
        # a tie that shrinks the arena by half the buffer's bytes or more holds less memory for
        # less time (on the CPU the arena is kept between calls), at the same peak
        if peak < best or (peak == best and 2 * (arena - size) >= g[0].size):
            best, current, arena = peak, trial, size
            own += g
            in_args = {id(x[0]) for x in trial if x[0].arg is not None}
    if candidates:  # the placement of the kept groups (the last trial, kept or not, moved them)
        arena = _align(_place(current, alignment, regions, escaping, fill), alignment)
        for b in own:
            b.offset, b.arg = -1, None
    return arena, own


def _match_in_place(kernels, ops, root, per_op, regions, maybe=frozenset(),
                    reshapes: bool = True) -> None:
    """Pairs a single-result pointwise kernel's result with an operand buffer that dies there
    (an arena buffer, or a donated argument in `regions`) for it to overwrite in place. An
    operand in `maybe` (a library call's result that may alias a donated argument, in an
    unknown layout) is never overwritten in place; with `reshapes` false, nor one the kernel
    reads in another shape."""
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
                    or src.nbytes != out.nbytes
                    or (src.arg is not None and src.arg not in regions)):
                continue
            # Every operand that reads this buffer (it may come twice, or through a view) must
            # read it elementwise in the result's shape.
            readers = [j for j, w in enumerate(op.operands) if root.get(w) is src]
            if any(op.operands[j] in maybe for j in readers):
                continue
            same = _same_elements if reshapes else (lambda a, b: a == b)
            if all(same(op.operands[j].type, result_type)
                   and reads_elementwise(kernel, j) for j in readers):
                out.in_place_of = src
                taken.add(id(src))
                break


def _same_elements(a, b) -> bool:
    """Two static shaped types of one element type and element count (a reshape of each other:
    the matmul's 1024x2048 result and the 8x128x2048 GELU of it written over it)."""
    if a == b:
        return True
    if not (isinstance(a, ir.RankedTensorType) and isinstance(b, ir.RankedTensorType)):
        return False
    a, b = ir.RankedTensorType(a), ir.RankedTensorType(b)
    if a.element_type != b.element_type or not (a.has_static_shape and b.has_static_shape):
        return False
    na = nb = 1
    for d in a.shape:
        na *= d
    for d in b.shape:
        nb *= d
    return na == nb


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
    # in place also over a buffer the kernel reads through a reshape (the same elements in the
    # same order: a 2-D matmul result and its 3-D bias + GELU). The C++ target turns it off:
    # on the 2-core development machine (2026-11-26) the encoder's bias + GELU written over
    # fc1's result took 4.0 ms of CPU at one thread where a buffer of its own took 2.1-2.4, and
    # the encoder layer 2.1% more (47.60 vs 46.58 ms at one thread, 25.65 vs 25.12 ms of the
    # calling thread at two, interleaved): the 6 MB the arena saves cost more than they give.
    reshape_in_place: bool = True
    # place buffers in the memory of `ember.donated_args` after their last use
    donated_args: bool = True
    # returned buffers too, each at least `donated-outputs-fill` percent of the argument's
    # bytes (the caller keeps the whole argument with it). 0: wherever they fit (a
    # CUDA-graphed backward, whose donated arguments are the forward's saved activations, held
    # in its graph pool between steps anyway: frontend/options.py). Without graphs a lower
    # share than 50 costs memory: BERT 2 layers 16x128 fp32 on the CPU, returned buffers side
    # by side where together they filled half an argument: step peak 272.7 -> 295.2 MB (the
    # arguments they pinned were no longer freed after their last read).
    donated_outputs: bool = True
    donated_outputs_fill: int = option(50, min=0, max=100)
    # a remark (passes/remarks.py) per planned buffer and one for the arena
    print_plan: bool = False
    # buffers of at least this many bytes may get an allocation of their own, freed after
    # their last use, where that lowers the call's peak (0: any size; -1: never). (Its wrong
    # gradients, Llama tiny bf16 relative error 1.0, were the tries' placements leaking into
    # the plan kept: _place now depends on its groups alone.)
    own_min_bytes: int = option(-1, min=-1)

    def __post_init__(self):
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise OptionError(f"{self.name}: option 'alignment' must be a positive power of "
                              f"two, got {self.alignment}")

    def run(self, module: ir.Operation) -> None:
        result, ops, per_op = _plan(module, self.alignment, self.in_place, self.donated_args,
                                    self.donated_outputs,
                                    None if self.own_min_bytes < 0 else self.own_min_bytes,
                                    self.reshape_in_place, self.donated_outputs_fill)
        if not ops:
            return
        main = ops[0].operation.parent
        if DONATE.has(main):
            WRITES_ARGS.set(main, written_args(module, main, ops, DONATE.get(main)))
        for i, outs in per_op.items():
            offsets = [-1 if b is None or (b.escapes and b.arg is None) else b.offset
                       for b in outs]
            OFFSETS.set(ops[i], offsets)
            in_args = [-1 if b is None or b.arg is None else b.arg for b in outs]
            if any(a >= 0 for a in in_args):
                IN_ARGS.set(ops[i], in_args)
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
            if row["escapes"] and row["in_arg"] is not None:
                where = f" in %arg{row['in_arg']} at offset {row['offset']} (escapes)"
            elif row["escapes"]:
                where = ", own allocation (escapes)"
            elif row["own"]:
                where = ", own allocation (freed after its last use)"
            elif row["offset"] < 0:
                where = ", own allocation"
            else:
                where = f" at offset {row['offset']}"
                if row["in_arg"] is not None:
                    where = f" in %arg{row['in_arg']}{where}"
                if row["in_place_of"] is not None:
                    where += f" (in place of {row['in_place_of']})"
            first, last = row["live"]
            remarks.emit(ops[row["op"]].location, self.name,
                         f"buffer {row['name']}: {row['bytes']} bytes{where}, "
                         f"live [{first}, {last}]", **row)
        planned = sum(1 for r in rows if not r["escapes"])
        donated = ""
        if result["donated_args"]:
            donated = (f"; {result['in_args_bytes']} bytes in {result['reused_args']} of "
                       f"{result['donated_args']} donated arguments")
        remarks.emit(main.location, self.name,
                     f"arena {result['arena_bytes']} bytes for {planned} of {len(rows)} "
                     f"buffers ({result['unplanned_bytes']} bytes without reuse{donated})",
                     arena_bytes=result["arena_bytes"],
                     unplanned_bytes=result["unplanned_bytes"], buffers=len(rows),
                     in_args_bytes=result["in_args_bytes"])
