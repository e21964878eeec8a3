//===- ZeroOneTest.cpp - 0/1 Adam's policy and kernel ---------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The policy's closed form (ds::zeroone::countersBefore, which the plan's
// bytes use) against DeepSpeed's step-by-step rule (advance) over many
// policies, and the zero_one_adam kernel on one rank (the exchange is the
// identity there) against a naive transcription of zoadam.py's step, over
// every phase. On one rank the arithmetic is the same f32 operations, so the
// tolerance is 1e-6 relative (the reference evaluates the same expressions;
// only the compiler's contraction choices may differ).
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "ds/Support/OneBit.h"
#include "ds/Support/ZeroOne.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace ds::rt;
using ds::rt::test::view;
namespace zo = ds::zeroone;

namespace {

TEST(ZeroOne, ClosedFormMatchesDeepSpeedRule) {
  int policies = 0;
  for (int64_t freeze : {0, 1, 5, 20, 150})
    for (int64_t varScaler : {1, 2, 3, 16})
      for (int64_t localScaler : {1, 3, 4})
        for (int64_t clipper : {1, 3, 8, 16}) {
          zo::Policy p{freeze, varScaler, localScaler, clipper};
          zo::Counters c;
          for (int64_t t = 1; t <= 400; ++t) {
            zo::Counters closed = zo::countersBefore(t, p);
            ASSERT_TRUE(closed == c)
                << "step " << t << " policy " << freeze << "/" << varScaler
                << "/" << localScaler << "/" << clipper;
            zo::advance(c, t, p);
          }
          ++policies;
        }
  EXPECT_EQ(policies, 240);
}

/// The phases of DeepSpeed's defaults around the first doubling: 16
/// variance steps (t = 1..16, its counter 2..17), then every other step.
TEST(ZeroOne, DefaultPhases) {
  zo::Policy p;
  for (int64_t t = 1; t <= 16; ++t)
    EXPECT_EQ(zo::phaseAt(t, p), zo::Phase::Variance) << t;
  EXPECT_EQ(zo::phaseAt(17, p), zo::Phase::Variance);
  EXPECT_EQ(zo::phaseAt(18, p), zo::Phase::CompressedGradient);
  // Interval 2: the variance steps are those with t + 1 even; the first
  // frozen step (var_freeze_step + 1) synchronises (interval 1).
  p.varFreezeStep = 30;
  EXPECT_EQ(zo::phaseAt(29, p), zo::Phase::Variance);
  EXPECT_EQ(zo::phaseAt(30, p), zo::Phase::CompressedGradient);
  EXPECT_EQ(zo::phaseAt(31, p), zo::Phase::Sync);
  EXPECT_EQ(zo::firstFrozenStep(zo::Policy{0, 16, 1, 1}), 2);
}

void setInt(ds::plan::Instruction &ins, const char *name, int64_t v) {
  auto *a = ins.add_attributes();
  a->set_name(name);
  a->set_i(v);
}
void setFloat(ds::plan::Instruction &ins, const char *name, double v) {
  auto *a = ins.add_attributes();
  a->set_name(name);
  a->set_f(v);
}

/// zoadam.py's step for one parameter on one rank (no exchange).
struct Reference {
  std::vector<float> p, m, v, u;
  double lrs = 0;
  zo::Counters c;
  void step(int64_t t, const std::vector<float> &g, const zo::Policy &pol,
            float lr, float b1, float b2, float eps, float wd) {
    bool frozen = t >= zo::firstFrozenStep(pol);
    size_t n = p.size();
    if (!frozen) {
      bool var = (t + 1) % c.varInterval == 0;
      for (size_t i = 0; i < n; ++i) {
        m[i] = m[i] * b1 + g[i] * (1.0f - b1);
        if (var)
          v[i] = v[i] * b2 + (1.0f - b2) * g[i] * g[i];
      }
    } else {
      for (size_t i = 0; i < n; ++i)
        m[i] = m[i] * b1 + g[i] * (1.0f - b1);
      lrs += lr;
    }
    for (size_t i = 0; i < n; ++i) {
      float upd = m[i] / (std::sqrt(v[i]) + eps) + wd * p[i];
      p[i] = p[i] + (-lr) * upd;
      if (frozen)
        u[i] = u[i] + (-lr) * upd;
    }
    if (frozen && (t + 1) % c.localInterval == 0) {
      for (size_t i = 0; i < n; ++i) {
        p[i] = p[i] - u[i];
        u[i] = u[i] * (std::sqrt(v[i]) + eps);
        m[i] = -(u[i] / static_cast<float>(lrs));
        p[i] = p[i] + u[i] / (std::sqrt(v[i]) + eps);
        u[i] = 0.0f;
      }
      lrs = 0;
    }
    zo::advance(c, t, pol);
  }
};

TEST(ZeroOne, KernelMatchesReferenceOnOneRank) {
  const int64_t n = 13, padded = ds::onebit::paddedSize(n, 1);
  zo::Policy pol{12, 2, 2, 4};
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.99f, eps = 1e-8f, wd = 0.01f;
  ds::plan::Instruction ins;
  setFloat(ins, "lr", lr);
  setFloat(ins, "beta1", b1);
  setFloat(ins, "beta2", b2);
  setFloat(ins, "eps", eps);
  setFloat(ins, "weight_decay", wd);
  setInt(ins, "var_freeze_step", pol.varFreezeStep);
  setInt(ins, "var_update_scaler", pol.varUpdateScaler);
  setInt(ins, "local_step_scaler", pol.localStepScaler);
  setInt(ins, "local_step_clipper", pol.localStepClipper);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> p(n), m(n, 0), v(n, 0), u(n, 0), we(padded, 0),
      se(padded, 0), g(n);
  for (float &x : p)
    x = normal(rng);
  std::vector<int64_t> counters(5, 0);
  Reference ref{p, m, v, u, 0.0, {}};
  const KernelInfo *k = findKernel("zero_one_adam");
  ASSERT_NE(k, nullptr);
  for (int64_t t = 1; t <= 40; ++t) {
    for (float &x : g)
      x = normal(rng);
    int64_t step = t;
    std::vector<TensorView> in = {
        view(p, {n}), view(g, {n}), view(m, {n}), view(v, {n}),
        view(we, {padded}), view(se, {padded}), view(u, {n}),
        view(counters.data(), DType::I64, {5}),
        view(&step, DType::I64, {})};
    std::vector<TensorView> out = {in[0], in[2], in[3], in[4],
                                   in[5], in[6], in[7]};
    KernelContext ctx{in, out, Attrs(&ins), 0, {}, NAN, nullptr};
    ASSERT_TRUE(k->fn(ctx)) << ctx.error;
    ref.step(t, g, pol, lr, b1, b2, eps, wd);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], ref.p[i], 1e-6 * (1 + std::fabs(ref.p[i])))
          << "step " << t << " element " << i;
      ASSERT_NEAR(m[i], ref.m[i], 1e-6 * (1 + std::fabs(ref.m[i])));
      ASSERT_NEAR(u[i], ref.u[i], 1e-6 * (1 + std::fabs(ref.u[i])));
      ASSERT_NEAR(v[i], ref.v[i], 1e-6 * (1 + std::fabs(ref.v[i])));
    }
    ASSERT_EQ(counters[0], ref.c.varInterval) << t;
    ASSERT_EQ(counters[2], ref.c.localInterval) << t;
  }
  // Counters of another policy (a checkpoint's) are refused by name.
  counters[2] = 1;
  int64_t step = 41;
  std::vector<TensorView> in = {
      view(p, {n}), view(g, {n}), view(m, {n}), view(v, {n}),
      view(we, {padded}), view(se, {padded}), view(u, {n}),
      view(counters.data(), DType::I64, {5}), view(&step, DType::I64, {})};
  std::vector<TensorView> out = {in[0], in[2], in[3], in[4],
                                 in[5], in[6], in[7]};
  KernelContext ctx{in, out, Attrs(&ins), 0, {}, NAN, nullptr};
  EXPECT_FALSE(k->fn(ctx));
  EXPECT_NE(ctx.error.find("the state's counters"), std::string::npos)
      << ctx.error;
}

} // namespace
