"""`python -m ember.benchmarks` (benchmarks/harness.py): one real run on the CPU (the MLP block,
eager and ember, two repeats) checked through its table, JSON, CSV, rows.jsonl and chart; the
report's arithmetic (speed-ups, the best Inductor mode, geomeans) and a child that hangs, on rows
and commands made up here."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ember
from ember.benchmarks import breakdown, harness, report

REPO = Path(ember.__file__).resolve().parent


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO.parent), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_harness_runs_mlp_on_cpu(tmp_path):
    """The warm-start process is left out here (--no-warm: one more process start, ~5 s of CPU);
    test_warm_start runs its code in this process."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "ember.benchmarks", "--models", "mlp", "--dtypes", "fp32",
         "--backends", "eager,ember", "--device", "cpu", "--repeats", "2", "--warmup", "1",
         "--no-warm", "--out", str(out), "--cache-dir", str(tmp_path / "cache")],
        env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the table on stdout: every backend's ms, ember over eager, a geomean line
    table = proc.stdout
    assert "| model | dtype | mode | eager ms | ember ms | ember x eager |" in table, table
    line = next(ln for ln in table.splitlines() if ln.startswith("| mlp (256) | fp32 | inference"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[3]) > 0 and float(cells[4]) > 0 and cells[5].startswith("x"), line
    assert any(ln.startswith("| **geomean** (x eager) | fp32 | inference") for ln in
               table.splitlines()), table
    # no tqdm here: one plain progress line per step on stderr, each with its step count
    try:
        import tqdm  # noqa: F401
    except ImportError:
        assert "[1/3] mlp fp32: compiling ember" in proc.stderr, proc.stderr[-2000:]

    data = json.loads((out / "results.json").read_text())
    rows = {r["backend"]: r for r in data["rows"]}
    assert set(rows) == {"eager", "ember"}
    em, ea = rows["ember"], rows["eager"]
    assert em["status"] == "compiled" and em["fallback_ops"] == [], em
    assert em["rel_err"] < 1e-4
    assert em["ms"] > 0 and ea["ms"] > 0
    assert em["speedup"] == pytest.approx(ea["ms"] / em["ms"], rel=1e-3)
    assert em["cold_s"] > 0 and "warm_s" not in em
    assert em["ember_kernels"] >= 1 and ea["kernels"] == 4    # addmm, gelu, addmm, layer_norm
    assert ea["peak_mb"] > 0
    assert data["geomean"]["fp32 inference"]["ember"] == pytest.approx(em["speedup"], rel=1e-3)
    assert data["meta"]["device"].startswith("CPU") and data["meta"]["repeats"] == 2
    # the caches went where --cache-dir said, one directory per model
    assert any((tmp_path / "cache" / "mlp" / "ember").iterdir())

    with open(out / "results.csv") as f:
        got = list(csv.DictReader(f))
    assert [r["backend"] for r in got] == ["eager", "ember"]
    assert tuple(got[0]) == report.CSV_FIELDS
    assert float(got[1]["ms"]) == pytest.approx(em["ms"])
    assert len((out / "rows.jsonl").read_text().splitlines()) == 2
    assert (out / "logs" / "mlp.log").is_file()
    png = out / "speedup.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not png.exists()
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_warm_start(capsys):
    """What the warm-start process prints (one event per compiled backend), merged onto rows."""
    from ember.benchmarks import measure
    measure.warm_start("mlp", ["fp32"], "inference", ["eager", "ember"], "cpu", small=True)
    events = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    warm = [e for e in events if e["event"] == "warm"]
    assert [(e["backend"], e["dtype"]) for e in warm] == [("ember", "fp32")]
    assert warm[0]["warm_s"] > 0
    rows = [_row("mlp", "fp32", "eager", 1.0), _row("mlp", "fp32", "ember", 1.0)]
    harness.merge_warm(rows, warm + [{"dtype": "bf16", "backend": "ember", "warm_s": 9.0}])
    assert "warm_s" not in rows[0] and rows[1]["warm_s"] == warm[0]["warm_s"]


def test_warm_start_processes():
    """A warm start per (dtype, backend) in its own process (each row pays the process's
    one-time costs, as a warm start does), or one for all with --warm-shared."""
    assert harness.warm_children(["fp32", "bf16"], ["inductor", "ember"]) == [
        (["fp32"], ["inductor"]), (["fp32"], ["ember"]), (["bf16"], ["inductor"]),
        (["bf16"], ["ember"])]
    assert harness.warm_children(["fp32", "bf16"], ["ember"], shared=True) == [
        (["fp32", "bf16"], ["ember"])]
    argv = ["--dtypes", "fp32,bf16", "--mode", "inference", "--backends", "eager,ember"]
    assert harness._with(argv, dtypes=["bf16"], backends=["ember"]) == [
        "--dtypes", "bf16", "--mode", "inference", "--backends", "ember"]


def _row(model, dtype, backend, ms, **kw):
    return {"model": model, "label": f"{model} (8)", "dtype": dtype, "mode": "inference",
            "backend": backend, "status": "ok", "ms": ms, **kw}


def test_report_speedups_best_inductor_and_geomeans(tmp_path):
    rows = report.derive([
        _row("a", "bf16", "eager", 4.0), _row("a", "bf16", "inductor", 2.0),
        _row("a", "bf16", "inductor-ro", 1.0), _row("a", "bf16", "ember", 0.5),
        _row("b", "bf16", "eager", 9.0), _row("b", "bf16", "inductor", 3.0),
        _row("b", "bf16", "inductor-ro", None, status="error", error="RuntimeError: boom"),
        _row("b", "bf16", "ember", 4.5),
    ])
    by = {(r["model"], r["backend"]): r for r in rows}
    assert by["a", "ember"]["speedup"] == 8.0 and by["a", "ember"]["vs_best_inductor"] == 2.0
    # the failed mode is not the best one; ember is behind the one that ran
    assert by["b", "ember"]["vs_best_inductor"] == pytest.approx(3.0 / 4.5, rel=1e-3)
    g = report.geomeans(rows)[("bf16", "inference")]
    assert g["ember"] == pytest.approx((8.0 * 2.0) ** 0.5)
    assert g["inductor-ro"] == pytest.approx(4.0)           # over the models where it ran
    assert g["ember vs best inductor"] == pytest.approx((2.0 * 3.0 / 4.5) ** 0.5, rel=1e-3)
    table = report.summary_table(rows)
    head = table.splitlines()[0]
    assert head == ("| model | dtype | mode | eager ms | inductor ms | inductor-ro ms | ember ms "
                    "| ember x eager | ember vs best inductor |")
    assert "| b (8) | bf16 | inference | 9.000 | 3.000 | error | 4.500 | x2.00 | 0.67 |" in table
    assert "| **geomean** (x eager) | bf16 | inference | x1.00 | x2.45 | x4.00 | x4.00 | x4.00 " \
           "| 1.15 |" in table
    assert "error: RuntimeError: boom" in report.detail_table(rows)
    report.write_csv(tmp_path / "r.csv", rows)
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 1 + len(rows)


def test_a_hung_child_is_killed_and_reported(tmp_path):
    events = []
    code = "import json,time; print(json.dumps({'event': 'progress', 'what': 'x'}), flush=True); " \
           "time.sleep(60)"
    with open(tmp_path / "log", "w") as log:
        rc = harness._run_child([sys.executable, "-c", code], dict(os.environ), 1,
                                events.append, log)
    assert rc == "timeout" and events == [{"event": "progress", "what": "x"}]

    class Args:
        dtypes, backends, mode = ["fp32"], ["eager", "ember"], "inference"

    with open(tmp_path / "log2", "w") as log:
        rows = harness._crashed("mlp", Args, "timeout", [_row("mlp", "fp32", "eager", 1.0)],
                                log)
    assert [(r["backend"], r["status"]) for r in rows] == [("ember", "crashed")]
    assert rows[0]["error"].startswith("process timed out")


def test_breakdown_kinds():
    assert breakdown.kind_of("triton_poi_fused_add_0") == "generated"
    assert breakdown.kind_of("ember_fused_add_gelu_0_kernel") == "generated"
    assert breakdown.kind_of("Memcpy DtoD (Device -> Device)") == "copies"
    assert breakdown.kind_of("void at::native::elementwise_kernel<copy_kernel_cuda>") == "copies"
    assert breakdown.kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == "library"
    rows = [{"label": "m (8)", "dtype": "fp32", "mode": "inference", "backend": b,
             "device": "cuda", "profile": {"wall_ms": 2.0, "busy_ms": 1.5, "host_gap_ms": 0.5,
                                           "library_ms": 1.0, "library_n": 2,
                                           "generated_ms": 0.4, "generated_n": 3,
                                           "copies_ms": 0.1, "copies_n": 1,
                                           "top": [{"name": "gemm", "kind": "library",
                                                    "ms": 1.0, "n": 2}]}}
            for b in ("inductor", "ember")]
    md = breakdown.markdown(rows)
    assert "| ember | 2.000 | 1.500 | 1.000 (2) | 0.400 (3) | 0.100 (1) | 0.500 |" in md
    assert md.count("| `gemm` | library | 1.0000 | 2 |") == 2


def test_arguments():
    args = harness.parse_args(["--device", "cpu", "--dtypes", "float32,bf16", "--max-autotune"])
    assert args.models == list(harness.CPU_DEFAULT) and args.small
    assert args.dtypes == ["fp32", "bf16"]
    assert args.backends == ["eager", "inductor", "inductor-ma", "ember", "ember-ma"]
    args = harness.parse_args(["--device", "cuda", "--models", "resnet18,gpt2"])
    assert args.backends == ["eager", "inductor", "inductor-ro", "ember"] and not args.small
    args = harness.parse_args(["--device", "cuda", "--max-autotune", "--mode", "train"])
    assert args.backends == ["eager", "inductor", "inductor-ro", "inductor-ma", "ember",
                             "ember-ma"]
    assert args.models == list(harness.GPU_DEFAULT) and args.mode == "train"
    with pytest.raises(SystemExit):
        harness.parse_args(["--device", "cpu", "--models", "nosuchmodel"])
    with pytest.raises(SystemExit):
        harness.parse_args(["--device", "cpu", "--backends", "eager,inductor-ro"])


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_case_errors_against_eager_and_fp32(mode):
    """measure.Case without a compiler: eager against itself is exact, and a bf16 row says how
    far eager-bf16 itself is from fp32 (the noise a bf16 error is read against)."""
    from ember.benchmarks import measure
    case = measure.Case("mlp", "bf16", mode, "cpu", small=True)
    step, check = case.make("eager")
    errs = check(step())
    assert errs["rel_err"] == 0.0
    assert 1e-4 < errs["fp32_err"] < 0.1, errs
    fp32 = measure.Case("mlp", "fp32", mode, "cpu", small=True)
    step, check = fp32.make("eager")
    assert check(step()) == {"rel_err": 0.0}


def test_ensure_bytecode_compiles_where_the_interpreter_writes_none(tmp_path):
    """Under PYTHONDONTWRITEBYTECODE (the GPU machine) the benchmarks compile a package's
    modules themselves: a child started with the flag then imports them from bytecode. Without
    the flag, nothing is done (the interpreter writes its own)."""
    from ember.benchmarks.common import ensure_bytecode
    pkg = tmp_path / "pkg_b"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("VALUE = 3\n")
    assert ensure_bytecode([pkg]) == [] or sys.flags.dont_write_bytecode
    assert not (pkg / "__pycache__").exists() or sys.flags.dont_write_bytecode
    assert ensure_bytecode([pkg], force=True) == [str(pkg)]
    assert sorted(p.name.split(".")[0] for p in (pkg / "__pycache__").iterdir()) == \
        ["__init__", "mod"]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(tmp_path))
    # the child counts the modules it compiles from source
    code = ("import importlib._bootstrap_external as b\n"
            "compiled = []\n"
            "real = b.SourceLoader.source_to_code\n"
            "def count(self, data, path, **kw):\n"
            "    compiled.append(path)\n"
            "    return real(self, data, path, **kw)\n"
            "b.SourceLoader.source_to_code = count\n"
            "import pkg_b.mod as m\n"
            "print(m.VALUE, len(compiled))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["3", "0"]
