"""The C++ prelude of every ember CPU translation unit: 16-bit float conversions, the
error record of data errors, NaN-propagating min/max (and their OpenMP reductions) and
branch-free vectorizable math (exp, log, tanh, erf, ...). cpp_emitter prints the kernels
that use it."""


PRELUDE = r"""// ember C++ kernels (generated)
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <algorithm>
#include <omp.h>
// Scratch memory for a kernel's partial results (cpp_row_chunks: the column sums of each chunk
// of rows): one buffer per calling thread, grown when a kernel needs more, kept for the next call.
namespace {
struct EmberScratch { void* p = nullptr; int64_t cap = 0; ~EmberScratch() { std::free(p); } };
}
static inline void* ember_scratch(int64_t bytes) {
  static thread_local EmberScratch s;
  if (bytes > s.cap) {
    std::free(s.p);
    s.cap = (bytes + 4095) / 4096 * 4096;
    s.p = std::aligned_alloc(64, s.cap);
  }
  return s.p;
}
// Whether a row-wise kernel of `rows` rows walks its rows one by one, each row loop split across
// the threads (passes/cpp_row_split.py): when the rows do not spread evenly over the threads.
static inline bool ember_split_rows(int64_t rows) {
  int64_t t = omp_get_max_threads();
  return t > 1 && rows % t != 0 && rows < 4 * t;
}
// The SIMD width in floats of the machine the unit is built for (-march=native), and a float
// the compiler must treat as unknown each time it is read (no asm is emitted): a row's output
// loop may walk chunks of one vector, each recomputing the row's scalars (EMBER_ROW_CHUNK).
#if defined(__AVX512F__)
#define EMBER_VEC_F32 16
#elif defined(__AVX__)
#define EMBER_VEC_F32 8
#else
#define EMBER_VEC_F32 4
#endif
// A row's output loop after its one reduction loop walks chunks of EMBER_ROW_CHUNK(n) of its n
// elements, each recomputing the row's scalars (cpp_row_scalars.py): one vector on AMD Zen,
// where stores paced by that work retire faster than stores back to back; the whole row (the
// scalars once a row) elsewhere: on an Intel Xeon the paced loop is the slower one.
#if defined(__znver1__) || defined(__znver2__) || defined(__znver3__) || defined(__znver4__) || \
    defined(__znver5__)
#define EMBER_ROW_CHUNK(n) EMBER_VEC_F32
#else
#define EMBER_ROW_CHUNK(n) (n)
#endif
#if defined(__x86_64__) || defined(__i386__)
static inline float ember_opaque(float v) { __asm__ volatile("" : "+x"(v)); return v; }
static inline double ember_opaque(double v) { __asm__ volatile("" : "+x"(v)); return v; }
#elif defined(__aarch64__)
static inline float ember_opaque(float v) { __asm__ volatile("" : "+w"(v)); return v; }
static inline double ember_opaque(double v) { __asm__ volatile("" : "+w"(v)); return v; }
#else
static inline float ember_opaque(float v) { volatile float t = v; return t; }
static inline double ember_opaque(double v) { volatile double t = v; return t; }
#endif
// 16-bit floats are stored as uint16_t and computed in float.
static inline float ember_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t ember_f32_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (uint16_t)(u >> 16);
}
static inline float ember_round_bf16(float f) { return ember_bf16_to_f32(ember_f32_to_bf16(f)); }
static inline float ember_f16_to_f32(uint16_t h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
static inline uint16_t ember_f32_to_f16(float f) { _Float16 v = (_Float16)f; uint16_t h; std::memcpy(&h, &v, 2); return h; }
static inline float ember_round_f16(float f) { return (float)(_Float16)f; }
// Errors in the data (an index out of range, an integer division by zero) cannot throw from a
// kernel: the first one is recorded in ember_error (kind, value, dim, size) and the host raises
// it after the kernel (runtime/executor.py, runtime/kernel_errors.py). The checks are cold
// branches: the value used after a failed check keeps every access in bounds. The record has
// internal linkage (another library's symbol can never interpose it); the host finds it through
// ember_error_record().
static int64_t ember_error[4] = {0, 0, 0, 0};
extern "C" int64_t* ember_error_record() { return ember_error; }
__attribute__((cold, noinline)) static void ember_fail(int64_t kind, int64_t v, int64_t d, int64_t n) {
  int64_t none = 0;
  if (__atomic_compare_exchange_n(&ember_error[0], &none, kind, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    ember_error[1] = v; ember_error[2] = d; ember_error[3] = n;
  }
}
static inline int64_t ember_chk_index(int64_t i, int64_t n, int64_t d) {
  if (__builtin_expect((uint64_t)i >= (uint64_t)n, 0)) { ember_fail(1, i, d, n); return 0; }
  return i;
}
// Integer division: a zero divisor is the error eager raises; MIN / -1 wraps (x86 traps on both).
template <typename T> static inline T ember_chk_divsi(T a, T b) {
  if (__builtin_expect(b == 0, 0)) { ember_fail(2, 0, 0, 0); return 0; }
  return b == -1 ? (T)(0 - (uint64_t)a) : (T)(a / b);
}
template <typename T> static inline T ember_chk_remsi(T a, T b) {
  if (__builtin_expect(b == 0, 0)) { ember_fail(2, 0, 0, 0); return 0; }
  return b == -1 ? (T)0 : (T)(a % b);
}
template <typename T> static inline T ember_chk_floordivsi(T a, T b) {
  T q = ember_chk_divsi(a, b);
  return (b != 0 && b != -1 && a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q;
}
template <typename T> static inline T ember_chk_divui(T a, T b) {   // T unsigned
  if (__builtin_expect(b == 0, 0)) { ember_fail(2, 0, 0, 0); return 0; }
  return (T)(a / b);
}
template <typename T> static inline T ember_chk_remui(T a, T b) {
  if (__builtin_expect(b == 0, 0)) { ember_fail(2, 0, 0, 0); return 0; }
  return (T)(a % b);
}
// arith.maximumf/minimumf propagate NaN (as torch.maximum and amax do); written as selects so
// that gcc vectorizes them.
template <typename T> static inline T ember_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> static inline T ember_min(T a, T b) { return (a < b || a != a) ? a : b; }
#pragma omp declare reduction(nanmax : float, double : omp_out = ember_max(omp_out, omp_in)) initializer(omp_priv = omp_orig)
#pragma omp declare reduction(nanmin : float, double : omp_out = ember_min(omp_out, omp_in)) initializer(omp_priv = omp_orig)
// Vectorizable math: branch-free (selects), inline, no libm calls, so gcc vectorizes loops that
// use them under `#pragma omp simd`. Cephes-style range reduction + polynomials (~1-2 ulp);
// inf/NaN/overflow/underflow/subnormals handled with selects. double overloads call libm.
static inline float ember_i2f(int32_t i) { float f; __builtin_memcpy(&f, &i, 4); return f; }
static inline int32_t ember_f2i(float f) { int32_t i; __builtin_memcpy(&i, &f, 4); return i; }
static inline float ember_exp(float x) {
  // x is not clamped: a select of a constant (x > 89 ? 89 : x) is a branch g++ threads through
  // the caller's arithmetic under trapping math (sigmoid's 1 / (1 + exp(-x)) got a second
  // vector divide). n is clamped as an integer instead (integer min/max: no branch), and the
  // out-of-range results are chosen last; the bits are those of the clamped form.
  const float magic = 12582912.0f;           // 1.5 * 2^23: adding it rounds to an integer
  float k = x * 1.44269504088896341f + magic;
  float n = k - magic;
  int32_t ni = ember_f2i(k) - 0x4B400000;     // n as an integer (its low mantissa bits)
  ni = ni < -160 ? -160 : ni;                 // keeps the exponent fields below in range
  ni = ni > 160 ? 160 : ni;
  float r = x - n * 0.693359375f;            // Cody-Waite: ln2 = C1 + C2
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  float y = p * (r * r) + r + 1.0f;
  // 2^n in two factors: results in the subnormal range round once, x > 88.72 gives inf.
  int32_t a = ni >> 1, b = ni - a;
  y = y * ember_i2f((a + 127) << 23) * ember_i2f((b + 127) << 23);
  y = x > 89.0f ? INFINITY : y;              // NaN fails both compares and stays NaN
  return x < -105.0f ? 0.0f : y;
}
static inline float ember_log(float x) {
  int32_t ux = ember_f2i(x);
  bool sub = (ux & 0x7f800000) == 0;          // subnormal (or zero: fixed below)
  float xs = x * (sub ? 8388608.0f : 1.0f);   // * 2^23 (selects of constants: gcc if-converts)
  int32_t u = ember_f2i(xs);
  int32_t e = ((u >> 23) & 0xff) - (sub ? 149 : 126);
  int32_t mb = (u & 0x007fffff) | 0x3f000000;  // mantissa in [0.5, 1)
  bool lo = mb < 0x3f3504f3;                   // m < sqrt(1/2)
  e = lo ? e - 1 : e;
  float m = ember_i2f(mb);
  float f = m * (lo ? 2.0f : 1.0f) - 1.0f;
  float fe = (float)e;
  float z = f * f;
  float p = 7.0376836292E-2f;
  p = p * f - 1.1514610310E-1f;
  p = p * f + 1.1676998740E-1f;
  p = p * f - 1.2420140846E-1f;
  p = p * f + 1.4249322787E-1f;
  p = p * f - 1.6668057665E-1f;
  p = p * f + 2.0000714765E-1f;
  p = p * f - 2.4999993993E-1f;
  p = p * f + 3.3333331174E-1f;
  float y = p * f * z + fe * -2.12194440e-4f - 0.5f * z;
  float r = (f + y) + fe * 0.693359375f;
  // Special cases are added (a select between r and a constant makes gcc compute r in a
  // branch, which it then cannot if-convert): r is finite here for every input.
  float fix = (ux & 0x7fffffff) == 0 ? -INFINITY : ux < 0 ? NAN : ux >= 0x7f800000 ? x : 0.0f;
  return r + fix;                             // x < 0: NaN, +-0: -inf, +inf/NaN: x
}
static inline float ember_log1p(float x) {
  float u = 1.0f + x, d = u - 1.0f;           // log(u) * x / (u - 1): corrects u's rounding
  float w = (d == 0.0f || x == INFINITY) ? 1.0f : d;
  return ember_log(u) * (x / w) + (d == 0.0f ? x : 0.0f);   // d == 0: log(u) == 0, gives x
}
static inline float ember_expm1(float x) {
  float ax = x < 0.0f ? -x : x;
  float p = 2.48015873015873016e-5f;          // Taylor to x^8/8!, |x| < 0.5
  p = p * x + 1.98412698412698413e-4f;
  p = p * x + 1.38888888888888889e-3f;
  p = p * x + 8.33333333333333333e-3f;
  p = p * x + 4.16666666666666667e-2f;
  p = p * x + 1.66666666666666667e-1f;
  p = p * x + 0.5f;
  p = __builtin_copysignf((p * x) * x + x, x);   // expm1(-0) = -0 (fuzz seed 41 index 4305)
  float e = ember_exp(x) - 1.0f;
  return ax < 0.5f ? p : e;
}
static inline float ember_tanh(float x) {
  float ax = x < 0.0f ? -x : x;
  float z = x * x;
  float p = -5.70498872745E-3f;
  p = p * z + 2.06390887954E-2f;
  p = p * z - 5.37397155531E-2f;
  p = p * z + 1.33314422036E-1f;
  p = p * z - 3.33332819422E-1f;
  float small = __builtin_copysignf(x + x * z * p, x);   // tanh(-0) = -0
  float big = 1.0f - 2.0f / (ember_exp(ax + ax) + 1.0f);   // saturates to 1 (exp -> inf)
  big = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : big;
}
// erf: |x| < 0.875: x + x * P(x^2), P of degree 5; else 1 - 2^Q(|x|) with Q(t) of degree 6
// fitted to log2(erfc(t)) on [0.875, 3.925] (|x| >= 3.9193 rounds to +-1), and 2^Q split into
// 2^n * 2^f, f in [-0.5, 0.5], 2^f of degree 6: no division and no separate exp range
// reduction. Minimax fits by benchmarks/math_fit.py; over every float: at most 1.31 ulp.
static inline float ember_erf(float x) {
  float ax = __builtin_fabsf(x);
  float s = x * x;
  float p = -6.20325445e-04f;
  p = p * s + 5.03218174e-03f;
  p = p * s - 2.67914627e-02f;
  p = p * s + 1.12824552e-01f;
  p = p * s - 3.76125515e-01f;
  p = p * s + 1.28379151e-01f;               // erf(x) / x - 1
  float t = ax > 3.925f ? 3.925f : ax;       // NaN stays NaN
  float q = 2.88397685e-04f;
  q = q * t - 4.44638962e-03f;
  q = q * t + 3.22890393e-02f;
  q = q * t - 1.50401324e-01f;
  q = q * t - 9.18737888e-01f;
  q = q * t - 1.62720048e+00f;
  q = q * t - 2.08040481e-04f;               // log2(erfc(t)), in [-26, -2.2]
  const float magic = 12582912.0f;           // 1.5 * 2^23: adding it rounds to an integer
  float k = q + magic;
  float f = q - (k - magic);                 // exact
  float e = 1.53458110e-04f;
  e = e * f + 1.33999332e-03f;
  e = e * f + 9.61848907e-03f;
  e = e * f + 5.55032864e-02f;
  e = e * f + 2.40226462e-01f;
  e = e * f + 6.93147182e-01f;
  e = e * f + 1.0f;
  float big = 1.0f - e * ember_i2f((ember_f2i(k) - 0x4B400000 + 127) << 23);
  big = __builtin_copysignf(big, x);
  return ax < 0.875f ? x * p + x : big;
}
static inline float ember_sigmoid(float x) { return 1.0f / (1.0f + ember_exp(-x)); }
static inline double ember_exp(double x) { return std::exp(x); }
static inline double ember_log(double x) { return std::log(x); }
static inline double ember_log1p(double x) { return std::log1p(x); }
static inline double ember_expm1(double x) { return std::expm1(x); }
static inline double ember_tanh(double x) { return std::tanh(x); }
static inline double ember_erf(double x) { return std::erf(x); }
static inline double ember_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
"""
