"""Softmax's normalization recognised in a kernel's linalg: `e / sum(e)` with
`e = exp(p - max(p))`, the max and the sum over the same dims. The C++ expression builder
(kernel_expr, `reciprocal_sums`) computes it as `e * (1 / sum(e))`, one divide a row, which is
what eager's CPU softmax does (SoftMaxKernel.cpp: `tmp_sum = 1 / tmp_sum`, then a multiply);
every such sum is at least 1 (the max's own term is exp(0)) or NaN, so the reciprocal never
overflows and the product is within about an ulp of the quotient."""
from __future__ import annotations

from torch_mlir import ir

from .ir_queries import indexing_maps, is_reduction, iterator_types, op_name


def divides_by_own_sum(div) -> bool:
    """Whether `div` (an arith.divf in a linalg.generic's body) is softmax's normalization
    `e / sum(e)` with `e = exp(p - max(p))`, the max and the sum over the same dims: then
    every sum is at least 1 (or NaN), and `e * (1 / sum)` is at most an ulp or so from the
    quotient, as in eager's kernel. The operands must be the generic's input block arguments,
    the sum a reduction generic with body `out + in` whose only input is e, read through the
    same map, and the division reading the sum through the reduction's output map."""
    num, den = div.operands
    if not (isinstance(num, ir.BlockArgument) and isinstance(den, ir.BlockArgument)):
        return False
    num, den = ir.BlockArgument(num), ir.BlockArgument(den)
    gen = num.owner.owner
    if op_name(gen) != "linalg.generic" or den.owner.owner != gen:
        return False
    n_in = len(gen.inputs)
    if num.arg_number >= n_in or den.arg_number >= n_in:
        return False
    e, total = gen.inputs[num.arg_number], gen.inputs[den.arg_number]
    red = total.owner
    if not _is_generic(red) or not is_reduction(red) or len(red.inputs) != 1 or \
            red.inputs[0] != e or len(red.results) != 1 or \
            _combiner(red, 0, "arith.addf") is None:
        return False
    maps, rmaps = indexing_maps(gen), indexing_maps(red)
    if maps[num.arg_number] != rmaps[0] or maps[den.arg_number] != rmaps[1]:
        return False
    return _exp_of_shift_by_max(e, red)


def _is_generic(op) -> bool:
    return not isinstance(op, ir.Block) and op_name(op) == "linalg.generic"


def _combiner(red, k, kind):
    """The k-th yield of reduction `red` when it is `kind(in, out_k)`, else None."""
    block = red.regions[0].blocks[0]
    y = list(block.operations)[-1].operands[k].owner
    if isinstance(y, ir.Block) or op_name(y) != kind:
        return None
    n_in = len(red.inputs)
    want = {block.arguments[0], block.arguments[n_in + k]}
    return y if n_in == 1 and set(y.operands) == want else None


def _elementwise_def(v, gen):
    """(scalar, generic): scalar `v` of `gen`'s body, looking through a block argument to the
    yield of the elementwise generic that produces that input (read through the output's own
    map); None where it is something else."""
    if not isinstance(v, ir.BlockArgument):
        return v, gen
    arg = ir.BlockArgument(v)
    maps = indexing_maps(gen)
    if arg.arg_number >= len(gen.inputs) or maps[arg.arg_number] != maps[-1]:
        return None
    src = gen.inputs[arg.arg_number].owner
    if not _is_generic(src) or is_reduction(src) or len(src.results) != 1:
        return None
    return _elementwise_def(list(src.regions[0].blocks[0].operations)[-1].operands[0], src)


def _exp_of_shift_by_max(e, red) -> bool:
    """Whether tensor `e` is exp(p - m), m the max of p over the dims `red` reduces."""
    gen = e.owner
    if not _is_generic(gen) or is_reduction(gen) or len(gen.results) != 1:
        return False
    x = list(gen.regions[0].blocks[0].operations)[-1].operands[0]
    if isinstance(x, ir.BlockArgument) or op_name(x.owner) != "math.exp":
        return False
    found = _elementwise_def(x.owner.operands[0], gen)
    if found is None or isinstance(found[0], ir.BlockArgument) or \
            op_name(found[0].owner) != "arith.subf":
        return False
    d, sub = found
    p, m = d.owner.operands
    if not all(isinstance(a, ir.BlockArgument) for a in (p, m)):
        return False
    p, m = ir.BlockArgument(p).arg_number, ir.BlockArgument(m).arg_number
    if p >= len(sub.inputs) or m >= len(sub.inputs) or \
            indexing_maps(sub)[p] != indexing_maps(sub)[-1]:
        return False
    p, m = sub.inputs[p], sub.inputs[m]
    while not isinstance(m.owner, ir.Block) and op_name(m.owner) in (
            "tensor.expand_shape", "tensor.collapse_shape"):
        m = m.owner.operands[0]
    mx = m.owner
    return (_is_generic(mx) and is_reduction(mx) and len(mx.inputs) == 1 and
            mx.inputs[0] == p and m == mx.results[0] and
            iterator_types(mx) == iterator_types(red) and
            indexing_maps(mx)[0] == indexing_maps(red)[0] and
            _combiner(mx, 0, "arith.maximumf") is not None)
