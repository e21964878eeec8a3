//===- OneBitLambTest.cpp - 1-bit LAMB's kernel ---------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The onebit_lamb kernel on one rank (the exchange is the identity there,
// as DeepSpeed skips it on one rank) against a naive transcription of
// DeepSpeed's OnebitLamb.step (deepspeed/runtime/fp16/onebit/lamb.py) over
// the warm-up and the compression stage: the trust ratios' running
// average, the fresh variance from the reconstructed gradient, the factor
// with weight decay's share, its bounds and its threshold. The reference
// keeps DeepSpeed's Python floats (double) for the coefficients, the kernel
// keeps them as f32 state: 1e-5 relative on the parameters and 1e-6 on the
// coefficients.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "ds/Support/OneBit.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace ds::rt;
using ds::rt::test::view;

namespace {

struct Hyper {
  float lr, b1, b2, eps, wd;
  double maxCoeff, minCoeff, coeffBeta, factorMax, factorMin, threshold;
  int64_t freeze;
};

double norm(const std::vector<float> &x) {
  double s = 0;
  for (float e : x)
    s += double(e) * e;
  return std::sqrt(s);
}

/// lamb.py's step for one parameter on one rank, t counted from 1 (ds does
/// not spend a first step on initialisation, as DeepSpeed does).
struct Reference {
  std::vector<float> p, m, v, vFresh;
  double coeffFreeze = 0, lastFactor = 1;
  void step(int64_t t, const std::vector<float> &g, const Hyper &h) {
    size_t n = p.size();
    std::vector<float> update(n), prelim(n);
    if (t <= h.freeze) {
      for (size_t i = 0; i < n; ++i) {
        m[i] = m[i] * h.b1 + (1 - h.b1) * g[i];
        v[i] = v[i] * h.b2 + (1 - h.b2) * g[i] * g[i];
      }
      if (t == h.freeze)
        vFresh = v;
      for (size_t i = 0; i < n; ++i)
        update[i] = m[i] / (std::sqrt(v[i]) + h.eps) + h.wd * p[i];
      double c = 1.0, pn = norm(p), un = norm(update);
      if (pn != 0 && un != 0)
        c = std::min(std::max(pn / un, h.minCoeff), h.maxCoeff);
      if (c != 1.0)
        coeffFreeze = h.coeffBeta * coeffFreeze + (1 - h.coeffBeta) * c;
      for (size_t i = 0; i < n; ++i)
        p[i] += static_cast<float>(-h.lr * c) * update[i];
      return;
    }
    std::vector<float> last = m;
    for (size_t i = 0; i < n; ++i)
      m[i] = m[i] * h.b1 + (1 - h.b1) * g[i];
    double factor = 0;
    for (size_t i = 0; i < n; ++i) {
      float gr = (m[i] - last[i] * h.b1) / (1 - h.b1);
      vFresh[i] = vFresh[i] * h.b2 + (1 - h.b2) * gr * gr;
      float denom = std::sqrt(v[i]) + h.eps;
      prelim[i] = m[i] / denom;
      update[i] = h.wd > 0 ? prelim[i] + h.wd * p[i] : prelim[i];
      factor = std::max(factor,
                        double(denom / (std::sqrt(vFresh[i]) + h.eps)));
    }
    if (h.wd > 0) {
      double ratio = std::min(1.0, norm(prelim) / norm(update));
      factor = factor * ratio + (1.0 - ratio);
    }
    factor = std::min(std::max(factor, h.factorMin), h.factorMax);
    factor = std::min(factor, lastFactor * (1.0 + h.threshold));
    factor = std::max(factor, lastFactor * (1.0 - h.threshold));
    lastFactor = factor;
    double c = coeffFreeze * factor;
    for (size_t i = 0; i < n; ++i)
      p[i] += static_cast<float>(-h.lr * c) * update[i];
  }
};

void setAttr(ds::plan::Instruction &ins, const char *name, double v,
             bool isInt = false) {
  auto *a = ins.add_attributes();
  a->set_name(name);
  if (isInt)
    a->set_i(static_cast<int64_t>(v));
  else
    a->set_f(v);
}

/// `local`: the ZeRO 1-3 form of the kernel (7 operands) on one rank's
/// partition of 32 elements of which the tensor's 29 are valid (the rest
/// padding, which must stay 0 and take no part in the factor's maximum);
/// on one rank its exchanged gradient is the gradient itself.
void runAgainstReference(const Hyper &h, int64_t steps, bool local = false) {
  const int64_t n = 29, padded = ds::onebit::paddedSize(n, 1);
  const int64_t len = local ? 32 : n;
  ds::plan::Instruction ins;
  setAttr(ins, "lr", h.lr);
  setAttr(ins, "beta1", h.b1);
  setAttr(ins, "beta2", h.b2);
  setAttr(ins, "eps", h.eps);
  setAttr(ins, "weight_decay", h.wd);
  setAttr(ins, "max_coeff", h.maxCoeff);
  setAttr(ins, "min_coeff", h.minCoeff);
  setAttr(ins, "coeff_beta", h.coeffBeta);
  setAttr(ins, "factor_max", h.factorMax);
  setAttr(ins, "factor_min", h.factorMin);
  setAttr(ins, "factor_threshold", h.threshold);
  setAttr(ins, "freeze_step", static_cast<double>(h.freeze), true);
  if (local)
    setAttr(ins, "valid", static_cast<double>(n), true);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> p(len, 0), m(len, 0), v(len, 0), vf(len, 0),
      we(padded, 0), se(padded, 0), coeffs(2, 0), g(len, 0);
  for (int64_t i = 0; i < n; ++i)
    p[i] = normal(rng);
  std::vector<float> p0(p.begin(), p.begin() + n), z(n, 0);
  Reference ref{p0, z, z, z};
  const KernelInfo *k = findKernel("onebit_lamb");
  ASSERT_NE(k, nullptr);
  for (int64_t t = 1; t <= steps; ++t) {
    // Gradients whose scale drifts, so that the fresh variance departs
    // from the frozen one and the factor's bounds and threshold act.
    float scale = t <= h.freeze ? 1.0f : 0.3f + 0.1f * float(t % 7);
    for (int64_t i = 0; i < n; ++i)
      g[i] = scale * normal(rng);
    std::vector<float> g0(g.begin(), g.begin() + n);
    int64_t step = t;
    if (local) {
      std::vector<TensorView> in = {
          view(p, {len}),  view(g, {len}),      view(m, {len}),
          view(v, {len}),  view(vf, {len}),     view(coeffs, {2}),
          view(&step, DType::I64, {})};
      std::vector<TensorView> out = {in[0], in[2], in[3], in[4], in[5]};
      KernelContext ctx{in, out, Attrs(&ins), 0, {}, NAN, nullptr};
      ASSERT_TRUE(k->fn(ctx)) << ctx.error;
      for (int64_t i = n; i < len; ++i)
        ASSERT_TRUE(p[i] == 0 && m[i] == 0 && v[i] == 0 && vf[i] == 0)
            << "padding element " << i << " at step " << t;
    }
    std::vector<TensorView> in = {
        view(p, {n}),       view(g, {n}),        view(m, {n}),
        view(v, {n}),       view(vf, {n}),       view(we, {padded}),
        view(se, {padded}), view(coeffs, {2}),   view(&step, DType::I64, {})};
    std::vector<TensorView> out = {in[0], in[2], in[3], in[4],
                                   in[5], in[6], in[7]};
    KernelContext ctx{in, out, Attrs(&ins), 0, {}, NAN, nullptr};
    if (!local)
      ASSERT_TRUE(k->fn(ctx)) << ctx.error;
    ref.step(t, g0, h);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], ref.p[i], 1e-5 * (1 + std::fabs(ref.p[i])))
          << "step " << t << " element " << i;
      ASSERT_NEAR(m[i], ref.m[i], 1e-6 * (1 + std::fabs(ref.m[i])));
      ASSERT_NEAR(v[i], ref.v[i], 1e-6 * (1 + std::fabs(ref.v[i])));
      if (t > h.freeze) // DeepSpeed copies v at step freeze, ds at freeze + 1
        ASSERT_NEAR(vf[i], ref.vFresh[i], 1e-6 * (1 + ref.vFresh[i]))
            << "step " << t;
    }
    ASSERT_NEAR(coeffs[0], ref.coeffFreeze, 1e-6 * ref.coeffFreeze) << t;
    if (t > h.freeze)
      ASSERT_NEAR(coeffs[1], ref.lastFactor, 1e-6 * ref.lastFactor) << t;
  }
  // The frozen coefficient is a real average of the warm-up's ratios.
  EXPECT_GT(coeffs[0], 0.0f);
}

TEST(OneBitLamb, KernelMatchesReferenceOnOneRank) {
  runAgainstReference({1e-2f, 0.9f, 0.99f, 1e-8f, 0.0f, 10.0, 0.01, 0.9, 4.0,
                       0.5, 0.1, 8},
                      30);
}

TEST(OneBitLamb, WeightDecayAndTightBounds) {
  // DeepSpeedExamples' bing_bert values (max_coeff 0.3, weight decay
  // 0.01) and a factor range the drifting gradients leave.
  runAgainstReference({1e-2f, 0.9f, 0.999f, 1e-6f, 0.01f, 0.3, 0.01, 0.8,
                       1.5, 0.9, 0.05, 5},
                      25);
}

TEST(OneBitLamb, ZeroPartitionKernelMatchesReferenceOnOneRank) {
  runAgainstReference({1e-2f, 0.9f, 0.99f, 1e-8f, 0.0f, 10.0, 0.01, 0.9, 4.0,
                       0.5, 0.1, 8},
                      30, /*local=*/true);
  runAgainstReference({1e-2f, 0.9f, 0.999f, 1e-6f, 0.01f, 0.3, 0.01, 0.8,
                       1.5, 0.9, 0.05, 5},
                      25, /*local=*/true);
}

} // namespace
