"""ember's caches: where they are, how big, and clearing them.

    python -m ember.cache            # each cache directory and its size
    python -m ember.cache --clear    # remove what ember cached (also: ember-cache --clear)

ember writes only under one directory, its cache (`EMBER_CACHE_DIR`, else
`$XDG_CACHE_HOME/ember`, else `~/.cache/ember`): `cpp/` (C++ kernel libraries), `py/` (generated
Triton modules), `program/` (compiled programs: a warm start skips the passes) and `triton/`, Triton's own cache for the kernels ember compiles, unless
`TRITON_CACHE_DIR` is set (then Triton's cache is there and `--clear` leaves it alone) or the
cache is shared (`EMBER_CACHE_SHARED=1`: Triton keeps its default, `~/.triton/cache`).
`--clear` removes only those subdirectories, so a cache directory set by mistake to a folder
with other files loses none of them. Everything in the cache is rebuilt on demand; clear it
while no ember process runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

# What ember itself puts under its cache directory (runtime/cache.py's kinds, and Triton's).
PARTS = (("cpp", "C++ kernel libraries"), ("py", "generated Triton modules"),
         ("program", "compiled programs (warm start)"),
         ("triton", "Triton's cache (compiled kernels)"))


def _size(path: Path) -> tuple[int, int]:
    """(files, bytes) under `path`; symlinks are counted, not followed."""
    files = total = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
                files += 1
            except OSError:
                pass
    return files, total


def _mb(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def report(clear: bool = False, out=None) -> int:
    """Prints each cache and its size (and with `clear`, removes ember's); returns the bytes
    freed."""
    out = out or sys.stdout
    from .runtime.env import read_env, triton_cache_dir_setting
    env = read_env()
    root = env.cache_dir
    triton_set = triton_cache_dir_setting()
    print(f"ember cache: {root}" + ("  (shared: EMBER_CACHE_SHARED=1)" if env.cache_shared
                                    else ""), file=out)
    freed = files_all = bytes_all = 0
    for name, what in PARTS:
        part = root / name
        files, size = _size(part) if part.is_dir() else (0, 0)
        files_all, bytes_all = files_all + files, bytes_all + size
        print(f"  {name + '/':8} {what:36} {files:6} files {_mb(size):>10}", file=out)
        if clear and part.exists():
            shutil.rmtree(part, ignore_errors=True)
            freed += size - (_size(part)[1] if part.exists() else 0)
    print(f"  {'total':8} {'':36} {files_all:6} files {_mb(bytes_all):>10}", file=out)
    if triton_set:
        files, size = _size(Path(triton_set))
        print(f"Triton's cache: TRITON_CACHE_DIR={triton_set}, {files} files, {_mb(size)} "
              f"(set by you: not cleared here)", file=out)
    default_triton = Path(os.path.expanduser("~/.triton/cache"))
    if default_triton.is_dir() and str(default_triton) != triton_set:
        files, size = _size(default_triton)
        print(f"Triton's default cache (not ember's; not cleared here): {default_triton}, "
              f"{files} files, {_mb(size)}", file=out)
    if clear:
        print(f"cleared {_mb(freed)} from {root}", file=out)
        try:
            root.rmdir()            # only if nothing else is left in it
        except OSError:
            pass
    return freed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ember.cache", description=__doc__.split("\n")[0])
    ap.add_argument("--clear", action="store_true",
                    help="remove ember's cached artifacts and the Triton cache under it")
    args = ap.parse_args(argv)
    report(clear=args.clear)
    return 0


if __name__ == "__main__":
    sys.exit(main())
