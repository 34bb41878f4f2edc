"""The compiled-program cache: a warm start (a new process, the same graph, the cache present)
skips import, the pass pipeline and code generation.

`compile_module` (frontend/compile_module.py) is a pure function of its inputs: the FX graph
(every node's op, name, target, arguments, `val` / `tensor_meta` and ember's own meta keys, its
code generator's input and output packing, the tensors it reads through `get_attr`), the
library calls stitched in, the pipeline string (which holds every option the passes read), the
symbolic flag and the donation pairs, and of the code that runs:
ember's own sources and the versions of torch, torch-mlir, Triton and Python. The key is a
digest of all of them; the value is the pickled `(Program, summary)` that `compile_module`
returned, stored in the artifact cache (runtime/cache.py, kind "program": written atomically,
verified against its manifest before it is read, owned by this user like the C++ libraries
that are dlopen'ed from the same cache).

Invariants:
- A hit returns what a compile of the same inputs returns (a fresh copy: callers mutate the
  Program, restore_signedness). Anything the key cannot describe (an attribute that is neither
  a tensor, a graph module nor a plain value; a value that cannot be pickled) means no caching.
- Failures are not cached (a graph that failed compiles, and fails, again, as without a cache),
  but for a pass failure the caller asks to remember (`compile_module(remember_failure=True)`:
  ember-split-reductions' pipeline, which compile_static then retries without the split): its
  stage and diagnostics are stored under the key (suffix FAILED) and raised again on a warm
  start without compiling, which then goes straight to the unsplit pipeline's entry.
- With a debug dir the cache is not read: the dump wants the IR after every stage.
- Symbolic-shape compiles are not cached: frontend/symbolic.py rejects a compile that added a
  guard on a size to the shape environment, and a cache hit would add none.
"""
from __future__ import annotations

import hashlib
import operator
import pickle
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

KIND = "program"
SUFFIX = ".pkl"
FAILED = ".failed.json"
# Bumped when the pickled layout (Program, summary) changes in a way sources do not show.
FORMAT = 1


class Uncacheable(Exception):
    """The graph holds something the key cannot describe."""


@lru_cache(maxsize=None)
def code_identity() -> str:
    """A digest of every Python source of ember that can change what a compile produces (the
    package less its tests and benchmarks) and of the versions of what it runs on: an edited
    pass never meets a program its previous version cached."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("test/", "benchmarks/", "build/", "scratch/")):
            continue
        h.update(rel.encode())
        h.update(path.read_bytes())
    versions = [f"python-{sys.version_info[:3]}", f"torch-{torch.__version__}", f"format-{FORMAT}"]
    for mod in ("torch_mlir", "triton"):
        try:
            from importlib.metadata import version
            versions.append(f"{mod}-{version(mod.replace('_', '-'))}")
        except Exception:       # noqa: BLE001 -- not installed: its absence is the identity
            versions.append(f"{mod}-none")
    h.update("|".join(versions).encode())
    return h.hexdigest()


def _describe(v: Any, out: list[str], depth: int = 0) -> None:
    """What the importer can read of a meta value or an argument, as text."""
    if depth > 8:
        raise Uncacheable("nesting too deep")
    if isinstance(v, fx.Node):
        out.append(f"%{v.name}")
    elif isinstance(v, torch.Tensor):
        out.append(f"T{tuple(v.shape)}{v.dtype}{tuple(v.stride())}{v.storage_offset()}"
                   f"{v.device.type}{v.layout}")
    elif isinstance(v, (list, tuple)):
        out.append(f"{type(v).__name__}[")
        for x in v:
            _describe(x, out, depth + 1)
        out.append("]")
    elif isinstance(v, dict):
        out.append("{")
        for k in v:
            out.append(repr(k))
            _describe(v[k], out, depth + 1)
        out.append("}")
    elif isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        out.append(f"S{v.node}")
    elif v is None or isinstance(v, (bool, int, float, complex, str, torch.dtype, torch.device,
                                     torch.layout, torch.memory_format)):
        out.append(repr(v))
    elif isinstance(v, slice):      # x[1:n] in Dynamo's graphs
        out.append("slice(")
        for x in (v.start, v.stop, v.step):
            _describe(x, out, depth + 1)
        out.append(")")
    elif v is Ellipsis:
        out.append("...")
    elif hasattr(v, "_asdict"):     # TensorMetadata and other named tuples
        _describe(dict(v._asdict()), out, depth + 1)
    else:
        raise Uncacheable(f"cannot describe a {type(v).__name__}")


def _tensor_digest(t: torch.Tensor) -> str:
    out: list[str] = []
    _describe(t, out)
    try:
        flat = t.detach().cpu().contiguous().reshape(-1)
        data = flat.to(torch.uint8) if flat.dtype == torch.bool else flat.view(torch.uint8)
        digest = hashlib.sha256(data.numpy().tobytes()).hexdigest()
    except Exception as err:    # noqa: BLE001 -- a tensor subclass, a quantized tensor
        raise Uncacheable(f"cannot hash a constant ({err})") from err
    return "".join(out) + digest


def graph_fingerprint(gm: fx.GraphModule, out: list[str] | None = None) -> list[str]:
    """The text the key is made of: the graph's code and, per node, everything the importer
    and the passes read (meta `val`, `tensor_meta`, ember's meta keys) and the attributes."""
    from .complex_values import AFTER_RAISING
    out = [] if out is None else out
    # the graph as its nodes say it (each node's op, name, target, arguments, in order) and how
    # its code packs inputs and outputs, not `gm.code`: a lazily compiled module would generate
    # its Python code for the key alone (0.075 s of BERT-base's warm build on the CPU machine)
    codegen = gm.graph._codegen
    out.append(f"{type(codegen).__module__}.{type(codegen).__qualname__}:"
               f"{getattr(codegen, 'pytree_info', None)!r}")
    for node in gm.graph.nodes:
        out.append(f"|{node.op}:{node.name}:{node.target}")
        for key in ("val", "tensor_meta", AFTER_RAISING):
            if key in node.meta:
                out.append(f"/{key}=")
                _describe(node.meta[key], out)
        _describe(list(node.args), out)
        _describe(dict(node.kwargs), out)
        if node.op == "get_attr":
            obj = operator.attrgetter(str(node.target))(gm)
            if isinstance(obj, torch.Tensor):
                out.append(_tensor_digest(obj))
            elif isinstance(obj, fx.GraphModule):
                graph_fingerprint(obj, out)
            else:
                _describe(obj, out)
    return out


def program_key(gm: fx.GraphModule, pipeline: str, calls, symbolic: bool, donate,
                reuse, strided=()) -> str | None:
    """The cache key of `compile_module(gm, pipeline, calls=..., ...)`, or None when the graph
    holds something the key cannot describe."""
    try:
        parts = graph_fingerprint(gm)
    except Uncacheable:
        return None
    h = hashlib.sha256()
    for p in (code_identity(), pipeline, repr(list(calls)), repr(bool(symbolic)),
              repr(sorted(map(tuple, donate))), repr(sorted(reuse)),
              repr(sorted(map(tuple, strided))), *parts):
        b = p.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def load(cache, key: str):
    """(Program, summary) from the cache, or None."""
    data = cache.read_verified(KIND, key, SUFFIX)
    if data is None:
        return None
    try:
        program, summary = pickle.loads(data)
    except Exception:       # noqa: BLE001 -- a class that moved: compile again
        return None
    return program, summary


def store(cache, key: str, program, summary) -> None:
    """Writes the entry; a value that cannot be pickled or a cache that cannot be written only
    means the next process compiles again."""
    try:
        data = pickle.dumps((program, summary), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:       # noqa: BLE001
        return
    try:
        cache.write(KIND, key, SUFFIX, data)
    except OSError:
        pass


def load_failure(cache, key: str) -> tuple[str, list[str]] | None:
    """(stage, diagnostics) of a remembered pass failure of this key, or None."""
    import json
    data = cache.read_verified(KIND, key, FAILED)
    if data is None:
        return None
    try:
        entry = json.loads(data)
        return str(entry["stage"]), [str(d) for d in entry["diagnostics"]]
    except Exception:       # noqa: BLE001 -- damaged: compile (and fail) again
        return None


def store_failure(cache, key: str, stage: str, diagnostics) -> None:
    import json
    try:
        cache.write(KIND, key, FAILED, json.dumps({"stage": stage,
                                                   "diagnostics": list(diagnostics)}))
    except OSError:
        pass
