// RUN: ember-opt %s | FileCheck %s
// RUN: ember-opt %s | ember-opt | FileCheck %s
// RUN: ember-opt --mlir-print-op-generic %s | ember-opt | FileCheck %s

// The host side of a compiled graph: a library matmul (operands of different types) feeding a
// fused kernel, launched with func.call.

// CHECK-LABEL: func.func @main
// CHECK-SAME:    (%[[X:.*]]: tensor<8x16xf32>, %[[W:.*]]: tensor<16x32xf32>, %[[B:.*]]: tensor<32xf32>)
// CHECK:         %[[MM:.*]] = "ember.extern"(%[[X]], %[[W]]) {callee = "aten.mm", params = {}} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
// CHECK:         %[[R:.*]] = call @ember_fused_add_0(%[[MM]], %[[B]]) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
// CHECK:         return %[[R]]
func.func @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x32xf32>, %arg2: tensor<32xf32>) -> tensor<8x32xf32> {
  %0 = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {}} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %1 = func.call @ember_fused_add_0(%0, %arg2) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// CHECK-LABEL: func.func private @ember_fused_add_0
// CHECK-SAME:    attributes {ember.kernel = "pointwise", ember.ops = ["add"]}
func.func private @ember_fused_add_0(%arg0: tensor<8x32xf32>, %arg1: tensor<32xf32>) -> tensor<8x32xf32>
    attributes {ember.kernel = "pointwise", ember.ops = ["add"]} {
  return %arg0 : tensor<8x32xf32>
}

// Extern targets with an optional third operand (bias / accumulator) and parameters.
// CHECK-LABEL: func.func @conv
// CHECK:         "ember.extern"(%{{.*}}, %{{.*}}) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [2, 2]}} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x3x3xf32>
// CHECK:         "ember.extern"(%{{.*}}, %{{.*}}, %{{.*}}) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [1, 1]}} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
// CHECK:         "ember.extern"(%{{.*}}, %{{.*}}, %{{.*}}) {callee = "aten.addmm", params = {}} : (tensor<8x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
func.func @conv(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>, %acc: tensor<8x8xf32>, %p: tensor<8x16xf32>, %q: tensor<16x8xf32>) -> (tensor<1x4x3x3xf32>, tensor<1x4x6x6xf32>, tensor<8x8xf32>) {
  %0 = "ember.extern"(%x, %w) {callee = "aten.convolution", params = {stride = [2, 2], padding = [0, 0], dilation = [1, 1], groups = 1}} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x3x3xf32>
  %1 = "ember.extern"(%x, %w, %b) {callee = "aten.convolution", params = {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1}} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %2 = "ember.extern"(%acc, %p, %q) {callee = "aten.addmm", params = {}} : (tensor<8x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  return %0, %1, %2 : tensor<1x4x3x3xf32>, tensor<1x4x6x6xf32>, tensor<8x8xf32>
}

// A reduction kernel with two results.
// CHECK-LABEL: func.func @two_results
// CHECK:         %{{.*}}:2 = call @k2(%{{.*}}) : (tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>)
// CHECK-LABEL: func.func private @k2
// CHECK-SAME:    attributes {ember.kernel = "reduction", ember.ops = ["amax", "sub"]}
func.func @two_results(%a: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  %0:2 = func.call @k2(%a) : (tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4x8xf32>
}
func.func private @k2(%a: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) attributes {ember.kernel = "reduction", ember.ops = ["amax", "sub"]} {
  %e = tensor.empty() : tensor<4xf32>
  return %e, %a : tensor<4xf32>, tensor<4x8xf32>
}
