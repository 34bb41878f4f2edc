// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-library-views)' | FileCheck %s

// Attention of a packed projection: q, k, v are slices of one [32, 96] library product, each
// split into heads and transposed. After the pass the call takes the product three times, each
// read as a strided view (offset 0 / 32 / 64 elements, strides of the [2, 16, 4, 8] ->
// [2, 4, 16, 8] transpose of a row of 96), and the slices and transposes are gone.
// CHECK-LABEL: func.func private @ember_lib_0(tensor<32x96xf32>, tensor<32x96xf32>, tensor<32x96xf32>) -> tensor<2x4x16x8xf32>
// CHECK-SAME:    ember.operand_views = [array<i64: 0, 0, 2, 4, 16, 8, 1536, 8, 96, 1>, array<i64: 1, 32, 2, 4, 16, 8, 1536, 8, 96, 1>, array<i64: 2, 64, 2, 4, 16, 8, 1536, 8, 96, 1>]
// CHECK-LABEL: func.func @packed_qkv
// CHECK:         %[[P:.*]] = "ember.extern"
// CHECK-NOT:     tensor.extract_slice
// CHECK-NOT:     linalg.transpose
// CHECK:         call @ember_lib_0(%[[P]], %[[P]], %[[P]]) : (tensor<32x96xf32>, tensor<32x96xf32>, tensor<32x96xf32>) -> tensor<2x4x16x8xf32>
module {
  func.func private @ember_lib_0(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
  func.func @packed_qkv(%arg0: tensor<32x32xf32>, %arg1: tensor<96x32xf32>) -> tensor<2x4x16x8xf32> {
    %3 = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<32x32xf32>, tensor<96x32xf32>) -> tensor<32x96xf32>
    %expanded = tensor.expand_shape %3 [[0, 1], [2]] output_shape [2, 16, 96] : tensor<32x96xf32> into tensor<2x16x96xf32>
    %s0 = tensor.extract_slice %expanded[0, 0, 0] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %s1 = tensor.extract_slice %expanded[0, 0, 32] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %s2 = tensor.extract_slice %expanded[0, 0, 64] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %e0 = tensor.expand_shape %s0 [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %4 = tensor.empty() : tensor<2x4x16x8xf32>
    %t0 = linalg.transpose ins(%e0 : tensor<2x16x4x8xf32>) outs(%4 : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %e1 = tensor.expand_shape %s1 [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %t1 = linalg.transpose ins(%e1 : tensor<2x16x4x8xf32>) outs(%4 : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %e2 = tensor.expand_shape %s2 [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %t2 = linalg.transpose ins(%e2 : tensor<2x16x4x8xf32>) outs(%4 : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %6 = call @ember_lib_0(%t0, %t1, %t2) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
    return %6 : tensor<2x4x16x8xf32>
  }
}

// -----

// A transpose that is also returned stays (the return needs its copy); the call still reads the
// view. A second operand that only reshapes is left as it is (a reshape is free already).
// CHECK-LABEL: func.func private @ember_lib_1(tensor<16x4x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>)
// CHECK-SAME:    ember.operand_views = [array<i64: 0, 0, 4, 16, 8, 8, 32, 1>]
// CHECK-LABEL: func.func @kept_and_reshaped
// CHECK:         %[[T:.*]] = linalg.transpose
// CHECK:         call @ember_lib_1(%arg0, %{{.*}}, %arg1)
// CHECK:         return %[[T]],
module {
  func.func private @ember_lib_1(tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> tensor<4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = false}, ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
  func.func @kept_and_reshaped(%arg0: tensor<16x4x8xf32>, %arg1: tensor<4x16x8xf32>, %arg2: tensor<4x128xf32>) -> (tensor<4x16x8xf32>, tensor<4x16x8xf32>) {
    %0 = tensor.empty() : tensor<4x16x8xf32>
    %t = linalg.transpose ins(%arg0 : tensor<16x4x8xf32>) outs(%0 : tensor<4x16x8xf32>) permutation = [1, 0, 2]
    %e = tensor.expand_shape %arg2 [[0], [1, 2]] output_shape [4, 16, 8] : tensor<4x128xf32> into tensor<4x16x8xf32>
    %r = call @ember_lib_1(%t, %e, %arg1) : (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> tensor<4x16x8xf32>
    return %t, %r : tensor<4x16x8xf32>, tensor<4x16x8xf32>
  }
}

// -----

// Left alone: a transpose of the innermost dim (stride 1 is what the kernels take), a transpose
// collapsed afterwards (no single stride: a copy is needed), a library op that is not
// attention, and a transpose of a pointwise result (ember-fuse computes it inside the copy
// kernel; a buffer of its own would cost more than the copy).
// CHECK-LABEL: func.func private @ember_lib_2(tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>)
// CHECK-NOT:     ember.operand_views
// CHECK-LABEL: func.func private @ember_lib_3(tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NOT:     ember.operand_views
// CHECK-LABEL: func.func private @ember_lib_4(tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>)
// CHECK-NOT:     ember.operand_views
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-2: linalg.transpose
// CHECK:         call @ember_lib_2(%{{.*}}, %{{.*}}, %arg0) : (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>)
// CHECK:         linalg.transpose
// CHECK:         call @ember_lib_3(%{{.*}}) : (tensor<4x16xf32>)
// CHECK:         %[[G:.*]] = linalg.generic
// CHECK:         %[[W:.*]] = linalg.transpose ins(%[[G]]
// CHECK:         call @ember_lib_4(%[[W]], %arg0, %arg0)
module {
  func.func private @ember_lib_2(tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> tensor<4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = false}, ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
  func.func private @ember_lib_3(tensor<4x16xf32>) -> tensor<4x16xf32> attributes {ember.library = "aten.cumsum.default", ember.params = {dim = 1 : i64}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}
  func.func private @ember_lib_4(tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> tensor<4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = false}, ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
  func.func @left_alone(%arg0: tensor<4x16x8xf32>, %arg1: tensor<4x8x16xf32>, %arg2: tensor<4x16x8xf32>, %arg3: tensor<16x4xf32>) -> (tensor<4x16x8xf32>, tensor<4x16xf32>) {
    %0 = tensor.empty() : tensor<4x16x8xf32>
    %t = linalg.transpose ins(%arg1 : tensor<4x8x16xf32>) outs(%0 : tensor<4x16x8xf32>) permutation = [0, 2, 1]
    %1 = tensor.empty() : tensor<16x4x8xf32>
    %u = linalg.transpose ins(%arg2 : tensor<4x16x8xf32>) outs(%1 : tensor<16x4x8xf32>) permutation = [1, 0, 2]
    %c = tensor.collapse_shape %u [[0, 1], [2]] : tensor<16x4x8xf32> into tensor<64x8xf32>
    %x = tensor.expand_shape %c [[0, 1], [2]] output_shape [4, 16, 8] : tensor<64x8xf32> into tensor<4x16x8xf32>
    %r = call @ember_lib_2(%t, %x, %arg0) : (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> tensor<4x16x8xf32>
    %2 = tensor.empty() : tensor<4x16xf32>
    %v = linalg.transpose ins(%arg3 : tensor<16x4xf32>) outs(%2 : tensor<4x16xf32>) permutation = [1, 0]
    %s = call @ember_lib_3(%v) : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %3 = tensor.empty() : tensor<4x8x16xf32>
    %g = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg1 : tensor<4x8x16xf32>) outs(%3 : tensor<4x8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %n = arith.negf %in : f32
      linalg.yield %n : f32
    } -> tensor<4x8x16xf32>
    %5 = tensor.empty() : tensor<4x16x8xf32>
    %w = linalg.transpose ins(%g : tensor<4x8x16xf32>) outs(%5 : tensor<4x16x8xf32>) permutation = [0, 2, 1]
    %q = call @ember_lib_4(%w, %arg0, %arg0) : (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> tensor<4x16x8xf32>
    return %q, %s : tensor<4x16x8xf32>, tensor<4x16xf32>
  }
}

// -----

// Attention's output and logsumexp, each transposed by its one user (the output back to
// [B, S, H, D] for the projection): the call hands on the transposed values themselves, the
// permutations in `ember.result_views` (the runtime permutes the op's tensors: no copy where the
// op lays them out that way), and the transposes are gone. A result with another user keeps
// its transpose (the third call).
// CHECK-LABEL: func.func private @ember_lib_2(tensor<32x96xf32>, tensor<32x96xf32>, tensor<32x96xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x16x4xf32>)
// CHECK-SAME:    ember.result_views = [array<i64: 0, 0, 2, 1, 3>, array<i64: 1, 0, 2, 1>]
// CHECK-LABEL: func.func private @ember_lib_3
// CHECK-NOT:     ember.result_views
// CHECK-LABEL: func.func @result_views
// CHECK:         %[[A:.*]]:2 = call @ember_lib_2(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<32x96xf32>, tensor<32x96xf32>, tensor<32x96xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x16x4xf32>)
// CHECK-NOT:     linalg.transpose
// CHECK:         %[[C:.*]] = tensor.collapse_shape %[[A]]#0
// CHECK:         return %[[C]], %[[A]]#1
// CHECK-LABEL: func.func @result_kept
// CHECK:         linalg.transpose
module {
  func.func private @ember_lib_2(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>) attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0, 1>, ember.tensor_args = ["query", "key", "value"]}
  func.func private @ember_lib_3(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
  func.func @result_views(%arg0: tensor<32x32xf32>, %arg1: tensor<96x32xf32>) -> (tensor<32x32xf32>, tensor<2x16x4xf32>) {
    %3 = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<32x32xf32>, tensor<96x32xf32>) -> tensor<32x96xf32>
    %expanded = tensor.expand_shape %3 [[0, 1], [2]] output_shape [2, 16, 96] : tensor<32x96xf32> into tensor<2x16x96xf32>
    %s0 = tensor.extract_slice %expanded[0, 0, 0] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %s1 = tensor.extract_slice %expanded[0, 0, 32] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %s2 = tensor.extract_slice %expanded[0, 0, 64] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %e0 = tensor.expand_shape %s0 [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %4 = tensor.empty() : tensor<2x4x16x8xf32>
    %t0 = linalg.transpose ins(%e0 : tensor<2x16x4x8xf32>) outs(%4 : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %e1 = tensor.expand_shape %s1 [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %t1 = linalg.transpose ins(%e1 : tensor<2x16x4x8xf32>) outs(%4 : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %e2 = tensor.expand_shape %s2 [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %t2 = linalg.transpose ins(%e2 : tensor<2x16x4x8xf32>) outs(%4 : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %6:2 = call @ember_lib_2(%t0, %t1, %t2) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>)
    %5 = tensor.empty() : tensor<2x16x4x8xf32>
    %o = linalg.transpose ins(%6#0 : tensor<2x4x16x8xf32>) outs(%5 : tensor<2x16x4x8xf32>) permutation = [0, 2, 1, 3]
    %c = tensor.collapse_shape %o [[0, 1], [2, 3]] : tensor<2x16x4x8xf32> into tensor<32x32xf32>
    %7 = tensor.empty() : tensor<2x16x4xf32>
    %l = linalg.transpose ins(%6#1 : tensor<2x4x16xf32>) outs(%7 : tensor<2x16x4xf32>) permutation = [0, 2, 1]
    return %c, %l : tensor<32x32xf32>, tensor<2x16x4xf32>
  }
  func.func @result_kept(%q: tensor<2x4x16x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x16x8xf32>) {
    %6 = call @ember_lib_3(%q, %q, %q) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
    %5 = tensor.empty() : tensor<2x16x4x8xf32>
    %o = linalg.transpose ins(%6 : tensor<2x4x16x8xf32>) outs(%5 : tensor<2x16x4x8xf32>) permutation = [0, 2, 1, 3]
    return %o, %6 : tensor<2x16x4x8xf32>, tensor<2x4x16x8xf32>
  }
}

// -----

// Attention's backward: the saved output and q, transposed back to [B, H, S, D], are read as
// views of the graph inputs (no copy kernels), and the gradient of q, which the next op
// transposes to [B, S, H, D], is handed on transposed: the CPU kernel lays its gradients out
// [B, S, H, D], so the transpose is a free view.
// CHECK-LABEL: func.func private @ember_lib_4(tensor<2x4x16x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK-SAME:    ember.operand_views = [array<i64: 1, 0, 2, 4, 16, 8, 512, 8, 32, 1>, array<i64: 2, 0, 2, 4, 16, 8, 512, 8, 32, 1>]
// CHECK-SAME:    ember.result_views = [array<i64: 0, 0, 2, 1, 3>]
// CHECK-LABEL: func.func @backward_views
// CHECK:         %[[G:.*]] = call @ember_lib_4(%arg0, %arg1, %arg2) : (tensor<2x4x16x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK-NOT:     linalg.transpose
// CHECK:         return %[[G]]
module {
  func.func private @ember_lib_4(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu_backward.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0>, ember.tensor_args = ["grad_out", "query", "out"]}
  func.func @backward_views(%grad: tensor<2x4x16x8xf32>, %q: tensor<2x16x4x8xf32>, %saved: tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32> {
    %e = tensor.empty() : tensor<2x4x16x8xf32>
    %qt = linalg.transpose ins(%q : tensor<2x16x4x8xf32>) outs(%e : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %out = linalg.transpose ins(%saved : tensor<2x16x4x8xf32>) outs(%e : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %g = call @ember_lib_4(%grad, %qt, %out) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
    %e2 = tensor.empty() : tensor<2x16x4x8xf32>
    %gt = linalg.transpose ins(%g : tensor<2x4x16x8xf32>) outs(%e2 : tensor<2x16x4x8xf32>) permutation = [0, 2, 1, 3]
    return %gt : tensor<2x16x4x8xf32>
  }
}

// -----

// The memory-efficient backward with q sliced from a packed projection (GPT-2's
// [B, S, 3 * H * D]), which is not dense: that kernel lays every gradient out [B, S, H, D]
// whatever q's layout, so q's gradient transposed back is a free view (before, the runtime
// copied each gradient contiguous for a kernel that read it transposed).
// CHECK-LABEL: func.func private @ember_lib_5(tensor<2x4x16x8xf32>, tensor<2x16x96xf32>, tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK-SAME:    ember.operand_views = [array<i64: 1, 0, 2, 4, 16, 8, 1536, 8, 96, 1>, array<i64: 2, 0, 2, 4, 16, 8, 512, 8, 32, 1>]
// CHECK-SAME:    ember.result_views = [array<i64: 0, 0, 2, 1, 3>]
// CHECK-LABEL: func.func @backward_packed
// CHECK:         %[[G:.*]] = call @ember_lib_5(
// CHECK-NOT:     linalg.transpose
// CHECK:         return %[[G]]
module {
  func.func private @ember_lib_5(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_efficient_attention_backward.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0>, ember.tensor_args = ["grad_out_", "query", "out"]}
  func.func @backward_packed(%grad: tensor<2x4x16x8xf32>, %qkv: tensor<2x16x96xf32>, %saved: tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32> {
    %s = tensor.extract_slice %qkv[0, 0, 0] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %x = tensor.expand_shape %s [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %e = tensor.empty() : tensor<2x4x16x8xf32>
    %qt = linalg.transpose ins(%x : tensor<2x16x4x8xf32>) outs(%e : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %out = linalg.transpose ins(%saved : tensor<2x16x4x8xf32>) outs(%e : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %g = call @ember_lib_5(%grad, %qt, %out) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
    %e2 = tensor.empty() : tensor<2x16x4x8xf32>
    %gt = linalg.transpose ins(%g : tensor<2x4x16x8xf32>) outs(%e2 : tensor<2x16x4x8xf32>) permutation = [0, 2, 1, 3]
    return %gt : tensor<2x16x4x8xf32>
  }
}

// -----

// cuDNN's backward lays each gradient out dense in its operand's dim order: q sliced from the
// packed projection ([B, S, H, D] order) gets a dense [B, S, H, D] gradient, whose transpose
// is a free view.
// CHECK-LABEL: func.func private @ember_lib_6(tensor<2x4x16x8xf32>, tensor<2x16x96xf32>, tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK-SAME:    ember.operand_views = [array<i64: 1, 0, 2, 4, 16, 8, 1536, 8, 96, 1>, array<i64: 2, 0, 2, 4, 16, 8, 512, 8, 32, 1>]
// CHECK-SAME:    ember.result_views = [array<i64: 0, 0, 2, 1, 3>]
// CHECK-LABEL: func.func @backward_packed_cudnn
// CHECK:         %[[G:.*]] = call @ember_lib_6(
// CHECK-NOT:     linalg.transpose
// CHECK:         return %[[G]]
module {
  func.func private @ember_lib_6(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_cudnn_attention_backward.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0>, ember.tensor_args = ["grad_out", "query", "out"]}
  func.func @backward_packed_cudnn(%grad: tensor<2x4x16x8xf32>, %qkv: tensor<2x16x96xf32>, %saved: tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32> {
    %s = tensor.extract_slice %qkv[0, 0, 0] [2, 16, 32] [1, 1, 1] : tensor<2x16x96xf32> to tensor<2x16x32xf32>
    %x = tensor.expand_shape %s [[0], [1], [2, 3]] output_shape [2, 16, 4, 8] : tensor<2x16x32xf32> into tensor<2x16x4x8xf32>
    %e = tensor.empty() : tensor<2x4x16x8xf32>
    %qt = linalg.transpose ins(%x : tensor<2x16x4x8xf32>) outs(%e : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %out = linalg.transpose ins(%saved : tensor<2x16x4x8xf32>) outs(%e : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
    %g = call @ember_lib_6(%grad, %qt, %out) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
    %e2 = tensor.empty() : tensor<2x16x4x8xf32>
    %gt = linalg.transpose ins(%g : tensor<2x4x16x8xf32>) outs(%e2 : tensor<2x16x4x8xf32>) permutation = [0, 2, 1, 3]
    return %gt : tensor<2x16x4x8xf32>
  }
}

// -----

// A backward's saved q passed strided (`ember.arg_strides` on the function: a view of the
// forward's packed projection, which the runtime hands the library call as it comes): cuDNN
// lays its gradient out dense in q's dim order ([B, S, H, D]), so the gradient's transpose is
// a free view, as for q sliced in the graph. The row-major saved output is not strided: read
// as it is. Without the attribute q would be a row-major [B, H, S, D] buffer and the
// transpose a kernel (@backward_arg_row_major).
// CHECK-LABEL: func.func private @ember_lib_7(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
// CHECK-SAME:    ember.result_views = [array<i64: 0, 0, 2, 1, 3>]
// CHECK-LABEL: func.func private @ember_lib_8(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
// CHECK-NOT:     ember.result_views
// CHECK-LABEL: func.func @backward_strided_arg
// CHECK:         %[[G:.*]] = call @ember_lib_7(%arg0, %arg1, %arg2)
// CHECK-NOT:     linalg.transpose
// CHECK:         return %[[G]]
// CHECK-LABEL: func.func @backward_arg_row_major
// CHECK:         call @ember_lib_8(%arg0, %arg1, %arg2)
// CHECK:         linalg.transpose
module {
  func.func private @ember_lib_7(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_cudnn_attention_backward.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0>, ember.tensor_args = ["grad_out", "query", "out"]}
  func.func private @ember_lib_8(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_cudnn_attention_backward.default", ember.params = {dropout_p = 0.000000e+00 : f64, is_causal = true}, ember.results = array<i64: 0>, ember.tensor_args = ["grad_out", "query", "out"]}
  func.func @backward_strided_arg(%grad: tensor<2x4x16x8xf32>, %q: tensor<2x4x16x8xf32>, %out: tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32> attributes {ember.arg_strides = [array<i64: 1, 1536, 8, 96, 1>]} {
    %g = call @ember_lib_7(%grad, %q, %out) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
    %e2 = tensor.empty() : tensor<2x16x4x8xf32>
    %gt = linalg.transpose ins(%g : tensor<2x4x16x8xf32>) outs(%e2 : tensor<2x16x4x8xf32>) permutation = [0, 2, 1, 3]
    return %gt : tensor<2x16x4x8xf32>
  }
  func.func @backward_arg_row_major(%grad: tensor<2x4x16x8xf32>, %q: tensor<2x4x16x8xf32>, %out: tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32> {
    %g = call @ember_lib_8(%grad, %q, %out) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
    %e2 = tensor.empty() : tensor<2x16x4x8xf32>
    %gt = linalg.transpose ins(%g : tensor<2x4x16x8xf32>) outs(%e2 : tensor<2x16x4x8xf32>) permutation = [0, 2, 1, 3]
    return %gt : tensor<2x16x4x8xf32>
  }
}

// -----

// The embedding backward's scatter_add: its index is the token ids broadcast over the hidden
// dim by a copy. After the pass the call takes the ids themselves ([2, 32]: the collapse is a free
// reshape), read as a [64, 16] view with strides [1, 0] (the copy kernel is gone); the zero base and the source stay operands.
// CHECK-LABEL: func.func private @ember_lib_5(tensor<100x16xf32>, tensor<2x32xi64>, tensor<64x16xf32>) -> tensor<100x16xf32>
// CHECK-SAME:    ember.operand_views = [array<i64: 1, 0, 64, 16, 1, 0>]
// CHECK-LABEL: func.func @scatter_add_broadcast_index
// CHECK-NOT:     linalg.generic
// CHECK-NOT:     tensor.collapse_shape
// CHECK:         call @ember_lib_5(%{{.*}}, %arg0, %arg1) : (tensor<100x16xf32>, tensor<2x32xi64>, tensor<64x16xf32>)
#bmap_in = affine_map<(d0, d1) -> (d0)>
#bmap_out = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func private @ember_lib_5(tensor<100x16xf32>, tensor<64x16xi64>, tensor<64x16xf32>) -> tensor<100x16xf32> attributes {ember.library = "aten.scatter_add.default", ember.params = {dim = 0 : i64}, ember.results = array<i64: 0>, ember.tensor_args = ["self", "index", "src"]}
  func.func @scatter_add_broadcast_index(%arg0: tensor<2x32xi64>, %arg1: tensor<64x16xf32>) -> tensor<100x16xf32> {
    %cst = arith.constant dense<0.000000e+00> : tensor<100x16xf32>
    %c = tensor.collapse_shape %arg0 [[0, 1]] : tensor<2x32xi64> into tensor<64xi64>
    %0 = tensor.empty() : tensor<64x16xi64>
    %1 = linalg.generic {indexing_maps = [#bmap_in, #bmap_out], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<64xi64>) outs(%0 : tensor<64x16xi64>) {
    ^bb0(%in: i64, %out: i64):
      linalg.yield %in : i64
    } -> tensor<64x16xi64>
    %2 = call @ember_lib_5(%cst, %1, %arg1) : (tensor<100x16xf32>, tensor<64x16xi64>, tensor<64x16xf32>) -> tensor<100x16xf32>
    return %2 : tensor<100x16xf32>
  }
}

// -----

// nn.MultiheadAttention's packed projection (batch_first input, transposed to [S, B, E]):
// the [S * B, 3E] product viewed [S, B, 3, E], made [3, S, B, E], sliced, and each
// [S, B, E] slice read as [S, B * H, D] (B and H merged: no single stride in the product),
// transposed to [B * H, S, D] and split back into [B, H, S, D]. The merged dim is split back
// along its parts, so each operand is one strided view of the product: strides B: 96, H: 8,
// S: 2 * 96, D: 1, offsets 0 / 32 / 64.
// CHECK-LABEL: func.func private @ember_lib_2(tensor<16x96xf32>, tensor<16x96xf32>, tensor<16x96xf32>) -> tensor<2x4x8x8xf32>
// CHECK-SAME:    ember.operand_views = [array<i64: 0, 0, 2, 4, 8, 8, 96, 8, 192, 1>, array<i64: 1, 32, 2, 4, 8, 8, 96, 8, 192, 1>, array<i64: 2, 64, 2, 4, 8, 8, 96, 8, 192, 1>]
// CHECK-LABEL: func.func @mha_packed_qkv
// CHECK:         %[[P:.*]] = "ember.extern"
// CHECK-NOT:     tensor.extract_slice
// CHECK-NOT:     linalg.transpose
// CHECK:         call @ember_lib_2(%[[P]], %[[P]], %[[P]])
// A merged dim split across its parts ([2, 8] of strides 32, 64 merged to 16, split into
// [4, 4]: the outer 4 takes the 2 and half of the 8) is no strided view: the operand stays.
// CHECK-LABEL: func.func private @ember_lib_3(tensor<4x4x32xf32>) -> tensor<4x4x32xf32>
// CHECK-NOT:     ember.operand_views
// CHECK-LABEL: func.func @merged_dim_split_unevenly
// CHECK:         linalg.transpose
// CHECK:         call @ember_lib_3(
module {
  func.func private @ember_lib_2(tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.params = {}, ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
  func.func @mha_packed_qkv(%arg0: tensor<16x32xf32>, %arg1: tensor<96x32xf32>, %b: tensor<96xf32>) -> tensor<2x4x8x8xf32> {
    %p = "ember.extern"(%b, %arg0, %arg1) {callee = "aten.addmm", params = {transpose_b = true}} : (tensor<96xf32>, tensor<16x32xf32>, tensor<96x32xf32>) -> tensor<16x96xf32>
    %rows = tensor.expand_shape %p [[0, 1], [2]] output_shape [8, 2, 96] : tensor<16x96xf32> into tensor<8x2x96xf32>
    %x5 = tensor.expand_shape %rows [[0, 1], [2], [3, 4]] output_shape [1, 8, 2, 3, 32] : tensor<8x2x96xf32> into tensor<1x8x2x3x32xf32>
    %e5 = tensor.empty() : tensor<3x8x2x1x32xf32>
    %t5 = linalg.transpose ins(%x5 : tensor<1x8x2x3x32xf32>) outs(%e5 : tensor<3x8x2x1x32xf32>) permutation = [3, 1, 2, 0, 4]
    %qkv = tensor.collapse_shape %t5 [[0], [1], [2, 3], [4]] : tensor<3x8x2x1x32xf32> into tensor<3x8x2x32xf32>
    %e3 = tensor.empty() : tensor<8x8x8xf32>
    %s0 = tensor.extract_slice %qkv[0, 0, 0, 0] [1, 8, 2, 32] [1, 1, 1, 1] : tensor<3x8x2x32xf32> to tensor<1x8x2x32xf32>
    %c0 = tensor.collapse_shape %s0 [[0, 1], [2, 3]] : tensor<1x8x2x32xf32> into tensor<8x64xf32>
    %h0 = tensor.expand_shape %c0 [[0], [1, 2]] output_shape [8, 8, 8] : tensor<8x64xf32> into tensor<8x8x8xf32>
    %t0 = linalg.transpose ins(%h0 : tensor<8x8x8xf32>) outs(%e3 : tensor<8x8x8xf32>) permutation = [1, 0, 2]
    %q = tensor.expand_shape %t0 [[0, 1], [2], [3]] output_shape [2, 4, 8, 8] : tensor<8x8x8xf32> into tensor<2x4x8x8xf32>
    %s1 = tensor.extract_slice %qkv[1, 0, 0, 0] [1, 8, 2, 32] [1, 1, 1, 1] : tensor<3x8x2x32xf32> to tensor<1x8x2x32xf32>
    %c1 = tensor.collapse_shape %s1 [[0, 1], [2, 3]] : tensor<1x8x2x32xf32> into tensor<8x64xf32>
    %h1 = tensor.expand_shape %c1 [[0], [1, 2]] output_shape [8, 8, 8] : tensor<8x64xf32> into tensor<8x8x8xf32>
    %t1 = linalg.transpose ins(%h1 : tensor<8x8x8xf32>) outs(%e3 : tensor<8x8x8xf32>) permutation = [1, 0, 2]
    %k = tensor.expand_shape %t1 [[0, 1], [2], [3]] output_shape [2, 4, 8, 8] : tensor<8x8x8xf32> into tensor<2x4x8x8xf32>
    %s2 = tensor.extract_slice %qkv[2, 0, 0, 0] [1, 8, 2, 32] [1, 1, 1, 1] : tensor<3x8x2x32xf32> to tensor<1x8x2x32xf32>
    %c2 = tensor.collapse_shape %s2 [[0, 1], [2, 3]] : tensor<1x8x2x32xf32> into tensor<8x64xf32>
    %h2 = tensor.expand_shape %c2 [[0], [1, 2]] output_shape [8, 8, 8] : tensor<8x64xf32> into tensor<8x8x8xf32>
    %t2 = linalg.transpose ins(%h2 : tensor<8x8x8xf32>) outs(%e3 : tensor<8x8x8xf32>) permutation = [1, 0, 2]
    %v = tensor.expand_shape %t2 [[0, 1], [2], [3]] output_shape [2, 4, 8, 8] : tensor<8x8x8xf32> into tensor<2x4x8x8xf32>
    %r = call @ember_lib_2(%q, %k, %v) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    return %r : tensor<2x4x8x8xf32>
  }
  func.func private @ember_lib_3(tensor<4x4x32xf32>) -> tensor<4x4x32xf32> attributes {ember.library = "aten.scatter_add.default", ember.params = {}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}
  func.func @merged_dim_split_unevenly(%arg0: tensor<8x32xf32>, %arg1: tensor<64x32xf32>) -> tensor<4x4x32xf32> {
    %p = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
    %x = tensor.expand_shape %p [[0], [1, 2]] output_shape [8, 2, 32] : tensor<8x64xf32> into tensor<8x2x32xf32>
    %e = tensor.empty() : tensor<2x8x32xf32>
    %t = linalg.transpose ins(%x : tensor<8x2x32xf32>) outs(%e : tensor<2x8x32xf32>) permutation = [1, 0, 2]
    %c = tensor.collapse_shape %t [[0, 1], [2]] : tensor<2x8x32xf32> into tensor<16x32xf32>
    %h = tensor.expand_shape %c [[0, 1], [2]] output_shape [4, 4, 32] : tensor<16x32xf32> into tensor<4x4x32xf32>
    %r = call @ember_lib_3(%h) : (tensor<4x4x32xf32>) -> tensor<4x4x32xf32>
    return %r : tensor<4x4x32xf32>
  }
}

// -----

// Memory-efficient attention's bias: the [2, 1, 16, 16] mask expanded over 4 heads (SDPA's
// preprocess_mask on a GPU). After the pass the call takes the mask itself (the collapse is
// a free reshape), read as a [2, 4, 16, 16] view with strides [256, 0, 16, 1] (the broadcast
// copy kernel is gone).
// CHECK-LABEL: func.func private @ember_lib_9(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x1x16x16xf32>) -> tensor<2x4x16x8xf32>
// CHECK-SAME:    ember.operand_views = [array<i64: 3, 0, 2, 4, 16, 16, 256, 0, 16, 1>]
// CHECK-LABEL: func.func @attention_bias_broadcast
// CHECK-NOT:     linalg.generic
// CHECK:         call @ember_lib_9(%arg0, %arg1, %arg2, %arg3) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x1x16x16xf32>)
#amap_in = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#amap_out = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func private @ember_lib_9(tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x8xf32> attributes {ember.library = "aten._scaled_dot_product_efficient_attention.default", ember.params = {compute_log_sumexp = false}, ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value", "attn_bias"]}
  func.func @attention_bias_broadcast(%arg0: tensor<2x4x16x8xf32>, %arg1: tensor<2x4x16x8xf32>, %arg2: tensor<2x4x16x8xf32>, %arg3: tensor<2x1x16x16xf32>) -> tensor<2x4x16x8xf32> {
    %c = tensor.collapse_shape %arg3 [[0, 1], [2], [3]] : tensor<2x1x16x16xf32> into tensor<2x16x16xf32>
    %0 = tensor.empty() : tensor<2x4x16x16xf32>
    %1 = linalg.generic {indexing_maps = [#amap_in, #amap_out], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c : tensor<2x16x16xf32>) outs(%0 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<2x4x16x16xf32>
    %2 = call @ember_lib_9(%arg0, %arg1, %arg2, %1) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x8xf32>
    return %2 : tensor<2x4x16x8xf32>
  }
}
