// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true})'
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true in-place=false})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOINPLACE

// ember-buffer-reuse{print-plan=true}: a remark per buffer at the op that defines it (name,
// exact bytes, arena offset or own allocation, the buffer it overwrites in place, live range
// as first and last op of @main counted from 0), then the arena's size at @main.

// Views: %0 is read late through a view chain (live to op 7); %4 escapes through the returned
// view. In place, %2 and %3 overwrite their dying operands (%1, %2). Without in-place, %2
// needs its own 64 bytes.
// NOINPLACE: ember-buffer-reuse-plan.mlir:[[# @LINE + 19]]:8: remark: ember-buffer-reuse: buffer %0: 24 bytes at offset 0, live [0, 6]
// NOINPLACE: remark: ember-buffer-reuse: buffer %1: 24 bytes at offset 64, live [2, 3]
// NOINPLACE: remark: ember-buffer-reuse: buffer %2: 24 bytes at offset 128, live [3, 4]
// NOINPLACE: remark: ember-buffer-reuse: buffer %3: 24 bytes at offset 64, live [4, 6]
// NOINPLACE: remark: ember-buffer-reuse: buffer %4: 24 bytes, own allocation (escapes), live [6, 8]
// NOINPLACE: ember-buffer-reuse-plan.mlir:[[# @LINE + 12]]:1: remark: ember-buffer-reuse: arena 192 bytes for 4 of 5 buffers (256 bytes without reuse)
#id1 = affine_map<(d0) -> (d0)>
func.func private @views_add(%a: tensor<6xf32>, %b: tensor<6xf32>) -> tensor<6xf32> attributes {ember.kernel = "pointwise", ember.ops = ["add"]} {
  %e = tensor.empty() : tensor<6xf32>
  %r = linalg.generic {indexing_maps = [#id1, #id1, #id1], iterator_types = ["parallel"]} ins(%a, %b : tensor<6xf32>, tensor<6xf32>) outs(%e : tensor<6xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<6xf32>
  return %r : tensor<6xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 128 bytes for 4 of 5 buffers (256 bytes without reuse)}}
func.func @main(%x: tensor<6xf32>) -> tensor<2x3xf32> {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 24 bytes at offset 0, live [0, 6]}}
  %0 = func.call @views_add(%x, %x) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %v = tensor.expand_shape %0 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 24 bytes at offset 64, live [2, 3]}}
  %1 = func.call @views_add(%x, %x) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 24 bytes at offset 64 (in place of %1), live [3, 4]}}
  %2 = func.call @views_add(%1, %1) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %3: 24 bytes at offset 64 (in place of %2), live [4, 6]}}
  %3 = func.call @views_add(%2, %2) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %w = tensor.collapse_shape %v [[0, 1]] : tensor<2x3xf32> into tensor<6xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %4: 24 bytes, own allocation (escapes), live [6, 8]}}
  %4 = func.call @views_add(%w, %3) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %5 = tensor.expand_shape %4 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
  return %5 : tensor<2x3xf32>
}

// -----

// A library call's result is planned like a kernel's; a function without launches has an
// empty arena.
func.func private @neg(%a: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 2 buffers (1024 bytes without reuse)}}
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 1]}}
  %0 = "ember.extern"(%x, %x) {callee = "aten.mm", params = {}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes, own allocation (escapes), live [1, 2]}}
  %1 = func.call @neg(%0) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %1 : tensor<16x16xf32>
}
