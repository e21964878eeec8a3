//===- MemorySearch.cpp - fitting a plan into the device memory -----------===//
//
// Part of the ds project.
//
// --offload=auto and --recompute=auto/budget=SIZE: the choices found by
// compiling and planning candidate plans, judged by their planned per-rank
// peak.
//
//===----------------------------------------------------------------------===//

#include "CompileSteps.h"

using namespace mlir;
using namespace mlir::ds;

LogicalResult mlir::ds::searchOffload(StepCompiler &compiler, int64_t limit,
                                      MemoryChoices &choices,
                                      std::string &log) {
  // Offload only what recompute alone cannot fit: the optimizer state first
  // (DeepSpeed's ZeRO-Offload), then at ZeRO-3 the parameters, then the
  // saved activations.
  MemoryChoices probe = choices;
  if (probe.recomputeMode == "auto" || probe.recomputeMode == "budget")
    probe.recomputeMode = "full";
  probe.recomputeBudget = 0;
  OwningOpRef<ModuleOp> plan;
  int64_t before = compiler.peakOf(plan, probe), now = before;
  if (before < 0)
    return failure();
  std::string chose;
  if (now > limit && probe.offloadOptimizer == "none") {
    probe.offloadOptimizer = choices.offloadOptimizer = "host";
    chose = "--offload-optimizer=cpu";
    if ((now = compiler.peakOf(plan, probe)) < 0)
      return failure();
  }
  if (now > limit && probe.offloadParam == "none" &&
      compiler.getOptions().zeroStage == 3) {
    probe.offloadParam = choices.offloadParam = "host";
    chose += chose.empty() ? "--offload-param=cpu" : " --offload-param=cpu";
    if ((now = compiler.peakOf(plan, probe)) < 0)
      return failure();
  }
  // Then the saved activations on the host, in place of recompute where
  // the mode was a search (the recompute search then runs with them).
  if (now > limit && probe.offloadActivations == "none") {
    MemoryChoices act = probe;
    act.offloadActivations = "host";
    if (choices.recomputeMode == "auto" || choices.recomputeMode == "budget")
      act.recomputeMode = "none";
    int64_t p = compiler.peakOf(plan, act);
    if (p < 0)
      return failure();
    if (p < now) {
      now = p;
      probe = act;
      choices.offloadActivations = "host";
      chose += chose.empty() ? "--offload-activations=cpu"
                             : " --offload-activations=cpu";
    }
  }
  log += "offload auto: " +
         (chose.empty() ? std::string("nothing offloaded, ") + mib(before) +
                              " fits with recompute"
                        : "chose " + chose + ": the device peak " +
                              mib(before) + " became " + mib(now)) +
         " (--recompute=" + probe.recomputeMode + ")\n";
  return success();
}

llvm::Error mlir::ds::searchRecompute(StepCompiler &compiler, int64_t budget,
                                      MemoryChoices &choices,
                                      OwningOpRef<ModuleOp> &searched,
                                      int64_t &searchedPeak, std::string &log) {
  auto reported = [] { return llvm::make_error<ReportedError>(); };
  const std::string &spec = compiler.getOptions().recompute;
  // Keep everything if it fits; else the least recompute whose planned peak
  // fits, found with the real memory plan: the pass's budget is the
  // activation bytes its model may keep, lowered by any overshoot of the
  // planned peak until the plan fits.
  MemoryChoices trial = choices;
  trial.recomputeMode = "none";
  trial.recomputeBudget = 0;
  // The plan to write: `mode`, compiled as `plan` with `peak`.
  auto settle = [&](llvm::StringRef mode, OwningOpRef<ModuleOp> &plan,
                    int64_t peak) {
    choices.recomputeMode = mode.str();
    searched = std::move(plan);
    searchedPeak = peak;
  };
  OwningOpRef<ModuleOp> none, full;
  int64_t peakNone = compiler.peakOf(none, trial);
  if (peakNone < 0)
    return reported();
  if (peakNone <= budget) {
    settle("none", none, peakNone);
    log += "recompute " + spec + ": every activation kept, the peak " +
           mib(peakNone) + " fits " + mib(budget) + "\n";
    return llvm::Error::success();
  }
  trial.recomputeMode = "full";
  int64_t peakFull = compiler.peakOf(full, trial);
  if (peakFull < 0)
    return reported();
  if (peakFull > budget)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "a per-rank peak of " + mib(budget) +
            " is below the minimum feasible budget of " + mib(peakFull) +
            " (--recompute=full; without recompute " + mib(peakNone) + ")");
  DictionaryAttr sum = recomputeSummary(*full);
  int64_t actNone = sum.getAs<DenseI64ArrayAttr>("none")[0];
  int64_t actMin = sum.getAs<DenseI64ArrayAttr>("full")[0];
  int64_t target = actNone - (peakNone - budget);
  choices.recomputeMode = "full";
  int tries = 0;
  trial.recomputeMode = "budget";
  for (; tries < 16 && target >= actMin; ++tries) {
    OwningOpRef<ModuleOp> plan;
    trial.recomputeBudget = target;
    int64_t p = compiler.peakOf(plan, trial);
    if (p < 0)
      return reported();
    if (p <= budget) {
      settle("budget", plan, p);
      break;
    }
    // Lower by the overshoot, and below what this plan keeps, so that the
    // next plan differs.
    int64_t kept =
        recomputeSummary(*plan).getAs<DenseI64ArrayAttr>("chosen")[0];
    target = std::min(target - (p - budget), kept - 1);
  }
  log += "recompute " + spec + ": budget " + mib(budget) + "; none peaks at " +
         mib(peakNone) + ", full at " + mib(peakFull) + "; " +
         (choices.recomputeMode == "budget"
              ? "chose the cheapest plan keeping " + std::to_string(target) +
                    " activation bytes (model) after " +
                    std::to_string(tries + 1) + " plan(s)"
              : std::string("no cheaper plan fits: full")) +
         "\n";
  choices.recomputeBudget = target;
  if (choices.recomputeMode == "full")
    settle("full", full, peakFull);
  return llvm::Error::success();
}
