"""C++ (OpenMP) spelling of ember kernels: the prelude, `CppLang` for kernel_schedule's
expression builder, and `emit_kernel` that prints one kernel function with the ABI of
docs/internals.md (Stage 4)."""
from __future__ import annotations

import math

from torch_mlir import ir

from .kernel_schedule import (Expr, ExprBuilder, Scope, Unschedulable, combiner, indexing_maps,
                              iterator_types, schedule_kernel, shape, type_name)

PRELUDE = r"""// ember C++ kernels (generated)
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
// 16-bit floats are stored as uint16_t and computed in float.
static inline float ember_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t ember_f32_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (uint16_t)(u >> 16);
}
static inline float ember_round_bf16(float f) { return ember_bf16_to_f32(ember_f32_to_bf16(f)); }
static inline float ember_f16_to_f32(uint16_t h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
static inline uint16_t ember_f32_to_f16(float f) { _Float16 v = (_Float16)f; uint16_t h; std::memcpy(&h, &v, 2); return h; }
static inline float ember_round_f16(float f) { return (float)(_Float16)f; }
// arith.maximumf/minimumf propagate NaN (as torch.maximum and amax do); written as selects so
// that gcc vectorizes them.
template <typename T> static inline T ember_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> static inline T ember_min(T a, T b) { return (a < b || a != a) ? a : b; }
#pragma omp declare reduction(nanmax : float, double : omp_out = ember_max(omp_out, omp_in)) initializer(omp_priv = omp_orig)
#pragma omp declare reduction(nanmin : float, double : omp_out = ember_min(omp_out, omp_in)) initializer(omp_priv = omp_orig)
"""

CTYPE = {"f32": "float", "f64": "double", "f16": "float", "bf16": "float", "i1": "bool",
         "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
         "index": "int64_t", "ui8": "uint8_t"}
STORAGE = dict(CTYPE, f16="uint16_t", bf16="uint16_t")
BIN = {"addf": "+", "addi": "+", "subf": "-", "subi": "-", "mulf": "*", "muli": "*",
       "divf": "/", "divsi": "/", "remsi": "%", "andi": "&", "ori": "|", "xori": "^",
       "shli": "<<", "shrsi": ">>"}
CMP = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
       "oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "!=",
       "ult": "<", "ule": "<=", "ugt": ">", "uge": ">=", "ueq": "==", "une": "!="}
MATH = {"exp": "std::exp", "exp2": "std::exp2", "log": "std::log", "log2": "std::log2",
        "log10": "std::log10", "log1p": "std::log1p", "expm1": "std::expm1",
        "sqrt": "std::sqrt", "tanh": "std::tanh", "erf": "std::erf", "sin": "std::sin",
        "cos": "std::cos", "tan": "std::tan", "atan": "std::atan", "asin": "std::asin",
        "acos": "std::acos", "sinh": "std::sinh", "cosh": "std::cosh", "atan2": "std::atan2",
        "powf": "std::pow", "absf": "std::fabs", "floor": "std::floor", "ceil": "std::ceil",
        "round": "std::round", "roundeven": "std::nearbyint", "trunc": "std::trunc",
        "copysign": "std::copysign", "fma": "std::fma", "erfc": "std::erfc",
        "atanh": "std::atanh", "asinh": "std::asinh", "acosh": "std::acosh"}
# Reduction combiners that OpenMP can reduce (user-declared ones keep NaN semantics).
OMP_RED = {"addf": "+", "addi": "+", "mulf": "*", "muli": "*", "maximumf": "nanmax",
           "minimumf": "nanmin", "maxnumf": "max", "minnumf": "min", "maxsi": "max",
           "minsi": "min", "ori": "|", "andi": "&", "xori": "^"}


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

    def load(self, buf, off, ty):
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

    def let(self, name, ty, text):
        return f"const {CTYPE.get(ty, 'auto')} {name} = {text};"

    def dim_size(self, g, k):
        return f"s{g}"

    def op(self, kind, args, rty, atys):
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
        if name == "divui" or name == "remui" or name == "shrui":
            ut = "u" + CTYPE[rty]
            sym = {"divui": "/", "remui": "%", "shrui": ">>"}[name]
            return f"({ct})(({ut}){args[0]} {sym} ({ut}){args[1]})"
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
            ut = "u" + CTYPE[rty]
            return f"({ct})std::{name[:3]}<{ut}>(({ut}){args[0]}, ({ut}){args[1]})"
        if name == "select":
            return f"({args[0]} ? {args[1]} : {args[2]})"
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


def _render(scope: Scope, indent: int, out: list):
    pad = "  " * indent
    for s in scope.stmts:
        if isinstance(s, Scope):
            for p in getattr(s, "pragmas", []):
                out.append(f"{pad}{p}")
            out.append(f"{pad}{s.header} {{")
            _render(s, indent + 1, out)
            out.append(f"{pad}}}")
        else:
            out.append(pad + s)


class _Emitter:
    def __init__(self, func, name, omp_min_elements, vectorize):
        self.func, self.name = func, name
        self.min_el, self.vec = omp_min_elements, vectorize
        self.sched = s = schedule_kernel(func)
        args = list(func.regions[0].blocks[0].arguments)
        self.bufs = {a: f"in{i}" for i, a in enumerate(args)}
        self.lang = CppLang()
        self.b = ExprBuilder(s, self.lang, self.bufs, reduce_hook=self.reduce)
        self.nloop = 0

    def var(self, g):
        self.nloop += 1
        return f"i{g}_{self.nloop}"

    def par_clause(self, gs) -> "str | None":
        """`if(...)` clause (or '' / None) deciding whether a loop nest is worth threads."""
        n, dyn = 1, []
        for g in gs:
            sz = self.sched.size(g)
            if sz is None:
                dyn.append(self.b.size(g).text)
            else:
                n *= sz
        if not dyn:
            return "" if n >= self.min_el else None
        return f" if({' * '.join(dyn + [str(n)])} >= {self.min_el})"

    def work(self):
        gs = list(self.sched.outer)
        for r in self.sched.reductions:
            gs += [g for g in r.reduced if g not in gs]
        for o in self.sched.outputs:
            gs += [g for g in o.inner if g not in gs]
        return gs

    def loop(self, g, var) -> Scope:
        sc = Scope({var}, f"for (int64_t {var} = 0; {var} < {self.b.size(g).text}; ++{var})")
        sc.pragmas = []
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
                full[j] = Expr(v, frozenset({v}))
                red.append((g, v))
            elif full[j] is None:
                full[j] = Expr("0")
        maps = indexing_maps(op)
        n_in = len(op.inputs)
        rvars = frozenset(v for _, v in red)
        accs, kinds, results = [], [], []
        used = [k for k, r in enumerate(op.results) if any(True for _ in r.uses)]
        for k, r in enumerate(op.results):
            ty = type_name(r.type)
            acc = b.fresh("acc")
            if k in used:
                init = b.value_at(op.outputs[k], b.apply_map(maps[n_in + k], full))
                b.emit_into(target, f"{CTYPE[ty]} {acc} = {init.text};")
            accs.append(Expr(acc, rvars))
            results.append(Expr(acc, deps))
            kinds.append(combiner(op, k, used)[0])
        scopes = [self.loop(g, v) for g, v in red]
        parent = target
        for sc in scopes:
            b.push(sc, parent)
            parent = sc
        ys = [(k, b.generic_yield(op, k, full, outs=accs)) for k in used]
        for k, y in ys:
            parent.stmts.append(f"{accs[k].text} = {y.text};")
        for _ in scopes:
            b.pop()
        b.stack = saved
        if scopes and all(kinds[k] in OMP_RED for k in used):
            clause = " ".join(f"reduction({OMP_RED[kinds[k]]}:{accs[k].text})" for k in used)
            coll = f" collapse({len(scopes)})" if len(scopes) > 1 else ""
            par = self.par_clause([g for g, _ in red]) if target is b.stack[0] else None
            simd = " simd" if self.vec else ""
            if par is not None:
                scopes[0].pragmas.append(f"#pragma omp parallel for{simd}{coll}{par} {clause}")
            elif self.vec:
                scopes[0].pragmas.append(f"#pragma omp simd{coll} {clause}")
        return results

    def emit(self) -> str:
        s, b = self.sched, self.b
        top = b.stack[0]
        for g in sorted(set(self.work()) | set(s._size_ref)):
            if s.size(g) is None:
                top.stmts.append(f"const int64_t s{g} = sizes[{s.size_index(g)}];")
        pvars = {}
        parent = top
        for g in s.outer:
            v = self.var(g)
            pvars[g] = Expr(v, frozenset({v}))
            sc = self.loop(g, v)
            if parent is top and s.outer:
                par = self.par_clause(self.work())
                if par is not None:
                    coll = f" collapse({len(s.outer)})" if len(s.outer) > 1 else ""
                    sc.pragmas.append(f"#pragma omp parallel for{coll}{par}")
            b.push(sc, parent)
            parent = sc
        nres = len(self.bufs)
        for n, o in enumerate(s.outputs):
            idx = dict(pvars)
            depth = 0
            inner_parent = parent
            for g in o.inner:
                v = self.var(g)
                idx[g] = Expr(v, frozenset({v}))
                sc = self.loop(g, v)
                b.push(sc, inner_parent)
                inner_parent = sc
                depth += 1
            if depth:
                first, innermost = b.stack[len(b.stack) - depth], b.stack[-1]
                par = self.par_clause(self.work()) if not s.outer else None
                simd = " simd" if self.vec else ""
                if par is not None and depth == 1:
                    first.pragmas.append(f"#pragma omp parallel for{simd}{par}")
                else:
                    if par is not None:
                        first.pragmas.append(f"#pragma omp parallel for{par}")
                    if self.vec:
                        innermost.pragmas.append("#pragma omp simd")
            val = b.value_at(o.value, [idx.get(g, Expr("0")) for g in o.dims])
            off = b.offset(o.value, [idx.get(g, Expr("0")) for g in o.dims])
            ty = type_name(o.value.type)
            b.stack[-1].stmts.append(f"out{n}[{off.text}] = {self.lang.store_value(val.text, ty)};")
            for _ in range(depth):
                b.pop()
        params = [f"const {STORAGE[type_name(a.type)]}* __restrict__ {nm}" for a, nm in self.bufs.items()]
        params += [f"{STORAGE[type_name(o.value.type)]}* __restrict__ out{n}"
                   for n, o in enumerate(s.outputs)]
        params.append("const int64_t* __restrict__ sizes")
        lines = [f'extern "C" void {self.name}({", ".join(params)}) {{']
        lines += ["  " + p for p in b.preamble]
        _render(top, 1, lines)
        lines.append("}")
        return "\n".join(lines) + "\n"


def emit_kernel(func, name: str, omp_min_elements: int = 32768, vectorize: bool = True) -> str:
    """C++ source of kernel `func` as `extern "C" void name(...)`; raises Unschedulable."""
    return _Emitter(func, name, omp_min_elements, vectorize).emit()
