// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse)' | FileCheck %s

// An SGD-style update: p' = p - lr * g, the new value of the mutated input %p (ember.donate
// pairs arg 0 with result 0, arg 2 with result 1). The kernel reads %p elementwise and nothing
// else uses it: accepted. %m is also read by a second kernel: its old value must stay, refused.
// CHECK-LABEL: func.func @main
// CHECK-SAME: ember.writes_args = array<i64: 0, 0>
#id = affine_map<(d0) -> (d0)>
func.func private @axpy(%p: tensor<64xf32>, %g: tensor<64xf32>) -> tensor<64xf32> attributes {ember.kernel = "pointwise", ember.ops = ["mul", "sub"]} {
  %e = tensor.empty() : tensor<64xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%p, %g : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %c = arith.constant 0.1 : f32
    %t = arith.mulf %y, %c : f32
    %s = arith.subf %x, %t : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}
func.func @main(%p: tensor<64xf32>, %g: tensor<64xf32>, %m: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) attributes {ember.donate = array<i64: 0, 0, 2, 1>} {
  %0 = func.call @axpy(%p, %g) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %1 = func.call @axpy(%m, %g) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %2 = func.call @axpy(%g, %m) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %0, %1, %2 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}

// -----

// Refused: the kernel reads the argument transposed (element (i, j) of the result needs (j, i)
// of the old value), and a result returned twice.
// CHECK-LABEL: func.func @main
// CHECK-SAME: ember.writes_args = array<i64>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func private @tr(%p: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %e = tensor.empty() : tensor<8x8xf32>
  %r = linalg.generic {indexing_maps = [#tr, #id2], iterator_types = ["parallel", "parallel"]} ins(%p : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %n = arith.negf %x : f32
    linalg.yield %n : f32
  } -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}
func.func private @neg(%p: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %e = tensor.empty() : tensor<8x8xf32>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%p : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %n = arith.negf %x : f32
    linalg.yield %n : f32
  } -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}
func.func @main(%p: tensor<8x8xf32>, %q: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) attributes {ember.donate = array<i64: 0, 0, 1, 1>} {
  %0 = func.call @tr(%p) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = func.call @neg(%q) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0, %1, %1 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// An AdamW-like kernel with two results: the new moment %m' (result 1, from %m) and the new
// parameter %p' (result 0, from %p and %m'). %m feeds both, and both are written in place: the
// code generators compute both results of an element in one loop nest before storing either.
// CHECK-LABEL: func.func @main
// CHECK-SAME: ember.writes_args = array<i64: 0, 0, 1, 1>
#id3 = affine_map<(d0) -> (d0)>
func.func private @adam(%p: tensor<32xf32>, %m: tensor<32xf32>, %g: tensor<32xf32>) -> (tensor<32xf32>, tensor<32xf32>) attributes {ember.kernel = "pointwise", ember.ops = ["add", "sub"]} {
  %e = tensor.empty() : tensor<32xf32>
  %m2 = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel"]} ins(%m, %g : tensor<32xf32>, tensor<32xf32>) outs(%e : tensor<32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  %p2 = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel"]} ins(%p, %m2 : tensor<32xf32>, tensor<32xf32>) outs(%e : tensor<32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.subf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %p2, %m2 : tensor<32xf32>, tensor<32xf32>
}
func.func @main(%p: tensor<32xf32>, %m: tensor<32xf32>, %g: tensor<32xf32>) -> (tensor<32xf32>, tensor<32xf32>) attributes {ember.donate = array<i64: 0, 0, 1, 1>} {
  %0:2 = func.call @adam(%p, %m, %g) : (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
  return %0#0, %0#1 : tensor<32xf32>, tensor<32xf32>
}

// -----

// Refused: the result written over %p (result 0) is not computed from %p, while result 1 is;
// in C++ the two could be loop nests of their own, the first overwriting %p before the second
// reads it. %q (result 1's own argument, read by result 1 alone) is accepted.
// CHECK-LABEL: func.func @main
// CHECK-SAME: ember.writes_args = array<i64: 1, 1>
#id4 = affine_map<(d0) -> (d0)>
func.func private @two(%p: tensor<16xf32>, %q: tensor<16xf32>, %g: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) attributes {ember.kernel = "pointwise", ember.ops = ["mul", "add"]} {
  %e = tensor.empty() : tensor<16xf32>
  %a = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel"]} ins(%g : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %b = linalg.generic {indexing_maps = [#id4, #id4, #id4], iterator_types = ["parallel"]} ins(%p, %q : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %a, %b : tensor<16xf32>, tensor<16xf32>
}
func.func @main(%p: tensor<16xf32>, %q: tensor<16xf32>, %g: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) attributes {ember.donate = array<i64: 0, 0, 1, 1>} {
  %0:2 = func.call @two(%p, %q, %g) : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>)
  return %0#0, %0#1 : tensor<16xf32>, tensor<16xf32>
}
