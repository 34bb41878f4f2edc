// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{target=triton})' | FileCheck %s

// A channels-last conv net's training backward (conv 1x1 -> BatchNorm -> SiLU -> depthwise
// conv 3x3 -> BatchNorm -> SiLU, bf16 autocast, 32x1152x7x7: efficientnet_b0's last stage),
// as ember-split-reductions leaves it. Each BatchNorm backward sums dy (the SiLU backward of
// the incoming gradient, widened) and dy * (x - mean) over N*H*W in a split partial kernel,
// and its input gradient computes dy again elementwise. The partial kernel computes dy
// itself; recomputing the product there takes only the subtraction and the product (dy is
// the partial kernel's own value, found by value numbering): before, the product's cone
// counted dy's whole chain (19 ops, over recompute-max-ops), so a pointwise kernel wrote the
// product in f32 (7.2 MB) for the partial kernel to read back: one launch and 14.4 MB more
// per BatchNorm. No kernel result of the full size in f32 is left.

// CHECK-LABEL: func.func @main
// CHECK-NOT:     tensor<32x7x7x1152xf32>
// CHECK:         call @ember_fused_{{[a-z_]+}}_{{[0-9]+}}({{.*}}) -> (tensor<16x1152xf32>, tensor<16x1152xf32>)
// CHECK-NOT:     tensor<32x7x7x1152xf32>
// CHECK:         call @ember_fused_{{[a-z_]+}}_{{[0-9]+}}({{.*}}) -> (tensor<16x1152xf32>, tensor<16x1152xf32>)
// CHECK-NOT:     tensor<32x7x7x1152xf32>
// CHECK:         return

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (0, d3, 0, 0)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d3, 0, 0)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
#map4 = affine_map<(d0, d1, d2, d3) -> ()>
#map5 = affine_map<(d0) -> (d0)>
#map6 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#map7 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4)>
#map8 = affine_map<(d0, d1) -> (d0, d1)>
#map9 = affine_map<(d0, d1) -> (d1)>
module {
  func.func private @ember_lib_0(tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>) -> (tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>) attributes {ember.channels_last = [array<i64: 0, 1>, array<i64: 0>], ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [0], dilation = [1, 1], groups = 1152 : i64, output_mask = [true, true, false], output_padding = [0, 0], padding = [1, 1], stride = [1, 1], transposed = false}, ember.results = array<i64: 0, 1>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func private @ember_lib_1(tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1152x1x1xbf16>) -> tensor<1152x1152x1x1xbf16> attributes {ember.channels_last = [array<i64: 0, 1>, array<i64>], ember.library = "aten.convolution_backward.default", ember.params = {bias_sizes = [0], dilation = [1, 1], groups = 1 : i64, output_mask = [false, true, false], output_padding = [0, 0], padding = [0, 0], stride = [1, 1], transposed = false}, ember.results = array<i64: 1>, ember.tensor_args = ["grad_output", "input", "weight"]}
  func.func @main(%arg0: tensor<1152x1152x1x1xf32>, %arg1: tensor<32x1152x7x7xf32>, %arg2: tensor<1152xf32>, %arg3: tensor<1152xf32>, %arg4: tensor<1152x1x3x3xf32>, %arg5: tensor<1152xf32>, %arg6: tensor<1152xf32>, %arg7: tensor<32x7x7x1152xbf16>, %arg8: tensor<1x1152x1x1xf32>, %arg9: tensor<1x1152x1x1xf32>, %arg10: tensor<1152xbf16>, %arg11: tensor<32x7x7x1152xbf16>, %arg12: tensor<32x7x7x1152xbf16>, %arg13: tensor<1x1152x1x1xf32>, %arg14: tensor<1x1152x1x1xf32>, %arg15: tensor<1152xbf16>, %arg16: tensor<32x1152x7x7xbf16>) -> (tensor<1152x1152x1x1xf32>, tensor<1152xf32>, tensor<1152xf32>, tensor<1152x1x3x3xf32>, tensor<1152xf32>, tensor<1152xf32>) attributes {ember.donated_args = array<i64: 7, 8, 9, 10, 11, 12, 13, 14, 15>} {
    %cst = arith.constant 1.000000e+00 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %cst_1 = arith.constant 6.3775510204081628E-4 : f64
    %cst_2 = arith.constant dense<1> : tensor<i64>
    %0 = tensor.empty() : tensor<32x1152x7x7xbf16>
    %1 = tensor.empty() : tensor<32x1152x7x7xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg16 : tensor<32x1152x7x7xbf16>) outs(%1 : tensor<32x1152x7x7xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x1152x7x7xf32>
    %3 = tensor.empty() : tensor<32x7x7x1152xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg12, %arg13 : tensor<32x7x7x1152xbf16>, tensor<1x1152x1x1xf32>) outs(%3 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %in_23: f32, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      %143 = arith.subf %142, %in_23 : f32
      linalg.yield %143 : f32
    } -> tensor<32x7x7x1152xf32>
    %5 = tensor.empty() : tensor<32x7x7x1152xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%4, %arg14 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%5 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded = tensor.expand_shape %arg5 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %7 = tensor.empty() : tensor<32x7x7x1152xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6, %expanded : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%7 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_3 = tensor.expand_shape %arg6 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %9 = tensor.empty() : tensor<32x7x7x1152xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%8, %expanded_3 : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%9 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.addf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %11 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %12 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%10 : tensor<32x7x7x1152xf32>) outs(%11 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %13 = tensor.empty() : tensor<32x7x7x1152xf32>
    %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%12 : tensor<32x7x7x1152xbf16>) outs(%13 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %15 = tensor.empty() : tensor<32x7x7x1152xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14 : tensor<32x7x7x1152xf32>) outs(%15 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.negf %in : f32
      %143 = math.exp %142 : f32
      %144 = arith.addf %143, %cst : f32
      %145 = arith.divf %cst, %144 : f32
      linalg.yield %145 : f32
    } -> tensor<32x7x7x1152xf32>
    %17 = tensor.empty() : tensor<32x7x7x1152xf32>
    %18 = linalg.generic {indexing_maps = [#map3, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2, %16 : tensor<32x1152x7x7xf32>, tensor<32x7x7x1152xf32>) outs(%17 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %19 = tensor.empty() : tensor<32x7x7x1152xf32>
    %20 = linalg.generic {indexing_maps = [#map4, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cst_2, %16 : tensor<i64>, tensor<32x7x7x1152xf32>) outs(%19 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: i64, %in_23: f32, %out: f32):
      %142 = arith.sitofp %in : i64 to f32
      %143 = arith.subf %142, %in_23 : f32
      linalg.yield %143 : f32
    } -> tensor<32x7x7x1152xf32>
    %21 = tensor.empty() : tensor<32x7x7x1152xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14, %20 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%21 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %23 = tensor.empty() : tensor<32x7x7x1152xf32>
    %24 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%22 : tensor<32x7x7x1152xf32>) outs(%23 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %cst : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %25 = tensor.empty() : tensor<32x7x7x1152xf32>
    %26 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%18, %24 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%25 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %27 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %28 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%26 : tensor<32x7x7x1152xf32>) outs(%27 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %29 = tensor.empty() : tensor<32x7x7x1152xf32>
    %30 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%28 : tensor<32x7x7x1152xbf16>) outs(%29 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %31 = tensor.empty() : tensor<1152xf32>
    %32 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%arg15 : tensor<1152xbf16>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %collapsed = tensor.collapse_shape %arg14 [[0, 1, 2, 3]] : tensor<1x1152x1x1xf32> into tensor<1152xf32>
    %33 = tensor.empty() : tensor<1152xbf16>
    %34 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%collapsed : tensor<1152xf32>) outs(%33 : tensor<1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<1152xbf16>
    %35 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%34 : tensor<1152xbf16>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %expanded_4 = tensor.expand_shape %32 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %36 = linalg.fill ins(%cst_0 : f32) outs(%31 : tensor<1152xf32>) -> tensor<1152xf32>
    %expanded_5 = tensor.expand_shape %30 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %37 = tensor.empty() : tensor<16x1152xf32>
    %cst_6 = arith.constant 0.000000e+00 : f32
    %38 = linalg.fill ins(%cst_6 : f32) outs(%37 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %39 = linalg.generic {indexing_maps = [#map6, #map7], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_5 : tensor<16x2x7x7x1152xf32>) outs(%38 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<16x1152xf32>
    %40 = linalg.generic {indexing_maps = [#map8, #map9], iterator_types = ["reduction", "parallel"]} ins(%39 : tensor<16x1152xf32>) outs(%36 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %41 = tensor.empty() : tensor<32x7x7x1152xf32>
    %42 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg12 : tensor<32x7x7x1152xbf16>) outs(%41 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %43 = tensor.empty() : tensor<32x7x7x1152xf32>
    %44 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%42, %expanded_4 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%43 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.subf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %45 = tensor.empty() : tensor<32x7x7x1152xf32>
    %46 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%30, %44 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%45 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_7 = tensor.expand_shape %46 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %47 = tensor.empty() : tensor<16x1152xf32>
    %cst_8 = arith.constant 0.000000e+00 : f32
    %48 = linalg.fill ins(%cst_8 : f32) outs(%47 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %49 = linalg.generic {indexing_maps = [#map6, #map7], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_7 : tensor<16x2x7x7x1152xf32>) outs(%48 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<16x1152xf32>
    %50 = linalg.generic {indexing_maps = [#map8, #map9], iterator_types = ["reduction", "parallel"]} ins(%49 : tensor<16x1152xf32>) outs(%36 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %51 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%40 : tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.truncf %cst_1 : f64 to f32
      %143 = arith.mulf %in, %142 : f32
      linalg.yield %143 : f32
    } -> tensor<1152xf32>
    %expanded_9 = tensor.expand_shape %51 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %52 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%50 : tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.truncf %cst_1 : f64 to f32
      %143 = arith.mulf %in, %142 : f32
      linalg.yield %143 : f32
    } -> tensor<1152xf32>
    %53 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%35, %35 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %54 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%52, %53 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %expanded_10 = tensor.expand_shape %54 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %55 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%35, %arg5 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %expanded_11 = tensor.expand_shape %55 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %56 = tensor.empty() : tensor<32x7x7x1152xf32>
    %57 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%44, %expanded_10 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%56 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %58 = tensor.empty() : tensor<32x7x7x1152xf32>
    %59 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%30, %57 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%58 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.subf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %60 = tensor.empty() : tensor<32x7x7x1152xf32>
    %61 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%59, %expanded_9 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%60 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.subf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %62 = tensor.empty() : tensor<32x7x7x1152xf32>
    %63 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%61, %expanded_11 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%62 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %64 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%50, %35 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %65 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %66 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%63 : tensor<32x7x7x1152xf32>) outs(%65 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %67 = tensor.empty() : tensor<1152x1x3x3xbf16>
    %68 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg4 : tensor<1152x1x3x3xf32>) outs(%67 : tensor<1152x1x3x3xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<1152x1x3x3xbf16>
    %69 = tensor.empty() : tensor<1152x1x3x3xf32>
    %70:2 = call @ember_lib_0(%66, %arg11, %68) : (tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>) -> (tensor<32x7x7x1152xbf16>, tensor<1152x1x3x3xbf16>)
    %71 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%70#1 : tensor<1152x1x3x3xbf16>) outs(%69 : tensor<1152x1x3x3xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<1152x1x3x3xf32>
    %72 = tensor.empty() : tensor<32x7x7x1152xf32>
    %73 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%70#0 : tensor<32x7x7x1152xbf16>) outs(%72 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %74 = tensor.empty() : tensor<32x7x7x1152xf32>
    %75 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg7, %arg8 : tensor<32x7x7x1152xbf16>, tensor<1x1152x1x1xf32>) outs(%74 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %in_23: f32, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      %143 = arith.subf %142, %in_23 : f32
      linalg.yield %143 : f32
    } -> tensor<32x7x7x1152xf32>
    %76 = tensor.empty() : tensor<32x7x7x1152xf32>
    %77 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%75, %arg9 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%76 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_12 = tensor.expand_shape %arg2 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %78 = tensor.empty() : tensor<32x7x7x1152xf32>
    %79 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%77, %expanded_12 : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%78 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_13 = tensor.expand_shape %arg3 [[0, 1, 2]] output_shape [1152, 1, 1] : tensor<1152xf32> into tensor<1152x1x1xf32>
    %80 = tensor.empty() : tensor<32x7x7x1152xf32>
    %81 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%79, %expanded_13 : tensor<32x7x7x1152xf32>, tensor<1152x1x1xf32>) outs(%80 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.addf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %82 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %83 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%81 : tensor<32x7x7x1152xf32>) outs(%82 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %84 = tensor.empty() : tensor<32x7x7x1152xf32>
    %85 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%83 : tensor<32x7x7x1152xbf16>) outs(%84 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %86 = tensor.empty() : tensor<32x7x7x1152xf32>
    %87 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%85 : tensor<32x7x7x1152xf32>) outs(%86 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.negf %in : f32
      %143 = math.exp %142 : f32
      %144 = arith.addf %143, %cst : f32
      %145 = arith.divf %cst, %144 : f32
      linalg.yield %145 : f32
    } -> tensor<32x7x7x1152xf32>
    %88 = tensor.empty() : tensor<32x7x7x1152xf32>
    %89 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%73, %87 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%88 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %90 = tensor.empty() : tensor<32x7x7x1152xf32>
    %91 = linalg.generic {indexing_maps = [#map4, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cst_2, %87 : tensor<i64>, tensor<32x7x7x1152xf32>) outs(%90 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: i64, %in_23: f32, %out: f32):
      %142 = arith.sitofp %in : i64 to f32
      %143 = arith.subf %142, %in_23 : f32
      linalg.yield %143 : f32
    } -> tensor<32x7x7x1152xf32>
    %92 = tensor.empty() : tensor<32x7x7x1152xf32>
    %93 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%85, %91 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%92 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %94 = tensor.empty() : tensor<32x7x7x1152xf32>
    %95 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%93 : tensor<32x7x7x1152xf32>) outs(%94 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %cst : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %96 = tensor.empty() : tensor<32x7x7x1152xf32>
    %97 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%89, %95 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%96 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %98 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %99 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%97 : tensor<32x7x7x1152xf32>) outs(%98 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %100 = tensor.empty() : tensor<32x7x7x1152xf32>
    %101 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%99 : tensor<32x7x7x1152xbf16>) outs(%100 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %102 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%arg10 : tensor<1152xbf16>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %collapsed_14 = tensor.collapse_shape %arg9 [[0, 1, 2, 3]] : tensor<1x1152x1x1xf32> into tensor<1152xf32>
    %103 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%collapsed_14 : tensor<1152xf32>) outs(%33 : tensor<1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<1152xbf16>
    %104 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%103 : tensor<1152xbf16>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %expanded_15 = tensor.expand_shape %102 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %expanded_16 = tensor.expand_shape %101 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %105 = tensor.empty() : tensor<16x1152xf32>
    %cst_17 = arith.constant 0.000000e+00 : f32
    %106 = linalg.fill ins(%cst_17 : f32) outs(%105 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %107 = linalg.generic {indexing_maps = [#map6, #map7], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_16 : tensor<16x2x7x7x1152xf32>) outs(%106 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<16x1152xf32>
    %108 = linalg.generic {indexing_maps = [#map8, #map9], iterator_types = ["reduction", "parallel"]} ins(%107 : tensor<16x1152xf32>) outs(%36 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %109 = tensor.empty() : tensor<32x7x7x1152xf32>
    %110 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg7 : tensor<32x7x7x1152xbf16>) outs(%109 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %111 = tensor.empty() : tensor<32x7x7x1152xf32>
    %112 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%110, %expanded_15 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%111 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.subf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %113 = tensor.empty() : tensor<32x7x7x1152xf32>
    %114 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%101, %112 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%113 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %expanded_18 = tensor.expand_shape %114 [[0, 1], [2], [3], [4]] output_shape [16, 2, 7, 7, 1152] : tensor<32x7x7x1152xf32> into tensor<16x2x7x7x1152xf32>
    %115 = tensor.empty() : tensor<16x1152xf32>
    %cst_19 = arith.constant 0.000000e+00 : f32
    %116 = linalg.fill ins(%cst_19 : f32) outs(%115 : tensor<16x1152xf32>) -> tensor<16x1152xf32>
    %117 = linalg.generic {indexing_maps = [#map6, #map7], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%expanded_18 : tensor<16x2x7x7x1152xf32>) outs(%116 : tensor<16x1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<16x1152xf32>
    %118 = linalg.generic {indexing_maps = [#map8, #map9], iterator_types = ["reduction", "parallel"]} ins(%117 : tensor<16x1152xf32>) outs(%36 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.addf %in, %out : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %119 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%108 : tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.truncf %cst_1 : f64 to f32
      %143 = arith.mulf %in, %142 : f32
      linalg.yield %143 : f32
    } -> tensor<1152xf32>
    %expanded_20 = tensor.expand_shape %119 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %120 = linalg.generic {indexing_maps = [#map5, #map5], iterator_types = ["parallel"]} ins(%118 : tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %out: f32):
      %142 = arith.truncf %cst_1 : f64 to f32
      %143 = arith.mulf %in, %142 : f32
      linalg.yield %143 : f32
    } -> tensor<1152xf32>
    %121 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%104, %104 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %122 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%120, %121 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %expanded_21 = tensor.expand_shape %122 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %123 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%104, %arg2 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %expanded_22 = tensor.expand_shape %123 [[0, 1, 2, 3]] output_shape [1, 1152, 1, 1] : tensor<1152xf32> into tensor<1x1152x1x1xf32>
    %124 = tensor.empty() : tensor<32x7x7x1152xf32>
    %125 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%112, %expanded_21 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%124 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %126 = tensor.empty() : tensor<32x7x7x1152xf32>
    %127 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%101, %125 : tensor<32x7x7x1152xf32>, tensor<32x7x7x1152xf32>) outs(%126 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.subf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %128 = tensor.empty() : tensor<32x7x7x1152xf32>
    %129 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%127, %expanded_20 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%128 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.subf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %130 = tensor.empty() : tensor<32x7x7x1152xf32>
    %131 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%129, %expanded_22 : tensor<32x7x7x1152xf32>, tensor<1x1152x1x1xf32>) outs(%130 : tensor<32x7x7x1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<32x7x7x1152xf32>
    %132 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel"]} ins(%118, %104 : tensor<1152xf32>, tensor<1152xf32>) outs(%31 : tensor<1152xf32>) {
    ^bb0(%in: f32, %in_23: f32, %out: f32):
      %142 = arith.mulf %in, %in_23 : f32
      linalg.yield %142 : f32
    } -> tensor<1152xf32>
    %133 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %134 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%131 : tensor<32x7x7x1152xf32>) outs(%133 : tensor<32x7x7x1152xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<32x7x7x1152xbf16>
    %135 = tensor.empty() : tensor<1152x1152x1x1xbf16>
    %136 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0 : tensor<1152x1152x1x1xf32>) outs(%135 : tensor<1152x1152x1x1xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<1152x1152x1x1xbf16>
    %137 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg1 : tensor<32x1152x7x7xf32>) outs(%0 : tensor<32x1152x7x7xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %142 = arith.truncf %in : f32 to bf16
      linalg.yield %142 : bf16
    } -> tensor<32x1152x7x7xbf16>
    %138 = tensor.empty() : tensor<1152x1152x1x1xf32>
    %139 = tensor.empty() : tensor<32x7x7x1152xbf16>
    %transposed = linalg.transpose ins(%137 : tensor<32x1152x7x7xbf16>) outs(%139 : tensor<32x7x7x1152xbf16>) permutation = [0, 2, 3, 1] 
    %140 = call @ember_lib_1(%134, %transposed, %136) : (tensor<32x7x7x1152xbf16>, tensor<32x7x7x1152xbf16>, tensor<1152x1152x1x1xbf16>) -> tensor<1152x1152x1x1xbf16>
    %141 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%140 : tensor<1152x1152x1x1xbf16>) outs(%138 : tensor<1152x1152x1x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %142 = arith.extf %in : bf16 to f32
      linalg.yield %142 : f32
    } -> tensor<1152x1152x1x1xf32>
    return %141, %132, %108, %71, %64, %40 : tensor<1152x1152x1x1xf32>, tensor<1152xf32>, tensor<1152xf32>, tensor<1152x1x3x3xf32>, tensor<1152xf32>, tensor<1152xf32>
  }
}
