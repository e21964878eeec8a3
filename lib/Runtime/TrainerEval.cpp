//===- TrainerEval.cpp - evaluation during a training run -----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// --eval-data FILE.npz holds evaluation batches in --data's format (one
// global batch, or k stacked; each data-parallel rank takes its rows).
// Before step 1, every --eval-every steps and after the last step the
// plan's eval section (Executor::runEval) runs on each batch (or the
// first --eval-batches); the eval loss is the mean over the batches of the
// plan's loss output, which under data parallelism is already the mean
// over the ranks. It prints "eval loss X", goes to --log-json as an
// "eval_loss" line and into the report. Evaluation changes nothing the
// training reads: the next step feeds its own batch.
//
//===----------------------------------------------------------------------===//

#include "TrainerImpl.h"

#include <cmath>
#include <cstring>

namespace ds::rt {

bool prepareEval(RunContext &ctx, TrainState &ts) {
  const RunOptions &o = ctx.opts;
  if (o.evalDataPath.empty())
    return true;
  if (ctx.stages > 1)
    return ctx.fail("--eval-data: evaluation under pipeline parallelism is "
                    "not supported yet");
  std::string why = ctx.exec()->evalRefused();
  if (!why.empty())
    return ctx.fail("--eval-data: this plan cannot evaluate: " + why);
  EvalRun &ev = ts.eval;
  std::string err;
  if (!readNpz(o.evalDataPath, ev.data.arrays, err))
    return ctx.fail("--eval-data: " + err);
  // The inputs each step feeds (the training data's arrays and token
  // windows) are the ones an evaluation batch gives.
  const std::string where = "--eval-data '" + o.evalDataPath + "'";
  for (const auto &[name, spec] : ts.data.specs) {
    bool fed = ts.data.arrays.count(name) ||
               (!ts.data.tokens.empty() &&
                (name == ts.data.tokIn || name == ts.data.tokOut));
    if (!fed)
      continue;
    ev.data.specs.push_back({name, spec});
    auto it = ev.data.arrays.find(name);
    if (it == ev.data.arrays.end())
      return ctx.fail(where + " has no array '" + name +
                      "' (the training data feeds it every step)");
    if (!checkArray(ctx, ev.data, name, spec, it->second, where + ": array"))
      return false;
  }
  for (const auto &[name, t] : ev.data.arrays) {
    bool known = false;
    for (const auto &[n, spec] : ev.data.specs)
      known |= n == name;
    if (!known)
      return ctx.fail(where + " has array '" + name +
                      "', which the training data does not feed (it feeds: " +
                      ts.data.names + ")");
  }
  if (ev.data.specs.empty())
    return ctx.fail(where + ": the run feeds no graph input per step "
                            "(give --data or --tokens)");
  ev.batches = ev.data.batches;
  if (o.evalBatches > ev.batches)
    return ctx.fail("--eval-batches " + std::to_string(o.evalBatches) +
                    ": " + where + " holds " + std::to_string(ev.batches) +
                    " batch(es)");
  if (o.evalBatches > 0)
    ev.batches = o.evalBatches;
  return true;
}

namespace {
/// The eval loss over the batches (every rank takes part).
bool evaluate(RunContext &ctx, TrainState &ts, long long step) {
  EvalRun &ev = ts.eval;
  Executor *ex = ctx.exec();
  double sum = 0;
  for (int64_t m = 1; m <= ev.batches; ++m) {
    if (!feedBatches(ctx, ev.data, ex, m))
      return false;
    RunStats stats;
    std::string err;
    if (!ex->runEval(stats, err))
      return ctx.fail("evaluation after step " + std::to_string(step) + ": " +
                      err);
    ev.arenaHighWater = std::max(ev.arenaHighWater, stats.arenaHighWater);
    ev.arenaPlanned = stats.arenaPlanned;
    HostTensor l;
    if (!ex->output(ctx.info.loss, l, err))
      return ctx.fail(err);
    if (l.numel() != 1 || !convertTensor(l, DType::F32, err))
      return ctx.fail("evaluation: the loss '" + ctx.info.loss +
                      "' is not a scalar float");
    float f;
    std::memcpy(&f, l.data.data(), 4);
    sum += f;
  }
  double loss = sum / static_cast<double>(ev.batches);
  ev.losses.push_back({step, loss});
  if (ctx.lead) {
    std::printf("step %lld | eval loss %.6f (%lld batch%s)\n", step, loss,
                static_cast<long long>(ev.batches),
                ev.batches == 1 ? "" : "es");
    std::fflush(stdout);
  }
  if (ctx.log) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", loss); // float's every digit
    std::string digits = buf;
    std::fprintf(ctx.log,
                 "{\"step\": %lld, \"eval_loss\": %s, \"eval_batches\": "
                 "%lld, \"eval_peak_bytes\": %llu, "
                 "\"eval_planned_bytes\": %llu}\n",
                 step, std::isfinite(loss) ? digits.c_str() : "null",
                 static_cast<long long>(ev.batches),
                 static_cast<unsigned long long>(ev.arenaHighWater),
                 static_cast<unsigned long long>(ev.arenaPlanned));
    std::fflush(ctx.log);
  }
  return true;
}
} // namespace

bool evaluateIfDue(RunContext &ctx, TrainState &ts, long long step,
                   bool last) {
  const RunOptions &o = ctx.opts;
  if (o.evalDataPath.empty())
    return true;
  bool due = o.evalEvery > 0 && step % o.evalEvery == 0;
  if (!due && !last)
    return true;
  if (!ts.eval.losses.empty() && ts.eval.losses.back().first == step)
    return true; // evaluated at this step already
  return evaluate(ctx, ts, step);
}

void printEvalReport(RunContext &ctx, const TrainState &ts) {
  const EvalRun &ev = ts.eval;
  if (!ctx.lead || ev.losses.empty())
    return;
  std::printf("evaluated %zu time(s) on %lld batch%s: eval loss %.6f -> "
              "%.6f; eval arena high-water %llu (plan %llu) bytes\n",
              ev.losses.size(), static_cast<long long>(ev.batches),
              ev.batches == 1 ? "" : "es", ev.losses.front().second,
              ev.losses.back().second,
              static_cast<unsigned long long>(ev.arenaHighWater),
              static_cast<unsigned long long>(ev.arenaPlanned));
}

} // namespace ds::rt
