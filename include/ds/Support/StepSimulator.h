//===- StepSimulator.h - a plan's step time on a cluster --------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// The predicted step of a compiled plan on a cluster (docs/planner.md):
// each rank's schedule as an event simulation on compute, communication,
// copy, NVMe and host streams (timeline() with the cluster's rules), and
// for a pipeline the stages' forward and backward times run through the
// plan's schedule (1F1B, GPipe, interleaved) with the hand-overs between
// them. No I/O: a planner calls it in process for each candidate.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_STEPSIMULATOR_H
#define DS_SUPPORT_STEPSIMULATOR_H

#include "ds/Support/Cluster.h"
#include "ds/Support/PlanTimeline.h"

namespace ds {

/// What limits the step most.
enum class Bottleneck { Compute, Communication, Offload, Bubble };
const char *bottleneckName(Bottleneck b); // "compute", ...

struct StepPrediction {
  double stepSeconds = 0;
  /// The busiest rank's kernel time, the communication and offload waits
  /// its compute stream sees, and the pipeline's idle time per rank (the
  /// bubble fraction times the pipeline's part of the step).
  double computeSeconds = 0, exposedCommSeconds = 0, offloadWaitSeconds = 0,
         bubbleSeconds = 0, bubbleFraction = 0;
  /// Micro-batches per step: gradient accumulation, or the pipeline's.
  int microBatches = 1;
  /// Executed FLOPs per rank and step (recomputation included), tokens
  /// per step over the data-parallel ranks, and their rates.
  double flopsPerRank = 0, tokensPerStep = 0, tokensPerSecond = 0;
  /// FLOPs per rank over the step time and the device's peak at the
  /// compute precision.
  double peakFlops = 0, mfu = 0;
  Bottleneck bottleneck = Bottleneck::Compute;
  /// A plan of a compressed optimizer (docs/compression.md): the figures
  /// above are its steady state after the freeze (the compressed
  /// exchanges; 0/1 Adam's compressed-gradient steps, its local steps
  /// exchanging less), and this its warm-up step (the plain collectives
  /// of the same instructions).
  bool compressed = false;
  double warmupStepSeconds = 0;
  /// The predicted schedule (for a trace): a flat plan's micro-batch, or
  /// a pipeline's items (forward and backward sections) and updates on
  /// each pipeline rank (TimelineEvent::rank).
  Timeline timeline;
};

/// The step of `p` (a flat plan, or a pipeline's container of stage plans)
/// on `c`; `precision` is the compile's (the peak MFU is measured
/// against; each GEMM runs at its operands' type). A flat plan runs its
/// program once per accumulation step (its optimizer's accum_steps). The
/// caller checks checkClusterForPlan first. A compressed optimizer's
/// plan is timed after the freeze, its warm-up step beside it.
StepPrediction predictStep(const plan::Plan &p, const ClusterSpec &c,
                           Precision precision);

} // namespace ds

#endif // DS_SUPPORT_STEPSIMULATOR_H
