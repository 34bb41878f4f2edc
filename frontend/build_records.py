"""Build records: warm starts that do not read their graphs.

A training graph's warm start (training_cache) read the graph ember's compiler was given back
(torch.fx's GraphPickler: every node's fake value made again), prepared
it again (fx_prep: the same rewrites, the constant folding, the output plan, each ending in a
`recompile` of Python code) and fingerprinted it again for the program cache's key. None of that
changes the program the cache then gives: it was most of ember's own part of a warm start
(BERT-base training on the CPU machine, under cProfile: 1.6 s of graph loads and 1.6 s of
builds, the program's load 0.03 s of it).

A build record keeps what a build made of its graph besides the program: the program cache's
key, the output plan and the host half (fx_prep.PreparedGraph without the compiled graph), the
geometry of the inputs the program takes permuted, the folded values, the input mutations the
graph's copies became, the report's facts about the graph. The filling process writes it after
the graph's first build (EmberGraph.record_to), with the graph itself (`store_graph`, keyed on
its digest); a warm start whose entry names a record loads the program by the record's key and
makes the call from the record alone. The graph is read only if something needs it: the
program is no longer in the cache (the graph is then built as before), or a compiled call
fails and is redone eagerly (compile.EmberGraph.gm).

An inference graph that inference_cache keeps (AOTAutograd's traced graph, under a key that
covers ember's code, options, global flags and devices) gets a record the same way
(`inference_record_to`, `load_inference`): its warm start reads neither the kept graph nor
prepares it (BERT-base inference on the CPU machine: the first call 4.46-4.62 -> 4.16-4.25 s).

Invariants:
- A record describes only a build that a rebuild from the graph makes again: a static graph
  (no specialization, no symbolic sizes) compiled whole into one program (no node split off,
  none run eagerly, no effect tokens), the program's cache key known, no debug dump.
- The key covers everything such a build reads besides the graph: the graph's digest (the
  training-cache entry's, `EmberOutputCode.digest`), its kind, the facts the backend read from
  AOTAutograd (saved outputs lent, inputs donated, input strides), ember's code identity, this
  module's FORMAT, the options, the target and the global flags training_cache's tag covers.
- Nothing half-written: records and graphs are written atomically in ember's artifact cache
  and verified against their manifests when read; one that is missing, damaged or does not
  unpickle is a miss (the entry's own graph is then built, as without records).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
from typing import Any

import torch

KIND = "build-record"
GRAPH_KIND = "training-graph"
SUFFIX = ".pkl"
# Bumped when BuildRecord's layout changes in a way sources do not show.
FORMAT = 1


@dataclasses.dataclass
class BuildRecord:
    """What `EmberGraph._compile` made of one graph besides the program (see the module
    docstring). `prepared`: fx_prep.PreparedGraph with `gm` None and `in_geometry` set;
    `report`: the report's other fields the graph decides (folded constants, library calls,
    why ember-split-reductions was left off)."""
    program_key: str
    target: str
    out_dtypes: list
    prepared: Any
    mutations: Any
    inline_calls: int           # library calls inside the program (the report's num_externs)
    report_sizes: dict[str, int]    # compile._output_sizes of the graph
    report: dict[str, Any]


def record_key(cache, digest: str, kind: str, facts: dict, tag: str) -> str:
    """The record's key (see the module docstring's second invariant); `tag`: training_cache's
    (ember's code, options, target and global flags), taken once before AOTAutograd's call
    (inside it grad mode is off, in a hit's load on)."""
    return cache.key(KIND, f"format-{FORMAT}", tag, digest, kind,
                     repr(sorted((facts or {}).items())))


def inference_record_to(cache, key: str) -> tuple:
    """`EmberGraph.record_to` for an inference graph inference_cache keeps under `key` (which
    covers ember's code, options, global flags and devices, as `tag` does for training)."""
    return cache, record_key(cache, key, "inference", {}, "inference-cache")


def load_inference(cache, key: str) -> BuildRecord | None:
    """The build record of the inference graph inference_cache keeps under `key`, where both it
    and its program are in the cache; else None (the graph is read and built)."""
    from . import inference_cache
    record = load(*inference_record_to(cache, key))
    if record is None or not _present(cache, record, inference_cache.KIND, key,
                                      inference_cache.SUFFIX):
        return None
    return record


def _op(name: str, overload: str):
    namespace, op = name.split("::", 1)
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


class _Pickler(pickle.Pickler):
    """pickle, with torch's operator overloads (a view step's op in an output plan, which
    plain pickle refuses) by their names."""

    def reducer_override(self, obj):
        if isinstance(obj, torch._ops.OpOverload):
            return _op, (obj._schema.name, obj._overloadname)
        return NotImplemented


def dumps(obj) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def store(cache, key: str, record: BuildRecord) -> bool:
    """Writes the record; one that does not pickle (a host half holding something pickle cannot
    describe) or a cache that cannot be written only means the next start reads the graph."""
    try:
        data = dumps(record)
    except Exception:   # noqa: BLE001 -- no record
        return False
    try:
        cache.write(KIND, key, SUFFIX, data)
    except OSError:
        return False
    return True


def load(cache, key: str) -> BuildRecord | None:
    """The record under `key`, or None (none, damaged, or of classes that moved)."""
    try:
        data = cache.read_verified(KIND, key, SUFFIX, warn=False)
        if data is None:
            return None
        record = pickle.loads(data)
    except Exception:   # noqa: BLE001 -- a miss
        return None
    return record if isinstance(record, BuildRecord) else None


def store_graph(cache, digest: str, data: bytes) -> bool:
    """Keeps the pickled graph (`digest`: its sha256) in ember's cache, where a training-cache
    entry names it (training_cache) and a record's EmberGraph reads it when it needs it; one
    already there whole is not written again. Whether the cache holds it now."""
    try:
        have = cache.read_verified(GRAPH_KIND, digest, SUFFIX, warn=False)
        if have is None or hashlib.sha256(have).hexdigest() != digest:
            cache.write(GRAPH_KIND, digest, SUFFIX, data)
        return True
    except OSError:
        return False


def _present(cache, record: BuildRecord, graph_kind: str, graph_key: str,
             graph_suffix: str = SUFFIX) -> bool:
    """Whether the record's program and its graph (a training graph ember keeps, or
    inference_cache's) are in the cache (present: they are verified when read)."""
    from . import program_cache
    try:
        return cache.path(graph_kind, graph_key, graph_suffix).exists() and \
            cache.path(program_cache.KIND, record.program_key, program_cache.SUFFIX).exists()
    except OSError:
        return False


def usable(cache, record: BuildRecord, digest: str) -> bool:
    """Whether the record's program and its training graph are in the cache."""
    return _present(cache, record, GRAPH_KIND, digest)


def has_graph(cache, digest: str) -> bool:
    """Whether a graph is in the cache under `digest` (present: it is verified when read)."""
    try:
        return cache.path(GRAPH_KIND, digest, SUFFIX).exists()
    except OSError:
        return False


def load_graph(cache, digest: str) -> bytes:
    """The pickled graph whose sha256 is `digest`; raises LookupError where it is gone, or
    damaged (its bytes no longer hash to it, or its manifest does not match), which then goes
    from the cache: the training-cache entries naming it are skipped from then on
    (training_cache), and a compile that makes the same graph again writes it anew."""
    from ..runtime.cache import MANIFEST_SUFFIX
    data = cache.read_verified(GRAPH_KIND, digest, SUFFIX, warn=False)
    if data is None or hashlib.sha256(data).hexdigest() != digest:
        path = cache.path(GRAPH_KIND, digest, SUFFIX)
        for p in (path, path.with_name(path.name + MANIFEST_SUFFIX)):
            try:
                p.unlink()
            except OSError:
                pass
        raise LookupError(f"ember: the training graph {digest[:12]} is not in the cache whole")
    return data
