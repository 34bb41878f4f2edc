"""kernel_ir: index folding on the tree, printing per language (expressions, loop headers,
locals), OpenMP collapse fitting, and the decisions made on the tree: loop flattening, C++
column blocks, reduction identities. (That no generator reads printed code back is checked from
the source by test_architecture.py.)"""
import math

from ember.passes.cpp_lang import CppLang, render as _render
from ember.passes.kernel_ir import (INT, Assign, Const, Decl, Let, Load, Loop, OmpPragma, Op,
                                    Printer, Scope, Store, Var, all_nodes, deps_of, fold_index,
                                    render_loop, render_stmt)
from ember.passes.triton_lang import TritonLang, _is_compare

X = Var("x", frozenset({"x"}))
Y = Var("y", frozenset({"y"}))
N = Var("s3")                # a dynamic size: no loop dependence


def c(v):
    return Const(v, INT)


def test_constants_fold():
    assert fold_index("add", c(3), c(4)) == c(7)
    assert fold_index("mul", c(3), c(4)) == c(12)
    assert fold_index("div", c(-7), c(2)) == c(-4)      # the old text folding's floor division
    assert fold_index("rem", c(7), c(3)) == c(1)
    assert fold_index("min", c(7), c(3)) == c(3)
    assert fold_index("max", c(7), c(3)) == c(7)


def test_identities_vanish():
    assert fold_index("add", c(0), X) is X
    assert fold_index("add", X, c(0)) is X
    assert fold_index("mul", c(1), X) is X
    assert fold_index("mul", X, c(1)) is X
    assert fold_index("div", X, c(1)) is X
    assert fold_index("mul", X, c(0)) == c(0)
    assert fold_index("mul", c(0), X) == c(0)
    assert fold_index("rem", X, c(1)) == c(0)
    # nothing to fold: a node, not text
    e = fold_index("add", X, c(2))
    assert e == Op("idx.add", (X, c(2)), "index", ("index", "index"))


def test_delinearize_round_trip_folds_to_the_index():
    # (X / n) * n + X % n == X, both orders, static and dynamic n
    for n in (c(8), N):
        d, r = fold_index("div", X, n), fold_index("rem", X, n)
        floor = fold_index("mul", d, n)
        assert fold_index("add", floor, r) == X
        assert fold_index("add", r, floor) == X
    # a different divisor does not fold
    d = fold_index("div", X, c(8))
    assert fold_index("add", fold_index("mul", d, c(8)), fold_index("rem", X, c(4))) != X


def test_row_major_offset_of_a_decomposed_index_is_the_index():
    # X decomposed over (a, 4, 8) as (X / 32, X / 8 % 4, X % 8), then linearized row-major:
    # ((i0 * 4 + i1) * 8 + i2) must fold back to X (the distributive rule (P + X/n) * n).
    i2 = fold_index("rem", X, c(8))
    rest = fold_index("div", X, c(8))
    i1 = fold_index("rem", rest, c(4))
    i0 = fold_index("div", rest, c(4))
    off = c(0)
    for i, n in ((i0, c(1)), (i1, c(4)), (i2, c(8))):
        off = fold_index("add", fold_index("mul", off, n), i)
    assert off == X


def test_a_transposed_read_keeps_div_and_rem():
    i1 = fold_index("rem", X, c(8))
    i0 = fold_index("div", X, c(8))
    off = fold_index("add", fold_index("mul", i1, c(5)), i0)     # the transpose's offset
    kinds = {n.kind for n in all_nodes([Let("t", "index", off)]) if isinstance(n, Op)}
    assert {"idx.div", "idx.rem"} <= kinds


def test_deps_follow_the_tree():
    e = fold_index("add", fold_index("mul", X, N), Y)
    assert deps_of(e) == {"x", "y"}
    assert deps_of(Load("in0", e, "f32")) == {"x", "y"}
    assert deps_of(c(1)) == frozenset()


def test_printing_per_language():
    e = fold_index("add", fold_index("mul", fold_index("div", X, c(4)), N), c(1))
    assert Printer(CppLang())(e) == "(((x / 4) * s3) + 1)"
    assert Printer(TritonLang())(e) == "(((x // 4) * s3) + 1)"
    m = fold_index("min", X, c(3))
    assert Printer(CppLang())(m) == "std::min<int64_t>(x, 3)"
    assert Printer(TritonLang())(m) == "tl.minimum(x, 3)"
    # typed constants: an i64 constant is INT64_C in C++, an index literal is bare
    assert Printer(CppLang())(Op("idx.add", (X, Const(5, "i64")), "index")) == "(x + INT64_C(5))"
    show = Printer(CppLang())
    assert render_stmt(Let("t1", "f32", Load("in0", X, "bf16")), show) == \
        "const float t1 = ember_bf16_to_f32(in0[x]);"
    assert render_stmt(Store("out0", X, Var("t1"), "f32"), show) == "out0[x] = t1;"
    assert render_stmt(Assign("acc1", Var("part2"), "+="), show) == "acc1 += part2;"
    # Triton loads carry their tile masks; a bf16 widens by the prelude's _ember_from_bf16
    assert Printer(TritonLang())(Load("in0", X, "bf16", ("xmask",))) == \
        "_ember_from_bf16(tl.load(in0 + x, mask=xmask, other=0))"
    assert Printer(TritonLang())(Load("in0", X, "f16", ("xmask",))) == \
        "tl.load(in0 + x, mask=xmask, other=0).to(tl.float32)"


def test_cpp_integer_division_reads_the_divisor_node():
    show = Printer(CppLang())
    a = Var("a")
    by_const = Op("arith.divsi", (a, Const(4, "i32")), "i32", ("i32", "i32"))
    by_var = Op("arith.divsi", (a, Var("b")), "i32", ("i32", "i32"))
    by_zero = Op("arith.divsi", (a, Const(0, "i32")), "i32", ("i32", "i32"))
    assert show(by_const) == "(int32_t)(a / (int32_t)4)"
    assert show(by_var) == "ember_chk_divsi<int32_t>(a, b)"
    assert show(by_zero) == "ember_chk_divsi<int32_t>(a, (int32_t)0)"


def test_triton_folds_literals_on_the_tree():
    lang = TritonLang()
    two = Const(2.0, "f32")
    assert lang.fold("math.sqrt", (two,), "f32", ["f32"]) == Const(math.sqrt(2.0), "f32")
    assert lang.fold("arith.mulf", (two, Const(3.0, "f32")), "f32", ["f32", "f32"]) == \
        Const(6.0, "f32")
    assert lang.fold("arith.sitofp", (Const(3, INT),), "f32", ["i64"]) == Const(3.0, "f32")
    # a cast of an i1 constant is its value (`True.to(tl.int64)` is rejected by Triton)
    assert lang.fold("arith.extui", (Const(True, "i1"),), "i64", ["i1"]) == Const(1, "i64")
    # not a literal: a variable
    assert lang.fold("math.sqrt", (Var("t"),), "f32", ["f32"]) is None
    # IEEE results for every literal operand, non-finite ones and zero divisors included (a
    # division of two literals was left to Python's `/`: fuzz seed 51 index 618)
    nan, inf, zero = (Const(float(v), "f32") for v in ("nan", "inf", 0.0))
    assert math.isnan(lang.fold("math.exp", (nan,), "f32", ["f32"]).value)
    assert lang.fold("arith.divf", (two, zero), "f32", ["f32"] * 2) == Const(inf.value, "f32")
    assert math.isnan(lang.fold("arith.remf", (two, zero), "f32", ["f32"] * 2).value)
    assert math.isnan(lang.fold("math.sqrt", (Const(-1.0, "f32"),), "f32", ["f32"]).value)
    assert lang.fold("math.exp", (Const(-inf.value, "f32"),), "f32", ["f32"]) == \
        Const(0.0, "f32")
    # a select of two literals has the result's type (int64 `where(c, 2000000000, 1) * 2` wrapped
    # at 32 bits); -0.0 is an expression, converted rather than given to tl.full
    show0 = Printer(lang)
    sel = Op("arith.select", (Var("c"), Const(2000000000, "i64"), Const(1, "i64")), "i64",
             ("i1", "i64", "i64"))
    assert show0(sel) == "tl.where((c) != 0, tl.full([], 2000000000, tl.int64), 1)"
    sel = Op("arith.select", (Var("c"), Const(-0.0, "f64"), Const(1.0, "f64")), "f64",
             ("i1", "f64", "f64"))
    assert show0(sel) == "tl.where((c) != 0, (_ember_neg_zero()).to(tl.float64), 1.0)"
    # pow with a literal exponent picks its spelling from the node
    show = Printer(lang)
    assert show(Op("math.powf", (Var("t"), Const(2.0, "f32")), "f32", ("f32", "f32"))) == "(t * t)"
    # i1 and/or: an operand that is not a comparison is compared with 0
    cmp = Op("arith.cmpf.olt", (Var("a"), Var("b")), "i1", ("f32", "f32"))
    assert _is_compare(cmp) and not _is_compare(Var("m"))
    assert show(Op("arith.andi", (cmp, Var("m")), "i1", ("i1", "i1"))) == "((a < b) & (m != 0))"


def test_collapse_is_fitted_to_the_perfect_nest():
    def nest(invariant_between):
        outer = Scope({"i"}, Loop("i", c(0), Var("n")))
        inner = Scope({"j"}, Loop("j", c(0), c(2)))
        outer.pragmas.append(OmpPragma(parallel=True, collapse=3, work=(Var("n"), c(2)),
                                       min_work=4))
        if invariant_between:
            outer.stmts.append(Let("t1", "f32", Load("in0", Var("i"), "f32")))
        outer.stmts.append(inner)
        inner.stmts.append(Store("out0", Var("j"), Var("t1"), "f32"))
        top = Scope()
        top.stmts.append(outer)
        lines = []
        _render(top, 0, lines, Printer(CppLang()))
        return lines[0]
    assert nest(False) == "#pragma omp parallel for collapse(2) if(n * 2 >= 4)"
    assert nest(True) == "#pragma omp parallel for if(n * 2 >= 4)"
    show = Printer(CppLang())
    p = OmpPragma(parallel=True, simd=True, collapse=2, reductions=(("+", "a"), ("|", "nan1")))
    assert p.render(5, show) == \
        "#pragma omp parallel for simd collapse(2) reduction(+:a) reduction(|:nan1)"
    assert OmpPragma(simd=True).render(1, show) == "#pragma omp simd"


def test_constants_are_equal_only_when_spelled_alike():
    # printing and the value memos key on nodes: -0.0 must not print as 0.0
    assert Const(-0.0, "f32") != Const(0.0, "f32")
    assert Const(True, "i1") != Const(1, "i1")
    assert Const(float("nan"), "f32") == Const(float("nan"), "f32")
    show = Printer(CppLang())
    assert show(Const(0.0, "f32")) == "0.0f" and show(Const(-0.0, "f32")) == "-0.0f"


_KERNEL = """
func.func private @k(%a: tensor<4x8xf32>, %b: tensor<{bshape}xf32>) -> tensor<4x8xf32>
    attributes {{ember.kernel = "pointwise"}} {{
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                         affine_map<(d0, d1) -> ({bmap})>,
                                         affine_map<(d0, d1) -> (d0, d1)>],
                        iterator_types = ["parallel", "parallel"]}}
      ins(%a, %b : tensor<4x8xf32>, tensor<{bshape}xf32>) outs(%e : tensor<4x8xf32>) {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }} -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}}
"""


def _flat_choice(bshape, bmap):
    from torch_mlir import ir

    from ember.dialects.ember import make_context
    from ember.passes.cpp_emitter import _Emitter, _flat_is_clean, emit_kernel
    with make_context():
        m = ir.Module.parse(_KERNEL.format(bshape=bshape, bmap=bmap))
        fn = next(iter(m.body.operations))
        em = _Emitter(fn, "k", 32768, True).build(flat=2)
        return _flat_is_clean(em), emit_kernel(fn, "k")


def test_flattening_is_decided_on_the_tree():
    # both operands contiguous: the flat index reads them directly, one flat loop
    clean, src = _flat_choice("4x8", "d0, d1")
    assert clean
    assert "for (int64_t f1 = 0; f1 < 32; ++f1)" in src and "in1[f1]" in src
    # a transposed operand needs / and % of the flat index: the nested loops are kept
    clean, src = _flat_choice("8x4", "d1, d0")
    assert not clean
    assert "/" not in src and "%" not in src and "f1" not in src


def test_loop_headers_print_from_the_tree():
    cpp, tri = Printer(CppLang()), Printer(TritonLang())
    assert render_loop(Loop("i", c(0), N), cpp) == "for (int64_t i = 0; i < s3; ++i)"
    assert render_loop(Loop("c", c(0), c(300), c(4)), cpp) == \
        "for (int64_t c = 0; c < 300; c += 4)"
    assert render_loop(Loop("v", Var("c", frozenset({"c"})), c(300), span=c(4)), cpp) == \
        "for (int64_t v = c; v < std::min<int64_t>(c + 4, 300); ++v)"
    assert render_loop(Loop("roff", c(0), Var("rnumel"), Var("RBLOCK")), tri) == \
        "for roff in range(0, rnumel, RBLOCK):"
    assert Loop("v", Var("c"), Op("idx.mul", (N, c(2)), "index"), span=c(4)).names() == \
        {"v", "c", "s3"}
    assert render_stmt(Decl("acc1_wide", "f64", Const(0.0, "f32")), cpp) == \
        "double acc1_wide = 0.0f;"
    assert render_stmt(Decl("acc1_v", "bf16", length=64), cpp) == "float acc1_v[64];"


def _column_sum(row_bound):
    """`for j < 128 { float acc = 0; for r < row_bound { acc += in0[r * 128 + j] } out0[j] =
    acc }`: a sum over rows, the inner loop walking down a column."""
    j, r = Var("j", frozenset({"j"})), Var("r", frozenset({"r"}))
    top = Scope({"j"}, Loop("j", c(0), c(128)))
    top.pragmas.append(OmpPragma(parallel=True))
    top.stmts.append(Decl("acc", "f32", Const(0.0, "f32")))
    rows = Scope({"r"}, Loop("r", c(0), row_bound))
    off = Op("idx.add", (Op("idx.mul", (r, c(128)), "index"), j), "index")
    rows.stmts.append(Assign("acc", Load("in0", off, "f32"), "+="))
    top.stmts.append(rows)
    top.stmts.append(Store("out0", j, Var("acc"), "f32"))
    root = Scope()
    root.stmts.append(top)
    return root


def test_column_blocks_decide_on_the_loop_nodes():
    from ember.passes.cpp_column_blocks import block_columns
    show = Printer(CppLang())
    root = _column_sum(c(50))
    assert block_columns(root, show) == 1
    lines = []
    _render(root, 0, lines, show)
    assert "\n".join(lines) == """\
#pragma omp parallel for
for (int64_t j_b = 0; j_b < 128; j_b += 64) {
  float acc_v[64];
  for (int64_t j_l = 0; j_l < 64; ++j_l) {
    const int64_t j = j_b + j_l;
    acc_v[j_l] = 0.0f;
  }
  for (int64_t r = 0; r < 50; ++r) {
    #pragma omp simd
    for (int64_t j_l = 0; j_l < 64; ++j_l) {
      const int64_t j = j_b + j_l;
      acc_v[j_l] += in0[((r * 128) + j)];
    }
  }
  for (int64_t j_l = 0; j_l < 64; ++j_l) {
    const int64_t j = j_b + j_l;
    out0[j] = acc_v[j_l];
  }
}"""
    # a row loop whose bound reads the column variable: not a column-shaped nest
    assert block_columns(_column_sum(Var("j", frozenset({"j"}))), show) == 0


def test_reduction_identity_is_recognized_by_value():
    # an accumulator initialised to the combiner's identity is not combined again
    # (int32 amin's init 2147483647 is the identity spelled (2**31 - 1))
    from ember.passes.triton_combiners import is_identity
    assert is_identity(Const(2147483647, INT), "minsi", "i32")
    assert is_identity(Const(-2147483648, INT), "maxsi", "i32")
    assert not is_identity(Const(-2147483648, INT), "maxsi", "i64")
    assert is_identity(Const(0.0, "f32"), "addf", "f32")
    assert not is_identity(Const(-0.0, "f32"), "addf", "f32")
    assert is_identity(Const(float("-inf"), "f32"), "maximumf", "f32")
    assert is_identity(Const(False, "i1"), "ori", "i1")
    assert not is_identity(Var("t1"), "addf", "f32")


def _chunked_row(inner_stop=65536):
    """`for (c = 0; c < 65536; c += 2048) { float part = 0; for (v = c; v < min(c + 2048,
    inner_stop); ++v) part += in0[v]; acc_wide += part; }`: a blocked sum's row loop."""
    chunk = Scope({"c"}, Loop("c", c(0), c(65536), c(2048)))
    chunk.stmts.append(Decl("part", "f32", Const(0.0, "f32")))
    inner = Scope({"v"}, Loop("v", Var("c", frozenset({"c"})), c(inner_stop), span=c(2048)))
    inner.stmts.append(Assign("part", Load("in0", Var("v", frozenset({"v"})), "f32"), "+="))
    chunk.stmts += [inner, Assign("acc_wide", Var("part"), "+=")]
    return chunk, inner


def test_row_loops_are_found_by_their_loop_nodes():
    from ember.passes.cpp_row_values import _row_loop, _written
    chunk, inner = _chunked_row()
    assert _row_loop(chunk) == (inner, "v", 65536)
    # the chunk's elements must end where the row does: another bound is not the row
    assert _row_loop(_chunked_row(65535)[0]) is None
    flat = Scope({"i"}, Loop("i", c(0), c(300)))
    flat.trip = 300
    assert _row_loop(flat) == (flat, "i", 300)
    # a Decl writes only its own name (not target text that could write anything)
    assert _written(chunk.stmts, set()) == {"part", "acc_wide"}


def test_split_rows_decides_on_the_loop_nodes():
    from ember.passes.cpp_row_split import split_rows
    show = Printer(CppLang())
    rows = Scope({"r"}, Loop("r", c(0), c(3)))
    rows.trip = 3
    rows.pragmas.append(OmpPragma(parallel=True))
    rows.stmts.append(Decl("acc_wide", "f64", Const(0.0, "f32")))
    rows.stmts.append(_chunked_row()[0])
    root = Scope()
    root.stmts.append(rows)
    assert split_rows(root)
    lines = []
    _render(root, 0, lines, show)
    text = "\n".join(lines)
    assert text.startswith("if (ember_split_rows(3)) {\n  for (int64_t r = 0; r < 3; ++r) {")
    assert "    #pragma omp parallel for reduction(+:acc_wide)\n" \
           "    for (int64_t c = 0; c < 65536; c += 2048) {" in text
    assert "}\nelse {\n  #pragma omp parallel for\n  for (int64_t r = 0; r < 3; ++r) {" in text
    # a short row (below SPLIT_MIN_ROW) keeps the one version
    short = Scope({"r"}, Loop("r", c(0), c(3)))
    short.trip = 3
    short.pragmas.append(OmpPragma(parallel=True))
    flat = Scope({"i"}, Loop("i", c(0), c(300)))
    flat.pragmas.append(OmpPragma(simd=True))
    short.stmts.append(flat)
    root = Scope()
    root.stmts.append(short)
    assert not split_rows(root) and root.stmts == [short]
