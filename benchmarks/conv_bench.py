"""Convolutions on the CPU: eager vs ember (library call) vs ember generating the conv itself.

    python benchmarks/conv_bench.py [--repeats 20] [--batch 8] [--inductor]

Why: on the CPU ember may run a convolution as the library's kernel (an `aten.convolution`
extern: oneDNN / ATen's depthwise kernel) or as generated C++. ember has no conv code generator;
the stand-in is the depthwise conv written as a windowed multiply-sum (`depthwise_generated`),
which ember compiles to generated, OpenMP-parallel C++.
Also the two blocks of test_conv.py at realistic sizes (inference): MobileNetV3 and ConvNeXt.
Medians of `--repeats` calls, the variants timed in alternation (common.interleaved_median_ms).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "pytest"))
from common import interleaved_median_ms, rel_err  # noqa: E402


def depthwise_library(x, w):
    return F.conv2d(x, w, padding=1, groups=x.shape[1])


def depthwise_generated(x, w):
    """The same depthwise 3x3 conv as window products summed: ember compiles it to generated
    C++ (a pad kernel, the windows gathered, one fused multiply-sum reduction kernel). Written
    as nine shifted slices instead, it is slower still (each slice is its own copy kernel)."""
    patches = F.pad(x, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)
    return (patches * w.view(1, -1, 1, 1, 3, 3)).sum((-1, -2))


def ember(fn):
    return torch.compile(fn, backend="ember", options={"target": "cpu"})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--inductor", action="store_true", help="also time torch.compile's default")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    import ember as _ember  # noqa: F401  (registers nothing: the backend is an entry point)

    rows = []
    x = torch.randn(args.batch, 96, 56, 56)
    w = torch.randn(96, 1, 3, 3)
    ref = depthwise_library(x, w)
    fns = {"eager F.conv2d": depthwise_library, "ember library": ember(depthwise_library),
           "ember generated C++": ember(depthwise_generated)}
    errs = {k: rel_err(f(x, w), ref) for k, f in fns.items()}
    times = interleaved_median_ms(list(fns.values()), x, w, repeats=args.repeats)
    for (k, _), t in zip(fns.items(), times):
        rows.append((f"depthwise 3x3 {tuple(x.shape)}", k, t, errs[k]))

    from test_conv import ConvNeXtBlock, MobileNetV3Block
    for name, model, shape in (("MobileNetV3 block 24->96", MobileNetV3Block(24, 96), (args.batch, 24, 56, 56)),
                               ("ConvNeXt block 96", ConvNeXtBlock(96), (args.batch, 96, 28, 28))):
        model.eval()
        xb = torch.randn(shape)
        with torch.no_grad():
            ref = model(xb)
            variants = {"eager": model, "ember": ember(model)}
            if args.inductor:
                variants["inductor"] = torch.compile(model)
            errs = {k: rel_err(f(xb), ref) for k, f in variants.items()}
            times = interleaved_median_ms(list(variants.values()), xb, repeats=args.repeats)
        for (k, _), t in zip(variants.items(), times):
            rows.append((f"{name} {shape}", k, t, errs[k]))

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, median of {args.repeats}")
    print(f"{'case':44s} {'variant':22s} {'ms':>9s} {'rel err':>9s}")
    for case, variant, t, e in rows:
        print(f"{case:44s} {variant:22s} {t:9.3f} {e:9.1e}")


if __name__ == "__main__":
    main()
