"""What a reduction `linalg.generic`'s body combines, read from its ops (shared by the C++ and
Triton lowerings): `combiner` (a plain `combine(f, out_k)` yield), `masked_combiner`
(`select(cond, combine(f, out_k), out_k)`: a reduction over the elements where `cond` holds) and
`needed_results` (the accumulators a kept result's body reads). Nothing here prints code.
"""
from __future__ import annotations

from typing import Optional

from torch_mlir import ir


def combiner(op, k: int, used=None) -> tuple[Optional[str], Optional[ir.Value]]:
    """For result k of a reduction generic: ('addf'|'maximumf'|..., the non-accumulator operand)
    when the yield is `combine(f, out_k)` and out_k feeds nothing else that is live (results
    not in `used` are dead), else (None, None): use the general (sequential) body path."""
    block = op.regions[0].blocks[0]
    out_arg = block.arguments[len(op.inputs) + k]
    term = list(block.operations)[-1]
    yielded = term.operands[k]
    owner = yielded.owner
    if not hasattr(owner, "operands") or len(owner.operands) != 2 or owner.name == "linalg.yield":
        return None, None
    live = _live_ops(term, used)
    if sum(1 for u in out_arg.uses if u.owner in live) != 1:
        return None, None
    a, b = owner.operands
    kind = owner.name.split(".", 1)[1] if "." in owner.name else owner.name
    if b == out_arg and a != out_arg:
        return kind, a
    if a == out_arg and b != out_arg:
        return kind, b
    return None, None


def _live_ops(term, used=None) -> set:
    """The ops of a reduction body that the yielded results `used` (default: all) depend on."""
    live, work = set(), [term.operands[i] for i in (used if used is not None
                                                     else range(len(term.operands)))]
    while work:
        o = work.pop().owner
        if hasattr(o, "operands") and hasattr(o, "name") and o not in live:
            live.add(o)
            work.extend(o.operands)
    return live


def masked_combiner(op, k: int, used=None):
    """(kind, operand, cond, take_when) for result k of a reduction generic whose yield is a
    masked update, `select(cond, combine(f, out_k), out_k)` (or with the arms swapped: then
    `take_when` is False): a reduction of `f` over the elements where `cond == take_when`
    (embedding_bag's bags, pooling windows). (None, None, None, None) otherwise. `cond` and `f`
    do not read out_k. Lowerings reduce `select(cond, f, identity)` with the plain combiner."""
    none = (None, None, None, None)
    block = op.regions[0].blocks[0]
    out_arg = block.arguments[len(op.inputs) + k]
    term = list(block.operations)[-1]
    sel = term.operands[k].owner
    if not hasattr(sel, "name") or sel.name != "arith.select":
        return none
    cond, a, b = sel.operands
    if b == out_arg and a != out_arg:
        comb, take = a, True
    elif a == out_arg and b != out_arg:
        comb, take = b, False
    else:
        return none
    owner = comb.owner
    if not hasattr(owner, "name") or owner.name == "linalg.yield" or len(owner.operands) != 2:
        return none
    x, y = owner.operands
    f = x if y == out_arg and x != out_arg else y if x == out_arg and y != out_arg else None
    if f is None or _reads(cond, out_arg) or _reads(f, out_arg):
        return none
    # out_k feeds nothing live but this select and its combine
    live = _live_ops(term, used)
    if sum(1 for u in out_arg.uses if u.owner in live) != 2:
        return none
    return owner.name.split(".", 1)[1], f, cond, take


def _reads(v, arg) -> bool:
    """Whether value `v` (in a generic's body) depends on block argument `arg`."""
    seen, work = set(), [v]
    while work:
        v = work.pop()
        if v == arg:
            return True
        o = v.owner
        if isinstance(v, ir.BlockArgument) or not hasattr(o, "operands") or o in seen:
            continue
        seen.add(o)
        work.extend(o.operands)
    return False


def needed_results(op, used) -> list[int]:
    """Results of reduction generic `op` whose accumulators must be kept: those in `used`,
    and every result whose accumulator (output block argument) a kept one's body reads (the
    running max that torch-mlir's argmax compares with, even when only the index is used)."""
    block = op.regions[0].blocks[0]
    n_in = len(op.inputs)
    term = list(block.operations)[-1]
    need, work = set(used), list(used)
    while work:
        seen, vals = set(), [term.operands[work.pop()]]
        while vals:
            v = vals.pop()
            if isinstance(v, ir.BlockArgument):
                j = ir.BlockArgument(v).arg_number - n_in
                if j >= 0 and j not in need:
                    need.add(j)
                    work.append(j)
                continue
            o = v.owner
            if o in seen or not hasattr(o, "operands"):
                continue
            seen.add(o)
            vals.extend(o.operands)
    return sorted(need)
