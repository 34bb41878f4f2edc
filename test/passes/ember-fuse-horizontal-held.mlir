// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse,canonicalize)' | FileCheck %s
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-fuse{horizontal-held-bytes=100000000},canonicalize)' | FileCheck %s --check-prefix=MERGED

// Two casts of matmul products (a backward's bf16 weight gradients to f32), both returned:
// horizontal fusion ("whose results one op reads") would run one kernel where the second one
// was, keeping the first product (2 MiB) alive until then, across whatever runs in between
// (the other layers of a backward). Over `horizontal-held-bytes` (1 MiB by default) that is
// refused: each cast runs where it was.
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
