"""The only place ember reads environment variables.

The frontend calls `get_env()` once per compile and passes what it needs downward explicitly;
passes never read the environment, so a pipeline run from `ember-opt` or a test is
reproducible from its options alone.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class RuntimeEnv:
    cache_dir: Path                 # EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else ~/.cache/ember
    debug_dir: Path | None          # EMBER_DEBUG_DIR: where the frontend dumps IR/sources, if set
    target: str | None              # EMBER_TARGET: default compile target, if set
    # EMBER_CACHE_SHARED=1: the cache is shared between users, so ownership/permission checks
    # are off (contents are still verified against their manifests); see runtime/cache.py.
    cache_shared: bool = False
    cxx: str = "g++"                # CXX: the C++ compiler of the cpu target (needs -fopenmp)
    # EMBER_PROGRAM_CACHE=0: compile every graph again instead of taking its compiled program
    # from the cache (CompileOptions.program_cache's default; frontend/program_cache.py).
    program_cache: bool = True
    # EMBER_COMPILE_WORKERS=N: how many Triton compile workers a GPU process starts
    # (runtime/triton_warm.default_jobs); unset: the cores the process may run on.
    compile_workers: int | None = None


# The values of passes/backends.py's `Target` (the runtime imports nothing of the compiler;
# test_architecture checks that the two agree).
TARGETS = ("auto", "cpu", "cuda", "rocm", "triton")


def read_env(environ: Mapping[str, str] | None = None) -> RuntimeEnv:
    """Pure function of `environ` (defaults to os.environ), so tests can pass a dict."""
    e = os.environ if environ is None else environ
    if e.get("EMBER_CACHE_DIR"):
        cache = Path(e["EMBER_CACHE_DIR"])
    else:
        xdg = e.get("XDG_CACHE_HOME")
        base = Path(xdg) if xdg else Path(e.get("HOME") or Path.home()) / ".cache"
        cache = base / "ember"
    debug = Path(e["EMBER_DEBUG_DIR"]) if e.get("EMBER_DEBUG_DIR") else None
    target = e.get("EMBER_TARGET") or None
    if target is not None and target not in TARGETS:
        raise ValueError(f"EMBER_TARGET={target!r}: expected one of {', '.join(TARGETS)}")
    shared_text = (e.get("EMBER_CACHE_SHARED") or "0").strip().lower()
    if shared_text not in ("0", "1", "false", "true", "no", "yes"):
        raise ValueError(f"EMBER_CACHE_SHARED={e['EMBER_CACHE_SHARED']!r}: expected 0 or 1")
    program_text = (e.get("EMBER_PROGRAM_CACHE") or "1").strip().lower()
    if program_text not in ("0", "1", "false", "true", "no", "yes"):
        raise ValueError(f"EMBER_PROGRAM_CACHE={e['EMBER_PROGRAM_CACHE']!r}: expected 0 or 1")
    workers_text = (e.get("EMBER_COMPILE_WORKERS") or "").strip()
    if workers_text and not (workers_text.isdigit() and int(workers_text) > 0):
        raise ValueError(f"EMBER_COMPILE_WORKERS={workers_text!r}: expected a positive integer")
    return RuntimeEnv(cache_dir=cache.expanduser(), debug_dir=debug, target=target,
                      compile_workers=int(workers_text) if workers_text else None,
                      cache_shared=shared_text in ("1", "true", "yes"),
                      program_cache=program_text in ("1", "true", "yes"),
                      cxx=(e.get("CXX") or "").strip() or "g++")


_current: RuntimeEnv | None = None


def get_env() -> RuntimeEnv:
    """Read once per process; later changes to os.environ are deliberately not seen."""
    global _current
    if _current is None:
        _current = read_env()
    return _current


def set_env(env: RuntimeEnv | None) -> None:
    """Override (or with None, forget) the process-wide settings: for tests and embedders."""
    global _current
    _current = env


def triton_cache_dir_setting() -> str | None:
    """TRITON_CACHE_DIR as it is now (set by the user, or by `default_triton_cache_dir`)."""
    return os.environ.get("TRITON_CACHE_DIR") or None


def default_triton_cache_dir(path: Path) -> str:
    """Points Triton's own cache (kernels, launchers) at `path` for this process and the workers
    it starts, unless TRITON_CACHE_DIR is already set (by the user, or by an earlier call: the
    first wins), as Inductor does for its cache. Returns the directory Triton uses. Triton reads
    the variable whenever it opens its cache, so this works after `import triton` too."""
    return os.environ.setdefault("TRITON_CACHE_DIR", str(path))


def triton_interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (TRITON_INTERPRET=1) right now. Read on
    every call, unlike the settings above: Triton itself decides per `@triton.jit` decoration,
    so a module of kernels loaded in one mode cannot run in the other."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"
