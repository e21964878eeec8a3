//===- FreezeAuto.cpp - ds-run's freeze_step auto decision
//-----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The criterion is ds::freezeauto's (include/ds/Support/FreezeAuto.h,
// docs/compression.md). ||v|| is measured after each warm-up step from the
// executors' `*.exp_avg_sq` state: under ZeRO 1-3 each rank holds a
// partition (summed over the ranks), at ZeRO 0 every rank the whole (rank
// 0's is taken). The two partial sums of squares travel in one all-gather
// of 16 bytes per rank, outside the plan's collectives (not counted in the
// step's handed bytes), and every rank adds them in rank order: the same
// doubles, so the same decision on every rank.
//
//===----------------------------------------------------------------------===//

#include "FreezeAuto.h"
#include "TrainerImpl.h"
#include "ds/Support/FreezeAuto.h"

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
/// whole].
bool localSums(RunContext &ctx, double sums[2], std::string &err) {
  sums[0] = sums[1] = 0;
  for (Executor *e : ctx.allExecs())
    for (const Executor::Storage &st : e->storage()) {
      if (!st.state || !endsWith(st.name, ".exp_avg_sq"))
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

/// ||v|| over every rank, the same double on each.
bool globalNorm(RunContext &ctx, double &norm, std::string &err) {
  double mine[2];
  if (!localSums(ctx, mine, err))
    return false;
  Communicator &c = *ctx.sc;
  std::vector<double> all(2 * static_cast<size_t>(c.size()));
  if (c.size() == 1)
    all.assign(mine, mine + 2);
  else if (!c.allGather(mine, all.data(), 2, DType::I64, err)) // bit copies
    return false;
  double total = all[1]; // rank 0's whole tensors
  for (int r = 0; r < c.size(); ++r)
    total += all[2 * r];
  norm = std::sqrt(total);
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
  return true;
}

bool observeFreezeAuto(RunContext &ctx, FreezeAuto &fa, long long s,
                       bool progressBar) {
  if (!fa.active || fa.decided >= 0)
    return true;
  std::string err;
  double norm = 0;
  if (!globalNorm(ctx, norm, err))
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
