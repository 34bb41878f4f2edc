"""Which groups of ops may form one kernel, and readable names for what an op computes.

The authority is the code generator's own analysis (`kernel_schedule.schedule_ops`): a group is
legal exactly when it can be scheduled as one loop nest. Before that analysis runs, a cheap
shape screen rejects groups that cannot possibly fit (different iteration spaces).
"""
from torch_mlir import ir

from .backends import backend_named
from .graph_utils import defining_op, users
from .ir_queries import VIEW_OPS, is_reduction, iterator_types, op_name  # noqa: F401

VIEWS = VIEW_OPS
from .kernel_schedule import (ILLEGAL, INDEX_MISMATCH, REDUCE_BROADCAST, TARGET_LIMIT,
                              Unschedulable, frozen_fact, is_empty_value,
                              is_splat_value, schedule_kernel, schedule_ops)

# Why two groups stay apart (ember-fuse{explain=true} remarks, report.json's `unfused`): the
# kinds the schedule reports (kernel_schedule), the screen's own, and ember-fuse's.
REDUCTIONS_OFF = "reductions off"       # ember-fuse{fuse-reductions=false}
TOO_LARGE = "too large"                 # over ember-fuse's max-group-size
CYCLE = "cycle"                         # a path between the groups leaves both
LIBRARY_CALL = "library call"           # a matmul/conv/pool extern or an ATen library call
RAISES_PEAK = "raises peak"             # a horizontal merge would raise the peak live bytes
REFUSALS = (TOO_LARGE, CYCLE, LIBRARY_CALL, TARGET_LIMIT, INDEX_MISMATCH, REDUCE_BROADCAST,
            REDUCTIONS_OFF, RAISES_PEAK, ILLEGAL)

# Body op -> tag, most telling first: a gelu body holds erf, mul and add; call it gelu.
_TAG_PRIORITY = [
    ("math.erf", "gelu"), ("math.tanh", "tanh"), ("math.rsqrt", "rsqrt"), ("math.sqrt", "sqrt"),
    ("math.exp", "exp"), ("math.log", "log"), ("math.log1p", "log1p"), ("math.powf", "pow"),
    ("tensor.extract", "gather"), ("arith.maximumf", "max"), ("arith.minimumf", "min"),
    ("arith.select", "where"), ("arith.cmpf", "cmp"), ("arith.cmpi", "cmp"),
    ("arith.divf", "div"), ("arith.mulf", "mul"), ("arith.subf", "sub"), ("arith.addf", "add"),
    ("arith.negf", "neg"), ("arith.addi", "add"), ("arith.muli", "mul"),
    ("arith.extf", "convert"), ("arith.truncf", "convert"), ("arith.sitofp", "convert"),
    ("arith.fptosi", "convert"), ("arith.uitofp", "convert"),
]
_REDUCE_TAG = {"arith.addf": "sum", "arith.addi": "sum", "arith.maximumf": "amax",
               "arith.minimumf": "amin", "arith.mulf": "prod", "arith.maxsi": "amax",
               "arith.minsi": "amin", "arith.maxnumf": "amax", "arith.minnumf": "amin"}


def loop_ranges(op) -> list[int]:
    """Static loop bounds of a generic (-1 where dynamic); the result shape for other ops."""
    if op_name(op) == "linalg.generic":
        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        ranges = [None] * maps[0].n_dims
        for value, amap in zip(op.operands, maps):
            if not isinstance(value.type, ir.ShapedType):
                continue
            shape = ir.ShapedType(value.type).shape
            for size, expr in zip(shape, amap.results):
                if isinstance(expr, ir.AffineDimExpr) and ranges[expr.position] is None:
                    ranges[expr.position] = size
        return [-1 if r is None or r < 0 else r for r in ranges]
    if len(op.results) and isinstance(op.results[0].type, ir.ShapedType):
        return [d if d >= 0 else -1 for d in ir.ShapedType(op.results[0].type).shape]
    return []


def _nonunit(ranges):
    return [r for r in ranges if r != 1]


def _volume(space) -> int:
    n = 1
    for d in space:
        n *= abs(d)
    return n


def shape_screen(ops, fuse_reductions: bool = True) -> bool:
    """Cheap necessary condition: all ops share one iteration space (up to unit dims), or,
    with reductions, all reductions share their parallel (outer) space and every other op
    iterates over a reduction's full space or over the outer space."""
    return screen_refusal(ops, fuse_reductions) is None


def _space(op) -> str:
    return "x".join("?" if d < 0 else str(d) for d in _nonunit(loop_ranges(op))) or "scalar"


def _screen_facts(op) -> tuple:
    """What the screen reads of every op: (a view?, a reduction?); within frozen_ir_memo
    once per op object (`frozen_fact`), as are its loop ranges and kinds (`_ranges`)."""
    if op_name(op) in VIEWS:
        return True, False
    return False, is_reduction(op)


def _ranges(op) -> tuple:
    """(loop_ranges, iterator_types) of a compute op, for the screen."""
    return loop_ranges(op), iterator_types(op)


def screen_refusal(ops, fuse_reductions: bool = True) -> tuple[str, str] | None:
    """Why `shape_screen` refuses `ops`, as (category, detail); None when it accepts them."""
    facts = [(o, frozen_fact(o, "screen", _screen_facts)) for o in ops]
    compute = [(o, f) for o, f in facts if not f[0]]
    if len(compute) <= 1:
        return None
    reds = [(o, f) for o, f in compute if f[1]]
    if not reds:
        # Pointwise ops of other shapes may share a kernel: a smaller (broadcast) producer,
        # e.g. a bias widened to f32, recomputed inside its consumer's loop nest; a bigger one
        # read in part (a slice) or through a reshape. The schedule decides whether their dims
        # map onto the kernel's loops (and refuses a result of another shape).
        return None
    if not fuse_reductions:
        return REDUCTIONS_OFF, "fuse-reductions=false"
    outer = None
    allowed = set()
    for r, _ in reds:
        full, its = frozen_fact(r, "ranges", _ranges)
        par = tuple(_nonunit([n for n, it in zip(full, its) if it == "parallel"]))
        if outer is not None and par != outer:
            return INDEX_MISMATCH, "reductions over different outer (parallel) spaces"
        outer = par
        allowed.add(tuple(_nonunit(full)))
    allowed.add(outer)
    biggest = max(allowed, key=_volume)
    for o, (_, reduces) in compute:
        if reduces:
            continue
        ranges = frozen_fact(o, "loop ranges", loop_ranges)
        sp = tuple(_nonunit(ranges))
        if sp in allowed or (_volume(sp) <= _volume(biggest) and -1 not in ranges):
            continue    # a smaller broadcast producer (see above), or one read through a reshape
        return INDEX_MISMATCH, (f"'{describe(o) or op_name(o)}' iterates over {_space(o)}, "
                                f"neither a reduction's space nor its outer space")
    return None


def _non_splat_tensor(op) -> bool:
    if not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    attr = op.attributes["value"]
    return not (isinstance(attr, ir.DenseElementsAttr) and ir.DenseElementsAttr(attr).is_splat)


def is_constant_scalar_op(op) -> bool:
    """A scalar `arith` / `math` op computed from constants alone (torch-mlir leaves
    `1 / truncf(0.9)` on the host for vector_norm's root): each kernel reading it recomputes
    it, as it does a constant; as a kernel of its own it would have a scalar result."""
    name = op_name(op)
    if not name.startswith(("arith.", "math.")) or name == "arith.constant" or \
            any(isinstance(r.type, (ir.RankedTensorType, ir.ShapedType)) for r in op.results):
        return False
    for value in op.operands:
        producer = defining_op(value)
        if producer is None or isinstance(value.type, ir.ShapedType) or not (
                op_name(producer) == "arith.constant" or is_constant_scalar_op(producer)):
            return False
    return True


def cloneable(op) -> bool:
    """Cheap producers that each kernel re-creates instead of reading from memory. A dense
    tensor constant whose elements differ (a relative-position index, a constant-folded
    attention mask) is not one: no kernel body computes it per element, so it stays a host
    constant that kernels read as an argument."""
    name = op_name(op)
    if name == "tensor.empty":
        return True
    if name == "arith.constant":
        return not _non_splat_tensor(op)
    if is_constant_scalar_op(op):
        return True
    if name == "linalg.fill":
        value = defining_op(op.operands[0])
        init = defining_op(op.operands[1])
        return (value is not None and op_name(value) == "arith.constant"
                and init is not None and op_name(init) == "tensor.empty")
    return False


def with_cloned_producers(ops) -> list:
    """`ops` plus the cheap producers they read (which outlining copies into the kernel)."""
    extra, seen = [], set(ops)

    def visit(op):
        # (frozen_fact computes it afresh outside planning)
        for producer in frozen_fact(op, "cloneable producers", _cloneable_producers):
            if producer not in seen:
                seen.add(producer)
                visit(producer)
                extra.append(producer)

    for op in ops:
        visit(op)
    return [o for o in extra if op_name(o) != "arith.constant"] + list(ops)


def _cloneable_producers(op) -> list:
    """The cloneable producers of `op`'s operands, in order (`frozen_fact`: once per op object
    while planning)."""
    return [p for p in map(defining_op, op.operands) if p is not None and cloneable(p)]


def group_results(ops) -> list:
    inside = set(ops)
    out = []
    for op in ops:      # (frozen_fact computes `_readers` afresh outside planning)
        for res, readers in frozen_fact(op, "readers", _readers):
            if any(u not in inside or op_name(u) == "func.return" for u in readers):
                out.append(res)
    return out


def _readers(op) -> tuple:
    """((result, its users), ...) of an op (`frozen_fact`: once per op object in planning)."""
    return tuple((res, users(res)) for res in op.results)


def _target_check(target: str):
    """The code generator's own extra requirements on a schedule (passes/backends.py)."""
    return backend_named(target).limits


def is_legal(ops, fuse_reductions: bool = True, target: str = "cpu") -> bool:
    """May `ops` (ops of a host function, in order) become one kernel for `target`?"""
    return refusal(ops, fuse_reductions, target) is None


def refusal(ops, fuse_reductions: bool = True, target: str = "cpu",
            results=None) -> tuple[str, str] | None:
    """Why `ops` may not become one kernel for `target`: (category, detail), the category one
    of REFUSALS; None when they may. `results`: the values the kernel returns (by default
    those read outside `ops` or returned: `group_results`)."""
    screened = screen_refusal(ops, fuse_reductions)
    if screened is not None:
        return screened
    results = group_results(ops) if results is None else results
    try:
        _schedule(ops, results, target)
    except Unschedulable as err:
        if err.reason != NOT_OUTER or not expanded_results(ops, results, target):
            return err.category, err.reason
    return None


NOT_OUTER = "a kernel result is not indexed by the whole outer space"


def _schedule(ops, results, target):
    sched = schedule_ops([o.opview for o in with_cloned_producers(ops)], results)
    _target_check(target)(sched)
    return sched


def _expand_reader(value, inside):
    """The first static `tensor.expand_shape` of `value` among the ops `inside`, or None."""
    for u in users(value):
        if u in inside and op_name(u) == "tensor.expand_shape" and \
                ir.RankedTensorType(u.results[0].type).has_static_shape:
            return u
    return None


def viewed_outputs(ops, results, target: str = "cpu") -> dict:
    """`expanded_results` for a group that may be a kernel (ember-fuse's outlining): {} when
    it may return `results` themselves."""
    if not any(is_reduction(o) for o in ops) or \
            not any(_expand_reader(r, set(ops)) is not None for r in results):
        return {}
    try:
        _schedule(ops, results, target)
        return {}
    except Unschedulable as err:
        if err.reason != NOT_OUTER:
            return {}
    return expanded_results(ops, results, target)


def expanded_results(ops, results, target: str = "cpu") -> dict:
    """For a group whose schedule refuses `results` because one is not indexed by the whole
    outer space: {result: the `expand_shape` of it inside `ops`}, when returning those views
    instead makes the group a kernel ({} otherwise). A split column sum's partials read their
    producer through such a view ([1024, 3072] as [16, 64, 3072]: ember-split-reductions), and
    a producer that a matmul also reads (a bias gradient's input, GELU's backward) is then
    stored by the partials' kernel, indexed by the split dims; the host reads it back through
    the inverse `collapse_shape`, a view (ember-fuse outlines it so)."""
    inside = set(ops)
    subst = {}
    for r in results:
        e = _expand_reader(r, inside)
        if e is not None:
            subst[r] = e.results[0]
    if not subst:
        return {}
    alt = list(dict.fromkeys(subst.get(r, r) for r in results))
    try:
        _schedule(ops, alt, target)
    except Unschedulable:
        return {}
    return subst


_UNKNOWN = object()


class RefusalMemo:
    """`refusal` for the candidate groups of one planning run, each verdict computed once per
    group *structure*: the transformer layers of a model make the same candidate groups over
    and over (GPT-2: ~650 candidates, ~80 structures), and building a schedule was most of
    ember-fuse's time.

    The structure key (`_Structure.group_key`) holds everything `refusal` reads. Valid while
    the IR does not change (ember-fuse's planning only reads it; outlining comes after): ops
    and values are cached by identity. With `verify` every verdict is also computed afresh and
    a difference is recorded in `mismatches` (tests)."""

    verify = False

    def __init__(self, fuse_reductions: bool = True, target: str = "cpu"):
        self.fuse_reductions, self.target = fuse_reductions, target
        self._verdicts: dict = {}
        self._structure = _Structure(cache=True)
        self.hits = self.misses = 0
        self.mismatches: list = []

    def refusal(self, ops) -> tuple[str, str] | None:
        key = self._structure.group_key(ops)
        verdict = self._verdicts.get(key, _UNKNOWN)     # one hash of the key (a long tuple)
        if verdict is not _UNKNOWN:
            self.hits += 1
            if self.verify:
                fresh = refusal(ops, self.fuse_reductions, self.target)
                if fresh != verdict:
                    self.mismatches.append(([op_name(o) for o in ops], verdict, fresh))
            return verdict
        self.misses += 1
        verdict = self._verdicts[key] = refusal(ops, self.fuse_reductions, self.target)
        return verdict


def fresh_group_key(ops, signatures: dict | None = None) -> tuple:
    """`RefusalMemo`'s key of `refusal(ops)`, computed afresh: nothing is cached by identity,
    for callers that rewire the IR between calls (an op's hash follows its operands).

    `signatures`, where given, keeps each op's signature (`_Structure._signature`: its name,
    attributes and body, what no rewiring of operands changes) across calls, by the operation
    object's identity (held, so that its id is not reused): for a caller that never sets an
    attribute or edits a body of an op it asks about (fusion_recompute clones ops, rewires
    operands and erases ops)."""
    structure = _Structure(cache=False)
    structure._sigs = signatures
    return structure.group_key(ops)


class KernelChecks:
    """`check_kernel` for the kernels of one outlining run, once per kernel structure
    (`_Structure.kernel_key`): the kernels of repeated layers are the same. Only kernels that
    pass are remembered (one that fails raises, from a fresh check, with its location). Ops
    are erased and created while outlining, so nothing is cached by identity here."""

    def __init__(self, target: str = "cpu"):
        self.target = target
        self._passed: set = set()
        self.hits = self.misses = 0

    def check(self, kernel) -> None:
        key = _Structure(cache=False).kernel_key(kernel)
        if key in self._passed:
            self.hits += 1
            return
        self.misses += 1
        check_kernel(kernel, self.target)
        self._passed.add(key)


class _Structure:
    """Structure keys: what a would-be kernel's schedule (kernel_schedule) and the target's
    limits read of its ops, so that equal keys give equal verdicts. For each op, in order: its
    name, its attributes (MLIR attributes are uniqued: equal exactly when their text is, so
    they are compared, never printed), the ops of its body with their attributes and which
    block arguments the body reads, and its operands and results; every value numbered by
    first appearance (aliasing is structure: one value read twice links dims) with its type
    and the two facts about its uses anywhere the schedule asks (`is_empty_value`,
    `is_splat_value`)."""

    def __init__(self, cache: bool):
        self._cache = cache
        self._op_sig: dict = {}
        self._value_info: dict = {}
        self._producers: dict = {}
        self._cloneable: dict = {}
        self._users: dict = {}
        self._parts: dict = {}
        self._nums: dict = {}
        self._num_info: list = []
        self._sig_ids: dict = {}
        self._info_ids: dict = {}
        self._by_id: dict = {}      # id(op object) -> (the object, its _OpFacts)
        self._by_op: dict = {}      # operation -> its _OpFacts
        self._op_nums: dict = {}    # operation -> its number
        self._sigs: dict | None = None  # id(operation) -> (operation, signature): fresh_group_key

    def group_key(self, ops) -> tuple:
        """The key of `refusal(ops)` (fuse_reductions and target are the memo's own)."""
        if self._cache:
            return self._group_key_cached(ops)
        full, n_extra = self._with_cloned_producers(ops)
        parts, ids = self._key_parts(n_extra, map(self._numbered, full))
        inside, out = set(ops), []     # group_results(ops)
        for op in ops:
            _, _, results = self._numbered(op)
            for n, readers in zip(results, self._users_of(op)):
                if any(u not in inside or op_name(u) == "func.return" for u in readers):
                    out.append(ids[n][0])
        parts.append(tuple(out))
        return tuple(parts)

    def _key_parts(self, n_extra: int, numbered) -> tuple[list, dict]:
        """The key's body, shared by both group_key paths: the count of cloned producers, then
        per op (signature, operand refs, result refs), each value renumbered in order of first
        use with its info; and that numbering (value -> (index, info))."""
        ids: dict = {}
        info = self._num_info
        get = ids.get
        parts: list = [n_extra]
        for sig, operands, results in numbered:
            # each value's ref, (index of first use, info), made where it is first seen
            # (inlined: ~45 refs per key, a key per candidate group)
            refs = []
            for n in operands:
                i = get(n)
                if i is None:
                    i = ids[n] = (len(ids), info[n])
                refs.append(i)
            outs = []
            for n in results:
                i = get(n)
                if i is None:
                    i = ids[n] = (len(ids), info[n])
                outs.append(i)
            parts.append((sig, tuple(refs), tuple(outs)))
        return parts, ids

    def _group_key_cached(self, ops) -> tuple:
        """group_key over `_OpFacts` (the same key): each op's facts are found by the Python
        object's id (ember-fuse passes the same op objects over and over), and the walks
        compare ints, not MLIR objects (each hash or comparison a call into the bindings)."""
        facts = [self._facts(op) for op in ops]
        # with_cloned_producers, over the facts
        extra, seen = [], {f.num for f in facts}

        def visit(f):
            for p in f.cloneable_producers():
                if p.num not in seen:
                    seen.add(p.num)
                    visit(p)
                    extra.append(p)

        for f in facts:
            visit(f)
        extra = [p for p in extra if not p.constant]
        parts, ids = self._key_parts(len(extra), (f.numbered for f in extra + facts))
        inside, out = {f.num for f in facts}, []     # group_results(ops)
        for f in facts:
            for n, readers in zip(f.numbered[2], f.readers):
                if any(r not in inside or ret for r, ret in readers):
                    out.append(ids[n][0])
        parts.append(tuple(out))
        return tuple(parts)

    def _facts(self, op) -> "_OpFacts":
        got = self._by_id.get(id(op))
        if got is not None and got[0] is op:
            return got[1]
        operation = op.operation
        facts = self._by_op.get(operation)
        if facts is None:
            facts = self._by_op[operation] = _OpFacts(self, op, self._op_num(op))
        self._by_id[id(op)] = (op, facts)     # holds op: its id is not reused meanwhile
        return facts

    def _op_num(self, op) -> int:
        """A number per operation (equal op objects of one operation share it)."""
        operation = op.operation
        n = self._op_nums.get(operation)
        if n is None:
            n = self._op_nums[operation] = len(self._op_nums)
        return n

    def _numbered(self, op):
        """(signature, operand numbers, result numbers) of `op`: each value numbered once."""
        operation = op.operation
        got = self._parts.get(operation)
        if got is None:
            # signatures and value facts interned as ints: the keys hash and compare as ints
            sig = self._sig_ids.setdefault(self._signature(operation), len(self._sig_ids))
            got = self._parts[operation] = (
                sig, tuple(self._number(v) for v in operation.operands),
                tuple(self._number(v) for v in operation.results))
        return got

    def _number(self, v) -> int:
        n = self._nums.get(v)
        if n is None:
            n = self._nums[v] = len(self._nums)
            info = (v.type, is_empty_value(v), is_splat_value(v))
            self._num_info.append(self._info_ids.setdefault(info, len(self._info_ids)))
        return n

    def kernel_key(self, kernel) -> tuple:
        """The key of `check_kernel(kernel)` (the target is the caller's own)."""
        from ..dialects.contract import KERNEL
        block = kernel.regions[0].blocks[0]
        ids: dict = {}
        kind = None
        if KERNEL.has(kernel):
            try:
                kind = KERNEL.get(kernel)
            except (ValueError, TypeError):     # as schedule_kernel reads it
                kind = None
        parts = [kind, tuple(self._ref(a, ids) for a in block.arguments)]
        for op in block.operations:
            parts.append(self._op_part(op, ids))
        return tuple(parts)

    # ----------------------------------------------------------------------- the parts
    def _op_part(self, op, ids) -> tuple:
        return (self._signature(op), tuple(self._ref(v, ids) for v in op.operands),
                tuple(self._ref(v, ids) for v in op.results))

    def _ref(self, v, ids):
        i = ids.get(v)
        if i is None:
            info = self._value_info.get(v) if self._cache else None
            if info is None:
                info = (v.type, is_empty_value(v), is_splat_value(v))
                if self._cache:
                    self._value_info[v] = info
            i = ids[v] = (len(ids), info)
        return i

    def _signature(self, op) -> tuple:
        operation = op.operation
        if self._sigs is not None:
            got = self._sigs.get(id(operation))
            if got is not None and got[0] is operation:
                return got[1]
            sig = self._sigs[id(operation)] = (operation, self._signature_of(operation))
            return sig[1]
        return self._signature_of(operation)

    def _signature_of(self, operation) -> tuple:
        sig = self._op_sig.get(operation) if self._cache else None
        if sig is None:
            body = tuple(
                (tuple(_is_read_arg(a) for a in blk.arguments),
                 tuple((b.operation.name, _attributes(b.operation)) for b in blk.operations))
                for region in operation.regions for blk in region.blocks)
            sig = (operation.name, _attributes(operation), body)
            if self._cache:
                self._op_sig[operation] = sig
        return sig

    # ------------------------------------- with_cloned_producers, over cached queries
    def _with_cloned_producers(self, ops):
        extra, seen = [], set(ops)

        def visit(op):
            for producer in self._producers_of(op):
                if producer is not None and producer not in seen and self._is_cloneable(producer):
                    seen.add(producer)
                    visit(producer)
                    extra.append(producer)

        for op in ops:
            visit(op)
        extra = [o for o in extra if op_name(o) != "arith.constant"]
        return extra + list(ops), len(extra)

    def _producers_of(self, op):
        key = op.operation
        got = self._producers.get(key)
        if got is None:
            got = self._producers[key] = [defining_op(v) for v in op.operands]
        return got

    def _is_cloneable(self, op) -> bool:
        got = self._cloneable.get(op)
        if got is None:
            got = self._cloneable[op] = cloneable(op)
        return got

    def _users_of(self, op):
        """Per result of `op`, the ops that read it."""
        key = op.operation
        got = self._users.get(key)
        if got is None:
            got = self._users[key] = [users(r) for r in op.results]
        return got


class _OpFacts:
    """What `_Structure.group_key` reads of one op (cached mode: the IR does not change): a
    number of its own, `_numbered`, its producers' facts (`defining_op` per operand, lazily),
    whether it is `cloneable` / an `arith.constant`, and per result its readers as (number,
    is a func.return)."""
    __slots__ = ("num", "numbered", "cloneable", "constant", "readers", "_structure", "_op",
                 "_producers", "_cloneable_producers")

    def __init__(self, structure, op, num):
        self.num = num
        self.numbered = structure._numbered(op)
        self.cloneable = structure._is_cloneable(op)
        self.constant = op_name(op) == "arith.constant"
        self._structure, self._op, self._producers = structure, op, None
        self._cloneable_producers = None
        self.readers = [tuple((structure._op_num(u), op_name(u) == "func.return")
                              for u in readers) for readers in structure._users_of(op)]

    def producers(self) -> list:
        if self._producers is None:
            s = self._structure
            self._producers = [None if p is None else s._facts(p)
                               for p in s._producers_of(self._op)]
        return self._producers

    def cloneable_producers(self) -> list:
        """`producers()` that are cloneable, in order (what with_cloned_producers visits)."""
        if self._cloneable_producers is None:
            self._cloneable_producers = [p for p in self.producers()
                                         if p is not None and p.cloneable]
        return self._cloneable_producers


def _attributes(operation) -> tuple:
    attrs = operation.attributes
    return tuple((a.name, a.attr) for a in (attrs[i] for i in range(len(attrs))))


def _is_read_arg(arg) -> bool:
    return any(True for _ in arg.uses)


def check_kernel(kernel, target: str = "cpu") -> None:
    """Raises PassError (located at the op at fault) when code generation cannot handle it."""
    from .base import PassError
    try:
        _target_check(target)(schedule_kernel(kernel))
    except Unschedulable as err:
        raise PassError(f"ember-fuse: cannot generate code for this op: {err.reason}",
                        err.location or kernel.location) from None


def describe(op) -> str:
    """A short readable name for what `op` computes ('gelu', 'sum', 'transpose', ...)."""
    name = op_name(op)
    if name in VIEWS:
        return ""
    if name != "linalg.generic":
        return name.split(".")[-1]
    body = [o.operation.name for o in op.regions[0].blocks[0].operations]
    if is_reduction(op):
        for b in body:
            if b in _REDUCE_TAG:
                return _REDUCE_TAG[b]
        return "reduce"
    for key, tag in _TAG_PRIORITY:
        if key in body:
            return tag
    return "copy" if body == ["linalg.yield"] else body[0].split(".")[-1]
