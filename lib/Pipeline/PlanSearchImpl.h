//===- PlanSearchImpl.h - the --plan=auto search's parts --------*- C++ -*-===//
//
// Part of the ds project.
//
// The candidates of the search, the analytic bounds that prune them before
// any compile (PlanSearchSpace.cpp), and the report of the ranked and the
// rejected ones (PlanSearchReport.cpp). The driver is PlanSearch.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DS_LIB_PIPELINE_PLANSEARCHIMPL_H
#define DS_LIB_PIPELINE_PLANSEARCHIMPL_H

#include "ds/Pipeline/PlanSearch.h"
#include "ds/Support/Cluster.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

namespace mlir::ds::plan_search {

/// The search's errors: one line, for ds-opt to print.
inline llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// What the analytic bounds read of the model (at its imported batch).
struct ModelFacts {
  /// Trainable and all parameter elements; the forward FLOPs of one
  /// sample; the model's batch when the export fixes it (0: dynamic).
  int64_t trainable = 0, parameters = 0;
  double flopsPerSample = 0;
  int64_t fixedBatch = 0;
  /// The batch of the import the figures come from, and the elements of
  /// one sample of the first data input (a token model's sequence).
  int64_t importBatch = 1, sampleTokens = 1;
  /// Elements of the activations the backward pass needs kept at the
  /// import's batch, whatever the recompute choice, and without recompute
  /// (activationFacts).
  int64_t keptElements = 0, savedElements = 0;
  /// Per tensor-parallel degree and sequence parallelism: one rank's
  /// figures after the partition passes (partitionFacts). Absent: the
  /// whole model's divided by the degree.
  struct Split {
    int64_t trainable = 0, parameters = 0, kept = 0, saved = 0;
  };
  std::map<std::pair<int64_t, bool>, Split> splits;
};

/// Where a candidate got to.
enum class State {
  Pruned,      // the analytic lower bound exceeds the device memory
  Skipped,     // not compiled: a smaller micro-batch of its kind did not fit
  NotCompiled, // not compiled: the compile budget went to faster estimates
  Failed,      // the compiler refused the layout
  TooBig,      // compiled; its exact peak exceeds the device memory
  Fits,        // compiled, fits, predicted
};
const char *stateName(State s);

struct Candidate {
  // The layout.
  int64_t dp = 1, tp = 1, pp = 1;
  bool sp = false;
  int64_t zero = 0, micro = 1, accum = 1;
  std::string schedule = "1f1b"; // pp > 1: gpipe, 1f1b or interleaved:V
  // The memory choices the compile settled on.
  std::string recompute = "none";
  bool offload = false;
  /// ZeRO-3 with a host: the parameters on the host too (--offload-param).
  bool offloadParam = false;
  /// Where the offloaded optimizer state and parameters go: NVMe (a
  /// cluster with `host` and `nvme`) instead of host memory.
  bool nvme = false, paramNvme = false;
  /// The saved activations on the host (--offload-activations=cpu; a
  /// cluster with `host`, no pipeline).
  bool offloadActivations = false;
  /// Whether pass 2 compiled this layout with its activations on the host
  /// (the error when nothing fits says so, whichever placement was kept).
  bool activationsTried = false;
  int64_t bucket = 0; // 0: the default bucket sizes
  /// The winner's refinement: one kind of bucket of its own size
  /// (--reduce-bucket-size, --allgather-bucket-size,
  /// --prefetch-bucket-size; 0: `bucket`), and at ZeRO-3 the parameter
  /// persistence threshold (--param-persistence-threshold; 0: the
  /// default).
  int64_t reduceBucket = 0, gatherBucket = 0, prefetchBucket = 0;
  int64_t persistence = 0;
  /// With --overlap-comm: collectives in flight at once
  /// (--max-inflight-collectives; 0: the default).
  int64_t inFlight = 0;
  /// With --plan-compression=auto (PlanSearchCompression.cpp): "none",
  /// "1bit" (the compressed twin of the optimizer), "qwZ", "qgZ" or
  /// "qwZ+qgZ" (ZeRO++'s quantized collectives).
  std::string compression = "none";
  // The analytic figures: the memory bound that prunes (offload allowed
  // where the cluster has a host), and with the optimizer state on the
  // device under recompute full and none (they skip compiles).
  int64_t lowerBound = 0, boundDevice = 0, boundNone = 0;
  double estimate = 0;
  // The outcome.
  State state = State::NotCompiled;
  std::string why;
  int64_t peak = -1;
  /// Host bytes per rank (host storage and host arena) of an offloading
  /// plan; whether they are over the cluster's host memory per node.
  int64_t hostPeak = 0;
  bool hostTooBig = false;
  double step = 0, tokensPerSecond = 0, mfu = 0;
  std::string bottleneck;

  int64_t world() const { return dp * tp * pp; }
  /// Where the optimizer state and the parameters live: "device",
  /// "host" or "nvme".
  const char *optimizerAt() const {
    return !offload ? "device" : nvme ? "nvme" : "host";
  }
  const char *paramsAt() const {
    return !offloadParam ? "device" : paramNvme ? "nvme" : "host";
  }
  const char *activationsAt() const {
    return offloadActivations ? "host" : "device";
  }
  /// The model chunks per pipeline rank: V of interleaved:V, else 1.
  int64_t virtualStages() const;
  /// "dp2 tp1 pp1" (with " sp" for sequence parallelism): the colours of
  /// the plot and the rejected-family lines.
  std::string family() const;
  /// family() with the ZeRO stage, micro-batch x accumulation, schedule,
  /// recompute, offload and buckets.
  std::string layout() const;
};

/// The virtual stages (model chunks per pipeline rank) the search tries
/// for the interleaved schedule: 2 to this.
inline constexpr int64_t kMaxVirtualStages = 4;

/// Compiles past --plan-compiles for the winner's bucket sizes (one size,
/// then each kind of its own), persistence threshold and collectives in
/// flight.
inline constexpr int kTuneCompiles = 10;

/// The layouts the search may take: options the user gave explicitly
/// (--world-size, --tensor-parallel, --pipeline-parallel, --zero,
/// --sequence-parallel, --schedule) fix theirs.
struct SearchSpace {
  std::vector<int64_t> worlds, zeros;
  bool fixedTp = false, fixedPp = false, fixedSp = false, fixedSched = false;
};
SearchSpace searchSpace(const TrainingOptions &o, const ::ds::ClusterSpec &c);

/// Every candidate layout for `global` samples per step, with its lower
/// bound and estimate.
std::vector<Candidate> enumerate(const SearchSpace &space,
                                 const TrainingOptions &o,
                                 const ::ds::ClusterSpec &c,
                                 const ModelFacts &m, int64_t global);

/// An error when no layout of `space` takes `global` samples (a fixed
/// batch or world size it does not divide), with the nearest valid values.
llvm::Error checkGlobalBatch(const SearchSpace &space,
                             const TrainingOptions &o,
                             const ::ds::ClusterSpec &c, const ModelFacts &m,
                             int64_t global);

/// The parts of the memory lower bound (PlanSearchBound.cpp): resident
/// parameters and optimizer state (with gradient accumulators), then the
/// larger of the gradients held at once and the kept activations.
struct BoundParts {
  int64_t weights = 0, state = 0, gradients = 0, activations = 0;
  int64_t total() const {
    return weights + state + std::max(gradients, activations);
  }
};
/// With `noRecompute`, the activations are those recompute `none` keeps.
BoundParts boundParts(const Candidate &cand, const TrainingOptions &o,
                      const ModelFacts &m, bool noRecompute = false);
/// The device bytes no plan of `cand` goes below: boundParts' total.
int64_t memoryLowerBound(const Candidate &cand, const TrainingOptions &o,
                         const ModelFacts &m);
/// Lower bounds of the activation elements `@forward` keeps for the
/// backward pass: `kept` whatever the recompute choice (per segment
/// between cut values, as the recompute pass cuts, the smaller of its
/// input and its largest GEMM data operand with a trainable weight);
/// `saved` without recompute (every GEMM activation operand whose partner
/// needs a gradient).
struct ActivationFacts {
  int64_t kept = 0, saved = 0;
};
ActivationFacts activationFacts(ModuleOp model);
/// One rank's parameters and activation figures under `tp`-way tensor
/// parallelism (with `sp`, sequence parallelism): the partition passes
/// ds-opt runs, on a copy of `model`. Fails when they refuse the degree.
FailureOr<ModelFacts::Split> partitionFacts(ModuleOp model,
                                            const TrainingOptions &o,
                                            int64_t tp, bool sp);
/// A rough step time (compute at the device's peak, the gradient
/// collectives' ring time, the pipeline bubble) that only orders the
/// candidates for compiling.
double estimateStep(const Candidate &cand, const TrainingOptions &o,
                    const ::ds::ClusterSpec &c, const ModelFacts &m);

/// `o` with `cand`'s degrees, ZeRO stage, accumulation and schedule, not
/// searching (the start of each candidate's compile options; the memory
/// choices, buckets and compression are the caller's).
TrainingOptions layoutOptions(const TrainingOptions &o, const Candidate &cand);

/// The compression choices of --plan=auto for `cand`'s layout
/// (PlanSearchCompression.cpp): "none", then with --plan-compression=auto
/// on data-parallel layouts each of "1bit", "qwZ", "qgZ", "qwZ+qgZ" that
/// validateTrainingOptions accepts for the layout. Only "none" when the
/// options fix the compression (a compressed optimizer or a ZeRO++ flag).
std::vector<std::string> compressionChoices(const TrainingOptions &o,
                                            const Candidate &cand);
/// The options of compression `choice` on `o`.
void applyCompression(const std::string &choice, TrainingOptions &o);
/// The share of a candidate's data-parallel bytes its compression leaves
/// (1 for "none"), for estimateStep.
double compressionCommFactor(const Candidate &cand, const TrainingOptions &o);

/// The ranked table, the rejected families and (--explain) every
/// candidate.
std::string formatTable(const std::vector<Candidate> &all, int chosen,
                        const ::ds::ClusterSpec &c, bool explain,
                        const std::string &header);
/// plan.candidates[] (the compiled ones; every one with `all`) and the
/// search's figures as a JSON object.
std::string candidatesJson(const std::vector<Candidate> &all, int chosen,
                           int compiles, bool every);
/// The SVG of step time against peak memory.
std::string plotCandidates(const std::vector<Candidate> &all, int chosen,
                           const ::ds::ClusterSpec &c,
                           const std::string &title);
/// The error when nothing fits: the smallest peak per family and what
/// would fit.
std::string nothingFits(const std::vector<Candidate> &all,
                        const ::ds::ClusterSpec &c, const std::string &source,
                        const ModelFacts &m);

/// Where --offload-optimizer, --offload-param and --offload-activations
/// put their tensors when given (0 the device, 1 the host, 2 NVMe), -1
/// where not given.
std::array<int, 3> givenOffload(const TrainingOptions &o);
/// Sets `c`'s offload to `at` (optimizer, parameters, activations).
void placeOffload(Candidate &c, std::array<int, 3> at);
/// The offload placements (optimizer, parameters, activations; 0 the
/// device, 1 the host, 2 NVMe) a compiled candidate tries after the
/// recompute modes, in order, given values (-1: not given) holding; with
/// `activations`, the second pass's (the activations on the host).
std::vector<std::array<int, 3>>
offloadLadder(const Candidate &cand, const ::ds::ClusterSpec &cluster,
              std::array<int, 3> given, bool activations);

} // namespace mlir::ds::plan_search

#endif // DS_LIB_PIPELINE_PLANSEARCHIMPL_H
