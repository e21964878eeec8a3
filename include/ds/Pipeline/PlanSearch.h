//===- PlanSearch.h - --plan=auto: the layout search ------------*- C++ -*-===//
//
// Part of the ds project.
//
// ds-opt model.onnx --plan=auto --cluster=FILE|PRESET --global-batch=N
// searches data, tensor, pipeline and sequence parallel degrees, the ZeRO
// stage, the micro-batch and gradient accumulation, the pipeline schedule,
// recompute and optimizer offload for the cluster (docs/planner.md,
// "--plan=auto"). Every ranked candidate is compiled and fits by its exact
// memory plan; the ranking is the step simulator's predicted step time.
//
//===----------------------------------------------------------------------===//

#ifndef DS_PIPELINE_PLANSEARCH_H
#define DS_PIPELINE_PLANSEARCH_H

#include "ds/Pipeline/Compile.h"

#include "llvm/Support/raw_ostream.h"

namespace mlir::ds {

/// What a search found, for the caller to print.
struct PlanSearchResult {
  /// The chosen plan's compile (its plan written to request.planPath) and
  /// the options it was compiled with.
  CompileResult chosen;
  TrainingOptions options;
  /// The ranked table and the rejected families (text), or with
  /// --report=json the report with plan.candidates[] (one JSON object).
  std::string output;
  /// Candidates enumerated and compiles run.
  int candidates = 0, compiles = 0;
};

/// Runs the search for `options` (options.planMode == "auto") on the
/// model request.modelPath, writes the best plan to request.planPath and
/// the --plot-candidates SVG; progress lines go to `progress`. Errors
/// (bad input, nothing fits) come back as one llvm::Error.
llvm::Expected<PlanSearchResult> searchPlan(MLIRContext &context,
                                            const TrainingOptions &options,
                                            const CompileRequest &request,
                                            llvm::raw_ostream &progress);

/// Without --plan=auto: an error when a flag that only the search reads
/// (--global-batch, --explain, --plot-candidates, --plan-compiles) is given.
llvm::Error checkSearchFlags(const TrainingOptions &options);

} // namespace mlir::ds

#endif // DS_PIPELINE_PLANSEARCH_H
