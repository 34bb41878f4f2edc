// RUN: ember-opt %s --verify-diagnostics --pass-pipeline='builtin.module(ember-lower-to-triton)'

// A reduction whose combiner is a general body (acc * 2 + x) has no Triton spelling: a
// located error.
func.func private @ember_fused_general_0(%arg0: tensor<4x8xf32>) -> tensor<4xf32>
    attributes {ember.kernel = "reduction", ember.ops = ["general"]} {
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %i = linalg.fill ins(%one : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{unsupported reduction combiner 'general body'}}
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%arg0 : tensor<4x8xf32>) outs(%i : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %x = arith.mulf %o, %two : f32
    %y = arith.addf %x, %a : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
