// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-lower-to-triton)' | FileCheck %s

// Two logsumexps over the rows of one kernel (fuzz seed 61 index 982): the second one's amax
// is reached while the first one's sum is being built and, reading no reduction, joins the
// loop of that sum; the column values its body shares with the second sum were first bound
// for that sum, after the shared loop. They are built again before the loop it joins:
// defined before their use (the kernel read `t25` before its definition: UnboundLocalError,
// the graph ran eagerly).
// CHECK-LABEL: func.func private @ember_fused_cmp_ori_where_0
// CHECK-SAME: acc{{[0-9]+}} = tl.full([XBLOCK], 0.0, tl.float32)
// CHECK-SAME: [[X:x[0-9]+]] = tl.load(in1 + (p1 % 7), mask=xmask, other=0)
// CHECK-SAME: [[T:t[0-9]+]] = [[X]].to(tl.float32)
// CHECK-SAME: for rindex in tl.static_range(2):
// CHECK-SAME: acc{{[0-9]+}} = acc{{[0-9]+}} + t{{[0-9]+}}
// CHECK-SAME: = (x{{[0-9]+}} >= [[T]])
// CHECK-SAME: _ember_nanmax
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (0, d1, d2, d3)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
#map3 = affine_map<(d0, d1, d2, d3) -> ()>
#map4 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @main(%arg0: tensor<2x7x1x1xf32>, %arg1: tensor<1x7x1x1xi8>, %arg2: tensor<1x7x1x1xi64>) -> tensor<1x7x1x1xf32> attributes {ember.arena_bytes = 0 : i64, ember.unplanned_bytes = 0 : i64} {
    %0 = call @ember_fused_cmp_ori_where_0(%arg0, %arg1, %arg2) {ember.offsets = array<i64: -1>} : (tensor<2x7x1x1xf32>, tensor<1x7x1x1xi8>, tensor<1x7x1x1xi64>) -> tensor<1x7x1x1xf32>
    return %0 : tensor<1x7x1x1xf32>
  }
  func.func private @ember_fused_cmp_ori_where_0(%arg0: tensor<2x7x1x1xf32>, %arg1: tensor<1x7x1x1xi8>, %arg2: tensor<1x7x1x1xi64>) -> tensor<1x7x1x1xf32> attributes {ember.kernel = "reduction", ember.ops = ["cmp", "ori", "where", "amax", "absf", "cmp", "where", "sub", "exp", "sum", "log", "add", "extsi", "absi", "convert", "cmp", "ori", "where"]} {
    %false = arith.constant false
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant dense<0.000000e+00> : tensor<f32>
    %cst_1 = arith.constant 0x7FF0000000000000 : f64
    %c0_i64 = arith.constant 0 : i64
    %cst_2 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<2x7x1x1xi1>
    %1 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0, %arg1 : tensor<2x7x1x1xf32>, tensor<1x7x1x1xi8>) outs(%0 : tensor<2x7x1x1xi1>) {
    ^bb0(%in: f32, %in_4: i8, %out: i1):
      %32 = arith.sitofp %in_4 : i8 to f32
      %33 = arith.cmpf oge, %in, %32 : f32
      linalg.yield %33 : i1
    } -> tensor<2x7x1x1xi1>
    %2 = tensor.empty() : tensor<1x7x1x1xi1>
    %3 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg1, %arg1 : tensor<1x7x1x1xi8>, tensor<1x7x1x1xi8>) outs(%2 : tensor<1x7x1x1xi1>) {
    ^bb0(%in: i8, %in_4: i8, %out: i1):
      %32 = arith.cmpi ne, %in, %in_4 : i8
      linalg.yield %32 : i1
    } -> tensor<1x7x1x1xi1>
    %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1, %3 : tensor<2x7x1x1xi1>, tensor<1x7x1x1xi1>) outs(%0 : tensor<2x7x1x1xi1>) {
    ^bb0(%in: i1, %in_4: i1, %out: i1):
      %32 = arith.ori %in, %in_4 : i1
      linalg.yield %32 : i1
    } -> tensor<2x7x1x1xi1>
    %5 = tensor.empty() : tensor<2x7x1x1xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%4, %arg0, %arg1 : tensor<2x7x1x1xi1>, tensor<2x7x1x1xf32>, tensor<1x7x1x1xi8>) outs(%5 : tensor<2x7x1x1xf32>) {
    ^bb0(%in: i1, %in_4: f32, %in_5: i8, %out: f32):
      %32 = arith.sitofp %in_5 : i8 to f32
      %33 = arith.select %in, %in_4, %32 : f32
      linalg.yield %33 : f32
    } -> tensor<2x7x1x1xf32>
    %7 = tensor.empty() : tensor<7x1x1xf32>
    %8 = linalg.fill ins(%cst_2 : f32) outs(%7 : tensor<7x1x1xf32>) -> tensor<7x1x1xf32>
    %9 = tensor.empty() : tensor<7x1x1xi64>
    %10 = linalg.fill ins(%c0_i64 : i64) outs(%9 : tensor<7x1x1xi64>) -> tensor<7x1x1xi64>
    %11:2 = linalg.generic {indexing_maps = [#map, #map2, #map2], iterator_types = ["reduction", "parallel", "parallel", "parallel"]} ins(%6 : tensor<2x7x1x1xf32>) outs(%8, %10 : tensor<7x1x1xf32>, tensor<7x1x1xi64>) {
    ^bb0(%in: f32, %out: f32, %out_4: i64):
      %32 = linalg.index 0 : index
      %33 = arith.index_cast %32 : index to i64
      %34 = arith.maximumf %in, %out : f32
      %35 = arith.cmpf ogt, %in, %out : f32
      %36 = arith.select %35, %33, %out_4 : i64
      linalg.yield %34, %36 : f32, i64
    } -> (tensor<7x1x1xf32>, tensor<7x1x1xi64>)
    %expanded = tensor.expand_shape %11#0 [[0, 1], [2], [3]] output_shape [1, 7, 1, 1] : tensor<7x1x1xf32> into tensor<1x7x1x1xf32>
    %12 = tensor.empty() : tensor<1x7x1x1xf32>
    %13 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x7x1x1xf32>) outs(%12 : tensor<1x7x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %32 = math.absf %in : f32
      linalg.yield %32 : f32
    } -> tensor<1x7x1x1xf32>
    %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%13 : tensor<1x7x1x1xf32>) outs(%2 : tensor<1x7x1x1xi1>) {
    ^bb0(%in: f32, %out: i1):
      %32 = arith.extf %in : f32 to f64
      %33 = arith.cmpf oeq, %32, %cst_1 : f64
      linalg.yield %33 : i1
    } -> tensor<1x7x1x1xi1>
    %15 = linalg.generic {indexing_maps = [#map, #map3, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14, %cst_0, %expanded : tensor<1x7x1x1xi1>, tensor<f32>, tensor<1x7x1x1xf32>) outs(%12 : tensor<1x7x1x1xf32>) {
    ^bb0(%in: i1, %in_4: f32, %in_5: f32, %out: f32):
      %32 = arith.select %in, %in_4, %in_5 : f32
      linalg.yield %32 : f32
    } -> tensor<1x7x1x1xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6, %15 : tensor<2x7x1x1xf32>, tensor<1x7x1x1xf32>) outs(%5 : tensor<2x7x1x1xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %32 = arith.subf %in, %in_4 : f32
      linalg.yield %32 : f32
    } -> tensor<2x7x1x1xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%16 : tensor<2x7x1x1xf32>) outs(%5 : tensor<2x7x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %32 = math.exp %in : f32
      linalg.yield %32 : f32
    } -> tensor<2x7x1x1xf32>
    %18 = linalg.fill ins(%cst : f32) outs(%7 : tensor<7x1x1xf32>) -> tensor<7x1x1xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["reduction", "parallel", "parallel", "parallel"]} ins(%17 : tensor<2x7x1x1xf32>) outs(%18 : tensor<7x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %32 = arith.addf %in, %out : f32
      linalg.yield %32 : f32
    } -> tensor<7x1x1xf32>
    %20 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel", "parallel"]} ins(%19 : tensor<7x1x1xf32>) outs(%7 : tensor<7x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %32 = math.log %in : f32
      linalg.yield %32 : f32
    } -> tensor<7x1x1xf32>
    %expanded_3 = tensor.expand_shape %20 [[0, 1], [2], [3]] output_shape [1, 7, 1, 1] : tensor<7x1x1xf32> into tensor<1x7x1x1xf32>
    %21 = tensor.empty() : tensor<1x7x1x1xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_3, %15 : tensor<1x7x1x1xf32>, tensor<1x7x1x1xf32>) outs(%21 : tensor<1x7x1x1xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %32 = arith.addf %in, %in_4 : f32
      linalg.yield %32 : f32
    } -> tensor<1x7x1x1xf32>
    %collapsed = tensor.collapse_shape %22 [[0, 1], [2], [3]] : tensor<1x7x1x1xf32> into tensor<7x1x1xf32>
    %23 = tensor.empty() : tensor<1x7x1x1xi64>
    %24 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg1, %arg2 : tensor<1x7x1x1xi8>, tensor<1x7x1x1xi64>) outs(%23 : tensor<1x7x1x1xi64>) {
    ^bb0(%in: i8, %in_4: i64, %out: i64):
      %32 = arith.extsi %in : i8 to i64
      %33 = arith.subi %32, %in_4 : i64
      linalg.yield %33 : i64
    } -> tensor<1x7x1x1xi64>
    %25 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24 : tensor<1x7x1x1xi64>) outs(%23 : tensor<1x7x1x1xi64>) {
    ^bb0(%in: i64, %out: i64):
      %32 = math.absi %in : i64
      linalg.yield %32 : i64
    } -> tensor<1x7x1x1xi64>
    %26 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25 : tensor<1x7x1x1xi64>) outs(%2 : tensor<1x7x1x1xi1>) {
    ^bb0(%in: i64, %out: i1):
      linalg.yield %false : i1
    } -> tensor<1x7x1x1xi1>
    %27 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%26 : tensor<1x7x1x1xi1>) outs(%12 : tensor<1x7x1x1xf32>) {
    ^bb0(%in: i1, %out: f32):
      %32 = arith.uitofp %in : i1 to f32
      linalg.yield %32 : f32
    } -> tensor<1x7x1x1xf32>
    %28 = linalg.generic {indexing_maps = [#map2, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%collapsed, %27 : tensor<7x1x1xf32>, tensor<1x7x1x1xf32>) outs(%2 : tensor<1x7x1x1xi1>) {
    ^bb0(%in: f32, %in_4: f32, %out: i1):
      %32 = arith.cmpf oge, %in, %in_4 : f32
      linalg.yield %32 : i1
    } -> tensor<1x7x1x1xi1>
    %29 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%26, %26 : tensor<1x7x1x1xi1>, tensor<1x7x1x1xi1>) outs(%2 : tensor<1x7x1x1xi1>) {
    ^bb0(%in: i1, %in_4: i1, %out: i1):
      %32 = arith.cmpi ne, %in, %in_4 : i1
      linalg.yield %32 : i1
    } -> tensor<1x7x1x1xi1>
    %30 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%28, %29 : tensor<1x7x1x1xi1>, tensor<1x7x1x1xi1>) outs(%2 : tensor<1x7x1x1xi1>) {
    ^bb0(%in: i1, %in_4: i1, %out: i1):
      %32 = arith.ori %in, %in_4 : i1
      linalg.yield %32 : i1
    } -> tensor<1x7x1x1xi1>
    %31 = linalg.generic {indexing_maps = [#map, #map2, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%30, %collapsed, %27 : tensor<1x7x1x1xi1>, tensor<7x1x1xf32>, tensor<1x7x1x1xf32>) outs(%12 : tensor<1x7x1x1xf32>) {
    ^bb0(%in: i1, %in_4: f32, %in_5: f32, %out: f32):
      %32 = arith.select %in, %in_4, %in_5 : f32
      linalg.yield %32 : f32
    } -> tensor<1x7x1x1xf32>
    return %31 : tensor<1x7x1x1xf32>
  }
}
