// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true donated-outputs-fill=0})'
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{donated-outputs-fill=0})' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=FILL50
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true donated-outputs-fill=25})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=FILL25
// RUN: not ember-opt %s --pass-pipeline='builtin.module(ember-buffer-reuse{donated-outputs-fill=101})' 2>&1 | FileCheck %s --check-prefix=BAD

// Returned buffers (a backward's gradients) in a donated argument (a saved activation): each
// must be at least `donated-outputs-fill` percent of the argument's size (default 50: the
// caller keeps the argument's whole memory as long as it keeps the buffer). 0 (the Triton
// target under CUDA graphs, whose backward's donated arguments are the forward's saved
// activations, held in its graph pool anyway): any size, several side by side. Three
// 1024-byte gradients, each a quarter of the 4096-byte %s, made after its last read (a
// transformer's weight gradients beside the activations they could lie in): with 0 (and 25)
// all three lie in %s, at 50 each gets an allocation of its own.
// CHECK-LABEL: func.func @main
// CHECK: call @fill_sum(%arg0) {ember.offsets = array<i64: 0>}
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 1024>}
// CHECK: call @fill_neg(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 2048>}
// FILL25: arena 1024 bytes for 1 of 4 buffers (1024 bytes without reuse; 3072 bytes in 1 of 1 donated arguments)
// FILL50: buffer %1: 1024 bytes, own allocation (escapes), live [1, 4]
// FILL50: buffer %2: 1024 bytes, own allocation (escapes), live [2, 4]
// FILL50: buffer %3: 1024 bytes, own allocation (escapes), live [3, 4]
// FILL50: arena 1024 bytes for 1 of 4 buffers (1024 bytes without reuse; 0 bytes in 0 of 1 donated arguments)
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

// At 0 the returned buffers choose their donated memory before the backward's intermediates:
// a gradient kept after the call costs the step's peak (a static output of a CUDA-graphed
// backward), an intermediate only the graph pool's arena. Here a 4096-byte intermediate (%1,
// made after %s's last read) and two gradients (%2, %3, made while %1 is alive) all fit in %s
// alone: the gradients lie there and %1 in the arena (GPT-2 fp32's backward at 8x256: 185.0
// -> 243.5 MB of gradients in saved activations, arena 78.1 -> 78.5 MB; BERT fp32 238.9 ->
// 324.5). At 50 (and on main at 0) the larger intermediate took %s first, the gradients their
// own allocations.
// CHECK-LABEL: func.func @main
// CHECK: call @k_big(%{{.*}}) {ember.offsets = array<i64: 0>}
// CHECK: call @k_grad(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
// CHECK: call @k_end(%{{.*}}, %{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 2048>}
// FILL50: buffer %1: 4096 bytes in %arg0 at offset 0, live [1, 3]
// FILL50: buffer %2: 2048 bytes, own allocation (escapes), live [2, 4]
func.func private @k_sum(%a: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<256xf32>
  return %e : tensor<256xf32>
}
func.func private @k_big(%a: tensor<256xf32>) -> tensor<1024xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<1024xf32>
  return %e : tensor<1024xf32>
}
func.func private @k_grad(%a: tensor<1024xf32>) -> tensor<512xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<512xf32>
  return %e : tensor<512xf32>
}
func.func private @k_end(%a: tensor<1024xf32>, %b: tensor<512xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<256xf32>
  return %e : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 5120 bytes for 2 of 4 buffers (5120 bytes without reuse; 3072 bytes in 1 of 1 donated arguments)}}
func.func @main(%s: tensor<1024xf32>) -> (tensor<512xf32>, tensor<256xf32>) attributes {ember.donated_args = array<i64: 0>} {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes at offset 4096, live [0, 1]}}
  %0 = func.call @k_sum(%s) : (tensor<1024xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 4096 bytes at offset 0, live [1, 3]}}
  %1 = func.call @k_big(%0) : (tensor<256xf32>) -> tensor<1024xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 2048 bytes in %arg0 at offset 0 (escapes), live [2, 4]}}
  %2 = func.call @k_grad(%1) : (tensor<1024xf32>) -> tensor<512xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %3: 1024 bytes in %arg0 at offset 2048 (escapes), live [3, 4]}}
  %3 = func.call @k_end(%1, %2) : (tensor<1024xf32>, tensor<512xf32>) -> tensor<256xf32>
  return %2, %3 : tensor<512xf32>, tensor<256xf32>
}

// -----

// BAD: option 'donated-outputs-fill' must be an integer in [0, 100]; got 101
