"""resnet's stem training step (max pooling and its backward) on eager, Inductor and ember.

    python benchmarks/maxpool_bwd_bench.py [--backends eager,inductor,inductor-ro,ember]
        [--batch 32] [--res 224] [--channels 64] [--repeats 50] [--no-profile]
        [--options '{"channels_last": true}'] [--tiny] [--target cpu|triton]

The block: torchvision resnet18's stem and first basic block (7x7/2 conv, BatchNorm, ReLU,
3x3/2 max pool with padding 1, then conv-BN-ReLU-conv-BN + identity, ReLU), one training step
(forward + backward, bf16 autocast with f32 weights as `python -m ember.benchmarks --mode
train`, loss = mean of the squared output). On a GPU the max pool is 64 channels, 112x112 ->
56x56, and its backward is the kernel this measures: Inductor's
`triton_poi_fused_add_max_pool2d_with_indices_backward_*` against ember's pool-backward kernel
(frontend/pool_decomp.py; the residual gradient add is fused into both).

Per backend: the median step time (CUDA events; `--repeats` rounds, backends in alternation),
the gradients' relative error against eager's, and with the profiler (unless --no-profile) the
GPU time per step of every kernel, the pool-backward ones marked `*`, and the kernels' sum.
On the CPU (no CUDA, or `--tiny`: batch 2, 32x32): a smoke run, ember on the C++ target, or on
the Triton interpreter with `--target triton` (TRITON_INTERPRET=1 is set before triton loads).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import statistics
import sys
import time

# the pool-backward kernels in profiler names: Inductor's, ember's (the residue form's
# pointwise kernel starts from the shifted pads; the gather form's name has index_gather) and
# ATen's library kernel
POOL_BWD = re.compile(r"max_pool2d_with_indices_backward|max_pool_backward|index_gather|"
                      r"ember_fused_\w*pad\w*_kernel")


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="eager,inductor,inductor-ro,ember")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--res", type=int, default=224)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--profile-steps", type=int, default=10)
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--options", default="{}", help="ember compile options (JSON)")
    p.add_argument("--tiny", action="store_true", help="batch 2, 32x32 (the CPU smoke run)")
    p.add_argument("--target", default=None, help="ember's target (CPU runs: cpu or triton)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    return p.parse_args(argv)


def build(channels: int):
    import torch.nn as nn

    class Stem(nn.Module):
        """resnet18's stem and layer1's first basic block (torchvision's modules and order)."""

        def __init__(self, c):
            super().__init__()
            self.conv1 = nn.Conv2d(3, c, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)
            self.conv3 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(c)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            y = self.relu(self.bn2(self.conv2(x)))
            return self.relu(self.bn3(self.conv3(y)) + x)

    return Stem(channels)


def main(argv=None) -> None:
    args = _args(argv)
    if args.target == "triton":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import rel_err  # noqa: E402
    import ember  # noqa: F401  (the backend)

    cuda = torch.cuda.is_available() and not args.tiny and args.target != "triton"
    device = "cuda" if cuda else "cpu"
    if not cuda:
        args.batch, args.res = (2, 32) if args.tiny or args.batch == 32 else (args.batch, args.res)
        args.repeats = min(args.repeats, 5)
    torch.manual_seed(0)
    base = build(args.channels).to(device)
    x = torch.randn(args.batch, 3, args.res, args.res,
                    generator=torch.Generator().manual_seed(1)).to(device)
    narrow = args.dtype == "bf16"
    options = json.loads(args.options)
    if args.target:
        options["target"] = args.target

    def step_of(backend):
        model = copy.deepcopy(base)
        if backend == "eager":
            fwd = model
        elif backend.startswith("inductor"):
            fwd = torch.compile(model, backend="inductor",
                                mode="reduce-overhead" if backend == "inductor-ro" else None)
        elif backend == "ember":
            fwd = torch.compile(model, backend="ember", options=options)
        else:
            raise SystemExit(f"unknown backend {backend!r}")
        ro = backend == "inductor-ro"

        def step():
            if ro:
                torch.compiler.cudagraph_mark_step_begin()
            for p in model.parameters():
                p.grad = None
            with torch.autocast(device, dtype=torch.bfloat16, enabled=narrow):
                loss = fwd(x).float().square().mean()
            loss.backward()
            return loss.detach()
        return model, step

    backends = args.backends.split(",")
    steps, grads, first_s = {}, {}, {}
    for b in backends:
        model, step = step_of(b)
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        first_s[b] = time.perf_counter() - t0
        steps[b] = step
        grads[b] = (model, [p.grad.detach().clone() for p in model.parameters()])
    ref = grads.get("eager", (None, None))[1]

    times = {b: [] for b in backends}
    for b in backends:                      # warm: autotuning, CUDA graph recording
        for _ in range(3):
            steps[b]()
    for r in range(args.repeats):
        order = backends[r % len(backends):] + backends[:r % len(backends)]
        for b in order:
            if cuda:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                torch.cuda.synchronize()
                start.record()
                steps[b]()
                end.record()
                end.synchronize()
                times[b].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                steps[b]()
                times[b].append((time.perf_counter() - t0) * 1e3)

    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {torch.cuda.get_device_name() if cuda else 'cpu'}"
          f" torch {torch.__version__}, batch {args.batch}, {args.res}x{args.res}, "
          f"{args.channels} channels, {args.dtype}, ember options {options}")
    print(f"{'backend':<13} {'step ms':>9} {'first s':>8} {'grad err':>9}")
    for b in backends:
        err = rel_err(grads[b][1], ref) if ref is not None else float("nan")
        print(f"{b:<13} {statistics.median(times[b]):9.3f} {first_s[b]:8.1f} {err:9.2e}")
    if args.no_profile:
        return
    from torch.profiler import ProfilerActivity, profile
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    for b in backends:
        steps[b]()
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=[activity]) as prof:
            for _ in range(args.profile_steps):
                steps[b]()
            if cuda:
                torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", 0.0) if cuda else e.self_cpu_time_total
            if t and e.count and (not cuda or e.device_type.name == "CUDA"):
                rows.append((t / 1e3 / args.profile_steps, e.count / args.profile_steps, e.key))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        pool = sum(r[0] for r in rows if POOL_BWD.search(r[2]))
        print(f"\n## {b}: {'GPU kernels' if cuda else 'CPU ops'} {total:.3f} ms a step, "
              f"pool backward (*) {pool:.3f} ms")
        for ms, n, key in rows[:14]:
            mark = "*" if POOL_BWD.search(key) else " "
            print(f"  {mark} {ms:8.3f} ms  x{n:<4g} {key[:110]}")


if __name__ == "__main__":
    main()
