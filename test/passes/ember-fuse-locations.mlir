// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse)' --mlir-print-debuginfo | FileCheck %s

// A kernel carries the source locations of the ops it was made of (fused), on the function, its
// arguments and its return, so that a diagnostic about a kernel names the user's code.

// CHECK-DAG: #[[A:loc[0-9]+]] = loc("model.py":3:4)
// CHECK-DAG: #[[M:loc[0-9]+]] = loc("model.py":5:4)
// CHECK-DAG: #[[F:loc[0-9]+]] = loc(fused[#[[A]], #[[M]]])
// CHECK-LABEL: func.func @f
// CHECK: call @ember_fused_add_mul_0(%arg0) {{.*}} loc(#[[M]])
// CHECK: func.func private @ember_fused_add_mul_0(%arg0: tensor<4xf32> loc(fused[#[[A]], #[[M]]]))
// CHECK: return {{.*}} loc(#[[F]])
// CHECK-NEXT: } loc(#[[F]])
// CHECK-NOT: loc(unknown)
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<4xf32> loc("model.py":3:4)
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%0 : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.mulf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<4xf32> loc("model.py":5:4)
  return %1 : tensor<4xf32>
}
