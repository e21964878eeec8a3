//===- Trainer.cpp - the step loop of a run and forward runs -------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// A training step runs each micro-batch's whole program, or with pipeline
// parallelism this stage's schedule of forward and backward sections and
// then the deferred updates. After each step the loss scaler sees the
// overflow flag, the measured memory and collective bytes are checked
// against the plan, the progress line is printed and, at its cadence, a
// checkpoint saved. A NaN loss stops the run (naming the first kernel that
// produced one) or skips the step.
//
//===----------------------------------------------------------------------===//

#include "Monitor.h"
#include "TrainerImpl.h"
#include "ds/Runtime/Checkpoint.h"
#include "ds/Runtime/Schedule.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>

namespace ds::rt {

namespace {

/// What one step gathers over its schedule items.
struct StepRun {
  double lossSum = 0, msSum = 0;
  uint64_t highWater = 0;
  bool skipped = false; // --on-nan=skip dropped it
  /// Interleaved: each chunk's executor has its own arena; the rank's
  /// figures are their sums.
  std::map<Executor *, std::pair<uint64_t, uint64_t>> arenas;
};

/// Fault injection for the tests (docs/reliability.md): rank DS_FAULT_RANK
/// (default 1) fails (fail-at-step:K) or dies (kill-at-step:K) as step K
/// starts, while the others are inside it.
bool injectFault(RunContext &ctx, long long s, bool stepStart) {
  const char *fault = std::getenv("DS_FAULT");
  if (!fault)
    return true;
  const char *rankVar = std::getenv("DS_FAULT_RANK");
  bool faultRank = ctx.world.rank() == (rankVar ? std::atoi(rankVar) : 1);
  if (std::strncmp(fault, "fail-at-step:", 13) == 0 &&
      std::atoll(fault + 13) == s && stepStart && faultRank)
    return ctx.fail("step " + std::to_string(s) +
                    ": injected failure (DS_FAULT)");
  if (std::strncmp(fault, "kill-at-step:", 13) == 0 &&
      std::atoll(fault + 13) == s && faultRank)
    std::raise(SIGKILL);
  return true;
}

/// What every step measures first: this rank's storage against the plan.
bool measureStorage(RunContext &ctx, TrainState &ts) {
  for (Executor *e : ctx.allExecs())
    for (const Executor::Storage &st : e->storage()) {
      (st.state       ? ts.measuredState
       : st.trainable ? ts.measuredParams
                      : ts.measuredBuffers) += st.bytes;
      (st.location == 1   ? ts.measuredHost
       : st.location == 2 ? ts.measuredNvme
                          : ts.measuredState) += st.location ? st.bytes : 0;
    }
  const Footprint &planned = ctx.planned;
  if (ts.measuredParams > planned.params ||
      ts.measuredBuffers > planned.buffers || ts.measuredState > planned.state)
    return ctx.fail("parameter storage exceeds the plan (" +
                    std::to_string(ts.measuredParams + ts.measuredBuffers +
                                   ts.measuredState) +
                    " bytes)");
  return true;
}

/// The order of work in a step: each micro-batch's whole program, or with
/// pipeline parallelism this stage's schedule of sections.
bool buildOrder(RunContext &ctx, int64_t accum) {
  if (ctx.stages == 1) {
    ctx.order.clear();
    for (int64_t micro = 0; micro < accum; ++micro)
      ctx.order.push_back({true, static_cast<int>(micro)});
  } else if (static_cast<int64_t>(ctx.order.size()) != 2 * accum * ctx.virt) {
    return ctx.fail("the pipeline schedule has " +
                    std::to_string(ctx.order.size()) + " items for " +
                    std::to_string(accum) + " micro-batches");
  }
  return true;
}

/// A step's loss is not finite: skip it, or stop naming the first kernel
/// whose result is not finite.
bool onNanLoss(RunContext &ctx, long long s, StepRun &step) {
  std::string err;
  if (ctx.opts.onNan == "skip") {
    if (ctx.lead)
      std::printf("step %lld/%lld | loss is not finite: step skipped "
                  "(no update)\n",
                  s, static_cast<long long>(ctx.opts.steps));
    step.skipped = true;
    return true;
  }
  if (ctx.stages > 1) // a scan would run the hand-overs again
    return ctx.fail("step " + std::to_string(s) +
                    ": the loss is not finite (--on-nan=stop)");
  RunStats &stats = ctx.stats;
  if (!ctx.exec()->scanForNan(stats, err))
    return ctx.fail("step " + std::to_string(s) + ": " + err);
  return ctx.fail("step " + std::to_string(s) +
                  ": the loss is not finite (--on-nan=stop); " +
                  (stats.firstNan.empty()
                       ? std::string("on this rank every forward result is "
                                     "finite (another rank's is not)")
                       : "the first non-finite result: " + stats.firstNan));
}

/// Sets the inputs of one schedule item and runs it.
bool runItem(RunContext &ctx, TrainState &ts, long long s,
             const ds::PipeStep &item, Executor *ex) {
  RunStats &stats = ctx.stats;
  int64_t micro = item.micro;
  long long m = (s - 1) * ts.accum + micro + 1; // run number, 1-based
  if (item.forward && !feedBatches(ctx, ts.data, ex, m))
    return false;
  stats.kernelTimes.clear();
  if (!ts.data.tokens.empty() && item.forward &&
      !feedTokens(ctx, ts.data, ex, m))
    return false;
  std::string err;
  if (ctx.info.lossScaling) {
    HostTensor scaleIn;
    scaleIn.dtype = DType::F32;
    scaleIn.data.resize(4);
    float f = static_cast<float>(ts.scaler.scale);
    std::memcpy(scaleIn.data.data(), &f, 4);
    if (!ctx.exec()->setInput("ds.loss_scale", std::move(scaleIn), err))
      return ctx.fail(err);
  }
  if (!injectFault(ctx, s, item.forward && micro == 0))
    return false;
  bool ran = ctx.stages == 1
                 ? ctx.exec()->run(stats, err)
                 : ex->runSection(item.forward, static_cast<int>(micro),
                                  static_cast<uint64_t>(m - 1), stats, err,
                                  /*deferUpdate=*/!item.forward &&
                                      micro == ts.accum - 1);
  if (!ran) {
    ctx.closeLog();
    return ctx.fail("step " + std::to_string(s) +
                    (ctx.stages > 1
                         ? std::string(item.forward ? ", forward"
                                                    : ", backward") +
                               " of micro-batch " + std::to_string(micro)
                         : std::string()) +
                    ": " + err);
  }
  return true;
}

/// The loss of a schedule item (NaN when it has none).
double itemLoss(RunContext &ctx, Executor *ex) {
  HostTensor l;
  std::string err;
  if (!ctx.info.loss.empty() && ex->output(ctx.info.loss, l, err) &&
      l.numel() == 1 && l.dtype == DType::F32) {
    float f;
    std::memcpy(&f, l.data.data(), 4);
    return f;
  }
  return NAN;
}

/// Runs step `s`'s schedule: every item, then the deferred updates.
bool runStep(RunContext &ctx, TrainState &ts, long long s, StepRun &step) {
  RunStats &stats = ctx.stats;
  for (const ds::PipeStep &item : ctx.order) {
    Executor *ex = ctx.stages > 1 ? ctx.execFor(item.chunk) : ctx.exec();
    if (!runItem(ctx, ts, s, item, ex))
      return false;
    step.msSum += stats.milliseconds;
    step.highWater = std::max<uint64_t>(step.highWater, stats.arenaHighWater);
    if (ctx.stages > 1) {
      auto &a = step.arenas[ex];
      a.first = std::max<uint64_t>(a.first, stats.arenaHighWater);
      a.second = stats.arenaPlanned;
    }
    if (ctx.stages > 1 && item.forward && !stats.nanLoss)
      continue; // the loss is read after the micro-batch's backward
    if (stats.nanLoss) // the loss is not finite: nothing was updated
      return onNanLoss(ctx, s, step);
    if (ctx.stages > 1 && ex->outputNames().empty())
      continue; // not the chunk with the loss
    step.lossSum += itemLoss(ctx, ex);
  }
  // Pipeline: the last micro-batch's updates, after the schedule, in chunk
  // order (a tied parameter's exchange waits for no backward).
  if (ctx.stages > 1)
    for (Executor *e : ctx.allExecs()) {
      RunStats upd;
      std::string err;
      if (!e->runDeferredUpdate(upd, err))
        return ctx.fail("step " + std::to_string(s) + ", the update: " + err);
      step.msSum += upd.milliseconds;
    }
  return true;
}

/// After a step: its figures checked against the plan, the loss scaler
/// updated, the progress line printed and the checkpoint saved.
bool finishStep(RunContext &ctx, TrainState &ts, long long s, StepRun &step,
                uint64_t comm0) {
  RunStats &stats = ctx.stats;
  ts.stepComm = ctx.sc->collectiveBytes - comm0;
  ts.stepToHost = stats.toHostBytes;
  ts.stepToDevice = stats.toDeviceBytes;
  ts.stepNvmeRead = stats.nvmeReadBytes;
  ts.stepNvmeWrite = stats.nvmeWriteBytes;
  if (stats.hostArenaHighWater > stats.hostArenaPlanned)
    return ctx.fail("the host arena high-water mark exceeds the plan");
  // 1-bit Adam: after its freeze step a step exchanges compressed bytes.
  ts.plannedComm = ctx.planned.collectiveBytesAt(s);
  if (ts.stepComm > ts.plannedComm)
    return ctx.fail("step " + std::to_string(s) + " handed " +
                    std::to_string(ts.stepComm) +
                    " bytes to collectives, the plan " +
                    std::to_string(ts.plannedComm));
  ts.commAsPlanned += ts.stepComm == ts.plannedComm;
  // The step's loss: the mean over its micro-batches. The loss scaler sees
  // whether this step's gradients overflowed (the step then changed nothing
  // and does not count).
  StepFigures f;
  f.step = s;
  f.overflow = ctx.info.lossScaling && ctx.exec()->lastRunOverflowed();
  f.usedScale = ts.scaler.scale;
  if (ctx.info.lossScaling)
    ts.scaler.update(f.overflow);
  f.loss = step.lossSum / static_cast<double>(ts.accum);
  stats.milliseconds = step.msSum;
  stats.arenaHighWater = step.highWater;
  if (ctx.stages > 1) {
    stats.arenaHighWater = stats.arenaPlanned = 0;
    for (auto &[e, a] : step.arenas) {
      stats.arenaHighWater += a.first;
      stats.arenaPlanned += a.second;
    }
  }
  ts.totalMs += stats.milliseconds;
  if (s == ts.firstStep)
    ts.firstLoss = f.loss;
  ts.lastLoss = f.loss;
  f.samplesPerSecond =
      ts.data.samples * ts.accum / (stats.milliseconds / 1e3);
  const PlanInfo &info = ctx.info;
  f.lr = ds::scheduledLr(info.schedule, ts.lr, s, info.warmupSteps,
                         info.totalSteps, info.minLr);
  ++ts.stepsDone;
  // freeze_step auto: whether this step ends the warm-up (before its line
  // and its checkpoint).
  if (!observeFreezeAuto(ctx, ts.freeze, s, ts.progressBar))
    return false;
  printStep(ctx, ts, f);
  if (!monitorStep(ctx, ts, f)) // monitors, comms logger, flops profile
    return false;
  if (stats.arenaHighWater > stats.arenaPlanned)
    return ctx.fail("the arena high-water mark exceeds the plan");
  return saveStep(ctx, ts, s);
}

/// Per chunk: the bytes kept per micro-batch x the copies its part of the
/// schedule needs, against what the stash held.
bool checkStash(RunContext &ctx, TrainState &ts) {
  for (size_t k = 0; k < ctx.chunkPlans.size(); ++k) {
    int copies =
        ds::stashCopies(ctx.order, ctx.stage + static_cast<int>(k) * ctx.stages);
    ts.plannedStash += pipelineStashBytes(*ctx.chunkPlans[k]) * copies;
    ts.stashCopies += copies;
    ts.stashHigh += ctx.execs[k]->stashHighWater();
  }
  if (ts.stashHigh > ts.plannedStash)
    return ctx.fail("the activation stash held " +
                    std::to_string(ts.stashHigh) +
                    " bytes, more than the plan's " +
                    std::to_string(ts.plannedStash));
  return true;
}

/// Everything before step 1: data, storage checks, loss scaler, resume.
bool prepareTraining(RunContext &ctx, TrainState &ts) {
  const RunOptions &o = ctx.opts;
  if (!loadBatches(ctx, ts.data) || !loadTokens(ctx, ts.data))
    return false;
  ts.lr = std::isnan(o.lr) ? ctx.info.lr : o.lr;
  ts.firstLoss = ts.lastLoss = NAN;
  ts.accum = std::max<int64_t>(1, ctx.info.accumSteps);
  if (o.onNan == "skip" && ts.accum > 1)
    return ctx.fail("--on-nan=skip with gradient accumulation is not "
                    "supported yet (a skipped micro-batch would leave the "
                    "accumulated gradient partial); use --on-nan=stop");
  if (!measureStorage(ctx, ts))
    return false;
  // Per step: a pipeline stage's update section runs once (update_once).
  ts.plannedComm = ctx.planned.collectiveBytesPerStep();
  std::string err;
  if (ctx.info.lossScaling && !ts.scaler.configure(ctx.info.options, err))
    return ctx.fail(err);
  if (!startFreezeAuto(ctx, ts.freeze) || !probeSaveFolder(ctx) ||
      (!o.resumeDir.empty() && !resumeRun(ctx, ts)))
    return false;
  // A progress bar on a terminal for long runs (--no-progress-bar: lines).
  ts.progressBar = isatty(STDOUT_FILENO) && !o.noProgressBar &&
                   o.steps - ts.firstStep + 1 > 20;
  return prepareEval(ctx, ts) && buildOrder(ctx, ts.accum);
}

bool train(RunContext &ctx) {
  TrainState ts;
  if (!prepareTraining(ctx, ts) ||
      !evaluateIfDue(ctx, ts, ts.firstStep - 1, false))
    return false;
  for (long long s = ts.firstStep; s <= ctx.opts.steps; ++s) {
    StepRun step;
    uint64_t comm0 = ctx.sc->collectiveBytes;
    ctx.monitors->beginStep(ctx.stats);
    if (!runStep(ctx, ts, s, step))
      return false;
    if (!step.skipped && !finishStep(ctx, ts, s, step, comm0))
      return false;
    if (!evaluateIfDue(ctx, ts, s, s == ctx.opts.steps))
      return false;
  }
  ctx.closeLog();
  // Every hand-over delivered before the stages go on (or end).
  std::string err;
  if (ctx.stages > 1 && !ctx.world.flushSends(err))
    return ctx.fail(err);
  if (!checkStash(ctx, ts))
    return false;
  if (ctx.opts.profile)
    printProfile(ctx.stats);
  if (!saveTrainedWeights(ctx))
    return false;
  printTrainingReport(ctx, ts);
  ctx.monitors->finish(ctx);
  printEvalReport(ctx, ts);
  return true;
}

/// --forward-only: the forward program, --repeat times; then --outputs.
bool runForward(RunContext &ctx) {
  const RunOptions &o = ctx.opts;
  RunStats &stats = ctx.stats;
  Executor *exec = ctx.exec();
  std::string err;
  double totalMs = 0;
  for (long long r = 0; r < o.repeat; ++r) {
    stats.kernelTimes.clear();
    if (!exec->run(stats, err)) {
      ctx.closeLog();
      return ctx.fail(err);
    }
    totalMs += stats.milliseconds;
    double loss = itemLoss(ctx, exec);
    if (ctx.log)
      std::fprintf(ctx.log,
                   "{\"step\": %lld, \"loss\": %s, \"time_ms\": %.3f, "
                   "\"peak_bytes\": %llu, \"planned_bytes\": %llu}\n",
                   r, std::isnan(loss) ? "null" : std::to_string(loss).c_str(),
                   stats.milliseconds,
                   static_cast<unsigned long long>(stats.arenaHighWater),
                   static_cast<unsigned long long>(stats.arenaPlanned));
    if (r + 1 == o.repeat)
      printForward(ctx, loss, totalMs);
  }
  ctx.closeLog();
  if (stats.arenaHighWater > stats.arenaPlanned)
    return ctx.fail("the arena high-water mark exceeds the plan");
  if (o.profile)
    printProfile(stats);
  if (o.outputsPath.empty())
    return true;
  std::vector<std::string> names = exec->outputNames();
  std::vector<HostTensor> outs(names.size());
  std::vector<std::pair<std::string, const HostTensor *>> arrays;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!exec->output(names[i], outs[i], err))
      return ctx.fail(err);
    arrays.push_back({names[i], &outs[i]});
  }
  return writeNpz(o.outputsPath, arrays, err) || ctx.fail(err);
}

} // namespace

RunResult runPlan(const RunOptions &options, Communicator &world) {
  RunContext ctx(options, world);
  if (!setUpRun(ctx))
    return ctx.result;
  if (!ctx.trainingPlan && !options.evalDataPath.empty())
    ctx.fail("--eval-data needs a training plan (compiled with "
             "--optimizer=...); a forward plan evaluates with --forward-only");
  else if (ctx.trainingPlan)
    train(ctx);
  else
    runForward(ctx);
  return ctx.result;
}

RunResult consolidate(const RunOptions &options) {
  RunResult result;
  if (!consolidateCheckpoint(options.consolidateDir, options.outputPath,
                             options.withOptimizerState, result.error))
    result.ok = false;
  return result;
}

} // namespace ds::rt
