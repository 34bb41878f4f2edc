// RUN: ember-opt %s --split-input-file --verify-diagnostics
// RUN: not ember-opt %s --split-input-file 2>&1 | FileCheck %s --check-prefix=LOC

// Without --verify-diagnostics the same errors read file:line:col (line numbers of the whole
// file, not of the chunk).
// LOC: ember-invalid.mlir:[[# @LINE + 3]]:8: error: 'ember.extern' has unknown callee 'aten.nope'

func.func @unknown_target(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ember.extern"(%a, %a) {callee = "aten.nope", params = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-error @-1 {{'ember.extern' has unknown callee 'aten.nope' (known: aten.addmm}}
  return %0 : tensor<4xf32>
}

// -----

// LOC: ember-invalid.mlir:[[# @LINE + 3]]:8: error: 'ember.extern' callee 'aten.mm' takes 2 operands, got 3

func.func @wrong_operand_count(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = "ember.extern"(%a, %a, %a) {callee = "aten.mm", params = {}} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  // expected-error @above {{'ember.extern' callee 'aten.mm' takes 2 operands, got 3}}
  return %0 : tensor<4x4xf32>
}

// -----

func.func @conv_range(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'ember.extern' callee 'aten.convolution' takes 2 to 3 operands, got 1}}
  %0 = "ember.extern"(%a) {callee = "aten.convolution", params = {}} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A kernel launch must match the kernel's signature (upstream func.call verifier).
func.func @call_type_mismatch(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+3 {{'func.call' op result type mismatch at index 0}}
  // expected-note @+2 {{op result types: 'tensor<8xf32>'}}
  // expected-note @+1 {{function result types: 'tensor<4xf32>'}}
  %0 = func.call @k(%a) : (tensor<4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @k(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  return %a : tensor<4xf32>
}

// -----

// Kernel functions are checked after parsing, by ember.dialects.verify_module.
// LOC: ember-invalid.mlir:[[# @LINE + 2]]:1: error: kernel @bad_kind: 'ember.kernel' must be one of pointwise, reduction
// expected-error @+1 {{kernel @bad_kind: 'ember.kernel' must be one of pointwise, reduction}}
func.func private @bad_kind(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "elementwise"} {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{kernel @public_kernel must be private}}
func.func @public_kernel(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "pointwise"} {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{kernel @no_body has no body}}
func.func private @no_body(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "pointwise"}

// -----

// Library declarations (frontend/library_calls.py) are checked the same way.
// expected-error @+1 {{library @lib_body is a declaration: it must have no body}}
func.func private @lib_body(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.library = "aten.cumsum.default", ember.tensor_args = ["self"], ember.params = {dim = 0 : i64}, ember.results = array<i64: 0>} {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{library @lib_args: 'ember.tensor_args' must name each of its 2 arguments}}
func.func private @lib_args(tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> attributes {ember.library = "aten.add.Tensor", ember.tensor_args = ["self"], ember.params = {}, ember.results = array<i64: 0>}

// -----

// expected-error @+1 {{library @lib_name: 'ember.library' must name an op overload (<namespace>.<op>.<overload>, e.g. aten.sort.default)}}
func.func private @lib_name(tensor<4xf32>) -> tensor<4xf32> attributes {ember.library = "cumsum", ember.tensor_args = ["self"], ember.params = {}, ember.results = array<i64: 0>}

// -----

// A callee that is not a string (a mutation the ember-opt fuzzer made: the attribute's name and
// value cut out) is a diagnostic, not an internal error.
func.func @callee_not_a_string(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ember.extern"(%a, %a) {callee = {groups = 2 : i64}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-error @-1 {{'ember.extern' needs a string attribute 'callee'}}
  return %0 : tensor<4xf32>
}

// -----

func.func @params_not_a_dictionary(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = "ember.extern"(%a, %a) {callee = "aten.mm", params = [1, 2]} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  // expected-error @-1 {{'ember.extern' attribute 'params' must be a dictionary}}
  return %0 : tensor<4x4xf32>
}
