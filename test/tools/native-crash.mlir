// MLIR's own parser segfaults on some malformed inputs (this `permutation = [}1, 0, 2]` with
// torch-mlir 20261001). ember-opt runs the chunks in a forked child: the crash becomes one
// located error for its chunk, and the other chunks are still processed.
// RUN: not ember-opt %s --split-input-file 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=ERR < %t.err
// CHECK: func.func @before
// CHECK: func.func @after
// ERR: native-crash.mlir:{{[0-9]+}}:{{[0-9]+}}: error:
// ERR-NOT: {{Traceback|internal error}}
func.func @before() {
  return
}

// -----

module {
  func.func private @two_transposes(%a: tensor<3x4x3xf32>) -> (tensor<4x3x3xf32>, tensor<4x3x3xf32>)
      attributes {ember.kernel = "pointwise"} {
    %e = tensor.empty() : tensor<4x3x3xf32>
    %t0 = linalg.transpose ins(%a : tensor<3x4x3xf32>) outs(%e : tensor<4x3x3xf32>) permutation = [}1, 0, 2]
    %t1 = linalg.transpose ins(%a : tensor<3x4x3xf32>) outs(%e : tensor<4x3x3xf32>) permutation = [1, 2, 0]
    return %t0, %t1 : tensor<4x3x3xf32>, tensor<4x3x3xf32>
  }
}

// -----

func.func @after() {
  return
}
