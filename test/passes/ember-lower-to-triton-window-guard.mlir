// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-lower-to-triton)' | FileCheck %s

// A concat read inside an unrolled window reduction (`any` over dim 0 of a cat of a slice and
// the input: fuzz seed 59 index 1030): each piece's guard depends on the window index only, a
// constexpr in `tl.static_range`, so it is a Python bool there; the load's mask is compared
// with 0 so that it is a boolean block (the interpreter typed `xmask & True` int32 and refused
// it as a mask: the graph ran eagerly). A guard that depends on the tile stays `xmask & g`
// (ember-lower-to-triton-windows.mlir).
// CHECK-LABEL: func.func private @window_guard
// CHECK-SAME: for rindex in tl.static_range(5):
// CHECK-SAME: [[R:r[0-9]+]] = rindex
// CHECK-SAME: [[G:g[0-9]+]] = ([[R]] < 2)
// CHECK-SAME: mask=((xmask & [[G]]) != 0)
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d1, d2)>
func.func private @window_guard(%arg0: tensor<3x2x3xf32>) -> tensor<2x3xi1> attributes {ember.kernel = "reduction", ember.ops = ["extract_slice", "concat", "reduce"]} {
  %cst = arith.constant 0.000000e+00 : f32
  %false = arith.constant false
  %extracted_slice = tensor.extract_slice %arg0[1, 0, 0] [2, 2, 3] [1, 1, 1] : tensor<3x2x3xf32> to tensor<2x2x3xf32>
  %concat = tensor.concat dim(0) %extracted_slice, %arg0 : (tensor<2x2x3xf32>, tensor<3x2x3xf32>) -> tensor<5x2x3xf32>
  %0 = tensor.empty() : tensor<2x3xi1>
  %1 = linalg.fill ins(%false : i1) outs(%0 : tensor<2x3xi1>) -> tensor<2x3xi1>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel", "parallel"]} ins(%concat : tensor<5x2x3xf32>) outs(%1 : tensor<2x3xi1>) {
  ^bb0(%in: f32, %out: i1):
    %3 = arith.cmpf une, %in, %cst : f32
    %4 = arith.ori %3, %out : i1
    linalg.yield %4 : i1
  } -> tensor<2x3xi1>
  return %2 : tensor<2x3xi1>
}
