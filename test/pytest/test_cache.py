"""The artifact cache verifies what it loads (runtime/cache.py): damaged, swapped, edited or
foreign artifacts are rebuilt or refused, never loaded.

The damaged-library cases are loaded in a child process: without the checks, a truncated `.so`
gives SIGBUS and a garbled one SIGSEGV at dlopen, which must fail a test, not kill pytest. One
child loads every prepared scenario (each in its own cache directory) to keep the suite fast;
the tests below each assert their own scenario's outcome.
"""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from ember.runtime import ArtifactCache, Program, Step, ValueInfo, load, read_env
from ember.runtime import cache as cache_mod
from ember.runtime import cpp_build, py_module

KERNEL = r"""
#include <cstdint>
extern "C" void ember_op(const float* __restrict__ a, const float* __restrict__ b,
                         float* __restrict__ out, const int64_t* __restrict__ sizes) {
  for (int64_t i = 0; i < sizes[0]; ++i) out[i] = a[i] OP b[i];
}
"""
SOURCES = {"add": KERNEL.replace("OP", "+"), "sub": KERNEL.replace("OP", "-")}
X, Y = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]
EXPECT = {"add": [11.0, 22.0, 33.0, 44.0], "sub": [-9.0, -18.0, -27.0, -36.0]}
FOREIGN_UID = 4242

CHILD = textwrap.dedent(r"""
    import json, os, stat, sys, warnings
    import torch
    from ember.runtime import ArtifactCache, Program, Step, ValueInfo, load
    from ember.runtime import cache as C, cpp_build

    def program(source):
        vals = [ValueInfo((4,), "float32")] * 3
        return Program("cpu", "cpp", source, vals, 2, [Step("kernel", "ember_op", (0, 1), (2,))],
                       [2], 0, ["ember_op"])

    real_owner = C.owned_by_user
    for job in json.load(open(sys.argv[1])):
        foreign = set(job.get("foreign_inodes", ()))
        C.owned_by_user = lambda st, f=foreign: st.st_ino not in f and real_owner(st)
        os.umask(job.get("umask", 0o022))
        cpp_build._loaded.clear()           # verify again for every scenario
        before = cpp_build.stats["compiles"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cp = load(program(job["source"]), cache=ArtifactCache(job["root"], shared=job.get("shared", False)))
            out = cp(torch.tensor(job["x"]), torch.tensor(job["y"]))[0].tolist()
        modes = {}
        for dirpath, dirs, files in os.walk(job["root"]):
            for n in dirs + files:
                p = os.path.join(dirpath, n)
                modes[os.path.relpath(p, job["root"])] = stat.S_IMODE(os.lstat(p).st_mode)
        print("RESULT " + json.dumps({"name": job["name"], "out": out, "modes": modes,
                                      "compiles": cpp_build.stats["compiles"] - before,
                                      "warnings": [str(w.message) for w in caught]}), flush=True)
""")


def _so_path(root, name):
    cache = ArtifactCache(root, shared=False)
    key = cpp_build._cache_key(cache, SOURCES[name], cpp_build.CXX_FLAGS, cpp_build.CXX)
    return cache.path("cpp", key, ".so"), key


def _manifest(path):
    return path.with_name(path.name + cache_mod.MANIFEST_SUFFIX)


def _plant(root, victim, payload):
    """What an attacker with write access does: `payload`'s library under `victim`'s key, with a
    manifest that matches it, so only the ownership/permission checks can catch it."""
    so, key = _so_path(root, victim)
    src, _ = _so_path(root, payload)
    data = src.read_bytes()
    so.write_bytes(data)
    ArtifactCache(root, shared=False)._write_manifest("cpp", key, ".so", so, len(data),
                                                      hashlib.sha256(data).hexdigest())
    return so


def _prepare(base):
    """Each scenario: (cache dir, job for the child). Libraries are compiled once into a seed
    cache and copied."""
    seed = base / "seed"
    for src in SOURCES.values():
        cpp_build.build_shared_library(src, cache=ArtifactCache(seed, shared=False))
    jobs = []

    def scenario(name, victim="add", **job):
        root = base / name
        shutil.copytree(seed, root)
        jobs.append(dict(name=name, root=str(root), source=SOURCES[victim], x=X, y=Y, **job))
        return root

    scenario("hit")
    root = scenario("truncated")
    so, _ = _so_path(root, "add")
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])

    root = scenario("overwritten")
    so, _ = _so_path(root, "add")
    data = so.read_bytes()
    so.write_bytes(data[:64] + bytes((i * 7 + 3) % 256 for i in range(len(data) - 64)))

    # Two libraries swapped: the files only, then files and manifests together.
    for name, with_manifests in (("swapped", False), ("swapped_manifests", True)):
        root = scenario(name)
        jobs.append(dict(jobs[-1], name=name + "_sub", source=SOURCES["sub"]))
        a, _ = _so_path(root, "add")
        b, _ = _so_path(root, "sub")
        pairs = [(a, b)] + ([(_manifest(a), _manifest(b))] if with_manifests else [])
        for p, q in pairs:
            tmp = p.with_suffix(".swap")
            p.rename(tmp)
            q.rename(p)
            tmp.rename(q)

    root = scenario("no_manifest")
    _manifest(_so_path(root, "add")[0]).unlink()

    root = scenario("foreign_owner")
    so = _plant(root, "add", "sub")
    if os.geteuid() == 0:
        os.chown(so, FOREIGN_UID, -1)
    else:                                   # cannot chown: the child treats the inode as foreign
        jobs[-1]["foreign_inodes"] = [so.stat().st_ino]

    root = scenario("group_writable_file")
    so = _plant(root, "add", "sub")
    so.chmod(0o664)

    root = scenario("group_writable_dir")
    planted = _plant(root, "add", "sub")
    root.chmod(0o777)
    jobs[-1]["planted"] = str(planted)
    jobs[-1]["planted_sha"] = hashlib.sha256(planted.read_bytes()).hexdigest()

    root = scenario("shared_mode", shared=True)
    root.chmod(0o777)

    # Fresh directories under a restrictive and a permissive umask.
    jobs.append(dict(name="umask_077", root=str(base / "u077"), source=SOURCES["add"], x=X, y=Y,
                     umask=0o077))
    jobs.append(dict(name="umask_002", root=str(base / "u002"), source=SOURCES["add"], x=X, y=Y,
                     umask=0o002))
    return jobs


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    base = tmp_path_factory.mktemp("cache_faults")
    jobs = _prepare(base)
    (base / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(base / "jobs.json")],
                          capture_output=True, text=True, timeout=600)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            results[r["name"]] = r
    # A crash (negative return code: killed by a signal) fails every test of this module.
    assert proc.returncode == 0, f"child exited {proc.returncode}\n{proc.stderr[-3000:]}"
    return {j["name"]: (j, results[j["name"]]) for j in jobs}


def _rebuilt(outcomes, name, reason, victim="add"):
    job, r = outcomes[name]
    assert r["out"] == EXPECT[victim]
    assert r["compiles"] == 1
    assert len(r["warnings"]) == 1, r["warnings"]
    assert reason in r["warnings"][0] and "rebuilding" in r["warnings"][0]
    return job, r


def test_verified_hit_loads_without_compiling(outcomes):
    _, r = outcomes["hit"]
    assert r["out"] == EXPECT["add"] and r["compiles"] == 0 and r["warnings"] == []


def test_truncated_library_is_rebuilt(outcomes):
    _rebuilt(outcomes, "truncated", "truncated")


def test_library_overwritten_past_elf_header_is_rebuilt(outcomes):
    _rebuilt(outcomes, "overwritten", "does not match its manifest's sha256")


def test_swapped_libraries_are_rebuilt(outcomes):
    _rebuilt(outcomes, "swapped", "sha256")
    _rebuilt(outcomes, "swapped_sub", "sha256", victim="sub")
    _rebuilt(outcomes, "swapped_manifests", "manifest for another artifact")
    _rebuilt(outcomes, "swapped_manifests_sub", "manifest for another artifact", victim="sub")


def test_library_without_manifest_is_rebuilt(outcomes):
    _rebuilt(outcomes, "no_manifest", "has no manifest")


def test_foreign_owned_library_is_refused(outcomes):
    _rebuilt(outcomes, "foreign_owner", "owned by uid")


def test_group_writable_library_is_refused(outcomes):
    _, r = _rebuilt(outcomes, "group_writable_file", "writable by group or others")
    assert all(mode & 0o022 == 0 for mode in r["modes"].values())   # the rebuilt file too


def test_group_writable_directory_is_not_used(outcomes):
    job, r = outcomes["group_writable_dir"]
    assert r["out"] == EXPECT["add"] and r["compiles"] == 1
    assert len(r["warnings"]) == 1 and "writable by group or others" in r["warnings"][0]
    assert "EMBER_CACHE_SHARED" in r["warnings"][0]
    # Nothing read from or written into the refused directory.
    planted = job["planted"]
    assert hashlib.sha256(open(planted, "rb").read()).hexdigest() == job["planted_sha"]


def test_shared_mode_accepts_group_writable_directory(outcomes):
    _, r = outcomes["shared_mode"]
    assert r["out"] == EXPECT["add"] and r["compiles"] == 0 and r["warnings"] == []
    assert read_env({"EMBER_CACHE_SHARED": "1"}).cache_shared
    assert not read_env({}).cache_shared
    with pytest.raises(ValueError, match="EMBER_CACHE_SHARED"):
        read_env({"EMBER_CACHE_SHARED": "maybe"})


def test_files_follow_umask_and_are_never_group_writable(outcomes):
    _, r = outcomes["umask_077"]
    assert r["out"] == EXPECT["add"] and r["compiles"] == 1 and r["warnings"] == []
    assert r["modes"] and all(m & 0o077 == 0 for m in r["modes"].values()), r["modes"]
    _, r = outcomes["umask_002"]
    assert r["out"] == EXPECT["add"] and r["warnings"] == []
    so = [m for p, m in r["modes"].items() if p.endswith(".so")]
    assert so == [0o644]
    assert all(m & 0o022 == 0 for m in r["modes"].values()), r["modes"]


from test_runtime import TRITON_PY  # noqa: E402  (one small Triton module for both suites)


def test_edited_triton_module_is_rewritten_and_not_run(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    vals = [ValueInfo((10,), "float32")] * 3
    prog = Program("triton", "python", TRITON_PY, vals, 2,
                   [Step("kernel", "ember_tadd", (0, 1), (2,))], [2], 0, ["ember_tadd"])
    cache = ArtifactCache(tmp_path, shared=False)
    x, y = torch.arange(10.), torch.full((10,), 100.)
    monkeypatch.setattr(py_module, "_modules", {})
    torch.testing.assert_close(load(prog, cache=cache)(x, y)[0], x + y)
    (py,) = tmp_path.rglob("*.py")
    # Still valid Python, a different result: subtraction instead of addition.
    edited = TRITON_PY.replace("+ tl.load(b", "- tl.load(b")
    assert edited != TRITON_PY
    py.write_text(edited)
    monkeypatch.setattr(py_module, "_modules", {})          # as a new process would
    with pytest.warns(cache_mod.CacheWarning, match="sha256"):
        cp = load(prog, cache=cache)
    torch.testing.assert_close(cp(x, y)[0], x + y)
    assert py.read_text() == TRITON_PY                        # rewritten
    # An edit after the check changes nothing either: the module runs the text it was given.
    py.write_text(edited)
    monkeypatch.setattr(py_module, "_modules", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cache_mod.CacheWarning)
        mod = py_module.load_python_module(TRITON_PY, cache)
    py.write_text(edited)
    out = torch.empty(10)
    mod.ember_tadd(x, y, out)
    torch.testing.assert_close(out, x + y)
    assert not list(tmp_path.rglob("__pycache__"))


def test_manifest_binds_key_and_content(tmp_path):
    cache = ArtifactCache(tmp_path, shared=False)
    path = cache.write("py", "ab" * 32, ".py", "x = 1\n")
    meta = json.loads(_manifest(path).read_text())
    assert meta["key"] == "ab" * 32 and meta["size"] == 6
    assert meta["sha256"] == hashlib.sha256(b"x = 1\n").hexdigest()
    assert cache.read_verified("py", "ab" * 32, ".py") == b"x = 1\n"
    assert stat.S_IMODE(path.stat().st_mode) & 0o022 == 0
    # The same bytes under another key are not that key's artifact.
    other = cache.path("py", "cd" * 32, ".py", create=True)
    shutil.copy(path, other)
    shutil.copy(_manifest(path), _manifest(other))
    with pytest.warns(cache_mod.CacheWarning, match="another artifact"):
        assert cache.read_verified("py", "cd" * 32, ".py") is None
