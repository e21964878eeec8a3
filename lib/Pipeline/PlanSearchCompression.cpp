//===- PlanSearchCompression.cpp - compressed exchanges in --plan=auto ----===//
//
// Part of the ds project.
//
// The compression dimension of the --plan=auto search (docs/planner.md,
// "Compressed communication"): with --plan-compression=auto, each
// data-parallel layout is also tried with the compressed optimizer twin of
// the one asked for (adam/adamw -> onebit-adam, lamb -> onebit-lamb) and
// with ZeRO++'s quantized collectives (qwZ at ZeRO-3, qgZ at ZeRO 1-3, both
// at ZeRO-3). Which of them ds compiles is ValidateOptions.cpp's decision:
// a choice it refuses for the layout is not a candidate, so what the
// compressed optimizers learn to run under widens the search by itself.
//
//===----------------------------------------------------------------------===//

#include "PlanSearchImpl.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::plan_search;

namespace {

/// The compressed optimizer that replaces `name` ("" when none does).
std::string compressedTwin(const std::string &name) {
  if (name == "adam" || name == "adamw")
    return "onebit-adam";
  if (name == "lamb")
    return "onebit-lamb";
  return "";
}

/// The compression the options give (a compressed optimizer, ZeRO++'s
/// flags or config keys) as the column names it: "1bit" (1-bit Adam or
/// LAMB), "0/1" (0/1 Adam), "qwZ", "qgZ", "qwZ+qgZ" or "none".
std::string givenCompression(const TrainingOptions &o) {
  if (o.optimizerName == "zero-one-adam")
    return "0/1";
  if (o.oneBitExchange())
    return "1bit";
  if (o.quantizeWeights)
    return o.quantizeGradients ? "qwZ+qgZ" : "qwZ";
  return o.quantizeGradients ? "qgZ" : "none";
}

/// Whether the user chose the compression already: then it holds for
/// every candidate. An optimizer without a compressed twin (sgd) leaves
/// only ZeRO++ to choose.
bool compressionGiven(const TrainingOptions &o) {
  return givenCompression(o) != "none" || o.isGiven("quantize-weights") ||
         o.isGiven("quantize-gradients");
}

} // namespace

TrainingOptions plan_search::layoutOptions(const TrainingOptions &o,
                                           const Candidate &cand) {
  TrainingOptions l = o;
  l.planMode.clear();
  l.worldSize = cand.world();
  l.tensorParallel = cand.tp;
  l.pipelineParallel = cand.pp;
  l.sequenceParallel = cand.sp;
  l.zeroStage = cand.zero;
  l.gradAccum = cand.accum;
  l.microBatches = cand.pp > 1 ? cand.accum : 0;
  l.pipeSchedule = cand.schedule;
  l.virtualStages = 1;
  return l;
}

void plan_search::applyCompression(const std::string &choice,
                                   TrainingOptions &o) {
  if (choice == "1bit" && !compressedTwin(o.optimizerName).empty())
    o.optimizerName = compressedTwin(o.optimizerName);
  if (choice == "qwZ" || choice == "qwZ+qgZ")
    o.quantizeWeights = true;
  if (choice == "qgZ" || choice == "qwZ+qgZ")
    o.quantizeGradients = true;
}

std::vector<std::string>
plan_search::compressionChoices(const TrainingOptions &o,
                                const Candidate &cand) {
  std::vector<std::string> out{givenCompression(o)};
  // --plan-compression=auto allows every choice; the DeepSpeed config's
  // "zero_quantized_weights"/"zero_quantized_gradients": "auto" allow
  // ZeRO++'s of them.
  bool all = o.planCompression == "auto";
  auto autoKey = [&](llvm::StringRef leaf) {
    return all || llvm::is_contained(o.configAutoKeys,
                                     "zero_optimization." + leaf.str());
  };
  bool qw = autoKey("zero_quantized_weights"),
       qg = autoKey("zero_quantized_gradients");
  if (!(all || qw || qg) || cand.dp == 1 || compressionGiven(o))
    return out;
  for (const char *choice : {"1bit", "qwZ", "qgZ", "qwZ+qgZ"}) {
    llvm::StringRef c(choice);
    if (c == "1bit" && (!all || compressedTwin(o.optimizerName).empty()))
      continue;
    if ((c.contains("qwZ") && !qw) || (c.contains("qgZ") && !qg))
      continue;
    TrainingOptions l = layoutOptions(o, cand);
    l.clusterSpec.clear();
    l.deviceMemory.clear();
    applyCompression(choice, l);
    if (llvm::Error e = validateTrainingOptions(l)) {
      llvm::consumeError(std::move(e)); // ds does not compile it
      continue;
    }
    out.push_back(choice);
  }
  return out;
}

double plan_search::compressionCommFactor(const Candidate &cand,
                                          const TrainingOptions &o) {
  // The share of the data-parallel bytes left (docs/compression.md,
  // docs/zeropp.md): 1-bit signs travel twice (1/16 of f32) at ZeRO-0;
  // at ZeRO 1-3 the gradients' 1/32 and the parameters' int8 gathers
  // (1/4; twice at ZeRO-3). qwZ: ZeRO-3's two gathers at 1/4; qgZ: the
  // reduce-scatter at bits/32. Only the order of the compiles uses it.
  double q = double(o.quantizeGradientBits) / 32,
         gathers = cand.zero == 3 ? 2 : 1;
  const std::string &c = cand.compression;
  if (c == "1bit" || c == "0/1")
    return cand.zero == 0 ? 1.0 / 16 : (1.0 / 32 + gathers / 4) / (1 + gathers);
  if (c == "qwZ")
    return (1 + gathers / 4) / (1 + gathers);
  if (c == "qgZ")
    return (q + gathers) / (1 + gathers);
  if (c == "qwZ+qgZ")
    return (q + gathers / 4) / (1 + gathers);
  return 1;
}
