//===- StepSimulator.cpp - a plan's step time on a cluster ----------------===//
//
// Part of the ds project (no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/StepSimulator.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/PipelineSchedule.h"

#include "plan.pb.h"

#include <algorithm>

namespace ds {

const char *bottleneckName(Bottleneck b) {
  switch (b) {
  case Bottleneck::Communication: return "communication";
  case Bottleneck::Offload: return "offload";
  case Bottleneck::Bubble: return "bubble";
  default: return "compute";
  }
}

namespace {

/// Runs of the program per step: the optimizer's accumulation steps.
int accumStepsOf(const plan::Plan &p) {
  for (const plan::Program &prog : p.programs())
    for (const plan::Instruction &ins : prog.instructions())
      if (ins.has_optimizer() && ins.optimizer().has_accum_steps())
        return std::max<int>(1, static_cast<int>(ins.optimizer().accum_steps()));
  return 1;
}

/// The largest of the step's parts names the bottleneck.
void chooseBottleneck(StepPrediction &s) {
  double best = s.computeSeconds;
  s.bottleneck = Bottleneck::Compute;
  auto consider = [&](double v, Bottleneck b) {
    if (v > best) {
      best = v;
      s.bottleneck = b;
    }
  };
  consider(s.exposedCommSeconds, Bottleneck::Communication);
  consider(s.offloadWaitSeconds, Bottleneck::Offload);
  consider(s.bubbleSeconds, Bottleneck::Bubble);
}

/// The rates: tokens per second and the FLOPs per rank over the peak.
void finishRates(StepPrediction &s) {
  s.tokensPerSecond = s.stepSeconds > 0 ? s.tokensPerStep / s.stepSeconds : 0;
  s.mfu = s.stepSeconds > 0 && s.peakFlops > 0
              ? s.flopsPerRank / (s.stepSeconds * s.peakFlops)
              : 0;
  chooseBottleneck(s);
}

int dataParallel(const plan::Plan &p) {
  int tp = std::max<int>(1, static_cast<int>(p.tensor_parallel()));
  return std::max(1, std::max<int>(1, static_cast<int>(p.world_size())) / tp);
}

/// A stage plan's forward and backward time per micro-batch, its update
/// (once per step), and the bytes it hands to its neighbour per
/// micro-batch.
struct ChunkTimes {
  double fwd = 0, bwd = 0, update = 0, sendBytes = 0;
  /// Without update_once, ds-run runs the update section after every
  /// micro-batch's backward; before the last one its optimizers only add
  /// the gradient to their accumulators: that run's seconds (0 with
  /// update_once), and its kernel time.
  double accumRun = 0, accumCompute = 0;
  /// The arena bytes a micro-batch keeps from its forward to its backward
  /// (the stash ds-run copies out and back).
  double stashBytes = 0;
  /// The update section's kernel time, exposed communication and FLOPs,
  /// counted once per step instead of once per micro-batch (its full run
  /// happens once; without update_once the earlier accumulating runs are
  /// `accumCompute`).
  double onceCompute = 0, onceExposed = 0, onceFlops = 0;
  Timeline tl;

  /// Per step over `m` micro-batches: a per-run figure, less its once-per-
  /// step part.
  static double perStep(double run, double once, int m) {
    return (run - once) * m + once;
  }
};

/// The update section's run before the last micro-batch (no update_once):
/// its kernels as timed, but each optimizer with accumulation only adds
/// its gradient to the accumulator (reads both, writes one: 3 x the
/// parameter's f32 bytes, timed as an `add`), and the executor's overhead.
void accumulatingUpdate(const plan::Plan &sp, const CostModel &model,
                        int update, ChunkTimes &c) {
  const plan::Program &prog = sp.programs(0);
  double overhead = 0;
  for (const TimelineEvent &e : c.tl.events) {
    if (e.instruction < update || e.track != 0 ||
        e.instruction >= prog.instructions_size())
      continue;
    const plan::Instruction &ins = prog.instructions(e.instruction);
    double t = e.duration;
    if (isOptimizer(ins.kind()) && ins.optimizer().accum_steps() > 1 &&
        ins.inputs_size() > 0 &&
        ins.inputs(0) < static_cast<uint32_t>(sp.buffers_size())) {
      double n = static_cast<double>(sp.buffers(ins.inputs(0)).bytes()) / 4;
      t = model.cluster ? kernelSeconds(*model.cluster, plan::KIND_ADD, n,
                                        12 * n, Precision::FP32)
                        : 12 * n / model.bytesPerSecond;
    }
    c.accumCompute += t;
  }
  if (model.cluster && !model.cluster->gpu)
    overhead = model.cluster->dispatchOverhead *
               std::max(0, prog.instructions_size() - update);
  c.accumRun = c.accumCompute + overhead;
}

ChunkTimes chunkTimes(const plan::Plan &sp, const CostModel &model) {
  ChunkTimes c;
  c.tl = timeline(sp, model);
  c.stashBytes = static_cast<double>(sp.pipeline().stash_bytes());
  int split = static_cast<int>(sp.pipeline().backward_start());
  int update = static_cast<int>(sp.pipeline().update_start());
  double fwdEnd = 0, bwdEnd = 0;
  for (const TimelineEvent &e : c.tl.events) {
    double end = e.start + e.duration;
    if (e.instruction < split)
      fwdEnd = std::max(fwdEnd, end);
    if (update <= 0 || e.instruction < update)
      bwdEnd = std::max(bwdEnd, end);
  }
  bwdEnd = std::max(bwdEnd, fwdEnd);
  c.fwd = fwdEnd;
  c.bwd = bwdEnd - fwdEnd;
  c.update = std::max(0.0, c.tl.stepSeconds - bwdEnd);
  // The update section's figures count once per step; without
  // update_once the earlier micro-batches' accumulating runs come on top.
  if (update > 0) {
    for (const TimelineEvent &e : c.tl.events)
      if (e.instruction >= update && e.track == 0) {
        c.onceCompute += e.duration;
        c.onceFlops += e.flops;
      }
    c.onceExposed = std::min(c.tl.exposedCommSeconds,
                             std::max(0.0, c.update - c.onceCompute));
    if (!sp.pipeline().update_once() && sp.programs_size() > 0)
      accumulatingUpdate(sp, model, update, c);
  }
  if (sp.programs_size() > 0) {
    const plan::Program &prog = sp.programs(0);
    for (int i = 0; i < prog.instructions_size() && i < split; ++i) {
      const plan::Instruction &ins = prog.instructions(i);
      if (ins.kind() == plan::KIND_PIPE_SEND)
        for (const plan::Collective &col : ins.collectives())
          c.sendBytes += static_cast<double>(col.bytes());
    }
  }
  return c;
}

/// The pipeline's predicted schedule as a timeline: each item on its
/// pipeline rank's compute track ("F3" the forward of micro-batch 3, with
/// ".c" its chunk under the interleaved schedule), then each rank's update.
Timeline pipelineTimeline(const PipeSimulation &sim,
                          const std::vector<double> &update, int virt) {
  Timeline t;
  for (const PipeItemTime &it : sim.items) {
    TimelineEvent e;
    e.instruction = -1;
    e.kernel = (it.step.forward ? "F" : "B") + std::to_string(it.step.micro);
    if (virt > 1)
      e.kernel += "." + std::to_string(it.step.chunk);
    e.node = "stage " + std::to_string(it.step.chunk);
    e.rank = it.rank;
    e.start = it.start;
    e.duration = it.end - it.start;
    t.events.push_back(std::move(e));
  }
  for (size_t r = 0; r < update.size(); ++r) {
    TimelineEvent e;
    e.instruction = -1;
    e.kernel = "update";
    e.rank = static_cast<int>(r);
    e.start = sim.stepSeconds;
    e.duration = update[r];
    t.events.push_back(std::move(e));
  }
  t.stepSeconds = sim.stepSeconds +
                  (update.empty() ? 0
                                  : *std::max_element(update.begin(),
                                                      update.end()));
  return t;
}

/// What each item of the schedule runs beyond its chunk's forward or
/// backward: the stash's copies out of and back into its chunk's arena
/// (stashTraffic, at the cluster's stash rates), and before the last
/// micro-batch an accumulating run of the update section after a backward
/// (`accumRun`, without update_once). The copies are added to `busy`.
std::vector<std::vector<double>>
itemExtras(const std::vector<std::vector<PipeStep>> &order,
           const ClusterSpec &c, const std::vector<double> &accumRun,
           const std::vector<double> &stash, int m, std::vector<double> &busy) {
  std::vector<std::vector<double>> extra(order.size());
  int chunks = static_cast<int>(stash.size());
  for (size_t r = 0; r < order.size(); ++r) {
    std::vector<StashTraffic> traffic = stashTraffic(order[r]);
    extra[r].assign(order[r].size(), 0);
    for (size_t i = 0; i < order[r].size(); ++i) {
      const PipeStep &p = order[r][i];
      if (p.chunk < 0 || p.chunk >= chunks)
        continue;
      double copies = (traffic[i].save ? stashSeconds(c, stash[p.chunk], false)
                                       : 0) +
                      (traffic[i].restore
                           ? stashSeconds(c, stash[p.chunk], true)
                           : 0);
      extra[r][i] = copies;
      if (r < busy.size())
        busy[r] += copies;
      if (!p.forward && p.micro < m - 1)
        extra[r][i] += accumRun[p.chunk];
    }
  }
  return extra;
}

StepPrediction predictPipeline(const plan::Plan &p, const ClusterSpec &c,
                               const CostModel &model) {
  StepPrediction s;
  const plan::Pipeline &pl = p.pipeline();
  int chunks = pl.stage_plans_size();
  int stages = std::max<int>(1, static_cast<int>(pl.stages()));
  int virt = std::max<int>(1, static_cast<int>(pl.virtual_stages()));
  int m = std::max<int>(1, static_cast<int>(pl.micro_batches()));
  s.microBatches = m;
  std::vector<double> fwd, bwd, accumRun, stash;
  std::vector<double> busy(stages, 0), update(stages, 0), comm(stages, 0),
      offload(stages, 0);
  double send = 0, flops = 0;
  for (int k = 0; k < chunks; ++k) {
    ChunkTimes t = chunkTimes(pl.stage_plans(k), model);
    fwd.push_back(t.fwd);
    bwd.push_back(t.bwd);
    accumRun.push_back(t.accumRun);
    stash.push_back(t.stashBytes);
    int r = k % stages;
    update[r] += t.update;
    busy[r] += ChunkTimes::perStep(t.tl.computeSeconds, t.onceCompute, m) +
               t.accumCompute * (m - 1);
    comm[r] +=
        ChunkTimes::perStep(t.tl.exposedCommSeconds, t.onceExposed, m);
    offload[r] += t.tl.offloadWaitSeconds * m;
    send = std::max(send, t.sendBytes);
    flops += ChunkTimes::perStep(t.tl.flops, t.onceFlops, m);
    if (k == 0)
      s.tokensPerStep = static_cast<double>(t.tl.tokens) * m *
                        dataParallel(pl.stage_plans(0));
  }
  RankLayout layout;
  layout.stages = stages;
  layout.tp = std::max<int>(1, static_cast<int>(pl.stage_plans(0).tensor_parallel()));
  layout.dp = dataParallel(pl.stage_plans(0));
  layout.devicesPerNode = c.devicesPerNode;
  double link = collectiveSeconds(c, LinkKind::SendRecv, 2, send,
                                  layout.acrossNodes(plan::GROUP_PIPELINE));
  std::string kind = virt > 1 ? std::string("interleaved") : pl.schedule();
  std::vector<std::vector<PipeStep>> order =
      pipelineSchedule(kind, stages, m, virt);
  std::vector<std::vector<double>> extra =
      itemExtras(order, c, accumRun, stash, m, busy);
  PipeSimulation sim = simulatePipeline(order, fwd, bwd, link, &extra);
  s.timeline = pipelineTimeline(sim, update, virt);
  int busiest = static_cast<int>(
      std::max_element(busy.begin(), busy.end()) - busy.begin());
  s.stepSeconds = sim.stepSeconds +
                  *std::max_element(update.begin(), update.end());
  s.computeSeconds = busy[busiest];
  s.exposedCommSeconds = comm[busiest];
  s.offloadWaitSeconds = offload[busiest];
  s.bubbleFraction = sim.bubble;
  s.bubbleSeconds = sim.bubble * sim.stepSeconds;
  s.flopsPerRank = flops / stages;
  return s;
}

/// Whether some collective of `p` (or of its stage plans) is a compressed
/// optimizer's exchange after the freeze.
bool hasCompressedPhase(const plan::Plan &p) {
  for (const plan::Plan &sp : p.pipeline().stage_plans())
    if (hasCompressedPhase(sp))
      return true;
  for (const plan::Program &prog : p.programs())
    for (const plan::Instruction &ins : prog.instructions())
      for (const plan::Collective &c : ins.collectives())
        if (isCompressedCollective(c.kind()))
          return true;
  return false;
}

StepPrediction predictPhase(const plan::Plan &p, const ClusterSpec &c,
                            Precision precision, bool warmup) {
  CostModel model;
  model.cluster = &c;
  model.warmup = warmup;
  StepPrediction s;
  if (p.pipeline().stage_plans_size() > 0) {
    s = predictPipeline(p, c, model);
  } else {
    s.timeline = timeline(p, model);
    const Timeline &t = s.timeline;
    int k = accumStepsOf(p);
    s.microBatches = k;
    s.stepSeconds = t.stepSeconds * k;
    s.computeSeconds = t.computeSeconds * k;
    s.exposedCommSeconds = t.exposedCommSeconds * k;
    s.offloadWaitSeconds = t.offloadWaitSeconds * k;
    s.flopsPerRank = t.flops * k;
    s.tokensPerStep = static_cast<double>(t.tokens) * k * dataParallel(p);
  }
  s.peakFlops = c.flops[static_cast<int>(precision)];
  finishRates(s);
  return s;
}

} // namespace

StepPrediction predictStep(const plan::Plan &p, const ClusterSpec &c,
                           Precision precision) {
  StepPrediction s = predictPhase(p, c, precision, false);
  if (hasCompressedPhase(p)) {
    s.compressed = true;
    s.warmupStepSeconds = predictPhase(p, c, precision, true).stepSeconds;
  }
  return s;
}

} // namespace ds
