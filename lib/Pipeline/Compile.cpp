//===- Compile.cpp - ds as a library: model + options -> plan -------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "CompileSteps.h"

#include "ds/Dialect/Ds/IR/DsDialect.h"
#include "ds/Import/OnnxImporter.h"
#include "ds/Pipeline/Cluster.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::ds;

char ReportedError::ID = 0;

void ReportedError::log(llvm::raw_ostream &os) const {
  os << "failed (reported as diagnostics)";
}

std::error_code ReportedError::convertToErrorCode() const {
  return llvm::inconvertibleErrorCode();
}

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Error reported() { return llvm::make_error<ReportedError>(); }

/// The checks of the options that need no model, beyond
/// validateTrainingOptions: offload, the cost model's rates, the NVMe
/// requests, the device size and what the memory searches support. Sets
/// `limit` to the device size.
llvm::Error checkMemoryOptions(const TrainingOptions &o, const MemoryChoices &c,
                               std::optional<int64_t> &limit) {
  if (o.offloadMode != "none" && o.offloadMode != "auto")
    return fail("--offload='" + o.offloadMode + "' is not none or auto");
  std::optional<int64_t> pcie = parseBytes(o.pcieBandwidth),
                         nvme = parseBytes(o.nvmeBandwidth),
                         block = parseBytes(o.aioBlockSize);
  if (!pcie || *pcie <= 0 || !nvme || *nvme <= 0)
    return fail("--pcie-bandwidth and --nvme-bandwidth are positive sizes "
                "per second (e.g. 25GB), got '" +
                o.pcieBandwidth + "' and '" + o.nvmeBandwidth + "'");
  if (!block || *block < 4096 || *block % 4096 || *block > (int64_t(1) << 30) ||
      o.aioQueueDepth < 1 || o.aioQueueDepth > 1024 || o.aioThreads < 1 ||
      o.aioThreads > 64)
    return fail("--aio-block-size must be a multiple of 4096 bytes up to "
                "1GiB, --aio-queue-depth 1..1024 and --aio-threads 1..64 "
                "(got '" +
                o.aioBlockSize + "', " + llvm::Twine(o.aioQueueDepth) +
                " and " + llvm::Twine(o.aioThreads) + ")");
  if (!o.deviceMemory.empty() && !(limit = parseBytes(o.deviceMemory)))
    return fail("--device-memory='" + o.deviceMemory +
                "' is not a size (e.g. 80GiB, 512MiB, 1000000)");
  llvm::StringRef mode = c.recomputeMode;
  if (o.pipelineParallel > 1 &&
      (mode == "budget" || (mode == "auto" && limit) ||
       o.offloadMode == "auto"))
    return fail("--pipeline-parallel=" + llvm::Twine(o.pipelineParallel) +
                " with a memory search (--recompute=auto with "
                "--device-memory, budget=SIZE, or --offload=auto) is not "
                "supported yet: give --recompute=none, full or every-layer");
  if (mode != "none" && !o.training())
    return fail("--recompute=" + o.recompute +
                " is for training (give --optimizer=...)");
  if ((!o.emitTrace.empty() || !o.emitMemoryPlot.empty()) &&
      o.emitKind != "plan")
    return fail("--emit-trace and --emit-memory-plot come with a plan "
                "(--emit=plan, the default)");
  if (!o.training() &&
      (c.offloadOptimizer != "none" || c.offloadParam != "none" ||
       c.offloadActivations != "none"))
    return fail("offload is for training (give --optimizer=...)");
  if (o.offloadMode == "auto" && o.emitKind != "mlir-import" &&
      (!limit || !o.training()))
    return fail("--offload=auto fits --device-memory in a training plan: "
                "give both --device-memory and --optimizer");
  return llvm::Error::success();
}

/// The device-memory check of the final plan: its peak (planned now if
/// the emitted IR is not lowered) against `limit`.
llvm::Error checkPeak(StepCompiler &compiler, CompileResult &result,
                      std::optional<int64_t> limit, int64_t searchedPeak,
                      bool lowered) {
  const TrainingOptions &o = compiler.getOptions();
  if (lowered)
    result.perRankPeak = perRankPeak(*result.module);
  else if (searchedPeak >= 0)
    result.perRankPeak = searchedPeak;
  if (!lowered && limit && result.perRankPeak < 0) {
    OwningOpRef<ModuleOp> probe;
    if ((result.perRankPeak = compiler.peakOf(probe, result.choices)) < 0)
      return reported();
  }
  if (!limit || result.perRankPeak <= *limit)
    return llvm::Error::success();
  int64_t minimum = result.perRankPeak;
  MemoryChoices full = result.choices;
  full.recomputeMode = "full";
  full.recomputeBudget = 0;
  OwningOpRef<ModuleOp> probe;
  if (o.training())
    if (int64_t p = compiler.peakOf(probe, full); p >= 0)
      minimum = std::min(minimum, p);
  return fail("the plan needs " + mib(result.perRankPeak) +
              " per rank, more than --device-memory=" + o.deviceMemory + " (" +
              mib(*limit) + "); the minimum feasible is " + mib(minimum) +
              (o.training() ? " (--recompute=full)" : ""));
}

/// ZeRO 1-2 with --fuse-optimizer: the fused update reads every shard copy
/// and gradient shard at once, where one kernel per parameter frees each
/// gradient at its update. Where that raises the planned peak, the plan
/// without the moved copies (updates fused only where their operands
/// already exist) is kept instead. `result.module` is the plan (lowered)
/// or the IR (not lowered, then compiled again with the choice made).
LogicalResult preferLowerPeak(StepCompiler &compiler, CompileResult &result,
                              bool lowered) {
  const TrainingOptions &o = compiler.getOptions();
  if (!o.training() || !o.fuseOptimizer || o.zeroStage < 1 ||
      o.zeroStage > 2 || !result.choices.hoistUpdateOperands)
    return success();
  // Nothing moved (16-bit, clipped or accumulated updates, one parameter):
  // the compile without the moves is this one.
  bool moved = false;
  result.module->walk([&](ModuleOp m) {
    moved |= m->hasAttr(attrs::kMovedUpdateOperands);
  });
  if (!moved)
    return success();
  OwningOpRef<ModuleOp> probe, other;
  int64_t fused = lowered ? perRankPeak(*result.module)
                          : compiler.peakOf(probe, result.choices);
  MemoryChoices apart = result.choices;
  apart.hoistUpdateOperands = false;
  int64_t peak = compiler.peakOf(other, apart);
  if (fused < 0 || peak < 0)
    return failure();
  if (peak >= fused)
    return success();
  result.searchLog += "fuse-optimizer: ZeRO " + std::to_string(o.zeroStage) +
                      "'s shard copies stay at their updates (planned peak " +
                      std::to_string(peak) + " instead of " +
                      std::to_string(fused) + " bytes)\n";
  result.choices = apart;
  if (lowered) {
    result.module = std::move(other);
    return success();
  }
  return compiler.run(result.module, apart, /*lower=*/false);
}
} // namespace

LogicalResult StepCompiler::run(OwningOpRef<ModuleOp> &out,
                                const MemoryChoices &choices, bool lower) {
  MLIRContext *context = model.getContext();
  out = OwningOpRef<ModuleOp>(model.clone());
  PassManager pre(context);
  addPartitionPasses(pre, options);
  if (failed(pre.run(*out)) || errors)
    return failure();
  // Pipeline parallelism: the rest runs on each stage's module.
  SmallVector<ModuleOp> targets{*out};
  if (options.pipelineParallel > 1) {
    FailureOr<PipelineSplit> split =
        splitPipeline(*out, options.pipelineParallel * options.virtualStages,
                      options.pipelineParallel);
    if (failed(split) || errors)
      return failure();
    lastSplit = *split;
    targets = pipelineStages(*out);
  }
  for (ModuleOp target : targets) {
    PassManager pm(context);
    addTrainingPasses(pm, options, choices);
    if (request.extraPasses && failed(request.extraPasses(pm)))
      return failure();
    if (lower)
      addLoweringPasses(pm, options);
    if (failed(pm.run(target)) || errors)
      return failure();
  }
  return success();
}

int64_t StepCompiler::peakOf(OwningOpRef<ModuleOp> &out,
                             const MemoryChoices &choices) {
  if (failed(run(out, choices, /*lower=*/true)))
    return -1;
  return perRankPeak(*out);
}

FailureOr<OwningOpRef<ModuleOp>>
mlir::ds::importModel(MLIRContext &context, const TrainingOptions &options,
                      llvm::StringRef modelPath) {
  ImportOptions importOptions;
  importOptions.lossName = options.lossName;
  importOptions.runTrainingInfo = options.trainingInfo;
  importOptions.allowEvalExport = options.allowEvalExport;
  importOptions.batchSize = options.configMicroBatch;
  importOptions.updateRunningStats = options.training() || options.trainingInfo;
  for (const std::string &spec : options.inputShapes) {
    std::string err = parseInputShape(spec, importOptions);
    if (!err.empty())
      return emitError(UnknownLoc::get(&context)) << err;
  }
  if (options.printTiming)
    importOptions.onPhase = [](llvm::StringRef phase, double ms) {
      llvm::errs() << "import " << phase << ": " << llvm::format("%.1f", ms)
                   << " ms\n";
    };
  return importOnnxFile(&context, modelPath, importOptions);
}

llvm::Error mlir::ds::checkConfigBatch(ModuleOp model,
                                       const TrainingOptions &options) {
  if (options.configMicroBatch <= 0)
    return llvm::Error::success();
  // The config's micro-batch is the plan's per-rank batch: the leading
  // dimension of the model's data inputs.
  int64_t modelBatch = -1;
  model->walk([&](func::FuncOp f) {
    for (unsigned i = 0; i < f.getNumArguments() && modelBatch < 0; ++i)
      if (f.getArgAttr(i, "ds.input"))
        if (auto t = dyn_cast<RankedTensorType>(f.getArgumentTypes()[i]);
            t && t.getRank() > 0)
          modelBatch = t.getDimSize(0);
  });
  if (modelBatch < 0 || modelBatch == options.configMicroBatch)
    return llvm::Error::success();
  return fail(options.configPath + ": train_micro_batch_size_per_gpu is " +
              llvm::Twine(options.configMicroBatch) +
              " (from the batch sizes on " + llvm::Twine(options.worldSize) +
              " rank(s)), but the model's inputs have batch " +
              llvm::Twine(modelBatch) +
              " (re-export, or fix it with --input-shape)");
}

llvm::Expected<CompileResult> mlir::ds::compile(ModuleOp model,
                                                const TrainingOptions &given,
                                                const CompileRequest &request) {
  // The checks ds-opt makes first, and the derived options (idempotent).
  TrainingOptions options = given;
  if (llvm::Error e = validateTrainingOptions(options))
    return std::move(e);
  int errors = 0;
  CompileResult result;
  // Warnings become the result's notices, each once (the memory searches
  // compile the model many times); errors go on to the caller's handler.
  ScopedDiagnosticHandler counter(model.getContext(), [&](Diagnostic &d) {
    errors += d.getSeverity() == DiagnosticSeverity::Error;
    if (d.getSeverity() != DiagnosticSeverity::Warning)
      return failure();
    std::string text = d.str();
    if (!llvm::is_contained(result.notices, text))
      result.notices.push_back(std::move(text));
    return success();
  });
  if (options.builtZeroStage() != options.zeroStage)
    result.notices.push_back(
        "--optimizer=zero-one-adam keeps each rank's whole " +
        std::string(options.zeroStage == 3 ? "parameters, " : "") +
        "optimizer state and gradients at --zero=" +
        std::to_string(options.zeroStage) +
        " (ZeRO-0's step: its local steps need the whole momentum, frozen "
        "variance and accumulator; docs/compression.md)");
  if (options.pipelineParallel > 1 && options.zeroStage >= 2 &&
      options.gradAccum > 1 && options.oneBitExchange())
    result.notices.push_back(
        "--optimizer=" + options.optimizerName + " with --pipeline-parallel "
        "keeps each stage's whole gradient sum over its micro-batches at "
        "--zero=" + std::to_string(options.zeroStage) +
        " (ZeRO-1's gradient memory: its compressed exchange runs once per "
        "step; docs/compression.md)");
  llvm::Expected<MemoryChoices> choices = resolveMemoryChoices(options);
  if (!choices)
    return choices.takeError();
  result.choices = *choices;
  std::optional<int64_t> limit;
  if (llvm::Error e = checkMemoryOptions(options, result.choices, limit))
    return std::move(e);
  result.deviceMemory = limit.value_or(0);
  if (!options.clusterSpec.empty()) {
    if (options.emitKind != "plan")
      return fail("--cluster predicts a plan's step (--emit=plan, the "
                  "default)");
    llvm::Expected<::ds::ClusterSpec> cluster =
        loadCluster(options.clusterSpec);
    if (!cluster)
      return cluster.takeError();
    // What needs no plan, before compiling (the plan is checked again).
    ::ds::Precision p = ::ds::Precision::FP32;
    ::ds::parsePrecision(options.precision, p);
    if (cluster->flops[static_cast<int>(p)] <= 0)
      return fail(options.clusterSpec + ": device.flops." + options.precision +
                  ": required for --precision=" + options.precision);
    if (options.worldSize > cluster->devices())
      return fail(options.clusterSpec + ": --world-size=" +
                  llvm::Twine(options.worldSize) + " needs more devices than " +
                  "the cluster's " + llvm::Twine(cluster->nodes) + " x " +
                  llvm::Twine(cluster->devicesPerNode));
    result.cluster = std::make_shared<ClusterDescription>(
        ClusterDescription{std::move(*cluster), options.clusterSpec});
  }
  if (options.emitKind == "mlir-import") {
    result.module = OwningOpRef<ModuleOp>(model.clone());
    return std::move(result);
  }
  StepCompiler compiler(model, options, request, errors);
  if (options.offloadMode == "auto" &&
      failed(searchOffload(compiler, *limit, result.choices, result.searchLog)))
    return reported();
  OwningOpRef<ModuleOp> searched;
  int64_t searchedPeak = -1;
  MemoryChoices &c = result.choices;
  if (c.recomputeMode == "budget" || c.recomputeMode == "auto") {
    std::optional<int64_t> budget =
        c.recomputeMode == "budget" ? c.recomputeBudget : limit;
    if (!budget) { // auto without a device size: nothing to fit
      c.recomputeMode = "none";
      result.searchLog +=
          "recompute auto: no --device-memory, every activation is kept\n";
    } else if (llvm::Error e =
                   searchRecompute(compiler, *budget, c, searched, searchedPeak,
                                   result.searchLog)) {
      return std::move(e);
    }
  }
  bool lower = options.emitKind == "plan" || options.emitKind == "dsrt";
  if (searched && lower)
    result.module = std::move(searched);
  else if (failed(compiler.run(result.module, c, lower)) ||
           failed(preferLowerPeak(compiler, result, lower)))
    return reported();
  result.split = compiler.lastSplit;
  if (llvm::Error e = checkPeak(compiler, result, limit, searchedPeak, lower))
    return std::move(e);
  if (options.emitKind == "plan" && !request.planPath.empty() &&
      (failed(writePlanFile(result, options, request)) || errors))
    return reported();
  return std::move(result);
}

llvm::Expected<CompileResult> mlir::ds::compile(MLIRContext &context,
                                                const TrainingOptions &options,
                                                const CompileRequest &request) {
  int errors = 0;
  FailureOr<OwningOpRef<ModuleOp>> model = failure();
  {
    ScopedDiagnosticHandler counter(&context, [&](Diagnostic &d) {
      errors += d.getSeverity() == DiagnosticSeverity::Error;
      return failure(); // on to the caller's handler
    });
    model = importModel(context, options, request.modelPath);
  }
  if (failed(model) || errors)
    return reported();
  if (llvm::Error e = checkConfigBatch(**model, options))
    return std::move(e);
  return compile(**model, options, request);
}
