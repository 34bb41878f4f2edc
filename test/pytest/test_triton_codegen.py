"""Triton code generation end to end on a CPU: real torch ops -> torch-mlir -> ember-fuse ->
ember-lower-to-triton; the generated module runs under the Triton interpreter against eager,
and every kernel is compiled ahead of time for CUDA sm_90 and HIP gfx942.

`@triton.jit` picks the interpreter when it decorates (triton.knobs reads TRITON_INTERPRET
then), so the module is executed with the variable set; triton_aot executes its own copy
without it.
"""
import os
import re

import pytest
import torch

triton = pytest.importorskip("triton")

from torch._dynamo.backends.common import aot_autograd  # noqa: E402

from ember.frontend.importer import import_fx, new_context  # noqa: E402
from ember.passes.pipeline import build_pass_manager  # noqa: E402
import triton_aot  # noqa: E402  (test/pytest/triton_aot.py)

PIPELINE = "builtin.module(canonicalize,ember-fuse,ember-lower-to-triton{%s})"


def lower(fn, *args, options="autotune=true"):
    """(source text, [kernel symbols], host `main` op names) of `fn` compiled for Triton."""
    captured = []

    def compiler(gm, example_inputs):
        ctx = new_context()
        module = import_fx(gm, context=ctx)
        with ctx:
            build_pass_manager(PIPELINE % options).run(module.operation)
        captured.append(module)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=aot_autograd(fw_compiler=compiler))(*args)
    module = captured[-1]
    prelude = module.operation.attributes["ember.prelude"].value
    sources, symbols = [], []
    for op in module.body.operations:
        if "ember.source" in op.attributes:
            sources.append(op.attributes["ember.source"].value)
            symbols.append(op.attributes["ember.symbol"].value)
    return prelude + "\n" + "\n".join(sources), symbols, module


def run_interpreted(source, symbol, inputs, out_shapes_dtypes):
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        mod = triton_aot.load_module(source, "ember_triton_interp")
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET")
        else:
            os.environ["TRITON_INTERPRET"] = saved
    outs = [torch.empty(s, dtype=d) for s, d in out_shapes_dtypes]
    getattr(mod, symbol)(*[t.contiguous() for t in inputs], *outs)
    return outs


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def gelu_chain(x):
    return torch.nn.functional.gelu(x * 1.7 + 0.3) * torch.sigmoid(x)


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


CASES = {
    "gelu_chain_f32": (gelu_chain, lambda: (torch.randn(37, 33),), 1e-5),
    "gelu_chain_bf16": (gelu_chain, lambda: (torch.randn(8, 64, dtype=torch.bfloat16),), 1e-2),
    "tanh_gelu": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
                  # torch-mlir spells sqrt(2/pi) as 7.977240e-01 (true: 0.7978846), so the
                  # imported graph itself is ~5e-5 away from eager.
                  lambda: (torch.randn(300),), 1e-4),
    "broadcast_add": (lambda x, y: x + y, lambda: (torch.randn(16, 24), torch.randn(24)), 1e-5),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (torch.randn(12, 100),), 1e-5),
    "softmax_bf16": (lambda x: torch.softmax(x, -1),
                     lambda: (torch.randn(6, 64, dtype=torch.bfloat16),), 1e-2),
    "layer_norm": (layer_norm, lambda: (torch.randn(10, 48), torch.randn(48), torch.randn(48)),
                   1e-5),
    "sum_cols": (lambda x: x.sum(0), lambda: (torch.randn(40, 24),), 1e-5),
    "mean_rows": (lambda x: x.mean(-1), lambda: (torch.randn(9, 70),), 1e-5),
    # A full reduction has no outer space: its store must still be a block store.
    "sum_all": (lambda x: x.sum(), lambda: (torch.randn(7, 33),), 1e-5),
    "mean_all_bf16": (lambda x: (x * x).mean(), lambda: (torch.randn(6, 40, dtype=torch.bfloat16),),
                      1e-2),
    "embedding": (lambda i, w: torch.nn.functional.embedding(i, w) * 2.0,
                  lambda: (torch.randint(0, 10, (4, 6)), torch.randn(10, 16)), 1e-5),
}


def _single_kernel_case(name):
    fn, make, tol = CASES[name]
    torch.manual_seed(0)
    args = make()
    ref = fn(*args)
    source, symbols, module = lower(fn, *args)
    return source, symbols, args, ref, tol


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_matches_eager(name):
    source, symbols, args, ref, tol = _single_kernel_case(name)
    assert len(symbols) == 1, f"expected one fused kernel, got {symbols}"
    (out,) = run_interpreted(source, symbols[0], args, [(ref.shape, ref.dtype)])
    assert rel_err(out, ref) < tol


@pytest.mark.parametrize("name", ["gelu_chain_bf16", "softmax", "layer_norm", "embedding",
                                  "sum_cols", "sum_all"])
def test_aot_compiles_for_cuda_and_hip(name):
    source, symbols, *_ = _single_kernel_case(name)
    results = triton_aot.compile_isolated(source, symbols)
    assert results and not triton_aot.failures(results), results
    for per_target in results.values():
        assert set(per_target) == {"cuda:90", "hip:gfx942"}


def test_looped_reduction_matches_eager():
    x = torch.randn(5, 300)
    source, symbols, _ = lower(lambda t: torch.softmax(t, -1), x,
                              options="max-rblock=64 autotune=false")
    assert "for roff in range(" in source
    (out,) = run_interpreted(source, symbols[0], [x], [(x.shape, x.dtype)])
    assert rel_err(out, torch.softmax(x, -1)) < 1e-5
    results = triton_aot.compile_isolated(source, symbols)
    assert not triton_aot.failures(results), results


def test_looped_full_reduction_matches_eager():
    x = torch.randn(9, 70)
    source, symbols, _ = lower(lambda t: t.sum(), x, options="max-rblock=64 autotune=false")
    assert "for roff in range(" in source and "XBLOCK=1," in source
    (out,) = run_interpreted(source, symbols[0], [x], [((), x.dtype)])
    assert rel_err(out, x.sum()) < 1e-5
    results = triton_aot.compile_isolated(source, symbols)
    assert not triton_aot.failures(results), results


def test_transposed_operand():
    """A transposed read is index arithmetic in the one fused kernel (no copy kernel), and the
    whole compiled graph matches eager (kernel argument order comes from the IR, so the graph
    is run end to end rather than by hand)."""
    x, y = torch.randn(16, 24), torch.randn(24, 16)
    source, symbols, _ = lower(lambda a, b: a + b.t(), x, y)
    assert len(symbols) == 1     # the transpose is fused into the add: no copy kernel
    torch._dynamo.reset()
    out = torch.compile(lambda a, b: a + b.t(), backend="ember",
                        options={"target": "triton"})(x, y)
    assert rel_err(out, x + y.t()) < 1e-5


def test_aot_batch_dedupes_and_reports_errors():
    """compile_sources_isolated (what test_triton_aot.py runs over its graphs):
    a kernel shared by two modules compiles once; a kernel only the real compiler rejects
    (a non-power-of-2 arange, which Python executes fine) is reported, not raised."""
    source, symbols, *_ = _single_kernel_case("broadcast_add")
    bad = source.replace("tl.arange(0, XBLOCK)", "tl.arange(0, XBLOCK - 1)")
    assert bad != source
    results = triton_aot.compile_sources_isolated([source, source, bad], jobs=2)
    assert len(results) == 2, results
    bad_results = triton_aot.failures(results)
    assert list(bad_results) == [f"1:{symbols[0]}_kernel"], results
    assert set(bad_results[f"1:{symbols[0]}_kernel"]) == {"cuda:90", "hip:gfx942"}


def test_constant_mask_count_compiles():
    """cross_entropy with a constant target counts (target != ignore_index), folded to `true`:
    its cast spelled `True.to(tl.int64)`, which neither Triton's compiler nor its interpreter
    accepts (the graph ran eagerly, with a warning; found by test_triton_aot.py). Folded to 1."""
    import torch.nn.functional as F
    import ember

    def f(x):
        return F.cross_entropy(x, torch.tensor([1, 3]))

    x = torch.randn(2, 5)
    torch._dynamo.reset()
    ember.clear_reports()
    out = torch.compile(f, backend="ember", options={"target": "triton"})(x)
    assert [r["status"] for r in ember.last_reports()] == ["compiled"]
    assert rel_err(out, f(x)) < 1e-5


def test_count_of_ones_reduction_compiles(exported_sources, monkeypatch):
    # masked.var without a mask counts its elements as a sum of integer ones: the reduction's
    # operand was the literal `1`, written `(1).to(tl.int64)`, a constexpr without `.to`: the
    # interpreter raised at run time (the graph fell back) and Triton rejected the kernel for
    # sm_90 and gfx942 alike (op_db sweep, fb17). Now `tl.full([], 1, tl.int64)`.
    from conftest import check_fallbacks, ember_compile
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(4, 5, 6)
    f = lambda t: torch.masked.var(t, None)     # noqa: E731
    out = ember_compile(f, "triton")(x)
    assert rel_err(out, f(x)) < 1e-5
    check_fallbacks()
    source = next(s for s in exported_sources if "tl.full([], 1, tl.int64)" in s)
    results = triton_aot.compile_isolated(source)
    assert results and not triton_aot.failures(results), results


def test_bool_literal_cast_compiles(exported_sources, monkeypatch):
    # `isinf` of an integer tensor is the literal False; a reduction's operand cast to int1 was
    # written `(False).to(tl.int1)`, a constexpr without `.to`: the interpreter raised at run
    # time (the graph fell back: fuzz seed 47 index 1395). Now `tl.full([], 0, tl.int1)`.
    from conftest import check_fallbacks, ember_compile
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a = torch.tensor([5, 2, 9, 0], dtype=torch.uint8)
    f = lambda t: (torch.isinf(t).amin(), torch.isinf(t).amax())     # noqa: E731
    out = ember_compile(f, "triton")(a)
    assert [o.item() for o in out] == [o.item() for o in f(a)] == [False, False]
    check_fallbacks()
    source = next(s for s in exported_sources if "tl.full([], 0, tl.int1)" in s)
    results = triton_aot.compile_isolated(source)
    assert results and not triton_aot.failures(results), results


def _launch_lines(source):
    return [ln.strip() for ln in source.splitlines()
            if "@_ember_autotune(configs=" in ln or "_kernel[grid](" in ln]


def test_launch_bound_kernel_gets_one_configuration():
    """A kernel whose whole static iteration space is at most triton_blocks.LAUNCH_BOUND
    elements is written with one configuration (no autotuning: no benchmark, one Triton
    compile), the one with the most programs that the autotuner's pruning would keep; a
    larger one keeps its list; max-autotune keeps its whole search at any size."""
    from ember.passes.triton_blocks import LAUNCH_BOUND, pointwise_configs

    def f(t):
        return torch.relu(t * 2 + 1)

    small = torch.randn(37, 33)                              # 1,221 elements
    source, symbols, _ = lower(f, small)
    lines = _launch_lines(source)
    assert len(lines) == 1 and "XBLOCK=512, num_warps=4" in lines[0], lines
    (out,) = run_interpreted(source, symbols[0], [small], [(small.shape, small.dtype)])
    assert torch.equal(out, f(small))

    large = torch.randn(LAUNCH_BOUND + 7)
    source, _, _ = lower(f, large)
    lines = _launch_lines(source)
    assert len(lines) == 2 and lines[0].count("triton.Config(") == \
        len(pointwise_configs(True, False)) == 3, lines

    source, _, _ = lower(f, small, options="autotune=true max-autotune=true")
    lines = _launch_lines(source)
    assert len(lines) == 2 and lines[0].count("triton.Config(") == \
        len(pointwise_configs(True, True)) == 8, lines


def test_launch_bound_reduction_and_rule():
    """The rule on reductions (the work is outputs x reduced elements) and the choice itself:
    among the configurations that the prelude's `_ember_prune` keeps for those extents, the
    one with the smallest XBLOCK (the list's first between equals)."""
    from ember.passes import triton_blocks as tb
    from ember.passes.triton_prelude import PRELUDE

    # a column sum of 200 rows (looped over rows, 4 configurations): 200 x 96 elements is
    # launch-bound, 200 x 512 is not
    for cols, n in ((96, 1), (512, 4)):
        x = torch.randn(200, cols)
        source, symbols, _ = lower(lambda t: t.sum(0), x)
        lines = _launch_lines(source)
        assert len(lines) == (1 if n == 1 else 2), lines
        assert n == 1 or lines[0].count("triton.Config(") == n, lines
        # launch-bound: the fitting configuration with the most programs (32 columns each)
        assert n > 1 or "XBLOCK=32, RBLOCK=32, num_warps=4" in lines[0], lines
        (out,) = run_interpreted(source, symbols[0], [x], [((cols,), x.dtype)])
        assert rel_err(out, x.sum(0)) < 1e-5

    ns = {}
    exec(PRELUDE.split("def _ember_bench")[0], ns)       # _ember_pow2, _ember_prune
    triton_ = ns["triton"]
    for configs in (tb.pointwise_configs(True, False), tb.column_configs(True, False),
                    tb.looped_configs(True, False), tb.window_configs(None, True, False)):
        tc = [triton_.Config(dict(c), num_warps=w) for c, w in configs]
        for x, r in ((1, 1), (5, 3), (100, 8), (300, 16), (864, 70), (1000, 2000),
                     (4096, 16)):
            numels = {"xnumel": x, "rnumel": r}
            kept = ns["_ember_prune"](tc, numels)
            fit = tb.fitting(configs, numels)
            assert [(c.kwargs, c.num_warps) for c in kept] == [(dict(c), w) for c, w in fit]
            least = min(c[0].get("XBLOCK", 1) for c in fit)
            first_least = [c for c in fit if c[0].get("XBLOCK", 1) == least][:1]
            assert tb.launch_bound_configs(configs, numels, x * r, False) == \
                (first_least if x * r <= tb.LAUNCH_BOUND else configs)
            assert tb.launch_bound_configs(configs, numels, x * r, True) == configs
    big = tb.LAUNCH_BOUND + 1
    assert tb.launch_bound_configs(tb.pointwise_configs(True, False), {"xnumel": big}, big,
                                   False) == tb.pointwise_configs(True, False)
    assert tb.launch_bound_configs(tb.pointwise_configs(True, False), {"xnumel": 8}, None,
                                   False) == tb.pointwise_configs(True, False)


def test_float_remainder_is_exact_fmod(exported_sources, monkeypatch):
    # Triton's float `%` compiles to a - trunc(a / b) * b on a GPU (sm_90: div.rn, cvt.rzi,
    # fma): off by up to a whole divisor where the quotient rounds (beyond 2**24, or next to an
    # integer) and NaN where it overflows, while eager's CUDA kernels call fmodf (exact); the
    # interpreter's `%` is NumPy's fmod, so only a GPU saw it. Now the `_ember_fmod` helper:
    # libdevice's fmod compiled, NumPy's fmod interpreted; a literal operand made a block.
    from conftest import check_fallbacks, ember_compile
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a = torch.tensor([4.0, 1e10, -7.5, 3e38, -0.0, 1e30, 5.0, float("inf")] * 4)
    b = torch.tensor([2.0 ** -128, 2.9e-29, 2.0, 1e-3, 3.0, 3.0, -0.0, 1.5] * 4)
    fns = [lambda x, y: torch.fmod(x, y), lambda x, y: torch.remainder(x, y),
           lambda x, y: x % 0.7, lambda x, y: 1e20 % y,
           lambda x, y: torch.fmod(x.bfloat16(), y.bfloat16())]
    for f in fns:
        out = ember_compile(f, "triton")(a, b)
        # eager's own scalar loop is exact (its vectorized one is NaN where the quotient
        # overflows): the reference is eager one element at a time
        ref = torch.cat([f(a[i:i + 1], b[i:i + 1]) for i in range(len(a))])
        assert torch.equal(out.isnan(), ref.isnan()), (out, ref)
        keep = ~ref.isnan()
        assert torch.equal(out[keep], ref[keep]), (out, ref)
        assert torch.equal(out[keep].signbit(), ref[keep].signbit())
    check_fallbacks()
    sources = [s for s in exported_sources if "_ember_fmod(" in s]
    assert sources and not any(" % " in ln for s in sources for ln in s.splitlines()
                               if "_ember_fmod(" in ln)
    results = triton_aot.compile_sources_isolated(sources)
    assert results and not triton_aot.failures(results), results


def test_rsqrt_and_exp2_keep_subnormals(exported_sources, monkeypatch):
    # tl.rsqrt and tl.exp2 compile to rsqrt.approx.ftz / ex2.approx.ftz on sm_90: subnormal
    # operands and results flush to zero (rsqrt(1e-40) = inf, eager's 1e20; exp2(-140) = 0,
    # eager's 7e-43). The prelude's _ember_rsqrt / _ember_exp2 call libdevice's rsqrtf / exp2f,
    # linked without flush-to-zero, as eager's kernels do; the interpreter's are NumPy's.
    from conftest import check_fallbacks, ember_compile
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.tensor([1e-40, 4.0, 2.0 ** -140, 1e38, 0.5, 3e-39, 9.0, 1.0])
    y = torch.tensor([-140.0, -127.5, 3.0, 0.5, -149.0, -126.0, 10.0, 0.0])
    f = lambda a, b: (torch.rsqrt(a), torch.exp2(b))     # noqa: E731
    out, ref = ember_compile(f, "triton")(x, y), f(x, y)
    for o, r in zip(out, ref):
        assert torch.allclose(o, r, rtol=1e-6, atol=0), (o, r)
    assert out[1][0] > 0 and torch.isfinite(out[0][0])
    check_fallbacks()
    # (torch.exp2 arrives as pow(2, x): `_ember_pow`, libdevice's powf; math.exp2 from MLIR
    # input: the lit test of ember-lower-to-triton)
    sources = [s for s in exported_sources if "_ember_rsqrt(" in s]
    kernels = [k for s in sources     # the kernels' bodies, not the prelude's helpers
               for k in re.findall(r"^def \w+_kernel\(.*?(?=^\S|\Z)", s, re.M | re.S)]
    assert kernels and all("_ember_rsqrt(" in k and "tl.rsqrt(" not in k for k in kernels)
    results = triton_aot.compile_sources_isolated(sources)
    assert results and not triton_aot.failures(results), results


def test_sigmoid_reciprocal_takes_fast_division_in_f32_kernels(exported_sources, monkeypatch):
    # Through the whole pipeline (torch-mlir's own sigmoid and SiLU bodies, not the lit test's
    # hand-written one): an f32 kernel divides a sigmoid's `1 / (1 + exp(y))` with Triton's `/`
    # (kernel_expr `fast_sigmoid`; the GELU-sigmoid chain over 2^28 on an H200: 0.5508 ->
    # 0.5322 ms), a kernel that writes bf16 keeps the correctly rounded helper, and neither
    # graph falls back.
    from conftest import check_fallbacks, ember_compile
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(64, 33) * 6
    f = lambda t: (torch.sigmoid(t), torch.nn.functional.silu(t * 2))     # noqa: E731
    out = ember_compile(f, "triton")(x)
    for o, r in zip(out, f(x)):
        assert rel_err(o, r) < 1e-6
    check_fallbacks()
    (f32,) = exported_sources
    assert len(re.findall(r"= \(1\.0 / t\d+\)", f32)) == 2, f32
    assert "_ember_div(1.0," not in f32
    xb = x.to(torch.bfloat16)
    out = ember_compile(torch.sigmoid, "triton")(xb)
    assert rel_err(out, torch.sigmoid(xb)) < 1e-2
    check_fallbacks()
    bf16 = exported_sources[1]
    assert "_ember_div(1.0," in bf16 and not re.search(r"\(1\.0 / t\d+\)", bf16), bf16
