"""Compile reports and the debug dump (EMBER_DEBUG_DIR / options.debug_dir).

Each compiled graph writes into `DIR/<graph_id>/`: fx_graph.txt, one .mlir per pipeline stage,
the kernels' source, report.json and, when a compile failed, error.txt and diagnostics.txt
(what MLIR and native code said). Files are written atomically (temp file + rename) so a crash
or a concurrent reader never sees half a file; a dump that cannot be written warns once and
never breaks the user's program. Reports also stay in memory: `ember.last_reports()`.

Fallback warnings go through `warn_once`: one line per op kind (or per distinct reason) per
process, however many graphs and calls hit it.
"""
from __future__ import annotations

import collections
import itertools
import json
import os
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

_REPORTS: collections.deque = collections.deque(maxlen=256)
_LOCK = threading.Lock()
_COUNTER = itertools.count()
_WARNED: set[str] = set()
_SKIP_PREFIXES = tuple(os.path.dirname(os.path.dirname(m.__file__)) + os.sep for m in (torch,)) + \
    (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)


def new_graph_id(kind: str) -> str:
    """`g0003-forward`: unique in this process; a specialization appends `-s<k>`."""
    return f"g{next(_COUNTER):04d}-{kind}"


def record(report: dict[str, Any]) -> None:
    with _LOCK:
        _REPORTS.append(report)


def last_reports(n: int | None = None) -> list[dict[str, Any]]:
    """The most recent compile reports, oldest first (all kept ones when `n` is None)."""
    with _LOCK:
        items = list(_REPORTS)
    return items if n is None else items[-n:]


def clear_reports() -> None:
    """Forgets the kept reports, and which fallbacks were warned about (the next one warns
    again: tests count warnings per case)."""
    with _LOCK:
        _REPORTS.clear()
        _WARNED.clear()


def warn_once(key: str, message: str) -> bool:
    """`warnings.warn(message)` the first time `key` is seen in this process; True if it warned.
    Keys are op names ("aten.sort.default") or reasons, so a fallback that every layer of a
    model or every call hits warns once."""
    import warnings
    with _LOCK:
        if key in _WARNED:
            return False
        _WARNED.add(key)
    warnings.warn(message, UserWarning, stacklevel=_user_stacklevel())
    return True


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside ember and torch (the user's line that ran the
    compiled function), so the warning shows that line rather than ember's internals."""
    level, frame = 2, sys._getframe(2)     # 1: warn_once's caller as seen from warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_PREFIXES):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class DebugDump:
    """Writes one graph's artifacts; every method is a no-op without a debug dir."""

    def __init__(self, debug_dir: str | None, graph_id: str):
        self.dir = Path(debug_dir) / graph_id if debug_dir else None
        self._stage = 0

    def write(self, name: str, text: str) -> None:
        if self.dir is None:
            return
        try:
            atomic_write(self.dir / name, text)
        except OSError as err:
            # A full disk or a read-only dump directory costs the dump, not the user's program.
            warn_once(f"debug_dir:{self.dir.parent}", f"ember: cannot write the debug dump "
                      f"under {self.dir.parent} ({err}); continuing without it")
            self.dir = None

    def stage(self, label: str, module) -> None:
        """`00-import.mlir`, `01-ember-convert-externs.mlir`, ...: the IR after each stage."""
        if self.dir is None:
            return
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "stage"
        self.write(f"{self._stage:02d}-{safe}.mlir", str(module))
        self._stage += 1

    def report(self, report: dict[str, Any]) -> None:
        self.write("report.json", json.dumps(report, indent=2, default=str) + "\n")


def describe_error(err: BaseException) -> str:
    """One line for reports and warnings; MLIR pass failures name their first diagnostic
    (the exception's own text only says that the pipeline failed). A diagnostic's location
    is shortened and put after its message (`compact_diagnostic`), so that the cut at 500
    characters never leaves only the location."""
    diags = getattr(err, "error_diagnostics", None)
    if diags:
        d = diags[0]
        text = compact_diagnostic(f"{d.location}: {d.message}")
    else:
        lines = str(err).strip().splitlines()
        text = compact_diagnostic(lines[0]) if lines else ""
    return f"{type(err).__name__}: {text}"[:500]


_FRAME = re.compile(r'"([^"]*)":(\d+):\d+')
MAX_FRAMES = 6


def compact_diagnostic(text: str) -> str:
    """`loc(fused[callsite("/a/swin.py":85:0 at ...), ...]): msg` -> `msg (at swin.py:85,
    453)`: the message first, then the innermost frame of each fused location as file
    basename and line (callers dropped, at most MAX_FRAMES lines). A `loc(` anywhere in the
    text (`stage failed: loc(...): msg`) is shortened likewise; text without one is returned
    as it is. The full location stays in the debug dump (error.txt)."""
    start = text.find("loc(")
    if start < 0:
        return text
    end = _close_paren(text, start + 3)
    if end is None:
        return text
    loc, rest = text[start + 4:end], text[end + 1:]
    msg = rest[1:].strip() if rest.startswith(":") else rest.strip()
    frames = _innermost_frames(loc)
    by_file: dict[str, list[str]] = {}
    for f, line in frames[:MAX_FRAMES]:
        by_file.setdefault(os.path.basename(f) or f, []).append(line)
    where = "; ".join(f"{f}:{','.join(lines)}" for f, lines in by_file.items())
    if len(frames) > MAX_FRAMES:
        where += ",..."
    where = f" (at {where})" if where else ""
    return f"{text[:start]}{msg}{where}".strip()


def _close_paren(text: str, i: int) -> int | None:
    """Index of the `)` closing the `(` at `text[i]` (string literals skipped), or None."""
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == '"':
            while True:
                j = text.find('"', j + 1)
                if j < 0:
                    return None
                if text[j - 1] != "\\":
                    break
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return None


def _innermost_frames(loc: str) -> list[tuple[str, str]]:
    """(file, line) of the innermost frame of each location fused into `loc` (the text inside
    `loc(...)`), first seen first, without repeats: a `callsite(callee at caller)` keeps its
    callee only (the text from ` at ` to the bracket closing the callsite is skipped)."""
    kept: list[str] = []
    out: list[tuple[str, str]] = []
    depth, i, skip_to = 0, 0, None
    while i < len(loc):
        if skip_to is None and depth > 0 and loc.startswith(" at ", i):
            skip_to, i = depth, i + 4
            continue
        c = loc[i]
        if c == '"':
            j = loc.find('"', i + 1)
            j = len(loc) - 1 if j < 0 else j
            if skip_to is None:
                kept.append(loc[i:j + 1])
            i = j + 1
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            if skip_to == depth:
                skip_to = None
            depth -= 1
        if skip_to is None:
            kept.append(c)
        i += 1
    for f, line in _FRAME.findall("".join(kept)):
        if (f, line) not in out:
            out.append((f, line))
    return out


_FD2_LOCK = threading.RLock()


class NativeOutput:
    """What MLIR (diagnostic handler on `context`) and native code (file descriptor 2) said while
    the `with` block ran: `lines`, for the debug dump and the error, never the user's stderr.

    A torch-mlir lowering reports an illegal op through MLIR's default handler, which prints
    to stderr when no handler is attached; LLVM and C++ code may write to fd 2 directly, past
    Python's `sys.stderr`. Redirecting fd 2 is process-wide, so it is held only around the
    MLIR part of a compile (import, passes, export; serialised by a lock; the C++ build
    captures its compiler's output itself), and put back even when they raise."""

    def __init__(self, context=None):
        self.context = context
        self.lines: list[str] = []
        self._handler = None
        self._saved = None
        self._tmp = None

    def _collect(self, diagnostic) -> bool:
        self.lines.append(f"{diagnostic.location}: {diagnostic.message}")
        for note in getattr(diagnostic, "notes", ()):
            self.lines.append(f"  note: {note.location}: {note.message}")
        return True     # handled: MLIR prints nothing

    def __enter__(self) -> "NativeOutput":
        _FD2_LOCK.acquire()
        try:
            if self.context is not None:
                self._handler = self.context.attach_diagnostic_handler(self._collect)
            try:
                sys.stderr.flush()
                self._tmp = tempfile.TemporaryFile()
                saved = os.dup(2)
                try:
                    os.dup2(self._tmp.fileno(), 2)
                except OSError:
                    os.close(saved)
                    raise
                self._saved = saved
            except (OSError, ValueError, AttributeError):   # no fd 2 (embedded interpreters)
                self._saved = None
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._saved is not None:
                try:
                    sys.stderr.flush()
                except (OSError, ValueError, AttributeError):
                    pass
                os.dup2(self._saved, 2)
                os.close(self._saved)
                self._tmp.seek(0)
                text = self._tmp.read().decode("utf-8", errors="replace")
                self.lines.extend(line for line in text.splitlines() if line.strip())
            if self._tmp is not None:
                self._tmp.close()
            if self._handler is not None:
                self._handler.detach()
                self._handler = None
        finally:
            _FD2_LOCK.release()

    def first(self) -> str | None:
        """The first error line (MLIR's `error:` diagnostics come first in importance)."""
        for line in self.lines:
            if "error" in line:
                return line
        return self.lines[0] if self.lines else None
