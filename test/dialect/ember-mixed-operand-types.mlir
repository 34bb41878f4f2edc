// RUN: ember-opt %s | FileCheck %s
// XFAIL: *
// Known bug (dialects/ember.py): `inputs: Sequence[Operand[Any]]` lowers to ONE IRDL `any`
// constraint variable, and IRDL binds a variable to the first type it sees, so every operand
// of ember.fused / ember.extern must have the same type ("expected 'tensor<8x16xf32>' but got
// 'tensor<16x32xf32>'"). A matmul of 8x16 by 16x32 is rejected. Remove XFAIL once fixed.

// CHECK-LABEL: func.func @main
// CHECK: "ember.extern"(%{{.*}}, %{{.*}}) {params = {}, target = "aten.mm"} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
func.func @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x32xf32>) -> tensor<8x32xf32> {
  %0 = "ember.extern"(%arg0, %arg1) {target = "aten.mm", params = {}} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}
