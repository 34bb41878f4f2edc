// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse,canonicalize)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{max-group-size=1},canonicalize)' | FileCheck %s --check-prefix=SINGLE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{fuse-reductions=false},canonicalize)' | FileCheck %s --check-prefix=NORED
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{target=triton},canonicalize)' | FileCheck %s --check-prefix=TRITON

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>

// A chain of three pointwise ops with a broadcast operand becomes one kernel; nothing but the
// launch stays on the host.
// CHECK-LABEL: func.func @pointwise_chain
// CHECK-NEXT:    %[[R:.*]] = call @ember_fused_add_mul_exp_0(%arg0, %arg1) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    return %[[R]]
// CHECK:       func.func private @ember_fused_add_mul_exp_0(%{{.*}}: tensor<8x32xf32>, %{{.*}}: tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-SAME:    ember.kernel = "pointwise", ember.ops = ["add", "mul", "exp"]
// CHECK-COUNT-3: linalg.generic
// CHECK:       return
// SINGLE-LABEL: func.func @pointwise_chain
// SINGLE-COUNT-3: call @ember_fused_
// NORED-LABEL: func.func @pointwise_chain
// NORED-NEXT:    call @ember_fused_add_mul_exp_0
func.func @pointwise_chain(%x: tensor<8x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %c = arith.constant 1.700000e+00 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%0 : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %c : f32
    linalg.yield %m : f32
  } -> tensor<8x32xf32>
  %2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%1 : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %x2 = math.exp %in : f32
    linalg.yield %x2 : f32
  } -> tensor<8x32xf32>
  return %2 : tensor<8x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0, 0)>

// Softmax: max-reduce, subtract+exp, sum-reduce and divide share the row space and become one
// "reduction" kernel. Without reduction fusion each reduction stands apart.
// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    call @ember_fused_amax_exp_sum_0(%arg0)
// CHECK-NEXT:    return
// CHECK:       func.func private @ember_fused_amax_exp_sum_0
// CHECK-SAME:    ember.kernel = "reduction", ember.ops = ["amax", "exp", "sum", "div"]
// NORED-LABEL: func.func @softmax
// NORED-COUNT-4: call @ember_fused_
// NORED-NOT: call
// NORED: return
func.func @softmax(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<4x1xf32>
  %init_max = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<4x1xf32>) -> tensor<4x1xf32>
  %max = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x16xf32>) outs(%init_max : tensor<4x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %m = arith.maximumf %in, %acc : f32
    linalg.yield %m : f32
  } -> tensor<4x1xf32>
  %e = tensor.empty() : tensor<4x16xf32>
  %ex = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max : tensor<4x16xf32>, tensor<4x1xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%in: f32, %mx: f32, %out: f32):
    %d = arith.subf %in, %mx : f32
    %y = math.exp %d : f32
    linalg.yield %y : f32
  } -> tensor<4x16xf32>
  %init_sum = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x1xf32>) -> tensor<4x1xf32>
  %sum = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%ex : tensor<4x16xf32>) outs(%init_sum : tensor<4x1xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4x1xf32>
  %r = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %sum : tensor<4x16xf32>, tensor<4x1xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%in: f32, %s: f32, %out: f32):
    %q = arith.divf %in, %s : f32
    linalg.yield %q : f32
  } -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>

// Linear: the weight transpose folds into the library call (transpose_b), the zero-filled
// accumulator disappears, and bias + gelu fuse into one pointwise epilogue kernel.
// CHECK-LABEL: func.func @linear_gelu
// CHECK-NEXT:    %[[MM:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %[[R:.*]] = call @ember_fused_add_gelu_0(%[[MM]], %arg2)
// CHECK-NEXT:    return %[[R]]
// CHECK-NOT:   linalg.matmul
// CHECK-NOT:   linalg.transpose
func.func @linear_gelu(%x: tensor<8x16xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %half = arith.constant 5.000000e-01 : f32
  %one = arith.constant 1.000000e+00 : f32
  %sqrt2 = arith.constant 1.41421354 : f32
  %et = tensor.empty() : tensor<16x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x16xf32>) outs(%et : tensor<16x32xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %wt : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%0 : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %d = arith.divf %in, %sqrt2 : f32
    %er = math.erf %d : f32
    %a = arith.addf %er, %one : f32
    %h = arith.mulf %a, %half : f32
    %g = arith.mulf %in, %h : f32
    linalg.yield %g : f32
  } -> tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// -----

#id2r = affine_map<(d0, d1) -> (d0, d1)>
#row2r = affine_map<(d0, d1) -> (d1)>
#id3r = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// A 3-D Linear: the bias is added in the product's 2-D shape, the activation runs on its 3-D
// view. The same elements in two shapes: one kernel, which evaluates the bias add through
// the reshape (the [4*8] row index split into the GELU's [4, 8]).
// CHECK-LABEL: func.func @linear_3d_tanh
// CHECK:         %[[MM:.*]] = "ember.extern"(%{{.*}}, %arg1) {callee = "aten.mm"
// CHECK-NEXT:    %[[R:.*]] = call @ember_fused_add_tanh_0(%[[MM]], %arg2) : (tensor<32x24xf32>, tensor<24xf32>) -> tensor<4x8x24xf32>
// CHECK-NEXT:    return %[[R]]
// CHECK:       func.func private @ember_fused_add_tanh_0
// CHECK:         linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<32x24xf32>, tensor<24xf32>)
// CHECK:         tensor.expand_shape
// CHECK:         math.tanh
func.func @linear_3d_tanh(%x: tensor<4x8x16xf32>, %w: tensor<16x24xf32>, %b: tensor<24xf32>) -> tensor<4x8x24xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %xc = tensor.collapse_shape %x [[0, 1], [2]] : tensor<4x8x16xf32> into tensor<32x16xf32>
  %e = tensor.empty() : tensor<32x24xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32x24xf32>) -> tensor<32x24xf32>
  %mm = linalg.matmul ins(%xc, %w : tensor<32x16xf32>, tensor<16x24xf32>) outs(%f : tensor<32x24xf32>) -> tensor<32x24xf32>
  %0 = linalg.generic {indexing_maps = [#id2r, #row2r, #id2r], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<32x24xf32>, tensor<24xf32>) outs(%e : tensor<32x24xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<32x24xf32>
  %v = tensor.expand_shape %0 [[0, 1], [2]] output_shape [4, 8, 24] : tensor<32x24xf32> into tensor<4x8x24xf32>
  %e3 = tensor.empty() : tensor<4x8x24xf32>
  %1 = linalg.generic {indexing_maps = [#id3r, #id3r], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%v : tensor<4x8x24xf32>) outs(%e3 : tensor<4x8x24xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.tanh %in : f32
    linalg.yield %t : f32
  } -> tensor<4x8x24xf32>
  return %1 : tensor<4x8x24xf32>
}

// -----

#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

// Convolution: zero padding of the input and the broadcast bias become the library call's
// padding and bias operands.
// CHECK-LABEL: func.func @conv_bias
// CHECK-NEXT:    "ember.extern"(%arg0, %arg1, %arg2) {callee = "aten.convolution", params = {dilation = [1, 1], groups = 1 : i64, padding = [1, 1], stride = [2, 2]}}
// CHECK-NEXT:    return
func.func @conv_bias(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<2x4x4x4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %zero : f32
  } : tensor<2x3x8x8xf32> to tensor<2x3x10x10xf32>
  %e = tensor.empty() : tensor<2x4x4x4xf32>
  %bb = linalg.broadcast ins(%b : tensor<4xf32>) outs(%e : tensor<2x4x4x4xf32>) dimensions = [0, 2, 3]
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%p, %w : tensor<2x3x10x10xf32>, tensor<4x3x3x3xf32>) outs(%bb : tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  return %c : tensor<2x4x4x4xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// %a feeds both the matmul and the last op; fusing the first and last pointwise ops would put
// the library call inside a cycle, so they stay two kernels around it.
// CHECK-LABEL: func.func @no_cycle
// CHECK-NEXT:    %[[A:.*]] = call @ember_fused_exp_0(%arg0)
// CHECK-NEXT:    %[[M:.*]] = "ember.extern"(%[[A]], %arg1) {callee = "aten.mm", params = {}}
// CHECK-NEXT:    %[[R:.*]] = call @ember_fused_add_1(%[[M]], %[[A]])
// CHECK-NEXT:    return %[[R]]
func.func @no_cycle(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %y = math.exp %in : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %mm = linalg.matmul ins(%a, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %a : tensor<8x8xf32>, tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#rowred = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>

// Two row sums over different extents (16 and 8) share the outer space: one C++ kernel, but a
// Triton program tiles a single [rows, RBLOCK] space, so for Triton they stay apart.
// CHECK-LABEL: func.func @two_row_sums
// CHECK-NEXT:    call @ember_fused_sum_add_0(%arg0, %arg1)
// CHECK-NEXT:    return
// TRITON-LABEL: func.func @two_row_sums
// TRITON-COUNT-2: call @ember_fused_sum
// TRITON-NEXT:   return
func.func @two_row_sums(%x: tensor<4x16xf32>, %y: tensor<4x8xf32>) -> tensor<4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#id, #rowred], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x16xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#id, #rowred], iterator_types = ["parallel", "reduction"]}
      ins(%y : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#v, #v, #v], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %s = arith.addf %i, %j : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Pooling: -inf padding and init make max pooling a library call with padding 1; sum pooling
// (avg_pool2d before its division) likewise; the division stays a kernel.
// CHECK-LABEL: func.func @pooling
// CHECK:         %[[W:.*]] = tensor.empty() : tensor<3x3xf32>
// CHECK-NEXT:    "ember.extern"(%arg0, %[[W]]) {callee = "aten.max_pool2d", params = {dilation = [1, 1], padding = [1, 1], stride = [2, 2]}}
// CHECK:         "ember.extern"(%arg0, %{{.*}}) {callee = "aten.sum_pool2d", params = {dilation = [1, 1], padding = [0, 0], stride = [2, 2]}}
// CHECK-NOT:     linalg.pooling
func.func @pooling(%x: tensor<2x3x8x8xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %ninf : f32
  } : tensor<2x3x8x8xf32> to tensor<2x3x10x10xf32>
  %e = tensor.empty() : tensor<2x3x4x4xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %w = tensor.empty() : tensor<3x3xf32>
  %m = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%p, %w : tensor<2x3x10x10xf32>, tensor<3x3xf32>) outs(%f : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %w2 = tensor.empty() : tensor<2x2xf32>
  %s = linalg.pooling_nchw_sum {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%x, %w2 : tensor<2x3x8x8xf32>, tensor<2x2xf32>) outs(%z : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  return %m, %s : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>
}

// -----

// A bf16 linear as torch-mlir imports it: both operands widened to f32 (the weight after its
// transpose), an f32 matmul, then a rounding back. That is eager's bf16 `mm`, so it becomes
// that very call: the bf16 tensors themselves (the weight as transpose_b), a bf16 result that
// cuBLAS rounds once; no widened copy, no f32 result, no kernel.
// CHECK-LABEL: func.func @bf16_linear
// CHECK-NOT:     ember_fused
// CHECK:         %[[MM:.*]] = "ember.extern"(%arg1, %arg0) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<16x64xbf16>, tensor<32x64xbf16>) -> tensor<16x32xbf16>
// CHECK-NEXT:    return %[[MM]]
#lid = affine_map<(d0, d1) -> (d0, d1)>
func.func @bf16_linear(%arg0: tensor<32x64xbf16>, %arg2: tensor<16x64xbf16>) -> tensor<16x32xbf16> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<64x32xbf16>
  %t = linalg.transpose ins(%arg0 : tensor<32x64xbf16>) outs(%0 : tensor<64x32xbf16>) permutation = [1, 0]
  %3 = tensor.empty() : tensor<16x64xf32>
  %4 = linalg.generic {indexing_maps = [#lid, #lid], iterator_types = ["parallel", "parallel"]} ins(%arg2 : tensor<16x64xbf16>) outs(%3 : tensor<16x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16x64xf32>
  %5 = tensor.empty() : tensor<64x32xf32>
  %6 = linalg.generic {indexing_maps = [#lid, #lid], iterator_types = ["parallel", "parallel"]} ins(%t : tensor<64x32xbf16>) outs(%5 : tensor<64x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<64x32xf32>
  %7 = tensor.empty() : tensor<16x32xf32>
  %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %9 = linalg.matmul ins(%4, %6 : tensor<16x64xf32>, tensor<64x32xf32>) outs(%8 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %11 = tensor.empty() : tensor<16x32xbf16>
  %12 = linalg.generic {indexing_maps = [#lid, #lid], iterator_types = ["parallel", "parallel"]} ins(%9 : tensor<16x32xf32>) outs(%11 : tensor<16x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  } -> tensor<16x32xbf16>
  return %12 : tensor<16x32xbf16>
}

// -----

// addmm(bias, x, w) in bf16: the f32 product plus the widened bias vector, rounded once, is
// eager's addmm with the bias in cuBLAS's epilogue; it becomes that call with the bf16 bias.
// CHECK-LABEL: func.func @bf16_addmm
// CHECK-NOT:     ember_fused
// CHECK:         %[[MM:.*]] = "ember.extern"(%arg2, %arg1, %arg0) {callee = "aten.addmm", params = {}} : (tensor<32xbf16>, tensor<16x64xbf16>, tensor<64x32xbf16>) -> tensor<16x32xbf16>
// CHECK-NEXT:    return %[[MM]]
// When the f32 product is also read elsewhere it stays f32 (aten.mm with the f32 accumulator):
// CHECK-LABEL: func.func @bf16_mm_f32_used
// CHECK:         "ember.extern"(%arg1, %arg0) {callee = "aten.mm", params = {}} : (tensor<16x64xbf16>, tensor<64x32xbf16>) -> tensor<16x32xf32>
#am_id = affine_map<(d0, d1) -> (d0, d1)>
#am_row = affine_map<(d0, d1) -> (d1)>
func.func @bf16_addmm(%arg0: tensor<64x32xbf16>, %arg1: tensor<16x64xbf16>, %arg2: tensor<32xbf16>) -> tensor<16x32xbf16> {
  %cst = arith.constant 0.000000e+00 : f32
  %eb = tensor.empty() : tensor<32xf32>
  %b = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%arg2 : tensor<32xbf16>) outs(%eb : tensor<32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<32xf32>
  %ex = tensor.empty() : tensor<16x64xf32>
  %x = linalg.generic {indexing_maps = [#am_id, #am_id], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<16x64xbf16>) outs(%ex : tensor<16x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16x64xf32>
  %ew = tensor.empty() : tensor<64x32xf32>
  %w = linalg.generic {indexing_maps = [#am_id, #am_id], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<64x32xbf16>) outs(%ew : tensor<64x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %v = arith.extf %in : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<64x32xf32>
  %e = tensor.empty() : tensor<16x32xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%z : tensor<16x32xf32>) -> tensor<16x32xf32>
  %sum = linalg.generic {indexing_maps = [#am_id, #am_row, #am_id], iterator_types = ["parallel", "parallel"]} ins(%mm, %b : tensor<16x32xf32>, tensor<32xf32>) outs(%e : tensor<16x32xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %s = arith.addf %in, %in_0 : f32
    linalg.yield %s : f32
  } -> tensor<16x32xf32>
  %en = tensor.empty() : tensor<16x32xbf16>
  %r = linalg.generic {indexing_maps = [#am_id, #am_id], iterator_types = ["parallel", "parallel"]} ins(%sum : tensor<16x32xf32>) outs(%en : tensor<16x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x32xbf16>
  return %r : tensor<16x32xbf16>
}
func.func @bf16_mm_f32_used(%arg0: tensor<64x32xbf16>, %arg1: tensor<16x64xbf16>) -> (tensor<16x32xbf16>, tensor<16x32xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %ex = tensor.empty() : tensor<16x64xf32>
  %x = linalg.generic {indexing_maps = [#am_id, #am_id], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<16x64xbf16>) outs(%ex : tensor<16x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16x64xf32>
  %ew = tensor.empty() : tensor<64x32xf32>
  %w = linalg.generic {indexing_maps = [#am_id, #am_id], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<64x32xbf16>) outs(%ew : tensor<64x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %v = arith.extf %in : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<64x32xf32>
  %e = tensor.empty() : tensor<16x32xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%z : tensor<16x32xf32>) -> tensor<16x32xf32>
  %en = tensor.empty() : tensor<16x32xbf16>
  %r = linalg.generic {indexing_maps = [#am_id, #am_id], iterator_types = ["parallel", "parallel"]} ins(%mm : tensor<16x32xf32>) outs(%en : tensor<16x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x32xbf16>
  return %r, %mm : tensor<16x32xbf16>, tensor<16x32xf32>
}

// -----

// A smaller producer (a bf16 bias widened to f32, one value per column) is recomputed inside
// its broadcasting consumer's loop nest instead of being a kernel of its own.
// CHECK-LABEL: func.func @broadcast_producer
// CHECK:         %[[R:.*]] = call @ember_fused_convert_add_0(%arg1, %arg0) : (tensor<32xbf16>, tensor<16x32xf32>) -> tensor<16x32xf32>
// CHECK-NEXT:    return %[[R]]
// SINGLE-LABEL: func.func @broadcast_producer
// SINGLE-COUNT-2: call @ember_fused
#bp_id = affine_map<(d0, d1) -> (d0, d1)>
#bp_row = affine_map<(d0, d1) -> (d1)>
func.func @broadcast_producer(%arg0: tensor<16x32xf32>, %arg1: tensor<32xbf16>) -> tensor<16x32xf32> {
  %e1 = tensor.empty() : tensor<32xf32>
  %b = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%arg1 : tensor<32xbf16>) outs(%e1 : tensor<32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<32xf32>
  %e2 = tensor.empty() : tensor<16x32xf32>
  %r = linalg.generic {indexing_maps = [#bp_id, #bp_row, #bp_id], iterator_types = ["parallel", "parallel"]} ins(%arg0, %b : tensor<16x32xf32>, tensor<32xf32>) outs(%e2 : tensor<16x32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %a = arith.addf %x, %y : f32
    linalg.yield %a : f32
  } -> tensor<16x32xf32>
  return %r : tensor<16x32xf32>
}

// -----

// A bf16 convolution with bias as torch-mlir imports it: bf16 operands, the bias widened to f32,
// an f32 accumulator, then a rounding. cuDNN adds the bias and rounds once, as eager does: the
// library call takes the bf16 bias and writes bf16; the widening back to f32 fuses into the
// consumer (with the rounding and the ReLU), so no f32 activation is ever stored.
// CHECK-LABEL: func.func @bf16_conv_bias
// CHECK:         %[[C:.*]] = "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.convolution", params = {{.*}}} : (tensor<2x8x10x10xbf16>, tensor<16x8x3x3xbf16>, tensor<16xbf16>) -> tensor<2x16x10x10xbf16>
// CHECK-NEXT:    %[[R:.*]] = call @ember_fused_{{.*}}(%[[C]]) : (tensor<2x16x10x10xbf16>) -> tensor<2x16x10x10xbf16>
// CHECK-NEXT:    return %[[R]]
#cv1 = affine_map<(d0) -> (d0)>
#cv4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @bf16_conv_bias(%arg0: tensor<16x8x3x3xbf16>, %arg1: tensor<16xbf16>, %arg2: tensor<2x8x10x10xbf16>) -> tensor<2x16x10x10xbf16> {
  %cst = arith.constant 0.000000e+00 : bf16
  %padded = tensor.pad %arg2 low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %cst : bf16
  } : tensor<2x8x10x10xbf16> to tensor<2x8x12x12xbf16>
  %0 = tensor.empty() : tensor<2x16x10x10xf32>
  %1 = tensor.empty() : tensor<16xf32>
  %2 = linalg.generic {indexing_maps = [#cv1, #cv1], iterator_types = ["parallel"]} ins(%arg1 : tensor<16xbf16>) outs(%1 : tensor<16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16xf32>
  %b = linalg.broadcast ins(%2 : tensor<16xf32>) outs(%0 : tensor<2x16x10x10xf32>) dimensions = [0, 2, 3]
  %3 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded, %arg0 : tensor<2x8x12x12xbf16>, tensor<16x8x3x3xbf16>) outs(%b : tensor<2x16x10x10xf32>) -> tensor<2x16x10x10xf32>
  %4 = tensor.empty() : tensor<2x16x10x10xbf16>
  %5 = linalg.generic {indexing_maps = [#cv4, #cv4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3 : tensor<2x16x10x10xf32>) outs(%4 : tensor<2x16x10x10xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<2x16x10x10xbf16>
  %6 = linalg.generic {indexing_maps = [#cv4, #cv4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5 : tensor<2x16x10x10xbf16>) outs(%4 : tensor<2x16x10x10xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %c = arith.cmpf ugt, %in, %cst : bf16
    %s = arith.select %c, %in, %cst : bf16
    linalg.yield %s : bf16
  } -> tensor<2x16x10x10xbf16>
  return %6 : tensor<2x16x10x10xbf16>
}

// -----

// A dense constant whose elements differ (a relative-position index, a constant-folded attention
// mask) is no cheap producer: it stays a host constant in @main and the kernel reads it as an
// argument (no kernel body computes it per element). A splat constant padded into a bigger
// tensor (an attention mask's `mask[a:b, c:d] = k`) is cloned into the kernel, which computes
// it with no loop of its own.
// CHECK-LABEL: func.func @non_splat_constant
// CHECK:         %[[K:.*]] = arith.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<4xf32>
// CHECK:         %[[R:.*]] = call @ember_fused_{{.*}}(%arg0, %[[K]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return %[[R]]
// CHECK:       func.func private @ember_fused_
// CHECK-NOT:     dense<[
// CHECK:         return
// TRITON-LABEL: func.func @non_splat_constant
// TRITON:         arith.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]>
// TRITON:         call @ember_fused_{{.*}}(%arg0, %{{.*}}) : (tensor<4xf32>, tensor<4xf32>)
#nsc = affine_map<(d0) -> (d0)>
func.func @non_splat_constant(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %k = arith.constant dense<[0.0, 1.0, 2.0, 3.0]> : tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#nsc, #nsc, #nsc], iterator_types = ["parallel"]} ins(%arg0, %k : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %a = arith.addf %x, %y : f32
    linalg.yield %a : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @splat_constant_padded
// CHECK-NOT:     arith.constant
// CHECK:         %[[P:.*]] = call @ember_fused_pad_add_{{.*}}(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK:       func.func private @ember_fused_pad_add_
// CHECK:         arith.constant dense<3.000000e+00> : tensor<2x4xf32>
// CHECK:         tensor.pad
#spc = affine_map<(d0, d1) -> (d0, d1)>
func.func @splat_constant_padded(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %k = arith.constant dense<3.0> : tensor<2x4xf32>
  %z = arith.constant 0.0 : f32
  %p = tensor.pad %k low[1, 2] high[1, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %z : f32
  } : tensor<2x4xf32> to tensor<4x8xf32>
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [#spc, #spc, #spc], iterator_types = ["parallel", "parallel"]} ins(%arg0, %p : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %a = arith.addf %x, %y : f32
    linalg.yield %a : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#col2 = affine_map<(d0, d1) -> (d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// q, k and v sliced from one bias add (read through an expand_shape that splits the rows):
// fused with any one slice, the add would stay a result of another shape; with all three it is
// no result at all, and the three slices share one 2x4x8 loop nest.
// CHECK-LABEL: func.func @qkv_slices
// CHECK-NEXT:    %[[R:.*]]:3 = call @ember_fused_add_extract_slice_{{[0-9]+}}(%arg0, %arg1) : (tensor<8x24xf32>, tensor<24xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT:    return %[[R]]#0, %[[R]]#1, %[[R]]#2
// SINGLE-LABEL: func.func @qkv_slices
// SINGLE-COUNT-4: call @ember_fused_
func.func @qkv_slices(%x: tensor<8x24xf32>, %b: tensor<24xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %e = tensor.empty() : tensor<8x24xf32>
  %a = linalg.generic {indexing_maps = [#id2, #col2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<8x24xf32>, tensor<24xf32>) outs(%e : tensor<8x24xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %s = arith.addf %in, %in1 : f32
    linalg.yield %s : f32
  } -> tensor<8x24xf32>
  %v = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 4, 24] : tensor<8x24xf32> into tensor<2x4x24xf32>
  %q = tensor.extract_slice %v[0, 0, 0] [2, 4, 8] [1, 1, 1] : tensor<2x4x24xf32> to tensor<2x4x8xf32>
  %k = tensor.extract_slice %v[0, 0, 8] [2, 4, 8] [1, 1, 1] : tensor<2x4x24xf32> to tensor<2x4x8xf32>
  %w = tensor.extract_slice %v[0, 0, 16] [2, 4, 8] [1, 1, 1] : tensor<2x4x24xf32> to tensor<2x4x8xf32>
  return %q, %k, %w : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Horizontal: two row reductions of one tensor (no edge joins them) are one kernel that reads
// it once; with max-group-size=1 they are two.
// CHECK-LABEL: func.func @two_reductions_of_one_tensor
// CHECK-NEXT:    %[[S:.*]]:2 = call @ember_fused_sum_amax_{{[0-9]+}}(%arg0) : (tensor<8x32xf32>) -> (tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT:    return %[[S]]#0, %[[S]]#1
// SINGLE-LABEL: func.func @two_reductions_of_one_tensor
// SINGLE-COUNT-2: call @ember_fused_
func.func @two_reductions_of_one_tensor(%x: tensor<8x32xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e1 = tensor.empty() : tensor<8xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %i2 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %r1 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x32xf32>) outs(%i1 : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %r2 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x32xf32>) outs(%i2 : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.maximumf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %r1, %r2 : tensor<8xf32>, tensor<8xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#red3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#col2 = affine_map<(d0, d1) -> (d1)>

// A row reduction over 2x4 rows, then a cast (with a bias) that reads its result collapsed to
// 8 rows, as a matmul takes it: the cast moves above the collapse (sink_reshapes.py) and the
// collapse stays a view on the host, so the three ops are one kernel of the 2x4x16 space
// (the bf16 copy of a layer norm's output in a transformer: one launch less per norm).
// CHECK-LABEL: func.func @reduce_then_cast_through_collapse
// CHECK-NEXT:    %[[K:.*]] = call @ember_fused_sum_sub_add_0(%arg0, %arg1) : (tensor<2x4x16xf32>, tensor<16xbf16>) -> tensor<2x4x16xbf16>
// CHECK-NEXT:    %[[C:.*]] = tensor.collapse_shape %[[K]] {{\[\[}}0, 1], [2]] : tensor<2x4x16xbf16> into tensor<8x16xbf16>
// CHECK-NEXT:    return %[[C]]
// TRITON-LABEL: func.func @reduce_then_cast_through_collapse
// TRITON-NEXT:    call @ember_fused_sum_sub_add_0(%arg0, %arg1) : (tensor<2x4x16xf32>, tensor<16xbf16>) -> tensor<2x4x16xbf16>
// TRITON-NEXT:    tensor.collapse_shape
// TRITON-NEXT:    return
func.func @reduce_then_cast_through_collapse(%x: tensor<2x4x16xf32>, %b: tensor<16xbf16>) -> tensor<8x16xbf16> {
  %z = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<2x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = linalg.generic {indexing_maps = [#id3, #red3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x4x16xf32>) outs(%f : tensor<2x4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %a = arith.addf %in, %acc : f32
    linalg.yield %a : f32
  } -> tensor<2x4xf32>
  %e3 = tensor.empty() : tensor<2x4x16xf32>
  %d = linalg.generic {indexing_maps = [#id3, #red3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %s : tensor<2x4x16xf32>, tensor<2x4xf32>) outs(%e3 : tensor<2x4x16xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %v = arith.subf %in, %m : f32
    linalg.yield %v : f32
  } -> tensor<2x4x16xf32>
  %c = tensor.collapse_shape %d [[0, 1], [2]] : tensor<2x4x16xf32> into tensor<8x16xf32>
  %eb = tensor.empty() : tensor<8x16xbf16>
  %t = linalg.generic {indexing_maps = [#id2, #col2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%c, %b : tensor<8x16xf32>, tensor<16xbf16>) outs(%eb : tensor<8x16xbf16>) {
  ^bb0(%in: f32, %bias: bf16, %out: bf16):
    %v = arith.truncf %in : f32 to bf16
    %w = arith.addf %v, %bias : bf16
    linalg.yield %w : bf16
  } -> tensor<8x16xbf16>
  return %t : tensor<8x16xbf16>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
#colr = affine_map<(d0, d1) -> (d1, d0)>

// Two row sums of two different products (a layer norm's backward: sum(dy*w) and
// sum(dy*w*xhat)) whose products a column-sum kernel computes (dgamma's): their loops are
// linked by no tensor, yet they share one loop shape, so they are one kernel of two results
// (kernel_schedule._share_reduction_loops; before, two launches). The row sums' kernel
// computes the products again from g, w and x instead of reading them back from the column
// sum's kernel (ember-fuse-recompute.mlir; before, two 8x32 f32 results stored and read).
// CHECK-LABEL: func.func @norm_backward_sums
// CHECK-NEXT:    %[[C:.*]] = call @ember_fused_mul_sum_0(%arg0, %arg2) : {{.*}} -> tensor<32xf32>
// CHECK-NEXT:    %[[R:.*]]:2 = call @ember_fused_mul_sum_1(%arg0, %arg2, %arg1) : {{.*}} -> (tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT:    return %[[C]], %[[R]]#0, %[[R]]#1
// TRITON-LABEL: func.func @norm_backward_sums
// TRITON-NEXT:    call @ember_fused_mul_sum_0
// TRITON-NEXT:    call @ember_fused_mul_sum_1({{.*}}) : (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) -> (tensor<8xf32>, tensor<8xf32>)
// TRITON-NEXT:    return
func.func @norm_backward_sums(%g: tensor<8x32xf32>, %x: tensor<8x32xf32>, %w: tensor<32xf32>) -> (tensor<32xf32>, tensor<8xf32>, tensor<8xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %gw = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g, %w : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<8x32xf32>
  %e32 = tensor.empty() : tensor<32xf32>
  %f32 = linalg.fill ins(%z : f32) outs(%e32 : tensor<32xf32>) -> tensor<32xf32>
  %dw = linalg.generic {indexing_maps = [#colr, #row], iterator_types = ["parallel", "reduction"]}
      ins(%gw : tensor<8x32xf32>) outs(%f32 : tensor<32xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  %gwx = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%gw, %x : tensor<8x32xf32>, tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<8x32xf32>
  %gwxx = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%gwx, %x : tensor<8x32xf32>, tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<8x32xf32>
  %e8 = tensor.empty() : tensor<8xf32>
  %f8 = linalg.fill ins(%z : f32) outs(%e8 : tensor<8xf32>) -> tensor<8xf32>
  %e8b = tensor.empty() : tensor<8xf32>
  %f8b = linalg.fill ins(%z : f32) outs(%e8b : tensor<8xf32>) -> tensor<8xf32>
  %s1 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%gwx : tensor<8x32xf32>) outs(%f8 : tensor<8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %s2 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%gwxx : tensor<8x32xf32>) outs(%f8b : tensor<8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %dw, %s1, %s2 : tensor<32xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// A split column sum (ember-split-reductions' partials over [4, 16, 16], read through an
// expand_shape of the rows) whose pointwise producer a matmul also reads (GELU's backward and
// its bias gradient): one kernel computes the product, stores it indexed by the split rows and
// sums the partials; the host reads it back through the inverse collapse_shape, a view. Before,
// the producer was a kernel of its own (a result not indexed by the partials' outer space).
// CHECK-LABEL: func.func @split_sum_producer_read_by_a_matmul
// CHECK:         %[[K:.*]]:2 = call @ember_fused_mul_sum_{{[0-9]+}}(%arg0, %arg1) : ({{.*}}) -> (tensor<4x16x16xf32>, tensor<4x16xf32>)
// CHECK-NEXT:    %[[V:.*]] = tensor.collapse_shape %[[K]]#0 {{\[\[}}0, 1], [2]] : tensor<4x16x16xf32> into tensor<64x16xf32>
// CHECK-NEXT:    %[[MM:.*]] = "ember.extern"(%[[V]], %arg2) {callee = "aten.mm"
// CHECK-NEXT:    %[[T:.*]] = call @ember_fused_sum_{{[0-9]+}}(%[[K]]#1)
// CHECK-NEXT:    return %[[MM]], %[[T]]
// TRITON-LABEL: func.func @split_sum_producer_read_by_a_matmul
// TRITON:         call @ember_fused_mul_sum_{{[0-9]+}}(%arg0, %arg1) : ({{.*}}) -> (tensor<4x16x16xf32>, tensor<4x16xf32>)
// TRITON-NEXT:    tensor.collapse_shape
#id = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#part = affine_map<(d0, d1, d2) -> (d0, d2)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @split_sum_producer_read_by_a_matmul(%a: tensor<64x16xf32>, %b: tensor<64x16xf32>, %w: tensor<16x8xf32>) -> (tensor<64x8xf32>, tensor<16xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x16xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<64x16xf32>, tensor<64x16xf32>) outs(%e : tensor<64x16xf32>) {
  ^bb0(%x: f32, %v: f32, %o: f32):
    %m = arith.mulf %x, %v : f32
    linalg.yield %m : f32
  } -> tensor<64x16xf32>
  %mm = "ember.extern"(%y, %w) {callee = "aten.mm", params = {}} : (tensor<64x16xf32>, tensor<16x8xf32>) -> tensor<64x8xf32>
  %ex = tensor.expand_shape %y [[0, 1], [2]] output_shape [4, 16, 16] : tensor<64x16xf32> into tensor<4x16x16xf32>
  %ep = tensor.empty() : tensor<4x16xf32>
  %fp = linalg.fill ins(%z : f32) outs(%ep : tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = linalg.generic {indexing_maps = [#id3, #part], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%ex : tensor<4x16x16xf32>) outs(%fp : tensor<4x16xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %et = tensor.empty() : tensor<16xf32>
  %ft = linalg.fill ins(%z : f32) outs(%et : tensor<16xf32>) -> tensor<16xf32>
  %t = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%p : tensor<4x16xf32>) outs(%ft : tensor<16xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %mm, %t : tensor<64x8xf32>, tensor<16xf32>
}

// -----

// The bf16 copies of two weights that two matmuls multiply with one activation (k and v, or a
// gated MLP's gate and up projections under autocast): one kernel makes both (horizontal
// fusion of the kernels beside one library-call operand). Before, a launch each.
// CHECK-LABEL: func.func @weight_copies_beside_one_activation
// CHECK:         %[[W:.*]]:2 = call @ember_fused_convert_{{[0-9]+}}(%arg1, %arg2) : (tensor<16x8xf32>, tensor<16x8xf32>) -> (tensor<16x8xbf16>, tensor<16x8xbf16>)
// CHECK-NEXT:    "ember.extern"(%arg0, %[[W]]#0)
// CHECK-NEXT:    "ember.extern"(%arg0, %[[W]]#1)
// SINGLE-LABEL: func.func @weight_copies_beside_one_activation
// SINGLE-COUNT-2: call @ember_fused_convert
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @weight_copies_beside_one_activation(%x: tensor<4x16xbf16>, %wk: tensor<16x8xf32>, %wv: tensor<16x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %e = tensor.empty() : tensor<16x8xbf16>
  %k = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wk : tensor<16x8xf32>) outs(%e : tensor<16x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x8xbf16>
  %mk = "ember.extern"(%x, %k) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  %v = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wv : tensor<16x8xf32>) outs(%e : tensor<16x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x8xbf16>
  %mv = "ember.extern"(%x, %v) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  return %mk, %mv : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// A kernel that reads only the function's arguments (autocast's bf16 copy of a weight) runs
// just before its first reader, not where its group was (a group's call stands at its last
// op, and in GPT-2's forward the LayerNorm groups ended after the next layer's weight casts:
// every later layer's casts ran first and stayed alive together, 159 of the bf16 forward's
// 168 MB arena; now 30 MB). Kernels and views between that read only arguments keep their
// order (the next case), and a kernel only returned is not moved.
// CHECK-LABEL: func.func @weight_cast_runs_before_its_reader
// CHECK-NEXT:    "ember.extern"(%arg0, %arg1) {callee = "aten.mm"
// CHECK-NEXT:    call @ember_fused_neg_{{[0-9]+}}
// CHECK-NEXT:    call @ember_fused_convert_{{[0-9]+}}(%arg2)
// CHECK-NEXT:    "ember.extern"
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @weight_cast_runs_before_its_reader(%x: tensor<4x16xbf16>, %k: tensor<16x16xbf16>, %w: tensor<16x8xf32>) -> tensor<4x8xbf16> {
  %e = tensor.empty() : tensor<16x8xbf16>
  %v = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<16x8xf32>) outs(%e : tensor<16x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x8xbf16>
  %a = "ember.extern"(%x, %k) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x16xbf16>) -> tensor<4x16xbf16>
  %eb = tensor.empty() : tensor<4x16xbf16>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<4x16xbf16>) outs(%eb : tensor<4x16xbf16>) {
  ^bb0(%i: bf16, %o: bf16):
    %n = arith.negf %i : bf16
    linalg.yield %n : bf16
  } -> tensor<4x16xbf16>
  %r = "ember.extern"(%b, %v) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  return %r : tensor<4x8xbf16>
}

// -----

// The same beside two operands that one kernel makes (a gated MLP's backward: the gradients
// of gate and up, one kernel, each multiplied with its weight's recomputed bf16 copy).
// CHECK-LABEL: func.func @weight_copies_beside_one_kernels_results
// CHECK:         %[[G:.*]]:2 = call @ember_fused_mul_{{[0-9]+}}(%arg0, %arg1)
// CHECK:         %[[W:.*]]:2 = call @ember_fused_convert_{{[0-9]+}}(%arg2, %arg3) : (tensor<16x8xf32>, tensor<16x8xf32>) -> (tensor<16x8xbf16>, tensor<16x8xbf16>)
// CHECK-NEXT:    "ember.extern"(%[[G]]#0, %[[W]]#0)
// CHECK-NEXT:    "ember.extern"(%[[G]]#1, %[[W]]#1)
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @weight_copies_beside_one_kernels_results(%x: tensor<4x16xbf16>, %y: tensor<4x16xbf16>, %wk: tensor<16x8xf32>, %wv: tensor<16x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %eg = tensor.empty() : tensor<4x16xbf16>
  %g:2 = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<4x16xbf16>, tensor<4x16xbf16>) outs(%eg, %eg : tensor<4x16xbf16>, tensor<4x16xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %o: bf16, %o2: bf16):
    %m = arith.mulf %a, %b : bf16
    %n = arith.mulf %m, %b : bf16
    linalg.yield %m, %n : bf16, bf16
  } -> (tensor<4x16xbf16>, tensor<4x16xbf16>)
  %e = tensor.empty() : tensor<16x8xbf16>
  %k = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wk : tensor<16x8xf32>) outs(%e : tensor<16x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x8xbf16>
  %mk = "ember.extern"(%g#0, %k) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  %v = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wv : tensor<16x8xf32>) outs(%e : tensor<16x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x8xbf16>
  %mv = "ember.extern"(%g#1, %v) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  return %mk, %mv : tensor<4x8xbf16>, tensor<4x8xbf16>
}
// -----

// Kernels whose results one library call reads through host reshapes (grouped-query
// attention reads k and v as collapse_shape views of the kernels that repeat them over the
// query heads): tried together, one kernel makes both. Before, a launch each.
// CHECK-LABEL: func.func @operands_of_one_call_through_views
// CHECK:         %[[KV:.*]]:2 = call @ember_fused_{{[a-z_]+}}_{{[0-9]+}}(%arg0, %arg1) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NOT:     call @ember_fused
// CHECK:         "ember.extern"
// SINGLE-LABEL: func.func @operands_of_one_call_through_views
// SINGLE-COUNT-2: call @ember_fused
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @operands_of_one_call_through_views(%x: tensor<2x4x8xf32>, %y: tensor<2x4x8xf32>) -> tensor<8x8xf32> {
  %e = tensor.empty() : tensor<2x4x8xf32>
  %k = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<2x4x8xf32>) outs(%e : tensor<2x4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.exp %a : f32
    linalg.yield %t : f32
  } -> tensor<2x4x8xf32>
  %kc = tensor.collapse_shape %k [[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
  %v = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y : tensor<2x4x8xf32>) outs(%e : tensor<2x4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = arith.negf %a : f32
    linalg.yield %t : f32
  } -> tensor<2x4x8xf32>
  %vc = tensor.collapse_shape %v [[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
  %m = "ember.extern"(%kc, %vc) {callee = "aten.mm", params = {}} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %m : tensor<8x8xf32>
}

// -----

// Weight copies beside operands that two kernels make, once those two are one kernel (a
// grouped-query attention backward: the k and v gradients, two kernels reading one value,
// horizontally fused; then the k and v weights' recomputed bf16 copies are tried together).
// CHECK-LABEL: func.func @weight_copies_beside_kernels_fused_later
// CHECK:         %[[G:.*]]:2 = call @ember_fused_{{[a-z_]+}}_{{[0-9]+}}(%arg0)
// CHECK:         %[[W:.*]]:2 = call @ember_fused_convert_{{[0-9]+}}(%arg1, %arg2) : (tensor<16x8xf32>, tensor<16x8xf32>) -> (tensor<16x8xbf16>, tensor<16x8xbf16>)
// CHECK-NEXT:    "ember.extern"(%[[G]]#{{[01]}}, %[[W]]#0)
// CHECK-NEXT:    "ember.extern"(%[[G]]#{{[01]}}, %[[W]]#1)
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @weight_copies_beside_kernels_fused_later(%s: tensor<4x16xbf16>, %wk: tensor<16x8xf32>, %wv: tensor<16x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %eg = tensor.empty() : tensor<4x16xbf16>
  %g0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x16xbf16>) outs(%eg : tensor<4x16xbf16>) {
  ^bb0(%a: bf16, %o: bf16):
    %m = arith.mulf %a, %a : bf16
    linalg.yield %m : bf16
  } -> tensor<4x16xbf16>
  %g1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x16xbf16>) outs(%eg : tensor<4x16xbf16>) {
  ^bb0(%a: bf16, %o: bf16):
    %m = arith.negf %a : bf16
    linalg.yield %m : bf16
  } -> tensor<4x16xbf16>
  %e = tensor.empty() : tensor<16x8xbf16>
  %k = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wk : tensor<16x8xf32>) outs(%e : tensor<16x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x8xbf16>
  %mk = "ember.extern"(%g0, %k) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  %v = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wv : tensor<16x8xf32>) outs(%e : tensor<16x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<16x8xbf16>
  %mv = "ember.extern"(%g1, %v) {callee = "aten.mm", params = {}} : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
  return %mk, %mv : tensor<4x8xbf16>, tensor<4x8xbf16>
}
