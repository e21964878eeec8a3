//===- GradAccumulate.h - a pipeline stage's local gradient sum -*- C++ -*-===//
//
// Part of the ds project.
//
// A pipeline stage runs its update section once per step (after the last
// micro-batch): its gradients are summed locally over the micro-batches
// and reduced over the data-parallel ranks once. The data-parallel pass
// builds the sum and the section mark; the optimizer pass divides by the
// micro-batch count, counts optimizer steps and zeroes the sums.
// docs/parallel.md (pipeline parallelism).
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_GRADACCUMULATE_H
#define DS_TRANSFORMS_GRADACCUMULATE_H

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::ds::accumulate {

/// The function attribute: the micro-batches a step's gradients are summed
/// over before the update section (which then runs once per step).
inline constexpr const char *kAccumulateOnce = "ds.accumulate_once";
/// The argument attribute of a local gradient sum.
inline constexpr const char *kAccumulator = "ds.grad_sum";

/// Adds each gradient result to a full-size f32 accumulator (a new state
/// argument "<param>.grad_accum" updated in place), makes the sum the
/// gradient result, and inserts the update section's `ds.pipe_mark`
/// after them: collectives built before the terminator afterwards reduce
/// the sums once per step.
void sumLocally(func::FuncOp func, int64_t accumSteps);

/// The optimizer's view of a function `sumLocally` rewrote: the step
/// counter as optimizer steps, whether this run is a step's last
/// micro-batch, and the factor a gradient sum is scaled by (1/M).
struct StepCounter {
  Value updates;   // (step - 1) / M + 1, i64 scalar
  Value lastMicro; // (step - 1) % M == M - 1, i1 scalar
  Value inverse;   // 1 / M, f32 scalar
};

/// The micro-batches of `func`'s gradient sums (0: it has none).
int64_t accumulatedSteps(func::FuncOp func);

/// Builds the counters from the run counter `step` (i64 scalar).
StepCounter countSteps(OpBuilder &b, Location loc, Value step,
                       int64_t accumSteps);

/// Zeroes each accumulator once its sum was reduced: for every result
/// updating an argument marked `kAccumulator`, a second update to zero
/// (on the last micro-batch, the only one that runs the update section).
void zeroSums(func::FuncOp func, OpBuilder &b, Value lastMicro,
              SmallVectorImpl<Value> &results,
              SmallVectorImpl<DictionaryAttr> &resultAttrs);

} // namespace mlir::ds::accumulate

#endif // DS_TRANSFORMS_GRADACCUMULATE_H
