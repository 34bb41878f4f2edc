// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-shifted-variance{min-work=64 min-programs=1024 min-chunk=4})' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-shifted-variance{min-work=64 min-programs=1024 min-chunk=4},ember-split-reductions{min-work=64 min-programs=1024 min-chunk=4},ember-fuse{target=triton})' | FileCheck %s --check-prefix=FUSED
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-split-reductions{min-work=64 min-programs=1024 min-chunk=4},ember-fuse{target=triton})' | FileCheck %s --check-prefix=TWOPASS
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-shifted-variance)' | FileCheck %s --check-prefix=UNSPLIT
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-shifted-variance{min-work=64 min-programs=1024 min-chunk=4 f32=true},ember-split-reductions{min-work=64 min-programs=1024 min-chunk=4},ember-fuse{target=triton})' | FileCheck %s --check-prefix=F32

// A training BatchNorm's statistics over a channels-last [N, H, W, C] value (x widened from
// bf16): s1 = sum(x), mean = s1 / n, s2 = sum((x - mean)^2). Rewritten: k = x[0, 0, 0, c] (a
// slice of the bf16 value, widened), t1 = sum(x - k) and t2 = sum((x - k)^2) over the same
// loops, s1 = t1 + n * k, s2 = max(t2 - t1 * t1 / n, 0); the square of x - mean is gone.
// CHECK-LABEL: func.func @bn_stats
// CHECK:         %[[K:.+]] = tensor.extract_slice %arg0[0, 0, 0, 0] [1, 1, 1, 8] [1, 1, 1, 1] : tensor<4x2x2x8xbf16> to tensor<1x1x1x8xbf16>
// CHECK:         %[[KW:.+]] = linalg.generic {{.*}} ins(%[[K]] : tensor<1x1x1x8xbf16>)
// CHECK:           arith.extf
// CHECK:         %[[Y:.+]] = linalg.generic {{.*}} ins(%[[X:.+]], %[[KW]] : tensor<4x2x2x8xf32>, tensor<1x1x1x8xf32>)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      arith.subf
// CHECK:         %[[T1:.+]] = linalg.generic {{.*}} iterator_types = ["reduction", "reduction", "reduction", "parallel"]} ins(%[[Y]] : tensor<4x2x2x8xf32>)
// CHECK:         %[[T2:.+]] = linalg.generic {{.*}} iterator_types = ["reduction", "reduction", "reduction", "parallel"]} ins(%[[Y]] : tensor<4x2x2x8xf32>)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      arith.mulf
// CHECK-NEXT:      arith.addf
// CHECK:         %[[S1:.+]] = linalg.generic {{.*}} ins(%[[T1]], %[[KW]] : tensor<1x8x1x1xf32>, tensor<1x1x1x8xf32>)
// CHECK:         %[[S2:.+]] = linalg.generic {{.*}} ins(%[[T1]], %[[T2]] : tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>)
// CHECK:           arith.maximumf
// CHECK:         %[[M:.+]] = linalg.generic {{.*}} ins(%[[S1]] : tensor<1x8x1x1xf32>)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      arith.divf
// CHECK-NOT:     linalg.generic {{.*}} iterator_types = ["reduction"
// CHECK:         return %[[M]], %[[S2]]
// With the splits and fusion: one partial kernel for both sums (it reads x once), one final
// kernel; the two-pass form needs the mean's final kernel before the square's partial one.
// FUSED-LABEL: func.func @bn_stats
// FUSED-NEXT:    %[[P:.+]]:2 = call @ember_fused_{{[a-z_0-9]+}}(%arg0) : (tensor<4x2x2x8xbf16>) -> (tensor<4x1x8x1x1xf32>, tensor<4x1x8x1x1xf32>)
// FUSED-NEXT:    %[[F:.+]]:2 = call @ember_fused_{{[a-z_0-9]+}}(%[[P]]#0, %[[P]]#1, %arg0) : {{.*}} -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>)
// FUSED-NEXT:    return
// Too short to be split with the default options: one kernel either way, left alone.
// UNSPLIT-LABEL: func.func @bn_stats
// UNSPLIT-NOT:     tensor.extract_slice
// UNSPLIT:         arith.mulf
// UNSPLIT:         return
// TWOPASS-LABEL: func.func @bn_stats
// TWOPASS-COUNT-4: call @ember_fused_
// TWOPASS-NEXT:  return
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#stat = affine_map<(d0, d1, d2, d3) -> (0, d3, 0, 0)>
func.func @bn_stats(%xb: tensor<4x2x2x8xbf16>) -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 1.600000e+01 : f32
  %ex = tensor.empty() : tensor<4x2x2x8xf32>
  %x = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%xb : tensor<4x2x2x8xbf16>) outs(%ex : tensor<4x2x2x8xf32>) {
  ^bb0(%in: bf16, %o: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<4x2x2x8xf32>
  %es = tensor.empty() : tensor<1x8x1x1xf32>
  %z = linalg.fill ins(%zero : f32) outs(%es : tensor<1x8x1x1xf32>) -> tensor<1x8x1x1xf32>
  %s1 = linalg.generic {indexing_maps = [#id, #stat], iterator_types = ["reduction", "reduction", "reduction", "parallel"]}
      ins(%x : tensor<4x2x2x8xf32>) outs(%z : tensor<1x8x1x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<1x8x1x1xf32>
  %mean = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s1 : tensor<1x8x1x1xf32>) outs(%es : tensor<1x8x1x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %m = arith.divf %in, %n : f32
    linalg.yield %m : f32
  } -> tensor<1x8x1x1xf32>
  %d = linalg.generic {indexing_maps = [#id, #stat, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %mean : tensor<4x2x2x8xf32>, tensor<1x8x1x1xf32>) outs(%ex : tensor<4x2x2x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4x2x2x8xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%d, %d : tensor<4x2x2x8xf32>, tensor<4x2x2x8xf32>) outs(%ex : tensor<4x2x2x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4x2x2x8xf32>
  %s2 = linalg.generic {indexing_maps = [#id, #stat], iterator_types = ["reduction", "reduction", "reduction", "parallel"]}
      ins(%sq : tensor<4x2x2x8xf32>) outs(%z : tensor<1x8x1x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<1x8x1x1xf32>
  return %mean, %s2 : tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>
}

// -----

// The same statistics of f32 data: left as the two-pass form (only a widened bf16/f16 value's
// variance is shifted; f32 data keeps eager's numbers). With `f32=true` (a GPU's default
// pipeline: frontend/options.py `one_pass_variance`) shifted too, sampled from x itself: one
// partial kernel for both sums and one final kernel, where the two-pass form takes four.
// F32-LABEL: func.func @bn_stats_f32
// F32-NEXT:    %[[P:.+]]:2 = call @ember_fused_{{[a-z_0-9]+}}(%arg0) : (tensor<4x2x2x8xf32>) -> (tensor<4x1x8x1x1xf32>, tensor<4x1x8x1x1xf32>)
// F32-NEXT:    %[[F:.+]]:2 = call @ember_fused_{{[a-z_0-9]+}}(%[[P]]#0, %[[P]]#1, %arg0) : {{.*}} -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>)
// F32-NEXT:    return
// CHECK-LABEL: func.func @bn_stats_f32
// CHECK-NOT:     tensor.extract_slice
// CHECK:         %[[S1:.+]] = linalg.generic {{.*}} ins(%arg0 : tensor<4x2x2x8xf32>)
// CHECK:         arith.divf
// CHECK:         arith.subf
// CHECK:         arith.mulf
// CHECK:         return
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#stat = affine_map<(d0, d1, d2, d3) -> (0, d3, 0, 0)>
func.func @bn_stats_f32(%x: tensor<4x2x2x8xf32>) -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 1.600000e+01 : f32
  %ex = tensor.empty() : tensor<4x2x2x8xf32>
  %es = tensor.empty() : tensor<1x8x1x1xf32>
  %z = linalg.fill ins(%zero : f32) outs(%es : tensor<1x8x1x1xf32>) -> tensor<1x8x1x1xf32>
  %s1 = linalg.generic {indexing_maps = [#id, #stat], iterator_types = ["reduction", "reduction", "reduction", "parallel"]}
      ins(%x : tensor<4x2x2x8xf32>) outs(%z : tensor<1x8x1x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<1x8x1x1xf32>
  %mean = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s1 : tensor<1x8x1x1xf32>) outs(%es : tensor<1x8x1x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %m = arith.divf %in, %n : f32
    linalg.yield %m : f32
  } -> tensor<1x8x1x1xf32>
  %d = linalg.generic {indexing_maps = [#id, #stat, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %mean : tensor<4x2x2x8xf32>, tensor<1x8x1x1xf32>) outs(%ex : tensor<4x2x2x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4x2x2x8xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%d, %d : tensor<4x2x2x8xf32>, tensor<4x2x2x8xf32>) outs(%ex : tensor<4x2x2x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4x2x2x8xf32>
  %s2 = linalg.generic {indexing_maps = [#id, #stat], iterator_types = ["reduction", "reduction", "reduction", "parallel"]}
      ins(%sq : tensor<4x2x2x8xf32>) outs(%z : tensor<1x8x1x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<1x8x1x1xf32>
  return %mean, %s2 : tensor<1x8x1x1xf32>, tensor<1x8x1x1xf32>
}

// -----

// A divisor that is not the reduced extent (n = 15 of 16 elements) is not a mean: left alone.
// CHECK-LABEL: func.func @not_the_mean
// CHECK-NOT:     tensor.extract_slice
// CHECK:         arith.mulf
// CHECK:         return
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @not_the_mean(%x: tensor<16x8xf32>) -> tensor<8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 1.500000e+01 : f32
  %es = tensor.empty() : tensor<8xf32>
  %ex = tensor.empty() : tensor<16x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%es : tensor<8xf32>) -> tensor<8xf32>
  %s1 = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<16x8xf32>) outs(%z : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %mean = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%s1 : tensor<8xf32>) outs(%es : tensor<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %m = arith.divf %in, %n : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  %d = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %mean : tensor<16x8xf32>, tensor<8xf32>) outs(%ex : tensor<16x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<16x8xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%d, %d : tensor<16x8xf32>, tensor<16x8xf32>) outs(%ex : tensor<16x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<16x8xf32>
  %s2 = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%sq : tensor<16x8xf32>) outs(%z : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %s2 : tensor<8xf32>
}
