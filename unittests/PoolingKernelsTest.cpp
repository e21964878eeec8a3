//===- PoolingKernelsTest.cpp - the pooling kernels against naive loops ---===//
//
// Part of the ds project. Max and average pooling and their gradients, 1 to
// 3 spatial dimensions, with strides, asymmetric pads, dilations and
// ceil_mode, against a per-output loop over the whole window written from
// the ONNX definition. Tolerance: 1e-6 relative (max pooling is exact; the
// averages sum in another order).
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "plan.pb.h"
#include "ds/Support/Pooling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace ds::rt;

namespace {

using ds::rt::test::view;

/// One pooling case: shapes and attributes.
struct PoolCase {
  std::vector<int64_t> in, kernel, strides, pads, dilations;
  bool ceil, countPad;
};

std::vector<int64_t> pooledShape(const PoolCase &c) {
  size_t nd = c.kernel.size();
  std::vector<int64_t> out(c.in.begin(), c.in.begin() + 2);
  for (size_t i = 0; i < nd; ++i)
    out.push_back(ds::pooledSize(c.in[2 + i], c.kernel[i], c.strides[i],
                                 c.pads[i], c.pads[nd + i], c.dilations[i],
                                 c.ceil));
  return out;
}

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The reference: for each output, every tap of its window (ints as a
/// padded 3-D index), the first maximum's input index, and the average's
/// divisor counted tap by tap.
struct Reference {
  std::vector<float> max, avg, maxGrad, avgGrad;
};

Reference reference(const PoolCase &c, const std::vector<float> &x,
                    const std::vector<float> &dy) {
  ds::PoolGeometry g;
  std::vector<int64_t> out = pooledShape(c);
  g.set(c.in.data(), out.data(), static_cast<int>(c.kernel.size()),
        c.kernel.data(), c.strides.data(), c.pads.data(), c.dilations.data());
  Reference r;
  r.max.assign(count(out), 0);
  r.avg = r.max;
  r.maxGrad.assign(count(c.in), 0);
  r.avgGrad = r.maxGrad;
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t o = 0; o < g.outPlane(); ++o) {
      int64_t oi[3] = {o / (g.out[1] * g.out[2]), o / g.out[2] % g.out[1],
                       o % g.out[2]};
      float best = -INFINITY, sum = 0;
      int64_t arg = -1, inPad = 0;
      std::vector<int64_t> taps;
      for (int64_t t = 0; t < g.kernel[0] * g.kernel[1] * g.kernel[2]; ++t) {
        int64_t ki[3] = {t / (g.kernel[1] * g.kernel[2]),
                         t / g.kernel[2] % g.kernel[1], t % g.kernel[2]};
        bool inside = true, padded = true;
        int64_t idx = 0;
        for (int d = 0; d < 3; ++d) {
          int64_t i = oi[d] * g.stride[d] - g.pad[d] + ki[d] * g.dilation[d];
          inside &= i >= 0 && i < g.in[d];
          padded &= i < g.in[d] + g.padEnd[d];
          idx = idx * g.in[d] + i;
        }
        // Average windows are never dilated: taps within the end padding.
        inPad += padded;
        if (!inside)
          continue;
        float v = x[p * g.inPlane() + idx];
        if (arg < 0 || v > best)
          best = v, arg = idx;
        sum += v;
        taps.push_back(idx);
      }
      float div = c.countPad ? inPad : taps.size();
      int64_t po = p * g.outPlane() + o;
      r.max[po] = best;
      r.avg[po] = sum / div;
      r.maxGrad[p * g.inPlane() + arg] += dy[po];
      for (int64_t idx : taps)
        r.avgGrad[p * g.inPlane() + idx] += dy[po] / div;
    }
  return r;
}

/// Runs kernel `name`, its attributes the case's, checking it succeeds.
void run(const char *name, const PoolCase &c, std::vector<TensorView> in,
         TensorView out) {
  ds::plan::Instruction ins;
  for (auto [key, values] :
       {std::pair<const char *, const std::vector<int64_t> *>{"kernel_shape", &c.kernel},
        {"strides", &c.strides}, {"pads", &c.pads}, {"dilations", &c.dilations}}) {
    auto *a = ins.add_attributes();
    a->set_name(key);
    for (int64_t v : *values)
      a->mutable_ints()->add_values(v);
  }
  auto *a = ins.add_attributes();
  a->set_name("count_include_pad");
  a->set_i(c.countPad);
  const KernelInfo *k = findKernel(name);
  ASSERT_NE(k, nullptr) << name;
  KernelContext ctx{std::move(in), {out}, Attrs(&ins), 0, {}, NAN, nullptr};
  ASSERT_TRUE(k->fn(ctx)) << name << ": " << ctx.error;
}

double relError(const std::vector<float> &got, const std::vector<float> &ref) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return err / scale;
}

TEST(PoolingKernels, MatchNaiveWindows) {
  const PoolCase cases[] = {
      {{2, 3, 11}, {3}, {2}, {1, 1}, {1}, false, false},
      {{2, 3, 11}, {3}, {2}, {1, 1}, {2}, true, true},
      {{2, 2, 7, 9}, {3, 2}, {2, 2}, {1, 0, 1, 1}, {1, 1}, true, true},
      {{2, 2, 7, 9}, {3, 3}, {2, 1}, {1, 1, 1, 1}, {1, 1}, false, false},
      {{1, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {2, 2}, true, false},
      {{1, 2, 5, 6, 7}, {2, 3, 2}, {2, 2, 3}, {1, 0, 1, 0, 1, 1}, {1, 1, 1},
       true, true},
      {{2, 4, 5, 5}, {5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false},
  };
  uint32_t seed = 1;
  for (const PoolCase &c : cases) {
    std::vector<int64_t> outShape = pooledShape(c);
    std::mt19937 gen(seed++);
    std::normal_distribution<float> d;
    std::vector<float> x(count(c.in)), dy(count(outShape));
    for (float &v : x)
      v = std::round(d(gen) * 4) / 4; // ties: the first maximum must win
    for (float &v : dy)
      v = d(gen);
    Reference r = reference(c, x, dy);
    std::vector<float> y(dy.size()), dx(x.size());
    run("max_pool", c, {view(x, c.in)}, view(y, outShape));
    EXPECT_EQ(relError(y, r.max), 0) << "max_pool rank " << c.in.size();
    run("max_pool_grad", c, {view(x, c.in), view(dy, outShape)}, view(dx, c.in));
    EXPECT_EQ(relError(dx, r.maxGrad), 0) << "max_pool_grad rank " << c.in.size();
    // Average pooling has no dilations.
    if (c.dilations != std::vector<int64_t>(c.kernel.size(), 1))
      continue;
    run("avg_pool", c, {view(x, c.in)}, view(y, outShape));
    EXPECT_LE(relError(y, r.avg), 1e-6) << "avg_pool rank " << c.in.size();
    run("avg_pool_grad", c, {view(dy, outShape)}, view(dx, c.in));
    EXPECT_LE(relError(dx, r.avgGrad), 1e-6) << "avg_pool_grad rank " << c.in.size();
  }
}

} // namespace
