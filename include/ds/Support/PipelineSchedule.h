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
  /// The model chunk (stage program) it runs: the rank's stage, or with
  /// the interleaved schedule one of its V chunks (chunk c runs on pipeline
  /// rank c mod P).
  int chunk = 0;
};

/// Each pipeline rank's order of work: "gpipe" (every forward, then every
/// backward), "1f1b" (P - s - 1 forwards to fill, then one forward and one
/// backward, then the remaining backwards) or "interleaved" with `virt`
/// chunks per rank (Megatron's interleaved 1F1B: forwards in groups of P
/// micro-batches per chunk, the backwards likewise from the last chunk;
/// M must be a multiple of P). Empty for an unknown kind or a bad M.
std::vector<std::vector<PipeStep>>
pipelineSchedule(const std::string &kind, int stages, int micro, int virt = 1);

/// Micro-batches a stage holds between their forward and backward at most
/// (the activation stash's slots).
int stashSlots(const std::vector<PipeStep> &stage, int chunk = -1);

/// Copies of the forward state the runtime keeps aside at most for this
/// order: the arena holds the latest forward's state, which is copied out
/// only when another section runs before its backward.
int stashCopies(const std::vector<PipeStep> &stage, int chunk = -1);

/// One item of the schedule as simulated: its rank, and when it ran.
struct PipeItemTime {
  int rank = 0;
  PipeStep step;
  double start = 0, end = 0;
};

struct PipeSimulation {
  double stepSeconds = 0; // when the last stage's last item ends
  double bubble = 0;      // idle over stages x step time
  std::vector<PipeItemTime> items; // each item, in the order it was placed
};

/// Runs the schedule with each chunk's forward and backward time per
/// micro-batch (and `linkSeconds` per hand-over between chunks): every item
/// waits for its rank and for its input from the neighbouring chunk.
/// `stepSeconds` is 0 when the schedule cannot complete (a deadlock).
/// `extra` (optional, shaped as `s`): seconds item i of rank r takes beyond
/// its chunk's forward or backward (the stash's copies, an update section
/// run after a micro-batch's backward).
PipeSimulation simulatePipeline(
    const std::vector<std::vector<PipeStep>> &s,
    const std::vector<double> &forward, const std::vector<double> &backward,
    double linkSeconds = 0,
    const std::vector<std::vector<double>> *extra = nullptr);

/// The stash copies ds-run makes for one rank's order (the rules of
/// stashCopies, per chunk): for each item, whether it first saves the
/// micro-batch the chunk's arena holds (a forward, or another micro-batch's
/// backward, while the arena holds a forward's state) and whether it
/// restores its own micro-batch (a backward whose state is not in the
/// arena).
struct StashTraffic {
  bool save = false, restore = false;
};
std::vector<StashTraffic> stashTraffic(const std::vector<PipeStep> &stage);

/// The byte ranges of the arena (space 1) and host arena (space 5) a stage
/// plan's forward section leaves for its backward section: the bytes
/// written before `split` and read at or after it (or outputs, read after
/// the step) before anything after the split writes them, merged.
struct ByteRange {
  int space;
  uint64_t begin, end;
};
std::vector<ByteRange> stashRanges(const plan::Plan &p, int split);

} // namespace ds

#endif // DS_SUPPORT_PIPELINESCHEDULE_H
