// RUN: ember-opt %s --emit-source --split-input-file --pass-pipeline='builtin.module(ember-lower-to-triton{autotune=false})' | FileCheck %s
// RUN: ember-opt %s --emit-source --split-input-file --pass-pipeline='builtin.module(ember-lower-to-cpp)' | FileCheck %s --check-prefix=CPP

// A small window reduction over strided elements (channels-last max pooling 3x3/2, pad 1, as
// ember-channels-last writes it) is written like a pointwise kernel: 1-D over the outputs
// (C fastest), the window an unrolled static_range of loads masked by x alone, combined in
// window order with NaN propagation; no [XBLOCK, RBLOCK] tile, whose lanes ran along the
// window (no coalescing along C, 7 of 16 lanes masked). The pad's inside is the load's mask
// (`g`), the index unclamped: a clamp hid its contiguity along C from Triton.
// CHECK-LABEL: // ----- kernel @pool_nhwc
// CHECK:       def pool_nhwc_kernel(in0, out0, xnumel, XBLOCK: tl.constexpr):
// CHECK-NEXT:    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
// CHECK-NEXT:    xmask = xindex < xnumel
// CHECK:         [[ACC:acc[0-9]+]] = tl.full([XBLOCK], float("-inf"), tl.float32)
// CHECK-NEXT:    for rindex in tl.static_range(9):
// CHECK-NEXT:        [[KH:r[0-9]+]] = (rindex // (3))
// CHECK-NEXT:        [[KW:r[0-9]+]] = (rindex % 3)
// CHECK-NEXT:        [[G:g[0-9]+]] = {{.*}} >= 0{{.*}} < 32
// CHECK-NEXT:        {{.*}} = _ember_from_bf16(tl.load(in0 + {{.*}}, mask=xmask & [[G]], other=0))
// CHECK:             [[ACC]] = _ember_nanmax([[ACC]], {{t[0-9]+}})
// CHECK:         tl.store(out0 + {{.*}}, _ember_to_bf16({{.*}}), mask=xmask)
// CHECK-NOT:     RBLOCK
// CHECK:       pool_nhwc_kernel[grid](*tensors, xnumel, XBLOCK=128, num_warps=4, **_EMBER_LAUNCH)
// The C++ kernel: the parallel loops over N, OH, OW; C in column blocks around the window's
// loops, simd along C (before: a simd reduction over the 9 gathered elements of each output).
// CPP-LABEL: // ----- kernel @pool_nhwc
// CPP:         #pragma omp parallel for collapse(3)
// CPP:         float [[ACC:acc[0-9]+]]_v[64];
// CPP:         for (int64_t [[KH:i[0-9_]+]] = 0; [[KH]] < 3; ++[[KH]]) {
// CPP-NEXT:      for (int64_t [[KW:i[0-9_]+]] = 0; [[KW]] < 3; ++[[KW]]) {
// CPP-NEXT:        #pragma omp simd
// CPP-NEXT:        for (int64_t [[C:i[0-9_]+]]_l = 0; [[C]]_l < 64; ++[[C]]_l) {
// CPP:               ember_max<float>({{t[0-9]+}}, [[ACC]]_v[[[C]]_l])
// CPP-NOT:     reduction(
#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>
#kern = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#out = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
func.func private @pool_nhwc(%arg0: tensor<4x32x32x64xbf16>) -> tensor<4x16x16x64xbf16>
    attributes {ember.kernel = "reduction", ember.ops = ["pad", "amax"]} {
  %cst = arith.constant 0xFF80 : bf16
  %padded = tensor.pad %arg0 low[0, 1, 1, 0] high[0, 0, 0, 0] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : bf16
  } : tensor<4x32x32x64xbf16> to tensor<4x33x33x64xbf16>
  %0 = tensor.empty() : tensor<3x3xbf16>
  %1 = tensor.empty() : tensor<4x16x16x64xbf16>
  %2 = linalg.fill ins(%cst : bf16) outs(%1 : tensor<4x16x16x64xbf16>) -> tensor<4x16x16x64xbf16>
  %3 = linalg.generic {indexing_maps = [#win, #kern, #out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%padded, %0 : tensor<4x33x33x64xbf16>, tensor<3x3xbf16>) outs(%2 : tensor<4x16x16x64xbf16>) {
  ^bb0(%in: bf16, %k: bf16, %o: bf16):
    %4 = arith.maximumf %in, %o : bf16
    linalg.yield %4 : bf16
  } -> tensor<4x16x16x64xbf16>
  return %3 : tensor<4x16x16x64xbf16>
}

// -----

// A window sum (average pooling's numerator, f32) is accumulated from 0 in window order, kh
// then kw (ATen's order), then divided: eager's result bit for bit.
// CHECK-LABEL: // ----- kernel @avg_nhwc
// CHECK:         [[ACC:acc[0-9]+]] = tl.full([XBLOCK], 0.0, tl.float32)
// CHECK-NEXT:    for rindex in tl.static_range(4):
// CHECK:             [[ACC]] = [[ACC]] + {{.*}}
// CHECK:         {{t[0-9]+}} = _ember_div({{red[0-9]+}}, 4.0)
// CHECK-NEXT:    tl.store(out0 + {{.*}}, mask=xmask)
// CHECK-NOT:     RBLOCK
// CPP-LABEL: // ----- kernel @avg_nhwc
// CPP:         float [[ACC:acc[0-9]+]]_v[32];
// CPP:         #pragma omp simd
// CPP:           const float {{t[0-9]+}} = ({{x[0-9]+}} + [[ACC]]_v[{{i[0-9_]+}}_l]);
// CPP-NOT:     reduction(
#win2 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>
#kern2 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#out2 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func private @avg_nhwc(%arg0: tensor<2x8x8x32xf32>) -> tensor<2x4x4x32xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["sum", "div"]} {
  %zero = arith.constant 0.0 : f32
  %four = arith.constant 4.0 : f32
  %0 = tensor.empty() : tensor<2x2xf32>
  %1 = tensor.empty() : tensor<2x4x4x32xf32>
  %2 = linalg.fill ins(%zero : f32) outs(%1 : tensor<2x4x4x32xf32>) -> tensor<2x4x4x32xf32>
  %3 = linalg.generic {indexing_maps = [#win2, #kern2, #out2], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%arg0, %0 : tensor<2x8x8x32xf32>, tensor<2x2xf32>) outs(%2 : tensor<2x4x4x32xf32>) {
  ^bb0(%in: f32, %k: f32, %o: f32):
    %4 = arith.addf %in, %o : f32
    linalg.yield %4 : f32
  } -> tensor<2x4x4x32xf32>
  %5 = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%3 : tensor<2x4x4x32xf32>) outs(%1 : tensor<2x4x4x32xf32>) {
  ^bb0(%in: f32, %o: f32):
    %6 = arith.divf %in, %four : f32
    linalg.yield %6 : f32
  } -> tensor<2x4x4x32xf32>
  return %5 : tensor<2x4x4x32xf32>
}

// -----

// NCHW pooling: the innermost dim W slides with the output's OW (ow * 2 + kw): Triton writes
// the window form too (adjacent outputs read near addresses); the C++ kernel keeps its simd
// reduction over the window (no contiguous outer dim to vectorize along).
// CHECK-LABEL: // ----- kernel @pool_nchw
// CHECK:         for rindex in tl.static_range(9):
// CHECK-NOT:     RBLOCK
// CPP-LABEL: // ----- kernel @pool_nchw
// CPP:         #pragma omp simd collapse(2) reduction(
#win3 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>
#kern3 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#out3 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
func.func private @pool_nchw(%arg0: tensor<2x8x16x16xf32>) -> tensor<2x8x8x8xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["pad", "amax"]} {
  %cst = arith.constant 0xFF800000 : f32
  %padded = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 0, 0] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : f32
  } : tensor<2x8x16x16xf32> to tensor<2x8x17x17xf32>
  %0 = tensor.empty() : tensor<3x3xf32>
  %1 = tensor.empty() : tensor<2x8x8x8xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %3 = linalg.generic {indexing_maps = [#win3, #kern3, #out3], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%padded, %0 : tensor<2x8x17x17xf32>, tensor<3x3xf32>) outs(%2 : tensor<2x8x8x8xf32>) {
  ^bb0(%in: f32, %k: f32, %o: f32):
    %4 = arith.maximumf %in, %o : f32
    linalg.yield %4 : f32
  } -> tensor<2x8x8x8xf32>
  return %3 : tensor<2x8x8x8xf32>
}

// -----

// A short row reduction contiguous along the reduced dim keeps the [XBLOCK, RBLOCK] tile.
// CHECK-LABEL: // ----- kernel @row_sum
// CHECK:         def row_sum_kernel(in0, out0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
// CHECK-NOT:     static_range
// CHECK:         tl.sum(
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func private @row_sum(%arg0: tensor<64x16xf32>) -> tensor<64xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %zero = arith.constant 0.0 : f32
  %0 = tensor.empty() : tensor<64xf32>
  %1 = linalg.fill ins(%zero : f32) outs(%0 : tensor<64xf32>) -> tensor<64xf32>
  %2 = linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%arg0 : tensor<64x16xf32>) outs(%1 : tensor<64xf32>) {
  ^bb0(%in: f32, %o: f32):
    %3 = arith.addf %in, %o : f32
    linalg.yield %3 : f32
  } -> tensor<64xf32>
  return %2 : tensor<64xf32>
}

// -----

// A general body (max_pool2d_with_indices: value and index, `take = v > max | isnan(v)`) is
// folded in window order: every update computed from the accumulators, then assigned.
// CHECK-LABEL: // ----- kernel @pool_indices
// CHECK:         [[VAL:acc[0-9]+]] = tl.where(xmask, float("-inf"), float("-inf")).to(tl.float32)
// CHECK-NEXT:    [[IDX:acc[0-9]+]] = tl.where(xmask, 0, 0).to(tl.int64)
// CHECK:         for rindex in tl.static_range(9):
// CHECK:             [[TAKE:t[0-9]+]] = (({{t[0-9]+}} != 0) | ({{t[0-9]+}} != 0))
// CHECK-NEXT:        {{t[0-9]+}} = tl.where(([[TAKE]]) != 0, {{t[0-9]+}}, [[VAL]])
// CHECK:             {{t[0-9]+}} = tl.where(([[TAKE]]) != 0, {{t[0-9]+}}, [[IDX]])
// CHECK:             [[VAL]] = {{upd[0-9]+}}
// CHECK-NEXT:        [[IDX]] = {{upd[0-9]+}}
// CHECK-NEXT:    tl.store(out0 + {{.*}}, ([[VAL]]).to(tl.float32), mask=xmask)
// CHECK-NEXT:    tl.store(out1 + {{.*}}, ([[IDX]]).to(tl.int64), mask=xmask)
// The C++ kernel folds it the same way, both accumulators arrays over a block of C, simd along C.
// CPP-LABEL: // ----- kernel @pool_indices
// CPP:         float [[VAL:acc[0-9]+]]_v[16];
// CPP:         int64_t [[IDX:acc[0-9]+]]_v[16];
// CPP:         #pragma omp simd
// CPP:           [[VAL]]_v[{{i[0-9_]+}}_l] = {{t[0-9]+}};
// CPP-NEXT:      [[IDX]]_v[{{i[0-9_]+}}_l] = {{t[0-9]+}};
#win4 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>
#kern4 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#out4 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
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
  %5:2 = linalg.generic {indexing_maps = [#win4, #kern4, #out4, #out4], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
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
