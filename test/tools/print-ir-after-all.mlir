// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-buffer-reuse,canonicalize)' --mlir-print-ir-after-all -o %t 2>&1 | FileCheck %s --check-prefix=DUMP
// RUN: FileCheck %s --check-prefix=OUT < %t
// RUN: ember-opt %s --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// DUMP: // -----// IR Dump After EmberBufferReuse: ember-buffer-reuse //----- //
// DUMP: ember.arena_bytes = 0
// DUMP: // -----// IR Dump After CanonicalizerPass: canonicalize
// OUT-LABEL: func.func @main
// OUT-SAME: ember.arena_bytes = 0 : i64
// LOC: loc("{{.*}}print-ir-after-all.mlir":[[# @LINE + 1]]:1)
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
