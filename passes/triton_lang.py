"""How `arith`/`math` ops are spelled in Triton (the "language" for expression printing).

Values of f16/bf16 type are computed in fp32 (loads convert with `.to(tl.float32)`, stores
convert back), as eager's opmath does; an explicit non-constant `arith.truncf` to a 16-bit
type rounds through that type, so decompositions that round on purpose match eager.

In kernels that read or write a bf16/f16 tensor, transcendental functions, division and
square root are prelude helpers (`_ember_exp`, ...) with two bodies chosen when the generated
module is imported (division and square root take them in f32 kernels too: see `op`; f32/f64
kernels' transcendental functions are Triton's fast versions: an f32 result within an ulp or
two of eager's is what any compiler gives, and the chain over 2^28 runs 0.549 instead of
0.591 ms on an H200; there a sigmoid's reciprocal is Triton's `/` too, "arith.divf.fast").
Compiled for a GPU they are the
correctly-rounded or vendor-library versions eager's kernels use (`libdevice` on CUDA, `ocml`
on HIP, through `triton.language.extra.libdevice`; IEEE `div_rn` / `sqrt_rn`) rather than
Triton's defaults (`ex2.approx`, `div.full`): an f32 result one ulp away from eager's flips a
bf16 rounding now and then, and a transformer's output moves a full bf16 ulp-scale (~1e-2) from
one such flip early on. Under the interpreter, which has no libdevice, they are the `tl` /
NumPy versions. The helpers are in the module prelude, triton_prelude.PRELUDE.
"""
from __future__ import annotations

import math

import numpy as np

from .kernel_ir import Const, Op


def round_to(x: str, ty: str) -> str:
    """f32 expression `x` rounded to the 16-bit float type `ty`, kept in f32."""
    if ty == "bf16":
        return f"_ember_round_bf16({x})"
    return f"{x}.to({TYPES[ty][0]}).to(tl.float32)"


def widen(x: str, ty: str) -> str:
    """A loaded value of storage type `ty` in its compute type (bf16 by its bits under the
    interpreter: triton_prelude's `_ember_from_bf16`)."""
    if ty == "bf16":
        return f"_ember_from_bf16({x})"
    return f"{x}.to({TYPES[ty][1]})" if TYPES[ty][0] != TYPES[ty][1] else x


def narrow(x: str, ty: str) -> str:
    """A computed value in storage type `ty` (bf16 rounded to nearest even, by its bits under
    the interpreter, whose own cast truncates and flushes subnormals: `_ember_to_bf16`)."""
    if ty == "bf16":
        return f"_ember_to_bf16({x})"
    return f"({x}).to({TYPES[ty][0]})"


# type_name() string -> (storage dtype, compute dtype, AOT signature pointer element)
TYPES = {
    "f32": ("tl.float32", "tl.float32", "fp32"),
    "f16": ("tl.float16", "tl.float32", "fp16"),
    "bf16": ("tl.bfloat16", "tl.float32", "bf16"),
    "f64": ("tl.float64", "tl.float64", "fp64"),
    "i1": ("tl.int1", "tl.int1", "i1"),
    "i8": ("tl.int8", "tl.int8", "i8"),
    "i16": ("tl.int16", "tl.int16", "i16"),
    "i32": ("tl.int32", "tl.int32", "i32"),
    "i64": ("tl.int64", "tl.int64", "i64"),
    "ui8": ("tl.uint8", "tl.uint8", "u8"),
    "index": ("tl.int64", "tl.int64", "i64"),
}
FLOATS = ("f16", "bf16", "f32", "f64")

# Python's comparisons are the ordered ones (false on NaN) except !=, which is unordered;
# cmpf's u* predicates add "or either is NaN", `one` "and neither is" (see TritonLang.op).
_CMP = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "!=",
        "ueq": "==", "ugt": ">", "uge": ">=", "ult": "<", "ule": "<=", "une": "!=",
        "eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
        "lt": "<", "ge": ">="}
_UNSIGNED = {"i8": "tl.uint8", "i16": "tl.uint16", "i32": "tl.uint32", "i64": "tl.uint64"}
_WIDTH = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}
_BINARY = {
    "arith.addf": "+", "arith.subf": "-", "arith.mulf": "*",
    "arith.addi": "+", "arith.subi": "-", "arith.muli": "*",
    "arith.andi": "&", "arith.ori": "|", "arith.xori": "^", "arith.shli": "<<",
    "arith.shrsi": ">>",
    # Triton's integer // and % truncate like C, as arith.divsi/remsi do. A zero divisor
    # does not trap on a GPU (nor under the interpreter); eager's CUDA kernels do not raise.
    "arith.divsi": "//", "arith.remsi": "%",
    "idx.add": "+", "idx.sub": "-", "idx.mul": "*", "idx.div": "//", "idx.rem": "%",
}
_CALLS = {
    "math.exp": "_ember_exp", "math.exp2": "_ember_exp2", "math.log": "_ember_log",
    "math.log2": "tl.log2", "math.rsqrt": "_ember_rsqrt",
    "math.erf": "_ember_erf", "math.sin": "_ember_sin", "math.cos": "_ember_cos",
    "math.tanh": "_ember_tanh", "math.log1p": "_ember_log1p", "math.expm1": "_ember_expm1",
    "math.absf": "tl.abs", "math.absi": "tl.abs", "math.floor": "tl.floor", "math.ceil": "tl.ceil",
    "arith.maxnumf": "tl.maximum", "arith.minnumf": "tl.minimum",
    "arith.maxsi": "tl.maximum", "arith.minsi": "tl.minimum",
    "idx.min": "tl.minimum", "idx.max": "tl.maximum", "math.fma": "tl.fma",
    **{f"math.{f}": f"_ember_{f}" for f in ("acos", "asin", "atan", "acosh", "asinh", "atanh",
                                           "cosh", "sinh", "tan", "log10", "atan2")},
}
# Constant folding of scalar math on literals: tl.sqrt(2.0) is not valid Triton (it needs a
# tensor), and torch-mlir's gelu computes sqrt(2) in the body. In float64 with IEEE results
# for every operand (0.001 / 0.0 is inf, fmod(x, 0) NaN, sqrt(-1) NaN), rounded once to the
# result's type where Triton reads the literal: a division by a literal zero stayed
# `_ember_div(0.001, 0.0)`, which the interpreter ran as Python's `/` (ZeroDivisionError: the
# graph fell back, fuzz seed 51 index 618) and Triton rejects (div_rn wants tensors).
_FOLD = {"math.sqrt": np.sqrt, "math.exp": np.exp, "math.log": np.log,
         "math.rsqrt": lambda x: 1.0 / np.sqrt(x), "math.erf": math.erf,
         "math.tanh": np.tanh, "math.absf": np.abs, "arith.negf": np.negative}
_FOLD2 = {"arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
          "arith.divf": np.divide, "arith.remf": np.fmod, "math.powf": np.power,
          "math.fpowi": np.power}


# f32/f64 kernels: Triton's own (approximate on NVIDIA) spellings.
_FAST = {"_ember_exp": "tl.exp", "_ember_log": "tl.log", "_ember_erf": "tl.math.erf",
         "_ember_sin": "tl.sin", "_ember_cos": "tl.cos", "_ember_tanh": "_ember_tanh_fast"}


# unsigned op -> (spelling, whether it is a function: `f(a, b)`, else infix `(a op b)`)
_UNSIGNED_OPS = {"arith.divui": ("//", False), "arith.remui": ("%", False),
                 "arith.shrui": (">>", False), "arith.maxui": ("tl.maximum", True),
                 "arith.minui": ("tl.minimum", True)}


_CASTS = ("arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi",
          "arith.fptoui", "arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast",
          "arith.bitcast")
# i1 -> wider: the value `true` becomes (zero extension 1, sign extension -1)
# integer types whose every value a 16-bit float holds exactly (bf16: 8 significant bits)
_EXACT_IN_16_BITS = ("i1", "i8", "ui8")
_BOOL_CASTS = {"arith.extui": 1, "arith.uitofp": 1, "arith.extsi": -1, "arith.sitofp": -1}


def _is_compare(n) -> bool:
    """Whether node `n` is spelled as a parenthesized comparison, whose value the interpreter
    types bool: a comparison, an i1 xor (spelled `!=`), or an i1 and/or that is not of two
    literals (its operands are comparisons or are compared with 0)."""
    if not isinstance(n, Op):
        return False
    if n.kind.startswith(("arith.cmpf.", "arith.cmpi.")) or n.kind in ("idx.lt", "idx.ge"):
        return True
    if n.dtype == "i1" and n.kind == "arith.xori":
        return True
    if n.dtype == "i1" and n.kind in ("arith.andi", "arith.ori"):
        return any(_lit(a) is None for a in n.args)
    return False


def _as_unsigned(x: str, ty: str, lit) -> str:
    if lit is not None:
        return str(int(lit) & ((1 << _WIDTH[ty]) - 1))
    # a value Triton typed wider (a where of int literals is int32) is narrowed first
    return f"{x}.to({TYPES[ty][1]}).to({_UNSIGNED[ty]}, bitcast=True)"


class UnsupportedOp(Exception):
    """An op the Triton spelling does not know; the pass reports it as a located error."""


def _lit(n):
    """The Python number a node is a literal of (folded by Triton as a scalar), else None:
    booleans and non-finite floats are spelled as expressions (`True`, `float("nan")`)."""
    if not isinstance(n, Const) or n.dtype == "i1":
        return None
    if n.dtype in FLOATS:
        v = float(n.value)
        return v if math.isfinite(v) else None
    return int(n.value)


def literal(value, type_: str) -> str:
    """A Python literal that Triton folds as a scalar constant."""
    if type_ in FLOATS:
        v = float(value)
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        if v == 0.0 and math.copysign(1.0, v) < 0:
            # triton 3.6 makes every zero constant +0.0 (semantic.scalar_constant's `value
            # == 0` takes the null value), compiled and interpreted alike: -0.0 by its bits
            # (fuzz seed 41: floor division, trunc and round of a negative zero)
            return "_ember_neg_zero()"
        return repr(v)
    if type_ == "i1":
        return "True" if value else "False"
    return str(int(value))


class TritonLang:
    """The kernel_expr `Lang` protocol, spelled in Triton (block-level: every value is a tensor
    of the program's tile, loop variables are index tensors)."""

    def __init__(self, precise: bool = True):
        self.dynamic_sizes: dict[int, str] = {}     # sizes-table index -> kernel argument
        self.precise = precise                      # eager's math functions (see the module doc)

    def let(self, name, type_, text):
        return f"{name} = {text}"

    def tile_store(self, buffer, offset, value, type_, tile, masks, widen, fill):
        """A block store (kernel_ir.Store with a tile): `tl.store` broadcasts the value and the
        mask to the pointer's shape, never the pointer, hence `widen`."""
        shape = f"[{', '.join(str(d) for d in tile)}]"
        if fill:
            value = f"tl.full({shape}, {value}, {TYPES[type_][1]})"
        ptr = f"{buffer} + {offset}"
        if widen:
            ptr += f" + tl.zeros({shape}, tl.int32)"
        return f"tl.store({ptr}, {narrow(value, type_)}, mask={' & '.join(masks)})"

    def loop(self, var, start, stop, step, span):
        if span is not None:     # (the C++ generator's chunks of a blocked sum only)
            raise UnsupportedOp("a loop over a chunk of another loop's range")
        return f"for {var} in range({start}, {stop}{'' if step is None else ', ' + step}):"

    def constant(self, value, type_):
        return literal(value, type_)

    def load(self, buffer, offset, type_, masks):
        text = f"tl.load({buffer} + {offset}"
        if masks:
            text += f", mask={' & '.join(masks)}, other=0"
        return widen(text + ")", type_)

    def dim_size(self, g, k):
        return self.dynamic_sizes.setdefault(k, f"s{k}")

    def plain_int(self, type_):
        """Integer constants are bare Python literals (kernel_expr folds them as indices)."""
        return type_ not in FLOATS and type_ != "i1"

    def fold(self, kind, nodes, rtype, atypes):
        """Scalar math and casts of literals fold to a literal (`tl.sqrt(2.0)` is not valid
        Triton: it needs a tensor; `.to` likewise)."""
        if kind in _BOOL_CASTS and len(nodes) == 1 and isinstance(nodes[0], Const) and \
                nodes[0].dtype == "i1" and rtype in TYPES:
            # `True.to(tl.int64)` is no Triton (the compiler rejects it; the interpreter too):
            # a constant mask counted, as cross_entropy's (target != ignore_index) of a
            # constant target. Signed extension of true is -1.
            v = _BOOL_CASTS[kind] if nodes[0].value else 0
            return Const(float(v) if rtype in FLOATS else v, rtype)
        if rtype in FLOATS and nodes and all(isinstance(n, Const) and (n.dtype in FLOATS or (
                kind == "math.fpowi" and i == 1)) for i, n in enumerate(nodes)):
            vals = [np.float64(n.value) for n in nodes]     # inf and NaN too
            fn = _FOLD.get(kind) if len(nodes) == 1 else _FOLD2.get(kind)
            if fn is not None:
                with np.errstate(all="ignore"):
                    return Const(float(fn(*vals)), rtype)
        lits = [_lit(n) for n in nodes]
        if not nodes or any(v is None for v in lits):
            return None
        if kind.startswith(_CASTS) and rtype in TYPES and atypes[0] in TYPES:
            return Const(float(lits[0]) if rtype in FLOATS else int(lits[0]), rtype)
        return None

    def op(self, kind, args, rtype, atypes, nodes):
        lits = [_lit(n) for n in nodes]
        if kind == "arith.xori" and rtype == "i1":
            # the same op on one bit; the interpreter's `^` rejects a scalar comparison's
            # result next to a block's (remainder by a 0-dim float: fuzz, fmod of bf16)
            return f"({args[0]} != {args[1]})"
        if kind in ("arith.andi", "arith.ori") and rtype == "i1" and \
                any(v is None and not _is_compare(n) for v, n in zip(lits, nodes)):
            # likewise for & and |: an operand that is not a comparison is compared with 0
            # first (a no-op on a GPU; fuzz seed 10 indices 5 and 13)
            a, b = (x if v is not None or _is_compare(n) else f"({x} != 0)"
                    for x, v, n in zip(args, lits, nodes))
            return f"({a} {_BINARY[kind]} {b})"
        if kind in _BINARY:
            return f"({args[0]} {_BINARY[kind]} {args[1]})"
        if kind in _UNSIGNED_OPS and rtype in _UNSIGNED:
            # signless integers hold signed values here (int8 tensors, see the launcher):
            # the unsigned ops reinterpret their operands, and the result back.
            a, b = (_as_unsigned(x, rtype, lit) for x, lit in zip(args, lits))
            sym, call = _UNSIGNED_OPS[kind]
            r = f"{sym}({a}, {b})" if call else f"({a} {sym} {b})"
            return f"({r}).to({TYPES[rtype][1]})"
        if kind in _UNSIGNED_OPS:   # index values: never negative here
            sym, call = _UNSIGNED_OPS[kind]
            return f"{sym}({args[0]}, {args[1]})" if call \
                else f"({args[0]} {sym} {args[1]})"
        if kind == "arith.divf.fast":
            # a sigmoid's reciprocal in a kernel of fast transcendental functions (kernel_expr
            # `fast_sigmoid`): Triton's `/` (div.full, 2 ulps), as `tl.sigmoid` divides. The
            # correctly rounded division cost 3.5% of the f32 GELU-sigmoid chain over 2^28 on
            # an H200 (0.5508 against 0.5322 ms; copy 0.5085), whose exp is ex2.approx anyway.
            return f"({args[0]} / {args[1]})"
        if kind in ("arith.divf", "math.sqrt"):
            # f64 `/` and sqrt are IEEE already; f32 (and 16-bit, computed in f32) take the
            # correctly rounded helpers, as eager's kernels divide — in f32 kernels too, not
            # only where a 16-bit result needs them (`precise`): Triton's `/` is `div.full`
            # (2 ulps) and `tl.sqrt` `sqrt.approx`, while CUDA C++ (eager) divides and takes
            # square roots correctly rounded; one per element costs nothing next to the
            # memory traffic, and f32 average pooling (`sum / count`) gives eager's bits.
            if rtype == "f64":
                return f"({args[0]} / {args[1]})" if kind == "arith.divf" else f"tl.sqrt({args[0]})"
            return f"_ember_div({args[0]}, {args[1]})" if kind == "arith.divf" \
                else f"_ember_sqrt({args[0]})"
        if kind in ("arith.remf", "math.atan2"):
            # IEEE fmod, exact, as eager's kernels (fmodf): Triton's float `%` compiles to
            # a - trunc(a / b) * b, which is off wherever the quotient rounds (beyond 2**24 or
            # next to an integer) and NaN where it overflows. A literal operand is made a block
            # of the other's shape (x - 0.0 is x, -0.0 included) for the helper's broadcast.
            # atan2 likewise: its helper broadcasts two blocks (a NaN mean over an empty dim,
            # folded to a literal, as atan2's first operand failed: fuzz seed 57 index 844)
            args = [f"({x} - tl.zeros_like({y}))" if isinstance(n, Const) else x
                    for x, y, n in zip(args, args[::-1], nodes)]
            if kind == "arith.remf":
                return f"_ember_fmod({args[0]}, {args[1]})"
        if kind in _CALLS:
            fn = _CALLS[kind] if self.precise else _FAST.get(_CALLS[kind], _CALLS[kind])
            return f"{fn}({', '.join(args)})"
        if kind == "arith.negf":
            # not `-x`: triton 3.6 spells a float's unary minus `0 - x` (+0.0 for x = +0.0,
            # compiled and interpreted alike; 3.9 an fneg). `x * -1.0` is exact and keeps the
            # sign rule (LLVM makes it an fneg): -round(0.3) is -0.0 (fuzz seed 41 index 2210)
            return f"({args[0]} * -1.0)"
        if kind in ("arith.maximumf", "arith.minimumf"):
            fn = "tl.maximum" if kind == "arith.maximumf" else "tl.minimum"
            return f"{fn}({args[0]}, {args[1]}, propagate_nan=tl.PropagateNan.ALL)"
        if kind.startswith(("arith.cmpf.", "arith.cmpi.", "idx.")):
            pred = kind.rsplit(".", 1)[1]
            a, b = args
            if kind.startswith("arith.cmpi.u") and atypes[0] in _UNSIGNED:
                a, b = (_as_unsigned(x, atypes[0], lit) for x, lit in zip(args, lits))
                return f"({a} {_CMP[pred]} {b})"
            if kind.startswith("arith.cmpf.") and pred in ("ueq", "ugt", "uge", "ult", "ule"):
                return f"(({a} {_CMP[pred]} {b}) | ({a} != {a}) | ({b} != {b}))"
            if kind.startswith("arith.cmpf.") and pred == "one":
                return f"(({a} != {b}) & ({a} == {a}) & ({b} == {b}))"
            if pred in _CMP:
                return f"({a} {_CMP[pred]} {b})"
            if pred == "ord":
                return f"(({a} == {a}) & ({b} == {b}))"
            if pred == "uno":
                return f"(({a} != {a}) | ({b} != {b}))"
            return "True" if pred == "true" else "False"
        if kind == "arith.select":
            # i1 values loaded from memory arrive as integers; tl.where wants a boolean.
            a, b = args[1], args[2]
            if isinstance(nodes[1], Const) and isinstance(nodes[2], Const) and rtype in TYPES:
                # two literals: Triton types the block by them (int32 for Python ints, f32 for
                # floats), and what follows computes in that type: `where(t > 0, 2000000000,
                # 1) * 2` of int64 wrapped at 32 bits (-294967296, eager 4000000000); one typed
                # constant gives the result's type
                # (tl.full wants a number: a literal spelled as an expression, -0.0's
                # `_ember_neg_zero()`, is converted instead)
                plain = not a.startswith("_")     # numbers, float("inf"), True
                a = f"tl.full([], {a}, {TYPES[rtype][1]})" if plain else \
                    f"({a}).to({TYPES[rtype][1]})"
            return f"tl.where(({args[0]}) != 0, {a}, {b})"
        if kind == "arith.floordivsi":
            a, b = args
            return (f"tl.where((({a} % {b}) != 0) & (({a} < 0) != ({b} < 0)), "
                    f"({a} // {b}) - 1, ({a} // {b}))")
        if kind.startswith(_CASTS):
            return self._cast(kind, args[0], rtype, atypes[0])
        if kind in ("math.powf", "math.fpowi"):
            e = lits[1]
            x = args[0]
            if e is not None and float(e) in (1.0, 2.0, 3.0):
                return "(" + " * ".join([x] * int(e)) + ")"
            if isinstance(nodes[0], Const):
                # a block of the exponent's shape: the helper's `1.0 / a` (the sign of a zero
                # base) was Python's on a literal 0.0, ZeroDivisionError (fuzz seed 52 index 765)
                x = f"({x} - tl.zeros_like({args[1]}))"
            return f"_ember_pow({x}, ({args[1]}) * 1.0)"
        if kind == "math.isnan":
            return f"({args[0]} != {args[0]})"
        if kind == "math.trunc":
            return f"tl.where({args[0]} < 0, tl.ceil({args[0]}), tl.floor({args[0]}))"
        if kind == "math.roundeven":
            # From floor(x) and the exact x - floor(x): floor(x + 0.5) rounds the sum first
            # (0.49999997 + 0.5 is 1.0; 2**23 + 1 + 0.5 is 2**23 + 2). A zero keeps x's sign
            # (round(-0.4) is -0.0): x * 0.0, x finite there.
            x = args[0]
            f, d = f"tl.floor({x})", f"({x} - tl.floor({x}))"
            odd = f"(({f} - 2.0 * tl.floor({f} * 0.5)) == 1.0)"
            r = f"({f} + tl.where(({d} > 0.5) | (({d} == 0.5) & {odd}), 1.0, 0.0))"
            return f"tl.where({r} == 0.0, {x} * 0.0, {r})"
        raise UnsupportedOp(f"'{kind}' has no Triton spelling")

    def _cast(self, kind, x, rtype, atype):
        # (a literal was converted in Python already: `fold`; `.to` needs a tensor)
        if rtype not in TYPES or atype not in TYPES:
            raise UnsupportedOp(f"'{kind}' from {atype} to {rtype} has no Triton spelling")
        if kind == "arith.bitcast":
            return f"{x}.to({TYPES[rtype][1]}, bitcast=True)"
        if kind in ("arith.sitofp", "arith.uitofp") and rtype in ("f16", "bf16") and \
                atype not in _EXACT_IN_16_BITS:
            # an integer converted to a 16-bit float is rounded to it (computed in f32: the
            # f32 value rounded once more, as c10's Half(float(x)) / BFloat16(float(x)));
            # int64 MIN to f16 is -inf, 2049 is 2048 (fuzz seed 40 index 665)
            return round_to(self._cast(kind, x, "f32", atype), rtype)
        if kind in ("arith.extui", "arith.uitofp", "arith.index_castui") and atype in _UNSIGNED:
            # narrowed first: Triton may type the value wider (a where of int literals is
            # int32: sign(uint8).to(int32) failed, fuzz seed 12 index 62)
            return (f"{x}.to({TYPES[atype][1]}).to({_UNSIGNED[atype]}, bitcast=True)"
                    f".to({TYPES[rtype][1]})")
        if kind in ("arith.fptosi", "arith.fptoui") and rtype in ("i8", "i16"):
            # Through a wide integer, then wrapped, as eager converts (200.0 -> uint8 200:
            # torch-mlir's fptosi to i8 serves uint8 too); see cpp_emitter.
            wide = "tl.int64" if rtype == "i8" else "tl.int32"
            return f"{x}.to({wide}).to({TYPES[rtype][1]})"
        if TYPES[rtype][1] == TYPES[atype][1]:
            # bf16 -> f32 is free (already computed in fp32); a deliberate rounding to a
            # 16-bit type is kept so that decompositions which round match eager.
            if kind == "arith.truncf" and rtype in ("f16", "bf16") and atype != rtype:
                return round_to(x, rtype)
            return x
        return f"{x}.to({TYPES[rtype][1]})"
