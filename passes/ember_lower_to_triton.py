"""ember-lower-to-triton: every ember kernel func gets Triton source (docs/internals.md, Stage 4).

Invariant established: each `func.func` carrying `ember.kernel` has `ember.source` (one or more
`@triton.jit` functions plus the launcher `def NAME(*tensors)`) and `ember.symbol = NAME`; the
module has `ember.target = "triton"` and `ember.prelude` (imports and helpers), so that
`prelude + "\\n".join(sources)` is one Python module.

Code shapes (loop structure from kernel_schedule, expressions from its ExprBuilder):
* pointwise: 1-D tiles over the flattened result space, masked tail;
* reduction: 2-D tiles [XBLOCK, RBLOCK] (x = flattened outer space P, r = reduced space).
  "Persistent" when the reduced extent is static and <= max-rblock: the whole row sits in
  registers, so softmax/layer_norm read their input once and the broadcast consumers reuse it;
  otherwise one loop over r per reduction and one per output with inner dims.
Launchers compute the grid from the tensors at run time; dynamic dims are kernel arguments.
"""
from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from .backends import TRITON
from .base import Pass, PassError, option
from .kernel_ir import Const, Load, Op, Raw, Var, int_value, render_stmt
from .kernel_schedule import (Expr, Unschedulable, combiner, const, indexing_maps,
                              masked_combiner, schedule_kernel, shape, tensor_args, type_name,
                              var)
from .kernel_expr import ExprBuilder, Scope
from .graph_utils import attach_kernel_sources
from .triton_lang import PRELUDE, TYPES, TritonLang, UnsupportedOp, round_to
from . import triton_matmul
from ..dialects.contract import KERNEL

_INT32_MAX = 2 ** 31 - 1
# Reduction combiners: (tl reduction, identity for masked lanes (by float/int), elementwise)
_COMBINE = {
    "addf": ("tl.sum", "0.0", "{a} + {b}"), "addi": ("tl.sum", "0", "{a} + {b}"),
    # maximumf/minimumf propagate NaN (amax, max.values): tl.max/tl.min do not, a reduce
    # with the prelude's branch-free combiner does (as Inductor's max2).
    "maximumf": ("_ember_nanmax_reduce", 'float("-inf")', "_ember_nanmax({a}, {b})"),
    "maxnumf": ("tl.max", 'float("-inf")', "tl.maximum({a}, {b})"),
    "minimumf": ("_ember_nanmin_reduce", 'float("inf")', "_ember_nanmin({a}, {b})"),
    "minnumf": ("tl.min", 'float("inf")', "tl.minimum({a}, {b})"),
    "maxsi": ("tl.max", "-(2**62)", "tl.maximum({a}, {b})"),
    "minsi": ("tl.min", "2**62", "tl.minimum({a}, {b})"),
    "ori": ("tl.max", "0", "{a} | {b}"), "andi": ("tl.min", "1", "{a} & {b}"),
    "mulf": ("_ember_prod_reduce", "1.0", "{a} * {b}"),
    "muli": ("_ember_prod_reduce", "1", "{a} * {b}"),
    # unsigned (uint8 amax/amin): reduced over the values zero-extended to a wider type
    # (_UNSIGNED_WIDE), the identity in that type, the result truncated back
    "maxui": ("tl.max", "0", "tl.maximum({a}, {b})"),
    "minui": ("tl.min", None, "tl.minimum({a}, {b})"),
}
# signless type -> (the wider Triton type its unsigned values fit in, the mask that
# zero-extends; also the largest unsigned value, minui's identity)
_INT_WIDTH = {"i8": 8, "i16": 16, "i32": 32}
_UNSIGNED_WIDE = {"i8": ("tl.int32", 0xFF), "i16": ("tl.int32", 0xFFFF),
                  "i32": ("tl.int64", 0xFFFFFFFF)}


def _identity(kind: str, ty: str) -> str:
    """The identity of combiner `kind` for masked lanes, in type `ty`: an integer max/min's is
    the type's own extreme (2**62 does not fit an int32: the interpreter refuses it; nor is it
    int64's: fuzz seed 22), an
    unsigned one's that of the zero-extended values (_UNSIGNED_WIDE)."""
    if kind in ("maxui", "minui"):
        return str(_UNSIGNED_WIDE[ty][1] if kind == "minui" else 0)
    if kind in ("maxsi", "minsi") and ty in _INT_WIDTH:
        w = _INT_WIDTH[ty]
        return f"-(2**{w - 1})" if kind == "maxsi" else f"(2**{w - 1} - 1)"
    if kind in ("maxsi", "minsi") and ty == "i64":
        # int64's extremes (2**62 is no identity: amax of a row of INT64_MIN gave -2**62);
        # -2**63 spelled so that no literal leaves int64 (2**63 alone would be a uint64)
        return "(-9223372036854775807 - 1)" if kind == "maxsi" else "9223372036854775807"
    return _COMBINE[kind][1]


def _identity_value(kind: str, ty: str):
    """The value `_identity(kind, ty)` spells."""
    if kind in ("maxui", "minui"):
        return _UNSIGNED_WIDE[ty][1] if kind == "minui" else 0
    if kind in ("maxsi", "minsi"):
        top = 2 ** (_INT_WIDTH[ty] - 1) if ty in _INT_WIDTH else 2 ** 62
        return -top if kind == "maxsi" else top - (ty in _INT_WIDTH)
    return {"addf": 0.0, "addi": 0, "maximumf": -math.inf, "maxnumf": -math.inf,
            "minimumf": math.inf, "minnumf": math.inf, "ori": 0, "andi": 1,
            "mulf": 1.0, "muli": 1}[kind]


def _is_identity(n, kind: str, ty: str) -> bool:
    """Whether node `n` is the constant identity of combiner `kind` in type `ty` (combining
    an accumulator with it changes nothing)."""
    if not isinstance(n, Const):
        return False
    value = _identity_value(kind, ty)
    if isinstance(value, float):
        return n.dtype not in ("i1",) and isinstance(n.value, float) and \
            n.value == value and math.copysign(1, n.value) == math.copysign(1, value)
    return not isinstance(n.value, float) and int(n.value) == value


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


class _Builder(ExprBuilder):
    """ExprBuilder whose loads are masked by the tiles their index depends on."""

    masks = {"x": "xmask", "r": "rmask"}

    def _value_at(self, v, idx):
        if v in self.buffers:
            ty = type_name(v.type)
            off = self.offset(v, idx)
            deps = frozenset().union(*[e.deps for e in idx]) if idx else frozenset()
            masks = tuple(self.masks[d] for d in sorted(deps) if d in self.masks)
            return self.bind(Load(self.buffers[v], off.node, ty, masks), deps, ty, "x")
        return super()._value_at(v, idx)

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
class _Kernel:
    name: str
    jit_params: list          # names of pointer/size arguments, in launch order
    signature: dict           # AOT signature, including constexprs
    body: list                # lines of the jit function body
    constexprs: list          # names of the tile-size constexprs
    configs: list             # [(dict of constexpr values, num_warps)]
    grid: str                 # launcher expression of the grid (uses `meta`)
    numels: dict              # launcher-computed sizes: name -> expression


def _decompose(lines, index: str, dims, sizes, prefix: str, dep: str, vars_: dict):
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


class _KernelWriter:
    def __init__(self, fn, sched, max_rblock: int, autotune: bool, max_autotune: bool = False):
        self.fn, self.sched, self.max_rblock, self.autotune = fn, sched, max_rblock, autotune
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
        self.builder = _Builder(sched, self.lang, dict(zip(self.args, self.in_names)),
                                reduce_hook=self._reduce)
        numels = [math.prod(s or 1 for s in shape(v)) for v in self.args + self.results]
        self.wide = max(numels, default=0) > _INT32_MAX

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

    def store(self, k, loop_vars, mask, tile_shape: tuple, computed=None):
        """Stores output k over a tile of `tile_shape` (block sizes: XBLOCK, RBLOCK, 1);
        `computed`: its (value, offset) from `value`."""
        shape_text = f"[{', '.join(str(d) for d in tile_shape)}]"
        out = self.results[k]
        val, off = computed or self.value(k, loop_vars)
        ty = type_name(out.type)
        text = val.text
        if not val.deps:   # a value without a tile dependence: give it the tile's shape
            text = f"tl.full({shape_text}, {text}, {TYPES[ty][1]})"
        # tl.store broadcasts the value and the mask to the pointer's shape, never the pointer:
        # an offset that misses a tile dim (a full reduction's `out + 0`, an output constant
        # along x) is widened to the tile so that it covers the mask.
        tile = {"x", "r"} if "RBLOCK" in tile_shape else {"x"}
        ptr = f"{self.out_names[k]} + {off.text}"
        if not tile <= set(off.deps):
            ptr += f" + tl.zeros({shape_text}, tl.int32)"
        if ty == "bf16":   # round to nearest even here: the interpreter's cast truncates
            text = round_to(text, ty)
        stmt = f"tl.store({ptr}, ({text}).to({TYPES[ty][0]}), mask={mask})"
        self.builder.stack[-1].stmts.append(stmt)

    # --- pointwise ---------------------------------------------------------------------------
    def pointwise(self) -> _Kernel:
        out0 = self.results[0]
        space = [g for g in self.sched.dims(out0) if not self.sched.unit(g)]
        root = self.builder.stack[0]
        pid = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        head = [f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)", "xmask = xindex < xnumel"]
        vars_ = {}
        _decompose(head, "xindex", space, self.sizes(space), "i", "x", vars_)
        root.stmts.extend(head)
        root.binds = {"x"}
        # every result's value before any store: a result written over an input it reads
        # elementwise (ember-buffer-reuse's writes_args) hides no element from another result
        multi = len(self.results) > 1
        vals = [self.value(k, vars_, bound=multi) for k in range(len(self.results))]
        for k in range(len(self.results)):
            self.store(k, vars_, "xmask", ("XBLOCK",), vals[k])
        configs = [({"XBLOCK": 1024}, 4), ({"XBLOCK": 2048}, 8), ({"XBLOCK": 512}, 4)]
        if self.max_autotune:
            configs += [({"XBLOCK": 4096}, 8), ({"XBLOCK": 2048}, 4), ({"XBLOCK": 1024}, 8),
                        ({"XBLOCK": 256}, 2), ({"XBLOCK": 128}, 4)]
        if not self.autotune:
            configs = configs[:1]
        return self._kernel(["xnumel"], {"xnumel": self.runtime_extent(space)}, ["XBLOCK"], configs,
                            '(triton.cdiv(xnumel, meta["XBLOCK"]),)')

    # --- reductions ----------------------------------------------------------------------------
    def reduction(self) -> _Kernel:
        s = self.sched
        try:
            check_schedule(s)
        except Unschedulable as err:
            raise PassError(f"ember-lower-to-triton: {err.reason}", err.location) from None
        rdims = [g for g in s.reductions[0].reduced if not s.unit(g)]
        self.rdims = rdims
        rstatic = all(s.size(g) is not None for g in rdims)
        rnumel = math.prod(s.size(g) for g in rdims) if rstatic else None
        self.persistent = rstatic and rnumel <= self.max_rblock and all(
            not o.inner or set(g for g in o.inner if not s.unit(g)) == set(rdims)
            for o in s.outputs)
        outer = [g for g in s.outer if not s.unit(g)]
        # indices over the iteration space (x times r), not only over the tensors, must fit
        if math.prod(s.size(g) or 1 for g in outer + rdims) > _INT32_MAX:
            self.wide = True
        root = self.builder.stack[0]
        pid = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        head = [f"xindex = ({pid} * XBLOCK + tl.arange(0, XBLOCK))[:, None]",
                "xmask = xindex < xnumel"]
        self.xvars = {}
        _decompose(head, "xindex", outer, self.sizes(outer), "p", "x",
                   self.xvars)
        root.binds = {"x"}
        root.stmts.extend(head)
        if self.persistent:
            rb = max(16, _pow2(rnumel))
            self.rvars = {}
            lines = ["rindex = tl.arange(0, RBLOCK)[None, :]", "rmask = rindex < rnumel"]
            _decompose(lines, "rindex", rdims, self.sizes(rdims), "r", "r",
                       self.rvars)
            root.stmts.extend(lines)
            # A full reduction (no outer space) is one row: more rows would only repeat it.
            xb = max(1, min(_pow2(max(1, 4096 // rb)), 64)) if outer else 1
            warps = max(1, min(16, _pow2(xb * rb // 512)))
            configs = [({"XBLOCK": xb, "RBLOCK": rb}, warps)]
            if self.max_autotune:   # fewer rows per program, other warp counts: no more registers
                more = [(xb, warps * 2), (xb, warps // 2), (xb // 2, warps), (xb // 4, warps // 2)]
                for x, w in more:
                    c = ({"XBLOCK": max(1, x), "RBLOCK": rb}, max(1, min(16, w)))
                    if c not in configs:
                        configs.append(c)
        else:
            configs = [({"XBLOCK": 1, "RBLOCK": 2048}, 8), ({"XBLOCK": 1, "RBLOCK": 1024}, 4),
                       ({"XBLOCK": 8, "RBLOCK": 512}, 8), ({"XBLOCK": 64, "RBLOCK": 16}, 4)]
            if self.max_autotune:
                configs += [({"XBLOCK": 1, "RBLOCK": 4096}, 16), ({"XBLOCK": 4, "RBLOCK": 256}, 4),
                            ({"XBLOCK": 16, "RBLOCK": 128}, 4), ({"XBLOCK": 32, "RBLOCK": 64}, 8)]
            if not self.autotune:
                configs = configs[:1]
        # All reductions first, in op order, so that their loops precede the output loops.
        for r in s.reductions:
            self.builder.reduction(r.op, self._loops_at_p(r.op))
        for k, o in enumerate(s.outputs):
            inner = [g for g in o.inner if not s.unit(g)]
            if not inner:
                self.store(k, self.xvars, "xmask", ("XBLOCK", 1))
            elif self.persistent:
                self.store(k, {**self.xvars, **self.rvars}, "xmask & rmask", ("XBLOCK", "RBLOCK"))
            else:
                loop = Scope(binds={"r"}, header=f"for roff in range(0, {self.extent(inner)}, "
                                                 f"RBLOCK):", kind="loop")
                vars_ = {}
                loop.stmts += ["rindex = roff + tl.arange(0, RBLOCK)[None, :]",
                               f"rmask = rindex < {self.extent(inner)}"]
                _decompose(loop.stmts, "rindex", inner, self.sizes(inner),
                           "r", "r", vars_)
                self.builder.push(loop)     # attaches the loop to root (once)
                self.store(k, {**self.xvars, **vars_}, "xmask & rmask", ("XBLOCK", "RBLOCK"))
                self.builder.pop()
        return self._kernel(["xnumel", "rnumel"], {"xnumel": self.runtime_extent(outer),
                                                    "rnumel": self.runtime_extent(rdims)},
                            ["XBLOCK", "RBLOCK"], configs, '(triton.cdiv(xnumel, meta["XBLOCK"]),)')

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
        if self.persistent:
            rvars, scope = self.rvars, None
        else:
            scope = Scope(binds={"r"}, header="for roff in range(0, rnumel, RBLOCK):",
                          kind="loop")
            scope.stmts += ["rindex = roff + tl.arange(0, RBLOCK)[None, :]",
                            "rmask = rindex < rnumel"]
            rvars = {}
            _decompose(scope.stmts, "rindex", self.rdims, self.sizes(self.rdims),
                       "r", "r", rvars)
            b.stack = [root, scope]
        full = [l if l is not None else rvars.get(s.loop_gid(op, j), const(0))
                for j, l in enumerate(loops)]
        parts = []
        used = {k for k, r in enumerate(op.results) if list(r.uses)}
        for k in range(len(op.results)):
            if k not in used:   # e.g. the argmax half of torch-mlir's amax
                parts.append(None)
                continue
            kind, operand = combiner(op, k, used)
            cond = None
            if kind is None:   # a masked update: reduce select(cond, f, identity)
                kind, operand, cond, take = masked_combiner(op, k, used)
            if kind not in _COMBINE:
                b.stack = saved
                raise PassError(f"ember-lower-to-triton: unsupported reduction combiner "
                                f"'{kind or 'general body'}'", op.location)
            ctx = self._body_ctx(b, op, full)
            val = b.scalar(operand, ctx)
            rty = type_name(op.results[k].type)
            if rty == "i1" and kind in ("maxui", "minui", "maxsi", "minsi"):
                kind = "ori" if kind in ("maxui", "minsi") else "andi"   # bool amax/amin
            if kind in ("maxui", "minui") and rty not in _UNSIGNED_WIDE:
                b.stack = saved
                raise PassError(f"ember-lower-to-triton: unsupported reduction combiner "
                                f"'{kind}' on {rty}", op.location)
            if cond is not None:
                c, ident = b.scalar(cond, ctx), _identity(kind, rty)
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
            red, _, comb = _COMBINE[kind]
            ident = _identity(kind, ty)
            acc_ty = TYPES[ty][1]
            v = val.text
            if kind in ("maxui", "minui"):
                acc_ty, mask = _UNSIGNED_WIDE[ty]
                v = f"(({v}).to({acc_ty}) & {mask})"
            elif ty not in ("f16", "bf16", "f32", "f64") and ident.startswith("float"):
                raise PassError("ember-lower-to-triton: float combiner on integers", op.location)
            elif ty not in ("f16", "bf16", "f32", "f64"):
                # loop indices are int32: the identity (2**62) needs the result's width
                v = f"({v}).to({TYPES[ty][1]})"
            masked = f"tl.where(xmask & rmask, {v}, {ident})"
            if self.persistent:
                total = f"{red}({masked}, 1)[:, None]"
            else:
                acc = b.fresh("acc")
                b.emit_into(root, f"{acc} = tl.full([XBLOCK, RBLOCK], {ident}, {acc_ty})")
                scope.stmts.append(f"{acc} = " + comb.format(a=acc, b=masked))
                total = f"{red}({acc}, 1)[:, None]"
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
        if scope is not None:   # before an output loop being built (a reduction it reads)
            b.emit_into(root, scope)
        accs = []
        for item in finals:
            if item is None:
                accs.append(Expr("None"))
                continue
            k, ty, comb, total = item
            init = b.value_at(op.outputs[k], b.apply_map(
                indexing_maps(op)[len(op.inputs) + k], loops))
            if comb is not None and not _is_identity(init.node, kind_of[k], ty):
                total = comb.format(a=init.text, b=total)
            accs.append(b.bind(total, frozenset({"x"}), ty, "red"))
        return accs

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
    def _kernel(self, numel_names, numels, constexprs, configs, grid) -> _Kernel:
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
        return _Kernel(self.name, params, sig, body, constexprs, configs, grid, numels)

    def _flatten(self, scope, out, depth):
        for st in scope.stmts:
            if isinstance(st, Scope):
                out.append("    " * depth + st.header)
                self._flatten(st, out, depth + 1)
            else:
                out.append("    " * depth + render_stmt(st, self.builder.show))


class _AccBuilder(_Builder):
    """The matmul template's builder: the product is the accumulator tile `acc`, read at the
    point being written (ember-matmul-template checked that the epilogue reads it so)."""

    product = None

    def _value_at(self, v, idx):
        if v == self.product:
            return triton_matmul.acc_expr()
        return super()._value_at(v, idx)


class _MatmulWriter(_KernelWriter):
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
            self.builder = _Builder(self.sched, self.lang, buffers, reduce_hook=self._reduce)
        else:
            self.builder = _AccBuilder(self.sched, self.lang, buffers, reduce_hook=self._reduce)
            self.builder.product = parts.value
        numels = [math.prod(s or 1 for s in shape(v)) for v in self.args + self.results]
        self.wide = max(numels, default=0) > _INT32_MAX


def _matmul_source(fn, autotune: bool, max_autotune: bool, choice: str) -> str:
    """A `matmul` kernel's source: the template, the epilogue alone, the choosing launcher."""
    parts = triton_matmul.Parts(fn)
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    ew = _MatmulWriter(fn, parts, True, autotune, max_autotune)
    ek = ew.pointwise()
    ek.name = f"{name}_epilogue"
    epilogue = _source(ek, parts.schedule, ew)

    tw = _MatmulWriter(fn, parts, False, autotune, max_autotune)
    configs = triton_matmul.configs_for(parts, max_autotune, autotune)
    triton_matmul.template_head(tw, parts)
    rows, cols = triton_matmul.split_dims(parts.schedule, tw.results[0], parts.N)
    root = tw.builder.stack[0]
    vars_ = {}
    _decompose(root.stmts, "xrow", rows, tw.sizes(rows), "i", "x", vars_)
    _decompose(root.stmts, "xcol", cols, tw.sizes(cols), "i", "x", vars_)
    root.binds = {"x"}
    for k in range(len(tw.results)):
        tw.store(k, vars_, "xmask", ("BLOCK_M", "BLOCK_N"))
    if tw.builder.checks:
        raise Unschedulable("a matmul kernel's epilogue reads indices from data")
    constexprs = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"] + \
        (["ALLOW_TF32"] if parts.dtype == "f32" else [])
    k = tw._kernel([], {}, constexprs, [], "")
    jit = f"{name}_mm_kernel"
    lines = []
    if len(configs) > 1:
        cfgs = ", ".join(triton_matmul.config_text(c) for c in configs)
        lines.append(f"@_ember_autotune(configs=[{cfgs}], key=[])")
    lines.append("@triton.jit")
    params = k.jit_params + [f"{c}: tl.constexpr" for c in constexprs]
    lines.append(f"def {jit}({', '.join(params)}):")
    lines += k.body
    lines += ["", ""]
    lines += triton_matmul.launcher_lines(name, tw, parts, configs, choice, ek)
    bm, bn, bk, gm, warps, _ = configs[0]
    aot = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": gm}
    if parts.dtype == "f32":
        aot["ALLOW_TF32"] = False
    lines.append(f"{name}.ember_aot = {[(jit, k.signature, aot, warps)]!r}")
    return epilogue + "\n\n" + "\n".join(lines) + "\n"


def _source(k: _Kernel, sched, writer) -> str:
    jit = f"{k.name}_kernel"
    lines = []
    cfgs = ", ".join(f"triton.Config({c!r}, num_warps={w})" for c, w in k.configs)
    if len(k.configs) > 1:
        keys = [p for p in k.jit_params if p in k.numels]
        # ember-buffer-reuse may give an output the memory of an input (in-place): timing a
        # config runs the kernel, so the inputs are restored after each trial.
        # Only inputs whose memory an output overlaps at run time are saved (see the prelude).
        restore = writer.in_names
        lines.append(f"@_ember_autotune(configs=[{cfgs}], key={keys!r}, restore={restore!r}, "
                     f"outputs={writer.out_names!r})")
    # Scalar arguments (after every tensor dim in the sizes table) are values, not sizes: Triton
    # must not specialize one that is 1 into a constexpr (a cast of it would not compile).
    n_dims = sum(len(shape(v)) for v in writer.args + writer.results)
    scalar_params = [n for k, n in sorted(writer.lang.dynamic_sizes.items()) if k >= n_dims]
    lines.append(f"@triton.jit(do_not_specialize={scalar_params!r})" if scalar_params
                 else "@triton.jit")
    params = k.jit_params + [f"{c}: tl.constexpr" for c in k.constexprs]
    lines.append(f"def {jit}({', '.join(params)}):")
    lines += k.body
    lines.append("")
    lines.append("")
    n_in = len(writer.args)
    if writer.sched.scalars:     # sizes / symbolic ints, after the tensors (kernel ABI)
        n_t = n_in + len(writer.results)
        lines.append(f"def {k.name}(*args):")
        lines.append(f"    tensors, scalars = args[:{n_t}], [int(x) for x in args[{n_t}:]]")
    else:
        lines.append(f"def {k.name}(*tensors):")
    # linalg's integers are signless: a uint8 tensor holds an i8 value, read as int8 (the ops
    # that care, divui/uitofp/cmpi ult, reinterpret as unsigned themselves).
    bytes_ = [n for n, v in enumerate(writer.args + writer.results) if type_name(v.type) == "i8"]
    if bytes_:
        lines.append(f"    tensors = [t.view(torch.int8) if t.dtype == torch.uint8 else t "
                     f"for t in tensors]")
    lines.append("    sizes = [d for t in tensors for d in t.shape]"
                 + (" + scalars" if writer.sched.scalars else ""))
    for name, expr in k.numels.items():
        lines.append(f"    {name} = {expr}")
    for idx, name in sorted(writer.lang.dynamic_sizes.items()):
        lines.append(f"    {name} = sizes[{idx}]")
    lines.append("    grid = lambda meta: " + k.grid)
    checked = "err" in k.jit_params
    launch = "_EMBER_LAUNCH_CHECKED" if checked else "_EMBER_LAUNCH"
    if checked:
        lines.append("    err = _ember_error_buffer(tensors[-1].device)")
    args = ", ".join(["*tensors"] + k.jit_params[n_in + len(writer.results):])
    if len(k.configs) > 1:
        lines.append(f"    {jit}[grid]({args}, **{launch})")
    else:
        c, w = k.configs[0]
        kw = ", ".join(f"{n}={v}" for n, v in c.items())
        lines.append(f"    {jit}[grid]({args}, {kw}, num_warps={w}, **{launch})")
    aot = [(jit, k.signature, k.configs[0][0], k.configs[0][1])]
    lines.append(f"{k.name}.ember_aot = {aot!r}")
    if checked:
        lines.append(f"{k.name}.ember_checked = True")
    return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class EmberLowerToTriton(Pass):
    """Attaches Triton source to every ember kernel (see the module docstring)."""

    name = TRITON.lowering
    summary = "Emit Triton @triton.jit kernels plus Python launchers for every ember kernel"

    dynamic_shapes = True
    scalar_kernel_args = False

    max_rblock: int = option(8192, min=1, max=1 << 20)   # Triton's largest block (2^20 elements)
    autotune: bool = True
    # torch.compile(mode="max-autotune"): a wider configuration search per kernel (block sizes,
    # warps); the first configuration, what the interpreter and AOT builds use, is unchanged
    max_autotune: bool = False
    # `matmul` kernels (ember-matmul-template): auto = time the template against the library
    # call + epilogue on the first call on a GPU and keep the faster; or always one of them
    matmul_choice: str = option("auto", choices=triton_matmul.CHOICES)

    def run(self, module: ir.Operation) -> None:
        with module.context, ir.Location.unknown():
            attach_kernel_sources(module, TRITON.name, PRELUDE + triton_matmul.PRELUDE,
                                  lambda op, name: self.lower(op))

    def lower(self, fn) -> str:
        try:
            if KERNEL.get(fn) == "matmul":
                return _matmul_source(fn, self.autotune, self.max_autotune, self.matmul_choice)
            sched = schedule_kernel(fn)
            w = _KernelWriter(fn, sched, self.max_rblock, self.autotune, self.max_autotune)
            k = w.pointwise() if sched.kind == "pointwise" else w.reduction()
            return _source(k, sched, w)
        except Unschedulable as err:
            raise PassError(f"ember-lower-to-triton: {err.reason}",
                            err.location or fn.location) from None
        except UnsupportedOp as err:
            raise PassError(f"ember-lower-to-triton: {err}", fn.location) from None
