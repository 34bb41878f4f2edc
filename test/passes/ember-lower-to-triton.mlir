// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-lower-to-triton)' | FileCheck %s
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-lower-to-triton{max-rblock=16 autotune=false})' | FileCheck %s --check-prefix=LOOP
// RUN: ember-opt %s --split-input-file --pass-pipeline='builtin.module(ember-lower-to-triton{max-autotune=true})' | FileCheck %s --check-prefix=MAX

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK: ember.prelude = "import torch
// GPU builds call eager's math (libdevice/ocml, IEEE division), the interpreter NumPy's:
// CHECK-SAME: def _ember_erf(x):\0A        return tl.math.erf(x)
// CHECK-SAME: def _ember_div(a, b):\0A        return a / b
// CHECK-SAME: def _ember_erf(x):\0A        return libdevice.erf(x)
// CHECK-SAME: def _ember_div(a, b):\0A        return tl.math.div_rn(a, b)
// CHECK-SAME: ember.target = "triton"
// torch.compile(mode="max-autotune"): the same first configuration, more tried after it.
// MAX-LABEL: func.func private @ember_fused_add_gelu_0
// MAX-SAME: @_ember_autotune(configs=[triton.Config({'XBLOCK': 1024}, num_warps=4), {{.*}}triton.Config({'XBLOCK': 4096}, num_warps=8), {{.*}}triton.Config({'XBLOCK': 128}, num_warps=4)]
// CHECK-LABEL: func.func private @ember_fused_add_gelu_0
// CHECK-SAME: ember.source = "{{.*}}@triton.jit\0Adef ember_fused_add_gelu_0_kernel(in0, in1, out0, xnumel, XBLOCK: tl.constexpr)
// CHECK-SAME: tl.program_id(0)
// CHECK-SAME: mask=xmask
// CHECK-SAME: tl.math.erf(
// CHECK-SAME: def ember_fused_add_gelu_0(*tensors)
// CHECK-SAME: ember.symbol = "ember_fused_add_gelu_0"
func.func private @ember_fused_add_gelu_0(%arg0: tensor<8x32xf32>, %arg1: tensor<32xf32>) -> tensor<8x32xf32>
    attributes {ember.kernel = "pointwise", ember.ops = ["add", "gelu"]} {
  %half = arith.constant 0.5 : f32
  %one = arith.constant 1.0 : f32
  %rs2 = arith.constant 0.707106769 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %r = linalg.generic {indexing_maps = [#id, affine_map<(d0, d1) -> (d1)>, #id], iterator_types = ["parallel", "parallel"]}
      ins(%arg0, %arg1 : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %t = arith.mulf %s, %rs2 : f32
    %f = math.erf %t : f32
    %g = arith.addf %f, %one : f32
    %h = arith.mulf %g, %half : f32
    %y = arith.mulf %s, %h : f32
    linalg.yield %y : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// Softmax: both reductions and the broadcast consumer in one program, the row in registers.
// The max propagates NaN (arith.maximumf, as eager's amax): a reduce with the prelude's
// branch-free combiner, not tl.max (which drops NaN).
// A persistent reduction has one configuration; max-autotune times other warps, fewer rows and
// more (up to 4096 elements a program). A short row (up to 1024) takes 1024 elements a
// program in 8 warps, 4 a thread: 16 rows of 64 here, not 64 rows (16 elements a thread,
// whose registers left one program an SM in swin_t's attention softmax).
// MAX-LABEL: func.func private @ember_fused_softmax_0
// MAX-SAME: @_ember_autotune(configs=[triton.Config({'XBLOCK': 16, 'RBLOCK': 64}, num_warps=8), triton.Config({'XBLOCK': 16, 'RBLOCK': 64}, num_warps=16), {{.*}}triton.Config({'XBLOCK': 64, 'RBLOCK': 64}, num_warps=8), triton.Config({'XBLOCK': 4, 'RBLOCK': 64}, num_warps=4)]
// CHECK-LABEL: func.func private @ember_fused_softmax_0
// CHECK-SAME: RBLOCK: tl.constexpr
// CHECK-SAME: _ember_nanmax_reduce(tl.where(xmask & rmask, x{{[0-9]+}}, float(\22-inf\22)), 1)
// CHECK-SAME: tl.exp(
// CHECK-SAME: tl.sum(
// CHECK-SAME: _ember_div(t{{[0-9]+}}, red
// CHECK-SAME: tl.store(out0
// CHECK-SAME: XBLOCK=16, RBLOCK=64, num_warps=8
// LOOP-LABEL: func.func private @ember_fused_softmax_0
// LOOP-SAME: for roff in range(0, rnumel, RBLOCK):
// LOOP-SAME: [[ACC:acc[0-9]+]] = _ember_nanmax([[ACC]], tl.where(
// LOOP-SAME: _ember_nanmax_reduce([[ACC]], 1)
// LOOP-SAME: for roff in range(0, rnumel, RBLOCK):
// LOOP-SAME: tl.sum(
func.func private @ember_fused_softmax_0(%arg0: tensor<4x64xf32>) -> tensor<4x64xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["softmax"]} {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4xf32>
  %m0 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%arg0 : tensor<4x64xf32>) outs(%m0 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %x = arith.maximumf %a, %o : f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x64xf32>
  %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%arg0, %m : tensor<4x64xf32>, tensor<4xf32>) outs(%e2 : tensor<4x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    %x = math.exp %d : f32
    linalg.yield %x : f32
  } -> tensor<4x64xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%ex : tensor<4x64xf32>) outs(%s0 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %x = arith.addf %a, %o : f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%ex, %s : tensor<4x64xf32>, tensor<4xf32>) outs(%e2 : tensor<4x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %x = arith.divf %a, %b : f32
    linalg.yield %x : f32
  } -> tensor<4x64xf32>
  return %r : tensor<4x64xf32>
}

// -----

// Embedding: the row index is loaded, then used as an address (indirect load); bf16 math in fp32.
// CHECK-LABEL: func.func private @ember_fused_gather_0
// CHECK-SAME: tl.load(in0 +
// CHECK-SAME: _ember_from_bf16(tl.load(in1 + ((ix{{[0-9]+}} * 16)
// CHECK-SAME: tl.store(out0 + {{.*}}, _ember_to_bf16(
func.func private @ember_fused_gather_0(%arg0: tensor<4x6xi64>, %arg1: tensor<10x16xbf16>) -> tensor<4x6x16xbf16>
    attributes {ember.kernel = "pointwise", ember.ops = ["gather"]} {
  %e = tensor.empty() : tensor<4x6x16xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%arg0 : tensor<4x6xi64>) outs(%e : tensor<4x6x16xbf16>) {
  ^bb0(%i: i64, %o: bf16):
    %ii = arith.index_cast %i : i64 to index
    %j = linalg.index 2 : index
    %v = tensor.extract %arg1[%ii, %j] : tensor<10x16xbf16>
    %w = arith.addf %v, %v : bf16
    linalg.yield %w : bf16
  } -> tensor<4x6x16xbf16>
  return %r : tensor<4x6x16xbf16>
}


// -----

// Full reduction (no outer space): one row (XBLOCK=1), and the store's pointer is widened to the
// tile, because tl.store broadcasts value and mask to the pointer and never the pointer itself.
// CHECK-LABEL: func.func private @ember_fused_sum_0
// CHECK-SAME: tl.sum(
// CHECK-SAME: tl.store(out0 + 0 + tl.zeros([XBLOCK, 1], tl.int32),
// CHECK-SAME: XBLOCK=1, RBLOCK=128
// LOOP-LABEL: func.func private @ember_fused_sum_0
// LOOP-SAME: for roff in range(0, rnumel, RBLOCK):
// LOOP-SAME: tl.store(out0 + 0 + tl.zeros([XBLOCK, 1], tl.int32),
func.func private @ember_fused_sum_0(%arg0: tensor<4x30xf32>) -> tensor<f32>
    attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> ()>], iterator_types = ["reduction", "reduction"]}
      ins(%arg0 : tensor<4x30xf32>) outs(%s0 : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %x = arith.addf %a, %o : f32
    linalg.yield %x : f32
  } -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Two kernels identical but for their names (a repeated transformer layer): the second carries
// no source and launches the first's code, so it is JIT-compiled and autotuned once. A third that
// differs (another constant) keeps its own.
// CHECK-LABEL: func.func private @ember_fused_mul_0
// CHECK-SAME: ember.source = "{{.*}}def ember_fused_mul_0_kernel(
// CHECK-SAME: ember.symbol = "ember_fused_mul_0"
// CHECK-LABEL: func.func private @ember_fused_mul_1
// CHECK-SAME: ember.source = "", ember.symbol = "ember_fused_mul_0"
// CHECK-LABEL: func.func private @ember_fused_mul_2
// CHECK-SAME: ember.source = "{{.*}}def ember_fused_mul_2_kernel(
// CHECK-SAME: ember.symbol = "ember_fused_mul_2"
#m = affine_map<(d0) -> (d0)>
module {
  func.func private @ember_fused_mul_0(%a: tensor<64xf32>) -> tensor<64xf32> attributes {ember.kernel = "pointwise"} {
    %c = arith.constant 3.0 : f32
    %e = tensor.empty() : tensor<64xf32>
    %r = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%x: f32, %o: f32):
      %y = arith.mulf %x, %c : f32
      linalg.yield %y : f32
    } -> tensor<64xf32>
    return %r : tensor<64xf32>
  }
  func.func private @ember_fused_mul_1(%a: tensor<64xf32>) -> tensor<64xf32> attributes {ember.kernel = "pointwise"} {
    %c = arith.constant 3.0 : f32
    %e = tensor.empty() : tensor<64xf32>
    %r = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%x: f32, %o: f32):
      %y = arith.mulf %x, %c : f32
      linalg.yield %y : f32
    } -> tensor<64xf32>
    return %r : tensor<64xf32>
  }
  func.func private @ember_fused_mul_2(%a: tensor<64xf32>) -> tensor<64xf32> attributes {ember.kernel = "pointwise"} {
    %c = arith.constant 4.0 : f32
    %e = tensor.empty() : tensor<64xf32>
    %r = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%x: f32, %o: f32):
      %y = arith.mulf %x, %c : f32
      linalg.yield %y : f32
    } -> tensor<64xf32>
    return %r : tensor<64xf32>
  }
}

// -----

// bf16 between ops: the first generic's result is rounded where the second reads it (eager
// rounds every op's result), the Python scalar stays unrounded (eager's opmath), and the store
// rounds to nearest even (_ember_to_bf16: under the interpreter, whose own cast truncates and
// flushes subnormals, by the bits).
// CHECK-LABEL: func.func private @ember_fused_mul_add_0
// CHECK-SAME: x1 * 1.7
// CHECK-SAME: = _ember_round_bf16(
// CHECK-SAME: + 0.3
// CHECK-SAME: tl.store(out0 + {{.*}}, _ember_to_bf16({{.*}}), mask=
#b1 = affine_map<(d0) -> (d0)>
module {
  func.func private @ember_fused_mul_add_0(%a: tensor<64xbf16>) -> tensor<64xbf16> attributes {ember.kernel = "pointwise"} {
    %c17 = arith.constant 1.700000e+00 : f64
    %c03 = arith.constant 3.000000e-01 : f64
    %e = tensor.empty() : tensor<64xbf16>
    %m = linalg.generic {indexing_maps = [#b1, #b1], iterator_types = ["parallel"]} ins(%a : tensor<64xbf16>) outs(%e : tensor<64xbf16>) {
    ^bb0(%x: bf16, %o: bf16):
      %s = arith.truncf %c17 : f64 to bf16
      %y = arith.mulf %x, %s : bf16
      linalg.yield %y : bf16
    } -> tensor<64xbf16>
    %r = linalg.generic {indexing_maps = [#b1, #b1], iterator_types = ["parallel"]} ins(%m : tensor<64xbf16>) outs(%e : tensor<64xbf16>) {
    ^bb0(%x: bf16, %o: bf16):
      %s = arith.truncf %c03 : f64 to bf16
      %y = arith.addf %x, %s : bf16
      linalg.yield %y : bf16
    } -> tensor<64xbf16>
    return %r : tensor<64xbf16>
  }
}

// -----

// A kernel with bf16 operands calls eager's math (the prelude's _ember_* helpers: libdevice and
// IEEE division on a GPU) so that its rounded result is eager's; f32 kernels above use Triton's.
// CHECK-LABEL: func.func private @ember_fused_sigmoid_0
// CHECK-SAME: _ember_exp(
// CHECK-SAME: _ember_div(1.0,
// CHECK-SAME: _ember_to_bf16(
func.func private @ember_fused_sigmoid_0(%arg0: tensor<64xbf16>) -> tensor<64xbf16>
    attributes {ember.kernel = "pointwise", ember.ops = ["sigmoid"]} {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<64xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%arg0 : tensor<64xbf16>) outs(%e : tensor<64xbf16>) {
  ^bb0(%a: bf16, %o: bf16):
    %x = arith.extf %a : bf16 to f32
    %n = arith.negf %x : f32
    %ex = math.exp %n : f32
    %d = arith.addf %ex, %one : f32
    %s = arith.divf %one, %d : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<64xbf16>
  return %r : tensor<64xbf16>
}

// -----

// The prelude's NaN-propagating combiners are selects (branch-free), and kernels that check
// indices launch with debug (device-side asserts) but without Triton's overflow assertions.
// CHECK: ember.prelude = "import torch
// CHECK-SAME: _EMBER_LAUNCH_CHECKED.update(debug=True, sanitize_overflow=False)
// CHECK-SAME: def _ember_nanmax(a, b):\0A    return tl.where((a > b) | (a != a), a, b)
// CHECK-SAME: def _ember_nanmin(a, b):\0A    return tl.where((a < b) | (a != a), a, b)

// `cmpf ugt` is true for NaN: Python's `>` alone is false for it. `one` is ordered: false for
// NaN, where Python's `!=` is true. relu (torch-mlir's `ugt(x, 0) ? x : 0`) prints with the
// compare turned around, `x < 0 ? 0 : x`, so that relu(-0.0) is -0.0 as eager's (fuzz seed 29
// index 1110); NaN is kept either way.
// CHECK-LABEL: func.func private @nan_compares
// CHECK-SAME: [[C:t[0-9]+]] = ([[X:x[0-9]+]] < 0.0)
// CHECK-SAME: tl.where(([[C]]) != 0, 0.0, [[X]])
// CHECK-SAME: (([[X]] != 1.0) & ([[X]] == [[X]]) & (1.0 == 1.0))
// CHECK-SAME: (([[X]] > 1.0) | ([[X]] != [[X]]) | (1.0 != 1.0))
func.func private @nan_compares(%arg0: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xi1>, tensor<64xi1>)
    attributes {ember.kernel = "pointwise", ember.ops = ["relu"]} {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %eb = tensor.empty() : tensor<64xi1>
  %r:3 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%arg0 : tensor<64xf32>) outs(%e, %eb, %eb : tensor<64xf32>, tensor<64xi1>, tensor<64xi1>) {
  ^bb0(%a: f32, %o: f32, %ob: i1, %ob2: i1):
    %c = arith.cmpf ugt, %a, %zero : f32
    %s = arith.select %c, %a, %zero : f32
    %n = arith.cmpf one, %a, %one : f32
    %u = arith.cmpf ugt, %a, %one : f32
    linalg.yield %s, %n, %u : f32, i1, i1
  } -> (tensor<64xf32>, tensor<64xi1>, tensor<64xi1>)
  return %r#0, %r#1, %r#2 : tensor<64xf32>, tensor<64xi1>, tensor<64xi1>
}

// -----

// Signed zeros that triton 3.6 loses (compiled and interpreted): its zero constants are all
// +0.0 and its float unary minus is `0 - x`. Negation prints as `x * -1.0`, a -0.0 constant as
// the prelude's `_ember_neg_zero()` (fuzz seed 41: floor division's copysign(0, a / b)).
// CHECK: ember.prelude = "import torch
// CHECK-SAME: def _ember_neg_zero():
// CHECK-SAME: return tl.full([], -2147483648, tl.int32).to(tl.float32, bitcast=True)
// CHECK-LABEL: func.func private @signed_zeros
// CHECK-SAME: [[N:t[0-9]+]] = ([[X:x[0-9]+]] * -1.0)
// CHECK-SAME: tl.where(([[C:t[0-9]+]]) != 0, _ember_neg_zero(), [[N]])
// CHECK-NOT: (-x
func.func private @signed_zeros(%arg0: tensor<64xf32>) -> tensor<64xf32>
    attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  %nz = arith.constant -0.0 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%arg0 : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    %c = arith.cmpf oeq, %n, %zero : f32
    %s = arith.select %c, %nz, %n : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}

// -----

// Float remainder is IEEE fmod through the prelude's `_ember_fmod` (libdevice's fmod compiled,
// exact as eager's fmodf), never Triton's float `%` (a - trunc(a / b) * b on a GPU: off where the
// quotient rounds, NaN where it overflows). A literal operand becomes a block of the other's
// shape (`x - 0.0` keeps -0.0); two literals fold (fmod(7, 2.5) = 2), with IEEE results for a
// zero divisor (7 / 0 = inf, fmod(7, 0) = NaN: a division of two literals was left to Python's
// `/`, ZeroDivisionError under the interpreter, fuzz seed 51 index 618).
// CHECK: ember.prelude = "import torch
// CHECK-SAME: def _ember_fmod(a, b):
// CHECK-SAME: libdevice.fmod(x, y)
// CHECK-LABEL: func.func private @float_remainder
// CHECK-SAME: t{{[0-9]+}} = 2.0
// CHECK-SAME: t{{[0-9]+}} = float(\22inf\22)
// CHECK-SAME: t{{[0-9]+}} = float(\22nan\22)
// CHECK-SAME: _ember_fmod([[X:x[0-9]+]], [[Y:x[0-9]+]])
// CHECK-SAME: _ember_fmod([[X]], (0.75 - tl.zeros_like([[X]])))
// CHECK-NOT: {{x[0-9]+}} % {{.*}}
func.func private @float_remainder(%arg0: tensor<64xf32>, %arg1: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
    attributes {ember.kernel = "pointwise", ember.ops = ["remainder"]} {
  %c = arith.constant 0.75 : f32
  %seven = arith.constant 7.0 : f32
  %half = arith.constant 2.5 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %r:5 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%arg0, %arg1 : tensor<64xf32>, tensor<64xf32>) outs(%e, %e, %e, %e, %e : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32, %o2: f32, %o3: f32, %o4: f32, %o5: f32):
    %m = arith.remf %a, %b : f32
    %n = arith.remf %a, %c : f32
    %k = arith.remf %seven, %half : f32
    %i = arith.divf %seven, %zero : f32
    %z = arith.remf %seven, %zero : f32
    linalg.yield %m, %n, %k, %i, %z : f32, f32, f32, f32, f32
  } -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return %r#0, %r#1, %r#2, %r#3, %r#4 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
}

// -----

// rsqrt and exp2 through the prelude's libdevice helpers (rsqrtf, exp2f, linked without
// flush-to-zero as eager's kernels): tl.rsqrt / tl.exp2 compile to the .ftz instructions on
// sm_90, which flush subnormals (rsqrt(1e-40) = inf where eager's is 1e20).
// CHECK: ember.prelude = "import torch
// CHECK-SAME: def _ember_rsqrt(x):\0A        return libdevice.rsqrt(x)
// CHECK-SAME: def _ember_exp2(x):\0A        return libdevice.exp2(x)
// CHECK-LABEL: func.func private @rsqrt_exp2
// CHECK-SAME: _ember_rsqrt({{x[0-9]+}})
// CHECK-SAME: _ember_exp2({{x[0-9]+}})
// CHECK-NOT: = tl.rsqrt(
func.func private @rsqrt_exp2(%arg0: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>)
    attributes {ember.kernel = "pointwise", ember.ops = ["rsqrt"]} {
  %e = tensor.empty() : tensor<64xf32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%arg0 : tensor<64xf32>) outs(%e, %e : tensor<64xf32>, tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32, %o2: f32):
    %m = math.rsqrt %a : f32
    %n = math.exp2 %a : f32
    linalg.yield %m, %n : f32, f32
  } -> (tensor<64xf32>, tensor<64xf32>)
  return %r#0, %r#1 : tensor<64xf32>, tensor<64xf32>
}

// -----

// atan2 with a literal operand: the literal is made a block of the other operand's shape (its
// helper broadcasts two blocks; a literal NaN there failed at run time: fuzz seed 57 index 844).
// CHECK-LABEL: func.func private @atan2_literal
// CHECK-SAME: _ember_atan2((float(\22nan\22) - tl.zeros_like([[X:x[0-9]+]])), [[X]])
// CHECK-SAME: _ember_atan2([[X]], (2.0 - tl.zeros_like([[X]])))
func.func private @atan2_literal(%arg0: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>)
    attributes {ember.kernel = "pointwise", ember.ops = ["atan2"]} {
  %nan = arith.constant 0x7FC00000 : f32
  %two = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%arg0 : tensor<64xf32>) outs(%e, %e : tensor<64xf32>, tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32, %o2: f32):
    %m = math.atan2 %nan, %a : f32
    %n = math.atan2 %a, %two : f32
    linalg.yield %m, %n : f32, f32
  } -> (tensor<64xf32>, tensor<64xf32>)
  return %r#0, %r#1 : tensor<64xf32>, tensor<64xf32>
}

// -----

// An index read from data (an embedding) is checked: a device-side assert on a GPU, the error
// record `err` (read by the host under the interpreter), and the load uses index 0 instead.
// An index computed from loop indices only (nearest upsampling) needs no check.
// CHECK-LABEL: func.func private @checked_gather
// CHECK-SAME: def checked_gather_kernel(in0, in1, in2, out0, out1, err, xnumel
// CHECK-SAME: [[BAD:bad[0-9]+]] = (([[I:[tx][0-9]+]] < 0) | ([[I]] >= 10)) & (xmask)
// CHECK-SAME: tl.device_assert(~[[BAD]], \22index out of range in self\22)
// CHECK-SAME: tl.store(err + [[I]] * 0, 1, mask=[[BAD]])
// CHECK-SAME: tl.store(err + 1 + [[I]] * 0, [[I]], mask=[[BAD]])
// CHECK-SAME: tl.store(err + 3 + [[I]] * 0, 10, mask=[[BAD]])
// CHECK-SAME: [[IX:ix[0-9]+]] = tl.where([[BAD]], 0, [[I]])
// CHECK-SAME: tl.load(in1 + (([[IX]] * 16)
// CHECK-NOT: device_assert
// CHECK-SAME: tl.store(out1
// CHECK-SAME: err = _ember_error_buffer(tensors[-1].device)
// CHECK-SAME: **_EMBER_LAUNCH_CHECKED)
// CHECK-SAME: 'err': '*i64'
// CHECK-SAME: checked_gather.ember_checked = True
func.func private @checked_gather(%arg0: tensor<4x6xi64>, %arg1: tensor<10x16xf32>, %arg2: tensor<3x16xf32>) -> (tensor<4x6x16xf32>, tensor<4x6x16xf32>)
    attributes {ember.kernel = "pointwise", ember.ops = ["gather"]} {
  %c2 = arith.constant 2 : index
  %e = tensor.empty() : tensor<4x6x16xf32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%arg0 : tensor<4x6xi64>) outs(%e, %e : tensor<4x6x16xf32>, tensor<4x6x16xf32>) {
  ^bb0(%i: i64, %o: f32, %o2: f32):
    %ii = arith.index_cast %i : i64 to index
    %j = linalg.index 2 : index
    %v = tensor.extract %arg1[%ii, %j] : tensor<10x16xf32>
    %k = linalg.index 0 : index
    %kk = arith.divui %k, %c2 : index
    %w = tensor.extract %arg2[%kk, %j] : tensor<3x16xf32>
    linalg.yield %v, %w : f32, f32
  } -> (tensor<4x6x16xf32>, tensor<4x6x16xf32>)
  return %r#0, %r#1 : tensor<4x6x16xf32>, tensor<4x6x16xf32>
}

// -----

// Signless i8 holds uint8 tensors too: the launcher views them as int8, and the unsigned ops
// reinterpret their operands (a plain // or < of int8 would be signed).
// CHECK-LABEL: func.func private @unsigned_bytes
// CHECK-SAME: (([[A:x[0-9]+]].to(tl.int8).to(tl.uint8, bitcast=True) // [[B:x[0-9]+]].to(tl.int8).to(tl.uint8, bitcast=True))).to(tl.int8)
// CHECK-SAME: ([[A]].to(tl.int8).to(tl.uint8, bitcast=True) < [[B]].to(tl.int8).to(tl.uint8, bitcast=True))
// CHECK-SAME: [[A]].to(tl.int8).to(tl.uint8, bitcast=True).to(tl.float32)
// CHECK-SAME: tensors = [t.view(torch.int8) if t.dtype == torch.uint8 else t for t in tensors]
func.func private @unsigned_bytes(%arg0: tensor<64xi8>, %arg1: tensor<64xi8>) -> (tensor<64xi8>, tensor<64xi1>, tensor<64xf32>)
    attributes {ember.kernel = "pointwise", ember.ops = ["div"]} {
  %e = tensor.empty() : tensor<64xi8>
  %eb = tensor.empty() : tensor<64xi1>
  %ef = tensor.empty() : tensor<64xf32>
  %r:3 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%arg0, %arg1 : tensor<64xi8>, tensor<64xi8>) outs(%e, %eb, %ef : tensor<64xi8>, tensor<64xi1>, tensor<64xf32>) {
  ^bb0(%a: i8, %b: i8, %o: i8, %ob: i1, %of: f32):
    %q = arith.divui %a, %b : i8
    %c = arith.cmpi ult, %a, %b : i8
    %f = arith.uitofp %a : i8 to f32
    linalg.yield %q, %c, %f : i8, i1, f32
  } -> (tensor<64xi8>, tensor<64xi1>, tensor<64xf32>)
  return %r#0, %r#1, %r#2 : tensor<64xi8>, tensor<64xi1>, tensor<64xf32>
}

// -----

// The sum of an expanded read: the expanded dim (65537) is in no kernel argument's or
// result's shape, so the launcher takes its static size (it asked the tensors' sizes for it:
// "dynamic dim N is not a dim of any kernel argument or result"). 65537 x 65536 elements pass
// 2^31: program ids and the extents are 64-bit.
// CHECK-LABEL: func.func private @expand_sum
// CHECK-SAME: tl.program_id(0).to(tl.int64)
// CHECK-SAME: rnumel = 65537 * 65536\0A
// CHECK-SAME: 'rnumel': 'i64'
func.func private @expand_sum(%arg0: tensor<65536xf32>) -> tensor<f32> attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<65537x65536xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<65536xf32>) outs(%0 : tensor<65537x65536xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<65537x65536xf32>
  %2 = tensor.empty() : tensor<f32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<f32>) -> tensor<f32>
  %4 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> ()>], iterator_types = ["reduction", "reduction"]} ins(%1 : tensor<65537x65536xf32>) outs(%3 : tensor<f32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = arith.addf %in, %out : f32
    linalg.yield %5 : f32
  } -> tensor<f32>
  return %4 : tensor<f32>
}

// -----

// A masked update (embedding_bag's sum over a bag, pooling windows): `select(c, f + acc, acc)`
// reduces select(c, f, 0) with tl.sum; the arms swapped, select(c, -inf, f) with the max.
// CHECK-LABEL: func.func private @masked_sum
// CHECK-SAME: tl.where(({{.*}}) != 0, {{x[0-9]+}}, 0.0)
// CHECK-SAME: tl.sum(
// CHECK-LABEL: func.func private @masked_max_swapped
// CHECK-SAME: tl.where(({{.*}}) != 0, float(\22-inf\22), {{x[0-9]+}})
// CHECK-SAME: _ember_nanmax_reduce(
func.func private @masked_sum(%arg0: tensor<4x8xf32>, %arg1: tensor<4xi64>) -> tensor<4xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["sum"]} {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<4xi64>) outs(%i : tensor<4xf32>) {
  ^bb0(%a: f32, %n: i64, %o: f32):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %c = arith.cmpi slt, %ji, %n : i64
    %s = arith.addf %a, %o : f32
    %x = arith.select %c, %s, %o : f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func private @masked_max_swapped(%arg0: tensor<4x8xf32>, %arg1: tensor<4xi64>) -> tensor<4xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["amax"]} {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<4xf32>
  %i = linalg.fill ins(%ninf : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<4xi64>) outs(%i : tensor<4xf32>) {
  ^bb0(%a: f32, %n: i64, %o: f32):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %c = arith.cmpi sge, %ji, %n : i64
    %m = arith.maximumf %o, %a : f32
    %x = arith.select %c, %o, %m : f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Products reduce with the prelude's tl.reduce combiner (identity 1 for masked lanes).
// CHECK-LABEL: func.func private @row_prod
// CHECK-SAME: _ember_prod_reduce(tl.where(xmask & rmask, {{x[0-9]+}}, 1.0), 1)
func.func private @row_prod(%arg0: tensor<4x8xf32>) -> tensor<4xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["prod"]} {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %i = linalg.fill ins(%one : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%arg0 : tensor<4x8xf32>) outs(%i : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %x = arith.mulf %a, %o : f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// An integer converted to a 16-bit float is rounded to it (through f32, as c10's
// Half(float(x))): 2049 is 2048 in f16, int64 MIN is -inf (fuzz seed 40 index 665); int8 values
// are exact in bf16 and are only widened.
// CHECK-LABEL: func.func private @int_to_half
// CHECK-SAME: .to(tl.float32).to(tl.float16).to(tl.float32)
// CHECK-SAME: _ember_round_bf16({{x[0-9]+}}.to(tl.float32))
// CHECK-NOT: _ember_round_bf16({{x[0-9]+}}.to(tl.float32))
// CHECK-SAME: ember.symbol = "int_to_half"
func.func private @int_to_half(%a: tensor<32xi64>, %b: tensor<32xi32>, %c: tensor<32xi8>) -> (tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>)
    attributes {ember.kernel = "pointwise"} {
  %e = tensor.empty() : tensor<32xf16>
  %eb = tensor.empty() : tensor<32xbf16>
  %r:3 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a, %b, %c : tensor<32xi64>, tensor<32xi32>, tensor<32xi8>) outs(%e, %eb, %eb : tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>) {
  ^bb0(%x: i64, %y: i32, %z: i8, %o: f16, %p: bf16, %q: bf16):
    %h = arith.sitofp %x : i64 to f16
    %g = arith.sitofp %y : i32 to bf16
    %k = arith.sitofp %z : i8 to bf16
    linalg.yield %h, %g, %k : f16, bf16, bf16
  } -> (tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>)
  return %r#0, %r#1, %r#2 : tensor<32xf16>, tensor<32xbf16>, tensor<32xbf16>
}
