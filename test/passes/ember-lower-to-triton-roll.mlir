// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-lower-to-triton)' | FileCheck %s

// A roll over two dims (roll_decomp: a concat of two slices of one value per dim) of a value
// computed in the kernel: the value is computed once, read at a piecewise index (one select
// per piece boundary), not once per piece and selected after (swin's shifted windows computed
// their layer norm four times: 0.19 ms for a 2 ms forward on the H200).
// CHECK-LABEL: func.func private @roll_of_computed
// CHECK-SAME: tl.where(((i{{[0-9]+}} < 5)) != 0, (i{{[0-9]+}} + 3), (i{{[0-9]+}} + -5))
// CHECK-SAME: tl.where(((i{{[0-9]+}} < 4)) != 0, (i{{[0-9]+}} + 2), (i{{[0-9]+}} + -4))
// CHECK-SAME: {{(tl\.|_ember_)}}exp(
// CHECK-NOT: {{(tl\.|_ember_)}}exp(
// CHECK-LABEL: func.func private @concat_of_two_values
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func private @roll_of_computed(%arg0: tensor<2x8x6xf32>) -> tensor<2x8x6xf32> attributes {ember.kernel = "pointwise", ember.ops = ["exp", "extract_slice", "concat", "extract_slice", "concat"]} {
  %0 = tensor.empty() : tensor<2x8x6xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<2x8x6xf32>) outs(%0 : tensor<2x8x6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  } -> tensor<2x8x6xf32>
  %s0 = tensor.extract_slice %1[0, 3, 0] [2, 5, 6] [1, 1, 1] : tensor<2x8x6xf32> to tensor<2x5x6xf32>
  %s1 = tensor.extract_slice %1[0, 0, 0] [2, 3, 6] [1, 1, 1] : tensor<2x8x6xf32> to tensor<2x3x6xf32>
  %c0 = tensor.concat dim(1) %s0, %s1 : (tensor<2x5x6xf32>, tensor<2x3x6xf32>) -> tensor<2x8x6xf32>
  %s2 = tensor.extract_slice %c0[0, 0, 2] [2, 8, 4] [1, 1, 1] : tensor<2x8x6xf32> to tensor<2x8x4xf32>
  %s3 = tensor.extract_slice %c0[0, 0, 0] [2, 8, 2] [1, 1, 1] : tensor<2x8x6xf32> to tensor<2x8x2xf32>
  %c1 = tensor.concat dim(2) %s2, %s3 : (tensor<2x8x4xf32>, tensor<2x8x2xf32>) -> tensor<2x8x6xf32>
  return %c1 : tensor<2x8x6xf32>
}

// Slices of two different values: one masked read per piece, selected (the general concat).
// CHECK-SAME: {{(tl\.|_ember_)}}exp(
// CHECK-SAME: {{(tl\.|_ember_)}}exp(
// CHECK-SAME: tl.where(
func.func private @concat_of_two_values(%arg0: tensor<2x8xf32>, %arg1: tensor<2x8xf32>) -> tensor<2x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["exp", "extract_slice", "concat"]} {
  %0 = tensor.empty() : tensor<2x8xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<2x8xf32>) outs(%0 : tensor<2x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  } -> tensor<2x8xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<2x8xf32>) outs(%0 : tensor<2x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  } -> tensor<2x8xf32>
  %s0 = tensor.extract_slice %1[0, 3] [2, 5] [1, 1] : tensor<2x8xf32> to tensor<2x5xf32>
  %s1 = tensor.extract_slice %2[0, 0] [2, 3] [1, 1] : tensor<2x8xf32> to tensor<2x3xf32>
  %c0 = tensor.concat dim(1) %s0, %s1 : (tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x8xf32>
  return %c0 : tensor<2x8xf32>
}

// Slices of one value that take different rows of the other dim: not one piecewise index (each
// piece is read at its own rows), the general concat.
// CHECK-LABEL: func.func private @concat_of_slices_of_other_rows
// CHECK-SAME: mask=xmask & g{{[0-9]+}}, other=0
// CHECK-SAME: mask=xmask & g{{[0-9]+}}, other=0
// CHECK-SAME: tl.where(
func.func private @concat_of_slices_of_other_rows(%arg0: tensor<4x8xf32>) -> tensor<2x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["extract_slice", "concat"]} {
  %s0 = tensor.extract_slice %arg0[0, 3] [2, 5] [1, 1] : tensor<4x8xf32> to tensor<2x5xf32>
  %s1 = tensor.extract_slice %arg0[2, 0] [2, 3] [1, 1] : tensor<4x8xf32> to tensor<2x3xf32>
  %c0 = tensor.concat dim(1) %s0, %s1 : (tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x8xf32>
  return %c0 : tensor<2x8xf32>
}
