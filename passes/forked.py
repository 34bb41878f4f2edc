"""Run a piece of work in a forked child, so that a native crash becomes a report.

MLIR's parser and passes are C++: on some malformed inputs they crash the process (e.g. a
`linalg.transpose` whose `permutation = [}1, 0, 2]` segfaults upstream's parser). ember-opt
therefore processes each input in a child (`fork`, so nothing is re-imported or re-parsed):
what the child reports (diagnostics, the printed module) streams back through a pipe as it is
produced, and a child killed by a signal leaves the parent able to say so, with the
diagnostics emitted before the crash.

The child must not rely on threads (fork copies only the calling thread): ember-opt turns off
MLIR's multithreading for this reason.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from typing import Any, Callable


class ChildError(RuntimeError):
    """A Python exception escaped the work in the child (its traceback: `child_traceback`)."""

    def __init__(self, message: str, child_traceback: str = ""):
        super().__init__(message)
        self.child_traceback = child_traceback


def available() -> bool:
    return hasattr(os, "fork") and sys.platform != "win32"


def run_forked(work: Callable[[Callable[[Any], None]], Any]
               ) -> tuple[list[Any], Any, str | None]:
    """Calls `work(send)` in a child; `send(msg)` passes a JSON-able message to the parent at
    once. Returns (messages, work's JSON-able result, name of the signal that killed the child or
    None). A Python exception in the child is raised here as ChildError."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                                        # child: never returns
        os.close(r)
        out = os.fdopen(w, "w", encoding="utf-8")
        code = 0

        def send(msg: Any) -> None:
            out.write(json.dumps({"msg": msg}) + "\n")
            out.flush()

        try:
            result = work(send)
            out.write(json.dumps({"result": result}) + "\n")
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            out.write(json.dumps({"error": f"{type(err).__name__}: {err}",
                                  "traceback": traceback.format_exc()}) + "\n")
            code = 1
        finally:
            try:
                out.flush()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(w)
    messages, result, error = [], None, None
    with os.fdopen(r, "r", encoding="utf-8") as f:
        for line in f:
            try:
                item = json.loads(line)
            except ValueError:
                continue                                # a line cut short by a crash
            if "msg" in item:
                messages.append(item["msg"])
            elif "result" in item:
                result = item["result"]
            elif "error" in item:
                error = item
    _, status = os.waitpid(pid, 0)
    if error is not None:
        raise ChildError(error["error"], error["traceback"])
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return messages, None, name
    return messages, result, None
