// Dynamic shapes (`?` dims, symbolic ints) through ember-fuse and both lowerings: sizes stay on
// the host, kernels take them as arguments, code reads them at run time (never a constant).
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse)' | FileCheck %s --check-prefix=FUSE
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse,ember-buffer-reuse,ember-lower-to-cpp)' | FileCheck %s --check-prefix=CPP
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse,ember-buffer-reuse,ember-lower-to-triton)' | FileCheck %s --check-prefix=TRITON

// A dynamic batch: the size stays on the host (tensor.dim), the kernel takes it as an index
// argument for its tensor.empty, and the call says which operand sizes its result.
// FUSE-LABEL: func.func @main
// FUSE: %[[D:.*]] = tensor.dim %arg0, %c0 : tensor<?x8xf32>
// FUSE: call @ember_fused_tanh_0(%arg0, %arg1, %[[D]]) {ember.result_dims = [array<i64: 2, -1>]}
// FUSE: func.func private @ember_fused_tanh_0(%{{.*}}: tensor<?x8xf32>, %{{.*}}: tensor<8xf32>, %[[A:.*]]: index) -> tensor<?x8xf32>
// FUSE: tensor.empty(%[[A]]) : tensor<?x8xf32>
// The loop bound is the first dim of in0 in the sizes table; the index argument comes after
// every dim (in0: 2, in1: 1, out0: 2).
// CPP-LABEL: func.func private @ember_fused_tanh_0
// CPP-SAME: const int64_t* __restrict__ sizes) {\0A  const int64_t [[S:s[0-9]+]] = sizes[0];\0A  const int64_t s{{[0-9]+}} = sizes[5];
// CPP-SAME: #pragma omp parallel for if([[S]] * 8 >= 32768)\0A  for (int64_t [[I:i0_[0-9]+]] = 0; [[I]] < [[S]]; ++[[I]])
// Triton: the grid and the size argument come from the tensors' shapes at launch.
// TRITON-LABEL: func.func private @ember_fused_tanh_0
// TRITON-SAME: def ember_fused_tanh_0_kernel(in0, in1, out0, xnumel, s0, XBLOCK: tl.constexpr)
// TRITON-SAME: def ember_fused_tanh_0(*args):
// TRITON-SAME: sizes = [d for t in tensors for d in t.shape] + scalars
// TRITON-SAME: xnumel = sizes[0] * 8\0A    s0 = sizes[0]
// TRITON-SAME: grid = lambda meta: (triton.cdiv(xnumel, meta[\22XBLOCK\22]),)
func.func @main(%arg0: tensor<?x8xf32>, %arg1: tensor<8xf32>) -> tensor<?x8xf32> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %arg0, %c0 : tensor<?x8xf32>
  %e = tensor.empty(%d) : tensor<?x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<?x8xf32>, tensor<8xf32>) outs(%e : tensor<?x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// A symbolic int read in a body (a mean's count): a scalar kernel argument, read from the sizes
// table after every tensor dim (in0: 2, out0: 2, then the two sizes and the count).
// FUSE-LABEL: func.func @mean
// FUSE: call @ember_fused_div_0(%arg0, %{{.*}}, %{{.*}}, %arg1) {ember.result_dims = [array<i64: 1, 2>]}
// FUSE: func.func private @ember_fused_div_0(%{{.*}}: tensor<?x?xf32>, %{{.*}}: index, %{{.*}}: index, %[[N:.*]]: i64)
// FUSE: arith.sitofp %[[N]] : i64 to f32
// CPP-LABEL: func.func private @ember_fused_div_0
// CPP-SAME: const int64_t [[N:s[0-9]+]] = sizes[6];
// CPP-SAME: const float [[F:t[0-9]+]] = (float)([[N]]);
// CPP-SAME: (x{{[0-9]+}} / [[F]])
// TRITON-LABEL: func.func private @ember_fused_div_0
// TRITON-SAME: @triton.jit(do_not_specialize=['s6'])
// TRITON-SAME: t{{[0-9]+}} = s6.to(tl.float32)
// TRITON-SAME: tensors, scalars = args[:2], [int(x) for x in args[2:]]
// TRITON-SAME: s6 = sizes[6]
func.func @mean(%arg0: tensor<?x?xf32>, %n: i64) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %d0 = tensor.dim %arg0, %c0 : tensor<?x?xf32>
  %d1 = tensor.dim %arg0, %c1 : tensor<?x?xf32>
  %e = tensor.empty(%d0, %d1) : tensor<?x?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%a: f32, %o: f32):
    %f = arith.sitofp %n : i64 to f32
    %q = arith.divf %a, %f : f32
    linalg.yield %q : f32
  } -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// -----

// A dynamic view (torch-mlir's strict lowering: sizes computed on the host) stays a host op
// between kernels; a result's size is traced through the slice that made it.
// FUSE-LABEL: func.func @reshape
// FUSE: %[[SHAPE:.*]] = tensor.from_elements
// FUSE: %[[R:.*]] = tensor.reshape %arg0(%[[SHAPE]])
// FUSE: call @ember_fused_{{.*}}(%[[R]]
// FUSE-SAME: ember.result_dims = [array<i64: 1, -1>]
func.func @reshape(%arg0: tensor<?x?xf32>, %n: i64) -> tensor<?x4xf32> {
  %c4 = arith.constant 4 : i64
  %shape = tensor.from_elements %n, %c4 : tensor<2xi64>
  %r = tensor.reshape %arg0(%shape) : (tensor<?x?xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  %i = arith.index_cast %n : i64 to index
  %e = tensor.empty(%i) : tensor<?x4xf32>
  %c = tensor.cast %r : tensor<?x?xf32> to tensor<?x4xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.exp %a : f32
    linalg.yield %t : f32
  } -> tensor<?x4xf32>
  return %m : tensor<?x4xf32>
}

// -----

// Float arithmetic on a symbolic size (BatchNorm's unbiased-variance factor n / (n - 1), a
// SymFloat of the graph): the host keeps no float; the kernel takes the integer n and computes
// the factor in its body. A float step towards an integer size (arange's ceil(end / 2)) stays
// on the host, whose runtime evaluates it.
// FUSE-LABEL: func.func @float_size
// FUSE-NOT: arith.divf
// FUSE: %[[H:.*]] = arith.sitofp %arg2 : i64 to f32
// FUSE: %[[HH:.*]] = arith.mulf %[[H]]
// FUSE: math.ceil %[[HH]]
// FUSE: call @ember_fused_div_0(%arg0, %{{.*}}, %arg1)
// FUSE: func.func private @ember_fused_div_0(%{{.*}}: tensor<?xf32>, %{{.*}}: index, %[[N:.*]]: i64)
// FUSE: linalg.generic
// FUSE-NEXT: ^bb0
// FUSE-NEXT: %[[F:.*]] = arith.sitofp %[[N]] : i64 to f64
// FUSE-NEXT: %[[M:.*]] = arith.subf %[[F]], %{{.*}} : f64
// FUSE-NEXT: %[[Q:.*]] = arith.divf %[[F]], %[[M]] : f64
// FUSE-NEXT: arith.truncf %[[Q]] : f64 to f32
// CPP-LABEL: func.func private @ember_fused_div_0
// CPP-SAME: (double)(
// TRITON-LABEL: func.func private @ember_fused_div_0
// TRITON-SAME: .to(tl.float64)
func.func @float_size(%arg0: tensor<?xf32>, %n: i64, %m: i64) -> (tensor<?xf32>, i64) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f64
  %half = arith.constant 0.5 : f32
  %f = arith.sitofp %n : i64 to f64
  %nm1 = arith.subf %f, %one : f64
  %q = arith.divf %f, %nm1 : f64
  %h = arith.sitofp %m : i64 to f32
  %hh = arith.mulf %h, %half : f32
  %ceil = math.ceil %hh : f32
  %size = arith.fptosi %ceil : f32 to i64
  %d = tensor.dim %arg0, %c0 : tensor<?xf32>
  %e = tensor.empty(%d) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]} ins(%arg0 : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = arith.truncf %q : f64 to f32
    %p = arith.mulf %a, %t : f32
    linalg.yield %p : f32
  } -> tensor<?xf32>
  return %r, %size : tensor<?xf32>, i64
}
