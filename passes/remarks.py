"""Remarks: what a pass decided and why, located at the ops it decided about.

A pass asked to explain itself (`ember-fuse{explain=true}`, `ember-buffer-reuse{print-plan=true}`)
calls `emit(location, pass_name, message, **data)`. Whoever runs the pipeline decides where
remarks go, per MLIR context, the way an MLIR diagnostic handler does:

    with remarks.handler(ctx, on_remark):      # on_remark(Remark) -> None
        pm.run(module.operation)

`ember-opt` prints them as `FILE:LINE:COL: remark: ember-fuse: ...` (and `--verify-diagnostics`
matches them against `expected-remark` directives); the frontend keeps their `data` for
report.json. With no handler they go to stderr, printed as MLIR prints a diagnostic. (MLIR's
Python bindings can emit errors only, `Location.emit_error`, hence this small channel beside
MLIR's own diagnostics.)
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
from typing import Any, Callable

from torch_mlir import ir

_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_HANDLERS: list[tuple[ir.Context, Callable[["Remark"], None]]] = []


@dataclasses.dataclass(frozen=True)
class Remark:
    pass_name: str          # the flag of the pass that decided
    location: ir.Location   # the op decided about
    message: str            # for people, without the pass name
    data: dict[str, Any]    # the same decision as plain data (JSON-able)

    def text(self) -> str:
        return f"{self.pass_name}: {self.message}"


@contextlib.contextmanager
def handler(context: ir.Context, on_remark: Callable[[Remark], None]):
    """Sends the remarks emitted in `context` to `on_remark` while the block runs (the most
    recently installed handler of a context gets them)."""
    entry = (context, on_remark)
    _HANDLERS.append(entry)
    try:
        yield
    finally:
        _HANDLERS.remove(entry)


def emit(location: ir.Location, pass_name: str, message: str, **data: Any) -> None:
    remark = Remark(pass_name, location, message, data)
    context = location.context
    for ctx, on_remark in reversed(_HANDLERS):
        if ctx is context:
            on_remark(remark)
            return
    print(f"{location}: remark: {remark.text()}", file=sys.stderr)


def short_location(location: ir.Location) -> str:
    """`file:line:col` of the first file position in `location` ('' when it has none): what a
    report shows of where an op came from."""
    m = _FILE_LOC.search(str(location))
    return f"{m.group(1)}:{m.group(2)}:{m.group(3)}" if m else ""
