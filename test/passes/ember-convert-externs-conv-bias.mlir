// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-convert-externs)' | FileCheck %s --check-prefix=LIB
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-convert-externs{conv-bias=after-wide})' | FileCheck %s --check-prefix=WIDE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-convert-externs{conv-bias=after})' | FileCheck %s --check-prefix=AFTER

// Where a convolution's bias is added (passes/externs.py CONV_BIAS). cuDNN computes no bias:
// on CUDA, ATen adds it after the call in a kernel of its own (efficientnet_b0's 32
// squeeze-excite convolutions: 32 launches), so `after` makes it a generic that ember-fuse puts
// into the consumer's kernel; `library` (the C++ target: oneDNN adds it inside) keeps it an
// operand of the call.

// An f32 convolution with a broadcast bias as init.
// LIB-LABEL: func.func @conv_bias_f32
// LIB-NEXT:    "ember.extern"(%arg0, %arg1, %arg2) {callee = "aten.convolution"
// LIB-NEXT:    return
// WIDE-LABEL: func.func @conv_bias_f32
// WIDE:         %[[C:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [1, 1]}} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
// WIDE-NEXT:    %[[E:.*]] = tensor.empty() : tensor<1x4x6x6xf32>
// WIDE-NEXT:    %[[R:.*]] = linalg.generic {indexing_maps = [#[[ID:.*]], #[[CH:.*]], #[[ID]]], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%[[C]], %arg2 : tensor<1x4x6x6xf32>, tensor<4xf32>) outs(%[[E]] : tensor<1x4x6x6xf32>)
// WIDE-NEXT:    ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32, %{{.*}}: f32):
// WIDE-NEXT:      %[[S:.*]] = arith.addf %[[A]], %[[B]] : f32
// WIDE-NEXT:      linalg.yield %[[S]]
// WIDE:         return %[[R]]
// WIDE-NOT:     linalg.broadcast
// AFTER-LABEL: func.func @conv_bias_f32
// AFTER:         "ember.extern"(%arg0, %arg1) {callee = "aten.convolution"
// AFTER-NEXT:    tensor.empty
// AFTER-NEXT:    linalg.generic {{.*}} ins(%{{.*}}, %arg2 : tensor<1x4x6x6xf32>, tensor<4xf32>)
func.func @conv_bias_f32(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x6x6xf32> {
  %e = tensor.empty() : tensor<1x4x6x6xf32>
  %init = linalg.broadcast ins(%b : tensor<4xf32>) outs(%e : tensor<1x4x6x6xf32>) dimensions = [0, 2, 3]
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) outs(%init : tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  return %r : tensor<1x4x6x6xf32>
}

// -----

// torch-mlir's bf16 convolution: an f32 accumulator initialised with the widened bias, rounded
// back by a truncf generic. `after` calls the library without the bias (its bf16 result is
// the rounded product), widens it, adds the widened bias in f32 and leaves the IR's own
// truncf: eager's CUDA `output.add_(bias)`, one rounding after the add. `after-wide` keeps the
// bias in the call (a CPU tensor's oneDNN adds it before its one rounding).
// LIB-LABEL: func.func @conv_bias_bf16
// LIB:         "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.convolution"{{.*}} -> tensor<1x4x4x4xbf16>
// WIDE-LABEL: func.func @conv_bias_bf16
// WIDE:         "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.convolution"{{.*}} -> tensor<1x4x4x4xbf16>
// WIDE-NOT:     arith.addf
// AFTER-LABEL: func.func @conv_bias_bf16
// AFTER:         %[[B:.*]] = linalg.generic {{.*}} ins(%arg1 : tensor<4xbf16>)
// AFTER:         %[[C:.*]] = "ember.extern"(%arg2, %arg0) {callee = "aten.convolution"{{.*}} : (tensor<1x3x4x4xbf16>, tensor<4x3x1x1xbf16>) -> tensor<1x4x4x4xbf16>
// AFTER:         %[[W:.*]] = linalg.generic {{.*}} ins(%[[C]] : tensor<1x4x4x4xbf16>)
// AFTER:           arith.extf
// AFTER:         %[[S:.*]] = linalg.generic {{.*}} ins(%[[W]], %[[B]] : tensor<1x4x4x4xf32>, tensor<4xf32>)
// AFTER-NEXT:    ^bb0
// AFTER-NEXT:      arith.addf
// AFTER:         linalg.generic {{.*}} ins(%[[S]] : tensor<1x4x4x4xf32>) outs(%{{.*}} : tensor<1x4x4x4xbf16>)
// AFTER-NEXT:    ^bb0
// AFTER-NEXT:      arith.truncf
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @conv_bias_bf16(%arg0: tensor<4x3x1x1xbf16>, %arg1: tensor<4xbf16>, %arg2: tensor<1x3x4x4xbf16>) -> tensor<1x4x4x4xbf16> {
  %0 = tensor.empty() : tensor<1x4x4x4xf32>
  %1 = tensor.empty() : tensor<4xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg1 : tensor<4xbf16>) outs(%1 : tensor<4xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %10 = arith.extf %in : bf16 to f32
    linalg.yield %10 : f32
  } -> tensor<4xf32>
  %broadcasted = linalg.broadcast ins(%2 : tensor<4xf32>) outs(%0 : tensor<1x4x4x4xf32>) dimensions = [0, 2, 3]
  %3 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg2, %arg0 : tensor<1x3x4x4xbf16>, tensor<4x3x1x1xbf16>) outs(%broadcasted : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %4 = tensor.empty() : tensor<1x4x4x4xbf16>
  %5 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3 : tensor<1x4x4x4xf32>) outs(%4 : tensor<1x4x4x4xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %10 = arith.truncf %in : f32 to bf16
    linalg.yield %10 : bf16
  } -> tensor<1x4x4x4xbf16>
  return %5 : tensor<1x4x4x4xbf16>
}

// -----

// A bf16 depthwise convolution keeps its bias in the call under `after` too: ATen's CUDA
// depthwise kernel adds it inside, before its one rounding.
// AFTER-LABEL: func.func @depthwise_bias_bf16
// AFTER:         "ember.extern"(%arg2, %{{.*}}, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 4 : i64
// AFTER-NOT:     arith.addf
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @depthwise_bias_bf16(%arg0: tensor<4x3x3xbf16>, %arg1: tensor<4xbf16>, %arg2: tensor<1x4x6x6xbf16>) -> tensor<1x4x4x4xbf16> {
  %0 = tensor.empty() : tensor<1x4x4x4xf32>
  %1 = tensor.empty() : tensor<4xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg1 : tensor<4xbf16>) outs(%1 : tensor<4xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %10 = arith.extf %in : bf16 to f32
    linalg.yield %10 : f32
  } -> tensor<4xf32>
  %broadcasted = linalg.broadcast ins(%2 : tensor<4xf32>) outs(%0 : tensor<1x4x4x4xf32>) dimensions = [0, 2, 3]
  %3 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg2, %arg0 : tensor<1x4x6x6xbf16>, tensor<4x3x3xbf16>) outs(%broadcasted : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %4 = tensor.empty() : tensor<1x4x4x4xbf16>
  %5 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3 : tensor<1x4x4x4xf32>) outs(%4 : tensor<1x4x4x4xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %10 = arith.truncf %in : f32 to bf16
    linalg.yield %10 : bf16
  } -> tensor<1x4x4x4xbf16>
  return %5 : tensor<1x4x4x4xbf16>
}
