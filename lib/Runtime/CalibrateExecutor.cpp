//===- CalibrateExecutor.cpp - the executor's own time, the stash copies --===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// What a step costs beyond its kernels' calls (docs/calibration.md):
//  - the executor's dispatch of each instruction (the operands' views
//    built, the waits checked) and each run's setup, measured by running
//    plans of many tiny kernels through the executor itself: a run of N
//    `add`s of 16 elements takes run + N x (dispatch + the add's own
//    call), timed at two N; the add's own call is timed alone;
//  - a pipeline stage's activation stash: ds-run copies a micro-batch's
//    kept bytes out of the arena when another micro-batch needs it (a
//    save, into a buffer a finished micro-batch left: Executor::Impl::
//    stashPool) and back before its backward (a restore), which this
//    times the same way (memcpy into a buffer written before, and back).
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "PlanImpl.h"
#include "ds/Runtime/Runtime.h"

#include <algorithm>
#include <cstring>

namespace ds::rt {
namespace {

/// A plan of `n` instructions, each an `add` of two [16] f32 buffers into
/// a third (in the arena), named like a model's nodes.
std::shared_ptr<const Plan> tinyPlan(int n) {
  auto plan = std::make_shared<Plan>();
  plan::Plan &p = plan->proto;
  p.set_world_size(1);
  for (int b = 0; b < 3; ++b) {
    plan::Buffer *buf = p.add_buffers();
    buf->set_space(plan::ARENA);
    buf->set_offset(256 * b);
    buf->set_bytes(64);
    buf->set_dtype(plan::F32);
    buf->add_shape(16);
  }
  plan::Program *prog = p.add_programs();
  prog->set_arena_bytes(768);
  for (int i = 0; i < n; ++i) {
    plan::Instruction *ins = prog->add_instructions();
    ins->set_kind(plan::KIND_ADD);
    ins->set_kernel("add");
    ins->set_location("/encoder/layer." + std::to_string(i % 12) +
                      "/attention/output/Add_" + std::to_string(i));
    ins->add_inputs(i % 2);
    ins->add_inputs((i + 1) % 2);
    ins->add_outputs(2);
  }
  return plan;
}

/// The median seconds of one run of a plan of `n` tiny adds.
bool runSeconds(const CalibrationPlan &plan, int n, double budget,
                double &seconds, std::string &err) {
  ExecutorOptions o;
  o.threads = plan.threads;
  std::unique_ptr<Executor> ex = Executor::create(tinyPlan(n), o, err);
  if (!ex)
    return false;
  RunStats stats;
  // The run's own clock (RunStats::milliseconds), what a step reports.
  return medianSeconds(
      [&](std::string &e) {
        if (!ex->run(stats, e))
          return false;
        return true;
      },
      budget, 5, seconds, err);
}

} // namespace

bool measureExecutor(const CalibrationPlan &plan, ComputeFigures &f,
                     std::string &err) {
  double budget = plan.quick ? 0.03 : 0.3;
  const int small = 8, large = plan.quick ? 128 : 512;
  double tSmall = 0, tLarge = 0, own = 0;
  CalibrationTensors ts;
  KernelCall add;
  add.in = {ts.make(DType::F32, {16}), ts.make(DType::F32, {16})};
  add.out = {ts.make(DType::F32, {16})};
  if (!runSeconds(plan, small, budget, tSmall, err) ||
      !runSeconds(plan, large, budget, tLarge, err) ||
      !add.find("add", err) || !medianSeconds(add, budget, 5, own, err))
    return false;
  double perInstruction = (tLarge - tSmall) / (large - small);
  f.dispatchOverhead = perInstruction - own;
  f.runOverhead = tSmall - small * perInstruction;
  plan.progress("executor: %.3g s an instruction beyond its kernel's call "
                "(%.3g s a tiny add alone), %.3g s a run\n",
                f.dispatchOverhead, own, f.runOverhead);
  return true;
}

bool measureStash(const CalibrationPlan &plan, ComputeFigures &f,
                  std::string &err) {
  double budget = plan.quick ? 0.03 : 0.3;
  // Sizes of a stage's kept bytes (the benches' stages keep 1-6 MiB per
  // micro-batch).
  const size_t sizes[2] = {plan.quick ? size_t(1) << 20 : size_t(2) << 20,
                           plan.quick ? size_t(4) << 20 : size_t(8) << 20};
  std::vector<unsigned char> arena(sizes[1], 1);
  double save[2], restore[2];
  for (int k = 0; k < 2; ++k) {
    size_t b = sizes[k];
    std::vector<unsigned char> kept(b, 2);
    if (!medianSeconds(
            [&](std::string &) {
              std::memcpy(kept.data(), arena.data(), b);
              return kept[b - 1] == 1;
            },
            budget, 5, save[k], err) ||
        !medianSeconds(
            [&](std::string &) {
              std::memcpy(arena.data(), kept.data(), b);
              return true;
            },
            budget, 5, restore[k], err))
      return false;
  }
  // Through the two sizes (the larger one's own rate should the larger
  // not take longer).
  auto rate = [&](const double *t) {
    double d = static_cast<double>(sizes[1] - sizes[0]);
    return t[1] > t[0] ? d / (t[1] - t[0]) : sizes[1] / t[1];
  };
  f.stashSave = rate(save);
  f.stashRestore = rate(restore);
  plan.progress("pipeline stash: save %.3g B/s, restore %.3g B/s\n",
                f.stashSave, f.stashRestore);
  if (f.stashSave <= 0 || f.stashRestore <= 0) {
    err = "the stash copies took no time";
    return false;
  }
  return true;
}

} // namespace ds::rt
