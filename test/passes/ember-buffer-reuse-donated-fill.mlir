// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true})'
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true donated-outputs-fill=75})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=FILL75
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true donated-outputs-fill=0})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=FILL0
// RUN: not ember-opt %s --pass-pipeline='builtin.module(ember-buffer-reuse{donated-outputs-fill=101})' 2>&1 | FileCheck %s --check-prefix=BAD

// Returned buffers (a backward's gradients) in a donated argument (a saved activation): the
// caller keeps the argument's whole memory as long as it keeps one of them, so they stay
// there only when together they fill at least `donated-outputs-fill` percent of it (default
// 50). Three 1024-byte gradients, each a quarter of the 4096-byte %s, made after its last
// read: together 75%, all three lie in it side by side (before, each one alone had to be half
// the argument's size: all three had allocations of their own, as in a transformer's backward,
// whose weight gradients are smaller than the activations they could lie in). With
// donated-outputs-fill=75 still; the next case, two of them (50%), not with 75.
// CHECK-LABEL: func.func @main
// CHECK: call @fill_sum(%arg0) {ember.offsets = array<i64: 0>}
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 1024>}
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 2048>}
// FILL75: arena 1024 bytes for 1 of 4 buffers (1024 bytes without reuse; 3072 bytes in 1 of 1 donated arguments)
// FILL0: arena 1024 bytes for 1 of 4 buffers (1024 bytes without reuse; 3072 bytes in 1 of 1 donated arguments)
func.func private @fill_sum(%a: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<256xf32>
  return %e : tensor<256xf32>
}
func.func private @fill_neg(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 4 buffers (1024 bytes without reuse; 3072 bytes in 1 of 1 donated arguments)}}
func.func @main(%s: tensor<1024xf32>) -> (tensor<256xf32>, tensor<256xf32>, tensor<256xf32>) attributes {ember.donated_args = array<i64: 0>} {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 3]}}
  %0 = func.call @fill_sum(%s) : (tensor<1024xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes in %arg0 at offset 0 (escapes), live [1, 4]}}
  %1 = func.call @fill_neg(%0) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 1024 bytes in %arg0 at offset 1024 (escapes), live [2, 4]}}
  %2 = func.call @fill_neg(%0) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %3: 1024 bytes in %arg0 at offset 2048 (escapes), live [3, 4]}}
  %3 = func.call @fill_neg(%0) : (tensor<256xf32>) -> tensor<256xf32>
  return %1, %2, %3 : tensor<256xf32>, tensor<256xf32>, tensor<256xf32>
}

// -----

// Two quarter-size gradients (50%): in %s by default and with donated-outputs-fill=0; with 75
// both get allocations of their own. One alone (the next case): 25%, only with
// donated-outputs-fill=0 (a CUDA-graphed backward, whose donated arguments the forward's
// graph pool holds anyway).
// CHECK-LABEL: func.func @main
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 1024>}
// FILL75: buffer %1: 1024 bytes, own allocation (escapes), live [1, 3]
// FILL75: buffer %2: 1024 bytes, own allocation (escapes), live [2, 3]
// FILL75: arena 1024 bytes for 1 of 3 buffers (1024 bytes without reuse; 0 bytes in 0 of 1 donated arguments)
// FILL0: arena 1024 bytes for 1 of 3 buffers (1024 bytes without reuse; 2048 bytes in 1 of 1 donated arguments)
func.func private @fill_sum(%a: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<256xf32>
  return %e : tensor<256xf32>
}
func.func private @fill_neg(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 3 buffers (1024 bytes without reuse; 2048 bytes in 1 of 1 donated arguments)}}
func.func @main(%s: tensor<1024xf32>) -> (tensor<256xf32>, tensor<256xf32>) attributes {ember.donated_args = array<i64: 0>} {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 2]}}
  %0 = func.call @fill_sum(%s) : (tensor<1024xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes in %arg0 at offset 0 (escapes), live [1, 3]}}
  %1 = func.call @fill_neg(%0) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 1024 bytes in %arg0 at offset 1024 (escapes), live [2, 3]}}
  %2 = func.call @fill_neg(%0) : (tensor<256xf32>) -> tensor<256xf32>
  return %1, %2 : tensor<256xf32>, tensor<256xf32>
}

// -----

// CHECK-LABEL: func.func @main
// CHECK: call @fill_neg(%{{.*}}) {ember.offsets = array<i64: -1>}
// FILL75: buffer %1: 1024 bytes, own allocation (escapes), live [1, 2]
// FILL0: buffer %1: 1024 bytes in %arg0 at offset 0 (escapes), live [1, 2]
// FILL0: arena 1024 bytes for 1 of 2 buffers (1024 bytes without reuse; 1024 bytes in 1 of 1 donated arguments)
func.func private @fill_sum(%a: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<256xf32>
  return %e : tensor<256xf32>
}
func.func private @fill_neg(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 2 buffers (1024 bytes without reuse; 0 bytes in 0 of 1 donated arguments)}}
func.func @main(%s: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.donated_args = array<i64: 0>} {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 1]}}
  %0 = func.call @fill_sum(%s) : (tensor<1024xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes, own allocation (escapes), live [1, 2]}}
  %1 = func.call @fill_neg(%0) : (tensor<256xf32>) -> tensor<256xf32>
  return %1 : tensor<256xf32>
}

// BAD: option 'donated-outputs-fill' must be an integer in [0, 100]; got 101
