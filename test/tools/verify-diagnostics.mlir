// --verify-diagnostics fails on an unmet expectation and on an unexpected diagnostic, and
// reports both at their lines.
// RUN: not ember-opt %s --split-input-file --verify-diagnostics 2>&1 | FileCheck %s

// CHECK: verify-diagnostics.mlir:[[# @LINE + 2]]:8: error: unexpected error: 'ember.extern' has unknown target 'aten.x'
func.func @unexpected(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ember.extern"(%a, %a) {target = "aten.x", params = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK: verify-diagnostics.mlir:[[# @LINE + 2]]:6: error: expected error "this is never produced" was not produced
func.func @unmet() {
  // expected-error @+1 {{this is never produced}}
  return
}

// -----

// An error on another line than the expectation is both unexpected and unmet.
// CHECK: verify-diagnostics.mlir:[[# @LINE + 4]]:8: error: unexpected error: 'ember.fused' refers to unknown kernel @gone
// CHECK: verify-diagnostics.mlir:[[# @LINE + 1]]:6: error: expected error "refers to unknown kernel" was not produced
  // expected-error @+1 {{refers to unknown kernel}}
func.func @wrong_line(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ember.fused"(%a) {kernel = @gone} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
