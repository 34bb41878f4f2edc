"""The graphs of one training step captured into one CUDA-graph memory pool, and what keeps
them from overwriting each other's outputs (runtime/cuda_graphs.py uses it; no CUDA here, so the
bookkeeping is tested on the CPU).

A training forward founds a family (its pool); its backward, which reads the forward's saved
activations in place, is captured into the same pool (an optimizer step that reads the
backward's gradients in place could too; the frontend keeps it in a pool of its own: see
frontend/compile_module.py). The caching allocator then hands a later capture the
blocks an earlier capture freed (the forward's temporaries): the backward's temporaries and
gradients cost no new memory where the forward's temporaries were.

Invariant: a replay of a member captured as the family's `seq`-th capture writes only blocks
that were free when it was captured. So a replay is safe while every block still alive in the
pool was alive at its capture, which holds for everything registered before it (a guarded
output is held from its capture on: by its graph, then, once the graph lets it go, by the
family itself for as long as a caller holds it) and fails for a guarded output registered
after it (a later capture may have put it where this one's temporaries go) that a caller
still holds. `alive_after(seq)` says whether one is (`clashing` names the registrations); the
member then runs without its graph, and the member that lent it is made to leave the pool.
Outputs that are not guarded are copied out of the pool by the replay that made them, and
written-back ones are copied into their inputs right after, before any other replay: those
need no check. The storages a member reads in place (its pooled inputs) are excluded by the
caller: their addresses are checked per replay, so they lay where they lay at its capture,
alive then.
"""
from __future__ import annotations

import operator
from typing import Callable, Iterable

import torch


class Registration:
    """The guarded storages one capture put in the family's pool: `storages` (the same
    storage objects the member holds, so counting them adds nothing), `rests` (their use
    counts at rest: the member's own references)."""
    __slots__ = ("seq", "storages", "rests", "retired", "owner")

    def __init__(self, seq: int, storages: list, rests: list[int], owner=None):
        self.seq = seq
        self.storages = storages
        self.rests = rests
        self.retired = False
        self.owner = owner          # a weak reference to the member, or None


class PoolFamily:
    """One shared pool: its handle, the graph that keeps it alive for later captures, the
    captures made into it (in order) and their guarded storages."""

    def __init__(self, pool, anchor=None,
                 use_count: Callable[[int], int] | None = None):
        self.pool = pool
        self._anchor = anchor        # a graph of the pool: torch keeps a pool while one lives
        self._use = use_count or torch._C._storage_Use_Count
        self._next = 0
        self._regs: list[Registration] = []
        self._version = 0            # bumped when _regs changes (members cache their checks)
        self._retired = False        # whether a retired registration is kept (see _prune)
        self._checks: dict[int, tuple[int, list[int], list[int]]] = {}
        self.captures = 0            # captures made into the pool
        self.bytes = 0               # what those captures reserved, together
        self.reports: list[dict] = []   # members' reports: shared_pool_bytes kept current

    def next_seq(self) -> int:
        seq = self._next
        self._next += 1
        return seq

    def captured(self, nbytes: int, report: dict | None) -> None:
        """A capture into the pool reserved `nbytes` more."""
        self.captures += 1
        self.bytes += nbytes
        if report is not None and not any(r is report for r in self.reports):
            self.reports.append(report)
        for r in self.reports:
            r["shared_pool_bytes"] = self.bytes
            r["shared_pool_graphs"] = self.captures

    def register(self, seq: int, storages: Iterable, owner=None) -> Registration:
        """The guarded storages of the capture numbered `seq`, counted at rest now (`owner`:
        a weak reference to the member that made them)."""
        storages = list(storages)
        reg = Registration(seq, storages, [self._use(s._cdata) for s in storages], owner)
        if storages:
            self._regs.append(reg)
            self._version += 1
        return reg

    def retire(self, reg: Registration) -> None:
        """The member let its capture's outputs go (a new capture, or the member itself was
        collected): from now on the family alone holds each storage (use count 1 at rest),
        for as long as a caller's alias keeps it alive. Idempotent."""
        if reg.retired:
            return
        reg.retired = True
        reg.rests = [1] * len(reg.storages)
        self._retired = True
        self._version += 1
        self._prune()

    def alive_after(self, seq: int) -> bool:
        """Whether a guarded output registered after capture `seq` is alive."""
        if self._retired:
            self._prune()
        check = self._checks.get(seq)
        if check is None or check[0] != self._version:
            later = [r for r in self._regs if r.seq > seq]
            check = self._checks[seq] = (self._version,
                                         [s._cdata for r in later for s in r.storages],
                                         [n for r in later for n in r.rests])
        return any(map(operator.gt, map(self._use, check[1]), check[2]))

    def clashing(self, seq: int, spans: dict[int, int]) -> list[Registration]:
        """The registrations after capture `seq` with a storage alive that does not lie within
        `spans` (storage address -> bytes: the pooled inputs the member of `seq` reads in
        place, which were alive at its capture; a storage at the same address, no larger,
        lies within one)."""
        use = self._use
        return [r for r in self._regs if r.seq > seq
                and any(use(s._cdata) > n and spans.get(s.data_ptr(), -1) < s.nbytes()
                        for s, n in zip(r.storages, r.rests))]

    def _prune(self) -> None:
        """Retired registrations whose storages no caller holds any more: dropped (their
        blocks go back to the pool's free lists)."""
        keep, changed = [], False
        for r in self._regs:
            if r.retired:
                live = [(s, n) for s, n in zip(r.storages, r.rests) if self._use(s._cdata) > n]
                if len(live) < len(r.storages):
                    r.storages[:] = [s for s, _ in live]
                    r.rests = [n for _, n in live]
                    changed = True
                if not live:
                    continue
            keep.append(r)
        self._retired = any(r.retired for r in keep)
        if changed:
            self._regs = keep
            self._version += 1

    @property
    def registered(self) -> int:
        """Storages the family guards now (tests, reports)."""
        return sum(len(r.storages) for r in self._regs)
