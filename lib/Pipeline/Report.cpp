//===- Report.cpp - the plan file and what --report prints ----------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "CompileSteps.h"

#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Pipeline/Cluster.h"
#include "ds/Pipeline/DeepSpeedConfig.h"
#include "ds/Support/PlanTimeline.h"
#include "ds/Target/Plan/PlanWriter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::ds;

std::optional<int64_t> mlir::ds::parseBytes(llvm::StringRef text) {
  llvm::StringRef num = text.take_while(
      [](char c) { return (c >= '0' && c <= '9') || c == '.' || c == 'e'; });
  std::string unit = text.drop_front(num.size()).trim().lower();
  double value;
  if (num.empty() || num.getAsDouble(value) || value < 0)
    return std::nullopt;
  double scale = 1;
  const double kib = 1024.0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  else if (unit == "kib" || unit == "k")
    scale = kib;
  else if (unit == "mib" || unit == "m")
    scale = kib * kib;
  else if (unit == "gib" || unit == "g")
    scale = kib * kib * kib;
  else if (unit == "tib" || unit == "t")
    scale = kib * kib * kib * kib;
  else
    return std::nullopt;
  double bytes = value * scale;
  if (bytes > 9.2e18)
    return std::nullopt;
  return static_cast<int64_t>(bytes);
}

std::string mlir::ds::mib(int64_t bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << bytes << " bytes (" << llvm::format("%.1f", bytes / 1048576.0)
     << " MiB)";
  return s;
}

int64_t mlir::ds::perRankPeak(ModuleOp module) {
  // Pipeline parallelism: the largest stage's.
  if (SmallVector<ModuleOp> stages = pipelineStages(module); !stages.empty()) {
    int64_t peak = 0;
    for (ModuleOp m : stages)
      peak = std::max(peak, perRankPeak(m));
    return peak;
  }
  int64_t total = 0;
  module.walk([&](func::FuncOp f) {
    if (auto a = f->getAttrOfType<IntegerAttr>(dsrt::kArenaBytes))
      total += a.getInt();
    // Device memory only: offloaded storage lives on the host or NVMe.
    f.walk([&](dsrt::ParamOp p) {
      if (!p->hasAttr("dsrt.space"))
        total += dsrt::bufferBytes(p.getType());
    });
  });
  return total;
}

DictionaryAttr mlir::ds::recomputeSummary(ModuleOp module) {
  DictionaryAttr d;
  module.walk([&](func::FuncOp f) {
    if (auto a = f->getAttrOfType<DictionaryAttr>("ds.recompute"))
      d = a;
  });
  return d;
}

namespace {
/// The recompute section of --report: the chosen plan beside none,
/// every-layer and full (the cost model's activation bytes and extra
/// FLOPs), and the segments.
std::string formatRecompute(DictionaryAttr d, int64_t peak, int64_t limit) {
  std::string s;
  llvm::raw_string_ostream os(s);
  auto pair = [&](llvm::StringRef k) {
    auto a = d.getAs<DenseI64ArrayAttr>(k);
    return a && a.size() == 2 ? std::make_pair(a[0], a[1])
                              : std::make_pair(int64_t(0), int64_t(0));
  };
  auto intOf = [&](llvm::StringRef k) {
    auto a = d.getAs<IntegerAttr>(k);
    return a ? a.getInt() : 0;
  };
  double step = std::max<int64_t>(1, intOf("step_flops"));
  os << "recompute (" << d.getAs<StringAttr>("mode").getValue()
     << "): per-rank peak " << mib(peak);
  if (limit > 0)
    os << ", device memory " << mib(limit);
  os << "\n  " << llvm::left_justify("plan", 12)
     << llvm::right_justify("activation bytes", 18)
     << llvm::right_justify("extra FLOPs", 16)
     << llvm::right_justify("of the step", 13) << "\n";
  for (auto [name, key] :
       {std::pair<llvm::StringRef, llvm::StringRef>{"none", "none"},
        {"every-layer", "every_layer"},
        {"full", "full"},
        {"chosen", "chosen"}}) {
    auto [act, flops] = pair(key);
    os << "  " << llvm::left_justify(name, 12)
       << llvm::right_justify(std::to_string(act), 18)
       << llvm::right_justify(std::to_string(flops), 16)
       << llvm::right_justify(
              (llvm::formatv("{0:F1}%", 100.0 * flops / step)).str(), 13)
       << "\n";
  }
  auto saved = d.getAs<DenseI64ArrayAttr>("seg_saved");
  auto input = d.getAs<DenseI64ArrayAttr>("seg_input");
  auto flops = d.getAs<DenseI64ArrayAttr>("seg_flops");
  auto rc = d.getAs<DenseI64ArrayAttr>("seg_recomputable");
  auto chosen = d.getAs<DenseI64ArrayAttr>("seg_chosen");
  os << "  step FLOPs " << intOf("step_flops") << "; always kept (cut values, "
     << "outputs, segments that cannot be recomputed) " << intOf("fixed")
     << " bytes; layers: " << intOf("layers") << " (" << intOf("layer_period")
     << " segment(s) each)\n";
  os << "  recompute planning (segments, costs, choice, rewrite): "
     << llvm::format("%.1f", intOf("planning_us") / 1000.0) << " ms\n";
  if (d.getAs<StringAttr>("mode").getValue() == "budget")
    os << "  activation budget (model) " << intOf("budget") << " bytes\n";
  if (saved && input && flops && rc && chosen)
    for (int64_t j = 0; j < static_cast<int64_t>(saved.size()); ++j)
      os << "  segment " << j << ": input " << input[j] << " B, saved "
         << saved[j] << " B, forward " << flops[j] << " FLOPs, "
         << (!rc[j]      ? "kept (not recomputable)"
             : chosen[j] ? "recomputed"
                         : "kept")
         << "\n";
  return s;
}

/// The recompute summary attribute as JSON (numbers, strings, arrays).
std::string recomputeJson(DictionaryAttr d) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "{";
  bool first = true;
  for (NamedAttribute a : d) {
    os << (first ? "" : ", ") << "\"" << a.getName().getValue() << "\": ";
    first = false;
    if (auto i = dyn_cast<IntegerAttr>(a.getValue())) {
      os << i.getInt();
    } else if (auto str = dyn_cast<StringAttr>(a.getValue())) {
      os << "\"" << str.getValue() << "\"";
    } else if (auto arr = dyn_cast<DenseI64ArrayAttr>(a.getValue())) {
      os << "[";
      llvm::interleave(arr.asArrayRef(), os, ", ");
      os << "]";
    } else {
      os << "null";
    }
  }
  os << "}";
  return s;
}

/// The plan's record of how it was compiled (ds-run --info).
std::map<std::string, std::string>
compileRecord(const TrainingOptions &o, const MemoryChoices &c,
              const CompileRequest &request) {
  std::map<std::string, std::string> r;
  r["command"] = request.commandLine;
  r["loss"] = o.lossName;
  r["optimizer"] = o.optimizerName;
  r["precision"] = o.precision;
  r["comm_dtype"] = o.effectiveCommDtype();
  if (o.devicesPerNode > 0) // the report's intra/cross-node split
    r["devices_per_node"] = std::to_string(o.devicesPerNode);
  if (o.precision == "fp16") {
    r["loss_scale"] = std::to_string(o.lossScale);
    r["initial_scale_power"] = std::to_string(o.initialScalePower);
    r["loss_scale_window"] = std::to_string(o.lossScaleWindow);
    r["hysteresis"] = std::to_string(o.hysteresis);
    r["consecutive_hysteresis"] = o.consecutiveHysteresis ? "1" : "0";
    r["min_loss_scale"] = std::to_string(o.minLossScale);
  }
  if (c.offloadOptimizer != "none" || c.offloadParam != "none") {
    r["offload_optimizer"] = c.offloadOptimizer;
    r["offload_param"] = c.offloadParam;
  }
  if (c.offloadActivations != "none")
    r["offload_activations"] = c.offloadActivations;
  for (const std::string &spec : o.inputShapes)
    r["input-shape:" + spec] = spec;
  if (o.labelFraction < 1) // the cost model's (lib/Support/PlanTimeline.cpp)
    r[::ds::kLabelFractionOption] = ::ds::labelFractionText(o.labelFraction);
  addRunSettings(o, r); // monitors and logging, for ds-run
  return r;
}
} // namespace

LogicalResult mlir::ds::writePlanFile(CompileResult &result,
                                      const TrainingOptions &o,
                                      const CompileRequest &request) {
  const MemoryChoices &c = result.choices;
  PlanWriteOptions plan;
  plan.weightsPath = request.modelPath;
  plan.compileOptions = compileRecord(o, c, request);
  plan.worldSize = o.worldSize;
  plan.nvmePath = c.nvmePath;
  plan.aioBlockSize = static_cast<uint32_t>(*parseBytes(o.aioBlockSize));
  plan.aioQueueDepth = static_cast<uint32_t>(o.aioQueueDepth);
  plan.aioThreads = static_cast<uint32_t>(o.aioThreads);
  plan.views.pcieBytesPerSecond = double(*parseBytes(o.pcieBandwidth));
  plan.views.nvmeBytesPerSecond = double(*parseBytes(o.nvmeBandwidth));
  bool json = o.reportKind == "json";
  if (o.isGiven("report"))
    plan.report = &result.footprint;
  plan.reportJson = json;
  // The cost model's view: the estimate for the report, the trace and the
  // memory plot.
  plan.views.flopsPerSecond = o.costFlops;
  plan.views.bytesPerSecond = o.costMemBandwidth;
  plan.views.linkBytesPerSecond = o.costLinkBandwidth;
  plan.views.tracePath = o.emitTrace;
  if (result.cluster) {
    plan.views.cluster = &result.cluster->spec;
    plan.views.clusterSource = result.cluster->source;
    plan.views.precision = o.precision;
    plan.views.predicted = &result.predicted;
  }
  plan.views.memoryPlotPath = o.emitMemoryPlot;
  plan.views.budget = static_cast<uint64_t>(result.deviceMemory);
  plan.views.plotTitle = "per-rank memory over one step: " +
                         llvm::sys::path::filename(request.modelPath).str() +
                         ", ZeRO-" + std::to_string(o.builtZeroStage()) + ", " +
                         std::to_string(o.worldSize) + " rank(s), " +
                         o.precision + ", recompute " + c.recomputeMode;
  if (o.pipelineParallel > 1) {
    // The report is the pipeline's: per stage, with the schedule.
    plan.pipeline.microBatches = o.microBatches;
    plan.pipeline.schedule =
        o.virtualStages > 1 ? std::string("interleaved") : o.pipeSchedule;
    plan.pipeline.virtualStages = o.virtualStages;
    plan.pipeline.tied = result.split.tied;
    plan.pipeline.cutPoints = result.split.cutPoints;
    for (const PipelineStage &st : result.split.stages)
      plan.pipeline.stages.push_back(
          {st.firstOp, st.lastOp, st.flops, st.sendBytes});
  } else if (o.isGiven("report")) {
    (json ? plan.views.costJson : plan.views.costReport) = &result.cost;
  }
  return writePlan(*result.module, request.planPath, plan, request.planBytes);
}

std::string mlir::ds::formatReport(const CompileResult &result,
                                   const TrainingOptions &o) {
  bool print = o.isGiven("report"), json = o.reportKind == "json";
  if (o.pipelineParallel > 1) {
    if (json && !result.predicted.empty()) // {"pipeline": {...}, "predicted"}
      return (llvm::StringRef(result.footprint).rtrim().drop_back() +
              ", \"predicted\": " + result.predicted + "}\n")
          .str();
    return result.footprint + (print && !json ? result.searchLog : "") +
           result.predicted;
  }
  DictionaryAttr recompute = recomputeSummary(*result.module);
  if (json) {
    // One object: the footprint, then the peak and the recompute choice.
    llvm::StringRef body =
        llvm::StringRef(result.footprint).rtrim().drop_back();
    return (body + ", \"cost\": " + result.cost +
            ", \"per_rank_peak\": " + llvm::Twine(result.perRankPeak) +
            ", \"device_memory\": " + llvm::Twine(result.deviceMemory) +
            ", \"recompute\": " +
            (recompute ? recomputeJson(recompute) : "null") +
            (result.predicted.empty() ? "" : ", \"predicted\": ") +
            result.predicted + "}\n")
        .str();
  }
  std::string s = result.footprint + result.predicted;
  if (print) {
    s += result.cost + result.searchLog;
    s += recompute ? formatRecompute(recompute, result.perRankPeak,
                                     result.deviceMemory)
                   : "per-rank peak " + mib(result.perRankPeak) + "\n";
  }
  return s;
}
