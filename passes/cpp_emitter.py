"""C++ (OpenMP) kernels: `emit_kernel` builds one kernel function's kernel_ir tree (loop nests
with OpenMP pragmas, reductions with their accumulators, blocked float sums) with the ABI of
docs/internals.md (Stage 4) and prints it with cpp_lang. The tree is rewritten before printing
by cpp_column_blocks (reductions down columns) or cpp_row_values (values kept between a row's
loops), cpp_row_split (few long rows split across threads), cpp_row_scalars (row scalars
recomputed per vector of the output loop) and cpp_lane_sums (row sums in two vectors of lanes); a pointwise kernel's inner loop
read through `/ K` and `% K` is split by cpp_split_loops. The prelude those functions use
is cpp_prelude.PRELUDE (re-exported here)."""
from __future__ import annotations

from .cpp_column_blocks import block_columns, block_inner_columns
from .cpp_lane_sums import lane_sums
from .cpp_lang import STORAGE, CppLang, is_checked, render
from .cpp_prelude import PRELUDE  # noqa: F401  (re-exported)
from .cpp_row_scalars import recompute_row_scalars
from .cpp_row_split import split_rows
from .cpp_split_loops import split_div_loops
from .cpp_row_values import reuse_row_values
from .ir_queries import indexing_maps, iterator_types, type_name
from .kernel_expr import Expr, ExprBuilder, Scope, const, var
from .kernel_ir import (CONVERT, INT, Assign, Const, Decl, Line, Loop, Op, OmpPragma, Store, Var,
                        all_nodes, deps_of, render_stmt)
from .kernel_schedule import schedule_kernel, tensor_args
from .kernel_windows import window_extent
from .reduction_body import combiner, masked_combiner, needed_results


NAN_MINMAX = {"maximumf": "max", "minimumf": "min"}
OMP_RED = {"addf": "+", "addi": "+", "mulf": "*", "muli": "*", "maximumf": "nanmax",
           "minimumf": "nanmin", "maxnumf": "max", "minnumf": "min", "maxsi": "max",
           "minsi": "min", "ori": "|", "andi": "&", "xori": "^"}
# Float sums over more elements than this accumulate in blocks: a float partial sum per block
# (vectorized: one partial per SIMD lane), blocks added into a double. A float accumulator per
# lane over millions of elements loses digits (and saturates at 2^24 for ones), where eager's
# cascade sum stays within a few ulps; this keeps the error that of a 2048-element float sum.
SUM_BLOCK = 2048
_FLOAT_SUM = ("f32", "f16", "bf16")
# A window reduction over strided elements (channels-last pooling) of at most this many
# elements runs its window inside column blocks of the contiguous outer dim (simd along it):
# resnet's stem max pool 3x3/2 over [4, 112, 112, 64] f32, one thread, 9.9 ms -> 0.6 ms
# (eager's 2.0 to 2.5 ms); before, a simd reduction over the 9 gathered window elements per
# output.
WINDOW_MAX = 64


class _Emitter:
    def __init__(self, func, name, omp_min_elements, vectorize, window=False):
        self.func, self.name = func, name
        self.min_el, self.vec = omp_min_elements, vectorize
        # a small window reduction whose innermost outer loop runs along memory (channels-last
        # pooling): its window loops stay plain (no simd, no NaN flag), then the innermost
        # outer loop becomes column blocks around them (cpp_column_blocks.block_inner_columns)
        self.window = window
        self.sched = s = schedule_kernel(func)
        args = tensor_args(func.regions[0].blocks[0])
        self.bufs = {a: f"in{i}" for i, a in enumerate(args)}
        self.lang = CppLang()
        self.b = ExprBuilder(s, self.lang, self.bufs, reduce_hook=self.reduce,
                              reciprocal_sums=True)
        self.nloop = 0

    def var(self, g):
        self.nloop += 1
        return f"i{g}_{self.nloop}"

    def par_clause(self, gs) -> "tuple | None":
        """Whether a loop nest over dims `gs` is worth threads: None (never: too little static
        work), () (always), or the factors of its work that OmpPragma tests at run time."""
        n, dyn = 1, []
        for g in gs:
            sz = self.sched.size(g)
            if sz is None:
                dyn.append(self.b.size(g).node)
            else:
                n *= sz
        if not dyn:
            return () if n >= self.min_el else None
        return tuple(dyn) + (Const(n, INT),)

    def parallel(self, par, simd=False, collapse=1, reductions=()) -> OmpPragma:
        return OmpPragma(parallel=True, simd=simd, collapse=collapse, work=par,
                         min_work=self.min_el, reductions=tuple(reductions))

    def work(self):
        gs = list(self.sched.outer)
        for r in self.sched.reductions:
            gs += [g for g in r.reduced if g not in gs]
        for o in self.sched.outputs:
            gs += [g for g in o.inner if g not in gs]
        return gs

    def loop(self, g, var) -> Scope:
        sc = Scope({var}, Loop(var, const(0).node, self.b.size(g).node))
        sc.trip = self.sched.size(g)     # a static trip count from 0 (None: dynamic)
        return sc

    def reduce(self, b, op, loops):
        s = self.sched
        deps = frozenset().union(*[l.deps for l in loops if l is not None])
        target = b.scope_for(deps)
        saved = b.stack
        b.stack = saved[:next(i for i, x in enumerate(saved) if x is target) + 1]
        its = iterator_types(op)
        full = list(loops)
        red = []
        for j, t in enumerate(its):
            if t == "reduction":
                g = s.loop_gid(op, j)
                v = self.var(g)
                full[j] = var(v)
                red.append((g, v))
            elif full[j] is None:
                full[j] = const(0)
        maps = indexing_maps(op)
        n_in = len(op.inputs)
        rvars = frozenset(v for _, v in red)
        accs, results, nans = [], [], {}
        used = needed_results(op, [k for k, r in enumerate(op.results) if any(True for _ in r.uses)])
        # the combiner of each result (a masked update `c ? f + acc : acc` reduces as `+`)
        kinds = [combiner(op, k, used)[0] or masked_combiner(op, k, used)[0]
                 for k in range(len(op.results))]
        blocked = self._sum_blocks(op, red, used, kinds)
        for k, r in enumerate(op.results):
            ty = type_name(r.type)
            acc = b.fresh("acc")
            kind, operand = combiner(op, k, used)
            if k in used:
                init = b.value_at(op.outputs[k], b.apply_map(maps[n_in + k], full))
                # a blocked sum declares its double accumulator here, `acc` after the loops
                decl = Decl(f"{acc}_wide", "f64", init.node) if blocked else \
                    Decl(acc, ty, init.node)
                b.emit_into(target, decl)
                if kind in NAN_MINMAX and self.vec and not self.window:
                    nans[k] = (b.fresh("nan"), operand)
                    b.emit_into(target, Line(f"int {nans[k][0]} = 0;"))
            accs.append(Expr(acc, rvars))
            # The accumulator is final only after its loop: it counts as bound by the scope
            # that declares it, so its users are placed there, after the loop (never hoisted
            # into the loop-free preamble, even for a full reduction).
            target.binds.add(acc)
            results.append(Expr(acc, deps | {acc}))
        if blocked is not None:
            return self._blocked_reduce(b, op, full, target, saved, red, blocked, accs, results,
                                        used)
        scopes = [self.loop(g, v) for g, v in red]
        parent = target
        for sc in scopes:
            b.push(sc, parent)
            parent = sc
        updates = []   # every new value is computed before any accumulator is assigned:
        for k in used:  # one result's update may read another's accumulator (argmax)
            a = accs[k].text
            if k in nans:
                # NaN-propagating max/min that vectorizes: a plain compare-select under an
                # OpenMP max/min reduction, and a flag for NaNs (reduced with |) that the
                # result takes after the loop. (A user-defined reduction does not vectorize.)
                nan, operand = nans[k]
                f = b.generic_value(op, operand, full, outs=accs).text
                cmp = ">" if NAN_MINMAX[kinds[k]] == "max" else "<"
                updates.append(Line(f"{a} = {f} {cmp} {a} ? {f} : {a};"))
                updates.append(Line(f"{nan} |= ({f} != {f});"))
            else:
                updates.append(Assign(a, b.generic_yield(op, k, full, outs=accs).node))
        parent.stmts.extend(updates)
        for _ in scopes:
            b.pop()
        b.stack = saved
        for k, (nan, _) in nans.items():
            b.emit_into(target, Line(f"if ({nan}) {accs[k].text} = NAN;"))
        if scopes and all(kinds[k] in OMP_RED for k in used) and not self.window:
            red_op = {k: NAN_MINMAX[kinds[k]] if k in nans else OMP_RED[kinds[k]] for k in used}
            clause = [(red_op[k], accs[k].text) for k in used]
            clause += [("|", nan) for nan, _ in nans.values()]
            par = self.par_clause([g for g, _ in red]) if target is b.stack[0] else None
            if par is not None:
                scopes[0].pragmas.append(self.parallel(par, self.vec, len(scopes), clause))
            elif self.vec:
                scopes[0].pragmas.append(OmpPragma(simd=True, collapse=len(scopes),
                                                   reductions=tuple(clause)))
        return results

    def _sum_blocks(self, op, red, used, kinds):
        """(split position j, block step) when reduction `op` is a float sum over more than
        SUM_BLOCK elements (or a dynamic count), else None. The reduced loops after j cover at
        most SUM_BLOCK elements; loop j is walked in chunks of `step` iterations, so that one
        block (chunk x the loops after j) has about SUM_BLOCK elements."""
        if not red or not used or any(kinds[k] != "addf" or
                                       type_name(op.results[k].type) not in _FLOAT_SUM
                                       for k in used):
            return None
        prod, j = 1, len(red) - 1
        while j >= 0:
            n = self.sched.size(red[j][0])
            if n is None or prod * n > SUM_BLOCK:
                break
            prod *= n
            j -= 1
        if j < 0:
            return None
        return j, max(1, SUM_BLOCK // prod)

    def _blocked_reduce(self, b, op, full, target, saved, red, blocked, accs, results, used):
        """A float sum in blocks (see SUM_BLOCK): `double wide = init; for each block
        { float part = 0; for the block's elements (simd) part += f; wide += part; }`, and
        the result `float acc = wide` after the loops. Threads split the blocks."""
        j, step = blocked
        wide = {k: f"{accs[k].text}_wide" for k in used}
        part = {k: b.fresh("part") for k in used}
        outer = [self.loop(g, v) for g, v in red[:j]]
        g, v = red[j]
        n = b.size(g).node
        if step > 1:
            c = f"c{self.nloop}"
            outer.append(Scope({c}, Loop(c, const(0).node, n, const(step).node)))
            inner = [Scope({v}, Loop(v, var(c).node, n, span=const(step).node))]
        else:
            outer.append(self.loop(g, v))
            inner = []
        inner += [self.loop(g2, v2) for g2, v2 in red[j + 1:]]
        parent = target
        for sc in outer:
            b.push(sc, parent)
            parent = sc
        chunk = parent
        for k in used:
            b.emit_into(chunk, Decl(part[k], "f32", Const(0.0, "f32")))
        for sc in inner:
            b.push(sc, parent)
            parent = sc
        paccs = [Expr(part[k], a.deps) if k in part else a for k, a in enumerate(accs)]
        updates = [Assign(part[k], b.generic_yield(op, k, full, outs=paccs).node) for k in used]
        parent.stmts.extend(updates)
        for _ in inner:
            b.pop()
        for k in used:
            chunk.stmts.append(Assign(wide[k], Var(part[k]), "+="))
        for _ in outer:
            b.pop()
        b.stack = saved
        for k in used:
            b.emit_into(target, Decl(accs[k].text, "f32",
                                     Op(CONVERT, (Var(wide[k]),), "f32", ("f64",)), const=True))
        par = self.par_clause([g2 for g2, _ in red]) if target is b.stack[0] else None
        if par is not None:
            outer[0].pragmas.append(self.parallel(par, False, len(outer),
                                                  [("+", wide[k]) for k in used]))
        if inner and self.vec:
            inner[0].pragmas.append(OmpPragma(simd=True, collapse=len(inner),
                                              reductions=tuple(("+", part[k]) for k in used)))
        return results

    def build(self, flat: int = 1) -> "_Emitter":
        """Builds the kernel's statement tree. `flat` > 1 (pointwise kernels): the trailing
        `flat` non-unit dims of the outputs are one loop over their flattened space
        (`flat_vars` names those loops)."""
        s, b = self.sched, self.b
        top = b.stack[0]
        outer = list(s.outer)
        if flat > 1:
            dims0 = [g for g in s.outputs[0].dims if not s.unit(g)]
            outer = dims0[:len(dims0) - flat]
        self.flat_vars = []
        self.outer_scopes = []
        pvars = {}
        parent = top
        for g in outer:
            v = self.var(g)
            pvars[g] = var(v)
            sc = self.loop(g, v)
            if parent is top and outer:
                par = self.par_clause(self.work())
                if par is not None:
                    # a window reduction's innermost outer loop is its column loop
                    n = len(outer) - 1 if self.window else len(outer)
                    sc.pragmas.append(self.parallel(par, collapse=n))
            b.push(sc, parent)
            self.outer_scopes.append(sc)
            parent = sc
        for group in self._loop_groups(flat):
            o = s.outputs[group[0]]
            idx = dict(pvars)
            depth = 0
            inner_parent = parent
            if flat > 1:
                group_dims = [g for g in o.dims if not s.unit(g)][len(outer):]
                self.nloop += 1
                v = f"f{self.nloop}"
                self.flat_vars.append(v)
                rest, total = var(v), const(1)
                for k, g in enumerate(reversed(group_dims)):
                    total = b.iop("mul", total, b.size(g))
                    if k == len(group_dims) - 1:
                        idx[g] = rest
                    else:
                        idx[g] = b.iop("rem", rest, b.size(g))
                        rest = b.iop("div", rest, b.size(g))
                sc = Scope({v}, Loop(v, const(0).node, total.node))
                b.push(sc, inner_parent)
                depth = 1
            else:
                for g in o.inner:
                    v = self.var(g)
                    idx[g] = var(v)
                    sc = self.loop(g, v)
                    b.push(sc, inner_parent)
                    inner_parent = sc
                    depth += 1
            if depth:
                first, innermost = b.stack[len(b.stack) - depth], b.stack[-1]
                par = self.par_clause(self.work()) if not outer else None
                if par is not None and depth == 1:
                    first.pragmas.append(self.parallel(par, self.vec))
                else:
                    if par is not None:
                        first.pragmas.append(self.parallel(par))
                    if self.vec:
                        innermost.pragmas.append(OmpPragma(simd=True))
            stores = []
            for n in group:
                o = s.outputs[n]
                at = [idx.get(g, const(0)) for g in o.dims]
                val = b.value_at(o.value, at)
                ty = type_name(o.value.type)
                if len(group) > 1 and not isinstance(val.node, (Var, Const)):
                    val = b.bind(val, val.deps, ty)     # read before any result is stored
                stores.append(Store(f"out{n}", b.offset(o.value, at).node, val.node, ty))
            b.stack[-1].stmts.extend(stores)
            for _ in range(depth):
                b.pop()
        return self

    def _loop_groups(self, flat: int) -> list:
        """The outputs stored by one loop nest each: those with the same inner dims share one
        (one flattened loop when `flat` > 1, which emit_kernel asks for only when every output
        has the same dims), in the order of their first output. In a shared loop every
        result's value of an element is computed before any result is stored, so a result
        written over an input it reads elementwise (ember-buffer-reuse's in-place and
        `writes_args`) never hides that element from another result, and values common to
        several results are computed once."""
        s = self.sched
        if flat > 1:
            return [list(range(len(s.outputs)))]
        groups: dict = {}
        for n, o in enumerate(s.outputs):
            groups.setdefault(tuple(o.inner), []).append(n)
        return list(groups.values())

    def source(self) -> str:
        """The C++ printer: the kernel function's text from the tree `build` made."""
        s, b = self.sched, self.b
        params = [f"const {STORAGE[type_name(a.type)]}* __restrict__ {nm}" for a, nm in self.bufs.items()]
        params += [f"{STORAGE[type_name(o.value.type)]}* __restrict__ out{n}"
                   for n, o in enumerate(s.outputs)]
        params.append("const int64_t* __restrict__ sizes")
        lines = [f'extern "C" void {self.name}({", ".join(params)}) {{']
        # sizes first: hoisted invariants in the preamble may read them (dynamic broadcasting)
        lines += [f"  const int64_t s{g} = sizes[{s.size_index(g)}];"
                  for g in sorted(set(self.work()) | set(s._size_ref)) if s.size(g) is None]
        lines += ["  " + render_stmt(p, b.show) for p in b.preamble]
        render(b.stack[0], 1, lines, b.show)
        lines.append("}")
        # A kernel with a check (decided on the tree) says so with a symbol of its own: the
        # runtime reads the error record after its launches (docs/internals.md, C++ ABI).
        if any(is_checked(n) for n in all_nodes(b.preamble + [b.stack[0]])):
            lines.append(f'extern "C" const int {self.name}_checked = 1;')
        return "\n".join(lines) + "\n"


def _flat_is_clean(em: _Emitter) -> bool:
    """Every index of a flattened loop folded back to the loop variable (contiguous access)
    or does not depend on it: no `/` or `%` of the flat index is left in the kernel's tree."""
    fv = set(em.flat_vars)
    for n in all_nodes(em.b.preamble + [em.b.stack[0]]):
        if getattr(n, "kind", None) in ("idx.div", "idx.rem") and deps_of(n.args[0]) & fv:
            return False
    return True


def emit_kernel(func, name: str, omp_min_elements: int = 32768, vectorize: bool = True) -> str:
    """C++ source of kernel `func` as `extern "C" void name(...)`; raises Unschedulable.

    Pointwise kernels: the longest run of trailing dims that every operand reads contiguously
    (or not at all) becomes one flattened loop, so small inner dims still vectorize and the
    whole kernel is one `parallel for simd` when all dims flatten; broadcast/transposed reads
    that would need `/` and `%` of the flat index keep the nested loops. Each candidate is
    built as a kernel_ir tree and judged on it (`_flat_is_clean`); only the chosen one is
    printed."""
    em = _Emitter(func, name, omp_min_elements, vectorize)
    s = em.sched
    if vectorize and len([g for g in s.outer if not s.unit(g)]) > 1 and \
            window_extent(s, WINDOW_MAX, sliding=False) is not None:
        wem = _Emitter(func, name, omp_min_elements, vectorize, window=True).build()
        if block_inner_columns(wem.outer_scopes[-2], wem.outer_scopes[-1], wem.b.show):
            return wem.source()
    if s.kind == "pointwise":
        dims = [[g for g in o.dims if not s.unit(g)] for o in s.outputs]
        if all(d == dims[0] for d in dims):
            for k in range(len(dims[0]), 1, -1):
                em = _Emitter(func, name, omp_min_elements, vectorize).build(flat=k)
                if _flat_is_clean(em):
                    return em.source()
            em = _Emitter(func, name, omp_min_elements, vectorize)
    em.build()
    if s.kind == "pointwise":
        split_div_loops(em.b.stack[0])
    if not block_columns(em.b.stack[0], em.b.show, vectorize):
        reuse_row_values(em.b.stack[0])
        split_rows(em.b.stack[0])
        recompute_row_scalars(em.b.stack[0])
        lane_sums(em.b.stack[0])
    return em.source()
