"""C++ (OpenMP) spelling of ember kernels: `CppLang` for kernel_schedule's expression builder,
and `emit_kernel` that prints one kernel function with the ABI of docs/internals.md (Stage 4).
The prelude those functions use is cpp_prelude.PRELUDE (re-exported here)."""
from __future__ import annotations

import math
import re

from .cpp_column_blocks import block_columns
from .cpp_prelude import PRELUDE  # noqa: F401  (re-exported)
from .cpp_row_split import split_rows
from .kernel_ir import (INT, Assign, Const, Let, Line, Load, Op, OmpPragma, Printer, Store,
                        Var, all_nodes, deps_of, perfect_depth, render_stmt)
from .kernel_expr import ExprBuilder, Scope
from .kernel_schedule import (Expr, Unschedulable, combiner, const,
                              indexing_maps, iterator_types, masked_combiner, needed_results,
                              schedule_kernel, tensor_args, type_name, var)


CTYPE = {"f32": "float", "f64": "double", "f16": "float", "bf16": "float", "i1": "bool",
         "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
         "index": "int64_t", "ui8": "uint8_t"}
STORAGE = dict(CTYPE, f16="uint16_t", bf16="uint16_t")
BIN = {"addf": "+", "addi": "+", "subf": "-", "subi": "-", "mulf": "*", "muli": "*",
       "divf": "/", "andi": "&", "ori": "|", "xori": "^", "shli": "<<", "shrsi": ">>"}
INT_DIV = {"divsi": "/", "remsi": "%", "floordivsi": None, "divui": "/", "remui": "%"}
CMP = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
       "oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "!=",
       "ult": "<", "ule": "<=", "ugt": ">", "uge": ">=", "ueq": "==", "une": "!="}
# exp, log, log1p, expm1, tanh, erf: the prelude's branch-free versions (vectorize in simd
# loops; the f64 overloads call libm).
MATH = {"exp": "ember_exp", "exp2": "std::exp2", "log": "ember_log", "log2": "std::log2",
        "log10": "std::log10", "log1p": "ember_log1p", "expm1": "ember_expm1",
        "sqrt": "std::sqrt", "tanh": "ember_tanh", "erf": "ember_erf", "sin": "std::sin",
        "cos": "std::cos", "tan": "std::tan", "atan": "std::atan", "asin": "std::asin",
        "acos": "std::acos", "sinh": "std::sinh", "cosh": "std::cosh", "atan2": "std::atan2",
        "powf": "std::pow", "absf": "std::fabs", "floor": "std::floor", "ceil": "std::ceil",
        "round": "std::round", "roundeven": "std::nearbyint", "trunc": "std::trunc",
        "copysign": "std::copysign", "fma": "std::fma", "erfc": "std::erfc",
        "atanh": "std::atanh", "asinh": "std::asinh", "acosh": "std::acosh"}
# Reduction combiners that OpenMP can reduce (user-declared ones keep NaN semantics).
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


class CppLang:
    """kernel_expr.Lang for C++."""

    def constant(self, value, ty):
        if ty in ("i1",):
            return "true" if value else "false"
        if ty.startswith("f") or ty == "bf16":
            if math.isnan(value):
                return "NAN"
            if math.isinf(value):
                return "INFINITY" if value > 0 else "(-INFINITY)"
            if ty == "f64":
                return repr(float(value))
            return f"{float(value)!r}f"
        if ty in ("i64", "index"):
            return f"INT64_C({value})"
        return f"({CTYPE.get(ty, 'int64_t')}){value}"

    def load(self, buf, off, ty, masks=()):
        if ty == "bf16":
            return f"ember_bf16_to_f32({buf}[{off}])"
        if ty == "f16":
            return f"ember_f16_to_f32({buf}[{off}])"
        return f"{buf}[{off}]"

    def store_value(self, text, ty):
        if ty == "bf16":
            return f"ember_f32_to_bf16({text})"
        if ty == "f16":
            return f"ember_f32_to_f16({text})"
        return text

    def store(self, buf, off, value, ty):
        return f"{buf}[{off}] = {self.store_value(value, ty)};"

    def assign(self, name, op, value):
        return f"{name} {op} {value};"

    def fold(self, kind, nodes, rty, atys):
        return None

    def plain_int(self, ty):
        return False

    def let(self, name, ty, text):
        return f"const {CTYPE.get(ty, 'auto')} {name} = {text};"

    def dim_size(self, g, k):
        return f"s{g}"

    def check_index(self, i, n, dim):
        return f"ember_chk_index({i}, {n}, {dim})"

    def op(self, kind, args, rty, atys, nodes):
        if kind.startswith("idx."):
            k = kind[4:]
            a, b = args
            if k in ("min", "max"):
                return f"std::{k}<int64_t>({a}, {b})"
            sym = {"add": "+", "mul": "*", "div": "/", "rem": "%", "lt": "<", "ge": ">="}[k]
            return f"({a} {sym} {b})"
        dialect, name = kind.split(".", 1)
        ct = CTYPE.get(rty, "auto")
        if name.startswith("cmp"):
            pred = name.split(".", 1)[1]
            a, b = args
            if pred in ("ult", "ule", "ugt", "uge") and name.startswith("cmpi"):
                ut = "u" + CTYPE[atys[0]] if atys[0] != "i1" else "bool"
                a, b = f"({ut}){a}", f"({ut}){b}"
            if pred == "ord":
                return f"(!std::isnan({a}) && !std::isnan({b}))"
            if pred == "uno":
                return f"(std::isnan({a}) || std::isnan({b}))"
            if pred in ("false", "true"):
                return pred
            if pred == "one" and name.startswith("cmpf"):   # ordered: false on NaN (!= is not)
                return f"({a} < {b} || {a} > {b})"
            e = f"({a} {CMP[pred]} {b})"
            # Unordered float predicates are true when either side is NaN.
            if name.startswith("cmpf") and pred[0] == "u" and pred != "une":
                e = f"({e} || std::isnan({a}) || std::isnan({b}))"
            return e
        if name in BIN:
            a, b = args
            if name == "shrsi" or name == "shli":
                return f"({ct})({a} {BIN[name]} {b})"
            return f"({ct})({a} {BIN[name]} {b})" if rty in ("i8", "i16", "i1") else f"({a} {BIN[name]} {b})"
        if name in INT_DIV:
            return _int_div(name, args, rty, nodes[1])
        if name == "shrui":
            ut = "u" + CTYPE[rty]
            return f"({ct})(({ut}){args[0]} >> ({ut}){args[1]})"
        if name == "remf":
            return f"std::fmod({args[0]}, {args[1]})"
        if name == "negf":
            return f"(-{args[0]})"
        if name in ("maximumf", "minimumf"):
            return f"ember_{name[:3]}<{ct}>({args[0]}, {args[1]})"
        if name in ("maxnumf", "minnumf"):
            return f"std::f{name[:3]}({args[0]}, {args[1]})"
        if name in ("maxsi", "minsi"):
            return f"std::{name[:3]}<{ct}>({args[0]}, {args[1]})"
        if name in ("maxui", "minui"):
            ut = "bool" if rty == "i1" else "u" + CTYPE[rty]   # i1 unsigned: false < true
            return f"({ct})std::{name[:3]}<{ut}>(({ut}){args[0]}, ({ut}){args[1]})"
        if name == "select":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if name in ("fptosi", "fptoui") and rty in ("i8", "i16"):
            # Out of range of the narrow type, eager (on x86) converts through a wide integer
            # and wraps (200.0 -> uint8 200: torch-mlir's fptosi to i8 for uint8 too): uint8
            # through int64 (c10's static_cast_with_inter_type), int8/int16 through int32.
            wide = "int64_t" if rty == "i8" else "int32_t"
            return f"({ct})({wide})({args[0]})"
        if name in ("sitofp", "fptosi", "extsi", "trunci", "index_cast", "extf", "fptoui"):
            if name == "trunci" and rty == "i1":
                return f"(bool)({args[0]} & 1)"
            return f"({ct})({args[0]})"
        if name == "truncf":
            if rty == "bf16":
                return f"ember_round_bf16({args[0]})"
            if rty == "f16":
                return f"ember_round_f16({args[0]})"
            return f"({ct})({args[0]})"
        if name in ("uitofp", "extui", "index_castui"):
            src = atys[0]
            ut = "bool" if src == "i1" else "u" + CTYPE[src]
            return f"({ct})(({ut}){args[0]})"
        if name == "bitcast":
            return f"([&]{{ {ct} r; std::memcpy(&r, &{args[0]}, sizeof r); return r; }}())"
        if name == "rsqrt":
            return f"({ct})(1 / std::sqrt({args[0]}))"
        if name == "absi":
            return f"std::abs({args[0]})"
        if name == "fpowi":
            return f"std::pow({args[0]}, ({ct}){args[1]})"
        if name == "isnan":
            return f"std::isnan({args[0]})"
        if name == "ipowi":
            raise Unschedulable("math.ipowi is not supported by the C++ backend")
        if name in MATH:
            return f"({ct}){MATH[name]}({', '.join(args)})"
        raise Unschedulable(f"'{kind}' has no C++ spelling")


def _int_div(name, args, rty, divisor) -> str:
    """Integer division/remainder: checked (ember_chk_*) unless the divisor is a constant
    other than 0 and -1, which can neither be the error nor overflow."""
    ct = CTYPE[rty]
    d = int(divisor.value) if isinstance(divisor, Const) and divisor.dtype != "i1" and \
        not divisor.dtype.startswith(("f", "bf")) else None
    unsigned = name.endswith("ui")
    if d is not None and d not in (0, -1) and name != "floordivsi" and \
            not (unsigned and d < 0):
        if unsigned:
            ut = "u" + ct
            return f"({ct})(({ut}){args[0]} {INT_DIV[name]} ({ut}){args[1]})"
        return f"({ct})({args[0]} {INT_DIV[name]} {args[1]})"
    if unsigned:
        ut = "u" + ct
        return f"({ct})ember_chk_{name}<{ut}>(({ut}){args[0]}, ({ut}){args[1]})"
    return f"ember_chk_{name}<{ct}>({args[0]}, {args[1]})"


def _render(scope: Scope, indent: int, out: list, show: Printer):
    """The C++ printer of statements. Hoisted loop invariants between loops make a nest
    imperfect: a pragma's collapse count is fitted to the perfect depth here."""
    pad = "  " * indent
    for s in scope.stmts:
        if isinstance(s, Scope):
            for p in s.pragmas:
                out.append(f"{pad}{p.render(perfect_depth(s), show)}")
            out.append(f"{pad}{s.header} {{")
            _render(s, indent + 1, out, show)
            out.append(f"{pad}}}")
        else:
            out.append(pad + render_stmt(s, show))


class _Emitter:
    def __init__(self, func, name, omp_min_elements, vectorize):
        self.func, self.name = func, name
        self.min_el, self.vec = omp_min_elements, vectorize
        self.sched = s = schedule_kernel(func)
        args = tensor_args(func.regions[0].blocks[0])
        self.bufs = {a: f"in{i}" for i, a in enumerate(args)}
        self.lang = CppLang()
        self.b = ExprBuilder(s, self.lang, self.bufs, reduce_hook=self.reduce)
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
        sc = Scope({var}, f"for (int64_t {var} = 0; {var} < {self.b.size(g).text}; ++{var})")
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
                decl = f"double {acc}_wide" if blocked else f"{CTYPE[ty]} {acc}"
                b.emit_into(target, f"{decl} = {init.text};")
                if kind in NAN_MINMAX and self.vec:
                    nans[k] = (b.fresh("nan"), operand)
                    b.emit_into(target, f"int {nans[k][0]} = 0;")
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
                updates.append(f"{a} = {f} {cmp} {a} ? {f} : {a};")
                updates.append(f"{nan} |= ({f} != {f});")
            else:
                updates.append(Assign(a, b.generic_yield(op, k, full, outs=accs).node))
        parent.stmts.extend(updates)
        for _ in scopes:
            b.pop()
        b.stack = saved
        for k, (nan, _) in nans.items():
            b.emit_into(target, f"if ({nan}) {accs[k].text} = NAN;")
        if scopes and all(kinds[k] in OMP_RED for k in used):
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
        n = b.size(g).text
        if step > 1:
            c = f"c{self.nloop}"
            outer.append(Scope({c}, f"for (int64_t {c} = 0; {c} < {n}; {c} += {step})"))
            inner = [Scope({v}, f"for (int64_t {v} = {c}; {v} < std::min<int64_t>({c} + "
                                f"{step}, {n}); ++{v})")]
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
            b.emit_into(chunk, f"float {part[k]} = 0.0f;")
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
            b.emit_into(target, f"const float {accs[k].text} = (float){wide[k]};")
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
        pvars = {}
        parent = top
        for g in outer:
            v = self.var(g)
            pvars[g] = var(v)
            sc = self.loop(g, v)
            if parent is top and outer:
                par = self.par_clause(self.work())
                if par is not None:
                    sc.pragmas.append(self.parallel(par, collapse=len(outer)))
            b.push(sc, parent)
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
                sc = Scope({v}, f"for (int64_t {v} = 0; {v} < {total.text}; ++{v})")
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
        _render(b.stack[0], 1, lines, b.show)
        lines.append("}")
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
    if s.kind == "pointwise":
        dims = [[g for g in o.dims if not s.unit(g)] for o in s.outputs]
        if all(d == dims[0] for d in dims):
            for k in range(len(dims[0]), 1, -1):
                em = _Emitter(func, name, omp_min_elements, vectorize).build(flat=k)
                if _flat_is_clean(em):
                    return em.source()
            em = _Emitter(func, name, omp_min_elements, vectorize)
    em.build()
    if not block_columns(em.b.stack[0], vectorize):
        reuse_row_values(em.b.stack[0])
        split_rows(em.b.stack[0])
    return em.source()


# --- row values kept from a reduction loop for the loop after it --------------------------------
# A reduce-then-broadcast kernel (softmax: max, sum of exp(x - max), exp(x - max) / sum) walks
# one row in sibling loops; the output loop recomputes what the reduction loop computed for the
# same element (the exp). Costly values (a math op) are kept and read back instead: in a row
# array on the stack (per thread: the row's scope is the body of the parallel loop) while the
# rows of one scope fit ROW_CACHE_MAX elements, else in the output element the later loop
# stores (the row is still in cache: softmax over 8x65536 stores exp(x - max) in the sum loop
# and divides it in place).
ROW_CACHE_MAX = 16384     # elements kept in the rows of one scope (64 KiB of floats a thread)
_OPAQUE = ("opaque",)     # a statement of target text: what it writes is unknown
_CHUNK = re.compile(r"for \(int64_t (\w+) = 0; \1 < (\d+); \1 \+= \d+\)$")
_CHUNK_INNER = re.compile(r"for \(int64_t (\w+) = (\w+); \1 < std::min<int64_t>\(\2 \+ \d+, "
                          r"(\d+)\); \+\+\1\)$")
_DECL = re.compile(r"(?:const )?(?:float|double|int|int32_t|int64_t) (\w+) = [^;]*;$")


def _canon(n, env, var, memo):
    """`n` with the loop's lets inlined, its loop variable renamed "@" and other variables
    compared by name; None if it holds anything else (target text)."""
    key = id(n)
    if key in memo:
        return memo[key]
    if isinstance(n, Var):
        r = Var("@") if n.name == var else env.get(n.name, Var(n.name))
    elif isinstance(n, Op):
        args = [_canon(a, env, var, memo) for a in n.args]
        r = None if any(a is None for a in args) else Op(n.kind, tuple(args), n.dtype, n.atypes)
    elif isinstance(n, Load):
        off = _canon(n.offset, env, var, memo)
        r = None if off is None else Load(n.buffer, off, n.dtype, n.masks)
    elif isinstance(n, Const):
        r = n
    else:
        r = None
    memo[key] = r
    return r


def _at(n, var: str):
    """Canonical index tree `n` (no loads) with "@" renamed `var`."""
    if isinstance(n, Var):
        return Var(var) if n.name == "@" else n
    if isinstance(n, Op):
        return Op(n.kind, tuple(_at(a, var) for a in n.args), n.dtype, n.atypes)
    return n


def _walk_canon(n):
    work = [n]
    while work:
        x = work.pop()
        yield x
        if isinstance(x, Op):
            work.extend(x.args)
        elif isinstance(x, Load):
            work.append(x.offset)


def _reads(n) -> set:
    """Variable names and ("buffer", name) of what canonical tree `n` reads."""
    out = set()
    for x in _walk_canon(n):
        if isinstance(x, Var):
            out.add(x.name)
        elif isinstance(x, Load):
            out.add(("buffer", x.buffer))
    return out


def _row_loop(s):
    """(body, loop variable, trip count) of a loop over one row from 0 with a static trip
    count, made by _Emitter.loop: a flat loop (its body: itself), or a blocked sum's chunk loop
    over the row whose one nested loop walks a chunk (its body: that loop); else None."""
    if not isinstance(s, Scope):
        return None
    trip = getattr(s, "trip", None)
    if trip is not None and len(s.binds) == 1 and not any(isinstance(x, Scope) for x in s.stmts):
        return s, next(iter(s.binds)), trip
    m = _CHUNK.match(s.header)
    inner = [x for x in s.stmts if isinstance(x, Scope)]
    if m and len(inner) == 1 and not any(isinstance(x, Scope) for x in inner[0].stmts):
        mi = _CHUNK_INNER.match(inner[0].header)
        if mi and mi.group(2) == m.group(1) and mi.group(3) == m.group(2):
            return inner[0], mi.group(1), int(m.group(2))
    return None


def _written(stmts, out):
    """Names assigned and buffers stored to by `stmts` (nested scopes included); _OPAQUE for
    a statement of target text other than a local's declaration."""
    for s in stmts:
        if isinstance(s, Scope):
            _written(s.stmts, out)
        elif isinstance(s, Store):
            out.add(("buffer", s.buffer))
        elif isinstance(s, Assign):
            out.add(s.name)
        elif isinstance(s, str) and _DECL.match(s):
            out.add(_DECL.match(s).group(1))
        elif not isinstance(s, Let):
            out.add(_OPAQUE)
    return out


def _out_row(second, body2, var2, env2, memo2, dtype, taken, blocked):
    """(buffer, canonical offset) of an output element that loop `second` stores in each
    iteration, of type `dtype`, at an offset of its loop variable and variables bound outside
    it (so the loop before can store there first); None if there is none free."""
    for st in body2.stmts:
        if not isinstance(st, Store) or st.dtype != dtype or not st.buffer.startswith("out") \
                or st.buffer in taken or ("buffer", st.buffer) in blocked:
            continue
        off = _canon(st.offset, env2, var2, memo2)
        if off is None or "@" not in _reads(off) or \
                any(isinstance(x, Load) for x in _walk_canon(off)):
            continue
        inner = set(second.binds) - {var2}
        if _reads(off) & inner:
            continue
        return st.buffer, off
    return None


def reuse_row_values(root: Scope) -> int:
    """Keeps the costly values (a math op) that a row loop computes and a later sibling loop
    over the same row recomputes: the first stores them (in a stack row, or in the output
    element the second stores: see above), the second reads them. Only values of the loops'
    own lets are shared, and only when neither the first loop nor anything between the two
    writes what they read (statements of target text count as writing anything). Returns how
    many values it shared."""
    shared = 0
    for s in root.stmts:
        if isinstance(s, Scope):
            shared += reuse_row_values(s)
    stmts = root.stmts
    decls = []       # (loop, declaration of its row), inserted after the walk
    kept = 0         # elements of the rows declared in this scope
    for i, first in enumerate(stmts):
        r1 = _row_loop(first)
        if r1 is None:
            continue
        body1, var1, trip1 = r1
        env, memo, lets = {}, {}, {}
        bad = _written(first.stmts, set())
        for st in body1.stmts:
            if isinstance(st, Let):
                c = _canon(st.value, env, var1, memo)
                if c is None:
                    continue
                env[st.name] = c
                if any(isinstance(x, Op) and x.kind.startswith("math.") for x in _walk_canon(c)):
                    lets.setdefault(c, st)
        between = set()
        for j in range(i + 1, len(stmts)):
            second = stmts[j]
            r2 = _row_loop(second)
            if r2 is not None and r2[0] is second and r2[2] == trip1 and lets and \
                    _OPAQUE not in bad | between:
                var2 = r2[1]
                env2, memo2, taken = {}, {}, set()
                for k, st in enumerate(second.stmts):
                    if not isinstance(st, Let):
                        continue
                    c = _canon(st.value, env2, var2, memo2)
                    if c is None:
                        continue
                    env2[st.name] = c
                    src = lets.get(c)
                    if src is None or _reads(c) & (bad | between):
                        continue
                    row = getattr(src, "row", None)
                    if row is None and kept + trip1 <= ROW_CACHE_MAX:
                        kept += trip1
                        row = src.row = f"row_{src.name}"
                        decls.append((first, Line(f"alignas(64) {CTYPE.get(src.dtype, 'float')} "
                                                  f"{row}[{trip1}];")))
                        body1.stmts.insert(body1.stmts.index(src) + 1,
                                           Store(row, Var(var1), Var(src.name), "f32"))
                        shared += 1
                    if row is not None:
                        second.stmts[k] = Let(st.name, st.dtype, Load(row, Var(var2), "f32"))
                        env2[st.name] = Var(f"{row}[@]")     # later lets read the kept value
                        continue
                    out = _out_row(second, second, var2, env2, memo2, src.dtype, taken,
                                   bad | between)
                    if out is None:
                        continue
                    buf, off = out
                    taken.add(buf)
                    body1.stmts.insert(body1.stmts.index(src) + 1,
                                       Store(buf, _at(off, var1), Var(src.name), src.dtype))
                    second.stmts[k] = Let(st.name, st.dtype, Load(buf, _at(off, var2), src.dtype))
                    env2[st.name] = Var(f"{buf}[@]")
                    shared += 1
            _written([second], between)
    for loop, decl in decls:
        stmts.insert(next(k for k, x in enumerate(stmts) if x is loop), decl)
    return shared
