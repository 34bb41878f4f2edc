"""What an eager fallback costs: ember vs eager, timed in alternation (medians), on the CPU
(target cpu) or a GPU (`--device cuda`: target triton, CUDA-synchronised timings).

Cases (`opaque` is a custom op that no compiler can look into, bessel_j0 run by torch, with a
second such op as its gradient: what a user's unsupported op looks like; the ATen ops these
cases used before, bessel_j0, sort, topk, digamma, all compile now):
  all_eager  every op falls back (opaque -> opaque -> opaque): ember must be within 5% of eager.
  all_eager_small  the same on 16x64: the per-call cost of the fallback path itself.
  all_eager_train  all_eager_small with an input that requires grad, forward + backward (the
             gradient op falls back too).
  sandwich   matmul+GELU, then `opaque`, then matmul+bias+tanh: the unsupported op runs eagerly
             inside one compiled program; ember must be within 5% of eager or faster.
  deep       12 such blocks on 32x64: per-call glue, where one program per graph pays off.
  deep_compiled  the same blocks with sin (which compiles) in place of `opaque`: the
             difference to `deep` is what the fallback itself costs.
  sandwich_train  the same module, forward + backward (the gradient op falls back too).

    python benchmarks/fallback_bench.py [--cases all_eager,sandwich] [--repeats 30] [--json out.json]
        [--device cuda] [--clock cpu]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import interleaved_median_ms, rel_err  # noqa: E402


@torch.library.custom_op("ember_bench::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return torch.special.bessel_j0(x)


@opaque.register_fake
def _opaque_fake(x):
    return torch.empty_like(x)


@torch.library.custom_op("ember_bench::opaque_grad", mutates_args=())
def opaque_grad(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return -torch.special.bessel_j1(x) * grad


@opaque_grad.register_fake
def _opaque_grad_fake(x, grad):
    return torch.empty_like(x)


def _opaque_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


opaque.register_autograd(lambda ctx, grad: opaque_grad(ctx.saved_tensors[0], grad),
                         setup_context=_opaque_setup)


def all_eager(x):
    return opaque(opaque(opaque(x)))


class Sandwich(torch.nn.Module):
    def __init__(self, d=512, op=opaque):
        super().__init__()
        self.a = torch.nn.Linear(d, d)
        self.b = torch.nn.Linear(d, d)
        self.op = op

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x)) * 0.5 + x
        h = self.op(h)
        return torch.tanh(self.b(h) + h)


def cases(names, device="cpu"):
    out = _cases(names)
    return {k: (fn.to(device) if isinstance(fn, torch.nn.Module) else fn,
                tuple(t.detach().to(device).requires_grad_(t.requires_grad) for t in inputs),
                train)
            for k, (fn, inputs, train) in out.items()}


def _cases(names):
    torch.manual_seed(0)
    out = {}
    if "all_eager" in names:
        out["all_eager"] = (all_eager, (torch.randn(256, 4096),), False)
    if "all_eager_small" in names:
        out["all_eager_small"] = (all_eager, (torch.randn(16, 64),), False)
    if "all_eager_train" in names:
        out["all_eager_train"] = (all_eager, (torch.randn(16, 64).requires_grad_(),), True)
    if "sandwich" in names:
        out["sandwich"] = (Sandwich().eval(), (torch.randn(1024, 512),), False)
    if "deep" in names:     # 12 blocks, small tensors: what the pieces' glue costs
        out["deep"] = (torch.nn.Sequential(*[Sandwich(64) for _ in range(12)]).eval(),
                       (torch.randn(32, 64),), False)
    if "deep_compiled" in names:     # the same with a supported op: ember's own per-call cost
        out["deep_compiled"] = (torch.nn.Sequential(*[Sandwich(64, torch.sin)
                                                      for _ in range(12)]).eval(),
                                (torch.randn(32, 64),), False)
    if "sandwich_train" in names:
        m = Sandwich()
        x = torch.randn(1024, 512)
        out["sandwich_train"] = (m, (x,), True)
    return out


def _own_code(fn):
    """A plain function with a code object of its own: Dynamo keeps its compiled entries per
    code object, so ember's and backend="eager"'s compiles of one function would share (and
    check each other's entries on every call)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def step(fn, train):
    if not train:
        def run(*a):
            with torch.no_grad():
                return fn(*a)
        return run

    def run_train(*a):
        y = fn(*a)
        y.sum().backward()
        return y
    return run_train


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="all_eager,all_eager_small,all_eager_train,sandwich,deep,deep_compiled,sandwich_train")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--json")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                   help="cpu: the calling thread's CPU time (a shared machine's load aside)")
    args = p.parse_args()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    target = "triton" if args.device == "cuda" else "cpu"
    import ember
    rows = []
    for name, (fn, inputs, train) in cases(args.cases.split(","), args.device).items():
        torch._dynamo.reset()
        ember.clear_reports()
        compiled = torch.compile(fn, backend="ember", options={"target": target})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ref = step(fn, train)(*inputs)
            out = step(compiled, train)(*inputs)
        ours = [str(w.message) for w in caught if "ember" in str(w.message)]
        reports = ember.last_reports()
        # torch.compile's own floor: Dynamo's guards and frame, running its graph eagerly.
        floor = torch.compile(_own_code(fn), backend="eager")
        step(floor, train)(*inputs)
        eager_ms, ember_ms, floor_ms = interleaved_median_ms(
            [step(fn, train), step(compiled, train), step(floor, train)], *inputs,
            repeats=args.repeats, device=args.device, clock=clock)
        row = {"case": name, "device": args.device, "eager_ms": round(eager_ms, 4), "ember_ms": round(ember_ms, 4),
               "ratio": round(ember_ms / eager_ms, 3), "dynamo_eager_ms": round(floor_ms, 4),
               "rel_err": rel_err(out, ref),
               "warnings": len(ours),
               "status": [r["status"] for r in reports],
               "fallback_ops": sorted({o for r in reports for o in r["eager_fallback_ops"]})}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
