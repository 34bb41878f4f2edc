// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-lower-to-cpp)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-lower-to-cpp{omp-min-elements=16 vectorize=false})' | FileCheck %s --check-prefix=NOVEC
// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-lower-to-cpp)' --emit-source | FileCheck %s --check-prefix=SRC

// Kernels are torch-mlir imports of the op (the @main turned into a kernel func). The C++
// source is one escaped string attribute: \0A is a newline, \22 a quote.

// CHECK: module attributes {ember.prelude = "// ember C++ kernels{{.*}}ember_max{{.*}}declare reduction(nanmax{{.*}}static inline float ember_exp(float x){{.*}}static inline float ember_erf(float x){{.*}}", ember.target = "cpu"}

// SRC: // ember.target = cpu

// Broadcast read: the bias is indexed by the inner loop only. (The SRC prefix: the same C++ as plain
// lines, from --emit-source.)
// SRC-LABEL: // ----- kernel @bcast_add
// SRC-NEXT:  extern "C" void bcast_add(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0, const int64_t* __restrict__ sizes) {
// SRC-NEXT:    for (int64_t [[I:i0_[0-9]+]] = 0; [[I]] < 64; ++[[I]]) {
// SRC-NEXT:      #pragma omp simd
// SRC-NEXT:      for (int64_t [[J:i1_[0-9]+]] = 0; [[J]] < 48; ++[[J]]) {
// SRC:             in1[[[J]]];
// SRC:             out0[(([[I]] * 48) + [[J]])] =
// SRC-LABEL: // ----- kernel @flat_exp
// SRC-NEXT:  extern "C" void flat_exp(
// SRC-NEXT:    #pragma omp simd
// SRC-NEXT:    for (int64_t [[F:f[0-9]+]] = 0; [[F]] < 3072; ++[[F]]) {
// SRC:           ember_exp(
// CHECK-LABEL: func.func private @bcast_add
// CHECK-SAME: ember.source = "extern \22C\22 void bcast_add(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0, const int64_t* __restrict__ sizes) {
// CHECK-SAME: for (int64_t [[I:i0_[0-9]+]] = 0; [[I]] < 64; ++[[I]]) {\0A    #pragma omp simd\0A    for (int64_t [[J:i1_[0-9]+]] = 0; [[J]] < 48; ++[[J]])
// CHECK-SAME: in0[(([[I]] * 48) + [[J]])]
// CHECK-SAME: in1[[[J]]]
// CHECK-SAME: out0[(([[I]] * 48) + [[J]])] =
// CHECK-SAME: ember.symbol = "bcast_add"
// NOVEC-LABEL: func.func private @bcast_add
// NOVEC-SAME: #pragma omp parallel for\0A  for
// NOVEC-NOT: simd
// NOVEC-SAME: ember.symbol = "bcast_add"

// All operands contiguous: one flattened loop over 64*48 (parallel simd above the OpenMP
// threshold), indexed by the flat variable directly; exp is the prelude's vectorizable one.
// CHECK-LABEL: func.func private @flat_exp
// CHECK-SAME: #pragma omp simd\0A  for (int64_t [[F:f[0-9]+]] = 0; [[F]] < 3072; ++[[F]]) {
// CHECK-SAME: in0[[[F]]]
// CHECK-SAME: in1[[[F]]]
// CHECK-SAME: ember_exp(
// CHECK-SAME: out0[[[F]]] =
// CHECK-SAME: ember.symbol = "flat_exp"
// NOVEC-LABEL: func.func private @flat_exp
// NOVEC-SAME: #pragma omp parallel for\0A  for (int64_t [[F:f[0-9]+]] = 0; [[F]] < 3072;
// NOVEC-SAME: ember.symbol = "flat_exp"

// Transposed read: the loop order follows the output, the load of x.t() is strided.
// CHECK-LABEL: func.func private @transpose_read
// CHECK-SAME: for (int64_t [[I:i1_[0-9]+]] = 0; [[I]] < 64; ++[[I]]) {\0A    #pragma omp simd\0A    for (int64_t [[J:i0_[0-9]+]] = 0; [[J]] < 48; ++[[J]])
// CHECK-SAME: in0[(([[J]] * 64) + [[I]])]
// CHECK-SAME: in1[(([[I]] * 48) + [[J]])]
// CHECK-SAME: out0[(([[I]] * 48) + [[J]])]

// Softmax: rows in parallel; max and sum as simd reductions; exp inlined. The max propagates
// NaN through a flag reduced with | (a compare-select under `max` vectorizes; the user-defined
// nanmax reduction does not). The sum loop keeps each exp in a row the output loop reads,
// which multiplies it by the sum's reciprocal, taken once a row (eager's CPU softmax); the
// sum accumulates in two vectors of lanes, added as a tree (cpp_lane_sums).
// CHECK-LABEL: func.func private @softmax
// CHECK-SAME: #pragma omp parallel for\0A  for (int64_t [[R:i0_[0-9]+]] = 0; [[R]] < 4096; ++[[R]])
// CHECK-SAME: float [[MAX:acc[0-9]+]] = (-INFINITY);\0A    int [[NAN:nan[0-9]+]] = 0;\0A    #pragma omp simd reduction(max:[[MAX]]) reduction(|:[[NAN]])
// CHECK-SAME: [[MAX]] = [[X:x[0-9]+]] > [[MAX]] ? [[X]] : [[MAX]];\0A      [[NAN]] |= ([[X]] != [[X]]);
// CHECK-SAME: if ([[NAN]]) [[MAX]] = NAN;
// CHECK-SAME: float [[SUM:acc[0-9]+]] = 0.0f;\0A    alignas(64) float [[ROW:row_t[0-9]+]][{{[0-9]+}}];\0A    float [[SUM]]_l[2 * EMBER_VEC_F32] = {};
// CHECK-SAME: - [[MAX]]);
// CHECK-SAME: [[E:t[0-9]+]] = (float)ember_exp(
// CHECK-SAME: [[ROW]][{{i1_[0-9]+}}] = [[E]];
// CHECK-SAME: [[SUM]]_l[{{i1_[0-9]+_o}}] = t{{[0-9]+}};
// CHECK-SAME: [[SUM]] = [[SUM]] + [[SUM]]_l[0];
// CHECK-SAME: const float [[INV:t[0-9]+]] = (1.0f / [[SUM]]);\0A    #pragma omp simd\0A    for
// CHECK-SAME: [[V:t[0-9]+]] = [[ROW]][{{i1_[0-9]+}}];
// CHECK-SAME: = ([[V]] * [[INV]]);
// CHECK-SAME: ember.symbol = "softmax"

// Layer norm: mean and variance reductions; rsqrt hoisted out of the inner loop (per row).
// Each row sum (96 elements: whole chunks of two vectors at every width) accumulates in two
// vectors of lanes, added up as a tree after the loop (cpp_lane_sums), not in a
// `simd reduction(+:acc)` loop.
// CHECK-LABEL: func.func private @layer_norm
// CHECK-NOT:  reduction(+:
// CHECK-SAME: float [[A:acc[0-9]+]]_l[2 * EMBER_VEC_F32] = {};
// CHECK-SAME: #pragma omp simd\0A      for (int64_t [[O:i1_[0-9]+_o]] = 0; [[O]] < (2 * EMBER_VEC_F32); ++[[O]])
// CHECK-SAME: [[A]]_l[[[O]]] = t{{[0-9]+}};
// CHECK-SAME: [[A]]_l[[[O]]] = [[A]]_l[[[O]]] + [[A]]_l[[[O]] + [[W:i1_[0-9]+_w]]];
// CHECK-SAME: [[A]] = [[A]] + [[A]]_l[0];
// CHECK-SAME: = ([[A]] / 96.0f);
// CHECK-SAME: float [[B:acc[0-9]+]]_l[2 * EMBER_VEC_F32] = {};
// CHECK-SAME: [[B]] = [[B]] + [[B]]_l[0];
// CHECK-SAME: = ([[B]] / 96.0f);
// CHECK-SAME: (1 / std::sqrt(
// CHECK-SAME: #pragma omp simd\0A    for (int64_t [[J:i1_[0-9]+]] = 0; [[J]] < 96;
// CHECK-SAME: in1[[[J]]]
// CHECK-SAME: in2[[[J]]]

// Column sum: the outer space is the column, the reduction walks rows. Column blocks
// (cpp_column_blocks): blocks of 64 columns, the rows outside, a simd loop over the block's
// columns inside (contiguous), one accumulator per column.
// CHECK-LABEL: func.func private @column_sum
// CHECK-SAME: for (int64_t [[B:i1_[0-9]+_b]] = 0; [[B]] < 70; [[B]] += 64)
// CHECK-SAME: const int64_t [[N:i1_[0-9]+_n]] = std::min<int64_t>(64, (70) - [[B]]);
// CHECK-SAME: float [[S:acc[0-9]+]]_v[64];
// CHECK-SAME: for (int64_t [[R:i0_[0-9]+]] = 0; [[R]] < 50; ++[[R]]) {\0A      #pragma omp simd\0A      for (int64_t [[L:i1_[0-9]+_l]] = 0; [[L]] < [[N]]; ++[[L]])
// CHECK-SAME: const int64_t [[C:i1_[0-9]+]] = [[B]] + [[L]];
// CHECK-SAME: in0[(([[R]] * 70) + [[C]])]
// CHECK-SAME: [[S]]_v[[[L]]] = t{{[0-9]+}};
// CHECK-SAME: out0[[[C]]] = [[S]]_v[[[L]]];

// Full sum: no outer space, the reduction itself is split over threads. 150000 elements: a
// blocked sum (float partial per block of 4 rows x 500, vectorized; blocks added in double).
// CHECK-LABEL: func.func private @full_sum
// CHECK-SAME: double [[W:acc[0-9]+_wide]] = 0.0f;
// CHECK-SAME: #pragma omp parallel for reduction(+:[[W]])\0A  for (int64_t [[C:c[0-9]+]] = 0; [[C]] < 300; [[C]] += 4)
// CHECK-SAME: float [[P:part[0-9]+]] = 0.0f;
// CHECK-SAME: #pragma omp simd collapse(2) reduction(+:[[P]])\0A    for (int64_t [[R:i0_[0-9]+]] = [[C]]; [[R]] < std::min<int64_t>([[C]] + 4, 300);
// CHECK-SAME: [[P]] = {{t[0-9]+}};
// CHECK-SAME: [[W]] += [[P]];
// CHECK-SAME: const float [[S:acc[0-9]+]] = (float)[[W]];
// CHECK-SAME: out0[0] = [[S]];

// Dynamic sizes come from the ABI's sizes table; OpenMP only when the work is large.
// CHECK-LABEL: func.func private @dyn
// CHECK-SAME: const int64_t [[S0:s[0-9]+]] = sizes[0];\0A  const int64_t [[S1:s[0-9]+]] = sizes[1];
// CHECK-SAME: #pragma omp parallel for if([[S0]] * [[S1]] * 1 >= 32768)
// CHECK-SAME: < [[S0]];
// CHECK-SAME: < [[S1]];
// CHECK-SAME: out1[

#bcast_add_m0 = affine_map<(d0, d1) -> (d0, d1)>
#bcast_add_m1 = affine_map<(d0, d1) -> (d1)>
#transpose_read_m0 = affine_map<(d0, d1) -> (d0, d1)>
#softmax_m0 = affine_map<(d0, d1) -> (d0, d1)>
#softmax_m1 = affine_map<(d0, d1) -> (d0)>
#softmax_m2 = affine_map<(d0, d1) -> (d0, 0)>
#layer_norm_m0 = affine_map<(d0, d1) -> (d0, d1)>
#layer_norm_m1 = affine_map<(d0, d1) -> (d0, 0)>
#layer_norm_m2 = affine_map<(d0, d1) -> (d0)>
#layer_norm_m3 = affine_map<(d0, d1) -> (d1)>
#column_sum_m0 = affine_map<(d0, d1) -> (d0, d1)>
#column_sum_m1 = affine_map<(d0, d1) -> (d1)>
#full_sum_m0 = affine_map<(d0, d1) -> (d0, d1)>
#full_sum_m1 = affine_map<(d0, d1) -> ()>

#dyn_m = affine_map<(d0, d1) -> (d0, d1)>
#dyn_m1 = affine_map<(d0, d1) -> (d1)>
#dyn_m2 = affine_map<(d0, d1) -> (d0)>
module {
  func.func private @bcast_add(%arg0: tensor<64x48xf32>, %arg1: tensor<48xf32>) -> tensor<64x48xf32> attributes {ember.kernel = "pointwise"} {
    %0 = tensor.empty() : tensor<64x48xf32>
    %1 = linalg.generic {indexing_maps = [#bcast_add_m0, #bcast_add_m1, #bcast_add_m0], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<64x48xf32>, tensor<48xf32>) outs(%0 : tensor<64x48xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %2 = arith.addf %in, %in_0 : f32
      linalg.yield %2 : f32
    } -> tensor<64x48xf32>
    return %1 : tensor<64x48xf32>
  }

  func.func private @flat_exp(%arg0: tensor<64x48xf32>, %arg1: tensor<64x48xf32>) -> tensor<64x48xf32> attributes {ember.kernel = "pointwise"} {
    %0 = tensor.empty() : tensor<64x48xf32>
    %1 = linalg.generic {indexing_maps = [#bcast_add_m0, #bcast_add_m0, #bcast_add_m0], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<64x48xf32>, tensor<64x48xf32>) outs(%0 : tensor<64x48xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %2 = arith.addf %in, %in_0 : f32
      %3 = math.exp %2 : f32
      linalg.yield %3 : f32
    } -> tensor<64x48xf32>
    return %1 : tensor<64x48xf32>
  }

  func.func private @transpose_read(%arg0: tensor<48x64xf32>, %arg1: tensor<64x48xf32>) -> tensor<64x48xf32> attributes {ember.kernel = "pointwise"} {
    %cst = arith.constant 2.000000e+00 : f32
    %0 = tensor.empty() : tensor<64x48xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<48x64xf32>) outs(%0 : tensor<64x48xf32>) permutation = [1, 0] 
    %1 = linalg.generic {indexing_maps = [#transpose_read_m0, #transpose_read_m0], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<64x48xf32>) outs(%0 : tensor<64x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.mulf %in, %cst : f32
      linalg.yield %3 : f32
    } -> tensor<64x48xf32>
    %2 = linalg.generic {indexing_maps = [#transpose_read_m0, #transpose_read_m0, #transpose_read_m0], iterator_types = ["parallel", "parallel"]} ins(%1, %arg1 : tensor<64x48xf32>, tensor<64x48xf32>) outs(%0 : tensor<64x48xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %3 = arith.addf %in, %in_0 : f32
      linalg.yield %3 : f32
    } -> tensor<64x48xf32>
    return %2 : tensor<64x48xf32>
  }

  func.func private @softmax(%arg0: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> attributes {ember.kernel = "reduction"} {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0xFF800000 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4096xi64>
    %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<4096xi64>) -> tensor<4096xi64>
    %2 = tensor.empty() : tensor<4096xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<4096xf32>) -> tensor<4096xf32>
    %4:2 = linalg.generic {indexing_maps = [#softmax_m0, #softmax_m1, #softmax_m1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4096x1024xf32>) outs(%3, %1 : tensor<4096xf32>, tensor<4096xi64>) {
    ^bb0(%in: f32, %out: f32, %out_1: i64):
      %12 = linalg.index 1 : index
      %13 = arith.index_cast %12 : index to i64
      %14 = arith.maximumf %in, %out : f32
      %15 = arith.cmpf ogt, %in, %out : f32
      %16 = arith.select %15, %13, %out_1 : i64
      linalg.yield %14, %16 : f32, i64
    } -> (tensor<4096xf32>, tensor<4096xi64>)
    %expanded = tensor.expand_shape %4#0 [[0, 1]] output_shape [4096, 1] : tensor<4096xf32> into tensor<4096x1xf32>
    %5 = tensor.empty() : tensor<4096x1024xf32>
    %6 = linalg.generic {indexing_maps = [#softmax_m0, #softmax_m2, #softmax_m0], iterator_types = ["parallel", "parallel"]} ins(%arg0, %expanded : tensor<4096x1024xf32>, tensor<4096x1xf32>) outs(%5 : tensor<4096x1024xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.subf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<4096x1024xf32>
    %7 = linalg.generic {indexing_maps = [#softmax_m0, #softmax_m0], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<4096x1024xf32>) outs(%5 : tensor<4096x1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = math.exp %in : f32
      linalg.yield %12 : f32
    } -> tensor<4096x1024xf32>
    %8 = tensor.empty() : tensor<4096x1xf32>
    %9 = linalg.fill ins(%cst_0 : f32) outs(%8 : tensor<4096x1xf32>) -> tensor<4096x1xf32>
    %10 = linalg.generic {indexing_maps = [#softmax_m0, #softmax_m2], iterator_types = ["parallel", "reduction"]} ins(%7 : tensor<4096x1024xf32>) outs(%9 : tensor<4096x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.addf %in, %out : f32
      linalg.yield %12 : f32
    } -> tensor<4096x1xf32>
    %11 = linalg.generic {indexing_maps = [#softmax_m0, #softmax_m2, #softmax_m0], iterator_types = ["parallel", "parallel"]} ins(%7, %10 : tensor<4096x1024xf32>, tensor<4096x1xf32>) outs(%5 : tensor<4096x1024xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.divf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<4096x1024xf32>
    return %11 : tensor<4096x1024xf32>
  }

  func.func private @layer_norm(%arg0: tensor<40x96xf32>, %arg1: tensor<96xf32>, %arg2: tensor<96xf32>) -> tensor<40x96xf32> attributes {ember.kernel = "reduction"} {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e-05 : f64
    %cst_1 = arith.constant 9.600000e+01 : f32
    %0 = tensor.empty() : tensor<40x1xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<40x1xf32>) -> tensor<40x1xf32>
    %2 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<40x96xf32>) outs(%1 : tensor<40x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<40x1xf32>
    %3 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%2 : tensor<40x1xf32>) outs(%0 : tensor<40x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.divf %in, %cst_1 : f32
      linalg.yield %16 : f32
    } -> tensor<40x1xf32>
    %4 = tensor.empty() : tensor<40x96xf32>
    %collapsed = tensor.collapse_shape %3 [[0, 1]] : tensor<40x1xf32> into tensor<40xf32>
    %5 = linalg.generic {indexing_maps = [#layer_norm_m2, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%collapsed : tensor<40xf32>) outs(%4 : tensor<40x96xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<40x96xf32>
    %6 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m0, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%arg0, %5 : tensor<40x96xf32>, tensor<40x96xf32>) outs(%4 : tensor<40x96xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %16 = arith.subf %in, %in_3 : f32
      linalg.yield %16 : f32
    } -> tensor<40x96xf32>
    %7 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m0, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%6, %6 : tensor<40x96xf32>, tensor<40x96xf32>) outs(%4 : tensor<40x96xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %16 = arith.mulf %in, %in_3 : f32
      linalg.yield %16 : f32
    } -> tensor<40x96xf32>
    %8 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m1], iterator_types = ["parallel", "reduction"]} ins(%7 : tensor<40x96xf32>) outs(%1 : tensor<40x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<40x1xf32>
    %9 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%8 : tensor<40x1xf32>) outs(%0 : tensor<40x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.divf %in, %cst_1 : f32
      linalg.yield %16 : f32
    } -> tensor<40x1xf32>
    %10 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%9 : tensor<40x1xf32>) outs(%0 : tensor<40x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.truncf %cst_0 : f64 to f32
      %17 = arith.addf %in, %16 : f32
      linalg.yield %17 : f32
    } -> tensor<40x1xf32>
    %11 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%10 : tensor<40x1xf32>) outs(%0 : tensor<40x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = math.rsqrt %in : f32
      linalg.yield %16 : f32
    } -> tensor<40x1xf32>
    %collapsed_2 = tensor.collapse_shape %11 [[0, 1]] : tensor<40x1xf32> into tensor<40xf32>
    %12 = linalg.generic {indexing_maps = [#layer_norm_m2, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%collapsed_2 : tensor<40xf32>) outs(%4 : tensor<40x96xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<40x96xf32>
    %13 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m0, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%6, %12 : tensor<40x96xf32>, tensor<40x96xf32>) outs(%4 : tensor<40x96xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %16 = arith.mulf %in, %in_3 : f32
      linalg.yield %16 : f32
    } -> tensor<40x96xf32>
    %14 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m3, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%13, %arg1 : tensor<40x96xf32>, tensor<96xf32>) outs(%4 : tensor<40x96xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %16 = arith.mulf %in, %in_3 : f32
      linalg.yield %16 : f32
    } -> tensor<40x96xf32>
    %15 = linalg.generic {indexing_maps = [#layer_norm_m0, #layer_norm_m3, #layer_norm_m0], iterator_types = ["parallel", "parallel"]} ins(%14, %arg2 : tensor<40x96xf32>, tensor<96xf32>) outs(%4 : tensor<40x96xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %16 = arith.addf %in, %in_3 : f32
      linalg.yield %16 : f32
    } -> tensor<40x96xf32>
    return %15 : tensor<40x96xf32>
  }

  func.func private @column_sum(%arg0: tensor<50x70xf32>) -> tensor<70xf32> attributes {ember.kernel = "reduction"} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<70xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<70xf32>) -> tensor<70xf32>
    %2 = linalg.generic {indexing_maps = [#column_sum_m0, #column_sum_m1], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<50x70xf32>) outs(%1 : tensor<70xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %out : f32
      linalg.yield %3 : f32
    } -> tensor<70xf32>
    return %2 : tensor<70xf32>
  }

  func.func private @full_sum(%arg0: tensor<300x500xf32>) -> tensor<f32> attributes {ember.kernel = "reduction"} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<f32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<f32>) -> tensor<f32>
    %2 = linalg.generic {indexing_maps = [#full_sum_m0, #full_sum_m1], iterator_types = ["reduction", "reduction"]} ins(%arg0 : tensor<300x500xf32>) outs(%1 : tensor<f32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %out : f32
      linalg.yield %3 : f32
    } -> tensor<f32>
    return %2 : tensor<f32>
  }



func.func private @dyn(%a: tensor<?x?xf32>, %b: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?xf32>)
    attributes {ember.kernel = "reduction"} {
  %c0 = arith.constant 0.0 : f32
  %c0i = arith.constant 0 : index
  %c1i = arith.constant 1 : index
  %d0 = tensor.dim %a, %c0i : tensor<?x?xf32>
  %d1 = tensor.dim %a, %c1i : tensor<?x?xf32>
  %e = tensor.empty(%d0, %d1) : tensor<?x?xf32>
  %0 = linalg.generic {indexing_maps = [#dyn_m, #dyn_m1, #dyn_m], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<?x?xf32>, tensor<?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<?x?xf32>
  %e1 = tensor.empty(%d0) : tensor<?xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e1 : tensor<?xf32>) -> tensor<?xf32>
  %1 = linalg.generic {indexing_maps = [#dyn_m, #dyn_m2], iterator_types = ["parallel", "reduction"]}
      ins(%0 : tensor<?x?xf32>) outs(%f : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %o : f32
    linalg.yield %s : f32
  } -> tensor<?xf32>
  return %0, %1 : tensor<?x?xf32>, tensor<?xf32>
}

}

// -----

// An op outside the kernel contract is a located error, not a crash.
#nm = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func private @bad(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32>
      attributes {ember.kernel = "pointwise"} {
    %c0 = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x4xf32>
    %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
    // expected-error @+1 {{cannot lower kernel @bad to C++: 'linalg.matmul' is not allowed in a kernel body}}
    %m = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
    return %m : tensor<4x4xf32>
  }
}

// -----

// Two transposes of one input with different permutations share one (CSE'd) tensor.empty init.
// The init is never read, so it must not tie their loops together: both results are stored from
// one loop nest, each through its own index (the shared init once made two loops one variable,
// a diagonal copy).
// CHECK-LABEL: void two_transposes(
// CHECK: for (int64_t [[B:i[0-9_]+]] = 0; [[B]] < 4;
// CHECK: for (int64_t [[A:i[0-9_]+]] = 0; [[A]] < 3;
// CHECK: for (int64_t [[C:i[0-9_]+]] = 0; [[C]] < 3;
// CHECK: out0[(((([[B]] * 3) + [[A]]) * 3) + [[C]])] = [[X:x[0-9]+]];
// CHECK-SAME: out1[(((([[B]] * 3) + [[C]]) * 3) + [[A]])] = [[X]];
module {
  func.func private @two_transposes(%a: tensor<3x4x3xf32>) -> (tensor<4x3x3xf32>, tensor<4x3x3xf32>)
      attributes {ember.kernel = "pointwise"} {
    %e = tensor.empty() : tensor<4x3x3xf32>
    %t0 = linalg.transpose ins(%a : tensor<3x4x3xf32>) outs(%e : tensor<4x3x3xf32>) permutation = [1, 0, 2]
    %t1 = linalg.transpose ins(%a : tensor<3x4x3xf32>) outs(%e : tensor<4x3x3xf32>) permutation = [1, 2, 0]
    return %t0, %t1 : tensor<4x3x3xf32>, tensor<4x3x3xf32>
  }
}

// -----

// An index read from data (an embedding) is checked (ember_chk_index records an out-of-range
// index for the host, which raises IndexError, and returns 0 so the load stays in bounds); an
// index computed from loop indices only (nearest upsampling) is not.
// CHECK: static int64_t ember_error[4]
// CHECK-LABEL: void checked_gather(
// CHECK: const int64_t [[IX:ix[0-9]+]] = ember_chk_index([[I:[tx][0-9]+]], 10, 0);
// CHECK: in1[(([[IX]] * 16)
// CHECK-NOT: ember_chk_index
// CHECK: out1[
// CHECK: const int checked_gather_checked = 1;
module {
  func.func private @checked_gather(%arg0: tensor<4x6xi64>, %arg1: tensor<10x16xf32>, %arg2: tensor<3x16xf32>) -> (tensor<4x6x16xf32>, tensor<4x6x16xf32>)
      attributes {ember.kernel = "pointwise", ember.ops = ["gather"]} {
    %c2 = arith.constant 2 : index
    %e = tensor.empty() : tensor<4x6x16xf32>
    %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%arg0 : tensor<4x6xi64>) outs(%e, %e : tensor<4x6x16xf32>, tensor<4x6x16xf32>) {
    ^bb0(%i: i64, %o: f32, %o2: f32):
      %ii = arith.index_cast %i : i64 to index
      %j = linalg.index 2 : index
      %v = tensor.extract %arg1[%ii, %j] : tensor<10x16xf32>
      %k = linalg.index 0 : index
      %kk = arith.divui %k, %c2 : index
      %w = tensor.extract %arg2[%kk, %j] : tensor<3x16xf32>
      linalg.yield %v, %w : f32, f32
    } -> (tensor<4x6x16xf32>, tensor<4x6x16xf32>)
    return %r#0, %r#1 : tensor<4x6x16xf32>, tensor<4x6x16xf32>
  }
}

// -----

// Integer division and remainder by a tensor are checked (a zero divisor is eager's
// RuntimeError, and x86 traps on it and on MIN / -1); by a constant other than 0 and -1 they are
// plain. Unsigned ones divide as unsigned. A float to i8 conversion goes through int64 and wraps
// (uint8 200.0 stays 200), and `cmpf one` is false on NaN.
// CHECK-LABEL: void checked_div(
// CHECK: = ember_chk_divsi<int64_t>(x{{[0-9]+}}, x{{[0-9]+}});
// CHECK: = ember_chk_remsi<int64_t>(x{{[0-9]+}}, x{{[0-9]+}});
// CHECK: = (int64_t)(x{{[0-9]+}} % INT64_C(7));
// CHECK: (int8_t)ember_chk_divui<uint8_t>((uint8_t)
// CHECK: (int8_t)(int64_t)(
// CHECK: ([[F:x[0-9]+]] < 1.0f || [[F]] > 1.0f)
// CHECK: const int checked_div_checked = 1;
module {
  func.func private @checked_div(%a: tensor<64xi64>, %b: tensor<64xi64>, %c: tensor<64xi8>, %f: tensor<64xf32>) -> (tensor<64xi64>, tensor<64xi64>, tensor<64xi64>, tensor<64xi8>, tensor<64xi8>, tensor<64xi1>)
      attributes {ember.kernel = "pointwise", ember.ops = ["div"]} {
    %c7 = arith.constant 7 : i64
    %one = arith.constant 1.0 : f32
    %e = tensor.empty() : tensor<64xi64>
    %e8 = tensor.empty() : tensor<64xi8>
    %eb = tensor.empty() : tensor<64xi1>
    %r:6 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
        ins(%a, %b, %c, %f : tensor<64xi64>, tensor<64xi64>, tensor<64xi8>, tensor<64xf32>) outs(%e, %e, %e, %e8, %e8, %eb : tensor<64xi64>, tensor<64xi64>, tensor<64xi64>, tensor<64xi8>, tensor<64xi8>, tensor<64xi1>) {
    ^bb0(%x: i64, %y: i64, %z: i8, %w: f32, %o0: i64, %o1: i64, %o2: i64, %o3: i8, %o4: i8, %o5: i1):
      %q = arith.divsi %x, %y : i64
      %m = arith.remsi %x, %y : i64
      %k = arith.remsi %x, %c7 : i64
      %u = arith.divui %z, %z : i8
      %t = arith.fptosi %w : f32 to i8
      %n = arith.cmpf one, %w, %one : f32
      linalg.yield %q, %m, %k, %u, %t, %n : i64, i64, i64, i8, i8, i1
    } -> (tensor<64xi64>, tensor<64xi64>, tensor<64xi64>, tensor<64xi8>, tensor<64xi8>, tensor<64xi1>)
    return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<64xi64>, tensor<64xi64>, tensor<64xi64>, tensor<64xi8>, tensor<64xi8>, tensor<64xi1>
  }
}

// -----

// torch-mlir's argmax of int64 with only the index used: the running max (result 0) is still
// an accumulator, and it is updated only after the index's compare has read it.
// CHECK-LABEL: void argmax_i64(
// CHECK: int64_t [[MAX:acc[0-9]+]] = INT64_C(-9223372036854775807);
// CHECK: int64_t [[IDX:acc[0-9]+]] = INT64_C(0);
// CHECK: > [[MAX]])
// CHECK: [[MAX]] = 
// CHECK: [[IDX]] = 
// CHECK: out0[
// CHECK-NOT: argmax_i64_checked
#am0 = affine_map<(d0, d1) -> (d0, d1)>
#am1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func private @argmax_i64(%arg0: tensor<8x5xi64>) -> tensor<8xi64>
      attributes {ember.kernel = "reduction", ember.ops = ["argmax"]} {
    %c0_i64 = arith.constant 0 : i64
    %cmin = arith.constant -9223372036854775807 : i64
    %0 = tensor.empty() : tensor<8xi64>
    %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<8xi64>) -> tensor<8xi64>
    %2 = linalg.fill ins(%cmin : i64) outs(%0 : tensor<8xi64>) -> tensor<8xi64>
    %3:2 = linalg.generic {indexing_maps = [#am0, #am1, #am1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<8x5xi64>) outs(%2, %1 : tensor<8xi64>, tensor<8xi64>) {
    ^bb0(%in: i64, %out: i64, %out_0: i64):
      %4 = linalg.index 1 : index
      %5 = arith.index_cast %4 : index to i64
      %6 = arith.maxsi %in, %out : i64
      %7 = arith.cmpi sgt, %in, %out : i64
      %8 = arith.select %7, %5, %out_0 : i64
      linalg.yield %6, %8 : i64, i64
    } -> (tensor<8xi64>, tensor<8xi64>)
    return %3#1 : tensor<8xi64>
  }
}

// -----

// A sum of at most 2048 (SUM_BLOCK) elements keeps one float accumulator per lane.
// CHECK-LABEL: void small_sum(
// CHECK: float [[S:acc[0-9]+]] = 0.0f;
// CHECK-NOT: double
// CHECK: #pragma omp simd collapse(2) reduction(+:[[S]])
// CHECK: out0[0] = [[S]];
#ss0 = affine_map<(d0, d1) -> (d0, d1)>
#ss1 = affine_map<(d0, d1) -> ()>
module {
  func.func private @small_sum(%arg0: tensor<16x128xf32>) -> tensor<f32> attributes {ember.kernel = "reduction"} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<f32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<f32>) -> tensor<f32>
    %2 = linalg.generic {indexing_maps = [#ss0, #ss1], iterator_types = ["reduction", "reduction"]} ins(%arg0 : tensor<16x128xf32>) outs(%1 : tensor<f32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %out : f32
      linalg.yield %3 : f32
    } -> tensor<f32>
    return %2 : tensor<f32>
  }
}

// -----

// Row sums of bf16 over a dynamic dim: blocked per row (chunks of 2048 of the dynamic dim),
// accumulated in float then double, rounded to bf16 once at the store.
// CHECK-LABEL: void dyn_row_sum_bf16(
// CHECK: const int64_t [[N:s[0-9]+]] = sizes[1];
// CHECK: double [[W:acc[0-9]+_wide]] = 0.0f;
// CHECK: for (int64_t [[C:c[0-9]+]] = 0; [[C]] < [[N]]; [[C]] += 2048)
// CHECK: float [[P:part[0-9]+]] = 0.0f;
// CHECK: #pragma omp simd reduction(+:[[P]])
// CHECK: < std::min<int64_t>([[C]] + 2048, [[N]]);
// CHECK: ember_bf16_to_f32(in0[
// CHECK: [[W]] += [[P]];
// CHECK: const float [[S:acc[0-9]+]] = (float)[[W]];
// CHECK: = ember_f32_to_bf16([[S]]);
#rs0 = affine_map<(d0, d1) -> (d0, d1)>
#rs1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func private @dyn_row_sum_bf16(%arg0: tensor<8x?xbf16>) -> tensor<8xbf16> attributes {ember.kernel = "reduction"} {
    %cst = arith.constant 0.000000e+00 : bf16
    %0 = tensor.empty() : tensor<8xbf16>
    %1 = linalg.fill ins(%cst : bf16) outs(%0 : tensor<8xbf16>) -> tensor<8xbf16>
    %2 = linalg.generic {indexing_maps = [#rs0, #rs1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<8x?xbf16>) outs(%1 : tensor<8xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %3 = arith.addf %in, %out : bf16
      linalg.yield %3 : bf16
    } -> tensor<8xbf16>
    return %2 : tensor<8xbf16>
  }
}

// -----

// A masked update `c ? f + acc : acc` (embedding_bag's sum over a bag) is still a `+`
// reduction: OpenMP reduces (and vectorizes) it.
// CHECK-LABEL: void masked_sum(
// CHECK: float [[S:acc[0-9]+]] = 0.0f;
// CHECK: #pragma omp simd reduction(+:[[S]])
// CHECK: = ({{t[0-9]+}} ? {{t[0-9]+}} : [[S]]);
// CHECK-SAME: [[S]] = {{t[0-9]+}};
#ms0 = affine_map<(d0, d1) -> (d0, d1)>
#ms1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func private @masked_sum(%arg0: tensor<4x8xf32>, %arg1: tensor<4xi64>) -> tensor<4xf32>
      attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4xf32>
    %i = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
    %r = linalg.generic {indexing_maps = [#ms0, #ms1, #ms1], iterator_types = ["parallel", "reduction"]}
        ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<4xi64>) outs(%i : tensor<4xf32>) {
    ^bb0(%a: f32, %n: i64, %o: f32):
      %j = linalg.index 1 : index
      %ji = arith.index_cast %j : index to i64
      %c = arith.cmpi slt, %ji, %n : i64
      %s = arith.addf %a, %o : f32
      %x = arith.select %c, %s, %o : f32
      linalg.yield %x : f32
    } -> tensor<4xf32>
    return %r : tensor<4xf32>
  }
}

// -----

// An unsigned max over i1 (torch-mlir's `max.dim` of a bool tensor: any) compares as bool,
// false < true; there is no `ubool` in C++.
// CHECK-LABEL: void bool_any(
// CHECK: std::max<bool>((bool)
// CHECK-NOT: ubool
#ba0 = affine_map<(d0, d1) -> (d0, d1)>
#ba1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func private @bool_any(%arg0: tensor<4x8xi1>) -> tensor<4xi1>
      attributes {ember.kernel = "reduction", ember.ops = ["max"]} {
    %false = arith.constant false
    %e = tensor.empty() : tensor<4xi1>
    %i = linalg.fill ins(%false : i1) outs(%e : tensor<4xi1>) -> tensor<4xi1>
    %r = linalg.generic {indexing_maps = [#ba0, #ba1], iterator_types = ["parallel", "reduction"]}
        ins(%arg0 : tensor<4x8xi1>) outs(%i : tensor<4xi1>) {
    ^bb0(%a: i1, %o: i1):
      %m = arith.maxui %a, %o : i1
      linalg.yield %m : i1
    } -> tensor<4xi1>
    return %r : tensor<4xi1>
  }
}

// -----

// A pointwise kernel with two results of one shape (an AdamW-like step: the new moment and the
// new parameter, which reads the new moment) is one loop: the moment is computed once, and both
// results of an element are computed before either is stored (ember-buffer-reuse writes both
// over their inputs, %m and %p).
// SRC-LABEL: // ----- kernel @adam_like
// SRC-NEXT:  extern "C" void adam_like(
// SRC-NEXT:    #pragma omp simd
// SRC-NEXT:    for (int64_t [[F:i0_[0-9]+]] = 0; [[F]] < 32; ++[[F]]) {
// SRC-COUNT-1: std::sqrt(
// SRC-NOT:     for (
// SRC:           out0[[[F]]] =
// SRC-NEXT:      out1[[[F]]] =
// SRC-NEXT:    }
// SRC-NEXT:  }
#ad = affine_map<(d0) -> (d0)>
module {
  func.func private @adam_like(%p: tensor<32xf32>, %m: tensor<32xf32>, %g: tensor<32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
      attributes {ember.kernel = "pointwise", ember.ops = ["add", "sqrt", "sub"]} {
    %e = tensor.empty() : tensor<32xf32>
    %m2 = linalg.generic {indexing_maps = [#ad, #ad, #ad], iterator_types = ["parallel"]} ins(%m, %g : tensor<32xf32>, tensor<32xf32>) outs(%e : tensor<32xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %s = arith.addf %x, %y : f32
      linalg.yield %s : f32
    } -> tensor<32xf32>
    %p2 = linalg.generic {indexing_maps = [#ad, #ad, #ad], iterator_types = ["parallel"]} ins(%p, %m2 : tensor<32xf32>, tensor<32xf32>) outs(%e : tensor<32xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %r = math.sqrt %y : f32
      %s = arith.subf %x, %r : f32
      linalg.yield %s : f32
    } -> tensor<32xf32>
    return %p2, %m2 : tensor<32xf32>, tensor<32xf32>
  }
}

// -----

// torch-mlir's relu, `x > 0 (or NaN) ? x : 0`, prints with the compare turned around, so that
// relu(-0.0) is -0.0 as eager's kernel gives (fuzz seed 29 index 1110).
// SRC-LABEL: // ----- kernel @relu
// SRC:           const bool [[C:t[0-9]+]] = ([[X:x[0-9]+]] < 0.0f);
// SRC-NEXT:      const float [[R:t[0-9]+]] = ([[C]] ? 0.0f : [[X]]);
// SRC:           out0[{{.*}}] = [[R]];
#ar = affine_map<(d0) -> (d0)>
module {
  func.func private @relu(%a: tensor<32xf32>) -> tensor<32xf32> attributes {ember.kernel = "pointwise"} {
    %cst = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<32xf32>
    %r = linalg.generic {indexing_maps = [#ar, #ar], iterator_types = ["parallel"]} ins(%a : tensor<32xf32>) outs(%e : tensor<32xf32>) {
    ^bb0(%x: f32, %o: f32):
      %c = arith.cmpf ugt, %x, %cst : f32
      %s = arith.select %c, %x, %cst : f32
      linalg.yield %s : f32
    } -> tensor<32xf32>
    return %r : tensor<32xf32>
  }
}

// -----

// An integer converted to a 16-bit float is rounded to it (c10's Half(float(x))): 2049 is 2048
// in f16, int64 MIN is -inf; int8 values are exact and are only widened (fuzz seed 40 index 665).
// SRC-LABEL: // ----- kernel @int_to_half
// SRC:           ember_round_f16((float)(
// SRC:           ember_round_bf16((float)(
// SRC-NOT:       ember_round_bf16((float)(
// SRC:           out0[{{.*}}] =
#ih = affine_map<(d0) -> (d0)>
module {
  func.func private @int_to_half(%a: tensor<32xi64>, %b: tensor<32xi32>, %c: tensor<32xi8>) -> (tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>) attributes {ember.kernel = "pointwise"} {
    %e = tensor.empty() : tensor<32xf16>
    %eb = tensor.empty() : tensor<32xbf16>
    %r:3 = linalg.generic {indexing_maps = [#ih, #ih, #ih, #ih, #ih, #ih], iterator_types = ["parallel"]} ins(%a, %b, %c : tensor<32xi64>, tensor<32xi32>, tensor<32xi8>) outs(%e, %eb, %eb : tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>) {
    ^bb0(%x: i64, %y: i32, %z: i8, %o: f16, %p: bf16, %q: bf16):
      %h = arith.sitofp %x : i64 to f16
      %g = arith.sitofp %y : i32 to bf16
      %k = arith.sitofp %z : i8 to bf16
      linalg.yield %h, %g, %k : f16, bf16, bf16
    } -> (tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>)
    return %r#0, %r#1, %r#2 : tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>
  }
}
// -----

// RMS norm (the row read twice: one reduction loop, then the output loop): the output loop
// walks chunks of EMBER_ROW_CHUNK(64) (one SIMD vector on AMD Zen, the row elsewhere), each
// chunk recomputing rsqrt(sum / 64 + eps) from an opaque copy of the row's sum
// (cpp_row_scalars: paces the row's stores). Without simd loops (NOVEC) the rsqrt stays once
// a row.
// NOVEC-LABEL: func.func private @rms_norm
// NOVEC-NOT: ember_opaque(
// NOVEC: ember.symbol = "rms_norm"
// SRC-LABEL: // ----- kernel @rms_norm
// The row's sum accumulates in two vectors of lanes added up as a tree (cpp_lane_sums).
// SRC:         float [[ACC:acc[0-9]+]] = 0.0f;
// SRC-NEXT:    float [[ACC]]_l[2 * EMBER_VEC_F32] = {};
// SRC:         [[ACC]] = [[ACC]] + [[ACC]]_l[0];
// SRC:         for (int64_t [[C:i1_[0-9]+_c]] = 0; [[C]] < 64; [[C]] += EMBER_ROW_CHUNK(64)) {
// SRC-NEXT:      const float [[V:acc[0-9]+_v]] = ember_opaque([[ACC]]);
// SRC-NEXT:      const float [[M:t[0-9]+]] = ([[V]] / 64.0f);
// SRC-NEXT:      const float [[E:t[0-9]+]] = ([[M]] + {{.*}});
// SRC-NEXT:      const float [[R:t[0-9]+]] = (float)(1 / std::sqrt([[E]]));
// SRC-NEXT:      #pragma omp simd
// SRC-NEXT:      for (int64_t [[O:i1_[0-9]+_o]] = 0; [[O]] < EMBER_ROW_CHUNK(64); ++[[O]]) {
// SRC-NEXT:        const int64_t [[J:i1_[0-9]+]] = ([[C]] + [[O]]);
// SRC:             out0[(({{i0_[0-9]+}} * 64) + [[J]])] =
#rm0 = affine_map<(d0, d1) -> (d0, d1)>
#rm1 = affine_map<(d0, d1) -> (d0)>
#rm2 = affine_map<(d0, d1) -> (d1)>
module {
  func.func private @rms_norm(%x: tensor<8x64xf32>, %w: tensor<64xf32>) -> tensor<8x64xf32> attributes {ember.kernel = "reduction"} {
    %zero = arith.constant 0.000000e+00 : f32
    %n = arith.constant 6.400000e+01 : f32
    %eps = arith.constant 9.99999997E-7 : f32
    %e1 = tensor.empty() : tensor<8xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
    %s = linalg.generic {indexing_maps = [#rm0, #rm1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x64xf32>) outs(%acc : tensor<8xf32>) {
    ^bb0(%a: f32, %o: f32):
      %q = arith.mulf %a, %a : f32
      %r = arith.addf %q, %o : f32
      linalg.yield %r : f32
    } -> tensor<8xf32>
    %e2 = tensor.empty() : tensor<8x64xf32>
    %y = linalg.generic {indexing_maps = [#rm0, #rm1, #rm2, #rm0], iterator_types = ["parallel", "parallel"]} ins(%x, %s, %w : tensor<8x64xf32>, tensor<8xf32>, tensor<64xf32>) outs(%e2 : tensor<8x64xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
      %m = arith.divf %b, %n : f32
      %t = arith.addf %m, %eps : f32
      %r = math.rsqrt %t : f32
      %u = arith.mulf %a, %r : f32
      %v = arith.mulf %u, %c : f32
      linalg.yield %v : f32
    } -> tensor<8x64xf32>
    return %y : tensor<8x64xf32>
  }
}
