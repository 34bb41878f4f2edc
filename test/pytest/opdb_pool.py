"""A pool of child processes for opdb_harness cases, so that a crash or a hang is a result.

multiprocessing's own pools give up when a worker dies (BrokenProcessPool); this one records
the case the dead worker was running as `crash` (with the signal and the sample it had started)
or `timeout`, starts a fresh worker and goes on. Workers are spawned (no fork of a process
holding torch's threads) and import op_db once (~10 s) before taking cases. Their stdout and
stderr go to a log file per worker: fallbacks print compiler diagnostics, and the tail of the
log is what a crash left behind.
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from multiprocessing.connection import wait

# One thread per worker: the pool itself is the parallelism (2 cores shared in CI).
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}


def _worker_main(conn, log_path: str, env: dict) -> None:
    os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    import torch
    torch._dynamo.config.cache_size_limit = 1 << 16
    torch._dynamo.config.accumulated_cache_size_limit = 1 << 16
    import opdb_harness
    opdb_harness.op_table()
    conn.send(("ready", None))
    while True:
        case = conn.recv()
        if case is None:
            return
        result = opdb_harness.run_case(case, progress=lambda text: conn.send(("progress", text)))
        conn.send(("result", result))


class _Worker:
    def __init__(self, ctx, log_dir: str, index: int, env: dict):
        self.log = os.path.join(log_dir, f"worker{index}.log")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, self.log, env), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.case = None
        self.started = 0.0
        self.progress = ""
        self.log_start = 0

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log)
        except OSError:
            return 0

    def log_tail(self, n: int = 300) -> str:
        """The end of what the worker printed since its current case started."""
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(self.log_start, f.tell() - n))
                return f.read().decode("utf-8", "replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()  # our own child, by its handle
        self.proc.join(5)
        self.conn.close()


def _exit_text(code) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class Pool:
    """`run(cases)` (blocking) or `start(cases)` + `get(case)` (cases run in the background
    while a test suite asks for them one by one)."""

    def __init__(self, jobs: int = 2, timeout: float = 180.0, log_dir: str | None = None,
                 max_restarts: int = 200):
        self.jobs, self.timeout = max(1, jobs), timeout
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="opdb-logs-")
        self._ctx = mp.get_context("spawn")
        self._restarts_left = max_restarts
        self._results: dict = {}
        self._cond = threading.Condition()
        self._thread = None
        self._count = 0

    # -- background use -------------------------------------------------------------------
    def start(self, cases, on_result=None) -> None:
        self._thread = threading.Thread(target=self.run, args=(cases, on_result), daemon=True)
        self._thread.start()

    def get(self, case: dict, timeout: float | None = None) -> dict:
        key = _key(case)
        deadline = None if timeout is None else time.time() + timeout
        with self._cond:
            while key not in self._results:
                if self._thread is not None and not self._thread.is_alive():
                    raise RuntimeError(f"opdb pool stopped before {key} ran")
                left = None if deadline is None else deadline - time.time()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{key} did not finish in time")
                self._cond.wait(timeout=min(left, 5.0) if left is not None else 5.0)
            return self._results[key]

    # -- the loop -------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        saved = {k: os.environ.get(k) for k in CHILD_ENV}
        os.environ.update(CHILD_ENV)  # spawned children read it before importing torch
        try:
            w = _Worker(self._ctx, self.log_dir, self._count, CHILD_ENV)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._count += 1
        return w

    def _finish(self, result: dict, on_result) -> None:
        with self._cond:
            self._results[_key(result)] = result
            self._cond.notify_all()
        if on_result is not None:
            on_result(result)

    def run(self, cases, on_result=None) -> list:
        pending = collections.deque(cases)
        order = [_key(c) for c in pending]
        workers = [self._spawn() for _ in range(min(self.jobs, len(pending)))]
        try:
            while pending or any(w.case is not None for w in workers):
                for w in workers:
                    if w.ready and w.case is None and pending:
                        w.case, w.started, w.progress = pending.popleft(), time.time(), ""
                        w.log_start = w.log_size()
                        w.conn.send(w.case)
                wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], timeout=1.0)
                for i, w in enumerate(workers):
                    if self._poll(w, on_result):
                        continue
                    dead = not w.proc.is_alive()
                    late = w.case is not None and time.time() - w.started > self.timeout
                    if not (dead or late):
                        continue
                    if w.case is not None:
                        status = "timeout" if late and not dead else "crash"
                        w.stop()
                        why = (f"no result after {self.timeout:.0f} s" if status == "timeout"
                               else _exit_text(w.proc.exitcode))
                        where = f" during {w.progress}" if w.progress else ""
                        tail = w.log_tail()
                        self._finish(dict(w.case, status=status, samples=0, graphs=0,
                                          fallback_ops=[], seconds=round(time.time() - w.started, 1),
                                          reason=f"{why}{where}" + (f"; log: {tail}" if tail else "")),
                                     on_result)
                    else:
                        w.stop()
                        if not w.ready:
                            raise RuntimeError(f"an opdb worker died while starting "
                                               f"({_exit_text(w.proc.exitcode)}): {w.log_tail()}")
                        if not pending:
                            workers[i] = w  # idle and dead with nothing left to do: fine
                            continue
                    self._restarts_left -= 1
                    if self._restarts_left < 0:
                        raise RuntimeError(f"opdb workers keep dying; last log: {w.log_tail()}")
                    workers[i] = self._spawn()
        finally:
            for w in workers:
                if w.proc.is_alive():
                    try:
                        w.conn.send(None)
                    except OSError:
                        pass
                w.proc.join(2)
                w.stop()
        return [self._results[k] for k in order if k in self._results]

    def _poll(self, w: _Worker, on_result) -> bool:
        """Reads what a worker sent; True when the worker is healthy."""
        try:
            while w.conn.poll():
                kind, payload = w.conn.recv()
                if kind == "ready":
                    w.ready = True
                elif kind == "progress":
                    w.progress = payload
                elif kind == "result":
                    w.case = None
                    self._finish(payload, on_result)
        except (EOFError, OSError):
            return False
        return w.proc.is_alive() and not (w.case is not None
                                          and time.time() - w.started > self.timeout)


def _key(case: dict) -> tuple:
    return (case["backend"], case["op"], case["variant"], case["dtype"], case["mode"])
