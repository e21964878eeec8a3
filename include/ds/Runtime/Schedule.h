//===- Schedule.h - learning-rate schedules -------------------*- C++ -*-===//
//
// Part of the ds project. Header-only, no MLIR or LLVM: the optimizer
// kernels evaluate the schedule from the step counter at run time, and
// ds-run prints the same value.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_SCHEDULE_H
#define DS_RUNTIME_SCHEDULE_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace ds {

/// The learning rate of step `step` (1 for the first update):
///   constant       lr
///   warmup         lr * step / warmup for step <= warmup, then lr
///   warmup-cosine  warmup, then min + (lr - min) (1 + cos(pi p)) / 2
///   warmup-linear  warmup, then lr - (lr - min) p
/// with p = (step - warmup) / (total - warmup) clamped to [0, 1].
inline double scheduledLr(const std::string &schedule, double lr, int64_t step,
                          int64_t warmup, int64_t total, double minLr) {
  if (schedule == "constant" || schedule.empty())
    return lr;
  if (warmup > 0 && step <= warmup)
    return lr * static_cast<double>(step) / static_cast<double>(warmup);
  if (schedule == "warmup")
    return lr;
  double span = static_cast<double>(std::max<int64_t>(total - warmup, 1));
  double p = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
  if (schedule == "warmup-cosine")
    return minLr + (lr - minLr) * 0.5 * (1.0 + std::cos(M_PI * p));
  return lr - (lr - minLr) * p; // warmup-linear
}

inline bool isSchedule(const std::string &s) {
  return s == "constant" || s == "warmup" || s == "warmup-cosine" ||
         s == "warmup-linear";
}

} // namespace ds

#endif // DS_RUNTIME_SCHEDULE_H
