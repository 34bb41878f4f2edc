"""The Triton lowering's kernel writer: builds the body of one `@triton.jit` function on
kernel_expr's builder (kernel_ir statements in scopes), for a pointwise kernel (1-D tiles over
the flattened result space, masked tail), a reduction ([XBLOCK, RBLOCK] tiles; persistent or
looped over the reduced space, see triton_blocks) and a matmul template's epilogue
(`MatmulWriter`, passes/triton_matmul.py). `KernelWriter.pointwise()` / `.reduction()` return a
`JitKernel` (parameters, AOT signature, body lines, configurations, grid) that triton_source
turns into the module text.
"""
from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from .backends import TRITON
from .base import PassError
from .ir_queries import indexing_maps, op_name, shape, type_name
from .kernel_expr import INDEX_ONLY_OPS, Expr, ExprBuilder, Scope, const, var
from .kernel_ir import (INT, Const, Let, Load, Loop, Op, Raw, Store, Var, int_value, render_loop,
                        render_stmt, walk)
from .kernel_schedule import Unschedulable, tensor_args
from .reduction_body import combiner, masked_combiner, needed_results
from .triton_blocks import (COLUMN_PERSISTENT_MAX, column_configs, is_column,
                            launch_bound_configs, looped_configs, persistent_configs,
                            persistent_rnumel, pointwise_configs, window_configs, window_rnumel)
from .triton_combiners import COMBINE, UNSIGNED_WIDE, identity, identity_value, is_identity
from .triton_lang import TYPES, TritonLang
from . import triton_matmul

INT32_MAX = 2 ** 31 - 1


def _static_extent(expr: str):
    """The value of a launcher's extent expression (KernelWriter.runtime_extent) when every
    factor is a number, else None."""
    parts = expr.split(" * ")
    return math.prod(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def _cast(v: str, ty: str) -> str:
    """`v` converted to Triton type `ty`; an integer literal (a count's `1`: masked.var's
    number of elements) is a constexpr, which has no `.to` (compiled or interpreted), so it
    becomes a 0-d tensor of that type."""
    bare = v.strip()
    while bare.startswith("(") and bare.endswith(")"):
        bare = bare[1:-1].strip()
    if bare in ("True", "False"):    # a bool literal (`isinf` of an integer: fuzz seed 47 index 1395)
        bare = str(int(bare == "True"))
    if bare.lstrip("-").isdigit():
        return f"tl.full([], {bare}, {ty})"
    return f"({v}).to({ty})"


def _names(x) -> set[str]:
    """The variables a memo entry's value reads: an Expr's node's, or those of a list of them."""
    if isinstance(x, Expr):
        return {n.name for n in walk(x.node) if isinstance(n, Var)}
    if isinstance(x, (list, tuple)):
        return set().union(*map(_names, x)) if x else set()
    return set()


def _forget_after(b: ExprBuilder, root: Scope, scope: Scope) -> dict:
    """Before a reduction joins the loop `scope` of an earlier one: values bound in `root`
    after that loop (built since it closed, for another reduction still being built) lie
    after the loop, out of its body's reach; their memo entries go, so that what the body
    reads of them is built again, before the loop (a logsumexp whose max is reached from
    another logsumexp's sum read a column value defined after the loop: fuzz seed 61 index
    982). Returns the entries taken out: valid again once the loop is closed."""
    at = next((k for k, st in enumerate(root.stmts) if st is scope), None)
    if at is None:
        return {}
    later = {st.name for st in root.stmts[at + 1:] if isinstance(st, Let)}
    if not later:
        return {}
    gone = {k: v for k, v in b.memo.items() if _names(v[0]) & later}
    for k in gone:
        del b.memo[k]
    return gone


class TileBuilder(ExprBuilder):
    """ExprBuilder whose loads are masked by the tiles their index depends on."""

    masks = {"x": "xmask", "r": "rmask"}
    concat_as_gather = True

    @property
    def fast_sigmoid(self):
        # where the kernel's exp is Triton's own (f32 kernels: TritonLang not `precise`)
        return not self.lang.precise

    def _value_at(self, v, idx):
        if v in self.buffers:
            ty = type_name(v.type)
            off = self.offset(v, idx)
            deps = frozenset().union(*[e.deps for e in idx]) if idx else frozenset()
            masks = tuple(self.masks[d] for d in sorted(deps) if d in self.masks)
            if self.load_guard is not None and self.load_guard.deps <= deps:
                # (an address that does not move with the guard's tile (a unit dim's index is
                # 0) is the same, in bounds, read for every lane: no mask; a block mask on a
                # scalar pointer is an error)
                masks += (self.load_guard.text,)
                if len(masks) > 1 and not self.load_guard.deps & set(self.masks):
                    # a guard of an unrolled window's index only is a Python bool there: the
                    # interpreter types `xmask & True` int32, not a mask (fuzz seed 59 index
                    # 1030 ran eagerly); compiled, one compare more per such load (a window's
                    # unrolled loads only; a guard that moves with the tile keeps `xmask & g`)
                    masks = (f"(({' & '.join(masks)}) != 0)",)
            return self.bind(Load(self.buffers[v], off.node, ty, masks), deps, ty, "x")
        return super()._value_at(v, idx)

    def guarded_value_at(self, v, idx, bounds, guard):
        """A buffer read unclamped under `guard` (a concat's piece, a pad's inside), through
        any views: a masked load (the other lanes are not read), where a clamped index
        (min/max) would hide the index's contiguity from Triton's axis analysis and split the
        load into scalar ones (GPT-2's q/k/v bias gradient, a concat of three [2048, 768]
        bf16 gradients summed over rows: 2-byte loads). A value computed in the kernel keeps
        the clamp: its own loads and reductions are not under the guard."""
        w = v
        while w not in self.buffers:
            if isinstance(w.owner, ir.Block) or op_name(w.owner) not in INDEX_ONLY_OPS:
                return super().guarded_value_at(v, idx, bounds, guard)
            w = w.owner.operands[0]
        outer = self.load_guard
        self.load_guard = self.bind(guard, guard.deps, "i1", "g")
        try:
            return self.value_at(v, idx)
        finally:
            self.load_guard = outer

    def checked_index(self, i, d, src, op):
        """An index from data, out of [0, n): a device-side assert on a GPU (as eager's CUDA
        kernels; `debug` launch option, see triton_lang), and the error record (`err`, read by
        the host under the interpreter); the load uses index 0 instead."""
        n = self.dim(src, d)
        if int_value(n.node) == 0:
            raise Unschedulable("gather from an empty dim", op.location)
        self.checks = True
        masks = [self.masks[x] for x in sorted(i.deps) if x in self.masks]
        live = " & ".join(masks) if masks else "True"
        bad = self.bind(f"(({i.text} < 0) | ({i.text} >= {n.text})) & ({live})",
                        i.deps | n.deps, "i1", "bad")
        scope = self.scope_for(bad.deps) if bad.deps else self.stack[0]
        for stmt in (f'tl.device_assert(~{bad.text}, "index out of range in self")',
                     f"tl.store(err + {i.text} * 0, 1, mask={bad.text})",
                     f"tl.store(err + 1 + {i.text} * 0, {i.text}, mask={bad.text})",
                     f"tl.store(err + 2 + {i.text} * 0, {d}, mask={bad.text})",
                     f"tl.store(err + 3 + {i.text} * 0, {n.text}, mask={bad.text})"):
            self.emit_into(scope, stmt)
        return self.bind(f"tl.where({bad.text}, 0, {i.text})", i.deps | n.deps, "index", "ix")


@dataclasses.dataclass
class JitKernel:
    name: str
    jit_params: list          # names of pointer/size arguments, in launch order
    signature: dict           # AOT signature, including constexprs
    body: list                # lines of the jit function body
    constexprs: list          # names of the tile-size constexprs
    configs: list             # [(dict of constexpr values, num_warps)]
    grid: str                 # launcher expression of the grid (uses `meta`)
    numels: dict              # launcher-computed sizes: name -> expression


@dataclasses.dataclass(frozen=True)
class Tile:
    """The block of elements a store covers: its shape (constexpr names or 1), the tile
    variables ('x', 'r') its elements are indexed by, and the masks of those."""
    shape: tuple
    deps: frozenset
    masks: tuple


X_TILE = Tile(("XBLOCK",), frozenset({"x"}), ("xmask",))                       # pointwise: 1-D
ROW_TILE = Tile(("XBLOCK", 1), frozenset({"x"}), ("xmask",))                   # one value per row
XR_TILE = Tile(("XBLOCK", "RBLOCK"), frozenset({"x", "r"}), ("xmask", "rmask"))  # rows x reduced
MATMUL_TILE = Tile(("BLOCK_M", "BLOCK_N"), frozenset({"x"}), ("xmask",))       # a matmul output


@dataclasses.dataclass
class UnrolledLoop(Loop):
    """`for var in tl.static_range(stop)` (start 0, step 1): a small static window, unrolled,
    `var` a constexpr (triton_blocks.window_rnumel)."""


def decompose(lines, index: str, dims, sizes, prefix: str, dep: str, vars_: dict):
    """Binds one variable per dim of the row-major flattened `index`; `sizes`: Exprs."""
    sizes = [int_value(s.node) if int_value(s.node) is not None else s.text for s in sizes]
    stride = 1
    strides = []
    for s in reversed(sizes):
        strides.append(stride)
        stride = f"{stride} * {s}" if isinstance(s, str) or isinstance(stride, str) else stride * s
    strides.reverse()
    for k, (g, s, st) in enumerate(zip(dims, sizes, strides)):
        name = f"{prefix}{g}"
        e = index if st == 1 else f"({index} // ({st}))"   # st may be a product of sizes
        if k > 0:
            e = f"({e} % {s})"
        lines.append(f"{name} = {e}")
        vars_[g] = var(name, {dep})


check_schedule = TRITON.limits     # what ember-fuse asks before fusing for Triton


class KernelWriter:
    window = None       # the reduced extent of an unrolled window reduction (see reduction)

    def __init__(self, fn, sched, max_rblock: int, autotune: bool, max_autotune: bool = False,
                 max_unrolled_loads: int = 0):
        self.fn, self.sched, self.max_rblock, self.autotune = fn, sched, max_rblock, autotune
        # an unrolled window whose body would repeat more loads than this (window x loads a
        # step) is a `tl.range` loop instead, the same adds in the same order: Triton's
        # compile grows about quadratically with the unrolled body (swin_t's backward: 24
        # column sums over 64 rows, 1,536 loads, 91 s a configuration; 0.65 s as a loop).
        # 0: no bound (every window unrolled)
        self.max_unrolled_loads = max_unrolled_loads
        self.max_autotune = autotune and max_autotune
        self.name = ir.StringAttr(fn.attributes["sym_name"]).value
        block = fn.regions[0].blocks[0]
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        # eager's math functions where a 16-bit result must match eager's rounding
        narrow = any(isinstance(t, ir.ShapedType) and str(ir.ShapedType(t).element_type)
                     in ("bf16", "f16") for t in list(ftype.inputs) + list(ftype.results))
        self.lang = TritonLang(precise=narrow)
        self.args = tensor_args(block)
        self.results = list(sched.results)
        self.in_names = [f"in{i}" for i in range(len(self.args))]
        self.out_names = [f"out{i}" for i in range(len(self.results))]
        self.builder = TileBuilder(sched, self.lang, dict(zip(self.args, self.in_names)),
                                reduce_hook=self._reduce)
        numels = [math.prod(s or 1 for s in shape(v)) for v in self.args + self.results]
        self.wide = max(numels, default=0) > INT32_MAX

    def runtime_extent(self, dims):
        """The launcher's expression of a flattened extent: static sizes as numbers (a dim
        that only a loop has, an expanded read summed away, is in no tensor's shape), dynamic
        ones from the tensors' sizes."""
        parts = [str(self.sched.size(g)) if self.sched.size(g) is not None
                 else f"sizes[{self.sched.size_index(g)}]" for g in dims]
        return " * ".join(parts) or "1"

    def sizes(self, dims) -> list:
        return [self.builder.size(g) for g in dims]

    def extent(self, dims):
        parts = self.sizes(dims)
        if all(int_value(p.node) is not None for p in parts):
            return str(math.prod(int_value(p.node) for p in parts))
        return " * ".join(p.text for p in parts) or "1"

    def extent_node(self, dims):
        """The flattened extent of `dims` as a node: an integer when static, else the product
        of the size variables as printed (no decision reads it)."""
        parts = self.sizes(dims)
        if all(int_value(p.node) is not None for p in parts):
            return Const(math.prod(int_value(p.node) for p in parts), INT)
        return Raw(self.extent(dims))

    # --- stores ------------------------------------------------------------------------------
    def value(self, k, loop_vars, bound: bool = False):
        """(value, offset) of output k at `loop_vars`; `bound`: the value is a local, computed
        (its loads done) where this is called."""
        out = self.results[k]
        idx = [const(0) if s == 1 else loop_vars[g] for g, s in
               zip(self.sched.dims(out), shape(out))]
        val = self.builder.value_at(out, idx)
        if bound and val.deps and not isinstance(val.node, (Var, Const)):
            val = self.builder.bind(val, val.deps, type_name(out.type))
        return val, self.builder.offset(out, idx)

    def store(self, k, loop_vars, tile: Tile, computed=None):
        """Stores output k over `tile`; `computed`: its (value, offset) from `value`."""
        out = self.results[k]
        val, off = computed or self.value(k, loop_vars)
        # tl.store broadcasts the value and the mask to the pointer's shape, never the pointer:
        # an offset that misses a tile dim (a full reduction's `out + 0`, an output constant
        # along x) is widened to the tile so that it covers the mask; a value without a tile
        # dependence is given the tile's shape.
        self.builder.stack[-1].stmts.append(Store(
            self.out_names[k], off.node, val.node, type_name(out.type), tile.shape, tile.masks,
            widen=not tile.deps <= set(off.deps), fill=not val.deps))

    # --- pointwise ---------------------------------------------------------------------------
    def pointwise(self) -> JitKernel:
        out0 = self.results[0]
        space = [g for g in self.sched.dims(out0) if not self.sched.unit(g)]
        root = self.builder.stack[0]
        pid = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        head = [f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)", "xmask = xindex < xnumel"]
        vars_ = {}
        decompose(head, "xindex", space, self.sizes(space), "i", "x", vars_)
        root.stmts.extend(head)
        root.binds = {"x"}
        # every result's value before any store: a result written over an input it reads
        # elementwise (ember-buffer-reuse's writes_args) hides no element from another result
        multi = len(self.results) > 1
        vals = [self.value(k, vars_, bound=multi) for k in range(len(self.results))]
        for k in range(len(self.results)):
            self.store(k, vars_, X_TILE, vals[k])
        configs = pointwise_configs(self.autotune, self.max_autotune)
        return self._kernel(["xnumel"], {"xnumel": self.runtime_extent(space)}, ["XBLOCK"], configs,
                            '(triton.cdiv(xnumel, meta["XBLOCK"]),)')

    # --- reductions ----------------------------------------------------------------------------
    def reduction(self) -> JitKernel:
        s = self.sched
        try:
            check_schedule(s)
        except Unschedulable as err:
            raise PassError(f"ember-lower-to-triton: {err.reason}", err.location) from None
        rdims = [g for g in s.reductions[0].reduced if not s.unit(g)]
        self.rdims = rdims
        self._loop = None       # (scope, loop vars) of the last reduction loop built
        self.window = window_rnumel(s)
        if self.window is not None:
            return self._window_reduction()
        rnumel = persistent_rnumel(s, rdims, self.max_rblock)
        column = is_column(s)
        if column and rnumel is not None and rnumel > COLUMN_PERSISTENT_MAX:
            rnumel = None   # looped over rows, many columns a program (coalesced loads)
        self.persistent = rnumel is not None
        outer = [g for g in s.outer if not s.unit(g)]
        # indices over the iteration space (x times r), not only over the tensors, must fit
        if math.prod(s.size(g) or 1 for g in outer + rdims) > INT32_MAX:
            self.wide = True
        root = self.builder.stack[0]
        pid = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        head = [f"xindex = ({pid} * XBLOCK + tl.arange(0, XBLOCK))[:, None]",
                "xmask = xindex < xnumel"]
        self.xvars = {}
        decompose(head, "xindex", outer, self.sizes(outer), "p", "x",
                   self.xvars)
        root.binds = {"x"}
        root.stmts.extend(head)
        if self.persistent:
            self.rvars = {}
            lines = ["rindex = tl.arange(0, RBLOCK)[None, :]", "rmask = rindex < rnumel"]
            decompose(lines, "rindex", rdims, self.sizes(rdims), "r", "r",
                      self.rvars)
            root.stmts.extend(lines)
            configs = persistent_configs(rnumel, bool(outer), self.max_autotune, column,
                                         self.autotune)
        elif column:
            configs = column_configs(self.autotune, self.max_autotune)
        else:
            configs = looped_configs(self.autotune, self.max_autotune)
        # All reductions first, in op order, so that their loops precede the output loops.
        for r in s.reductions:
            self.builder.reduction(r.op, self._loops_at_p(r.op))
        for k, o in enumerate(s.outputs):
            inner = [g for g in o.inner if not s.unit(g)]
            if not inner:
                self.store(k, self.xvars, ROW_TILE)
            elif self.persistent:
                self.store(k, {**self.xvars, **self.rvars}, XR_TILE)
            elif self._loop is not None and inner == rdims and \
                    not self._reads_reduction(o.value):
                # over the reduced dims and reading no reduction (a BatchNorm backward's
                # residual sum beside its sums): stored in the reductions' loop
                scope, rvars = self._loop
                self.builder.stack.append(scope)
                scope.open = True
                self.store(k, {**self.xvars, **rvars}, XR_TILE)
                self.builder.pop()
            else:
                loop = Scope({"r"}, Loop("roff", Const(0, INT), self.extent_node(inner),
                                         Var("RBLOCK")))
                vars_ = {}
                loop.stmts += ["rindex = roff + tl.arange(0, RBLOCK)[None, :]",
                               f"rmask = rindex < {self.extent(inner)}"]
                decompose(loop.stmts, "rindex", inner, self.sizes(inner),
                           "r", "r", vars_)
                self.builder.push(loop)     # attaches the loop to root (once)
                self.store(k, {**self.xvars, **vars_}, XR_TILE)
                self.builder.pop()
        return self._kernel(["xnumel", "rnumel"], {"xnumel": self.runtime_extent(outer),
                                                    "rnumel": self.runtime_extent(rdims)},
                            ["XBLOCK", "RBLOCK"], configs, '(triton.cdiv(xnumel, meta["XBLOCK"]),)')

    def _window_reduction(self) -> JitKernel:
        """A small strided reduction written like a pointwise kernel (triton_blocks'
        WINDOW_MAX): 1-D tiles over the outer space, each reduction an unrolled loop over its
        window whose loads are masked by x alone, accumulated in window order."""
        s = self.sched
        self.persistent = False
        outer = [g for g in s.outer if not s.unit(g)]
        if math.prod(s.size(g) or 1 for g in outer + self.rdims) > INT32_MAX:
            self.wide = True
        self.builder.masks = {"x": "xmask"}     # the window's loop is exact: no r mask
        root = self.builder.stack[0]
        pid = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        head = [f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)", "xmask = xindex < xnumel"]
        self.xvars = {}
        decompose(head, "xindex", outer, self.sizes(outer), "p", "x", self.xvars)
        root.binds = {"x"}
        root.stmts.extend(head)
        for r in s.reductions:
            self.builder.reduction(r.op, self._loops_at_p(r.op))
        for k in range(len(s.outputs)):
            self.store(k, self.xvars, X_TILE)
        xstatic = None if any(s.size(g) is None for g in outer) else \
            math.prod(s.size(g) for g in outer)
        configs = window_configs(xstatic, self.autotune, self.max_autotune)
        return self._kernel(["xnumel"], {"xnumel": self.runtime_extent(outer)}, ["XBLOCK"],
                            configs, '(triton.cdiv(xnumel, meta["XBLOCK"]),)')

    def _reads_reduction(self, what) -> bool:
        """Whether a reduction of the kernel that is built already computes part of `what` (an
        op or a value): then `what` is computed after that reduction's loop, not in it."""
        built = [r.op for r in self.sched.reductions]
        stack = list(what.operands) if not isinstance(what, ir.Value) else [what]
        seen = []
        while stack:
            v = stack.pop()
            if not isinstance(v, ir.OpResult):
                continue
            op = v.owner
            if any(op == r for r in built):
                return True
            if any(op == o for o in seen):
                continue
            seen.append(op)
            stack.extend(op.operands)
            for region in op.regions:       # values a body reads from outside it
                for block in region.blocks:
                    for inner in block.operations:
                        stack.extend(inner.operands)
        return False

    def _loops_at_p(self, op):
        loops = []
        for j in range(len(ir.ArrayAttr(op.attributes["iterator_types"]))):
            g = self.sched.loop_gid(op, j)
            loops.append(self.xvars.get(g, const(0) if self.sched.unit(g) else None))
        return loops

    def _reduce(self, b, op, loops):
        """reduce_hook: the accumulators of reduction `op` at the outer point `loops`."""
        s = self.sched
        root = b.stack[0]
        saved = b.stack
        shared = None
        if self.persistent:
            rvars, scope = self.rvars, None
        elif self._loop is not None and not self._reads_reduction(op):
            # the loop of the reductions before it, which it reads nothing of: one pass over
            # the rows (its accumulators' fills and its per-column values go before the loop,
            # open while its body is built; the values the loop computes already are reused)
            shared = scope, rvars = self._loop
            hidden = _forget_after(b, root, scope)
            scope.open = True
            b.stack = [root, scope]
        elif self.window is not None:
            scope = Scope({"r"}, UnrolledLoop("rindex", Const(0, INT), Const(self.window, INT)))
            rvars = {}
            decompose(scope.stmts, "rindex", self.rdims, self.sizes(self.rdims),
                      "r", "r", rvars)
            b.stack = [root, scope]
        else:
            scope = Scope({"r"}, Loop("roff", Const(0, INT), Var("rnumel"), Var("RBLOCK")))
            scope.stmts += ["rindex = roff + tl.arange(0, RBLOCK)[None, :]",
                            "rmask = rindex < rnumel"]
            rvars = {}
            decompose(scope.stmts, "rindex", self.rdims, self.sizes(self.rdims),
                       "r", "r", rvars)
            b.stack = [root, scope]
        full = [l if l is not None else rvars.get(s.loop_gid(op, j), const(0))
                for j, l in enumerate(loops)]
        parts = []
        used = {k for k, r in enumerate(op.results) if list(r.uses)}
        if self.window is not None and shared is None and any(
                combiner(op, k, used)[0] is None and masked_combiner(op, k, used)[0] is None
                for k in used):
            accs = self._window_fold(b, op, loops, full, used, scope)
            b.stack = saved
            b.emit_into(root, scope)
            self._loop = (scope, rvars)
            return accs
        for k in range(len(op.results)):
            if k not in used:   # e.g. the argmax half of torch-mlir's amax
                parts.append(None)
                continue
            kind, operand = combiner(op, k, used)
            cond = None
            if kind is None:   # a masked update: reduce select(cond, f, identity)
                kind, operand, cond, take = masked_combiner(op, k, used)
            if kind not in COMBINE:
                b.stack = saved
                raise PassError(f"ember-lower-to-triton: unsupported reduction combiner "
                                f"'{kind or 'general body'}'", op.location)
            ctx = self._body_ctx(b, op, full)
            val = b.scalar(operand, ctx)
            rty = type_name(op.results[k].type)
            if rty == "i1" and kind in ("maxui", "minui", "maxsi", "minsi"):
                kind = "ori" if kind in ("maxui", "minsi") else "andi"   # bool amax/amin
            if kind in ("maxui", "minui") and rty not in UNSIGNED_WIDE:
                b.stack = saved
                raise PassError(f"ember-lower-to-triton: unsupported reduction combiner "
                                f"'{kind}' on {rty}", op.location)
            if cond is not None:
                c, ident = b.scalar(cond, ctx), identity(kind, rty)
                arms = (val.node, Raw(ident)) if take else (Raw(ident), val.node)
                val = b.bind(Op("arith.select", (c.node, *arms), rty, ("i1", rty, rty)),
                             val.deps | c.deps, type_name(op.results[k].type), "m")
            parts.append((kind, val))
        b.stack = saved
        # The loop goes in after its body was built: a reduction that this one reads (built
        # while evaluating the body) has already put its own loop first.
        finals, kind_of = [], {}
        for k, part in enumerate(parts):
            if part is None:
                finals.append(None)
                continue
            kind, val = part
            ty = type_name(op.results[k].type)
            red, _, comb = COMBINE[kind]
            ident = identity(kind, ty)
            acc_ty = TYPES[ty][1]
            v = val.text
            if kind in ("maxui", "minui"):
                acc_ty, mask = UNSIGNED_WIDE[ty]
                v = f"({_cast(v, acc_ty)} & {mask})"
            elif ty not in ("f16", "bf16", "f32", "f64") and \
                    math.isinf(identity_value(kind, ty)):
                raise PassError("ember-lower-to-triton: float combiner on integers", op.location)
            elif ty not in ("f16", "bf16", "f32", "f64"):
                # loop indices are int32: the identity (2**62) needs the result's width
                v = _cast(v, TYPES[ty][1])
            # a narrow integer's identity as a literal would widen the where to int32 (Triton
            # types a Python int as int32), and the reduction with it: `amax(x) ** 2` of an
            # int8 ran in int32 where eager's wraps (fuzz seed 63 index 215: 16129, not 1)
            fill = f"tl.full([], {ident}, {acc_ty})" if ty in ("i8", "i16") else ident
            masked = f"tl.where(xmask & rmask, {v}, {fill})"
            if self.window is not None:
                # combined in window order, from the identity (ATen's order for a sum: 0, then
                # kh, kw); x lanes past the end are never stored, so need no identity
                acc = b.fresh("acc")
                b.emit_into(root, f"{acc} = tl.full([XBLOCK], {ident}, {acc_ty})")
                scope.stmts.append(f"{acc} = " + comb.format(a=acc, b=v))
                total = acc
            elif self.persistent:
                total = f"{red}({masked}, 1)[:, None]"
            else:
                acc = b.fresh("acc")
                b.emit_into(root, f"{acc} = tl.full([XBLOCK, RBLOCK], {ident}, {acc_ty})")
                scope.stmts.append(f"{acc} = " + comb.format(a=acc, b=masked))
                total = f"{red}({acc}, 1)[:, None]"
            if ty in ("i8", "i16") and kind not in ("maxui", "minui") and \
                    self.window is None:
                # tl.max / tl.min / tl.sum widen a narrow integer to int32 (triton's
                # standard.py): the result is narrowed back, so that what follows wraps as
                # eager's does
                total = f"({total}).to({acc_ty})"
            if kind in ("maxui", "minui"):
                # the initial value too is combined unsigned; the result truncated to the type
                init = b.value_at(op.outputs[k], b.apply_map(
                    indexing_maps(op)[len(op.inputs) + k], loops))
                if isinstance(init.node, Const) and not isinstance(init.node.value, float) \
                        and init.node.dtype != "i1":
                    first = str(int(init.node.value) & mask)    # a literal
                else:
                    first = f"(({init.text}).to({acc_ty}) & {mask})"
                total = comb.format(a=first, b=total)
                total = f"({total}).to({TYPES[ty][1]})"
                comb = None
            finals.append((k, ty, comb, total))
            kind_of[k] = kind
        if shared is not None:
            scope.open = False
            for k, v in hidden.items():     # after the loop, what lay after it is in reach
                b.memo.setdefault(k, v)
        elif scope is not None:   # before an output loop being built (a reduction it reads)
            b.emit_into(root, scope)
            self._loop = (scope, rvars)
        accs = []
        for item in finals:
            if item is None:
                accs.append(Expr("None"))
                continue
            k, ty, comb, total = item
            init = b.value_at(op.outputs[k], b.apply_map(
                indexing_maps(op)[len(op.inputs) + k], loops))
            if comb is not None and not is_identity(init.node, kind_of[k], ty):
                total = comb.format(a=init.text, b=total)
            accs.append(b.bind(total, frozenset({"x"}), ty, "red"))
        return accs

    def _window_fold(self, b, op, loops, full, used, scope):
        """A window reduction's general body (max_pool2d_with_indices' value and index: `take
        = v > max | isnan(v)`, both selected by it) folded in window order, as ATen's kernels
        loop: each step computes every kept result's update from the accumulators before any
        is assigned. Returns the accumulators, final after the unrolled loop."""
        root = b.stack[0]
        need = needed_results(op, sorted(used))
        maps = indexing_maps(op)
        accs = [None] * len(op.results)
        for k in need:
            ty = type_name(op.results[k].type)
            init = b.value_at(op.outputs[k], b.apply_map(maps[len(op.inputs) + k], loops))
            name = b.fresh("acc")
            if init.deps:
                b.emit_into(root, f"{name} = {init.text}")
            else:   # a constant: a block of it (where() copies its bits, -0.0 and NaN too)
                b.emit_into(root, f"{name} = tl.where(xmask, {init.text}, {init.text})"
                            f".to({TYPES[ty][1]})")
            accs[k] = Expr(name, frozenset({"x", "r"}))
        outs = [a if a is not None else Expr("None") for a in accs]
        new = {}
        for k in need:
            val = b.generic_yield(op, k, full, outs=outs)
            new[k] = b.bind(val, val.deps | {"r"}, type_name(op.results[k].type), "upd")
        for k in need:
            scope.stmts.append(f"{accs[k].text} = {new[k].text}")
        return [Expr(a.text, frozenset({"x"})) if a is not None and k in used else
                Expr("None") for k, a in enumerate(accs)]

    def _body_ctx(self, b, op, loops):
        block = op.regions[0].blocks[0]
        maps = indexing_maps(op)
        operands = list(op.inputs) + list(op.outputs)
        ctx = {"loops": loops, "key": tuple(l.text for l in loops)}
        for i, arg in enumerate(block.arguments[:len(op.inputs)]):
            if isinstance(operands[i].type, ir.RankedTensorType):
                ctx[arg] = (lambda v=operands[i], m=maps[i]: b.value_at(v, b.apply_map(m, loops)))
            else:
                ctx[arg] = (lambda v=operands[i]: b.scalar(v, {}))
        return ctx

    # --- text ------------------------------------------------------------------------------
    def _kernel(self, numel_names, numels, constexprs, configs, grid) -> JitKernel:
        static = {n: _static_extent(e) for n, e in numels.items()}
        if self.autotune and all(v is not None for v in static.values()):
            work = math.prod(static.values()) * (self.window or 1)
            configs = launch_bound_configs(configs, static, work, self.max_autotune)
        # Statements without a loop dependence (constants folded late) come first.
        body = ["    " + render_stmt(st, self.builder.show) for st in self.builder.preamble]
        self._flatten(self.builder.stack[0], body, 1)
        checks = ["err"] if self.builder.checks else []
        params = self.in_names + self.out_names + checks + numel_names + \
            [self.lang.dynamic_sizes[k] for k in sorted(self.lang.dynamic_sizes)]
        sig = {}
        for n, v in zip(self.in_names + self.out_names, self.args + self.results):
            sig[n] = "*" + TYPES[type_name(v.type)][2]
        if checks:
            sig["err"] = "*i64"
        for n in params[len(sig):]:
            sig[n] = "i64" if self.wide else "i32"
        for c in constexprs:
            sig[c] = "constexpr"
        return JitKernel(self.name, params, sig, body, constexprs, configs, grid, numels)

    def _flatten(self, scope, out, depth):
        for st in scope.stmts:
            if isinstance(st, Scope) and isinstance(st.loop, UnrolledLoop):
                stop = self.builder.show(st.loop.stop)
                inner: list = []
                self._flatten(st, inner, depth + 1)
                loads = sum(line.count("tl.load(") for line in inner)
                unroll = not self.max_unrolled_loads or int_value(st.loop.stop) is None or \
                    int_value(st.loop.stop) * loads <= self.max_unrolled_loads
                loop = "tl.static_range" if unroll else "tl.range"
                out.append("    " * depth + f"for {st.loop.var} in {loop}({stop}):")
                out += inner
            elif isinstance(st, Scope):
                out.append("    " * depth + render_loop(st.loop, self.builder.show))
                self._flatten(st, out, depth + 1)
            else:
                out.append("    " * depth + render_stmt(st, self.builder.show))


class AccBuilder(TileBuilder):
    """The matmul template's builder: the product is the accumulator tile `acc`, read at the
    point being written (ember-matmul-template checked that the epilogue reads it so)."""

    product = None

    def _value_at(self, v, idx):
        if v == self.product:
            return triton_matmul.acc_expr()
        return super()._value_at(v, idx)


class MatmulWriter(KernelWriter):
    """A writer over a `matmul` kernel's epilogue (passes/triton_matmul.py): with
    `in_memory` the product is one more input (the library variant's epilogue kernel),
    otherwise it is the template's accumulator."""

    def __init__(self, fn, parts, in_memory: bool, autotune: bool, max_autotune: bool):
        self.fn, self.sched, self.max_rblock = fn, parts.schedule, 0
        self.autotune, self.max_autotune = autotune, autotune and max_autotune
        self.name = ir.StringAttr(fn.attributes["sym_name"]).value
        self.args = list(parts.tensor_args) + ([parts.value] if in_memory else [])
        self.results = list(parts.schedule.results)
        narrow = any(type_name(v.type) in ("bf16", "f16") for v in self.args + self.results)
        self.lang = TritonLang(precise=narrow)
        self.in_names = [f"in{i}" for i in range(len(self.args))]
        self.out_names = [f"out{i}" for i in range(len(self.results))]
        buffers = dict(zip(self.args, self.in_names))
        if in_memory:
            self.builder = TileBuilder(self.sched, self.lang, buffers, reduce_hook=self._reduce)
        else:
            self.builder = AccBuilder(self.sched, self.lang, buffers, reduce_hook=self._reduce)
            self.builder.product = parts.value
        numels = [math.prod(s or 1 for s in shape(v)) for v in self.args + self.results]
        self.wide = max(numels, default=0) > INT32_MAX
