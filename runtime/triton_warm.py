"""Compile a loaded Triton program's kernels in parallel, ahead of their first launch.

Triton compiles a kernel when it is first launched, one at a time in the launching thread
(TTIR -> LLVM -> PTX -> ptxas: ~0.1-0.3 s a kernel, times every autotuning configuration).
`precompile` finds, without compiling or launching anything, the exact compile requests that
the first call's launches will make, and has a pool of fresh worker processes compile them;
each compiled kernel lands in Triton's on-disk cache under the key the launch computes, so the
launch in this process is a cache hit.

How the requests are found: each launcher is run on mock tensors (shape, dtype, and a data
pointer whose alignment is the one the run will have: the value's arena offset) with its
kernels replaced by recorders (a copy of the launcher over a copy of its module's globals;
the module itself is untouched). Each recorded launch is replayed as a `warmup` of the jit
function, once per autotuning configuration that the autotuner's pruning keeps, under Triton's
`jit_cache_hook`, which receives the serialized specialization (signature, constexprs,
alignment attributes, options, target) and, returning True, skips the compile. The workers
rebuild `ASTSource(fn, signature, constexprs, attrs)` from it, as Triton's `preload` does, and
call `triton.compile`. Requests already in Triton's cache (a warm start: a new process, the same
graph) are found by the lookup `triton.compile` starts with and not sent: no worker starts.
Where Triton builds a C launcher per kernel signature at the kernel's first load (Triton 3.6,
the GPU machine's), the worker builds it too, into the same cache (`prebuild_launcher`).

Invariant: nothing here changes what runs. A mispredicted request (an input that turns out
misaligned), a worker that fails or times out, or a Triton without the hook only means the
launch compiles for itself, as it would have. The workers start with a fresh interpreter
(`python this_file.py`), never fork a process that holds a CUDA context, and need no GPU.

This file is also the worker's script: no imports of ember at module level.
"""
from __future__ import annotations

import json
import os
import sys
import threading

_capture = threading.local()


class _Recorder:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def __getitem__(self, grid):
        def record(*args, **kwargs):
            self.log.append((self.name, args, kwargs))
        return record


def _mock_tensor_type():
    from triton.runtime.jit import MockTensor

    class _Mock(MockTensor):
        """What the launcher and Triton's binder read of a tensor: shape, dtype, device and the
        data pointer's alignment (a whole allocation is aligned; an arena value sits at its
        offset)."""

        def __init__(self, shape, dtype, device, ptr=0):
            super().__init__(dtype, list(shape))
            self.device, self._ptr = device, ptr

        def data_ptr(self):
            return self._ptr

        def view(self, dtype):
            return _Mock(self.shape, dtype, self.device, self._ptr)

    return _Mock


def _hook(prev):
    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        log = getattr(_capture, "log", None)
        if log is None:
            return prev(key=key, repr=repr, fn=fn, compile=compile,
                        is_manual_warmup=is_manual_warmup, already_compiled=already_compiled) \
                if prev else None
        spec = compile.get("specialization_data")
        if spec is not None:
            log.append((fn.jit_function, spec_with_target(spec, _current_target)))
        return True     # skip compiling here
    return hook


def _current_target():
    from triton.runtime import driver
    return driver.active.get_current_target()


def spec_with_target(spec: str, target) -> str:
    """The serialized specialization with the target it compiles for. Triton 3.9 records it
    (`target`); Triton 3.6 does not (its `preload` takes the running device's): without it
    every worker failed (`KeyError: 'target'`) and each kernel compiled in the launching
    process, one at a time. `target` is a GPUTarget or a function returning one, called only
    when the spec lacks it."""
    obj = json.loads(spec)
    if "target" in obj:
        return spec
    t = target() if callable(target) else target
    obj["target"] = {"backend": t.backend, "arch": t.arch, "warp_size": t.warp_size}
    return json.dumps(obj)


def _jit(obj):
    from triton.runtime.jit import JITFunction
    for _ in range(8):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def launch_variants(mod, launches, device) -> list:
    """[(jit function, args, kwargs)]: the launches that launching `launches` ([(launcher name,
    [(shape, torch dtype, pointer offset)])]) makes on mock tensors, one per autotuning
    configuration that the autotuner's pruning keeps. Launches nothing."""
    import types
    import torch
    import triton
    from triton.runtime.jit import KernelInterface
    Mock = _mock_tensor_type()
    records = []
    for name, args in launches:
        launcher = getattr(mod, name)
        g = dict(launcher.__globals__)
        for n in launcher.__code__.co_names:
            if isinstance(g.get(n), KernelInterface):
                g[n] = _Recorder(n, records)
        g["_ember_error_buffer"] = lambda dev: Mock((4,), torch.int64, dev)
        copy = types.FunctionType(launcher.__code__, g, name, launcher.__defaults__,
                                  launcher.__closure__)
        copy.__kwdefaults__ = launcher.__kwdefaults__   # a matmul launcher's `_choice=None`
        copy(*[Mock(shape, dt, device, ptr) for shape, dt, ptr in args])
    out = []
    for kname, args, kwargs in records:
        obj = getattr(mod, kname)
        jit = _jit(obj)
        if jit is None:
            continue
        if isinstance(obj, triton.runtime.Autotuner):
            configs = obj.configs
            prune = getattr(obj, "early_config_prune", None)
            if prune is not None and len(configs) > 1:
                configs = prune(configs, dict(zip(obj.arg_names, args)), **kwargs)
            out += [(jit, args, {**kwargs, **c.all_kwargs()}) for c in configs]
        else:
            out.append((jit, args, kwargs))
    return out


def _name_in(mod, jit) -> str:
    """The name under which `mod` holds `jit`: its own where `mod` defines it, else the name a
    launcher finds it by (a kernel runtime/py_module.share_identical_kernels bound to an
    earlier module's)."""
    own = jit.fn.__name__
    if _jit(getattr(mod, own, None)) is jit:
        return own
    return next((n for n, v in vars(mod).items() if _jit(v) is jit), own)


def foreign(mod, fn_name: str) -> bool:
    """Whether `mod`'s `fn_name` is a kernel another module defines (share_identical_kernels):
    a worker, which loads `mod`'s text alone, cannot compile it."""
    jit = _jit(getattr(mod, fn_name, None))
    return jit is not None and getattr(jit.fn, "__module__", None) != mod.__name__


def compile_requests(mod, launches, device) -> list[tuple[str, str]]:
    """[(jit function name, serialized specialization)] that the launches of
    `launch_variants` would compile, deduplicated, in launch order; the name is the one `mod`
    holds the function by (`_name_in`). Compiles nothing."""
    from triton import knobs
    variants = launch_variants(mod, launches, device)
    prev = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = _hook(prev)
    _capture.log = log = []
    try:
        for jit, args, kwargs in variants:
            jit.run(*args, grid=None, warmup=True, **kwargs)
    finally:
        _capture.log = None
        knobs.runtime.jit_cache_hook = prev
    names: dict[int, str] = {}
    return list(dict.fromkeys(
        (names.setdefault(id(jit), _name_in(mod, jit)), spec) for jit, spec in log))


def run_workers(argv, payloads, timeout: float) -> list[tuple]:
    """Runs one `argv` process per payload (JSON on its stdin), all at once, outside the Triton
    interpreter; [(returncode, stdout, stderr)] in payload order. Files, not pipes: every
    process starts at once and none blocks on a full pipe. A process past `timeout` is killed."""
    import subprocess
    import tempfile
    from .cache import use_for_triton
    use_for_triton()     # workers inherit TRITON_CACHE_DIR: ember's cache, unless the user set it
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    results = []
    with tempfile.TemporaryDirectory(prefix="ember_workers_") as tmp:
        procs = []
        for k, payload in enumerate(payloads):
            files = [os.path.join(tmp, f"{k}.{x}") for x in ("in", "out", "err")]
            with open(files[0], "w") as f:
                json.dump(payload, f)
            with open(files[0]) as fin, open(files[1], "w") as fout, open(files[2], "w") as ferr:
                procs.append((subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr,
                                               env=env), files))
        for p, files in procs:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            with open(files[1]) as fout, open(files[2]) as ferr:
                results.append((p.returncode, fout.read(), ferr.read()))
    return results


MAX_JOBS = 32


def default_jobs() -> int:
    """EMBER_COMPILE_WORKERS where set (runtime/env.py), else the cores this process may run
    on (its affinity: a process pinned with `taskset` to 16 of a host's 128 cores started 32
    workers by `os.cpu_count()`), at most MAX_JOBS."""
    from .env import get_env
    n = get_env().compile_workers
    if n is None:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
    return max(1, min(n, MAX_JOBS))


def estimated_cost(source: str, fn_name: str) -> int:
    """A compile's relative cost, from the kernel's text: its lines, each line of a
    `tl.static_range(N)` body counted N times (the body is unrolled). On the training steps of
    resnet18, GPT-2 and efficientnet_b0 its order is the measured seconds' (rank correlation
    0.83-0.86), enough for longest-first to reach the makespan of the measured order."""
    import re
    start = source.find(f"def {fn_name}(")
    if start < 0:
        return 0
    end = source.find("\n\n\n", start)
    total, mult, loop_indent = 0, 1, None
    for line in source[start:end if end >= 0 else len(source)].splitlines()[1:]:
        text = line.strip()
        if not text:
            continue
        indent = len(line) - len(line.lstrip())
        if loop_indent is not None and indent <= loop_indent:
            mult, loop_indent = 1, None
        m = re.match(r"for \w+ in tl\.static_range\((\d+)\)", text)
        if m:
            mult, loop_indent = int(m.group(1)), indent
            continue
        total += mult
    return total


def longest_first(source: str, requests) -> list:
    """`requests` ordered by `estimated_cost`, the costliest first (ties: launch order): a
    queue of workers then ends about together instead of behind one late long compile."""
    costs: dict[str, int] = {}
    for fn_name, _ in requests:
        if fn_name not in costs:
            costs[fn_name] = estimated_cost(source, fn_name)
    order = sorted(range(len(requests)), key=lambda k: (-costs[requests[k][0]], k))
    return [requests[k] for k in order]


class WorkerPool:
    """Worker processes kept for the whole process (`start_pool`): each starts a fresh
    interpreter running this file with `--serve`, imports Triton once (torch only if a
    module needs more than its version: `_torch_stand_in`), and then
    compiles one payload per line of its stdin, answering one JSON line on its stdout. Started
    when a GPU graph reaches the backend, the workers import while Dynamo, AOTAutograd and the
    passes run, and every later graph of the process reuses them: a graph's precompile costs
    its compiles, not the workers' start (seconds each, on a busy host).

    A worker that dies, answers garbage or runs past the timeout is killed and its payload
    reported as an error (its launches compile for themselves); the next use starts a new one.
    """

    def __init__(self, jobs: int, warmup: str | None = None):
        self.jobs = jobs
        self._procs: list = [None] * jobs
        # (module, digest) each worker holds loaded (compile_queue sends a module's text to
        # a worker once)
        self._has: list = [None] * jobs
        self._lock = threading.Lock()
        # a worker's first compile pays Triton's own set-up (~0.45 CPU s, over a second of
        # wall time here): with a target ("cuda:90:32") each worker compiles a throw-away
        # kernel for it into a temporary cache right after its imports, while the parent
        # traces, instead of in the first graph's precompile
        self.warmup = warmup

    def _spawn(self, k: int):
        import subprocess
        import tempfile
        from .cache import use_for_triton
        use_for_triton()     # workers inherit TRITON_CACHE_DIR: ember's cache, unless set
        env = {k2: v for k2, v in os.environ.items() if k2 != "TRITON_INTERPRET"}
        env.pop(_WARMUP_VAR, None)
        if self.warmup:
            env[_WARMUP_VAR] = self.warmup
        err = tempfile.TemporaryFile(mode="w+b", prefix="ember_worker_")
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=env)
        proc.ember_stderr = err
        self._procs[k] = proc
        self._has[k] = None
        return proc

    def start(self) -> None:
        with self._lock:
            for k in range(self.jobs):
                p = self._procs[k]
                if p is None or p.poll() is not None:
                    self._spawn(k)

    def _kill(self, k: int) -> str:
        p = self._procs[k]
        self._procs[k] = None
        self._has[k] = None
        if p is None:
            return ""
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            p.ember_stderr.seek(0)
            text = p.ember_stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            text = ""
        p.ember_stderr.close()
        return f"worker exit {p.returncode}: {text[-2000:]}"

    def compile_queue(self, source: str, path: str, modname: str, requests, jobs: int,
                      timeout: float, on_done=None) -> dict:
        """Compiles `requests` of one module on the first `jobs` workers from a queue: each
        worker gets one request and, when it answers, the next (in `requests`' order), so
        that no worker idles while another still holds a list (request k to worker k % jobs
        left resnet18's backward at 1.60 s on 8 workers where a queue of its requests,
        longest first, takes 1.30). A worker is sent the module's text only where it does not
        hold that module (its digest) loaded. {"ok": n, "errors": [text]} as compile_pool;
        `on_done(request)` is called as each request is answered (compiled or failed)."""
        import hashlib
        import selectors
        import time
        digest = hashlib.sha256(source.encode()).hexdigest()
        held = (modname, path, digest)
        result: dict = {"ok": 0, "errors": []}
        todo = list(reversed(requests))
        done = on_done or (lambda req: None)
        with self._lock:
            sel = selectors.DefaultSelector()
            busy: dict = {}         # worker -> [request, answer so far]

            def send(k: int) -> None:
                while todo:
                    req = todo.pop()
                    p = self._procs[k]
                    if p is None or p.poll() is not None:
                        if p is not None:
                            self._kill(k)
                        p = self._spawn(k)
                    payload = {"path": path, "module": modname, "digest": digest,
                               "requests": [list(req)]}
                    if self._has[k] != held:
                        payload["source"] = source
                    try:
                        p.stdin.write(json.dumps(payload).encode() + b"\n")
                        p.stdin.flush()
                    except OSError:
                        result["errors"].append(f"{req[0]}: {self._kill(k)}")
                        done(req)
                        continue
                    self._has[k] = held
                    busy[k] = [req, b""]
                    sel.register(p.stdout, selectors.EVENT_READ, k)
                    return

            for k in range(min(jobs, self.jobs, len(todo))):
                send(k)
            deadline = time.monotonic() + timeout
            while busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in sel.select(left):
                    k = key.data
                    chunk = os.read(key.fileobj.fileno(), 1 << 16)
                    if not chunk:                       # the worker died
                        sel.unregister(key.fileobj)
                        req, _ = busy.pop(k)
                        result["errors"].append(f"{req[0]}: {self._kill(k)}")
                        done(req)
                        send(k)
                        continue
                    busy[k][1] += chunk
                    if not busy[k][1].endswith(b"\n"):
                        continue
                    sel.unregister(key.fileobj)
                    req, answer = busy.pop(k)
                    try:
                        r = json.loads(answer.decode(errors="replace").strip().splitlines()[-1])
                        result["ok"] += r["ok"]
                        result["errors"] += r["errors"]
                    except (ValueError, IndexError, KeyError):
                        result["errors"].append(f"{req[0]}: worker answered {answer[-200:]!r}")
                        self._kill(k)
                    done(req)
                    send(k)
            sel.close()
            for k, (req, _) in list(busy.items()):      # past the timeout
                result["errors"].append(f"{req[0]}: timeout: {self._kill(k)}")
                done(req)
            result["errors"] += [f"{req[0]}: not sent before the timeout" for req in todo]
            for req in todo:
                done(req)
        return result

    def close(self, grace: float = 2.0) -> None:
        """Ends every worker: EOF on its stdin ends its loop; one still compiling after
        `grace` seconds (all workers together) is killed."""
        import time
        for p in self._procs:
            if p is not None:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        deadline = time.monotonic() + grace
        for k, p in enumerate(self._procs):
            if p is not None:
                try:
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
                except Exception:   # noqa: BLE001 -- killed below
                    pass
                self._kill(k)


_pool: WorkerPool | None = None


_WARMUP_VAR = "EMBER_WORKER_WARMUP"


def start_pool(jobs: int | None = None, warmup: str | None = None) -> WorkerPool | None:
    """Starts (once per process) the workers that every later precompile uses; returns at once.
    None where processes cannot be started (the one-shot workers of `run_workers` remain).
    `warmup`: the target ("cuda:90:32") each worker compiles a throw-away kernel for as soon
    as it has started (WorkerPool.warmup)."""
    global _pool
    try:
        if _pool is None:
            import atexit
            _pool = WorkerPool(jobs or default_jobs(), warmup)
            atexit.register(_pool.close)
            start_triton_key()
        _pool.start()
    except Exception:   # noqa: BLE001 -- compiles then start their own workers
        return None
    return _pool


_key_started = False


def start_triton_key() -> None:
    """Triton's cache key of itself (`triton_key`: a sha256 of its compiler's files and of
    libtriton, 0.38 CPU s and 1.2 s of wall time here, 0.43 s of a warm start's first launch on
    the H200: read once per process) computed in a thread now, while the parent traces: every
    kernel's first launch in a process looks Triton's cache up under a key that holds it (a
    warm start's too, which compiles nothing), and so does the first precompile. Reading and
    hashing release the GIL. Once per process; only a head start: a failure changes nothing."""
    global _key_started
    if _key_started:
        return
    _key_started = True
    try:
        from triton.runtime.cache import triton_key
    except Exception:   # noqa: BLE001 -- another Triton: its first lookup computes its key
        return

    def run():
        try:
            triton_key()
        except Exception:   # noqa: BLE001 -- computed again (and raised) where it is used
            pass
    threading.Thread(target=run, name="ember-triton-key", daemon=True).start()


_callback_registered = False


def start_triton_key_early() -> None:
    """`start_triton_key` as early as ember gets control: when torch.compile(backend="ember")
    looks the backend up (before Dynamo traces anything) if CUDA is in use by then, else at the
    start of each Dynamo compile (its start callbacks) once it is. Dynamo's trace of a model
    (BERT-base: 2 s on the H200) then hides the key's 1.3 s, which a warm start's first launch
    otherwise waits for (0.35-0.5 s after the backend's entry started it, its AOTAutograd trace
    skipped: frontend/inference_cache.py). Nothing happens without CUDA or with Triton's
    interpreter; never raises."""
    global _callback_registered
    try:
        import torch
        from .env import triton_interpreted
        if triton_interpreted():
            return
        if torch.cuda.is_initialized():
            start_triton_key()
        elif not _callback_registered and "torch._dynamo" in sys.modules:
            _callback_registered = True

            def on_start(*_args):
                try:
                    if torch.cuda.is_initialized() and not triton_interpreted():
                        start_triton_key()
                except Exception:   # noqa: BLE001 -- a head start only
                    pass
            torch._dynamo.callback_handler.register_start_callback(on_start)
    except Exception:   # noqa: BLE001 -- a head start only
        pass


def triton_cache_is_empty() -> bool:
    """Whether Triton's cache directory (ember's, unless TRITON_CACHE_DIR is set) holds
    nothing yet: a cold start, where every kernel will compile (the backend then starts the
    pool at once; otherwise only when a graph has something to compile)."""
    from .cache import use_for_triton
    d = use_for_triton() or os.environ.get("TRITON_CACHE_DIR") or \
        os.path.join(os.path.expanduser("~"), ".triton", "cache")
    try:
        with os.scandir(d) as entries:
            return next(entries, None) is None
    except OSError:
        return True


def compile_pool(source: str, path: str, modname: str, requests, jobs: int | None = None,
                 timeout: float = 600, in_order: bool = False, on_done=None) -> dict:
    """Compiles `requests` (from compile_requests) in `jobs` worker processes (the process's
    pool when `start_pool` started one, else workers started for this call); returns
    {"ok": n, "errors": [text]}. Request k goes to worker k % jobs (deterministic)."""
    requests = list(requests) if in_order else longest_first(source, list(requests))
    if not requests:
        return {"ok": 0, "errors": []}
    pool = _pool
    jobs = max(1, min(jobs or (pool.jobs if pool is not None else default_jobs()),
                      len(requests), MAX_JOBS))
    if pool is not None and jobs <= pool.jobs:
        return pool.compile_queue(source, path, modname, requests, jobs, timeout, on_done)
    # one-shot workers, one list each: the longest first, each to the least loaded list
    lists: list = [[] for _ in range(jobs)]
    load = [0] * jobs
    for req in requests:
        k = load.index(min(load))
        lists[k].append(req)
        load[k] += max(1, estimated_cost(source, req[0]))
    payloads = [{"source": source, "path": path, "module": modname, "requests": lst}
                for lst in lists if lst]
    result = {"ok": 0, "errors": []}
    answers = run_workers([sys.executable, os.path.abspath(__file__)], payloads, timeout)
    for code, out, err in answers:
        try:
            r = json.loads(out.strip().splitlines()[-1])
            result["ok"] += r["ok"]
            result["errors"] += r["errors"]
        except (ValueError, IndexError, KeyError):
            result["errors"].append(f"worker exit {code}: {err[-2000:]}")
    for req in requests if on_done is not None else ():
        on_done(req)
    return result


class PendingPrecompile:
    """A precompile still running (`precompile(..., overlap=True)`): its requests go to the
    workers in launch order from a thread, and each launcher waits, before its first launch,
    for its own requests only (`wait_launcher`), so that the first call's launches (their
    autotuning, their kernels' loads) run while the workers build the later kernels. Every
    request is marked answered whatever happens to it (compiled, failed, timed out, the
    thread failing): a launcher never waits for good, and a kernel whose build failed
    compiles at its launch, as without a precompile."""

    def __init__(self, by_launcher: dict, keys):
        self._events = {key: threading.Event() for key in keys}
        self._by_launcher = by_launcher
        self.done = threading.Event()
        self.result: dict | None = None

    def answered(self, request) -> None:
        ev = self._events.get(tuple(request))
        if ev is not None:
            ev.set()

    def wait_launcher(self, name: str, timeout: float = 600) -> None:
        if self.done.is_set():
            return
        for key in self._by_launcher.get(name, ()):
            ev = self._events.get(key)
            if ev is not None:
                ev.wait(timeout)

    def wait(self, timeout: float | None = None) -> dict | None:
        self.done.wait(timeout)
        return self.result


def precompile(mod, launches, device, jobs: int | None = None, overlap: bool = False):
    """compile_requests + compile_pool for a module loaded by runtime/py_module.py. Never
    raises: a failure is reported in the result and the launches compile for themselves.

    A precompile that left nothing to compile stamps Triton's cache (`precompile_stamp`): a
    warm start of the same program in the same cache then skips finding the requests and
    looking each up (~5 ms a request: 1.3 s of efficientnet_b0's warm start on the H100).
    Were the cache emptied since, the stamp went with it; were single kernels deleted, their
    launches compile for themselves, as without a precompile.

    `overlap`: where there is something to compile, a PendingPrecompile is returned at once
    (the requests go out in launch order, not longest first; see PendingPrecompile)."""
    import time
    t0 = time.perf_counter()
    try:
        stamp = precompile_stamp(mod, launches, device)
        if stamp is not None and stamp.exists():
            return {"ok": 0, "errors": [], "cached": 0, "stamped": True,
                    "seconds": round(time.perf_counter() - t0, 3)}
        by_launcher: dict = {}
        if overlap:     # which requests each launcher's first launch needs
            for launch in launches:
                by_launcher.setdefault(launch[0], []).extend(
                    compile_requests(mod, [launch], device))
            requests = list(dict.fromkeys(r for rs in by_launcher.values() for r in rs))
        else:
            requests = compile_requests(mod, launches, device)
        missing = [r for r in requests if not in_triton_cache(mod, *r)]
        # an earlier module's kernel (compiled with that module's first call, normally in the
        # cache by now): where it is not, its launch compiles it
        send = [r for r in missing if not foreign(mod, r[0])]
        if send and _pool is None and jobs is None:
            start_pool()    # kept for the next graphs of this process

        def finish(result: dict) -> dict:
            result["cached"] = len(requests) - len(missing)
            if len(send) < len(missing):
                result["left_to_launch"] = len(missing) - len(send)
            result["seconds"] = round(time.perf_counter() - t0, 3)
            if stamp is not None and not result.get("errors") \
                    and result.get("ok", 0) == len(missing):
                from .cache import atomic_write
                stamp.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(stamp, f"{len(requests)} requests\n")
            return result

        if not (overlap and send):
            return finish(compile_pool(mod.__ember_source__, mod.__file__, mod.__name__, send,
                                       jobs))
        pending = PendingPrecompile({k: [tuple(r) for r in v] for k, v in by_launcher.items()},
                                    [tuple(r) for r in send])
        source, path, name = mod.__ember_source__, mod.__file__, mod.__name__

        def run():
            result: dict = {"ok": 0, "errors": []}
            try:
                result = finish(compile_pool(source, path, name, send, jobs, in_order=True,
                                             on_done=pending.answered))
            except Exception as err:    # noqa: BLE001 -- the launches compile for themselves
                result["errors"].append(f"{type(err).__name__}: {err}")
            finally:
                for r in send:
                    pending.answered(r)
                pending.result = result
                pending.done.set()
        threading.Thread(target=run, name="ember-precompile", daemon=True).start()
        return pending
    except Exception as err:    # noqa: BLE001 -- the JIT path still compiles everything
        return {"ok": 0, "errors": [f"{type(err).__name__}: {err}"]}


def precompile_stamp(mod, launches, device):
    """The file in Triton's cache directory that says every compile request of these launches
    of this module is in that cache: named by a digest of the module's source, the launches
    (shapes, dtypes, pointer alignments), Triton's version and the target. None where the
    target is unknown."""
    import hashlib
    from pathlib import Path
    import triton
    from triton import knobs
    try:
        from triton.runtime import driver
        target = driver.active.get_current_target()
        target = (target.backend, target.arch, target.warp_size)
    except Exception:   # noqa: BLE001 -- no driver: no stamp
        return None
    h = hashlib.sha256()
    h.update(mod.__ember_source__.encode())
    h.update(repr([(name, [(tuple(shape), str(dt), off % 16) for shape, dt, off in args])
                   for name, args in launches]).encode())
    h.update(repr((triton.__version__, target, mod.__name__)).encode())
    return Path(knobs.cache.dir) / "ember-precompiled" / h.hexdigest()


# ---- worker ---------------------------------------------------------------------------------
def _decode_constant(value):
    import triton.language as tl
    if isinstance(value, str) and tl.dtype.is_dtype(value):
        return tl.dtype(value)
    if isinstance(value, dict):
        if "constexpr" in value:
            v = value["constexpr"]
            return tl.constexpr(tuple(v) if isinstance(v, list) else v)
        if "jit_function" in value:
            # Triton 3.9 serializes a jit function passed as a constant; 3.6 has no registry
            # (and no such entries): imported only here
            from triton.runtime.jit import _triton_jit_function_registry
            return _triton_jit_function_registry[value["jit_function"]]
    return tuple(value) if isinstance(value, list) else value


def _request_source(mod, fn_name: str, spec: str):
    """(ASTSource, target, backend, options) of one request, as the launch builds them."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    obj = json.loads(spec)
    target = GPUTarget(**obj["target"])
    backend = make_backend(target)

    def tup(v):
        return tuple(tup(x) for x in v) if isinstance(v, list) else v
    constexprs = {tuple(k): _decode_constant(v)
                  for k, v in zip(obj["constant_keys"], obj["constant_vals"])}
    attrs = dict(zip(map(tuple, obj["attrs_keys"]), obj["attrs_vals"]))
    signature = {k: tup(v) for k, v in obj["signature"].items()}
    options = backend.parse_options({k: tuple(v) if isinstance(v, list) else v
                                     for k, v in obj["options"].items()})
    src = ASTSource(_jit(getattr(mod, fn_name)), signature, constexprs, attrs)
    return src, target, backend, options


def compile_request(mod, fn_name: str, spec: str):
    """Compiles one request as the launch will (the same ASTSource, target and options)."""
    import triton
    src, target, _, options = _request_source(mod, fn_name, spec)
    return triton.compile(src, target=target, options=options.__dict__)


# Triton's per-signature C launchers (Triton 3.6 and before): backend name -> (driver module,
# launcher class). Later Triton versions launch through one generic launcher (no make_launcher).
_LAUNCHERS = {"cuda": ("triton.backends.nvidia.driver", "CudaLauncher"),
              "hip": ("triton.backends.amd.driver", "HIPLauncher")}


def prebuild_launcher(kernel) -> bool:
    """Builds `kernel`'s C launcher into Triton's cache, in a compile worker, where Triton
    itself would build it in the parent at the kernel's first load: Triton 3.6 and before
    compile one launcher per kernel signature with the host C compiler when a kernel is first
    loaded (its launcher class: make_launcher, then compile_module_from_src, cached in Triton's
    cache by the launcher's source), in the first call, one at a time. Built beside the kernel,
    the parent's load finds it in the cache. Nothing to do where Triton has no per-signature
    launcher; never raises. Whether one was built (or found)."""
    try:
        import importlib
        meta = kernel.metadata
        where = _LAUNCHERS.get(getattr(getattr(meta, "target", None), "backend", None))
        if where is None:
            return False
        driver = importlib.import_module(where[0])
        if not hasattr(driver, "make_launcher"):
            return False        # a generic launcher: nothing is built per signature
        getattr(driver, where[1])(kernel.src, meta)
        return True
    except Exception:   # noqa: BLE001 -- only a head start: the parent builds it at its load
        return False


def in_triton_cache(mod, fn_name: str, spec: str) -> bool:
    """Whether Triton's cache already holds the compiled request: the lookup `triton.compile`
    starts with (its cache key, the kernel's metadata file in that key's group), without
    compiling. False on any doubt (the request is then compiled, as before)."""
    try:
        import hashlib
        from triton import knobs
        from triton.compiler.compiler import (get_cache_invalidating_env_vars, get_cache_key,
                                              get_cache_manager)
        if knobs.compilation.always_compile or knobs.runtime.add_stages_inspection_hook:
            return False
        src, _, backend, options = _request_source(mod, fn_name, spec)
        options = backend.parse_options(dict(options.__dict__, **src.parse_options()))
        key = get_cache_key(src, backend, options, env_vars=get_cache_invalidating_env_vars())
        manager = get_cache_manager(hashlib.sha256(key.encode("utf-8")).hexdigest())
        name = f"{src.name[:150]}.json"
        group = manager.get_group(name)
        return bool(group) and group.get(name) is not None
    except Exception:   # noqa: BLE001 -- another Triton: compile it
        return False


def load_as(source: str, path: str, modname: str):
    """Executes generated source as the module `modname` with `path` as its file, as
    runtime/py_module.py does (Triton's cache key includes the function's qualified name)."""
    import linecache
    import types
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    mod = types.ModuleType(modname)
    mod.__file__ = path
    sys.modules[modname] = mod
    exec(compile(source, path, "exec"), mod.__dict__)
    return mod


_held: dict = {}     # a worker's last loaded module: {"key": (module, path, digest), "mod": ...}


def _compile_payload(req) -> dict:
    ok, errors = 0, []
    key = (req["module"], req["path"], req.get("digest"))
    if "source" in req:
        mod = load_as(req["source"], req["path"], req["module"])
        _held.clear()
        if key[2] is not None:
            _held.update(key=key, mod=mod)
    elif _held.get("key") == key:
        mod = _held["mod"]
    else:   # the parent thought this worker held the module: each request is reported
        return {"ok": 0, "errors": [f"{fn}: worker: module {req['module']} not loaded"
                                    for fn, _ in req["requests"]]}
    for fn_name, spec in req["requests"]:
        try:
            kernel = compile_request(mod, fn_name, spec)
            prebuild_launcher(kernel)
            ok += 1
        except Exception as err:  # noqa: BLE001 -- reported; the launch compiles it again
            errors.append(f"{fn_name}: {type(err).__name__}: {str(err)[:500]}")
    return {"ok": ok, "errors": errors}


def _torch_stand_in():
    """What `sys.modules["torch"]` holds in a worker until something needs torch itself: a
    generated module's top level reads only `torch.version` (HIP or CUDA), and its launchers,
    which use torch, never run in a worker; Triton compiles without it. Any other attribute
    imports the real torch (which then replaces this in sys.modules) and is read from it. A
    worker so starts with Triton's import alone (0.1 s CPU here) instead of torch's too (1 s
    here, more with CUDA's libraries), sixteen or more of them at once while the parent
    traces."""
    import importlib
    import importlib.util
    import types
    stand_in = types.ModuleType("torch")
    origin = importlib.util.find_spec("torch").origin
    spec = importlib.util.spec_from_file_location(
        "_ember_torch_version", os.path.join(os.path.dirname(origin), "version.py"))
    version = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(version)      # torch/version.py: plain assignments

    def real(name):     # a module's __getattr__ (PEP 562): the names it lacks
        if sys.modules.get("torch") is stand_in:
            del sys.modules["torch"]
        return getattr(importlib.import_module("torch"), name)
    stand_in.version = version
    stand_in.__getattr__ = real
    return stand_in


def _lazy_torch() -> None:
    """`torch` for a worker's generated modules (`_torch_stand_in`), unless torch is imported."""
    if "torch" not in sys.modules:
        try:
            sys.modules["torch"] = _torch_stand_in()
        except Exception:   # noqa: BLE001 -- no version file: the real torch, imported later
            sys.modules.pop("torch", None)


def _worker() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    _lazy_torch()
    print(json.dumps(_compile_payload(json.loads(sys.stdin.read()))))


_WARMUP_SOURCE = """import triton
import triton.language as tl


@triton.jit
def ember_warmup_kernel(x, y, n, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    v = tl.load(x + i, mask=i < n, other=0.0)
    tl.store(y + i, tl.exp(v) * 2.0 + tl.sum(v, 0), mask=i < n)
"""


def _warm_up(target: str) -> None:
    """Compiles a small kernel for `target` ("cuda:90:32": backend, arch, warp size) into a
    temporary Triton cache, removed after: Triton's first compile in a process loads and sets
    up its backend (LLVM, the PTX assembler), ~0.45 CPU s that a worker's first request would
    otherwise pay. Nothing of it stays in Triton's cache (a later process's cold-start test
    reads that cache: triton_cache_is_empty). Never raises."""
    import shutil
    import tempfile
    tmp = tempfile.mkdtemp(prefix="ember_warmup_")
    before = os.environ.get("TRITON_CACHE_DIR")
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        backend, arch, warp = target.split(":")
        os.environ["TRITON_CACHE_DIR"] = tmp
        path = os.path.join(tmp, "ember_warmup.py")
        with open(path, "w") as f:
            f.write(_WARMUP_SOURCE)
        mod = load_as(_WARMUP_SOURCE, path, "ember_warmup")
        src = ASTSource(mod.ember_warmup_kernel,
                        {"x": "*fp32", "y": "*fp32", "n": "i32", "XBLOCK": "constexpr"},
                        {"XBLOCK": 256})
        triton.compile(src, target=GPUTarget(backend, int(arch) if arch.isdigit() else arch,
                                             int(warp)))
    except Exception:   # noqa: BLE001 -- only a head start: the first request pays it then
        pass
    finally:
        if before is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = before
        sys.modules.pop("ember_warmup", None)
        shutil.rmtree(tmp, ignore_errors=True)


def _serve() -> None:
    """WorkerPool's worker: imports first (while the parent traces and compiles), then one
    payload per stdin line, one answer per stdout line, until EOF."""
    os.environ.pop("TRITON_INTERPRET", None)
    _lazy_torch()       # generated modules import torch; the compiles need none of it
    import triton  # noqa: F401
    # Answers go to a private copy of fd 1; fd 1 itself (and sys.stdout) become stderr, so
    # that nothing a compile prints, from Python or native code, corrupts them.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if os.environ.get(_WARMUP_VAR):
        _warm_up(os.environ[_WARMUP_VAR])
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = _compile_payload(json.loads(line))
        except Exception as err:  # noqa: BLE001 -- a bad payload: every request reported
            answer = {"ok": 0, "errors": [f"worker: {type(err).__name__}: {str(err)[:500]}"]}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    sys.path = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    _serve() if sys.argv[1:] == ["--serve"] else _worker()
