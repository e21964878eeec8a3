//===- RunReport.cpp - progress lines and the report of a run ------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Every step prints a line (step, loss, lr, samples/s, time, arena against
// the plan, the loss scaler's state, the ETA) or, for a long run on a
// terminal, a progress bar; --log-json writes the same as JSON. A training
// run ends with the layout of its ranks, the memory and collective bytes
// measured against the plan, the loss trend and a one-line summary; a
// forward run with one line.
//
//===----------------------------------------------------------------------===//

#include "Monitor.h"
#include "TrainerImpl.h"

#include <algorithm>
#include <cmath>

namespace ds::rt {

namespace {

std::string human(uint64_t bytes) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

using ull = unsigned long long;

/// `v` with the digits that read back exactly ("%.17g").
std::string fullDigits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// The step's JSON object (--log-json).
void logStep(RunContext &ctx, const TrainState &ts, const StepFigures &f) {
  const RunStats &stats = ctx.stats;
  std::string scaler;
  if (ctx.info.lossScaling)
    scaler = ", \"loss_scale\": " + std::to_string(f.usedScale) +
             ", \"overflow\": " + (f.overflow ? "true" : "false") +
             ", \"skipped\": " + std::to_string(ctx.exec()->skippedSteps()) +
             ", \"hysteresis\": " + std::to_string(ts.scaler.curHysteresis) +
             ", \"next_loss_scale\": " + std::to_string(ts.scaler.scale);
  if (ts.freeze.active && ts.freeze.measuredAt == f.step) // freeze_step auto
    scaler += ", \"v_norm\": " + fullDigits(ts.freeze.lastNorm) +
              ", \"freeze_change\": " +
              (std::isnan(ts.freeze.lastChange)
                   ? std::string("null")
                   : fullDigits(ts.freeze.lastChange));
  std::fprintf(ctx.log,
               "{\"step\": %lld, \"loss\": %s, \"lr\": %s, "
               "\"samples_per_s\": %.3f, \"time_ms\": %.3f, "
               "\"peak_bytes\": %llu, \"planned_bytes\": %llu, "
               "\"collective_bytes\": %llu, "
               "\"planned_collective_bytes\": %llu%s%s}\n",
               f.step,
               std::isnan(f.loss) ? "null" : std::to_string(f.loss).c_str(),
               std::isnan(f.lr) ? "null" : fullDigits(f.lr).c_str(),
               f.samplesPerSecond, stats.milliseconds,
               static_cast<ull>(stats.arenaHighWater),
               static_cast<ull>(stats.arenaPlanned),
               static_cast<ull>(ts.stepComm), static_cast<ull>(ts.plannedComm),
               scaler.c_str(), ctx.monitors->breakdownJson(stats).c_str());
}

/// The ranks' layout: pipeline stages (every stage reports its own), data
/// and tensor parallelism.
void printLayout(RunContext &ctx, const TrainState &ts) {
  Communicator &sc = *ctx.sc;
  if (ctx.stages > 1 && sc.rank() == 0)
    std::printf("pipeline of %d stages (schedule %s, %lld micro-batches per "
                "step) x %d data-parallel x %d tensor-parallel ranks; this "
                "is stage %d: activation stash %llu bytes at most, planned "
                "%llu (%d cop%s of the kept bytes of %d chunk%s); "
                "collectives %llu (%llu planned) bytes in the last step, "
                "as planned in %lld of %lld steps; arena high-water %llu "
                "(%llu planned); figures below are this stage's\n",
                ctx.stages, ctx.scheduleName.c_str(),
                static_cast<long long>(ts.accum), ctx.dpSize,
                ctx.tensorParallel, ctx.stage, static_cast<ull>(ts.stashHigh),
                static_cast<ull>(ts.plannedStash), ts.stashCopies,
                ts.stashCopies == 1 ? "y" : "ies", ctx.virt,
                ctx.virt == 1 ? "" : "s", static_cast<ull>(ts.stepComm),
                static_cast<ull>(ts.plannedComm), ts.commAsPlanned,
                static_cast<long long>(ts.stepsDone),
                static_cast<ull>(ctx.stats.arenaHighWater),
                static_cast<ull>(ctx.stats.arenaPlanned));
  if (!ctx.lead)
    return;
  if (ts.accum > 1)
    std::printf("each step accumulated %lld micro-batches\n",
                static_cast<long long>(ts.accum));
  if (ctx.tensorParallel > 1)
    std::printf("data parallel over %d group(s) of %d tensor-parallel "
                "ranks (%d ranks), ZeRO stage %d (losses and gradients are "
                "the means over the groups)\n",
                ctx.dpSize, ctx.tensorParallel, sc.size(), ctx.planned.stage);
  else if (sc.size() > 1)
    std::printf("data parallel over %d ranks, ZeRO stage %d (losses and "
                "gradients are the means over ranks)\n",
                sc.size(), ctx.planned.stage);
}

/// The run in one line: throughput, memory against the plan, skips; and
/// what offload moved.
void printSummary(RunContext &ctx, const TrainState &ts) {
  const Footprint &planned = ctx.planned;
  const RunStats &stats = ctx.stats;
  long long ran = ctx.opts.steps - ts.firstStep + 1;
  double seconds = ts.totalMs / 1e3;
  double sampleRate =
      seconds > 0 ? ts.data.samples * ts.accum * ran / seconds : 0;
  uint64_t plannedPeak = planned.total();
  uint64_t measuredPeak = ts.measuredParams + ts.measuredBuffers +
                          ts.measuredState + stats.arenaHighWater -
                          ts.measuredHost - ts.measuredNvme;
  std::printf("summary: %lld steps in %s; mean %.1f samples/s", ran,
              clockText(seconds).c_str(), sampleRate);
  if (ts.data.tokensPerSample > 0)
    std::printf(", %.1f tokens/s", sampleRate * ts.data.tokensPerSample);
  std::printf("; peak memory per rank %llu bytes measured, %llu planned; "
              "skipped steps %llu\n",
              static_cast<ull>(measuredPeak), static_cast<ull>(plannedPeak),
              static_cast<ull>(ctx.exec()->skippedSteps()));
  if (planned.hostTotal() + planned.nvmeStorage > 0)
    std::printf("offload: host memory per rank %llu bytes measured, %llu "
                "planned (storage %llu, host arena %llu); NVMe %llu bytes; "
                "per step device->host %llu, host->device %llu, NVMe "
                "read %llu, written %llu bytes (planned %llu, %llu, %llu, "
                "%llu)\n",
                static_cast<ull>(ts.measuredHost + stats.hostArenaHighWater),
                static_cast<ull>(planned.hostTotal()),
                static_cast<ull>(ts.measuredHost),
                static_cast<ull>(stats.hostArenaHighWater),
                static_cast<ull>(ts.measuredNvme),
                static_cast<ull>(ts.stepToHost),
                static_cast<ull>(ts.stepToDevice),
                static_cast<ull>(ts.stepNvmeRead),
                static_cast<ull>(ts.stepNvmeWrite),
                static_cast<ull>(planned.toHostBytes),
                static_cast<ull>(planned.toDeviceBytes),
                static_cast<ull>(planned.nvmeReadBytes),
                static_cast<ull>(planned.nvmeWriteBytes));
}

} // namespace

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string clockText(double seconds) {
  char buf[32];
  if (seconds < 1)
    std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  else if (seconds < 60)
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  else if (seconds < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(seconds) / 3600,
                  static_cast<int>(seconds) / 60 % 60);
  return buf;
}

void printStep(RunContext &ctx, const TrainState &ts, const StepFigures &f) {
  const RunStats &stats = ctx.stats;
  long long s = f.step, steps = ctx.opts.steps, first = ts.firstStep;
  char lrText[32] = "-"; // unknown for a model's own training_info
  if (!std::isnan(f.lr))
    std::snprintf(lrText, sizeof lrText, "%.3g", f.lr);
  char scaleText[160] = "";
  if (ctx.info.lossScaling)
    std::snprintf(scaleText, sizeof scaleText,
                  " | loss scale %g%s | skipped %lld | hysteresis %lld",
                  f.usedScale, f.overflow ? " (overflow: step skipped)" : "",
                  static_cast<long long>(ctx.exec()->skippedSteps()),
                  static_cast<long long>(ts.scaler.curHysteresis));
  // Time left at the mean step time so far.
  double eta = ts.totalMs / ts.stepsDone * static_cast<double>(steps - s) / 1e3;
  char etaText[48] = "";
  if (s < steps)
    std::snprintf(etaText, sizeof etaText, " | ETA %s", clockText(eta).c_str());
  if (ctx.lead && ts.progressBar) {
    // A bar on a terminal when the run is long; a full line every tenth.
    int width = 30,
        filled = static_cast<int>(width * (s - first + 1) / (steps - first + 1));
    std::printf("\r[%s%s] step %lld/%lld | loss %.6f | %.1f samples/s%s   ",
                std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), s, steps, f.loss,
                f.samplesPerSecond, etaText);
    if (s == steps ||
        (s - first + 1) % std::max<long long>(1, (steps - first + 1) / 10) == 0)
      std::printf("\n");
  } else if (ctx.lead && ctx.monitors->printsStep(s, steps)) {
    std::printf("step %lld/%lld | loss %.6f | lr %s | %.1f samples/s | %.3f ms "
                "| arena %s of %s planned%s%s\n",
                s, steps, f.loss, lrText, f.samplesPerSecond,
                stats.milliseconds, human(stats.arenaHighWater).c_str(),
                human(stats.arenaPlanned).c_str(), scaleText, etaText);
    std::fputs(ctx.monitors->breakdownText(stats).c_str(), stdout);
  }
  std::fflush(stdout);
  if (ctx.log && ctx.lead)
    logStep(ctx, ts, f);
}

void printTrainingReport(RunContext &ctx, const TrainState &ts) {
  printLayout(ctx, ts);
  if (!ctx.lead)
    return;
  const Footprint &planned = ctx.planned;
  // "measured (planned)".
  auto vs = [](uint64_t measured, uint64_t plan) {
    return std::to_string(measured) + " (" + std::to_string(plan) + ")";
  };
  std::printf("per rank, measured (plan): parameters %s, buffers %s, "
              "optimizer state %s, arena high-water %s bytes; collectives "
              "%s bytes per step\n",
              vs(ts.measuredParams, planned.params).c_str(),
              vs(ts.measuredBuffers, planned.buffers).c_str(),
              vs(ts.measuredState, planned.state).c_str(),
              vs(ctx.stats.arenaHighWater, planned.arena).c_str(),
              vs(ts.stepComm, ts.plannedComm).c_str());
  long long ran = ctx.opts.steps - ts.firstStep + 1;
  std::printf("trained %lld steps (%s, %lld batch%s): loss %.6f -> %.6f, "
              "mean %.3f ms/step\n",
              ran, ctx.info.optimizer.c_str(),
              static_cast<long long>(ts.data.batches),
              ts.data.batches == 1 ? "" : "es", ts.firstLoss, ts.lastLoss,
              ts.totalMs / ran);
  printSummary(ctx, ts);
}

void printForward(RunContext &ctx, double loss, double totalMs) {
  const RunStats &stats = ctx.stats;
  long long repeat = ctx.opts.repeat;
  std::printf("forward:");
  if (!std::isnan(loss))
    std::printf(" loss %.6f |", loss);
  std::printf(" %.3f ms", repeat > 1 ? totalMs / repeat : stats.milliseconds);
  if (repeat > 1)
    std::printf(" (mean of %lld)", repeat);
  std::printf(" | arena %s planned, %s high-water | %zu kernels, %lld threads\n",
              human(stats.arenaPlanned).c_str(),
              human(stats.arenaHighWater).c_str(), ctx.info.instructions,
              static_cast<long long>(ctx.opts.threads));
}

void printProfile(const RunStats &stats) {
  // The last run's kernels, slowest first; GEMMs with their throughput.
  std::vector<std::pair<double, std::string>> rows;
  for (const auto &[k, v] : stats.kernelTimes)
    rows.push_back({v.milliseconds, k});
  std::sort(rows.rbegin(), rows.rend());
  std::printf("profile of the last run:\n");
  for (const auto &[ms, k] : rows) {
    const RunStats::KernelTime &t = stats.kernelTimes.at(k);
    std::printf("  %-28s %9.3f ms  %6lld calls", k.c_str(), ms,
                static_cast<long long>(t.calls));
    if (t.flops > 0 && ms > 0)
      std::printf("  %8.2f GFLOP/s", t.flops / (ms * 1e6));
    std::printf("\n");
  }
}

} // namespace ds::rt
