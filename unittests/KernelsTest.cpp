//===- KernelsTest.cpp - CPU kernels against naive references -------------===//
//
// Part of the ds project. Each test builds random inputs, runs a kernel
// through its registry entry, and compares with a straightforward loop.
// Tolerances: f32 kernels 1e-5 relative (summation order differs), the
// fast exp 3 ulp, erf 1.5e-7 absolute, tanh 4 ulp and log 2 ulp (their
// documented accuracy), the
// activations 1e-6 relative (double math rounded to f32 on both sides).
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "Cpu/Vec.h"
#include "TpSlice.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace ds::rt;

namespace {

struct Buf {
  std::vector<float> v;
  TensorView view(std::vector<int64_t> shape) {
    TensorView t;
    t.data = v.data();
    t.dtype = DType::F32;
    t.shape = std::move(shape);
    return t;
  }
};

std::vector<float> randomVec(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float &x : v)
    x = d(g);
  return v;
}

/// Runs kernel `name` with attributes `ins`.
bool runKernel(const char *name, std::vector<TensorView> in,
               std::vector<TensorView> out, const ds::plan::Instruction &attrs,
               std::string *error = nullptr) {
  const KernelInfo *k = findKernel(name);
  EXPECT_NE(k, nullptr) << name;
  KernelContext ctx{std::move(in), std::move(out), Attrs(&attrs), 0, {}, NAN, nullptr};
  bool ok = k->fn(ctx);
  if (error)
    *error = ctx.error;
  return ok;
}

void addInt(ds::plan::Instruction &ins, const char *name, int64_t v) {
  auto *a = ins.add_attributes();
  a->set_name(name);
  a->set_i(v);
}

double maxRelError(const std::vector<float> &got, const std::vector<float> &ref) {
  double maxAbs = 0, maxRef = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    maxAbs = std::max(maxAbs, std::fabs(double(got[i]) - ref[i]));
    maxRef = std::max(maxRef, std::fabs(double(ref[i])));
  }
  return maxAbs / std::max(maxRef, 1e-30);
}

TEST(Vec, FastExpWithin3Ulp) {
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    float a = fastExp(x), b = std::exp(x);
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    ASSERT_LE(std::abs(int64_t(ia) - ib), 3) << "x = " << x;
  }
  EXPECT_EQ(fastExp(-INFINITY), 0.0f);
  EXPECT_EQ(fastExp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isinf(fastExp(100.0f)));
  EXPECT_TRUE(std::isnan(fastExp(NAN)));
}

TEST(Vec, FastErfWithin1p5e7) {
  for (float x = -6.0f; x < 6.0f; x += 0.001f)
    ASSERT_NEAR(fastErf(x), std::erf(double(x)), 1.5e-7) << "x = " << x;
  EXPECT_EQ(fastErf(0.0f), 0.0f);
}

/// Distance in units in the last place between two finite floats of one
/// sign (or zero).
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(int64_t(ia) - ib);
}

TEST(Vec, FastTanhWithin4Ulp) {
  // Denser near 0.5, where the two branches meet.
  for (float x = -12.0f; x < 12.0f; x += 0.000731f) {
    float want = static_cast<float>(std::tanh(double(x)));
    ASSERT_LE(ulps(fastTanh(x), want), 4) << "x = " << x;
  }
  for (float x = 1e-30f; x < 1.0f; x *= 1.37f) {
    ASSERT_LE(ulps(fastTanh(x), static_cast<float>(std::tanh(double(x)))), 4) << x;
    ASSERT_EQ(fastTanh(-x), -fastTanh(x)) << x;
  }
  EXPECT_EQ(fastTanh(0.0f), 0.0f);
  EXPECT_EQ(fastTanh(100.0f), 1.0f);
  EXPECT_EQ(fastTanh(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(fastTanh(NAN)));
}

TEST(Vec, FastLogWithin2Ulp) {
  // Subnormals in coarse steps (a product there can round back to x).
  for (float x = 1e-45f; x < 3e38f;
       x = x < 1e-37f ? x * 1.5f + 1e-45f : x * 1.0137f) {
    float want = static_cast<float>(std::log(double(x)));
    ASSERT_LE(ulps(fastLog(x), want), 2) << "x = " << x;
  }
  for (float x = 0.5f; x < 2.0f; x += 0.0000913f) {
    float want = static_cast<float>(std::log(double(x)));
    if (want != 0.0f)
      ASSERT_LE(ulps(fastLog(x), want), 2) << "x = " << x;
  }
  EXPECT_EQ(fastLog(1.0f), 0.0f);
  EXPECT_EQ(fastLog(0.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(fastLog(-1.0f)));
  EXPECT_EQ(fastLog(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(fastLog(NAN)));
}

TEST(Half, RoundTripsAndRounds) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t bits = static_cast<uint16_t>(h);
    float f = halfToFloat(bits);
    if (std::isnan(f))
      continue;
    ASSERT_EQ(floatToHalf(f), bits) << std::hex << h;
  }
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00); // ties to even
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);           // overflow to inf
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(floatToBf16(3.140625f)), 3.140625f);
}

TEST(Kernels, MatMulBatchBroadcastAndTransB) {
  // a: [2, 1, 3, 4], b: [5, 4] stored transposed as [5, 4] (trans_b),
  // and b2: [3, 4, 5] broadcast against a's batch.
  Buf a{randomVec(2 * 3 * 4, 1)}, b{randomVec(5 * 4, 2)},
      b2{randomVec(3 * 4 * 5, 3)};
  Buf o{std::vector<float>(2 * 3 * 5)}, o2{std::vector<float>(2 * 3 * 3 * 5)};
  ds::plan::Instruction transB;
  addInt(transB, "trans_b", 1);
  ASSERT_TRUE(runKernel("matmul", {a.view({2, 1, 3, 4}), b.view({5, 4})},
                        {o.view({2, 1, 3, 5})}, transB));
  std::vector<float> ref(o.v.size());
  for (int bi = 0; bi < 2; ++bi)
    for (int m = 0; m < 3; ++m)
      for (int n = 0; n < 5; ++n) {
        double s = 0;
        for (int k = 0; k < 4; ++k)
          s += double(a.v[(bi * 3 + m) * 4 + k]) * b.v[n * 4 + k];
        ref[(bi * 3 + m) * 5 + n] = float(s);
      }
  EXPECT_LT(maxRelError(o.v, ref), 1e-5);

  ds::plan::Instruction plain;
  ASSERT_TRUE(runKernel("matmul", {a.view({2, 1, 3, 4}), b2.view({3, 4, 5})},
                        {o2.view({2, 3, 3, 5})}, plain));
  std::vector<float> ref2(o2.v.size());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int m = 0; m < 3; ++m)
        for (int n = 0; n < 5; ++n) {
          double s = 0;
          for (int k = 0; k < 4; ++k)
            s += double(a.v[(i * 3 + m) * 4 + k]) * b2.v[(j * 4 + k) * 5 + n];
          ref2[((i * 3 + j) * 3 + m) * 5 + n] = float(s);
        }
  EXPECT_LT(maxRelError(o2.v, ref2), 1e-5);
}

TEST(Kernels, MatMulTransA) {
  // a stored [2, 4, 3] = A^T per batch (A is [2, 3, 4]); b [4, 5].
  Buf a{randomVec(2 * 4 * 3, 21)}, b{randomVec(4 * 5, 22)},
      o{std::vector<float>(2 * 3 * 5)};
  ds::plan::Instruction transA;
  addInt(transA, "trans_a", 1);
  ASSERT_TRUE(runKernel("matmul", {a.view({2, 4, 3}), b.view({4, 5})},
                        {o.view({2, 3, 5})}, transA));
  std::vector<float> ref(o.v.size());
  for (int bi = 0; bi < 2; ++bi)
    for (int m = 0; m < 3; ++m)
      for (int n = 0; n < 5; ++n) {
        double s = 0;
        for (int k = 0; k < 4; ++k)
          s += double(a.v[(bi * 4 + k) * 3 + m]) * b.v[k * 5 + n];
        ref[(bi * 3 + m) * 5 + n] = float(s);
      }
  EXPECT_LT(maxRelError(o.v, ref), 1e-5);
}

TEST(Kernels, MatMulRejectsMismatch) {
  Buf a{randomVec(12, 1)}, b{randomVec(12, 2)}, o{std::vector<float>(9)};
  ds::plan::Instruction plain;
  std::string error;
  EXPECT_FALSE(runKernel("matmul", {a.view({3, 4}), b.view({3, 4})},
                         {o.view({3, 3})}, plain, &error));
  EXPECT_EQ(error, "matmul contraction mismatch");
}

TEST(Kernels, SoftmaxRowsAndMiddleAxis) {
  Buf x{randomVec(2 * 3 * 4, 4)}, y{std::vector<float>(24)};
  for (int axis : {2, 1}) {
    ds::plan::Instruction ins;
    addInt(ins, "axis", axis);
    ASSERT_TRUE(runKernel("softmax", {x.view({2, 3, 4})}, {y.view({2, 3, 4})}, ins));
    int inner = axis == 2 ? 1 : 4, dim = axis == 2 ? 4 : 3;
    std::vector<float> ref(24);
    for (int o = 0; o < 2 * (axis == 2 ? 3 : 1); ++o)
      for (int in = 0; in < inner; ++in) {
        double mx = -1e30, sum = 0;
        for (int k = 0; k < dim; ++k)
          mx = std::max(mx, double(x.v[(o * dim + k) * inner + in]));
        for (int k = 0; k < dim; ++k)
          sum += std::exp(x.v[(o * dim + k) * inner + in] - mx);
        for (int k = 0; k < dim; ++k)
          ref[(o * dim + k) * inner + in] =
              float(std::exp(x.v[(o * dim + k) * inner + in] - mx) / sum);
      }
    EXPECT_LT(maxRelError(y.v, ref), 1e-5) << "axis " << axis;
  }
}

TEST(Kernels, LayerNormMatchesNaive) {
  Buf x{randomVec(6 * 8, 5)}, s{randomVec(8, 6)}, b{randomVec(8, 7)},
      y{std::vector<float>(48)};
  ds::plan::Instruction ins;
  addInt(ins, "axis", 1);
  auto *eps = ins.add_attributes();
  eps->set_name("epsilon");
  eps->set_f(1e-5);
  ASSERT_TRUE(runKernel("layer_norm", {x.view({6, 8}), s.view({8}), b.view({8})},
                        {y.view({6, 8})}, ins));
  std::vector<float> ref(48);
  for (int r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 8; ++c)
      mean += x.v[r * 8 + c] / 8.0;
    for (int c = 0; c < 8; ++c)
      var += (x.v[r * 8 + c] - mean) * (x.v[r * 8 + c] - mean) / 8.0;
    for (int c = 0; c < 8; ++c)
      ref[r * 8 + c] = float((x.v[r * 8 + c] - mean) / std::sqrt(var + 1e-5) * s.v[c] + b.v[c]);
  }
  EXPECT_LT(maxRelError(y.v, ref), 1e-5);
}

TEST(Kernels, BinaryBroadcastAndInPlace) {
  // [2, 3, 4] + [3, 1]: numpy broadcasting; then in place (out == lhs).
  Buf a{randomVec(24, 8)}, b{randomVec(3, 9)}, o{std::vector<float>(24)};
  ds::plan::Instruction none;
  ASSERT_TRUE(runKernel("add", {a.view({2, 3, 4}), b.view({3, 1})},
                        {o.view({2, 3, 4})}, none));
  for (int i = 0; i < 24; ++i)
    ASSERT_EQ(o.v[i], a.v[i] + b.v[(i / 4) % 3]);
  std::vector<float> before = a.v;
  ASSERT_TRUE(runKernel("mul", {a.view({2, 3, 4}), b.view({3, 1})},
                        {a.view({2, 3, 4})}, none));
  for (int i = 0; i < 24; ++i)
    ASSERT_EQ(a.v[i], before[i] * b.v[(i / 4) % 3]);
}

TEST(Kernels, UnaryInPlaceMatchesLibm) {
  Buf x{randomVec(1000, 10)};
  std::vector<float> before = x.v;
  ds::plan::Instruction none;
  ASSERT_TRUE(runKernel("erf", {x.view({1000})}, {x.view({1000})}, none));
  for (int i = 0; i < 1000; ++i)
    ASSERT_NEAR(x.v[i], std::erf(double(before[i])), 1.5e-7);
}

/// One activation: its attributes and a naive reference of f and f'.
struct ActivationCase {
  const char *kind;
  double alpha, beta;
  double (*f)(double x, double a, double b);
  double (*df)(double x, double a, double b);
};

const ActivationCase kActivationCases[] = {
    {"clip", -1.5, 2.0,
     [](double x, double a, double b) { return std::min(std::max(x, a), b); },
     [](double x, double a, double b) { return x >= a && x <= b ? 1.0 : 0.0; }},
    {"leaky_relu", 0.01, 0,
     [](double x, double a, double) { return x >= 0 ? x : a * x; },
     [](double x, double a, double) { return x > 0 ? 1 : a; }},
    {"elu", 0.7, 0,
     [](double x, double a, double) { return x >= 0 ? x : a * (std::exp(x) - 1); },
     [](double x, double a, double) { return x > 0 ? 1 : a * std::exp(x); }},
    {"selu", 1.6732632, 1.050701,
     [](double x, double a, double g) { return g * (x > 0 ? x : a * (std::exp(x) - 1)); },
     [](double x, double a, double g) { return g * (x > 0 ? 1 : a * std::exp(x)); }},
    {"celu", 2.0, 0,
     [](double x, double a, double) {
       return std::max(0.0, x) + std::min(0.0, a * (std::exp(x / a) - 1));
     },
     [](double x, double a, double) { return x > 0 ? 1 : std::exp(x / a); }},
    {"softplus", 0, 0,
     [](double x, double, double) { return std::log(1 + std::exp(x)); },
     [](double x, double, double) { return std::exp(x) / (1 + std::exp(x)); }},
    {"softsign", 0, 0,
     [](double x, double, double) { return x / (1 + std::fabs(x)); },
     [](double x, double, double) {
       return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x)));
     }},
    {"hard_sigmoid", 0.2, 0.5,
     [](double x, double a, double b) { return std::clamp(a * x + b, 0.0, 1.0); },
     [](double x, double a, double b) { return std::fabs(a * x + b - 0.5) < 0.5 ? a : 0; }},
    {"hard_swish", 0, 0,
     [](double x, double, double) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); },
     [](double x, double, double) { return x < -3 ? 0 : (x > 3 ? 1 : x / 3 + 0.5); }},
    {"sin", 0, 0, [](double x, double, double) { return std::sin(x); },
     [](double x, double, double) { return std::cos(x); }},
    {"cos", 0, 0, [](double x, double, double) { return std::cos(x); },
     [](double x, double, double) { return -std::sin(x); }},
};

TEST(Kernels, ActivationsAndGradientsMatchNaive) {
  // x in about [-12, 12]: both sides of every kink and of hardswish's +-3.
  std::vector<float> x = randomVec(1000, 14), dy = randomVec(1000, 15);
  for (float &v : x)
    v *= 4;
  for (const ActivationCase &c : kActivationCases) {
    ds::plan::Instruction attrs;
    auto *k = attrs.add_attributes();
    k->set_name("kind");
    k->set_s(c.kind);
    for (auto [name, v] : {std::pair<const char *, double>{"alpha", c.alpha},
                           {"beta", c.beta}}) {
      auto *a = attrs.add_attributes();
      a->set_name(name);
      a->set_f(v);
    }
    Buf in{x}, g{dy}, y{std::vector<float>(1000)}, dx{std::vector<float>(1000)};
    ASSERT_TRUE(runKernel("activation", {in.view({10, 100})}, {y.view({10, 100})}, attrs))
        << c.kind;
    ASSERT_TRUE(runKernel("activation_grad", {in.view({10, 100}), g.view({10, 100})},
                          {dx.view({10, 100})}, attrs))
        << c.kind;
    std::vector<float> refY(1000), refDx(1000);
    for (int i = 0; i < 1000; ++i) {
      refY[i] = static_cast<float>(c.f(x[i], c.alpha, c.beta));
      refDx[i] = static_cast<float>(dy[i] * c.df(x[i], c.alpha, c.beta));
    }
    // f32 results of double math: 1e-6 relative to the largest value.
    EXPECT_LE(maxRelError(y.v, refY), 1e-6) << c.kind;
    EXPECT_LE(maxRelError(dx.v, refDx), 1e-6) << c.kind << " gradient";
  }
  ds::plan::Instruction bad;
  auto *k = bad.add_attributes();
  k->set_name("kind");
  k->set_s("swish");
  Buf in{x}, y{std::vector<float>(1000)};
  std::string error;
  EXPECT_FALSE(runKernel("activation", {in.view({1000})}, {y.view({1000})}, bad, &error));
  EXPECT_EQ(error, "unknown activation kind 'swish'");
}

void addInts(ds::plan::Instruction &ins, const char *name,
             std::initializer_list<int64_t> values) {
  auto *a = ins.add_attributes();
  a->set_name(name);
  for (int64_t v : values)
    a->mutable_ints()->add_values(v);
}

/// A 2-D convolution case: sizes, strides, dilations, pads (top, left,
/// bottom, right), groups, and whether it has a bias.
struct Conv2dCase {
  const char *name;
  int N, C, M, G, H, W, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR;
  bool bias;
  int OH() const { return (H + PT + PB - DH * (KH - 1) - 1) / SH + 1; }
  int OW() const { return (W + PL + PR - DW * (KW - 1) - 1) / SW + 1; }
};

/// conv, conv_grad_input and conv_grad_weight of one case against a
/// naive loop nest in double: within 1e-5 relative to the largest value
/// (f32 GEMM sums of at most a few hundred products).
void checkConv2d(const Conv2dCase &c) {
  const int OH = c.OH(), OW = c.OW(), CG = c.C / c.G, MG = c.M / c.G;
  Buf x{randomVec(c.N * c.C * c.H * c.W, 21)},
      w{randomVec(c.M * CG * c.KH * c.KW, 22)}, b{randomVec(c.M, 23)},
      dy{randomVec(c.N * c.M * OH * OW, 24)};
  std::vector<double> y64(dy.v.size()), dx64(x.v.size()), dw64(w.v.size());
  for (int n = 0; n < c.N; ++n)
    for (int m = 0; m < c.M; ++m)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          int o = ((n * c.M + m) * OH + oh) * OW + ow;
          double acc = c.bias ? b.v[m] : 0.0;
          for (int ci = 0; ci < CG; ++ci)
            for (int kh = 0; kh < c.KH; ++kh)
              for (int kw = 0; kw < c.KW; ++kw) {
                int ih = oh * c.SH - c.PT + kh * c.DH;
                int iw = ow * c.SW - c.PL + kw * c.DW;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W)
                  continue;
                int ch = m / MG * CG + ci;
                int xi = ((n * c.C + ch) * c.H + ih) * c.W + iw;
                int wi = ((m * CG + ci) * c.KH + kh) * c.KW + kw;
                acc += double(w.v[wi]) * x.v[xi];
                dx64[xi] += double(w.v[wi]) * dy.v[o];
                dw64[wi] += double(x.v[xi]) * dy.v[o];
              }
          y64[o] = acc;
        }
  auto f32 = [](const std::vector<double> &v) {
    return std::vector<float>(v.begin(), v.end());
  };
  ds::plan::Instruction attrs;
  addInts(attrs, "strides", {c.SH, c.SW});
  addInts(attrs, "dilations", {c.DH, c.DW});
  addInts(attrs, "pads", {c.PT, c.PL, c.PB, c.PR});
  addInt(attrs, "group", c.G);
  // The outputs start as NaN: a kernel that leaves an element unwritten
  // fails the comparison.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Buf y{std::vector<float>(y64.size(), nan)},
      dx{std::vector<float>(dx64.size(), nan)},
      dw{std::vector<float>(dw64.size(), nan)};
  TensorView xv = x.view({c.N, c.C, c.H, c.W}),
             wv = w.view({c.M, CG, c.KH, c.KW});
  TensorView dyv = dy.view({c.N, c.M, OH, OW});
  std::vector<TensorView> ins = {xv, wv};
  if (c.bias)
    ins.push_back(b.view({c.M}));
  ASSERT_TRUE(runKernel("conv", ins, {y.view({c.N, c.M, OH, OW})}, attrs))
      << c.name;
  ASSERT_TRUE(runKernel("conv_grad_input", {dyv, wv},
                        {dx.view({c.N, c.C, c.H, c.W})}, attrs))
      << c.name;
  ASSERT_TRUE(runKernel("conv_grad_weight", {xv, dyv},
                        {dw.view({c.M, CG, c.KH, c.KW})}, attrs))
      << c.name;
  // maxRelError skips NaN (its std::max keeps the running value): count
  // unwritten elements separately.
  for (const std::vector<float> *v : {&y.v, &dx.v, &dw.v})
    EXPECT_EQ(std::count_if(v->begin(), v->end(),
                            [](float f) { return std::isnan(f); }),
              0)
        << c.name << " left elements unwritten";
  EXPECT_LE(maxRelError(y.v, f32(y64)), 1e-5) << c.name;
  EXPECT_LE(maxRelError(dx.v, f32(dx64)), 1e-5) << c.name << " dx";
  EXPECT_LE(maxRelError(dw.v, f32(dw64)), 1e-5) << c.name << " dw";
}

TEST(Kernels, ConvAndGradientsMatchNaive) {
  // Each path of Cpu/Conv.cpp: batched im2col + GEMM through the tap
  // table (output rows under 16: groups, strides, dilations, asymmetric
  // pads) and by rows (20 columns: the same with strides and dilations 2;
  // 32 columns), several chunks of images (30 images of
  // 16 x 32 x 32 taps 3x3: 28 per 16 MiB chunk), pointwise 1x1 read in
  // place (24 x 24 = 576 positions per image) and batched (8 x 8),
  // depthwise (multiplier 1 and 2, stride 2, dilation 2, padding).
  const Conv2dCase cases[] = {
      {"groups", 2, 4, 6, 2, 7, 6, 3, 2, 2, 1, 1, 2, 1, 0, 2, 1, true},
      {"chunks", 30, 16, 4, 1, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false},
      {"pointwise", 3, 5, 4, 1, 24, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true},
      {"pointwise-batched", 3, 6, 4, 2, 8, 8, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, false},
      {"depthwise", 2, 6, 6, 6, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true},
      {"depthwise-x2", 2, 3, 6, 3, 8, 7, 3, 3, 1, 1, 2, 2, 2, 1, 2, 3, false},
      {"1x1-stride2", 2, 4, 8, 1, 9, 9, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, false},
      {"wide-rows", 2, 3, 4, 1, 9, 40, 3, 3, 2, 2, 2, 2, 1, 2, 2, 1, true},
  };
  for (const Conv2dCase &c : cases)
    checkConv2d(c);
  // A result of the wrong size is refused.
  Buf x{randomVec(2 * 4 * 7 * 6, 21)}, w{randomVec(6 * 2 * 3 * 2, 22)},
      y{std::vector<float>(2 * 6 * 4 * 5)};
  ds::plan::Instruction attrs;
  addInts(attrs, "strides", {2, 1});
  addInts(attrs, "dilations", {1, 2});
  addInts(attrs, "pads", {1, 0, 2, 1});
  addInt(attrs, "group", 2);
  std::string error;
  EXPECT_FALSE(runKernel("conv", {x.view({2, 4, 7, 6}), w.view({6, 2, 3, 2})},
                         {y.view({2, 6, 4, 4})}, attrs, &error));
  EXPECT_NE(error.find("output size does not match"), std::string::npos);
}

TEST(Kernels, TransposeAndSlice) {
  Buf x{randomVec(2 * 3 * 4, 11)}, t{std::vector<float>(24)}, s{std::vector<float>(4)};
  ds::plan::Instruction perm;
  auto *p = perm.add_attributes();
  p->set_name("perm");
  for (int v : {2, 0, 1})
    p->mutable_ints()->add_values(v);
  ASSERT_TRUE(runKernel("transpose", {x.view({2, 3, 4})}, {t.view({4, 2, 3})}, perm));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        ASSERT_EQ(t.v[(k * 2 + i) * 3 + j], x.v[(i * 3 + j) * 4 + k]);
  // x[1, ::-2, 1:3] -> shape [1, 2, 2], rows 2 and 0.
  ds::plan::Instruction slice;
  auto *st = slice.add_attributes();
  st->set_name("starts");
  for (int v : {1, 2, 1})
    st->mutable_ints()->add_values(v);
  auto *sp = slice.add_attributes();
  sp->set_name("steps");
  for (int v : {1, -2, 1})
    sp->mutable_ints()->add_values(v);
  ASSERT_TRUE(runKernel("slice", {x.view({2, 3, 4})}, {s.view({1, 2, 2})}, slice));
  EXPECT_EQ(s.v[0], x.v[(1 * 3 + 2) * 4 + 1]);
  EXPECT_EQ(s.v[3], x.v[(1 * 3 + 0) * 4 + 2]);
}

} // namespace

// Tensor-parallel slices: a [3 blocks x 4 parts x 2] axis between an outer
// dimension of 2 and an inner one of 3; each rank's slice holds, for every
// outer index and block, its own 2 rows, and joining the slices of all
// ranks rebuilds the tensor.
TEST(TpSlice, CutAndJoinInBlocks) {
  std::vector<int64_t> whole{2, 3 * 4 * 2, 3};
  int64_t n = 2 * 24 * 3;
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i)
    t[i] = static_cast<int32_t>(i);
  ds::rt::TpLayout layout(whole, 1, 4, 3);
  std::vector<int32_t> rebuilt(n, -1);
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> slice(n / 4);
    layout.cut(reinterpret_cast<const unsigned char *>(t.data()),
               reinterpret_cast<unsigned char *>(slice.data()), r, 4);
    // Element [o][b*2 + c][k] of the slice is [o][(b*4 + r)*2 + c][k].
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t k = 0; k < 3; ++k)
            EXPECT_EQ(slice[((o * 6) + b * 2 + c) * 3 + k],
                      t[((o * 24) + (b * 4 + r) * 2 + c) * 3 + k]);
    layout.join(reinterpret_cast<const unsigned char *>(slice.data()),
                reinterpret_cast<unsigned char *>(rebuilt.data()), r, 4);
  }
  EXPECT_EQ(rebuilt, t);
}
