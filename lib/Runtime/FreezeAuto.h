//===- FreezeAuto.h - ds-run's freeze_step auto decision --------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// 1-bit Adam's and 1-bit LAMB's `freeze_step: "auto"`
// (docs/compression.md): after every warm-up step the training loop
// measures ||v|| (the global norm of the second moments), applies
// ds::freezeauto's criterion and, the first time it holds, tells the
// executors the last warm-up step. Every rank of
// every pipeline stage takes the same decision: the partial sums are
// all-gathered over the world and added in rank order. The norms of the
// window and the decision are checkpointed (with pipelines, per stage).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_FREEZEAUTO_H
#define DS_RUNTIME_FREEZEAUTO_H

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ds::rt {

struct RunContext;

struct FreezeAuto {
  bool active = false;       // the plan's kernels are marked freeze_auto
  int64_t decided = -1;      // the last warm-up step, once decided
  std::vector<double> norms; // ||v|| after the last K+1 steps, oldest first
  double lastNorm = NAN, lastChange = NAN; // of the last step measured
  long long measuredAt = 0;                // (--log-json's v_norm)
  /// Per model chunk: the tied `exp_avg_sq` a lower chunk counts.
  std::vector<std::set<std::string>> skip;
};

/// Before step 1 (and before a resume): active when the plan asks for it;
/// the executors learn that the decision is pending.
bool startFreezeAuto(RunContext &ctx, FreezeAuto &fa);
/// After step `s` (before its checkpoint): measures and, where the
/// criterion holds, decides and prints one line.
/// `progressBar`: the line ends the bar's line first.
bool observeFreezeAuto(RunContext &ctx, FreezeAuto &fa, long long s,
                       bool progressBar);
/// The checkpoint's "state" entries, and the resume from them.
void freezeAutoState(const FreezeAuto &fa,
                     std::map<std::string, std::string> &state);
bool restoreFreezeAuto(RunContext &ctx, FreezeAuto &fa,
                       const std::map<std::string, std::string> &state,
                       std::string &err);

} // namespace ds::rt

#endif // DS_RUNTIME_FREEZEAUTO_H
