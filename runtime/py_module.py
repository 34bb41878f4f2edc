"""Import generated Python (Triton) code through the artifact cache.

Invariant: the code executed is exactly the generated `source` held in memory, never bytes read
back from the cache; the cached file (verified against its manifest before use, rewritten when
it fails) exists so that Triton, which reads a jit function's text through `inspect`, and
tracebacks have a real file to point at. `linecache` is primed with the same text, so an edit
to the file on disk after the check cannot change what Triton compiles, and no `__pycache__`
bytecode is written or read.
"""
from __future__ import annotations

import linecache
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
    _modules[key] = mod
    return mod
