//===- FreezeAuto.cpp - ds-run's freeze_step auto decision ----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The criterion is ds::freezeauto's (include/ds/Support/FreezeAuto.h,
// docs/compression.md). ||v|| is measured after each warm-up step from the
// executors' `*.exp_avg_sq` state (1-bit Adam's and 1-bit LAMB's; not
// LAMB's `exp_avg_sq_fresh`): under ZeRO 1-3 each rank holds a partition
// (summed over the ranks), at ZeRO 0 every rank of a data-parallel group
// the whole (the group's first rank's is taken). With pipelines each
// stage holds its own tensors, a tied parameter's counted on the first
// chunk holding it only, so the sum is the whole model's, as without
// pipelines. The two partial sums of squares travel in one all-gather over
// the world (16 bytes per rank), outside the plan's collectives (not
// counted in the step's handed bytes), and every rank adds them in world
// rank order: the same doubles, so the same decision on every rank of
// every stage at the same optimizer step.
//
//===----------------------------------------------------------------------===//

#include "FreezeAuto.h"
#include "PlanImpl.h"
#include "TrainerImpl.h"
#include "ds/Support/FreezeAuto.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ds::rt {

namespace fz = ::ds::freezeauto;

namespace {
bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/// This rank's sums of squares of the second moments: [partitioned,
/// whole], without the tied copies another chunk counts.
bool localSums(RunContext &ctx, const FreezeAuto &fa, double sums[2],
               std::string &err) {
  sums[0] = sums[1] = 0;
  std::vector<Executor *> execs = ctx.allExecs();
  for (size_t k = 0; k < execs.size(); ++k)
    for (const Executor::Storage &st : execs[k]->storage()) {
      if (!st.state || !endsWith(st.name, ".exp_avg_sq"))
        continue;
      if (k < fa.skip.size() && fa.skip[k].count(st.name))
        continue;
      if (st.dtype != DType::F32 || !st.data) {
        err = "freeze_step auto: '" + st.name + "' is not f32 host memory";
        return false;
      }
      const float *v = static_cast<const float *>(st.data);
      double s = 0;
      for (uint64_t i = 0; i < st.bytes / 4; ++i)
        s += static_cast<double>(v[i]) * v[i];
      sums[st.sharded ? 0 : 1] += s;
    }
  return true;
}

/// ||v|| over every rank of every stage, the same double on each: in
/// world rank order, a data-parallel group's first rank's whole tensors,
/// then each rank's partitions (without pipelines: rank 0's whole, then
/// the partitions in rank order).
bool globalNorm(RunContext &ctx, const FreezeAuto &fa, double &norm,
                std::string &err) {
  double mine[2];
  if (!localSums(ctx, fa, mine, err))
    return false;
  Communicator &c = ctx.world;
  std::vector<double> all(2 * static_cast<size_t>(c.size()));
  if (c.size() == 1)
    all.assign(mine, mine + 2);
  else if (!c.allGather(mine, all.data(), 2, DType::I64, err)) // bit copies
    return false;
  int group = ctx.stages > 1 ? ctx.stageRanks : c.size();
  double total = 0;
  for (int r = 0; r < c.size(); ++r) {
    if (r % group == 0)
      total += all[2 * r + 1];
    total += all[2 * r];
  }
  norm = std::sqrt(total);
  return true;
}

/// Pipelines: per model chunk of this rank, the `exp_avg_sq` of tied
/// parameters that a lower chunk holds too (counted there).
bool tiedCopies(RunContext &ctx, FreezeAuto &fa) {
  fa.skip.assign(ctx.execs.size(), {});
  if (ctx.stages <= 1 || !ctx.pipelinePlan)
    return true;
  // The first chunk holding each tied parameter (each chunk's plan read
  // once).
  const auto &tied = ctx.pipelinePlan->proto.pipeline().tied();
  std::map<std::string, int> first;
  int chunks = ctx.stages * ctx.virt;
  for (int c = 0; c < chunks && first.size() < size_t(tied.size()); ++c) {
    std::string err;
    std::shared_ptr<const Plan> sp = stagePlan(*ctx.pipelinePlan, c, err);
    if (!sp)
      return ctx.fail(err);
    for (const plan::Parameter &p : sp->proto.parameters())
      if (std::find(tied.begin(), tied.end(), p.name()) != tied.end())
        first.emplace(p.name(), c);
  }
  for (const std::string &t : tied) {
    auto it = first.find(t);
    int holder = it == first.end() ? -1 : it->second;
    for (size_t k = 0; k < ctx.execs.size(); ++k)
      if (ctx.stage + static_cast<int>(k) * ctx.stages != holder)
        fa.skip[k].insert(t + ".exp_avg_sq");
  }
  return true;
}

std::string hexDouble(double d) {
  char b[40];
  std::snprintf(b, sizeof b, "%a", d);
  return b;
}
} // namespace

bool startFreezeAuto(RunContext &ctx, FreezeAuto &fa) {
  fa.active = ctx.planned.freezeAuto;
  if (!fa.active)
    return true;
  if (ctx.execOptions.backend != "cpu")
    return ctx.fail("freeze_step auto runs on CPU ranks only (backend '" +
                    ctx.execOptions.backend + "')");
  for (Executor *e : ctx.allExecs())
    e->setFreezeStep(-1);
  return tiedCopies(ctx, fa);
}

bool observeFreezeAuto(RunContext &ctx, FreezeAuto &fa, long long s,
                       bool progressBar) {
  if (!fa.active || fa.decided >= 0)
    return true;
  std::string err;
  double norm = 0;
  if (!globalNorm(ctx, fa, norm, err))
    return ctx.fail(err);
  fa.norms.push_back(norm);
  if (fa.norms.size() > static_cast<size_t>(fz::kWindow + 1))
    fa.norms.erase(fa.norms.begin());
  fa.lastNorm = norm;
  fa.measuredAt = s;
  fa.lastChange = fz::relativeChange(fa.norms);
  if (!fz::freezesAfter(s, fa.lastChange))
    return true;
  fa.decided = s;
  ctx.planned.freezeStep = s; // the bytes each later step hands
  for (Executor *e : ctx.allExecs())
    e->setFreezeStep(s);
  if (ctx.lead)
    std::printf("%sfreeze_step auto: the variance is frozen after step %lld "
                "(||v|| %.6g, its relative change over the last %lld steps "
                "%.4g%s %g)\n",
                progressBar ? "\n" : "", s, norm,
                static_cast<long long>(fz::kWindow), fa.lastChange,
                fa.lastChange < fz::kThreshold ? " <"
                                               : ", the latest step; "
                                                 "threshold",
                fz::kThreshold);
  return true;
}

void freezeAutoState(const FreezeAuto &fa,
                     std::map<std::string, std::string> &state) {
  if (!fa.active)
    return;
  state["freeze_auto_step"] = std::to_string(fa.decided);
  std::string norms;
  for (double d : fa.norms)
    norms += (norms.empty() ? "" : ",") + hexDouble(d);
  state["freeze_auto_norms"] = norms.empty() ? "-" : norms;
}

bool restoreFreezeAuto(RunContext &ctx, FreezeAuto &fa,
                       const std::map<std::string, std::string> &state,
                       std::string &err) {
  if (!fa.active)
    return true;
  auto step = state.find("freeze_auto_step");
  auto norms = state.find("freeze_auto_norms");
  if (step == state.end() || norms == state.end()) {
    err = "the checkpoint has no freeze_step auto state (saved by a run with "
          "a fixed freeze step)";
    return false;
  }
  fa.decided = std::strtoll(step->second.c_str(), nullptr, 10);
  fa.norms.clear();
  const char *p = norms->second.c_str();
  while (*p && *p != '-') {
    char *end = nullptr;
    fa.norms.push_back(std::strtod(p, &end));
    if (end == p || fa.norms.size() > static_cast<size_t>(fz::kWindow + 1)) {
      err = "bad freeze_auto_norms '" + norms->second + "' in the checkpoint";
      return false;
    }
    p = *end == ',' ? end + 1 : end;
  }
  if (fa.decided >= 0)
    ctx.planned.freezeStep = fa.decided;
  for (Executor *e : ctx.allExecs())
    e->setFreezeStep(fa.decided);
  return true;
}

} // namespace ds::rt
