//===- PipelineSchedule.h - pipeline schedules and their bubble -*- C++ -*-===//
//
// Part of the ds project (plain C++, shared by ds-opt and ds-run).
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_PIPELINESCHEDULE_H
#define DS_SUPPORT_PIPELINESCHEDULE_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ds {
namespace plan {
class Plan;
}

/// One item of a stage's schedule: the forward or backward section of a
/// micro-batch.
struct PipeStep {
  bool forward = true;
  int micro = 0;
};

/// Each stage's order of work: "gpipe" (every forward, then every
/// backward) or "1f1b" (P - s - 1 forwards to fill, then one forward and one
/// backward, then the remaining backwards). Empty for an unknown kind.
std::vector<std::vector<PipeStep>> pipelineSchedule(const std::string &kind,
                                                    int stages, int micro);

/// Micro-batches a stage holds between their forward and backward at most
/// (the activation stash's slots).
int stashSlots(const std::vector<PipeStep> &stage);

/// Copies of the forward state the runtime keeps aside at most for this
/// order: the arena holds the latest forward's state, which is copied out
/// only when another section runs before its backward.
int stashCopies(const std::vector<PipeStep> &stage);

struct PipeSimulation {
  double stepSeconds = 0; // when the last stage's last item ends
  double bubble = 0;      // idle over stages x step time
};

/// Runs the schedule with each stage's forward and backward time per
/// micro-batch (and `linkSeconds` per hand-over between stages): every item
/// waits for its stage and for its input from the neighbour.
PipeSimulation simulatePipeline(const std::vector<std::vector<PipeStep>> &s,
                                const std::vector<double> &forward,
                                const std::vector<double> &backward,
                                double linkSeconds = 0);

/// The byte ranges of the arena (space 1) and host arena (space 5) a stage
/// plan's forward section leaves for its backward section: the buffers
/// written before `split` and read at or after it (or outputs), merged.
struct ByteRange {
  int space;
  uint64_t begin, end;
};
std::vector<ByteRange> stashRanges(const plan::Plan &p, int split);

} // namespace ds

#endif // DS_SUPPORT_PIPELINESCHEDULE_H
