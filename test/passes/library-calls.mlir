// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse,canonicalize,ember-buffer-reuse)' | FileCheck %s
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse,canonicalize,ember-buffer-reuse,ember-lower-to-cpp)' | FileCheck %s --check-prefix=CPP

// A library call (frontend/library_calls.py: an ATen op that is neither fused nor lowered, here
// a scan) sits between two pointwise ops. Fusion must not merge across it: the producer and the
// consumer stay two kernels, with the call between them. The call's result is the library's own
// tensor, so the buffer planner gives it no arena offset; the producer's result, dead after the
// call, gets one.

// CHECK:       func.func private @ember_lib_0(tensor<4x16xf32>) -> tensor<4x16xf32> attributes {ember.library = "aten.cumsum.default"
// CHECK-LABEL: func.func @main
// CHECK:         %[[A:.*]] = call @ember_fused_mul_0(%arg0) {ember.offsets = array<i64: 0>}
// CHECK-NEXT:    %[[S:.*]] = call @ember_lib_0(%[[A]]) : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[R:.*]] = call @ember_fused_add_1(%[[S]], %arg1) {ember.offsets = array<i64: -1>}
// CHECK-NEXT:    return %[[R]]

// The C++ lowering emits code for the two kernels and leaves the declaration alone.
// CPP: func.func private @ember_lib_0(tensor<4x16xf32>) -> tensor<4x16xf32> attributes {ember.library = "aten.cumsum.default", ember.params = {dim = 1 : i64}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}{{$}}
// CPP: func.func private @ember_fused_mul_0({{.*}}ember.source = "extern
// CPP: func.func private @ember_fused_add_1({{.*}}ember.source = "extern

#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
module {
  func.func private @ember_lib_0(tensor<4x16xf32>) -> tensor<4x16xf32> attributes {ember.library = "aten.cumsum.default", ember.params = {dim = 1 : i64}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}
  func.func @main(%arg0: tensor<4x16xf32>, %arg1: tensor<16xf32>) -> tensor<4x16xf32> {
    %cst = arith.constant 2.000000e+00 : f32
    %e = tensor.empty() : tensor<4x16xf32>
    %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.mulf %in, %cst : f32
      linalg.yield %m : f32
    } -> tensor<4x16xf32>
    %1 = call @ember_lib_0(%0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %2 = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel"]} ins(%1, %arg1 : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%in: f32, %b: f32, %out: f32):
      %a = arith.addf %in, %b : f32
      linalg.yield %a : f32
    } -> tensor<4x16xf32>
    return %2 : tensor<4x16xf32>
  }
}
