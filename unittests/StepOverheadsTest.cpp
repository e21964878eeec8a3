//===- StepOverheadsTest.cpp - the step's time beyond its kernels ---------===//
//
// Part of the ds project. The simulator's terms for what a CPU step costs
// beyond its kernels' calls (docs/planner.md, "The simulator's model"), on
// hand-built plans whose times are round numbers: the executor's dispatch
// and run overheads, a pipeline stage's stash copies (which items save and
// restore, and the schedule they stretch), and the update section that
// runs after every micro-batch without update_once. Times are compared to
// 1e-9 relative.
//
//===----------------------------------------------------------------------===//

#include "ds/Support/Cluster.h"
#include "ds/Support/PipelineSchedule.h"
#include "ds/Support/StepSimulator.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

namespace {

namespace pb = ds::plan;

/// A CPU at 1e9 FLOP/s whose memory and links cost nothing.
ds::ClusterSpec cpuCluster(int devices) {
  ds::ClusterSpec c;
  c.gpu = false;
  c.devicesPerNode = devices;
  c.flops[0] = c.flops[1] = c.flops[2] = 1e9;
  c.memoryBandwidth = 1e30;
  c.intraNode = {true, 1e30, 0};
  c.interNode = {true, 1e30, 0};
  return c;
}

pb::Instruction *addKernel(pb::Program *prog, pb::Kind kind, double flops) {
  pb::Instruction *ins = prog->add_instructions();
  ins->set_kind(kind);
  ins->set_flops(static_cast<uint64_t>(flops));
  return ins;
}

void expectNear(double got, double want) {
  EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::abs(want)));
}

TEST(StepOverheads, DispatchAndRunOnACpu) {
  // Three GEMMs of 1 ms; 10 us per instruction, 100 us per run: 3.13 ms a
  // run, twice with two accumulation steps. A GPU's thread issues ahead:
  // nothing charged there.
  for (int k : {1, 2}) {
    pb::Plan plan;
    pb::Program *prog = plan.add_programs();
    for (int i = 0; i < 3; ++i) {
      pb::Instruction *g = addKernel(prog, pb::KIND_MATMUL, 1e6);
      if (i == 2 && k > 1)
        g->mutable_optimizer()->set_accum_steps(k);
    }
    ds::ClusterSpec c = cpuCluster(1);
    c.dispatchOverhead = 1e-5;
    c.runOverhead = 1e-4;
    ds::StepPrediction s = ds::predictStep(plan, c, ds::Precision::FP32);
    expectNear(s.stepSeconds, k * (3e-3 + 3e-5 + 1e-4));
    expectNear(s.computeSeconds, k * 3e-3);
    expectNear(s.timeline.overheadSeconds, 3e-5 + 1e-4);
    c.gpu = true;
    expectNear(ds::predictStep(plan, c, ds::Precision::FP32).stepSeconds,
               k * 3e-3);
  }
}

TEST(StepOverheads, StashSecondsDefaultToACopy) {
  ds::ClusterSpec c = cpuCluster(1);
  c.memoryBandwidth = 4e9;
  // No rates: read and write at the memory bandwidth.
  expectNear(ds::stashSeconds(c, 1e6, false), 5e-4);
  expectNear(ds::stashSeconds(c, 1e6, true), 5e-4);
  c.stashSaveBytesPerSecond = 1e9;
  c.stashRestoreBytesPerSecond = 2e9;
  expectNear(ds::stashSeconds(c, 1e6, false), 1e-3);
  expectNear(ds::stashSeconds(c, 1e6, true), 5e-4);
}

TEST(StepOverheads, StashTrafficOf1F1B) {
  // 1F1B, 2 stages, 4 micro-batches. Rank 0 runs F0 F1 B0 F2 B1 F3 B2 B3:
  // F1 saves F0's state; B0 saves F1's and restores its own; F2 finds the
  // arena free; ...; B3 restores (B2 left the arena free). The last rank
  // runs each backward right after its forward: no copies.
  auto order = ds::pipelineSchedule("1f1b", 2, 4);
  ASSERT_EQ(order.size(), 2u);
  std::vector<ds::StashTraffic> t = ds::stashTraffic(order[0]);
  ASSERT_EQ(t.size(), 8u);
  const bool save[] = {false, true, true, false, true, false, true, false};
  const bool restore[] = {false, false, true, false, true, false, true, true};
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(t[i].save, save[i]);
    EXPECT_EQ(t[i].restore, restore[i]);
  }
  for (const ds::StashTraffic &x : ds::stashTraffic(order[1]))
    EXPECT_FALSE(x.save || x.restore);
}

/// A stage plan: a forward GEMM of F FLOPs, the backward mark, a backward
/// GEMM of 2F; `stash` bytes kept per micro-batch.
void addStage(pb::Pipeline *pl, double f, double stash) {
  pb::Plan *sp = pl->add_stage_plans();
  pb::Program *prog = sp->add_programs();
  addKernel(prog, pb::KIND_MATMUL, f);
  addKernel(prog, pb::KIND_PIPE_MARK, 0);
  addKernel(prog, pb::KIND_MATMUL, 2 * f);
  sp->mutable_pipeline()->set_backward_start(1);
  sp->mutable_pipeline()->set_stages(pl->stages());
  sp->mutable_pipeline()->set_stash_bytes(static_cast<uint64_t>(stash));
}

TEST(StepOverheads, StashCopiesStretchThePipeline) {
  // Forward 1 ms, backward 2 ms; 1 MB kept, saved in 1 ms and restored in
  // 0.5 ms. Rank 0: F0 [0,1], F1 [1,3] (a save), B0 [4,7.5] (after rank
  // 1's B0 [2,4]; a save and a restore), F2 [7.5,8.5], B1 [8.5,12],
  // F3 [12,13], B2 [13,16.5], B3 [16.5,19] (after rank 1's B3 [14,16];
  // a restore). 15 ms without the copies.
  pb::Plan plan;
  pb::Pipeline *pl = plan.mutable_pipeline();
  pl->set_stages(2);
  pl->set_micro_batches(4);
  pl->set_schedule("1f1b");
  for (int s = 0; s < 2; ++s)
    addStage(pl, 1e6, 1e6);
  ds::ClusterSpec c = cpuCluster(2);
  c.stashSaveBytesPerSecond = 1e9;
  c.stashRestoreBytesPerSecond = 2e9;
  ds::StepPrediction s = ds::predictStep(plan, c, ds::Precision::FP32);
  expectNear(s.stepSeconds, 19e-3);
  // Rank 0's kernels (12 ms) and its copies (4 saves, 4 restores).
  expectNear(s.computeSeconds, 12e-3 + 4e-3 + 2e-3);
  c.stashSaveBytesPerSecond = c.stashRestoreBytesPerSecond = 0;
  expectNear(ds::predictStep(plan, c, ds::Precision::FP32).stepSeconds,
             15e-3);
}

TEST(StepOverheads, UpdateAfterEveryMicroBatchAccumulates) {
  // One stage, 4 micro-batches: F 1 ms, B 2 ms, then an update section of
  // one Adam (1 ms) over 5e5 parameters. Without update_once the first
  // three backwards also run the update section, whose Adam only adds the
  // gradient to its accumulator: an add of 5e5 elements, 0.5 ms at 1e9
  // FLOP/s. 4 x 3 + 3 x 0.5 + 1 = 14.5 ms; with update_once 13 ms.
  for (bool once : {false, true}) {
    pb::Plan plan;
    pb::Pipeline *pl = plan.mutable_pipeline();
    pl->set_stages(1);
    pl->set_micro_batches(4);
    pl->set_schedule("1f1b");
    pb::Plan *sp = pl->add_stage_plans();
    pb::Buffer *param = sp->add_buffers();
    param->set_bytes(2000000);
    param->set_dtype(pb::F32);
    pb::Program *prog = sp->add_programs();
    addKernel(prog, pb::KIND_MATMUL, 1e6);
    addKernel(prog, pb::KIND_PIPE_MARK, 0);
    addKernel(prog, pb::KIND_MATMUL, 2e6);
    pb::Instruction *adam = addKernel(prog, pb::KIND_ADAM, 1e6);
    adam->add_inputs(0);
    adam->mutable_optimizer()->set_accum_steps(4);
    sp->mutable_pipeline()->set_backward_start(1);
    sp->mutable_pipeline()->set_update_start(3);
    sp->mutable_pipeline()->set_update_once(once);
    sp->mutable_pipeline()->set_stages(1);
    ds::ClusterSpec c = cpuCluster(1);
    ds::StepPrediction s = ds::predictStep(plan, c, ds::Precision::FP32);
    SCOPED_TRACE(once ? "update_once" : "after every micro-batch");
    expectNear(s.stepSeconds, once ? 13e-3 : 14.5e-3);
    // The full update counts once in the kernel time.
    expectNear(s.computeSeconds, once ? 13e-3 : 14.5e-3);
  }
}

} // namespace
