"""The polynomial fits behind the C++ prelude's ember_erf (passes/cpp_prelude.py), and an
exhaustive check of it over every float.

    python benchmarks/math_fit.py            # print the coefficients as C float literals
    python benchmarks/math_fit.py --check    # worst ulp of ember_erf over all 2^32 floats (~2 min)

Fits are weighted minimax (Lawson's iteratively reweighted least squares) in float64:
  erf(x) / x - 1 as a polynomial of degree 5 in s = x^2 on [0, CUT^2] (relative error),
  log2(erfc(t)) of degree 6 in t on [CUT, 3.925] (weighted by erfc(t): the error it makes
      in erf = 1 - 2^q, in units of 2^-24),
  2^f of degree 6 on [-0.5, 0.5] (relative error).
The check compares against double-precision std::erf; ulp is that of the float nearest the
exact value, as test_cpp_codegen measures it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

CUT = 0.875
HIGH = 3.925    # erf(x) rounds to 1 in float for x >= 3.9193


def lawson(xs, f, w, deg, iters=600):
    """Coefficients (lowest first) of the degree-`deg` polynomial minimising max |w (p - f)|
    over `xs`, and that maximum."""
    a = np.vander(xs, deg + 1, increasing=True)
    u = np.full(len(xs), 1.0 / len(xs))
    for _ in range(iters):
        sw = np.sqrt(u) * w
        c, *_ = np.linalg.lstsq(a * sw[:, None], f * sw, rcond=None)
        e = np.abs((a @ c - f) * w)
        u = u * e
        u /= u.sum()
    return c, e.max()


def fits():
    from scipy.special import erf, erfc
    s = np.linspace(1e-14, CUT * CUT, 20000)
    ratio = erf(np.sqrt(s)) / np.sqrt(s)
    small, es = lawson(s, ratio - 1.0, 1.0 / ratio, 5)
    t = np.linspace(CUT, HIGH, 20000)
    big, eb = lawson(t, np.log2(erfc(t)), erfc(t) * np.log(2), 6)
    f = np.linspace(-0.5, 0.5, 20001)
    exp2, ee = lawson(f, 2.0 ** f, 2.0 ** -f, 6)
    return [("erf(x)/x - 1 in x^2", small, es), ("log2(erfc(t))", big, eb),
            ("2^f", exp2, ee)]


def c_float(v) -> str:
    return np.format_float_scientific(np.float32(v), precision=8, unique=False) + "f"


CHECK = r"""
#include <cstdio>
#include <cmath>
static double ulps(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : 1e30;
  float rf = (float)ref;
  if (std::isinf(rf)) return got == rf ? 0 : 1e30;
  float a = std::fabs(rf), u = std::nextafter(a, INFINITY) - a;
  return std::fabs((double)got - ref) / u;
}
int main() {
  static float xs[1 << 16], ys[1 << 16];
  double worst = 0; float at = 0; long zero_sign = 0;
  for (long long base = 0; base < (1LL << 32); base += 1 << 16) {
    for (int i = 0; i < (1 << 16); ++i) { unsigned b = (unsigned)(base + i); std::memcpy(&xs[i], &b, 4); }
    #pragma omp simd
    for (int i = 0; i < (1 << 16); ++i) ys[i] = ember_erf(xs[i]);
    for (int i = 0; i < (1 << 16); ++i) {
      double e = ulps(ys[i], std::erf((double)xs[i]));
      if (e > worst) { worst = e; at = xs[i]; }
      if (xs[i] == 0 && std::signbit(xs[i]) != std::signbit(ys[i])) ++zero_sign;
    }
  }
  std::printf("ember_erf over all floats: worst %.3f ulp at %.9g; wrong zero signs: %ld\n",
              worst, at, zero_sign);
  return worst <= 3 && zero_sign == 0 ? 0 : 1;
}
"""


def check() -> int:
    from ember.passes.cpp_prelude import PRELUDE
    from ember.runtime.cpp_build import CXX_FLAGS
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "check.cpp"), os.path.join(d, "check")
        with open(src, "w") as f:
            f.write(PRELUDE + CHECK)
        flags = [x for x in CXX_FLAGS if x not in ("-shared", "-fPIC")]
        subprocess.run(["g++", *flags, src, "-o", exe], check=True)
        return subprocess.run([exe]).returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exhaustive check of ember_erf")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    for name, coeffs, err in fits():
        print(f"{name}: max weighted error {err:.3g}")
        print("  highest first:", ", ".join(c_float(c) for c in coeffs[::-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
