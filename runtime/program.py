"""A compiled graph as plain data: what the runtime needs, and nothing of MLIR.

The frontend builds a `Program` from the lowered IR (see docs/internals.md, stage 5); the runtime
builds its source once (cached) and runs its steps in order with torch tensors.
"""
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ValueInfo:
    """One tensor of the host schedule. `offset` is its byte offset in the arena (or in input
    `in_input`'s memory), or None when the value is a graph input, a view, a constant, or
    escapes (own allocation)."""

    shape: tuple[int, ...]
    dtype: str                      # torch dtype name without "torch.", e.g. "float32"
    offset: int | None = None
    # An output that is input `into_input`'s new value, which its kernel may write in place
    # (ember-buffer-reuse's `ember.writes_args`): the runtime gives it that input's memory when
    # the input is contiguous and of its shape and dtype, and no other input shares it.
    into_input: int | None = None
    # A value that lies in input `in_input`'s memory at byte `offset` (a donated input after
    # its last use: ember-buffer-reuse's `ember.in_args`), not in the arena; the runtime gives
    # it fresh memory when that input cannot be written (not contiguous, its storage shared).
    in_input: int | None = None
    # An input the caller passes with these strides (not contiguous) that only library steps
    # read (`ember.arg_strides`): handed to them as it comes when it has them, where any other
    # input is made contiguous first.
    strides: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Step:
    """One host-side action.

    kind = "kernel": call generated kernel `name` with `inputs`, writing `outputs`.
    kind = "extern": call library op `name` ("aten.mm", ...) with `params`.
    kind = "library": call ATen op `name` ("aten.cumsum.default"); params: "tensor_args" (the
                     schema name of each input, "indices[0]" for list elements), "kwargs" (the
                     other arguments), "results" (which of the op's outputs are `outputs`).
                     The outputs are the op's own tensors (no arena offset, no copy).
    kind = "view":   outputs[0] is inputs[0] reshaped to its shape (no copy).
    kind = "const":  outputs[0] is the constant params["value"] (nested lists, or a scalar: a
                     0-dim value, or every element of a splat of outputs[0]'s shape).
    kind = "empty":  outputs[0] is uninitialised memory of its shape.
    kind = "fill":   outputs[0] is a new tensor of its shape, every element params["value"],
                     made on every call (a library op then writes it in place: externs.IN_PLACE).
    """

    kind: str
    name: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Program:
    target: str                     # "cpu" | "triton"
    lang: str                       # "cpp" | "python"
    source: str                     # one translation unit / one Python module
    values: list[ValueInfo]         # value id -> info; ids 0..num_inputs-1 are graph inputs
    num_inputs: int
    steps: list[Step]
    outputs: list[int]              # value ids returned, in order
    arena_bytes: int = 0
    kernel_names: list[str] = field(default_factory=list)
    # inputs the caller donates (`ember.donated_args`: a backward's saved activations that
    # only it reads): the runtime may overwrite them and free their memory after their last use
    donated_inputs: list[int] = field(default_factory=list)
