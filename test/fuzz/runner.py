"""Runs fuzz cases in a pool of child processes, so that a graph that kills its process (a
signal in generated code, an abort in MLIR) or hangs is a finding, not the end of the run.

A case is (seed, index, target) or (seed, index, target, variants): `variants` names compile
variants (compare.VARIANTS: fusion off, buffer planner off) also compared with eager. Workers
are spawned (no fork of a process holding torch's threads), import torch and ember once and
then take cases one at a time; a dead or late worker is replaced and its case recorded as `crash` / `timeout`. Statuses: pass, mismatch (values,
dtypes, shapes, strides, aliasing), error (raised on one side only), crash, timeout.
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from multiprocessing.connection import wait

# One thread a worker (OpenMP in ember's C++ and in torch, BLAS under the Triton interpreter's
# tl.dot): `jobs` workers use `jobs` cores, however many the machine has.
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
             "TRITON_INTERPRET": "1"}
FAILURES = ("mismatch", "error", "crash", "timeout")


def run_case(seed: int, index: int, target: str, variants=()) -> dict:
    """In-process: generate the graph, compare ember on `target` (and its `variants`) with
    eager."""
    from . import compare, graphs
    start = time.time()
    source = graphs.generate(seed, index).source()
    try:
        r = compare.check(source, target, tuple(variants))
    except Exception as e:  # noqa: BLE001 - the harness must not stop the run
        r = dict(status="error", reason=f"harness: {type(e).__name__}: {e}"[:300], fallback=[])
    return dict(r, seed=seed, index=index, target=target, variants=tuple(variants),
                source=source, seconds=round(time.time() - start, 3))


def _worker_main(conn, log_path: str, paths: list) -> None:
    os.environ.update(CHILD_ENV)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.path[:0] = paths
    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch._dynamo.config.cache_size_limit = 1 << 16
    import ember  # noqa: F401
    from fuzz import runner
    conn.send(("ready", None))
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(("result", runner.run_case(*case)))


class _Worker:
    def __init__(self, ctx, log: str, paths: list):
        self.log = log
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, log, paths), daemon=True)
        self.proc.start()
        child.close()
        self.ready, self.case, self.started = False, None, 0.0

    def tail(self, n: int = 400) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()   # our own child, by its handle
        self.proc.join(5)
        self.conn.close()


def _exit_text(code) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def run(cases, jobs: int = 2, timeout: float = 120.0, on_result=None,
        log_dir: str | None = None) -> list:
    """Runs (seed, index, target) cases; returns their results in order."""
    from . import graphs
    log_dir = log_dir or tempfile.mkdtemp(prefix="ember-fuzz-")
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    ctx = mp.get_context("spawn")
    pending = collections.deque(cases)
    results: dict = {}
    count = [0]

    def spawn():
        count[0] += 1
        saved = {k: os.environ.get(k) for k in CHILD_ENV}
        os.environ.update(CHILD_ENV)   # spawned children read it before importing torch
        try:
            return _Worker(ctx, os.path.join(log_dir, f"worker{count[0]}.log"), paths)
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)

    def finish(case, r):
        results[case] = r
        if on_result:
            on_result(r)

    order = list(pending)
    workers = [spawn() for _ in range(max(1, min(jobs, len(pending))))]
    try:
        while pending or any(w.case is not None for w in workers):
            for w in workers:
                if w.ready and w.case is None and pending:
                    w.case, w.started = pending.popleft(), time.time()
                    w.conn.send(w.case)
            wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], timeout=1.0)
            for i, w in enumerate(workers):
                try:
                    while w.conn.poll():
                        kind, payload = w.conn.recv()
                        if kind == "ready":
                            w.ready = True
                        else:
                            finish(w.case, payload)
                            w.case = None
                except (EOFError, OSError):
                    pass
                dead = not w.proc.is_alive()
                late = w.case is not None and time.time() - w.started > timeout
                if not (dead or late):
                    continue
                w.stop()
                if not w.ready:
                    raise RuntimeError(f"a fuzz worker died while starting: {w.tail()}")
                if w.case is not None:
                    seed, index, target = w.case[:3]
                    why = f"no result after {timeout:.0f} s" if late and not dead \
                        else _exit_text(w.proc.exitcode)
                    finish(w.case, dict(status="timeout" if late and not dead else "crash",
                                        reason=f"{why}; log: {w.tail()}", fallback=[],
                                        seed=seed, index=index, target=target,
                                        variants=tuple(w.case[3]) if len(w.case) > 3 else (),
                                        source=graphs.generate(seed, index).source(),
                                        seconds=round(time.time() - w.started, 1)))
                workers[i] = spawn()
    finally:
        for w in workers:
            if w.proc.is_alive():
                try:
                    w.conn.send(None)
                except OSError:
                    pass
            w.proc.join(2)
            w.stop()
    return [results[c] for c in order if c in results]
