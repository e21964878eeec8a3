//===- Pipeline.h - cutting the forward graph into pipeline stages -*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_PIPELINE_H
#define DS_TRANSFORMS_PIPELINE_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace mlir::ds {

/// One stage of a pipeline split: the forward ops [first, last) of the
/// imported @forward, their cost-model FLOPs (forward only) and the bytes
/// sent to the next stage per micro-batch.
struct PipelineStage {
  int64_t firstOp = 0, lastOp = 0;
  int64_t flops = 0, sendBytes = 0, paramBytes = 0;
};

struct PipelineSplit {
  std::vector<PipelineStage> stages;
  /// Places the forward can be cut at: where the fewest activations cross
  /// (a transformer's residual stream between sublayers).
  int64_t cutPoints = 0;
  /// Parameters held by more than one stage (tied weights).
  std::vector<std::string> tied;
};

/// Cuts `module`'s @forward into `stages` contiguous stages at the cut
/// points (where the fewest activations cross), each holding a trainable
/// parameter, balancing their FLOPs (a dynamic program minimising the largest
/// stage), and replaces the module's body with one nested module per stage
/// (`@stage0`, ...), each with its own @forward: `ds.pipe_recv` of what the
/// previous stage sends, the stage's ops, `ds.pipe_send` of what the next
/// one needs; only the last stage returns the loss. Parameters used by
/// several stages are given to each, marked `ds.tied_peers`. Fails with an
/// error naming the numbers when the model cannot be cut into that many
/// stages.
/// With `ranks` < `stages` (the interleaved schedule), stage c runs on
/// pipeline rank c mod `ranks`, and hand-overs name their peer by rank.
FailureOr<PipelineSplit> splitPipeline(ModuleOp module, int64_t stages,
                                       int64_t ranks = 0);

/// The nested stage modules of a split module, in stage order (empty when
/// `module` is not split).
SmallVector<ModuleOp> pipelineStages(ModuleOp module);

} // namespace mlir::ds

#endif // DS_TRANSFORMS_PIPELINE_H
