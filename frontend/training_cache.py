"""The training-graph cache: a warm start (a new process, the same Dynamo graph, ember's program
cache on) of a training graph skips AOTAutograd's joint trace and its partition into forward
and backward. Those were most of ember's part of a warm training start: GPT-2's 3.6 s of
AOTAutograd against 0.5 s of ember's builds on the H200, where Inductor, whose AOTAutograd
cache skips them, took 0.7 s. With this cache GPT-2's warm first call went from 12.6 / 9.1 s to
4.3 / 4.9 s (4x H200, one call), AOTAutograd's part to 0.9 s.

The cache is AOTAutograd's own (AOTAutogradCache, Inductor's), in its bundled form: an entry is
AOTAutograd's runtime metadata and wrappers, from which it rebuilds the autograd function on a
hit as it does for Inductor, and the two compiled graphs as `OutputCode` objects
(`EmberOutputCode`): each names the graph ember's compiler was given by its sha256 (the graph
pickled as Inductor's caches pickle a graph, torch.fx._graph_pickler, with the layouts ember's
compiler chose in its metadata, is kept in ember's artifact cache under it:
build_records.store_graph) and holds what that compiler read from AOTAutograd's tracing
context (the saved outputs it may lend, the donated inputs, the gradients it may donate). On a
hit `post_compile` makes the EmberGraph again from these, and ember's program cache, keyed on
the graph, gives the program. The entry holds no graph: torch keeps a hit's entry bytes for
the process's life (its cache-artifact recorder), which were the graphs' megabytes.

Invariants:
- A hit gives the forward and backward a miss gives. AOTAutograd's key covers Dynamo's graph,
  the example inputs, the global and config state it reads, the system (GPU, versions); ember
  adds its own part through torch's `cache_key_tag` (`scope`): ember's code and options, the
  target, the cache's place, this module's FORMAT and the global flags the trace reads that
  AOTAutograd's key leaves out (SDPA's backend flags among them: `tag`). Graphs AOTAutograd's
  cache declines (unsafe nodes, higher-order ops, Inductor's FX cache off,
  `force_disable_caches`) bypass it and trace as before.
- Only training graphs (`needs_grad`): inference graphs have their own cache
  (inference_cache), which skips AOTAutograd altogether.
- Never an entry ember's compiler could not make again from what it names: a graph with
  effect tokens, one none of whose ops compiles (the backend returns Dynamo's graph for it)
  or one whose pickled graph ember's cache did not take declines the save
  (`BypassAOTAutogradCache`, which AOTAutograd reports at info level only).
- The backward is compiled lazily, at the first backward, outside the backend's call: its
  compiler turns the bundled form on for the save AOTAutograd makes right after it
  (`bundle_for_the_save`, only for an entry that may be saved), and the backward's first
  call, the next thing AOTAutograd does, turns it back (as does the next compile, whatever
  happens between). A backward compiled inside the backend's call (symbolic sizes,
  `force_non_lazy_backward_lowering`) is saved inside it too: the flag is turned back when
  the call ends, whether or not that backward ever runs.
- An inference graph AOTAutograd makes inside the scope (inputs that need gradients, no
  output that does) is an EmberOutputCode that declines its entry: with the bundled form on
  by the user AOTAutograd would otherwise try to bundle a plain function and fail the
  compile.
- A hit whose graph has a build record (build_records.py, written by the filling process's
  first build of it) does not read the kept graph: `post_compile` makes ember's graph from
  the record (`recorded_graph`), which reads the graph from ember's cache only if it needs
  it; without a usable record it reads the kept graph as below.
- A damaged entry is a miss: a file that does not unpickle is traced again (torch's warning
  about it logged at info level inside `scope`), as is one whose graph is gone from ember's
  cache (the file does not read: AOTAutograd tries the key's next file); one whose graph is
  damaged (its bytes no longer hash to the digest: the graph then goes from the cache) or
  does not make ember's graph again is a miss (`_miss`: traced, the entry and the graph
  written anew).
- Where this torch lacks a piece of the bundled cache (`available`), or AOTAutograd's cache is
  strict (a declined entry would raise), nothing changes.
- As with Inductor's entries, a backward is kept as the process that filled the cache compiled
  it: with donated saved activations unless that process's first backward kept its graph
  (`retain_graph=True`). A later process whose backward keeps the graph then meets torch's own
  donated-buffer check, as it does within one process after a plain first backward.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx

from .program_cache import code_identity

# Bumped when the entry's layout changes in a way sources do not show.
FORMAT = 2

# What a load (EmberOutputCode.post_compile, inside the backend's call) makes its graphs with:
# the backend's options, decomposition table, eager fallback and graph ids.
_LOADING: contextvars.ContextVar[dict | None] = contextvars.ContextVar("ember_training_load",
                                                                      default=None)
# The bundled flag's value before a backward compile turned it on (`bundle_for_the_save`).
_BUNDLED_BEFORE: list = []


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether this torch has what the cache needs: AOTAutograd's bundled entries for any
    OutputCode, a serializable compiler type, and torch.compile's cache key tag."""
    try:
        import torch._functorch.config as functorch_config
        from torch._functorch._aot_autograd import aot_autograd_result as results
        from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler  # noqa: F401
        from torch._inductor.output_code import OutputCode  # noqa: F401
        return (hasattr(results, "BundledOutputCodeLoadable")
                and hasattr(results, "BundledAOTAutogradResult")
                and hasattr(functorch_config, "bundled_autograd_cache")
                and hasattr(torch.compiler.config, "cache_key_tag"))
    except Exception:   # noqa: BLE001 -- another torch: no cache
        return False


def applies(options, gm: fx.GraphModule, example_inputs) -> bool:
    """Whether the backend takes this graph's forward and backward through the cache: the
    program cache on, no debug dump (it wants AOTAutograd's graphs as traced), a torch that has
    the cache (`available`), not in AOTAutograd's strict mode (where an entry declined raises),
    not under Dynamo's caching precompile (which would record the entries as its own backend
    artifacts and load them outside ember's backend, where `post_compile` cannot make ember's
    graphs: the next process's torch.compile raised), and a training graph (`needs_grad`)."""
    import torch._functorch.config as functorch_config
    return bool(options.program_cache and options.debug_dir is None and available()
                and not getattr(functorch_config, "strict_autograd_cache", False)
                and not getattr(torch._dynamo.config, "caching_precompile", False)
                and needs_grad(gm, example_inputs))


def needs_grad(gm: fx.GraphModule, example_inputs) -> bool:
    """Whether AOTAutograd makes a training graph (forward and backward) of `gm`: grad mode on
    and an input, or a tensor the module holds, that requires grad."""
    if not torch.is_grad_enabled():
        return False
    if any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        return True
    return any(p.requires_grad for p in gm.parameters())


def tag(options, target: str) -> str:
    """ember's part of the key: its code and options, the target, and the global flags
    AOTAutograd's trace reads that its own key leaves out (SDPA's backend choice and math-path
    reduction, mkldnn, opt_einsum, cuDNN's: inference_cache's list)."""
    from ..runtime.cache import compute_key
    from .inference_cache import _global_state
    return "ember-training:" + compute_key(code_identity(), f"format-{FORMAT}", repr(options),
                                           str(target), *_global_state())


class _UnreadableEntryAtInfo(logging.Filter):
    """torch's cache logs an entry file it cannot unpickle (a truncated write, another
    program's bytes) as a warning with its traceback, then goes on as on a miss; for ember's
    entries that is a miss like any other: logged at info level, where that is on."""

    MESSAGE = "fx graph cache unable to load compiled graph"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or record.msg != self.MESSAGE:
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


_UNREADABLE_AT_INFO = _UnreadableEntryAtInfo()


@contextlib.contextmanager
def key_tag(options, target: str):
    """ember's part of AOTAutograd's cache key (torch's `cache_key_tag`) around one of the
    backend's AOTAutograd calls."""
    users = torch.compiler.config.cache_key_tag
    with torch.compiler.config.patch(cache_key_tag=f"{users}|{tag(options, target)}"):
        yield


@contextlib.contextmanager
def scope(options, target: str, cache, make_graph, find_record=None, recorded_graph=None):
    """Around the backend's AOTAutograd call: ember's part of the key, and how a hit makes its
    graphs: from the graph kept in ember's artifact `cache` (`make_graph(fx_gm, inputs, kind,
    facts)` -> the boxed callable) or, where `find_record(digest, kind, facts)` gives (artifact
    cache, build record), `recorded_graph(record, load_graph, kind, facts)` (build_records.py);
    an unreadable entry file is logged at info level (`_UnreadableEntryAtInfo`)."""
    _restore_bundled()
    token = _LOADING.set({"make_graph": make_graph, "cache": cache, "find_record": find_record,
                          "recorded_graph": recorded_graph})
    cache_log = logging.getLogger("torch._inductor.codecache")
    cache_log.addFilter(_UNREADABLE_AT_INFO)
    try:
        with key_tag(options, target):
            yield
    finally:
        cache_log.removeFilter(_UNREADABLE_AT_INFO)
        _LOADING.reset(token)
        # a backward compiled inside the call (symbolic sizes, AOTAutograd's
        # force_non_lazy_backward_lowering) has been saved by now, and may never run
        _restore_bundled()


def serializable(compiler):
    """`compiler` (fx_gm, inputs) -> EmberOutputCode, as AOTAutograd takes a compiler whose
    results it may cache."""
    from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler
    return SerializableAOTDispatchCompiler(output_code_class(), compiler)


def bundle_for_the_save() -> None:
    """Turns AOTAutograd's bundled entries on until the backward's first call (or the next
    compile): the lazily compiled backward's entry is saved right after its compiler returns,
    outside the backend's call."""
    import torch._functorch.config as functorch_config
    if not _BUNDLED_BEFORE:
        _BUNDLED_BEFORE.append(functorch_config.bundled_autograd_cache)
    functorch_config.bundled_autograd_cache = True


def _restore_bundled() -> None:
    if _BUNDLED_BEFORE:
        import torch._functorch.config as functorch_config
        functorch_config.bundled_autograd_cache = _BUNDLED_BEFORE.pop()


def pickle_graph(fx_gm: fx.GraphModule) -> bytes | None:
    """The graph as ember's compiler was given it, before its build changes anything, or None
    (no entry then) where it does not pickle or has symbolic sizes."""
    from .inference_cache import _symbolic, dumps_graph
    try:
        if any(_symbolic(n.meta.get("val")) for n in fx_gm.graph.nodes):
            return None     # symbolic sizes: their shape environment is not kept
        return dumps_graph(fx_gm)
    except Exception:   # noqa: BLE001 -- no entry
        return None


def _unpickle_graph(data: bytes, example_inputs) -> tuple[fx.GraphModule, Any]:
    """The kept graph and the fake tensor mode its values were made in (the example inputs',
    else the tracing context's)."""
    from torch._guards import TracingContext, detect_fake_mode
    from .inference_cache import loads_graph
    mode = detect_fake_mode(example_inputs)
    if mode is None:
        mode = getattr(TracingContext.try_get(), "fake_mode", None)
    if mode is None:
        from torch._subclasses import FakeTensorMode
        mode = FakeTensorMode()
    return loads_graph(data, mode), mode


def _recorded_graphs_graph(loading: dict, cache, digest: str, kind: str, facts: dict):
    """The graph of an EmberGraph made from a build record, when it first needs it: read from
    ember's cache by its digest and made into ember's graph as a hit without a record makes it
    (`make_graph`), whose graph is then this one's."""
    from .build_records import load_graph
    gm, mode = _unpickle_graph(load_graph(cache, digest), [])
    fn = loading["make_graph"](gm, _example_inputs(gm, facts["strides"], mode), kind, facts)
    return fn.ember_graph.gm


def _miss(reason: str) -> Exception:
    """What a hit whose kept graph ember cannot read back raises: AOTAutograd's cache miss (its
    FXGraphCacheMiss), so that the graph is traced and compiled again and the entry written
    anew under the same key. Any other exception would make the load a bypass, which keeps
    no entry: every later start would read the damaged one and compile again."""
    try:
        from torch._functorch._aot_autograd.autograd_cache import FXGraphCacheMiss
    except ImportError:     # another torch: a bypass, as before
        return RuntimeError(reason)
    return FXGraphCacheMiss(reason)


def _example_inputs(gm: fx.GraphModule, strides: list, mode) -> list:
    """The example inputs ember's compiler was given, made again from the graph's placeholders
    and the strides they had (AOTAutograd gives a backward its forward's output layouts)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(strides):
        raise ValueError("ember: the kept graph's inputs do not match its facts")
    out = []
    with mode:
        for ph, stride in zip(placeholders, strides):
            val = ph.meta.get("val")
            if stride is not None and isinstance(val, torch.Tensor) and \
                    tuple(val.stride()) != tuple(stride):
                val = torch.empty_strided(val.shape, stride, dtype=val.dtype, device=val.device)
            out.append(val)
    return out


def facts_of(inputs, **facts) -> dict:
    """compile_graph's facts, with the example inputs' strides."""
    return {**facts, "strides": [tuple(x.stride()) if isinstance(x, torch.Tensor) else None
                                 for x in inputs]}


@functools.lru_cache(maxsize=None)
def output_code_class():
    """EmberOutputCode, made when first needed (torch._inductor's OutputCode is imported with
    AOTAutograd, not with ember)."""
    from torch._inductor.output_code import OutputCode

    @dataclasses.dataclass
    class EmberOutputCode(OutputCode):
        """One graph of a training graph compiled by ember, as AOTAutograd's cache keeps it.
        `digest`: the sha256 of the pickled graph ember's compiler was given, which ember's
        cache keeps under it (build_records.store_graph), not the entry; `facts`: what that
        compiler read besides the graph (compile_graph's `replay`: the forward's saved outputs
        it may lend, the backward's donated inputs, the example inputs' strides); `keep`:
        whether the entry may be saved (the graph stored)."""
        kind: str = "forward"
        digest: str | None = None
        facts: dict | None = None
        keep: bool = True
        _boxed_call: bool = True

        def __post_init__(self):
            self.fn = None
            self.ember_graph = None

        def __call__(self, inputs):
            if self.kind == "backward" and _BUNDLED_BEFORE:
                _restore_bundled()      # AOTAutograd saved the entry, if it did
            return self.fn(inputs)

        def __getstate__(self):
            state = dict(self.__dict__)
            state.pop("fn", None)
            state.pop("ember_graph", None)
            return state

        def __setstate__(self, state):
            self.__dict__.update(state)
            self.fn = None
            self.ember_graph = None
            loading = _LOADING.get()
            if loading is not None and loading.get("cache") is not None and \
                    self.digest is not None:
                from .build_records import has_graph
                if not has_graph(loading["cache"], self.digest):
                    # an entry whose graph is gone does not read: AOTAutograd skips the file
                    # for the key's next one (a miss raised on its load would retrace at
                    # every start while the file is read first)
                    raise ValueError(f"ember: the {self.kind} graph of a training-cache entry "
                                     f"is not in ember's cache")

        def prepare_for_serialization(self) -> None:
            from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
            if not self.keep or self.digest is None:
                raise BypassAOTAutogradCache(f"ember: the {self.kind} graph is not kept")
            self.fn = None
            self.ember_graph = None

        def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
            if self.fn is not None:
                return
            loading = _LOADING.get()
            if loading is None or self.digest is None:
                raise RuntimeError("ember: a training graph loaded outside ember's backend")
            found = None
            if loading.get("find_record") is not None:
                found = loading["find_record"](self.digest, self.kind, self.facts)
            if found is not None:   # the graph itself read only if needed (build_records.py)
                self.fn = loading["recorded_graph"](
                    found[1], functools.partial(_recorded_graphs_graph, loading, found[0],
                                                self.digest, self.kind, self.facts),
                    self.kind, self.facts)
                self.ember_graph = getattr(self.fn, "ember_graph", None)
                return
            try:
                from .build_records import load_graph
                data = load_graph(loading["cache"], self.digest)
                gm, mode = _unpickle_graph(data, example_inputs)
                inputs = _example_inputs(gm, self.facts["strides"], mode)
            except Exception as err:    # noqa: BLE001 -- a graph ember cannot read back
                raise _miss(f"ember: the {self.kind} graph of the entry does not load: "
                            f"{type(err).__name__}: {err}") from err
            self.fn = loading["make_graph"](gm, inputs, self.kind, self.facts)
            self.ember_graph = getattr(self.fn, "ember_graph", None)

        def set_triton_bundle(self, triton_bundle: Any) -> None:
            pass

    EmberOutputCode.__module__ = __name__
    EmberOutputCode.__qualname__ = "EmberOutputCode"
    return EmberOutputCode


def __getattr__(name: str):
    if name == "EmberOutputCode":     # unpickling an entry
        return output_code_class()
    raise AttributeError(name)


class LazyTable(Mapping):
    """A decomposition table built at its first read (`build()`): AOTAutograd reads it only to
    trace, which a hit skips (0.2-0.3 s of a process's first compile)."""

    def __init__(self, build):
        self._build = build
        self._table: dict | None = None

    def _get(self) -> dict:
        if self._table is None:
            self._table = self._build()
        return self._table

    def __getitem__(self, op):
        return self._get()[op]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __contains__(self, op) -> bool:
        return op in self._get()
