"""eager vs inductor vs ember on the CPU: median ms, speed-up over eager, ember's error vs eager.

    python benchmarks/cpu_bench.py [--cases chain,softmax,...] [--backends ...] [--repeats 20] [--clock cpu]
                                   [--json results.json]

Cases (fp32; inference under torch.no_grad unless marked "train"):
  chain        gelu(x*1.7+0.3)*sigmoid(x) over 2^22 elements (docs/design.md, 2-core CPU:
               eager 19.2 ms, inductor 1.5 ms)
  softmax      softmax over the last dim of 4096x1024
  log_softmax  log_softmax over the last dim of 4096x1024
  layer_norm   layer_norm over the last dim of 4096x1024 (with weight and bias)
  rms_norm     nn.RMSNorm(1024) over 4096x1024
  mlp          Linear(1024,4096)-GELU-Linear(4096,1024)-LayerNorm(1024) on 64*128 = 8192 rows
               (`--mlp-rows` to change; the GPU table uses the same 64x128 tokens)
  mlp_bwd      train: Linear(1024,4096)-GELU-Linear(4096,1024) on 1024 rows, forward and
               backward of mean(out^2) (the backward is two thirds of it); parameter gradients
  encoder      nn.TransformerEncoderLayer(512, 8 heads, 2048, GELU, batch_first) on 8x128 tokens
  encoder_train  train: the same layer (dropout 0), forward and backward of mean(out^2)
The default is every case. Training rows compare the loss and the parameter gradients to
eager's (benchmarks/common.train_err).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Result, _clear_ember_reports, ember_summary, format_table, interleaved_median_ms,  # noqa: E402
                    machine_info, prepare_backend, time_interleaved, timed_first_call,
                    tolerance, train_err, write_json)


def chain(x):
    return F.gelu(x * 1.7 + 0.3) * torch.sigmoid(x)


def softmax(x):
    return torch.softmax(x, dim=-1)


def log_softmax(x):
    return torch.log_softmax(x, dim=-1)


class MLPBlock(nn.Module):
    def __init__(self, d=1024, h=4096):
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(d, h), nn.Linear(h, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(self.fc2(F.gelu(self.fc1(x))))


class GeluMLP(nn.Module):
    def __init__(self, d=1024, h=4096):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def square_mean(out):
    return out.square().mean()


def encoder_layer():
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, activation="gelu",
                                      batch_first=True)


CASES = ("chain", "softmax", "log_softmax", "layer_norm", "rms_norm", "mlp", "mlp_bwd",
         "encoder", "encoder_train")


def cases(mlp_rows: int):
    """name -> (fn, args, matmul?, loss or None): a loss makes it a training case (fn is the
    module; the step is forward, loss, backward)."""
    g = torch.Generator().manual_seed(0)
    x22 = torch.randn(2 ** 22, generator=g)
    x2d = torch.randn(4096, 1024, generator=g)
    ln = nn.LayerNorm(1024)
    rms = nn.RMSNorm(1024)
    with torch.no_grad():
        ln.weight.normal_(1.0, 0.1)
        ln.bias.normal_(0.0, 0.1)
        rms.weight.normal_(1.0, 0.1)
    torch.manual_seed(0)
    mlp = MLPBlock().eval()
    torch.manual_seed(1)
    gelu_mlp = GeluMLP()
    tokens = torch.randn(8, 128, 512, generator=g)
    return {
        "chain": (chain, (x22,), False, None),
        "softmax": (softmax, (x2d,), False, None),
        "log_softmax": (log_softmax, (x2d,), False, None),
        "layer_norm": (ln, (x2d,), False, None),
        "rms_norm": (rms, (x2d,), False, None),
        "mlp": (mlp, (torch.randn(mlp_rows, 1024, generator=g),), True, None),
        "mlp_bwd": (gelu_mlp, (torch.randn(1024, 1024, generator=g),), True, square_mean),
        "encoder": (encoder_layer().eval(), (tokens,), True, None),
        "encoder_train": (encoder_layer().train(), (tokens,), True, square_mean),
    }


def train_step(model, fwd, inputs, loss_fn):
    """One training step without an optimizer: gradients set to None, forward, loss, backward."""
    params = list(model.parameters())

    def step(*_):
        for p in params:
            p.grad = None
        loss = loss_fn(fwd(*inputs))
        loss.backward()
        return loss.detach()
    return step


def prepare_train(name, backend, model, inputs, loss_fn, ref_model, ref_loss, options=None):
    """(Result, step or None) for a training case: `backend` compiles a copy of `model`; the
    first step (compile included) is timed and its loss and gradients checked against eager's."""
    res = Result(name, backend)
    try:
        torch._dynamo.reset()
        m = copy.deepcopy(model)
        if backend == "eager":
            fwd = m
        else:
            kwargs = {"options": options} if options else {}
            fwd = torch.compile(m, backend=backend, **kwargs)
        if backend == "ember":
            _clear_ember_reports()
        step = train_step(m, fwd, inputs, loss_fn)
        loss, res.compile_s = timed_first_call(step)
        if backend == "ember":
            res.extra.update(ember_summary())
        res.rel_err = train_err(m, ref_model, loss, ref_loss)
        return res, step
    except Exception as err:  # noqa: BLE001 - a benchmark table reports, it doesn't crash
        res.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        traceback.print_exc()
        return res, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--backends", default="eager,inductor,ember")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--mlp-rows", type=int, default=64 * 128)
    ap.add_argument("--target", default="cpu", help="ember target (cpu | triton)")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (with OMP_NUM_THREADS=1 all the "
                         "work is on it: robust to other load on a shared machine)")
    args = ap.parse_args(argv)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "ember" in backends:
        import ember  # noqa: F401  (the entry point registers it too; importing surfaces errors)
    all_cases = cases(args.mlp_rows)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    results = []
    for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
        fn, inputs, matmul, loss_fn = all_cases[name]
        if loss_fn is not None:
            ref_model = copy.deepcopy(fn)
            ref_loss = train_step(ref_model, ref_model, inputs, loss_fn)()
        else:
            with torch.no_grad():
                ref = fn(*inputs)
        prepared = []
        for backend in backends:
            opts = {"target": args.target} if backend == "ember" else None
            if loss_fn is not None:
                r, compiled = prepare_train(name, backend, fn, inputs, loss_fn, ref_model,
                                            ref_loss, options=opts)
            else:
                r, compiled = prepare_backend(name, backend, fn, inputs, ref, options=opts)
            if r.rel_err is not None and backend != "eager":
                r.extra["tolerance"] = tolerance(torch.float32, matmul)
                r.extra["ok"] = (r.rel_err < r.extra["tolerance"]
                                 and not r.extra.get("eager_fallback_ops"))
            prepared.append((r, compiled))
        # Backends are timed in alternation: load from other processes falls on all alike.
        if loss_fn is not None:
            ok = [(r, f) for r, f in prepared if f is not None]
            for (r, _), ms in zip(ok, interleaved_median_ms([f for _, f in ok],
                                                            repeats=args.repeats, clock=clock)):
                r.ms = ms
        else:
            time_interleaved(prepared, inputs, repeats=args.repeats, clock=clock)
        for r, _ in prepared:
            results.append(r)
            status = r.error or f"{r.ms:.3f} ms (first call {r.compile_s:.1f} s)"
            print(f"  {name:11s} {r.backend:9s} {status}", file=sys.stderr, flush=True)

    info = machine_info()
    info["load_average"] = [round(v, 2) for v in os.getloadavg()]
    print(f"CPU benchmark: torch {info['torch']}, {info['threads']} threads, median "
          f"{'CPU time' if args.clock == 'cpu' else 'wall time'} of "
          f"{args.repeats} (backends interleaved) after warm-up; rel. err = ||out-eager||/||eager||"
          f" (training rows: loss and gradients); load average after the runs "
          f"{info['load_average']}")
    print(format_table(results))
    if args.json:
        write_json(args.json, results, {**info, "mlp_rows": args.mlp_rows, "target": args.target,
                                        "clock": args.clock})
        print(f"wrote {args.json}")
    bad = [r for r in results if r.backend == "ember" and (r.error or not r.extra.get("ok"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
