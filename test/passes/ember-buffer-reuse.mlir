// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{in-place=false})' | FileCheck %s --check-prefixes=CHECK,NOINPLACE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse)' | FileCheck %s --check-prefixes=CHECK,INPLACE
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
// NOINPLACE: %[[A:.*]] = "ember.fused"(%arg0) {ember.offsets = array<i64: 0>, kernel = @chain_exp}
// NOINPLACE: %[[B:.*]] = "ember.fused"(%[[A]]) {ember.offsets = array<i64: 1024>, kernel = @chain_exp}
// NOINPLACE: %[[C:.*]] = "ember.fused"(%[[B]]) {ember.offsets = array<i64: 0>, kernel = @chain_exp}
// INPLACE:   %[[A:.*]] = "ember.fused"(%arg0) {ember.offsets = array<i64: 0>, kernel = @chain_exp}
// INPLACE:   %[[B:.*]] = "ember.fused"(%[[A]]) {ember.offsets = array<i64: 0>, kernel = @chain_exp}
// INPLACE:   %[[C:.*]] = "ember.fused"(%[[B]]) {ember.offsets = array<i64: 0>, kernel = @chain_exp}
// CHECK:     %[[D:.*]] = "ember.fused"(%[[C]]) {ember.offsets = array<i64: -1>, kernel = @chain_exp}
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
  %0 = "ember.fused"(%x) {kernel = @chain_exp} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = "ember.fused"(%0) {kernel = @chain_exp} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = "ember.fused"(%1) {kernel = @chain_exp} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = "ember.fused"(%2) {kernel = @chain_exp} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %3 : tensor<16x16xf32>
}

// -----

// A kernel that reads its operand transposed must not write over it: no in-place, even
// though the operand dies there and has the same size. An extern result is planned too.
// CHECK-LABEL: func.func private @transpose_neg
// CHECK-LABEL: func.func @main
// CHECK-SAME:  attributes {ember.arena_bytes = 2048 : i64, ember.unplanned_bytes = 3072 : i64}
// CHECK:       %[[M:.*]] = "ember.extern"(%arg0, %arg0) {ember.offsets = array<i64: 0>, params = {}, target = "aten.mm"}
// CHECK:       %[[T:.*]] = "ember.fused"(%[[M]]) {ember.offsets = array<i64: 1024>, kernel = @transpose_neg}
// CHECK:       "ember.fused"(%[[T]]) {ember.offsets = array<i64: 0>, kernel = @transpose_neg}
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
  %0 = "ember.extern"(%x, %x) {target = "aten.mm", params = {}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = "ember.fused"(%0) {kernel = @transpose_neg} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = "ember.fused"(%1) {kernel = @transpose_neg} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = "ember.fused"(%2) {kernel = @transpose_neg} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %3 : tensor<16x16xf32>
}

// -----

// Views: a view of %0 used late keeps %0 alive (so %1 cannot take its bytes), and a returned
// view makes its source escape. Small buffers are padded to the alignment.
// CHECK-LABEL: func.func private @views_add
// CHECK-LABEL: func.func @main
// CHECK-SAME:  attributes {ember.arena_bytes = 192 : i64, ember.unplanned_bytes = 192 : i64}
// CHECK:       %[[A:.*]] = "ember.fused"(%arg0, %arg0) {ember.offsets = array<i64: 0>, kernel = @views_add}
// CHECK:       %[[V:.*]] = tensor.collapse_shape %[[A]]
// CHECK:       %[[B:.*]] = "ember.fused"(%arg0, %arg0) {ember.offsets = array<i64: 64>, kernel = @views_add}
// CHECK:       %[[C:.*]] = "ember.fused"(%[[B]], %[[B]]) {ember.offsets = array<i64: 128>, kernel = @views_add}
// CHECK:       %[[E:.*]] = "ember.fused"(%[[C]], %[[C]]) {ember.offsets = array<i64: -1>, kernel = @views_add}
// CHECK:       %[[W:.*]] = tensor.expand_shape %[[E]]
// CHECK:       return %[[V]], %[[W]]
// ALIGN256-LABEL: func.func private @views_add
// ALIGN256:       ember.arena_bytes = 768 : i64, ember.unplanned_bytes = 768 : i64
// ALIGN256:       ember.offsets = array<i64: 0>
// ALIGN256:       ember.offsets = array<i64: 256>
// ALIGN256:       ember.offsets = array<i64: 512>
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
func.func @main(%x: tensor<6xf32>) -> (tensor<6xf32>, tensor<2x3xf32>) {
  %0 = "ember.fused"(%x, %x) {kernel = @views_add} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %v = tensor.expand_shape %0 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
  %1 = "ember.fused"(%x, %x) {kernel = @views_add} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %2 = "ember.fused"(%1, %1) {kernel = @views_add} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %3 = "ember.fused"(%2, %2) {kernel = @views_add} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %w = tensor.collapse_shape %v [[0, 1]] : tensor<2x3xf32> into tensor<6xf32>
  %4 = "ember.fused"(%w, %3) {kernel = @views_add} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %5 = tensor.expand_shape %4 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
  return %4, %5 : tensor<6xf32>, tensor<2x3xf32>
}
