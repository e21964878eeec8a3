//===- ReduceKernelsTest.cpp - the reduction kernels against a naive loop --===//
//
// Part of the ds project. reduce_sum, reduce_mean and reduce_max over every
// kind of axis set (trailing, leading, a kept middle block as BatchNorm's
// statistics, and scattered axes) against a loop that walks the input in
// order and accumulates in double: the kernels add in the same order, so
// the results are equal bit for bit.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace ds::rt;

namespace {

using ds::rt::test::view;

/// The kernel `name` over `axes` of `x` (shape `shape`).
std::vector<float> run(const char *name, const std::vector<float> &x,
                       const std::vector<int64_t> &shape,
                       const std::vector<int64_t> &axes, int64_t outN) {
  ds::plan::Instruction ins;
  auto *a = ins.add_attributes();
  a->set_name("axes");
  for (int64_t axis : axes)
    a->mutable_ints()->add_values(axis);
  std::vector<int64_t> outShape(shape);
  for (int64_t axis : axes)
    outShape[axis] = 1;
  std::vector<float> out(outN, NAN);
  const KernelInfo *k = findKernel(name);
  EXPECT_NE(k, nullptr) << name;
  KernelContext ctx{{view(const_cast<float *>(x.data()), shape)},
                    {view(out.data(), outShape)},
                    Attrs(&ins),
                    0,
                    {},
                    NAN,
                    nullptr};
  EXPECT_TRUE(k && k->fn(ctx)) << name << ": " << ctx.error;
  return out;
}

/// The naive reduction: each input element, in order, into its output.
std::vector<float> naive(int which, const std::vector<float> &x,
                         const std::vector<int64_t> &shape,
                         const std::vector<int64_t> &axes, int64_t &outN) {
  int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> red(rank, false);
  for (int64_t a : axes)
    red[a] = true;
  std::vector<int64_t> keptStride(rank, 0);
  outN = 1;
  for (int64_t d = rank - 1; d >= 0; --d)
    if (!red[d]) {
      keptStride[d] = outN;
      outN *= shape[d];
    }
  double init = which == 2 ? -std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> acc(outN, init);
  std::vector<int64_t> pos(rank, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d)
      o += pos[d] * keptStride[d];
    acc[o] = which == 2 ? std::max(acc[o], double(x[i])) : acc[o] + x[i];
    for (int64_t d = rank - 1; d >= 0 && ++pos[d] == shape[d]; --d)
      pos[d] = 0;
  }
  int64_t count = static_cast<int64_t>(x.size()) / outN;
  std::vector<float> out(outN);
  for (int64_t o = 0; o < outN; ++o)
    out[o] = static_cast<float>(which == 1 ? acc[o] / count : acc[o]);
  return out;
}

TEST(ReduceKernels, EveryAxisPatternMatchesNaiveLoop) {
  struct Case {
    std::vector<int64_t> shape, axes;
  };
  const std::vector<Case> cases = {
      {{4, 6, 5, 7}, {0, 2, 3}}, // BatchNorm2d's statistics (middle kept)
      {{8, 3, 10}, {0, 2}},      // BatchNorm1d over N and L
      {{2, 3, 4, 5, 6}, {0, 1, 4}}, // a kept middle block of two axes
      {{5, 9}, {1}},             // trailing
      {{6, 4, 3}, {0, 1}},       // leading
      {{3, 4, 5, 2}, {1, 3}},    // scattered (the generic loop)
      {{7}, {0}},                // everything
  };
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const char *kernels[] = {"reduce_sum", "reduce_mean", "reduce_max"};
  for (const Case &c : cases) {
    int64_t n = 1;
    for (int64_t d : c.shape)
      n *= d;
    std::vector<float> x(n);
    for (float &v : x)
      v = dist(rng);
    for (int which = 0; which < 3; ++which) {
      int64_t outN = 0;
      std::vector<float> want = naive(which, x, c.shape, c.axes, outN);
      std::vector<float> got = run(kernels[which], x, c.shape, c.axes, outN);
      for (int64_t o = 0; o < outN; ++o)
        EXPECT_EQ(got[o], want[o])
            << kernels[which] << " case " << (&c - cases.data()) << " out " << o;
    }
  }
}

} // namespace
