//===- PlanPrediction.cpp - a plan's predicted step on --cluster ----------===//
//
// Part of the ds project.
//
// The report's "predicted" section: the step simulator's time for the
// written plan on the cluster ds-opt was given (docs/planner.md), and
// predictPlan: the same for a plan built in memory (the --plan=auto
// search).
//
//===----------------------------------------------------------------------===//

#include "PlanWriterImpl.h"

#include "ds/Support/PlanFootprint.h"
#include "ds/Support/StepSimulator.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::ds;
namespace pb = ::ds::plan;

namespace {

void predictionJson(llvm::raw_ostream &os, const ::ds::ClusterSpec &c,
                    const ::ds::StepPrediction &s, llvm::StringRef precision) {
  os << "{\"cluster\": \"" << c.name << "\", \"nodes\": " << c.nodes
     << ", \"devices_per_node\": " << c.devicesPerNode
     << ", \"precision\": \"" << precision << "\""
     << ", \"step_time_s\": " << s.stepSeconds
     << ", \"tokens_per_step\": " << s.tokensPerStep
     << ", \"tokens_per_s\": " << s.tokensPerSecond << ", \"mfu\": " << s.mfu
     << ", \"peak_flops\": " << s.peakFlops
     << ", \"flops_per_rank\": " << s.flopsPerRank
     << ", \"bottleneck\": \"" << ::ds::bottleneckName(s.bottleneck) << "\""
     << ", \"compute_s\": " << s.computeSeconds
     << ", \"exposed_communication_s\": " << s.exposedCommSeconds
     << ", \"offload_wait_s\": " << s.offloadWaitSeconds
     << ", \"bubble_s\": " << s.bubbleSeconds
     << ", \"bubble_fraction\": " << s.bubbleFraction
     << ", \"micro_batches\": " << s.microBatches;
  if (s.compressed)
    os << ", \"phase\": \"after_freeze\", \"warmup_step_time_s\": "
       << s.warmupStepSeconds;
  os
     << ", \"device_memory\": " << static_cast<uint64_t>(c.memory) << "}";
}

void predictionText(llvm::raw_ostream &os, const ::ds::ClusterSpec &c,
                    const ::ds::StepPrediction &s, llvm::StringRef precision) {
  auto ms = [](double sec) { return llvm::format("%.4g ms", sec * 1e3); };
  os << "predicted on " << c.name << " (" << c.nodes << " x "
     << c.devicesPerNode << " devices, " << precision << " "
     << llvm::format("%.3g", s.peakFlops) << " FLOP/s): step "
     << ms(s.stepSeconds) << ", " << llvm::format("%.4g", s.tokensPerSecond)
     << " tokens/s, MFU " << llvm::format("%.1f", 100 * s.mfu)
     << "%, bottleneck " << ::ds::bottleneckName(s.bottleneck) << "\n"
     << "  kernels " << ms(s.computeSeconds) << ", exposed communication "
     << ms(s.exposedCommSeconds) << ", offload wait "
     << ms(s.offloadWaitSeconds) << ", pipeline bubble " << ms(s.bubbleSeconds)
     << " (" << llvm::format("%.3f", s.bubbleFraction) << "); "
     << s.microBatches << " micro-batch(es) per step\n";
  if (s.compressed)
    os << "  after the freeze (the compressed exchanges); warm-up step "
       << ms(s.warmupStepSeconds) << "\n";
}

} // namespace

LogicalResult mlir::ds::plan_writer::predictOnCluster(
    ModuleOp module, const pb::Plan &p, const PlanWriteOptions &options,
    ::ds::Timeline *timeline) {
  const PlanWriteOptions::Views &v = options.views;
  if (!v.cluster)
    return success();
  ::ds::Precision precision = ::ds::Precision::FP32;
  if (!::ds::parsePrecision(v.precision, precision))
    return module.emitError("--precision='") << v.precision
                                              << "' has no GEMM rate";
  std::string problem =
      ::ds::checkClusterForPlan(*v.cluster, p, precision, v.clusterSource);
  if (!problem.empty())
    return module.emitError(problem);
  ::ds::StepPrediction s = ::ds::predictStep(p, *v.cluster, precision);
  if (timeline)
    *timeline = std::move(s.timeline);
  if (!v.predicted)
    return success();
  llvm::raw_string_ostream os(*v.predicted);
  if (options.reportJson)
    predictionJson(os, *v.cluster, s, v.precision);
  else
    predictionText(os, *v.cluster, s, v.precision);
  return success();
}

LogicalResult mlir::ds::predictPlan(ModuleOp module,
                                    const PlanWriteOptions &given,
                                    const ::ds::ClusterSpec &cluster,
                                    llvm::StringRef precision,
                                    ::ds::StepPrediction &out) {
  ::ds::Precision prec = ::ds::Precision::FP32;
  if (!::ds::parsePrecision(precision.str(), prec))
    return module.emitError("--precision='") << precision
                                              << "' has no GEMM rate";
  // The plan only: no weights to hash, no views, no report.
  PlanWriteOptions options = given;
  options.weightsPath.clear();
  options.report = nullptr;
  options.views = PlanWriteOptions::Views();
  options.views.flopsPerSecond = given.views.flopsPerSecond;
  options.views.bytesPerSecond = given.views.bytesPerSecond;
  options.views.linkBytesPerSecond = given.views.linkBytesPerSecond;
  pb::Plan p;
  SmallVector<ModuleOp> stages = plan_writer::stageModules(module);
  if (!stages.empty()) {
    if (failed(plan_writer::writePipelinePlan(module, stages, "", options, p)))
      return failure();
  } else if (failed(plan_writer::buildPlan(module, options, options.worldSize,
                                           p)) ||
             failed(plan_writer::addSource(module, "", options, p))) {
    return failure(); // addSource: the compile options the cost model reads
  }
  std::string problem = ::ds::checkClusterForPlan(cluster, p, prec, "");
  if (!problem.empty())
    return module.emitError(problem);
  out = ::ds::predictStep(p, cluster, prec);
  if (given.hostPeak) {
    *given.hostPeak = 0;
    if (stages.empty())
      *given.hostPeak = ::ds::footprint(p).hostTotal();
    for (const pb::Plan &s : p.pipeline().stage_plans())
      *given.hostPeak =
          std::max(*given.hostPeak, ::ds::footprint(s).hostTotal());
  }
  return success();
}
