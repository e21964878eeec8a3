//===- ExecutorEval.cpp - running the plan's evaluation section -----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The eval section (plan.proto's Plan.eval, written by ds-opt's
// EvalSection.cpp) is the part of the step that computes the loss, with
// dropout as the identity; it runs on the same buffers, so its loss is
// read with output() as the step's is. It writes no parameter or state and
// does not count as a run: the step counter, the loss scaler's state and
// the random draws of the next step stay as they were. Its arena peak is
// checked against the plan's eval figure (planned = measured).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include <chrono>

namespace ds::rt {

std::string Executor::evalRefused() const {
  const plan::Plan &p = impl->p();
  if (p.eval().instructions_size() > 0)
    return "";
  return p.eval_refused().empty()
             ? "the plan has no eval section (compiled by an older ds-opt)"
             : p.eval_refused();
}

bool Executor::Impl::prepareEval(std::string &err) {
  Impl &im = *this;
  const plan::Program &eval = im.p().eval();
  if (im.evalKernels.empty()) {
    for (const plan::Instruction &ins : eval.instructions()) {
      const KernelInfo *k = im.device && !ins.on_host()
                                ? im.device->kernel(ins.kernel())
                                : findKernel(ins.kernel());
      if (!k) {
        im.evalKernels.clear();
        err = "the eval section needs kernel '" + ins.kernel() +
              "', which this backend does not have";
        return false;
      }
      im.evalKernels.push_back(k);
      for (uint32_t id : ins.outputs()) {
        const plan::Buffer &b = im.p().buffers(id);
        if (b.space() == plan::ARENA)
          im.evalHighWater =
              std::max<uint64_t>(im.evalHighWater, b.offset() + b.bytes());
        if (b.space() == plan::HOST_ARENA)
          im.evalHostHighWater =
              std::max<uint64_t>(im.evalHostHighWater, b.offset() + b.bytes());
      }
    }
  }
  for (const plan::Instruction &ins : eval.instructions())
    for (uint32_t id : ins.inputs()) {
      const plan::Buffer &b = im.p().buffers(id);
      if (b.space() == plan::INPUT && !im.inputSet[b.slot()]) {
        err = "input '" + im.p().inputs(b.slot()).name() + "' was not given";
        return false;
      }
    }
  return true;
}

bool Executor::runEval(RunStats &stats, std::string &err) {
  Impl &im = *impl;
  if (std::string why = evalRefused(); !why.empty()) {
    err = "evaluation: " + why;
    return false;
  }
  if (!im.prepareEval(err))
    return false;
  if (im.nvmeShadow && !im.pushShadow(err))
    return false;
  if (!im.bindForRun(err))
    return false;
  const plan::Program &eval = im.p().eval();
  auto t0 = std::chrono::steady_clock::now();
  // No step state changes: the overflow flag and the runs counter belong
  // to the training steps.
  KernelContext::StepState saved = im.stepState;
  im.stepState = {};
  im.evalRunning = true;
  bool ok = im.runInstructions(0, eval.instructions_size(), im.lastRunSeed,
                               false, stats, err);
  im.evalRunning = false;
  im.stepState = saved;
  if (!ok)
    return false;
  if (im.device && !(im.device->synchronize(err) && im.dropCopies(err))) {
    err = "evaluation failed on " + im.device->describe() + ": " + err;
    return false;
  }
  if (im.nvme && !im.nvme->waitAll(err))
    return false;
  if (im.inflightCount() != 0) {
    err = "the eval section started " + std::to_string(im.inflightCount()) +
          " collective(s) it never waited for";
    return false;
  }
  stats.arenaPlanned = eval.arena_bytes();
  stats.arenaHighWater = im.evalHighWater;
  stats.hostArenaPlanned = eval.host_arena_bytes();
  stats.hostArenaHighWater = im.evalHostHighWater;
  stats.milliseconds = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
  if (stats.arenaHighWater > stats.arenaPlanned ||
      stats.arenaPlanned > im.p().programs(0).arena_bytes()) {
    err = "the eval section's arena high-water mark (" +
          std::to_string(stats.arenaHighWater) + " bytes) exceeds its plan (" +
          std::to_string(stats.arenaPlanned) + ") or the step's arena";
    return false;
  }
  return true;
}

} // namespace ds::rt
