"""Replay a compiled program's launches as one CUDA graph, so that a call costs one graph launch
instead of one Python-driven launch per kernel and library call.

    graphed = GraphedProgram(compiled)     # compiled: executor.CompiledProgram on a GPU
    outs = graphed(*tensors)

Call 1 runs normally (Triton compiles and autotunes; nothing of that may be captured). Call 2
runs normally too and tells which inputs keep their storage from call to call (parameters,
buffers): those are read in place by the graph; the others get static buffers that each call
copies into. Call 3 captures, and every later call replays. Outputs are cloned out of the
graph's memory pool, because the next replay overwrites it, except those the caller borrows
(`lend`: new values of mutated inputs, copied into the inputs right away).

Correctness first: a program given host (CPU) tensors is never captured, except those its
steps never read (`unread_host_inputs`: an attention backward's philox seed without dropout); a call whose in-place
input arrives with a different storage, or any capture failure, runs without the graph (and a
failed capture is not retried).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch


class GraphedProgram:
    MAX_RECAPTURES = 3

    def __init__(self, run: Callable[..., list], warmup_calls: int = 2,
                 unread_host_inputs: frozenset[int] = frozenset()):
        self._run = run
        self._unread = unread_host_inputs   # host tensors whose value no step reads
        self._warmup = warmup_calls
        self._calls = 0
        self._first_ptrs: list[int] | None = None
        self._graph: torch.cuda.CUDAGraph | None = None
        self._failed = False
        self._static_in: list[torch.Tensor] = []
        self._copied: list[int] = []          # inputs copied into static buffers per call
        self._inplace: list[tuple[int, int]] = []   # (input index, data_ptr) read in place
        self._static_out: list[torch.Tensor] = []
        self._recaptures = 0
        self._lent: frozenset[int] = frozenset()

    def lend(self, outputs) -> None:
        """Outputs returned as the graph's own buffers, not cloned: the caller consumes them
        (copies them elsewhere) before it calls again."""
        self._lent = frozenset(outputs)

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if self._graph is not None:
            return self._replay(inputs)
        if self._failed:
            return self._run(*inputs)
        if any(t.device.type == "cpu" and i not in self._unread for i, t in enumerate(inputs)):
            # A host tensor (efficient attention's philox seed and offset) would be read once,
            # at capture, and its value baked into every replay.
            self._failed = True
            return self._run(*inputs)
        self._calls += 1
        ptrs = [t.data_ptr() for t in inputs]
        if self._calls == 1:
            self._first_ptrs = ptrs
        if self._calls <= self._warmup:
            if self._calls == self._warmup:
                self._stable = [a == b for a, b in zip(self._first_ptrs, ptrs)]
            return self._run(*inputs)
        try:
            self._capture(inputs)
        except Exception:  # a library call that cannot be captured: run as before
            self._graph, self._failed = None, True
            return self._run(*inputs)
        return self._replay(inputs)

    def _capture(self, inputs: Sequence[torch.Tensor]) -> None:
        static = []
        for i, t in enumerate(inputs):
            if t.device.type == "cpu":       # unread (checked above): passed as it is
                static.append(t)
            elif self._stable[i] and t.is_contiguous():
                static.append(t)
                self._inplace.append((i, t.data_ptr()))
            else:
                static.append(torch.empty_like(t, memory_format=torch.contiguous_format))
                self._copied.append(i)
        self._static_in = static
        for i in self._copied:
            static[i].copy_(inputs[i])
        # Warm up on a side stream (as torch.cuda.graphs recommends), then capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._run(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._static_out = self._run(*static)
        self._graph = graph

    def _replay(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        moved = [i for i, ptr in self._inplace if inputs[i].data_ptr() != ptr]
        if moved:
            # An input that kept its storage over the warm-up calls (by the caching allocator's
            # chance: a backward's saved activations) arrives elsewhere: from now on it is
            # copied into a static buffer, which needs a new capture (a few at most).
            if self._recaptures >= self.MAX_RECAPTURES:
                return self._run(*inputs)
            self._recaptures += 1
            for i in moved:
                self._stable[i] = False
            self._graph, self._inplace, self._copied, self._static_out = None, [], [], []
            try:
                self._capture(inputs)
            except Exception:  # noqa: BLE001 - as in the first capture: run without the graph
                self._graph, self._failed = None, True
                return self._run(*inputs)
        for i in self._copied:
            if inputs[i].shape != self._static_in[i].shape:
                return self._run(*inputs)   # raises the executor's clear shape error
        if self._copied:    # one multi-tensor copy: a training graph has hundreds of inputs
            torch._foreach_copy_([self._static_in[i] for i in self._copied],
                                 [inputs[i] for i in self._copied])
        self._graph.replay()
        lent = self._lent
        outs = [o if j in lent else torch.empty_like(o, memory_format=torch.preserve_format)
                for j, o in enumerate(self._static_out)]
        fresh = [j for j in range(len(outs)) if j not in lent]
        if fresh:
            torch._foreach_copy_([outs[j] for j in fresh], [self._static_out[j] for j in fresh])
        return outs
