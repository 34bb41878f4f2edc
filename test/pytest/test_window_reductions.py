"""Small window reductions over strided elements (channels-last pooling windows, issue 12): the
Triton lowering writes them 1-D over the outputs with the window an unrolled
`tl.static_range` (C fastest: coalesced, vector loads along C), the C++ lowering runs the window
inside column blocks of C; both combine in window order (kh, then kw: ATen's), so max pooling
(NaN included) and f32 average pooling give eager's bits. The lit test
test/passes/ember-lower-to-triton-windows.mlir pins the code shapes."""
import os
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember  # noqa: F401
from conftest import check_fallbacks, clear_reports

C = 8


class Pools(nn.Module):
    """conv -> ReLU (+ a NaN where `poison` has one) -> pools -> conv: each pool is a window
    reduction over the NHWC buffer between two channels-last convolutions."""

    def __init__(self, avg: bool):
        super().__init__()
        self.avg = avg
        self.conv1 = nn.Conv2d(3, C, 3)
        self.conv2 = nn.Conv2d(C, C, 1)

    def forward(self, x, poison):
        y = torch.relu(self.conv1(x)) + poison
        outs = self.pools(y)
        return [self.conv2(o) for o in outs] + outs + [y]

    def pools(self, y):
        outs = [F.max_pool2d(y, 3, 2, 1),                      # padding
                F.max_pool2d(y, 3, 2, 1, ceil_mode=True),      # a partial last window
                F.max_pool2d(y, 2, 1, 0, dilation=2)]          # dilation
        if self.avg:
            outs += [F.avg_pool2d(y, 3, 2, 1),                 # padding counted
                     F.avg_pool2d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False)]
        return outs


def _same_bits(out, ref) -> bool:
    return torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.nan_to_num(), ref.nan_to_num())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pools_match_eager_bitwise(target, device, dtype, exported_sources):
    torch.manual_seed(0)
    avg = dtype == torch.float32    # bf16 average pooling stays eager's library call
    model = Pools(avg).to(device, dtype)
    x = torch.randn(2, 3, 12, 12, device=device, dtype=dtype)
    poison = torch.zeros(1, C, 10, 10, device=device, dtype=dtype)
    poison[0, 3, 4, 5] = float("nan")       # a NaN inside several windows of channel 3
    torch._dynamo.reset()
    clear_reports()
    f = torch.compile(model, backend="ember", options={"target": target, "channels_last": True})
    with torch.no_grad():
        outs = f(x, poison)
        # eager's pools of ember's own pooled input: the convolution before them runs
        # channels-last in ember and NCHW in eager, and on a GPU cuDNN's algorithms (TF32 for
        # f32) differ per layout, so the pools' inputs would differ in their last bits
        refs = model.pools(outs[-1])
    check_fallbacks()
    n = len(refs)
    for i, (o, r) in enumerate(zip(outs[n:2 * n], refs)):
        assert o.isnan().any(), f"pool {i}: the NaN did not propagate"
        assert _same_bits(o, r), f"pool {i}: differs from eager's ({dtype})"
    if target == "triton":
        # every reduction of the graph is a pooling window: unrolled, none a 2-D tile (a max
        # and an average pooling of one window share a kernel and its loop: 3 windows)
        jit = [k for src in exported_sources for k in src.split("@triton.jit")[1:]]
        assert sum(k.count("tl.static_range(") for k in jit) == 3, jit
        assert not any("RBLOCK: tl.constexpr" in k for k in jit), jit


STEM = """
#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>
#kern = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#out = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
func.func private @stem_pool(%arg0: tensor<32x112x112x64xbf16>) -> tensor<32x56x56x64xbf16>
    attributes {ember.kernel = "reduction", ember.ops = ["pad", "amax"]} {
  %cst = arith.constant 0xFF80 : bf16
  %padded = tensor.pad %arg0 low[0, 1, 1, 0] high[0, 0, 0, 0] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : bf16
  } : tensor<32x112x112x64xbf16> to tensor<32x113x113x64xbf16>
  %0 = tensor.empty() : tensor<3x3xbf16>
  %1 = tensor.empty() : tensor<32x56x56x64xbf16>
  %2 = linalg.fill ins(%cst : bf16) outs(%1 : tensor<32x56x56x64xbf16>) -> tensor<32x56x56x64xbf16>
  %3 = linalg.generic {indexing_maps = [#win, #kern, #out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%padded, %0 : tensor<32x113x113x64xbf16>, tensor<3x3xbf16>) outs(%2 : tensor<32x56x56x64xbf16>) {
  ^bb0(%in: bf16, %k: bf16, %o: bf16):
    %4 = arith.maximumf %in, %o : bf16
    linalg.yield %4 : bf16
  } -> tensor<32x56x56x64xbf16>
  return %3 : tensor<32x56x56x64xbf16>
}
"""


def test_stem_pool_loads_are_vectors_on_sm90():
    """resnet's stem max pool (3x3/2 over [32, 112, 112, 64] bf16): in its first configuration
    (XBLOCK=1024, 4 warps: 8 channels a thread) each window element is one 16-byte load a
    thread on sm_90 (with the pointer and size divisibility Triton's JIT specializes on), and
    the kernel builds for gfx942."""
    if os.environ.get("EMBER_TEST_AOT", "1") == "0":
        pytest.skip("EMBER_TEST_AOT=0")
    import triton_aot
    prelude, source = _lower(STEM)
    assert "tl.static_range(9)" in source and "RBLOCK" not in source, source
    assert "{'XBLOCK': 1024}, 4)]" in source, source     # the AOT (first) configuration
    results = triton_aot.compile_isolated(prelude + "\n" + source, ["stem_pool"], asm="ptx",
                                          divisible=True)
    (per_target,) = results.values()
    assert set(per_target) == {"cuda:90", "hip:gfx942"}, per_target
    # (asm="ptx": a kernel that built is reported by that stage's text, HIP's has none)
    assert per_target["hip:gfx942"] == "no ptx produced", per_target["hip:gfx942"][:2000]
    loads = re.findall(r"ld\.global(?:\.\w+)*", per_target["cuda:90"])
    assert loads == ["ld.global.v4.b32"] * 9, (loads, per_target["cuda:90"][:2000])


POOL_INDICES = """
#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>
#kern = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#out = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
func.func private @pool_indices(%arg0: tensor<2x8x8x16xf32>) -> (tensor<2x4x4x16xf32>, tensor<2x4x4x16xi64>)
    attributes {ember.kernel = "reduction", ember.ops = ["pad", "max_pool2d_with_indices"]} {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0 : i64
  %padded = tensor.pad %arg0 low[0, 1, 1, 0] high[0, 0, 0, 0] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %ninf : f32
  } : tensor<2x8x8x16xf32> to tensor<2x9x9x16xf32>
  %0 = tensor.empty() : tensor<3x3xf32>
  %1 = tensor.empty() : tensor<2x4x4x16xf32>
  %2 = linalg.fill ins(%ninf : f32) outs(%1 : tensor<2x4x4x16xf32>) -> tensor<2x4x4x16xf32>
  %3 = tensor.empty() : tensor<2x4x4x16xi64>
  %4 = linalg.fill ins(%zero : i64) outs(%3 : tensor<2x4x4x16xi64>) -> tensor<2x4x4x16xi64>
  %5:2 = linalg.generic {indexing_maps = [#win, #kern, #out, #out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%padded, %0 : tensor<2x9x9x16xf32>, tensor<3x3xf32>) outs(%2, %4 : tensor<2x4x4x16xf32>, tensor<2x4x4x16xi64>) {
  ^bb0(%in: f32, %k: f32, %v: f32, %i: i64):
    %oh = linalg.index 1 : index
    %ow = linalg.index 2 : index
    %kh = linalg.index 4 : index
    %kw = linalg.index 5 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c8 = arith.constant 8 : index
    %h0 = arith.muli %oh, %c2 : index
    %h1 = arith.addi %h0, %kh : index
    %h = arith.subi %h1, %c1 : index
    %w0 = arith.muli %ow, %c2 : index
    %w1 = arith.addi %w0, %kw : index
    %w = arith.subi %w1, %c1 : index
    %hw0 = arith.muli %h, %c8 : index
    %hw = arith.addi %hw0, %w : index
    %idx = arith.index_cast %hw : index to i64
    %gt = arith.cmpf ogt, %in, %v : f32
    %nan = arith.cmpf uno, %in, %in : f32
    %take = arith.ori %gt, %nan : i1
    %nv = arith.select %take, %in, %v : f32
    %ni = arith.select %take, %idx, %i : i64
    linalg.yield %nv, %ni : f32, i64
  } -> (tensor<2x4x4x16xf32>, tensor<2x4x4x16xi64>)
  return %5#0, %5#1 : tensor<2x4x4x16xf32>, tensor<2x4x4x16xi64>
}
"""


def _lower(text: str) -> tuple[str, str]:
    """(prelude, kernel source) of the one kernel func in `text` lowered to Triton."""
    from ember.frontend.importer import new_context
    from ember.passes.pipeline import build_pass_manager
    from torch_mlir import ir
    with new_context():
        module = ir.Module.parse(text)
        build_pass_manager("builtin.module(ember-lower-to-triton)").run(module.operation)
        (fn,) = list(module.body.operations)
        return (module.operation.attributes["ember.prelude"].value,
                fn.attributes["ember.source"].value)


def test_window_fold_of_values_and_indices_is_atens():
    """A window reduction with a general body (max_pool2d_with_indices' value and index, the
    index computed from linalg.index, `take = v > max | isnan(v)`) is folded in window order
    as ATen's kernel loops: the first index of a tied max, the last NaN's index. (The 2-D tile
    form has no general bodies: they raised 'unsupported reduction combiner'.)"""
    import triton_aot
    prelude, source = _lower(POOL_INDICES)
    assert "tl.static_range(9)" in source and "RBLOCK" not in source, source
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        mod = triton_aot.load_module(prelude + "\n" + source, "ember_window_fold")
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET")
        else:
            os.environ["TRITON_INTERPRET"] = saved
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (2, 16, 8, 8), generator=g).float()     # ties in most windows
    x[0, 2, 3, 3] = x[0, 2, 3, 4] = float("nan")    # two NaNs in a window: the last one's index
    x[1, 5, 0, 0] = float("nan")
    nhwc = x.permute(0, 2, 3, 1).contiguous()
    val = torch.empty(2, 4, 4, 16)
    idx = torch.empty(2, 4, 4, 16, dtype=torch.int64)
    mod.pool_indices(nhwc, val, idx)
    ref_val, ref_idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert _same_bits(val, ref_val.permute(0, 2, 3, 1))
    assert torch.equal(idx, ref_idx.permute(0, 2, 3, 1))
    if os.environ.get("EMBER_TEST_AOT", "1") != "0":
        results = triton_aot.compile_isolated(prelude + "\n" + source, ["pool_indices"])
        assert results and not triton_aot.failures(results), results


def _column_sums(a, b, c):
    return a.sum(0), (b * 2).sum(0), (c + a).sum(0)


def _assert_vector_loads(source):
    """The module's kernel, built for sm_90 (PTX), loads 16 bytes at a time somewhere."""
    if os.environ.get("EMBER_TEST_AOT", "1") == "0":
        return
    import triton_aot
    name = re.search(r"def (ember_\w+)\(\*tensors\)", source).group(1)
    results = triton_aot.compile_isolated(source, [name], targets=(("cuda", 90, 32),),
                                          asm="ptx", divisible=True)
    (per_target,) = results.values()
    assert "ld.global.v4" in per_target["cuda:90"], per_target["cuda:90"][:2000]


def test_unrolled_window_bound_is_a_loop_with_the_same_bits(exported_sources):
    """Option max_unrolled_loads: column sums over 48 rows, fused into one window kernel
    (three loads a row), are a `tl.range` loop where the unrolled body would repeat more loads
    than the bound (Triton's compile grows about quadratically with it: swin_t's 24 fused
    column sums took 91 s a configuration) and stay unrolled by default; the loop adds the
    same values in the same order, so the results are the same bits (interpreter), and it
    builds for sm_90."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("compares the two forms under the Triton interpreter")
    torch.manual_seed(0)
    args = [torch.randn(48, 48) for _ in range(3)]
    outs = {}
    for bound in (0, 16):
        torch._dynamo.reset()
        clear_reports()
        del exported_sources[:]
        f = torch.compile(_column_sums, backend="ember",
                          options={"target": "triton", "program_cache": False,
                                   "max_unrolled_loads": bound})
        outs[bound] = f(*args)
        check_fallbacks()
        (source,) = exported_sources
        outs[bound, "source"] = source
        windows = re.findall(r"for rindex in (tl\.\w+)\(48\)", source)
        assert windows == (["tl.static_range"] if bound == 0 else ["tl.range"]), source
    for x, y, r in zip(outs[0], outs[16], _column_sums(*args)):
        assert torch.equal(x, y)
        torch.testing.assert_close(x, r)
    # nothing else in the module changes
    assert outs[0, "source"].replace("tl.static_range(48)", "tl.range(48)") == outs[16, "source"]
    if os.environ.get("EMBER_TEST_AOT", "1") != "0":
        import triton_aot
        name = re.search(r"def (ember_\w+)\(\*tensors\)", outs[16, "source"]).group(1)
        results = triton_aot.compile_isolated(outs[16, "source"], [name], asm="ptx")
        (per_target,) = results.values()
        assert "ld.global" in per_target["cuda:90"], per_target["cuda:90"][:2000]


def test_column_sums_of_64_rows_are_tiles_not_windows(exported_sources):
    """A reduction that does not slide (column sums; the chunks ember-split-reductions makes
    of a long one) over at least 64 rows is a [columns x rows] tile, not an unrolled window of
    one output a thread (GPT-2's LayerNorm weight-gradient partials: 26 us a call that way on
    an H200): the rows are a tile dim, no `for rindex` loop is left, the loads are vectors
    (PTX), and the sums match eager."""
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"    # target triton: the GPU's Triton
    args = [torch.randn(64, 192, device=dev) for _ in range(3)]
    torch._dynamo.reset()
    clear_reports()
    del exported_sources[:]
    f = torch.compile(_column_sums, backend="ember",
                      options={"target": "triton", "program_cache": False})
    for x, r in zip(f(*args), _column_sums(*args)):
        torch.testing.assert_close(x, r)
    check_fallbacks()
    (source,) = exported_sources
    assert "for rindex in" not in source and "RBLOCK" in source, source
    _assert_vector_loads(source)


def _concat_sum(a, b, c):
    x = torch.cat([a, b, c], 1)
    return x, x.sum(0)


def test_concat_pieces_load_unclamped_under_a_mask(exported_sources):
    """A concat's pieces are read with their index unclamped, under a mask saying the piece is
    the one selected (`g`): a clamp (min/max) hid the index's contiguity from Triton, and
    GPT-2's q/k/v bias-gradient kernel (three [2048, 768] bf16 gradients concatenated and
    summed over rows) loaded 2 bytes at a time. Values as eager's; vector loads (PTX)."""
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"    # target triton: the GPU's Triton
    args = [torch.randn(64, n, device=dev).bfloat16() for n in (64, 128, 64)]
    torch._dynamo.reset()
    clear_reports()
    del exported_sources[:]
    f = torch.compile(_concat_sum, backend="ember",
                      options={"target": "triton", "program_cache": False})
    (cat, total), (ref_cat, ref_total) = f(*args), _concat_sum(*args)
    assert torch.equal(cat, ref_cat)
    torch.testing.assert_close(total, ref_total)
    check_fallbacks()
    (source,) = exported_sources
    assert "tl.minimum(tl.maximum" not in source, source
    assert len(re.findall(r"tl\.load\([^\n]*mask=[^\n]*& g[0-9]+, other=0\)", source)) >= 2, source
    _assert_vector_loads(source)
