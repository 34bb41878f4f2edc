// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-convert-externs)' | FileCheck %s

// An f32 `linear` whose sum is only returned (a classifier: efficientnet_b0's and resnet50's
// last layer; its weight read transposed) is one aten.addmm, the bias added by the GEMM's
// epilogue as in eager's and Inductor's call; else the add was a kernel of its own after the
// library call (nothing to fuse it into).
// CHECK-LABEL: func.func @returned_linear
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.addmm", params = {transpose_b = true}} : (tensor<32xf32>, tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    return %[[R]]
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @returned_linear(%x: tensor<8x16xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %et = tensor.empty() : tensor<16x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x16xf32>) outs(%et : tensor<16x32xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %wt : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// A sum that a pointwise op reads keeps the add: ember-fuse puts it into that op's kernel
// (no launch to save), and the library call is the plain product.
// CHECK-LABEL: func.func @linear_then_relu
// CHECK:         callee = "aten.mm"
// CHECK:         arith.addf
// CHECK:         arith.maximumf
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @linear_then_relu(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%0 : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %zero : f32
    linalg.yield %r : f32
  } -> tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// -----

// The product itself is returned too: it is read twice, so the add stays.
// CHECK-LABEL: func.func @product_returned_too
// CHECK:         callee = "aten.mm"
// CHECK:         arith.addf
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @product_returned_too(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %0, %mm : tensor<8x32xf32>, tensor<8x32xf32>
}
