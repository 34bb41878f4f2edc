// Valid IR that a pass does not handle gets a located error from that pass, never a Python
// exception: float scalar kernel arguments in the lowerings.
// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-fuse)'
// RUN: not ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse,ember-buffer-reuse,ember-lower-to-cpp)' 2>&1 | FileCheck %s --check-prefix=CPPERR
// RUN: not ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse,ember-buffer-reuse,ember-lower-to-triton)' 2>&1 | FileCheck %s --check-prefix=TRITON

// CPPERR: unsupported-input.mlir:[[# @LINE + 10]]:8: error: ember-lower-to-cpp: kernel @ember_fused_mul_0 takes a scalar argument (#1: f32); scalar kernel arguments are not supported by this pass
// CPPERR-NOT: {{Traceback|internal error}}
// TRITON: unsupported-input.mlir:[[# @LINE + 8]]:8: error: ember-lower-to-triton: kernel @ember_fused_mul_0 takes a scalar argument (#1: f32)
// TRITON-NOT: {{Traceback|internal error}}
// (Dynamic shapes are handled by every pass: test/passes/ember-dynamic-shapes.mlir.)

// Scalar arguments of @main become kernel arguments: ember-fuse and ember-buffer-reuse handle
// them; the lowerings report the kernel at its launch.
func.func @main(%arg0: tensor<4xf32>, %s: f32, %n: i64) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]} ins(%arg0 : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32):
    %t = arith.mulf %a, %s : f32
    linalg.yield %t : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
