"""The artifact cache: content-addressed files under one directory.

Layout: `<root>/<kind>/<key[:2]>/<key><suffix>` (kind: "cpp", "py", ...). An artifact exists
under its final name only once complete: every write goes to a temp file in the same directory,
is fsync'ed and then `os.replace`d, so a reader never sees a partial file and a crashed writer
leaves at most a `.tmp` file that no lookup ever matches. Builders take `lock(kind, key)`
(fcntl.flock on a side file) so that concurrent processes do not duplicate work; the lock is
an optimisation only: correctness comes from the atomic rename.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterator

TMP_SUFFIX = ".tmp"


@lru_cache(maxsize=None)
def ember_version() -> str:
    try:
        from importlib.metadata import version
        return version("ember")
    except Exception:       # running from a source tree without install metadata
        return "0+unknown"


def python_identity() -> str:
    """For artifacts whose meaning depends on the interpreter (Python modules, bytecode)."""
    return f"python-{sys.version_info.major}.{sys.version_info.minor}"


def compute_key(*parts: object) -> str:
    """sha256 over length-prefixed parts, so ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for p in parts:
        b = p if isinstance(p, bytes) else (p if isinstance(p, str) else repr(p)).encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _fsync_dir(d: Path) -> None:
    # Makes the rename itself durable; not all filesystems allow opening a directory.
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_file(path: Path | str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def temp_path_for(final: Path) -> Path:
    """A fresh temp name next to `final` (same filesystem, so os.replace is atomic)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    return Path(tmp)


def publish(tmp: Path, final: Path) -> None:
    """fsync `tmp` and atomically rename it to `final` (last writer wins; contents are equal)."""
    fsync_file(tmp)
    os.replace(tmp, final)
    _fsync_dir(final.parent)


def atomic_write(final: Path, data: bytes | str) -> Path:
    tmp = temp_path_for(final)
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return final


class ArtifactCache:
    def __init__(self, root: Path | str):
        self.root = Path(root).expanduser()

    def __repr__(self) -> str:
        return f"ArtifactCache({str(self.root)!r})"

    def key(self, kind: str, *parts: object) -> str:
        return compute_key(kind, ember_version(), *parts)

    def path(self, kind: str, key: str, suffix: str) -> Path:
        return self.root / kind / key[:2] / f"{key}{suffix}"

    def lookup(self, kind: str, key: str, suffix: str) -> Path | None:
        p = self.path(kind, key, suffix)
        return p if p.is_file() else None

    def write(self, kind: str, key: str, suffix: str, data: bytes | str) -> Path:
        return atomic_write(self.path(kind, key, suffix), data)

    @contextlib.contextmanager
    def lock(self, kind: str, key: str) -> Iterator[None]:
        lp = self.path(kind, key, ".lock")
        lp.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def default_cache() -> ArtifactCache:
    from .env import get_env
    return ArtifactCache(get_env().cache_dir)


def as_cache(cache: ArtifactCache | Path | str | None) -> ArtifactCache:
    if cache is None:
        return default_cache()
    return cache if isinstance(cache, ArtifactCache) else ArtifactCache(cache)
