"""Partial fallback for a pipeline failure that no single op explains.

`partition.blame` probes each node alone; a graph can still fail where every node compiles
alone: a fused kernel that a lowering cannot code (a fusion legality check that accepted a group
the code generator then refuses), a buffer plan or an export that trips on a combination of
ops. Before this module such a graph ran wholly in eager torch.

`blame_kernels` maps the failure back to the FX nodes it came from and makes them ATen calls
inside the program (frontend/library_calls.py), so the rest of the graph stays one compiled
program:

1. The graph is compiled once more (import + pipeline, no build) with each compute node's
   `stack_trace` replaced by a tag naming the node (`File "ember-node:add_3", line 1`). The
   importer turns stack traces into MLIR locations, every lowering keeps them, and ember-fuse
   gives an outlined kernel the fused location of its ops: the failing pass's diagnostic then
   names exactly the nodes of the failing kernel (or op), not the user's source lines, which
   a repeated layer shares.
2. Those nodes that can be calls (`partition.can_call`) become library calls, and the graph
   is compiled again (same tags); a failure that names new nodes adds them, up to
   `MAX_ROUNDS` rounds. A failure that names none that can be called, or any other error,
   gives up: the caller runs the graph eagerly as before.

The result is what `blame` returns, {node: reason}; the caller compiles the program with those
nodes as calls (the compiles here build nothing), warns once, and reports them.
"""
from __future__ import annotations

import re

import torch.fx as fx

from .compile_module import PipelineFailure, compile_module, outline_library
from .options import SPLIT_PASS, CompileOptions, default_pipeline
from .report import compact_diagnostic

TAG = "ember-node:"
MAX_ROUNDS = 4
_TAGGED = re.compile(r'"' + re.escape(TAG) + r'([^"]+)":\d+:\d+')


def blame_kernels(gm: fx.GraphModule, options: CompileOptions, target: str,
                  library: set[fx.Node]) -> dict[fx.Node, str]:
    """{node: reason} for the nodes of `gm` (a prepared graph) that, as library calls beside
    `library`, let the rest compile; {} when none are found (see the module docstring)."""
    from .partition import can_call, compute_nodes
    pipeline = default_pipeline(options, target).replace(SPLIT_PASS + ",", "")
    candidates = {n.name: n for n in compute_nodes(gm) if n not in library}
    saved = {n: n.meta.get("stack_trace") for n in gm.graph.nodes}
    blamed: dict[fx.Node, str] = {}
    try:
        for n in gm.graph.nodes:
            n.meta["stack_trace"] = f'  File "{TAG}{n.name}", line 1, in graph\n'
        for _ in range(MAX_ROUNDS):
            try:
                _compile_with_calls(gm, pipeline, library | set(blamed))
                return blamed
            except PipelineFailure as err:
                named = {candidates[name] for d in err.diagnostics
                         for name in _TAGGED.findall(d) if name in candidates}
                new = {n for n in named if n not in blamed and can_call(n)}
                if not new:
                    return {}
                why = _reason(err)
                for n in new:
                    blamed[n] = why
            except Exception:   # noqa: BLE001 - anything else: not recoverable here
                return {}
        return {}
    finally:
        for n, trace in saved.items():
            if trace is None:
                n.meta.pop("stack_trace", None)
            else:
                n.meta["stack_trace"] = trace


def _compile_with_calls(gm: fx.GraphModule, pipeline: str, calls: set[fx.Node]) -> None:
    """compile_static's import + pipeline + export, with `calls` as library calls (no build,
    no cache)."""
    gm, outlined, strided = outline_library(gm, calls)
    compile_module(gm, pipeline, calls=outlined, strided=strided)


def _reason(err: PipelineFailure) -> str:
    """The failing pass and its message, without the tag locations (which name nodes of a
    compile the user never sees)."""
    first = err.diagnostics[0] if err.diagnostics else str(err)
    text = compact_diagnostic(first)
    text = re.sub(r"\s*\(at [^()]*\)$", "", text)
    if text.startswith(f"{err.stage}: "):
        text = text[len(err.stage) + 2:]
    return f"in a fused kernel {err.stage} cannot compile: {text}"
