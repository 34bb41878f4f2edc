// RUN: ember-opt %s --emit-source --pass-pipeline='builtin.module(ember-fuse{target=triton},ember-lower-to-triton{autotune=false})' | FileCheck %s

// A BatchNorm backward's partial kernel (channels-last rows, looped: 256 rows of 8 columns):
// the ReLU-masked residual gradient w = where(out <= 0, 0, g1 + g2), stored in full, and two
// column sums that read it, sum(w) and sum(w * x). One loop over the rows computes all three
// and loads each operand once; before, each sum and the store was a loop of its own that
// loaded g1, g2 and out again (three passes over the rows).
// CHECK-LABEL: // ----- kernel @ember_fused_
// CHECK:         def ember_fused_{{[a-z_0-9]+}}_kernel(in0, in1, in2, in3, out0, out1, out2,
// CHECK-COUNT-1: for roff in range(0, rnumel, RBLOCK):
// CHECK-NOT:     for roff
// CHECK:         tl.load(in2
// CHECK-NOT:     tl.load(in2
// CHECK:         tl.store(out0
// CHECK:         tl.sum(
// CHECK:         tl.sum(
// CHECK-NOT:     for roff
// CHECK:         def ember_fused_
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @relu_bwd_sums(%g1: tensor<256x8xbf16>, %g2: tensor<256x8xbf16>, %out: tensor<256x8xbf16>,
                         %x: tensor<256x8xbf16>) -> (tensor<256x8xbf16>, tensor<8xf32>, tensor<8xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %zb = arith.constant 0.000000e+00 : bf16
  %eb = tensor.empty() : tensor<256x8xbf16>
  %w = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g1, %g2, %out : tensor<256x8xbf16>, tensor<256x8xbf16>, tensor<256x8xbf16>) outs(%eb : tensor<256x8xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %r: bf16, %o: bf16):
    %s = arith.addf %a, %b : bf16
    %le = arith.cmpf ole, %r, %zb : bf16
    %m = arith.select %le, %zb, %s : bf16
    linalg.yield %m : bf16
  } -> tensor<256x8xbf16>
  %es = tensor.empty() : tensor<8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%es : tensor<8xf32>) -> tensor<8xf32>
  %s1 = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%w : tensor<256x8xbf16>) outs(%z : tensor<8xf32>) {
  ^bb0(%in: bf16, %acc: f32):
    %f = arith.extf %in : bf16 to f32
    %s = arith.addf %f, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %s2 = linalg.generic {indexing_maps = [#id, #id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%w, %x : tensor<256x8xbf16>, tensor<256x8xbf16>) outs(%z : tensor<8xf32>) {
  ^bb0(%in: bf16, %xv: bf16, %acc: f32):
    %f = arith.extf %in : bf16 to f32
    %g = arith.extf %xv : bf16 to f32
    %p = arith.mulf %f, %g : f32
    %s = arith.addf %p, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %w, %s1, %s2 : tensor<256x8xbf16>, tensor<8xf32>, tensor<8xf32>
}
