// --verify-diagnostics fails on an unmet expectation and on an unexpected diagnostic, and
// reports both at their lines.
// RUN: not ember-opt %s --split-input-file --verify-diagnostics 2>&1 | FileCheck %s

// CHECK: verify-diagnostics.mlir:[[# @LINE + 2]]:8: error: unexpected error: 'ember.extern' has unknown callee 'aten.x'
func.func @unexpected(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ember.extern"(%a, %a) {callee = "aten.x", params = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
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
// CHECK: verify-diagnostics.mlir:[[# @LINE + 4]]:1: error: unexpected error: kernel @k must be private
// CHECK: verify-diagnostics.mlir:[[# @LINE + 1]]:4: error: expected error "must be private" was not produced
// expected-error @+1 {{must be private}}

func.func @k(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "pointwise"} {
  return %a : tensor<4xf32>
}

// -----

// A note must be expected like an error.
// CHECK: verify-diagnostics.mlir:[[# @LINE + 5]]:8: error: unexpected note: op result types: 'tensor<8xf32>'
// CHECK-NOT: unexpected error
func.func @call(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+2 {{'func.call' op result type mismatch at index 0}}
  // expected-note @+1 {{function result types}}
  %0 = func.call @k(%a) : (tensor<4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @k(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "pointwise"} {
  return %a : tensor<4xf32>
}
