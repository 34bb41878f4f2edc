// RUN: ember-opt %s | FileCheck %s
// RUN: ember-opt %s | ember-opt | FileCheck %s
// RUN: ember-opt --mlir-print-op-generic %s | ember-opt | FileCheck %s

// The host side of a compiled graph: a library matmul feeding a fused epilogue kernel.
// (Operands of one op share a type here: see ember-mixed-operand-types.mlir.)

// CHECK-LABEL: func.func @main
// CHECK-SAME:    (%[[X:.*]]: tensor<16x16xf32>, %[[W:.*]]: tensor<16x16xf32>)
// CHECK:         %[[MM:.*]] = "ember.extern"(%[[X]], %[[W]]) {params = {}, target = "aten.mm"} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK:         %[[R:.*]] = "ember.fused"(%[[MM]], %[[X]]) {kernel = @ember_fused_add_0} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK:         return %[[R]]
func.func @main(%arg0: tensor<16x16xf32>, %arg1: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = "ember.extern"(%arg0, %arg1) {target = "aten.mm", params = {}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = "ember.fused"(%0, %arg0) {kernel = @ember_fused_add_0} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %1 : tensor<16x16xf32>
}

// CHECK-LABEL: func.func private @ember_fused_add_0
// CHECK-SAME:    attributes {ember.kernel = "pointwise", ember.ops = ["add"]}
func.func private @ember_fused_add_0(%arg0: tensor<16x16xf32>, %arg1: tensor<16x16xf32>) -> tensor<16x16xf32>
    attributes {ember.kernel = "pointwise", ember.ops = ["add"]} {
  return %arg0 : tensor<16x16xf32>
}

// Extern targets with a variable operand count and parameters.
// CHECK-LABEL: func.func @conv
// CHECK:         "ember.extern"(%{{.*}}, %{{.*}}) {params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [2, 2]}, target = "aten.convolution"}
// CHECK:         "ember.extern"(%{{.*}}, %{{.*}}, %{{.*}}) {params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [1, 1]}, target = "aten.convolution"}
func.func @conv(%x: tensor<4x4x4x4xf32>, %w: tensor<4x4x4x4xf32>) -> (tensor<4x4x1x1xf32>, tensor<4x4x1x1xf32>) {
  %0 = "ember.extern"(%x, %w) {target = "aten.convolution", params = {stride = [2, 2], padding = [0, 0], dilation = [1, 1], groups = 1}} : (tensor<4x4x4x4xf32>, tensor<4x4x4x4xf32>) -> tensor<4x4x1x1xf32>
  %1 = "ember.extern"(%x, %w, %x) {target = "aten.convolution", params = {stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1}} : (tensor<4x4x4x4xf32>, tensor<4x4x4x4xf32>, tensor<4x4x4x4xf32>) -> tensor<4x4x1x1xf32>
  return %0, %1 : tensor<4x4x1x1xf32>, tensor<4x4x1x1xf32>
}

// A fused kernel with two results.
// CHECK-LABEL: func.func @two_results
// CHECK:         %{{.*}}:2 = "ember.fused"(%{{.*}}) {kernel = @k2} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
func.func @two_results(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = "ember.fused"(%a) {kernel = @k2} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @k2(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {ember.kernel = "pointwise", ember.ops = ["neg", "exp"]} {
  return %a, %a : tensor<4xf32>, tensor<4xf32>
}
