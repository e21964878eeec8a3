//===- PipelinePlan.cpp - a pipeline's container of stage plans -----------===//
//
// Part of the ds project.
//
// A pipeline's plan.bin holds one complete plan per stage (chunk); this
// writes them with their sections marked, checks each pipeline rank's
// memory against the budget, and reports the schedule and its bubble.
//
//===----------------------------------------------------------------------===//

#include "PlanWriterImpl.h"

#include "ds/Support/PipelineSchedule.h"
#include "ds/Support/PlanTimeline.h"
#include "ds/Support/PlanFootprint.h"
#include "ds/Support/PlanFormat.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::ds;
namespace pb = ::ds::plan;

namespace {

/// Bytes of a parameter as the plan stores it.
uint64_t parameterBytes(const pb::Parameter &par) {
  uint64_t n = 4;
  switch (par.dtype()) {
  case pb::F16: case pb::BF16: n = 2; break;
  case pb::I64: n = 8; break;
  case pb::BOOL: n = 1; break;
  default: break;
  }
  for (int64_t d : par.shape())
    n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t parametersBytes(const pb::Plan &p) {
  uint64_t bytes = 0;
  for (const pb::Parameter &par : p.parameters())
    bytes += parameterBytes(par);
  return bytes;
}

/// The pipeline's shape: chunks, stages (pipeline ranks), chunks per rank
/// and ranks per stage, and each rank's schedule.
struct PipeShape {
  int chunks = 0, stages = 0, virt = 1;
  int64_t stageWorld = 1;
  std::vector<std::vector<::ds::PipeStep>> sched;
};

/// What the report and the budget check read of each chunk: its forward
/// and backward times under the cost model, its activation stash, the
/// stash's copies in flight, and its peak (arena, parameters and stash).
struct ChunkFigures {
  std::vector<double> fwd, bwd;
  std::vector<uint64_t> stash, peak;
  std::vector<int> slots;
  uint64_t maxSend = 0;
};

/// A stage plan's section marks: the first backward instruction (-1:
/// none) and the first update instruction (0: none).
std::pair<int, int> sectionMarks(const pb::Program &prog) {
  int split = -1, update = 0;
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const pb::Instruction &ins = prog.instructions(i);
    if (ins.kind() == pb::KIND_PIPE_MARK)
      (ins.update() ? update : split) = i;
  }
  return {split, update};
}

/// Builds chunk `s`'s plan into `sp` with its sections marked, and adds
/// its figures.
LogicalResult addStagePlan(ModuleOp module, ModuleOp stage, int s,
                           const PipeShape &shape, StringRef planPath,
                           const PlanWriteOptions &options,
                           const ::ds::CostModel &model, pb::Plan &sp,
                           ChunkFigures &fig) {
  const PlanWriteOptions::Pipeline &pipe = options.pipeline;
  if (failed(plan_writer::buildPlan(stage, options, shape.stageWorld, sp)) ||
      failed(plan_writer::addSource(module, planPath, options, sp)))
    return failure();
  const pb::Program &prog = sp.programs(0);
  auto [split, update] = sectionMarks(prog);
  if (split < 0)
    return module.emitError("stage ")
           << s << " has no backward section (run --ds-autodiff)";
  pb::Pipeline *own = sp.mutable_pipeline();
  own->set_stages(shape.stages);
  own->set_virtual_stages(shape.virt);
  own->set_micro_batches(static_cast<uint32_t>(pipe.microBatches));
  own->set_schedule(pipe.schedule);
  own->set_stage(s);
  own->set_backward_start(split);
  own->set_update_start(update);
  // Gradients summed over the micro-batches (Transforms/GradAccumulate.h):
  // ds-run runs the update section once per step.
  if (auto f = stage.lookupSymbol<func::FuncOp>("forward"))
    own->set_update_once(update > 0 && f->hasAttr("ds.accumulate_once"));
  uint64_t bytes = 0;
  for (const ::ds::ByteRange &r : ::ds::stashRanges(sp, split))
    bytes += r.end - r.begin;
  own->set_stash_bytes(bytes);
  fig.stash.push_back(bytes);
  fig.slots.push_back(::ds::stashCopies(shape.sched[s % shape.stages], s));
  ::ds::Timeline tl = ::ds::timeline(sp, model);
  double fwdEnd = 0;
  for (const ::ds::TimelineEvent &e : tl.events)
    if (e.instruction < split)
      fwdEnd = std::max(fwdEnd, e.start + e.duration);
  fig.fwd.push_back(fwdEnd);
  fig.bwd.push_back(std::max(0.0, tl.stepSeconds - fwdEnd));
  fig.peak.push_back(prog.arena_bytes() + parametersBytes(sp) +
                     bytes * fig.slots.back());
  if (s < static_cast<int>(pipe.stages.size()))
    fig.maxSend = std::max<uint64_t>(fig.maxSend, pipe.stages[s].sendBytes);
  return success();
}

/// Per pipeline rank: the sum of its chunks' peaks (what --device-memory
/// is held to).
FailureOr<std::vector<uint64_t>> rankPeaks(ModuleOp module,
                                           const PipeShape &shape,
                                           const ChunkFigures &fig,
                                           uint64_t budget) {
  std::vector<uint64_t> rankPeak(shape.stages, 0);
  for (int c = 0; c < shape.chunks; ++c)
    rankPeak[c % shape.stages] += fig.peak[c];
  for (int r = 0; r < shape.stages; ++r)
    if (budget && rankPeak[r] > budget)
      return module.emitError("pipeline rank ")
             << r << " needs " << rankPeak[r]
             << " bytes (its stages' arenas, parameters and state, and "
                "activation stash), more than --device-memory ("
             << budget << " bytes)";
  return rankPeak;
}

/// The schedule's bubble three ways: with equal stages, by the formula,
/// and under the cost model; and the per-rank peak.
struct Bubbles {
  double formula = 0;
  ::ds::PipeSimulation equal, costed;
  int tp = 1;
  int64_t dp = 1;
  uint64_t maxPeak = 0;
};

Bubbles bubbles(const PipeShape &shape, const ChunkFigures &fig,
                const std::vector<uint64_t> &rankPeak, int m,
                const ::ds::CostModel &model, const pb::Pipeline &pl) {
  Bubbles b;
  b.formula = double(shape.stages - 1) /
              double(shape.virt * m + shape.stages - 1);
  b.equal = ::ds::simulatePipeline(shape.sched,
                                   std::vector<double>(shape.chunks, 1.0),
                                   std::vector<double>(shape.chunks, 2.0));
  b.costed = ::ds::simulatePipeline(
      shape.sched, fig.fwd, fig.bwd,
      model.linkBytesPerSecond > 0 ? fig.maxSend / model.linkBytesPerSecond
                                   : 0);
  b.tp = std::max<int>(1, pl.stage_plans(0).tensor_parallel());
  b.dp = shape.stageWorld / b.tp;
  b.maxPeak = *std::max_element(rankPeak.begin(), rankPeak.end());
  return b;
}

void reportJson(llvm::raw_ostream &os, const PipeShape &shape,
                const ChunkFigures &fig, const Bubbles &b, int m,
                const PlanWriteOptions::Pipeline &pipe,
                const pb::Pipeline &pl) {
  os << "{\"pipeline\": {\"stages\": " << shape.stages
     << ", \"data_parallel\": " << b.dp << ", \"tensor_parallel\": " << b.tp
     << ", \"micro_batches\": " << m << ", \"schedule\": \""
     << pipe.schedule << "\", \"virtual_stages\": " << shape.virt
     << ", \"bubble\": " << b.equal.bubble
     << ", \"bubble_formula\": " << b.formula
     << ", \"bubble_cost_model\": " << b.costed.bubble
     << ", \"step_seconds\": " << b.costed.stepSeconds
     << ", \"per_rank_peak\": " << b.maxPeak << ", \"per_stage\": [";
  for (int s = 0; s < shape.chunks; ++s)
    os << (s ? ", " : "") << "{\"stage\": " << s
       << ", \"rank\": " << s % shape.stages
       << ", \"forward_seconds\": " << fig.fwd[s]
       << ", \"backward_seconds\": " << fig.bwd[s]
       << ", \"stash_bytes\": " << fig.stash[s] << ", \"stash_copies\": "
       << fig.slots[s] << ", \"peak\": " << fig.peak[s] << ", \"footprint\": "
       << ::ds::formatFootprintJson(::ds::footprint(pl.stage_plans(s)))
       << "}";
  os << "]}}\n";
}

/// The table of stages: forward ops, FLOPs, parameters, sends, stash and
/// peak, and forward and backward times.
void reportStages(llvm::raw_ostream &os, const PipeShape &shape,
                  const ChunkFigures &fig,
                  const PlanWriteOptions::Pipeline &pipe,
                  const pb::Pipeline &pl) {
  os << llvm::format("  %-5s %-11s %10s %10s %10s %10s %5s %11s %9s %9s\n",
                     "stage", "fwd ops", "fwd GFLOP", "params MiB",
                     "send KiB", "stash KiB", "copies", "peak MiB", "F ms",
                     "B ms");
  for (int s = 0; s < shape.chunks; ++s) {
    uint64_t params = parametersBytes(pl.stage_plans(s));
    PlanWriteOptions::Pipeline::Stage info;
    if (s < static_cast<int>(pipe.stages.size()))
      info = pipe.stages[s];
    std::string range = std::to_string(info.firstOp) + "-" +
                        std::to_string(info.lastOp);
    os << llvm::format("  %-5d %-11s %10.3f %10.2f %10.1f %10.1f %5d %11.2f "
                       "%9.3f %9.3f\n",
                       s, range.c_str(), info.flops / 1e9, params / 1048576.0,
                       info.sendBytes / 1024.0, fig.stash[s] / 1024.0,
                       fig.slots[s], fig.peak[s] / 1048576.0, fig.fwd[s] * 1e3,
                       fig.bwd[s] * 1e3);
  }
}

/// The schedule itself: each rank's order of forward (F) and backward (B)
/// sections by micro-batch (and chunk), as ds-run walks it.
void reportSchedule(llvm::raw_ostream &os, const PipeShape &shape) {
  for (int r = 0; r < shape.stages; ++r) {
    os << "  rank " << r << ":";
    size_t shown = 0;
    for (const ::ds::PipeStep &x : shape.sched[r]) {
      if (++shown > 32) {
        os << " ... (" << shape.sched[r].size() << " in all)";
        break;
      }
      os << " " << (x.forward ? "F" : "B") << x.micro;
      if (shape.virt > 1)
        os << "." << x.chunk;
    }
    os << "\n";
  }
}

void reportText(llvm::raw_ostream &os, const PipeShape &shape,
                const ChunkFigures &fig, const Bubbles &b, int m,
                const PlanWriteOptions &options, const ::ds::CostModel &model,
                const pb::Pipeline &pl) {
  const PlanWriteOptions::Pipeline &pipe = options.pipeline;
  os << "pipeline parallelism: " << shape.stages << " stages x " << b.dp
     << " data-parallel x " << b.tp << " tensor-parallel = "
     << options.worldSize << " ranks (rank = stage*" << shape.stageWorld
     << " + dp*" << b.tp << " + tp); " << m << " micro-batches per step, "
     << "schedule " << pipe.schedule;
  if (shape.virt > 1)
    os << " with " << shape.virt
       << " model chunks per rank (chunk c on rank c mod " << shape.stages
       << ")";
  os << "\n";
  reportStages(os, shape, fig, pipe, pl);
  reportSchedule(os, shape);
  if (shape.virt > 1)
    os << llvm::format("  bubble %.4f (the schedule with equal stages), "
                       "formula (p-1)/(v*m+p-1) = %.4f\n",
                       b.equal.bubble, b.formula);
  else
    os << llvm::format("  bubble %.4f (the schedule with equal stages), "
                       "formula (p-1)/(m+p-1) = %.4f\n",
                       b.equal.bubble, b.formula);
  os << llvm::format("  cost model: step %.3f ms, bubble %.4f (the stages' "
                     "forward and backward times above, %.3g B/s link)\n",
                     b.costed.stepSeconds * 1e3, b.costed.bubble,
                     model.linkBytesPerSecond);
  os << "  per-rank peak " << llvm::format("%.2f", b.maxPeak / 1048576.0)
     << " MiB (largest " << (shape.virt > 1 ? "rank's chunks" : "stage")
     << ": arena + parameters + stash x copies)\n";
  if (!pipe.tied.empty()) {
    os << "  tied parameters (held by several stages, gradients summed "
          "before the update):";
    for (const std::string &t : pipe.tied)
      os << " " << t;
    os << "\n";
  }
  for (int s = 0; s < shape.chunks; ++s)
    os << "stage " << s << ":\n"
       << ::ds::formatFootprint(::ds::footprint(pl.stage_plans(s)));
}

} // namespace

LogicalResult mlir::ds::plan_writer::writePipelinePlan(
    ModuleOp module, ArrayRef<ModuleOp> stages, StringRef planPath,
    const PlanWriteOptions &options, pb::Plan &p) {
  const PlanWriteOptions::Pipeline &pipe = options.pipeline;
  // Chunks: one per stage, or V per pipeline rank (interleaved; chunk c on
  // rank c mod P).
  PipeShape shape;
  shape.chunks = static_cast<int>(stages.size());
  shape.virt = static_cast<int>(std::max<int64_t>(1, pipe.virtualStages));
  shape.stages = shape.chunks / shape.virt;
  shape.stageWorld = options.worldSize / shape.stages;
  p.set_format_version(::ds::kPlanFormatVersion);
  p.set_producer("ds-opt");
  p.set_world_size(static_cast<uint32_t>(options.worldSize));
  if (failed(addSource(module, planPath, options, p)))
    return failure();
  pb::Pipeline *pl = p.mutable_pipeline();
  pl->set_stages(shape.stages);
  pl->set_micro_batches(static_cast<uint32_t>(pipe.microBatches));
  pl->set_schedule(pipe.schedule);
  pl->set_virtual_stages(shape.virt);
  for (const std::string &t : pipe.tied)
    pl->add_tied(t);
  shape.sched = ::ds::pipelineSchedule(pipe.schedule, shape.stages,
                                       static_cast<int>(pipe.microBatches),
                                       shape.virt);
  if (shape.sched.empty())
    return module.emitError("unknown pipeline schedule '")
           << pipe.schedule << "'";
  ::ds::CostModel model;
  model.flopsPerSecond = options.views.flopsPerSecond;
  model.bytesPerSecond = options.views.bytesPerSecond;
  model.linkBytesPerSecond = options.views.linkBytesPerSecond;
  ChunkFigures fig;
  for (int s = 0; s < shape.chunks; ++s)
    if (failed(addStagePlan(module, stages[s], s, shape, planPath, options,
                            model, *pl->add_stage_plans(), fig)))
      return failure();
  FailureOr<std::vector<uint64_t>> rankPeak =
      rankPeaks(module, shape, fig, options.views.budget);
  // --cluster: the predicted step, and its schedule as the trace (one
  // process per pipeline rank).
  ::ds::Timeline predicted;
  if (failed(rankPeak) ||
      failed(plan_writer::predictOnCluster(module, p, options, &predicted)))
    return failure();
  if (pipe.rankPeak)
    *pipe.rankPeak = *std::max_element(rankPeak->begin(), rankPeak->end());
  if (options.views.cluster && !options.views.tracePath.empty() &&
      failed(plan_writer::writeTextFile(
          module, options.views.tracePath,
          ::ds::traceJson(predicted, shape.stages))))
    return failure();
  if (!options.report)
    return success();
  int m = static_cast<int>(pipe.microBatches);
  Bubbles b = bubbles(shape, fig, *rankPeak, m, model, *pl);
  llvm::raw_string_ostream os(*options.report);
  if (options.reportJson)
    reportJson(os, shape, fig, b, m, pipe, *pl);
  else
    reportText(os, shape, fig, b, m, options, model, *pl);
  return success();
}
