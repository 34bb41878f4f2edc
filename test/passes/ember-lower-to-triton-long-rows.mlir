// RUN: ember-opt %s --emit-source --pass-pipeline='builtin.module(ember-lower-to-triton)' | FileCheck %s
// RUN: ember-opt %s --emit-source --pass-pipeline='builtin.module(ember-lower-to-triton{autotune=false})' | FileCheck %s --check-prefix=FIXED

// A persistent row of 4096 or more beside other rows is timed in half its warps too (an H200's
// f32 layer norm of 8192 rows of 4096: 0.0702 ms in 4 warps, 0.0721 in 8); shorter rows and
// autotune=false keep the one configuration.

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0, 0)>
#map2 = affine_map<(d0, d1) -> (d1)>

// CHECK: @_ember_autotune(configs=[triton.Config({'XBLOCK': 1, 'RBLOCK': 4096}, num_warps=8), triton.Config({'XBLOCK': 1, 'RBLOCK': 4096}, num_warps=4)],
// CHECK-NEXT: @triton.jit
// CHECK-NEXT: def layer_norm_rows_4096_kernel(
// CHECK: layer_norm_rows_4096_kernel[grid](*tensors, xnumel, rnumel, **_EMBER_LAUNCH)
// FIXED-NOT: _ember_autotune
// FIXED: layer_norm_rows_4096_kernel[grid](*tensors, xnumel, rnumel, XBLOCK=1, RBLOCK=4096, num_warps=8,
module {
  func.func private @layer_norm_rows_4096(%arg0: tensor<64x4096xf32>, %arg1: tensor<4096xf32>, %arg2: tensor<4096xf32>) -> tensor<64x4096xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum", "div", "sub", "mul", "sum", "div", "add", "rsqrt", "mul", "add"]} {
    %cst = arith.constant 1.000000e-05 : f64
    %cst_0 = arith.constant 4.096000e+03 : f32
    %cst_1 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<64x1xf32>
    %1 = linalg.fill ins(%cst_1 : f32) outs(%0 : tensor<64x1xf32>) -> tensor<64x1xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<64x4096xf32>) outs(%1 : tensor<64x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %14 = arith.addf %in, %out : f32
      linalg.yield %14 : f32
    } -> tensor<64x1xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%2 : tensor<64x1xf32>) outs(%0 : tensor<64x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %14 = arith.divf %in, %cst_0 : f32
      linalg.yield %14 : f32
    } -> tensor<64x1xf32>
    %4 = tensor.empty() : tensor<64x4096xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %3 : tensor<64x4096xf32>, tensor<64x1xf32>) outs(%4 : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %14 = arith.subf %in, %in_2 : f32
      linalg.yield %14 : f32
    } -> tensor<64x4096xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%5, %5 : tensor<64x4096xf32>, tensor<64x4096xf32>) outs(%4 : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %14 = arith.mulf %in, %in_2 : f32
      linalg.yield %14 : f32
    } -> tensor<64x4096xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%6 : tensor<64x4096xf32>) outs(%1 : tensor<64x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %14 = arith.addf %in, %out : f32
      linalg.yield %14 : f32
    } -> tensor<64x1xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%7 : tensor<64x1xf32>) outs(%0 : tensor<64x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %14 = arith.divf %in, %cst_0 : f32
      linalg.yield %14 : f32
    } -> tensor<64x1xf32>
    %9 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%8 : tensor<64x1xf32>) outs(%0 : tensor<64x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %14 = arith.truncf %cst : f64 to f32
      %15 = arith.addf %in, %14 : f32
      linalg.yield %15 : f32
    } -> tensor<64x1xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%9 : tensor<64x1xf32>) outs(%0 : tensor<64x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %14 = math.rsqrt %in : f32
      linalg.yield %14 : f32
    } -> tensor<64x1xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%5, %10 : tensor<64x4096xf32>, tensor<64x1xf32>) outs(%4 : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %14 = arith.mulf %in, %in_2 : f32
      linalg.yield %14 : f32
    } -> tensor<64x4096xf32>
    %12 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%11, %arg1 : tensor<64x4096xf32>, tensor<4096xf32>) outs(%4 : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %14 = arith.mulf %in, %in_2 : f32
      linalg.yield %14 : f32
    } -> tensor<64x4096xf32>
    %13 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%12, %arg2 : tensor<64x4096xf32>, tensor<4096xf32>) outs(%4 : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %14 = arith.addf %in, %in_2 : f32
      linalg.yield %14 : f32
    } -> tensor<64x4096xf32>
    return %13 : tensor<64x4096xf32>
  }

  // CHECK-NOT: _ember_autotune
  // CHECK: def row_sum_2048_kernel(
  // CHECK: row_sum_2048_kernel[grid](*tensors, xnumel, rnumel, XBLOCK=2, RBLOCK=2048, num_warps=8,
  func.func private @row_sum_2048(%arg0: tensor<64x2048xf32>) -> tensor<64x1xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<64x1xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<64x1xf32>) -> tensor<64x1xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<64x2048xf32>) outs(%1 : tensor<64x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %out : f32
      linalg.yield %3 : f32
    } -> tensor<64x1xf32>
    return %2 : tensor<64x1xf32>
  }
}
