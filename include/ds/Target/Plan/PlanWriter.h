//===- PlanWriter.h - dsrt module to plan.bin -------------------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TARGET_PLAN_PLANWRITER_H
#define DS_TARGET_PLAN_PLANWRITER_H

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>
#include <vector>

namespace ds {
struct ClusterSpec;
struct StepPrediction;
} // namespace ds

namespace mlir::ds {

struct PlanWriteOptions {
  /// The ONNX file the parameters' initial values come from.
  std::string weightsPath;
  /// Options the plan was compiled with (echoed in the plan).
  std::map<std::string, std::string> compileOptions;
  /// Ranks the plan is compiled for (mpirun -np must match).
  int64_t worldSize = 1;
  /// NVMe offload: the swap files' folder and the I/O shape (written when
  /// some storage is on NVMe).
  std::string nvmePath;
  uint32_t aioBlockSize = 1 << 20, aioQueueDepth = 8, aioThreads = 1;
  /// Pipeline parallelism (a module split into stage modules): the
  /// micro-batches, the schedule, the tied parameters and, per stage, the
  /// forward op range, FLOPs and bytes sent (for the report).
  struct Pipeline {
    int64_t microBatches = 1, virtualStages = 1;
    std::string schedule = "1f1b";
    std::vector<std::string> tied;
    struct Stage {
      int64_t firstOp = 0, lastOp = 0, flops = 0, sendBytes = 0;
    };
    std::vector<Stage> stages;
    int64_t cutPoints = 0;
    /// When set, receives the largest pipeline rank's peak (its chunks'
    /// arenas, parameters and state, and activation stash copies), the
    /// figure checked against views.budget.
    uint64_t *rankPeak = nullptr;
  } pipeline;
  /// predictPlan: when set, receives the host bytes of a rank (host
  /// storage and host arena; a pipeline's largest stage), which the
  /// --plan=auto search checks against the cluster's host memory.
  uint64_t *hostPeak = nullptr;
  /// When set, receives the plan's per-rank memory and communication
  /// report (ds-opt --report).
  std::string *report = nullptr;
  /// The report as one JSON object instead of a table.
  bool reportJson = false;
  /// The cost model's view of the plan (ds-opt --report, --emit-trace,
  /// --emit-memory-plot): the machine's rates, where to write the trace
  /// and the plot (empty: not), the budget to mark, the plot's title.
  struct Views {
    double flopsPerSecond = 180e9, bytesPerSecond = 20e9,
           linkBytesPerSecond = 5e9;
    /// Offload transfers: host<->device and NVMe rates.
    double pcieBytesPerSecond = 25e9, nvmeBytesPerSecond = 3e9;
    std::string tracePath, memoryPlotPath, plotTitle;
    uint64_t budget = 0;
    std::string *costReport = nullptr; // receives the estimate's lines
    std::string *costJson = nullptr;   // or the estimate as a JSON object
    /// --cluster: the cluster the step is predicted on (null: none), its
    /// name in errors, the compile's precision, and where the prediction
    /// goes (lines, or a JSON object with reportJson). With a cluster the
    /// trace is the predicted schedule.
    const ::ds::ClusterSpec *cluster = nullptr;
    std::string clusterSource, precision = "fp32";
    std::string *predicted = nullptr;
  } views;
};

/// Serializes the planned dsrt `@forward` of `module` to `planPath`
/// (written to a temporary file, then renamed). Errors are emitted on the
/// module. With `bytes` the plan (header and payload, as the file would
/// hold) goes there and no file is written; `planPath` still fixes the
/// folder the weights path is relative to.
LogicalResult writePlan(ModuleOp module, llvm::StringRef planPath,
                        const PlanWriteOptions &options,
                        std::string *bytes = nullptr);

/// The predicted step of the lowered `module` (flat, or a pipeline's
/// stage modules) on `cluster`, built in memory as writePlan would build
/// it (options.views and the report fields are ignored; no file is read or
/// written). `precision` is the compile's. Fails with an error on `module`
/// when the cluster cannot time the plan (checkClusterForPlan). For a
/// pipeline, options.pipeline.rankPeak receives its largest rank's peak.
/// The --plan=auto search calls it for every candidate.
LogicalResult predictPlan(ModuleOp module, const PlanWriteOptions &options,
                          const ::ds::ClusterSpec &cluster,
                          llvm::StringRef precision,
                          ::ds::StepPrediction &out);

} // namespace mlir::ds

#endif // DS_TARGET_PLAN_PLANWRITER_H
