"""The artifact cache: content-addressed files under one directory, verified before use.

Layout: `<root>/<kind>/<key[:2]>/<key><suffix>` (kind: "cpp", "py", ...), and next to each
artifact a manifest `<key><suffix>.manifest` (JSON: kind, key, suffix, size, sha256 of the
content). The key is itself a digest of everything the artifact depends on (source, compiler,
flags, versions), so the manifest binds the content to its key.

Invariants:
- An artifact exists under its final name only once complete: every write goes to a temp file
  in the same directory, is fsync'ed and then `os.replace`d; its manifest is written the same
  way right after. A crashed writer leaves at most a `.tmp` file that no lookup ever matches.
- Nothing is handed to `dlopen` or executed before `verified`/`read_verified` checked it: a
  regular file (no symlink), owned by this user and not writable by group/others, in
  directories that are the same, with a manifest whose key is the expected one and whose size
  and sha256 match the bytes on disk. A missing manifest, a truncated or edited file, or two
  files swapped fail the check; the caller rebuilds, and one `CacheWarning` says why.
- The check and the `dlopen` are two steps; between them only this user (who owns every
  directory on the way) can replace the file, and ember's own writes are atomic renames.
- A directory that fails the ownership check is never read or written: that process builds in a
  private temporary directory instead (one warning names the directory and the fix).
  `shared=True` (`EMBER_CACHE_SHARED=1`) is the opt-in for a cache that several users write:
  ownership and permission checks are off (every writer is trusted), digests are still checked.
- Files and directories are created with the user's umask; in the default private mode the
  group/other write bits are always cleared, so that ember's own cache passes its own check.

Builders take `lock(kind, key)` (fcntl.flock on a side file) so that concurrent processes do
not duplicate work; the lock is an optimisation only: correctness comes from the atomic rename.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Iterator

TMP_SUFFIX = ".tmp"
MANIFEST_SUFFIX = ".manifest"
MANIFEST_FORMAT = 1


class CacheWarning(UserWarning):
    """A cached artifact or directory was not used (damaged, swapped, or not safely owned)."""


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


# --- ownership and modes ---------------------------------------------------------------------

def owned_by_user(st: os.stat_result) -> bool:
    """Whether this process's user owns the file. A module function so that tests (which run
    as root here) can simulate a foreign owner by monkeypatching it."""
    return st.st_uid == os.geteuid()


def current_umask() -> int:
    # /proc avoids os.umask's set-and-restore, which races with threads creating files.
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _untrusted_reason(st: os.stat_result, shared: bool, want_dir: bool) -> str | None:
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if shared:
        return None
    if not owned_by_user(st):
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


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


def file_digest(path: Path) -> tuple[int, str]:
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
    return n, h.hexdigest()


def temp_path_for(final: Path) -> Path:
    """A fresh temp name next to `final` (same filesystem, so os.replace is atomic)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    return Path(tmp)


def publish(tmp: Path, final: Path, mode: int | None = None) -> None:
    """fsync `tmp` and atomically rename it to `final` (last writer wins; contents are equal)."""
    if mode is not None:
        os.chmod(tmp, mode)
    fsync_file(tmp)
    os.replace(tmp, final)
    _fsync_dir(final.parent)


def atomic_write(final: Path, data: bytes | str, mode: int | None = None) -> Path:
    tmp = temp_path_for(final)
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return final


_warned: set[str] = set()
_private_root: Path | None = None


def _warn_once(tag: str, message: str) -> None:
    if tag not in _warned:
        _warned.add(tag)
        warnings.warn(message, CacheWarning, stacklevel=4)


def _private_fallback_root() -> Path:
    """A 0700 directory of this process, removed at exit: where artifacts go when the configured
    cache cannot be trusted (slower, every process builds again, but never unsafe)."""
    global _private_root
    if _private_root is None:
        _private_root = Path(tempfile.mkdtemp(prefix="ember-private-cache-"))
        atexit.register(shutil.rmtree, _private_root, True)
    return _private_root


class ArtifactCache:
    def __init__(self, root: Path | str, *, shared: bool | None = None):
        self.root = Path(root).expanduser()
        if shared is None:
            from .env import get_env
            shared = get_env().cache_shared
        self.shared = bool(shared)

    def __repr__(self) -> str:
        return f"ArtifactCache({str(self.root)!r}{', shared=True' if self.shared else ''})"

    # ---- where ------------------------------------------------------------------------------
    def key(self, kind: str, *parts: object) -> str:
        return compute_key(kind, ember_version(), *parts)

    def _dir_mode(self) -> int:
        mask = current_umask() | (0 if self.shared else 0o022)
        return 0o777 & ~mask

    def file_mode(self) -> int:
        mask = current_umask() | (0 if self.shared else 0o022)
        return 0o666 & ~mask

    def _trusted_dir(self, d: Path, create: bool) -> bool:
        """Checks every level from the root down to `d`; a missing level is created (with
        `create`) or is fine (nothing can be read from it; ember creates it later)."""
        levels = [self.root]
        for part in d.relative_to(self.root).parts:
            levels.append(levels[-1] / part)
        for i, level in enumerate(levels):
            if create:
                if i == 0:
                    level.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(level, self._dir_mode())
            try:
                st = os.stat(level)
            except FileNotFoundError:
                if not create:
                    return True
                reason = "cannot be created"
            except OSError as err:
                reason = f"cannot be used ({err.strerror})"
            else:
                reason = _untrusted_reason(st, self.shared, want_dir=True)
            if reason is not None:
                _warn_once(f"dir:{level}", (
                    f"ember: cache directory {level} {reason}; not using it (this process "
                    f"builds into a private temporary directory). Fix: `chmod go-w {level}` and "
                    f"own it, or set EMBER_CACHE_SHARED=1 for a cache shared between users."))
                return False
        return True

    def path(self, kind: str, key: str, suffix: str, *, create: bool = False) -> Path:
        """Where the artifact lives: under the root if every directory on the way is trusted,
        else in this process's private fallback directory; `create` makes the directories."""
        d = self.root / kind / key[:2]
        try:
            trusted = self._trusted_dir(d, create)
        except OSError as err:
            _warn_once(f"dir:{d}", f"ember: cache directory {d} cannot be created "
                                   f"({err.strerror}); building into a private temporary directory")
            trusted = False
        if not trusted:
            d = _private_fallback_root() / kind / key[:2]
            d.mkdir(parents=True, exist_ok=True)
        return d / f"{key}{suffix}"

    def triton_dir(self) -> Path | None:
        """`<root>/triton`, for Triton's own cache, when this cache is private and every
        directory on the way passes the ownership check; else None and Triton keeps its default
        (`~/.triton/cache`): Triton loads launchers from its cache without any check, so a
        shared or untrusted directory must not hold it."""
        if self.shared:
            return None
        d = self.root / "triton"
        try:
            return d if self._trusted_dir(d, create=True) else None
        except OSError:
            return None

    # ---- verified reads ---------------------------------------------------------------------
    def _check(self, kind: str, key: str, suffix: str, want_data: bool
               ) -> tuple[Path, str | None, bytes | None]:
        """(path, None, data) when the artifact verifies, (path, reason, None) when not;
        reason "missing" when there is no artifact at all."""
        path = self.path(kind, key, suffix)
        man = path.with_name(path.name + MANIFEST_SUFFIX)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return path, "missing", None
        except OSError as err:
            return path, f"cannot be read ({err.strerror})", None
        reason = _untrusted_reason(st, self.shared, want_dir=False)
        if reason is not None:
            return path, reason, None
        try:
            mst = os.lstat(man)
            reason = _untrusted_reason(mst, self.shared, want_dir=False)
            if reason is not None:
                return path, f"has a manifest that {reason}", None
            with open(man, "rb") as f:
                meta = json.loads(f.read(1 << 16))
        except FileNotFoundError:
            return path, "has no manifest", None
        except (OSError, ValueError) as err:
            return path, f"has an unreadable manifest ({err})", None
        expect = {"format": MANIFEST_FORMAT, "kind": kind, "key": key, "suffix": suffix}
        if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in expect.items()):
            return path, "has a manifest for another artifact (swapped or stale)", None
        if meta.get("size") != st.st_size:
            return path, f"has {st.st_size} bytes, its manifest says {meta.get('size')} (truncated?)", None
        data = None
        try:
            if want_data:
                with open(path, "rb") as f:
                    data = f.read()
                size, digest = len(data), hashlib.sha256(data).hexdigest()
            else:
                size, digest = file_digest(path)
        except OSError as err:
            return path, f"cannot be read ({err.strerror})", None
        if size != meta.get("size") or digest != meta.get("sha256"):
            return path, "does not match its manifest's sha256 (damaged or replaced)", None
        return path, None, data

    def _report(self, path: Path, reason: str | None, warn: bool) -> None:
        if warn and reason not in (None, "missing"):
            _warn_once(f"file:{path}", f"ember: cached artifact {path} {reason}; rebuilding it")

    def verified(self, kind: str, key: str, suffix: str, *, warn: bool = True) -> Path | None:
        """The artifact's path if it verifies (see the module docstring), else None; `warn`
        emits the one CacheWarning for an artifact that is present but fails the check."""
        path, reason, _ = self._check(kind, key, suffix, want_data=False)
        self._report(path, reason, warn)
        return path if reason is None else None

    def read_verified(self, kind: str, key: str, suffix: str, *, warn: bool = True) -> bytes | None:
        """The artifact's bytes, read once and checked (what is returned is what was hashed)."""
        path, reason, data = self._check(kind, key, suffix, want_data=True)
        self._report(path, reason, warn)
        return data if reason is None else None

    # ---- writes -----------------------------------------------------------------------------
    def _write_manifest(self, kind: str, key: str, suffix: str, path: Path, size: int,
                        digest: str) -> None:
        meta = {"format": MANIFEST_FORMAT, "kind": kind, "key": key, "suffix": suffix,
                "size": size, "sha256": digest, "ember": ember_version()}
        atomic_write(path.with_name(path.name + MANIFEST_SUFFIX),
                     json.dumps(meta, sort_keys=True) + "\n", self.file_mode())

    def write(self, kind: str, key: str, suffix: str, data: bytes | str) -> Path:
        """Atomically writes the artifact, then its manifest."""
        data = data.encode() if isinstance(data, str) else data
        path = atomic_write(self.path(kind, key, suffix, create=True), data, self.file_mode())
        self._write_manifest(kind, key, suffix, path, len(data), hashlib.sha256(data).hexdigest())
        return path

    def publish(self, tmp: Path, kind: str, key: str, suffix: str) -> Path:
        """Moves a finished temp file (e.g. a compiler's output) into place, then its manifest."""
        final = self.path(kind, key, suffix, create=True)
        size, digest = file_digest(tmp)     # hashed before the rename: what we built
        publish(tmp, final, self.file_mode())
        self._write_manifest(kind, key, suffix, final, size, digest)
        return final

    @contextlib.contextmanager
    def lock(self, kind: str, key: str) -> Iterator[None]:
        lp = self.path(kind, key, ".lock", create=True)
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, self.file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def default_cache() -> ArtifactCache:
    from .env import get_env
    return ArtifactCache(get_env().cache_dir)


def use_for_triton(cache: ArtifactCache | Path | str | None = None) -> str | None:
    """Puts Triton's cache under ember's (`<cache>/triton`) for this process and the workers it
    starts, unless the user set TRITON_CACHE_DIR; returns Triton's cache directory when ember
    chose it. Called wherever ember makes Triton compile (a module load, an AOT compile)."""
    from .env import default_triton_cache_dir
    d = as_cache(cache).triton_dir()
    return default_triton_cache_dir(d) if d is not None else None


def as_cache(cache: ArtifactCache | Path | str | None) -> ArtifactCache:
    if cache is None:
        return default_cache()
    return cache if isinstance(cache, ArtifactCache) else ArtifactCache(cache)
