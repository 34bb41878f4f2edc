"""Sizes of dynamic-shape IR for ember-fuse (frontend/symbolic.py compiles graphs with `?` dims).

Size computations (`tensor.dim`, integer `arith`, shape checks) stay on the host; a kernel
takes the sizes its `tensor.empty`s need as arguments, and its call carries `ember.result_dims`
(`dim_value` finds, for each dynamic dim of a result, the host value holding its size).
"""
from torch_mlir import ir

from .base import PassError
from .fusion_legality import cloneable
from .graph_utils import bytes_of, defining_op, element_type_bits, op_name


def is_dynamic(fn) -> bool:
    """Whether `fn` takes or makes a tensor with `?` dims or takes a scalar (a symbolic size)."""
    ft = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    for t in list(ft.inputs) + list(ft.results):
        if not isinstance(t, ir.ShapedType) or not ir.ShapedType(t).has_static_shape:
            return True
    for op in fn.regions[0].blocks[0].operations:
        for r in op.results:
            if isinstance(r.type, ir.ShapedType) and not ir.ShapedType(r.type).has_static_shape:
                return True
    return False


def fusion_bytes(t) -> int:
    """Bytes of a tensor type, a dynamic dim counted as 64 (fusion order only)."""
    if not isinstance(t, ir.ShapedType):
        return 0
    st = ir.ShapedType(t)
    if st.has_static_shape:
        return bytes_of(t)
    n = 1
    for i in range(st.rank):
        n *= 64 if st.is_dynamic_dim(i) else st.get_dim_size(i)
    return n * max(element_type_bits(st.element_type) // 8, 1)


def is_size_op(op) -> bool:
    """A host-side size computation of a dynamic graph: `tensor.dim`, a shape check, or integer
    `arith` on scalars (sizes, symbolic ints)."""
    name = op_name(op)
    if name in ("tensor.dim", "cf.assert"):
        return True
    if name == "tensor.from_elements":      # the shape operand of a tensor.reshape
        return isinstance(ir.ShapedType(op.results[0].type).element_type,
                          (ir.IndexType, ir.IntegerType))
    if name in HOST_FLOAT_OPS:     # a float step of a size (arange's ceil(end / step))
        return _is_scalar_float_op(op)
    if not name.startswith("arith.") or not len(op.results):
        return False
    return all(isinstance(v.type, (ir.IndexType, ir.IntegerType))
               for v in list(op.results) + list(op.operands))


# Float arithmetic the host evaluates where a size goes through floats (frontend/export_program.py
# and runtime/executor.py know the same names); a float that a kernel reads is recomputed in it
# instead (`sink_scalar_float_ops`).
HOST_FLOAT_OPS = {"arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.addf",
                  "arith.subf", "arith.mulf", "arith.divf", "arith.negf", "arith.truncf",
                  "arith.extf", "arith.maximumf", "arith.minimumf", "arith.maxnumf",
                  "arith.minnumf", "math.ceil", "math.floor"}


def dim_value(value, i: int, in_group, anchor):
    """The host value holding the size of dynamic dim `i` of `value` (a group result): traced
    through destination-style ops to the `tensor.empty` or `tensor.expand_shape` that set it, or
    a `tensor.dim` made before `anchor` when it is a dim of a value from outside the group."""
    index = ir.IndexType.get()

    def constant(n):
        with ir.InsertionPoint(anchor), anchor.location:
            return ir.Operation.create("arith.constant", results=[index],
                                       attributes={"value": ir.IntegerAttr.get(index, n)})

    for _ in range(10000):
        op = defining_op(value)
        name = op_name(op) if op is not None else ""
        if not ir.ShapedType(value.type).is_dynamic_dim(i):
            return constant(ir.ShapedType(value.type).get_dim_size(i)).results[0]
        if op is None or (op not in in_group and not cloneable(op)):
            c = constant(i)
            with ir.InsertionPoint(anchor), anchor.location:
                return ir.Operation.create("tensor.dim", results=[index],
                                           operands=[value, c.results[0]]).results[0]
        if name == "tensor.empty":
            shape = ir.ShapedType(value.type).shape
            return op.operands[sum(1 for d in shape[:i] if d < 0)]
        if name == "tensor.expand_shape":
            shape = ir.ShapedType(value.type).shape
            return op.operands[1 + sum(1 for d in shape[:i] if d < 0)]
        if name == "tensor.cast":
            value = op.operands[0]
            continue
        if name == "tensor.pad":
            low = list(ir.DenseI64ArrayAttr(op.attributes["static_low"]))[i]
            high = list(ir.DenseI64ArrayAttr(op.attributes["static_high"]))[i]
            dyn = ir.ShapedType.get_dynamic_size()
            if low != dyn and high != dyn:
                d = dim_value(op.operands[0], i, in_group, anchor)
                if low + high == 0:
                    return d
                with ir.InsertionPoint(anchor), anchor.location:
                    return ir.Operation.create(
                        "arith.addi", results=[index],
                        operands=[d, constant(low + high).results[0]]).results[0]
        if name == "tensor.insert_slice":
            value = op.operands[1]
            continue
        if name == "tensor.extract_slice":
            static = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
            offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
            dyn = ir.ShapedType.get_dynamic_size()
            if len(static) == ir.ShapedType(value.type).rank and static[i] == dyn:
                n_off = sum(1 for o in offsets if o == dyn)
                return op.operands[1 + n_off + sum(1 for d in static[:i] if d == dyn)]
        if name == "tensor.concat":
            axis = int(ir.IntegerAttr(op.attributes["dim"]).value)
            if axis != i:
                value = op.operands[0]
                continue
            size = None
            for src in op.operands:
                d = dim_value(src, i, in_group, anchor)
                if size is not None:
                    with ir.InsertionPoint(anchor), anchor.location:
                        d = ir.Operation.create("arith.addi", results=[index],
                                                operands=[size, d]).results[0]
                size = d
            return size
        if name == "tensor.collapse_shape":
            # the product of the source dims it collapses, computed on the host
            group = [[int(ir.IntegerAttr(j).value) for j in ir.ArrayAttr(g)]
                     for g in ir.ArrayAttr(op.attributes["reassociation"])][i]
            size = None
            for j in group:
                d = dim_value(op.operands[0], j, in_group, anchor)
                if size is not None:
                    with ir.InsertionPoint(anchor), anchor.location:
                        d = ir.Operation.create("arith.muli", results=[index],
                                                operands=[size, d]).results[0]
                size = d
            return size
        if name.startswith("linalg.") and len(op.results):
            # destination style: result k has the shape of init k, the last operands
            k = list(op.results).index(value)
            value = op.operands[len(op.operands) - len(op.results) + k]
            continue
        raise PassError(f"ember-fuse: cannot tell the size of dynamic dim {i} of a result of "
                        f"'{name}' (the graph is compiled for static shapes instead)", op.location)
    raise PassError("ember-fuse: size chain too long")


def _is_scalar_float_op(op) -> bool:
    """Float `arith`/`math` on host scalars (a SymFloat of the graph: BatchNorm's
    unbiased-variance factor `n / (n - 1)` with n symbolic, arange's `ceil(end / step)`), as
    torch-mlir imports it: no tensor operand or result, some float operand or result."""
    name = op_name(op)
    if not name.startswith(("arith.", "math.")) or name == "arith.constant" \
            or not len(op.results):
        return False
    vals = list(op.results) + list(op.operands)
    if any(isinstance(v.type, ir.ShapedType) for v in vals):
        return False
    return any(isinstance(v.type, ir.FloatType) for v in vals)


def sink_scalar_float_ops(block) -> None:
    """Copies float scalar arithmetic on the host into the `linalg.generic` bodies that read it
    (a copy per body; later ops first, so a chain is copied whole): kernels take only integer
    sizes as scalar arguments and recompute the float from them. What the host still uses
    (a float step towards an integer size) stays on the host (`HOST_FLOAT_OPS`)."""
    for op in reversed(list(block.operations)):
        if not _is_scalar_float_op(op):
            continue
        bodies = []
        for r in op.results:
            for use in r.uses:
                owner = use.owner.operation
                parent = owner.parent
                if parent is not None and op_name(parent) == "linalg.generic" \
                        and owner.block not in bodies:
                    bodies.append(owner.block)
        for body in bodies:
            with ir.InsertionPoint.at_block_begin(body):
                clone = op.operation.clone()
            for old, new in zip(op.results, clone.results):
                for use in list(old.uses):
                    if use.owner.operation.block == body:
                        use.owner.operation.operands[use.operand_number] = new
        if not any(True for r in op.results for _ in r.uses):
            op.operation.erase()


def expand_affine_apply(block) -> None:
    """Host `affine.apply` on sizes (torch-mlir's size of a dynamic `tensor.concat`:
    `s0 + 1`) -> the same integer arithmetic in `arith`, which the host evaluates."""
    from torch_mlir.dialects import arith

    index = ir.IndexType.get()
    for op in list(block.operations):
        if op_name(op) != "affine.apply":
            continue
        amap = ir.AffineMapAttr(op.attributes["map"]).value
        n_dims = amap.n_dims
        with ir.InsertionPoint(op), op.location:
            def const(v):
                return arith.ConstantOp(index, v).result

            def build(e):
                for cls, fn in ((ir.AffineAddExpr, arith.AddIOp), (ir.AffineMulExpr, arith.MulIOp),
                                (ir.AffineFloorDivExpr, arith.FloorDivSIOp),
                                (ir.AffineCeilDivExpr, arith.CeilDivSIOp)):
                    if isinstance(e, cls):
                        return fn(build(e.lhs), build(e.rhs)).result
                if isinstance(e, ir.AffineModExpr):       # non-negative: a - floordiv(a, b) * b
                    lhs, rhs = build(e.lhs), build(e.rhs)
                    q = arith.FloorDivSIOp(lhs, rhs).result
                    return arith.SubIOp(lhs, arith.MulIOp(q, rhs).result).result
                if isinstance(e, ir.AffineConstantExpr):
                    return const(e.value)
                if isinstance(e, ir.AffineDimExpr):
                    return op.operands[e.position]
                if isinstance(e, ir.AffineSymbolExpr):
                    return op.operands[n_dims + e.position]
                raise PassError(f"ember-fuse: affine expression {e} on the host", op.location)

            (result,) = [build(e) for e in amap.results]
        op.results[0].replace_all_uses_with(result)
        op.operation.erase()
