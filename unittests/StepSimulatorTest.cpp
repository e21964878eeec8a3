//===- StepSimulatorTest.cpp - the step simulator on hand-computed steps --===//
//
// Part of the ds project. Small plans built by hand (kernels with given
// FLOPs and bytes) on a cluster whose figures make each time a round
// number: the pipeline bubble of 1F1B and GPipe, an all-reduce overlapping
// compute, an offload transfer hidden or exposed, the alpha-beta formula,
// the GEMM shape classes, and the executor's overheads, the pipeline
// stash's copies and the accumulating update runs, the loss gradient
// charged for the labels that count. Times are compared to
// 1e-9 relative: sums of a few doubles.
//
//===----------------------------------------------------------------------===//

#include "ds/Support/Cluster.h"
#include "ds/Support/PipelineSchedule.h"
#include "ds/Support/PlanTimeline.h"
#include "ds/Support/StepSimulator.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

namespace {

namespace pb = ds::plan;

/// 1e9 FLOP/s at every precision, memory and links that cost nothing
/// unless a test sets them, no launch overhead.
ds::ClusterSpec unitCluster(int devices) {
  ds::ClusterSpec c;
  c.devicesPerNode = devices;
  c.flops[0] = c.flops[1] = c.flops[2] = 1e9;
  c.memoryBandwidth = 1e30;
  c.intraNode = {true, 1e30, 0};
  c.interNode = {true, 1e30, 0};
  c.host = {true, 1e12, 1e30, 1e30};
  c.launchOverhead = 0;
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

/// A stage plan: a forward GEMM of F FLOPs, the backward mark, a backward
/// GEMM of 2F.
void addStage(pb::Pipeline *pl, double f) {
  pb::Plan *sp = pl->add_stage_plans();
  pb::Program *prog = sp->add_programs();
  addKernel(prog, pb::KIND_MATMUL, f);
  addKernel(prog, pb::KIND_PIPE_MARK, 0);
  addKernel(prog, pb::KIND_MATMUL, 2 * f);
  sp->mutable_pipeline()->set_backward_start(1);
  sp->mutable_pipeline()->set_stages(pl->stages());
}

TEST(StepSimulator, PipelineBubbleMatchesTheFormula) {
  // Equal stages of 1 ms forward and 2 ms backward: 1F1B and GPipe both
  // take (m + p - 1) x 3 ms with (p - 1) / (m + p - 1) idle.
  for (const char *kind : {"1f1b", "gpipe"})
    for (auto [p, m] : {std::pair{2, 4}, {4, 8}, {4, 1}, {8, 16}, {3, 5}}) {
      pb::Plan plan;
      pb::Pipeline *pl = plan.mutable_pipeline();
      pl->set_stages(p);
      pl->set_micro_batches(m);
      pl->set_schedule(kind);
      for (int s = 0; s < p; ++s)
        addStage(pl, 1e6);
      ds::ClusterSpec c = unitCluster(p);
      ds::StepPrediction s = ds::predictStep(plan, c, ds::Precision::FP32);
      SCOPED_TRACE(std::string(kind) + " p=" + std::to_string(p) +
                   " m=" + std::to_string(m));
      expectNear(s.bubbleFraction, double(p - 1) / (m + p - 1));
      expectNear(s.stepSeconds, (m + p - 1) * 3e-3);
      expectNear(s.computeSeconds, m * 3e-3);
      EXPECT_EQ(s.microBatches, m);
      EXPECT_EQ(s.bottleneck, p - 1 > m ? ds::Bottleneck::Bubble
                                        : ds::Bottleneck::Compute);
      // The schedule for the trace: 2m items and an update per rank, in
      // order on each rank; the last rank's first forward waits for the
      // p-1 before it (1 ms each).
      ASSERT_EQ(s.timeline.events.size(), static_cast<size_t>(p * (2 * m + 1)));
      std::vector<double> last(p, 0);
      for (const ds::TimelineEvent &e : s.timeline.events) {
        ASSERT_TRUE(e.rank >= 0 && e.rank < p);
        EXPECT_GE(e.start + 1e-12, last[e.rank]);
        last[e.rank] = e.start + e.duration;
        if (e.rank == p - 1 && e.kernel == "F0")
          expectNear(e.start, (p - 1) * 1e-3);
      }
    }
}

/// A flat plan of two data-parallel ranks: an asynchronous all-reduce of
/// `bytes`, a GEMM of `flops` that does not read it, the wait.
pb::Plan overlapPlan(double bytes, double flops) {
  pb::Plan plan;
  plan.set_world_size(2);
  plan.add_buffers()->set_bytes(static_cast<uint64_t>(bytes));
  pb::Program *prog = plan.add_programs();
  pb::Instruction *ar = addKernel(prog, pb::KIND_ALL_REDUCE, 0);
  ar->set_async(true);
  ar->add_inputs(0);
  ar->add_outputs(0);
  pb::Collective *col = ar->add_collectives();
  col->set_kind(pb::COLLECTIVE_ALL_REDUCE);
  col->set_group(pb::GROUP_DATA);
  col->set_bytes(static_cast<uint64_t>(bytes));
  addKernel(prog, pb::KIND_MATMUL, flops);
  addKernel(prog, pb::KIND_WAIT, 0)->add_inputs(0);
  return plan;
}

TEST(StepSimulator, AllReduceOverlapsCompute) {
  ds::ClusterSpec c = unitCluster(2);
  c.intraNode = {true, 1e9, 1e-4};
  // 2 ranks: t = 1e-4 + 2 (1/2) B / 1e9; compute F / 1e9.
  for (auto [bytes, flops] : {std::pair{1e6, 5e5}, {1e6, 3e6}, {4e6, 1e6}}) {
    ds::StepPrediction s =
        ds::predictStep(overlapPlan(bytes, flops), c, ds::Precision::FP32);
    double comm = 1e-4 + bytes / 1e9, compute = flops / 1e9;
    expectNear(s.timeline.commSeconds, comm);
    expectNear(s.exposedCommSeconds, std::max(0.0, comm - compute));
    expectNear(s.stepSeconds, std::max(comm, compute));
    EXPECT_EQ(s.bottleneck, comm - compute > compute
                                ? ds::Bottleneck::Communication
                                : ds::Bottleneck::Compute);
  }
}

/// A host-to-device copy of `bytes`, a GEMM of `flops` that does not
/// need it, and a kernel that reads the copy.
pb::Plan offloadPlan(double bytes, double flops) {
  pb::Plan plan;
  pb::Buffer *host = plan.add_buffers();
  host->set_space(pb::HOST_ARENA);
  host->set_bytes(static_cast<uint64_t>(bytes));
  pb::Buffer *dev = plan.add_buffers();
  dev->set_space(pb::ARENA);
  dev->set_bytes(static_cast<uint64_t>(bytes));
  pb::Program *prog = plan.add_programs();
  pb::Instruction *copy = addKernel(prog, pb::KIND_TRANSFER, 0);
  copy->add_inputs(0);
  copy->add_outputs(1);
  addKernel(prog, pb::KIND_MATMUL, flops);
  addKernel(prog, pb::KIND_RELU, 0)->add_inputs(1);
  return plan;
}

TEST(StepSimulator, OffloadTransferHiddenOrExposed) {
  ds::ClusterSpec c = unitCluster(1);
  c.host.bandwidth = 1e9;
  // Hidden: a 1 ms copy behind 2 ms of compute; exposed: a 5 ms copy
  // behind 2 ms leaves 3 ms.
  for (auto [bytes, exposed] : {std::pair{1e6, 0.0}, {5e6, 3e-3}}) {
    ds::StepPrediction s =
        ds::predictStep(offloadPlan(bytes, 2e6), c, ds::Precision::FP32);
    expectNear(s.timeline.transferSeconds, bytes / 1e9);
    expectNear(s.timeline.exposedTransferSeconds, exposed);
    expectNear(s.offloadWaitSeconds, exposed);
    expectNear(s.stepSeconds, 2e-3 + exposed);
    EXPECT_EQ(s.bottleneck, exposed > 2e-3 ? ds::Bottleneck::Offload
                                           : ds::Bottleneck::Compute);
  }
}

/// A GEMM of `flops`, then a host-to-device copy of `bytes` and a kernel
/// that reads it: the copy is issued after the GEMM.
pb::Plan lateCopyPlan(double bytes, double flops) {
  pb::Plan plan = offloadPlan(bytes, flops);
  pb::Program *prog = plan.mutable_programs(0);
  prog->mutable_instructions()->SwapElements(0, 1);
  return plan;
}

TEST(StepSimulator, OffloadCopiesRunAsTheRuntimeIssuesThem) {
  ds::ClusterSpec c = unitCluster(1);
  c.host.bandwidth = 1e9;
  // CUDA (ExecutorAsync.cpp, CudaDevice::copyAsync): a copy starts after
  // the compute stream's work so far, so a 1 ms copy issued after 2 ms of
  // compute is exposed whole (step 3 ms), and hidden when issued first.
  ds::StepPrediction late =
      ds::predictStep(lateCopyPlan(1e6, 2e6), c, ds::Precision::FP32);
  expectNear(late.timeline.exposedTransferSeconds, 1e-3);
  expectNear(late.stepSeconds, 3e-3);
  EXPECT_EQ(late.bottleneck, ds::Bottleneck::Compute);
  // The CPU backend copies in line: the copy issued first is exposed too.
  c.gpu = false;
  ds::StepPrediction cpu =
      ds::predictStep(offloadPlan(1e6, 2e6), c, ds::Precision::FP32);
  expectNear(cpu.timeline.exposedTransferSeconds, 1e-3);
  expectNear(cpu.offloadWaitSeconds, 1e-3);
  expectNear(cpu.stepSeconds, 3e-3);
}

/// A device GEMM of 2 ms, a host kernel of `hostBytes` (1 ms per 1e6 at
/// an optimizer_bandwidth of 1e9) that reads none of its output, and a
/// 1 ms GEMM after it.
pb::Plan hostKernelPlan(double hostBytes) {
  pb::Plan plan;
  pb::Program *prog = plan.add_programs();
  addKernel(prog, pb::KIND_MATMUL, 2e6);
  pb::Instruction *h = addKernel(prog, pb::KIND_ADAM, 0);
  h->set_on_host(true);
  h->set_bytes(static_cast<uint64_t>(hostBytes));
  addKernel(prog, pb::KIND_MATMUL, 1e6);
  return plan;
}

TEST(StepSimulator, HostKernelsHoldTheIssuingThread) {
  ds::ClusterSpec c = unitCluster(1);
  c.host.optimizerBandwidth = 1e9;
  // GPU: the host kernel (1 ms) runs while the device does the first
  // GEMM (2 ms): hidden, 3 ms. A 4 ms host kernel holds the launch of the
  // second GEMM until 4 ms: 5 ms, 2 ms of it waiting on offload.
  for (auto [bytes, step] : {std::pair{1e6, 3e-3}, {4e6, 5e-3}}) {
    ds::StepPrediction s =
        ds::predictStep(hostKernelPlan(bytes), c, ds::Precision::FP32);
    expectNear(s.timeline.hostSeconds, bytes / 1e9);
    expectNear(s.stepSeconds, step);
    expectNear(s.offloadWaitSeconds, step - 3e-3);
  }
  // CPU: one thread runs everything in order (2 + 1 + 1 ms).
  c.gpu = false;
  ds::StepPrediction cpu =
      ds::predictStep(hostKernelPlan(1e6), c, ds::Precision::FP32);
  expectNear(cpu.stepSeconds, 4e-3);
  expectNear(cpu.offloadWaitSeconds, 1e-3);
}

/// An NVMe read of `bytes` into the host arena, a GEMM of 2 ms, then the
/// copy of the read bytes to the device and a kernel that reads them.
pb::Plan nvmePlan(double bytes) {
  pb::Plan plan;
  pb::Parameter *param = plan.add_parameters();
  param->set_location(pb::NVME);
  pb::Buffer *onNvme = plan.add_buffers();
  onNvme->set_space(pb::PARAM);
  onNvme->set_slot(0);
  onNvme->set_bytes(static_cast<uint64_t>(bytes));
  for (pb::Space sp : {pb::HOST_ARENA, pb::ARENA}) {
    pb::Buffer *b = plan.add_buffers();
    b->set_space(sp);
    b->set_bytes(static_cast<uint64_t>(bytes));
  }
  pb::Program *prog = plan.add_programs();
  pb::Instruction *read = addKernel(prog, pb::KIND_TRANSFER, 0);
  read->add_inputs(0);
  read->add_outputs(1);
  addKernel(prog, pb::KIND_MATMUL, 2e6);
  pb::Instruction *copy = addKernel(prog, pb::KIND_TRANSFER, 0);
  copy->add_inputs(1);
  copy->add_outputs(2);
  addKernel(prog, pb::KIND_RELU, 0)->add_inputs(2);
  return plan;
}

TEST(StepSimulator, NvmeReadHiddenOrExposed) {
  ds::ClusterSpec c = unitCluster(1);
  c.host.bandwidth = 1e12; // the copy to the device: 1 us per MB
  c.nvme = {true, 1e9, 5e8};
  // The read is issued at once (io_uring) and runs beside the 2 ms GEMM:
  // 1 ms hidden; 5 ms leaves 3 ms. The copy to the device follows the
  // GEMM (B / 1e12 s).
  for (auto [bytes, exposed] : {std::pair{1e6, 0.0}, {5e6, 3e-3}}) {
    ds::StepPrediction s =
        ds::predictStep(nvmePlan(bytes), c, ds::Precision::FP32);
    double copy = bytes / 1e12;
    expectNear(s.timeline.transferSeconds, bytes / 1e9 + copy);
    expectNear(s.stepSeconds, 2e-3 + exposed + copy);
    EXPECT_EQ(s.bottleneck, exposed > 2e-3 ? ds::Bottleneck::Offload
                                           : ds::Bottleneck::Compute);
  }
}

TEST(StepSimulator, AlphaBeta) {
  ds::ClusterSpec c = unitCluster(8);
  c.intraNode = {true, 1e9, 1e-5};
  c.interNode = {true, 1e8, 1e-4};
  using ds::LinkKind;
  // t = alpha (n-1) + f B / beta.
  expectNear(ds::collectiveSeconds(c, LinkKind::AllReduce, 4, 1e6, false),
             3e-5 + 1.5e-3);
  expectNear(ds::collectiveSeconds(c, LinkKind::AllGather, 4, 1e6, false),
             3e-5 + 0.75e-3);
  expectNear(ds::collectiveSeconds(c, LinkKind::ReduceScatter, 4, 1e6, true),
             3e-4 + 7.5e-3);
  expectNear(ds::collectiveSeconds(c, LinkKind::Broadcast, 4, 1e6, false),
             3e-5 + 1e-3);
  expectNear(ds::collectiveSeconds(c, LinkKind::SendRecv, 2, 1e6, false),
             1e-5 + 1e-3);
  expectNear(ds::collectiveSeconds(c, LinkKind::AllReduce, 1, 1e6, true), 0);
  // A calibrated kind replaces the links.
  c.collectives[static_cast<int>(LinkKind::AllReduce)] = {true, 2e9, 2e-5};
  expectNear(ds::collectiveSeconds(c, LinkKind::AllReduce, 2, 1e6, true),
             2e-5 + 5e-4);
  // Tensor-parallel groups inside a node, data-parallel ones across.
  ds::RankLayout l{2, 8, 1, 8};
  EXPECT_FALSE(l.acrossNodes(pb::GROUP_TENSOR));
  EXPECT_TRUE(l.acrossNodes(pb::GROUP_DATA));
  ds::RankLayout small{2, 4, 1, 8};
  EXPECT_FALSE(small.acrossNodes(pb::GROUP_DATA));
  EXPECT_FALSE(small.acrossNodes(pb::GROUP_WORLD));
  ds::RankLayout pipe{1, 8, 2, 8};
  EXPECT_TRUE(pipe.acrossNodes(pb::GROUP_PIPELINE));
}

TEST(StepSimulator, GemmShapeClasses) {
  ds::ClusterSpec c = unitCluster(1);
  c.flops[0] = 1e12;
  c.flops[1] = 2e12;
  c.memoryBandwidth = 1e12;
  c.launchOverhead = 1e-6;
  EXPECT_EQ(ds::gemmClass(c, 1e6), -1);
  c.gemm = {{1e6, 2e10}, {1e8, 6e10}, {}};
  c.gemm[2].flopsPerSecond = 9e10;
  EXPECT_EQ(ds::gemmClass(c, 1), 0);
  EXPECT_EQ(ds::gemmClass(c, 1e6), 0);
  EXPECT_EQ(ds::gemmClass(c, 1e6 + 1), 1);
  EXPECT_EQ(ds::gemmClass(c, 1e8), 1);
  EXPECT_EQ(ds::gemmClass(c, 1e15), 2);
  // fp32 at the class's rate; bf16 twice it (the device's bf16 over fp32).
  expectNear(ds::kernelSeconds(c, pb::KIND_MATMUL, 5e7, 0,
                               ds::Precision::FP32),
             5e7 / 6e10 + 1e-6);
  expectNear(ds::kernelSeconds(c, pb::KIND_GEMM, 5e7, 0,
                               ds::Precision::BF16),
             5e7 / 1.2e11 + 1e-6);
  // Memory-bound: bytes over the bandwidth win.
  expectNear(ds::kernelSeconds(c, pb::KIND_MATMUL, 1e3, 1e9,
                               ds::Precision::FP32),
             1e-3 + 1e-6);
  // A family's calibrated rate replaces the roofline.
  expectNear(ds::kernelSeconds(c, pb::KIND_RELU, 1e6, 8e6,
                               ds::Precision::FP32),
             std::max(1e6 / 1e12, 8e6 / 1e12) + 1e-6);
  c.families[static_cast<int>(ds::RateFamily::Elementwise)].bytesPerSecond =
      8e9;
  expectNear(ds::kernelSeconds(c, pb::KIND_RELU, 1e6, 8e6,
                               ds::Precision::FP32),
             1e-3 + 1e-6);
  // A kernel's own figures (kernels.kinds) replace its family's and the
  // launch overhead: overhead + bytes / bytes_per_s (2 us + 8e6 / 4e9 s);
  // without a rate, the overhead alone.
  c.kinds[static_cast<int>(pb::KIND_RELU)] = {4e9, 2e-6};
  expectNear(ds::kernelSeconds(c, pb::KIND_RELU, 1e6, 8e6,
                               ds::Precision::FP32),
             2e-6 + 2e-3);
  c.kinds[static_cast<int>(pb::KIND_RELU)] = {0, 5e-6};
  expectNear(ds::kernelSeconds(c, pb::KIND_RELU, 1e6, 8e6,
                               ds::Precision::FP32),
             5e-6);
  // Other kernels of the family keep the family's figure.
  expectNear(ds::kernelSeconds(c, pb::KIND_ADD, 1e6, 8e6,
                               ds::Precision::FP32),
             1e-3 + 1e-6);
  EXPECT_EQ(ds::rateFamilyOf(pb::KIND_CONV), ds::RateFamily::Conv);
  EXPECT_EQ(ds::rateFamilyOf(pb::KIND_MAX_POOL), ds::RateFamily::Pooling);
}

TEST(StepSimulator, Presets) {
  for (const std::string &name : ds::clusterPresetNames()) {
    ds::ClusterSpec c;
    ASSERT_TRUE(ds::clusterPreset(name, 0, 0, c)) << name;
    EXPECT_GT(c.memory, 0) << name;
    EXPECT_GT(c.flops[0], 0) << name;
    EXPECT_EQ(c.devicesPerNode, c.gpu ? 8 : 2) << name;
  }
  ds::ClusterSpec c;
  ASSERT_TRUE(ds::clusterPreset("h100-80g", 16, 8, c));
  EXPECT_EQ(c.devices(), 128);
  EXPECT_EQ(c.name, "h100-80g:16x8");
  EXPECT_FALSE(ds::clusterPreset("h100", 1, 8, c));
}

//===----------------------------------------------------------------------===//
// The step's time beyond its kernels (issue 23 item 5): the CPU executor's
// dispatch and run overheads, a pipeline stage's stash copies (which items
// save and restore, and the schedule they stretch), and the update section
// that runs after every micro-batch without update_once.
//===----------------------------------------------------------------------===//

/// unitCluster on a CPU (the executor's overheads apply there).
ds::ClusterSpec cpuCluster(int devices) {
  ds::ClusterSpec c = unitCluster(devices);
  c.gpu = false;
  return c;
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
  for (int s = 0; s < 2; ++s) {
    addStage(pl, 1e6);
    pl->mutable_stage_plans(s)->mutable_pipeline()->set_stash_bytes(1000000);
  }
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

/// Three exchanges of a compressed step on 4 data-parallel ranks: a
/// onebit_adam kernel (its all-reduce in the warm-up, its compressed
/// all-reduce after the freeze, inside the kernel), a compressed
/// reduce-scatter (ZeRO 1-3's gradient bucket) and ZeRO++'s quantized
/// all-gather (quantized in both phases). Every instruction reads and
/// writes `bytes` of operands (its codec's cost at 1e9 B/s).
pb::Plan compressedPlan() {
  pb::Plan plan;
  plan.set_world_size(4);
  for (int i = 0; i < 4; ++i)
    plan.add_buffers()->set_bytes(1000);
  pb::Program *prog = plan.add_programs();
  auto collective = [](pb::Instruction *ins, pb::CollectiveKind k,
                       double bytes) {
    pb::Collective *c = ins->add_collectives();
    c->set_kind(k);
    c->set_group(pb::GROUP_DATA);
    c->set_bytes(static_cast<uint64_t>(bytes));
  };
  pb::Instruction *adam = addKernel(prog, pb::KIND_ONEBIT_ADAM, 0);
  adam->set_bytes(2000000);
  adam->add_inputs(0);
  adam->add_outputs(1);
  collective(adam, pb::COLLECTIVE_ALL_REDUCE, 4e6);
  collective(adam, pb::COLLECTIVE_COMPRESSED_ALL_REDUCE, 1e6);
  pb::Instruction *rs =
      addKernel(prog, pb::KIND_COMPRESSED_REDUCE_SCATTER, 0);
  rs->set_bytes(1000000);
  rs->add_inputs(1);
  rs->add_outputs(2);
  rs->add_outputs(3);
  collective(rs, pb::COLLECTIVE_REDUCE_SCATTER, 6.4e6);
  collective(rs, pb::COLLECTIVE_COMPRESSED_REDUCE_SCATTER, 2e5);
  pb::Instruction *qg = addKernel(prog, pb::KIND_QUANTIZED_ALL_GATHER, 0);
  qg->set_bytes(500000);
  qg->add_inputs(2);
  qg->add_outputs(0); // the gathered values and the records' workspace,
  qg->add_outputs(3); // as ZeRO++'s instructions have them
  collective(qg, pb::COLLECTIVE_ALL_GATHER, 1e6);
  return plan;
}

TEST(StepSimulator, CompressedExchangeOnTheSlowLink) {
  // 2 nodes of 2: the data-parallel group crosses the inter-node link
  // (alpha 1e-4 s, 1e8 B/s); one node of 4: the intra-node one (1e-5 s,
  // 1e9 B/s). Kernels at 1e9 B/s, no FLOPs.
  ds::ClusterSpec c = unitCluster(2);
  c.nodes = 2;
  c.memoryBandwidth = 1e9;
  c.intraNode = {true, 1e9, 1e-5};
  c.interNode = {true, 1e8, 1e-4};
  // A compressed exchange: messages x alpha (n-1) + (n-1)/n B / beta.
  expectNear(ds::compressedCollectiveSeconds(
                 c, pb::COLLECTIVE_COMPRESSED_ALL_REDUCE, 4, 1e6, true),
             4 * 3e-4 + 0.75 * 1e6 / 1e8);
  expectNear(ds::compressedCollectiveSeconds(
                 c, pb::COLLECTIVE_COMPRESSED_REDUCE_SCATTER, 4, 2e5, false),
             2 * 3e-5 + 0.75 * 2e5 / 1e9);
  ds::StepPrediction s =
      ds::predictStep(compressedPlan(), c, ds::Precision::FP32);
  // After the freeze: the adam kernel 2 ms, then its compressed all-reduce
  // 4 x 3e-4 + 0.75 x 1e6 / 1e8 = 8.7 ms; the reduce-scatter's codec 1 ms
  // and its 2 all-to-alls 2 x 3e-4 + 0.75 x 2e5 / 1e8 = 2.1 ms; the
  // quantized gather's codec 0.5 ms and 3e-4 + 0.75 x 1e6 / 1e8 = 7.8 ms.
  EXPECT_TRUE(s.compressed);
  expectNear(s.stepSeconds, 2e-3 + 8.7e-3 + 1e-3 + 2.1e-3 + 0.5e-3 + 7.8e-3);
  expectNear(s.exposedCommSeconds, 8.7e-3 + 2.1e-3 + 7.8e-3);
  expectNear(s.computeSeconds, 2e-3 + 1e-3 + 0.5e-3);
  // The warm-up: the plain all-reduce 3e-4 + 1.5 x 4e6 / 1e8 = 60.3 ms,
  // the plain reduce-scatter 3e-4 + 0.75 x 6.4e6 / 1e8 = 48.3 ms (no
  // codec), the quantized gather as after the freeze.
  expectNear(s.warmupStepSeconds,
             2e-3 + 60.3e-3 + 48.3e-3 + 0.5e-3 + 7.8e-3);
  // One node: the intra-node link, 10x faster, a tenth of the latency.
  c.nodes = 1;
  c.devicesPerNode = 4;
  ds::StepPrediction one =
      ds::predictStep(compressedPlan(), c, ds::Precision::FP32);
  expectNear(one.stepSeconds, 2e-3 + (4 * 3e-5 + 0.75e-3) + 1e-3 +
                                  (2 * 3e-5 + 0.15e-3) + 0.5e-3 +
                                  (3e-5 + 0.75e-3));
  // A plan without compressed collectives has no warm-up figure.
  ds::StepPrediction plain = ds::predictStep(
      overlapPlan(1e6, 1e6), unitCluster(2), ds::Precision::FP32);
  EXPECT_FALSE(plain.compressed);
  EXPECT_EQ(plain.warmupStepSeconds, 0);
}

TEST(StepKernels, LossGradChargedForTheLabelsThatCount) {
  // A loss_grad of 3 MB (scores, labels, gradient), its 1 MB gradient the
  // output, calibrated at 10 us + 1 GB/s, memory at 10 GB/s; beside it an
  // add of 3 MB at 3 GB/s. Every label counting: 10 us + 3 ms. A quarter
  // counting (--label-fraction=0.25) on a CPU: 10 us + 0.75 ms for those
  // rows, and the zero-fill of the other three quarters of the gradient,
  // 0.75 x 1 MB / 10 GB/s = 75 us. The add is the same either way, and a
  // GPU's kernel computes every row.
  pb::Plan plan;
  pb::Buffer *out = plan.add_buffers();
  out->set_bytes(1000000);
  pb::Program *prog = plan.add_programs();
  pb::Instruction *lg = addKernel(prog, pb::KIND_LOSS_GRAD, 0);
  lg->set_bytes(3000000);
  lg->add_outputs(0);
  addKernel(prog, pb::KIND_ADD, 0)->set_bytes(3000000);
  ds::ClusterSpec c = cpuCluster(1);
  c.memoryBandwidth = 1e10;
  c.kinds[pb::KIND_LOSS_GRAD] = {1e9, 1e-5};
  c.kinds[pb::KIND_ADD] = {3e9, 0};
  expectNear(ds::predictStep(plan, c, ds::Precision::FP32).stepSeconds,
             1e-5 + 3e-3 + 1e-3);
  (*plan.mutable_options())[ds::kLabelFractionOption] = "0.25";
  ds::StepPrediction s = ds::predictStep(plan, c, ds::Precision::FP32);
  expectNear(s.stepSeconds, 1e-5 + 0.75e-3 + 75e-6 + 1e-3);
  c.gpu = true;
  expectNear(ds::predictStep(plan, c, ds::Precision::FP32).stepSeconds,
             1e-5 + 3e-3 + 1e-3);
  c.gpu = false;
  // An option outside (0, 1) is not a fraction: every label counts.
  (*plan.mutable_options())[ds::kLabelFractionOption] = "1.5";
  expectNear(ds::predictStep(plan, c, ds::Precision::FP32).stepSeconds,
             1e-5 + 3e-3 + 1e-3);
}
