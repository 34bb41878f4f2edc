"""Import generated Python (Triton) code through the artifact cache.

Invariant: the code executed is exactly the generated `source` held in memory, never bytes read
back from the cache; the cached file (verified against its manifest before use, rewritten when
it fails) exists so that Triton, which reads a jit function's text through `inspect`, and
tracebacks have a real file to point at. `linecache` is primed with the same text, so an edit
to the file on disk after the check cannot change what Triton compiles, and no `__pycache__`
bytecode is written or read.
"""
from __future__ import annotations

import inspect
import linecache
import re
import sys
import types

from .cache import ArtifactCache, python_identity, use_for_triton
from .env import triton_interpreted

# key -> module, in load order (test/pytest/triton_aot.py loaded_sources reads it).
_modules: dict[str, types.ModuleType] = {}


def cached_module_path(source: str, cache: ArtifactCache, key: str):
    """The path of the verified (or freshly written) cache file holding `source`."""
    if cache.read_verified("py", key, ".py", warn=False) is None:
        with cache.lock("py", key):
            if cache.read_verified("py", key, ".py") is None:
                cache.write("py", key, ".py", source)
    return cache.path("py", key, ".py")


def load_python_module(source: str, cache: ArtifactCache) -> types.ModuleType:
    """Import generated Python (Triton) code from a real file in the cache, under a name unique
    to its content: Triton's JIT keys its own cache on the function's source and file, and
    tracebacks point at a file one can open."""
    # One module per Triton mode: its @triton.jit functions are bound to the mode at import.
    mode = "interpreted" if triton_interpreted() else "jit"
    key = cache.key("py", source, python_identity(), mode)
    mod = _modules.get(key)
    if mod is not None:
        return mod
    use_for_triton(cache)       # Triton's cache beside ember's, unless TRITON_CACHE_DIR is set
    path = str(cached_module_path(source, cache, key))
    name = f"ember_generated_{key[:24]}"
    code = compile(source, path, "exec")
    # mtime None: linecache.checkcache never drops or reloads the entry from disk.
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    mod = types.ModuleType(name)
    mod.__file__ = path
    mod.__ember_source__ = source
    sys.modules[name] = mod     # triton.jit inspects the defining module by name
    try:
        exec(code, mod.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    if mode == "jit":
        mod.__ember_shared__ = share_identical_kernels(mod)
    _modules[key] = mod
    return mod


def _jit_function(obj):
    """The @triton.jit function under `obj` (an autotuner's, a heuristics'), or None."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    for _ in range(8):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
    return None


# (wrapper types, definition less its name) -> [[kernel object, its jit function, Triton's hash
# of what it calls or None until asked]] of the modules loaded in this process, first loaded
# first (share_identical_kernels)
_kernels: dict[tuple, list] = {}


def share_identical_kernels(mod: types.ModuleType, across_modules: bool = True) -> dict[str, str]:
    """Binds every @triton.jit kernel of `mod` whose definition (decorators, parameters and
    body) is an earlier one's but for its name to that earlier kernel object: the launchers,
    which find their kernel among the module's globals when they run, then launch the earlier
    one. {later name: earlier name, or "module:name" for an earlier module's}.

    Earlier modules' kernels too (`across_modules`): a training step's backward repeats some of
    its forward's kernels (casts, the same pointwise ops). Those only where what the kernel
    calls (the prelude's helpers, by their source and line) hashes the same in both modules,
    as Triton's own cache key hashes it (`_callees_key`); where that cannot be computed (another
    Triton), within the module only.

    The same code under two names compiled twice (Triton's cache key holds the function's name
    and line), was autotuned twice and loaded twice: ember-lower-to-triton writes one launcher
    and kernel per fused group, and groups that differ only in their sizes (Llama's casts of
    weights of different shapes, GPT-2's per-layer pointwise kernels where a size is folded
    into the launcher) have identical kernels, since sizes are kernel arguments. Triton still
    compiles the kept kernel once per specialization (argument dtypes, alignments, sizes of 1)
    and tunes it per autotuning key, so each launch runs the code it ran before with the same
    choice of configurations. The module's text is unchanged (its own definitions are still
    there): the compile workers (runtime/triton_warm.py), which load the text anew, are sent
    the kept kernel's name, whose definition is the same in both."""
    kept: dict[tuple, str] = {}
    shared: dict[str, str] = {}
    for name, obj in list(vars(mod).items()):
        jit = _jit_function(obj)
        if jit is None or getattr(jit.fn, "__module__", None) != mod.__name__ \
                or jit.fn.__name__ != name or name.startswith("_"):
            continue        # not defined here, another binding of one, or a prelude helper
        try:    # the definition with its decorators (Triton 3.9 keeps it; 3.6 does not)
            raw = getattr(jit, "raw_src", None)
            text = "".join(raw) if raw else inspect.getsource(jit.fn)
        except (OSError, TypeError):
            continue
        key = (tuple(type(x).__qualname__ for x in _wrappers(obj)),
               re.sub(r"\b%s\b" % re.escape(name), "\0", text))
        earlier = kept.setdefault(key, name)
        if earlier != name:
            setattr(mod, name, getattr(mod, earlier))
            shared[name] = earlier
            continue
        if not across_modules:
            continue
        # earlier modules' kernels with this text: [object, its jit, its callees' key], the
        # key computed only when a later kernel's text matches (most have no twin)
        earlier_ones = _kernels.setdefault(key, [])
        callees = _callees_key(jit, key[1]) if earlier_ones else None
        for entry in earlier_ones:
            if entry[2] is None:
                entry[2] = _callees_key(entry[1], key[1]) or ""
            if callees is not None and entry[2] == callees:
                setattr(mod, name, entry[0])
                shared[name] = f"{entry[1].fn.__module__}:{entry[1].fn.__name__}"
                break
        else:
            earlier_ones.append([obj, jit, callees])
    return shared


def _callees_key(jit, text: str) -> str | None:
    """Triton's hash of `jit`'s dependencies (the jit functions it calls, by their cache keys:
    source and line; the globals it reads) over `text` instead of its own source: equal for
    two kernels of different modules exactly when their cache keys differ only by the
    kernels' own names and lines. None where Triton's finder is not the one this knows."""
    try:
        from triton.runtime.jit import DependenciesFinder
        nonlocals = inspect.getclosurevars(jit.fn).nonlocals
        finder = DependenciesFinder(name=jit.fn.__name__, globals=jit.fn.__globals__,
                                    nonlocals=nonlocals, src=text)
        finder.visit(jit.parse())
        values = sorted((k[0], repr(v[0])) for k, v in finder.used_global_vals.items())
        return finder.ret + repr(values)
    except Exception:   # noqa: BLE001 -- another Triton: share within the module only
        return None


def _wrappers(obj) -> list:
    out = []
    for _ in range(8):
        if obj is None:
            break
        out.append(obj)
        obj = getattr(obj, "fn", None)
    return out
