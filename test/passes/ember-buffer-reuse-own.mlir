// RUN: ember-opt %s --verify-diagnostics --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true own-min-bytes=0})'
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-buffer-reuse{own-min-bytes=0})' | FileCheck %s
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=ARENA
// RUN: ember-opt %s --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true own-min-bytes=-1})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=ARENA

// ember-buffer-reuse{own-min-bytes=N}: the arena is allocated for the whole call, so a large
// buffer that dies early (%0, as a backward's bf16 LM-head weight and weight gradient) keeps its
// bytes while the returned values made later (%1, %3, %4: gradients) pile up beside it. Taken
// out of the arena into an allocation of its own, freed after its last use, the call's peak is
// 2560 bytes instead of 3328 (at op 4: the arena's 1024 beside the returned 2304). Only buffers of at
// least `own-min-bytes` (1 MiB would not take these; the default, -1, takes none: ARENA) are tried, largest first, each
// kept when the peak goes down, or stays while the arena shrinks by the buffer's bytes; a
// buffer live until the arena's last use is not tried (%2: it would free nothing earlier).

func.func private @neg16(%a: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
func.func private @neg8(%a: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %e = tensor.empty() : tensor<8x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}
// ARENA: remark: ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 1]
// ARENA: remark: ember-buffer-reuse: buffer %2: 256 bytes at offset 0, live [2, 4]
// ARENA: remark: ember-buffer-reuse: arena 1024 bytes for 2 of 5 buffers (1280 bytes without reuse)
// CHECK-LABEL: func.func @main
// CHECK-SAME: ember.arena_bytes = 256 : i64
// CHECK: call @neg16(%arg0) {ember.offsets = array<i64: -1>}
// CHECK: call @neg8(%arg1) {ember.offsets = array<i64: 0>}
// expected-remark @+1 {{ember-buffer-reuse: arena 256 bytes for 2 of 5 buffers (1280 bytes without reuse)}}
func.func @main(%x: tensor<16x16xf32>, %y: tensor<8x8xf32>) -> (tensor<16x16xf32>, tensor<8x8xf32>, tensor<16x16xf32>) {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes, own allocation (freed after its last use), live [0, 1]}}
  %0 = func.call @neg16(%x) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes, own allocation (escapes), live [1, 5]}}
  %1 = func.call @neg16(%0) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 256 bytes at offset 0, live [2, 4]}}
  %2 = func.call @neg8(%y) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %3: 1024 bytes, own allocation (escapes), live [3, 5]}}
  %3 = func.call @neg16(%x) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %4: 256 bytes, own allocation (escapes), live [4, 5]}}
  %4 = func.call @neg8(%2) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %1, %4, %3 : tensor<16x16xf32>, tensor<8x8xf32>, tensor<16x16xf32>
}
