//===- CompileSteps.h - compile()'s pieces, shared inside the library -----===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_LIB_PIPELINE_COMPILESTEPS_H
#define DS_LIB_PIPELINE_COMPILESTEPS_H

#include "ds/Pipeline/Compile.h"

#include "mlir/IR/BuiltinAttributes.h"

namespace mlir::ds {

/// Runs the training pipeline on copies of one imported model, with
/// varying memory choices (the searches compile many plans).
class StepCompiler {
public:
  StepCompiler(ModuleOp model, const TrainingOptions &options,
               const CompileRequest &request, const int &errors)
      : model(model), options(options), request(request), errors(errors) {}

  /// The pipeline on a copy of the model with `choices`; `lower` through
  /// the memory plan. Records the last pipeline split.
  LogicalResult run(OwningOpRef<ModuleOp> &out, const MemoryChoices &choices,
                    bool lower);
  /// run() lowered, and the plan's per-rank peak (-1 on failure).
  int64_t peakOf(OwningOpRef<ModuleOp> &out, const MemoryChoices &choices);

  const TrainingOptions &getOptions() const { return options; }
  PipelineSplit lastSplit;

private:
  ModuleOp model;
  const TrainingOptions &options;
  const CompileRequest &request;
  const int &errors;
};

/// The model's recompute summary attribute (ds.recompute), or null.
DictionaryAttr recomputeSummary(ModuleOp module);

/// --offload=auto: offloads what recompute alone cannot fit under `limit`
/// (the optimizer state, then at ZeRO-3 the parameters) into `choices`.
LogicalResult searchOffload(StepCompiler &compiler, int64_t limit,
                            MemoryChoices &choices, std::string &log);

/// --recompute=budget=SIZE or auto: the least recompute whose planned peak
/// fits `budget`; sets the choices, and `searched` (with its peak) to the
/// lowered plan of the choice when one was compiled.
llvm::Error searchRecompute(StepCompiler &compiler, int64_t budget,
                            MemoryChoices &choices,
                            OwningOpRef<ModuleOp> &searched,
                            int64_t &searchedPeak, std::string &log);

/// Writes request.planPath for a lowered `result`, filling the report
/// fields of `result`.
LogicalResult writePlanFile(CompileResult &result,
                            const TrainingOptions &options,
                            const CompileRequest &request);

} // namespace mlir::ds

#endif // DS_LIB_PIPELINE_COMPILESTEPS_H
