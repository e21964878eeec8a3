//===- TrainingPipeline.cpp - the pass sequence of a training step --------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Pipeline/TrainingPipeline.h"
#include "ds/Pipeline/Compile.h"
#include "ds/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::ds;

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// ds-train's options: the training decisions of TrainingOptions.def.
struct TrainPipelineOptions : PassPipelineOptions<TrainPipelineOptions> {
#define DS_PIPELINE_OPTION(TYPE, MEMBER, FLAG, DEFAULT, HELP)                  \
  Option<TYPE> MEMBER{*this, FLAG, llvm::cl::desc(HELP),                       \
                      llvm::cl::init(TYPE(DEFAULT))};
#define DS_OPTION_Shown DS_PIPELINE_OPTION
#define DS_OPTION_Train DS_PIPELINE_OPTION
#define DS_OPTION_Tool(...)
#define DS_OPTION_ToolOptionalValue(...)
#define DS_OPTION(KIND, CAT, TYPE, MEMBER, FLAG, DEFAULT, VDESC, KEY, HELP)    \
  DS_OPTION_##KIND(TYPE, MEMBER, FLAG, DEFAULT, HELP)
#include "ds/Pipeline/TrainingOptions.def"

  TrainingOptions toTrainingOptions() const {
    TrainingOptions o;
#define DS_PIPELINE_COPY(TYPE, MEMBER, FLAG, DEFAULT, HELP)                    \
  o.MEMBER = MEMBER;                                                           \
  if (MEMBER.hasValue())                                                       \
    o.origin[FLAG] = "command line";
#undef DS_OPTION_Shown
#undef DS_OPTION_Train
#define DS_OPTION_Shown DS_PIPELINE_COPY
#define DS_OPTION_Train DS_PIPELINE_COPY
#define DS_OPTION(KIND, CAT, TYPE, MEMBER, FLAG, DEFAULT, VDESC, KEY, HELP)    \
  DS_OPTION_##KIND(TYPE, MEMBER, FLAG, DEFAULT, HELP)
#include "ds/Pipeline/TrainingOptions.def"
    return o;
  }
};

std::optional<std::string>
offloadSpace(llvm::StringRef spec, std::string &nvmePath, std::string &error) {
  if (spec == "none" || spec == "cpu" || spec == "host")
    return std::string(spec == "none" ? "none" : "host");
  if (spec.starts_with("nvme:") && spec.size() > 5) {
    std::string path = spec.drop_front(5).str();
    if (!nvmePath.empty() && nvmePath != path) {
      error = "--offload-optimizer and --offload-param name two NVMe "
              "folders ('" +
              nvmePath + "', '" + path + "'); give one";
      return std::nullopt;
    }
    nvmePath = path;
    return std::string("nvme");
  }
  return std::nullopt;
}
} // namespace

void mlir::ds::addPartitionPasses(OpPassManager &pm, const TrainingOptions &o) {
  if (o.training() || o.emitGrads) {
    TrainableSetPassOptions ts;
    ts.freeze = o.freeze;
    ts.trainable = o.trainable;
    pm.addPass(createTrainableSetPass(ts));
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (o.syncBatchnorm && o.dataParallelSize() > 1) {
    SyncBatchNormPassOptions sb;
    sb.size = o.dataParallelSize();
    pm.addNestedPass<func::FuncOp>(createSyncBatchNormPass(sb));
  }
  if (o.tensorParallel > 1) {
    TensorParallelPassOptions tp;
    tp.size = o.tensorParallel;
    tp.vocab = false; // --ds-vocab-parallel follows
    pm.addNestedPass<func::FuncOp>(createTensorParallelPass(tp));
    VocabParallelPassOptions vp;
    vp.size = o.tensorParallel;
    pm.addNestedPass<func::FuncOp>(createVocabParallelPass(vp));
    if (o.sequenceParallel) {
      SequenceParallelPassOptions sp;
      sp.size = o.tensorParallel;
      pm.addNestedPass<func::FuncOp>(createSequenceParallelPass(sp));
    }
  }
}

void mlir::ds::addTrainingPasses(OpPassManager &pm, const TrainingOptions &o,
                                 const MemoryChoices &c) {
  bool training = o.training();
  if (!o.emitGrads && !training)
    return;
  if (o.precision != "fp32") {
    MixedPrecisionPassOptions mp;
    mp.precision = o.precision;
    mp.autoCast = o.fp16AutoCast;
    pm.addNestedPass<func::FuncOp>(createMixedPrecisionPass(mp));
  }
  if (o.fuseAttention) // before autodiff: its VJP is the fused gradient
    pm.addNestedPass<func::FuncOp>(createFuseAttentionPass());
  pm.addNestedPass<func::FuncOp>(createAutodiffPass());
  if (training) { // mode none too: the report compares the plans
    RecomputePassOptions rc;
    rc.mode = c.recomputeMode;
    rc.budget = c.recomputeBudget;
    pm.addNestedPass<func::FuncOp>(createRecomputePass(rc));
  }
  int64_t dpSize = o.dataParallelSize();
  if (training && (dpSize > 1 || o.zeroStage > 0)) {
    ZeroPassOptions dp;
    dp.worldSize = dpSize; // the data-parallel group
    dp.stage = o.builtZeroStage();
    dp.persistenceThreshold = o.persistenceThreshold;
    dp.reduceBucketSize = o.reduceBucketSize;
    dp.commDtype = o.effectiveCommDtype();
    dp.prefetchBucketSize = o.prefetchBucketSize;
    dp.accumSteps = o.gradAccum;
    dp.sumOnce = o.oneBitExchange(); // its exchange runs once per step
    dp.quantizeWeights = o.quantizeWeights;
    dp.quantizeGradients = o.quantizeGradients;
    dp.quantizeBlockSize = o.quantizeBlockSize;
    dp.gradientBits = o.quantizeGradientBits;
    dp.hpzPartitionSize = o.hpzPartitionSize;
    pm.addNestedPass<func::FuncOp>(createZeroPass(dp));
  }
  if (training) {
    OptimizerPassOptions opt;
    opt.optimizer = o.optimizerName;
    opt.lr = o.learningRate;
    opt.beta1 = o.beta1;
    opt.beta2 = o.beta2;
    opt.eps = o.adamEps;
    opt.weightDecay = o.weightDecay;
    opt.momentum = o.momentum;
    opt.dampening = o.dampening;
    opt.nesterov = o.nesterov;
    opt.biasCorrection = o.biasCorrection;
    opt.maxCoeff = o.lambMaxCoeff;
    opt.minCoeff = o.lambMinCoeff;
    opt.schedule = o.lrSchedule;
    opt.warmupSteps = o.warmupSteps;
    opt.totalSteps = o.totalSteps;
    opt.minLr = o.minLr;
    opt.gradClip = o.gradClip;
    opt.gradAccum = o.gradAccum;
    opt.allgatherBucketSize = o.allgatherBucketSize;
    // --freeze-step=auto is the pass's -1: ds-run decides the step
    // (ValidateOptions checked the value).
    int64_t freeze = 100000;
    if (o.freezeStep == "auto")
      freeze = -1;
    else
      (void)llvm::StringRef(o.freezeStep).getAsInteger(10, freeze);
    opt.freezeStep = freeze;
    opt.varFreezeStep = o.varFreezeStep;
    opt.varUpdateScaler = o.varUpdateScaler;
    opt.localStepScaler = o.localStepScaler;
    opt.localStepClipper = o.localStepClipper;
    opt.coeffBeta = o.lambCoeffBeta;
    opt.factorMax = o.lambFactorMax;
    opt.factorMin = o.lambFactorMin;
    opt.factorThreshold = o.lambFactorThreshold;
    opt.masterWeights = c.offloadOptimizer != "none";
    pm.addNestedPass<func::FuncOp>(createOptimizerPass(opt));
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (o.foldTranspose) // after the canonicalizer, which composes transposes
    pm.addNestedPass<func::FuncOp>(createFoldTransposePass());
  if (training && (c.offloadOptimizer != "none" || c.offloadParam != "none")) {
    OffloadPassOptions off;
    off.optimizer = c.offloadOptimizer;
    off.param = c.offloadParam;
    pm.addNestedPass<func::FuncOp>(createOffloadPass(off));
  }
  if (training && c.offloadActivations != "none") {
    OffloadActivationsPassOptions act;
    act.to = c.offloadActivations;
    act.minBytes = o.offloadActivationsMinBytes;
    pm.addNestedPass<func::FuncOp>(createOffloadActivationsPass(act));
  }
  if (o.fuseElementwise) // last: fusion hides the ops the passes above match
    pm.addNestedPass<func::FuncOp>(createFuseElementwisePass());
  if (training && o.fuseOptimizer) { // after offload, which marks host updates
    FuseOptimizerPassOptions fuse;
    fuse.hoistOperands = c.hoistUpdateOperands;
    pm.addNestedPass<func::FuncOp>(createFuseOptimizerPass(fuse));
  }
}

void mlir::ds::addLoweringPasses(OpPassManager &pm, const TrainingOptions &o) {
  pm.addPass(createLowerToDsRtPass());
  if (o.overlapComm) {
    OverlapCommPassOptions ov;
    ov.maxInFlight = o.maxInFlight;
    pm.addNestedPass<func::FuncOp>(createOverlapCommPass(ov));
  }
  pm.addNestedPass<func::FuncOp>(createPlanMemoryPass());
}

llvm::Expected<MemoryChoices>
mlir::ds::resolveMemoryChoices(const TrainingOptions &o) {
  MemoryChoices c;
  std::string error;
  for (auto [flag, spec, space] :
       {std::make_tuple("offload-optimizer", &o.offloadOptimizer,
                        &c.offloadOptimizer),
        std::make_tuple("offload-param", &o.offloadParam, &c.offloadParam)}) {
    std::optional<std::string> s = offloadSpace(*spec, c.nvmePath, error);
    if (!s)
      return fail(!error.empty() ? error
                                 : "--" + std::string(flag) + "='" + *spec +
                                       "' is not none, cpu or nvme:PATH");
    *space = *s;
  }
  if (o.offloadActivations != "none" && o.offloadActivations != "cpu" &&
      o.offloadActivations != "host")
    return fail("--offload-activations='" + o.offloadActivations +
                "' is not none or cpu");
  c.offloadActivations = o.offloadActivations == "none" ? "none" : "host";
  if (o.offloadActivationsMinBytes < 0)
    return fail("--offload-activations-min-bytes must be at least 0, got " +
                std::to_string(o.offloadActivationsMinBytes));
  llvm::StringRef mode = o.recompute;
  c.recomputeMode = mode.str();
  if (mode.consume_front("budget=")) {
    std::optional<int64_t> budget = parseBytes(mode);
    if (!budget)
      return fail("--recompute='" + o.recompute +
                  "': the budget is not a size (e.g. budget=2GiB)");
    c.recomputeMode = "budget";
    c.recomputeBudget = *budget;
  } else if (mode != "auto" && mode != "none" && mode != "full" &&
             mode != "every-layer") {
    return fail("--recompute='" + o.recompute +
                "' is not one of none, full, every-layer, auto, "
                "budget=SIZE");
  }
  return c;
}

llvm::Error mlir::ds::buildTrainingPipeline(OpPassManager &pm,
                                            const TrainingOptions &options) {
  if (options.pipelineParallel > 1)
    return fail("ds-train runs one pipeline stage: give --pipeline-parallel "
                "to ds-opt with the model.onnx");
  llvm::StringRef recompute = options.recompute;
  if (recompute == "auto" || recompute.starts_with("budget=") ||
      options.offloadMode == "auto")
    return fail("ds-train takes fixed memory choices: --recompute=auto, "
                "budget=SIZE and --offload=auto search with compile()");
  llvm::Expected<MemoryChoices> choices = resolveMemoryChoices(options);
  if (!choices)
    return choices.takeError();
  addPartitionPasses(pm, options);
  addTrainingPasses(pm, options, *choices);
  if (options.emitKind == "plan" || options.emitKind == "dsrt")
    addLoweringPasses(pm, options);
  return llvm::Error::success();
}

void mlir::ds::registerTrainingPipeline() {
  registerPassPipeline(
      "ds-train",
      "The training step ds-opt compiles from a model: the pass sequence of "
      "its options (docs/options.md), through the memory plan with "
      "emit=plan or dsrt",
      [](OpPassManager &pm, llvm::StringRef text,
         llvm::function_ref<LogicalResult(const llvm::Twine &)> onError) {
        TrainPipelineOptions parsed;
        if (failed(parsed.parseFromString(text)))
          return failure();
        TrainingOptions options = parsed.toTrainingOptions();
        llvm::Error e = validateTrainingOptions(options);
        if (!e)
          e = buildTrainingPipeline(pm, options);
        if (e)
          return onError(llvm::toString(std::move(e)));
        return success();
      },
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)> print) {
        print(TrainPipelineOptions());
      });
}
