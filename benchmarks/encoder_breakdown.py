"""Where cpu_bench's `encoder` case spends its time: ember's host schedule step by step, next to
the pieces of eager's fast path (`aten._transformer_encoder_layer_fwd`, which is all that
Inductor's graph calls for this layer in inference), each timed alone.

    python benchmarks/encoder_breakdown.py [--clock cpu|wall] [--calls 30]
    OMP_NUM_THREADS=1 python benchmarks/encoder_breakdown.py --clock cpu   # load-robust

ember's steps are timed by wrapping `CompiledProgram._run` (medians over `--calls` calls; the
sum of the step medians and the whole call's median are printed, their difference is the
host's work outside the steps). Eager's pieces run on the same weights and shapes; the bias +
GELU of fc1 is eager's `_addmm_activation` (addmm, then GELU in place, oneDNN's kernel).
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_bench import cases  # noqa: E402


def _label(prog, k: int) -> str:
    """The program step that run k of the schedule belongs to (or the bookkeeping run)."""
    starts = prog._step_start
    s = max((i for i, st in enumerate(starts) if st <= k), default=None)
    if s is None:
        return "?"
    step = prog.program.steps[s]
    run = prog._runs[k]
    fname = getattr(getattr(run, "func", run), "__name__", "")
    tag = f" ({fname.strip('_')})" if fname.startswith(("alloc", "_")) else ""
    return f"{step.kind:8s} {step.name}{tag}"


def ember_steps(fn, inputs, calls: int, clock) -> None:
    import ember  # noqa: F401
    from ember.runtime.executor import CompiledProgram

    acc: dict = collections.defaultdict(list)
    labels: dict = {}
    orig = CompiledProgram._run

    def timed_run(self, ins):
        base, vals = self._begin(ins)
        if self._in_inputs or self._release_after:
            self._carve_inputs(ins, vals)
        for k, run in enumerate(self._runs):
            t = clock()
            run(vals)
            acc[k].append(clock() - t)
            labels.setdefault(k, _label(self, k))
        if self._pool is not None:
            self._pool.append(base)
        return [vals[o] for o in self.program.outputs]

    CompiledProgram._run = timed_run
    try:
        with torch.no_grad():
            c = torch.compile(fn, backend="ember")
            for _ in range(5):
                c(*inputs)
            acc.clear()
            whole = []
            for _ in range(calls):
                t = clock()
                c(*inputs)
                whole.append(clock() - t)
    finally:
        CompiledProgram._run = orig
    total = 0.0
    print("ember, per step of the host schedule (median ms):")
    for k in sorted(acc):
        m = statistics.median(acc[k]) * 1e3
        total += m
        if m >= 0.01:
            print(f"  {k:3d} {labels[k]:60s} {m:8.3f}")
    print(f"  sum of the steps {total:.3f}, whole call {statistics.median(whole) * 1e3:.3f}")


def eager_pieces(m, x, calls: int, clock) -> None:
    sa = m.self_attn
    w = {k: v.detach() for k, v in dict(
        qkv_w=sa.in_proj_weight, qkv_b=sa.in_proj_bias, o_w=sa.out_proj.weight,
        o_b=sa.out_proj.bias, w1=m.linear1.weight, b1=m.linear1.bias, w2=m.linear2.weight,
        b2=m.linear2.bias).items()}
    b, s, d = x.shape
    h = sa.num_heads
    x2 = x.reshape(b * s, d)

    def timed(name, f):
        for _ in range(3):
            f()
        ts = []
        for _ in range(calls):
            t = clock()
            f()
            ts.append(clock() - t)
        print(f"  {name:60s} {statistics.median(ts) * 1e3:8.3f}")

    print("eager's fast path, each piece alone (median ms):")
    with torch.no_grad():
        args = (x, d, h, w["qkv_w"], w["qkv_b"], w["o_w"], w["o_b"], True, False, 1e-5,
                m.norm1.weight, m.norm1.bias, m.norm2.weight, m.norm2.bias, w["w1"], w["b1"],
                w["w2"], w["b2"])
        timed("_transformer_encoder_layer_fwd (the whole layer)",
              lambda: torch._transformer_encoder_layer_fwd(*args))
        qkv = torch.mm(x2, w["qkv_w"].t())
        timed("mm qkv", lambda: torch.mm(x2, w["qkv_w"].t()))
        timed("_transform_bias_rescale_qkv",
              lambda: torch._transform_bias_rescale_qkv(qkv.view(b, s, 3 * d), w["qkv_b"], h))
        q, k, v = torch._transform_bias_rescale_qkv(qkv.view(b, s, 3 * d), w["qkv_b"], h)
        q, k, v = (t.reshape(b * h, s, d // h) for t in (q, k, v))
        timed("bmm q k^T", lambda: torch.bmm(q, k.transpose(1, 2)))
        sc = torch.bmm(q, k.transpose(1, 2))
        timed("softmax", lambda: torch.softmax(sc, -1))
        timed("bmm p v", lambda: torch.bmm(sc, v))
        a = torch.bmm(sc, v).view(b, h, s, d // h).transpose(1, 2).reshape(b * s, d)
        timed("addmm out-proj", lambda: torch.addmm(w["o_b"], a, w["o_w"].t()))
        timed("add_ + layer_norm", lambda: F.layer_norm(a.add(x2), (d,), m.norm1.weight,
                                                         m.norm1.bias))
        timed("_addmm_activation fc1 (bias, GELU)",
              lambda: torch._addmm_activation(w["b1"], a, w["w1"].t(), use_gelu=True))
        hid = torch.addmm(w["b1"], a, w["w1"].t())
        timed("  its GELU alone (out of place)", lambda: F.gelu(hid))
        timed("addmm fc2", lambda: torch.addmm(w["b2"], hid, w["w2"].t()))
        qb = torch.addmm(w["qkv_b"], x2, w["qkv_w"].t())
        qq, kk, vv = (t.view(b, s, h, d // h).transpose(1, 2) for t in qb.split(d, -1))
        print("ember's pieces where they differ, alone:")
        timed("addmm qkv (bias prefilled)", lambda: torch.addmm(w["qkv_b"], x2, w["qkv_w"].t()))
        timed("flash SDPA on views of the qkv buffer",
              lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(qq, kk, vv))
        timed("mm fc1", lambda: torch.mm(a, w["w1"].t()))
        timed("mm fc2", lambda: torch.mm(hid, w["w2"].t()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--no-ember", action="store_true")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    m, (x,), _, _ = cases(64 * 128)["encoder"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, clock {args.clock}, "
          f"load average {[round(v, 2) for v in os.getloadavg()]}")
    if not args.no_ember:
        ember_steps(m, (x,), args.calls, clock)
    eager_pieces(m, x, args.calls, clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
