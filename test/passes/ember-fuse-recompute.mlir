// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{recompute-max-ops=0})' | FileCheck %s --check-prefix=STORED
// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-fuse{explain=true})'
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{horizontal-peak-bytes=0 recompute-held-bytes=0 explain=true})' 2>&1 | FileCheck %s --check-prefix=HELD

// ember-fuse recomputes a cheap pointwise value in the kernels that read it, instead of one
// kernel storing it for them to read back, where that moves fewer bytes
// (passes/fusion_recompute.py). Here the shape of a layer norm's backward: p = dy * xhat is
// summed per row (with the input gradient g: one kernel) and per column (the weight
// gradient, with the bias gradient's column sum of dy: another kernel, other outer space).

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>

// Stored (recompute-max-ops=0): the row kernel returns p (8x32 f32) beside g, and the column
// kernel reads it back. Recomputed: the row kernel returns g alone, the column kernel reads
// dy (which it reads anyway) and xhat and computes p itself: 1024 bytes written and 1024 read
// less, 1024 read more.
// CHECK-LABEL: func.func @ln_backward_like
// CHECK-NEXT:    %[[G:.+]] = call @ember_fused_mul_sum_{{[0-9]+}}(%arg0, %arg1) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %[[W:.+]]:2 = call @ember_fused_mul_sum_{{[0-9]+}}(%arg0, %arg1) : (tensor<8x32xf32>, tensor<8x32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
// CHECK-NEXT:    return %[[G]], %[[W]]#0, %[[W]]#1
// CHECK:       func.func private @ember_fused_mul_sum_{{[0-9]+}}({{.*}}) -> tensor<8x32xf32>
// CHECK:       func.func private @ember_fused_mul_sum_{{[0-9]+}}(%[[DY:.+]]: tensor<8x32xf32>, %[[XH:.+]]: tensor<8x32xf32>)
// CHECK:         linalg.generic {{.*}} ins(%[[DY]], %[[XH]] : tensor<8x32xf32>, tensor<8x32xf32>)
// CHECK:           arith.mulf
// CHECK:         iterator_types = ["reduction", "parallel"]
// STORED-LABEL: func.func @ln_backward_like
// STORED-NEXT:    %[[A:.+]]:2 = call @ember_fused_mul_sum_{{[0-9]+}}(%arg0, %arg1) : (tensor<8x32xf32>, tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
// STORED-NEXT:    %[[W:.+]]:2 = call @ember_fused_sum_{{[0-9]+}}(%[[A]]#0, %arg0) : (tensor<8x32xf32>, tensor<8x32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
// With recompute-held-bytes=0 and horizontal-peak-bytes=0 (no merge may hold a computed value
// longer: what a split column sum at GPT-2's size does, its first stages reading 6 MB each) the
// weight gradient's sum, recomputing p, reads dy as the bias gradient's does and holds no
// computed value: the two are one kernel, 2 kernels in all, p not stored.
// HELD: recomputed 'mul' in 1 consumer ('sum'){{.*}}: 1 op, 1024 bytes less memory traffic
// HELD-LABEL: func.func @ln_backward_like
// HELD-NEXT:    call @ember_fused_mul_sum_{{[0-9]+}}(%arg0, %arg1) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
// HELD-NEXT:    call @ember_fused_mul_sum_{{[0-9]+}}(%arg0, %arg1) : (tensor<8x32xf32>, tensor<8x32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
// HELD-NEXT:    return
func.func @ln_backward_like(%dy: tensor<8x32xf32>, %xh: tensor<8x32xf32>)
    -> (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  // expected-remark @+1 {{ember-fuse: recomputed 'mul' in 1 consumer ('sum'): 1 op, 1024 bytes less memory traffic}}
  %p = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%dy, %xh : tensor<8x32xf32>, tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<8x32xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %rs = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%p : tensor<8x32xf32>) outs(%i1 : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %g = linalg.generic {indexing_maps = [#id, #id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%dy, %xh, %rs : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %r: f32, %out: f32):
    %t = arith.mulf %b, %r : f32
    %d = arith.subf %a, %t : f32
    linalg.yield %d : f32
  } -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<32xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32xf32>) -> tensor<32xf32>
  // expected-remark @+1 {{ember-fuse: unfused 'mul' -> 'sum': index mismatch (reductions over different outer (parallel) spaces)}}
  %wg = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%p : tensor<8x32xf32>) outs(%i2 : tensor<32xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  %bg = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%dy : tensor<8x32xf32>) outs(%i2 : tensor<32xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %g, %wg, %bg : tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>

// Not recomputed where it moves no fewer bytes: %h, a bf16 value (512 bytes), is computed
// from %x in f32 (1024 bytes) that the column sum does not read: storing and reading %h back
// (1024 bytes) costs what reading %x would. And a value that is returned anyway is stored
// anyway: %q is read back by its column sum.
// CHECK-LABEL: func.func @not_cheaper
// CHECK-NEXT:    %[[A:.+]]:3 = call @ember_fused_convert_sum_mul_{{[0-9]+}}(%arg0) : (tensor<8x32xf32>) -> (tensor<8x32xbf16>, tensor<8xf32>, tensor<8x32xf32>)
// CHECK-NEXT:    %[[C:.+]]:2 = call @ember_fused_sum_{{[0-9]+}}(%[[A]]#0, %[[A]]#2)
// CHECK-NEXT:    return %[[A]]#1, %[[C]]#0, %[[A]]#2, %[[C]]#1
func.func @not_cheaper(%x: tensor<8x32xf32>)
    -> (tensor<8xf32>, tensor<32xf32>, tensor<8x32xf32>, tensor<32xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %eh = tensor.empty() : tensor<8x32xbf16>
  %h = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x32xf32>) outs(%eh : tensor<8x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<8x32xbf16>
  %e1 = tensor.empty() : tensor<8xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %rs = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%h : tensor<8x32xbf16>) outs(%i1 : tensor<8xf32>) {
  ^bb0(%in: bf16, %acc: f32):
    %w = arith.extf %in : bf16 to f32
    %s = arith.addf %w, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e = tensor.empty() : tensor<8x32xf32>
  %q = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %rs : tensor<8x32xf32>, tensor<8xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %r: f32, %out: f32):
    %m = arith.mulf %a, %r : f32
    linalg.yield %m : f32
  } -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<32xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32xf32>) -> tensor<32xf32>
  // expected-remark @+1 {{ember-fuse: unfused 'convert' -> 'sum': index mismatch (reductions over different outer (parallel) spaces)}}
  %c = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%h : tensor<8x32xbf16>) outs(%i2 : tensor<32xf32>) {
  ^bb0(%in: bf16, %acc: f32):
    %w = arith.extf %in : bf16 to f32
    %s = arith.addf %w, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  // expected-remark @+1 {{ember-fuse: unfused 'mul' -> 'sum': index mismatch (reductions over different outer (parallel) spaces)}}
  %cq = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%q : tensor<8x32xf32>) outs(%i2 : tensor<32xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %rs, %c, %q, %cq : tensor<8xf32>, tensor<32xf32>, tensor<8x32xf32>, tensor<32xf32>
}
