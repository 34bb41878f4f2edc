"""Replay a compiled program's launches as one CUDA graph, so that a call costs one graph launch
instead of one Python-driven launch per kernel and library call.

    graphed = GraphedProgram(compiled)     # compiled: executor.CompiledProgram on a GPU
    outs = graphed(*tensors)

Call 1 runs normally (Triton compiles and autotunes; nothing of that may be captured). Call 2
runs normally too and tells which inputs keep their storage from call to call (parameters,
buffers): those are read in place by the graph; the others get static buffers that each call
copies into. Call 3 captures, and every later call replays. Outputs are cloned out of the
graph's memory pool, because the next replay overwrites it, except those the caller borrows
(`lend`): new values of mutated inputs, copied into the inputs right away; and a training
forward's saved activations (`guarded`), which only the backward reads. Those are returned as
aliases of the pool, and a replay first checks that no alias from the previous call is still
alive (its storage's use count): if one is (two forwards before their backwards, a graph kept
for a second backward), the call runs without the graph, into fresh memory, instead of
overwriting values still needed. A graph whose input is such an alias (the backward) reads it
in place: no clone out of the forward's pool, no copy into the backward's; if such an input
arrives elsewhere (its forward ran without the graph), that call runs without the graph.
When either happens STREAK calls in a row (a loop that keeps what is lent, as an accumulating
`.grad`), the graph is captured again without that optimisation (clones, copies) — unless
those copies would come to `copy_max_bytes` or more per call and a replay's device time hides
the launches the program makes without its graph (one program called several times per step:
a layer loop's body, each call with its own weights and its saved activations alive until the
backward): then it runs without its graph from then on, copying nothing (COPY_MAX_BYTES).

Inputs the program writes (`written_inputs`): an optimizer step's parameters, and a backward's
donated saved activations, whose memory holds its later intermediates (ValueInfo.in_input) and,
where they lie in the forward's pool, its gradients: those are views of the forward's storages
that this graph does not hold (rebuilt per replay), so the gradients cost no memory besides the
saved activations, and the forward's liveness guard keeps its next replay from overwriting one
still alive (a static input buffer or the caller's own memory holds no output:
`outputs_in_inputs` off). A
replay writes them where they lie — the forward's pool, read in place, or a static buffer copied
into on every call — which is what donation allows; the warm-up before a capture runs on copies
of them, since the capture itself runs nothing and its first replay must read their values.

One pool for a training step (`share_pool`, the `shared_graph_pool` option): a forward that
lends saved activations founds a shared pool (runtime/pool_family.py); a graph capturing with
pooled inputs of that pool (its backward; the frontend lets only a training forward and
backward share, frontend/compile_module.py: an optimizer step reading the gradients keeps
its own pool) is captured into it, so the caching allocator hands it the blocks the earlier captures freed (the
forward's temporaries) instead of new memory. A replay writes what was free at its capture: it
first checks that no guarded output of a LATER capture of its pool (one that may lie in its
temporaries: a `.grad` kept past the next forward) is alive, apart from the pooled inputs it
reads itself, and if one is, runs without the graph and has that later member leave the pool
(a capture of its own at its next call); outputs a member no longer holds (a recapture, the
member collected) stay guarded by the pool for as long as a caller holds them. A graph that
lends nothing and reads no pool (inference, `no_grad`) keeps a pool of its own.

Correctness first: a program given host (CPU) tensors is never captured, except those its
steps never read (`unread_host_inputs`: an attention backward's philox seed without dropout); a call whose in-place
input arrives with a different storage, or any capture failure, runs without the graph (and a
failed capture is not retried).
"""
from __future__ import annotations

import operator
import weakref
from typing import Callable, Sequence

import torch

from .fast_views import reinterpret
from .pool_family import PoolFamily

# Storage addresses of guarded (lent, liveness-checked) outputs of live graphs: a graph capturing
# with an input in one of them reads it in place (see the module docstring).
_POOLED: set[int] = set()
# ... and the shared pool each lies in (runtime/pool_family.py), where its graph is in one
_FAMILY_OF: dict[int, PoolFamily] = {}


def _on_host(t: torch.Tensor) -> bool:
    """A host tensor (the CPU tests of the shared pool's control flow, on fake graphs, treat
    CPU tensors as device ones)."""
    return t.device.type == "cpu"


def _unpool(ptrs: set[int]) -> None:
    _POOLED.difference_update(ptrs)
    for p in ptrs:
        _FAMILY_OF.pop(p, None)


def _clear_blas_workspaces() -> None:
    """cuBLAS keeps one workspace per (handle, stream), allocated on first use and reused by
    every later call on that stream, captures included: every capture runs on torch's one
    default capture stream, so without this a graph would replay with a workspace allocated in
    another graph's pool — or in Inductor's cudagraph-tree pool, which Inductor frees and
    re-records at will (`clear_cublass_cache`) — and write into memory that is no longer its
    own. Cleared before a capture, the workspace the capture needs is allocated in that graph's
    own pool and lives as long as the graph; cleared after it, no later capture or call reuses
    it (Inductor's cudagraph trees do the same)."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


def pooled_storage(t: torch.Tensor) -> bool:
    """Whether `t` lies in a live graph's pool as a guarded output (a graphed forward's saved
    activation): its memory is the graph's, never to be freed by a reader."""
    return t.untyped_storage().data_ptr() in _POOLED


class GraphedProgram:
    MAX_RECAPTURES = 3
    # A program whose last kernel writes at least this many bytes of outputs only: that kernel
    # runs after each replay, outside the graph, into new memory (CompiledProgram.tail_split),
    # instead of the graph writing them into its pool and each call copying them out (the MLP
    # block's 16 MB output: 2% of its call on an H100). Smaller outputs: the copy costs less
    # than a kernel launched from Python.
    TAIL_MIN_BYTES = 4 << 20
    # ... and where that last step is a generated kernel (launched from Python through
    # Triton's launcher, tens of microseconds of host time after the replay), whatever
    # `tail_min_bytes` says: below it the copy costs less (the sandwich of
    # benchmarks/fallback_bench.py, a 2 MB output: 131.6 -> 122.1 us a call on an H200).
    TAIL_KERNEL_MIN_BYTES = 4 << 20
    STREAK = 2      # calls in a row without the graph (a live alias, a moved pooled input)
                    # before the graph is captured again without that optimisation
    # An input copied into a static buffer (it moved between the two warm-up calls: the first
    # call compiles, and the caching allocator places a backward's incoming gradient, Llama's
    # 62.5 MB logits gradient, elsewhere than in steady state) of at least this many bytes
    # that then arrives at one address SETTLED replays in a row is read in place from a new
    # capture: the static buffer, held for the graph's life, goes. Once only per input (one
    # that moves again is copied for good), and only before any other recapture. None: never.
    PROMOTE_MIN_BYTES: int | None = 4 << 20
    SETTLED = 3
    # A graph about to be captured again with its outputs cloned out or its pooled inputs
    # copied in (STREAK calls found an alias alive or a pooled input moved) whose replays would
    # then copy at least this many bytes per call (copied inputs, cloned outputs) runs without
    # its graph for good instead, where that is faster: where the host time of its launches
    # without a graph (`ungraphed_host_s`, the frontend's estimate) is less than a replay's
    # device time (measured with CUDA events on the first replays of each capture) plus the
    # copies (`copy_bytes_per_s`, read and written): a program whose device time hides its
    # launches loses only the copies. Whisper-tiny's encoder (transformers' layer loop, one
    # graph per layer called four times a step: 1x H200, fp32 SGD step) copied 183 MiB per
    # forward call and 218 MiB per backward call, 1.7 GB a step, and ran x0.98 of eager;
    # gradient accumulation over a resnet50 backward (215 launches, ~8 ms of host time
    # without its graph: the fifth session's H100) keeps its graph and clones. None: never
    # (the `graph_copy_max_bytes` option).
    COPY_MAX_BYTES: int | None = 32 << 20
    TIMED_REPLAYS = 2       # replays of each capture timed with CUDA events

    def __init__(self, run: Callable[..., list], warmup_calls: int = 2,
                 unread_host_inputs: frozenset[int] = frozenset(),
                 written_inputs: frozenset[int] = frozenset(), share_pool: bool = True,
                 tail_min_bytes: int | None = None, tail_guarded: bool = False,
                 tail_kernel_min_bytes: int | None = None,
                 copy_max_bytes: int | None = COPY_MAX_BYTES,
                 ungraphed_host_s: float | None = None, copy_bytes_per_s: float = 2e12):
        self._run = run
        self.COPY_MAX_BYTES = copy_max_bytes
        self.dropped: str | None = None     # why it runs without its graph for good
        # the cost model of COPY_MAX_BYTES (None: the bytes alone decide, nothing is timed)
        self._host_s, self._copy_bps = ungraphed_host_s, copy_bytes_per_s
        self._timing_left = 0
        self._replay_events = None
        self.replay_s: float | None = None      # a timed replay's device seconds
        # whether the tail may write guarded outputs: a backward's gradients (autograd takes
        # them, nothing reads them in another graph's pool), which then take new memory per
        # call instead of lying in the pool between steps; not a forward's saved activations,
        # which its backward reads in place in the pool
        self._tail_guarded = tail_guarded
        if tail_min_bytes is not None:      # the `graph_tail_min_bytes` option
            self.TAIL_MIN_BYTES = tail_min_bytes
        if tail_kernel_min_bytes is not None:
            self.TAIL_KERNEL_MIN_BYTES = tail_kernel_min_bytes
        # the executor's own settings, which a graph changes below: back when it is dropped
        self._run_settings = {k: getattr(run, k) for k in (
            "outputs_in_inputs", "outputs_in_pools", "release_inputs", "release_arena")
            if hasattr(run, k)}
        if hasattr(run, "outputs_in_inputs"):
            # A backward's gradients planned in its donated inputs' memory: in a static input
            # buffer or the caller's memory they would be held by this graph (and pin the
            # caller's), so they get memory of their own (this graph's pool); in the forward's
            # pool (its saved activations, read in place) they stay there, as views this graph
            # does not hold (`_in_pool`): rebuilt per replay, lent to the caller, and guarded by
            # the forward's liveness check (a forward replay while one lives would overwrite
            # it: it runs without its graph instead). The gradients then take no memory
            # besides the saved activations, as in eager and Inductor's backward.
            run.outputs_in_inputs = False
            run.outputs_in_pools = True
        if hasattr(run, "release_inputs"):
            # its inputs may be another graph's pool, or read in place by its own replays
            run.release_inputs = False
            # the arena lies in the graph's pool (memory_allocated does not count it after the
            # capture); freeing it inside a capture is not tried on a device yet
            run.release_arena = False
        # inputs the program may write into (an optimizer step's parameters, a backward's
        # donated saved activations): the warm-up before a capture runs on copies of them, or
        # it would apply the step twice / leave the capture reading overwritten activations
        self._written = written_inputs
        self._unread = unread_host_inputs   # host tensors whose value no step reads
        self._warmup = warmup_calls
        self._calls = 0
        self._first_ptrs: list[int] | None = None
        self._graph: torch.cuda.CUDAGraph | None = None
        self._failed = False
        self._static_in: list[torch.Tensor] = []
        self._copied: list[int] = []          # inputs copied into static buffers per call
        self._inplace: list[tuple[int, int]] = []   # (input index, data_ptr) read in place
        self._static_out: list[torch.Tensor | None] = []
        # with a tail (see TAIL_MIN_BYTES): (first run of the tail, the output positions it
        # writes) and the captured value table the tail reads
        self._tail: tuple[int, frozenset[int]] | None = None
        self._static_vals: list | None = None
        self._settle_done: set[int] = set()     # inputs promoted or moved once (never again)
        # (value, pooled input, byte offset, shape, strides, dtype, element offset): values
        # the tail reads in another graph's pool, made per replay (see _capture)
        self._tail_views: list[tuple] = []
        # output -> (pooled input, byte offset in its storage, shape, strides, dtype): outputs
        # written into another graph's pool, rebuilt from the input per replay (not held)
        self._in_pool: dict[int, tuple] = {}
        self._recaptures = 0
        self._lent: frozenset[int] = frozenset()
        self._guarded: frozenset[int] = frozenset()
        self._bare: frozenset[int] = frozenset()
        # lent outputs that are inputs' new values (`lend`'s write_into: output -> input), and
        # those a capture writes into their input at its end, handed out as the input itself
        self._write_into: dict[int, int] = {}
        self._into: list[tuple[int, int]] = []
        self._guard: list[tuple[torch.UntypedStorage, int]] = []   # (storage, use count at rest)
        self._pooled: list[tuple[int, int]] = []    # (input index, data_ptr): another pool's
        self.ungraphed_calls = 0    # replays given up for a live alias or a moved pooled input
        self.pool_bytes = 0         # memory the capture reserved (the graph's pool)
        self._live = self._moved_pool = 0      # current streaks (see STREAK)
        self._no_pool = False
        self.stats: dict | None = None   # a report to update: graph_pool_bytes, ungraphed_calls
        self._pool_ptrs: set[int] = set()
        weakref.finalize(self, _unpool, self._pool_ptrs)
        # The shared pool (runtime/pool_family.py): `share_pool` lets a training forward found
        # one and a graph reading another's guarded outputs in place join its producer's;
        # `_family`/`_seq`/`_reg`: the pool this capture lies in, its number there, its guarded
        # storages registered there; `_foreign`: calls in a row that found a guarded output of
        # a later capture of the pool alive (see STREAK); `_private`: captured alone from then on
        self._share = share_pool
        self._family: PoolFamily | None = None
        self._seq = -1
        self._reg = None
        self._foreign = 0
        self._private = not share_pool
        self._pooled_spans: dict[int, int] = {}
        self._evicted = False
        self._shared_bytes = 0      # what its captures into a shared pool reserved there
        self._plan_replay()

    def _plan_replay(self) -> None:
        """What a replay does per output and per checked input, derived once from the state
        above (after a capture and after `lend`), so that `_replay` loops over prebuilt lists:
        a training graph has a hundred or more of each (issue 12: host overhead)."""
        self._guard_cdata = [s._cdata for s, _ in self._guard]
        self._guard_rest = [rest for _, rest in self._guard]
        self._copied_dst = [self._static_in[i] for i in self._copied]
        self._copied_shapes = [t.shape for t in self._copied_dst]
        self._pooled_idx = [i for i, _ in self._pooled]
        self._inplace_idx = [i for i, _ in self._inplace]
        # their addresses at the capture, aligned with the inputs (for _same_ptrs)
        width = max(self._pooled_idx + self._inplace_idx, default=-1) + 1
        self._pooled_at = _aligned(self._pooled, width)
        self._inplace_at = _aligned(self._inplace, width)
        # large copied inputs watched for a settled address (PROMOTE_MIN_BYTES)
        big = self.PROMOTE_MIN_BYTES
        self._settle_idx = [] if big is None or self._recaptures >= self.MAX_RECAPTURES - 1 \
            else [
            i for i in self._copied if i not in self._settle_done
            and self._static_in[i].untyped_storage().nbytes() >= big]
        self._settle_ptrs, self._settled = None, 0
        n = len(self._static_out)
        tail = self._tail[1] if self._tail is not None else frozenset()
        lent = self._lent | tail
        self._fresh = [j for j in range(n) if j not in lent]
        # (a view into a pooled input is a new tensor already)
        self._detached = [j for j in range(n) if j in self._guarded and j not in self._bare
                          and j not in tail and j not in self._in_pool]
        self._tail_outs = sorted(tail)
        # views into a pooled input's storage (_in_pool): made from the input itself when the
        # dtypes agree (runtime/fast_views.reinterpret), else through set_ (_view_in)
        # (the element offset when the byte offset is a whole number of elements, else None)
        self._pool_views = [(j, i, off, shape, stride, dt,
                             off // dt.itemsize if off % dt.itemsize == 0 else None)
                            for j, (i, off, shape, stride, dt) in self._in_pool.items()]

    def lend(self, outputs, guarded=(), bare=(), write_into=None) -> None:
        """Outputs returned as the graph's own buffers, not cloned. `outputs`: the caller
        consumes them (copies them elsewhere) before it calls again. `guarded`: returned as
        aliases that may live until some later call; a replay while one is alive runs without
        the graph instead (a training forward's saved activations, read by its backward).
        `bare` (of `guarded`): the caller only makes views of them, never keeps them: handed
        out as the static tensors themselves, not a new alias each (each view holds the
        storage, which is what the liveness check counts)."""
        # `write_into` (output -> input, of `outputs`): the output is the input's new value,
        # which the caller copies into it after the call (input_mutations.write_back); where
        # the input is read in place, the capture copies it there itself, at its end, and a
        # replay hands the input out in its place (nothing left to copy: a ResNet-50 forward
        # writes back 106 BatchNorm running statistics per step)
        self._write_into = dict(write_into or {})
        self._guarded = frozenset(guarded)
        self._bare = frozenset(bare) & self._guarded
        self._lent = frozenset(outputs) | self._guarded
        self._plan_replay()

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def _ungraphed(self) -> None:
        self.ungraphed_calls += 1
        if self.stats is not None:
            self.stats["ungraphed_calls"] = self.ungraphed_calls

    def _pooled_placed(self, inputs) -> bool:
        """Whether the pooled inputs lie where they lay at the capture."""
        return _same_ptrs(inputs, self._pooled_at, self._pooled_idx)

    def _in_use(self) -> bool:
        """Whether an alias handed out by the previous replay is still alive."""
        return any(map(operator.gt, map(torch._C._storage_Use_Count, self._guard_cdata),
                       self._guard_rest))

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if self._graph is not None:
            if self._evicted and self._pooled_placed(inputs):
                # an earlier member of the shared pool found an output of ours alive: leave
                # it (once the pooled inputs are where they were, not while their producer
                # runs without its graph)
                self._evicted = False
                self._private = True
                if not self._recapture(inputs):
                    return self._run(*inputs)
            family = self._family
            # (pooled inputs elsewhere: _replay runs without the graph or captures anew)
            clash = (family.clashing(self._seq, self._pooled_spans)
                     if family is not None and family.alive_after(self._seq)
                     and self._pooled_placed(inputs) else None)
            if clash:
                # A later capture of the shared pool lent an output still alive (a `.grad`
                # kept past the next forward, gradients of autograd.grad held): it may lie
                # where this graph's temporaries go. Run into fresh memory, and the member
                # that lent it leaves the pool at its next call (a capture of its own); where
                # none is left to (its outputs outlived its capture), this one leaves if that
                # keeps happening.
                self._ungraphed()
                owners = [o for o in (r.owner() for r in clash
                                      if not r.retired and r.owner is not None)
                          if o is not None and o is not self]
                for o in owners:
                    o._evicted = True
                self._foreign += 1
                if owners or self._foreign < self.STREAK:
                    return self._run(*inputs)
                self._foreign = 0
                self._private = True
                if not self._recapture(inputs):
                    return self._run(*inputs)
            else:
                self._foreign = 0
            if self._guard and self._in_use():
                self._ungraphed()
                self._live += 1
                if self._live < self.STREAK:
                    return self._run(*inputs)
                cost = self._copy_bytes(inputs, clone_guarded=True)
                if self._copies_too_much(cost):
                    return self._drop(inputs, f"its outputs stay alive from call to call "
                                              f"(cloned, {cost} bytes a call with the inputs "
                                              f"it copies)")
                # The caller keeps what this graph lends from call to call (a `.grad` that
                # accumulates, gradients a loop keeps from autograd.grad): clone the outputs
                # from now on, from a new capture; the old pool stays with the live aliases.
                self._lent -= self._guarded
                self._guarded = self._bare = frozenset()
                self._plan_replay()
                if not self._recapture(inputs):
                    return self._run(*inputs)
            self._live = 0
            return self._replay(inputs)
        if self._failed:
            return self._run(*inputs)
        if any(_on_host(t) and i not in self._unread for i, t in enumerate(inputs)):
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
            if _on_host(t):       # unread (checked above): passed as it is
                static.append(t)
            elif not self._no_pool and t.untyped_storage().data_ptr() in _POOLED:
                static.append(t)
                self._pooled.append((i, t.data_ptr()))
            elif self._stable[i] and t.is_contiguous():
                static.append(t)
                self._inplace.append((i, t.data_ptr()))
            else:
                static.append(torch.empty_like(t, memory_format=torch.contiguous_format))
                self._copied.append(i)
        self._static_in = static
        self._pooled_spans = {static[i].untyped_storage().data_ptr():
                              static[i].untyped_storage().nbytes() for i, _ in self._pooled}
        for i in self._copied:
            static[i].copy_(inputs[i])
        # Warm up on a side stream (as torch.cuda.graphs recommends), then capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._run(*[t.clone() if i in self._written else t for i, t in enumerate(static)])
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        _clear_blas_workspaces()
        split = getattr(self._run, "tail_split", None)
        # (a training forward too, whose guarded outputs are its saved activations: its
        # fresh outputs, the logits of a language model, would otherwise lie in its pool for
        # good and be copied out per call, the copy alive beside them; not a graph reading
        # another's pool in place, nor one that lends its outputs for write-back)
        # (reading another graph's pool in place: what the tail reads there is rebuilt from
        # the call's inputs per replay, `_tail_views`, not held)
        self._tail = (split(self.TAIL_MIN_BYTES, arena_free=bool(self._guarded),
                            kernel_min_bytes=self.TAIL_KERNEL_MIN_BYTES)
                      if split is not None and not (self._lent - self._guarded)
                      and (self._tail_guarded or not self._pooled) else None)
        if self._tail is not None and self._tail[1] & self._guarded \
                and not self._tail_guarded:
            self._tail = None   # a saved activation stays in the pool, read there in place
        family = self._pick_family(static)
        with torch.cuda.graph(graph, pool=family.pool if family is not None else None):
            reserved = torch.cuda.memory_reserved()   # after the cache was emptied on entry
            if self._tail is None:
                self._static_out = self._run(*static)
                self._into = self._copy_into_inputs(static)
            else:
                self._into = []
                self._static_vals = self._run.run_head(static, self._tail[0])
                self._static_out = [None if j in self._tail[1] else self._static_vals[o]
                                    for j, o in enumerate(self._run.program.outputs)]
        if self._tail is not None:
            # the tail's reads only: the rest of the head's table (the arena, its views, the
            # temporaries the executor does not drop in a graph) goes back to the pool
            reads = getattr(self._run, "tail_reads", None)
            if reads is not None:
                keep = reads(self._tail[0])
                self._static_vals = [v if i in keep else None
                                     for i, v in enumerate(self._static_vals)]
            # what it reads in another graph's pool (a backward's embedding gradient reads
            # the donated saved activation its head wrote the token gradients into): views
            # made per replay from the call's pooled inputs, as `_in_pool` outputs are; held,
            # they would keep that graph's liveness guard from ever letting it replay
            self._tail_views = [(v, i, off, shape, stride, dt,
                                 off // dt.itemsize if off % dt.itemsize == 0 else None)
                                for v, (i, off, shape, stride, dt) in _pool_views(
                                    self._static_vals, [static[i] for i, _ in self._pooled],
                                    [i for i, _ in self._pooled]).items()]
            for v, *_ in self._tail_views:
                self._static_vals[v] = None
        _clear_blas_workspaces()
        # (in a shared pool: what this capture added to it)
        self.pool_bytes = torch.cuda.memory_reserved() - reserved
        self._graph = graph
        if family is None and not self._private and self._guarded:
            # a training forward: its backward (and an optimizer step after it) may join
            family = PoolFamily(graph.pool(), anchor=graph)
        if family is not None:
            self._family, self._seq = family, family.next_seq()
            self._shared_bytes += self.pool_bytes
        if self.stats is not None:
            # what this program's captures reserved: those into a shared pool stay reserved
            # with it (a recapture adds to them), a private pool goes with its graph
            self.stats["graph_pool_bytes"] = self._shared_bytes + (
                0 if family is not None else self.pool_bytes)
        if family is not None:
            family.captured(self.pool_bytes, self.stats)
        self._in_pool = _pool_views(self._static_out, [static[i] for i, _ in self._pooled],
                                    [i for i, _ in self._pooled])
        for j in self._in_pool:
            self._static_out[j] = None
        if self.stats is not None:
            # what the graph holds between calls besides its pool's free blocks (issue 11's
            # peak): static input buffers copied into per call, outputs held in its pool
            # (saved activations, gradients, those cloned out per call), and the outputs its
            # tail writes into new memory instead
            def nbytes(ts):
                return sum(t.untyped_storage().nbytes() for t in
                           {t.untyped_storage().data_ptr(): t for t in ts
                            if isinstance(t, torch.Tensor)}.values())
            self.stats["graph_static_input_bytes"] = nbytes(static[i] for i in self._copied)
            self.stats["graph_static_output_bytes"] = nbytes(self._static_out)
            self.stats["graph_tail_outputs"] = len(self._tail[1]) if self._tail else 0
            self.stats["graph_recaptures"] = self._recaptures
            # what the captured head's table keeps for the tail besides the inputs (a value
            # the tail reads; before tail18, a view of the arena kept all of it)
            ins = {t.untyped_storage().data_ptr() for t in static if isinstance(t, torch.Tensor)}
            self.stats["graph_tail_held_bytes"] = nbytes(
                t for t in (self._static_vals or ()) if isinstance(t, torch.Tensor)
                and t.untyped_storage().data_ptr() not in ins)
        for i, _ in self._pooled:   # not kept: holding them would keep the forward's aliases alive
            static[i] = None
        del static
        storages = {}
        for j in sorted(self._guarded):
            o = self._static_out[j]
            if o is not None:   # one in another graph's pool: that graph guards it
                storages.setdefault(o.untyped_storage().data_ptr(), o.untyped_storage())
        _POOLED.update(storages)
        self._pool_ptrs.update(storages)
        use = torch._C._storage_Use_Count
        self._guard = [(s, use(s._cdata)) for s in storages.values()]
        if family is not None:
            for p in storages:
                _FAMILY_OF[p] = family
            # (an output that is an input's storage lies in no pool)
            ins = {t.untyped_storage().data_ptr() for t in self._static_in
                   if isinstance(t, torch.Tensor)}
            self._reg = family.register(self._seq, [s for p, s in storages.items()
                                                    if p not in ins], weakref.ref(self))
            weakref.finalize(self, family.retire, self._reg)
        self._plan_replay()
        self._timing_left = self.TIMED_REPLAYS if self._host_s is not None else 0

    def _pick_family(self, static) -> PoolFamily | None:
        """The shared pool this capture goes into: that of the graphs whose guarded outputs
        it reads in place (a backward: its forward's; an optimizer step: its backward's);
        where they lie in several (graph breaks: a backward's gradient input lent by the next
        graph's backward), the one most of its pooled bytes lie in: any is safe, as the
        pooled inputs of the others are their own graphs' to guard. A recapture of a member
        stays in its pool; none for a graph that left one, or that reads no pool and lends
        nothing (an inference graph: its own pool)."""
        if self._private:
            return None
        if self._family is not None:
            return self._family
        found: dict[int, list] = {}
        for i, _ in self._pooled:
            st = static[i].untyped_storage()
            f = _FAMILY_OF.get(st.data_ptr())
            if f is not None:
                found.setdefault(id(f), [f, 0])[1] += st.nbytes()
        return max(found.values(), key=lambda e: e[1])[0] if found else None

    def _copy_into_inputs(self, static) -> list[tuple[int, int]]:
        """Inside a capture, after the program: copies the lent outputs that are inputs' new
        values (`lend`'s write_into) into those inputs where they are read in place (their
        address is checked per replay) and match them; returns the (output, input) pairs."""
        inplace = {i for i, _ in self._inplace}
        pairs = []
        for j, i in sorted(self._write_into.items()):
            o = self._static_out[j] if j < len(self._static_out) else None
            t = static[i]
            if (i in inplace and isinstance(o, torch.Tensor) and o.shape == t.shape
                    and o.dtype == t.dtype and o.device == t.device
                    and o.data_ptr() != t.data_ptr()):
                pairs.append((j, i))
        if pairs:
            torch._foreach_copy_([static[i] for _, i in pairs],
                                 [self._static_out[j] for j, _ in pairs])
        return pairs

    def _recapture(self, inputs: Sequence[torch.Tensor]) -> bool:
        """A new capture (a few at most); False: run without the graph."""
        if self._recaptures >= self.MAX_RECAPTURES:
            return False
        self._recaptures += 1
        self._let_go()
        try:
            self._capture(inputs)
        except Exception:  # noqa: BLE001 - as in the first capture: run without the graph
            self._graph, self._failed = None, True
            return False
        return True

    def _let_go(self) -> None:
        """Drops the current capture: its graph, static buffers and outputs, its guards and its
        registration in the shared pool (the old outputs still lent stay guarded there); the
        pool itself too where the graph is private."""
        self._graph, self._inplace, self._copied, self._static_out = None, [], [], []
        self._into = []
        self._tail = self._static_vals = None
        self._tail_views = []
        self._in_pool = {}
        self._pooled, self._guard = [], []
        self._replay_events, self.replay_s = None, None
        _unpool(self._pool_ptrs)
        self._pool_ptrs.clear()
        if self._family is not None:
            if self._reg is not None:
                self._family.retire(self._reg)
                self._reg = None
            if self._private:
                self._family = None
            self._seq = -1

    def _copy_bytes(self, inputs, clone_guarded: bool = False,
                    copy_pooled: bool = False) -> int:
        """Bytes a replay would copy per call after a recapture that clones the guarded
        outputs (`clone_guarded`) or copies the pooled inputs in (`copy_pooled`): the inputs
        copied now, the outputs cloned now, and those."""
        def nbytes(t):
            return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
        out = self._static_out
        total = sum(map(nbytes, self._copied_dst))
        total += sum(nbytes(out[j]) for j in self._fresh if j < len(out))
        if clone_guarded:
            tail = self._tail[1] if self._tail is not None else frozenset()
            total += sum(nbytes(out[j]) for j in self._guarded
                         if j < len(out) and j not in tail)
        if copy_pooled:
            total += sum(nbytes(inputs[i]) for i in self._pooled_idx)
        return total

    def _device_s(self) -> float | None:
        """A replay's device seconds (the last timed replay of the current capture)."""
        if self._replay_events is not None:
            start, end = self._replay_events
            self._replay_events = None
            try:
                end.synchronize()
                self.replay_s = start.elapsed_time(end) / 1e3
            except RuntimeError:
                pass
        return self.replay_s

    def _copies_too_much(self, nbytes: int) -> bool:
        """Whether replays copying `nbytes` a call lose to running without the graph (see
        COPY_MAX_BYTES)."""
        if self.COPY_MAX_BYTES is None or nbytes < self.COPY_MAX_BYTES:
            return False
        if self._host_s is None:
            return True
        device = self._device_s() or 0.0
        if self.stats is not None:
            self.stats["graph_replay_ms"] = round(device * 1e3, 4)
        return self._host_s < device + 2 * nbytes / self._copy_bps

    def _drop(self, inputs, why: str) -> list[torch.Tensor]:
        """Runs without the graph from now on (see COPY_MAX_BYTES): the graph, its static
        buffers and its place in a shared pool go; what earlier replays lent stays valid (the
        pool's blocks live as long as their storages), guarded by the pool where it lies in
        one. This call runs without the graph too."""
        if self._host_s is not None:
            why += (f"; without the graph {self._host_s * 1e3:.3f} ms of launches against a "
                    f"replay's {(self.replay_s or 0.0) * 1e3:.3f} ms")
        self._private, self._failed, self.dropped = True, True, why
        self._let_go()
        self._static_in = []
        self._lent = self._guarded = self._bare = frozenset()
        self._plan_replay()
        # from now on as without CUDA graphs: donated inputs freed after their last use, the
        # arena after its last step, outputs planned in donated inputs' memory handed out there
        for k, v in self._run_settings.items():
            setattr(self._run, k, v)
        if self.stats is not None:
            self.stats["graph_dropped"] = why
            self.stats["graph_static_input_bytes"] = self.stats["graph_static_output_bytes"] = 0
        return self._run(*inputs)

    def _replay(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if self._pooled_idx and not _same_ptrs(inputs, self._pooled_at, self._pooled_idx):
            self._ungraphed()       # its producer ran without its graph (or stopped lending)
            self._moved_pool += 1
            if self._moved_pool < self.STREAK:
                return self._run(*inputs)
            cost = self._copy_bytes(inputs, copy_pooled=True)
            if self._copies_too_much(cost):
                return self._drop(inputs, f"its inputs from another graph's pool arrive "
                                          f"elsewhere (copied, {cost} bytes a call with its "
                                          f"other copies)")
            self._no_pool = True    # it keeps arriving elsewhere: copy it in from now on
            if not self._recapture(inputs):
                return self._run(*inputs)
        self._moved_pool = 0
        if self._inplace_idx and not _same_ptrs(inputs, self._inplace_at, self._inplace_idx):
            moved = [i for i, ptr in self._inplace if inputs[i].data_ptr() != ptr]
            # An input that kept its storage over the warm-up calls (by the caching allocator's
            # chance: a backward's saved activations) arrives elsewhere: from now on it is
            # copied into a static buffer, which needs a new capture (a few at most).
            for i in moved:
                self._stable[i] = False
                self._settle_done.add(i)
            if not self._recapture(inputs):
                return self._run(*inputs)
        if self._settle_idx:
            ptrs = list(map(torch.Tensor.data_ptr, map(inputs.__getitem__, self._settle_idx)))
            self._settled = self._settled + 1 if ptrs == self._settle_ptrs else 0
            self._settle_ptrs = ptrs
            # (never as a graph's last recapture: that one, of MAX_RECAPTURES, stays for what
            # must recapture, a moved or kept input; one recapture before, for an input that
            # moved, does not keep a settled copy from going)
            if self._settled >= self.SETTLED and self._recaptures < self.MAX_RECAPTURES - 1:
                # (see PROMOTE_MIN_BYTES) read in place from now on, where still contiguous and
                # not in another graph's pool (held as a static input, it would keep that
                # graph's liveness guard from letting it replay)
                promoted = False
                for i in self._settle_idx:
                    self._settle_done.add(i)
                    t = inputs[i]
                    if t.is_contiguous() and t.untyped_storage().data_ptr() not in _POOLED:
                        self._stable[i] = promoted = True
                if not promoted:
                    self._plan_replay()
                elif not self._recapture(inputs):
                    return self._run(*inputs)
        if self._copied:    # one multi-tensor copy: a training graph has hundreds of inputs
            srcs = list(map(inputs.__getitem__, self._copied))
            if list(map(_SHAPE, srcs)) != self._copied_shapes:
                return self._run(*inputs)   # raises the executor's clear shape error
            torch._foreach_copy_(self._copied_dst, srcs)
        if self._timing_left:
            self._timing_left -= 1
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self._graph.replay()
            end.record()
            self._replay_events = (start, end)
        else:
            self._graph.replay()
        static_out = self._static_out
        outs = list(static_out)     # lent outputs as they are, bare ones included
        for j, i in self._into:     # written into their inputs by the replay
            outs[j] = inputs[i]
        for j, i, off, shape, stride, dt, eoff in self._pool_views:
            t = inputs[i]
            outs[j] = (reinterpret(t, shape, stride, eoff - t.storage_offset())
                       if t.dtype == dt and eoff is not None
                       else _view_in(t, off, shape, stride, dt))
        detached = self._detached   # guarded aliases: a new tensor each (the liveness check)
        for j, o in zip(detached, map(torch.Tensor.detach, map(outs.__getitem__, detached))):
            outs[j] = o
        if self._tail is not None:      # the last kernel, into new memory: nothing to copy
            vals = self._static_vals
            if self._tail_views:
                vals = list(vals)
                for v, i, off, shape, stride, dt, eoff in self._tail_views:
                    t = inputs[i]
                    vals[v] = (reinterpret(t, shape, stride, eoff - t.storage_offset())
                               if t.dtype == dt and eoff is not None
                               else _view_in(t, off, shape, stride, dt))
            tail = self._run.run_tail(vals, self._tail[0])
            for j in self._tail_outs:
                outs[j] = tail[j]
        fresh = self._fresh
        if fresh:
            srcs = [outs[j] for j in fresh]
            news = [torch.empty_like(o, memory_format=torch.preserve_format) for o in srcs]
            torch._foreach_copy_(news, srcs)
            for j, o in zip(fresh, news):
                outs[j] = o
        return outs


_SHAPE = operator.attrgetter("shape")
# torch's C++ check that Inductor's CUDA-graph trees use (CUDA builds): one call for the
# hundreds of inputs a training graph reads in place, instead of a data_ptr call per input
_PTRS_AT = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _aligned(pairs, width: int) -> list:
    """[(index, ptr)] -> a list of `width` with each ptr at its index (None elsewhere)."""
    at = [None] * width
    for i, ptr in pairs:
        at[i] = ptr
    return at


def _same_ptrs(inputs, at: list, idx: list[int]) -> bool:
    """Whether inputs[i].data_ptr() == at[i] for every i in `idx` (`at`: see _aligned)."""
    global _PTRS_AT
    if _PTRS_AT is not None:
        try:
            return _PTRS_AT(inputs if isinstance(inputs, list) else list(inputs), at, idx)
        except (TypeError, RuntimeError):   # another signature: the Python check from now on
            _PTRS_AT = None
    return all(inputs[i].data_ptr() == at[i] for i in idx)


def _pool_views(outputs, pooled, indices) -> dict[int, tuple]:
    """Outputs lying in the storage of a pooled input (another graph's pool): output ->
    (input index, byte offset in the storage, shape, strides, dtype)."""
    where = {t.untyped_storage().data_ptr(): i for t, i in zip(pooled, indices)}
    found = {}
    for j, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            continue
        base = o.untyped_storage().data_ptr()
        if base in where:
            found[j] = (where[base], o.storage_offset() * o.element_size(), tuple(o.shape),
                        tuple(o.stride()), o.dtype)
    return found


def _view_in(t: torch.Tensor, offset: int, shape, stride, dtype) -> torch.Tensor:
    """The view of `t`'s storage at `offset` bytes with that geometry and dtype."""
    view = torch.empty(0, dtype=dtype, device=t.device)
    return view.set_(t.untyped_storage(), offset // view.element_size(), shape, stride)
