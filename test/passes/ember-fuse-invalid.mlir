// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-fuse)'
// RUN: not ember-opt %s --pass-pipeline='builtin.module(ember-fuse{max-group-size=x})' 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not ember-opt %s --pass-pipeline='builtin.module(ember-fuse{no-such-option=1})' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// OPT: ember-opt: error: ember-fuse: option 'max-group-size' expects an integer, got 'x'
// UNKNOWN: ember-opt: error: ember-fuse: unknown option 'no-such-option' (options: max-group-size, fuse-reductions, externs, target, explain, horizontal-peak-bytes, recompute-max-ops, recompute-held-bytes)

// An op outside what code generation handles is reported at the op itself, not deep inside
// a generated kernel (the frontend then runs that part of the graph eagerly).
func.func @insert_slice(%x: tensor<4x4xf32>, %y: tensor<2x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{ember-fuse: cannot generate code for this op}}
  %r = tensor.insert_slice %y into %x[0, 0] [2, 4] [1, 1] : tensor<2x4xf32> into tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
// RUN: not ember-opt %s --pass-pipeline='builtin.module(ember-fuse{target=tpu})' 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: ember-opt: error: ember-fuse: option 'target' must be one of cpu, triton; got 'tpu'
