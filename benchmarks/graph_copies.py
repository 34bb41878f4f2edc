"""What ember's CUDA graphs copy per training step, and why (runtime/cuda_graphs.py).

    python benchmarks/graph_copies.py [--model whisper_encoder] [--mode train-sgd] [--steps 12]

Runs the model zoo's training step (benchmarks/model_zoo.py: forward, backward and the compiled
optimizer step) through ember on the GPU, then over `--measure` more steps counts the bytes the
graphs copy: inputs copied into static buffers and outputs cloned out of a pool (every
`torch._foreach_copy_` call, by the line that made it). Prints each graph's decisions as they
happened (captures, recaptures, calls run without the graph and why, graphs dropped for good:
`graph_copy_max_bytes`) and its state at the end, and the step's median time beside eager's.
"""
from __future__ import annotations

import argparse
import collections
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_zoo  # noqa: E402
from common import interleaved_median_ms  # noqa: E402


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor))


def _spy(events: list, step: list):
    """Wraps GraphedProgram's decisions to log them into `events`; returns the made graphs."""
    from ember.runtime.cuda_graphs import GraphedProgram as G
    made = []

    def gid(g):
        return (g.stats or {}).get("graph_id", hex(id(g)))

    init, ungraphed, recapture, capture, drop = (G.__init__, G._ungraphed, G._recapture,
                                                 G._capture, G._drop)

    def _init(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    def _ungraphed(self):
        f = sys._getframe(1)
        events.append(f"step {step[0]}: {gid(self)} runs without its graph "
                      f"({f.f_code.co_name}:{f.f_lineno})")
        return ungraphed(self)

    def _recapture(self, inputs):
        f = sys._getframe(1)
        events.append(f"step {step[0]}: {gid(self)} captured again "
                      f"({f.f_code.co_name}:{f.f_lineno})")
        return recapture(self, inputs)

    def _capture(self, inputs):
        out = capture(self, inputs)
        events.append(f"step {step[0]}: {gid(self)} captured: {len(self._copied)} inputs "
                      f"copied ({_nbytes(self._copied_dst) / 2**20:.1f} MiB), "
                      f"{len(self._inplace)} read in place, {len(self._pooled)} in a pool; "
                      f"{len(self._fresh)} outputs cloned "
                      f"({_nbytes(self._static_out[j] for j in self._fresh) / 2**20:.1f} MiB), "
                      f"{len(self._guarded)} lent")
        return out

    def _drop(self, inputs, why):
        events.append(f"step {step[0]}: {gid(self)} dropped: {why}")
        return drop(self, inputs, why)

    G.__init__, G._ungraphed, G._recapture, G._capture, G._drop = (
        _init, _ungraphed, _recapture, _capture, _drop)
    return made


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="whisper_encoder")
    ap.add_argument("--mode", default="train-sgd", choices=("train-sgd", "train-bf16"))
    ap.add_argument("--steps", type=int, default=12, help="steps before counting")
    ap.add_argument("--measure", type=int, default=5, help="steps counted")
    ap.add_argument("--repeats", type=int, default=20, help="timed steps (0: not timed)")
    ap.add_argument("--copy-max-bytes", default="default",
                    help="ember's graph_copy_max_bytes: an integer, 'none', or 'default'")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("graph_copies.py: needs a CUDA device (CUDA graphs)")
    torch.backends.cuda.matmul.allow_tf32 = False       # as the zoo
    torch.backends.cudnn.allow_tf32 = False
    import torch_mlir  # noqa: F401
    import ember
    base, inputs, loss_fn = model_zoo.build(args.model, "cuda", False, False)
    if args.model in model_zoo.VISION:
        loss_fn = model_zoo._classification_loss(base, inputs)
    options = {}
    if args.copy_max_bytes != "default":
        options["graph_copy_max_bytes"] = (None if args.copy_max_bytes == "none"
                                           else int(args.copy_max_bytes))
    events, step = [], [0]
    made = _spy(events, step)
    ember.clear_reports()

    def comp(f):
        return torch.compile(f, backend="ember", options=options)
    run, _ = model_zoo._train_fns(copy.deepcopy(base).train(), inputs, loss_fn, args.mode, comp)
    for step[0] in range(args.steps):
        run()
    torch.cuda.synchronize()
    real = torch._foreach_copy_
    calls, moved = collections.Counter(), collections.Counter()

    def counted(dsts, srcs, *a, **k):
        f = sys._getframe(1)
        where = f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} ({f.f_code.co_name})"
        calls[where] += 1
        moved[where] += _nbytes(srcs)
        return real(dsts, srcs, *a, **k)
    torch._foreach_copy_ = counted
    try:
        for step[0] in range(args.steps, args.steps + args.measure):
            run()
        torch.cuda.synchronize()
    finally:
        torch._foreach_copy_ = real
    print(f"{args.model} {args.mode}, graph_copy_max_bytes "
          f"{options.get('graph_copy_max_bytes', 'default')}")
    print("\nCopies per step (torch._foreach_copy_):")
    for where in sorted(calls):
        print(f"  {where}: {calls[where] / args.measure:.1f} calls, "
              f"{moved[where] / args.measure / 2**20:.1f} MiB")
    if not calls:
        print("  none")
    print(f"  total {sum(moved.values()) / args.measure / 2**20:.1f} MiB")
    print("\nDecisions:")
    for e in events:
        print("  " + e)
    print("\nGraphs at the end:")
    for g in made:
        print(f"  {(g.stats or {}).get('graph_id')}: captured {g.captured}, dropped "
              f"{g.dropped!r}, recaptures {g._recaptures}, calls without the graph "
              f"{g.ungraphed_calls}, a replay {g.replay_s}, copies a replay "
              f"{(_nbytes(g._copied_dst) + _nbytes(g._static_out[j] for j in g._fresh)) / 2**20:.1f}"
              f" MiB")
    if args.repeats > 0:
        ref, _ = model_zoo._train_fns(copy.deepcopy(base).train(), inputs, loss_fn, args.mode,
                                      None)
        eager_ms, ms = interleaved_median_ms([ref, run], repeats=args.repeats, device="cuda")
        print(f"\nstep: eager {eager_ms:.3f} ms, ember {ms:.3f} ms (x{eager_ms / ms:.3f} of eager)")


if __name__ == "__main__":
    main()
