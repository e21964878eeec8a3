//===- ZeroOne.h - 0/1 Adam's step policy -----------------------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// Which exchange step t of DeepSpeed's ZeroOneAdam runs (docs/compression.md,
// deepspeed/runtime/fp16/onebit/zoadam.py), one rule for the compiler (the
// plan's bytes), the footprint (bytes per step) and the runtime kernel (its
// counters are optimizer state and checked against this rule). ds's step t
// is DeepSpeed's state['step'] t + 1: DeepSpeed's first step() only sets up
// its buffers, so its counter is one ahead of the steps that train.
//
// - Before the freeze (t = 1, and every t <= var_freeze_step) the variance
//   is updated at the steps where var_interval divides t + 1, on the
//   all-reduced gradient (plain Adam); the other steps exchange the
//   gradient 1-bit compressed and update the momentum only. var_interval
//   starts at 1 and doubles after var_update_scaler variance updates.
// - After it the variance is frozen; every step is a local step, and the
//   ranks synchronise (the accumulated update, compressed) at the steps
//   where local_step_interval divides t + 1. local_step_interval starts at
//   1 and doubles, up to local_step_clipper, after local_step_scaler
//   frozen steps.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_ZEROONE_H
#define DS_SUPPORT_ZEROONE_H

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ds::zeroone {

/// DeepSpeed's ZeroOneAdam parameters (its defaults).
struct Policy {
  int64_t varFreezeStep = 100000;
  int64_t varUpdateScaler = 16;
  int64_t localStepScaler = 32678;
  int64_t localStepClipper = 16;
};

/// DeepSpeed's per-parameter counters (var_interval, var_counter,
/// local_step_interval, local_step_counter).
struct Counters {
  int64_t varInterval = 1, varCounter = 0;
  int64_t localInterval = 1, localCounter = 0;
  bool operator==(const Counters &o) const {
    return varInterval == o.varInterval && varCounter == o.varCounter &&
           localInterval == o.localInterval && localCounter == o.localCounter;
  }
};

/// What step t exchanges.
enum class Phase {
  Variance,           // all-reduced gradient, m and v updated (plain Adam)
  CompressedGradient, // the gradient 1-bit compressed, m updated, v kept
  Local,              // frozen v, a local step: nothing exchanged
  Sync,               // frozen v, the accumulated update 1-bit compressed
};

/// The first frozen step: DeepSpeed freezes after the step whose counter
/// exceeds var_freeze_step, never before its first training step.
inline int64_t firstFrozenStep(const Policy &p) {
  return std::max<int64_t>(p.varFreezeStep + 1, 2);
}

/// The counters at the start of step t (t >= 1): the variance policy over
/// steps 1 .. min(t - 1, first frozen - 1), then the local-step policy over
/// the frozen steps before t. O(log t).
inline Counters countersBefore(int64_t t, const Policy &p) {
  Counters c;
  int64_t frozen = firstFrozenStep(p);
  int64_t last = std::min(t - 1, frozen - 1); // unfrozen steps done
  // DeepSpeed's counters of those steps run from 2 to last + 1.
  int64_t s = 2, end = last + 1;
  while (s <= end && c.varInterval <= end) {
    int64_t first = (s + c.varInterval - 1) / c.varInterval * c.varInterval;
    int64_t phaseEnd = first + (p.varUpdateScaler - c.varCounter - 1) *
                                   c.varInterval;
    if (phaseEnd > end) {
      if (first <= end)
        c.varCounter += (end - first) / c.varInterval + 1;
      break;
    }
    c.varCounter = 0;
    c.varInterval *= 2;
    s = phaseEnd + 1;
  }
  int64_t done = std::max<int64_t>(0, t - frozen); // frozen steps done
  int64_t doublings = done / p.localStepScaler;
  c.localCounter = done % p.localStepScaler;
  c.localInterval = doublings >= 62 ? p.localStepClipper
                                    : std::min<int64_t>(p.localStepClipper,
                                                        int64_t(1) << doublings);
  return c;
}

/// DeepSpeed's own update of the counters at the end of step t (its
/// counter t + 1), one step at a time: the runtime keeps the counters this
/// way and checks them against countersBefore.
inline void advance(Counters &c, int64_t t, const Policy &p) {
  if (t < firstFrozenStep(p)) {
    if ((t + 1) % c.varInterval == 0 && ++c.varCounter == p.varUpdateScaler) {
      c.varCounter = 0;
      c.varInterval *= 2;
    }
    return;
  }
  if (++c.localCounter == p.localStepScaler) {
    c.localCounter = 0;
    c.localInterval = std::min(p.localStepClipper, c.localInterval * 2);
  }
}

/// What step t (t >= 1) exchanges.
inline Phase phaseAt(int64_t t, const Policy &p) {
  Counters c = countersBefore(t, p);
  if (t >= firstFrozenStep(p))
    return (t + 1) % c.localInterval == 0 ? Phase::Sync : Phase::Local;
  return (t + 1) % c.varInterval == 0 ? Phase::Variance
                                      : Phase::CompressedGradient;
}

/// The state tensor `zero_one_counters` (5 i64): the four counters, then
/// the bits of the double lrs (the learning rates summed since the last
/// synchronisation). All zero, a fresh state, reads as the counters before
/// step 1.
inline Counters loadCounters(const int64_t *state, double &lrs) {
  Counters c{state[0], state[1], state[2], state[3]};
  std::memcpy(&lrs, &state[4], sizeof lrs);
  return c == Counters{0, 0, 0, 0} ? Counters{} : c;
}
inline void storeCounters(const Counters &c, double lrs, int64_t *state) {
  state[0] = c.varInterval;
  state[1] = c.varCounter;
  state[2] = c.localInterval;
  state[3] = c.localCounter;
  std::memcpy(&state[4], &lrs, sizeof lrs);
}

/// The policy's parameters are valid (each scaler and the clipper >= 1,
/// var_freeze_step >= 0).
inline bool validPolicy(const Policy &p) {
  return p.varFreezeStep >= 0 && p.varUpdateScaler >= 1 &&
         p.localStepScaler >= 1 && p.localStepClipper >= 1;
}

} // namespace ds::zeroone

#endif // DS_SUPPORT_ZEROONE_H
