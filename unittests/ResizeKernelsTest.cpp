//===- ResizeKernelsTest.cpp - resize kernels against naive sampling ------===//
//
// Part of the ds project. resize and resize_grad, nearest (every nearest
// mode) and linear, 1 to 3 spatial dimensions, up and down, every
// coordinate transformation mode, against a per-output loop written from
// the ONNX definition (the coordinate formulas written out again here, not
// Support/Resize.h's): each output lists its input taps and weights, the
// forward sums them, the gradient scatters along them. A second check is
// the adjoint identity <resize(x), dy> = <x, resize_grad(dy)>. f16 and
// bf16 operands are checked against the f32 result rounded.
// Tolerance: 1e-6 relative (f32; other summation order), 1e-2 for 16-bit.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

using namespace ds::rt;

namespace {

using ds::rt::test::view;

struct ResizeCase {
  std::vector<int64_t> in, out;
  std::vector<double> scales;
  std::string mode, coord, nearest;
};

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// ONNX's x_original for output index o of one dimension.
double source(const std::string &coord, int64_t o, int64_t in, int64_t out,
              double scale) {
  if (coord == "half_pixel")
    return (o + 0.5) / scale - 0.5;
  if (coord == "pytorch_half_pixel")
    return out > 1 ? (o + 0.5) / scale - 0.5 : 0;
  if (coord == "align_corners") { // ONNX: the unfloored length in * scale
    double len = in * scale;
    return len > 1 ? o * double(in - 1) / (len - 1) : 0;
  }
  if (coord == "tf_half_pixel_for_nn")
    return (o + 0.5) / scale;
  return o / scale; // asymmetric
}

/// The (index, weight) taps of output index o along one dimension.
std::vector<std::pair<int64_t, double>> taps(const ResizeCase &c, int d,
                                             int64_t o) {
  int64_t in = c.in[2 + d], out = c.out[2 + d];
  double x = source(c.coord, o, in, out, c.scales[d]);
  auto clamp = [&](double i) {
    return std::min<int64_t>(std::max<int64_t>(int64_t(i), 0), in - 1);
  };
  if (c.mode == "linear") {
    double lo = std::floor(x);
    return {{clamp(lo), 1 - (x - lo)}, {clamp(lo + 1), x - lo}};
  }
  double pick;
  if (c.nearest == "floor")
    pick = std::floor(x);
  else if (c.nearest == "ceil")
    pick = std::ceil(x);
  else if (x - std::floor(x) == 0.5)
    pick = c.nearest == "round_prefer_ceil" ? std::ceil(x) : std::floor(x);
  else
    pick = std::round(x);
  return {{clamp(pick), 1.0}};
}

/// Every output element's taps over the whole tensor (flat indices).
std::vector<std::vector<std::pair<int64_t, double>>>
allTaps(const ResizeCase &c) {
  int nd = static_cast<int>(c.in.size()) - 2;
  int64_t planes = c.in[0] * c.in[1];
  int64_t inPlane = count(c.in) / planes, outPlane = count(c.out) / planes;
  std::vector<std::vector<std::pair<int64_t, double>>> all(count(c.out));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o = 0; o < outPlane; ++o) {
      std::vector<std::pair<int64_t, double>> cur = {{0, 1.0}};
      int64_t rest = o;
      std::vector<int64_t> idx(nd);
      for (int d = nd - 1; d >= 0; --d) {
        idx[d] = rest % c.out[2 + d];
        rest /= c.out[2 + d];
      }
      for (int d = 0; d < nd; ++d) {
        std::vector<std::pair<int64_t, double>> next;
        for (auto [i, w] : cur)
          for (auto [j, v] : taps(c, d, idx[d]))
            next.push_back({i * c.in[2 + d] + j, w * v});
        cur = next;
      }
      for (auto &[i, w] : cur)
        i += p * inPlane;
      all[p * outPlane + o] = cur;
    }
  return all;
}

void run(const char *name, const ResizeCase &c, TensorView in, TensorView out) {
  ds::plan::Instruction ins;
  for (auto [key, value] :
       {std::pair<const char *, const std::string *>{"mode", &c.mode},
        {"coordinate_transformation_mode", &c.coord},
        {"nearest_mode", &c.nearest}}) {
    auto *a = ins.add_attributes();
    a->set_name(key);
    a->set_s(*value);
  }
  auto *a = ins.add_attributes();
  a->set_name("scales");
  for (double s : c.scales)
    a->mutable_floats()->add_values(s);
  const KernelInfo *k = findKernel(name);
  ASSERT_NE(k, nullptr) << name;
  KernelContext ctx{{in}, {out}, Attrs(&ins), 0, {}, NAN, nullptr};
  ASSERT_TRUE(k->fn(ctx)) << name << ": " << ctx.error;
}

double relError(const std::vector<float> &got, const std::vector<double> &ref) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return err / scale;
}

std::vector<ResizeCase> cases() {
  std::vector<ResizeCase> cs;
  for (const char *coord : {"half_pixel", "pytorch_half_pixel", "align_corners",
                            "asymmetric", "tf_half_pixel_for_nn"}) {
    cs.push_back(
        {{2, 3, 5, 6}, {2, 3, 10, 12}, {2, 2}, "linear", coord, "floor"});
    cs.push_back({{1, 2, 7, 4},
                  {1, 2, 3, 9},
                  {3.0 / 7, 2.25},
                  "linear",
                  coord,
                  "floor"});
    for (const char *nearest :
         {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
      cs.push_back(
          {{2, 2, 4, 5}, {2, 2, 8, 3}, {2, 0.6}, "nearest", coord, nearest});
  }
  cs.push_back({{2, 3, 7}, {2, 3, 10}, {1.5}, "linear", "half_pixel", "floor"});
  cs.push_back({{1, 2, 3, 4, 3},
                {1, 2, 6, 8, 6},
                {2, 2, 2},
                "linear",
                "half_pixel",
                "floor"});
  cs.push_back({{1, 2, 3, 4, 3},
                {1, 2, 3, 8, 1},
                {1, 2, 0.5},
                "nearest",
                "asymmetric",
                "floor"});
  cs.push_back({{1, 1, 1, 4},
                {1, 1, 1, 1},
                {1, 0.25},
                "linear",
                "pytorch_half_pixel",
                "floor"});
  return cs;
}

TEST(ResizeKernels, MatchNaiveSampling) {
  uint32_t seed = 1;
  for (const ResizeCase &c : cases()) {
    std::string what = c.mode + "/" + c.coord + "/" + c.nearest + " rank " +
                       std::to_string(c.in.size());
    std::mt19937 gen(seed++);
    std::normal_distribution<float> d;
    std::vector<float> x(count(c.in)), dy(count(c.out));
    for (float &v : x)
      v = d(gen);
    for (float &v : dy)
      v = d(gen);
    auto all = allTaps(c);
    std::vector<double> yRef(dy.size(), 0), dxRef(x.size(), 0);
    for (size_t o = 0; o < all.size(); ++o)
      for (auto [i, w] : all[o]) {
        yRef[o] += w * x[i];
        dxRef[i] += w * dy[o];
      }
    std::vector<float> y(dy.size()), dx(x.size());
    run("resize", c, view(x.data(), DType::F32, c.in),
        view(y.data(), DType::F32, c.out));
    EXPECT_LE(relError(y, yRef), 1e-6) << "resize " << what;
    run("resize_grad", c, view(dy.data(), DType::F32, c.out),
        view(dx.data(), DType::F32, c.in));
    EXPECT_LE(relError(dx, dxRef), 1e-6) << "resize_grad " << what;
    // The adjoint identity, in double.
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < y.size(); ++i)
      lhs += double(y[i]) * dy[i];
    for (size_t i = 0; i < x.size(); ++i)
      rhs += double(x[i]) * dx[i];
    EXPECT_NEAR(lhs, rhs, 1e-5 * (std::fabs(lhs) + 1)) << what;
  }
}

TEST(ResizeKernels, SixteenBitOperands) {
  ResizeCase c{{2, 3, 5, 6}, {2, 3, 10, 12}, {2, 2},
               "linear",     "half_pixel",   "floor"};
  std::mt19937 gen(7);
  std::normal_distribution<float> d;
  std::vector<float> x(count(c.in)), y(count(c.out)), back(count(c.out));
  for (float &v : x)
    v = d(gen);
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> x16(x.size()), y16(y.size());
    for (size_t i = 0; i < x.size(); ++i)
      storeD(x16.data(), t, i, x[i]);
    std::vector<float> xr(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      xr[i] = static_cast<float>(loadD(x16.data(), t, i));
    run("resize", c, view(xr.data(), DType::F32, c.in),
        view(y.data(), DType::F32, c.out));
    run("resize", c, view(x16.data(), t, c.in), view(y16.data(), t, c.out));
    std::vector<double> ref(y.begin(), y.end());
    for (size_t i = 0; i < y.size(); ++i)
      back[i] = static_cast<float>(loadD(y16.data(), t, i));
    EXPECT_LE(relError(back, ref), 1e-2) << "dtype " << static_cast<int>(t);
  }
}

} // namespace
