//===- FreezeAuto.h - when `freeze_step: "auto"` freezes --------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// 1-bit Adam's and 1-bit LAMB's `freeze_step: "auto"`
// (docs/compression.md): ds-run ends the warm-up after the first step at
// which the second moment has stabilised. One rule for the compiler (the
// latest freeze step it plans), the report and the runtime's decision:
//
//   r_t = | ||v_t|| - ||v_{t-K}|| | / ||v_t||
//
// with ||v_t|| the global L2 norm of every exp_avg_sq after step t's
// update (all ranks' partitions under ZeRO 1-3; with pipelines every
// stage's, a tied parameter's once; t counts optimizer steps). Step t is
// the last warm-up step when t >= kMinStep and r_t < kThreshold, or
// t = kMaxStep.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_FREEZEAUTO_H
#define DS_SUPPORT_FREEZEAUTO_H

#include <cmath>
#include <cstdint>
#include <vector>

namespace ds::freezeauto {

/// K: the window, in steps, over which ||v|| must have settled.
constexpr int64_t kWindow = 10;
/// The largest relative change of ||v|| over the window that freezes.
constexpr double kThreshold = 0.05;
/// No freeze before this step (the window and a first look at the
/// gradients' scale), and always after this one.
constexpr int64_t kMinStep = 20;
constexpr int64_t kMaxStep = 1000;

/// r_t from the norms after steps t-K..t (oldest first, K+1 of them);
/// NaN while fewer are known or ||v_t|| is 0 or not finite.
inline double relativeChange(const std::vector<double> &norms) {
  if (norms.size() < static_cast<size_t>(kWindow + 1))
    return NAN;
  double now = norms.back(), then = norms[norms.size() - 1 - kWindow];
  if (!(now > 0) || !std::isfinite(now) || !std::isfinite(then))
    return NAN;
  return std::fabs(now - then) / now;
}

/// Whether step t, with criterion value r (NaN: unknown), ends the warm-up.
inline bool freezesAfter(int64_t t, double r) {
  return t >= kMaxStep || (t >= kMinStep && r < kThreshold);
}

} // namespace ds::freezeauto

#endif // DS_SUPPORT_FREEZEAUTO_H
