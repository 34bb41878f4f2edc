// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{target=triton})' | FileCheck %s
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{target=triton recompute-max-ops=16})' | FileCheck %s --check-prefix=STORED

// A squeeze-excite block's training backward, channels-last, bf16 autocast, 32x1152x7x7
// (efficientnet_b0's last stage: depthwise conv -> BatchNorm -> SiLU -> y * sigmoid(conv(silu(
// conv(mean(y))))), as ember-split-reductions leaves it. The gradient reaching the BatchNorm,
// (g * gate + pooled gradient / 49) * silu'(BatchNorm output recomputed), is 17 to 20 ops from
// the values in memory. Recomputed (recompute-max-ops 24) in the BatchNorm backward's split
// partial sums and in its input gradient, it is no longer written in f32 (7.2 MB) and read
// back twice: one launch and 21.6 MB less per block.

// CHECK-LABEL: func.func @main
// CHECK-NOT:     tensor<32x7x7x1152xf32>
// CHECK:         return

// With recompute-max-ops 16 the gradient is too long to recompute; its kernel stores it in
// bf16 (the f32 value is that bf16 value widened: its readers widen it again), not in f32.
// STORED-LABEL: func.func @main
// STORED-NOT:     -> tensor<32x7x7x1152xf32>
// STORED:         call @ember_fused_{{[a-z_]+}}_{{[0-9]+}}({{.*}}) -> tensor<32x7x7x1152xbf16>
// STORED:         call @ember_fused_{{[a-z_]+}}_{{[0-9]+}}({{.*}}tensor<32x7x7x1152xbf16>{{.*}}) -> (tensor<16x1152xf32>, tensor<16x1152xf32>)
// STORED-NOT:     -> tensor<32x7x7x1152xf32>
// STORED:         return

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (0, d3, 0, 0)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d3, 0, 0)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
#map4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, 0)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d0, d3, 0, 0)>
#map6 = affine_map<(d0, d1, d2, d3) -> ()>
#map7 = affine_map<(d0) -> (d0)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map9 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#map10 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4)>
#map11 = affine_map<(d0, d1) -> (d0, d1)>
#map12 = affine_map<(d0, d1) -> (d1)>
module {
  func.func private @ember_lib_0(tensor<32x1x1x1152xbf16>, tensor<32x1x1x8xbf16>, tensor<1152x8x1x1xbf16>) -> (tensor<32x1x1x8xbf16>, tensor<1152x8x1x1xbf16>, tensor<1152xbf16>) attributes {ember.channels_last = [array<i64: 0, 1>, array<i64: 0>], ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [1152], dilation = [1, 1], groups = 1 : i64, output_mask = [true, true, true], output_padding = [0, 0], padding = [0, 0], stride = [1, 1], transposed = false}, ember.results = array<i64: 0, 1, 2>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func private @ember_lib_1(tensor<32x1x1x8xbf16>, tensor<32x1x1x1152xbf16>, tensor<8x1152x1x1xbf16>) -> (tensor<32x1x1x1152xbf16>, tensor<8x1152x1x1xbf16>, tensor<8xbf16>) attributes {ember.channels_last = [array<i64: 0, 1>, array<i64: 0>], ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [8], dilation = [1, 1], groups = 1 : i64, output_mask = [true, true, true], output_padding = [0, 0], padding = [0, 0], stride = [1, 1], transposed = false}, ember.results = array<i64: 0, 1, 2>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func private @ember_lib_2(tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>) -> (tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>) attributes {ember.channels_last = [array<i64: 0, 1>, array<i64: 0>], ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [0], dilation = [1, 1], groups = 1152 : i64, output_mask = [true, true, false], output_padding = [0, 0], padding = [1, 1], stride = [1, 1], transposed = false}, ember.results = array<i64: 0, 1>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func private @ember_lib_3(tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1152x1x1xbf16>) -> tensor<1152x1152x1x1xbf16> attributes {ember.channels_last = [array<i64: 0, 1>, array<i64>], ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [0], dilation = [1, 1], groups = 1 : i64, output_mask = [false, true, false], output_padding = [0, 0], padding = [0, 0], stride = [1, 1], transposed = false}, ember.results = array<i64: 1>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func @main(%arg0: tensor<1152x1152x1x1xf32>, %arg1: tensor<32x1152x7x7xf32>, %arg2: tensor<1152xf32>, %arg3: tensor<1152xf32>, %arg4: tensor<1152x1x3x3xf32>, %arg5: tensor<1152xf32>, %arg6: tensor<1152xf32>, %arg7: tensor<8x1152x1x1xf32>, %arg8: tensor<1152x8x1x1xf32>, %arg9: tensor<32x7x7x1152xbf16>, %arg10: tensor<1x1152x1x1xf32>, %arg11: tensor<1x1152x1x1xf32>, %arg12: tensor<1152xbf16>, %arg13: tensor<32x7x7x1152xbf16>, %arg14: tensor<32x7x7x1152xbf16>, %arg15: tensor<1x1152x1x1xf32>, %arg16: tensor<1x1152x1x1xf32>, %arg17: tensor<1152xbf16>, %arg18: tensor<32x1152x1x1xbf16>, %arg19: tensor<32x8x1x1xbf16>, %arg20: tensor<32x8x1x1xbf16>, %arg21: tensor<32x1152x1x1xbf16>, %arg22: tensor<32x1152x7x7xbf16>) -> (tensor<1152x1152x1x1xf32>, tensor<1152xf32>, tensor<1152xf32>, tensor<1152x1x3x3xf32>, tensor<1152xf32>, tensor<1152xf32>, tensor<8x1152x1x1xf32>, tensor<8xf32>, tensor<1152x8x1x1xf32>, tensor<1152xf32>) attributes {ember.donated_args = array<i64: 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21>} {
    %cst = arith.constant 1.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e+00 : bf16
    %cst_1 = arith.constant 0.000000e+00 : bf16
    %cst_2 = arith.constant 0.000000e+00 : f32
    %cst_3 = arith.constant 6.3775510204081628E-4 : f64
    %cst_4 = arith.constant 4.900000e+01 : bf16
    %cst_5 = arith.constant dense<1> : tensor<i64>
    %0 = tensor.empty() : tensor<32x1152x7x7xbf16>
    %1 = tensor.empty() : tensor<32x1152x7x7xf32>
    %2 = tensor.empty() : tensor<32x7x7x1152xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg14, %arg15 : tensor<32x7x7x1152xbf16>, tensor<1x1152x1x1xf32>) outs(%2 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %in_35: f32, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      %191 = arith.subf %190, %in_35 : f32
      linalg.yield %191 : f32
    } -> tensor<32x7x7x1152xf32>
    %4 = tensor.empty() : tensor<32x7x7x1152xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3, %arg16 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%4 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded = tensor.expand_shape %arg5 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %6 = tensor.empty() : tensor<32x7x7x1152xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5, %expanded : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%6 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_6 = tensor.expand_shape %arg6 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %8 = tensor.empty() : tensor<32x7x7x1152xf32>
    %9 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7, %expanded_6 : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%8 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.addf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %10 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %11 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9 : tensor<32x7x7x1152xf32>) outs(%10 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %12 = tensor.empty() : tensor<32x7x7x1152xf32>
    %13 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%11 : tensor<32x7x7x1152xbf16>) outs(%12 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %14 = tensor.empty() : tensor<32x7x7x1152xf32>
    %15 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%13 : tensor<32x7x7x1152xf32>) outs(%14 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.negf %in : f32
      %191 = math.exp %190 : f32
      %192 = arith.addf %191, %cst : f32
      %193 = arith.divf %cst, %192 : f32
      linalg.yield %193 : f32
    } -> tensor<32x7x7x1152xf32>
    %16 = tensor.empty() : tensor<32x7x7x1152xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%13, %15 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%16 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %18 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %19 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%17 : tensor<32x7x7x1152xf32>) outs(%18 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %20 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %21 = linalg.generic {indexing_maps = [#map3, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg22, %19 : tensor<32x1152x7x7xbf16>, tensor<32x7x7x1152xbf16>) outs(%20 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: bf16, %in_35: bf16, %out: bf16):
      %190 = arith.mulf %in, %in_35 : bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %22 = tensor.empty() : tensor<32x1152x1x1xbf16>
    %23 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg21 : tensor<32x1152x1x1xbf16>) outs(%22 : tensor<32x1152x1x1xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %190 = arith.negf %in : bf16
      %191 = math.exp %190 : bf16
      %192 = arith.addf %191, %cst_0 : bf16
      %193 = arith.divf %cst_0, %192 : bf16
      linalg.yield %193 : bf16
    } -> tensor<32x1152x1x1xbf16>
    %24 = linalg.generic {indexing_maps = [#map, #map4, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg22, %23 : tensor<32x1152x7x7xbf16>, tensor<32x1152x1x1xbf16>) outs(%0 : tensor<32x1152x7x7xbf16>) {
    ^bb0(%in: bf16, %in_35: bf16, %out: bf16):
      %190 = arith.mulf %in, %in_35 : bf16
      linalg.yield %190 : bf16
    } -> tensor<32x1152x7x7xbf16>
    %25 = linalg.fill ins(%cst_1 : bf16) outs(%22 : tensor<32x1152x1x1xbf16>) -> tensor<32x1152x1x1xbf16>
    %26 = linalg.generic {indexing_maps = [#map, #map5], iterator_types = ["parallel", "reduction", "reduction", "parallel"]} ins(%21 : tensor<32x7x7x1152xbf16>) outs(%25 : tensor<32x1152x1x1xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %190 = arith.addf %in, %out : bf16
      linalg.yield %190 : bf16
    } -> tensor<32x1152x1x1xbf16>
    %27 = tensor.empty() : tensor<32x1152x1x1xf32>
    %28 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%26 : tensor<32x1152x1x1xbf16>) outs(%27 : tensor<32x1152x1x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x1152x1x1xf32>
    %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%23 : tensor<32x1152x1x1xbf16>) outs(%27 : tensor<32x1152x1x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x1152x1x1xf32>
    %30 = linalg.generic {indexing_maps = [#map6, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cst_5, %29 : tensor<i64>, tensor<32x1152x1x1xf32>) outs(%27 : tensor<32x1152x1x1xf32>) {
    ^bb0(%in: i64, %in_35: f32, %out: f32):
      %190 = arith.sitofp %in : i64 to f32
      %191 = arith.subf %190, %in_35 : f32
      linalg.yield %191 : f32
    } -> tensor<32x1152x1x1xf32>
    %31 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%29, %30 : tensor<32x1152x1x1xf32>, tensor<32x1152x1x1xf32>) outs(%27 : tensor<32x1152x1x1xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x1152x1x1xf32>
    %32 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%28, %31 : tensor<32x1152x1x1xf32>, tensor<32x1152x1x1xf32>) outs(%27 : tensor<32x1152x1x1xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x1152x1x1xf32>
    %33 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%32 : tensor<32x1152x1x1xf32>) outs(%22 : tensor<32x1152x1x1xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x1152x1x1xbf16>
    %34 = tensor.empty() : tensor<1152x8x1x1xbf16>
    %35 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg8 : tensor<1152x8x1x1xf32>) outs(%34 : tensor<1152x8x1x1xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<1152x8x1x1xbf16>
    %36 = tensor.empty() : tensor<1152x8x1x1xf32>
    %collapsed = tensor.collapse_shape %33 [[0], [1, 2, 3]] : tensor<32x1152x1x1xbf16> into tensor<32x1152xbf16>
    %expanded_7 = tensor.expand_shape %collapsed [[0], [1, 2, 3]] output_shape [32, 1, 1, 1152] : tensor<32x1152xbf16> into tensor<32x1x1x1152xbf16>
    %collapsed_8 = tensor.collapse_shape %arg20 [[0], [1, 2, 3]] : tensor<32x8x1x1xbf16> into tensor<32x8xbf16>
    %expanded_9 = tensor.expand_shape %collapsed_8 [[0], [1, 2, 3]] output_shape [32, 1, 1, 8] : tensor<32x8xbf16> into tensor<32x1x1x8xbf16>
    %37:3 = call @ember_lib_0(%expanded_7, %expanded_9, %35) : (tensor<32x1x1x1152xbf16>, tensor<32x1x1x8xbf16>, tensor<1152x8x1x1xbf16>) -> (tensor<32x1x1x8xbf16>, tensor<1152x8x1x1xbf16>, tensor<1152xbf16>)
    %38 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%37#1 : tensor<1152x8x1x1xbf16>) outs(%36 : tensor<1152x8x1x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152x8x1x1xf32>
    %39 = tensor.empty() : tensor<1152xf32>
    %40 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%37#2 : tensor<1152xbf16>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %41 = tensor.empty() : tensor<32x8x1x1xf32>
    %42 = tensor.empty() : tensor<32x1x1x8xf32>
    %43 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%37#0 : tensor<32x1x1x8xbf16>) outs(%42 : tensor<32x1x1x8xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x1x1x8xf32>
    %44 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg19 : tensor<32x8x1x1xbf16>) outs(%41 : tensor<32x8x1x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x8x1x1xf32>
    %45 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%44 : tensor<32x8x1x1xf32>) outs(%41 : tensor<32x8x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.negf %in : f32
      %191 = math.exp %190 : f32
      %192 = arith.addf %191, %cst : f32
      %193 = arith.divf %cst, %192 : f32
      linalg.yield %193 : f32
    } -> tensor<32x8x1x1xf32>
    %46 = tensor.empty() : tensor<32x1x1x8xf32>
    %47 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%43, %45 : tensor<32x1x1x8xf32>, tensor<32x8x1x1xf32>) outs(%46 : tensor<32x1x1x8xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x1x1x8xf32>
    %48 = linalg.generic {indexing_maps = [#map6, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cst_5, %45 : tensor<i64>, tensor<32x8x1x1xf32>) outs(%41 : tensor<32x8x1x1xf32>) {
    ^bb0(%in: i64, %in_35: f32, %out: f32):
      %190 = arith.sitofp %in : i64 to f32
      %191 = arith.subf %190, %in_35 : f32
      linalg.yield %191 : f32
    } -> tensor<32x8x1x1xf32>
    %49 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%44, %48 : tensor<32x8x1x1xf32>, tensor<32x8x1x1xf32>) outs(%41 : tensor<32x8x1x1xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x8x1x1xf32>
    %50 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%49 : tensor<32x8x1x1xf32>) outs(%41 : tensor<32x8x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %cst : f32
      linalg.yield %190 : f32
    } -> tensor<32x8x1x1xf32>
    %51 = tensor.empty() : tensor<32x1x1x8xf32>
    %52 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%47, %50 : tensor<32x1x1x8xf32>, tensor<32x8x1x1xf32>) outs(%51 : tensor<32x1x1x8xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x1x1x8xf32>
    %53 = tensor.empty() : tensor<32x1x1x8xbf16>
    %54 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%52 : tensor<32x1x1x8xf32>) outs(%53 : tensor<32x1x1x8xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x1x1x8xbf16>
    %55 = tensor.empty() : tensor<8x1152x1x1xbf16>
    %56 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg7 : tensor<8x1152x1x1xf32>) outs(%55 : tensor<8x1152x1x1xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<8x1152x1x1xbf16>
    %57 = tensor.empty() : tensor<8x1152x1x1xf32>
    %collapsed_10 = tensor.collapse_shape %arg18 [[0], [1, 2, 3]] : tensor<32x1152x1x1xbf16> into tensor<32x1152xbf16>
    %expanded_11 = tensor.expand_shape %collapsed_10 [[0], [1, 2, 3]] output_shape [32, 1, 1, 1152] : tensor<32x1152xbf16> into tensor<32x1x1x1152xbf16>
    %58:3 = call @ember_lib_1(%54, %expanded_11, %56) : (tensor<32x1x1x8xbf16>, tensor<32x1x1x1152xbf16>, tensor<8x1152x1x1xbf16>) -> (tensor<32x1x1x1152xbf16>, tensor<8x1152x1x1xbf16>, tensor<8xbf16>)
    %collapsed_12 = tensor.collapse_shape %58#0 [[0], [1, 2, 3]] : tensor<32x1x1x1152xbf16> into tensor<32x1152xbf16>
    %expanded_13 = tensor.expand_shape %collapsed_12 [[0], [1, 2, 3]] output_shape [32, 1152, 1, 1] : tensor<32x1152xbf16> into tensor<32x1152x1x1xbf16>
    %59 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%58#1 : tensor<8x1152x1x1xbf16>) outs(%57 : tensor<8x1152x1x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<8x1152x1x1xf32>
    %60 = tensor.empty() : tensor<8xf32>
    %61 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%58#2 : tensor<8xbf16>) outs(%60 : tensor<8xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<8xf32>
    %collapsed_14 = tensor.collapse_shape %expanded_13 [[0], [1, 2, 3]] : tensor<32x1152x1x1xbf16> into tensor<32x1152xbf16>
    %62 = linalg.generic {indexing_maps = [#map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%collapsed_14 : tensor<32x1152xbf16>) outs(%0 : tensor<32x1152x7x7xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      linalg.yield %in : bf16
    } -> tensor<32x1152x7x7xbf16>
    %63 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%62 : tensor<32x1152x7x7xbf16>) outs(%0 : tensor<32x1152x7x7xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %190 = arith.divf %in, %cst_4 : bf16
      linalg.yield %190 : bf16
    } -> tensor<32x1152x7x7xbf16>
    %64 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24, %63 : tensor<32x1152x7x7xbf16>, tensor<32x1152x7x7xbf16>) outs(%0 : tensor<32x1152x7x7xbf16>) {
    ^bb0(%in: bf16, %in_35: bf16, %out: bf16):
      %190 = arith.addf %in, %in_35 : bf16
      linalg.yield %190 : bf16
    } -> tensor<32x1152x7x7xbf16>
    %65 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%64 : tensor<32x1152x7x7xbf16>) outs(%1 : tensor<32x1152x7x7xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x1152x7x7xf32>
    %66 = tensor.empty() : tensor<32x7x7x1152xf32>
    %67 = linalg.generic {indexing_maps = [#map3, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%65, %15 : tensor<32x1152x7x7xf32>, tensor<32x7x7x1152xf32>) outs(%66 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %68 = tensor.empty() : tensor<32x7x7x1152xf32>
    %69 = linalg.generic {indexing_maps = [#map6, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cst_5, %15 : tensor<i64>, tensor<32x7x7x1152xf32>) outs(%68 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: i64, %in_35: f32, %out: f32):
      %190 = arith.sitofp %in : i64 to f32
      %191 = arith.subf %190, %in_35 : f32
      linalg.yield %191 : f32
    } -> tensor<32x7x7x1152xf32>
    %70 = tensor.empty() : tensor<32x7x7x1152xf32>
    %71 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%13, %69 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%70 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %72 = tensor.empty() : tensor<32x7x7x1152xf32>
    %73 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%71 : tensor<32x7x7x1152xf32>) outs(%72 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %cst : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %74 = tensor.empty() : tensor<32x7x7x1152xf32>
    %75 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%67, %73 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%74 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %76 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %77 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%75 : tensor<32x7x7x1152xf32>) outs(%76 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %78 = tensor.empty() : tensor<32x7x7x1152xf32>
    %79 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%77 : tensor<32x7x7x1152xbf16>) outs(%78 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %80 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%arg17 : tensor<1152xbf16>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %collapsed_15 = tensor.collapse_shape %arg16 [[0, 1, 2, 3]] : tensor<1x1152x1x1xf32> into tensor<1152xf32>
    %81 = tensor.empty() : tensor<1152xbf16>
    %82 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%collapsed_15 : tensor<1152xf32>) outs(%81 : tensor<1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<1152xbf16>
    %83 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%82 : tensor<1152xbf16>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %expanded_16 = tensor.expand_shape %80 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %84 = linalg.fill ins(%cst_2 : f32) outs(%39 : tensor<1152xf32>) -> tensor<1152xf32>
    %expanded_17 = tensor.expand_shape %79 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %85 = tensor.empty() : tensor<16x1152xf32>
    %cst_18 = arith.constant 0.000000e+00 : f32
    %86 = linalg.fill ins(%cst_18 : f32) outs(%85 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %87 = linalg.generic {indexing_maps = [#map9, #map10], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_17 : tensor<16x2x7x7x1152xf32>) outs(%86 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<16x1152xf32>
    %88 = linalg.generic {indexing_maps = [#map11, #map12], iterator_types = ["reduction", "parallel"]} ins(%87 : tensor<16x1152xf32>) outs(%84 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %89 = tensor.empty() : tensor<32x7x7x1152xf32>
    %90 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg14 : tensor<32x7x7x1152xbf16>) outs(%89 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %91 = tensor.empty() : tensor<32x7x7x1152xf32>
    %92 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%90, %expanded_16 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%91 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.subf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %93 = tensor.empty() : tensor<32x7x7x1152xf32>
    %94 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%79, %92 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%93 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_19 = tensor.expand_shape %94 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %95 = tensor.empty() : tensor<16x1152xf32>
    %cst_20 = arith.constant 0.000000e+00 : f32
    %96 = linalg.fill ins(%cst_20 : f32) outs(%95 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %97 = linalg.generic {indexing_maps = [#map9, #map10], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_19 : tensor<16x2x7x7x1152xf32>) outs(%96 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<16x1152xf32>
    %98 = linalg.generic {indexing_maps = [#map11, #map12], iterator_types = ["reduction", "parallel"]} ins(%97 : tensor<16x1152xf32>) outs(%84 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %99 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%88 : tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.truncf %cst_3 : f64 to f32
      %191 = arith.mulf %in, %190 : f32
      linalg.yield %191 : f32
    } -> tensor<1152xf32>
    %expanded_21 = tensor.expand_shape %99 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %100 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%98 : tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.truncf %cst_3 : f64 to f32
      %191 = arith.mulf %in, %190 : f32
      linalg.yield %191 : f32
    } -> tensor<1152xf32>
    %101 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%83, %83 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %102 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%100, %101 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %expanded_22 = tensor.expand_shape %102 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %103 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%83, %arg5 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %expanded_23 = tensor.expand_shape %103 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %104 = tensor.empty() : tensor<32x7x7x1152xf32>
    %105 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%92, %expanded_22 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%104 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %106 = tensor.empty() : tensor<32x7x7x1152xf32>
    %107 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%79, %105 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%106 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.subf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %108 = tensor.empty() : tensor<32x7x7x1152xf32>
    %109 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%107, %expanded_21 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%108 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.subf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %110 = tensor.empty() : tensor<32x7x7x1152xf32>
    %111 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%109, %expanded_23 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%110 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %112 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%98, %83 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %113 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %114 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%111 : tensor<32x7x7x1152xf32>) outs(%113 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %115 = tensor.empty() : tensor<1152x1x3x3xbf16>
    %116 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg4 : tensor<1152x1x3x3xf32>) outs(%115 : tensor<1152x1x3x3xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<1152x1x3x3xbf16>
    %117 = tensor.empty() : tensor<1152x1x3x3xf32>
    %118:2 = call @ember_lib_2(%114, %arg13, %116) : (tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>) -> (tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>)
    %119 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%118#1 : tensor<1152x1x3x3xbf16>) outs(%117 : tensor<1152x1x3x3xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152x1x3x3xf32>
    %120 = tensor.empty() : tensor<32x7x7x1152xf32>
    %121 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%118#0 : tensor<32x7x7x1152xbf16>) outs(%120 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %122 = tensor.empty() : tensor<32x7x7x1152xf32>
    %123 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg9, %arg10 : tensor<32x7x7x1152xbf16>, tensor<1x1152x1x1xf32>) outs(%122 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %in_35: f32, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      %191 = arith.subf %190, %in_35 : f32
      linalg.yield %191 : f32
    } -> tensor<32x7x7x1152xf32>
    %124 = tensor.empty() : tensor<32x7x7x1152xf32>
    %125 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%123, %arg11 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%124 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_24 = tensor.expand_shape %arg2 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %126 = tensor.empty() : tensor<32x7x7x1152xf32>
    %127 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%125, %expanded_24 : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%126 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_25 = tensor.expand_shape %arg3 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %128 = tensor.empty() : tensor<32x7x7x1152xf32>
    %129 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%127, %expanded_25 : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%128 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.addf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %130 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %131 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%129 : tensor<32x7x7x1152xf32>) outs(%130 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %132 = tensor.empty() : tensor<32x7x7x1152xf32>
    %133 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%131 : tensor<32x7x7x1152xbf16>) outs(%132 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %134 = tensor.empty() : tensor<32x7x7x1152xf32>
    %135 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%133 : tensor<32x7x7x1152xf32>) outs(%134 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.negf %in : f32
      %191 = math.exp %190 : f32
      %192 = arith.addf %191, %cst : f32
      %193 = arith.divf %cst, %192 : f32
      linalg.yield %193 : f32
    } -> tensor<32x7x7x1152xf32>
    %136 = tensor.empty() : tensor<32x7x7x1152xf32>
    %137 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%121, %135 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%136 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %138 = tensor.empty() : tensor<32x7x7x1152xf32>
    %139 = linalg.generic {indexing_maps = [#map6, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cst_5, %135 : tensor<i64>, tensor<32x7x7x1152xf32>) outs(%138 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: i64, %in_35: f32, %out: f32):
      %190 = arith.sitofp %in : i64 to f32
      %191 = arith.subf %190, %in_35 : f32
      linalg.yield %191 : f32
    } -> tensor<32x7x7x1152xf32>
    %140 = tensor.empty() : tensor<32x7x7x1152xf32>
    %141 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%133, %139 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%140 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %142 = tensor.empty() : tensor<32x7x7x1152xf32>
    %143 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%141 : tensor<32x7x7x1152xf32>) outs(%142 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %cst : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %144 = tensor.empty() : tensor<32x7x7x1152xf32>
    %145 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%137, %143 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%144 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %146 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %147 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%145 : tensor<32x7x7x1152xf32>) outs(%146 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %148 = tensor.empty() : tensor<32x7x7x1152xf32>
    %149 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%147 : tensor<32x7x7x1152xbf16>) outs(%148 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %150 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%arg12 : tensor<1152xbf16>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %collapsed_26 = tensor.collapse_shape %arg11 [[0, 1, 2, 3]] : tensor<1x1152x1x1xf32> into tensor<1152xf32>
    %151 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%collapsed_26 : tensor<1152xf32>) outs(%81 : tensor<1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<1152xbf16>
    %152 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%151 : tensor<1152xbf16>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %expanded_27 = tensor.expand_shape %150 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %expanded_28 = tensor.expand_shape %149 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %153 = tensor.empty() : tensor<16x1152xf32>
    %cst_29 = arith.constant 0.000000e+00 : f32
    %154 = linalg.fill ins(%cst_29 : f32) outs(%153 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %155 = linalg.generic {indexing_maps = [#map9, #map10], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_28 : tensor<16x2x7x7x1152xf32>) outs(%154 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<16x1152xf32>
    %156 = linalg.generic {indexing_maps = [#map11, #map12], iterator_types = ["reduction", "parallel"]} ins(%155 : tensor<16x1152xf32>) outs(%84 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %157 = tensor.empty() : tensor<32x7x7x1152xf32>
    %158 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg9 : tensor<32x7x7x1152xbf16>) outs(%157 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %159 = tensor.empty() : tensor<32x7x7x1152xf32>
    %160 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%158, %expanded_27 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%159 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.subf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %161 = tensor.empty() : tensor<32x7x7x1152xf32>
    %162 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%149, %160 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%161 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_30 = tensor.expand_shape %162 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %163 = tensor.empty() : tensor<16x1152xf32>
    %cst_31 = arith.constant 0.000000e+00 : f32
    %164 = linalg.fill ins(%cst_31 : f32) outs(%163 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %165 = linalg.generic {indexing_maps = [#map9, #map10], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_30 : tensor<16x2x7x7x1152xf32>) outs(%164 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<16x1152xf32>
    %166 = linalg.generic {indexing_maps = [#map11, #map12], iterator_types = ["reduction", "parallel"]} ins(%165 : tensor<16x1152xf32>) outs(%84 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.addf %in, %out : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %167 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%156 : tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.truncf %cst_3 : f64 to f32
      %191 = arith.mulf %in, %190 : f32
      linalg.yield %191 : f32
    } -> tensor<1152xf32>
    %expanded_32 = tensor.expand_shape %167 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %168 = linalg.generic {indexing_maps = [#map7, #map7], iterator_types = ["parallel"]} ins(%166 : tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %190 = arith.truncf %cst_3 : f64 to f32
      %191 = arith.mulf %in, %190 : f32
      linalg.yield %191 : f32
    } -> tensor<1152xf32>
    %169 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%152, %152 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %170 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%168, %169 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %expanded_33 = tensor.expand_shape %170 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %171 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%152, %arg2 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %expanded_34 = tensor.expand_shape %171 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %172 = tensor.empty() : tensor<32x7x7x1152xf32>
    %173 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%160, %expanded_33 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%172 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %174 = tensor.empty() : tensor<32x7x7x1152xf32>
    %175 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%149, %173 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%174 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.subf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %176 = tensor.empty() : tensor<32x7x7x1152xf32>
    %177 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%175, %expanded_32 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%176 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.subf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %178 = tensor.empty() : tensor<32x7x7x1152xf32>
    %179 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%177, %expanded_34 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%178 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<32x7x7x1152xf32>
    %180 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel"]} ins(%166, %152 : tensor<1152xf32>, tensor<1152xf32>) outs(%39 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_35: f32, %out: f32):
      %190 = arith.mulf %in, %in_35 : f32
      linalg.yield %190 : f32
    } -> tensor<1152xf32>
    %181 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %182 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%179 : tensor<32x7x7x1152xf32>) outs(%181 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %183 = tensor.empty() : tensor<1152x1152x1x1xbf16>
    %184 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0 : tensor<1152x1152x1x1xf32>) outs(%183 : tensor<1152x1152x1x1xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<1152x1152x1x1xbf16>
    %185 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg1 : tensor<32x1152x7x7xf32>) outs(%0 : tensor<32x1152x7x7xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %190 = arith.truncf %in : f32 to bf16
      linalg.yield %190 : bf16
    } -> tensor<32x1152x7x7xbf16>
    %186 = tensor.empty() : tensor<1152x1152x1x1xf32>
    %187 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %transposed = linalg.transpose ins(%185 : tensor<32x1152x7x7xbf16>) outs(%187 : tensor<32x7x7x1152xbf16>) permutation = [0, 2, 3, 1] 
    %188 = call @ember_lib_3(%182, %transposed, %184) : (tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1152x1x1xbf16>) -> tensor<1152x1152x1x1xbf16>
    %189 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%188 : tensor<1152x1152x1x1xbf16>) outs(%186 : tensor<1152x1152x1x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %190 = arith.extf %in : bf16 to f32
      linalg.yield %190 : f32
    } -> tensor<1152x1152x1x1xf32>
    return %189, %180, %156, %119, %112, %88, %59, %61, %38, %40 : tensor<1152x1152x1x1xf32>, tensor<1152xf32>, tensor<1152xf32>, tensor<1152x1x3x3xf32>, tensor<1152xf32>, tensor<1152xf32>, tensor<8x1152x1x1xf32>, tensor<8xf32>, tensor<1152x8x1x1xf32>, tensor<1152xf32>
  }
}
