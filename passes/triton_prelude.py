"""The Triton module prelude: the imports and helpers every generated Triton module starts
with (ember's autotuner and benchmark, the launch options, the error record of checked indices,
NaN-propagating max/min and their reductions, product, pow, and the 16-bit-exact math helpers
whose two bodies triton_lang's module docstring describes)."""

PRELUDE = '''import torch
import triton
import triton.language as tl


def _ember_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def _ember_prune(configs, nargs, **kwargs):
    # Tiles larger than the (power-of-two rounded) extent only mask lanes off: keep the
    # configurations that fit, at least the first; a single one left is not benchmarked.
    def fits(c, block, numel):
        if block not in c.kwargs or numel not in nargs:
            return True
        least = min(x.kwargs.get(block, 1) for x in configs)
        return c.kwargs[block] <= max(_ember_pow2(int(nargs[numel])), least)
    kept = [c for c in configs if fits(c, "XBLOCK", "xnumel") and fits(c, "RBLOCK", "rnumel")]
    return kept or configs[:1]


def _ember_bench(kernel_call, quantiles):
    # Short fixed budgets (ms): the configurations differ by tens of percent, which a few
    # hundred microseconds of timing resolve; Triton's defaults (25 + 100 ms) per config
    # dominate a graph's first call. (2, 10) was still 6.5 s of efficientnet_b0's cold start
    # (260 configurations, H100); each trial also clears the L2 cache.
    import triton.testing
    return triton.testing.do_bench(kernel_call, warmup=_EMBER_BENCH_MS[0], rep=_EMBER_BENCH_MS[1],
                                   quantiles=quantiles)


_EMBER_BENCH_MS = (1, 5)


def _ember_overlaps(a, b):
    pa, pb = a.data_ptr(), b.data_ptr()
    return pa < pb + b.numel() * b.element_size() and pb < pa + a.numel() * a.element_size()


def _ember_autotune(configs, key, restore=(), outputs=()):
    # The interpreter has no GPU to time configurations on: it runs the first one.
    import os
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        configs = configs[:1]
    kw = {}
    if restore:
        # Timing a configuration runs the kernel: an input whose memory an output shares
        # (ember-buffer-reuse's in-place) is saved before each trial and put back after it.
        # Only those: cloning every input per trial costs a copy of the graph's data.
        saved = {}

        def pre_hook(nargs, reset_only=False):
            saved.clear()
            if reset_only:
                return
            outs = [nargs[o] for o in outputs if nargs.get(o) is not None]
            for name in restore:
                t = nargs.get(name)
                if t is not None and (not outputs or any(_ember_overlaps(t, o) for o in outs)):
                    saved[name] = t.clone()

        def post_hook(nargs, exception):
            for name, t in saved.items():
                nargs[name].copy_(t)
            saved.clear()
        kw = dict(pre_hook=pre_hook, post_hook=post_hook)
    if _EMBER_AUTOTUNE_CACHE:
        # the choice is kept in Triton's cache: a warm start (a new process) does not time the
        # configurations again
        kw["cache_results"] = True
    return triton.autotune(configs=configs, key=key, do_bench=_ember_bench,
                           prune_configs_by={"early_config_prune": _ember_prune}, **kw)


_EMBER_AUTOTUNE_CACHE = "cache_results" in __import__("inspect").signature(
    triton.autotune).parameters


@triton.jit
def _ember_neg_zero():
    # -0.0 as a value: triton 3.6 turns a -0.0 constant into +0.0 (its scalar_constant takes
    # the null value for any `value == 0`), in compiled code and the interpreter alike; a
    # nonzero integer constant reinterpreted keeps the sign bit (f32; promotes exactly to f64)
    return tl.full([], -2147483648, tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _ember_tanh_fast(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    # (1 - e) / (1 + e) cancels for a small |x|: an f32 subnormal gave 0.0 (and pow(tanh(x),
    # -2.5) inf where eager's is NaN: fuzz seed 32 index 832), 1e-5 lost 3e-3 relative. There
    # tanh's odd series, whose next term is under 2e-9 relative for |x| < 0.125; `x * (...)`
    # keeps -0.0 and subnormals as they are, as eager's tanh does.
    x2 = x * x
    p = x * (1.0 + x2 * (-0.333333333333 + x2 * (0.133333333333 + x2 * -0.053968253968)))
    return tl.where(tl.abs(x) < 0.125, p, tl.where(x < 0, -t, t))


if __import__("os").environ.get("TRITON_INTERPRET", "0") == "1":
    _ember_tanh = _ember_tanh_fast

    @triton.jit
    def _ember_exp(x):
        return tl.exp(x)

    @triton.jit
    def _ember_log(x):
        return tl.log(x)

    @triton.jit
    def _ember_erf(x):
        return tl.math.erf(x)

    @triton.jit
    def _ember_sin(x):
        return tl.sin(x)

    @triton.jit
    def _ember_cos(x):
        return tl.cos(x)

    @triton.jit
    def _ember_div(a, b):
        return a / b

    @triton.jit
    def _ember_rsqrt(x):
        return tl.rsqrt(x)

    @triton.jit
    def _ember_exp2(x):
        return tl.exp2(x)

    # IEEE fmod: the interpreter's float `%` is NumPy's fmod (exact)
    @triton.jit
    def _ember_fmod(a, b):
        return a % b

    @triton.jit
    def _ember_sqrt(x):
        return tl.sqrt(x)

    # log1p/expm1 without libdevice, accurate near 0 (log(1 + x) is 0 for |x| < 2^-24: fuzz
    # seed 11 index 186 took 1/log1p(1e-30) for inf): Goldberg's and Kahan's forms.
    @triton.jit
    def _ember_log1p(x):
        u = 1.0 + x
        y = tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))
        return tl.where(x == float("inf"), x, y)

    @triton.jit
    def _ember_expm1(x):
        u = tl.exp(x)
        y = tl.where(u == 1.0, x, tl.where(u - 1.0 == -1.0, -1.0, (u - 1.0) * (x / tl.log(u))))
        return tl.where(u == float("inf"), u, y)

    # |a| ** b as eager's CPU pow (correctly rounded in practice: glibc's, Sleef's u10): in f64,
    # rounded once. exp2(b * log2|a|) in f32 was up to 8 ulps off, which sin(x ** 8) magnified
    # to 2e-3 (fuzz seed 30 index 879).
    @triton.jit
    def _ember_pow_mag(a, b):
        return tl.exp2(b * tl.log2(a.to(tl.float64))).to(a.dtype)

    # acos ... log10, atan2: no `tl` spelling. Under the interpreter a kernel is Python on
    # NumPy-backed blocks, so these are plain functions applying NumPy's (the interpreter's own
    # way for tl.exp and the rest: TensorHandle(op(data))); compiled, libdevice's (below).
    def _ember_numpy1(fn):
        from triton.runtime.interpreter import TensorHandle

        def call(x):
            return tl.tensor(TensorHandle(fn(x.handle.data), x.handle.dtype.scalar), x.type)
        return call

    def _ember_numpy2(fn):
        import numpy as np
        from triton.runtime.interpreter import TensorHandle

        def call(a, b):
            x, y = np.broadcast_arrays(a.handle.data, b.handle.data)
            if x.dtype == np.float32:
                # NumPy's float32 atan2 is an ulp off where eager's CPU kernel is not
                # (atan2(-1, 2): -0.46364763 against -0.4636476): in f64, rounded once
                data = np.ascontiguousarray(fn(x.astype(np.float64),
                                               y.astype(np.float64)).astype(np.float32))
            else:
                data = np.ascontiguousarray(fn(x, y))
            ty = a.handle.dtype.scalar
            # scalars in, a scalar out (a 0-dim kernel's loads hold one-element arrays: a
            # block type there failed as 'Cannot splat a block tensor')
            block = a.type.is_block() or b.type.is_block()
            return tl.tensor(TensorHandle(data, ty),
                             tl.block_type(ty, list(data.shape)) if block and data.ndim else ty)
        return call

    _ember_acos = _ember_numpy1(__import__('numpy').arccos)
    _ember_asin = _ember_numpy1(__import__('numpy').arcsin)
    _ember_atan = _ember_numpy1(__import__('numpy').arctan)
    _ember_acosh = _ember_numpy1(__import__('numpy').arccosh)
    _ember_asinh = _ember_numpy1(__import__('numpy').arcsinh)
    _ember_atanh = _ember_numpy1(__import__('numpy').arctanh)
    _ember_cosh = _ember_numpy1(__import__('numpy').cosh)
    _ember_sinh = _ember_numpy1(__import__('numpy').sinh)
    _ember_tan = _ember_numpy1(__import__('numpy').tan)
    _ember_log10 = _ember_numpy1(__import__('numpy').log10)
    _ember_atan2 = _ember_numpy2(__import__('numpy').arctan2)

    _EMBER_LAUNCH = {}
else:
    # What eager's CUDA/HIP kernels call: expf, logf, tanhf, erff, sinf, cosf, IEEE / and sqrt.
    from triton.language.extra import libdevice

    @triton.jit
    def _ember_tanh(x):
        return libdevice.tanh(x)

    @triton.jit
    def _ember_exp(x):
        return libdevice.exp(x)

    @triton.jit
    def _ember_log(x):
        return libdevice.log(x)

    @triton.jit
    def _ember_erf(x):
        return libdevice.erf(x)

    @triton.jit
    def _ember_sin(x):
        return libdevice.sin(x)

    @triton.jit
    def _ember_cos(x):
        return libdevice.cos(x)

    @triton.jit
    def _ember_div(a, b):
        return tl.math.div_rn(a, b)

    # rsqrtf and exp2f as eager's kernels call them: tl.rsqrt and tl.exp2 compile to
    # rsqrt.approx.ftz / ex2.approx.ftz on sm_90, which flush subnormals (rsqrt(1e-40) = inf,
    # eager's 1e20; exp2(-140) = 0); libdevice's, linked without flush-to-zero (_EMBER_LAUNCH),
    # are the same instructions without it
    @triton.jit
    def _ember_rsqrt(x):
        return libdevice.rsqrt(x)

    @triton.jit
    def _ember_exp2(x):
        return libdevice.exp2(x)

    # IEEE fmod (exact), as eager's CUDA/HIP kernels call it; 16-bit values in f32, where it is
    # exact too. Broadcast by subtracting a zero block (as _ember_atan2, below).
    @triton.jit
    def _ember_fmod(a, b):
        x = a - tl.zeros_like(b)
        y = b - tl.zeros_like(a)
        if x.dtype.primitive_bitwidth == 16:      # decided when compiling: one branch
            r = libdevice.fmod(x.to(tl.float32), y.to(tl.float32)).to(x.dtype)
        else:
            r = libdevice.fmod(x, y)
        return r

    @triton.jit
    def _ember_sqrt(x):
        return tl.sqrt_rn(x)

    @triton.jit
    def _ember_log1p(x):
        return libdevice.log1p(x)

    @triton.jit
    def _ember_pow_mag(a, b):
        # eager's CUDA/HIP pow kernel calls powf (pow for f64); a >= 0 here
        return libdevice.pow(a, b - tl.zeros_like(a))    # b: a block or a number

    @triton.jit
    def _ember_expm1(x):
        return libdevice.expm1(x)

    # what eager's CUDA/HIP kernels call for these: acosf, ..., log10f, atan2f
    @triton.jit
    def _ember_acos(x):
        return libdevice.acos(x)

    @triton.jit
    def _ember_asin(x):
        return libdevice.asin(x)

    @triton.jit
    def _ember_atan(x):
        return libdevice.atan(x)

    @triton.jit
    def _ember_acosh(x):
        return libdevice.acosh(x)

    @triton.jit
    def _ember_asinh(x):
        return libdevice.asinh(x)

    @triton.jit
    def _ember_atanh(x):
        return libdevice.atanh(x)

    @triton.jit
    def _ember_cosh(x):
        return libdevice.cosh(x)

    @triton.jit
    def _ember_sinh(x):
        return libdevice.sinh(x)

    @triton.jit
    def _ember_tan(x):
        return libdevice.tan(x)

    @triton.jit
    def _ember_log10(x):
        return libdevice.log10(x)

    # broadcast by subtracting a zero block: x - 0.0 is x for every x, -0.0 included, where
    # x + 0.0 turns -0.0 into +0.0 (atan2(-0.0, -1.0) is -pi, atan2(+0.0, -1.0) is +pi: the
    # GPU's results differed from eager's there)
    @triton.jit
    def _ember_atan2(a, b):
        return libdevice.atan2(a - tl.zeros_like(b), b - tl.zeros_like(a))

    # Triton links libdevice with flush-to-zero selected by default; eager's kernels are built
    # without, and its erff/tanhf/sinf then differ in the last place now and then (and on
    # subnormals). HIP has no such option (ocml keeps subnormals).
    # Contraction (a multiply and an add made one fma) stays on, Triton's default: libdevice's
    # expf, erff, tanhf, logf, sinf, powf... compile with fewer fmas without it (sm_90 PTX),
    # so their last bits would no longer be those of eager's kernels, which nvcc builds with
    # contraction on. It also contracts across ops eager rounds apart (`a * b - b * a` is an
    # fma's rounding error, not 0): test_gpu_numerics' xfail, open.
    _EMBER_LAUNCH = {} if getattr(torch.version, "hip", None) else {"enable_reflect_ftz": False}


if __import__("os").environ.get("TRITON_INTERPRET", "0") == "1":
    @triton.jit
    def _ember_round_bf16(x):
        # f32 -> nearest bf16 (ties to even), as an f32, with integer ops: the interpreter's
        # own bf16 conversion truncates. NaN stays NaN.
        u = x.to(tl.uint32, bitcast=True)
        u = (u + (0x7FFF + ((u >> 16) & 1))) & 0xFFFF0000
        return tl.where(x != x, x, u.to(tl.float32, bitcast=True))

    # f32 <-> bf16 storage conversions by their bits. The interpreter's own conversion
    # (`_convert_float`) maps every f32 subnormal to a bf16 zero and every bf16 subnormal to an
    # f32 zero (fuzz seeds 26 index 1783, 27 index 602); bf16 has f32's exponent range, so the
    # exact conversion is the top 16 bits (rounded to nearest even) and back.
    @triton.jit
    def _ember_to_bf16(x):
        u = x.to(tl.uint32, bitcast=True)
        r = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
        r = tl.where(x != x, (u >> 16) | 0x40, r)    # a NaN keeps its sign, made quiet
        return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)

    @triton.jit
    def _ember_from_bf16(x):
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
else:
    @triton.jit
    def _ember_round_bf16(x):
        # f32 -> nearest bf16 (ties to even), as an f32: one cvt.rn each way on a GPU.
        return x.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def _ember_to_bf16(x):
        # cvt.rn.bf16.f32 (subnormals kept: no ftz)
        return x.to(tl.bfloat16)

    @triton.jit
    def _ember_from_bf16(x):
        return x.to(tl.float32)


# One error record per device (kind, value, dim, size; runtime/kernel_errors.py) for kernels
# that check indices. A GPU stops at the kernel's device-side assert (as eager's CUDA kernels
# do), compiled with `debug` for those kernels only, and without Triton's integer-overflow
# assertions that `debug` would add (eager's integers wrap); the interpreter has no asserts,
# so the host reads the record after the launch.
_EMBER_ERRORS = {}


def _ember_error_buffer(device):
    buf = _EMBER_ERRORS.get(device)
    if buf is None:
        buf = _EMBER_ERRORS[device] = torch.zeros(4, dtype=torch.int64, device=device)
    return buf


_EMBER_LAUNCH_CHECKED = dict(_EMBER_LAUNCH)
if __import__("os").environ.get("TRITON_INTERPRET", "0") != "1":
    _EMBER_LAUNCH_CHECKED.update(debug=True, sanitize_overflow=False)


# max/min that propagate NaN (arith.maximumf, torch.amax), branch-free.
@triton.jit
def _ember_nanmax(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _ember_nanmin(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _ember_nanmax_reduce(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _ember_nanmax)


@triton.jit
def _ember_nanmin_reduce(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _ember_nanmin)


@triton.jit
def _ember_mul(a, b):
    return a * b


@triton.jit
def _ember_prod_reduce(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _ember_mul)


@triton.jit
def _ember_pow(a, b):
    # a**b for float a, b: sign from a when b is an odd integer, NaN for negative a otherwise.
    # (`!= 0` on each flag: the interpreter's & rejects a scalar comparison's result next to a
    # block's, as for a 0-dim exponent: fuzz seed 12 index 14; a no-op on a GPU)
    mag = _ember_pow_mag(tl.abs(a), b)
    b_int = (tl.floor(b) == b) != 0
    odd = b_int & (((tl.abs(b) % 2.0) == 1.0) != 0)
    neg = (a < 0) != 0
    # the sign of -0.0 too: (-0.0) ** -1 is -inf (fuzz seed 10 index 44)
    signed = (neg | ((a == 0) & ((1.0 / a) < 0))) != 0
    r = tl.where(signed & odd, mag * -1.0, mag)     # (not -mag: triton 3.6's is 0 - mag)
    # a negative finite a to a non-integer power is NaN; -inf's is +0 or +inf (the magnitude:
    # (-inf) ** -0.49 is 0, fuzz seed 23 index 3)
    nan_pow = (neg & ((b_int == 0) != 0) & ((a != float("-inf")) != 0)) != 0
    r = tl.where(nan_pow, float("nan"), r)
    # 1 ** b (NaN too) and (-1) ** +-inf are 1, as C's pow
    b_inf = (tl.abs(b) == float("inf")) != 0
    one = (((b == 0.0) != 0) | ((a == 1.0) != 0) | (((a == -1.0) != 0) & b_inf)) != 0
    return tl.where(one, 1.0, r)
'''
