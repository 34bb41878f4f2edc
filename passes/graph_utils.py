"""Small queries over the MLIR of one function body, shared by ember's passes.

Ops are handled as `ir.Operation` (not OpView) so that they hash and compare consistently.
"""
from torch_mlir import ir

from ..dialects.contract import PRELUDE, SOURCE, SYMBOL, TARGET, is_kernel
from .ir_queries import op_name  # noqa: F401  (re-exported: the passes' one op_name)

_BITS = {"f64": 64, "f32": 32, "f16": 16, "bf16": 16, "i64": 64, "i32": 32, "i16": 16,
         "i8": 8, "ui8": 8, "i1": 8, "index": 64}


def defining_op(value):
    """The ir.Operation that defines `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation


def _value_block(value):
    owner = value.owner
    return owner if isinstance(owner, ir.Block) else owner.operation.block


def users(value) -> list:
    """Ops in the same block as `value`'s definition that use it (directly or in a region)."""
    block = _value_block(value)
    out = []
    for use in value.uses:
        o = use.owner.operation
        while o is not None and o.block != block:
            o = o.parent
        if o is not None and o not in out:
            out.append(o)
    return out


def element_type_bits(t) -> int:
    key = str(t)
    if key not in _BITS:
        raise ValueError(f"unsupported element type {key}")
    return _BITS[key]


def element_count(t) -> int:
    shaped = ir.ShapedType(t)
    if not shaped.has_static_shape:
        return -1
    n = 1
    for d in shaped.shape:
        n *= d
    return n


def bytes_of(t) -> int:
    """Bytes of a statically shaped tensor type; 0 for scalars and dynamic shapes."""
    if not isinstance(t, ir.ShapedType):
        return 0
    n = element_count(t)
    if n < 0:
        return 0
    return n * element_type_bits(ir.ShapedType(t).element_type) // 8


def is_zero_constant(value) -> bool:
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value == 0.0
    if isinstance(attr, ir.IntegerAttr):
        return ir.IntegerAttr(attr).value == 0
    return False


def is_float_constant(value, number: float) -> bool:
    """Whether `value` is an arith.constant float (or a splat of one) equal to `number`."""
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    if isinstance(attr, ir.DenseElementsAttr):
        attr = ir.DenseElementsAttr(attr).get_splat_value()
    return isinstance(attr, ir.FloatAttr) and ir.FloatAttr(attr).value == number


def stable_topological_sort(block) -> None:
    """Reorders `block` so every op follows the producers of its operands (including operands
    used inside its regions), keeping the original order where it is already valid."""
    ops = [o.operation for o in block.operations]
    terminator = ops[-1]
    body = ops[:-1]
    pos = {o: i for i, o in enumerate(body)}
    deps = {o: set() for o in body}

    def collect(root, o):
        for v in o.operands:
            p = defining_op(v)
            while p is not None and p.block != block:
                p = p.parent
            if p is not None and p in pos and p != root:
                deps[root].add(p)
        for region in o.regions:
            for blk in region.blocks:
                for inner in blk.operations:
                    collect(root, inner.operation)

    for o in body:
        collect(o, o)
    if all(pos[d] < pos[o] for o in body for d in deps[o]):
        return
    import heapq
    indeg = {o: len(deps[o]) for o in body}
    rdeps = {o: [] for o in body}
    for o in body:
        for d in deps[o]:
            rdeps[d].append(o)
    heap = [(pos[o], id(o), o) for o in body if indeg[o] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, _, o = heapq.heappop(heap)
        order.append(o)
        for r in rdeps[o]:
            indeg[r] -= 1
            if indeg[r] == 0:
                heapq.heappush(heap, (pos[r], id(r), r))
    if len(order) != len(body):
        raise ValueError("cycle in function body")
    for o in order:
        o.move_before(terminator)


def _ir_text(op, name: str) -> str:
    """The kernel function's IR (attributes, types, body) with its own name left out."""
    return op.get_asm(print_generic_op_form=True, use_local_scope=True).replace(f'"{name}"', '"\0"')


def attach_kernel_sources(module, target: str, prelude: str, lower) -> None:
    """The lowering passes' common shape: `lower(kernel_func, name) -> source` for every
    `ember.kernel` function, stored as `ember.source` / `ember.symbol` on it, and the module's
    `ember.target` / `ember.prelude` (docs/internals.md, stage 4).

    A kernel whose source is an earlier kernel's but for its name (the same layer repeated in a
    transformer) gets an empty `ember.source` and the earlier one's `ember.symbol`: the code is
    built (and JIT-compiled, autotuned) once. A kernel whose IR is an earlier kernel's but for
    its name is not lowered at all (lowering reads nothing but the kernel's IR and name): the
    layers of a transformer are lowered once."""
    seen: dict[str, str] = {}
    same_ir: dict[str, str] = {}
    with module.context:
        for op in module.regions[0].blocks[0].operations:
            if not is_kernel(op):
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            text = _ir_text(op, name)
            symbol, src = same_ir.get(text), ""
            if symbol is None:
                src = lower(op, name)
                symbol = seen.setdefault(src.replace(name, "\0"), name)
                same_ir[text] = symbol
            SOURCE.set(op, src if symbol == name else "")
            SYMBOL.set(op, symbol)
        TARGET.set(module, target)
        PRELUDE.set(module, prelude)


def remap_operands(op, mapping) -> None:
    """Every operand of `op` and of the ops nested in it that `mapping` names is replaced by
    its image (a cloned op made to read the clones of its producers)."""
    def visit(o):
        for i, v in enumerate(o.operands):
            if v in mapping:
                o.operands[i] = mapping[v]
        return ir.WalkResult.ADVANCE

    op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)


def outer_generics(module) -> list:
    """The `linalg.generic` ops of `module` not nested in another one (as OpViews), in order:
    what a pass that rewrites whole generics visits."""
    found = []

    def visit(op):
        if op_name(op) == "linalg.generic":
            found.append(op.opview)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found
