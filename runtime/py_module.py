"""Import generated Python (Triton) code through the artifact cache.

Invariant: the code executed is exactly the generated `source` held in memory, never bytes read
back from the cache; the cached file (verified against its manifest before use, rewritten when
it fails) exists so that Triton, which reads a jit function's text through `inspect`, and
tracebacks have a real file to point at. `linecache` is primed with the same text, so an edit
to the file on disk after the check cannot change what Triton compiles, and no `__pycache__`
bytecode is written or read.

Each `@triton.jit` reads its function's text through `inspect.getsourcelines` (Triton 3.6 twice,
and share_identical_kernels a third time there), which tokenizes the function in Python: about
1 ms a kernel, 0.56 s of swin_t's warm training start on the GPU machine (369 kernels). While
the module runs, Triton's jit module sees an `inspect` that answers for this module's
functions from their code objects (`function_lines`: from the first line, a decorator's, to the
furthest line the function's instructions span) and the text in `linecache`: the same lines
and line number inspect gives (test_py_module checks them against inspect), anything else
inspect's own answer (`_KnownSources`).
"""
from __future__ import annotations

import contextlib
import inspect
import linecache
import re
import sys
import threading
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
        with _sources_known(path):
            exec(code, mod.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    if mode == "jit":
        mod.__ember_shared__ = share_identical_kernels(mod)
    _modules[key] = mod
    return mod


def function_lines(fn, path: str) -> tuple[list[str], int] | None:
    """(lines, first line) of function `fn` of the generated module at `path`, as
    inspect.getsourcelines gives them, from its code object and the module's text in
    `linecache`: from the function's first line (a decorator's) to the furthest line its
    instructions span, where only blank lines and comments indented no deeper than the
    definition follow, up to a statement indented no deeper than it either (the next one at
    its level: the prelude's helpers are defined inside an `if`). None where that cannot be
    told so (then inspect answers): no instruction positions (Python < 3.11), a deeper comment
    or statement after those (a trailing comment inspect counts in, a statement that left no
    instruction)."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_filename != path or not hasattr(code, "co_positions"):
        return None
    entry = linecache.cache.get(path)
    if entry is None or entry[1] is not None:       # (mtime None: primed by load_python_module)
        return None
    last = max((end for _, end, _, _ in code.co_positions() if end is not None), default=None)
    first, lines = code.co_firstlineno, entry[2]
    if last is None or last < first or last > len(lines):
        return None
    head = lines[first - 1]
    indent = len(head) - len(head.lstrip())
    for line in lines[last:]:
        text = line.lstrip()
        if not text:
            continue
        if len(line) - len(text) > indent:
            return None
        if not text.startswith("#"):
            break
    return lines[first - 1:last], first


class _KnownSources(types.ModuleType):
    """`inspect` as Triton's jit module sees it while a generated module runs: the text of the
    module's functions from function_lines, everything else inspect's."""

    def __init__(self, path: str):
        super().__init__("inspect")
        self._path = path

    def _known(self, obj):
        return function_lines(obj, self._path)

    def getsourcelines(self, obj):
        known = self._known(obj)
        return inspect.getsourcelines(obj) if known is None else known

    def getsource(self, obj):
        known = self._known(obj)
        return inspect.getsource(obj) if known is None else "".join(known[0])

    def __getattr__(self, name):
        return getattr(inspect, name)


_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _sources_known(path: str):
    """Triton's jit module reads the functions of `path` through function_lines while the block
    runs (one module at a time; other functions, other threads' included, get inspect's)."""
    try:
        import triton.runtime.jit as jit
    except ImportError:
        yield
        return
    if getattr(jit, "inspect", None) is not inspect:      # another Triton: as it is
        yield
        return
    with _PATCH_LOCK:
        jit.inspect = _KnownSources(path)
        try:
            yield
        finally:
            jit.inspect = inspect


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
            if not raw:
                raw = (function_lines(jit.fn, getattr(mod, "__file__", "")) or ((), 0))[0]
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
