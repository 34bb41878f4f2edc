// RUN: ember-opt %s --emit-source --pass-pipeline='builtin.module(ember-lower-to-triton{autotune=false})' | FileCheck %s

// A sigmoid's reciprocal, `1 / (1 + exp(y))` in one body (torch-mlir's sigmoid), takes
// Triton's `/` in an f32 kernel, whose exp is Triton's own (`tl.exp`) anyway: on an H200 the
// correctly rounded division cost 3.5% of the f32 GELU-sigmoid chain over 2^28. A kernel that
// reads or writes bf16 keeps eager's functions and the correctly rounded division, and so
// does any other division.

#map = affine_map<(d0) -> (d0)>
module {
  // CHECK-LABEL: def sigmoid_f32_kernel(
  // CHECK-NOT: _ember_div
  // CHECK: tl.exp(
  // CHECK-NEXT: = ([[E:t[0-9]+]] + 1.0)
  // CHECK-NEXT: = (1.0 / {{t[0-9]+}})
  // CHECK: tl.store(
  func.func private @sigmoid_f32(%arg0: tensor<1024xf32>) -> tensor<1024xf32> attributes {ember.kernel = "pointwise", ember.ops = ["sigmoid"]} {
    %cst = arith.constant 1.000000e+00 : f32
    %0 = tensor.empty() : tensor<1024xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<1024xf32>) outs(%0 : tensor<1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %2 = arith.negf %in : f32
      %3 = math.exp %2 : f32
      %4 = arith.addf %3, %cst : f32
      %5 = arith.divf %cst, %4 : f32
      linalg.yield %5 : f32
    } -> tensor<1024xf32>
    return %1 : tensor<1024xf32>
  }

  // CHECK-LABEL: def sigmoid_bf16_kernel(
  // CHECK: _ember_exp(
  // CHECK: _ember_div(1.0, {{t[0-9]+}})
  func.func private @sigmoid_bf16(%arg0: tensor<1024xbf16>) -> tensor<1024xbf16> attributes {ember.kernel = "pointwise", ember.ops = ["sigmoid"]} {
    %cst = arith.constant 1.000000e+00 : f32
    %0 = tensor.empty() : tensor<1024xbf16>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<1024xbf16>) outs(%0 : tensor<1024xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %2 = arith.extf %in : bf16 to f32
      %3 = arith.negf %2 : f32
      %4 = math.exp %3 : f32
      %5 = arith.addf %4, %cst : f32
      %6 = arith.divf %cst, %5 : f32
      %7 = arith.truncf %6 : f32 to bf16
      linalg.yield %7 : bf16
    } -> tensor<1024xbf16>
    return %1 : tensor<1024xbf16>
  }

  // CHECK-LABEL: def reciprocal_f32_kernel(
  // CHECK: _ember_div(1.0, {{t[0-9]+}})
  func.func private @reciprocal_f32(%arg0: tensor<1024xf32>) -> tensor<1024xf32> attributes {ember.kernel = "pointwise", ember.ops = ["add", "div"]} {
    %cst = arith.constant 1.000000e+00 : f32
    %0 = tensor.empty() : tensor<1024xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<1024xf32>) outs(%0 : tensor<1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %2 = arith.addf %in, %cst : f32
      %3 = arith.divf %cst, %2 : f32
      linalg.yield %3 : f32
    } -> tensor<1024xf32>
    return %1 : tensor<1024xf32>
  }
}
