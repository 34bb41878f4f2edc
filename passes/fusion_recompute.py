"""ember-fuse's last step: cheap pointwise producers recomputed in the kernels that read them.

Invariant: after `recompute_producers`, a pointwise value that one kernel (A) would store only
for other kernels (B...) to read back is, where that costs fewer bytes of memory traffic,
computed again inside each reader from the values it is computed from (A's inputs), and A no
longer stores it (its ops that nothing else needs leave A). Every group stays a kernel shape
code generation accepts (the same legality as fusion: `fusion_legality.refusal`), and no
kernel reads a value computed after it.

Why: a layer norm's backward reduces one pointwise product two ways: over the hidden dim per row
(the input gradient's sums: one kernel with the input gradient) and over the rows per column
(the weight and bias gradients). One loop nest cannot do both, so the row kernel stored the
products (`dy * xhat`, `dy` widened to f32) in full and the column kernel read them back: a full
f32 tensor written and read per product. Read from the values the row kernel already read
(`dy`, `xhat`), they cost one read each, and the column kernel often reads `dy` anyway.
Inductor does the same (a pointwise node is inlined into every consumer that can compute it).

The cost model counts bytes of memory traffic, per value `v` of kernel A read by kernels B:
saved = |v| (A's store, when no reader is left) + |v| per B (its load), less the bytes of
the values each B newly reads to compute `v` (those it does not read already), less the bytes
A newly stores (a value of A's that the recomputation reads and A did not return). Only a
positive saving is applied. What is recomputed ("the cone" of v): the ops of A that `v` depends
on through all-parallel `linalg.generic`s (no gathers), views, transposes, broadcasts,
slices, pads and concats (index arithmetic in a kernel), at most `max_ops` compute ops; it
stops at values computed outside A and at A's values that are not cheap (a reduction's
result), or smaller than `v` and stored by A anyway (a norm's per-row statistics, which
every element would compute again): those are read from A, which then returns them.
"""
from __future__ import annotations

import dataclasses
import functools

from torch_mlir import ir

from . import fusion_legality, remarks
from .dynamic_sizes import fusion_bytes
from .graph_utils import defining_op, op_name, remap_operands, users
from .ir_queries import VIEW_OPS, iterator_types

# ops a kernel may compute again instead of reading the value back
_CHEAP = {"linalg.transpose", "linalg.broadcast", "tensor.extract_slice", "tensor.pad",
          "tensor.concat"} | set(VIEW_OPS)
# Rounds of the search: a value recomputed into B makes B read new values, which make the next
# value's recomputation cheaper (the second product of a layer norm backward reads `dy` too).
ROUNDS = 3
# Values `recompute_producers` did not ask _try_value about again (nothing changed since it
# found nothing for them); with "verify" (tests) it asks anyway and lists in "wrong" every
# decision such a question found.
SKIPS: dict = {"skipped": 0, "verify": False, "wrong": []}


@dataclasses.dataclass
class Decision:
    """One value recomputed: in which kernels, how many ops, how many bytes saved."""
    location: object        # of the op of A that computed the value (it may be erased)
    tag: str                # what it computes ('mul')
    consumers: list         # tags of the reading kernels' first reading ops
    ops: int                # compute ops recomputed per consumer
    saved: int              # bytes of memory traffic saved
    merged: int = 0         # consumers merged with a kernel that reads what they now read


@dataclasses.dataclass
class _Plan:
    """Recomputing a value in one consumer group."""
    group: int
    readers: list           # the group's ops that read the value
    cone: list              # the ops to clone, in order
    leaves: list            # the values they read
    new: int                # bytes of leaves the group does not read yet
    partner: tuple | None   # (group, bytes): another kernel reading those leaves, to merge with
    reuse: dict = dataclasses.field(default_factory=dict)   # A's value -> B's equal value


def _op(o):
    return o.operation


def _cheap(op) -> bool:
    name = op_name(op)
    if name in _CHEAP:
        return True
    if name != "linalg.generic" or "parallel" not in iterator_types(op) or \
            any(k != "parallel" for k in iterator_types(op)):
        return False
    body = op.regions[0].blocks[0].operations
    return not any(b.operation.name == "tensor.extract" for b in body)


def _outer_operands(op) -> list:
    """Values read by `op`: its operands, and the values its regions read from outside it
    (a gather's table)."""
    out = list(op.operands)
    if not len(op.regions):
        return out
    inner = set()

    def visit(o):
        if o is not op:
            inner.update(o.results)
        for region in o.regions:
            for blk in region.blocks:
                inner.update(blk.arguments)
        return ir.WalkResult.ADVANCE

    def reads(o):
        if o is not op:
            out.extend(v for v in o.operands if v not in inner and v not in out)
        return ir.WalkResult.ADVANCE

    op.walk(visit, ir.WalkOrder.PRE_ORDER)
    op.walk(reads, ir.WalkOrder.PRE_ORDER)
    return out


class _Groups:
    """The groups (lists of ops) and which group each op is in, kept in step. Sets and dicts
    of ops live only while the IR does not change, except `where`, which `_rewire` keeps valid
    (an op's hash changes with its operands)."""

    def __init__(self, groups):
        self.groups = [[_op(o) for o in g] for g in groups]
        self.where = {o: i for i, g in enumerate(self.groups) for o in g}
        # `_outer_operands` by op, while _try_value weighs its plans (it changes no IR until
        # it applies one): a value read by many kernels (a dense block's concatenated
        # gradient, sliced for each earlier layer: 24 readers) had its producer's cone walked
        # once per reader, each op's regions walked again each time. None: not kept.
        self.outer: dict | None = None
        # `_cheap` by op for the whole pass (it reads names, iterator types and bodies, which
        # the pass never changes): the operation object held, so that its id is not reused
        self.cheap: dict = {}
        # `inputs` by group, valid until the next decision: _try_value leaves the groups and
        # the IR as they were when it decides nothing (recompute_producers bumps `version`)
        self.version = 0
        self._inputs: dict = {}

    def outer_operands(self, op) -> list:
        if self.outer is None:
            return _outer_operands(op)
        got = self.outer.get(id(op))
        if got is None or got[0] is not op:
            got = self.outer[id(op)] = (op, _outer_operands(op))
        return got[1]

    def is_cheap(self, op) -> bool:
        got = self.cheap.get(id(op))
        if got is None or got[0] is not op:
            got = self.cheap[id(op)] = (op, _cheap(op))
        return got[1]

    def inputs(self, gi) -> set:
        """Values group `gi` reads that are computed outside it (cheap producers left out).
        The set is shared: callers do not change it."""
        got = self._inputs.get(gi)
        if got is None or got[0] != self.version:
            got = self._inputs[gi] = (self.version, self._read_from_outside(gi))
        return got[1]

    def _read_from_outside(self, gi) -> set:
        inside = set(self.groups[gi])
        out = set()
        for o in self.groups[gi]:
            for v in self.outer_operands(o):
                p = defining_op(v)
                if p is not None and (p in inside or fusion_legality.cloneable(p)):
                    continue
                if isinstance(v.type, ir.ShapedType):
                    out.add(v)
        return out

    def outputs(self, gi) -> list:
        inside = set(self.groups[gi])
        return [r for o in self.groups[gi] for r in o.results
                if any(u not in inside or op_name(u) == "func.return" for u in users(r))]


class _Verdicts:
    """fusion_legality.refusal memoized by structure, as the planner's RefusalMemo is (equal
    keys, equal verdicts): a repeated layer's candidates are judged once, not rebuilt per layer.
    Keys are computed afresh each time (`fresh_group_key`): this pass rewires readers."""

    def __init__(self, fuse_reductions: bool, target: str):
        self.fuse_reductions, self.target = fuse_reductions, target
        self._seen: dict = {}
        self._signatures: dict = {}     # this pass sets no attribute and edits no body

    def refusal(self, ops, results=None):
        key = fusion_legality.fresh_group_key(ops, self._signatures)
        if results is not None:     # the results named (positions in `ops`) are part of it
            where = {r: (i, j) for i, o in enumerate(ops) for j, r in enumerate(o.results)}
            key = (key, tuple(where[r] for r in results))
        if key not in self._seen:
            self._seen[key] = fusion_legality.refusal(ops, self.fuse_reductions, self.target,
                                                      results=results)
        return self._seen[key]


def recompute_producers(block, groups, *, target: str, fuse_reductions: bool,
                        max_group_size: int, max_ops: int = 16, held_bytes: int = 1 << 20,
                        explain: bool = False,
                        pass_name: str = "ember-fuse") -> list[list]:
    """The groups after recomputation (see the module's docstring); the IR changes with them
    (clones of recomputed ops placed before their readers, ops no longer needed erased). With
    `explain`, a remark at each recomputed value's producer."""
    state = _Groups(groups)
    state.verdicts = _Verdicts(fuse_reductions, target)
    # each op's `_shape` (this pass sets no attribute and edits no body), for _equal_values
    state.shapes = {}
    decisions: list[Decision] = []
    # (group, value) -> how many decisions there were when _try_value last found nothing to
    # do for it. _try_value reads only the groups and the IR and leaves both as they were when
    # it decides nothing (its trial clones erased, the readers rewired back), so until the
    # next decision it would find nothing again: a later round asks again only after one (a
    # round that changes nothing cost as much as the first: swin_t's backward, 2 of 3 rounds).
    nothing_at: dict = {}
    for _ in range(ROUNDS):
        changed = False
        for gi in range(len(state.groups)):
            # a decision erases ops of the group: its outputs are looked up again after one
            again = True
            while again:
                again = False
                for v in state.outputs(gi):
                    skip = nothing_at.get((gi, v)) == len(decisions)
                    if skip:
                        SKIPS["skipped"] += 1
                        if not SKIPS["verify"]:
                            continue
                    d = _try_value(state, gi, v, target, fuse_reductions, max_group_size,
                                   max_ops, held_bytes)
                    if skip and d is not None:
                        SKIPS["wrong"].append(d)
                    if d is not None:
                        decisions.append(d)
                        state.version += 1
                        changed = again = True
                        break
                    nothing_at[(gi, v)] = len(decisions)
        if not changed:
            break
    if explain:
        for d in decisions:
            n = len(d.consumers)
            remarks.emit(d.location, pass_name,
                         f"recomputed '{d.tag}' in {n} consumer{'s' if n != 1 else ''} "
                         f"({', '.join(repr(c) for c in d.consumers)})"
                         + (f", merged with {d.merged} kernel{'s' if d.merged != 1 else ''} "
                            f"reading its inputs" if d.merged else "") + f": {d.ops} "
                         f"op{'s' if d.ops != 1 else ''}, {d.saved} bytes less memory traffic",
                         recomputed=d.tag, consumers=d.consumers, ops=d.ops, merged=d.merged,
                         bytes_saved=d.saved,
                         producer_at=remarks.short_location(d.location))
    return [g for g in state.groups if g]


def _cone(state, gi, v, max_ops, read, stored, same=None, narrow=False):
    """(ops of group gi that compute v, in block order; leaves: the values they read from
    outside the cone; reuse: A's values the consumer computes itself, mapped to its own)
    or None when v is not cheap to recompute. The walk stops at values the consumer already
    `read`s (free to read again), at values it computes itself (`same(val)`: its equal value
    or None) and at A's values that are not cheap. With `narrow`, also at A's values of v's
    elements in fewer bytes (A stores those instead: a bf16 gradient that A computes with a
    long gather and returns only widened to f32 is stored as bf16, and widened by its readers)."""
    members = set(state.groups[gi])
    cone, leaves, stack, reuse = set(), [], [v], {}
    seen = set()
    while stack:
        val = stack.pop()
        if val in seen:
            continue
        seen.add(val)
        p = defining_op(val)
        if val is not v and same is not None and p is not None and p in members:
            twin = same(val)
            if twin is not None:
                reuse[val] = twin
                continue
        if p is None or p not in members or fusion_legality.cloneable(p) or \
                (val is not v and val in read):
            if p is None or not fusion_legality.cloneable(p):
                leaves.append(val)
            continue
        if not state.is_cheap(p) or (val is not v and val in stored and
                             (_elements(val.type) < _elements(v.type) or
                              fusion_bytes(val.type) < fusion_bytes(v.type))) or \
                (narrow and val is not v and _elements(val.type) == _elements(v.type) and
                 fusion_bytes(val.type) < fusion_bytes(v.type)):
            if val is v:
                return None
            # read from A (which returns it): a value that is not cheap, or a smaller one A
            # stores anyway (a norm's per-row statistics, that each element would compute
            # again; a bf16 residual sum whose f32 ReLU-masked copy is recomputed)
            leaves.append(val)
            continue
        cone.add(p)
        stack.extend(state.outer_operands(p))
    if sum(op_name(o) not in VIEW_OPS for o in cone) > max_ops or \
            not any(op_name(o) not in VIEW_OPS for o in cone):
        return None
    ordered = [o for o in state.groups[gi] if o in cone]
    return ordered, [lv for lv in leaves if isinstance(lv.type, ir.ShapedType)], reuse


# ops that compute a value from their operands alone: equal ops over equal operands are equal
_PURE_DIALECTS = ("linalg.", "tensor.", "arith.", "math.")


def _equal_values(ops_a, ops_b, readers, shapes=None):
    """`same(val)` for a value `val` of group A: the value of group B's that computes the same
    (the same ops, attributes and bodies over the same values from outside both groups) and is
    made before B's first reader of A's value, or None. A value that A computes and B computes
    too (a backward's recomputed `dy`, the same as the summand's factor) is then read from B's
    own op instead of computed a second time: such a value costs B no op and no load.

    `shapes`: each op's `_shape` kept across calls (by the operation object's identity, held),
    for a caller that sets no attribute and edits no body of an op it asks about."""
    scope = set(ops_a) | set(ops_b)
    first = min(readers, key=_BLOCK_ORDER)
    keys: dict = {}
    # structural keys hash-consed to small integers: a key names its operands by their
    # numbers, so it stays shallow (nested tuples grew with the depth of shared subexpressions
    # and were hashed again at each level: 16 s of ember-fuse on i1e's backward, 0.4 s before)
    numbers: dict = {}

    def key(val):
        got = keys.get(val)
        if got is not None:
            return got
        p = defining_op(val)
        if p is None or not (p in scope or fusion_legality.cloneable(p)) or \
                not p.name.startswith(_PURE_DIALECTS):
            shape = ("value", val)
        else:
            shape = (p.name, _attributes(p), _body_key(p, key),
                     tuple(key(x) for x in p.operands),
                     [i for i, r in enumerate(p.results) if r == val][0], val.type)
        got = numbers.setdefault(shape, len(numbers))
        keys[val] = got
        return got

    # B's values by `_shape`, in block order: equal keys have equal shapes, so a value whose
    # shape no candidate has has no twin, and its key (a walk of its operands' definitions,
    # their attributes and bodies) is not computed. A concat's gradient sliced for each of a
    # dense block's earlier layers was asked about in each of 24 consumer kernels, its cone's
    # keys computed afresh each time (densenet121's backward).
    shapes = {} if shapes is None else shapes
    by_shape: dict = {}
    for o in ops_b:
        if o != first and o.is_before_in_block(first):
            for r in o.results:
                by_shape.setdefault(_value_shape(r, shapes), []).append(r)

    def same(val):
        candidates = by_shape.get(_value_shape(val, shapes))
        if not candidates:
            return None
        # the first of B's values (in block order) with val's key, as a table of every
        # candidate's key would give
        k = key(val)
        twin = next((r for r in candidates if key(r) == k), None)
        return None if twin is None or twin == val else twin

    return same


def _value_shape(val, shapes: dict):
    """What `_equal_values`' key of `val` holds that does not depend on other values (a
    coarser key: equal keys have equal shapes): for a value of a pure op, the op's name,
    attributes and body (reads of outer values not named), its operand count, which result
    and the type; the value itself otherwise. (A value whose op is outside the scope is keyed
    as itself there; it is never a candidate, nor asked about.)"""
    p = defining_op(val)
    if p is None or not p.name.startswith(_PURE_DIALECTS):
        return ("value", val)
    got = shapes.get(id(p))
    if got is None or got[0] is not p:
        got = shapes[id(p)] = (p, (p.name, _attributes(p), _body_shape(p), len(p.operands)))
    return got[1], val.result_number, val.type


def _body_shape(op) -> tuple:
    """`_body_key` without the outer values' keys (each such read is ("outer", None)); a body
    with nested regions is keyed as its op, as there (equal keys still have equal shapes)."""
    return _body_key(op, _no_key)


def _no_key(value):
    return None


def _attributes(op) -> tuple:
    attrs = op.attributes
    return tuple((a.name, a.attr) for a in (attrs[i] for i in range(len(attrs))))


def _body_key(op, key) -> tuple:
    """The ops of `op`'s regions, each with its attributes, result types and what it reads: a
    block argument (by position), an earlier op's result of the body, or a value from outside
    (by `key`)."""
    if not len(op.regions):
        return ()
    parts = []
    for region in op.regions:
        for blk in region.blocks:
            local = {a: ("arg", i) for i, a in enumerate(blk.arguments)}
            for j, b in enumerate(blk.operations):
                b = b.operation
                if len(b.regions):
                    return ("opaque", op)      # nested regions: equal to itself only
                parts.append((b.name, _attributes(b),
                              tuple(local[x] if x in local else ("outer", key(x))
                                    for x in b.operands),
                              tuple(r.type for r in b.results)))
                for i, r in enumerate(b.results):
                    local[r] = ("local", j, i)
    return tuple(parts)


def _elements(t) -> int:
    """Elements of a tensor type (a dynamic dim counted as 64, as fusion_bytes does)."""
    if not isinstance(t, ir.ShapedType):
        return 1
    st = ir.ShapedType(t)
    n = 1
    for i in range(st.rank):
        n *= 64 if st.is_dynamic_dim(i) else st.get_dim_size(i)
    return n


def _compute_ops(ops) -> int:
    return sum(op_name(o) not in VIEW_OPS for o in ops)


def _try_value(state, gi, v, target, fuse_reductions, max_group_size, max_ops, held_limit):
    outside = [u for u in users(v) if state.where.get(u) != gi]
    consumer_groups: dict = {}
    for u in outside:
        g = state.where.get(u)
        if g is not None:
            consumer_groups.setdefault(g, []).append(u)
    if not consumer_groups:
        return None
    # still stored when something else reads it (returned, a library call, a host view)
    stays = any(state.where.get(u) is None for u in outside)
    members_a = set(state.groups[gi])
    a_outputs = set(state.outputs(gi))
    size = fusion_bytes(v.type)

    plans = []          # _Plan per consumer group
    state.outer = {}    # no IR changes until a plan is applied
    for bi, readers in sorted(consumer_groups.items()):
        read = state.inputs(bi)
        same = _equal_values(state.groups[gi], state.groups[bi], readers, state.shapes)
        got = _cone(state, gi, v, max_ops, read, a_outputs, same) or \
            _cone(state, gi, v, max_ops, read, a_outputs, same, narrow=True)
        if got is None or _compute_ops(state.groups[bi]) + _compute_ops(got[0]) > \
                max_group_size:
            continue
        cone, leaves, reuse = got
        new = [lv for lv in leaves if lv not in read]
        plans.append(_Plan(bi, readers, cone, leaves, sum(fusion_bytes(lv.type) for lv in new),
                           _partner(state, gi, bi, set(consumer_groups), new), reuse))

    # A kernel whose one result is v is gone once v moves: its loads go with it
    a_loads = sum(fusion_bytes(x.type) for x in state.inputs(gi)) \
        if list(a_outputs) == [v] else 0
    state.outer = None

    def saving(chosen, with_partners=True) -> int:
        """Bytes of traffic saved by recomputing v in the `chosen` plans' groups."""
        all_moved = len(chosen) == len(consumer_groups) and not stays
        saved = size if all_moved else 0
        stored = set()
        for plan in chosen:
            shared = plan.partner[1] if plan.partner and with_partners else 0
            saved += size - (plan.new - shared)
            stored.update(lv for lv in plan.leaves
                          if defining_op(lv) in members_a and lv not in a_outputs)
        if all_moved and not stored:
            saved += a_loads
        return saved - sum(fusion_bytes(lv.type) for lv in stored)

    if not plans or saving(plans) <= 0:      # not even if every consumer may recompute it
        return None
    applied = []        # (plan, clones, mapping)
    for plan in plans:
        ops_b = state.groups[plan.group]
        clones, mapping = _clone_before(plan.cone, min(plan.readers, key=_position(ops_b)),
                                        plan.reuse)
        _rewire(state.where, plan.readers, {v: mapping[v]})
        candidate = sorted(ops_b + clones, key=_position(ops_b + clones))
        if plan.partner is not None:
            # with the kernel that reads what the recomputation reads: read once
            ops_p = state.groups[plan.partner[0]]
            joint = sorted(candidate + ops_p, key=_position(candidate + ops_p))
            if _compute_ops(joint) > max_group_size or \
                    _held_bytes(candidate, ops_p) > held_limit or \
                    _cycle(state, set(candidate), set(ops_p)) or \
                    state.verdicts.refusal(joint) is not None:
                plan.partner = None
        if state.verdicts.refusal(candidate) is None:
            applied.append((plan, clones, mapping))
        else:
            _undo(state.where, plan.readers, v, mapping, clones)
    if not applied:
        return None

    all_moved = len(applied) == len(consumer_groups) and not stays
    saved = saving([a[0] for a in applied])
    # A without the ops nothing needs any more must stay a kernel code generation accepts
    dead = _dead_ops(state.groups[gi]) if all_moved else []
    rest = [o for o in state.groups[gi] if o not in set(dead)]
    legal_a = not rest or all(op_name(o) in VIEW_OPS for o in rest) or \
        _refusal_without(rest, dead, state.verdicts) is None
    if saved <= 0 or not legal_a:
        for plan, clones, mapping in applied:
            _undo(state.where, plan.readers, v, mapping, clones)
        return None

    producer = defining_op(v)
    cone_ops = [o for o in applied[0][0].cone if op_name(o) not in VIEW_OPS]
    decision = Decision(location=producer.location,
                        tag=fusion_legality.describe(cone_ops[-1]) or op_name(cone_ops[-1]),
                        consumers=[], ops=max(_compute_ops(a[0].cone) for a in applied),
                        saved=saved)
    for plan, clones, _ in applied:
        bi = plan.group
        joined = state.groups[bi] + clones
        if plan.partner is not None:
            pi = plan.partner[0]
            joined += state.groups[pi]
            for o in state.groups[pi]:
                state.where[o] = bi
            state.groups[pi] = []
            decision.merged += 1
        state.groups[bi] = sorted(joined, key=_position(joined))
        for c in clones:
            state.where[c] = bi
        first = min(plan.readers, key=_position(state.groups[bi]))
        decision.consumers.append(fusion_legality.describe(first) or op_name(first))
    for o in reversed(dead):
        del state.where[o]
        o.erase()
    state.groups[gi] = rest
    return decision


def _partner(state, gi, bi, consumers, new):
    """(group, bytes): the kernel other than A, B and v's other consumers that reads the most
    bytes of `new` (what B would newly read), or None."""
    shared: dict = {}
    for lv in new:
        for u in users(lv):
            g = state.where.get(u)
            if g is not None and g != gi and g != bi and g not in consumers:
                shared.setdefault(g, set()).add(lv)
    if not shared:
        return None
    g = max(shared, key=lambda k: (sum(fusion_bytes(x.type) for x in shared[k]), -k))
    return g, sum(fusion_bytes(x.type) for x in shared[g])


def _held_bytes(ops_a, ops_b) -> int:
    """Bytes of computed values that the earlier of two groups reads, which one kernel of
    both (run where the later one ran) keeps alive longer (ember-fuse's recompute-held-bytes)."""
    pos = _position(ops_a + ops_b)
    early = ops_a if max(map(pos, ops_a)) < max(map(pos, ops_b)) else ops_b
    inside, seen, total = set(ops_a) | set(ops_b), set(), 0
    for o in early:
        for val in _outer_operands(o):
            p = defining_op(val)
            if p is None or p in inside or fusion_legality.cloneable(p) or val in seen:
                continue
            seen.add(val)
            total += fusion_bytes(val.type)
    return total


def _cycle(state, ops_a, ops_b) -> bool:
    """Would one kernel of both groups make a cycle (a path from one to the other through an
    op or kernel outside both)? A kernel is entered whole."""
    both = ops_a | ops_b
    stack = [u for o in both for r in o.results for u in users(r) if u not in both]
    seen = set()
    while stack:
        u = stack.pop()
        if u in both:
            return True
        if u in seen:
            continue
        g = state.where.get(u)
        unit = state.groups[g] if g is not None else [u]
        seen.update(unit)
        for o in unit:
            for r in o.results:
                stack.extend(x for x in users(r) if x not in seen)
    return False


def _position(ops):
    """A sort key: block order (of ops of one block). MLIR keeps the order of a block's ops
    (`is_before_in_block`, renumbered only when an insertion needs it): a dict of every op's
    position, built per call, was most of this pass's time on a large backward (efficientnet_b0:
    2000 calls over 6000 ops)."""
    return _BLOCK_ORDER


def _before(a, b) -> int:
    if a == b:
        return 0
    return -1 if a.is_before_in_block(b) else 1


_BLOCK_ORDER = functools.cmp_to_key(_before)


def _clone_before(cone, anchor, reuse=None):
    """Clones of the cone's ops (in order) before `anchor`, reading `reuse`'s images of the
    values it names; the clones and old -> new values."""
    mapping, clones = dict(reuse or {}), []
    with ir.InsertionPoint(anchor):
        for op in cone:
            c = op.clone()
            remap_operands(c, mapping)
            for old, new in zip(op.results, c.results):
                mapping[old] = new
            clones.append(c.operation)
    return clones, mapping


def _undo(where, readers, v, mapping, clones) -> None:
    """The readers read `v` again; its clones are erased."""
    _rewire(where, readers, {mapping[v]: v})
    for c in reversed(clones):
        c.erase()


def _rewire(where, readers, mapping) -> None:
    """Replaces the readers' operands by `mapping`. An `ir.Operation` hashes as its structure
    does, operands included: the readers are keyed in `where` again (equality stays that of the
    op itself)."""
    groups = [where.pop(r) for r in readers]
    for r in readers:
        remap_operands(r, mapping)
    for r, g in zip(readers, groups):
        where[r] = g


def _dead_ops(group) -> list:
    """Ops of `group` (in order) whose results nothing reads any more (returned ones live)."""
    dead: set = set()
    for o in reversed(group):
        if all(u in dead for r in o.results for u in users(r)):
            dead.add(o)
    return [o for o in group if o in dead]


def _refusal_without(rest, dead, verdicts):
    """fusion_legality.refusal for `rest`, as if the `dead` ops were gone already (their reads
    of `rest`'s values are no reason to return them)."""
    gone = set(dead)
    inside = set(rest)
    results = [r for o in rest for r in o.results
               if any((u not in inside and u not in gone) or op_name(u) == "func.return"
                      for u in users(r))]
    return verdicts.refusal(rest, results=results)
