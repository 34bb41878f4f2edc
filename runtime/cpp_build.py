"""Build one C++ translation unit into a shared library, through the artifact cache, and load
it once per process."""
from __future__ import annotations

import ctypes
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .cache import ArtifactCache, as_cache, temp_path_for

log = logging.getLogger("ember.runtime")

CXX = "g++"     # the default; the CXX environment variable overrides it (runtime/env.py)
# -fno-math-errno: generated code never reads errno, and errno is what keeps std::sqrt (and so
# rsqrt) from vectorizing.
# Measured (issue 13; g++ 12.2, 2-vCPU AMD EPYC with AVX-512, one thread, best of 30, the
# cpu_bench kernels): -march=native is what pays: gelu/sigmoid chain 2^22 10.2 ms vs 197 ms for
# the x86-64 baseline, softmax 4096x1024 3.7 vs 99 ms, layer_norm 1.57 vs 2.40 ms. -O2 and -O3
# run alike (10.2/6.2-10.2, 3.68/3.75, 1.57/1.59 ms) and build alike (0.4-0.7 s a graph, noise
# of the shared machine); -mprefer-vector-width=512 changes nothing there (g++ picks 512-bit
# vectors for Zen 4 already). So: -O3 -march=native, and the cache key carries the machine
# (machine_identity).
# -fwrapv: signed integer overflow wraps, as eager's integers do; without it g++ folds
# `(a + b) < b` to `a < 0` (fuzz seed 27 index 801: int64 6 + (2^63 - 2) < (2^63 - 2) was False,
# eager True).
# -mprefer-vector-width=512 (x86 only: other targets' compilers reject it): g++ 12 tunes Intel
# cores with AVX-512 (here -march=native reads as rocketlake) for 256-bit vectors, so every loop
# ran at half Inductor's width (its at::vec::Vectorized<float> has 16 lanes). Measured on the
# 2-vCPU Intel Xeon (AVX-512 + AMX), one thread, the kernels alone: chain 4.87 -> 4.25 ms
# (Inductor's .so 4.22), softmax 3.33 -> 2.62 ms (2.67). On AMD Zen 4 g++ picks 512 already.
# Not -fno-trapping-math: with it g++ computes both arms of a select instead of masking each
# (the chain kernel 4.08 -> 3.60 ms on the Intel Xeon), but it also changes results: torch's
# floor division tests its zero's sign as `q == 0 && 1 / q < 0`, and with the flag g++ lost
# that test's -0.0: `0 // -2.5` came out +0.0 (fuzz seed 41 index 4202).
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
CXX_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fno-math-errno", "-fwrapv", "-fopenmp",
                              *(("-mprefer-vector-width=512",) if _X86 else ()),
                              "-shared", "-fPIC", "-std=c++17")

# Per-process counters; tests read them to prove a cache hit did not invoke the compiler.
stats = {"compiles": 0, "disk_hits": 0, "process_hits": 0}

_loaded: dict[str, ctypes.CDLL] = {}


class BuildError(RuntimeError):
    """The C++ compiler rejected generated code. `source_path` stays in the cache to inspect."""

    def __init__(self, message: str, source_path: Path | None = None, stderr: str = ""):
        super().__init__(message)
        self.source_path = source_path
        self.stderr = stderr


class CompilerUnavailable(BuildError):
    """The start-up check failed: no working C++ compiler with OpenMP (one line: which compiler,
    what it said, how to fix it)."""


def default_cxx() -> str:
    from .env import get_env
    return get_env().cxx


def _command(cxx: str) -> list[str]:
    """CXX may carry a launcher or flags ("ccache g++"), as in make."""
    return shlex.split(cxx) or [CXX]


@lru_cache(maxsize=None)
def compiler_identity(cxx: str = CXX) -> str:
    cmd = _command(cxx)
    if shutil.which(cmd[0]) is None:
        raise BuildError(f"C++ compiler {cmd[0]!r} not found on PATH")
    out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, check=False)
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
                         cxx: str | None = None) -> tuple[str, Path]:
    """Returns (cache key, path of the .so). Compiles only when no artifact of this key on disk
    passes the cache's checks (runtime/cache.py), so the path returned is safe to dlopen."""
    cache = as_cache(cache)
    cxx = cxx or default_cxx()
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
        cmd = [*_command(cxx), *flags, str(src), "-o", str(tmp)]
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
                 cache: ArtifactCache | Path | str | None = None,
                 cxx: str | None = None) -> ctypes.CDLL:
    """Build (or find) and dlopen; one CDLL per key per process."""
    cache = as_cache(cache)
    cxx = cxx or default_cxx()
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


def vectorization_report(source: str, extra_flags: Sequence[str] = (),
                         cxx: str | None = None) -> str:
    """gcc's -fopt-info-vec-optimized report for `source` (e.g. "loop vectorized using 32 byte
    vectors"); uncached, for tests that pin that inner loops vectorize."""
    with tempfile.TemporaryDirectory(prefix="ember-vec-") as d:
        src = os.path.join(d, "k.cpp")
        with open(src, "w") as f:
            f.write(source)
        flags = [f for f in CXX_FLAGS if f != "-shared"]
        cmd = [*_command(cxx or default_cxx()), *flags, *extra_flags, "-c",
               "-fopt-info-vec-optimized", src, "-o", os.path.join(d, "k.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"ember: C++ compilation failed\n{proc.stderr.strip()}",
                             stderr=proc.stderr)
        return proc.stderr


# The start-up check: an OpenMP reduction, built and loaded like any kernel library (so through
# the cache: a machine that passed once pays only a lookup).
PROBE_SOURCE = r"""#include <omp.h>
extern "C" long ember_openmp_probe(long n) {
  long s = 0;
  #pragma omp parallel for reduction(+ : s)
  for (long i = 0; i < n; ++i) s += i;
  return omp_get_max_threads() > 0 ? s : -1;
}
"""

_probe_failures: dict[str, str | None] = {}


def _complaint(err: BaseException) -> str:
    lines = [ln.strip() for ln in getattr(err, "stderr", "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    text = (errors or lines or str(err).strip().splitlines() or [type(err).__name__])[0]
    return text[:200]


def check_compiler(cache: ArtifactCache | Path | str | None = None,
                   cxx: str | None = None) -> None:
    """Raises CompilerUnavailable unless `cxx` (default: $CXX, else g++) builds and loads an
    OpenMP library with ember's flags; checked once per process and compiler."""
    cxx = cxx or default_cxx()
    if cxx not in _probe_failures:
        reason = None
        try:
            lib = load_library(PROBE_SOURCE, cache=cache, cxx=cxx)
            lib.ember_openmp_probe.restype = ctypes.c_long
            lib.ember_openmp_probe.argtypes = [ctypes.c_long]
            if lib.ember_openmp_probe(1000) != 499500:
                reason = "its OpenMP build computed a wrong sum"
        except (BuildError, OSError) as err:
            reason = _complaint(err)
        _probe_failures[cxx] = reason
    reason = _probe_failures[cxx]
    if reason is not None:
        raise CompilerUnavailable(
            f"ember's cpu target needs a C++ compiler with OpenMP, and {cxx!r} with "
            f"`{' '.join(CXX_FLAGS)}` does not work here ({reason}). Install g++ (Debian/Ubuntu: "
            f"apt-get install g++; Fedora: dnf install gcc-c++) or set CXX to a compiler that "
            f"takes these flags (clang++ also needs libomp); meanwhile graphs for the cpu "
            f"target run in eager torch.")
