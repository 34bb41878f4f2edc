"""Compile-time guards: repeated layers build their code once; wrapping ember's own ops in
Python does not go through importlib (it once did, for every op: seconds per model)."""
import sys

import torch

import ember


class _Blocks(torch.nn.Module):
    """`n` identical layers (a matmul, then one pointwise kernel each)."""

    def __init__(self, n: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x)) * 0.5 + x
        return x


def test_identical_blocks_build_one_kernel(tmp_path, monkeypatch):
    from ember.passes import ember_lower_to_cpp
    lowered = []
    real = ember_lower_to_cpp.emit_kernel

    def count(fn, name, *args):
        lowered.append(name)
        return real(fn, name, *args)
    monkeypatch.setattr(ember_lower_to_cpp, "emit_kernel", count)
    torch.manual_seed(0)
    model, x = _Blocks(6).eval(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="ember",
                             options={"target": "cpu", "debug_dir": str(tmp_path)})
    with torch.no_grad():
        out, ref = compiled(x), model(x)
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
    report = ember.last_reports()[-1]
    assert report["status"] == "compiled" and report["eager_fallback_ops"] == []
    assert report["num_kernels"] >= 6, report["fused_groups"]
    source = next(tmp_path.rglob("kernels.cpp")).read_text()
    # One definition serves the six layers' kernels (graph_utils.attach_kernel_sources).
    assert source.count('extern "C" void ember_fused') == 1, source
    # ... and is lowered once: the other kernels' IR is the first one's but for the name
    assert len(lowered) < report["num_kernels"], lowered
    stages = report["stage_seconds"]
    assert {"import", "ember-fuse", "ember-buffer-reuse", "build"} <= set(stages), stages


def test_ember_ops_do_not_reimport_their_dialect():
    from torch_mlir import ir
    from ember.frontend.importer import new_context

    class Count:
        n = 0

        def find_spec(self, name, path=None, target=None):
            if name.endswith("dialects.ember"):
                Count.n += 1
            return None

    ctx = new_context()
    text = ('func.func @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {\n'
            '  %0 = "ember.extern"(%a, %b) {callee = "aten.mm", params = {}} : '
            '(tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>\n'
            '  return %0 : tensor<2x2xf32>\n}')
    with ctx:
        module = ir.Module.parse(text)
        block = module.body.operations[0].regions[0].blocks[0]
        list(block.operations)      # the first lookup may try every search prefix
        finder = Count()
        sys.meta_path.insert(0, finder)
        try:
            for _ in range(20):
                ops = list(block.operations)
                assert ops[0].operation.name == "ember.extern"
        finally:
            sys.meta_path.remove(finder)
    assert Count.n == 0
