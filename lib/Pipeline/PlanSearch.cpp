//===- PlanSearch.cpp - --plan=auto: compile, predict, rank ---------------===//
//
// Part of the ds project.
//
// The search's driver: imports the model once per micro-batch, prunes the
// candidates by their analytic memory bound, compiles the most promising
// ones (recompute none, then full, then with the optimizer state offloaded)
// up to --plan-compiles, predicts each fitting plan's step on the cluster
// and writes the fastest (docs/planner.md, "--plan=auto").
//
//===----------------------------------------------------------------------===//

#include "PlanSearchImpl.h"

#include "ds/Analysis/ModelSummary.h"
#include "ds/Pipeline/Cluster.h"
#include "ds/Support/PlanTimeline.h"
#include "ds/Support/StepSimulator.h"
#include "ds/Target/Plan/PlanWriter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <chrono>
#include <map>
#include <set>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::plan_search;

namespace {

/// The type of the model's first data input with a batch dimension.
RankedTensorType firstInput(ModuleOp model) {
  RankedTensorType type;
  model->walk([&](func::FuncOp f) {
    for (unsigned i = 0; i < f.getNumArguments() && !type; ++i)
      if (f.getArgAttr(i, "ds.input"))
        if (auto t = dyn_cast<RankedTensorType>(f.getArgumentTypes()[i]);
            t && t.getRank() > 0)
          type = t;
  });
  return type;
}

/// The leading dimension of the model's data inputs (-1: none).
int64_t modelBatch(ModuleOp model) {
  RankedTensorType t = firstInput(model);
  return t ? t.getDimSize(0) : -1;
}

/// The elements of one sample of the model's first data input.
int64_t sampleElements(ModuleOp model) {
  RankedTensorType t = firstInput(model);
  if (!t || !t.hasStaticShape())
    return 1;
  return std::max<int64_t>(1, t.getNumElements() /
                                  std::max<int64_t>(1, t.getDimSize(0)));
}

/// `spec` ("name:4x32") with its leading dimension `batch`.
std::string withBatch(const std::string &spec, int64_t batch) {
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos || spec.substr(colon + 1) == "scalar")
    return spec;
  size_t x = spec.find('x', colon);
  return spec.substr(0, colon + 1) + std::to_string(batch) +
         (x == std::string::npos ? "" : spec.substr(x));
}

/// What the in-memory prediction needs of a compile: its ranks and, for a
/// pipeline, the split and the schedule (as the plan file records them).
PlanWriteOptions planWriteOptions(const TrainingOptions &o,
                                  const CompileResult &r) {
  PlanWriteOptions pw;
  pw.worldSize = o.worldSize;
  pw.nvmePath = r.choices.nvmePath;
  pw.views.flopsPerSecond = o.costFlops;
  pw.views.bytesPerSecond = o.costMemBandwidth;
  pw.views.linkBytesPerSecond = o.costLinkBandwidth;
  if (o.labelFraction < 1) // the cost model's, as the plan file records it
    pw.compileOptions[::ds::kLabelFractionOption] =
        ::ds::labelFractionText(o.labelFraction);
  if (o.pipelineParallel > 1) {
    pw.pipeline.microBatches = o.microBatches;
    pw.pipeline.virtualStages = o.virtualStages;
    pw.pipeline.schedule =
        o.virtualStages > 1 ? std::string("interleaved") : o.pipeSchedule;
    pw.pipeline.tied = r.split.tied;
    pw.pipeline.cutPoints = r.split.cutPoints;
    for (const PipelineStage &st : r.split.stages)
      pw.pipeline.stages.push_back(
          {st.firstOp, st.lastOp, st.flops, st.sendBytes});
  }
  return pw;
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

class Search {
public:
  Search(MLIRContext &context, const TrainingOptions &options,
         const CompileRequest &request, llvm::raw_ostream &progress)
      : context(context), options(options), request(request),
        progress(progress) {}

  llvm::Expected<PlanSearchResult> run();

private:
  llvm::Error loadModel();
  FailureOr<ModuleOp> modelAt(int64_t micro);
  TrainingOptions optionsFor(const Candidate &cand) const;
  std::string autoValuesLine(const Candidate &c, bool json = false) const;
  bool compileOne(Candidate &cand);
  void evaluate(Candidate &cand, bool activations = false);
  void compileShortlist();
  /// Returns how many trials changed the plan.
  int tune(int chosen, std::vector<Candidate> trials);
  /// Bucket sizes to try for `c`: `large` and a tenth of it where they
  /// are below the rank's trainable elements, else an eighth and a half
  /// of them.
  std::vector<int64_t> bucketSizes(const Candidate &c,
                                   int64_t large = 50000000) const;
  void tryBuckets(int chosen);
  void trySeparate(int chosen);
  void tryInFlight(int chosen);
  int rank() const;
  llvm::Expected<PlanSearchResult> finish(int chosen);

  MLIRContext &context;
  const TrainingOptions &options;
  const CompileRequest &request;
  llvm::raw_ostream &progress;
  ::ds::ClusterSpec cluster;
  ModelFacts facts;
  std::map<int64_t, OwningOpRef<ModuleOp>> models; // by micro-batch
  std::vector<Candidate> all;
  int compiles = 0, budget = 0;
  /// Whether the winner's plan depends on its bucket sizes (one size
  /// tried changed it, or a size was given): else no kind is tried alone.
  bool bucketsMatter = true;
  /// The model's pipeline cut points, once a pipeline compile has found
  /// them (-1: not yet): more stages than cuts + 1 cannot be built.
  int64_t cutPoints = -1;
  std::string note; // the fixed micro-batch, for the header
  std::chrono::steady_clock::time_point start, lastLine;
};

llvm::Error Search::loadModel() {
  // A dynamic batch nothing fixes is imported at 1 for the figures.
  TrainingOptions o = options;
  if (o.configMicroBatch <= 0)
    o.configMicroBatch = 1;
  FailureOr<OwningOpRef<ModuleOp>> base =
      importModel(context, o, request.modelPath);
  if (failed(base))
    return llvm::make_error<ReportedError>();
  FailureOr<ModelSummary> sum = summarize(**base);
  if (failed(sum))
    return llvm::make_error<ReportedError>();
  int64_t batch = modelBatch(**base);
  facts.importBatch = std::max<int64_t>(1, batch);
  facts.parameters = sum->paramElements;
  facts.trainable = sum->trainableElements;
  facts.flopsPerSample = double(sum->flops) / double(facts.importBatch);
  facts.sampleTokens = sampleElements(**base);
  ActivationFacts act = activationFacts(**base);
  facts.keptElements = act.kept;
  facts.savedElements = act.saved;
  // One rank's figures per tensor-parallel degree the search may take.
  for (int64_t tp = 1; tp <= cluster.devicesPerNode; ++tp) {
    if (cluster.devicesPerNode % tp ||
        (options.isGiven("tensor-parallel") && tp != options.tensorParallel))
      continue;
    for (bool sp : {false, true}) {
      if (sp && tp == 1)
        continue;
      FailureOr<ModelFacts::Split> split =
          partitionFacts(**base, options, tp, sp);
      if (succeeded(split))
        facts.splits[{tp, sp}] = *split;
    }
  }
  models[facts.importBatch] = std::move(*base);
  // A batch the import cannot change is the export's: the micro-batch is
  // fixed at it.
  FailureOr<ModuleOp> probe = modelAt(facts.importBatch + 1);
  if (failed(probe) || modelBatch(*probe) != facts.importBatch + 1) {
    facts.fixedBatch = facts.importBatch;
    models.erase(facts.importBatch + 1);
    note = "the export fixes the batch at " +
           std::to_string(facts.fixedBatch) +
           ", so the micro-batch is fixed at it\n";
  }
  return llvm::Error::success();
}

FailureOr<ModuleOp> Search::modelAt(int64_t micro) {
  auto it = models.find(micro);
  if (it != models.end())
    return *it->second;
  TrainingOptions o = options;
  for (std::string &spec : o.inputShapes)
    spec = withBatch(spec, micro);
  o.configMicroBatch = micro;
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  FailureOr<OwningOpRef<ModuleOp>> m = importModel(context, o, request.modelPath);
  if (failed(m))
    return failure();
  ModuleOp module = **m;
  models[micro] = std::move(*m);
  return module;
}

/// The config's "auto" values the search decided, as the chosen layout
/// has them: one text line (empty when there are none), or with `json` a
/// JSON object of key and value.
std::string Search::autoValuesLine(const Candidate &c, bool json) const {
  TrainingOptions o = optionsFor(c);
  std::string line, object;
  for (const std::string &key : options.configAutoKeys) {
    llvm::StringRef leaf = llvm::StringRef(key).rsplit('.').second;
    if (leaf.empty())
      leaf = key;
    std::string value;
    if (leaf == "train_micro_batch_size_per_gpu")
      value = std::to_string(c.micro);
    else if (leaf == "gradient_accumulation_steps")
      value = std::to_string(c.accum);
    else if (leaf == "train_batch_size")
      value = std::to_string(options.globalBatch);
    else if (key == "zero_optimization.stage")
      value = std::to_string(c.zero);
    else if (leaf == "reduce_bucket_size")
      value = std::to_string(o.reduceBucketSize);
    else if (leaf == "allgather_bucket_size")
      value = std::to_string(o.allgatherBucketSize);
    else if (leaf == "stage3_prefetch_bucket_size")
      value = std::to_string(o.prefetchBucketSize);
    else if (leaf == "stage3_param_persistence_threshold")
      value = std::to_string(o.persistenceThreshold);
    else if (leaf == "zero_quantized_weights")
      value = o.quantizeWeights ? "true" : "false";
    else if (leaf == "zero_quantized_gradients")
      value = o.quantizeGradients ? "true" : "false";
    else
      continue; // not the search's: the config notice's value holds
    object += (object.empty() ? "" : ", ") + ("\"" + key + "\": ") + value;
    line += (line.empty() ? "" : "; ") + key + " = " + value;
  }
  if (json)
    return "{" + object + "}";
  return line.empty() ? line
                      : "config \"auto\" values as the planner chose them "
                        "(not the defaults the config notice names): " +
                            line + "\n";
}

TrainingOptions Search::optionsFor(const Candidate &cand) const {
  TrainingOptions o = layoutOptions(options, cand);
  o.recompute = cand.recompute;
  o.offloadMode = "none";
  auto place = [&](bool off, bool nvme) {
    return !off   ? std::string("none")
           : nvme ? "nvme:" + options.planNvmePath
                  : std::string("cpu");
  };
  if (!options.isGiven("offload-optimizer"))
    o.offloadOptimizer = place(cand.offload, cand.nvme);
  if (!options.isGiven("offload-param"))
    o.offloadParam = place(cand.offloadParam, cand.paramNvme);
  if (!options.isGiven("offload-activations"))
    o.offloadActivations = cand.offloadActivations ? "cpu" : "none";
  o.deviceMemory.clear();
  o.clusterSpec.clear();
  o.emitTrace.clear();
  o.emitMemoryPlot.clear();
  o.configMicroBatch = 0;
  if (cand.bucket > 0)
    o.reduceBucketSize = o.allgatherBucketSize = o.prefetchBucketSize =
        cand.bucket;
  for (auto [size, field] : {std::pair{cand.reduceBucket, &o.reduceBucketSize},
                             {cand.gatherBucket, &o.allgatherBucketSize},
                             {cand.prefetchBucket, &o.prefetchBucketSize},
                             {cand.persistence, &o.persistenceThreshold}})
    if (size > 0)
      *field = size;
  if (cand.inFlight > 0)
    o.maxInFlight = cand.inFlight;
  applyCompression(cand.compression, o);
  // The search decides these; a config's batch keys do not hold.
  o.origin.erase("grad-accum");
  o.origin.erase("micro-batches");
  return o;
}

/// Compiles `cand` as it stands and predicts it; false when the compiler
/// refused it (state Failed).
bool Search::compileOne(Candidate &cand) {
  ++compiles;
  std::string error;
  ScopedDiagnosticHandler quiet(&context, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && error.empty())
      error = d.str();
    return success();
  });
  auto refuse = [&](std::string why) {
    cand.state = State::Failed;
    cand.why = why.empty() ? "the compiler refused it" : why;
    return false;
  };
  FailureOr<ModuleOp> model = modelAt(cand.micro);
  if (failed(model))
    return refuse("the model does not import at batch " +
                  std::to_string(cand.micro) + ": " + error);
  TrainingOptions o = optionsFor(cand);
  if (llvm::Error e = validateTrainingOptions(o))
    return refuse(llvm::toString(std::move(e)));
  CompileRequest req;
  req.modelPath = request.modelPath;
  llvm::Expected<CompileResult> r = compile(*model, o, req);
  if (!r) {
    std::string msg;
    llvm::handleAllErrors(
        r.takeError(), [](const ReportedError &) {},
        [&](const llvm::ErrorInfoBase &e) { msg = e.message(); });
    return refuse(msg.empty() ? error : msg);
  }
  if (o.pipelineParallel > 1 && r->split.cutPoints > 0)
    cutPoints = r->split.cutPoints;
  // A pipeline's peak is its fullest rank's, stash included.
  uint64_t pipePeak = 0, hostPeak = 0;
  PlanWriteOptions pw = planWriteOptions(o, *r);
  pw.pipeline.rankPeak = &pipePeak;
  if (cand.offload || cand.offloadParam || cand.offloadActivations)
    pw.hostPeak = &hostPeak;
  ::ds::StepPrediction s;
  if (failed(predictPlan(*r->module, pw, cluster, o.precision, s)))
    return refuse("the cluster cannot time it: " + error);
  cand.peak = std::max<int64_t>(r->perRankPeak, int64_t(pipePeak));
  cand.hostPeak = int64_t(hostPeak);
  cand.hostTooBig = false;
  if (cand.peak > int64_t(cluster.memory)) {
    cand.state = State::TooBig;
    cand.why = "peak " + mib(cand.peak) + " over the device's " +
               mib(int64_t(cluster.memory));
    return true;
  }
  // The ranks of a node share its host memory (when the cluster says).
  int64_t perNode = std::min<int64_t>(cand.world(), cluster.devicesPerNode);
  if (cluster.host.memory > 0 &&
      cand.hostPeak * perNode > int64_t(cluster.host.memory)) {
    cand.state = State::TooBig;
    cand.hostTooBig = true;
    cand.why = "host memory " + mib(cand.hostPeak) + " per rank x " +
               std::to_string(perNode) + " ranks over the node's " +
               mib(int64_t(cluster.host.memory));
    return true;
  }
  cand.state = State::Fits;
  cand.why.clear();
  cand.step = s.stepSeconds;
  cand.tokensPerSecond = s.tokensPerSecond;
  cand.mfu = s.mfu;
  cand.bottleneck = ::ds::bottleneckName(s.bottleneck);
  return true;
}

/// Recompute none, then full, with everything on the device; then the
/// offloads the cluster allows, in the order they cost: the optimizer
/// state on the host, at ZeRO-3 the parameters too, then (with `nvme`)
/// the optimizer state on NVMe, at ZeRO-3 with the parameters on the
/// host, then on NVMe too. The first that fits (`activations`: pass 2).
void Search::evaluate(Candidate &cand, bool activations) {
  std::vector<std::string> modes{"none", "full"};
  if (options.isGiven("recompute") && options.recompute != "auto")
    modes = {options.recompute};
  // Offload given on the command line or by the config holds throughout.
  std::array<int, 3> given = givenOffload(options);
  int givenOpt = given[0], givenParam = given[1];
  auto placeAt = [&](Candidate &c, int opt, int param, int act = -1) {
    placeOffload(c, {opt, param, act < 0 ? std::max(given[2], 0) : act});
  };
  // A mode whose memory bound on the device (the optimizer state there)
  // is over the device memory cannot fit: not compiled.
  Candidate onDevice = cand;
  placeAt(onDevice, std::max(givenOpt, 0), std::max(givenParam, 0));
  int64_t memory = int64_t(cluster.memory);
  for (const std::string &mode :
       activations ? std::vector<std::string>{} : modes) {
    cand.recompute = mode;
    placeAt(cand, std::max(givenOpt, 0), std::max(givenParam, 0));
    if (givenParam <= 0 &&
        boundParts(onDevice, options, facts, mode == "none").total() > memory)
      continue;
    if (!compileOne(cand) || cand.state == State::Fits)
      return;
  }
  if (cand.peak < 0) // no mode compiled: the optimizer state must go
    cand.recompute = modes.back();
  // Then the offloads (PlanSearchOffload.cpp's order).
  for (auto [opt, param, act] :
       offloadLadder(cand, cluster, given, activations)) {
    Candidate trial = cand;
    placeAt(trial, opt, param, act);
    // Activations on the host instead of recompute (unless it is given).
    if (activations)
      trial.recompute = modes.front();
    bool compiled = compileOne(trial);
    cand.activationsTried |= activations && compiled;
    if (cand.peak < 0 || cand.state == State::Failed ||
        (compiled && (trial.state == State::Fits ||
                      (trial.peak <= cand.peak && !trial.hostTooBig))))
      cand = trial;
    if (cand.state == State::Fits)
      return;
  }
  if (cand.state == State::NotCompiled) { // nothing tried could fit
    cand.state = State::Pruned;
    cand.why = "its memory lower bound is over the device memory in every "
               "recompute mode tried";
  }
}

void Search::compileShortlist() {
  std::vector<size_t> order;
  for (size_t i = 0; i < all.size(); ++i) {
    Candidate &c = all[i];
    if (c.lowerBound > int64_t(cluster.memory)) {
      c.state = State::Pruned;
      Candidate asBound = c; // as enumerate() bounded it
      asBound.offload = cluster.host.present;
      asBound.offloadActivations = cluster.host.present && c.pp == 1;
      BoundParts b = boundParts(asBound, options, facts);
      c.why = "its memory lower bound is " + mib(c.lowerBound) +
              " (parameters " + mib(b.weights) + ", optimizer state " +
              mib(b.state) + ", then the larger of gradients " +
              mib(b.gradients) + " and kept activations " +
              mib(b.activations) + ")";
    } else {
      order.push_back(i);
    }
  }
  // Candidates that may fit with their optimizer state on the device come
  // first: offload is tried only after, and costs time (GPT-3 175B on
  // 128x8 spent the whole budget on ZeRO-0 layouts otherwise).
  std::vector<bool> onDevice(all.size());
  for (size_t i : order)
    onDevice[i] = all[i].boundDevice <= int64_t(cluster.memory);
  auto before = [&](size_t a, size_t b) {
    const Candidate &x = all[a], &y = all[b];
    if (onDevice[a] != onDevice[b])
      return bool(onDevice[a]);
    if (x.estimate != y.estimate)
      return x.estimate < y.estimate;
    if (x.zero != y.zero)
      return x.zero < y.zero;
    return a < b;
  };
  std::sort(order.begin(), order.end(), before);
  // Each family's most promising candidate first, then the rest.
  std::set<std::string> seen;
  std::vector<size_t> firsts, rest;
  for (size_t i : order)
    (seen.insert(all[i].family()).second ? firsts : rest).push_back(i);
  firsts.insert(firsts.end(), rest.begin(), rest.end());
  size_t bounded = order.size();
  // A micro-batch that does not fit rules out the larger ones of its kind.
  std::map<std::string, int64_t> tooBig;
  for (size_t i : firsts) {
    Candidate &c = all[i];
    // (A compressed variant's extra state does not rule out the plain one.)
    std::string kind = c.family() + " zero" + std::to_string(c.zero) + " " +
                       c.schedule + " " + c.compression;
    auto it = tooBig.find(kind);
    if (it != tooBig.end() && c.micro >= it->second) {
      c.state = State::Skipped;
      c.why = "micro-batch " + std::to_string(it->second) +
              " of its kind did not fit";
      continue;
    }
    if (cutPoints >= 0 && c.pp * c.virtualStages() > cutPoints + 1) {
      c.state = State::Skipped;
      c.why = std::string(c.virtualStages() > 1 ? "more model chunks"
                                                : "more stages") +
              " than the model's " + std::to_string(cutPoints) +
              " pipeline cut points allow";
      continue;
    }
    if (compiles >= budget) {
      c.why = "estimated slower than those compiled (--plan-compiles=" +
              std::to_string(budget) + ")";
      continue;
    }
    evaluate(c);
    if (c.state == State::TooBig)
      tooBig[kind] = std::min(c.micro, it == tooBig.end() ? c.micro : it->second);
    if (secondsSince(lastLine) > 5) { // long searches only
      lastLine = std::chrono::steady_clock::now();
      progress << "plan search: " << all.size() << " candidates, " << bounded
               << " within the memory bound; " << compiles << " of at most "
               << budget << " compiles, "
               << llvm::format("%.1f", secondsSince(start)) << " s; last "
               << c.layout() << ": " << stateName(c.state) << "\n";
    }
  }
  // Nothing fits: pass 2, the activations on the host (docs/planner.md).
  if (!cluster.host.present || options.isGiven("offload-activations") ||
      llvm::any_of(all, [](auto &c) { return c.state == State::Fits; }))
    return;
  int stop = compiles + budget;
  for (size_t i : firsts)
    if (Candidate &c = all[i]; c.pp == 1 && compiles < stop &&
        (c.state == State::TooBig ||
         (c.state == State::Pruned && c.lowerBound <= int64_t(cluster.memory))))
      evaluate(c, /*activations=*/true);
}

int Search::rank() const {
  int best = -1;
  for (size_t i = 0; i < all.size(); ++i) {
    const Candidate &c = all[i];
    if (c.state != State::Fits)
      continue;
    if (best < 0)
      best = int(i);
    const Candidate &b = all[best];
    if (c.step < b.step || (c.step == b.step && c.peak < b.peak))
      best = int(i);
  }
  return best;
}

/// Compiles `trials` of the winner `chosen` while the tuning budget
/// lasts; each is kept when it changes the plan.
int Search::tune(int chosen, std::vector<Candidate> trials) {
  int changed = 0;
  for (Candidate &trial : trials) {
    if (compiles >= budget + kTuneCompiles)
      break;
    compileOne(trial);
    if (trial.state != State::Fits || trial.step != all[chosen].step ||
        trial.peak != all[chosen].peak) {
      all.push_back(trial);
      ++changed;
    }
  }
  return changed;
}

/// Other bucket sizes for the winner (its collectives' granularity): 5e6
/// and 5e7 elements, those below the rank's trainable elements (a bucket
/// holding them all is one bucket whatever its size); for a smaller model
/// an eighth and a half of them.
std::vector<int64_t> Search::bucketSizes(const Candidate &c,
                                         int64_t large) const {
  int64_t rank = facts.trainable / (c.tp * c.pp);
  std::vector<int64_t> sizes;
  for (int64_t b : {large / 10, large})
    if (b < rank)
      sizes.push_back(b);
  if (sizes.empty() && rank >= 16)
    sizes = {rank / 8, rank / 2};
  return sizes;
}

void Search::tryBuckets(int chosen) {
  const Candidate &c = all[chosen];
  if (c.dp == 1 || options.isGiven("reduce-bucket-size") ||
      options.isGiven("allgather-bucket-size") ||
      options.isGiven("prefetch-bucket-size"))
    return;
  std::vector<Candidate> trials;
  for (int64_t b : bucketSizes(c)) {
    trials.push_back(c);
    trials.back().bucket = b;
  }
  bucketsMatter = tune(chosen, std::move(trials)) > 0;
}

/// The winner's buckets of each kind at the sizes of tryBuckets it does
/// not have (reduce with data parallelism; the all-gather of updated
/// shards at ZeRO 1-2; the parameter prefetch at ZeRO-3), one kind at a
/// time; then at ZeRO-3 persistence thresholds of 1e5 and 1e6 elements
/// (DeepSpeed's default and ten times it; for a small model, a 64th and
/// an eighth of the rank's parameters): parameters below stay whole.
void Search::trySeparate(int chosen) {
  const Candidate c = all[chosen];
  if (c.dp == 1)
    return;
  struct Kind {
    int64_t Candidate::*field;
    bool applies;
    const char *flag;
  };
  std::vector<Kind> kinds{
      {&Candidate::reduceBucket, true, "reduce-bucket-size"},
      {&Candidate::gatherBucket, c.zero == 1 || c.zero == 2,
       "allgather-bucket-size"},
      {&Candidate::prefetchBucket, c.zero == 3, "prefetch-bucket-size"}};
  // At ZeRO-0 only the reduce buckets apply: the same as one size.
  std::vector<Candidate> trials;
  std::vector<int64_t> sizes = bucketSizes(c);
  if (c.zero == 0 || !bucketsMatter)
    sizes.clear();
  for (int64_t b : sizes)
    for (const Kind &k : kinds)
      if (k.applies && !options.isGiven(k.flag) && b != c.bucket) {
        trials.push_back(c);
        trials.back().*k.field = b;
      }
  tune(chosen, std::move(trials));
  chosen = rank();
  const Candidate w = all[chosen];
  if (w.zero != 3 || options.isGiven("param-persistence-threshold"))
    return;
  int64_t rank = facts.trainable / (w.tp * w.pp);
  trials.clear();
  for (int64_t t : rank > 1000000 ? std::vector<int64_t>{100000, 1000000}
                                  : std::vector<int64_t>{rank / 64, rank / 8})
    if (t > 0) {
      trials.push_back(w);
      trials.back().persistence = t;
    }
  tune(chosen, std::move(trials));
}

/// With --overlap-comm, other depths of collectives in flight for the
/// winner (how far ZeRO-3's gathers prefetch and gradient buckets queue).
void Search::tryInFlight(int chosen) {
  if (all[chosen].world() == 1 || !options.overlapComm ||
      options.isGiven("max-inflight-collectives"))
    return;
  std::vector<Candidate> trials;
  for (int64_t depth : {int64_t(1), int64_t(4)}) {
    trials.push_back(all[chosen]);
    trials.back().inFlight = depth;
  }
  tune(chosen, std::move(trials));
}

llvm::Expected<PlanSearchResult> Search::run() {
  start = lastLine = std::chrono::steady_clock::now();
  if (options.planMode != "auto")
    return fail("--plan='" + options.planMode + "' is not 'auto'");
  if (options.clusterSpec.empty())
    return fail("--plan=auto needs --cluster=FILE|PRESET: the devices to "
                "plan for (docs/planner.md)");
  if (options.globalBatch <= 0)
    return fail("--plan=auto needs --global-batch=N: the samples of one "
                "optimizer step over all data-parallel ranks");
  if (!options.training())
    return fail("--plan=auto plans a training step: give --optimizer=...");
  if (options.emitKind != "plan")
    return fail("--plan=auto writes a plan (--emit=plan, the default)");
  llvm::Expected<::ds::ClusterSpec> spec = loadCluster(options.clusterSpec);
  if (!spec)
    return spec.takeError();
  cluster = std::move(*spec);
  ::ds::Precision p = ::ds::Precision::FP32;
  ::ds::parsePrecision(options.precision, p);
  if (cluster.flops[static_cast<int>(p)] <= 0)
    return fail(options.clusterSpec + ": device.flops." + options.precision +
                ": required for --precision=" + options.precision);
  if (options.isGiven("world-size") && options.worldSize > cluster.devices())
    return fail("--world-size=" + llvm::Twine(options.worldSize) +
                " needs more devices than " + options.clusterSpec + "'s " +
                llvm::Twine(cluster.devices()));
  if (llvm::Error e = loadModel())
    return std::move(e);
  SearchSpace space = searchSpace(options, cluster);
  if (llvm::Error e = checkGlobalBatch(space, options, cluster, facts,
                                       options.globalBatch))
    return std::move(e);
  all = enumerate(space, options, cluster, facts, options.globalBatch);
  if (all.empty())
    return fail("no layout of " + options.clusterSpec +
                " takes --global-batch=" + llvm::Twine(options.globalBatch) +
                " with the options given");
  budget = static_cast<int>(std::max<int64_t>(1, options.planCompiles));
  compileShortlist();
  int chosen = rank();
  if (chosen < 0)
    return fail(nothingFits(all, cluster, options.clusterSpec, facts));
  tryBuckets(chosen);
  trySeparate(rank());
  tryInFlight(rank());
  return finish(rank());
}

llvm::Expected<PlanSearchResult> Search::finish(int chosen) {
  Candidate &c = all[chosen];
  TrainingOptions o = optionsFor(c);
  o.clusterSpec = options.clusterSpec;
  o.deviceMemory = std::to_string(int64_t(cluster.memory));
  o.emitTrace = options.emitTrace;
  o.emitMemoryPlot = options.emitMemoryPlot;
  // Full recompute fitted: the least recompute that fits is cheaper.
  if (c.recompute == "full" && c.pp == 1 && !options.isGiven("recompute"))
    o.recompute = "auto";
  if (llvm::Error e = validateTrainingOptions(o))
    return std::move(e);
  FailureOr<ModuleOp> model = modelAt(c.micro);
  if (failed(model))
    return llvm::make_error<ReportedError>();
  ++compiles;
  llvm::Expected<CompileResult> r = compile(*model, o, request);
  if (!r)
    return r.takeError();
  c.recompute = r->choices.recomputeMode;
  uint64_t pipePeak = 0, hostPeak = 0;
  PlanWriteOptions pw = planWriteOptions(o, *r);
  pw.pipeline.rankPeak = &pipePeak;
  if (c.offload || c.offloadParam || c.offloadActivations)
    pw.hostPeak = &hostPeak;
  ::ds::StepPrediction s;
  if (failed(predictPlan(*r->module, pw, cluster, o.precision, s)))
    return llvm::make_error<ReportedError>();
  c.peak = std::max<int64_t>(r->perRankPeak, int64_t(pipePeak));
  c.hostPeak = int64_t(hostPeak);
  c.step = s.stepSeconds;
  c.tokensPerSecond = s.tokensPerSecond;
  c.mfu = s.mfu;
  c.bottleneck = ::ds::bottleneckName(s.bottleneck);
  PlanSearchResult out;
  out.candidates = static_cast<int>(all.size());
  out.compiles = compiles;
  int pruned = 0;
  for (const Candidate &x : all)
    pruned += x.state == State::Pruned;
  std::string header =
      "plan search on " + cluster.name + " (" + std::to_string(cluster.nodes) +
      " x " + std::to_string(cluster.devicesPerNode) + " devices of " +
      (cluster.memory >= (1 << 30)
           ? llvm::formatv("{0:F1} GiB", cluster.memory / (1 << 30))
           : llvm::formatv("{0:F1} MiB", cluster.memory / (1 << 20)))
          .str() +
      "), global batch " +
      std::to_string(options.globalBatch) + ": " + std::to_string(all.size()) +
      " candidates, " + std::to_string(pruned) +
      " pruned by the memory bound, " + std::to_string(compiles) +
      " compiles, " + llvm::formatv("{0:F1}", secondsSince(start)).str() +
      " s";
  bool json = options.isGiven("report") && options.reportKind == "json";
  std::string report = formatReport(*r, o);
  if (json) {
    llvm::StringRef body = llvm::StringRef(report).rtrim();
    std::string planJson =
        candidatesJson(all, chosen, compiles, options.explainPlan);
    llvm::StringRef plan(planJson);
    out.output = (body.drop_back() + ", \"plan\": " + plan.rtrim().drop_back() +
                  ", \"auto_values\": " + autoValuesLine(c, true) + "}}\n")
                     .str();
  } else {
    out.output = note +
                 formatTable(all, chosen, cluster, options.explainPlan,
                             header) +
                 "chosen: " + c.layout() + "; plan written to " +
                 request.planPath + " (mpirun -np " +
                 std::to_string(c.world()) + " ds-run " + request.planPath +
                 ")\n" + autoValuesLine(c) + report;
  }
  if (!options.plotCandidates.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(options.plotCandidates, ec);
    if (ec)
      return fail("cannot write '" + options.plotCandidates +
                  "': " + ec.message());
    os << plotCandidates(all, chosen, cluster, header);
  }
  out.chosen = std::move(*r);
  out.options = std::move(o);
  return std::move(out);
}
} // namespace

llvm::Error mlir::ds::checkSearchFlags(const TrainingOptions &options) {
  if (!options.planMode.empty())
    return llvm::Error::success();
  for (llvm::StringRef flag :
       {"global-batch", "explain", "plot-candidates", "plan-compiles",
        "plan-nvme-path", "plan-compression"})
    if (options.isGiven(flag))
      return fail("--" + flag + " is for the layout search: give --plan=auto");
  return llvm::Error::success();
}

llvm::Expected<PlanSearchResult>
mlir::ds::searchPlan(MLIRContext &context, const TrainingOptions &options,
                     const CompileRequest &request,
                     llvm::raw_ostream &progress) {
  return Search(context, options, request, progress).run();
}
