"""What a user installing ember elsewhere relies on: nothing written outside the cache, a clear
message without a C++/OpenMP compiler, the cache command, quiet interpreted kernels, install
metadata that agrees with CI's pins and the README, a repository that cites only itself."""
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import ember
from ember import cache as cache_cli

REPO = Path(ember.__file__).resolve().parent


def _child_env(tmp_path: Path, **extra) -> dict:
    """A child process whose $HOME, $TMPDIR and cache are fresh directories under `tmp_path`,
    importing this ember."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "EMBER_CACHE_DIR", "CXX")}
    for d in ("home", "tmp", "cache"):
        (tmp_path / d).mkdir()
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"),
               EMBER_CACHE_DIR=str(tmp_path / "cache"), TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(REPO.parent), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def _run(code: str, env: dict, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=env["HOME"],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


CHILD = """
    import json, sys, warnings, dataclasses, torch, ember
    from ember.runtime import cpp_build, env
    sys.dont_write_bytecode = True      # the test helper below: no __pycache__ in the repository
    sys.path.insert(0, TESTDIR)
    import triton_aot                   # test/pytest/triton_aot.py

    def f(x, y):
        return torch.log(torch.relu(x) + 1) * y - 2

    x, y = torch.randn(33, 17), torch.randn(17)
    for target in ("cpu", "triton"):        # the C++ build, the Triton module load
        torch._dynamo.reset()
        out = torch.compile(f, backend="ember", options={"target": target})(x, y)
        torch.testing.assert_close(out, f(x, y))
    assert [r["status"] for r in ember.last_reports()] == ["compiled"] * 2, ember.last_reports()
    # Triton's own compiler and cache, as test_triton_aot.py drives them (one target here).
    res = triton_aot.compile_sources_isolated(triton_aot.loaded_sources(),
                                              targets=[("cuda", 90, 32)], jobs=1)
    assert res and not triton_aot.failures(res), res

    # No compiler (as CXX=ember-no-such-compiler would say): two graphs, one warning.
    env.set_env(dataclasses.replace(env.get_env(), cxx="ember-no-such-compiler"))
    ember.clear_reports()
    fs = [lambda x: torch.sin(x) * 2 + 1, lambda x: torch.cos(x) - 3]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for g in fs:
            torch.testing.assert_close(
                torch.compile(g, backend="ember", options={"target": "cpu"})(x), g(x))
    result = {"status": [r["status"] for r in ember.last_reports()],
              "warnings": [str(w.message) for w in caught]}
    try:        # a compiler that runs but has no OpenMP
        cpp_build.check_compiler(cxx=FAKE)
    except cpp_build.CompilerUnavailable as err:
        result["no_openmp"] = str(err)
    print("RESULT", json.dumps(result))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    """One child process (fresh $HOME, $TMPDIR and cache) for the tests below: it compiles for
    the cpu and triton targets, AOT-compiles the Triton kernels, then compiles without a
    compiler."""
    base = tmp_path_factory.mktemp("packaging")
    fake = base / "fakecxx"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "fakecxx 1.0"; exit 0; }\n'
                    'for a in "$@"; do [ "$a" = -fopenmp ] && '
                    '{ echo "fakecxx: error: unsupported option -fopenmp" >&2; exit 1; }; done\n'
                    'exec g++ "$@"\n')
    fake.chmod(0o755)
    out = _run(CHILD.replace("FAKE", repr(str(fake)))
               .replace("TESTDIR", repr(str(Path(__file__).resolve().parent))), _child_env(base))
    (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    return base, json.loads(line[len("RESULT "):])


def test_nothing_written_outside_the_cache(child):
    """The C++ and Triton paths (a compile for each, an AOT Triton compile in worker processes,
    compiles without a working compiler) add no file to $TMPDIR or $HOME: generated code,
    libraries and Triton's cache all land in EMBER_CACHE_DIR. (torch.compile itself makes an
    empty `torchinductor_<user>` directory in $TMPDIR whatever the backend; directories without
    files are not counted.)"""
    base, _ = child
    assert _files(base / "tmp") == set()
    assert _files(base / "home") == set()
    cached = _files(base / "cache")
    for part in ("cpp/", "py/", "triton/"):
        assert any(f.startswith(part) for f in cached), (part, sorted(cached))


def test_no_compiler_means_one_warning_and_eager(child):
    _, r = child
    assert r["status"] == ["eager", "eager"]
    assert len(r["warnings"]) == 1, r["warnings"]
    text = r["warnings"][0]
    assert "CompilerUnavailable" in text and "'ember-no-such-compiler'" in text
    assert "not found on PATH" in text and "set CXX" in text and "OpenMP" in text
    assert "unsupported option -fopenmp" in r["no_openmp"]


def test_cache_command_reports_and_clears_only_its_parts(tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    for rel, size in (("cpp/ab/k.so", 3000), ("py/cd/m.py", 500), ("triton/xy/k.cubin", 1500),
                      ("notes.txt", 7)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x" * size)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(root))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))      # no ~/.triton/cache to report
    assert cache_cli.main([]) == 0
    text = capsys.readouterr().out
    assert f"ember cache: {root}" in text
    assert re.search(r"total\s+3 files\s+5\.0 kB", text), text
    assert (root / "cpp/ab/k.so").exists()
    assert cache_cli.report(clear=True) == 5000
    assert "cleared" in capsys.readouterr().out
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]   # not ember's: kept


def test_interpreted_kernels_are_quiet(tmp_path):
    """log(0) = -inf, 0/0 = nan: the Triton interpreter's NumPy would warn, eager and a GPU
    do not (runtime/executor.py, _quiet_ieee)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs Triton kernels on the CPU through the interpreter")
    f = lambda x, y: torch.log(x) + x / y  # noqa: E731
    x = torch.tensor([0.0, 1.0, 2.0, 0.0])
    y = torch.tensor([0.0, 1.0, 0.0, 3.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(f, backend="ember", options={"target": "triton"})(x, y)
    torch.testing.assert_close(out, f(x, y), equal_nan=True)
    assert [r["eager_fallback_ops"] for r in ember.last_reports(1)] == [[]]
    assert [str(w.message) for w in caught] == []


def _requirements():
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"])
    for extra in meta["optional-dependencies"].values():
        reqs += extra
    return [Requirement(r) for r in reqs], meta


def test_ci_pins_satisfy_the_install_requirements():
    """CI tests the versions .ci/constraints.txt pins; each must be one a user's install may
    get, and the torch running this test one the requirements admit."""
    from packaging.requirements import Requirement
    reqs, _ = _requirements()
    pins = [Requirement(ln.split("#")[0].strip())
            for ln in (REPO / ".ci/constraints.txt").read_text().splitlines()
            if ln.split("#")[0].strip()]
    by_name = {}
    for r in reqs:
        by_name.setdefault(r.name.replace("_", "-").lower(), []).append(r)
    for pin in pins:
        (spec,) = pin.specifier
        for r in by_name.get(pin.name.replace("_", "-").lower(), []):
            assert r.specifier.contains(spec.version, prereleases=True), (str(r), str(pin))
    (torch_req,) = by_name["torch"]
    assert torch_req.specifier.contains(torch.__version__.split("+")[0]), torch_req


def test_readme_opens_with_the_two_commands_ci_runs():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    assert len(block) == 2, block
    main, tests = block
    assert main.startswith("pip install -e .") and main.endswith("python main.py")
    assert "+cpu" not in main + tests and ".ci/" not in main + tests
    assert "'.[test]'" in tests and "lit -v test/" in tests
    pytest_cmd = tests[tests.index("python -m pytest"):]
    assert pytest_cmd.endswith(" test/pytest") and " -n auto " in pytest_cmd, pytest_cmd
    ci = (REPO / ".ci/run").read_text()
    assert "-c .ci/constraints.txt -e '.[test]'" in ci and "lit -v test/" in ci
    assert pytest_cmd in ci      # the README's pytest command, with its worker processes


def test_repository_cites_only_itself():
    """No file cites the design notes or tools of the project's workspace outside the repo."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    outside = ("DESIGN" + ".md", "../" + "shared")
    hits = []
    for rel in listed:
        path = REPO / rel
        if path.suffix in (".py", ".md", ".txt", ".toml", ".cfg", ".mlir", "") and path.is_file():
            text = path.read_text(errors="replace")
            hits += [f"{rel}: {s}" for s in outside if s in text]
    assert hits == []
    # What the docs point at exists.
    for rel in listed:
        if rel.endswith(".md"):
            for ref in re.findall(r"\bdocs/[\w.-]+\.md", (REPO / rel).read_text()):
                assert (REPO / ref).is_file(), (rel, ref)
