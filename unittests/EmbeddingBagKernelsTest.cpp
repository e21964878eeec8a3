//===- EmbeddingBagKernelsTest.cpp - EmbeddingBag kernels vs a reference --===//
//
// Part of the ds project. ds.embedding_bag (sum, sum with per-sample
// weights, mean, max; an empty bag and repeated rows) and its gradient on
// the CPU against a reference written from the definition in double.
// Tolerance: 1e-6 relative to the largest reference value (the kernel
// sums in f32 a bag of at most 7 rows; the gradient accumulates in
// double). Bounds that decrease and indices outside the table fail.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace ds::rt;
using ds::rt::test::view;

namespace {

constexpr int64_t V = 9, D = 6;
const std::vector<int64_t> kIdx = {1, 4, 4, 0, 8, 2, 4, 7, 7, 3, 5, 1, 6, 0};
const std::vector<int64_t> kBounds = {0, 3, 3, 4, 11, 14}; // bag 1 empty

bool run(const char *name, const std::string &mode, std::vector<TensorView> in,
         std::vector<TensorView> out, std::string *error = nullptr) {
  ds::plan::Instruction ins;
  auto *a = ins.add_attributes();
  a->set_name("mode");
  a->set_s(mode);
  const KernelInfo *k = findKernel(name);
  EXPECT_NE(k, nullptr) << name;
  KernelContext ctx{std::move(in), std::move(out), Attrs(&ins), 0, {}, NAN,
                    nullptr};
  bool ok = k->fn(ctx);
  if (error)
    *error = ctx.error;
  return ok;
}

/// The reference's element of the bags, or of the table's gradient.
struct Reference {
  std::vector<float> w, psw, dy;
  std::string mode;
  bool weighted;

  int64_t bags() const { return static_cast<int64_t>(kBounds.size()) - 1; }
  int64_t argmax(int64_t b, int64_t c) const {
    int64_t best = -1;
    for (int64_t j = kBounds[b]; j < kBounds[b + 1]; ++j)
      if (best < 0 || w[kIdx[j] * D + c] > w[kIdx[best] * D + c])
        best = j;
    return best;
  }
  std::vector<double> forward() const {
    std::vector<double> y(bags() * D, 0.0);
    for (int64_t b = 0; b < bags(); ++b)
      for (int64_t c = 0; c < D; ++c) {
        int64_t lo = kBounds[b], hi = kBounds[b + 1];
        if (hi == lo)
          continue;
        double s = 0;
        for (int64_t j = lo; j < hi; ++j)
          s += (weighted ? psw[j] : 1.0) * w[kIdx[j] * D + c];
        if (mode == "mean")
          s /= static_cast<double>(hi - lo);
        if (mode == "max")
          s = w[kIdx[argmax(b, c)] * D + c];
        y[b * D + c] = s;
      }
    return y;
  }
  std::vector<double> gradient() const {
    std::vector<double> g(V * D, 0.0);
    for (int64_t b = 0; b < bags(); ++b)
      for (int64_t c = 0; c < D; ++c) {
        int64_t lo = kBounds[b], hi = kBounds[b + 1];
        if (mode == "max") {
          if (hi > lo)
            g[kIdx[argmax(b, c)] * D + c] += dy[b * D + c];
          continue;
        }
        for (int64_t j = lo; j < hi; ++j)
          g[kIdx[j] * D + c] +=
              dy[b * D + c] * (mode == "mean" ? 1.0 / (hi - lo)
                                              : (weighted ? psw[j] : 1.0));
      }
    return g;
  }
};

double worstRel(const std::vector<float> &got, const std::vector<double> &want) {
  double top = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    top = std::max(top, std::fabs(want[i]));
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  return err / std::max(top, 1e-30);
}

/// n values uniform in [-1, 1).
std::vector<float> randoms(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  std::generate(v.begin(), v.end(), [&] { return d(gen); });
  return v;
}

} // namespace

TEST(EmbeddingBagKernels, MatchReference) {
  std::vector<int64_t> idx = kIdx, bounds = kBounds;
  int64_t n = static_cast<int64_t>(idx.size()), bags = Reference{}.bags();
  for (std::string mode : {"sum", "mean", "max", "weighted"}) {
    Reference r{randoms(V * D, 1), randoms(n, 2), randoms(bags * D, 3),
                mode == "weighted" ? "sum" : mode, mode == "weighted"};
    std::vector<TensorView> in = {view(r.w, {V, D}),
                                  view(idx.data(), DType::I64, {n}),
                                  view(bounds.data(), DType::I64, {bags + 1})};
    if (r.weighted)
      in.push_back(view(r.psw, {n}));
    std::vector<float> y(bags * D, -1.0f);
    ASSERT_TRUE(run("embedding_bag", r.mode, in, {view(y, {bags, D})}));
    EXPECT_LE(worstRel(y, r.forward()), 1e-6) << mode;
    for (int64_t c = 0; c < D; ++c)
      EXPECT_EQ(y[1 * D + c], 0.0f) << mode << ": the empty bag";
    std::vector<TensorView> gin = {view(r.dy, {bags, D}), in[1], in[2]};
    if (r.weighted)
      gin.push_back(in[3]);
    if (r.mode == "max")
      gin.push_back(in[0]);
    std::vector<float> g(V * D, -1.0f);
    ASSERT_TRUE(run("embedding_bag_grad", r.mode, gin, {view(g, {V, D})}));
    EXPECT_LE(worstRel(g, r.gradient()), 1e-6) << mode << " gradient";
  }
}

TEST(EmbeddingBagKernels, BadBoundsAndIndicesFail) {
  std::vector<float> w(V * D, 1.0f), y(2 * D);
  std::vector<int64_t> idx = {0, 1, 2, 3};
  // The kernel's message for 4 indices and these 3 bounds.
  auto error = [&](std::vector<int64_t> bounds) {
    std::string err;
    EXPECT_FALSE(run("embedding_bag", "sum",
                     {view(w, {V, D}), view(idx.data(), DType::I64, {4}),
                      view(bounds.data(), DType::I64, {3})},
                     {view(y, {2, D})}, &err));
    return err;
  };
  EXPECT_EQ(error({0, 3, 1}), "embedding_bag: offset 1 of bag 2 is below the "
                              "one before it or outside [0, 4] (the number "
                              "of indices)");
  idx[2] = V;
  EXPECT_EQ(error({0, 2, 4}), "embedding_bag: index 9 at position 2 is "
                              "outside the table's 9 rows");
}
