"""Test helper (not a test): ahead-of-time compilation of generated Triton modules, without a
GPU. Used by test_triton_aot.py, test_triton_codegen.py and test_packaging.py; the runtime
itself never compiles ahead of time for a named target.

`triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget(...))` runs Triton's
whole pipeline (TTIR -> TTGIR -> LLVM -> PTX/cubin or AMDGCN/hsaco) for a target named by hand,
so CI on a CPU machine proves that every generated kernel builds for both vendors.

The generated module says how to compile each kernel: every launcher `NAME` carries
`NAME.ember_aot = [(jit_fn_name, signature, constexprs, num_warps), ...]` (see
passes/ember_lower_to_triton.py); `signature` maps every argument name to a Triton type string
("*fp32", "i32", "constexpr"). Works with triton 3.6 and 3.9 (same ASTSource/compile API).
"""
from __future__ import annotations

import contextlib
import os
import sys
import types

DEFAULT_TARGETS = (("cuda", 90, 32), ("hip", "gfx942", 64))


@contextlib.contextmanager
def _compiled_mode():
    """`@triton.jit` decides between a JITFunction and the interpreter when it decorates, from
    TRITON_INTERPRET; AOT compilation needs a real JITFunction, so it is unset while the
    generated module is executed."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def load_module(source_text: str, name: str = "ember_triton_aot") -> types.ModuleType:
    """Executes generated source as a module. Triton reads a jit function's source through
    `inspect`, which finds it in `linecache` under the module's (pseudo) file name: no file is
    written, so nothing is left in $TMPDIR (mtime None: `linecache.checkcache` keeps the entry)."""
    import hashlib
    import linecache
    digest = hashlib.sha256(source_text.encode()).hexdigest()[:16]
    path = f"<ember-triton-aot-{digest}>"
    linecache.cache[path] = (len(source_text), None, source_text.splitlines(True), path)
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    try:
        exec(compile(source_text, path, "exec"), module.__dict__)
    finally:
        sys.modules.pop(name, None)
    return module


def _use_triton_cache():
    """Worker processes inherit TRITON_CACHE_DIR: ember's cache, unless the user set it."""
    from ember.runtime.cache import use_for_triton
    use_for_triton()


# Workers run this file as a script (a fresh interpreter, outside the Triton interpreter).
_WORKER = [sys.executable, os.path.abspath(__file__)]


def _jit_function(obj):
    """Unwraps autotuners/heuristics down to the JITFunction that ASTSource wants."""
    seen = 0
    while hasattr(obj, "fn") and seen < 8:
        if type(obj).__name__ == "JITFunction":
            break
        obj = obj.fn
        seen += 1
    return obj


def _target(spec):
    from triton.backends.compiler import GPUTarget
    return spec if isinstance(spec, GPUTarget) else GPUTarget(*spec)


def launch_options(module, target) -> dict:
    """The compile options a generated module's launches pass (its `_EMBER_LAUNCH`), for
    `target`'s backend (HIP has no flush-to-zero option)."""
    opts = dict(getattr(module, "_EMBER_LAUNCH", None) or {})
    if _target(target).backend == "hip":
        opts.pop("enable_reflect_ftz", None)
    return opts


def compile_kernel(fn, signature: dict, constexprs: dict, target, num_warps: int = 4,
                   divisible: bool = False, options: dict | None = None):
    """Compiles one jit function for `target`; returns the CompiledKernel (raises on error).
    `divisible`: every pointer and integer argument 16-divisible, as Triton's JIT specializes
    them at run time for aligned tensors and sizes (what decides vector loads)."""
    import triton
    from triton.compiler import ASTSource
    _use_triton_cache()
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(signature.values())
             if t != "constexpr"} if divisible else None
    src = ASTSource(fn=_jit_function(fn), signature=dict(signature), constexprs=dict(constexprs),
                    attrs=attrs)
    return triton.compile(src, target=_target(target),
                          options={"num_warps": num_warps, **(options or {})})


def compile_isolated(source_text: str, names=None, targets=DEFAULT_TARGETS,
                     timeout: float = 600, asm: str | None = None,
                     divisible: bool = False) -> dict:
    """compile_for_targets in a fresh interpreter: the Triton interpreter patches
    `triton.language` in place, so a process that interpreted kernels cannot compile them."""
    import json
    import subprocess
    payload = json.dumps({"source": source_text, "names": names, "asm": asm,
                          "divisible": divisible,
                          "targets": [list(_target_tuple(t)) for t in targets]})
    _use_triton_cache()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(_WORKER, input=payload, text=True,
                          capture_output=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"AOT compile subprocess failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _target_tuple(t):
    return (t.backend, t.arch, t.warp_size) if hasattr(t, "backend") else tuple(t)


def compile_for_targets(source_text: str, names=None, targets=DEFAULT_TARGETS,
                        asm: str | None = None, divisible: bool = False) -> dict:
    """AOT-compiles every jit function of the launchers `names` (all launchers carrying
    `ember_aot` when None) for each target.

    Returns {jit_fn_name: {"cuda:90": "ok" | "<error text>", "hip:gfx942": ...}}; a kernel
    that cannot be found or described is reported under its launcher's name. With `asm`
    ("ptx", "ttgir", "llir", ...) a compiled kernel's entry is that stage's text, not "ok".
    """
    with _compiled_mode():
        module = load_module(source_text)
    if names is None:
        names = [k for k, v in vars(module).items() if hasattr(v, "ember_aot")]
    results: dict[str, dict[str, str]] = {}
    for name in names:
        launcher = getattr(module, name, None)
        specs = getattr(launcher, "ember_aot", None)
        if not specs:
            results[name] = {"*": f"no launcher '{name}' with an ember_aot description"}
            continue
        for fn_name, signature, constexprs, num_warps in specs:
            per_target = results.setdefault(fn_name, {})
            fn = getattr(module, fn_name, None)
            for spec in targets:
                target = _target(spec)
                key = f"{target.backend}:{target.arch}"
                if fn is None:
                    per_target[key] = f"no jit function '{fn_name}' in the module"
                    continue
                try:
                    compiled = compile_kernel(fn, signature, constexprs, target, num_warps,
                                              divisible, launch_options(module, target))
                    binary = "cubin" if target.backend == "cuda" else "hsaco"
                    per_target[key] = "ok" if compiled.asm.get(binary) else f"no {binary} produced"
                    if asm and per_target[key] == "ok":
                        per_target[key] = str(compiled.asm.get(asm, f"no {asm} produced"))
                except Exception as err:  # the compiler's message is the report
                    per_target[key] = f"{type(err).__name__}: {err}"
    return results


def loaded_sources() -> list[str]:
    """The distinct generated Triton modules this process has loaded through the runtime
    (`py_module.load_python_module`), in load order: what a test session ran, for AOT checks."""
    from ember.runtime import py_module
    out, seen = [], set()
    for mod in list(py_module._modules.values()):
        # The text the module was executed from (the cached file could have changed since).
        text = getattr(mod, "__ember_source__", None)
        if not text or not any(hasattr(v, "ember_aot") for v in vars(mod).values()):
            continue
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def _kernel_key(fn, signature, constexprs, num_warps):
    jit = _jit_function(fn)
    src = getattr(jit, "src", None) or getattr(jit, "__name__", repr(jit))
    return (src, tuple(sorted(signature.items())), tuple(sorted(constexprs.items())), num_warps)


def compile_sources(sources, targets=DEFAULT_TARGETS, shard=(0, 1)) -> dict:
    """compile_for_targets over several generated modules, each distinct kernel (same jit
    source, signature, constexprs and warps) compiled once; with `shard=(k, n)` only the
    distinct kernels whose key hashes to k modulo n. Returns
    {"<module index>:<jit fn name>": {target: "ok" | error}}."""
    import hashlib
    results: dict[str, dict[str, str]] = {}
    done: dict = {}
    for i, text in enumerate(sources):
        with _compiled_mode():
            try:
                module = load_module(text, f"ember_triton_aot_{i}")
            except Exception as err:
                results[f"{i}:<module>"] = {"*": f"{type(err).__name__}: {err}"}
                continue
        for name, launcher in list(vars(module).items()):
            for fn_name, signature, constexprs, num_warps in getattr(launcher, "ember_aot", ()):
                fn = getattr(module, fn_name, None)
                label = f"{i}:{fn_name}"
                if fn is None:
                    results[label] = {"*": f"no jit function '{fn_name}' in the module"}
                    continue
                key = _kernel_key(fn, signature, constexprs, num_warps)
                if key in done:
                    continue
                digest = hashlib.sha256(repr(key).encode()).digest()
                if int.from_bytes(digest[:8], "little") % shard[1] != shard[0]:
                    done[key] = None
                    continue
                per_target = done[key] = results.setdefault(label, {})
                for spec in targets:
                    target = _target(spec)
                    tkey = f"{target.backend}:{target.arch}"
                    try:
                        compiled = compile_kernel(fn, signature, constexprs, target,
                                                  num_warps,
                                                  options=launch_options(module, target))
                        binary = "cubin" if target.backend == "cuda" else "hsaco"
                        per_target[tkey] = "ok" if compiled.asm.get(binary) else \
                            f"no {binary} produced"
                    except Exception as err:  # the compiler's message is the report
                        per_target[tkey] = f"{type(err).__name__}: {err}"
    return results


def compile_sources_isolated(sources, targets=DEFAULT_TARGETS, jobs: int | None = None,
                             timeout: float = 1800) -> dict:
    """compile_sources in fresh interpreters (see compile_isolated), the distinct kernels split
    over `jobs` parallel subprocesses (default: the CPU count, at most 8); each subprocess
    loads every module and compiles its share."""
    import json
    from ember.runtime.triton_warm import run_workers
    sources = list(dict.fromkeys(sources))
    if not sources:
        return {}
    jobs = max(1, jobs or min(os.cpu_count() or 1, 8))
    results: dict[str, dict[str, str]] = {}
    errors = []
    payloads = [{"sources": sources, "shard": [k, jobs],
                 "targets": [list(_target_tuple(t)) for t in targets]} for k in range(jobs)]
    for code, out, err in run_workers(_WORKER, payloads, timeout):
        if code != 0 or not out.strip():
            errors.append(f"exit {code}: {err[-4000:]}")
            continue
        results.update(json.loads(out.strip().splitlines()[-1]))
    if errors:
        raise RuntimeError("AOT compile subprocess failed:\n" + "\n".join(errors))
    return results


def failures(results: dict) -> dict:
    """The entries of a compile_for_targets result that are not "ok"."""
    return {fn: {t: r for t, r in per.items() if r != "ok"}
            for fn, per in results.items() if any(r != "ok" for r in per.values())}


if __name__ == "__main__":
    import json
    request = json.loads(sys.stdin.read())
    if "sources" in request:
        out = compile_sources(request["sources"], [tuple(t) for t in request["targets"]],
                              tuple(request.get("shard", (0, 1))))
    else:
        out = compile_for_targets(request["source"], request["names"],
                                  [tuple(t) for t in request["targets"]], request.get("asm"),
                                  request.get("divisible", False))
    print(json.dumps(out))
