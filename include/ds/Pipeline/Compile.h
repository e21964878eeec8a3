//===- Compile.h - ds as a library: model + options -> plan -----*- C++ -*-===//
//
// Part of the ds project.
//
// compile() runs what ds-opt runs on a model.onnx: the training pipeline
// for TrainingOptions, the memory searches (--recompute=auto,
// --offload=auto), the device-memory check and the plan. It keeps no
// global state and can be called many times in one process; failures come
// back as llvm::Error (diagnostics go through the context's handlers first).
//
//===----------------------------------------------------------------------===//

#ifndef DS_PIPELINE_COMPILE_H
#define DS_PIPELINE_COMPILE_H

#include "ds/Pipeline/TrainingOptions.h"
#include "ds/Pipeline/TrainingPipeline.h"
#include "ds/Transforms/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace mlir::ds {

struct ClusterDescription; // ds/Pipeline/Cluster.h

/// The error of a failure already reported through the context's
/// diagnostics: callers print nothing more.
class ReportedError : public llvm::ErrorInfo<ReportedError> {
public:
  static char ID;
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;
};

/// What a compile reads and writes beside its options.
struct CompileRequest {
  /// The model (and where the plan finds its weights).
  std::string modelPath;
  /// Where emit=plan writes the plan; empty: no plan file is written.
  std::string planPath;
  /// emit=plan: when set, the plan's bytes go here instead of a file
  /// (planPath then only names the folder the weights path is relative
  /// to; ds.initialize compiles in-process).
  std::string *planBytes = nullptr;
  /// Recorded in the plan (ds-run --info prints it).
  std::string commandLine;
  /// Passes to run after the training step and before lowering (ds-opt's
  /// command-line passes).
  std::function<LogicalResult(PassManager &)> extraPasses;
};

struct CompileResult {
  /// The IR --emit asked for (lowered for a plan or dsrt).
  OwningOpRef<ModuleOp> module;
  /// The memory choices made (after the searches).
  MemoryChoices choices;
  /// The planned per-rank device peak (-1: not planned) and the device size
  /// it must fit (0: none given).
  int64_t perRankPeak = -1, deviceMemory = 0;
  /// The searches' account, one line each.
  std::string searchLog;
  /// Pipeline parallelism: the stages of the split.
  PipelineSplit split;
  /// emit=plan: the footprint report and the cost estimate (JSON objects
  /// with --report=json), when a report was asked for.
  std::string footprint, cost;
  /// --cluster: the cluster (parsed before the compile) and the predicted
  /// step (lines, or a JSON object with --report=json).
  std::shared_ptr<const ClusterDescription> cluster;
  std::string predicted;
  /// What the compile warns about (an export without a trainable record,
  /// ...), each once, for the caller to print when the compile succeeds.
  std::vector<std::string> notices;
};

/// Imports `modelPath` with the options' loss, input shapes and
/// training_info choice.
FailureOr<OwningOpRef<ModuleOp>> importModel(MLIRContext &context,
                                             const TrainingOptions &options,
                                             llvm::StringRef modelPath);

/// The config's micro-batch against the model's batch.
llvm::Error checkConfigBatch(ModuleOp model, const TrainingOptions &options);

/// Compiles an imported model (left unchanged); checks `options` with
/// validateTrainingOptions first.
llvm::Expected<CompileResult> compile(ModuleOp model,
                                      const TrainingOptions &options,
                                      const CompileRequest &request);
/// Imports request.modelPath into `context`, then compiles it.
llvm::Expected<CompileResult> compile(MLIRContext &context,
                                      const TrainingOptions &options,
                                      const CompileRequest &request);

/// Bytes from "80GiB", "512MiB", "1.5GB", "64KiB" or a plain number.
std::optional<int64_t> parseBytes(llvm::StringRef text);
/// "N bytes (X.X MiB)".
std::string mib(int64_t bytes);
/// A lowered plan's per-rank device peak: parameters, buffers and optimizer
/// state not offloaded, plus the planned arena (the largest stage's).
int64_t perRankPeak(ModuleOp module);

/// What ds-opt --report prints after the plan (the footprint, the cost
/// estimate, the searches and the recompute choice; one JSON object with
/// --report=json); empty without --report.
std::string formatReport(const CompileResult &result,
                         const TrainingOptions &options);

} // namespace mlir::ds

#endif // DS_PIPELINE_COMPILE_H
