//===- LossScaler.h - DeepSpeed's dynamic loss scaler -----------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The rules of DeepSpeed's DynamicLossScaler (REFERENCES.md): on a step
// whose gradients overflowed the update is skipped; if the hysteresis
// counter is 1 the scale halves (not below the minimum), else the counter
// decrements. On a clean step the counter refills when consecutive
// hysteresis is on, and every `window` clean steps since the last overflow
// the scale doubles (refilling the counter). A static scale never changes.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_LOSSSCALER_H
#define DS_RUNTIME_LOSSSCALER_H

#include <cstdint>
#include <map>
#include <string>

namespace ds::rt {

struct LossScaler {
  // Configuration (DeepSpeed's fp16 section).
  bool dynamic = true;
  double minScale = 1.0;
  int64_t window = 1000;
  int64_t hysteresis = 2;
  bool consecutiveHysteresis = false;
  // State.
  double scale = 65536.0;
  int64_t curHysteresis = 2;
  int64_t curIter = 0;
  int64_t lastOverflowIter = -1;
  // Skipped steps are counted by the executor (Executor::skippedRuns).

  /// From the plan's compile options (loss_scale, initial_scale_power,
  /// loss_scale_window, hysteresis, consecutive_hysteresis,
  /// min_loss_scale); false with `err` on a bad value.
  bool configure(const std::map<std::string, std::string> &options,
                 std::string &err);
  /// After a step: whether its gradients overflowed.
  void update(bool overflow);
  /// The state as key/value pairs (checkpoints) and back.
  std::map<std::string, std::string> state() const;
  bool restore(const std::map<std::string, std::string> &state,
               std::string &err);
};

} // namespace ds::rt

#endif // DS_RUNTIME_LOSSSCALER_H
