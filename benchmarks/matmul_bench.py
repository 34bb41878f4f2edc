"""The matmul template (ember-matmul-template) against cuBLAS + a separate epilogue kernel, and
against eager and Inductor: the MLP block of the reference tables and single GEMMs with their
epilogues.

    python benchmarks/matmul_bench.py --out mm.json [--dtypes float32,bfloat16] [--tf32 on|off]
        [--reps 20] [--cases mlp,linear_gelu,linear_residual,bmm] [--max-autotune]
    python benchmarks/matmul_bench.py --tiny --out mm.json     # CPU, Triton interpreter

Backends (one process, every backend on the same inputs, CUDA-event medians through
`triton.testing.do_bench`, as gpu_bench.py):

* eager; inductor (default mode); inductor-ro (`mode="reduce-overhead"`, CUDA graphs);
  inductor-ma (`mode="max-autotune"`, with `--max-autotune`);
* ember: the default (`matmul_template="auto"`: template or cuBLAS + epilogue kernel, whichever
  ran faster on the first call; bf16/f16 products stay cuBLAS under `exact_low_precision`);
* ember-nomm: `matmul_template="off"` (cuBLAS + a separate epilogue kernel, as before);
* ember-tmpl: `matmul_template="template"` (always the template);
* for bf16/f16 also ember-fused / ember-fused-nomm / ember-fused-tmpl: the same with
  `exact_low_precision=False` (bf16 products may use the template);
* ember-ma: ember with `mode="max-autotune"` (with `--max-autotune`).

Each row: median ms, relative error against eager, compile (first call) seconds; after each
ember backend, the choice each matmul kernel made and the two times it measured (template vs
library, ms). `--tiny` runs small shapes on the CPU with TRITON_INTERPRET=1 and target "triton"
(no Inductor, wall-clock medians of a few calls): it checks that the code paths run, not speed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback

if "--tiny" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _cases(tiny: bool):
    """name -> builder(dtype, device) -> (fn, args). Full sizes: the MLP block of the reference
    tables (64x128 tokens, 1024 -> 4096 -> 1024 + LayerNorm) and GEMMs of its sizes."""
    from models import MLPBlock
    d, h, b, s = (32, 96, 2, 24) if tiny else (1024, 4096, 64, 128)
    rows = b * s

    def mlp(dtype, dev):
        torch.manual_seed(0)
        model = MLPBlock(d, h).to(dev, dtype).eval()
        return model, (torch.randn(b, s, d, device=dev, dtype=dtype),)

    def linear_gelu(dtype, dev):      # 2-D input: bias + erf GELU fused after the product
        torch.manual_seed(0)
        w, bias = torch.randn(h, d, device=dev, dtype=dtype) / d ** 0.5, \
            torch.randn(h, device=dev, dtype=dtype)
        return (lambda x: F.gelu(F.linear(x, w, bias))), \
            (torch.randn(rows, d, device=dev, dtype=dtype),)

    def linear_residual(dtype, dev):  # down projection + bias + residual
        torch.manual_seed(0)
        w, bias = torch.randn(d, h, device=dev, dtype=dtype) / h ** 0.5, \
            torch.randn(d, device=dev, dtype=dtype)
        return (lambda x, r: F.linear(x, w, bias) + r), \
            (torch.randn(rows, h, device=dev, dtype=dtype),
             torch.randn(rows, d, device=dev, dtype=dtype))

    def bmm(dtype, dev):              # attention-like scores: batched, transposed, scaled + exp
        torch.manual_seed(0)
        heads, seq, hd = (4, 24, 16) if tiny else (16 * 12, 128, 64)
        q = torch.randn(heads, seq, hd, device=dev, dtype=dtype)
        k = torch.randn(heads, seq, hd, device=dev, dtype=dtype)
        return (lambda q, k: torch.sigmoid(q @ k.transpose(-1, -2) * hd ** -0.5)), (q, k)

    return {"mlp": mlp, "linear_gelu": linear_gelu, "linear_residual": linear_residual,
            "bmm": bmm}


def _backends(dtype, tiny: bool, max_autotune: bool):
    import ember  # noqa: F401  (registers the backend)
    base = {"target": "triton"} if tiny else {}

    def em(**opts):
        return lambda f: torch.compile(f, backend="ember", options={**base, **opts})
    out = {"eager": lambda f: f}
    if not tiny:
        out["inductor"] = lambda f: torch.compile(f, backend="inductor")
        out["inductor-ro"] = lambda f: torch.compile(f, backend="inductor", mode="reduce-overhead")
        if max_autotune:
            out["inductor-ma"] = lambda f: torch.compile(f, backend="inductor",
                                                         mode="max-autotune")
    out["ember"] = em()
    out["ember-nomm"] = em(matmul_template="off")
    out["ember-tmpl"] = em(matmul_template="template")
    if dtype != torch.float32:
        out["ember-fused"] = em(exact_low_precision=False)
        out["ember-fused-nomm"] = em(exact_low_precision=False, matmul_template="off")
        out["ember-fused-tmpl"] = em(exact_low_precision=False, matmul_template="template")
    if max_autotune:
        out["ember-ma"] = em(mode="max-autotune")
    return out


def _median_ms(fn, reps: int, tiny: bool) -> float:
    if tiny:
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return sorted(ts)[1]
    from gpu_bench import _median_ms as bench
    return bench(fn, reps)


def _rel_err(out, ref) -> float:
    o, r = out.double(), ref.double()
    if not torch.isfinite(o).all():
        return float("nan")
    return float((o - r).norm() / r.norm().clamp_min(1e-30))


def _choices() -> list:
    """What each loaded generated module's matmul kernels chose: [(kernel, choice, times)]."""
    from ember.runtime import py_module
    out = []
    for mod in list(py_module._modules.values()):
        chosen = getattr(mod, "_EMBER_MATMUL_CHOICE", None) or {}
        times = getattr(mod, "_EMBER_MATMUL_TIMES", {})
        for key, choice in chosen.items():
            t = {k: round(v, 4) for k, v in times.get(key, {}).items()}
            out.append((key[0], choice, t))
    return out


def run(args) -> list:
    dev = "cpu" if args.tiny else "cuda"
    if not args.tiny:
        if not torch.cuda.is_available():
            sys.exit("matmul_bench.py needs a GPU (or --tiny for the interpreter on the CPU)")
        torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    cases = _cases(args.tiny)
    results = []
    for cname in args.cases.split(","):
        for tag in args.dtypes.split(","):
            dtype = getattr(torch, tag)
            fn, inputs = cases[cname](dtype, dev)
            with torch.no_grad():
                ref = fn(*inputs)
            for bname, wrap in _backends(dtype, args.tiny, args.max_autotune).items():
                row = {"case": cname, "dtype": tag, "backend": bname}
                try:
                    t0 = time.perf_counter()
                    compiled = wrap(fn)
                    with torch.no_grad():
                        out = compiled(*inputs)
                        if dev == "cuda":
                            torch.cuda.synchronize()
                        row["compile_s"] = round(time.perf_counter() - t0, 2)
                        row["rel_err"] = _rel_err(out, ref)
                        row["ms"] = _median_ms(lambda: compiled(*inputs), args.reps, args.tiny)
                    msg = (f"{row['ms']:9.4f} ms  rel_err {row['rel_err']:.2e}  "
                           f"compile {row['compile_s']} s")
                    if bname.startswith("ember"):
                        row["matmul_choices"] = _choices()
                        for kname, choice, times in row["matmul_choices"]:
                            msg += f"\n{'':44s}{kname}: {choice} {times}"
                except Exception as err:  # a failing backend is a result, not a crash
                    row["error"] = f"{type(err).__name__}: {str(err)[:500]}"
                    msg = "FAILED " + row["error"].splitlines()[0][:200]
                    traceback.print_exc(limit=3, file=sys.stderr)
                print(f"{cname:16s} {tag:9s} {bname:17s} {msg}", flush=True)
                results.append(row)
                torch._dynamo.reset()
                _forget_choices()
    return results


def _forget_choices():
    """Each backend decides afresh (a module shared by source between backends would reuse
    the choice another backend's first call made)."""
    from ember.runtime import py_module
    for mod in list(py_module._modules.values()):
        for name in ("_EMBER_MATMUL_CHOICE", "_EMBER_MATMUL_TIMES"):
            d = getattr(mod, name, None)
            if isinstance(d, dict):
                d.clear()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file for the results")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--cases", default="mlp,linear_gelu,linear_residual,bmm")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tf32", choices=["on", "off"], default="on",
                    help="torch.backends.cuda.matmul.allow_tf32 (the reference tables: on)")
    ap.add_argument("--max-autotune", action="store_true",
                    help="also inductor and ember with mode='max-autotune'")
    ap.add_argument("--tiny", action="store_true",
                    help="small shapes on the CPU through the Triton interpreter (a smoke test)")
    args = ap.parse_args(argv)
    meta = {"torch": torch.__version__, "tf32": args.tf32, "tiny": args.tiny,
            "device": "cpu (Triton interpreter)" if args.tiny else torch.cuda.get_device_name()}
    start = time.perf_counter()
    results = []
    try:
        results = run(args)
    finally:
        meta["total_s"] = round(time.perf_counter() - start, 1)
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1,
                      default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v))
        print(f"wrote {args.out} ({meta['total_s']} s)")
    failed = [r for r in results if "error" in r]
    return 1 if failed and args.tiny else 0


if __name__ == "__main__":
    sys.exit(main())
