// RUN: ember-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true})'
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true donated-args=false})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=KEEP
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-buffer-reuse{print-plan=true donated-outputs=false})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOOUT

// `ember.donated_args` (a backward's saved activations only it reads: AOTAutograd's
// bw_donated_idxs): once an argument's last reader has run, later buffers may lie in its
// memory (`ember.in_args` names the argument per result, `ember.offsets` the byte offset in
// it), and a pointwise kernel that reads it elementwise at its last use may overwrite it in
// place. The arena keeps only what fits nowhere else. A returned buffer (a gradient) may lie in
// one too when it is at least half the argument's size (donated-outputs-fill; the caller keeps
// the argument's memory while it keeps the buffer: ember-buffer-reuse-donated-fill.mlir); with
// donated-outputs=false it gets its own allocation.

#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func private @add(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["add"]} {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
func.func private @addt(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.kernel = "pointwise", ember.ops = ["transpose", "add"]} {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [#tr, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
// %s0 is read last by op 0 (transposed: not in place); %1 (op 1, transposed too) lies in it.
// %s1 is read elementwise by op 2 at its last use: %2 overwrites it in place. %3 lies in %s0
// again, %1 having died; the returned %4 in %s1, %2 having died. Without donated arguments
// the same buffers need a 2048-byte arena.
// CHECK-LABEL: func.func @main
// CHECK-SAME: ember.arena_bytes = 1024
// CHECK: %[[A:.*]] = call @addt(%arg0, %arg2) {ember.offsets = array<i64: 0>}
// CHECK: %[[B:.*]] = call @addt(%[[A]], %[[A]]) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
// CHECK: %[[C:.*]] = call @add(%arg1, %[[B]]) {ember.in_args = array<i64: 1>, ember.offsets = array<i64: 0>}
// CHECK: %[[D:.*]] = call @addt(%[[C]], %arg2) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
// CHECK: call @add(%[[D]], %arg2) {ember.in_args = array<i64: 1>, ember.offsets = array<i64: 0>}
// NOOUT: remark: ember-buffer-reuse: buffer %4: 1024 bytes, own allocation (escapes), live [4, 5]
// NOOUT: remark: ember-buffer-reuse: arena 1024 bytes for 4 of 5 buffers (4096 bytes without reuse; 3072 bytes in 2 of 2 donated arguments)
// KEEP: remark: ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 1]
// KEEP: remark: ember-buffer-reuse: buffer %1: 1024 bytes at offset 1024, live [1, 2]
// KEEP: remark: ember-buffer-reuse: buffer %2: 1024 bytes at offset 1024 (in place of %1), live [2, 3]
// KEEP: remark: ember-buffer-reuse: arena 2048 bytes for 4 of 5 buffers (4096 bytes without reuse)
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 4 of 5 buffers (4096 bytes without reuse; 4096 bytes in 2 of 2 donated arguments)}}
func.func @main(%s0: tensor<16x16xf32>, %s1: tensor<16x16xf32>, %g: tensor<16x16xf32>) -> tensor<16x16xf32> attributes {ember.donated_args = array<i64: 0, 1>} {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 1]}}
  %0 = func.call @addt(%s0, %g) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes in %arg0 at offset 0, live [1, 2]}}
  %1 = func.call @addt(%0, %0) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 1024 bytes in %arg1 at offset 0 (in place of %arg1), live [2, 3]}}
  %2 = func.call @add(%s1, %1) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %3: 1024 bytes in %arg0 at offset 0, live [3, 4]}}
  %3 = func.call @addt(%2, %g) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %4: 1024 bytes in %arg1 at offset 0 (escapes), live [4, 5]}}
  %4 = func.call @add(%3, %g) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %4 : tensor<16x16xf32>
}

// -----

// Nothing lies in a donated argument that is returned (%s0, through a view), read by a
// library call whose result (which may alias it) is read later (%s1: not even in place
// through that result), or too small (%s2: 512 bytes, the buffers 1024); buffers that fit
// lie side by side in a larger one (%s3, 4096 bytes: %2 and %3, live together). The returned
// %4 lies in %s1, free after op 4.
// CHECK-LABEL: func.func @main
// CHECK-SAME: ember.arena_bytes = 1024
// CHECK: %[[L:.*]] = call @ember_lib_0(%arg1) :
// CHECK: call @opaque(%arg0, %arg2, %arg3) {ember.offsets = array<i64: 0>}
// CHECK: call @opaque1(%{{.*}}) {ember.in_args = array<i64: 3>, ember.offsets = array<i64: 0>}
// CHECK: call @neg(%[[L]]) {ember.in_args = array<i64: 3>, ember.offsets = array<i64: 1024>}
#id1 = affine_map<(d0) -> (d0)>
func.func private @ember_lib_0(tensor<256xf32>) -> tensor<256xf32> attributes {ember.library = "aten.alias.default", ember.params = {}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}
func.func private @neg(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %e = tensor.empty() : tensor<256xf32>
  %r = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%a : tensor<256xf32>) outs(%e : tensor<256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %n = arith.negf %x : f32
    linalg.yield %n : f32
  } -> tensor<256xf32>
  return %r : tensor<256xf32>
}
func.func private @opaque(%a: tensor<256xf32>, %b: tensor<128xf32>, %c: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
func.func private @opaque1(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
func.func private @add1(%a: tensor<256xf32>, %b: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "pointwise", ember.ops = ["add"]} {
  %e = tensor.empty() : tensor<256xf32>
  %r = linalg.generic {indexing_maps = [#id1, #id1, #id1], iterator_types = ["parallel"]} ins(%a, %b : tensor<256xf32>, tensor<256xf32>) outs(%e : tensor<256xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<256xf32>
  return %r : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 3 of 4 buffers (3072 bytes without reuse; 3072 bytes in 2 of 3 donated arguments)}}
func.func @main(%s0: tensor<256xf32>, %s1: tensor<256xf32>, %s2: tensor<128xf32>, %s3: tensor<1024xf32>) -> (tensor<2x128xf32>, tensor<256xf32>) attributes {ember.donated_args = array<i64: 0, 1, 2, 3>} {
  %v = tensor.expand_shape %s0 [[0, 1]] output_shape [2, 128] : tensor<256xf32> into tensor<2x128xf32>
  %a = func.call @ember_lib_0(%s1) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes at offset 0, live [2, 3]}}
  %0 = func.call @opaque(%s0, %s2, %s3) : (tensor<256xf32>, tensor<128xf32>, tensor<1024xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 1024 bytes in %arg3 at offset 0, live [3, 5]}}
  %1 = func.call @opaque1(%0) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %3: 1024 bytes in %arg3 at offset 1024, live [4, 5]}}
  %2 = func.call @neg(%a) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %4: 1024 bytes in %arg1 at offset 0 (escapes), live [5, 6]}}
  %3 = func.call @add1(%1, %2) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  return %v, %3 : tensor<2x128xf32>, tensor<256xf32>
}

// -----

// A returned buffer less than half a free donated argument's size keeps its own allocation.
// CHECK-LABEL: func.func @main
// CHECK: call @neg2(%{{.*}}) {ember.offsets = array<i64: -1>}
func.func private @big(%a: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %e = tensor.empty() : tensor<256xf32>
  return %e : tensor<256xf32>
}
func.func private @neg2(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 2 buffers (1024 bytes without reuse; 0 bytes in 0 of 1 donated arguments)}}
func.func @main(%s: tensor<1024xf32>) -> tensor<256xf32> attributes {ember.donated_args = array<i64: 0>} {
  // expected-remark @+1 {{ember-buffer-reuse: buffer %0: 1024 bytes at offset 0, live [0, 1]}}
  %0 = func.call @big(%s) : (tensor<1024xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes, own allocation (escapes), live [1, 2]}}
  %1 = func.call @neg2(%0) : (tensor<256xf32>) -> tensor<256xf32>
  return %1 : tensor<256xf32>
}

// -----

// A library call reading two donated arguments: its result may alias either, and it has one
// root, so only the first (%s0) stays alive through the result; the other (%s1) is never
// reused ("1 of 1 donated arguments"). %0 starts while %a (maybe %s0) is read: the arena;
// the returned %1 lies in %s0.
// CHECK-LABEL: func.func @main
// CHECK: call @neg3(%{{.*}}) {ember.offsets = array<i64: 0>}
// CHECK: call @neg3(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
func.func private @ember_lib_0(tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32> attributes {ember.library = "aten.add.Tensor", ember.params = {}, ember.results = array<i64: 0>, ember.tensor_args = ["self", "other"]}
func.func private @neg3(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 2 buffers (1024 bytes without reuse; 1024 bytes in 1 of 1 donated arguments)}}
func.func @main(%s0: tensor<256xf32>, %s1: tensor<256xf32>) -> tensor<256xf32> attributes {ember.donated_args = array<i64: 0, 1>} {
  %a = func.call @ember_lib_0(%s0, %s1) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes at offset 0, live [1, 2]}}
  %0 = func.call @neg3(%a) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 1024 bytes in %arg0 at offset 0 (escapes), live [2, 3]}}
  %1 = func.call @neg3(%0) : (tensor<256xf32>) -> tensor<256xf32>
  return %1 : tensor<256xf32>
}

// -----

// A donated argument passed strided (`ember.arg_strides`: a view of a larger buffer, which the
// runtime hands to library calls as it comes) is no row-major buffer of its size: nothing lies
// in it. The returned %1 gets its own allocation; with %s0 row-major (the next case) it lies
// in %s0, free once the library call's result (which may alias it) was read.
// CHECK-LABEL: func.func @main
// CHECK: call @neg4(%{{.*}}) {ember.offsets = array<i64: 0>}
// CHECK: call @neg4(%{{.*}}) {ember.offsets = array<i64: -1>}
func.func private @ember_lib_0(tensor<256xf32>) -> tensor<256xf32> attributes {ember.library = "aten.neg.default", ember.params = {}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}
func.func private @neg4(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 2 buffers (1024 bytes without reuse)}}
func.func @main(%s0: tensor<256xf32>) -> tensor<256xf32> attributes {ember.donated_args = array<i64: 0>, ember.arg_strides = [array<i64: 0, 2>]} {
  %a = func.call @ember_lib_0(%s0) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes at offset 0, live [1, 2]}}
  %0 = func.call @neg4(%a) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 1024 bytes, own allocation (escapes), live [2, 3]}}
  %1 = func.call @neg4(%0) : (tensor<256xf32>) -> tensor<256xf32>
  return %1 : tensor<256xf32>
}

// -----

// CHECK-LABEL: func.func @main
// CHECK: call @neg4(%{{.*}}) {ember.offsets = array<i64: 0>}
// CHECK: call @neg4(%{{.*}}) {ember.in_args = array<i64: 0>, ember.offsets = array<i64: 0>}
func.func private @ember_lib_0(tensor<256xf32>) -> tensor<256xf32> attributes {ember.library = "aten.neg.default", ember.params = {}, ember.results = array<i64: 0>, ember.tensor_args = ["self"]}
func.func private @neg4(%a: tensor<256xf32>) -> tensor<256xf32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  return %a : tensor<256xf32>
}
// expected-remark @+1 {{ember-buffer-reuse: arena 1024 bytes for 1 of 2 buffers (1024 bytes without reuse; 1024 bytes in 1 of 1 donated arguments)}}
func.func @main(%s0: tensor<256xf32>) -> tensor<256xf32> attributes {ember.donated_args = array<i64: 0>} {
  %a = func.call @ember_lib_0(%s0) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %1: 1024 bytes at offset 0, live [1, 2]}}
  %0 = func.call @neg4(%a) : (tensor<256xf32>) -> tensor<256xf32>
  // expected-remark @+1 {{ember-buffer-reuse: buffer %2: 1024 bytes in %arg0 at offset 0 (escapes), live [2, 3]}}
  %1 = func.call @neg4(%0) : (tensor<256xf32>) -> tensor<256xf32>
  return %1 : tensor<256xf32>
}
