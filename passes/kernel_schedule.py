"""Loop structure of an ember kernel, shared by the C++ and Triton lowerings (and used by
ember-fuse as its legality check).

API (stable):

    sched = schedule_kernel(func_op)        # or schedule_ops(ops, results, args)
    # raises Unschedulable(reason, location) when the kernel is not of a shape of internals.md
    sched.kind                 # "pointwise" | "reduction"
    sched.outer                # P: list of global dims (ints), outermost first
    sched.reductions           # [Reduction(op, parallel=[g..], reduced=[g..])], in op order
    sched.outputs              # [Output(value, dims=[g per tensor dim], inner=[g not in P])]
    sched.dims(value)          # global dim of each tensor dim of `value`
    sched.size(g)              # static int or None (dynamic)
    sched.size_index(g)        # index into the ABI's `sizes` table of a dynamic dim
    sched.size_offsets         # sizes-table offset of each argument then each result

Per-element expressions over a schedule are kernel_expr's (`ExprBuilder`, `Expr`, `const`,
`var`); what a reduction's body combines is reduction_body's; single-op questions (`shape`,
`type_name`, `indexing_maps`, ...) are ir_queries'.

Global dims: a union-find over the dims of every tensor value and loop of every op, linked
through indexing maps, transposes/broadcasts and reshapes of unit dims. A dim of static size 1
that is not bound by any loop is read at index 0. Nothing here builds or prints code.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

from torch_mlir import ir

from ..dialects.contract import KERNEL
from .ir_queries import (indexing_maps, int_array, is_reduction, iterator_types, op_name,
                         reassociation, shape, slice_dims)

ALLOWED_OPS = {"linalg.generic", "linalg.fill", "linalg.transpose", "linalg.broadcast",
               "tensor.empty", "tensor.expand_shape", "tensor.collapse_shape",
               "tensor.extract_slice", "tensor.pad", "tensor.concat", "func.return",
               "tensor.dim",  # tensor.dim: sizes of dynamic tensor.empty (never evaluated)
               "tensor.cast"}  # between static and `?` dims: the same elements

# Why a group of ops cannot be one kernel, by kind (ember-fuse{explain=true}'s remarks and
# report.json's `unfused` name these).
ILLEGAL = "illegal"                             # any other shape code generation does not handle
INDEX_MISMATCH = "index mismatch"               # the ops' indexing does not give one loop nest
REDUCE_BROADCAST = "reduction then broadcast"   # a full reduction beside a full-size result
TARGET_LIMIT = "target limit"                   # one code generator's own limits (backends.py)


# Within `frozen_ir_memo`: what building a schedule reads of single ops and values, kept
# between schedules (ember-fuse's planning builds one per candidate group, ~2.5k for
# efficientnet_b0's training graphs, each over ~13 ops; every op's links were read again).
_FROZEN: "_FrozenMemo | None" = None


class _FrozenMemo:
    def __init__(self):
        self.links: dict = {}       # operation -> (uf calls in order, merges, reads, windows)
        # id(op object) -> (the object, its links): an operation's hash is computed from its
        # contents (each a walk in the bindings); the planner passes the same objects again
        self.links_by_id: dict = {}
        self.dims: dict = {}        # value -> [((value, i), its number, static size or None)]
        self.empty: dict = {}       # value -> _is_empty(value)
        # every union-find key ((value, i) or (op, "loop", j)) numbered once: the schedules'
        # union-finds (_NumberedUnionFind) run over these ints, each a tuple hash less
        self.numbers: dict = {}     # key -> its number
        self.keys: list = []        # number -> key
        # (id(op object), what) -> (the object, a fact of that op): `frozen_fact`
        self.facts: dict = {}
        self.skip: dict = {}        # value -> no dim of it is checked (`_skip_value`)

    def number(self, key) -> int:
        n = self.numbers.get(key)
        if n is None:
            n = self.numbers[key] = len(self.keys)
            self.keys.append(key)
        return n


def frozen_fact(op, what: str, compute):
    """`compute(op)`; within `frozen_ir_memo`, computed once per operation: found by the id of
    its `ir.Operation` object (one per operation while it lives, whatever OpView wraps it; an
    operation's hash is a walk of its contents in the bindings, an id is not), the object held
    so that its id is not reused. `what` names the fact, which is the same for any view of the
    operation; the fact is shared, so callers never mutate it."""
    frozen = _FROZEN
    if frozen is None:
        return compute(op)
    operation = op.operation
    key = (id(operation), what)
    got = frozen.facts.get(key)
    if got is not None and got[0] is operation:
        return got[1]
    fact = compute(op)
    frozen.facts[key] = (operation, fact)
    return fact


def _op_facts(op) -> tuple:
    """(its loop kinds, whether a kernel body may hold it, its results) of an op."""
    return (tuple(iterator_types(op)), op_name(op) in ALLOWED_OPS or _scalar_op(op),
            tuple(op.results))


@contextlib.contextmanager
def frozen_ir_memo():
    """Within, schedules reuse what they read of each op and value (its dims' links, its
    static sizes, whether it is an unread init) from earlier schedules. Valid only while the
    IR does not change (no op created, erased or rewired; nothing is keyed by structure, so
    a changed op would be read stale): ember-fuse enters it around its planning, which only
    reads the IR. Leaving it drops everything (the objects are keyed by their storage, which
    a later IR may reuse)."""
    global _FROZEN
    outer = _FROZEN
    if outer is None:
        _FROZEN = _FrozenMemo()
    try:
        yield
    finally:
        if outer is None:
            _FROZEN = None


class _LinkRecorder:
    """Stands in for the union-find while `_link` reads one op: the calls, in order."""

    def __init__(self):
        self.calls: list = []

    def union(self, a, b):
        self.calls.append((a, b))

    def find(self, x):
        self.calls.append((x, None))
        return x


class Unschedulable(Exception):
    """The kernel is outside the shapes code generation handles; `location` names the op,
    `category` the kind of reason (ILLEGAL, INDEX_MISMATCH, REDUCE_BROADCAST,
    TARGET_LIMIT)."""

    def __init__(self, reason: str, location: "ir.Location | None" = None,
                 category: str = ILLEGAL):
        super().__init__(reason)
        self.reason, self.location, self.category = reason, location, category


@dataclasses.dataclass
class Reduction:
    op: ir.Operation
    parallel: list[int]
    reduced: list[int]


@dataclasses.dataclass
class Output:
    value: ir.Value
    dims: list[int]
    inner: list[int]


class _UnionFind:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        # A root is stored as its own parent, the same object: `is` ends the walk without
        # comparing tuples of MLIR values (each comparison a call into the bindings).
        parent = self.parent
        p = parent.get(x)
        if p is None:
            parent[x] = x
            return x
        while p is not x:
            up = parent[p]
            if up is p:
                return p
            parent[x] = up      # path halving
            x = up
            p = parent[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


class _NumberedUnionFind:
    """_UnionFind over the frozen memo's key numbers (`find_n` / `union_n`), the same calls in
    the same order giving the same classes and the same first-seen order of keys; `find` and
    `union` take a key (numbered on the way) or a number (a root `find` returned) and give
    numbers."""

    def __init__(self, frozen):
        self.parent: dict = {}
        self._number = frozen.number

    def find_n(self, x: int) -> int:
        parent = self.parent
        p = parent.get(x)
        if p is None:
            parent[x] = x
            return x
        while p != x:
            up = parent[p]
            if up == p:
                return p
            parent[x] = up      # path halving
            x = up
            p = parent[x]
        return x

    def union_n(self, a: int, b: int) -> None:
        ra, rb = self.find_n(a), self.find_n(b)
        if ra != rb:
            self.parent[rb] = ra

    def find(self, x) -> int:
        return self.find_n(x if type(x) is int else self._number(x))

    def union(self, a, b) -> None:
        self.union_n(a if type(a) is int else self._number(a),
                     b if type(b) is int else self._number(b))


class KernelSchedule:
    """See the module docstring. Build with `schedule_kernel` / `schedule_ops`."""

    def __init__(self, ops, args, results, kind=None, scalars=()):
        self.ops, self.args, self.results = list(ops), list(args), list(results)
        self.scalars = list(scalars)
        frozen = _FROZEN
        uf = _UnionFind() if frozen is None else _NumberedUnionFind(frozen)
        static = {}
        self._uf = uf
        # Dims whose index follows from others' (see _derived), as (value, index) keys:
        # reshapes that merge several non-unit dims into one, (merged dim, [its parts]), known
        # either way; and a slice's, pad's or concat's operand dim from its result's dim
        # (`_reads`: (operand dim, [result dims])).
        self._merges: list[tuple[tuple, list[tuple]]] = []
        self._reads: list[tuple[tuple, list[tuple]]] = []
        # a generic's operand dim read at an affine function of several loops (a pooling
        # window: oh * 2 + kh), as (operand dim, [loop keys])
        self._window_reads: list[tuple[tuple, list[tuple]]] = []

        def note(v, i, size):
            uf.find((v, i))
            if size is not None:
                static[(v, i)] = size

        find_n = uf.find_n if frozen is not None else None

        def vals(v):
            if frozen is not None:
                got = frozen.dims.get(v)
                if got is None:
                    got = frozen.dims[v] = [
                        ((v, i), frozen.number((v, i)), s) for i, s in enumerate(shape(v))] \
                        if isinstance(v.type, ir.RankedTensorType) else []
                for _, n, size in got:       # as note(v, i, size), keyed by number
                    find_n(n)
                    if size is not None:
                        static[n] = size
                return
            if isinstance(v.type, ir.RankedTensorType):
                for i, s in enumerate(shape(v)):
                    note(v, i, s)

        for v in self.args:
            vals(v)
        # each op's loop kinds, read once (the checks below ask several times per op); within
        # frozen_ir_memo, with its results, once per op object for every schedule
        facts = [frozen_fact(op, "schedule", _op_facts) for op in self.ops] \
            if frozen is not None else [_op_facts(op) for op in self.ops]
        self._its = [f[0] for f in facts]
        self._op_results = [f[2] for f in facts]
        for op, its, (_, allowed, results) in zip(self.ops, self._its, facts):
            if not allowed:
                raise Unschedulable(f"'{op_name(op)}' is not allowed in a kernel body "
                                    f"(see docs/internals.md, Stage 2)", op.location)
            for r in results:
                vals(r)
            if frozen is None:
                self._link(op, uf, note, its)
            else:
                self._link_frozen(op, its, frozen)
        if frozen is None or len(self._merges) < 2:
            self._unify_splits(uf, static)
        else:
            self._unify_splits(uf, {frozen.keys[n]: s for n, s in static.items()})
        if not any("reduction" in its for its in self._its):
            self._share_loops(uf)
        else:
            self._share_reduction_loops(uf)
        # A global dim is a union-find class; number them in first-seen order.
        self._gid: dict = {}
        self._size: dict[int, Optional[int]] = {}
        # every (value, dim) / (op, "loop", j) key -> its global dim; within frozen_ir_memo
        # keyed by the key's number (`_key` looks a key up either way; `dims` by the value's
        # numbers): a tuple of MLIR objects hashes through the bindings
        key_gid: dict = {}
        self._key_gid = key_gid
        self._frozen_dims = self._numbers = None
        gid_of, size = self._gid, self._size
        if frozen is not None:
            numbers = frozen.numbers
            self._frozen_dims, self._numbers = frozen.dims, numbers
            for n in list(uf.parent):
                g = key_gid[n] = gid_of.setdefault(find_n(n), len(gid_of))
                if n in static:
                    size[g] = static[n]
                else:
                    size.setdefault(g, None)
        else:
            for key in list(uf.parent):
                root = uf.find(key)
                g = key_gid[key] = gid_of.setdefault(root, len(gid_of))
                if key in static:
                    size[g] = static[key]
                else:
                    size.setdefault(g, None)
        self.size_offsets, self._size_ref, off = [], {}, 0
        for v in self.args + self.results:
            self.size_offsets.append(off)
            if isinstance(v.type, ir.RankedTensorType):
                dims = self.dims(v)
                for i, g in enumerate(dims):
                    self._size_ref.setdefault(g, off + i)
                off += len(dims)
        # Scalar arguments (sizes, symbolic ints) come after every dim in the sizes table; each
        # is a pseudo global dim of unknown size, read the way a dynamic dim is.
        self.scalar_gid = {}
        for j, a in enumerate(self.scalars):
            g = self.scalar_gid[a] = len(self._gid) + j
            self._size[g] = None
            self._size_ref[g] = off + j
        # the global dims of static size 1 (`unit`, asked ~100 times per schedule)
        self._units = frozenset(g for g, n in self._size.items() if n == 1)
        self._plan(kind)

    # --- global dims -----------------------------------------------------------------------
    def _key(self, key) -> int:
        """The global dim of a (value, dim) or (op, "loop", j) key."""
        numbers = self._numbers
        return self._key_gid[key if numbers is None else numbers[key]]

    def gid(self, v, i) -> int:
        return self._key((v, i))

    def loop_gid(self, op, j) -> int:
        return self._key((op, "loop", j))

    def dims(self, v) -> list[int]:
        if self._frozen_dims is not None:
            got = self._frozen_dims.get(v)
            if got is not None:
                key_gid = self._key_gid
                return [key_gid[n] for _, n, _ in got]
        key = self._key
        return [key((v, i)) for i in range(ir.RankedTensorType(v.type).rank)]

    def size(self, g) -> Optional[int]:
        return self._size.get(g)

    def size_index(self, g) -> int:
        if g not in self._size_ref:
            raise Unschedulable(f"dynamic dim {g} is not a dim of any kernel argument or result")
        return self._size_ref[g]

    def unit(self, g) -> bool:
        return g in self._units

    def _link_frozen(self, op, its, frozen) -> None:
        """`_link`, replayed from the memo: the same union-find calls in the same order (the
        global dims are numbered by first appearance), the same entries appended."""
        seen = frozen.links_by_id.get(id(op))
        got = seen[1] if seen is not None and seen[0] is op else frozen.links.get(op.operation)
        if got is None:
            rec, lists = _LinkRecorder(), (self._merges, self._reads, self._window_reads)
            self._merges, self._reads, self._window_reads = [], [], []
            try:
                self._link(op, rec, None, its)
                number = frozen.number
                calls = [(number(a), None if b is None else number(b)) for a, b in rec.calls]
                got = (calls, self._merges, self._reads, self._window_reads)
            finally:
                self._merges, self._reads, self._window_reads = lists
            frozen.links[op.operation] = got
        if seen is None or seen[0] is not op:
            frozen.links_by_id[id(op)] = (op, got)     # holds op: its id is not reused
        calls, merges, reads, windows = got
        # _NumberedUnionFind's find_n / union_n, inlined (a million calls in densenet121's
        # forward planning): the same parents written in the same order
        parent = self._uf.parent
        for a, b in calls:
            p = parent.get(a)
            if p is None:
                parent[a] = ra = a
            else:
                x = a
                while p != x:
                    up = parent[p]
                    if up == p:
                        x = p
                        break
                    parent[x] = up
                    x = up
                    p = parent[x]
                ra = x
            if b is None:
                continue
            p = parent.get(b)
            if p is None:
                parent[b] = rb = b
            else:
                x = b
                while p != x:
                    up = parent[p]
                    if up == p:
                        x = p
                        break
                    parent[x] = up
                    x = up
                    p = parent[x]
                rb = x
            if ra != rb:
                parent[rb] = ra
        self._merges += merges
        self._reads += reads
        self._window_reads += windows

    def _link(self, op, uf, note, its):
        name = op_name(op)
        if name == "linalg.generic":
            # An init that the body never reads (a tensor.empty, often shared by several ops
            # after CSE) only gives the result its shape: linking its dims would tie together
            # the loops of every op that shares it.
            maps = indexing_maps(op)
            ins, outs = list(op.inputs), list(op.outputs)
            block_args = list(op.regions[0].blocks[0].arguments)
            linked = list(zip(maps, ins))
            for k, (m, v) in enumerate(zip(maps[len(ins):], outs)):
                linked.append((m, op.results[k]))
                if _is_read(block_args[len(ins) + k]):
                    linked.append((m, v))
            for m, v in linked:
                for k, e in enumerate(m.results):
                    if isinstance(e, ir.AffineDimExpr):
                        uf.union((v, k), (op, "loop", ir.AffineDimExpr(e).position))
            for m, v in zip(maps, ins):
                for k, e in enumerate(m.results):
                    loops = _expr_dims(e)
                    if loops and not isinstance(e, ir.AffineDimExpr):
                        # a window read (pooling: oh * 2 + kh): the operand's index follows
                        # from the loops' (computed where it is read, see _derived)
                        self._window_reads.append(((v, k), [(op, "loop", j) for j in loops]))
            for j in range(len(its)):
                uf.find((op, "loop", j))
        elif name in ("linalg.fill", "linalg.transpose", "linalg.broadcast"):
            # The init (operand -1) is never read: its dims are not linked (see above).
            res = op.results[0]
            if name == "linalg.transpose":
                for i, p in enumerate(int_array(op.attributes["permutation"])):
                    uf.union((res, i), (op.operands[0], p))
            elif name == "linalg.broadcast":
                added = set(int_array(op.attributes["dimensions"]))
                kept = [i for i in range(len(shape(res))) if i not in added]
                for s, i in enumerate(kept):
                    uf.union((res, i), (op.operands[0], s))
        elif name == "tensor.cast":
            for i in range(len(shape(op.results[0]))):
                uf.union((op.results[0], i), (op.operands[0], i))
        elif name in ("tensor.expand_shape", "tensor.collapse_shape"):
            src, res = op.operands[0], op.results[0]
            big, small = (res, src) if name == "tensor.expand_shape" else (src, res)
            for s, group in enumerate(reassociation(op)):
                sizes = shape(big)
                nonunit = [i for i in group if sizes[i] != 1]
                if len(group) == 1:
                    uf.union((big, group[0]), (small, s))
                elif len(nonunit) == 1:
                    uf.union((big, nonunit[0]), (small, s))
                elif None not in sizes and shape(small)[s] is not None:
                    self._merges.append(((small, s), [(big, i) for i in nonunit]))
        elif name == "tensor.extract_slice":
            src, res = op.operands[0], op.results[0]
            pairs = dict(slice_dims(op))
            for s in range(len(shape(src))):
                r = pairs.get(s)
                if r is None:
                    self._reads.append(((src, s), []))     # a dropped dim: a constant offset
                elif shape(src)[s] is not None and shape(src)[s] == shape(res)[r]:
                    uf.union((src, s), (res, r))
                else:
                    self._reads.append(((src, s), [(res, r)]))
        elif name == "tensor.pad":
            src, res = op.operands[0], op.results[0]
            lo, hi = int_array(op.attributes["static_low"]), int_array(op.attributes["static_high"])
            for i in range(len(shape(res))):
                if lo[i] == 0 and hi[i] == 0:
                    uf.union((src, i), (res, i))
                else:
                    self._reads.append(((src, i), [(res, i)]))
        elif name == "tensor.concat":
            dim = ir.IntegerAttr(op.attributes["dim"]).value
            res = op.results[0]
            for v in op.operands:
                for i in range(len(shape(res))):
                    if i != dim:
                        uf.union((v, i), (res, i))
                    else:
                        self._reads.append(((v, i), [(res, i)]))

    def _unify_splits(self, uf, static) -> None:
        """Two reshapes that split one dim into the same non-unit sizes, in order, give the
        same parts: a row-major index has one decomposition for given sizes. (A [49, C] value
        read as [1, 7, 7, C] by one `expand_shape` and as [1, 1, 7, 1, 7, C] by another, once
        canonicalize folded expand-of-expand: the window partition of Swin's last stage, where
        one window covers the image; without this the second's 7s were dims of no loop.)"""
        changed = True
        while changed and len(self._merges) > 1:
            changed = False
            seen: dict = {}
            for whole, parts in self._merges:
                key = (uf.find(whole), tuple(static.get(p) for p in parts))
                if None in key[1]:
                    continue
                first = seen.setdefault(key, parts)
                for a, b in zip(first, parts):
                    if uf.find(a) != uf.find(b):
                        uf.union(a, b)
                        changed = True

    # --- outer space P and inner dims --------------------------------------------------------
    def _share_loops(self, uf) -> None:
        """Pointwise results of one static shape share their loops (horizontal fusion: q, k
        and v sliced from one projection are three results over one 4x32x128 nest, though
        no op links their last dims). Each result element is still computed from its own
        index; a tensor whose two dims end up on one loop is refused (`_plan`)."""
        def nonunit(v):
            return [i for i, n in enumerate(shape(v)) if n != 1]

        tensors = [r for r in self.results if isinstance(r.type, ir.RankedTensorType)]
        if len(tensors) < 2 or any(n is None for r in tensors for n in shape(r)):
            return
        first = tensors[0]
        for r in tensors[1:]:
            if [shape(r)[i] for i in nonunit(r)] != [shape(first)[i] for i in nonunit(first)]:
                continue
            mine = [uf.find((first, i)) for i in nonunit(first)]
            theirs = [uf.find((r, j)) for j in nonunit(r)]
            if set(mine) == set(theirs):
                continue        # already one space (perhaps permuted: two transposes of one input)
            pairs = [(a, b) for a, b in zip(mine, theirs) if a != b]
            if any(a in theirs or b in mine for a, b in pairs):
                continue        # linked some other way: leave it to _plan
            for a, b in pairs:
                uf.union(a, b)

    def _share_reduction_loops(self, uf) -> None:
        """Reductions of one static loop shape share their loops (horizontal fusion: a layer
        norm backward's two row sums, of two different products, in one kernel), as
        `_share_loops` does for pointwise results: parallel loops pairwise in order, reduced
        loops likewise. Reductions already linked some other way are left to `_plan`."""
        def loops(op):
            sizes = _loop_sizes(op)
            if sizes is None:
                return None
            its = iterator_types(op)
            par = [j for j, t in enumerate(its) if t == "parallel" and sizes[j] != 1]
            red = [j for j, t in enumerate(its) if t == "reduction" and sizes[j] != 1]
            return ([sizes[j] for j in par], [sizes[j] for j in red],
                    [uf.find((op, "loop", j)) for j in par + red])

        reds = [op for op in self.ops if is_reduction(op) and op_name(op) == "linalg.generic"]
        if len(reds) < 2:
            return
        first = loops(reds[0])
        if first is None:
            return
        for op in reds[1:]:
            got = loops(op)
            if got is None or got[:2] != first[:2]:
                continue
            mine = [uf.find(k) for k in first[2]]
            theirs = [uf.find(k) for k in got[2]]
            if set(mine) == set(theirs):
                continue
            pairs = [(a, b) for a, b in zip(mine, theirs) if a != b]
            if any(a in theirs or b in mine for a, b in pairs):
                continue
            for a, b in pairs:
                uf.union(a, b)

    def _derived(self, loops: set, windows: bool = True) -> set:
        """The global dims whose index follows from the kernel's `loops` through reshapes of
        static sizes that merge or split non-unit dims (a bias add over 128x384 read through
        `expand_shape` as 4x32x384: its row is i * 32 + j), slices, pads and concats (the
        operand's index is the result's, shifted). A pointwise op over such a dim is computed
        per element where it is read (kernel_expr.value_at: div/rem or linearised indices),
        never looped over, so it may live in the kernel; a result or a reduction still needs
        real loops (checked apart)."""
        merges = [(self.gid(*whole), [self.gid(*p) for p in parts])
                  for whole, parts in self._merges]
        key = self._key     # (value, dim) or (op, "loop", j)
        reads = [(key(dim), [key(f) for f in frm]) for dim, frm in
                 self._reads + (self._window_reads if windows else [])]
        units = self._units
        known = set(loops)
        changed = True
        while changed:
            changed = False
            for dim, frm in reads:
                if dim not in known and all(f in known or f in units for f in frm):
                    known.add(dim)
                    changed = True
            for whole, parts in merges:
                if whole not in known and all(p in known or p in units for p in parts):
                    known.add(whole)
                    changed = True
                if whole in known and not all(p in known or p in units for p in parts):
                    known.update(parts)
                    changed = True
        return known

    def sliding_dims(self, loops: set) -> set:
        """The global dims read through a window that moves with one of `loops` (a pooling's
        input W, read at ow * 2 + kw for an output loop ow), and the dims of the tensors
        padded or sliced into those (their index is the same, shifted)."""
        key = self._key
        out = {key(dim) for dim, frm in self._window_reads if any(key(f) in loops for f in frm)}
        changed = True
        while changed:
            changed = False
            for dim, frm in self._reads:
                g = key(dim)
                if g not in out and any(key(f) in out for f in frm):
                    out.add(g)
                    changed = True
        return out

    def _plan(self, kind):
        units = self._units
        self.reductions = []
        for op, its in zip(self.ops, self._its):
            if "reduction" in its:
                par = [self.loop_gid(op, j) for j, t in enumerate(its) if t == "parallel"]
                red = [self.loop_gid(op, j) for j, t in enumerate(its) if t == "reduction"]
                self.reductions.append(Reduction(op, [g for g in par if g not in units], red))
        self.kind = "reduction" if self.reductions else "pointwise"
        if kind == "pointwise" and self.reductions:
            raise Unschedulable("kernel is marked pointwise but contains a reduction",
                                self.reductions[0].op.location)
        if not self.results:
            raise Unschedulable("kernel has no results")
        res_dims = [[g for g in self.dims(r) if g not in units] for r in self.results]
        if self.kind == "pointwise":
            space = res_dims[0]
            self.outer = space[:-1]
        else:
            first = self.reductions[0]
            pset = set(first.parallel)
            for r in self.reductions[1:]:
                if set(r.parallel) != pset:
                    raise Unschedulable("reductions do not share the same outer (parallel) "
                                        "space", r.op.location, INDEX_MISMATCH)
            for r in self.reductions:
                if set(r.reduced) & pset:
                    raise Unschedulable("a reduced dim is also an outer dim", r.op.location,
                                        INDEX_MISMATCH)
            # Loop order: the first result that covers P decides (row-major stores).
            order = next((d for d in res_dims if pset <= set(d)), first.parallel)
            self.outer = [g for g in order if g in pset]
            space = None
        allowed = set(self.outer)
        for r in self.reductions:
            allowed |= set(r.reduced)
        self.outputs = []
        for r, d in zip(self.results, res_dims):
            inner = [g for g in d if g not in set(self.outer)]
            if self.kind == "pointwise" and set(d) != set(space):
                raise Unschedulable("pointwise kernel results have different iteration spaces",
                                    category=INDEX_MISMATCH)
            if not set(self.outer) <= set(d):
                raise Unschedulable("a kernel result is not indexed by the whole outer space",
                                    category=INDEX_MISMATCH)
            if self.kind == "reduction" and not self.outer and inner:
                # A full reduction (no outer space) runs as one parallel reduction loop; a
                # full-size output beside it would need a second, differently shaped nest.
                raise Unschedulable("a full reduction cannot share a kernel with a result "
                                    "that has inner dims", category=REDUCE_BROADCAST)
            allowed |= set(inner)
            self.outputs.append(Output(r, self.dims(r), inner))
        for v in self.args + [r for results in self._op_results for r in results]:
            if _skip_value(v):
                continue
            gs = [g for g in self.dims(v) if g not in units]
            if len(set(gs)) != len(gs):
                # e.g. x read as x[i, j] by one op and as x[j, i] by another
                raise Unschedulable("two dims of one tensor map to the same loop (it is read "
                                    "under two different index maps)", _location(v), INDEX_MISMATCH)
        derived = self._derived(allowed)
        # dims known only through a window read: a pad there is index arithmetic, but a
        # computed value would be computed once per window element (BatchNorm's math 9 times
        # per output of a 3x3 pooling, ~2.25 times per element): it stays in memory
        windowed = derived - self._derived(allowed, windows=False) if self._window_reads \
            else set()
        for op, its, results in zip(self.ops, self._its, self._op_results):
            if op_name(op) == "arith.constant":
                continue    # a splat: the same value at every index (kernel_expr), no loop
            if windowed and op_name(op) == "linalg.generic" and any(
                    g in windowed for v in results for g in self.dims(v)):
                raise Unschedulable(f"'{op_name(op)}' is read through a window (each element "
                                    "by several windows): computed once, kept in memory",
                                    op.location, INDEX_MISMATCH)
            for v in results:
                if _skip_value(v):
                    continue
                # A reduction is looped over: its dims must be the kernel's own.
                ok = allowed if "reduction" in its else derived
                bad = [g for g in self.dims(v) if g not in ok and g not in units]
                if bad:
                    raise Unschedulable(f"'{op_name(op)}' iterates over a dim that is neither "
                                        "outer, reduced nor a result dim", op.location,
                                        INDEX_MISMATCH)
            if op_name(op) == "linalg.generic":
                gs = [self.loop_gid(op, j) for j in range(len(its))]
                real = [g for g in gs if g not in units]
                if len(set(real)) != len(real):
                    raise Unschedulable("two loops of one op map to the same dim (diagonal "
                                        "access)", op.location, INDEX_MISMATCH)


def _loop_sizes(op):
    """Static loop bounds of a `linalg.generic` (from its operands' shapes), or None where one
    is dynamic or unbound."""
    sizes = [None] * len(iterator_types(op))
    for v, m in zip(op.operands, indexing_maps(op)):
        if not isinstance(v.type, ir.RankedTensorType):
            continue
        for n, e in zip(shape(v), m.results):
            if isinstance(e, ir.AffineDimExpr) and sizes[ir.AffineDimExpr(e).position] is None:
                sizes[ir.AffineDimExpr(e).position] = n
    return None if any(n is None for n in sizes) else sizes


def _expr_dims(e) -> list[int]:
    """The loop dims an affine expression reads (sorted)."""
    if isinstance(e, ir.AffineDimExpr):
        return [ir.AffineDimExpr(e).position]
    for cls in (ir.AffineAddExpr, ir.AffineMulExpr, ir.AffineFloorDivExpr, ir.AffineModExpr,
                ir.AffineCeilDivExpr):
        if isinstance(e, cls):
            b = cls(e)
            return sorted(set(_expr_dims(b.lhs)) | set(_expr_dims(b.rhs)))
    return []


def _is_read(block_arg) -> bool:
    return any(True for _ in block_arg.uses)


def _skip_value(v) -> bool:
    """No dim of `v` is checked by `_plan`: not a ranked tensor, unread (`_is_empty`) or a
    splat (`_is_splat`); within `frozen_ir_memo`, asked once per value."""
    frozen = _FROZEN
    if frozen is not None:
        got = frozen.skip.get(v)
        if got is not None:
            return got
    got = not isinstance(v.type, ir.RankedTensorType) or _is_empty(v) or _is_splat(v)
    if frozen is not None:
        frozen.skip[v] = got
    return got


def _is_empty(v) -> bool:
    """A value whose contents no op reads: a tensor.empty, or a value used only as an init its
    users never read (a linalg.fill in the outs of a gather's generic). Its dims are linked to
    nothing, and it is never evaluated."""
    frozen = _FROZEN
    if frozen is None:
        return _is_empty_now(v)
    got = frozen.empty.get(v)
    if got is None:
        got = frozen.empty[v] = _is_empty_now(v)
    return got


def _is_empty_now(v) -> bool:
    if not isinstance(v, ir.OpResult):
        return False
    if op_name(v.owner) == "tensor.empty":
        return True
    uses = list(v.uses)
    for use in uses:
        owner, k = use.owner, use.operand_number
        name = op_name(owner)
        if name == "linalg.generic":
            n_in = len(owner.inputs)
            if k < n_in or _is_read(owner.regions[0].blocks[0].arguments[k]):
                return False
        elif name not in ("linalg.fill", "linalg.transpose", "linalg.broadcast") or \
                k != len(owner.operands) - 1:
            return False
    return bool(uses)


def _is_splat(v) -> bool:
    """A splat tensor constant: the same value at every index, so its dims need no loop (a
    zero tensor padded to a larger one, as circular padding's backward makes)."""
    if not isinstance(v, ir.OpResult) or op_name(v.owner) != "arith.constant":
        return False
    attr = v.owner.attributes["value"]
    return isinstance(attr, ir.DenseElementsAttr) and ir.DenseElementsAttr(attr).is_splat


is_empty_value = _is_empty      # for fusion_legality.RefusalMemo (what the schedule asks of a value)
is_splat_value = _is_splat


def _location(v):
    return v.owner.location if isinstance(v, ir.OpResult) else None


def _scalar_op(op) -> bool:
    d = op_name(op).split(".")[0]
    return d in ("arith", "math") and all(not isinstance(r.type, ir.RankedTensorType) or
                                          op_name(op) == "arith.constant" for r in op.results)


def schedule_ops(ops, results, args=None, kind=None) -> KernelSchedule:
    """Legality check / schedule of a would-be kernel: `ops` in order, `results` the values it
    returns; `args` default to the tensor values used by `ops` but defined outside them."""
    ops = list(ops)
    if args is None:
        inside = {r for op in ops for r in op.results}
        args, seen = [], set()
        for op in ops:
            for v in op.operands:
                if v not in inside and v not in seen and isinstance(v.type, ir.RankedTensorType):
                    seen.add(v)
                    args.append(v)
    return KernelSchedule(ops, args, results, kind)


def tensor_args(block) -> list:
    """A kernel's tensor arguments, in order (its scalar arguments: `scalar_args`)."""
    return [a for a in block.arguments if isinstance(a.type, ir.ShapedType)]


def scalar_args(block) -> list:
    """A kernel's scalar arguments, in order: sizes and symbolic ints (`index`, `i64`), appended
    to the sizes table after the dims of the tensors (docs/internals.md, kernel ABI)."""
    # Other scalars (floats) are not arguments the lowerings take (passes/input_checks.py);
    # reading one raises Unschedulable.
    return [a for a in block.arguments
            if isinstance(a.type, ir.IndexType)
            or (isinstance(a.type, ir.IntegerType) and ir.IntegerType(a.type).width == 64)]


def schedule_kernel(func) -> KernelSchedule:
    """Schedule of a kernel `func.func` (ops of its body; args; returned values)."""
    block = func.regions[0].blocks[0]
    ops = list(block.operations)
    ret = ops[-1]
    kind = None
    if KERNEL.has(func):
        try:
            kind = KERNEL.get(func)
        except (ValueError, TypeError):
            kind = None
    return KernelSchedule(ops[:-1], tensor_args(block), list(ret.operands), kind,
                          scalar_args(block))

