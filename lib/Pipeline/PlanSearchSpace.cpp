//===- PlanSearchSpace.cpp - the candidates of --plan=auto ----------------===//
//
// Part of the ds project.
//
// Enumerates the layouts of a --plan=auto search (data x tensor x pipeline
// x sequence parallel degrees, ZeRO stage, micro-batch and accumulation,
// pipeline schedule) and gives each an analytic memory lower bound, which
// prunes it before any compile, and a rough step estimate, which orders
// the compiles (docs/planner.md, "--plan=auto").
//
//===----------------------------------------------------------------------===//

#include "PlanSearchImpl.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::plan_search;

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

/// The (dp, tp, pp) degrees of `space`'s worlds (TP inside a node).
std::vector<std::array<int64_t, 3>> degrees(const SearchSpace &space,
                                            const TrainingOptions &o,
                                            const ::ds::ClusterSpec &c) {
  std::vector<std::array<int64_t, 3>> out;
  for (int64_t w : space.worlds)
    for (int64_t tp : divisors(w)) {
      if (space.fixedTp ? tp != o.tensorParallel : c.devicesPerNode % tp != 0)
        continue;
      for (int64_t pp : divisors(w / tp))
        if (!space.fixedPp || pp == o.pipelineParallel)
          out.push_back({w / (tp * pp), tp, pp});
    }
  return out;
}

/// Bytes per element of the 16- or 32-bit weights.
int64_t weightBytes(const TrainingOptions &o) {
  return o.precision == "fp32" ? 4 : 2;
}
} // namespace

const char *plan_search::stateName(State s) {
  switch (s) {
  case State::Pruned:
    return "pruned";
  case State::Skipped:
    return "skipped";
  case State::NotCompiled:
    return "not compiled";
  case State::Failed:
    return "failed";
  case State::TooBig:
    return "too big";
  case State::Fits:
    return "fits";
  }
  return "?";
}

std::string Candidate::family() const {
  return "dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " pp" +
         std::to_string(pp) + (sp ? " sp" : "");
}

int64_t Candidate::virtualStages() const {
  llvm::StringRef s(schedule);
  int64_t v = 1;
  if (s.consume_front("interleaved:") && !s.getAsInteger(10, v) && v >= 1)
    return v;
  return 1;
}

std::string Candidate::layout() const {
  std::string s = family() + " zero" + std::to_string(zero) + " mb" +
                  std::to_string(micro) + "x" + std::to_string(accum);
  if (pp > 1)
    s += " " + schedule;
  if (state == State::Fits || state == State::TooBig) {
    s += " rc=" + recompute;
    if (offload)
      s += nvme ? " offload=nvme" : " offload";
    if (offloadParam)
      s += paramNvme ? " offload-param=nvme" : " offload-param";
    if (offloadActivations)
      s += " offload-act";
  }
  if (bucket > 0)
    s += " bucket=" + std::to_string(bucket);
  for (auto [name, size] :
       {std::pair<const char *, int64_t>{"reduce", reduceBucket},
        {"allgather", gatherBucket},
        {"prefetch", prefetchBucket},
        {"persist", persistence}})
    if (size > 0)
      s += std::string(" ") + name + "=" + std::to_string(size);
  if (inFlight > 0)
    s += " inflight=" + std::to_string(inFlight);
  if (compression != "none")
    s += " compress=" + compression;
  return s;
}

SearchSpace plan_search::searchSpace(const TrainingOptions &o,
                                     const ::ds::ClusterSpec &c) {
  SearchSpace s;
  if (o.isGiven("world-size"))
    s.worlds = {o.worldSize};
  else
    s.worlds = divisors(c.devices());
  if (o.isGiven("zero"))
    s.zeros = {o.zeroStage};
  else if (o.optimizerName == "zero-one-adam")
    s.zeros = {0}; // its ZeRO 1-3 step is ZeRO-0's (builtZeroStage)
  else
    s.zeros = {0, 1, 2, 3};
  s.fixedTp = o.isGiven("tensor-parallel");
  s.fixedPp = o.isGiven("pipeline-parallel");
  s.fixedSp = o.isGiven("sequence-parallel");
  s.fixedSched = o.isGiven("schedule");
  return s;
}

std::vector<Candidate> plan_search::enumerate(const SearchSpace &space,
                                              const TrainingOptions &o,
                                              const ::ds::ClusterSpec &c,
                                              const ModelFacts &m,
                                              int64_t global) {
  std::vector<Candidate> out;
  for (auto [dp, tp, pp] : degrees(space, o, c)) {
    if (global % dp)
      continue;
    int64_t perDp = global / dp;
    std::vector<int64_t> micros = divisors(perDp);
    if (m.fixedBatch)
      micros = perDp % m.fixedBatch ? std::vector<int64_t>{}
                                    : std::vector<int64_t>{m.fixedBatch};
    std::vector<bool> sps{false};
    if (tp > 1)
      sps = space.fixedSp ? std::vector<bool>{o.sequenceParallel}
                          : std::vector<bool>{false, true};
    std::vector<int64_t> zeros = space.zeros;
    if (dp == 1 && space.zeros.size() > 1)
      zeros = {0};
    for (int64_t micro : micros) {
      int64_t accum = perDp / micro;
      if (o.precision == "fp16" && accum > 1)
        continue; // fp16's loss scaler takes no accumulation yet
      std::vector<std::string> schedules{"1f1b"};
      if (pp > 1 && space.fixedSched)
        schedules = {o.pipeSchedule};
      else if (pp > 1) {
        schedules.push_back("gpipe");
        // Interleaved 1F1B with V model chunks per rank (M a multiple of
        // P); more chunks than the model's cut points allow fail to
        // compile and are skipped once a pipeline compile has found them.
        if (accum % pp == 0)
          for (int64_t v = 2; v <= kMaxVirtualStages; ++v)
            schedules.push_back("interleaved:" + std::to_string(v));
      }
      for (const std::string &sched : schedules)
        for (bool sp : sps)
          for (int64_t zero : zeros) {
            Candidate cand;
            cand.dp = dp, cand.tp = tp, cand.pp = pp, cand.sp = sp;
            cand.zero = zero, cand.micro = micro, cand.accum = accum;
            cand.schedule = sched;
            // The bound allows for offload when the cluster has a host.
            cand.offload = c.host.present;
            cand.offloadActivations = c.host.present && pp == 1;
            cand.lowerBound = memoryLowerBound(cand, o, m);
            cand.offload = cand.offloadActivations = false;
            cand.boundDevice = memoryLowerBound(cand, o, m);
            cand.boundNone = boundParts(cand, o, m, true).total();
            cand.estimate = estimateStep(cand, o, c, m);
            for (const std::string &comp : compressionChoices(o, cand)) {
              out.push_back(cand);
              out.back().compression = comp;
              out.back().estimate = estimateStep(out.back(), o, c, m);
            }
          }
    }
  }
  return out;
}

llvm::Error plan_search::checkGlobalBatch(const SearchSpace &space,
                                          const TrainingOptions &o,
                                          const ::ds::ClusterSpec &c,
                                          const ModelFacts &m, int64_t global) {
  std::set<int64_t> dps;
  for (auto d : degrees(space, o, c))
    dps.insert(d[0] * std::max<int64_t>(1, m.fixedBatch));
  auto valid = [&](int64_t g) {
    return g > 0 && llvm::any_of(dps, [&](int64_t d) { return g % d == 0; });
  };
  if (valid(global))
    return llvm::Error::success();
  int64_t below = global - 1, above = global + 1;
  while (below > 0 && !valid(below))
    --below;
  while (!dps.empty() && !valid(above) && above < global + 1000000)
    ++above;
  std::string why =
      m.fixedBatch ? "the model's fixed batch " + std::to_string(m.fixedBatch) +
                         " times a data-parallel degree"
                   : std::string("a data-parallel degree of the layouts "
                                 "searched");
  std::string nearest = below > 0 ? std::to_string(below) + " or " : "";
  return fail("--global-batch=" + llvm::Twine(global) + " is not a multiple of " +
              why + "; the nearest valid values are " + nearest +
              llvm::Twine(above));
}

double plan_search::estimateStep(const Candidate &cand,
                                 const TrainingOptions &o,
                                 const ::ds::ClusterSpec &c,
                                 const ModelFacts &m) {
  ::ds::Precision p = ::ds::Precision::FP32;
  ::ds::parsePrecision(o.precision, p);
  double peak = std::max(1.0, ::ds::gemmRate(c, p));
  double samples = double(cand.micro * cand.accum);
  double compute =
      3 * m.flopsPerSample * samples / double(cand.tp * cand.pp) / peak;
  if (cand.pp > 1) {
    double v = double(cand.virtualStages());
    double bubble = double(cand.pp - 1) / (v * cand.accum + cand.pp - 1);
    compute /= 1 - bubble;
  }
  // Each accumulation step runs smaller kernels: a small penalty, so that
  // of equal layouts the larger micro-batch is compiled first.
  compute *= 1 + 0.01 * double(cand.accum - 1);
  double comm = 0;
  if (cand.dp > 1) {
    bool across = cand.dp * cand.tp > c.devicesPerNode;
    const ::ds::AlphaBeta &link = across ? c.interNode : c.intraNode;
    double bytes =
        double(m.trainable) / double(cand.tp * cand.pp) * weightBytes(o);
    double n = double(cand.dp);
    comm = 2 * (n - 1) / n * bytes / std::max(1.0, link.bandwidth) +
           2 * (n - 1) * link.latency;
    if (cand.zero == 3)
      comm *= 1.5;
    if (cand.zero >= 2)
      comm *= double(cand.accum);
    comm *= compressionCommFactor(cand, o);
  }
  // Tensor parallelism (Megatron): four all-reduces of the hidden state per
  // layer and token, forward and backward. A transformer of P parameters
  // with width h ~ 64 layers has P ~ 12 L h^2, so h ~ cbrt(16 P / 3), and
  // 4 L h bytes-per-element per token ~ P / (3 h).
  double tpComm = 0;
  if (cand.tp > 1) {
    double p = double(std::max<int64_t>(1, m.parameters));
    double h = std::cbrt(16 * p / 3), layers = std::max(1.0, h / 64);
    double tokens = samples * double(m.sampleTokens) / double(cand.pp);
    double n = double(cand.tp);
    tpComm = tokens * p / (3 * h) * weightBytes(o) * 2 * (n - 1) / n /
                 std::max(1.0, c.intraNode.bandwidth) +
             8 * layers / double(cand.pp) * double(cand.accum) * (n - 1) *
                 c.intraNode.latency;
  }
  // Gradient reduction overlaps the backward pass in part.
  return compute + tpComm + (o.overlapComm ? 0.5 : 1.0) * comm;
}
