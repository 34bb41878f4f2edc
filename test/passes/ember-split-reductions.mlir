// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-split-reductions)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-split-reductions,ember-fuse{target=triton},canonicalize)' | FileCheck %s --check-prefix=FUSE

// A column sum (a bias gradient) of 8192 x 4096: 64 programs of 64 columns unsplit. S = 16
// splits of 512 rows give 1024 programs: the rows are read through an expand_shape, the
// partials summed by a second generic over s into the original init.
// CHECK-LABEL: func.func @column_sum
// CHECK:         %[[X:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0, 1], [2]] output_shape [16, 512, 4096] : tensor<8192x4096xf32> into tensor<16x512x4096xf32>
// CHECK:         %[[Z:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<16x4096xf32>)
// CHECK:         %[[P:.*]] = linalg.generic {{{.*}}iterator_types = ["parallel", "reduction", "parallel"]} ins(%[[X]] : tensor<16x512x4096xf32>) outs(%[[Z]] : tensor<16x4096xf32>)
// CHECK:           arith.addf
// CHECK:         %[[T:.*]] = linalg.generic {{{.*}}iterator_types = ["reduction", "parallel"]} ins(%[[P]] : tensor<16x4096xf32>) outs(%[[INIT:.*]] : tensor<4096xf32>)
// CHECK:           arith.addf
// CHECK:         return %[[T]]
// The producer fuses into the partial reduction (read through the view): two kernels.
// FUSE-LABEL: func.func @column_sum
// FUSE-COUNT-2: call @ember_fused
// FUSE-NOT:     call @ember_fused
// FUSE:         return
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
module {
  func.func @column_sum(%arg0: tensor<8192x4096xf32>) -> tensor<4096xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<8192x4096xf32>
    %p = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<8192x4096xf32>) outs(%e : tensor<8192x4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.mulf %in, %in : f32
      linalg.yield %m : f32
    } -> tensor<8192x4096xf32>
    %0 = tensor.empty() : tensor<4096xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4096xf32>) -> tensor<4096xf32>
    %2 = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]} ins(%p : tensor<8192x4096xf32>) outs(%1 : tensor<4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %in, %out : f32
      linalg.yield %s : f32
    } -> tensor<4096xf32>
    return %2 : tensor<4096xf32>
  }
}

// -----

// A bf16 sum keeps f32 partials (as the unsplit kernel's accumulator is f32) and rounds once,
// after the final sum; the keepdim result map (0, d1) carries over.
// CHECK-LABEL: func.func @bf16_sum
// CHECK:         linalg.generic {{{.*}}iterator_types = ["parallel", "reduction", "parallel"]} ins(%{{.*}} : tensor<64x64x1024xbf16>) outs(%{{.*}} : tensor<64x1x1024xf32>)
// CHECK:           %[[W:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK:           arith.addf %[[W]], %{{.*}} : f32
// CHECK:         linalg.generic {{{.*}}ins(%{{.*}} : tensor<64x1x1024xf32>) outs(%{{.*}} : tensor<1x1024xf32>)
// CHECK:         linalg.generic
// CHECK:           arith.truncf %{{.*}} : f32 to bf16
// CHECK:         return %{{.*}} : tensor<1x1024xbf16>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#keep = affine_map<(d0, d1) -> (0, d1)>
module {
  func.func @bf16_sum(%arg0: tensor<4096x1024xbf16>) -> tensor<1x1024xbf16> {
    %cst = arith.constant 0.000000e+00 : bf16
    %0 = tensor.empty() : tensor<1x1024xbf16>
    %1 = linalg.fill ins(%cst : bf16) outs(%0 : tensor<1x1024xbf16>) -> tensor<1x1024xbf16>
    %2 = linalg.generic {indexing_maps = [#id2, #keep], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<4096x1024xbf16>) outs(%1 : tensor<1x1024xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %s = arith.addf %in, %out : bf16
      linalg.yield %s : bf16
    } -> tensor<1x1024xbf16>
    return %2 : tensor<1x1024xbf16>
  }
}

// -----

// A max over the rows of a few long rows (8 x 65536: 8 programs) splits each row into 128
// chunks; the partials start from -inf, the final max from the original init.
// CHECK-LABEL: func.func @few_long_rows
// CHECK:         tensor.expand_shape %arg0 {{\[}}[0], [1, 2]] output_shape [8, 128, 512]
// CHECK:         arith.constant 0xFF800000 : f32
// CHECK:         linalg.generic {{{.*}}iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK:           arith.maximumf
// CHECK:         linalg.generic {{{.*}}iterator_types = ["reduction", "parallel"]} ins(%{{.*}} : tensor<128x8xf32>)
// CHECK:           arith.maximumf
#id3 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
module {
  func.func @few_long_rows(%arg0: tensor<8x65536xf32>, %init: tensor<8xf32>) -> tensor<8xf32> {
    %2 = linalg.generic {indexing_maps = [#id3, #row], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<8x65536xf32>) outs(%init : tensor<8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.maximumf %in, %out : f32
      linalg.yield %s : f32
    } -> tensor<8xf32>
    return %2 : tensor<8xf32>
  }
}

// -----

// A bias gradient over [batch, tokens, features] reduces dims 0 and 1: the batch (8) becomes
// parallel whole (no view), which leaves 8 * 768 / 64 = 96 programs, so the tokens are split
// too (S = 8 chunks of 64): 768 programs, and one final reduction over both partial dims.
// CHECK-LABEL: func.func @two_reduced_dims
// CHECK:         %[[E:.*]] = tensor.expand_shape %arg0 {{\[\[}}0], [1, 2], [3]] output_shape [8, 8, 64, 768]
// CHECK:         %[[P:.*]] = linalg.generic {{{.*}}iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%[[E]] : tensor<8x8x64x768xf32>) outs(%{{.*}} : tensor<8x8x768xf32>)
// CHECK:         %[[T:.*]] = linalg.generic {{{.*}}iterator_types = ["reduction", "reduction", "parallel"]} ins(%[[P]] : tensor<8x8x768xf32>) outs(%arg1 : tensor<768xf32>)
// CHECK-NOT:     linalg.generic
// CHECK:         return %[[T]]
#id5 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#feat = affine_map<(d0, d1, d2) -> (d2)>
module {
  func.func @two_reduced_dims(%arg0: tensor<8x512x768xf32>, %arg1: tensor<768xf32>) -> tensor<768xf32> {
    %0 = linalg.generic {indexing_maps = [#id5, #feat], iterator_types = ["reduction", "reduction", "parallel"]} ins(%arg0 : tensor<8x512x768xf32>) outs(%arg1 : tensor<768xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %in, %out : f32
      linalg.yield %s : f32
    } -> tensor<768xf32>
    return %0 : tensor<768xf32>
  }
}

// -----

// A channels-last batch-norm gradient [N, H, W, C] = [32, 56, 56, 64] summed over N, H, W: the
// batch split whole leaves 32 * 64 / 64 = 32 programs (each over 56 x 56 x 64), so H is split
// too (8 chunks of 7 rows): 256 programs, and one final reduction over both partial dims.
// CHECK-LABEL: func.func @channels_last_bn_grad
// CHECK:         %[[E:.*]] = tensor.expand_shape %arg0 {{\[\[}}0], [1, 2], [3], [4]] output_shape [32, 8, 7, 56, 64]
// CHECK:         %[[P:.*]] = linalg.generic {{{.*}}iterator_types = ["parallel", "parallel", "reduction", "reduction", "parallel"]} ins(%[[E]] : tensor<32x8x7x56x64xf32>) outs(%{{.*}} : tensor<8x32x64xf32>)
// CHECK:         %[[T:.*]] = linalg.generic {{{.*}}iterator_types = ["reduction", "reduction", "parallel"]} ins(%[[P]] : tensor<8x32x64xf32>) outs(%arg1 : tensor<64xf32>)
// CHECK-NOT:     linalg.generic
// CHECK:         return %[[T]]
#nhwc = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#chan = affine_map<(d0, d1, d2, d3) -> (d3)>
module {
  func.func @channels_last_bn_grad(%arg0: tensor<32x56x56x64xf32>, %arg1: tensor<64xf32>) -> tensor<64xf32> {
    %0 = linalg.generic {indexing_maps = [#nhwc, #chan], iterator_types = ["reduction", "reduction", "reduction", "parallel"]} ins(%arg0 : tensor<32x56x56x64xf32>) outs(%arg1 : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %in, %out : f32
      linalg.yield %s : f32
    } -> tensor<64xf32>
    return %0 : tensor<64xf32>
  }
}

// -----

// Left alone: many rows (4096 programs already), too little work, a dynamic dim, and a
// combiner that reads its accumulator twice.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     tensor.expand_shape
// CHECK-COUNT-4: linalg.generic
// CHECK-NOT:     linalg.generic
// CHECK:         return
#id4 = affine_map<(d0, d1) -> (d0, d1)>
#row4 = affine_map<(d0, d1) -> (d0)>
#col4 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @left_alone(%a: tensor<4096x1024xf32>, %b: tensor<64x64xf32>, %c: tensor<?x64xf32>, %d: tensor<8192x64xf32>, %r: tensor<4096xf32>, %s: tensor<64xf32>) -> (tensor<4096xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
    %0 = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<4096x1024xf32>) outs(%r : tensor<4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %x = arith.addf %in, %out : f32
      linalg.yield %x : f32
    } -> tensor<4096xf32>
    %1 = linalg.generic {indexing_maps = [#id4, #col4], iterator_types = ["reduction", "parallel"]} ins(%b : tensor<64x64xf32>) outs(%s : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %x = arith.addf %in, %out : f32
      linalg.yield %x : f32
    } -> tensor<64xf32>
    %2 = linalg.generic {indexing_maps = [#id4, #col4], iterator_types = ["reduction", "parallel"]} ins(%c : tensor<?x64xf32>) outs(%s : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %x = arith.addf %in, %out : f32
      linalg.yield %x : f32
    } -> tensor<64xf32>
    %3 = linalg.generic {indexing_maps = [#id4, #col4], iterator_types = ["reduction", "parallel"]} ins(%d : tensor<8192x64xf32>) outs(%s : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %x = arith.mulf %out, %out : f32
      %y = arith.addf %in, %x : f32
      linalg.yield %y : f32
    } -> tensor<64xf32>
    return %0, %1, %2, %3 : tensor<4096xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
  }
}

// -----

// swin_t's relative-position-bias gradient: a one-hot select summed over the 49 x 49 = 2401
// = 7^4 positions into a 169 x 12 table (32 programs of 64 columns unsplit, each looping over
// all 2401 positions: 0.4 ms on an H100). No power of two divides 2401: S = 7 splits of 343
// (49 would leave partials of 49 < min-chunk), 7 times the programs.
// CHECK-LABEL: func.func @position_bias_grad
// CHECK:         tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2], [3]] output_shape [169, 7, 343, 12] : tensor<169x2401x12xf32> into tensor<169x7x343x12xf32>
// CHECK:         %[[P:.*]] = linalg.generic {{{.*}}iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins({{.*}}) outs(%{{.*}} : tensor<7x169x12xf32>)
// CHECK:         %[[T:.*]] = linalg.generic {{{.*}}ins(%[[P]] : tensor<7x169x12xf32>) outs(%{{.*}} : tensor<169x12xf32>)
// CHECK:         return %[[T]]
// FUSE-LABEL: func.func @position_bias_grad
// FUSE-COUNT-2: call @ember_fused
// FUSE-NOT:     call @ember_fused
// FUSE:         return
#rowidx = affine_map<(d0, d1, d2) -> (0, d1)>
#tab = affine_map<(d0, d1, d2) -> (d0, 0)>
#grad = affine_map<(d0, d1, d2) -> (0, d1, d2)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#out3 = affine_map<(d0, d1, d2) -> (d0, d2)>
module {
  func.func @position_bias_grad(%idx: tensor<1x2401xi64>, %rows: tensor<169x1xi64>, %g: tensor<1x2401x12xf32>) -> tensor<169x12xf32> {
    %zero = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<169x2401x12xf32>
    %sel = linalg.generic {indexing_maps = [#rowidx, #tab, #grad, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%idx, %rows, %g : tensor<1x2401xi64>, tensor<169x1xi64>, tensor<1x2401x12xf32>) outs(%e : tensor<169x2401x12xf32>) {
    ^bb0(%i: i64, %r: i64, %v: f32, %o: f32):
      %eq = arith.cmpi eq, %i, %r : i64
      %s = arith.select %eq, %v, %zero : f32
      linalg.yield %s : f32
    } -> tensor<169x2401x12xf32>
    %0 = tensor.empty() : tensor<169x12xf32>
    %1 = linalg.fill ins(%zero : f32) outs(%0 : tensor<169x12xf32>) -> tensor<169x12xf32>
    %2 = linalg.generic {indexing_maps = [#id3, #out3], iterator_types = ["parallel", "reduction", "parallel"]} ins(%sel : tensor<169x2401x12xf32>) outs(%1 : tensor<169x12xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %in, %out : f32
      linalg.yield %s : f32
    } -> tensor<169x12xf32>
    return %2 : tensor<169x12xf32>
  }
}

// -----

// A channels-last batch-norm statistic over [32, 112, 112, 16] (efficientnet_b0's stem): the
// batch dim splits whole, then 112 by 16, and there it stops: the dim of 7 that second split
// leaves is not split again by a divisor (a third level made totals that could not be merged,
// invalid IR, and the whole pass was dropped for the graph: x0.19 of eager on an H200).
// CHECK-LABEL: func.func @channels_last_statistic
// CHECK:         tensor.expand_shape %arg0 {{.*}} into tensor<32x16x7x112x16xf32>
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "reduction", "parallel"]{{.*}} outs(%{{.*}} : tensor<16x32x1x16x1x1xf32>)
// CHECK:         linalg.generic {{.*}}iterator_types = ["reduction", "reduction", "parallel", "parallel", "parallel", "parallel"]{{.*}} ins(%{{.*}} : tensor<16x32x1x16x1x1xf32>) outs(%{{.*}} : tensor<1x16x1x1xf32>)
// CHECK-NEXT:    ^bb0
// CHECK-NOT:     linalg.generic
// CHECK:         return
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map3 = affine_map<(d0, d1, d2, d3) -> (0, d3, 0, 0)>
module {
  func.func @channels_last_statistic(%arg0: tensor<32x112x112x16xf32>) -> tensor<1x16x1x1xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x16x1x1xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x16x1x1xf32>) -> tensor<1x16x1x1xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["reduction", "reduction", "reduction", "parallel"]} ins(%arg0 : tensor<32x112x112x16xf32>) outs(%1 : tensor<1x16x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %out : f32
      linalg.yield %3 : f32
    } -> tensor<1x16x1x1xf32>
    return %2 : tensor<1x16x1x1xf32>
  }
}

// -----

// A column sum read through a collapse_shape ([8, 128, 3072] as [1024, 3072]: a bias
// gradient) splits along the collapsed tensor's own dims (S = 8, not the 16 a power of two
// would give, still >= min-programs: 48 x 8 = 384) and reads that tensor itself, no view.
// A producer with a second result of its shape (GELU's backward beside the GELU recomputed
// for a weight gradient, recompute_saved) is then one kernel with the partials: two kernels.
// With S = 16 the second result is not indexed by the partials' outer space and takes a
// kernel of its own (three kernels; in GPT-2's backward the partials' kernel also copied the
// gradient into the split shape for the matmuls).
// CHECK-LABEL: func.func @collapsed_column_sum
// CHECK-NOT:     tensor.expand_shape
// CHECK:         %[[P:.*]] = linalg.generic {{{.*}}iterator_types = ["parallel", "reduction", "parallel"]} ins(%[[G:.*]] : tensor<8x128x3072xf32>) outs(%{{.*}} : tensor<8x3072xf32>)
// CHECK:         linalg.generic {{{.*}}iterator_types = ["reduction", "parallel"]} ins(%[[P]] : tensor<8x3072xf32>) outs(%{{.*}} : tensor<3072xf32>)
// FUSE-LABEL: func.func @collapsed_column_sum
// FUSE-COUNT-2: call @ember_fused
// FUSE-NOT:     call @ember_fused
// FUSE:         return
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#idc = affine_map<(d0, d1) -> (d0, d1)>
#colc = affine_map<(d0, d1) -> (d1)>
module {
  func.func @collapsed_column_sum(%x: tensor<8x128x3072xf32>, %dy: tensor<8x128x3072xf32>)
      -> (tensor<1024x3072xf32>, tensor<1024x3072xf32>, tensor<3072xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<8x128x3072xf32>
    %act = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<8x128x3072xf32>) outs(%e : tensor<8x128x3072xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.tanh %in : f32
      %m = arith.mulf %in, %t : f32
      linalg.yield %m : f32
    } -> tensor<8x128x3072xf32>
    %g = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %dy : tensor<8x128x3072xf32>, tensor<8x128x3072xf32>) outs(%e : tensor<8x128x3072xf32>) {
    ^bb0(%in: f32, %d: f32, %out: f32):
      %t = math.tanh %in : f32
      %m = arith.mulf %d, %t : f32
      linalg.yield %m : f32
    } -> tensor<8x128x3072xf32>
    %ca = tensor.collapse_shape %act [[0, 1], [2]] : tensor<8x128x3072xf32> into tensor<1024x3072xf32>
    %cg = tensor.collapse_shape %g [[0, 1], [2]] : tensor<8x128x3072xf32> into tensor<1024x3072xf32>
    %0 = tensor.empty() : tensor<3072xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<3072xf32>) -> tensor<3072xf32>
    %2 = linalg.generic {indexing_maps = [#idc, #colc], iterator_types = ["reduction", "parallel"]} ins(%cg : tensor<1024x3072xf32>) outs(%1 : tensor<3072xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %in, %out : f32
      linalg.yield %s : f32
    } -> tensor<3072xf32>
    return %ca, %cg, %2 : tensor<1024x3072xf32>, tensor<1024x3072xf32>, tensor<3072xf32>
  }
}
