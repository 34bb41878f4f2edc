// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-lower-to-triton)' | FileCheck %s

// An int8 amax squared in the kernel that reduces it (fuzz seed 63 index 215): Triton's
// tl.max widens an int8 to int32 (and a Python-int identity widened the where before it),
// so `amax * amax` ran in int32: 127 * 127 = 16129 where eager's int8 wraps to 1. The masked
// lanes' identity is an int8 and the reduction's result is narrowed back to int8.
// CHECK-LABEL: func.func private @ember_fused_amax_mul_cmp_0
// CHECK-SAME: [[R:red[0-9]+]] = (tl.max(tl.where(xmask & rmask, (x{{[0-9]+}}).to(tl.int8), tl.full([], -(2**7), tl.int8)), 1)[:, None]).to(tl.int8)\0A    t{{[0-9]+}} = ([[R]] * [[R]])
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> ()>
#map2 = affine_map<() -> ()>
module {
  func.func @main(%arg0: tensor<i8>, %arg1: tensor<f16>) -> tensor<f16> attributes {ember.arena_bytes = 0 : i64, ember.unplanned_bytes = 0 : i64} {
    %0 = call @ember_fused_amax_mul_cmp_0(%arg0, %arg1) {ember.offsets = array<i64: -1>} : (tensor<i8>, tensor<f16>) -> tensor<f16>
    return %0 : tensor<f16>
  }
  func.func private @ember_fused_amax_mul_cmp_0(%arg0: tensor<i8>, %arg1: tensor<f16>) -> tensor<f16> attributes {ember.kernel = "reduction", ember.ops = ["amax", "mul", "cmp", "convert", "where"]} {
    %c0_i64 = arith.constant 0 : i64
    %c-128_i8 = arith.constant -128 : i8
    %expanded = tensor.expand_shape %arg0 [] output_shape [1] : tensor<i8> into tensor<1xi8>
    %0 = tensor.empty() : tensor<i8>
    %1 = linalg.fill ins(%c-128_i8 : i8) outs(%0 : tensor<i8>) -> tensor<i8>
    %2 = tensor.empty() : tensor<i64>
    %3 = linalg.fill ins(%c0_i64 : i64) outs(%2 : tensor<i64>) -> tensor<i64>
    %4:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["reduction"]} ins(%expanded : tensor<1xi8>) outs(%1, %3 : tensor<i8>, tensor<i64>) {
    ^bb0(%in: i8, %out: i8, %out_0: i64):
      %11 = arith.maxsi %in, %out : i8
      %12 = arith.cmpi sgt, %in, %out : i8
      %13 = arith.select %12, %c0_i64, %out_0 : i64
      linalg.yield %11, %13 : i8, i64
    } -> (tensor<i8>, tensor<i64>)
    %5 = linalg.generic {indexing_maps = [#map2, #map2, #map2], iterator_types = []} ins(%4#0, %4#0 : tensor<i8>, tensor<i8>) outs(%0 : tensor<i8>) {
    ^bb0(%in: i8, %in_0: i8, %out: i8):
      %11 = arith.muli %in, %in_0 : i8
      linalg.yield %11 : i8
    } -> tensor<i8>
    %6 = tensor.empty() : tensor<i1>
    %7 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = []} ins(%arg0 : tensor<i8>) outs(%6 : tensor<i1>) {
    ^bb0(%in: i8, %out: i1):
      %11 = arith.extsi %in : i8 to i64
      %12 = arith.cmpi sgt, %11, %c0_i64 : i64
      linalg.yield %12 : i1
    } -> tensor<i1>
    %8 = tensor.empty() : tensor<f16>
    %9 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = []} ins(%5 : tensor<i8>) outs(%8 : tensor<f16>) {
    ^bb0(%in: i8, %out: f16):
      %11 = arith.sitofp %in : i8 to f16
      linalg.yield %11 : f16
    } -> tensor<f16>
    %10 = linalg.generic {indexing_maps = [#map2, #map2, #map2, #map2], iterator_types = []} ins(%7, %9, %arg1 : tensor<i1>, tensor<f16>, tensor<f16>) outs(%8 : tensor<f16>) {
    ^bb0(%in: i1, %in_0: f16, %in_1: f16, %out: f16):
      %11 = arith.select %in, %in_0, %in_1 : f16
      linalg.yield %11 : f16
    } -> tensor<f16>
    return %10 : tensor<f16>
  }
}
