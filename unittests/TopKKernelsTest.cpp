//===- TopKKernelsTest.cpp - the TopK kernels against a naive reference ---===//
//
// Part of the ds project. ds.topk (largest and smallest, first, middle and
// last axis, ties and NaN) and ds.topk_grad on the CPU against a reference
// written from the definition: the k-th output is the element with exactly
// k elements before it in the order "larger first (smaller with largest =
// 0), NaN larger than any number, lower index first among equals", found
// by counting, not by sorting. Exact: both select the same elements, and
// the gradient adds one value per position.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>

using namespace ds::rt;

namespace {

using ds::rt::test::view;

struct TopKCase {
  std::vector<int64_t> shape;
  int64_t axis, k;
  bool largest;
};

int64_t count(const std::vector<int64_t> &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

/// Whether a comes before b (written out, not Support/TopK.h's helper).
bool before(float a, int64_t ia, float b, int64_t ib, bool largest) {
  if (std::isnan(a) && std::isnan(b))
    return ia < ib;
  if (std::isnan(a))
    return largest;
  if (std::isnan(b))
    return !largest;
  if (a == b)
    return ia < ib;
  return largest ? a > b : a < b;
}

void run(const char *name, const TopKCase &c, std::vector<TensorView> in,
         std::vector<TensorView> out) {
  ds::plan::Instruction ins;
  for (auto [key, value] : {std::pair<const char *, int64_t>{"axis", c.axis},
                            {"k", c.k}, {"largest", c.largest}}) {
    auto *a = ins.add_attributes();
    a->set_name(key);
    a->set_i(value);
  }
  const KernelInfo *k = findKernel(name);
  ASSERT_NE(k, nullptr) << name;
  KernelContext ctx{std::move(in), std::move(out), Attrs(&ins), 0, {}, NAN,
                    nullptr};
  ASSERT_TRUE(k->fn(ctx)) << name << ": " << ctx.error;
}

TEST(TopKKernels, MatchCountingReference) {
  const TopKCase cases[] = {
      {{5, 9}, 1, 3, true},    {{5, 9}, 1, 9, false},
      {{7, 4, 3}, 0, 2, true}, {{2, 11, 3}, 1, 4, false},
      {{3, 2, 6}, 2, 1, true}, {{1, 40}, 1, 40, true},
  };
  uint32_t seed = 7;
  for (const TopKCase &c : cases) {
    std::mt19937 gen(seed++);
    std::normal_distribution<float> d;
    std::vector<float> x(count(c.shape));
    for (float &v : x)
      v = std::round(d(gen) * 2) / 2; // many ties
    x[1] = NAN;
    int64_t n = c.shape[c.axis], inner = 1;
    for (size_t a = c.axis + 1; a < c.shape.size(); ++a)
      inner *= c.shape[a];
    std::vector<int64_t> outShape = c.shape;
    outShape[c.axis] = c.k;
    std::vector<float> values(count(outShape)), dy(values.size());
    std::vector<int64_t> indices(values.size());
    for (float &v : dy)
      v = d(gen);
    run("topk", c,
        {view(x.data(), DType::F32, c.shape)},
        {view(values.data(), DType::F32, outShape),
         view(indices.data(), DType::I64, outShape)});
    std::vector<float> dx(x.size(), -1.0f), refDx(x.size(), 0.0f);
    run("topk_grad", c,
        {view(dy.data(), DType::F32, outShape),
         view(indices.data(), DType::I64, outShape)},
        {view(dx.data(), DType::F32, c.shape)});
    for (int64_t r = 0; r < count(c.shape) / n; ++r) {
      int64_t o = r / inner, i = r % inner;
      auto at = [&](int64_t j, int64_t len) { return (o * len + j) * inner + i; };
      for (int64_t p = 0; p < n; ++p) {
        int64_t rank = 0;
        for (int64_t q = 0; q < n; ++q)
          rank += q != p && before(x[at(q, n)], q, x[at(p, n)], p, c.largest);
        if (rank >= c.k)
          continue;
        int64_t out = at(rank, c.k);
        EXPECT_EQ(indices[out], p) << "row " << r << " rank " << rank;
        float v = values[out];
        EXPECT_TRUE(v == x[at(p, n)] || (std::isnan(v) && std::isnan(x[at(p, n)])));
        refDx[at(p, n)] = dy[out];
      }
    }
    for (size_t e = 0; e < dx.size(); ++e)
      EXPECT_EQ(dx[e], refDx[e]) << "topk_grad element " << e;
  }
}

TEST(TopKKernels, GradRefusesIndexOutOfRange) {
  std::vector<float> dy = {1, 2}, dx(6);
  std::vector<int64_t> idx = {0, 3};
  ds::plan::Instruction ins;
  auto *a = ins.add_attributes();
  a->set_name("axis");
  a->set_i(1);
  const KernelInfo *k = findKernel("topk_grad");
  ASSERT_NE(k, nullptr);
  KernelContext ctx{{view(dy.data(), DType::F32, {2, 1}),
                     view(idx.data(), DType::I64, {2, 1})},
                    {view(dx.data(), DType::F32, {2, 3})}, Attrs(&ins), 0, {},
                    NAN, nullptr};
  EXPECT_FALSE(k->fn(ctx));
  EXPECT_NE(ctx.error.find("index 3 is outside [0, 3)"), std::string::npos)
      << ctx.error;
}

} // namespace
