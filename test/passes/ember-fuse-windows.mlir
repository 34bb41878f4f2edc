// A window reduction (ember-channels-last's max pooling over an NHWC buffer) reads its padded
// operand at oh * 2 + kh: the pad is index arithmetic in the reduction's kernel (a clamped,
// selected read: kernel_schedule's derived dims), so the padded tensor is never written. The
// pointwise ops before it (BatchNorm's scale, ReLU) are read by several windows each: they stay
// in a kernel of their own, computed once per element, not once per window element.
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{target=triton},canonicalize)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{target=cpu},canonicalize)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-fuse{target=triton explain=true})' --verify-diagnostics -o /dev/null

// CHECK-LABEL: func.func @bn_relu_maxpool
// CHECK-NEXT:    %[[A:.*]] = call @[[P:ember_fused_[a-z_]*0]](%arg0, %arg1) : (tensor<2x16x16x8xf32>, tensor<8xf32>) -> tensor<2x16x16x8xf32>
// CHECK-NEXT:    %[[R:.*]] = call @[[K:ember_fused_[a-z_]*1]](%[[A]]) : (tensor<2x16x16x8xf32>) -> tensor<2x8x8x8xf32>
// CHECK-NEXT:    return %[[R]]
// CHECK:       func.func private @[[P]]({{.*}}) -> tensor<2x16x16x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["max"]}
// CHECK:       func.func private @[[K]]({{.*}}) -> tensor<2x8x8x8xf32> attributes {ember.kernel = "reduction", ember.ops = ["pad", "amax"]}
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d3)>
#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>
#k = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#out = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
func.func @bn_relu_maxpool(%x: tensor<2x16x16x8xf32>, %s: tensor<8xf32>) -> tensor<2x8x8x8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<2x16x16x8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x, %s : tensor<2x16x16x8xf32>, tensor<8xf32>) outs(%e : tensor<2x16x16x8xf32>) {
  ^bb0(%in: f32, %sc: f32, %out: f32):
    %m = arith.mulf %in, %sc : f32
    %r = arith.maximumf %m, %zero : f32
    linalg.yield %r : f32
  } -> tensor<2x16x16x8xf32>
  // expected-remark @below {{unfused 'max' -> 'pad': index mismatch}}
  %p = tensor.pad %0 low[0, 1, 1, 0] high[0, 0, 0, 0] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %ninf : f32
  } : tensor<2x16x16x8xf32> to tensor<2x17x17x8xf32>
  %w = tensor.empty() : tensor<3x3xf32>
  %o = tensor.empty() : tensor<2x8x8x8xf32>
  %init = linalg.fill ins(%ninf : f32) outs(%o : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %1 = linalg.generic {indexing_maps = [#win, #k, #out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%p, %w : tensor<2x17x17x8xf32>, tensor<3x3xf32>) outs(%init : tensor<2x8x8x8xf32>) {
  ^bb0(%in: f32, %k: f32, %acc: f32):
    %r = arith.maximumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x8x8x8xf32>
  return %1 : tensor<2x8x8x8xf32>
}
