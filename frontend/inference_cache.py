"""The inference-graph cache: a warm start (a new process, the same Dynamo graph, ember's program
cache on) of an inference graph skips AOTAutograd's trace. That trace (decompositions,
functionalization) is the largest part of the warm first call that is ember's and not Dynamo's:
1.1 s of BERT-base's 3.5 s on the H200, where ember's build and first launches take 0.3 s.

Only a graph whose AOTAutograd wrappers do nothing is kept (backend._aot_wrappers_pass_through:
no input mutated, no output aliasing, no tokens, RNG state, subclass or duplicated input, the
module holds no tensors, no autocast): AOTAutograd's result is then, call for call, its traced
graph run with grad mode off, so the traced graph is all there is to keep. The entry is that
graph, pickled with its node names and metadata as Inductor's caches pickle one
(torch.fx._graph_pickler; fake values are described and made again in Dynamo's fake tensor mode
on a hit), and ember's program cache, keyed on that graph, gives the compiled program.

The key (`inference_key`) is a digest of everything AOTAutograd's output depends on: Dynamo's
graph (its code, each node's target, arguments and example value), each example input (shape,
strides, offset, dtype, device and its index, class, requires_grad, leaf-ness, conjugate and
negative bits, inference-ness, which inputs share storage), the global state AOTAutograd's trace
reads (grad mode, inference mode, default dtype, deterministic algorithms, TF32 and SDPA backend
flags, SDPA's math-path reduced-precision flag, the mkldnn and opt_einsum flags, functorch's
config), each GPU's name and capability (SDPA's kernel choice), ember's options and code, and
the versions of torch, torch-mlir, Triton and Python (program_cache.code_identity).

Invariants:
- A hit gives the graph AOTAutograd gives for the same key. Only graphs made of torch's own
  ops and functions are kept (`_safe_target`: OpOverloads of aten and prims, functions of torch's
  modules, of `operator`, `math` and builtins, tensor methods): a user's function or custom op
  could change its body under the same name. No submodules, no attributes, no symbolic sizes,
  no input that is not a tensor.
- Anything unexpected (a value the key cannot describe, an entry that does not load) means no
  hit: AOTAutograd traces as without the cache. A loaded graph whose metadata differed from the
  trace's would only miss the program cache (a compile), never run another program: the
  program key is computed from the graph as it is.
- The entry is written before ember's compiler changes the graph (its build is at the first
  call) and read only after the cache verified it (runtime/cache.py: owner, manifest, digest).
- Not with a debug dump (it wants AOTAutograd's graph as traced), nor without the program cache.
"""
from __future__ import annotations

import builtins
import dataclasses
import functools
import math
import operator
from typing import Any

import torch
import torch.fx as fx

from .program_cache import Uncacheable, _describe, code_identity

KIND = "aot-inference"
SUFFIX = ".pkl"
# Bumped when the entry's layout changes in a way sources do not show.
FORMAT = 1

_SAFE_MODULES = {"_operator", "operator", "builtins", "math"}
_SAFE_NAMESPACES = {"aten", "prims"}


def _safe_target(target) -> bool:
    """Whether a call_function target is torch's own (or Python's) and so fixed by the versions
    in the key: never a user's function or custom op, whose body can change under its name."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return target.namespace in _SAFE_NAMESPACES
    if isinstance(target, torch._ops.HigherOrderOperator):
        return False        # its subgraphs are attributes, which are not kept
    module = getattr(target, "__module__", None)
    if module is None:      # a method descriptor (torch.Tensor.add): its class's module
        module = getattr(getattr(target, "__objclass__", None), "__module__", None)
    if not isinstance(module, str):
        return False
    if module in _SAFE_MODULES:
        return id(target) in _python_functions()
    return module == "torch" or module.startswith("torch.")


@functools.lru_cache(maxsize=None)
def _python_functions() -> frozenset[int]:
    """The ids of the functions of `builtins`, `operator` and `math` (never replaced)."""
    return frozenset(id(v) for mod in (builtins, operator, math) for v in vars(mod).values()
                     if callable(v))


def _global_state() -> list[str]:
    """What AOTAutograd's trace of one graph reads besides the graph and its inputs."""
    import torch._functorch.config as functorch_config
    state = [repr((torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
                   torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
                   torch.is_deterministic_algorithms_warn_only_enabled(),
                   torch.get_float32_matmul_precision(),
                   torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                   torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic,
                   torch._C._is_any_autocast_enabled()))]
    cuda = torch.backends.cuda
    # SDPA's backend choice, and whether its math path (a CompositeImplicit op, traced by
    # AOTAutograd) computes half/bf16 attention in float: a bf16 graph's numerics
    for flag in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled",
                 "cudnn_sdp_enabled", "fp16_bf16_reduction_math_sdp_allowed"):
        fn = getattr(cuda, flag, None)
        state.append(f"{flag}={fn() if fn is not None else None}")
    # read by decompositions and torch functions while tracing: the LSTM decomposition
    # (mkldnn_rnn_layer or not), einsum's contraction path (opt_einsum)
    opt_einsum = getattr(torch.backends, "opt_einsum", None)
    state.append(repr((torch._C._get_mkldnn_enabled(), getattr(opt_einsum, "enabled", None),
                       getattr(opt_einsum, "strategy", None))))
    config = functorch_config.get_config_copy()
    state.append(repr(sorted((k, repr(v)) for k, v in config.items())))
    return state


def _describe_input(x: torch.Tensor, index: int, storages: list) -> str:
    from torch.multiprocessing.reductions import StorageWeakRef
    out: list[str] = []
    _describe(x, out)
    ref = StorageWeakRef(x.untyped_storage())
    shared = next((i for i, r in enumerate(storages) if r == ref), index)
    storages.append(ref)
    return "".join(out) + (f"{x.device}{type(x).__module__}.{type(x).__qualname__}"
                           f"rg{x.requires_grad}leaf{x.is_leaf}view{x._is_view()}s{shared}"
                           f"conj{x.is_conj()}neg{x.is_neg()}inf{x.is_inference()}")


def _devices(example_inputs) -> list[str]:
    out = []
    for d in sorted({str(x.device) for x in example_inputs}):
        dev = torch.device(d)
        if dev.type == "cuda":
            out.append(f"{d}:{torch.cuda.get_device_name(dev)}:"
                       f"{torch.cuda.get_device_capability(dev)}")
        else:
            out.append(d)
    return out


def inference_key(gm: fx.GraphModule, example_inputs, options) -> str | None:
    """The key of the graph AOTAutograd traces from Dynamo's `gm` for `example_inputs` (an
    inference graph: no input needs grad where grad mode is on), or None where the graph is not
    kept (see the module's invariants)."""
    from ..runtime.cache import compute_key
    try:
        if any(not isinstance(x, torch.Tensor) for x in example_inputs):
            return None
        if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
            return None     # a training graph
        # (where the cache lives is not what is traced: a moved cache keeps its entries)
        parts = [code_identity(), f"format-{FORMAT}",
                 repr(dataclasses.replace(options, cache_dir=None)), gm.code]
        storages: list = []
        parts += [_describe_input(x, i, storages) for i, x in enumerate(example_inputs)]
        parts += _global_state() + _devices(example_inputs)
        placeholders = 0
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                placeholders += 1
            elif node.op == "call_function":
                if not _safe_target(node.target):
                    return None
            elif node.op not in ("call_method", "output"):
                return None     # attributes and submodules are not kept
            out = [f"|{node.op}:{node.name}:{getattr(node.target, '__module__', '')}."
                   f"{getattr(node.target, '__qualname__', node.target)}"]
            _describe(list(node.args), out)
            _describe(dict(node.kwargs), out)
            value = node.meta.get("example_value", node.meta.get("val"))
            if value is not None:
                _describe(value, out)
                if _symbolic(value):
                    return None
            parts.append("".join(out))
        if placeholders != len(example_inputs):
            return None
        if any(_symbolic(x) for x in example_inputs):
            return None
        return compute_key(*parts)
    except Uncacheable:
        return None
    except Exception:   # noqa: BLE001 -- another torch: AOTAutograd traces
        return None


def _symbolic(value) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride())) or \
            isinstance(value.storage_offset(), torch.SymInt)
    if isinstance(value, (list, tuple)):
        return any(_symbolic(v) for v in value)
    return False


def dumps_graph(gm: fx.GraphModule) -> bytes:
    """`gm` pickled as Inductor's caches pickle a graph (torch.fx._graph_pickler: node names and
    metadata, fake values described; aten and prims ops by name). Raises where it does not
    pickle."""
    from torch.fx._graph_pickler import GraphPickler, Options
    return GraphPickler.dumps(gm, Options(ops_filter=lambda name: name.startswith(
        ("torch.ops.aten.", "torch.ops.prims."))))


def loads_graph(data: bytes, mode) -> fx.GraphModule:
    """A graph `dumps_graph` pickled, its fake values made in fake tensor mode `mode`, with its
    `forward` (the pickler restores the graph, not the method: what runs where the graph falls
    back to eager torch). Raises where the bytes are not such a graph."""
    from torch.fx._graph_pickler import GraphPickler
    gm = GraphPickler.loads(data, mode)
    if not isinstance(gm, fx.GraphModule):
        raise TypeError(f"not a graph: {type(gm).__name__}")
    gm.recompile()
    return gm


def store(cache, key: str, traced: fx.GraphModule) -> None:
    """Keeps AOTAutograd's traced graph (before ember changed anything of it) under `key`,
    pickled as Inductor's caches pickle a graph (torch.fx._graph_pickler: node names and
    metadata, fake values described). A graph that cannot be pickled or a cache that cannot
    be written only means no entry."""
    try:
        data = dumps_graph(traced)
        # one writer per key: the same graph pickles to other bytes in another process, and two
        # cold processes writing at once could pair one's entry with the other's manifest
        with cache.lock(KIND, key):
            if cache.read_verified(KIND, key, SUFFIX, warn=False) is None:
                cache.write(KIND, key, SUFFIX, data)
    except Exception:   # noqa: BLE001 -- the next process traces again
        pass


def load(cache, key: str, example_inputs) -> fx.GraphModule | None:
    """The graph kept under `key`, its fake values made in the fake tensor mode that Dynamo
    traced `example_inputs` with, or None."""
    data = cache.read_verified(KIND, key, SUFFIX)
    if data is None:
        return None
    try:
        from torch._guards import detect_fake_mode
        mode = detect_fake_mode(example_inputs)
        return None if mode is None else loads_graph(data, mode)
    except Exception:   # noqa: BLE001 -- a damaged or foreign entry: AOTAutograd traces
        return None
