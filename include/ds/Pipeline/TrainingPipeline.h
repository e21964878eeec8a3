//===- TrainingPipeline.h - the pass sequence of a training step -*- C++
//-*-===//
//
// Part of the ds project.
//
// The passes ds-opt runs on an imported model, built from TrainingOptions,
// and the `ds-train` pass pipeline that runs them from --pass-pipeline
// (its options are the training decisions of TrainingOptions.def).
//
//===----------------------------------------------------------------------===//

#ifndef DS_PIPELINE_TRAININGPIPELINE_H
#define DS_PIPELINE_TRAININGPIPELINE_H

#include "ds/Pipeline/TrainingOptions.h"

#include "mlir/Pass/PassManager.h"

namespace mlir::ds {

/// The memory decisions of one compile, resolved from the options (and, for
/// the searches, chosen by compile()): the recompute mode and its
/// activation budget, and where the optimizer state and the parameters
/// live (none, host or nvme).
struct MemoryChoices {
  std::string recomputeMode = "none";
  int64_t recomputeBudget = 0;
  std::string offloadOptimizer = "none", offloadParam = "none";
  /// Saved activations: none or host.
  std::string offloadActivations = "none";
  std::string nvmePath;
  /// --ds-fuse-optimizer's hoist-operands: ZeRO 1-2's shard copies move
  /// before the fused update (compile() turns it off where that raises the
  /// planned peak).
  bool hoistUpdateOperands = true;
};

/// Cleanups and tensor parallelism, on the whole module (before a pipeline
/// split).
void addPartitionPasses(OpPassManager &pm, const TrainingOptions &options);
/// One stage's training step: precision, autodiff, recompute, ZeRO, the
/// optimizer, cleanups and offload.
void addTrainingPasses(OpPassManager &pm, const TrainingOptions &options,
                       const MemoryChoices &choices);
/// Lowering to the buffer program: dsrt, overlapped collectives, the
/// memory plan.
void addLoweringPasses(OpPassManager &pm, const TrainingOptions &options);

/// Resolves the fixed memory choices (--recompute none, full, every-layer
/// or budget=SIZE; --offload-optimizer/--offload-param); the searches
/// (--recompute=auto, --offload=auto) are left at their starting point.
llvm::Expected<MemoryChoices> resolveMemoryChoices(const TrainingOptions &o);

/// The pass sequence ds-opt runs for `options` (one pipeline stage; the
/// memory searches need compile()); lowered when a plan or dsrt is
/// emitted.
llvm::Error buildTrainingPipeline(OpPassManager &pm,
                                  const TrainingOptions &options);

/// Registers `ds-train`.
void registerTrainingPipeline();

} // namespace mlir::ds

#endif // DS_PIPELINE_TRAININGPIPELINE_H
