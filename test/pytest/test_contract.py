"""The stage contract (dialects/contract.py): typed access, and the verifier that runs after
every ember pass, so a stage that breaks it fails there with the op's file:line:col."""
import dataclasses
import subprocess
import sys

import pytest
from torch_mlir import ir

from ember.dialects import contract as C
from ember.dialects import make_context
from ember.passes.base import Pass

MODULE = """
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @k(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @k(%a: tensor<4xf32>) -> tensor<4xf32> attributes {ember.kernel = "pointwise"} {
  return %a : tensor<4xf32>
}
"""


def _parse(text=MODULE):
    ctx = make_context()
    with ctx:
        return ctx, ir.Module.parse(text, ir.Context.current)


def test_typed_get_and_set():
    ctx, m = _parse()
    with ctx:
        main, k = list(m.body.operations)
        call = list(main.regions[0].blocks[0].operations)[0]
        assert C.KERNEL.get(k) == "pointwise" and C.is_kernel(k) and not C.is_kernel(main)
        C.OFFSETS.set(call, [0])
        C.ARENA_BYTES.set(main, 64)
        C.OPS.set(k, ["add", "gelu"])
        assert C.OFFSETS.get(call) == [0] and C.ARENA_BYTES.get(main) == 64
        assert C.OPS.get(k) == ["add", "gelu"] and C.SOURCE.get(k, None) is None
        assert "ember.offsets = array<i64: 0>" in str(call)
        C.verify(m.operation)


@pytest.mark.parametrize("attr,where,message", [
    ("ember.bogus = 1", "@k", "unknown attribute 'ember.bogus'"),
    ("ember.offsets = array<i64: 0>", "@k", "'ember.offsets' belongs on a launch, not on a kernel func"),
    ("ember.ops = \"add\"", "@k", "'ember.ops' must be a str-list attribute"),
])
def test_verifier_names_the_problem(attr, where, message):
    text = MODULE.replace('ember.kernel = "pointwise"', f'ember.kernel = "pointwise", {attr}')
    ctx, m = _parse(text)
    seen = []
    ctx.attach_diagnostic_handler(lambda d: seen.append(str(d.message)) or True)
    with ctx, pytest.raises(C.ContractError, match=message):
        C.verify(m.operation, after="some-pass")
    assert seen and seen[0].startswith("after some-pass: ")


@dataclasses.dataclass(frozen=True)
class _Breaks(Pass):
    """Writes an attribute the contract does not declare (what a buggy pass might do)."""

    name = "breaks-contract"

    def run(self, module):
        with module.context:
            module.regions[0].blocks[0].operations[0].attributes["ember.bogus"] = \
                ir.UnitAttr.get()


def test_a_pass_that_breaks_the_contract_fails_after_it():
    from torch_mlir import passmanager
    ctx, m = _parse()
    seen = []
    ctx.attach_diagnostic_handler(lambda d: seen.append(f"{d.location}: {d.message}") or True)
    with ctx:
        pm = passmanager.PassManager("builtin.module")
        pm.add(_Breaks().as_callable(), name="Breaks", argument="breaks-contract")
        with pytest.raises(ir.MLIRError) as err:
            pm.run(m.operation)
        seen += [str(d.message) for d in err.value.error_diagnostics]
        pm = passmanager.PassManager("builtin.module")       # --no-verify-each: it passes
        pm.add(_Breaks().as_callable(verify_contract=False), name="Breaks",
               argument="breaks-contract")
        m2 = ir.Module.parse(MODULE)
        pm.run(m2.operation)
    assert any("after breaks-contract: unknown attribute 'ember.bogus'" in s for s in seen)


def test_ember_opt_reports_file_line_col(tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text(MODULE.replace("%0 = call @k(%a)", "%0 = call @k(%a) {ember.offsets = \"x\"}"))
    out = subprocess.run([sys.executable, "-m", "ember.passes.ember_opt", str(src),
                          "--pass-pipeline=builtin.module(ember-buffer-reuse)"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert f"{src}:3:8: error: 'ember.offsets' must be a i64-array attribute" in out.stderr
