// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{explain=true max-group-size=2})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=SIZE
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{explain=true fuse-reductions=false})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NORED
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{explain=true target=triton})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=TRITON
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{explain=true})' 2>&1 | FileCheck %s --check-prefix=CPU

// The refusals that depend on ember-fuse's options, on one function: two row sums over
// different extents (16 and 8), added, then exp. With the defaults (target=cpu) all four ops
// are one kernel: no remark (CPU). Each option set leaves one pair apart, with its reason.

#id = affine_map<(d0, d1) -> (d0, d1)>
#rowred = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>

// max-group-size=2: edges that save as many bytes go in program order: the first sum and add
// fuse, then neither the second sum nor exp fits.
// SIZE: ember-fuse-explain-options.mlir:[[# @LINE + 33]]:8: remark: ember-fuse: unfused 'sum' -> 'add': too large (3 ops > max-group-size=2)
// SIZE: ember-fuse-explain-options.mlir:[[# @LINE + 38]]:9: remark: ember-fuse: unfused 'add' -> 'exp': too large (3 ops > max-group-size=2)

// fuse-reductions=false: each sum is a kernel of its own; add and exp fuse.
// NORED: ember-fuse-explain-options.mlir:[[# @LINE + 29]]:8: remark: ember-fuse: unfused 'sum' -> 'add': reductions off (fuse-reductions=false)
// NORED: ember-fuse-explain-options.mlir:[[# @LINE + 28]]:8: remark: ember-fuse: unfused 'sum' -> 'add': reductions off (fuse-reductions=false)

// target=triton: a Triton program tiles one [rows, RBLOCK] space, so reductions over 16 and
// over 8 columns cannot share a kernel (on the CPU they do).
// TRITON: ember-fuse-explain-options.mlir:[[# @LINE + 24]]:8: remark: ember-fuse: unfused 'sum' -> 'add': target limit (reductions over different dims in one kernel)

// SIZE-NOT: remark
// NORED-NOT: remark
// TRITON-NOT: remark
// CPU-NOT: remark
// CPU: call @ember_fused_sum_add_exp_0(%arg0, %arg1)
// CPU-NOT: remark
func.func @two_row_sums(%x: tensor<4x16xf32>, %y: tensor<4x8xf32>) -> tensor<4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#id, #rowred], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x16xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#id, #rowred], iterator_types = ["parallel", "reduction"]}
      ins(%y : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#v, #v, #v], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %s = arith.addf %i, %j : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %x2 = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%r : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%i: f32, %o: f32):
    %s = math.exp %i : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %x2 : tensor<4xf32>
}
