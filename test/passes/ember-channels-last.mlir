// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-channels-last)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-channels-last{transpose-weights=false pool-kernels=false})' | FileCheck %s --check-prefix=OIHW
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-channels-last{min-convs=1})' | FileCheck %s --check-prefix=ONE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-channels-last{with-statistics=true})' | FileCheck %s --check-prefix=STATS
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-channels-last{f32=false})' | FileCheck %s --check-prefix=F32OFF

// f32=false (CUDA without TF32): f32 convolutions are not eligible, so @stem stays NCHW; the
// bf16 network at the end of the file is laid out channels-last all the same.
// F32OFF-LABEL: func.func @stem
// F32OFF-NOT:   linalg.transpose
// F32OFF-NOT:   channels_last
// F32OFF:       return

// conv -> BatchNorm-like affine (a per-channel operand) -> ReLU -> max pool -> conv + residual.
// Every convolution takes an NHWC input and an OHWI weight and writes NHWC; the pointwise
// generics iterate (n, h, w, c) over NHWC buffers (the per-channel operand is read through
// d3); the pool reads and writes NHWC; the only transposes left are the graph input's and the
// weights' (no transpose between convs); the mean over H and W at the end iterates (n, h, w, c)
// over the NHWC buffer (a column reduction).
// CHECK-DAG:   #[[WIN:map[0-9]*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>
// CHECK-LABEL: func.func @stem
// CHECK-DAG:     %[[X:.*]] = linalg.transpose ins(%arg0 : tensor<2x3x16x16xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK-DAG:     %[[W1:.*]] = linalg.transpose ins(%arg1 : tensor<8x3x3x3xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK:         %[[C1:.*]] = "ember.extern"(%[[X]], %[[W1]]) {callee = "aten.convolution", params = {channels_last = true, {{.*}}ohwi_weight = true{{.*}}} : (tensor<2x16x16x3xf32>, tensor<8x3x3x3xf32>) -> tensor<2x16x16x8xf32>
// CHECK:         %[[BN:.*]] = linalg.generic {indexing_maps = [#[[ID:map[0-9]*]], #[[CH:map[0-9]*]], #[[ID]]], {{.*}} ins(%[[C1]], %arg2 : tensor<2x16x16x8xf32>, tensor<8x1x1xf32>) outs(%{{.*}} : tensor<2x16x16x8xf32>)
// CHECK:         %[[R:.*]] = linalg.generic {{.*}} ins(%[[BN]] : tensor<2x16x16x8xf32>) outs(%{{.*}} : tensor<2x16x16x8xf32>)
// CHECK:         %[[PAD:.*]] = tensor.pad %[[R]] low[0, 1, 1, 0] high[0, 0, 0, 0]
// CHECK:           tensor.yield %[[NEGINF:.*]] : f32
// CHECK:         %[[INIT:.*]] = linalg.fill ins(%[[NEGINF]] : f32) outs(%{{.*}} : tensor<2x8x8x8xf32>)
// CHECK:         %[[P:.*]] = linalg.generic {indexing_maps = [#[[WIN]], #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%[[PAD]], %{{.*}} : tensor<2x17x17x8xf32>, tensor<3x3xf32>) outs(%[[INIT]] : tensor<2x8x8x8xf32>)
// CHECK:           arith.maximumf
// CHECK:         %[[W2:.*]] = linalg.transpose ins(%arg3 : tensor<8x8x3x3xf32>)
// CHECK:         %[[C2:.*]] = "ember.extern"(%[[P]], %[[W2]]) {callee = "aten.convolution"
// CHECK:         %[[ADD:.*]] = linalg.generic {{.*}} ins(%[[C2]], %[[P]] : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>)
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "reduction", "parallel"]{{.*}} ins(%[[ADD]] :
// CHECK-NOT:     linalg.transpose
// CHECK:         return
// OIHW-LABEL: func.func @stem
// OIHW:         "ember.extern"(%{{.*}}, %arg1) {callee = "aten.convolution", params = {channels_last = true, dilation
// OIHW-NOT:     ohwi_weight
// OIHW:         "ember.extern"(%{{.*}}, %{{.*}}) {callee = "aten.max_pool2d", params = {channels_last = true, {{.*}}} : (tensor<2x16x16x8xf32>, tensor<3x3xf32>) -> tensor<2x8x8x8xf32>
// OIHW:         "ember.extern"(%{{.*}}, %arg3) {callee = "aten.convolution", params = {channels_last = true, dilation
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>
#nc = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
module {
  func.func @stem(%arg0: tensor<2x3x16x16xf32>, %arg1: tensor<8x3x3x3xf32>, %arg2: tensor<8x1x1xf32>, %arg3: tensor<8x8x3x3xf32>) -> tensor<2x8xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<2x8x16x16xf32>
    %1 = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x3x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32>
    %2 = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1, %arg2 : tensor<2x8x16x16xf32>, tensor<8x1x1xf32>) outs(%0 : tensor<2x8x16x16xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %9 = arith.mulf %in, %in_1 : f32
      linalg.yield %9 : f32
    } -> tensor<2x8x16x16xf32>
    %3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2 : tensor<2x8x16x16xf32>) outs(%0 : tensor<2x8x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.maximumf %in, %cst : f32
      linalg.yield %9 : f32
    } -> tensor<2x8x16x16xf32>
    %w = tensor.empty() : tensor<3x3xf32>
    %4 = "ember.extern"(%3, %w) {callee = "aten.max_pool2d", params = {dilation = [1, 1], padding = [1, 1], stride = [2, 2]}} : (tensor<2x8x16x16xf32>, tensor<3x3xf32>) -> tensor<2x8x8x8xf32>
    %5 = "ember.extern"(%4, %arg3) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<2x8x8x8xf32>
    %e = tensor.empty() : tensor<2x8x8x8xf32>
    %6 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5, %4 : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) outs(%e : tensor<2x8x8x8xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %9 = arith.addf %in, %in_1 : f32
      linalg.yield %9 : f32
    } -> tensor<2x8x8x8xf32>
    %r = tensor.empty() : tensor<2x8xf32>
    %z = linalg.fill ins(%cst : f32) outs(%r : tensor<2x8xf32>) -> tensor<2x8xf32>
    %7 = linalg.generic {indexing_maps = [#id, #nc], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%6 : tensor<2x8x8x8xf32>) outs(%z : tensor<2x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.addf %in, %out : f32
      linalg.yield %9 : f32
    } -> tensor<2x8xf32>
    return %7 : tensor<2x8xf32>
  }
}

// -----

// A channels-last graph input (the frontend passes it as its NHWC buffer and permutes it back)
// feeds the convolution as it is, and a result eager returns channels-last (a permute of the
// NCHW value) is the NHWC buffer itself: no transpose is left. A pointwise result that is
// only returned keeps NCHW (it is written once, where it is computed). That with min-convs=1:
// by default a function with one convolution is left as it is (converting its input and weight
// costs what cuDNN's own transforms cost, in more kernels).
// CHECK-LABEL: func.func @channels_last_io
// CHECK-NOT:     channels_last
// CHECK:         return
// ONE-LABEL: func.func @channels_last_io
// ONE-NOT:       permutation = [0, 3, 1, 2]
// A 1x1 weight's OIHW -> OHWI transpose moves unit dims only: a view, not a copy.
// ONE-NOT:       linalg.transpose ins(%arg1
// ONE:           %[[WC:.*]] = tensor.collapse_shape %arg1 {{\[\[}}0], [1, 2, 3]] : tensor<4x3x1x1xf32> into tensor<4x3xf32>
// ONE:           %[[W:.*]] = tensor.expand_shape %[[WC]] {{\[\[}}0], [1, 2, 3]] output_shape [4, 1, 1, 3] : tensor<4x3xf32> into tensor<4x1x1x3xf32>
// ONE-NOT:       permutation = [0, 3, 1, 2]
// ONE:           %[[C:.*]] = "ember.extern"(%arg0, %[[W]]) {callee = "aten.convolution"{{.*}} -> tensor<2x8x8x4xf32>
// ONE:           %[[T:.*]] = linalg.transpose ins(%[[C]] : tensor<2x8x8x4xf32>) {{.*}} permutation = [0, 3, 1, 2]
// ONE:           %[[G:.*]] = linalg.generic {{.*}} ins(%[[T]] : tensor<2x4x8x8xf32>) outs(%{{.*}} : tensor<2x4x8x8xf32>)
// ONE:           return %[[C]], %[[G]] : tensor<2x8x8x4xf32>, tensor<2x4x8x8xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @channels_last_io(%arg0: tensor<2x8x8x3xf32>, %arg1: tensor<4x3x1x1xf32>) -> (tensor<2x8x8x4xf32>, tensor<2x4x8x8xf32>) {
    %e0 = tensor.empty() : tensor<2x3x8x8xf32>
    %x = linalg.transpose ins(%arg0 : tensor<2x8x8x3xf32>) outs(%e0 : tensor<2x3x8x8xf32>) permutation = [0, 3, 1, 2]
    %c = "ember.extern"(%x, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [1, 1]}} : (tensor<2x3x8x8xf32>, tensor<4x3x1x1xf32>) -> tensor<2x4x8x8xf32>
    %e1 = tensor.empty() : tensor<2x8x8x4xf32>
    %p = linalg.transpose ins(%c : tensor<2x4x8x8xf32>) outs(%e1 : tensor<2x8x8x4xf32>) permutation = [0, 2, 3, 1]
    %e2 = tensor.empty() : tensor<2x4x8x8xf32>
    %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c : tensor<2x4x8x8xf32>) outs(%e2 : tensor<2x4x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.negf %in : f32
      linalg.yield %9 : f32
    } -> tensor<2x4x8x8xf32>
    return %p, %g : tensor<2x8x8x4xf32>, tensor<2x4x8x8xf32>
  }
}

// -----

// Nothing to do without a 2-d convolution: a transposed input read by a generic stays as it is.
// CHECK-LABEL: func.func @no_conv
// CHECK:         linalg.transpose
// CHECK:         linalg.generic {{.*}} ins(%{{.*}} : tensor<2x3x4x5xf32>)
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @no_conv(%arg0: tensor<2x4x5x3xf32>) -> tensor<2x3x4x5xf32> {
    %e0 = tensor.empty() : tensor<2x3x4x5xf32>
    %x = linalg.transpose ins(%arg0 : tensor<2x4x5x3xf32>) outs(%e0 : tensor<2x3x4x5xf32>) permutation = [0, 3, 1, 2]
    %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<2x3x4x5xf32>) outs(%e0 : tensor<2x3x4x5xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.negf %in : f32
      linalg.yield %9 : f32
    } -> tensor<2x3x4x5xf32>
    return %g : tensor<2x3x4x5xf32>
  }
}

// -----

// Convolutions grouped with several input channels per group run slower channels-last
// (Inductor's measured factors): left as they are.
// CHECK-LABEL: func.func @grouped
// CHECK-NOT:     channels_last
// CHECK-NOT:     linalg.transpose
// CHECK:         return
module {
  func.func @grouped(%arg0: tensor<2x8x8x8xf32>, %arg1: tensor<8x4x3x3xf32>, %arg2: tensor<8x4x3x3xf32>) -> tensor<2x8x8x8xf32> {
    %c = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 2 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x8x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x8x8xf32>
    %d = "ember.extern"(%c, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 2 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x8x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x8x8xf32>
    return %d : tensor<2x8x8x8xf32>
  }
}

// -----

// A training forward: BatchNorm's batch statistics (a reduction over N, H and W). Left as it is
// unless with-statistics (what the default pipeline passes); with it, the reduction iterates
// (n, h, w, c) over the NHWC buffer: a column reduction, the channel loop innermost.
// CHECK-LABEL: func.func @statistics
// CHECK-NOT:     channels_last
// STATS-LABEL: func.func @statistics
// STATS:         %[[C:.+]] = "ember.extern"{{.*}}channels_last = true{{.*}} -> tensor<2x8x8x8xf32>
// STATS:         linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}], iterator_types = ["reduction", "reduction", "reduction", "parallel"]} ins(%[[C]] : tensor<2x8x8x8xf32>)
// STATS:         channels_last = true
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#c = affine_map<(d0, d1, d2, d3) -> (d1)>
module {
  func.func @statistics(%arg0: tensor<2x8x8x8xf32>, %arg1: tensor<8x8x3x3xf32>, %arg2: tensor<8x8x3x3xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %c = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<2x8x8x8xf32>
    %e = tensor.empty() : tensor<8xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    %s = linalg.generic {indexing_maps = [#id, #c], iterator_types = ["reduction", "parallel", "reduction", "reduction"]} ins(%c : tensor<2x8x8x8xf32>) outs(%z : tensor<8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.addf %in, %out : f32
      linalg.yield %9 : f32
    } -> tensor<8xf32>
    %d = "ember.extern"(%c, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<2x8x8x8xf32>
    return %d, %s : tensor<2x8x8x8xf32>, tensor<8xf32>
  }
}

// -----

// A training backward: convolution_backward library calls take the NHWC buffers of their
// grad_output and input (`ember.channels_last`: those operands and the grad_input result; the
// weight and its gradient keep OIHW), saved activations passed channels-last (read through a
// transpose) are read as the NHWC buffers, and the gradient between the calls stays NHWC: the
// only layout copy is the NCHW incoming gradient's.
// CHECK-LABEL: func.func private @lib_0(tensor<2x6x6x8xf32>
// CHECK-LABEL: func.func @backward
// CHECK:         call @lib_0(%{{.*}}, %arg1, %arg3)
// STATS-LABEL: func.func private @lib_0(tensor<2x6x6x8xf32>, tensor<2x6x6x8xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x6x6x8xf32>, tensor<8x8x3x3xf32>)
// STATS-SAME:    ember.channels_last = [array<i64: 0, 1>, array<i64: 0>]
// STATS-LABEL: func.func private @lib_1(tensor<2x6x6x8xf32>, tensor<2x6x6x8xf32>, tensor<8x8x3x3xf32>) -> tensor<8x8x3x3xf32>
// STATS-SAME:    ember.channels_last = [array<i64: 0, 1>, array<i64>]
// STATS-LABEL: func.func @backward
// STATS:         %[[G:.+]] = linalg.transpose ins(%arg0 : tensor<2x8x6x6xf32>) {{.*}} permutation = [0, 2, 3, 1]
// STATS:         %[[R:.+]]:2 = call @lib_0(%[[G]], %arg1, %arg3)
// STATS:         %[[M:.+]] = linalg.generic {{.*}} ins(%arg1, %[[R]]#0 : tensor<2x6x6x8xf32>, tensor<2x6x6x8xf32>)
// STATS:         call @lib_1(%[[M]], %arg2, %arg4)
// STATS-NOT:     linalg.transpose
// STATS:         return
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func private @lib_0(tensor<2x8x6x6xf32>, tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>) attributes {ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [0], dilation = [1, 1], groups = 1 : i64, output_mask = [true, true, false], output_padding = [0, 0], padding = [1, 1], stride = [1, 1], transposed = false}, ember.results = array<i64: 0, 1>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func private @lib_1(tensor<2x8x6x6xf32>, tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>) -> tensor<8x8x3x3xf32> attributes {ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [0], dilation = [1, 1], groups = 1 : i64, output_mask = [false, true, false], output_padding = [0, 0], padding = [1, 1], stride = [1, 1], transposed = false}, ember.results = array<i64: 1>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func @backward(%arg0: tensor<2x8x6x6xf32>, %arg1: tensor<2x6x6x8xf32>, %arg2: tensor<2x6x6x8xf32>, %arg3: tensor<8x8x3x3xf32>, %arg4: tensor<8x8x3x3xf32>) -> (tensor<8x8x3x3xf32>, tensor<8x8x3x3xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %e0 = tensor.empty() : tensor<2x8x6x6xf32>
    %a = linalg.transpose ins(%arg1 : tensor<2x6x6x8xf32>) outs(%e0 : tensor<2x8x6x6xf32>) permutation = [0, 3, 1, 2]
    %e1 = tensor.empty() : tensor<2x8x6x6xf32>
    %b = linalg.transpose ins(%arg2 : tensor<2x6x6x8xf32>) outs(%e1 : tensor<2x8x6x6xf32>) permutation = [0, 3, 1, 2]
    %r:2 = call @lib_0(%arg0, %a, %arg3) : (tensor<2x8x6x6xf32>, tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>)
    %e2 = tensor.empty() : tensor<2x8x6x6xf32>
    %m = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%a, %r#0 : tensor<2x8x6x6xf32>, tensor<2x8x6x6xf32>) outs(%e2 : tensor<2x8x6x6xf32>) {
    ^bb0(%x: f32, %g: f32, %out: f32):
      %p = arith.cmpf ogt, %x, %cst : f32
      %v = arith.select %p, %g, %cst : f32
      linalg.yield %v : f32
    } -> tensor<2x8x6x6xf32>
    %w = call @lib_1(%m, %b, %arg4) : (tensor<2x8x6x6xf32>, tensor<2x8x6x6xf32>, tensor<8x8x3x3xf32>) -> tensor<8x8x3x3xf32>
    return %r#1, %w : tensor<8x8x3x3xf32>, tensor<8x8x3x3xf32>
  }
}

// -----

// A generic iterated (n, h, w, c) instead of (n, c, h, w) renumbers its `linalg.index` ops
// (h: 2 -> 1, w: 3 -> 2, c: 1 -> 3): avg pooling's divisor without the padding reads them.
// ONE-LABEL: func.func @index_ops_renumbered
// ONE:           %[[C:.*]] = "ember.extern"{{.*}} -> tensor<2x8x8x4xf32>
// ONE:           linalg.generic {{.*}} ins(%[[C]] : tensor<2x8x8x4xf32>) outs(%{{.*}} : tensor<2x8x8x4xf32>)
// ONE-NEXT:      ^bb0
// ONE-NEXT:        linalg.index 1 : index
// ONE-NEXT:        linalg.index 2 : index
// ONE-NEXT:        linalg.index 3 : index
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @index_ops_renumbered(%arg0: tensor<2x3x8x8xf32>, %arg1: tensor<4x3x1x1xf32>) -> tensor<2x4x8x8xf32> {
    %c = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [1, 1]}} : (tensor<2x3x8x8xf32>, tensor<4x3x1x1xf32>) -> tensor<2x4x8x8xf32>
    %e = tensor.empty() : tensor<2x4x8x8xf32>
    %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c : tensor<2x4x8x8xf32>) outs(%e : tensor<2x4x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %h = linalg.index 2 : index
      %w = linalg.index 3 : index
      %ch = linalg.index 1 : index
      %s = arith.addi %h, %w : index
      %t = arith.addi %s, %ch : index
      %i = arith.index_cast %t : index to i64
      %f = arith.sitofp %i : i64 to f32
      %r = arith.divf %in, %f : f32
      linalg.yield %r : f32
    } -> tensor<2x4x8x8xf32>
    %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%g : tensor<2x4x8x8xf32>) outs(%e : tensor<2x4x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.negf %in : f32
      linalg.yield %9 : f32
    } -> tensor<2x4x8x8xf32>
    return %n : tensor<2x4x8x8xf32>
  }
}

// -----

// F32OFF-LABEL: func.func @bf16_convs
// F32OFF:         %[[X:.*]] = linalg.transpose ins(%arg0 : tensor<2x3x8x8xbf16>) {{.*}} permutation = [0, 2, 3, 1]
// F32OFF:         "ember.extern"(%[[X]], %{{.*}}) {callee = "aten.convolution", params = {channels_last = true
// F32OFF:         "ember.extern"(%{{.*}}, %{{.*}}) {callee = "aten.convolution", params = {channels_last = true
module {
  func.func @bf16_convs(%arg0: tensor<2x3x8x8xbf16>, %arg1: tensor<4x3x3x3xbf16>, %arg2: tensor<4x4x3x3xbf16>) -> tensor<2x4x8x8xbf16> {
    %c = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x3x8x8xbf16>, tensor<4x3x3x3xbf16>) -> tensor<2x4x8x8xbf16>
    %d = "ember.extern"(%c, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x4x8x8xbf16>, tensor<4x4x3x3xbf16>) -> tensor<2x4x8x8xbf16>
    return %d : tensor<2x4x8x8xbf16>
  }
}
