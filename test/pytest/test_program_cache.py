"""The compiled-program cache (frontend/program_cache.py): a warm start takes the program from
the cache instead of importing and running the passes; anything that changes the program
changes the key; a damaged entry compiles again."""
import subprocess
import sys
import textwrap

import pytest
import torch

import ember
from ember.frontend import compile_module, program_cache
from ember.runtime.env import read_env


@pytest.fixture
def counted(monkeypatch):
    """How many graphs went through import + passes + export."""
    calls = []
    real = compile_module._compile_module

    def count(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(compile_module, "_compile_module", count)
    return calls


def _fn(x, w):
    return torch.tanh(x @ w) * 0.5 + x.sum(-1, keepdim=True)


def _compile(fn, tmp_path, target, **options):
    torch._dynamo.reset()
    return torch.compile(fn, backend="ember", options={"target": target, "cache_dir":
                                                       str(tmp_path), "program_cache": True,
                                                       **options})


def _last_cache_state():
    return ember.last_reports()[-1].get("program_cache")


@pytest.mark.targets("cpu", "triton")
def test_second_compile_takes_the_program_from_the_cache(tmp_path, counted, target):
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    ref = _fn(x, w)
    out1 = _compile(_fn, tmp_path, target)(x, w)
    assert len(counted) == 1 and _last_cache_state() == "miss"
    out2 = _compile(_fn, tmp_path, target)(x, w)
    assert len(counted) == 1, "a warm start ran the passes again"
    report = ember.last_reports()[-1]
    assert report["program_cache"] == "hit" and report["status"] == "compiled"
    assert "ember-fuse" not in report["stage_seconds"]
    assert report["num_kernels"] >= 1 and report["fused_groups"]
    assert torch.equal(out1, out2)
    assert torch.allclose(out2, ref, rtol=1e-4, atol=1e-5)


def test_what_changes_the_program_changes_the_key(tmp_path, counted):
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    _compile(_fn, tmp_path, "cpu")(x, w)
    _compile(_fn, tmp_path, "cpu")(torch.randn(4, 16), w)                 # another shape
    _compile(_fn, tmp_path, "cpu")(x.double(), w.double())                # another dtype
    _compile(_fn, tmp_path, "cpu", max_group_size=1)(x, w)                # another option
    assert len(counted) == 4
    # A constant the graph holds (a get_attr tensor): its value is part of the key.
    def f1(a):
        return a * torch.tensor([1.0, 2.0, 3.0, 0.5, 0.5]) + 1

    def f2(a):
        return a * torch.tensor([1.0, 2.0, 4.0, 0.5, 0.5]) + 1
    outs = [_compile(f, tmp_path, "cpu")(torch.ones(5)) for f in (f1, f2)]
    assert torch.equal(outs[0], torch.tensor([2.0, 3.0, 4.0, 1.5, 1.5]))
    assert torch.equal(outs[1], torch.tensor([2.0, 3.0, 5.0, 1.5, 1.5]))


def test_debug_dir_and_option_off_do_not_read_the_cache(tmp_path, counted):
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    _compile(_fn, tmp_path, "cpu")(x, w)
    _compile(_fn, tmp_path, "cpu", debug_dir=str(tmp_path / "dump"))(x, w)
    assert len(list((tmp_path / "dump").rglob("*ember-fuse*.mlir"))) == 1
    _compile(_fn, tmp_path, "cpu", program_cache=False)(x, w)
    assert len(counted) == 3
    assert not read_env({"EMBER_PROGRAM_CACHE": "0"}).program_cache
    assert read_env({}).program_cache


@pytest.mark.filterwarnings("ignore::ember.runtime.cache.CacheWarning")
def test_damaged_entry_compiles_again(tmp_path, counted):
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    _compile(_fn, tmp_path, "cpu")(x, w)
    (entry,) = [p for p in (tmp_path / program_cache.KIND).rglob(f"*{program_cache.SUFFIX}")]
    entry.write_bytes(entry.read_bytes()[:-7] + b"garbage")
    out = _compile(_fn, tmp_path, "cpu")(x, w)
    assert len(counted) == 2 and _last_cache_state() == "miss"
    assert torch.allclose(out, _fn(x, w), rtol=1e-4, atol=1e-5)


def test_edited_source_changes_the_identity(tmp_path, monkeypatch):
    program_cache.code_identity.cache_clear()
    before = program_cache.code_identity()
    program_cache.code_identity.cache_clear()
    monkeypatch.setattr(program_cache, "FORMAT", program_cache.FORMAT + 1)
    try:
        assert program_cache.code_identity() != before
    finally:
        program_cache.code_identity.cache_clear()


def _relu_mm(x, w):
    return torch.relu(x @ w) + x


@pytest.mark.targets("cpu", "triton")
def test_warm_start_in_a_new_process(tmp_path, counted, target):
    """This process compiles; a new one, on the same cache, runs no pass and never loads MLIR
    (torch-mlir's native libraries stay unimported: the program comes from the cache), its
    report says hit, its share of the compile stays within a budget, and it returns the same
    result (the Triton target through the interpreter, TRITON_INTERPRET=1, inherited)."""
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    ours = _compile(_relu_mm, tmp_path, target)(x, w).sum().item()
    assert len(counted) == 1
    script = textwrap.dedent("""
        import sys
        import torch, ember
        torch.manual_seed(0)
        x, w = torch.randn(8, 16), torch.randn(16, 16)

        def _relu_mm(x, w):
            return torch.relu(x @ w) + x
        out = torch.compile(_relu_mm, backend="ember", options={"target": sys.argv[1]})(x, w)
        r = ember.last_reports()[-1]
        print(r["program_cache"], r["compile_seconds"], "torch_mlir._mlir_libs" in sys.modules,
              out.sum().item(), *sorted(r["stage_seconds"]))
    """)
    import os
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), "EMBER_PROGRAM_CACHE": "1"}
    line = subprocess.run([sys.executable, "-c", script, target], env=env, capture_output=True,
                          text=True, timeout=300, check=True).stdout.split("\n")[-2]
    state, seconds, mlir, total, *stages = line.split()
    assert state == "hit" and not any(s.startswith("ember-") for s in stages), line
    assert mlir == "False", f"a warm start loaded torch-mlir's native libraries: {line}"
    # ember's part of the warm start (cache lookup, FX preparation, loading the program): about
    # 0.02 s (CPU target, 2-core CI machine); the budget leaves room for a loaded host
    assert float(seconds) < 2.0, line
    assert float(total) == ours
