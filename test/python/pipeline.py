# RUN: %PYTHON %s | FileCheck %s
# build_pass_manager: one PassManager from a pipeline that mixes ember's Python passes and
# upstream passes; errors are PipelineError with a readable message.
from torch_mlir import ir

from ember.dialects import make_context
from ember.passes.pipeline import PipelineError, build_pass_manager

IR = """
func.func private @neg(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "pointwise", ember.ops = ["neg"]} {
  return %a : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = arith.constant 1 : i32
  %d = arith.constant 1 : i32
  %0 = func.call @neg(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @neg(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
"""


def case(name):
    print(f"// {name}")


with make_context():
    # CHECK-LABEL: // mixed
    # CHECK: func.func @main(%{{.*}}: tensor<4xf32>) -> tensor<4xf32> attributes {ember.arena_bytes = 64 : i64, ember.unplanned_bytes = 64 : i64}
    # CHECK-NOT: arith.constant
    # CHECK: call @neg(%{{.*}}) {ember.offsets = array<i64: 0>}
    # CHECK: call @neg(%{{.*}}) {ember.offsets = array<i64: -1>}
    case("mixed")
    module = ir.Module.parse(IR)
    pm = build_pass_manager(
        "builtin.module(canonicalize,ember-buffer-reuse{alignment=64 in-place=false},func.func(cse))")
    pm.run(module.operation)
    print(module)

    # CHECK-LABEL: // no-anchor
    # CHECK: ember.arena_bytes = 128 : i64
    case("no-anchor")
    module = ir.Module.parse(IR)
    build_pass_manager("ember-buffer-reuse{alignment=128}").run(module.operation)
    print(module)

    # CHECK-LABEL: // errors
    # CHECK: PipelineError: 'no-such-pass' is neither an ember pass nor an upstream pass
    # CHECK: PipelineError: ember-buffer-reuse: unknown option 'bogus' (options: alignment, in-place, reshape-in-place, donated-args, donated-outputs, donated-outputs-fill, print-plan, own-min-bytes)
    # CHECK: PipelineError: ember-buffer-reuse: option 'in-place' expects true/false, got 'maybe'
    # CHECK: PipelineError: ember-buffer-reuse: option 'alignment' must be a positive power of two, got 3
    # CHECK: PipelineError: unbalanced
    case("errors")
    for text in ["builtin.module(no-such-pass)", "ember-buffer-reuse{bogus=1}",
                 "ember-buffer-reuse{in-place=maybe}", "ember-buffer-reuse{alignment=3}",
                 "builtin.module(cse"]:
        try:
            build_pass_manager(text)
            print("no error for", text)
        except PipelineError as err:
            print("PipelineError:", str(err).splitlines()[0])
