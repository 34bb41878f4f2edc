// Every linalg convolution form torch-mlir emits for aten.convolution becomes one
// aten.convolution extern on eager's tensors (passes/externs.py); ceil-mode pooling too.
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse,canonicalize)' | FileCheck %s

// 1-d convolution: zero padding and the broadcast bias become the call's padding and bias.
// CHECK-LABEL: func.func @conv_1d
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %arg1, %arg2) {callee = "aten.convolution", params = {dilation = [1], groups = 1 : i64, padding = [1], stride = [1]}} : (tensor<2x4x9xf32>, tensor<6x4x3xf32>, tensor<6xf32>) -> tensor<2x6x9xf32>
// CHECK-NEXT:    return %[[R]]
func.func @conv_1d(%x: tensor<2x4x9xf32>, %w: tensor<6x4x3xf32>, %b: tensor<6xf32>) -> tensor<2x6x9xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %padded = tensor.pad %x low[0, 0, 1] high[0, 0, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index):
    tensor.yield %cst : f32
  } : tensor<2x4x9xf32> to tensor<2x4x11xf32>
  %0 = tensor.empty() : tensor<2x6x9xf32>
  %bb = linalg.broadcast ins(%b : tensor<6xf32>) outs(%0 : tensor<2x6x9xf32>) dimensions = [0, 2]
  %1 = linalg.conv_1d_ncw_fcw {dilations = dense<1> : vector<1xi64>, strides = dense<1> : vector<1xi64>} ins(%padded, %w : tensor<2x4x11xf32>, tensor<6x4x3xf32>) outs(%bb : tensor<2x6x9xf32>) -> tensor<2x6x9xf32>
  return %1 : tensor<2x6x9xf32>
}

// -----

// 3-d convolution into a zero fill: no bias operand.
// CHECK-LABEL: func.func @conv_3d
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1, 1], groups = 1 : i64, padding = [0, 0, 0], stride = [1, 1, 1]}}
// CHECK-NEXT:    return %[[R]]
func.func @conv_3d(%x: tensor<1x2x5x5x5xf32>, %w: tensor<3x2x3x3x3xf32>) -> tensor<1x3x3x3x3xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<1x3x3x3x3xf32>
  %f = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x3x3x3x3xf32>) -> tensor<1x3x3x3x3xf32>
  %1 = linalg.conv_3d_ncdhw_fcdhw {dilations = dense<1> : vector<3xi64>, strides = dense<1> : vector<3xi64>} ins(%x, %w : tensor<1x2x5x5x5xf32>, tensor<3x2x3x3x3xf32>) outs(%f : tensor<1x3x3x3x3xf32>) -> tensor<1x3x3x3x3xf32>
  return %1 : tensor<1x3x3x3x3xf32>
}

// -----

// Depthwise: torch-mlir's [C, 1, K, K] -> [C, K, K] weight collapse is read through (eager's
// weight itself), groups = C.
// CHECK-LABEL: func.func @depthwise_bias
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %arg1, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 4 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x4x9x9xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<2x4x9x9xf32>
// CHECK-NEXT:    return %[[R]]
func.func @depthwise_bias(%x: tensor<2x4x9x9xf32>, %w: tensor<4x1x3x3xf32>, %b: tensor<4xf32>) -> tensor<2x4x9x9xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %cst : f32
  } : tensor<2x4x9x9xf32> to tensor<2x4x11x11xf32>
  %0 = tensor.empty() : tensor<2x4x9x9xf32>
  %bb = linalg.broadcast ins(%b : tensor<4xf32>) outs(%0 : tensor<2x4x9x9xf32>) dimensions = [0, 2, 3]
  %wc = tensor.collapse_shape %w [[0, 1], [2], [3]] : tensor<4x1x3x3xf32> into tensor<4x3x3xf32>
  %1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded, %wc : tensor<2x4x11x11xf32>, tensor<4x3x3xf32>) outs(%bb : tensor<2x4x9x9xf32>) -> tensor<2x4x9x9xf32>
  return %1 : tensor<2x4x9x9xf32>
}

// -----

// Depthwise with a [C, K, K] weight of its own: a host view gives the library [C, 1, K, K].
// CHECK-LABEL: func.func @depthwise_weight_view
// CHECK-NEXT:    %[[W:.*]] = tensor.expand_shape %arg1 {{\[}}[0, 1], [2], [3]] output_shape [4, 1, 3, 3]
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %[[W]]) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 4 : i64, padding = [0, 0], stride = [2, 2]}}
// CHECK-NEXT:    return %[[R]]
func.func @depthwise_weight_view(%x: tensor<2x4x9x9xf32>, %w: tensor<4x3x3xf32>) -> tensor<2x4x4x4xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x4x4x4xf32>
  %f = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%x, %w : tensor<2x4x9x9xf32>, tensor<4x3x3xf32>) outs(%f : tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  return %1 : tensor<2x4x4x4xf32>
}

// -----

// Grouped (torch-mlir's ngchw/gfchw form): the group-splitting views of input, weight, bias and
// result are read through; one call with groups = 2 on eager's tensors.
// CHECK-LABEL: func.func @grouped_bias
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %arg1, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 2 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x9x9xf32>
// CHECK-NEXT:    return %[[R]]
func.func @grouped_bias(%x: tensor<2x4x9x9xf32>, %w: tensor<6x2x3x3xf32>, %b: tensor<6xf32>) -> tensor<2x6x9x9xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %cst : f32
  } : tensor<2x4x9x9xf32> to tensor<2x4x11x11xf32>
  %0 = tensor.empty() : tensor<2x6x9x9xf32>
  %bb = linalg.broadcast ins(%b : tensor<6xf32>) outs(%0 : tensor<2x6x9x9xf32>) dimensions = [0, 2, 3]
  %xe = tensor.expand_shape %padded [[0], [1, 2], [3], [4]] output_shape [2, 2, 2, 11, 11] : tensor<2x4x11x11xf32> into tensor<2x2x2x11x11xf32>
  %we = tensor.expand_shape %w [[0, 1], [2], [3], [4]] output_shape [2, 3, 2, 3, 3] : tensor<6x2x3x3xf32> into tensor<2x3x2x3x3xf32>
  %be = tensor.expand_shape %bb [[0], [1, 2], [3], [4]] output_shape [2, 2, 3, 9, 9] : tensor<2x6x9x9xf32> into tensor<2x2x3x9x9xf32>
  %1 = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%xe, %we : tensor<2x2x2x11x11xf32>, tensor<2x3x2x3x3xf32>) outs(%be : tensor<2x2x3x9x9xf32>) -> tensor<2x2x3x9x9xf32>
  %r = tensor.collapse_shape %1 [[0], [1, 2], [3], [4]] : tensor<2x2x3x9x9xf32> into tensor<2x6x9x9xf32>
  return %r : tensor<2x6x9x9xf32>
}

// -----

// Grouped conv on already-split operands: collapse views in, an expand view out.
// CHECK-LABEL: func.func @grouped_split_inputs
// CHECK-NEXT:    %[[X:.*]] = tensor.collapse_shape %arg0 {{\[}}[0], [1, 2], [3], [4]] : tensor<2x2x2x9x9xf32> into tensor<2x4x9x9xf32>
// CHECK-NEXT:    %[[W:.*]] = tensor.collapse_shape %arg1 {{\[}}[0, 1], [2], [3], [4]] : tensor<2x3x2x3x3xf32> into tensor<6x2x3x3xf32>
// CHECK-NEXT:    %[[C:.*]] = "ember.extern"(%[[X]], %[[W]]) {callee = "aten.convolution", params = {{{.*}}groups = 2 : i64{{.*}}}} : {{.*}} -> tensor<2x6x7x7xf32>
// CHECK-NEXT:    %[[R:.*]] = tensor.expand_shape %[[C]] {{\[}}[0], [1, 2], [3], [4]] output_shape [2, 2, 3, 7, 7]
// CHECK-NEXT:    return %[[R]]
func.func @grouped_split_inputs(%x: tensor<2x2x2x9x9xf32>, %w: tensor<2x3x2x3x3xf32>) -> tensor<2x2x3x7x7xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<2x2x3x7x7xf32>
  %f = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x2x3x7x7xf32>) -> tensor<2x2x3x7x7xf32>
  %1 = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<2x2x2x9x9xf32>, tensor<2x3x2x3x3xf32>) outs(%f : tensor<2x2x3x7x7xf32>) -> tensor<2x2x3x7x7xf32>
  return %1 : tensor<2x2x3x7x7xf32>
}

// -----

// An arbitrary accumulator: the library's convolution, then an add kernel.
// CHECK-LABEL: func.func @conv_accumulate
// CHECK:         %[[C:.*]] = "ember.extern"(%arg0, %{{.*}}) {callee = "aten.convolution", params = {{{.*}}groups = 4 : i64{{.*}}}}
// CHECK-NEXT:    %[[R:.*]] = call @ember_fused_add_{{[0-9]+}}(%arg2, %[[C]])
// CHECK-NEXT:    return %[[R]]
// CHECK-NOT:     linalg.depthwise_conv
func.func @conv_accumulate(%x: tensor<2x4x9x9xf32>, %w: tensor<4x3x3xf32>, %acc: tensor<2x4x7x7xf32>) -> tensor<2x4x7x7xf32> {
  %1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<2x4x9x9xf32>, tensor<4x3x3xf32>) outs(%acc : tensor<2x4x7x7xf32>) -> tensor<2x4x7x7xf32>
  return %1 : tensor<2x4x7x7xf32>
}

// -----

// ceil_mode=True as torch-mlir imports it: the end padded further with the identity. The
// padding is absorbed and the call runs in ceil mode (its output size is the IR's).
// CHECK-LABEL: func.func @pool_ceil_mode
// CHECK-NOT:     tensor.pad
// CHECK:         "ember.extern"(%arg0, %{{.*}}) {callee = "aten.max_pool2d", params = {ceil_mode = true, dilation = [1, 1], padding = [0, 0], stride = [2, 2]}}
func.func @pool_ceil_mode(%x: tensor<1x2x8x8xf32>) -> tensor<1x2x4x4xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %p = tensor.pad %x low[0, 0, 0, 0] high[0, 0, 2, 2] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %ninf : f32
  } : tensor<1x2x8x8xf32> to tensor<1x2x10x10xf32>
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %w = tensor.empty() : tensor<2x2xf32>
  %m = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%p, %w : tensor<1x2x10x10xf32>, tensor<2x2xf32>) outs(%f : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %m : tensor<1x2x4x4xf32>
}

// -----

// More padding at the start than at the end is no ceil mode: the pad stays a kernel.
// CHECK-LABEL: func.func @pool_pad_low_larger
// CHECK:         %[[P:.*]] = call @ember_fused_pad_{{[0-9]+}}(%arg0)
// CHECK:         "ember.extern"(%[[P]], %{{.*}}) {callee = "aten.sum_pool2d", params = {dilation = [1, 1], padding = [0, 0], stride = [2, 2]}}
func.func @pool_pad_low_larger(%x: tensor<1x2x8x8xf32>) -> tensor<1x2x5x5xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %p = tensor.pad %x low[0, 0, 2, 2] high[0, 0, 0, 0] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %zero : f32
  } : tensor<1x2x8x8xf32> to tensor<1x2x10x10xf32>
  %e = tensor.empty() : tensor<1x2x5x5xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>
  %w = tensor.empty() : tensor<2x2xf32>
  %m = linalg.pooling_nchw_sum {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%p, %w : tensor<1x2x10x10xf32>, tensor<2x2xf32>) outs(%f : tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>
  return %m : tensor<1x2x5x5xf32>
}
