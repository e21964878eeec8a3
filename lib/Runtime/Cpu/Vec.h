//===- Vec.h - vectorizable f32 math for the CPU kernels --------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Branch-free float exp, erf, tanh and log that compilers vectorize, and
// DS_CLONES,
// which builds a function for AVX2 and for baseline x86-64 and picks one at
// load time (the binary stays portable).
//
// Accuracy (against double-precision libm; ds-unittests' VecMath tests
// sweep each function and bound the error): exp within 3 ulp, erf within
// 1.2e-7 absolute, tanh within 4 ulp, log within 2 ulp.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CPU_VEC_H
#define DS_RUNTIME_CPU_VEC_H

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__clang__)
#define DS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DS_CLONES
#endif

// Elementwise loops that may run in place (output == input, same index):
// no loop-carried dependence, so the vectorizer may skip its overlap check,
// which would otherwise fall back to scalar code for in-place kernels.
#if defined(__clang__)
#define DS_VECTORIZE _Pragma("clang loop vectorize(assume_safety)")
#else
#define DS_VECTORIZE
#endif

// Sums whose order may change (a reduction the vectorizer splits into
// lanes): put first in the compound statement that holds the loop.
#if defined(__clang__)
#define DS_REASSOCIATE _Pragma("clang fp reassociate(on)")
#else
#define DS_REASSOCIATE
#endif

namespace ds::rt {

/// e^x: 2^n * p(r) with n = round(x / ln 2), |r| <= ln2/2, p a degree-6
/// polynomial; 0 below -87.5 (and for -inf), inf above 88.7.
inline float fastExp(float x) {
  const float hi = 88.7228f, lo = -87.3365f;
  float xc = x > hi ? hi : (x < lo ? lo : x);
  xc = xc == xc ? xc : 0.0f; // NaN: a finite n below (the result is x)
  // Round to nearest by adding and removing 1.5 * 2^23 (|v| < 2^22 here):
  // vectorizes without SSE4.1's round instruction.
  const float magic = 12582912.0f;
  float n = (xc * 1.44269504088896341f + magic) - magic;
  float r = xc - n * 0.693359375f;      // ln2 split in two for accuracy
  r = r - n * (-2.12194440e-4f);
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666672f +
            r * (4.16666567e-2f + r * (8.33335891e-3f + r * 1.38888648e-3f)))));
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  float y = p * scale;
  y = x < lo ? 0.0f : y;
  y = x > hi ? INFINITY : y;
  return x != x ? x : y; // NaN stays NaN
}

/// erf(x), Abramowitz & Stegun 7.1.26 refined: for |x| < 0.5 a Taylor
/// series, else 1 - t*poly(t)*exp(-x^2) with t = 1/(1 + p|x|).
inline float fastErf(float x) {
  float a = std::fabs(x);
  // Small |x|: the Maclaurin series of erf to x^13.
  float x2 = x * x;
  float small = x * 1.12837917f *
                (1.0f + x2 * (-0.333333333f + x2 * (0.1f + x2 * (-0.0238095238f +
                 x2 * (0.00462962963f + x2 * (-7.57575758e-4f +
                 x2 * 1.06837607e-4f))))));
  // Large |x|: erfc(a) = t * exp(-a^2 + P(t)), t = 1/(1 + a/2) (the
  // Numerical Recipes fit, fractional error < 1.2e-7), in float.
  float t = 1.0f / (1.0f + 0.5f * a);
  float poly = -a * a - 1.26551223f +
      t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f +
      t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f +
      t * (-0.82215223f + t * 0.17087277f))))))));
  float erfc = t * fastExp(poly);
  float big = 1.0f - erfc;
  big = x < 0 ? -big : big;
  return a < 0.5f ? small : big;
}

/// tanh(x): an odd Taylor polynomial to x^15 for |x| < 0.5 (truncation
/// below 1e-8 relative), else sign(x) * (1 - 2 / (e^{2|x|} + 1)), which is
/// 1 for |x| >= 9 (e^{2|x|} saturates to inf only past 44).
inline float fastTanh(float x) {
  float a = std::fabs(x);
  float x2 = x * x;
  float small = x * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f +
                x2 * (-0.0539682540f + x2 * (0.0218694885f +
                x2 * (-0.00886323552f + x2 * (0.00359212803f +
                x2 * -0.00145583438f)))))));
  float e = fastExp(2.0f * (a < 20.0f ? a : 20.0f));
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0 ? -big : big;
  float y = a < 0.5f ? small : big;
  return x != x ? x : y;
}

/// log(x): x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log(m) =
/// 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172, an odd polynomial to
/// s^11. Subnormals are scaled by 2^23 first; log(0) = -inf, log(x < 0) =
/// NaN, log(inf) = inf.
inline float fastLog(float x) {
  bool sub = x < 1.17549435e-38f;
  float xs = sub ? x * 8388608.0f : x;
  int32_t bits;
  std::memcpy(&bits, &xs, 4);
  int32_t e = ((bits >> 23) & 0xff) - 127;
  int32_t mbits = (bits & 0x007fffff) | 0x3f800000;
  float m;
  std::memcpy(&m, &mbits, 4);
  bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  float ef = static_cast<float>(e + (big ? 1 : 0)) - (sub ? 23.0f : 0.0f);
  float s = (m - 1.0f) / (m + 1.0f);
  float s2 = s * s;
  float p = 2.0f * s * (1.0f + s2 * (0.333333333f + s2 * (0.2f +
            s2 * (0.142857143f + s2 * (0.111111111f + s2 * 0.0909090909f)))));
  float y = ef * 0.693359375f + (p + ef * -2.12194440e-4f);
  y = x == 0.0f ? -INFINITY : y;
  y = x < 0.0f ? NAN : y;
  y = x == INFINITY ? INFINITY : y;
  return x != x ? x : y;
}

} // namespace ds::rt

#endif // DS_RUNTIME_CPU_VEC_H
