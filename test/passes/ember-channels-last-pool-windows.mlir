// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-channels-last)' | FileCheck %s

// Max pooling with indices as frontend/pool_decomp.py writes it: a -inf pad of the pooled
// activation, strided slices for the window's elements, a pointwise chain over them. The pad
// and the slices move onto the NHWC buffer (their sizes permuted), so the chain iterates
// (n, h, w, c) and reads no transpose: the only transposes left are the graph input's, the
// weights' and the result's.
// CHECK-LABEL: func.func @pool_window
// CHECK:         %[[C1:.*]] = "ember.extern"(%{{.*}}, %{{.*}}) {callee = "aten.convolution", {{.*}} -> tensor<2x16x16x8xf32>
// CHECK-NOT:     linalg.transpose ins(%{{[0-9]+}} :
// CHECK:         %[[PAD:.*]] = tensor.pad %[[C1]] low[0, 1, 1, 0] high[0, 0, 0, 0]
// CHECK:         } : tensor<2x16x16x8xf32> to tensor<2x17x17x8xf32>
// CHECK:         %[[S0:.*]] = tensor.extract_slice %[[PAD]][0, 0, 0, 0] [2, 8, 8, 8] [1, 2, 2, 1] : tensor<2x17x17x8xf32> to tensor<2x8x8x8xf32>
// CHECK:         %[[S1:.*]] = tensor.extract_slice %[[PAD]][0, 0, 1, 0] [2, 8, 8, 8] [1, 2, 2, 1] : tensor<2x17x17x8xf32> to tensor<2x8x8x8xf32>
// CHECK:         %[[M:.*]] = linalg.generic {{.*}} ins(%[[S1]], %[[S0]] : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) outs(%{{.*}} : tensor<2x8x8x8xf32>)
// CHECK-NOT:     linalg.transpose ins(%{{[0-9]+}} :
// CHECK:         "ember.extern"(%[[M]], %{{.*}}) {callee = "aten.convolution"
// CHECK:         return
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @pool_window(%arg0: tensor<2x3x16x16xf32>, %arg1: tensor<8x3x3x3xf32>, %arg2: tensor<8x8x3x3xf32>) -> tensor<2x8x8x8xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %1 = "ember.extern"(%arg0, %arg1) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x3x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32>
    %padded = tensor.pad %1 low[0, 0, 1, 1] high[0, 0, 0, 0] {
    ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
      tensor.yield %ninf : f32
    } : tensor<2x8x16x16xf32> to tensor<2x8x17x17xf32>
    %s0 = tensor.extract_slice %padded[0, 0, 0, 0] [2, 8, 8, 8] [1, 1, 2, 2] : tensor<2x8x17x17xf32> to tensor<2x8x8x8xf32>
    %s1 = tensor.extract_slice %padded[0, 0, 0, 1] [2, 8, 8, 8] [1, 1, 2, 2] : tensor<2x8x17x17xf32> to tensor<2x8x8x8xf32>
    %e = tensor.empty() : tensor<2x8x8x8xf32>
    %m = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s1, %s0 : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) outs(%e : tensor<2x8x8x8xf32>) {
    ^bb0(%a: f32, %b: f32, %out: f32):
      %gt = arith.cmpf ogt, %a, %b : f32
      %nan = arith.cmpf uno, %a, %a : f32
      %upd = arith.ori %gt, %nan : i1
      %r = arith.select %upd, %a, %b : f32
      linalg.yield %r : f32
    } -> tensor<2x8x8x8xf32>
    %2 = "ember.extern"(%m, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [1, 1]}} : (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<2x8x8x8xf32>
    return %2 : tensor<2x8x8x8xf32>
  }
}

// -----

// The backward of max pooling as a gather (frontend/pool_decomp.py): the gradient comes out of
// convolution_backward channels-last; the gather's element reads of its NCHW transpose read the
// NHWC buffer at the permuted position, and the gather iterates (n, h, w, c): no transpose
// kernel is left between the two library calls.
// CHECK-LABEL: func.func @pool_gather
// CHECK:         %[[G:.*]]:3 = call @conv_bwd(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x8x8x8xf32>,
// CHECK:         %[[OUT:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<16x1xi64>, tensor<1x16xi64>) outs(%{{.*}} : tensor<2x16x16x8xf32>)
// CHECK:           %[[N:.*]] = linalg.index 0 : index
// CHECK:           %[[C:.*]] = linalg.index 3 : index
// CHECK:           tensor.extract %[[G]]#0[%[[N]], %{{.*}}, %{{.*}}, %[[C]]] : tensor<2x8x8x8xf32>
// CHECK-NOT:     linalg.transpose {{.*}}tensor<2x8x8x8xf32>) outs
// CHECK:         call @conv_bwd2(%[[OUT]],
#bh = affine_map<(d0, d1, d2, d3) -> (d2, 0)>
#bw = affine_map<(d0, d1, d2, d3) -> (0, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func private @conv_bwd(tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) attributes {ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [8], dilation = [1, 1], groups = 1 : i64, output_mask = [true, true, true], output_padding = [0, 0], padding = [1, 1], stride = [1, 1], transposed = false}, ember.results = array<i64: 0, 1, 2>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func private @conv_bwd2(tensor<2x8x16x16xf32>, tensor<2x8x16x16xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x8x16x16xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>) attributes {ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [8], dilation = [1, 1], groups = 1 : i64, output_mask = [true, true, true], output_padding = [0, 0], padding = [1, 1], stride = [1, 1], transposed = false}, ember.results = array<i64: 0, 1, 2>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func @pool_gather(%go: tensor<2x8x8x8xf32>, %x: tensor<2x8x8x8xf32>, %w: tensor<8x8x3x3xf32>, %oh: tensor<16x1xi64>, %ow: tensor<1x16xi64>, %x2: tensor<2x8x16x16xf32>) -> (tensor<2x8x16x16xf32>, tensor<8x8x3x3xf32>) {
    %g:3 = call @conv_bwd(%go, %x, %w) : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>)
    %e = tensor.empty() : tensor<2x8x16x16xf32>
    %out = linalg.generic {indexing_maps = [#bh, #bw, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%oh, %ow : tensor<16x1xi64>, tensor<1x16xi64>) outs(%e : tensor<2x8x16x16xf32>) {
    ^bb0(%h: i64, %wi: i64, %o: f32):
      %n = linalg.index 0 : index
      %c = linalg.index 1 : index
      %hi = arith.index_cast %h : i64 to index
      %wj = arith.index_cast %wi : i64 to index
      %v = tensor.extract %g#0[%n, %c, %hi, %wj] : tensor<2x8x8x8xf32>
      linalg.yield %v : f32
    } -> tensor<2x8x16x16xf32>
    %r:3 = call @conv_bwd2(%out, %x2, %w) : (tensor<2x8x16x16xf32>, tensor<2x8x16x16xf32>, tensor<8x8x3x3xf32>) -> (tensor<2x8x16x16xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>)
    return %r#0, %r#1 : tensor<2x8x16x16xf32>, tensor<8x8x3x3xf32>
  }
}
