"""Compile reports and the debug dump (EMBER_DEBUG_DIR / options.debug_dir).

Each compiled graph writes into `DIR/<graph_id>/`: fx_graph.txt, one .mlir per pipeline stage,
the kernels' source and report.json. Files are written atomically (temp file + rename) so a
crash or a concurrent reader never sees half a file. Reports also stay in memory:
`ember.last_reports()`.
"""
from __future__ import annotations

import collections
import itertools
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

_REPORTS: collections.deque = collections.deque(maxlen=256)
_LOCK = threading.Lock()
_COUNTER = itertools.count()


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
    with _LOCK:
        _REPORTS.clear()


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
        if self.dir is not None:
            atomic_write(self.dir / name, text)

    def stage(self, label: str, module) -> None:
        """`00-import.mlir`, `01-ember-fuse.mlir`, ...: the IR after each stage."""
        if self.dir is None:
            return
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "stage"
        self.write(f"{self._stage:02d}-{safe}.mlir", str(module))
        self._stage += 1

    def report(self, report: dict[str, Any]) -> None:
        self.write("report.json", json.dumps(report, indent=2, default=str) + "\n")


def describe_error(err: BaseException) -> str:
    """One line for reports and warnings; MLIR pass failures name their first diagnostic
    (the exception's own text only says that the pipeline failed)."""
    diags = getattr(err, "error_diagnostics", None)
    if diags:
        d = diags[0]
        text = f"{d.location}: {d.message}"
    else:
        lines = str(err).strip().splitlines()
        text = lines[0] if lines else ""
    return f"{type(err).__name__}: {text}"[:500]
