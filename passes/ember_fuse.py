"""ember-fuse: decides fusion groups over the whole graph and outlines each into a kernel.

Invariant established (docs/internals.md, stage 2): every public function holds only host-side
ops (`func.call` of a kernel, `ember.extern`, views, constants, `tensor.empty`, `func.return`);
every other computation sits in a private `func.func` marked `ember.kernel` ("pointwise" or
"reduction") whose loop structure code generation can handle (for the `target` option's code
generator). With `externs` (the default), the library-call patterns of `ember-convert-externs`
run first (matmul, batched matmul, convolution and 2-D pooling become `ember.extern`), so one
`ember-fuse` is the whole stage; the pass itself only plans groups and outlines them, and
leaves the clean-up of the host function (dead ops, duplicates) to `canonicalize` and `cse`.

How groups are chosen (a scheduler in the style of Inductor's): every compute op starts as its own
group; producer->consumer edges are visited from the most bytes saved to the least, and the two
groups merge when the merged group (a) stays acyclic with the rest of the graph, (b) has at most
`max-group-size` ops and (c) is a kernel shape code generation accepts (`kernel_schedule`).
A producer refused by a reshape view it feeds is tried again once the view has joined its
reader (a split column sum's partials: the producer, also read by a matmul, is then returned
through the view and read back on the host through the inverse `collapse_shape`,
fusion_legality.expanded_results). Then a producer whose consumers each refused it (it would
stay a result of another shape) is tried with all of them at once, and kernels that read one
producer, whose results one op reads (also through host reshapes: grouped-query attention's
repeated k and v), or that make operands of library calls whose other operands are one value
or one kernel's (the bf16 weight copies of k and v, of gate and up; in the backward, once the
kernels making the other operands are one), are tried together (horizontal fusion), unless that raises the function's peak of live
bytes (passes/fusion_liveness.py: the merged kernel runs where the later one ran, and what the
earlier one reads stays alive until then). Views, slices, pads and concats are index
arithmetic inside a kernel.
With `explain`, every producer-consumer pair left in different kernels gets a remark with the
reason (docs/internals.md, Stage 2; fusion_legality.REFUSALS).
Cheap producers (constants, `tensor.empty`, fills of a constant) are cloned into every kernel that
reads them instead of being passed in. Last, a cheap pointwise value that one kernel would store
only for others to read back is recomputed in those others where that moves fewer bytes
(passes/fusion_recompute.py: a layer norm backward's products, read by its column sums). Each kernel names what it fuses in `ember.ops`
(report.json's `fused_groups`).

Dynamic shapes (`?` dims): size computations (`tensor.dim`, integer `arith` on sizes, `cf.assert`
of shape checks) stay on the host. A kernel takes the sizes its `tensor.empty`s need as `index`
arguments (shape arguments: code generation never evaluates them, it reads sizes from the tensors
at run time), and its call carries `ember.result_dims`: for each result, per dim, the call
operand that holds that dim's size (-1 where static), so that the host can allocate results.
"""
import bisect
import dataclasses
import itertools
import operator

from torch_mlir import ir, passmanager
from torch_mlir.dialects import func, tensor

from ..dialects.contract import DONATED_ARGS, EXTERN_OP, KERNEL, OPS, RESULT_DIMS, is_kernel
from . import fusion_legality, remarks
from .backends import BACKENDS, CPP
from .base import Pass, PassError, option
from .dynamic_sizes import dim_value, fusion_bytes, is_dynamic, is_size_op
from .ember_convert_externs import convert_externs
from .fusion_recompute import recompute_producers
from .graph_utils import (defining_op, op_name, remap_operands, stable_topological_sort,
                          users)
from .fusion_liveness import LiveBytes
from .fusion_reachability import Descendants
from .ir_queries import HOST_VIEW_OPS, VIEW_OPS
from .kernel_schedule import frozen_ir_memo
from .dynamic_sizes import expand_affine_apply, sink_scalar_float_ops
from .sink_reshapes import sink_collapses

HOST_OPS = {"func.call", EXTERN_OP, "func.return", "arith.constant", "tensor.empty"}
# Horizontal fusion: how many earlier clusters of one value's readers a reader is tried with
# (each try is a legality check; a value read by hundreds of kernels must stay cheap).
HORIZONTAL_TRIES = 8
# Tests: every cycle check that `Descendants` answers alone is also walked, and must agree.
CHECK_REACH = False


@dataclasses.dataclass(frozen=True)
class EmberFuse(Pass):
    """Groups pointwise chains and reductions with their pointwise producers and consumers."""

    name = "ember-fuse"
    summary = ("Fuse pointwise chains and reductions (with their pointwise producers/consumers) "
               "into kernels; matmul/conv become ember.extern")

    dynamic_shapes = True       # sizes stay on the host; kernels take them as shape arguments

    max_group_size: int = option(64, min=1)
    fuse_reductions: bool = True
    externs: bool = True        # first apply ember-convert-externs' patterns
    # whose code generator decides legality
    target: str = option(CPP.name, choices=tuple(BACKENDS))
    # a remark (passes/remarks.py) for every producer-consumer pair left in different kernels
    explain: bool = False
    # Horizontal fusion runs the merged kernel where its last member ran: the values the
    # earlier member reads stay alive until then, and its results are made there. A merge is
    # refused when it raises the function's peak (passes/fusion_liveness.py: the arena's
    # peak plus that of returned and donated values) to more than this many bytes over the
    # peak before horizontal fusion (a backward's weight-gradient casts, fused across layers,
    # held every layer's bf16 gradient to the last layer's); merges whose longer lifetimes lie
    # below the peak are free.
    horizontal_peak_bytes: int = option(1 << 16, min=0)
    # Cheap pointwise values that a kernel would store only for other kernels to read back
    # are computed again in those kernels where that moves fewer bytes (passes/
    # fusion_recompute.py); at most this many ops per value (0: never). 24: a squeeze-excite
    # block's backward (the gate's product, the pooled gradient, the SiLU backward over the
    # BatchNorm output recomputed: 17 to 20 ops) is computed in the BatchNorm backward's
    # kernels, not stored in f32 for them (efficientnet_b0: 16 launches, 0.37 GB a step).
    recompute_max_ops: int = option(24, min=0, max=64)
    # A consumer given a recomputation is merged with a kernel that reads what the
    # recomputation reads, unless the merge keeps more than this many bytes of the earlier
    # kernel's inputs alive longer.
    recompute_held_bytes: int = option(1 << 20, min=0)

    def run(self, module: ir.Operation) -> None:
        if self.target not in BACKENDS:
            raise PassError(f"ember-fuse: unknown target '{self.target}' "
                            f"(one of {', '.join(BACKENDS)})")
        with module.context, ir.Location.unknown():
            for fn in _public_functions(module):
                if self.externs:
                    convert_externs(fn)
                if is_dynamic(fn):
                    expand_affine_apply(fn.regions[0].blocks[0])
                    sink_scalar_float_ops(fn.regions[0].blocks[0])
                else:
                    sink_collapses(fn.regions[0].blocks[0])
                groups = self.plan(fn, explain=self.explain)
                if self.recompute_max_ops:
                    groups = recompute_producers(
                        fn.regions[0].blocks[0], groups, target=self.target,
                        fuse_reductions=self.fuse_reductions,
                        max_group_size=self.max_group_size, max_ops=self.recompute_max_ops,
                        held_bytes=self.recompute_held_bytes, explain=self.explain,
                        pass_name=self.name)
                _outline(module, fn, groups, self.target)

    def plan(self, fn, explain: bool = False) -> list[list]:
        """The fusion groups of `fn`, each a list of ops in program order. With `explain`, a
        remark for each producer-consumer pair that ends in different kernels, saying why
        (`unfused_pairs`)."""
        # planning only reads the IR: the candidates' schedules share what they read of it
        with frozen_ir_memo():
            return self._plan(fn, explain)

    def _plan(self, fn, explain: bool) -> list[list]:
        block = fn.regions[0].blocks[0]
        dynamic = is_dynamic(fn)
        nodes = [op for op in block.operations if _is_compute(op, dynamic)]
        index = {op: i for i, op in enumerate(nodes)}
        parent = list(range(len(nodes)))
        members = {i: [op] for i, op in enumerate(nodes)}
        # each group's ops that are not views (max-group-size counts these), kept as they merge
        n_compute = {i: int(op_name(op) not in VIEW_OPS) for i, op in enumerate(nodes)}

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        # The block does not change while planning, and the cycle check below walks it again
        # for every candidate edge: it walks integer ids (position in the block) over users
        # looked up once, not MLIR objects.
        block_ops = [o.operation for o in block.operations]
        bid = {o: i for i, o in enumerate(block_ops)}
        succ = [[bid[u] for r in o.results for u in users(r)] for o in block_ops]
        compute_of = {bid[op.operation]: i for i, op in enumerate(nodes)}
        member_ids = {i: [bid[op.operation]] for i, op in enumerate(nodes)}
        # what each group reaches: most cycle checks end without a walk
        reach = Descendants(succ)

        edges = []
        for op in nodes:
            for res in op.results:
                for user in users(res):
                    if user in index:
                        edges.append((fusion_bytes(res.type), index[op], index[user]))
        # Most bytes saved first; ties in program order (stable). Edges into a reduction over
        # a leading dim (a column sum: a norm's weight gradient) come after all others: a
        # pointwise producer that also feeds a row reduction joins that one first (a layer
        # norm backward's row sums and its input gradient, one kernel), and is read again by
        # the column sums, instead of joining them and leaving the row sums a kernel apart
        # (their outer spaces differ) that waits for its results written out in full.
        late = {i for i, op in enumerate(nodes) if _reduces_leading_dim(op)}
        edges.sort(key=lambda e: (e[2] in late, -e[0]))

        # (first, last) block index of each group, and those of the groups of several ops in
        # order (what `horizon` walks), kept up to date as groups merge.
        span = {i: (ids[0], ids[0]) for i, ids in member_ids.items()}
        spans: list = []
        # spans' first indices and the running maximum of their last ones, made again when
        # `horizon` needs them after a merge: horizon is asked several times per candidate,
        # and walking the spans from the start each time was quadratic in the groups
        firsts: list = []
        reach_to: list = []
        fresh = [True]

        def respan(into, gone):
            """Groups `gone` were merged into group `into`."""
            los, his = [], []
            for g in [into] + gone:
                lo, hi = span.pop(g)
                if lo != hi:        # a group of several ops
                    del spans[bisect.bisect_left(spans, (lo, hi))]
                los.append(lo)
                his.append(hi)
            span[into] = new = (min(los), max(his))
            bisect.insort(spans, new)
            fresh[0] = False

        def horizon(b_ops):
            """No op after this one leads to the ops b_ops. Users come after their operands in
            the block, but a group is a kernel that runs at once, after all of its operands: an
            op past b_ops' last one still leads to them through a group that also holds an
            earlier op (a group's ops need not be contiguous: groupnorm's backward made a
            cycle). The smallest index from max(b_ops) on that every span starting at or
            before it ends at or before (`_horizon_walk`, from the running maxima)."""
            if not fresh[0]:
                firsts[:] = map(_FIRST, spans)
                reach_to[:] = itertools.accumulate(map(_LAST, spans), max)
                fresh[0] = True
            hi = max(b_ops)
            while True:
                k = bisect.bisect_right(firsts, hi)
                if not k or reach_to[k - 1] <= hi:
                    break
                hi = reach_to[k - 1]
            if CHECK_REACH:
                assert hi == _horizon_walk(spans, max(b_ops)), "another horizon"
            return hi

        def reaches(src, dst):
            """Is there a path from group src to group dst through an op outside both? (Then
            merging them would make a cycle.) The first op outside both on such a path (a
            block index), else None. A group is entered whole: a kernel runs at once. The
            walk never goes past `horizon` of dst's ops."""
            return path_between(set(member_ids[src]), set(member_ids[dst]))

        def path_between(a_ops, b_ops, via=True):
            """reaches() for sets of block indices (with a_ops == b_ops: whether a path leaves
            the set and comes back, a cycle if they became one kernel). `via`=False: True
            where reaches() gives an op."""
            hi = horizon(b_ops)
            if hi < min(a_ops):
                return None
            if not reach.may_reach(a_ops, b_ops):
                if CHECK_REACH:
                    assert walk(a_ops, b_ops, hi, range(hi + 1)) is None, "no path, it said"
                return None
            if not via and reach.ok:
                if CHECK_REACH:
                    assert walk(a_ops, b_ops, hi, range(hi + 1)) is not None, "a path, it said"
                return True
            # The walk leaves out ops that lead nowhere near b_ops: what it marks seen there
            # only ever leads nowhere too, so it finds the same path through the same op.
            near = reach.reaching(b_ops, hi + 1)
            if near is not None:
                near.update(b_ops)
            else:
                near = range(hi + 1)
            found = walk(a_ops, b_ops, hi, near)
            if CHECK_REACH:
                assert found == walk(a_ops, b_ops, hi, range(hi + 1)), "another path"
            return found

        def walk(a_ops, b_ops, hi, near):
            """path_between's walk, through the positions `near` only."""
            stack = [(u, u) for o in a_ops for u in succ[o]
                     if u in near and u not in a_ops and u not in b_ops]
            seen = set()
            while stack:
                u, via = stack.pop()
                if u in b_ops:
                    return via
                if u in seen or u in a_ops:
                    continue
                seen.add(u)
                c = compute_of.get(u)
                ops = member_ids[find(c)] if c is not None else (u,)
                seen.update(ops)
                for o in ops:
                    if o < hi:
                        stack.extend((v, via) for v in succ[o] if v in near)
            return None

        # legality verdicts by group structure (repeated layers repeat their candidates)
        memo = fusion_legality.RefusalMemo(self.fuse_reductions, self.target)
        refused = {}        # (producer, consumer) node indices -> (category, detail)

        def try_merge(a, b):
            ga, gb = find(a), find(b)
            if ga == gb:
                return
            n = n_compute[ga] + n_compute[gb]
            if n > self.max_group_size:
                refused[a, b] = (fusion_legality.TOO_LARGE, f"{n} ops > "
                                 f"max-group-size={self.max_group_size}")
                return
            via = reaches(ga, gb)
            if via is None:
                via = reaches(gb, ga)
            if via is not None:
                refused[a, b] = (fusion_legality.CYCLE, f"a path between them goes through "
                                 f"'{_tag(block_ops[via])}' outside both kernels")
                return
            merged = sorted(members[ga] + members[gb], key=index.__getitem__)
            why = memo.refusal(merged)
            if why is not None:
                refused[a, b] = why
                return
            refused.pop((a, b), None)
            joined = [member_ids[ga], member_ids[gb]]
            parent[gb] = ga
            members[ga] = merged
            del members[gb]
            n_compute[ga] = n
            member_ids[ga] = member_ids[ga] + member_ids.pop(gb)
            respan(ga, [gb])
            reach.merge(joined, horizon(member_ids[ga]) + 1)

        for _, a, b in edges:
            try_merge(a, b)
        # A producer refused by a reshape view it feeds (the view alone would make the
        # producer's kernel return two shapes) is tried again once the view has joined its
        # reader: a split column sum's partials read their producer through an expand_shape
        # (fusion_legality.expanded_results; GELU's backward with its bias gradient).
        for a, b in [e for e in refused if op_name(nodes[e[1]]) in VIEW_OPS]:
            if find(b) != b or len(members[find(b)]) > 1:
                try_merge(a, b)

        # A producer whose consumers read its result in other shapes (q, k and v sliced from
        # one bias add) fuses with none of them alone: it would stay a kernel result of
        # another shape. With all of its consumers at once, it is no result at all.
        for g in sorted(members, key=lambda g: index[members[g][0]]):
            if g not in members or find(g) != g:
                continue
            readers, inside = set(), set(member_ids[g])
            for o in member_ids[g]:
                for u in succ[o]:
                    c = compute_of.get(u)
                    if u in inside:
                        continue
                    if c is None:               # returned, or read by a library call
                        readers = None
                        break
                    readers.add(find(c))
                if readers is None:
                    break
            if not readers or len(readers) < 2:
                continue
            together = [g] + sorted(readers, key=lambda r: index[members[r][0]])
            n = sum(n_compute[r] for r in together)
            if n > self.max_group_size:
                continue
            ids = {i for r in together for i in member_ids[r]}
            if path_between(ids, ids, via=False) is not None:
                continue
            merged = sorted((o for r in together for o in members[r]), key=index.__getitem__)
            if memo.refusal(merged) is not None:
                continue
            joined = [member_ids[r] for r in together]
            for r in together[1:]:
                parent[r] = g
                del members[r]
                member_ids[g] = member_ids[g] + member_ids.pop(r)
            members[g] = merged
            n_compute[g] = n
            respan(g, together[1:])
            reach.merge(joined, horizon(member_ids[g]) + 1)

        def place(i):
            """(group, position of its kernel) of the op at block position i."""
            c = compute_of.get(i)
            if c is None:
                return None, i
            g = find(c)
            return g, max(member_ids[g])

        donated = set(DONATED_ARGS.get(fn, [])) if DONATED_ARGS.has(fn) else set()
        live = LiveBytes(block, block_ops, bid, place,
                         lambda o: o in index and op_name(o) not in VIEW_OPS
                         or not (_is_compute(o, dynamic) or op_name(o) in HOST_VIEW_OPS
                                 or _cloneable(o)), donated)
        too_high = []       # (node, node, bytes, peak): horizontal merges refused for memory

        def merge_horizontally(acc, r) -> bool:
            n = n_compute[acc] + n_compute[r]
            if n > self.max_group_size or not n:     # too large, or views alone
                return False
            ids = set(member_ids[acc]) | set(member_ids[r])
            if path_between(ids, ids, via=False) is not None:
                return False
            merged = sorted(members[acc] + members[r], key=index.__getitem__)
            if memo.refusal(merged) is not None:
                return False
            peak, now = live.peak_if(ids, max(ids)), live.peak()
            if peak > now and peak > live.base + self.horizontal_peak_bytes:
                too_high.append((acc, r, peak - now, now))
                return False
            joined = [member_ids[acc], member_ids[r]]
            parent[r] = acc
            del members[r]
            members[acc] = merged
            n_compute[acc] = n
            member_ids[acc] = member_ids[acc] + member_ids.pop(r)
            respan(acc, [r])
            reach.merge(joined, horizon(member_ids[acc]) + 1)
            live.update(ids)
            return True

        # Horizontal: kernels that read one value (a tensor, another kernel's or a library
        # call's results: the row sums of a LayerNorm backward, q/k/v's transposes), so that
        # it is read once, or whose results one op reads (they are all needed there anyway)
        # fuse when one loop nest computes them; each saves a launch.
        siblings: dict = {}     # producer (group, argument, library call) or consumer -> groups
        for key, vals in ([(("arg", i), [a]) for i, a in enumerate(block.arguments)] +
                          [(index[o] if o in index else ("op", bid[o]), list(o.results))
                           for o in block_ops if not _cloneable(o)]):
            for v in vals:
                for u in users(v):
                    c = index.get(u)
                    if c is not None:
                        siblings.setdefault(key if isinstance(key, tuple) else find(key),
                                            []).append(c)
        for o in block_ops:
            # a call's operands through host reshapes: attention reads k and v as
            # collapse_shape views of the kernels that repeat them over the query heads
            # (grouped-query attention); the return's as they are (through them, GPT-2's
            # backward: a launch more, an early column sum taken from the late kernel it
            # shared)
            ret = op_name(o) == "func.return"
            fed = [index[p] for v in o.operands
                   for p in [defining_op(v) if ret else _through_reshapes(defining_op(v), index)]
                   if p is not None and p in index]
            if len(fed) > 1:
                siblings.setdefault(("into", bid[o]), []).extend(fed)
        # Kernels that make an operand of library calls sharing their other operand, or whose
        # other operands one kernel makes (the bf16 weight copies of k and v, or of a gated
        # MLP's gate and up projections, each multiplied with one normalized activation, and
        # in the backward with the two gradients of one kernel): needed at the same point, so
        # they run as one kernel where their loop nests are one (same shape).
        partners: dict = {}
        for o in block_ops:
            if op_name(o) != EXTERN_OP or len(o.operands) != 2:
                continue
            for k, v in enumerate(o.operands):
                p = defining_op(v)
                other = o.operands[1 - k]
                q = defining_op(other)
                if p is None or p not in index:
                    continue
                while q is not None and q not in index and op_name(q) in _RESHAPES:
                    other = q.operands[0]       # a host view of a kernel's result
                    q = defining_op(other)
                # the other operand, or the kernel that makes it (a gated MLP's backward
                # makes the gradients of gate and up in one kernel)
                who = ("arg", other.arg_number) if q is None else \
                    ("kernel", index[q]) if q in index else (bid[q.operation],
                                                             other.result_number)
                partners.setdefault((k, who), []).append(index[p])

        def beside(key):
            """A partners key with the other operand's kernel as it is grouped now."""
            k, who = key
            return ("beside", k, ("kernel", find(who[1])) if who[0] == "kernel" else who)
        for key, fed in partners.items():
            siblings.setdefault(beside(key), []).extend(fed)

        def merge_readers(key, fed) -> None:
            readers = list(dict.fromkeys(find(c) for c in fed
                                         if isinstance(key, tuple) or find(c) != find(key)))
            if len(readers) < 2:
                return
            # Each reader joins the first earlier cluster it may join, else starts one: two
            # row sums of a layer norm's backward join each other though neither joins the
            # kernel of the column sums beside them (only the first reader was tried before).
            heads: list = []
            for r in readers:
                r = find(r)
                heads = list(dict.fromkeys(find(h) for h in heads))
                if r in heads:
                    continue
                for acc in heads[-HORIZONTAL_TRIES:]:
                    if merge_horizontally(acc, r):
                        break
                else:
                    heads.append(r)
        for key in sorted(siblings, key=str):
            merge_readers(key, siblings[key])
        # Library calls whose other operands became one kernel's in the loop above (the k and
        # v gradients of a grouped-query attention backward, made by two kernels that read
        # the attention's results): their kernel-made operands tried together again (the
        # backward's k and v weight copies).
        again: dict = {}
        for key, fed in partners.items():
            again.setdefault(beside(key), []).extend(fed)
        for key in sorted(again, key=str):
            if again[key] != siblings.get(key):
                merge_readers(key, again[key])

        groups = [members[g] for g in sorted(members, key=lambda g: index[members[g][0]])]
        if explain:
            for pair in unfused_pairs(block_ops, index, find, refused):
                remarks.emit(pair.pop("location"), self.name,
                             f"unfused '{pair['producer']}' -> '{pair['consumer']}': "
                             f"{pair['reason']} ({pair['detail']})", **pair)
            for pair in peak_refusals(too_high, members, find, index):
                remarks.emit(pair.pop("location"), self.name,
                             f"unfused '{pair['producer']}' + '{pair['consumer']}': "
                             f"{pair['reason']} ({pair['detail']})", **pair)
        # A view that ends up alone stays a host-side view, not a kernel.
        return [g for g in groups if not all(op_name(o) in VIEW_OPS for o in g)]


_FIRST, _LAST = operator.itemgetter(0), operator.itemgetter(1)


def peak_refusals(too_high, members, find, index) -> list[dict]:
    """A remark's fields for each pair of kernels a horizontal merge refused (raises the peak)
    that stayed apart, once per pair: at the later kernel's last op."""
    out, seen = [], set()
    for a, b, rise, peak in too_high:
        ga, gb = find(a), find(b)
        if ga == gb or (ga, gb) in seen:
            continue
        seen.add((ga, gb))
        early, late = sorted((members[ga], members[gb]), key=lambda g: index[g[-1]])
        out.append({"producer": _tag(early[-1]), "consumer": _tag(late[-1]),
                    "reason": fusion_legality.RAISES_PEAK, "horizontal": True,
                    "detail": f"horizontal: raises peak by {rise} bytes, "
                              f"{peak} -> {peak + rise}",
                    "producer_at": remarks.short_location(early[-1].location),
                    "consumer_at": remarks.short_location(late[-1].location),
                    "location": late[-1].location})
    return out


def _reduces_leading_dim(op) -> bool:
    """A `linalg.generic` whose first loop is a reduction and a later one parallel."""
    if op_name(op) != "linalg.generic":
        return False
    kinds = ["reduction" in str(k) for k in ir.ArrayAttr(op.attributes["iterator_types"])]
    return bool(kinds) and kinds[0] and not all(kinds)


def _library_call(op) -> str | None:
    """The callee of a library call on the host (an `ember.extern` or a `func.call`: before
    outlining, the only calls are the frontend's ATen library calls), else None."""
    name = op_name(op)
    if name == EXTERN_OP:
        return ir.StringAttr(op.attributes["callee"]).value
    if name == "func.call":
        return ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    return None



def _horizon_walk(spans, hi) -> int:
    """ember-fuse's horizon as a walk of the sorted spans (CHECK_REACH compares them)."""
    for lo, top in spans:
        if lo > hi:
            break
        hi = max(hi, top)
    return hi

def _tag(op) -> str:
    """What `op` computes, for a remark ('exp', 'sum', 'aten.mm', 'tensor.pad', ...)."""
    return _library_call(op) or fusion_legality.describe(op) or op_name(op)


def unfused_pairs(block_ops, index, find, refused) -> list[dict]:
    """Each producer -> consumer pair (reading through views) whose ops end in different
    kernels, at least one of them computed by ember: `producer`, `consumer` (what they
    compute), `reason` (a fusion_legality.REFUSALS category), `detail`, `producer_at`,
    `consumer_at` (file:line:col, '' when unknown) and `location` (the consumer's)."""

    def sources(value, hops):
        """(producer op, node-index hops from it to the reader) of `value`, through views."""
        op = defining_op(value)
        if op is None:
            return []
        if op_name(op) in VIEW_OPS and op in index:
            return [s for v in op.operands for s in sources(v, [index[op]] + hops)]
        if op_name(op) in VIEW_OPS and _tail_view(op):     # a host view (of a kernel result)
            return sources(op.operands[0], hops)
        if op in index or _library_call(op) is not None:
            return [(op, hops)]
        return []

    out, seen = [], set()
    for op in block_ops:
        is_node = op in index and op_name(op) not in VIEW_OPS
        if not is_node and _library_call(op) is None:
            continue
        for value in _all_operands(op):
            for producer, hops in sources(value, [index[op]] if is_node else []):
                producer_node = producer in index
                if not (is_node or producer_node) or (producer, op) in seen:
                    continue
                chain = ([index[producer]] if producer_node else []) + hops
                if producer_node and is_node:
                    if find(chain[0]) == find(chain[-1]):
                        continue
                    apart = [(x, y) for x, y in zip(chain, chain[1:]) if find(x) != find(y)]
                    reason, detail = refused.get(apart[-1], (fusion_legality.ILLEGAL, "not tried"))
                else:
                    call = producer if not producer_node else op
                    reason, detail = fusion_legality.LIBRARY_CALL, f"'{_tag(call)}' runs apart"
                seen.add((producer, op))
                out.append({"producer": _tag(producer), "consumer": _tag(op), "reason": reason,
                            "detail": detail,
                            "producer_at": remarks.short_location(producer.location),
                            "consumer_at": remarks.short_location(op.location),
                            "location": op.location})
    return out


def _public_functions(module):
    for op in module.regions[0].blocks[0].operations:
        if op_name(op) == "func.func" and not is_kernel(op) \
                and "sym_visibility" not in op.attributes and len(op.regions[0].blocks) > 0:
            yield op


def _is_compute(op, dynamic: bool = False) -> bool:
    name = op_name(op)
    if name in HOST_OPS:
        return False
    if dynamic and (is_size_op(op) or name == "tensor.reshape"):
        return False    # tensor.reshape: a host view (its sizes are computed on the host)
    if fusion_legality.is_constant_scalar_op(op):
        return False    # cloned into its users, as a constant is
    if _tail_view(op):
        return False    # a host view of a kernel's result (see _tail_view)
    if name == "linalg.fill" and _cloneable(op) and \
            not any(op_name(u) == "func.return" for u in users(op.results[0])):
        return False    # cloned into its users; one that is returned is a kernel of its own
    return True


_cloneable = fusion_legality.cloneable

_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


def _through_reshapes(op, index):
    """`op`, or where it is a host reshape (not in a group: not in `index`), the op that makes
    the value it reshapes, through any chain of them."""
    while op is not None and op not in index and op_name(op) in _RESHAPES:
        op = defining_op(op.operands[0])
    return op


def _tail_view(op) -> bool:
    """A static reshape that only the host reads (returned, or an operand of a library call):
    it stays a view on the host, so that the kernel computing its operand returns the
    operand's shape. Inside the kernel it would make the kernel's result a tensor of another
    shape than the rest of the kernel's (a layer norm over 2x32 rows whose bf16 copy a matmul
    reads as 64 rows could not be one kernel: passes/sink_reshapes.py)."""
    if op_name(op) not in _RESHAPES or not all(
            isinstance(v.type, ir.RankedTensorType) and ir.RankedTensorType(v.type).has_static_shape
            for v in (op.operands[0], op.results[0])):
        return False
    readers = list(users(op.results[0]))
    return bool(readers) and all(op_name(u) in ("func.return", EXTERN_OP, "func.call")
                                 for u in readers)


# ----------------------------------------------------------------------------- outlining

def kernel_tags(ops) -> list[str]:
    """Readable names of what a group computes in order, e.g. ['add', 'gelu'] (broadcast copies
    and repeats of the previous tag are left out)."""
    tags = []
    for op in ops:
        tag = fusion_legality.describe(op)
        if tag and tag != "copy" and (not tags or tags[-1] != tag):
            tags.append(tag)
    return tags or ["copy"]


def kernel_name(tags: list[str], index: int) -> str:
    """`ember_fused_<up to three distinct tags>_<index>`, e.g. ember_fused_add_gelu_0."""
    distinct = list(dict.fromkeys(tags))
    return f"ember_fused_{'_'.join(distinct[:3])}_{index}"


def _outline(module, fn, groups, target: str) -> None:
    block = fn.regions[0].blocks[0]
    counter = _next_kernel_index(module)
    checks = fusion_legality.KernelChecks(target)     # once per kernel structure
    unsorted = False
    module_block = module.regions[0].blocks[0]
    for group in groups:
        in_group = set(group)
        inputs, seen = [], set()

        def note_input(value):
            if value in seen:
                return
            producer = defining_op(value)
            if producer is not None and producer in in_group:
                return
            if producer is not None and _clone_tree_ok(producer):
                for operand in producer.operands:     # the sizes of a dynamic tensor.empty
                    note_input(operand)
                return
            seen.add(value)
            inputs.append(value)

        for op in group:
            for operand in _all_operands(op):
                note_input(operand)
        outputs = []
        for op in group:
            for res in op.results:
                if any(u not in in_group for u in users(res)) or _returned(res):
                    outputs.append(res)
        # results stored through an expand_shape view, collapsed back on the host (a split
        # column sum's producer: fusion_legality.expanded_results)
        viewed = fusion_legality.viewed_outputs(group, outputs, target)
        reassoc = {v: e.owner.attributes["reassociation"] for v, e in viewed.items()}
        outputs = list(dict.fromkeys(viewed.get(v, v) for v in outputs))
        result_dims = None
        if any(not ir.ShapedType(v.type).has_static_shape for v in outputs
               if isinstance(v.type, ir.ShapedType)):
            result_dims = []
            for v in outputs:
                dims = []
                for i, n in enumerate(ir.ShapedType(v.type).shape):
                    if n >= 0:
                        dims.append(-1)
                        continue
                    size = dim_value(v, i, in_group, group[-1])
                    note_input(size)
                    dims.append(inputs.index(size))
                result_dims.append(dims)
        kind = "reduction" if any(fusion_legality.is_reduction(o) for o in group) else "pointwise"
        tags = kernel_tags(group)
        name = kernel_name(tags, counter)
        counter += 1
        loc = _group_location(group)
        with ir.InsertionPoint(module_block), loc:
            kernel = func.FuncOp(name, ([v.type for v in inputs], [v.type for v in outputs]))
        kernel.attributes["sym_visibility"] = ir.StringAttr.get("private")
        KERNEL.set(kernel, kind)
        OPS.set(kernel, tags)
        entry = kernel.add_entry_block(arg_locs=[loc] * len(inputs))
        mapping = {v: entry.arguments[i] for i, v in enumerate(inputs)}
        with ir.InsertionPoint(entry), loc:
            for op in group:
                _clone_into(op, mapping)
            func.ReturnOp([mapping[v] for v in outputs])
        checks.check(kernel)
        last = group[-1]
        with ir.InsertionPoint(last), last.location:
            call = func.CallOp([v.type for v in outputs], ir.FlatSymbolRefAttr.get(name), inputs)
        if result_dims is not None:
            RESULT_DIMS.set(call, result_dims)
        for old, new in zip(outputs, call.results):
            old.replace_all_uses_with(new)
        group_ops = {o.operation for o in group}
        for old, view in viewed.items():
            with ir.InsertionPoint(last), last.location:
                collapsed = tensor.CollapseShapeOp(old.type, call.results[outputs.index(view)],
                                                   reassoc[old]).result
            for use in list(old.uses):
                owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                if owner not in group_ops:
                    owner.operands[use.operand_number] = collapsed
                    unsorted = True     # a reader before the call (sorted below)
        for op in reversed(group):
            op.operation.erase()
        # Only the call's users can now precede it (they followed some op of the group, not
        # necessarily its last). The block is sorted once, after the last group: sorting
        # after each call cost a walk of the whole block per kernel (BERT's backward: ~100).
        call_op = call.operation
        if any(not call_op.is_before_in_block(u) for r in call.results for u in users(r)):
            unsorted = True
    if unsorted:
        stable_topological_sort(block)
    # The ops the kernels replaced that are now unused (a group's inputs' producers, views):
    # MLIR's own clean-up. (The sort above stays ember's: MLIR's topological-sort pass orders
    # only graph regions, and a function body is a region with SSA dominance.)
    passmanager.PassManager.parse("func.func(canonicalize,cse)", fn.context).run(fn.operation)
    _sink_argument_kernels(fn.regions[0].blocks[0])


def _sink_argument_kernels(block) -> None:
    """Each kernel call that reads only the function's arguments (autocast's bf16 copy of a
    weight) moves to just before its first reader: a group's call stands at its last op, and
    a LayerNorm's group ends after the next layer's weight casts, so the casts of every later
    layer ran first and stayed alive together in the arena (GPT-2 bf16's forward: 159 MB)."""
    ops = [o.operation for o in block.operations]
    pos = {o: i for i, o in enumerate(ops)}

    def from_arguments(op) -> bool:
        return op.name == "func.call" and bool(op.results) and bool(op.operands) and \
            all(isinstance(v.owner, ir.Block) for v in op.operands)

    for op in [o for o in ops if from_arguments(o)]:
        readers = [u for r in op.results for u in users(r)]
        if not readers or any(u not in pos or u.name == "func.return" for u in readers):
            continue    # a returned result is the caller's memory: no earlier end to gain
        first = min(readers, key=pos.__getitem__)
        # only past work: the order among such kernels and views stays as it was
        if any(not from_arguments(o) and o.name not in HOST_VIEW_OPS | {"arith.constant"}
               for o in ops[pos[op] + 1:pos[first]]):
            op.move_before(first)


def _group_location(group) -> ir.Location:
    """The kernel's location: its ops' source locations, fused (diagnostics about a kernel
    then name the user's code instead of loc(unknown))."""
    locs, seen = [], set()
    for op in group:
        loc = op.location
        text = str(loc)
        if text not in seen and text != "loc(unknown)":
            seen.add(text)
            locs.append(loc)
    if not locs:
        return ir.Location.unknown()
    return locs[0] if len(locs) == 1 else ir.Location.fused(locs)
def _returned(value) -> bool:
    return any(op_name(u) == "func.return" for u in users(value))


def _clone_tree_ok(op) -> bool:
    return _cloneable(op)


def _all_operands(op):
    """Operands of `op` and of ops nested in its regions that are defined outside `op`."""
    result = list(op.operands)
    inner = set()

    def visit(o):
        if o is op.operation:
            return ir.WalkResult.ADVANCE
        for r in o.results:
            inner.add(r)
        for region in o.regions:
            for blk in region.blocks:
                for arg in blk.arguments:
                    inner.add(arg)
        return ir.WalkResult.ADVANCE

    for region in op.regions:
        for blk in region.blocks:
            for arg in blk.arguments:
                inner.add(arg)
    op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)

    def visit_operands(o):
        if o is not op.operation:
            for v in o.operands:
                if v not in inner:
                    result.append(v)
        return ir.WalkResult.ADVANCE

    op.operation.walk(visit_operands, ir.WalkOrder.PRE_ORDER)
    return result


def _clone_into(op, mapping) -> None:
    """Clones `op` at the current insertion point, remapping outside values through `mapping`
    (cloning cheap producers such as constants on first use)."""
    for value in _all_operands(op):
        if value not in mapping:
            producer = defining_op(value)
            if producer is None or not _cloneable(producer):
                raise PassError(f"ember-fuse: value used by {op_name(op)} has no mapping",
                                op.location)
            _clone_into(producer, mapping)
    clone = op.operation.clone()
    remap_operands(clone, mapping)
    for old, new in zip(op.results, clone.results):
        mapping[old] = new


def _next_kernel_index(module) -> int:
    n = 0
    for op in module.regions[0].blocks[0].operations:
        if is_kernel(op):
            n += 1
    return n
