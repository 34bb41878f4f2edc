"""Where rms_norm's one-thread time goes: variants of its row kernel's store loop, timed alone.

    OMP_NUM_THREADS=1 python benchmarks/row_store_probe.py [--rows 4096] [--cols 1024]
                                                          [--repeats 60] [--trials 3]

Every variant is the C++ ember emits for nn.RMSNorm (a sum-of-squares loop, then a loop storing
x * rsqrt(mean + eps) * w), changed in one place, built with ember's flags
(runtime/cpp_build.CXX_FLAGS) and called through ctypes on the same buffers, interleaved (the
order rotates each round); medians of the calling thread's CPU time per trial:

  ember       the kernel as main emitted it before rms13g: the rsqrt once a row (AVX-512: gcc
              picks 64-byte vectors on this machine)
  rsqrt_vec   the rsqrt recomputed for every 16-lane vector of the store loop, as Inductor's
              kernel does (its at::vec code reads the row's sum back and takes sqrt and 1/x per
              vector) and as ember emits it since rms13g (passes/cpp_row_scalars.py): the store
              loop is paced by the divider
  simdlen8    the store loop with `simdlen(8)` (256-bit vectors)
  nt_row      the row computed into a stack row, copied out with non-temporal stores, one
              sfence per thread
  prefetch    the next row prefetched (prefetcht0) during the sum loop
  --pacing    instead: ember and rsqrt_vec in three settings each, to tell where pacing pays:
              *_stream (every row reads input row 0, which stays in L1: only the output streams),
              *_l1out (every row stores to output row 0: only the input streams),
              *_pass3 (a second, L1-resident pass over the row before the stores, as
              layer_norm's variance loop)

The kernels are checked against torch before timing (nt_row and the others store the same
values; the --pacing variants only where they compute rms_norm). Findings on the 2-core AMD
EPYC: benchmarks/RESULTS.md, "cpu13f" and "rms13g".
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

KERNEL = r"""
extern "C" void NAME(const float* __restrict__ in0, const float* __restrict__ in1,
                     float* __restrict__ out0) {
  #pragma omp parallel
  {
  #pragma omp for nowait
  for (int64_t i = 0; i < ROWS; ++i) {
    PREFETCH
    float acc = 0.0f;
    #pragma omp simd reduction(+:acc)
    for (int64_t j = 0; j < COLS; ++j) { const float x = in0[i * COLS + j]; acc = x * x + acc; }
    const float r = (float)(1 / std::sqrt(acc / (float)COLS + 1.1920928955078125e-07f));
    STORE
  }
  FENCE
  }
}
"""

PLAIN = """#pragma omp simd SIMDLEN
    for (int64_t j = 0; j < COLS; ++j) out0[i * COLS + j] = in0[i * COLS + j] * r * in1[j];"""

RSQRT_VEC = """for (int64_t b = 0; b < COLS; b += 16) {
      float a = acc; __asm__ volatile("" : "+x"(a));
      const float rv = (float)(1 / std::sqrt(a / (float)COLS + 1.1920928955078125e-07f));
      #pragma omp simd
      for (int64_t j = b; j < b + 16; ++j) out0[i * COLS + j] = in0[i * COLS + j] * rv * in1[j];
    }"""

NT_ROW = """alignas(64) float row[COLS];
    #pragma omp simd
    for (int64_t j = 0; j < COLS; ++j) row[j] = in0[i * COLS + j] * r * in1[j];
    float* d = out0 + i * COLS;
    int64_t j = 0;
    for (; j < COLS && ((uintptr_t)(d + j) & 63); ++j) d[j] = row[j];
    for (; j + 16 <= COLS; j += 16) {
      typedef float v16 __attribute__((vector_size(64)));
      v16 v; __builtin_memcpy(&v, row + j, 64);
      __builtin_ia32_movntps512(d + j, v);
    }
    for (; j < COLS; ++j) d[j] = row[j];"""

PREFETCH = """for (int64_t b = 0; b < COLS && i + 1 < ROWS; b += 16)
      __builtin_prefetch(in0 + (i + 1) * COLS + b, 0, 3);"""


PASS3 = """{ const float m = acc / (float)COLS; float acc3 = 0.0f;
    #pragma omp simd reduction(+:acc3)
    for (int64_t j = 0; j < COLS; ++j) {
      const float d = in0[i * COLS + j] - m; acc3 = d * d + acc3; }
    acc = acc + 0.0f * acc3; }"""


def pacing_variants(rows: int, cols: int) -> dict:
    """ember / rsqrt_vec with only the output streaming, only the input streaming, or a third
    pass over the row (module docstring, --pacing)."""
    out = {}
    for base, store in (("ember", PLAIN.replace("SIMDLEN", "")), ("rsqrt_vec", RSQRT_VEC)):
        k = (KERNEL.replace("PREFETCH", "").replace("STORE", store).replace("FENCE", "")
             .replace("ROWS", str(rows)).replace("COLS", str(cols)))
        out[f"{base}_stream"] = k.replace("NAME", f"k_{base}_stream").replace(
            "in0[i * ", "in0[0 * ")
        out[f"{base}_l1out"] = k.replace("NAME", f"k_{base}_l1out").replace(
            "out0[i * ", "out0[0 * ")
        sum_end = "acc = x * x + acc; }"
        out[f"{base}_pass3"] = k.replace("NAME", f"k_{base}_pass3").replace(
            sum_end, sum_end + "\n    " + PASS3.replace("COLS", str(cols)), 1)
    return out


def variants(rows: int, cols: int) -> dict:
    parts = {
        "ember": ("", PLAIN.replace("SIMDLEN", ""), ""),
        "rsqrt_vec": ("", RSQRT_VEC, ""),
        "simdlen8": ("", PLAIN.replace("SIMDLEN", "simdlen(8)"), ""),
        "nt_row": ("", NT_ROW, "__builtin_ia32_sfence();"),
        "prefetch": (PREFETCH, PLAIN.replace("SIMDLEN", ""), ""),
    }
    out = {}
    for name, (pf, store, fence) in parts.items():
        out[name] = (KERNEL.replace("NAME", f"k_{name}").replace("PREFETCH", pf)
                     .replace("STORE", store).replace("FENCE", fence)
                     .replace("ROWS", str(rows)).replace("COLS", str(cols)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--pacing", action="store_true", help="the pacing variants (docstring)")
    args = ap.parse_args(argv)
    if args.cols % 16:
        ap.error("--cols must be a multiple of 16 (rsqrt_vec walks 16-lane vectors)")
    from ember.passes.cpp_prelude import PRELUDE
    from ember.runtime.cpp_build import load_library

    srcs = (pacing_variants if args.pacing else variants)(args.rows, args.cols)
    lib = load_library(PRELUDE + "\n".join(srcs.values()))
    torch.manual_seed(0)
    x, w = torch.randn(args.rows, args.cols), torch.randn(args.cols)
    out = torch.empty(args.rows, args.cols)
    ref = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1.1920928955078125e-07) * w
    ptr = [ctypes.c_void_p(t.data_ptr()) for t in (x, w, out)]
    fns = {}
    for name in srcs:
        f = getattr(lib, f"k_{name}")
        out.fill_(float("nan"))
        f(*ptr)
        if not name.endswith(("_stream", "_l1out")):
            assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5), name
        fns[name] = f
    items = list(fns.items())
    times = {k: [] for k in fns}
    print(f"rms_norm {args.rows}x{args.cols} fp32, {torch.get_num_threads()} thread(s), median "
          f"ms of {args.repeats} per trial (CPU time of the calling thread)")
    for trial in range(args.trials):
        for r in range(args.repeats):
            k = r % len(items)
            for name, f in items[k:] + items[:k]:
                t0 = time.thread_time()
                f(*ptr)
                times[name].append(time.thread_time() - t0)
        print(f"trial {trial} (load {os.getloadavg()[0]:.1f}): " + "  ".join(
            f"{n} {statistics.median(v[-args.repeats:]) * 1e3:.3f}" for n, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
