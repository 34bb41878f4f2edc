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
            log.append((fn.jit_function.__name__, spec))
        return True     # skip compiling here
    return hook


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


def compile_requests(mod, launches, device) -> list[tuple[str, str]]:
    """[(jit function name, serialized specialization)] that the launches of
    `launch_variants` would compile, deduplicated, in launch order. Compiles nothing."""
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
    return list(dict.fromkeys(log))


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


def compile_pool(source: str, path: str, modname: str, requests, jobs: int | None = None,
                 timeout: float = 600) -> dict:
    """Compiles `requests` (from compile_requests) in `jobs` worker processes; returns
    {"ok": n, "errors": [text]}. Request k goes to worker k % jobs (deterministic)."""
    requests = list(requests)
    if not requests:
        return {"ok": 0, "errors": []}
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(requests), 32))
    payloads = [{"source": source, "path": path, "module": modname,
                 "requests": requests[k::jobs]} for k in range(jobs)]
    result = {"ok": 0, "errors": []}
    for code, out, err in run_workers([sys.executable, os.path.abspath(__file__)], payloads,
                                      timeout):
        try:
            r = json.loads(out.strip().splitlines()[-1])
            result["ok"] += r["ok"]
            result["errors"] += r["errors"]
        except (ValueError, IndexError, KeyError):
            result["errors"].append(f"worker exit {code}: {err[-2000:]}")
    return result


def precompile(mod, launches, device, jobs: int | None = None) -> dict:
    """compile_requests + compile_pool for a module loaded by runtime/py_module.py. Never
    raises: a failure is reported in the result and the launches compile for themselves."""
    try:
        requests = compile_requests(mod, launches, device)
        missing = [r for r in requests if not in_triton_cache(mod, *r)]
        result = compile_pool(mod.__ember_source__, mod.__file__, mod.__name__, missing, jobs)
        result["cached"] = len(requests) - len(missing)
        return result
    except Exception as err:    # noqa: BLE001 -- the JIT path still compiles everything
        return {"ok": 0, "errors": [f"{type(err).__name__}: {err}"]}


# ---- worker ---------------------------------------------------------------------------------
def _decode_constant(value):
    import triton.language as tl
    from triton.runtime.jit import _triton_jit_function_registry
    if isinstance(value, str) and tl.dtype.is_dtype(value):
        return tl.dtype(value)
    if isinstance(value, dict):
        if "constexpr" in value:
            v = value["constexpr"]
            return tl.constexpr(tuple(v) if isinstance(v, list) else v)
        if "jit_function" in value:
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


def _worker() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    req = json.loads(sys.stdin.read())
    ok, errors = 0, []
    mod = load_as(req["source"], req["path"], req["module"])
    for fn_name, spec in req["requests"]:
        try:
            compile_request(mod, fn_name, spec)
            ok += 1
        except Exception as err:  # noqa: BLE001 -- reported; the launch compiles it again
            errors.append(f"{fn_name}: {type(err).__name__}: {str(err)[:500]}")
    print(json.dumps({"ok": ok, "errors": errors}))


if __name__ == "__main__":
    sys.path = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    _worker()
