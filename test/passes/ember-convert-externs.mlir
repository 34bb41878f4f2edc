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

// A product of operands that are bf16 as they come (no widening: torch-mlir's import of eager's
// bf16 `mm` in a backward, `grad @ w`, an input gradient) rounded back to bf16: eager's narrow
// call with the bf16 result, no f32 product and no rounding kernel (before: an f32 aten.mm
// and a truncf, fused with the attention gradient's transpose into a copy kernel).
// CHECK-LABEL: func.func @narrow_operands_rounded_back
// CHECK:         %[[MM:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<8x16xbf16>, tensor<32x16xbf16>) -> tensor<8x32xbf16>
// CHECK-NEXT:    return %[[MM]]
// CHECK-NOT:     arith.truncf
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @narrow_operands_rounded_back(%g: tensor<8x16xbf16>, %w: tensor<32x16xbf16>) -> tensor<8x32xbf16> {
  %zero = arith.constant 0.000000e+00 : f32
  %et = tensor.empty() : tensor<16x32xbf16>
  %wt = linalg.transpose ins(%w : tensor<32x16xbf16>) outs(%et : tensor<16x32xbf16>) permutation = [1, 0]
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%g, %wt : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %en = tensor.empty() : tensor<8x32xbf16>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm : tensor<8x32xf32>) outs(%en : tensor<8x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<8x32xbf16>
  return %0 : tensor<8x32xbf16>
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

// -----

// torch-mlir's bf16 `bmm` / `mm`: bf16 operands read into an f32 accumulator with no widening
// generic, rounded back by a truncf generic. eager's own narrow call, bf16 result (cuBLAS
// rounds once, as eager's call does), no f32 buffer and no rounding kernel.
// CHECK-LABEL: func.func @bmm_bf16_mixed
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.bmm", params = {}} : (tensor<2x4x3xbf16>, tensor<2x3x5xbf16>) -> tensor<2x4x5xbf16>
// CHECK-NEXT:    return %[[R]]
func.func @bmm_bf16_mixed(%a: tensor<2x4x3xbf16>, %b: tensor<2x3x5xbf16>) -> tensor<2x4x5xbf16> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x4x5xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
  %m = linalg.batch_matmul ins(%a, %b : tensor<2x4x3xbf16>, tensor<2x3x5xbf16>) outs(%f : tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
  %n = tensor.empty() : tensor<2x4x5xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m : tensor<2x4x5xf32>) outs(%n : tensor<2x4x5xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<2x4x5xbf16>
  return %r : tensor<2x4x5xbf16>
}

// -----

// CHECK-LABEL: func.func @mm_bf16_mixed_transposed
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<4x3xbf16>, tensor<5x3xbf16>) -> tensor<4x5xbf16>
// CHECK-NEXT:    return %[[R]]
func.func @mm_bf16_mixed_transposed(%a: tensor<4x3xbf16>, %w: tensor<5x3xbf16>) -> tensor<4x5xbf16> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<3x5xbf16>
  %b = linalg.transpose ins(%w : tensor<5x3xbf16>) outs(%et : tensor<3x5xbf16>) permutation = [1, 0]
  %e = tensor.empty() : tensor<4x5xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x5xf32>) -> tensor<4x5xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x3xbf16>, tensor<3x5xbf16>) outs(%f : tensor<4x5xf32>) -> tensor<4x5xf32>
  %n = tensor.empty() : tensor<4x5xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<4x5xf32>) outs(%n : tensor<4x5xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x5xbf16>
  return %r : tensor<4x5xbf16>
}

// -----

// The same bf16 product read in f32 by something else than a rounding: the f32 accumulator
// itself (mm's widening overload), no bias folded in.
// CHECK-LABEL: func.func @mm_bf16_mixed_wide
// CHECK:         "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {}} : (tensor<4x3xbf16>, tensor<3x5xbf16>) -> tensor<4x5xf32>
// CHECK:         linalg.generic
func.func @mm_bf16_mixed_wide(%a: tensor<4x3xbf16>, %b: tensor<3x5xbf16>, %c: tensor<5xf32>) -> tensor<4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x5xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x5xf32>) -> tensor<4x5xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x3xbf16>, tensor<3x5xbf16>) outs(%f : tensor<4x5xf32>) -> tensor<4x5xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%m, %c : tensor<4x5xf32>, tensor<5xf32>) outs(%e : tensor<4x5xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %s = arith.addf %in, %in2 : f32
    linalg.yield %s : f32
  } -> tensor<4x5xf32>
  return %r : tensor<4x5xf32>
}

// -----

// torch's 4-D `q @ k.transpose(-2, -1)` viewed as 3-D for bmm: the collapse of the leading
// dims after the transpose is a collapse of k itself, read transposed by the call (no
// transposed copy of k, whose stores would be strided by its last dim).
// CHECK-LABEL: func.func @bmm_collapsed_transpose
// CHECK-NEXT:    %[[K:.*]] = tensor.collapse_shape %arg1 {{\[\[}}0, 1], [2], [3]] : tensor<2x3x4x8xbf16> into tensor<6x4x8xbf16>
// CHECK-NEXT:    %[[R:.*]] = "ember.extern"(%arg0, %[[K]]) {callee = "aten.bmm", params = {transpose_b = true}} : (tensor<6x4x8xbf16>, tensor<6x4x8xbf16>) -> tensor<6x4x4xbf16>
// CHECK-NEXT:    return %[[R]]
func.func @bmm_collapsed_transpose(%q: tensor<6x4x8xbf16>, %k: tensor<2x3x4x8xbf16>) -> tensor<6x4x4xbf16> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<2x3x8x4xbf16>
  %kt = linalg.transpose ins(%k : tensor<2x3x4x8xbf16>) outs(%et : tensor<2x3x8x4xbf16>) permutation = [0, 1, 3, 2]
  %b = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<2x3x8x4xbf16> into tensor<6x8x4xbf16>
  %e = tensor.empty() : tensor<6x4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<6x4x4xf32>) -> tensor<6x4x4xf32>
  %m = linalg.batch_matmul ins(%q, %b : tensor<6x4x8xbf16>, tensor<6x8x4xbf16>) outs(%f : tensor<6x4x4xf32>) -> tensor<6x4x4xf32>
  %n = tensor.empty() : tensor<6x4x4xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m : tensor<6x4x4xf32>) outs(%n : tensor<6x4x4xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<6x4x4xbf16>
  return %r : tensor<6x4x4xbf16>
}

// -----

// A collapse that merges one of the transposed dims is not a transpose of a collapse: kept.
// CHECK-LABEL: func.func @bmm_collapse_merges_transposed
// CHECK:         linalg.transpose
// CHECK:         "ember.extern"(%arg0, %{{.*}}) {callee = "aten.bmm", params = {}}
func.func @bmm_collapse_merges_transposed(%q: tensor<2x4x24xf32>, %k: tensor<2x4x3x8xf32>) -> tensor<2x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<2x3x8x4xf32>
  %kt = linalg.transpose ins(%k : tensor<2x4x3x8xf32>) outs(%et : tensor<2x3x8x4xf32>) permutation = [0, 2, 3, 1]
  %b = tensor.collapse_shape %kt [[0], [1, 2], [3]] : tensor<2x3x8x4xf32> into tensor<2x24x4xf32>
  %e = tensor.empty() : tensor<2x4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %m = linalg.batch_matmul ins(%q, %b : tensor<2x4x24xf32>, tensor<2x24x4xf32>) outs(%f : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %m : tensor<2x4x4xf32>
}

// -----

// The same product accumulated into a bias (a non-zero init): not the narrow call, which has
// no accumulator; an f32 aten.addmm of the init, rounded after.
// CHECK-LABEL: func.func @narrow_operands_into_an_init
// CHECK:         "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.addmm", params = {}} : (tensor<8x32xf32>, tensor<8x16xbf16>, tensor<16x32xbf16>) -> tensor<8x32xf32>
// CHECK:         arith.truncf
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @narrow_operands_into_an_init(%g: tensor<8x16xbf16>, %w: tensor<16x32xbf16>, %c: tensor<8x32xf32>) -> tensor<8x32xbf16> {
  %mm = linalg.matmul ins(%g, %w : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  %en = tensor.empty() : tensor<8x32xbf16>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm : tensor<8x32xf32>) outs(%en : tensor<8x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<8x32xbf16>
  return %0 : tensor<8x32xbf16>
}

// -----

// torch-mlir's bf16 convolution: an f32 accumulator rounded back to bf16 (the tensor eager's
// convolution returns), which BatchNorm widens again. The library writes bf16; its widening
// then rounding is the identity, so the rounding's readers (the return: a training forward
// saves the convolution's output) read the library's tensor itself, and only the BatchNorm's
// widening is left (it fuses into its kernel). Before, the widen-then-round copy was a kernel
// of its own per convolution.
// CHECK-LABEL: func.func @conv_bf16_rounded_back
// CHECK:         %[[C:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution"{{.*}} -> tensor<2x4x6x6xbf16>
// CHECK:         %[[W:.*]] = linalg.generic {{.*}} ins(%[[C]] : tensor<2x4x6x6xbf16>) outs(%{{.*}} : tensor<2x4x6x6xf32>)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      arith.extf
// CHECK-NOT:     arith.truncf
// CHECK:         return %[[C]], %[[W]]
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @conv_bf16_rounded_back(%x: tensor<2x3x8x8xbf16>, %w: tensor<4x3x3x3xbf16>) -> (tensor<2x4x6x6xbf16>, tensor<2x4x6x6xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<2x4x6x6xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4x6x6xf32>) -> tensor<2x4x6x6xf32>
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<2x3x8x8xbf16>, tensor<4x3x3x3xbf16>) outs(%f : tensor<2x4x6x6xf32>) -> tensor<2x4x6x6xf32>
  %eb = tensor.empty() : tensor<2x4x6x6xbf16>
  %t = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%r : tensor<2x4x6x6xf32>) outs(%eb : tensor<2x4x6x6xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %0 = arith.truncf %in : f32 to bf16
    linalg.yield %0 : bf16
  } -> tensor<2x4x6x6xbf16>
  %ew = tensor.empty() : tensor<2x4x6x6xf32>
  %u = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%t : tensor<2x4x6x6xbf16>) outs(%ew : tensor<2x4x6x6xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %0 = arith.extf %in : bf16 to f32
    linalg.yield %0 : f32
  } -> tensor<2x4x6x6xf32>
  return %t, %u : tensor<2x4x6x6xbf16>, tensor<2x4x6x6xf32>
}
