// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse,canonicalize)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{explain=true})' 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{horizontal-peak-bytes=100000000},canonicalize)' | FileCheck %s --check-prefix=MERGED

// Horizontal fusion runs the merged kernel where the later member ran: what the earlier one
// reads stays alive until then (passes/fusion_liveness.py keeps the live bytes at each point
// of the host schedule). A merge is refused only when that raises the function's peak (by
// more than `horizontal-peak-bytes`, 64 KiB, over the peak before horizontal fusion; the peak
// is the arena's plus that of the returned values).

// Refused: two casts of matmul products (a backward's bf16 weight gradients to f32), both
// returned. One kernel where the second cast was keeps the first product (2 MiB) alive across
// the second matmul, at the function's peak (both f32 results and both products: 10 -> 12
// MiB): each cast runs where it was. Raising the bound merges them.
// REMARK: ember-fuse-horizontal-peak.mlir:[[# @LINE + 26]]:9: remark: ember-fuse: unfused 'convert' + 'convert': raises peak (horizontal: raises peak by 2097152 bytes, 10485760 -> 12582912)
// REMARK-NOT: raises peak
// CHECK-LABEL: func.func @grads
// CHECK:         %[[A:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm"
// CHECK-NEXT:    %[[CA:.*]] = call @ember_fused_convert_{{[0-9]+}}(%[[A]])
// CHECK-NEXT:    %[[B:.*]] = "ember.extern"(%arg2, %arg3) {callee = "aten.mm"
// CHECK-NEXT:    %[[CB:.*]] = call @ember_fused_convert_{{[0-9]+}}(%[[B]])
// CHECK-NEXT:    return %[[CA]], %[[CB]]
// MERGED-LABEL: func.func @grads
// MERGED:         %[[A:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm"
// MERGED-NEXT:    %[[B:.*]] = "ember.extern"(%arg2, %arg3) {callee = "aten.mm"
// MERGED-NEXT:    %[[C:.*]]:2 = call @ember_fused_convert_{{[0-9]+}}(%[[A]], %[[B]])
// MERGED-NEXT:    return %[[C]]#0, %[[C]]#1
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @grads(%x: tensor<2048x64xbf16>, %y: tensor<64x512xbf16>, %u: tensor<2048x64xbf16>, %v: tensor<64x512xbf16>) -> (tensor<2048x512xf32>, tensor<2048x512xf32>) {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<2048x512xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<2048x512xbf16>) -> tensor<2048x512xbf16>
  %a = linalg.matmul ins(%x, %y : tensor<2048x64xbf16>, tensor<64x512xbf16>) outs(%f : tensor<2048x512xbf16>) -> tensor<2048x512xbf16>
  %o = tensor.empty() : tensor<2048x512xf32>
  %ca = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<2048x512xbf16>) outs(%o : tensor<2048x512xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<2048x512xf32>
  %b = linalg.matmul ins(%u, %v : tensor<2048x64xbf16>, tensor<64x512xbf16>) outs(%f : tensor<2048x512xbf16>) -> tensor<2048x512xbf16>
  %cb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<2048x512xbf16>) outs(%o : tensor<2048x512xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<2048x512xf32>
  return %ca, %cb : tensor<2048x512xf32>, tensor<2048x512xf32>
}

// -----

// Accepted: the same two casts after a larger product (16 MiB) that a row sum reads: the
// function's peak is there, and the first bf16 product held to the second cast (12 MiB live
// then) stays below it; the casts are one kernel. (A flat bound on held bytes refused this.)
// CHECK-LABEL: func.func @grads_below_peak
// CHECK:         %[[P:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm"
// CHECK-NEXT:    %[[S:.*]] = call @ember_fused_sum_{{[0-9]+}}(%[[P]])
// CHECK-NEXT:    %[[A:.*]] = "ember.extern"(%arg2, %arg3) {callee = "aten.mm"
// CHECK-NEXT:    %[[B:.*]] = "ember.extern"(%arg4, %arg5) {callee = "aten.mm"
// CHECK-NEXT:    %[[C:.*]]:2 = call @ember_fused_convert_{{[0-9]+}}(%[[A]], %[[B]])
// CHECK-NEXT:    return %[[S]], %[[C]]#0, %[[C]]#1
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @grads_below_peak(%p: tensor<2048x64xf32>, %q: tensor<64x2048xf32>, %x: tensor<2048x64xbf16>, %y: tensor<64x512xbf16>, %u: tensor<2048x64xbf16>, %v: tensor<64x512xbf16>) -> (tensor<2048xf32>, tensor<2048x512xf32>, tensor<2048x512xf32>) {
  %zf = arith.constant 0.0 : f32
  %eb = tensor.empty() : tensor<2048x2048xf32>
  %fb = linalg.fill ins(%zf : f32) outs(%eb : tensor<2048x2048xf32>) -> tensor<2048x2048xf32>
  %big = linalg.matmul ins(%p, %q : tensor<2048x64xf32>, tensor<64x2048xf32>) outs(%fb : tensor<2048x2048xf32>) -> tensor<2048x2048xf32>
  %er = tensor.empty() : tensor<2048xf32>
  %fr = linalg.fill ins(%zf : f32) outs(%er : tensor<2048xf32>) -> tensor<2048xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%big : tensor<2048x2048xf32>) outs(%fr : tensor<2048xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %w = arith.addf %in, %acc : f32
    linalg.yield %w : f32
  } -> tensor<2048xf32>
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<2048x512xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<2048x512xbf16>) -> tensor<2048x512xbf16>
  %a = linalg.matmul ins(%x, %y : tensor<2048x64xbf16>, tensor<64x512xbf16>) outs(%f : tensor<2048x512xbf16>) -> tensor<2048x512xbf16>
  %o = tensor.empty() : tensor<2048x512xf32>
  %ca = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<2048x512xbf16>) outs(%o : tensor<2048x512xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<2048x512xf32>
  %b = linalg.matmul ins(%u, %v : tensor<2048x64xbf16>, tensor<64x512xbf16>) outs(%f : tensor<2048x512xbf16>) -> tensor<2048x512xbf16>
  %cb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<2048x512xbf16>) outs(%o : tensor<2048x512xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<2048x512xf32>
  return %s, %ca, %cb : tensor<2048xf32>, tensor<2048x512xf32>, tensor<2048x512xf32>
}
