//===- ValidateOptions.cpp - the training options against each other -----===//
//
// Part of the ds project.
//
// The checks ds-opt makes before it reads the model: each value in its
// range, and the combinations ds supports. Each check's message is the
// one-line error ds-opt prints.
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Schedule.h"
#include "ds/Pipeline/TrainingOptions.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdio>

using namespace mlir;
using namespace mlir::ds;

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

bool oneOf(llvm::StringRef v, std::initializer_list<llvm::StringRef> set) {
  return llvm::is_contained(set, v);
}

/// What to emit, the optimizer and its schedule.
llvm::Error checkOptimizer(const TrainingOptions &o) {
  if (!oneOf(o.emitKind, {"plan", "mlir", "mlir-import", "dsrt", "summary"}))
    return fail("--emit='" + o.emitKind +
                "' is not one of plan, mlir, mlir-import, dsrt, summary");
  if (!oneOf(o.optimizerName,
             {"none", "adam", "adamw", "sgd", "lamb", "onebit-adam",
              "zero-one-adam", "onebit-lamb"}))
    return fail("--optimizer='" + o.optimizerName +
                "' is not one of none, adam, adamw, sgd, lamb, onebit-adam, "
                "zero-one-adam, onebit-lamb");
  if (o.learningRate < 0 || o.weightDecay < 0 || o.momentum < 0) {
    std::string lr;
    llvm::raw_string_ostream(lr) << o.learningRate;
    return fail("--lr, --weight-decay and --momentum must not be negative "
                "(--lr=" +
                lr + ")");
  }
  if (std::string p = ::ds::scheduleProblem(o.lrSchedule, o.warmupSteps,
                                            o.totalSteps);
      !p.empty())
    return fail("--lr-schedule: " + p);
  return llvm::Error::success();
}

/// The rank grid: data x tensor x pipeline parallel.
llvm::Error checkGrid(const TrainingOptions &o) {
  if (o.worldSize < 1)
    return fail("--world-size must be at least 1, got " +
                llvm::Twine(o.worldSize));
  if (o.tensorParallel < 1 ||
      (o.pipelineParallel == 1 && o.worldSize % o.tensorParallel != 0))
    return fail("--world-size=" + llvm::Twine(o.worldSize) +
                " is not data-parallel x tensor-parallel with "
                "--tensor-parallel=" +
                llvm::Twine(o.tensorParallel));
  if (o.sequenceParallel && o.tensorParallel < 2)
    return fail("--sequence-parallel splits the activations over a "
                "tensor-parallel group; give --tensor-parallel=T with T > 1");
  if (o.tensorParallel > 1 && !o.training())
    return fail("--tensor-parallel=" + llvm::Twine(o.tensorParallel) +
                " needs a training step (--optimizer=...)");
  if (o.pipelineParallel < 1 ||
      o.worldSize % (o.tensorParallel * o.pipelineParallel) != 0)
    return fail("--world-size=" + llvm::Twine(o.worldSize) +
                " is not data-parallel x tensor-parallel x "
                "pipeline-parallel with --tensor-parallel=" +
                llvm::Twine(o.tensorParallel) +
                " and --pipeline-parallel=" + llvm::Twine(o.pipelineParallel) +
                " (" + llvm::Twine(o.tensorParallel * o.pipelineParallel) +
                " does not divide it)");
  return llvm::Error::success();
}

/// Pipeline parallelism: its schedule and micro-batches, and what it does
/// not support yet. Sets the micro-batches and the virtual stages.
llvm::Error checkPipeline(TrainingOptions &o) {
  if (o.pipelineParallel == 1) {
    if (o.isGiven("micro-batches") || o.isGiven("schedule"))
      return fail("--micro-batches and --schedule are for "
                  "--pipeline-parallel (use --grad-accum without it)");
    return llvm::Error::success();
  }
  std::string p = "--pipeline-parallel=" + std::to_string(o.pipelineParallel);
  if (!o.training())
    return fail(p + " needs a training step (--optimizer=...)");
  llvm::StringRef schedule = o.pipeSchedule;
  if (schedule.consume_front("interleaved")) {
    if (!schedule.consume_front(":") ||
        schedule.getAsInteger(10, o.virtualStages) || o.virtualStages < 2 ||
        o.virtualStages > 64)
      return fail("--schedule=" + o.pipeSchedule +
                  ": give interleaved:V with V from 2 to 64 model chunks "
                  "per pipeline rank");
  } else if (!oneOf(schedule, {"gpipe", "1f1b"})) {
    return fail("--schedule='" + o.pipeSchedule +
                "' is not one of gpipe, 1f1b, interleaved:V");
  }
  if (o.microBatches < 0)
    return fail("--micro-batches must be at least 1, got " +
                std::to_string(o.microBatches));
  if (o.microBatches == 0)
    o.microBatches = o.gradAccum;
  else if (o.isGiven("grad-accum") && o.gradAccum != o.microBatches)
    return fail("--micro-batches=" + std::to_string(o.microBatches) +
                " and --grad-accum=" + std::to_string(o.gradAccum) +
                " disagree: with pipeline parallelism the micro-batches "
                "are the accumulation steps");
  o.gradAccum = o.microBatches;
  if (o.virtualStages > 1 && o.microBatches % o.pipelineParallel != 0)
    return fail("--schedule=" + o.pipeSchedule +
                " needs --micro-batches a multiple of " + p +
                " (it runs them in groups of P), got " +
                std::to_string(o.microBatches));
  if (o.precision == "fp16")
    return fail(p + " with --precision=fp16 (loss scaling) is not "
                    "supported yet; use bf16 or fp32");
  if (o.gradClip > 0)
    return fail(p + " with --grad-clip is not supported yet (the norm "
                    "spans the stages)");
  if (o.offloadOptimizer != "none" || o.offloadParam != "none" ||
      o.offloadActivations != "none")
    return fail(p + " with offload is not supported yet");
  return llvm::Error::success();
}

/// ZeRO, precision, the loss scaler and the collectives.
llvm::Error checkPrecisionAndZero(const TrainingOptions &o) {
  if (o.zeroStage < 0 || o.zeroStage > 3)
    return fail("--zero=" + llvm::Twine(o.zeroStage) +
                " is not a ZeRO stage (0, 1, 2 or 3)");
  if (!oneOf(o.precision, {"fp32", "bf16", "fp16"}))
    return fail("--precision='" + o.precision +
                "' is not one of fp32, fp16, bf16");
  if (o.lossScale < 0 || o.lossScaleWindow < 1 || o.hysteresis < 1 ||
      o.minLossScale <= 0 || o.initialScalePower < 0 ||
      o.initialScalePower > 64)
    return fail("loss scaler options out of range (--loss-scale >= 0, "
                "--loss-scale-window >= 1, --hysteresis >= 1, "
                "--min-loss-scale > 0, --initial-scale-power 0-64)");
  if (o.precision == "fp16" && o.gradAccum > 1 && o.pipelineParallel > 1)
    return fail("--precision=fp16 with --grad-accum and --pipeline-parallel "
                "is not supported yet");
  if (o.precision != "fp32" && !o.training() && !o.emitGrads)
    return fail("--precision=" + o.precision +
                " is for training (give --optimizer=...)");
  // From a config whose fp16 is off (or "auto" and the command line chose
  // another precision) it does nothing, as in DeepSpeed.
  if (o.fp16AutoCast && o.precision != "fp16" &&
      o.origin.lookup("fp16-auto-cast") == "command line")
    return fail("--fp16-auto-cast needs --precision=fp16 (it rounds the "
                "inputs to fp16)");
  if (!o.commDtype.empty() && !oneOf(o.commDtype, {"fp32", "bf16", "fp16"}))
    return fail("--comm-dtype='" + o.commDtype +
                "' is not one of fp32, bf16, fp16");
  if (o.maxInFlight < 1)
    return fail("--max-inflight-collectives must be at least 1");
  if (o.reduceBucketSize < 1 || o.allgatherBucketSize < 1 ||
      o.prefetchBucketSize < 1)
    return fail("--reduce-bucket-size, --allgather-bucket-size and "
                "--prefetch-bucket-size must be at least 1");
  if (o.persistenceThreshold < 0)
    return fail("--param-persistence-threshold must not be negative");
  if (o.zeroStage > 0 && !o.training())
    return fail("--zero=" + llvm::Twine(o.zeroStage) +
                " partitions a training step; give --optimizer=...");
  if (o.worldSize > 1 && !o.training() && o.tensorParallel == 1)
    return fail("--world-size needs a training step (--optimizer=...)");
  return llvm::Error::success();
}

/// Accumulation, clipping and the schedule's steps; what excludes what.
llvm::Error checkSteps(const TrainingOptions &o) {
  if (o.gradAccum < 1)
    return fail("--grad-accum must be at least 1, got " +
                llvm::Twine(o.gradAccum));
  if (o.gradClip < 0 || o.warmupSteps < 0 || o.totalSteps < 0)
    return fail("--grad-clip, --warmup-steps and --total-steps must not be "
                "negative");
  if (o.trainingInfo && (o.emitGrads || o.training()))
    return fail("--training-info trains with the model's own algorithm; it "
                "excludes --optimizer and --emit-grads");
  if (o.emitGrads && o.training())
    return fail("--emit-grads and --optimizer exclude each other");
  if (o.isGiven("report") && !o.reportKind.empty() &&
      !oneOf(o.reportKind, {"table", "json"}))
    return fail("--report='" + o.reportKind + "' is not one of table, json");
  if (!(o.labelFraction > 0 && o.labelFraction <= 1)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", o.labelFraction);
    return fail("--label-fraction must be in (0, 1], got " + llvm::Twine(got));
  }
  if (!oneOf(o.planCompression, {"off", "auto"}))
    return fail("--plan-compression='" + o.planCompression +
                "' is not one of off, auto");
  return llvm::Error::success();
}

/// Accumulation the compressed optimizers do not run under, as its flags
/// (empty if none): --grad-accum; with pipelines a stage sums its
/// micro-batches' gradients and exchanges them once per step, which needs
/// data-parallel ranks (docs/compression.md, "With pipelines").
std::string compressedAccumProblem(const TrainingOptions &o) {
  if (o.gradAccum <= 1 ||
      (o.pipelineParallel > 1 && o.dataParallelSize() > 1))
    return "";
  std::string m = std::to_string(o.gradAccum);
  return o.pipelineParallel > 1
             ? "--micro-batches=" + m +
                   " and one data-parallel rank per pipeline stage"
             : "--grad-accum=" + m;
}

/// --freeze-step: a non-negative integer, or auto (1-bit Adam and LAMB:
/// ds-run decides, docs/compression.md).
llvm::Error checkFreezeStep(const TrainingOptions &o) {
  if (o.freezeStep == "auto") {
    if (!o.oneBitExchange())
      return fail("--freeze-step=auto is not supported with --optimizer=" +
                  o.optimizerName + " (built for onebit-adam and onebit-lamb)");
    return llvm::Error::success();
  }
  long long n = 0;
  if (llvm::StringRef(o.freezeStep).getAsInteger(10, n))
    return fail("--freeze-step must be a non-negative integer or auto, got '" +
                o.freezeStep + "'");
  if (n < 0)
    return fail("--freeze-step must not be negative, got " + llvm::Twine(n));
  return llvm::Error::success();
}

/// 1-bit Adam (docs/compression.md): it runs at ZeRO 0-3 on the
/// data-parallel ranks with f32 gradients; what it does not run yet is
/// refused by name.
llvm::Error checkCompression(const TrainingOptions &o) {
  if (o.optimizerName != "onebit-adam")
    return llvm::Error::success();
  auto limit = [](const llvm::Twine &what) {
    return fail("--optimizer=onebit-adam with " + what +
                " is not supported yet (1-bit Adam runs at ZeRO 0-3, f32, on "
                "data-parallel ranks)");
  };
  if (o.tensorParallel > 1)
    return limit("--tensor-parallel=" + llvm::Twine(o.tensorParallel));
  if (o.precision != "fp32" || o.effectiveCommDtype() != "fp32")
    return limit("--precision=" + o.precision + " --comm-dtype=" +
                 o.effectiveCommDtype());
  if (o.gradClip > 0)
    return limit("--grad-clip");
  if (std::string a = compressedAccumProblem(o); !a.empty())
    return limit(a);
  if (o.offloadOptimizer != "none")
    return limit("--offload-optimizer=" + o.offloadOptimizer);
  if (o.offloadParam != "none")
    return limit("--offload-param=" + o.offloadParam);
  return llvm::Error::success();
}

/// The first layout the ZeRO-0 compressed optimizers (0/1 Adam, 1-bit
/// LAMB) do not run under, as its flags; empty if none.
std::string compressedLayoutProblem(const TrainingOptions &o) {
  return o.zeroStage > 0 ? "--zero=" + std::to_string(o.zeroStage)
         : o.tensorParallel > 1
             ? "--tensor-parallel=" + std::to_string(o.tensorParallel)
         : o.precision != "fp32" || o.effectiveCommDtype() != "fp32"
             ? "--precision=" + o.precision +
                   " --comm-dtype=" + o.effectiveCommDtype()
         : o.gradClip > 0  ? std::string("--grad-clip")
         : !compressedAccumProblem(o).empty() ? compressedAccumProblem(o)
         : o.offloadOptimizer != "none"
             ? "--offload-optimizer=" + o.offloadOptimizer
             : std::string();
}

/// 0/1 Adam (docs/compression.md): its policy's values, and the same
/// first slice as 1-bit Adam (ZeRO-0's step, also for --zero=1|2; f32,
/// data-parallel ranks).
llvm::Error checkZeroOneAdam(const TrainingOptions &o) {
  if (o.optimizerName != "zero-one-adam")
    return llvm::Error::success();
  if (o.varFreezeStep < 0)
    return fail("--var-freeze-step must not be negative, got " +
                llvm::Twine(o.varFreezeStep));
  for (auto [flag, value] :
       {std::pair<const char *, int64_t>{"var-update-scaler",
                                         o.varUpdateScaler},
        {"local-step-scaler", o.localStepScaler},
        {"local-step-clipper", o.localStepClipper}})
    if (value < 1)
      return fail("--" + llvm::Twine(flag) + " must be at least 1, got " +
                  llvm::Twine(value));
  // ZeRO 1-3 build ZeRO-0's step (builtZeroStage; docs/compression.md,
  // "0/1 Adam with ZeRO 1-3"), with one notice (compile()).
  TrainingOptions asBuilt = o;
  asBuilt.zeroStage = o.builtZeroStage();
  std::string what = compressedLayoutProblem(asBuilt);
  if (!what.empty())
    return fail("--optimizer=zero-one-adam with " + what +
                " is not supported yet (0/1 Adam runs ZeRO-0's step, f32, on "
                "data-parallel ranks)");
  return llvm::Error::success();
}

/// 1-bit LAMB (docs/compression.md): its coefficients' ranges and the
/// same layouts as 0/1 Adam but ZeRO 1-3, which it runs (f32,
/// data-parallel ranks; ZeRO-3's --offload-param not yet).
llvm::Error checkOneBitLamb(const TrainingOptions &o) {
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  if (o.optimizerName != "onebit-lamb")
    return llvm::Error::success();
  if (!(o.lambFactorMin > 0 && o.lambFactorMin <= o.lambFactorMax))
    return fail("--factor-min and --factor-max must satisfy 0 < min <= max, "
                "got " + num(o.lambFactorMin) + " and " +
                num(o.lambFactorMax));
  if (!(o.lambMinCoeff > 0 && o.lambMinCoeff <= o.lambMaxCoeff))
    return fail("--lamb-min-coeff and --lamb-max-coeff must satisfy 0 < min "
                "<= max, got " + num(o.lambMinCoeff) + " and " +
                num(o.lambMaxCoeff));
  if (!(o.lambCoeffBeta >= 0 && o.lambCoeffBeta < 1))
    return fail("--coeff-beta must be in [0, 1), got " +
                num(o.lambCoeffBeta));
  if (!(o.lambFactorThreshold >= 0))
    return fail("--factor-threshold must not be negative, got " +
                num(o.lambFactorThreshold));
  TrainingOptions anyStage = o;
  anyStage.zeroStage = 0;
  std::string what = o.offloadParam != "none"
                         ? "--offload-param=" + o.offloadParam
                         : compressedLayoutProblem(anyStage);
  if (!what.empty())
    return fail("--optimizer=onebit-lamb with " + what +
                " is not supported yet (1-bit LAMB runs at ZeRO 0-3, f32, on "
                "data-parallel ranks)");
  return llvm::Error::success();
}

/// ZeRO++'s hpZ (docs/zeropp.md): a partition size H > 1 at ZeRO-3 that
/// divides the data-parallel ranks and the ranks per node.
llvm::Error checkHpZ(const TrainingOptions &o) {
  int64_t h = o.hpzPartitionSize, n = o.dataParallelSize();
  if (h < 1)
    return fail("--hpz-partition-size must be at least 1, got " +
                llvm::Twine(h));
  if (h == 1)
    return llvm::Error::success();
  if (o.zeroStage != 3)
    return fail("--hpz-partition-size=" + llvm::Twine(h) +
                " needs --zero=3 (ZeRO++'s hpZ partitions ZeRO-3's gathered "
                "parameters within a node), got --zero=" +
                llvm::Twine(o.zeroStage));
  if (n % h)
    return fail("--hpz-partition-size=" + llvm::Twine(h) +
                " must divide the " + llvm::Twine(n) + " data-parallel ranks");
  if (o.devicesPerNode > 0 && o.devicesPerNode % h)
    return fail("--hpz-partition-size=" + llvm::Twine(h) +
                " must divide --devices-per-node=" +
                llvm::Twine(o.devicesPerNode) +
                " (hpZ's partition stays within a node)");
  return llvm::Error::success();
}

/// ZeRO++ (docs/zeropp.md): qwZ at ZeRO-3, qgZ at ZeRO 1-3 with f32
/// gradient communication, hpZ at ZeRO-3, on data-parallel ranks.
llvm::Error checkZeroPP(const TrainingOptions &o) {
  if (o.devicesPerNode < 0)
    return fail("--devices-per-node must not be negative, got " +
                llvm::Twine(o.devicesPerNode));
  if (llvm::Error e = checkHpZ(o))
    return e;
  bool hpz = o.hpzPartitionSize > 1;
  if (!o.quantizeWeights && !o.quantizeGradients && !hpz)
    return llvm::Error::success();
  if (o.quantizeBlockSize < 1)
    return fail("--quantize-block-size must be at least 1, got " +
                llvm::Twine(o.quantizeBlockSize));
  if (o.quantizeGradientBits != 8 && o.quantizeGradientBits != 4)
    return fail("--quantize-gradient-bits must be 8 or 4, got " +
                llvm::Twine(o.quantizeGradientBits));
  if (o.quantizeWeights && o.zeroStage != 3)
    return fail("--quantize-weights needs --zero=3 (ZeRO++'s qwZ quantizes "
                "ZeRO-3's parameter gathers), got --zero=" +
                llvm::Twine(o.zeroStage));
  if (o.quantizeGradients && o.zeroStage == 0)
    return fail("--quantize-gradients needs --zero=1, 2 or 3 (ZeRO++'s qgZ "
                "quantizes the gradients' reduce-scatter)");
  if (o.quantizeGradients && o.effectiveCommDtype() != "fp32")
    return fail("--quantize-gradients with --comm-dtype=" +
                o.effectiveCommDtype() +
                " is not supported yet (qgZ quantizes f32 gradients)");
  std::string what =
      o.optimizerName == "onebit-adam" || o.optimizerName == "zero-one-adam" ||
              o.optimizerName == "onebit-lamb"
          ? "--optimizer=" + o.optimizerName
      : o.pipelineParallel > 1
          ? "--pipeline-parallel=" + std::to_string(o.pipelineParallel)
      : o.tensorParallel > 1
          ? "--tensor-parallel=" + std::to_string(o.tensorParallel)
      : o.offloadOptimizer != "none"
          ? "--offload-optimizer=" + o.offloadOptimizer
      : o.offloadParam != "none" ? "--offload-param=" + o.offloadParam
                                 : std::string();
  if (!what.empty())
    return fail("ZeRO++ (" +
                llvm::Twine(o.quantizeWeights || o.quantizeGradients
                                ? "--quantize-weights, --quantize-gradients"
                                : "--hpz-partition-size") +
                ") with " + what + " is not supported yet");
  return llvm::Error::success();
}
} // namespace

llvm::Error mlir::ds::validateTrainingOptions(TrainingOptions &options) {
  if (llvm::Error e = checkOptimizer(options))
    return e;
  if (llvm::Error e = checkGrid(options))
    return e;
  if (llvm::Error e = checkPipeline(options))
    return e;
  if (llvm::Error e = checkPrecisionAndZero(options))
    return e;
  if (llvm::Error e = checkFreezeStep(options))
    return e;
  if (llvm::Error e = checkCompression(options))
    return e;
  if (llvm::Error e = checkZeroOneAdam(options))
    return e;
  if (llvm::Error e = checkOneBitLamb(options))
    return e;
  if (llvm::Error e = checkZeroPP(options))
    return e;
  return checkSteps(options);
}
