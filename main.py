"""ember's main job: compile a real model with `torch.compile(backend="ember")` on this machine's
best target, check it against eager, and report the speed-up.

    python main.py [--model auto|resnet18|transformer] [--target auto|cpu|cuda|triton]
                   [--batch N] [--repeats N] [--json PATH]

The model: torchvision's resnet18 (random weights, inference) when torchvision imports, else a
pre-LayerNorm transformer encoder block written with torch.nn (multi-head self-attention with an
explicit softmax, GELU MLP), d_model 256, 4 heads, MLP 1024, batch 8 x 128 tokens on CPU. On the
2-core development machine torchvision is not installed (PyPI's wheel is CUDA-built), so the
transformer block is what runs there.

Exit status: 0 when ember's output matches eager within docs/design.md's tolerance (fp32 with
matmuls: relative error < 1e-3; bf16/fp16: < 1e-2) and no compile error; 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks.common import ember_summary, interleaved_median_ms, rel_err, sync, tolerance  # noqa: E402,E501


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d // self.heads)), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class EncoderBlock(nn.Module):
    """Pre-LN transformer encoder layer (GPT/ViT style)."""

    def __init__(self, d: int = 256, heads: int = 4, hidden: int = 1024):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), SelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def have_torchvision() -> bool:
    try:
        import torchvision  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - a broken install (e.g. CUDA wheel on CPU torch) counts as absent
        return False


def build(model: str, device: str, batch: int | None):
    torch.manual_seed(0)
    if model == "resnet18":
        import torchvision
        net = torchvision.models.resnet18()
        x = torch.randn(batch or (32 if device == "cuda" else 4), 3, 224, 224)
        desc = f"torchvision resnet18, batch {x.shape[0]}x3x224x224"
    else:
        net = EncoderBlock()
        x = torch.randn(batch or (32 if device == "cuda" else 8), 128, 256)
        desc = f"transformer encoder block (d=256, 4 heads, MLP 1024), batch {x.shape[0]}x128 tokens"
    return net.eval().to(device), x.to(device), desc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Compile a model with ember, check it, time it.")
    ap.add_argument("--model", default="auto", choices=["auto", "resnet18", "transformer"])
    ap.add_argument("--target", default="auto",
                    help="ember target; auto: cuda when a CUDA device is present, else cpu")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON")
    args = ap.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = args.target if args.target != "auto" else ("cuda" if device == "cuda" else "cpu")
    if target == "triton" and device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    model = args.model if args.model != "auto" else ("resnet18" if have_torchvision()
                                                     else "transformer")
    net, x, desc = build(model, device, args.batch)
    print(f"model:  {desc}")
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'} "
          f"({torch.get_num_threads()} threads), ember target '{target}', torch {torch.__version__}")

    import ember  # noqa: F401  (registers the backend; an import error shows here, not in Dynamo)
    from ember.frontend.report import clear_reports
    clear_reports()
    with torch.no_grad():
        ref = net(x)
        torch._dynamo.reset()
        compiled = torch.compile(net, backend="ember", options={"target": target})
        t0 = time.perf_counter()
        try:
            out = compiled(x)
            sync(device)
        except Exception as err:  # noqa: BLE001
            print(f"FAIL: ember failed to compile/run the model: {type(err).__name__}: {err}")
            return 1
        compile_s = time.perf_counter() - t0
        err = rel_err(out, ref)
        tol = tolerance(ref.dtype, matmul=True)
        ok = (not math.isnan(err)) and err < tol and out.dtype == ref.dtype
        summary = ember_summary()
        fallbacks = summary.get("eager_fallback_ops", [])
        print(f"compile: {compile_s:.1f} s (first call): {summary.get('graphs', 0)} graph(s), "
              f"{summary.get('kernels', 0)} kernels, {summary.get('externs', 0)} library calls")
        if fallbacks:
            print(f"note: ops that ran eagerly (ember could not compile them): "
                  f"{', '.join(map(str, fallbacks))}")
        print(f"numerics: rel. error {err:.2e} vs eager (tolerance {tol:.0e}): "
              f"{'PASS' if ok else 'FAIL'}")
        eager_ms, ember_ms = interleaved_median_ms([net, compiled], x, repeats=args.repeats,
                                                   device=device)
    print(f"eager: {eager_ms:.2f} ms   ember: {ember_ms:.2f} ms   speed-up: x{eager_ms / ember_ms:.2f} "
          f"(median of {args.repeats}, interleaved)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": desc, "target": target, "rel_err": err, "tolerance": tol, "ok": ok,
                       "compile_s": compile_s, "eager_ms": eager_ms, "ember_ms": ember_ms,
                       "fallbacks": [str(f) for f in fallbacks]}, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
