// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{recompute-max-ops=0})' | FileCheck %s --check-prefix=STORED

// A conv net's backward (channels-last, rows = N*H*W, columns = channels): the residual
// gradient's sum a = g1 + g2, masked by the ReLU (`where(out <= 0, 0, a)`), widened to f32 for
// the BatchNorm backward, whose column sum is split (a partial kernel over row chunks, a final
// one) and whose input gradient reads it again elementwise. The masked f32 value was a kernel
// of its own, written in full (4 bytes an element) and read back by both: recomputed from
// g1, g2 and the ReLU's output (2 bytes each) in the partial sum and in the input gradient,
// that kernel and its loads are gone (its loads count in the saving: the kernel goes).

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#part = affine_map<(d0, d1, d2) -> (d0, d2)>

// CHECK-LABEL: func.func @relu_bwd_bn_sum
// CHECK-NEXT:    %[[P:.+]] = call @ember_fused_{{[a-z_0-9]+}}(%arg0, %arg1, %arg2) : (tensor<64x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[S:.+]] = call @ember_fused_{{[a-z_0-9]+}}(%[[P]]) : (tensor<4x8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %[[G:.+]] = call @ember_fused_{{[a-z_0-9]+}}(%arg0, %arg1, %arg2, %[[S]]) : (tensor<64x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>, tensor<8xf32>) -> tensor<64x8xbf16>
// CHECK-NEXT:    return %[[G]], %[[S]]
// STORED-LABEL: func.func @relu_bwd_bn_sum
// Not recomputed: the masked f32 value is stored in full (by the partial sum's kernel, which
// computes it) and read back by the input gradient.
// STORED-NEXT:    %[[W:.+]]:2 = call @ember_fused_add_where_sum_{{[0-9]+}}(%arg0, %arg1, %arg2) : (tensor<64x8xbf16>, tensor<64x8xbf16>, tensor<64x8xbf16>) -> (tensor<4x16x8xf32>, tensor<4x8xf32>)
// STORED:         call @ember_fused_sum_{{[0-9]+}}(%[[W]]#1) : (tensor<4x8xf32>) -> tensor<8xf32>
// STORED:         call @ember_fused_sub_{{[0-9]+}}(%{{.+}}, %{{.+}}) : (tensor<64x8xf32>, tensor<8xf32>) -> tensor<64x8xbf16>
func.func @relu_bwd_bn_sum(%g1: tensor<64x8xbf16>, %g2: tensor<64x8xbf16>, %out: tensor<64x8xbf16>)
    -> (tensor<64x8xbf16>, tensor<8xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %zb = arith.constant 0.000000e+00 : bf16
  %eb = tensor.empty() : tensor<64x8xbf16>
  %a = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g1, %g2 : tensor<64x8xbf16>, tensor<64x8xbf16>) outs(%eb : tensor<64x8xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %s = arith.addf %x, %y : bf16
    linalg.yield %s : bf16
  } -> tensor<64x8xbf16>
  %ef = tensor.empty() : tensor<64x8xf32>
  %w = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%out, %a : tensor<64x8xbf16>, tensor<64x8xbf16>) outs(%ef : tensor<64x8xf32>) {
  ^bb0(%r: bf16, %v: bf16, %o: f32):
    %le = arith.cmpf ole, %r, %zb : bf16
    %m = arith.select %le, %zb, %v : bf16
    %f = arith.extf %m : bf16 to f32
    linalg.yield %f : f32
  } -> tensor<64x8xf32>
  %w3 = tensor.expand_shape %w [[0, 1], [2]] output_shape [4, 16, 8] : tensor<64x8xf32> into tensor<4x16x8xf32>
  %ep = tensor.empty() : tensor<4x8xf32>
  %ip = linalg.fill ins(%zero : f32) outs(%ep : tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = linalg.generic {indexing_maps = [#id3, #part], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%w3 : tensor<4x16x8xf32>) outs(%ip : tensor<4x8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %es = tensor.empty() : tensor<8xf32>
  %is = linalg.fill ins(%zero : f32) outs(%es : tensor<8xf32>) -> tensor<8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%p : tensor<4x8xf32>) outs(%is : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %g = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w, %sum : tensor<64x8xf32>, tensor<8xf32>) outs(%eb : tensor<64x8xbf16>) {
  ^bb0(%v: f32, %s: f32, %o: bf16):
    %d = arith.subf %v, %s : f32
    %t = arith.truncf %d : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<64x8xbf16>
  return %g, %sum : tensor<64x8xbf16>, tensor<8xf32>
}
