// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-matmul-template)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-matmul-template{narrow=false})' | FileCheck %s --check-prefix=EXACT
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-matmul-template,ember-lower-to-triton)' --emit-source | FileCheck %s --check-prefix=SRC
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-matmul-template,ember-lower-to-triton{matmul-choice=library max-autotune=true})' --emit-source | FileCheck %s --check-prefix=LIB

// An f32 linear layer (mm reading the weight transposed) whose pointwise consumer adds the bias
// and applies relu: one matmul kernel taking x, w after its own argument (the bias); its body
// is the product (transpose, zero fill, matmul) then the consumer's generic reading it.
// CHECK-LABEL: func.func @linear_relu
// CHECK-NOT:     ember.extern
// CHECK:         %[[R:.*]] = call @ember_mm_add_relu_0(%arg2, %arg0, %arg1) : (tensor<70xf32>, tensor<70x40xf32>, tensor<50x40xf32>) -> tensor<70x50xf32>
// CHECK-NEXT:    return %[[R]]
// CHECK-LABEL: func.func private @ember_mm_add_relu_0
// CHECK-SAME:    attributes {ember.kernel = "matmul", ember.ops = ["mm", "add", "relu"]}
// CHECK:         %[[T:.*]] = linalg.transpose ins(%arg2 : tensor<50x40xf32>) {{.*}} permutation = [1, 0]
// CHECK:         %[[F:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<70x50xf32>)
// CHECK:         %[[MM:.*]] = linalg.matmul ins(%arg1, %[[T]] : tensor<70x40xf32>, tensor<40x50xf32>) outs(%[[F]] : tensor<70x50xf32>)
// CHECK:         linalg.generic {{.*}} ins(%[[MM]], %arg0 : tensor<70x50xf32>, tensor<70xf32>)
// CHECK:         arith.maximumf
// The template: a tl.dot loop, the epilogue on the accumulator, one store; the library call
// followed by the epilogue kernel; the launcher choosing between them.
// SRC-LABEL: // ----- kernel @ember_mm_add_relu_0
// SRC:       def ember_mm_add_relu_0_epilogue_kernel(in0, in1, in2, in3, out0, xnumel, XBLOCK: tl.constexpr):
// SRC:       def ember_mm_add_relu_0_mm_kernel(in0, in1, in2, out0, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, ALLOW_TF32: tl.constexpr):
// SRC:       offs_am = tl.max_contiguous(tl.multiple_of(offs_m % 70, BLOCK_M), BLOCK_M)
// SRC-NEXT:  offs_bn = tl.max_contiguous(tl.multiple_of(offs_n % 50, BLOCK_N), BLOCK_N)
// SRC:       b_ptrs = in2 + bid * 2000 + offs_k[:, None] * 1 + offs_bn[None, :] * 40
// SRC:       for k0 in range(0, 40, BLOCK_K):
// SRC-NEXT:      if 40 % BLOCK_K == 0:
// SRC-NEXT:          a = tl.load(a_ptrs)
// SRC:       acc = tl.dot(a, b, acc, input_precision="tf32")
// SRC:       acc = tl.dot(a, b, acc, input_precision="ieee")
// SRC:       xmask = (offs_m[:, None] < 70) & (offs_n[None, :] < 50)
// SRC:       tl.load(in0 + {{.*}}, mask=xmask
// SRC:       (acc + x{{[0-9]+}})
// SRC:       tl.store(out0 + {{.*}}, mask=xmask)
// SRC:       def ember_mm_add_relu_0(*tensors, _choice=None):
// SRC-NEXT:      choice = _choice or _ember_matmul_choose('ember_mm_add_relu_0', 'auto', ember_mm_add_relu_0, tensors)
// SRC-NEXT:      if choice != "library":
// SRC-NEXT:          ember_mm_add_relu_0_mm_kernel[{{.*}}](*tensors, ALLOW_TF32=_ember_allow_tf32(), **_EMBER_LAUNCH)
// SRC-NEXT:      if choice != "template":
// SRC-NEXT:          a = tensors[1]
// SRC-NEXT:          b = tensors[2].transpose(-1, -2)
// SRC-NEXT:          mm = torch.empty((70, 50), dtype=torch.float32, device="meta" if choice == "probe" else a.device)
// SRC-NEXT:          if choice != "probe":
// SRC-NEXT:              _ember_mm_into(a, b, mm)
// 3,500 elements are launch-bound (triton_blocks.LAUNCH_BOUND): one configuration, no autotuning
// SRC-NEXT:          ember_mm_add_relu_0_epilogue_kernel[{{.*}}](*tensors[:3], mm, *tensors[3:], 3500, XBLOCK=512, num_warps=4, **_EMBER_LAUNCH)
// LIB-LABEL: // ----- kernel @ember_mm_add_relu_0
// LIB:       @_ember_autotune(configs=[triton.Config({'BLOCK_M': 64, 'BLOCK_N': 64, 'BLOCK_K': 32, 'GROUP_M': 8}, num_warps=4, num_stages=3), {{.*}}'BLOCK_M': 32, 'BLOCK_N': 64
// LIB:       _ember_matmul_choose('ember_mm_add_relu_0', 'library', ember_mm_add_relu_0, tensors)
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
module {
  func.func @linear_relu(%x: tensor<70x40xf32>, %w: tensor<50x40xf32>, %b: tensor<70xf32>) -> tensor<70x50xf32> {
    %0 = "ember.extern"(%x, %w) {callee = "aten.mm", params = {transpose_b = true}} : (tensor<70x40xf32>, tensor<50x40xf32>) -> tensor<70x50xf32>
    %1 = call @ember_fused_add_relu_0(%0, %b) : (tensor<70x50xf32>, tensor<70xf32>) -> tensor<70x50xf32>
    return %1 : tensor<70x50xf32>
  }
  func.func private @ember_fused_add_relu_0(%arg0: tensor<70x50xf32>, %arg1: tensor<70xf32>) -> tensor<70x50xf32> attributes {ember.kernel = "pointwise", ember.ops = ["add", "relu"]} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<70x50xf32>
    %1 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<70x50xf32>, tensor<70xf32>) outs(%0 : tensor<70x50xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %2 = arith.addf %in, %in_0 : f32
      %3 = arith.maximumf %2, %cst : f32
      linalg.yield %3 : f32
    } -> tensor<70x50xf32>
    return %1 : tensor<70x50xf32>
  }
}

// -----

// bf16 addmm (eager's call, bias in cuBLAS's epilogue) whose result a residual add reads
// through an expand_shape: the kernel's body rebuilds the call as an f32 matmul plus a generic
// that adds the widened bias and rounds to bf16 once; with narrow=false it stays the library
// call (cuBLAS's order of summation is what matches eager bit for bit).
// CHECK-LABEL: func.func @addmm_bf16_residual
// CHECK:         call @ember_mm_add_0(%arg3, %arg0, %arg1, %arg2) : (tensor<3x30x50xbf16>, tensor<90x40xbf16>, tensor<40x50xbf16>, tensor<50xbf16>) -> tensor<3x30x50xbf16>
// CHECK-LABEL: func.func private @ember_mm_add_0
// CHECK-SAME:    ember.kernel = "matmul"
// CHECK:         %[[MM:.*]] = linalg.matmul ins(%arg1, %arg2 : tensor<90x40xbf16>, tensor<40x50xbf16>) outs(%{{.*}} : tensor<90x50xf32>)
// CHECK:         %[[P:.*]] = linalg.generic {{.*}} ins(%[[MM]], %arg3 : tensor<90x50xf32>, tensor<50xbf16>)
// CHECK:           arith.extf
// CHECK:           arith.addf
// CHECK:           arith.truncf {{.*}} f32 to bf16
// CHECK:         tensor.expand_shape %[[P]]
// EXACT-LABEL: func.func @addmm_bf16_residual
// EXACT:         "ember.extern"(%arg2, %arg0, %arg1) {callee = "aten.addmm"
// EXACT:         call @ember_fused_add_0(
// SRC-LABEL: // ----- kernel @ember_mm_add_0
// SRC:       def ember_mm_add_0_mm_kernel(in0, in1, in2, in3, out0, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
// SRC:       acc = tl.dot(a, b, acc)
// SRC:       acc = acc + _ember_from_bf16(tl.load(in3 + offs_n[None, :], mask=xmask, other=0))
// SRC-NEXT:  acc = _ember_round_bf16(acc)
// SRC:       tl.store(out0 + {{.*}}, _ember_to_bf16({{.*}}), mask=xmask)
// SRC:       mm = torch.empty((90, 50), dtype=torch.bfloat16,
// SRC:       _ember_mm_into(a, b, mm, tensors[3])
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @addmm_bf16_residual(%x: tensor<90x40xbf16>, %w: tensor<40x50xbf16>, %b: tensor<50xbf16>, %r: tensor<3x30x50xbf16>) -> tensor<3x30x50xbf16> {
    %0 = "ember.extern"(%b, %x, %w) {callee = "aten.addmm", params = {}} : (tensor<50xbf16>, tensor<90x40xbf16>, tensor<40x50xbf16>) -> tensor<90x50xbf16>
    %1 = call @ember_fused_add_0(%0, %r) : (tensor<90x50xbf16>, tensor<3x30x50xbf16>) -> tensor<3x30x50xbf16>
    return %1 : tensor<3x30x50xbf16>
  }
  func.func private @ember_fused_add_0(%arg0: tensor<90x50xbf16>, %arg1: tensor<3x30x50xbf16>) -> tensor<3x30x50xbf16> attributes {ember.kernel = "pointwise", ember.ops = ["add"]} {
    %expanded = tensor.expand_shape %arg0 [[0, 1], [2]] output_shape [3, 30, 50] : tensor<90x50xbf16> into tensor<3x30x50xbf16>
    %0 = tensor.empty() : tensor<3x30x50xbf16>
    %1 = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded, %arg1 : tensor<3x30x50xbf16>, tensor<3x30x50xbf16>) outs(%0 : tensor<3x30x50xbf16>) {
    ^bb0(%in: bf16, %in_0: bf16, %out: bf16):
      %2 = arith.addf %in, %in_0 : bf16
      linalg.yield %2 : bf16
    } -> tensor<3x30x50xbf16>
    return %1 : tensor<3x30x50xbf16>
  }
}

// -----

// A batched product whose consumer scales it: a batch_matmul kernel, the batch on the grid's
// second axis.
// CHECK-LABEL: func.func private @ember_mm_mul_0
// CHECK:         linalg.batch_matmul ins(%arg1, %arg2 : tensor<3x33x40xf32>, tensor<3x40x20xf32>)
// SRC-LABEL: // ----- kernel @ember_mm_mul_0
// SRC:       bid = tl.program_id(1)
// SRC:       a_ptrs = in1 + bid * 1320 + offs_am[:, None] * 40 + offs_k[None, :] * 1
// SRC:       xrow = bid * 33 + offs_m[:, None]
// SRC:       (triton.cdiv(33, meta['BLOCK_M']) * triton.cdiv(20, meta['BLOCK_N']), 3)
#id3b = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @bmm_scale(%a: tensor<3x33x40xf32>, %b: tensor<3x40x20xf32>, %s: tensor<3x33x20xf32>) -> tensor<3x33x20xf32> {
    %0 = "ember.extern"(%a, %b) {callee = "aten.bmm", params = {}} : (tensor<3x33x40xf32>, tensor<3x40x20xf32>) -> tensor<3x33x20xf32>
    %1 = call @ember_fused_mul_0(%s, %0) : (tensor<3x33x20xf32>, tensor<3x33x20xf32>) -> tensor<3x33x20xf32>
    return %1 : tensor<3x33x20xf32>
  }
  func.func private @ember_fused_mul_0(%arg0: tensor<3x33x20xf32>, %arg1: tensor<3x33x20xf32>) -> tensor<3x33x20xf32> attributes {ember.kernel = "pointwise", ember.ops = ["mul"]} {
    %0 = tensor.empty() : tensor<3x33x20xf32>
    %1 = linalg.generic {indexing_maps = [#id3b, #id3b, #id3b], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0, %arg1 : tensor<3x33x20xf32>, tensor<3x33x20xf32>) outs(%0 : tensor<3x33x20xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %2 = arith.mulf %in, %in_0 : f32
      linalg.yield %2 : f32
    } -> tensor<3x33x20xf32>
    return %1 : tensor<3x33x20xf32>
  }
}

// -----

// Left alone: the product is also returned (two uses), and a consumer that reads the product
// transposed (it would read another tile than the one it writes).
// CHECK-LABEL: func.func @not_fused
// CHECK:         %[[A:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm"
// CHECK:         call @ember_fused_neg_0(%[[A]])
// CHECK:         %[[B:.*]] = "ember.extern"(%arg0, %arg1) {callee = "aten.mm"
// CHECK:         call @ember_fused_transpose_1(%[[B]])
// CHECK-NOT:     ember.kernel = "matmul"
#idn = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
module {
  func.func @not_fused(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
    %0 = "ember.extern"(%x, %w) {callee = "aten.mm", params = {}} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = call @ember_fused_neg_0(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %2 = "ember.extern"(%x, %w) {callee = "aten.mm", params = {}} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %3 = call @ember_fused_transpose_1(%2) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0, %1, %3 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
  }
  func.func private @ember_fused_neg_0(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
    %0 = tensor.empty() : tensor<8x8xf32>
    %1 = linalg.generic {indexing_maps = [#idn, #idn], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<8x8xf32>) outs(%0 : tensor<8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %2 = arith.negf %in : f32
      linalg.yield %2 : f32
    } -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
  func.func private @ember_fused_transpose_1(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> attributes {ember.kernel = "pointwise", ember.ops = ["transpose"]} {
    %0 = tensor.empty() : tensor<8x8xf32>
    %1 = linalg.generic {indexing_maps = [#tr, #idn], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<8x8xf32>) outs(%0 : tensor<8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %2 = arith.negf %in : f32
      linalg.yield %2 : f32
    } -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}
