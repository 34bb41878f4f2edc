// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-fuse{explain=true})'
// RUN: not ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{explain=true})' 2>&1 | FileCheck %s

// ember-fuse{explain=true}: one remark per producer -> consumer pair that ends in different
// kernels, at the consumer, naming both ops and the reason. A pair that fuses gets none
// (--verify-diagnostics fails on any remark not expected here).

// The printed form: FILE:LINE:COL: remark: ember-fuse: unfused 'P' -> 'C': REASON (DETAIL)
// CHECK: ember-fuse-explain.mlir:[[# @LINE + 23]]:9: remark: ember-fuse: unfused 'exp' -> 'aten.mm': library call ('aten.mm' runs apart)
// CHECK-LABEL: func.func @pad_fuses
// CHECK-NEXT:    call @ember_fused_pad_add_{{[0-9]+}}(%arg0, %arg1)
// CHECK-NEXT:    return
// CHECK-LABEL: func.func @split_reshape_fuses
// CHECK-NEXT:    call @ember_fused_exp_sum_{{[0-9]+}}(%arg0)
// CHECK-NEXT:    return

#id = affine_map<(d0, d1) -> (d0, d1)>

// cycle and library call: %a feeds the matmul (an extern, a library call) and the add; fusing
// exp with add would put the matmul inside the kernel's cycle.
func.func @cycle_and_library_call(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %y = math.exp %in : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  // expected-remark @+1 {{ember-fuse: unfused 'exp' -> 'aten.mm': library call ('aten.mm' runs apart)}}
  %mm = linalg.matmul ins(%a, %w : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  // expected-remark @+2 {{ember-fuse: unfused 'aten.mm' -> 'add': library call ('aten.mm' runs apart)}}
  // expected-remark @+1 {{ember-fuse: unfused 'exp' -> 'add': cycle (a path between them goes through 'aten.mm' outside both kernels)}}
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
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>

// index mismatch: exp feeds a row sum (loops over 8 rows) and a column sum (loops over 32
// columns); one kernel cannot loop over both outer spaces. exp fuses with the row sum
// (edges into a reduction over a leading dim are tried last: a layer norm backward's row
// sums and input gradient stay one kernel), the column sum stays apart and computes exp
// again from %x instead of reading %a back (ember-fuse-recompute.mlir).
func.func @index_mismatch(%x: tensor<8x32xf32>) -> (tensor<8xf32>, tensor<32xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  // expected-remark @+1 {{ember-fuse: recomputed 'exp' in 1 consumer ('sum'): 1 op, 1024 bytes less memory traffic}}
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %y = math.exp %in : f32
    linalg.yield %y : f32
  } -> tensor<8x32xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<8x32xf32>) outs(%i1 : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<32xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32xf32>) -> tensor<32xf32>
  // expected-remark @+1 {{ember-fuse: unfused 'exp' -> 'sum': index mismatch (reductions over different outer (parallel) spaces)}}
  %c = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%a : tensor<8x32xf32>) outs(%i2 : tensor<32xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %r, %c : tensor<8xf32>, tensor<32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#all = affine_map<(d0, d1) -> ()>

// reduction then broadcast: x / sum(x) over the whole tensor; a full reduction runs as one
// parallel reduction loop, so the full-size quotient is a second kernel.
func.func @reduction_then_broadcast(%x: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [#id, #all], iterator_types = ["reduction", "reduction"]}
      ins(%x : tensor<8x32xf32>) outs(%init : tensor<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %a = arith.addf %in, %acc : f32
    linalg.yield %a : f32
  } -> tensor<f32>
  %e = tensor.empty() : tensor<8x32xf32>
  // expected-remark @+1 {{ember-fuse: unfused 'sum' -> 'div': reduction then broadcast (a full reduction cannot share a kernel with a result that has inner dims)}}
  %r = linalg.generic {indexing_maps = [#id, #all, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<8x32xf32>, tensor<f32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%in: f32, %d: f32, %out: f32):
    %q = arith.divf %in, %d : f32
    linalg.yield %q : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// illegal: no kernel holds a tensor.insert_slice (here it cannot be generated at all: the
// error names it).
func.func @illegal(%x: tensor<4x4xf32>, %y: tensor<2x4xf32>) -> tensor<4x4xf32> {
  %e = tensor.empty() : tensor<2x4xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<2x4xf32>) outs(%e : tensor<2x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %v = math.exp %in : f32
    linalg.yield %v : f32
  } -> tensor<2x4xf32>
  // expected-remark @+2 {{ember-fuse: unfused 'exp' -> 'insert_slice': illegal ('tensor.insert_slice' is not allowed in a kernel body (see docs/internals.md, Stage 2))}}
  // expected-error @+1 {{ember-fuse: cannot generate code for this op}}
  %r = tensor.insert_slice %a into %x[0, 0] [2, 4] [1, 1] : tensor<2x4xf32> into tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// Fused now (no remark): a pad's consumer reads it as index arithmetic, and a producer read
// through a reshape that splits a dim (8x4x8 collapsed to 8x32) is computed at i, j / 8, j % 8.
func.func @pad_fuses(%x: tensor<2x4xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %z = arith.constant 0.0 : f32
  %p = tensor.pad %x low[1, 2] high[1, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %z : f32
  } : tensor<2x4xf32> to tensor<4x8xf32>
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %p : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @split_reshape_fuses(%x: tensor<8x4x8xf32>) -> tensor<8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x4x8xf32>
  %a = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<8x4x8xf32>) outs(%e : tensor<8x4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %y = math.exp %in : f32
    linalg.yield %y : f32
  } -> tensor<8x4x8xf32>
  %c = tensor.collapse_shape %a [[0], [1, 2]] : tensor<8x4x8xf32> into tensor<8x32xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%c : tensor<8x32xf32>) outs(%init : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %a2 = arith.addf %in, %acc : f32
    linalg.yield %a2 : f32
  } -> tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A pair that fuses, here through a view of unit dims (exp -> collapse_shape -> sum), gets
// no remark.
func.func @fused_through_a_view(%x: tensor<8x1x32xf32>) -> tensor<8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x1x32xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<8x1x32xf32>) outs(%e : tensor<8x1x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %y = math.exp %in : f32
    linalg.yield %y : f32
  } -> tensor<8x1x32xf32>
  %c = tensor.collapse_shape %a [[0], [1, 2]] : tensor<8x1x32xf32> into tensor<8x32xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%c : tensor<8x32xf32>) outs(%init : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %a2 = arith.addf %in, %acc : f32
    linalg.yield %a2 : f32
  } -> tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// A reshape that only a library call reads stays a view on the host (the kernel returns its
// operand's shape): the pair it connects is still explained, through the view.
func.func @through_a_host_view(%x: tensor<2x4x16xf32>, %w: tensor<16x8xf32>) -> tensor<8x8xf32> {
  %e3 = tensor.empty() : tensor<2x4x16xf32>
  %d = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<2x4x16xf32>) outs(%e3 : tensor<2x4x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %v = math.exp %in : f32
    linalg.yield %v : f32
  } -> tensor<2x4x16xf32>
  %c = tensor.collapse_shape %d [[0, 1], [2]] : tensor<2x4x16xf32> into tensor<8x16xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  // expected-remark @+1 {{unfused 'exp' -> 'aten.mm': library call ('aten.mm' runs apart)}}
  %m = linalg.matmul ins(%c, %w : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %m : tensor<8x8xf32>
}
