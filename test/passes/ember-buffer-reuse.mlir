// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{in-place=false})' | FileCheck %s --check-prefixes=CHECK,NOINPLACE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse)' | FileCheck %s --check-prefixes=CHECK,INPLACE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{reshape-in-place=false})' | FileCheck %s --check-prefix=NORESHAPE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{alignment=256 in-place=false})' | FileCheck %s --check-prefix=ALIGN256
// RUN: not ember-opt %s --pass-pipeline='builtin.module(ember-buffer-reuse{alignment=48})' 2>&1 | FileCheck %s --check-prefix=BADALIGN

// BADALIGN: ember-opt: error: ember-buffer-reuse: option 'alignment' must be a positive power of two, got 48

// Four chained pointwise kernels: %2 reuses %0's bytes (their live ranges [0,1] and [2,3] are
// disjoint); with in-place every intermediate overwrites its dying operand. The last result
// is returned: -1, its own allocation.
// CHECK-LABEL: func.func private @chain_exp
// CHECK-LABEL: func.func @main
// NOINPLACE-SAME: attributes {ember.arena_bytes = 2048 : i64, ember.unplanned_bytes = 3072 : i64}
// INPLACE-SAME:   attributes {ember.arena_bytes = 1024 : i64, ember.unplanned_bytes = 3072 : i64}
// NOINPLACE: %[[A:.*]] = call @chain_exp(%arg0) {ember.offsets = array<i64: 0>}
// NOINPLACE: %[[B:.*]] = call @chain_exp(%[[A]]) {ember.offsets = array<i64: 1024>}
// NOINPLACE: %[[C:.*]] = call @chain_exp(%[[B]]) {ember.offsets = array<i64: 0>}
// INPLACE:   %[[A:.*]] = call @chain_exp(%arg0) {ember.offsets = array<i64: 0>}
// INPLACE:   %[[B:.*]] = call @chain_exp(%[[A]]) {ember.offsets = array<i64: 0>}
// INPLACE:   %[[C:.*]] = call @chain_exp(%[[B]]) {ember.offsets = array<i64: 0>}
// CHECK:     %[[D:.*]] = call @chain_exp(%[[C]]) {ember.offsets = array<i64: -1>}
// CHECK:     return %[[D]]
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func private @chain_exp(%a: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["exp"]} {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.exp %x : f32
    linalg.yield %y : f32
  } -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = func.call @chain_exp(%x) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = func.call @chain_exp(%0) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = func.call @chain_exp(%1) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = func.call @chain_exp(%2) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %3 : tensor<16x16xf32>
}

// -----

// A kernel that reads its operand transposed must not write over it: no in-place, even
// though the operand dies there and has the same size. An extern result is planned too.
// CHECK-LABEL: func.func private @transpose_neg
// CHECK-LABEL: func.func @main
// CHECK-SAME:  attributes {ember.arena_bytes = 2048 : i64, ember.unplanned_bytes = 3072 : i64}
// CHECK:       %[[M:.*]] = "ember.extern"(%arg0, %arg0) {callee = "aten.mm", ember.offsets = array<i64: 0>, params = {}}
// CHECK:       %[[T:.*]] = call @transpose_neg(%[[M]]) {ember.offsets = array<i64: 1024>}
// CHECK:       call @transpose_neg(%[[T]]) {ember.offsets = array<i64: 0>}
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func private @transpose_neg(%a: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["transpose", "neg"]} {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = "ember.extern"(%x, %x) {callee = "aten.mm", params = {}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = func.call @transpose_neg(%0) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = func.call @transpose_neg(%1) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = func.call @transpose_neg(%2) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %3 : tensor<16x16xf32>
}

// -----

// The same when the operand is read elementwise but a later op of the kernel transposes what
// was computed from it (autograd's rotary-embedding gradient, then `permute`, seq == heads):
// result element (i, j) comes from operand element (j, i), so no in-place either.
// CHECK-LABEL: func.func private @neg_then_transpose
// CHECK-LABEL: func.func @main
// CHECK:       %[[M:.*]] = "ember.extern"(%arg0, %arg0) {callee = "aten.mm", ember.offsets = array<i64: 0>, params = {}}
// CHECK:       %[[T:.*]] = call @neg_then_transpose(%[[M]]) {ember.offsets = array<i64: 1024>}
// CHECK:       call @neg_then_transpose(%[[T]]) {ember.offsets = array<i64: 0>}
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func private @neg_then_transpose(%a: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg", "transpose"]} {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<16x16xf32>
  %t = linalg.transpose ins(%r : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) permutation = [1, 0]
  return %t : tensor<16x16xf32>
}
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = "ember.extern"(%x, %x) {callee = "aten.mm", params = {}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = func.call @neg_then_transpose(%0) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = func.call @neg_then_transpose(%1) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = func.call @neg_then_transpose(%2) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %3 : tensor<16x16xf32>
}

// -----

// Views: %0 is read late through a view chain, which keeps it alive to the last kernel; the
// returned view %5 makes its source %4 escape. 6xf32 (24 bytes) pads to the alignment. With
// in-place, %2 and %3 overwrite their dying operand (passed twice: both reads elementwise).
// CHECK-LABEL: func.func private @views_add
// CHECK-LABEL: func.func @main
// NOINPLACE-SAME: attributes {ember.arena_bytes = 192 : i64, ember.unplanned_bytes = 256 : i64}
// INPLACE-SAME:   attributes {ember.arena_bytes = 128 : i64, ember.unplanned_bytes = 256 : i64}
// CHECK:       %[[A:.*]] = call @views_add(%arg0, %arg0) {ember.offsets = array<i64: 0>}
// CHECK:       %[[V:.*]] = tensor.expand_shape %[[A]]
// CHECK:       %[[B:.*]] = call @views_add(%arg0, %arg0) {ember.offsets = array<i64: 64>}
// NOINPLACE:   %[[C:.*]] = call @views_add(%[[B]], %[[B]]) {ember.offsets = array<i64: 128>}
// NOINPLACE:   %[[D:.*]] = call @views_add(%[[C]], %[[C]]) {ember.offsets = array<i64: 64>}
// INPLACE:     %[[C:.*]] = call @views_add(%[[B]], %[[B]]) {ember.offsets = array<i64: 64>}
// INPLACE:     %[[D:.*]] = call @views_add(%[[C]], %[[C]]) {ember.offsets = array<i64: 64>}
// CHECK:       %[[W:.*]] = tensor.collapse_shape %[[V]]
// CHECK:       %[[E:.*]] = call @views_add(%[[W]], %[[D]]) {ember.offsets = array<i64: -1>}
// CHECK:       %[[R:.*]] = tensor.expand_shape %[[E]]
// CHECK:       return %[[R]]
// ALIGN256-LABEL: func.func private @views_add
// ALIGN256:       ember.arena_bytes = 768 : i64, ember.unplanned_bytes = 1024 : i64
// ALIGN256:       ember.offsets = array<i64: 0>
// ALIGN256:       ember.offsets = array<i64: 256>
// ALIGN256:       ember.offsets = array<i64: 512>
// ALIGN256:       ember.offsets = array<i64: 256>
// ALIGN256:       ember.offsets = array<i64: -1>
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
func.func @main(%x: tensor<6xf32>) -> tensor<2x3xf32> {
  %0 = func.call @views_add(%x, %x) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %v = tensor.expand_shape %0 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
  %1 = func.call @views_add(%x, %x) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %2 = func.call @views_add(%1, %1) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %3 = func.call @views_add(%2, %2) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %w = tensor.collapse_shape %v [[0, 1]] : tensor<2x3xf32> into tensor<6xf32>
  %4 = func.call @views_add(%w, %3) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %5 = tensor.expand_shape %4 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
  return %5 : tensor<2x3xf32>
}

// -----

// A result whose size is not static gets its own allocation (-1) and is not counted: the
// frontend specializes shapes, so this only costs memory, never correctness.
// CHECK-LABEL: func.func private @dyn_neg
// CHECK-LABEL: func.func @main
// CHECK-SAME:  attributes {ember.arena_bytes = 0 : i64, ember.unplanned_bytes = 0 : i64}
// CHECK:       call @dyn_neg(%arg0) {ember.offsets = array<i64: -1>}
#id1 = affine_map<(d0) -> (d0)>
func.func private @dyn_neg(%a: tensor<?xf32>) -> tensor<?xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<?xf32>
  return %r : tensor<?xf32>
}
func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> {
  %0 = func.call @dyn_neg(%x) : (tensor<?xf32>) -> tensor<?xf32>
  %1 = func.call @dyn_neg(%0) : (tensor<?xf32>) -> tensor<?xf32>
  return %1 : tensor<?xf32>
}

// -----

// A library call marked `ember.view` (view_as_complex of a kernel result) aliases its operand:
// %0's buffer lives until the FFT reads the view (op 4), so %2 cannot take its bytes (without
// the rule %0 would die at op 1 and %2 would be placed at offset 0, over the viewed data).
// CHECK-LABEL: func.func @main
// CHECK:       %[[A:.*]] = call @re_exp(%arg0) {ember.offsets = array<i64: 0>}
// CHECK:       %[[V:.*]] = call @ember_lib_0(%[[A]])
// CHECK:       %[[B:.*]] = call @re_exp(%arg0) {ember.offsets = array<i64: 64>}
// CHECK:       call @re_exp(%[[B]]) {ember.offsets = array<i64: -1>}
// CHECK:       call @ember_lib_1(%[[V]])
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func private @re_exp(%a: tensor<4x2xf32>) -> tensor<4x2xf32> attributes {ember.kernel = "pointwise", ember.ops = ["exp"]} {
  %e = tensor.empty() : tensor<4x2xf32>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x2xf32>) outs(%e : tensor<4x2xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.exp %x : f32
    linalg.yield %y : f32
  } -> tensor<4x2xf32>
  return %r : tensor<4x2xf32>
}
func.func private @ember_lib_0(tensor<4x2xf32>) -> tensor<4xcomplex<f32>> attributes {ember.library = "aten.view_as_complex.default", ember.params = {}, ember.results = array<i64: 0>, ember.tensor_args = ["self"], ember.view}
func.func private @ember_lib_1(tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>> attributes {ember.library = "aten._fft_c2c.default", ember.params = {dim = [0], normalization = 0 : i64, forward = true}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}
func.func @main(%x: tensor<4x2xf32>) -> (tensor<4x2xf32>, tensor<4xcomplex<f32>>) {
  %0 = func.call @re_exp(%x) : (tensor<4x2xf32>) -> tensor<4x2xf32>
  %1 = func.call @ember_lib_0(%0) : (tensor<4x2xf32>) -> tensor<4xcomplex<f32>>
  %2 = func.call @re_exp(%x) : (tensor<4x2xf32>) -> tensor<4x2xf32>
  %3 = func.call @re_exp(%2) : (tensor<4x2xf32>) -> tensor<4x2xf32>
  %4 = func.call @ember_lib_1(%1) : (tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>>
  return %3, %4 : tensor<4x2xf32>, tensor<4xcomplex<f32>>
}

// -----

// A matmul's 2-D result and a pointwise kernel that reads it through an expand_shape and
// returns it 3-D (the encoder's bias + GELU after fc1): the same elements in the same order,
// so the kernel writes over the matmul's result in place. A kernel whose reshape feeds a
// transpose does not (it reads element i for result element j).
// CHECK-LABEL: func.func private @gelu_3d
// CHECK-LABEL: func.func private @expand_transpose
// CHECK-LABEL: func.func @main
// CHECK-SAME:  attributes {ember.arena_bytes = 1024 : i64, ember.unplanned_bytes = 1536 : i64}
// CHECK:       %[[M:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", ember.offsets = array<i64: 0>, params = {}}
// NOINPLACE:   %[[G:.*]] = call @gelu_3d(%[[M]]) {ember.offsets = array<i64: 512>}
// INPLACE:     %[[G:.*]] = call @gelu_3d(%[[M]]) {ember.offsets = array<i64: 0>}
// With reshape-in-place=false (the C++ target's pipeline) the GELU gets a buffer of its own.
// NORESHAPE-LABEL: func.func private @gelu_3d
// NORESHAPE:       func.func @main
// NORESHAPE-SAME:  attributes {ember.arena_bytes = 1024 : i64, ember.unplanned_bytes = 1536 : i64}
// NORESHAPE:       %[[M:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", ember.offsets = array<i64: 0>, params = {}}
// NORESHAPE:       call @gelu_3d(%[[M]]) {ember.offsets = array<i64: 512>}
// NOINPLACE:   %[[T:.*]] = call @expand_transpose(%[[G]]) {ember.offsets = array<i64: 0>}
// INPLACE:     %[[T:.*]] = call @expand_transpose(%[[G]]) {ember.offsets = array<i64: 512>}
// CHECK:       call @gelu_3d(%{{.*}}) {ember.offsets = array<i64: -1>}
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func private @gelu_3d(%a: tensor<8x16xf32>) -> tensor<2x4x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["gelu"]} {
  %e = tensor.empty() : tensor<8x16xf32>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.erf %x : f32
    linalg.yield %y : f32
  } -> tensor<8x16xf32>
  %v = tensor.expand_shape %r [[0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xf32> into tensor<2x4x16xf32>
  %e3 = tensor.empty() : tensor<2x4x16xf32>
  %s = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x4x16xf32>) outs(%e3 : tensor<2x4x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.mulf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<2x4x16xf32>
  return %s : tensor<2x4x16xf32>
}
func.func private @expand_transpose(%a: tensor<2x4x16xf32>) -> tensor<8x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["transpose"]} {
  %c = tensor.collapse_shape %a [[0, 1], [2]] : tensor<2x4x16xf32> into tensor<8x16xf32>
  %v = tensor.expand_shape %c [[0], [1, 2]] output_shape [8, 4, 4] : tensor<8x16xf32> into tensor<8x4x4xf32>
  %e = tensor.empty() : tensor<8x4x4xf32>
  %t = linalg.transpose ins(%v : tensor<8x4x4xf32>) outs(%e : tensor<8x4x4xf32>) permutation = [0, 2, 1]
  %r = tensor.collapse_shape %t [[0], [1, 2]] : tensor<8x4x4xf32> into tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}
func.func @main(%x: tensor<8x4xf32>, %w: tensor<4x16xf32>) -> tensor<2x4x16xf32> {
  %0 = "ember.extern"(%x, %w) {callee = "aten.mm", params = {}} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %1 = func.call @gelu_3d(%0) : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %2 = func.call @expand_transpose(%1) : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %3 = func.call @gelu_3d(%2) : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %3 : tensor<2x4x16xf32>
}
