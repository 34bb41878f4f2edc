// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-convert-externs)' | FileCheck %s

// A matmul with a zero-filled init reading a transposed weight: one aten.mm with transpose_b;
// the transpose, the fill and the matmul are gone, the pointwise consumer (bias add and relu,
// which a kernel computes anyway) is left alone (grouping and outlining are ember-fuse's).
// CHECK-LABEL: func.func @linear
// CHECK-NEXT:    arith.constant
// CHECK-NEXT:    %[[E:.*]] = tensor.empty() : tensor<8x32xf32>
// CHECK-NEXT:    %[[MM:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %[[R:.*]] = linalg.generic {{.*}} ins(%[[MM]], %arg2 : tensor<8x32xf32>, tensor<32xf32>)
// CHECK-NOT:     linalg.matmul
// CHECK-NOT:     linalg.transpose
// CHECK-NOT:     linalg.fill
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @linear(%x: tensor<8x16xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %et = tensor.empty() : tensor<16x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x16xf32>) outs(%et : tensor<16x32xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %wt : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// A Linear's bias add (torch-mlir's import of addmm: mm, then an add of the bias over the
// columns) that only a later kernel reads stays an add: that kernel computes it at no launch
// of its own.
// CHECK-LABEL: func.func @bias_add_read_by_a_kernel
// CHECK:         "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {}}
// CHECK:         arith.addf
// CHECK:         math.tanh
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @bias_add_read_by_a_kernel(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%0 : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.tanh %in : f32
    linalg.yield %t : f32
  } -> tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// -----

// The same bias add returned as it is: eager's addmm, the bias in the library's epilogue (the
// add would be a kernel of its own).
// CHECK-LABEL: func.func @linear_returned
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.addmm", params = {}} : (tensor<32xf32>, tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    return %[[R]]
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @linear_returned(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// GPT-2's attention projection: c_attn's bias add split into q, k, v, each viewed as heads
// and transposed for the attention call. The sum is only viewed, so it is eager's addmm and
// the views stay views (ember-library-views hands them to the call as strided views of the
// addmm's buffer): no add, no copy kernel.
// CHECK-LABEL: func.func @qkv_projection
// CHECK:         %[[QKV:.*]] = "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.addmm", params = {}} : (tensor<48xf32>, tensor<8x16xf32>, tensor<16x48xf32>) -> tensor<8x48xf32>
// CHECK-NOT:     linalg.generic
// CHECK:         tensor.expand_shape %[[QKV]]
// CHECK:         call @attention(
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func private @attention(tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x4x2x8xf32> attributes {ember.library = "aten._scaled_dot_product_efficient_attention.default", ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
func.func @qkv_projection(%x: tensor<8x16xf32>, %w: tensor<16x48xf32>, %b: tensor<48xf32>) -> tensor<2x4x2x8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x48xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x48xf32>) -> tensor<8x48xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x48xf32>) outs(%f : tensor<8x48xf32>) -> tensor<8x48xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x48xf32>, tensor<48xf32>) outs(%e : tensor<8x48xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x48xf32>
  %x3 = tensor.expand_shape %0 [[0, 1], [2]] output_shape [2, 4, 48] : tensor<8x48xf32> into tensor<2x4x48xf32>
  %q = tensor.extract_slice %x3[0, 0, 0] [2, 4, 16] [1, 1, 1] : tensor<2x4x48xf32> to tensor<2x4x16xf32>
  %k = tensor.extract_slice %x3[0, 0, 16] [2, 4, 16] [1, 1, 1] : tensor<2x4x48xf32> to tensor<2x4x16xf32>
  %v = tensor.extract_slice %x3[0, 0, 32] [2, 4, 16] [1, 1, 1] : tensor<2x4x48xf32> to tensor<2x4x16xf32>
  %q4 = tensor.expand_shape %q [[0], [1], [2, 3]] output_shape [2, 4, 2, 8] : tensor<2x4x16xf32> into tensor<2x4x2x8xf32>
  %k4 = tensor.expand_shape %k [[0], [1], [2, 3]] output_shape [2, 4, 2, 8] : tensor<2x4x16xf32> into tensor<2x4x2x8xf32>
  %v4 = tensor.expand_shape %v [[0], [1], [2, 3]] output_shape [2, 4, 2, 8] : tensor<2x4x16xf32> into tensor<2x4x2x8xf32>
  %et = tensor.empty() : tensor<2x2x4x8xf32>
  %qt = linalg.transpose ins(%q4 : tensor<2x4x2x8xf32>) outs(%et : tensor<2x2x4x8xf32>) permutation = [0, 2, 1, 3]
  %kt = linalg.transpose ins(%k4 : tensor<2x4x2x8xf32>) outs(%et : tensor<2x2x4x8xf32>) permutation = [0, 2, 1, 3]
  %vt = linalg.transpose ins(%v4 : tensor<2x4x2x8xf32>) outs(%et : tensor<2x2x4x8xf32>) permutation = [0, 2, 1, 3]
  %r = call @attention(%qt, %kt, %vt) : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x4x2x8xf32>
  return %r : tensor<2x4x2x8xf32>
}

// -----

// nn.MultiheadAttention's packed in-projection on a 3-D input: `linear` is mm of the flattened
// rows viewed back as [S, B, 3E] before the bias add, then split into q, k, v and transposed
// for the attention call. The sum is only viewed: eager's addmm on the flat rows, the row split
// a view of its buffer; no add, no copy kernel.
// CHECK-LABEL: func.func @qkv_projection_rows_split
// CHECK:         %[[QKV:.*]] = "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.addmm", params = {}} : (tensor<48xf32>, tensor<8x16xf32>, tensor<16x48xf32>) -> tensor<8x48xf32>
// CHECK-NEXT:    %[[ROWS:.*]] = tensor.expand_shape %[[QKV]] {{\[}}[0, 1], [2]] output_shape [4, 2, 48] : tensor<8x48xf32> into tensor<4x2x48xf32>
// CHECK-NOT:     linalg.generic
// CHECK-NOT:     linalg.matmul
// CHECK:         tensor.extract_slice %[[ROWS]][0, 0, 0]
// CHECK:         call @attention2(
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#col3 = affine_map<(d0, d1, d2) -> (d2)>
func.func private @attention2(tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x4x2x8xf32> attributes {ember.library = "aten._scaled_dot_product_flash_attention_for_cpu.default", ember.results = array<i64: 0>, ember.tensor_args = ["query", "key", "value"]}
func.func @qkv_projection_rows_split(%x: tensor<8x16xf32>, %w: tensor<16x48xf32>, %b: tensor<48xf32>) -> tensor<2x4x2x8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x48xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x48xf32>) -> tensor<8x48xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x48xf32>) outs(%f : tensor<8x48xf32>) -> tensor<8x48xf32>
  %rows = tensor.expand_shape %mm [[0, 1], [2]] output_shape [4, 2, 48] : tensor<8x48xf32> into tensor<4x2x48xf32>
  %e3 = tensor.empty() : tensor<4x2x48xf32>
  %0 = linalg.generic {indexing_maps = [#id3, #col3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%rows, %b : tensor<4x2x48xf32>, tensor<48xf32>) outs(%e3 : tensor<4x2x48xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<4x2x48xf32>
  %q = tensor.extract_slice %0[0, 0, 0] [4, 2, 16] [1, 1, 1] : tensor<4x2x48xf32> to tensor<4x2x16xf32>
  %k = tensor.extract_slice %0[0, 0, 16] [4, 2, 16] [1, 1, 1] : tensor<4x2x48xf32> to tensor<4x2x16xf32>
  %v = tensor.extract_slice %0[0, 0, 32] [4, 2, 16] [1, 1, 1] : tensor<4x2x48xf32> to tensor<4x2x16xf32>
  %q4 = tensor.expand_shape %q [[0], [1], [2, 3]] output_shape [4, 2, 2, 8] : tensor<4x2x16xf32> into tensor<4x2x2x8xf32>
  %k4 = tensor.expand_shape %k [[0], [1], [2, 3]] output_shape [4, 2, 2, 8] : tensor<4x2x16xf32> into tensor<4x2x2x8xf32>
  %v4 = tensor.expand_shape %v [[0], [1], [2, 3]] output_shape [4, 2, 2, 8] : tensor<4x2x16xf32> into tensor<4x2x2x8xf32>
  %et = tensor.empty() : tensor<2x2x4x8xf32>
  %qt = linalg.transpose ins(%q4 : tensor<4x2x2x8xf32>) outs(%et : tensor<2x2x4x8xf32>) permutation = [1, 2, 0, 3]
  %kt = linalg.transpose ins(%k4 : tensor<4x2x2x8xf32>) outs(%et : tensor<2x2x4x8xf32>) permutation = [1, 2, 0, 3]
  %vt = linalg.transpose ins(%v4 : tensor<4x2x2x8xf32>) outs(%et : tensor<2x2x4x8xf32>) permutation = [1, 2, 0, 3]
  %r = call @attention2(%qt, %kt, %vt) : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x4x2x8xf32>
  return %r : tensor<2x4x2x8xf32>
}

// -----

// The product of bf16 operands widened to f32, read otherwise than by a rounding back (an f32
// bias added, returned): mm's widening overload reads them narrow; addmm has none, so the bias
// add stays.
// CHECK-LABEL: func.func @narrow_product_with_f32_bias
// CHECK:         "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {}} : (tensor<8x16xbf16>, tensor<16x32xbf16>) -> tensor<8x32xf32>
// CHECK:         arith.addf
// CHECK-NOT:     aten.addmm
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @narrow_product_with_f32_bias(%x: tensor<8x16xbf16>, %w: tensor<16x32xbf16>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %ex = tensor.empty() : tensor<8x16xf32>
  %xf = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xbf16>) outs(%ex : tensor<8x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %c = arith.extf %in : bf16 to f32
    linalg.yield %c : f32
  } -> tensor<8x16xf32>
  %ew = tensor.empty() : tensor<16x32xf32>
  %wf = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<16x32xbf16>) outs(%ew : tensor<16x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %c = arith.extf %in : bf16 to f32
    linalg.yield %c : f32
  } -> tensor<16x32xf32>
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%xf, %wf : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

// A batched matmul accumulating into its argument: aten.baddbmm (init, a, b).
// CHECK-LABEL: func.func @baddbmm
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.baddbmm", params = {}} : (tensor<2x4x8xf32>, tensor<2x4x3xf32>, tensor<2x3x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    return %[[R]]
func.func @baddbmm(%a: tensor<2x4x3xf32>, %b: tensor<2x3x8xf32>, %c: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %r = linalg.batch_matmul ins(%a, %b : tensor<2x4x3xf32>, tensor<2x3x8xf32>) outs(%c : tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// -----

// A matmul with other indexing maps (A read transposed through its maps) is not the library's
// shape: it stays linalg.
// CHECK-LABEL: func.func @transposed_maps
// CHECK-NOT:     ember.extern
// CHECK:         linalg.matmul
func.func @transposed_maps(%a: tensor<3x4xf32>, %b: tensor<3x8xf32>, %c: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%a, %b : tensor<3x4xf32>, tensor<3x8xf32>) outs(%c : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// Max pooling with -inf padding and init: one aten.max_pool2d with padding 1, the pad gone.
// CHECK-LABEL: func.func @max_pool
// CHECK:         "ember.extern"(%arg0, %{{.*}}) {callee = "aten.max_pool2d", params = {dilation = [1, 1], padding = [1, 1], stride = [2, 2]}}
// CHECK-NOT:     tensor.pad
// CHECK-NOT:     linalg.pooling
func.func @max_pool(%x: tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %ninf : f32
  } : tensor<2x3x8x8xf32> to tensor<2x3x10x10xf32>
  %e = tensor.empty() : tensor<2x3x4x4xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %w = tensor.empty() : tensor<3x3xf32>
  %m = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%p, %w : tensor<2x3x10x10xf32>, tensor<3x3xf32>) outs(%f : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  return %m : tensor<2x3x4x4xf32>
}

// -----

// A convolution with a broadcast bias as init: aten.convolution with the bias operand.
// CHECK-LABEL: func.func @conv_bias
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %arg1, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [0, 0], stride = [1, 1]}} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:    return %[[R]]
func.func @conv_bias(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x6x6xf32> {
  %e = tensor.empty() : tensor<1x4x6x6xf32>
  %init = linalg.broadcast ins(%b : tensor<4xf32>) outs(%e : tensor<1x4x6x6xf32>) dimensions = [0, 2, 3]
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) outs(%init : tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  return %r : tensor<1x4x6x6xf32>
}
