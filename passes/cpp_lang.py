"""The C++ spelling of kernel_ir: `CppLang` (kernel_expr's `Lang` protocol: constants, loads,
stores, ops, locals, loop headers) and `render`, the printer of a statement tree (a Scope with
its pragmas and loops). Element types are spelled by CTYPE (compute) and STORAGE (memory: 16-bit
floats as their bits)."""
from __future__ import annotations

import math

from .kernel_ir import (CHECK_INDEX, CONVERT, Const, If, Op, Printer, Scope, perfect_depth,
                        render_loop, render_stmt)
from .kernel_schedule import Unschedulable


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

    def decl(self, name, ty, text, const, length):
        if length is not None:
            return f"{CTYPE.get(ty, 'auto')} {name}[{length}];"
        return f"{'const ' if const else ''}{CTYPE.get(ty, 'auto')} {name} = {text};"

    def loop(self, var, start, stop, step, span):
        if span is not None:
            stop = f"std::min<int64_t>({start} + {span}, {stop})"
        inc = f"++{var}" if step is None else f"{var} += {step}"
        return f"for (int64_t {var} = {start}; {var} < {stop}; {inc})"

    def dim_size(self, g, k):
        return f"s{g}"

    def check_index(self, i, n, dim):
        return f"ember_chk_index({i}, {n}, {dim})"

    def op(self, kind, args, rty, atys, nodes):
        if kind == CONVERT:
            return f"({CTYPE.get(rty, 'auto')}){args[0]}"
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
        if name in ("sitofp", "uitofp") and rty in ("f16", "bf16") and \
                atys[0] not in ("i1", "i8", "ui8"):
            # an integer converted to a 16-bit float is rounded to it (c10's Half(float(x)),
            # BFloat16(float(x))): int64 MIN to f16 is -inf, 2049 is 2048 (fuzz seed 40
            # index 665); int8/uint8 values are exact in both
            wide = self.op(kind, args, "f32", atys, nodes)
            return f"ember_round_{rty}({wide})"
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


def _int_div_checked(name: str, divisor) -> bool:
    """Whether integer division/remainder `name` ("divsi", ...) by the node `divisor` is
    checked (ember_chk_*): unless the divisor is a constant other than 0 and -1, which can
    neither be the error nor overflow."""
    d = int(divisor.value) if isinstance(divisor, Const) and divisor.dtype != "i1" and \
        not divisor.dtype.startswith(("f", "bf")) else None
    unsigned = name.endswith("ui")
    return not (d is not None and d not in (0, -1) and name != "floordivsi" and
                not (unsigned and d < 0))


def is_checked(n) -> bool:
    """Whether node `n` prints as a check that records an error for the host (an index read
    from data, an integer division that may divide by zero or overflow)."""
    if not isinstance(n, Op):
        return False
    if n.kind == CHECK_INDEX:
        return True
    name = n.kind[len("arith."):] if n.kind.startswith("arith.") else None
    return name in INT_DIV and _int_div_checked(name, n.args[1])


def _int_div(name, args, rty, divisor) -> str:
    """Integer division/remainder, checked where `_int_div_checked` says."""
    ct = CTYPE[rty]
    unsigned = name.endswith("ui")
    if not _int_div_checked(name, divisor):
        if unsigned:
            ut = "u" + ct
            return f"({ct})(({ut}){args[0]} {INT_DIV[name]} ({ut}){args[1]})"
        return f"({ct})({args[0]} {INT_DIV[name]} {args[1]})"
    if unsigned:
        ut = "u" + ct
        return f"({ct})ember_chk_{name}<{ut}>(({ut}){args[0]}, ({ut}){args[1]})"
    return f"ember_chk_{name}<{ct}>({args[0]}, {args[1]})"


def render(scope: Scope, indent: int, out: list, show: Printer):
    """The C++ printer of statements. Hoisted loop invariants between loops make a nest
    imperfect: a pragma's collapse count is fitted to the perfect depth here."""
    pad = "  " * indent
    for s in scope.stmts:
        if isinstance(s, Scope):
            for p in s.pragmas:
                out.append(f"{pad}{p.render(perfect_depth(s), show)}")
            out.append(f"{pad}{render_loop(s.loop, show)} {{")
            render(s, indent + 1, out, show)
            out.append(f"{pad}}}")
        elif isinstance(s, If):
            out.append(f"{pad}if ({show(s.cond)}) {{")
            render(s.then, indent + 1, out, show)
            out.append(f"{pad}}}")
            out.append(f"{pad}else {{")
            render(s.other, indent + 1, out, show)
            out.append(f"{pad}}}")
        else:
            out.append(pad + render_stmt(s, show))
