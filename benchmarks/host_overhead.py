"""Per-call host time of ember's compiled training graphs on the CPU (issue 12: GPT-2 bf16
training on the H100 is host-bound).

    python benchmarks/host_overhead.py [--models gpt2,bert] [--size tiny|small] [--calls 200]

Two measurements, each the median of `--calls` calls (the least of `--rounds` such medians),
microseconds:

* `frontend`: the forward and the backward graph of a training step (`EmberGraph.__call__`,
  as AOTAutograd calls it) with the compiled program stubbed to return its last real outputs:
  what remains is ember's host work around the program (inputs permuted, the host half, the
  outputs assembled: views, saved activations), the same code path as on a GPU. And the
  executor's input checks per program (`executor inputs k (number of inputs)`).
* `graphed`: the CUDA-graph runtime's per-replay bookkeeping (runtime/cuda_graphs.py
  GraphedProgram._replay: liveness check, in-place input check, saved-tensor aliases, views
  into another graph's pool, outputs copied out) on CPU tensors, the graph's replay itself a
  no-op; the state is a GPT-2-like forward (`--outputs` outputs, most of them lent) and a
  backward reading a third of its inputs in the forward's pool; a third of the inputs are read
  in place (pointer-checked) and a third copied into static buffers.

Run it on two trees (PYTHONPATH) to compare before / after; the figures are host time only,
the program's own kernels are not in them.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import build  # noqa: E402


ROUNDS = 5


def _median_us(fn, calls: int) -> float:
    """The least of ROUNDS medians of `calls` calls: the machine is shared, and the least
    median is the one other processes disturbed least."""
    medians = []
    for _ in range(ROUNDS):
        times = []
        for _ in range(calls):
            t = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t)
        medians.append(statistics.median(times))
    return min(medians) / 1e3


def frontend(name: str, size: str, calls: int) -> dict[str, float]:
    import ember  # noqa: F401 - registers the backend
    from ember.frontend import compile as ec
    from ember.runtime import executor
    graphs, last = {}, {}
    call, run = ec.EmberGraph.__call__, executor.CompiledProgram.__call__

    def spy(self, *args):
        graphs[self.kind] = (self, args)
        return call(self, *args)

    progs = {}

    def spy_run(self, *args):
        last[id(self)] = out = run(self, *args)
        progs[id(self)] = (self, args)
        return out
    ec.EmberGraph.__call__ = spy
    executor.CompiledProgram.__call__ = spy_run
    base, inputs, loss_fn = build(name, "cpu", small=size == "small", tiny=size == "tiny")
    model = copy.deepcopy(base).train()
    # donated saved activations are freed by the backward: the timed calls reuse them
    compiled = torch.compile(model, backend="ember", options={"donate_saved": False})
    try:
        for _ in range(3):
            for p in model.parameters():
                p.grad = None
            loss_fn(compiled(*inputs)).backward()
    finally:
        ec.EmberGraph.__call__ = call
    # the program stubbed: each instance returns its last real outputs
    executor.CompiledProgram.__call__ = lambda self, *args: list(last[id(self)])
    out = {}
    try:
        for kind in ("forward", "backward"):
            if kind not in graphs:
                continue
            graph, args = graphs[kind]
            with torch.no_grad():
                for _ in range(5):
                    graph(*args)
                out[kind] = _median_us(lambda: graph(*args), calls)
    finally:
        executor.CompiledProgram.__call__ = run
    # the executor's input checks (its own per-call work before the first step)
    for k, (prog, args) in enumerate(progs.values()):
        vals = [None] * len(prog.program.values)
        out[f"executor inputs {k} ({len(args)})"] = _median_us(
            lambda: prog._take_inputs(args, vals), calls)
    return out


class _NoGraph:
    def replay(self):
        pass


def graphed(outputs: int, calls: int) -> dict[str, float]:
    """GraphedProgram._replay on a synthetic GPT-2-like state (see the module docstring)."""
    from ember.runtime import cuda_graphs as cg
    torch.manual_seed(0)

    def state(n_in, n_out, lent, pooled_every):
        g = cg.GraphedProgram(lambda *a: [])
        # small tensors: the copies a replay makes are device work, not the host's
        inputs = [torch.randn(8, 8) for _ in range(n_in)]
        pool = torch.empty(n_out * 64 + 64)
        outs = [pool[k * 64:(k + 1) * 64].view(8, 8) for k in range(n_out)]
        g._graph = _NoGraph()
        g._inplace = [(i, t.data_ptr()) for i, t in enumerate(inputs) if i % 3 == 0]
        g._copied = [i for i in range(n_in) if i % 3 == 1]     # copied into static buffers
        g._static_in = [torch.empty_like(t) if i % 3 == 1 else None
                        for i, t in enumerate(inputs)]
        g._static_out = outs
        g.lend(range(lent), guarded=range(lent), bare=range(0, lent, 4))
        if pooled_every:        # outputs lying in another graph's pool: rebuilt per replay
            g._pooled = [(i, inputs[i].data_ptr()) for i in range(0, n_in, pooled_every)]
            g._in_pool = {j: (i, 0, (8, 8), (8, 1), torch.float32)
                          for j, (i, _) in enumerate(g._pooled)}
            for j in g._in_pool:
                g._static_out[j] = None
        use = torch._C._storage_Use_Count
        storage = pool.untyped_storage()
        g._guard = [(storage, use(storage._cdata))]
        if hasattr(g, "_plan_replay"):      # the state derived once (after issue 12's change)
            g._plan_replay()
        return g, inputs

    out = {}
    fwd, fin = state(150, outputs, outputs - 10, 0)
    out["forward"] = _median_us(lambda: fwd(*fin), calls)
    bwd, bin_ = state(outputs, 150, 150, 3)
    out["backward"] = _median_us(lambda: bwd(*bin_), calls)
    if hasattr(cg, "PoolFamily"):   # one pool for the step: the forward checks the backward's
        # gradients (150 storages, none alive) before each replay
        fam = cg.PoolFamily(pool=(0, 0))
        grads = [torch.empty(64).untyped_storage() for _ in range(150)]
        fwd._family, fwd._seq = fam, fam.next_seq()
        fam.register(fam.next_seq(), grads)
        out["forward, shared pool"] = _median_us(lambda: fwd(*fin), calls)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,bert")
    ap.add_argument("--size", default="tiny", choices=("tiny", "small"))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--outputs", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    args = ap.parse_args(argv)
    globals()["ROUNDS"] = args.rounds
    torch.set_num_threads(1)
    for name in args.models.split(","):
        r = frontend(name, args.size, args.calls)
        print(f"frontend {name} ({args.size}): " + ", ".join(
            f"{k} {v:.1f} us" for k, v in r.items()), flush=True)
    r = graphed(args.outputs, args.calls)
    print(f"graphed ({args.outputs} outputs): " + ", ".join(
        f"{k} {v:.1f} us" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
