"""ember-lower-to-cpp numerics: kernels from real torch-mlir imports (the imported @main made
into one kernel func), compiled with g++ -fopenmp and called through the C ABI, vs eager."""
import ctypes
import re
import subprocess

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch_mlir import ir
from torch_mlir.compiler_utils import OutputType
from torch_mlir.fx import stateless_fx_import

from ember.dialects.ember import make_context
from ember.passes.pipeline import build_pass_manager

FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]
DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64, "i32": torch.int32,
          "i1": torch.bool, "bf16": torch.bfloat16, "f16": torch.float16}


def import_kernel(fn, args, kind, name="k"):
    """torch-mlir's linalg import of `fn`, with @main turned into an ember kernel func."""
    texts = []

    def comp(gm, _):
        texts.append(str(stateless_fx_import(gm, output_type=OutputType.LINALG_ON_TENSORS)))
        return gm.forward
    torch._dynamo.reset()
    torch.compile(fn, backend=aot_autograd(fw_compiler=comp))(*args)
    return re.sub(r"func\.func @main\((.*?)\) -> (.*?) \{",
                  lambda m: f'func.func private @{name}({m.group(1)}) -> {m.group(2)} '
                            f'attributes {{ember.kernel = "{kind}"}} {{', texts[0])


def lower(text, pipeline="builtin.module(ember-lower-to-cpp)"):
    with make_context():
        m = ir.Module.parse(text)
        build_pass_manager(pipeline).run(m.operation)
        prelude = ir.StringAttr(m.operation.attributes["ember.prelude"]).value
        kernels = []
        for f in m.body.operations:
            if "ember.source" in f.attributes:
                ft = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
                ins = [(list(ir.RankedTensorType(t).shape), str(ir.RankedTensorType(t).element_type))
                       for t in ft.inputs]
                res = [(list(ir.RankedTensorType(t).shape), str(ir.RankedTensorType(t).element_type))
                       for t in ft.results]
                kernels.append((ir.StringAttr(f.attributes["ember.symbol"]).value,
                                ir.StringAttr(f.attributes["ember.source"]).value, res, ins))
    return prelude, kernels


def build(tmp_path, source, extra=()):
    # A fresh name per build: dlopen of a path already loaded returns the old library.
    n = len(list(tmp_path.glob("*.so")))
    cpp, so = tmp_path / f"k{n}.cpp", tmp_path / f"k{n}.so"
    cpp.write_text(source)
    p = subprocess.run(["g++", *FLAGS, *extra, str(cpp), "-o", str(so)], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr + "\n" + source
    return ctypes.CDLL(str(so)), p.stderr


def run_kernel(lib, symbol, inputs, results, dyn_shapes=None):
    outs = []
    for i, (shape, ety) in enumerate(results):
        shape = dyn_shapes[i] if dyn_shapes else shape
        outs.append(torch.empty(shape, dtype=DTYPES[ety]))
    sizes = [d for t in inputs + outs for d in t.shape]
    sz = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
    ptrs = [ctypes.c_void_p(t.data_ptr()) for t in inputs + outs]
    getattr(lib, symbol)(*ptrs, sz)
    return outs


def match_args(args, ins):
    """The import may reorder arguments: pair IR args with torch args by shape and dtype."""
    left, out = list(args), []
    for shape, ety in ins:
        i = next(i for i, a in enumerate(left) if list(a.shape) == shape and a.dtype == DTYPES[ety])
        out.append(left.pop(i).contiguous())
    return out


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any() or torch.isnan(ref).any()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check(tmp_path, fn, args, kind, tol=1e-5):
    prelude, kernels = lower(import_kernel(fn, args, kind))
    (symbol, src, res, ins), = kernels
    lib, _ = build(tmp_path, prelude + src)
    outs = run_kernel(lib, symbol, match_args(args, ins), res)
    ref = fn(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, ref):
        if r.dtype in (torch.bool, torch.int64, torch.int32):
            assert torch.equal(o, r)
        else:
            assert rel_err(o, r) < tol, (rel_err(o, r), src)
    return src


def _gelu_bwd_and_sum(g, h):
    d = g * (0.5 * (1 + torch.erf(h * 0.7071067811865476))
             + h * torch.exp(-0.5 * h * h) * 0.3989422804014327)
    return d, d.sum(0)


def t(*s, dtype=torch.float32):
    torch.manual_seed(sum(s))
    return torch.randn(*s, dtype=dtype)


CASES = {
    "gelu_sigmoid": (lambda x: torch.nn.functional.gelu(x * 1.7 + 0.3) * torch.sigmoid(x),
                     [t(1 << 16)], "pointwise"),
    "broadcast_add": (lambda x, b: x + b, [t(64, 48), t(48)], "pointwise"),
    "transpose_read": (lambda x, y: x.t() * 2 + y, [t(48, 64), t(64, 48)], "pointwise"),
    "tanh_log1p_expm1": (lambda x: torch.tanh(x) + torch.log1p(x.abs()) + torch.expm1(x * .1)
                         + torch.rsqrt(x.abs() + 1) + torch.pow(x.abs(), 1.5),
                         [t(37, 29)], "pointwise"),
    "max_min_nan": (lambda x, y: torch.maximum(x, y) - torch.minimum(x, y), [t(100), t(100)],
                    "pointwise"),
    "softmax": (lambda x: torch.softmax(x, -1), [t(64, 300)], "reduction"),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), [t(33, 100)], "reduction"),
    "rms_norm": (lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                 [t(40, 96), t(96)], "reduction"),
    "layer_norm": (lambda x, w, b: torch.nn.functional.layer_norm(x, (96,), w, b),
                   [t(40, 96), t(96), t(96)], "reduction"),
    "column_sum": (lambda x: x.sum(0), [t(50, 70)], "reduction"),
    # column blocks (cpp_column_blocks): a bias gradient beside its reshape copy, a layer-norm
    # weight/bias gradient with a fused pointwise output, a column variance (two sweeps)
    "bias_grad": (lambda x: (x.reshape(256, 192) * 2, x.reshape(256, 192).sum(0)),
                  [t(4, 64, 192)], "reduction"),
    "norm_weight_grad": (lambda a, b, w, c: ((a + b) * w, ((a + b) * c).sum((0, 1)),
                                             (a + b).sum((0, 1))),
                         [t(4, 32, 136), t(4, 32, 136), t(136), t(4, 32, 136)], "reduction"),
    "column_var": (lambda x: x.var(0), [t(300, 100)], "reduction"),
    # a GELU backward stored beside its bias gradient (cpp_sweeps: one sweep over the rows)
    "gelu_bias_grad": (lambda x, b, g: _gelu_bwd_and_sum(g, x + b),
                       [t(256, 192) * 2, t(192), t(256, 192).flip(0)], "reduction"),
    # heads of q, k, v gradients gathered into one [seq, batch, 3, heads * head_dim] tensor
    # (cpp_split_loops: the inner dim walks heads outside, a contiguous head_dim inside)
    "heads_gather": (lambda q, k, v: torch.stack([q, k, v]).permute(3, 1, 0, 2, 4).reshape(
        32, 4, 3, 256), [t(4, 4, 32, 64), t(4, 4, 32, 64) * 2, t(4, 4, 32, 64) - 1], "pointwise"),
    "full_sum": (lambda x: x.sum(), [t(300, 500)], "reduction"),
    "mean_keepdim": (lambda x: x.mean(1, keepdim=True), [t(20, 30)], "reduction"),
    "amax_dim0": (lambda x: x.amax(0), [t(20, 30)], "reduction"),
    "var_3d": (lambda x: x.var(-1), [t(4, 5, 60)], "reduction"),
    "batchnorm_infer": (lambda x, m, v, w, b: (x - m[:, None, None]) * torch.rsqrt(
        v[:, None, None] + 1e-5) * w[:, None, None] + b[:, None, None],
                        [t(4, 8, 5, 5), t(8), t(8).abs() + .5, t(8), t(8)], "pointwise"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_numerics(tmp_path, case):
    fn, args, kind = CASES[case]
    check(tmp_path, fn, args, kind)


def test_nan_propagates_through_max(tmp_path):
    x = t(10, 20)
    x[3, 7] = float("nan")
    prelude, ((sym, src, res, _),) = lower(import_kernel(lambda x: x.amax(1), [x], "reduction"))
    lib, _ = build(tmp_path, prelude + src)
    out, = run_kernel(lib, sym, [x], res)
    assert torch.isnan(out[3]) and not torch.isnan(out[:3]).any()
    assert torch.equal(out[:3], x.amax(1)[:3])


def test_gather_embedding(tmp_path):
    idx = torch.tensor([3, 0, 9, -1, 5])
    w = t(10, 16)
    check(tmp_path, lambda i, w: w[i], [idx, w], "pointwise")


def test_integer_and_bool(tmp_path):
    check(tmp_path, lambda x, y: (x > 0) & (y < 1), [t(40), t(40)], "pointwise")
    check(tmp_path, lambda x: (x * 10).to(torch.int64) // 3, [t(40)], "pointwise")


def test_bf16(tmp_path):
    x, y = t(33, 17, dtype=torch.bfloat16), t(17, dtype=torch.bfloat16)
    check(tmp_path, lambda x, y: x * y + 1, [x, y], "pointwise", tol=1e-2)


DYNAMIC = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0, d1) -> (d0)>
func.func private @dyn(%a: tensor<?x?xf32>, %b: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?xf32>)
    attributes {ember.kernel = "reduction"} {
  %c0 = arith.constant 0.0 : f32
  %c0i = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %d0 = tensor.dim %a, %c0i : tensor<?x?xf32>
  %d1 = tensor.dim %a, %c1i : tensor<?x?xf32>
  %e = tensor.empty(%d0, %d1) : tensor<?x?xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<?x?xf32>, tensor<?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<?x?xf32>
  %e1 = tensor.empty(%d0) : tensor<?xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e1 : tensor<?xf32>) -> tensor<?xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]}
      ins(%0 : tensor<?x?xf32>) outs(%f : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %o : f32
    linalg.yield %s : f32
  } -> tensor<?xf32>
  return %0, %1 : tensor<?x?xf32>, tensor<?xf32>
}
"""


def test_dynamic_sizes(tmp_path):
    prelude, ((sym, src, res, _),) = lower(DYNAMIC)
    assert "sizes[0]" in src and "sizes[1]" in src
    lib, _ = build(tmp_path, prelude + src)
    a, b = t(13, 21), t(21)
    o0, o1 = run_kernel(lib, sym, [a, b], res, dyn_shapes=[(13, 21), (13,)])
    assert rel_err(o0, a + b) < 1e-6 and rel_err(o1, (a + b).sum(1)) < 1e-5


def test_pointwise_inner_loop_vectorizes(tmp_path):
    fn, args, kind = CASES["broadcast_add"]
    prelude, ((sym, src, res, _),) = lower(import_kernel(fn, args, kind))
    _, report = build(tmp_path, prelude + src, ["-fopt-info-vec-optimized"])
    assert re.search(r"k\d*\.cpp:\d+:\d+: optimized: loop vectorized", report), report


def test_omp_threshold_and_options():
    fn, args, kind = CASES["broadcast_add"]
    text = import_kernel(fn, args, kind)
    _, ((_, small, _, _),) = lower(text)
    assert "omp parallel" not in small and "omp simd" in small
    _, ((_, par, _, _),) = lower(text, "builtin.module(ember-lower-to-cpp{omp-min-elements=16})")
    assert "#pragma omp parallel for" in par
    _, ((_, novec, _, _),) = lower(text, "builtin.module(ember-lower-to-cpp{vectorize=false})")
    assert "simd" not in novec


# --- vectorizable math (the prelude's ember_exp/log/log1p/expm1/tanh/erf) ------------------

EDGE = [float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-40, -1e-40, 1.4e-45, 1e-30,
        88.7, 88.72, 88.73, 89.0, 100.0, -88.7, -87.3, -100.0, -103.9, -104.0, -150.0, -1e30,
        1e30, 10.0, -10.0, 9.0, -9.0, 4.0, -4.0, 2.0, -2.0, 1.0, -1.0, 0.625, -0.625, 0.5,
        -0.5, 1e-3, -1e-3, 1e-8, -1e-8, -0.999999, -0.5, 3.4e38]
MATH_OPS = {"exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1,
            "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid}


@pytest.mark.parametrize("op", sorted(MATH_OPS))
def test_math_edge_values(tmp_path, op):
    """inf/-inf/NaN/zeros/subnormals/overflow/underflow/saturation agree with torch (NaN where
    torch gives NaN, the same infinities, exact zeros/ones at saturation) and every value is
    within 3 ulp of the float64 result."""
    fn = MATH_OPS[op]
    g = torch.Generator().manual_seed(0)
    dense = torch.cat([torch.randn(4096, generator=g) * s for s in (1e-3, 0.3, 1, 4, 30)])
    x = torch.cat([torch.tensor(EDGE), dense, torch.linspace(-110, 100, 8191)])
    if op in ("log", "log1p"):
        x = torch.cat([x, x.abs() * 1e-3, x.abs() + 1e-30])
    prelude, ((sym, src, res, _),) = lower(import_kernel(fn, [x], "pointwise"))
    assert f"ember_{op if op != 'sigmoid' else 'exp'}(" in src, src
    lib, _ = build(tmp_path, prelude + src)
    out, = run_kernel(lib, sym, [x], res)
    ref, _ = _assert_like_torch_within_3ulp(fn, x, out,
                                            # the import's 1 / (1 + exp(-x)) underflows
                                            # to 0 below -88.7
                                            x > -88.5 if op == "sigmoid" else None)
    # saturation is exact: tanh/erf(+-10) == +-1, exp/sigmoid(-150) == 0, exp(-inf) == 0
    if op in ("tanh", "erf", "sigmoid", "exp"):
        sat = (x == 10) | (x == -10) | (x == -150) | (x == -float("inf"))
        assert torch.equal(out[sat], ref[sat]), (x[sat], out[sat], ref[sat])


def _assert_like_torch_within_3ulp(fn, x, out, where=None):
    """`out` (a kernel's fn(x)) has torch's NaNs and infinities, and is within 3 ulp of the
    float64 result wherever that and torch's are finite (and `where` holds). Returns
    (torch's float32 result, the float64 one)."""
    ref = fn(x)
    assert torch.equal(torch.isnan(out), torch.isnan(ref)), x[torch.isnan(out) != torch.isnan(ref)]
    inf = torch.isinf(ref)
    assert torch.equal(out[inf], ref[inf])
    exact = fn(x.double())
    fin = torch.isfinite(exact) & torch.isfinite(ref)
    if where is not None:
        fin &= where
    rf = exact[fin].float().abs()
    ulp = (torch.nextafter(rf, torch.tensor(float("inf"))) - rf).double()
    err = (out[fin].double() - exact[fin]).abs() / ulp
    assert err.max() <= 3, (err.max().item(), x[fin][err.argmax()].item())
    return ref, exact


def _float_sweep(step_bits: int) -> torch.Tensor:
    """Floats at every 2^step_bits-th bit pattern of both signs (zeros, subnormals, normals up
    to the largest, infinities and NaNs), plus the edge values."""
    bits = torch.arange(0, 1 << 31, 1 << step_bits, dtype=torch.int64)
    bits = torch.cat([bits, bits + 1, torch.tensor([0x7f7fffff, 0x7f800000, 0x7fc00000])])
    pos = bits.to(torch.int32).view(torch.float32)
    return torch.cat([pos, -pos, torch.tensor(EDGE)])


@pytest.mark.parametrize("op", ["erf", "exp", "tanh", "log"])
def test_math_dense_sweep(tmp_path, op):
    """A sweep over the whole float range (every 2048th bit pattern, both signs: ~2.1M values,
    subnormals, tails, infinities, NaNs and -0.0 included) and a dense grid where the
    approximations switch branches: within 3 ulp of float64, the same NaNs and infinities as
    torch, bit-equal to torch (the sign of zero included) where the exact result is 0 or +-1
    beyond a rounding."""
    fn = MATH_OPS[op]
    cuts = {"erf": (0.875, 3.925), "exp": (-87.3, 88.7), "tanh": (0.625, 9.0),
            "log": (0.7071, 1.0)}[op]
    near = torch.cat([torch.linspace(c * 0.98, c * 1.02, 20001) for c in cuts])
    x = torch.cat([_float_sweep(11), near, -near])
    prelude, ((sym, src, res, _),) = lower(import_kernel(fn, [x], "pointwise"))
    assert f"ember_{op}(" in src, src
    lib, _ = build(tmp_path, prelude + src)
    out, = run_kernel(lib, sym, [x], res)
    ref, exact = _assert_like_torch_within_3ulp(fn, x, out)
    # Exact where the result is clearly 0 or +-1 (not within a rounding of the midpoint).
    special = (exact.abs() < 2.0 ** -151) | ((1 - exact.abs()).abs() < 2.0 ** -27)
    assert torch.equal(out[special], ref[special]), x[special][out[special] != ref[special]]
    assert torch.equal(torch.signbit(out[special]), torch.signbit(ref[special]))


def _simd_loops_vectorized(source: str) -> list:
    """(line, vectorized?) for every loop under a `simd` pragma, from gcc's report."""
    from ember.runtime.cpp_build import vectorization_report
    report = vectorization_report(source)
    hits = {int(m) for m in re.findall(r"k\.cpp:(\d+):\d+: optimized: loop vectorized", report)}
    lines = source.split("\n")
    out = []
    for i, line in enumerate(lines):
        if line.strip().startswith("#pragma omp") and "simd" in line:
            depth, end = 0, i + 1
            for j in range(i + 1, len(lines)):
                depth += lines[j].count("{") - lines[j].count("}")
                if depth <= 0:
                    end = j
                    break
            out.append((i + 2, any(i + 1 <= h - 1 <= end for h in hits)))
    return out


@pytest.mark.parametrize("case", ["gelu_sigmoid", "softmax", "layer_norm", "log_softmax",
                                  "batchnorm_infer", "bias_grad", "norm_weight_grad", "rms_norm",
                                  "gelu_bias_grad", "heads_gather"])
def test_bench_kernels_vectorize(case):
    """The benchmark's kernels (gelu/sigmoid chain, softmax, layer_norm) and the other math
    kernels: every simd loop (element loops and row reductions) is vectorized by gcc."""
    fn, args, kind = CASES[case]
    prelude, ((_, src, _, _),) = lower(import_kernel(fn, args, kind))
    loops = _simd_loops_vectorized(prelude + src)
    assert loops and all(ok for _, ok in loops), (loops, src)
    assert "std::exp(" not in src and "std::erf(" not in src and "std::tanh(" not in src


def test_pointwise_flattening():
    """All-contiguous pointwise kernels run one loop over the flattened space; a per-channel
    broadcast flattens the trailing (H, W) dims only; a broadcast of the last dim keeps the
    nested loops (no div/mod in the inner loop)."""
    fn = lambda x, y: torch.exp(x) * y  # noqa: E731
    _, ((_, src, _, _),) = lower(import_kernel(fn, [t(7, 3, 5), t(7, 3, 5)], "pointwise"))
    assert re.search(r"for \(int64_t (f\d+) = 0; \1 < 105; \+\+\1\)", src), src
    assert "/" not in src.split("for (")[1] and "%" not in src, src
    _, ((_, bn, _, _),) = lower(import_kernel(*CASES["batchnorm_infer"][:2], "pointwise"))
    assert re.search(r"#pragma omp simd\n\s*for \(int64_t (f\d+) = 0; \1 < 25;", bn), bn
    assert "%" not in bn, bn
    _, ((_, ba, _, _),) = lower(import_kernel(*CASES["broadcast_add"][:2], "pointwise"))
    assert "< 48;" in ba and "%" not in ba, ba


def test_flattened_numerics(tmp_path):
    check(tmp_path, lambda x, y: torch.exp(x) * y + torch.erf(x), [t(7, 3, 5), t(7, 3, 5)],
          "pointwise")
    check(tmp_path, lambda x, b: torch.tanh(x + b), [t(256, 3, 64), t(3, 1)], "pointwise")


def test_column_reductions_walk_rows_outside(tmp_path):
    """A reduction over rows of a row-major input (bias / norm-weight gradients) runs in column
    blocks: rows outside, a contiguous simd loop over the block's columns inside, one
    accumulator per column; with a dynamic column count and a block that does not divide it,
    the last block is partial. Agrees with torch."""
    for case in ("column_sum", "bias_grad", "norm_weight_grad", "column_var"):
        src = check(tmp_path, *CASES[case])
        assert re.search(r"for \(int64_t (i\d+_\d+_b) = 0; \1 < \d+; \1 \+= \d+\)", src), src
        assert re.search(r"acc\d+_v\[i\d+_\d+_l\] = t\d+;", src), src
    dyn = DYNAMIC.replace('["parallel", "reduction"]', '["reduction", "parallel"]').replace(
        "#map2 = affine_map<(d0, d1) -> (d0)>", "#map2 = affine_map<(d0, d1) -> (d1)>")
    prelude, ((sym, src, res, _),) = lower(dyn)
    assert "_b += 64" in src and "std::min<int64_t>(64" in src, src
    lib, _ = build(tmp_path, prelude + src)
    a, b = t(13, 150), t(150)
    o0, o1 = run_kernel(lib, sym, [a, b], res, dyn_shapes=[(13, 150), (150,)])
    assert rel_err(o0, a + b) < 1e-6 and rel_err(o1, (a + b).sum(0)) < 1e-6


def test_column_sweeps_walk_rows_once(tmp_path):
    """cpp_sweeps: in a column-block kernel, the sweep that stores a pointwise value and the
    sweeps that sum values down the columns are one loop nest over the rows, each value computed
    once (the GELU backward's erf and exp, a layer-norm backward's `a + b`); a sweep that reads
    an earlier sweep's result (a variance after its mean) stays a sweep of its own. All agree
    with torch."""
    rows = re.compile(r"for \(int64_t (i\d+_\d+) = 0; \1 < 256; \+\+\1\)")
    src = check(tmp_path, *CASES["gelu_bias_grad"])
    assert len(rows.findall(src)) == 1, src
    assert src.count("ember_erf(") == 1 and src.count("ember_exp(") == 1, src
    assert re.search(r"out0\[[^]]*\] = t\d+;\n\s*acc\d+_v\[i\d+_\d+_l\] = t\d+;", src), src
    src = check(tmp_path, *CASES["norm_weight_grad"])
    assert len(re.findall(r"for \(int64_t (i\d+_\d+) = 0; \1 < 32; \+\+\1\)", src)) == 1, src
    assert src.count("(x1 + x2)") == 1, src
    src = check(tmp_path, *CASES["column_var"])
    assert len(re.findall(r"for \(int64_t (i\d+_\d+) = 0; \1 < 300; \+\+\1\)", src)) == 2, src


def test_column_sums_walk_row_chunks(tmp_path):
    """cpp_row_chunks: a GELU backward stored beside its bias gradient, and a layer-norm
    weight/bias gradient over [B, S, C] beside its output, over enough rows walk fixed chunks of
    rows in memory order (a parallel loop over a constant count of chunks, a simd loop over all
    the columns inside, the sums into per-chunk partials in ember_scratch), then add the
    partials in chunk order per column (a column-block loop over the chunks). The same values as
    torch; the chunk count is a constant of the source (results do not depend on the threads).
    Below MIN_ELEMENTS the column blocks stay (test_column_reductions_walk_rows_outside)."""
    src = check(tmp_path, lambda x, b, g: _gelu_bwd_and_sum(g, x + b),
                [t(512, 384) * 2, t(384), t(512, 384).flip(0)], "reduction")
    assert "ember_scratch(" in src and "omp_get_num_threads" not in src, src
    assert re.search(r"#pragma omp parallel for\n\s*for \(int64_t (i\d+_\d+_c) = 0; \1 < 16; "
                     r"\+\+\1\)", src), src
    # rows of a chunk in order, all 384 columns inside, contiguous
    assert re.search(r"for \(int64_t (i\d+_\d+) = \(i\d+_\d+_c \* 32\); \1 < std::min<int64_t>"
                     r"\(\(i\d+_\d+_c \* 32\) \+ 32, 512\); \+\+\1\) \{\n\s*#pragma omp simd\n"
                     r"\s*for \(int64_t (i\d+_\d+) = 0; \2 < 384; \+\+\2\)", src), src
    assert src.count("ember_erf(") == 1, src
    # the combining loop: column blocks over the 16 chunks' partial sums
    assert re.search(r"acc\d+_sum = \(acc\d+_v\[i\d+_\d+_l\] \+ acc\d+_p\[", src), src
    src = check(tmp_path, lambda a, b, w, c: ((a + b) * w, ((a + b) * c).sum((0, 1)),
                                              (a + b).sum((0, 1))),
                [t(4, 128, 136), t(4, 128, 136), t(136), t(4, 128, 136)], "reduction")
    assert src.count("ember_scratch(") == 1 and "_c < 4;" in src, src


def test_inner_loop_split_at_head_dim(tmp_path):
    """cpp_split_loops: a pointwise inner loop whose operands are read at `c / 64` and `c % 64`
    (heads * head_dim) becomes a loop over the heads around a simd loop over head_dim, whose
    reads are contiguous (no division left in the kernel); the same values as torch. A read at
    `c / 8` (a run shorter than a vector) keeps its loop."""
    src = check(tmp_path, *CASES["heads_gather"])
    assert re.search(r"for \(int64_t (i\d+_\d+_h) = 0; \1 < 4; \+\+\1\) \{\n\s*"
                     r"#pragma omp simd\n\s*for \(int64_t (i\d+_\d+_l) = 0; \2 < 64;", src), src
    assert "/" not in src and "%" not in src, src
    src = check(tmp_path, lambda x: x.permute(2, 0, 1, 3).reshape(16, 4, 32) * 2,
                [t(4, 4, 16, 8)], "pointwise")
    assert "_h = 0" not in src and "/ 8)" in src, src


def test_softmax_keeps_row_of_exp(tmp_path):
    """Reduce-then-broadcast: the output loop of softmax reads the exp(x - max) that the sum
    loop computed instead of computing it again: from a row on the stack, or for a row longer
    than ROW_CACHE_MAX (its sum blocked) from the output element, which the sum loop stored
    first. Both agree with torch, NaN and inf rows included."""
    from ember.passes.cpp_row_values import ROW_CACHE_MAX
    for cols, on_stack in ((300, True), (ROW_CACHE_MAX + 8, False)):
        x = t(8, cols) * 4
        x[1, 5], x[2, 7], x[3, :] = float("nan"), float("inf"), -float("inf")
        prelude, ((sym, src, res, _),) = lower(import_kernel(lambda a: torch.softmax(a, -1),
                                                              [x], "reduction"))
        # once in each version of the row loop (cpp_row_split adds one for long rows)
        assert src.count("ember_exp(") == 1 + ("ember_split_rows" in src), src
        assert ("row_" in src) == on_stack
        if not on_stack:    # stored by the sum loop, read back by the output loop
            assert re.search(r"out0\[[^]]*\] = t\d+;\n.*\n.*part", src), src
            assert re.search(r"= out0\[", src), src
        lib, _ = build(tmp_path, prelude + src)
        out, = run_kernel(lib, sym, [x], res)
        ref = torch.softmax(x, -1)
        assert torch.equal(torch.isnan(out), torch.isnan(ref))
        ok = ~torch.isnan(ref)
        assert rel_err(out[ok], ref[ok]) < (1e-6 if on_stack else 1e-5), cols


def test_softmax_multiplies_by_reciprocal(tmp_path):
    """f32 softmax's `e / sum(e)` (e = exp(x - max(x)), so every sum is at least 1) is
    `e * (1 / sum)`: one divide a row, as eager's CPU softmax computes it (SoftMaxKernel.cpp),
    over the last dim or another, bf16 included; a 1024-column row's sum loop, which keeps
    its exps in a row, sums in lanes (cpp_lane_sums). Divisions the rule does not prove safe keep
    their per-element divide: by another value's sum, by a sum of exps without the max
    shift (its sum may underflow and 1 / sum overflow), in f64."""
    x = t(16, 300) * 4
    x[1, 5], x[2, 7], x[3, :] = float("nan"), float("inf"), -float("inf")
    wide = t(8, 1024) * 4      # 1024 columns: the sum loop keeps its row and sums in lanes
    wide[1, 5], wide[2, 7], wide[3, :] = float("nan"), float("inf"), -float("inf")
    for fn, args, tol in ((lambda a: torch.softmax(a, -1), [x], 1e-6),
                          (lambda a: torch.softmax(a, -1), [wide], 1e-6),
                          (lambda a: torch.softmax(a, 0), [x[:, :40].contiguous()], 1e-6),
                          (lambda a: torch.softmax(a, -1), [x.bfloat16()], 1e-2)):
        prelude, ((sym, src, res, _),) = lower(import_kernel(fn, args, "reduction"))
        assert re.search(r"const float t\d+ = \(1\.0f / acc\d+\);", src), src
        assert not re.search(r"\(t\d+ / acc\d+\)", src), src
        assert ("_l[2 * EMBER_VEC_F32]" in src) == (args[0] is wide), src
        lib, _ = build(tmp_path, prelude + src)
        out, = run_kernel(lib, sym, args, res)
        ref = fn(*args)
        assert torch.equal(torch.isnan(out), torch.isnan(ref))
        ok = ~torch.isnan(ref)
        assert rel_err(out[ok].float(), ref[ok].float()) < tol
    y = t(16, 77).abs() + 1
    for fn, args in ((lambda a, b: a / b.sum(-1, keepdim=True), [x, y]),
                     (lambda a: a.exp() / a.exp().sum(-1, keepdim=True), [y]),
                     (lambda a: torch.softmax(a, -1), [x.double()])):
        prelude, ((sym, src, res, ins),) = lower(import_kernel(fn, args, "reduction"))
        assert re.search(r"\(\w+ / acc\d+\)", src), src
        lib, _ = build(tmp_path, prelude + src)
        out, = run_kernel(lib, sym, match_args(args, ins), res)
        ref = fn(*args)
        ok = torch.isfinite(ref)
        assert torch.equal(out[~ok].nan_to_num(), ref[~ok].nan_to_num())
        assert rel_err(out[ok], ref[ok]) < 1e-6


@pytest.mark.parametrize("case", ["softmax", "layer_norm", "rms_norm"])
def test_few_rows_split_across_threads(tmp_path, case):
    """cpp_row_split: 3 long rows get a second version of the row loop, each row split across
    the threads (`parallel for simd` with the row's reductions; the blocked sum's chunks in
    parallel), taken when the rows do not spread evenly over the threads (2 threads: split;
    1 or 3: a row a thread). Every thread count agrees with torch, a NaN row included."""
    n = 20000
    fn, _, kind = CASES[case]
    args = [t(3, n) * 3] + [t(n) for _ in range(case.count("_norm") + (case == "layer_norm"))]
    args[0][1, 5] = float("nan")
    prelude, ((sym, src, res, ins),) = lower(import_kernel(
        {"softmax": fn, "rms_norm": fn,
         "layer_norm": lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b)}[case],
        args, kind))
    assert "if (ember_split_rows(3))" in src, src
    assert re.search(r"#pragma omp parallel for (simd )?reduction\(", src), src
    assert "#pragma omp parallel for\n" in src, src        # the version with a row a thread
    lib, _ = build(tmp_path, prelude + src)
    ref = {"layer_norm": lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b)}.get(
        case, fn)(*args)
    threads = torch.get_num_threads()
    try:
        for k in (1, 2, 3):
            torch.set_num_threads(k)
            out, = run_kernel(lib, sym, match_args(args, ins), res)
            assert torch.equal(torch.isnan(out), torch.isnan(ref)), k
            ok = ~torch.isnan(ref)
            assert rel_err(out[ok], ref[ok]) < 1e-5, (k, case)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("cols", [1024, 100])
def test_row_scalars_recomputed_per_vector(tmp_path, monkeypatch, cols):
    """cpp_row_scalars: rms_norm's output loop (the row's second pass, after its one reduction
    loop) walks one SIMD vector a chunk, each chunk recomputing rsqrt(mean + eps) from an opaque
    copy of the row's sum (a row that 16 divides: the chunk's loop runs one vector's lanes;
    else the last chunk is cut at the row's end). The values are bit for bit those of the
    kernel without the rewrite, and eager's, NaN and inf rows included. layer_norm (two
    reduction loops) and log_softmax (a log of the sum) keep the scalars once a row."""
    import ember.passes.cpp_emitter as emitter
    fn = CASES["rms_norm"][0]
    x, w = t(40, cols) * 3, t(cols)
    x[1, 5], x[2, 7], x[3, :] = float("nan"), float("inf"), 0.0
    prelude, ((sym, src, res, ins),) = lower(import_kernel(fn, [x, w], "reduction"))
    m = re.search(r"for \(int64_t (\w+)_c = 0; \1_c < %d; \1_c \+= EMBER_ROW_CHUNK\(%d\)\) \{\n"
                  r"\s*const float (acc\d+)_v = ember_opaque\(\2\);\n"
                  r"(\s*const float t\d+ = .*\n)*?\s*const float t\d+ = \(float\)\(1 / std::sqrt"
                  % (cols, cols), src)
    assert m, src
    chunk = f"EMBER_ROW_CHUNK({cols})"
    lanes = (f"for (int64_t {m.group(1)}_o = 0; {m.group(1)}_o < {chunk};" if cols % 16 == 0
             else f"std::min<int64_t>({m.group(1)}_c + {chunk}, {cols})")
    assert lanes in src, src
    assert src.count("std::sqrt(") == 2, src          # once a row (unused: dropped) and a chunk
    monkeypatch.setattr(emitter, "recompute_row_scalars", lambda root: 0)
    _, ((sym0, src0, _, _),) = lower(import_kernel(fn, [x, w], "reduction"))
    assert "ember_opaque(acc" not in src0
    lib, _ = build(tmp_path, prelude + src)
    lib0, _ = build(tmp_path, prelude + src0)
    args = match_args([x, w], ins)
    out, = run_kernel(lib, sym, args, res)
    out0, = run_kernel(lib0, sym0, args, res)
    ref = fn(x, w)
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(out), nan) and torch.equal(torch.isnan(out0), nan)
    assert torch.equal(out[~nan], out0[~nan])
    assert rel_err(out[~nan], ref[~nan]) < 1e-5
    monkeypatch.undo()
    for case in ("layer_norm", "log_softmax"):
        f, a, kind = CASES[case]
        _, ((_, other, _, _),) = lower(import_kernel(f, a, kind))
        # (their row sums do walk chunks of two vectors: cpp_lane_sums, `+= (2 * ...)`)
        assert "ember_opaque(" not in other and "+= EMBER_VEC_F32)" not in other, other
