"""Build one C++ translation unit into a shared library, through the artifact cache, and load
it once per process."""
from __future__ import annotations

import ctypes
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .cache import ArtifactCache, as_cache, temp_path_for

log = logging.getLogger("ember.runtime")

CXX = "g++"
# -fno-math-errno: generated code never reads errno, and errno is what keeps std::sqrt (and so
# rsqrt) from vectorizing.
CXX_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared",
                              "-fPIC", "-std=c++17")

# Per-process counters; tests read them to prove a cache hit did not invoke the compiler.
stats = {"compiles": 0, "disk_hits": 0, "process_hits": 0}

_loaded: dict[str, ctypes.CDLL] = {}


class BuildError(RuntimeError):
    """The C++ compiler rejected generated code. `source_path` stays in the cache to inspect."""

    def __init__(self, message: str, source_path: Path | None = None, stderr: str = ""):
        super().__init__(message)
        self.source_path = source_path
        self.stderr = stderr


@lru_cache(maxsize=None)
def compiler_identity(cxx: str = CXX) -> str:
    if shutil.which(cxx) is None:
        raise BuildError(f"C++ compiler {cxx!r} not found on PATH; the cpu target needs g++")
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout.splitlines() or [cxx])[0].strip()


@lru_cache(maxsize=None)
def machine_identity() -> str:
    """-march=native means the code depends on this CPU: a cache shared between different
    machines must not hand one machine's AVX-512 code to another."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                model += line.split(":", 1)[1].strip() + ";"
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return f"{platform.machine()};{model}"


def _cache_key(cache: ArtifactCache, source: str, flags: tuple[str, ...], cxx: str) -> str:
    return cache.key("cpp", source, flags, compiler_identity(cxx), machine_identity())


def build_shared_library(source: str, extra_flags: Sequence[str] = (), *,
                         cache: ArtifactCache | Path | str | None = None,
                         cxx: str = CXX) -> tuple[str, Path]:
    """Returns (cache key, path of the .so). Compiles only when no artifact of this key on disk
    passes the cache's checks (runtime/cache.py), so the path returned is safe to dlopen."""
    cache = as_cache(cache)
    flags = CXX_FLAGS + tuple(extra_flags)
    key = _cache_key(cache, source, flags, cxx)
    # Checked without the lock first (the common hit); a failure is only reported under the
    # lock, since another process may be between writing the library and its manifest.
    so = cache.verified("cpp", key, ".so", warn=False)
    if so is not None:
        stats["disk_hits"] += 1
        return key, so
    with cache.lock("cpp", key):
        so = cache.verified("cpp", key, ".so")
        if so is not None:          # another process built it while we waited for the lock
            stats["disk_hits"] += 1
            return key, so
        return key, _compile(cache, key, source, flags, cxx)


def _compile(cache: ArtifactCache, key: str, source: str, flags: tuple[str, ...], cxx: str) -> Path:
    src = cache.write("cpp", key, ".cpp", source)   # kept: the thing to open when a build fails
    final = cache.path("cpp", key, ".so", create=True)
    tmp = temp_path_for(final)
    try:
        cmd = [cxx, *flags, str(src), "-o", str(tmp)]
        log.debug("ember: compiling %s", " ".join(cmd))
        stats["compiles"] += 1
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(
                f"ember: C++ compilation failed (exit {proc.returncode}) for {src}\n"
                f"command: {' '.join(cmd)}\n{proc.stderr.strip()}",
                source_path=src, stderr=proc.stderr)
        return cache.publish(tmp, "cpp", key, ".so")
    finally:
        if tmp.exists():
            tmp.unlink()


def load_library(source: str, extra_flags: Sequence[str] = (), *,
                 cache: ArtifactCache | Path | str | None = None, cxx: str = CXX) -> ctypes.CDLL:
    """Build (or find) and dlopen; one CDLL per key per process."""
    cache = as_cache(cache)
    key = _cache_key(cache, source, CXX_FLAGS + tuple(extra_flags), cxx)
    lib = _loaded.get(key)
    if lib is not None:
        stats["process_hits"] += 1
        return lib
    key, so = build_shared_library(source, extra_flags, cache=cache, cxx=cxx)
    try:
        lib = ctypes.CDLL(str(so))
    except OSError as e:
        # Only a file damaged outside ember (our writes are atomic) gets here: rebuild once.
        log.warning("ember: cached library %s does not load (%s); rebuilding", so, e)
        with cache.lock("cpp", key):
            so = _compile(cache, key, source, CXX_FLAGS + tuple(extra_flags), cxx)
        lib = ctypes.CDLL(str(so))
    _loaded[key] = lib
    return lib


def vectorization_report(source: str, extra_flags: Sequence[str] = (), cxx: str = CXX) -> str:
    """gcc's -fopt-info-vec-optimized report for `source` (e.g. "loop vectorized using 32 byte
    vectors"); uncached, for tests that pin that inner loops vectorize."""
    with tempfile.TemporaryDirectory(prefix="ember-vec-") as d:
        src = os.path.join(d, "k.cpp")
        with open(src, "w") as f:
            f.write(source)
        flags = [f for f in CXX_FLAGS if f != "-shared"]
        cmd = [cxx, *flags, *extra_flags, "-c", "-fopt-info-vec-optimized", src,
               "-o", os.path.join(d, "k.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"ember: C++ compilation failed\n{proc.stderr.strip()}",
                             stderr=proc.stderr)
        return proc.stderr
