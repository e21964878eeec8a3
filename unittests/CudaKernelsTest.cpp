//===- CudaKernelsTest.cpp - every CUDA kernel against its CPU twin -------===//
//
// Part of the ds project. For each kernel the CUDA backend has: random
// inputs, the CPU kernel on the host, the CUDA kernel on the device, the
// results compared element by element. Tolerances (relative, with an
// absolute floor of the same size for values near zero): f32 1e-5 for
// elementwise kernels and 1e-4 for GEMMs and reductions (another
// summation order), f16 2e-3, bf16 1.6e-2 (their rounding), integers and
// booleans exact. Without a CUDA device the binary exits 77, which ctest
// reports as skipped (label gpu).
//
//===----------------------------------------------------------------------===//

#include "Device.h"

#include "ds/Support/ZeroOne.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

using namespace ds::rt;

namespace {

std::unique_ptr<Device> gDevice;

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> host;
  void *device = nullptr;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  size_t bytes() const { return numel() * dtypeSize(dtype); }
  TensorView view(bool onDevice) {
    TensorView t;
    t.data = onDevice ? device : host.data();
    t.dtype = dtype;
    t.shape = shape;
    return t;
  }
};

/// A tensor of `shape` with values from N(0,1) (positive with `positive`;
/// small integers for integer types; booleans half true).
Tensor random(DType t, std::vector<int64_t> shape, uint32_t seed,
              bool positive = false) {
  Tensor x;
  x.dtype = t;
  x.shape = std::move(shape);
  x.host.resize(std::max<size_t>(x.bytes(), 1));
  std::mt19937 g(seed);
  std::normal_distribution<double> d;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = d(g);
    if (positive)
      v = std::fabs(v) + 0.1;
    if (t == DType::I64 || t == DType::I32)
      v = std::round(v * 3);
    if (t == DType::Bool)
      v = v > 0;
    storeD(x.host.data(), t, i, v);
  }
  return x;
}

Tensor empty(DType t, std::vector<int64_t> shape) {
  Tensor x;
  x.dtype = t;
  x.shape = std::move(shape);
  x.host.assign(std::max<size_t>(x.bytes(), 1), 0);
  return x;
}

struct Attr {
  std::string name;
  int64_t i = 0;
  double f = 0;
  std::vector<int64_t> ints;
  int kind = 0; // 0 int, 1 float, 2 ints, 3 string, 4 floats
  std::string s;
  std::vector<double> floats = {};
};

Attr I(const char *n, int64_t v) { return {n, v, 0, {}, 0, ""}; }
Attr F(const char *n, double v) { return {n, 0, v, {}, 1, ""}; }
Attr L(const char *n, std::vector<int64_t> v) { return {n, 0, 0, std::move(v), 2, ""}; }
Attr S(const char *n, const char *v) { return {n, 0, 0, {}, 3, v}; }
Attr FL(const char *n, std::vector<double> v) {
  return {n, 0, 0, {}, 4, "", std::move(v)};
}

/// Runs `name` on the CPU and on the device; returns the worst relative
/// error over the outputs (all but a GEMM's workspace).
double compare(const char *name, std::vector<Tensor> ins,
               std::vector<Tensor> outs, std::vector<Attr> attrs = {}) {
  ds::plan::Instruction pi;
  for (const Attr &a : attrs) {
    auto *pa = pi.add_attributes();
    pa->set_name(a.name);
    if (a.kind == 0)
      pa->set_i(a.i);
    else if (a.kind == 1)
      pa->set_f(a.f);
    else if (a.kind == 3)
      pa->set_s(a.s);
    else if (a.kind == 4)
      for (double v : a.floats)
        pa->mutable_floats()->add_values(v);
    else
      for (int64_t v : a.ints)
        pa->mutable_ints()->add_values(v);
  }
  const KernelInfo *cpu = findKernel(name);
  EXPECT_NE(cpu, nullptr) << name;
  if (!cpu)
    return INFINITY;
  if (!gDevice) {
    // --cpu-only: the cases themselves (operands, attributes) are valid.
    KernelContext c{{}, {}, Attrs(&pi), 7, {}, NAN, nullptr};
    for (Tensor &t : ins)
      c.in.push_back(t.view(false));
    for (Tensor &t : outs)
      c.out.push_back(t.view(false));
    EXPECT_TRUE(cpu->fn(c)) << name << ": " << c.error;
    return 0;
  }
  const KernelInfo *gpu = gDevice->kernel(name);
  EXPECT_NE(gpu, nullptr) << name;
  if (!gpu)
    return INFINITY;
  std::string err;
  std::vector<Tensor> gpuOuts = outs;
  for (Tensor &t : ins) {
    t.device = gDevice->allocate(t.host.size(), err);
    EXPECT_TRUE(gDevice->toDevice(t.device, t.host.data(), t.host.size(), err))
        << err;
  }
  for (Tensor &t : gpuOuts)
    t.device = gDevice->allocate(t.host.size(), err);
  KernelContext c{{}, {}, Attrs(&pi), 7, {}, NAN, nullptr};
  KernelContext g{{}, {}, Attrs(&pi), 7, {}, NAN, nullptr};
  for (Tensor &t : ins) {
    c.in.push_back(t.view(false));
    g.in.push_back(t.view(true));
  }
  for (Tensor &t : outs)
    c.out.push_back(t.view(false));
  for (Tensor &t : gpuOuts)
    g.out.push_back(t.view(true));
  EXPECT_TRUE(cpu->fn(c)) << name << ": " << c.error;
  EXPECT_TRUE(gpu->fn(g)) << name << ": " << g.error;
  EXPECT_TRUE(gDevice->synchronize(err)) << name << ": " << err;
  double worst = 0;
  bool isGemm = std::string(name) == "matmul" || std::string(name) == "gemm";
  for (size_t k = 0; k < outs.size() && !(isGemm && k > 0); ++k) {
    Tensor &want = outs[k], &got = gpuOuts[k];
    EXPECT_TRUE(gDevice->toHost(got.host.data(), got.device, got.host.size(), err));
    for (int64_t i = 0; i < want.numel(); ++i) {
      double a = loadD(want.host.data(), want.dtype, i);
      double b = loadD(got.host.data(), got.dtype, i);
      if (std::isnan(a) && std::isnan(b))
        continue;
      worst = std::max(worst, std::fabs(a - b) / std::max(1.0, std::fabs(a)));
    }
  }
  for (Tensor &t : ins)
    gDevice->release(t.device);
  for (Tensor &t : gpuOuts)
    gDevice->release(t.device);
  return worst;
}

double tol(DType t, bool accumulates) {
  switch (t) {
  case DType::F16: return 2e-3;
  case DType::BF16: return 1.6e-2;
  case DType::F32: return accumulates ? 1e-4 : 1e-5;
  default: return 0;
  }
}

TEST(Cuda, BinaryBroadcast) {
  for (const char *op : {"add", "sub", "mul", "div", "max", "min", "pow"})
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      bool pow = std::string(op) == "pow";
      EXPECT_LE(compare(op, {random(t, {3, 1, 5}, 1, pow), random(t, {4, 5}, 2)},
                        {empty(t, {3, 4, 5})}),
                tol(t, pow))
          << op << " " << dtypeName(t);
    }
  for (const char *op : {"equal", "less", "less_or_equal", "greater",
                         "greater_or_equal"})
    EXPECT_EQ(compare(op, {random(DType::I64, {6, 1}, 3), random(DType::I64, {7}, 4)},
                      {empty(DType::Bool, {6, 7})}),
              0)
        << op;
  for (const char *op : {"and", "or", "xor"})
    EXPECT_EQ(compare(op, {random(DType::Bool, {5, 5}, 5), random(DType::Bool, {5}, 6)},
                      {empty(DType::Bool, {5, 5})}),
              0)
        << op;
  EXPECT_EQ(compare("div", {random(DType::I64, {9}, 7), random(DType::I64, {9}, 8, true)},
                    {empty(DType::I64, {9})}),
            0);
}

// Fusion: the GELU chain of x + b and attention's scale and mask
// (FusedProgram.h opcodes). CUDA's tanh against Vec.h's (4 ulp) through a
// chain of nine instructions: 1e-5 relative.
TEST(Cuda, FusedElementwise) {
  EXPECT_LE(compare("fused_elementwise",
                    {random(DType::F32, {3, 5, 300}, 41), random(DType::F32, {300}, 42)},
                    {empty(DType::F32, {3, 5, 300})},
                    {L("program", {1, 0, 1, 0, 3, 2, -1, 0, 5, 2, -2, 0, 3, 4, -3, 0,
                                   1, 2, 5, 0, 3, 6, -4, 0, 15, 7, 0, 0, 1, 8, -5, 0,
                                   3, 3, 9, 0}),
                     FL("constants", {0.5, 3.0, 0.044715, 0.7978845608, 1.0})}),
            1e-5);
  EXPECT_LE(compare("fused_elementwise",
                    {random(DType::F32, {2, 3, 8, 8}, 43), random(DType::Bool, {8, 8}, 44)},
                    {empty(DType::F32, {2, 3, 8, 8})},
                    {L("program", {3, 0, -1, 0, 18, 1, -2, 2}),
                     FL("constants", {0.125, -1e30})}),
            0);
}

// Fused attention (Cpu/Attention.cpp tiles and an online softmax, the
// CUDA twin one thread per row): another summation order, 1e-4 relative.
// T = 70 crosses the CPU's 64-row tiles; a causal i1 mask and an additive
// one; the gradient on random result, lse and incoming gradient (both
// backends compute the same expression from them).
TEST(Cuda, FusedAttention) {
  std::vector<int64_t> s = {2, 3, 70, 16}, l = {2, 3, 70};
  for (const char *kind : {"fill_true", "add"}) {
    bool add = std::string(kind) == "add";
    Tensor mask = add ? random(DType::F32, {2, 1, 1, 70}, 61)
                      : random(DType::Bool, {1, 1, 70, 70}, 62);
    std::vector<Attr> attrs = {F("scale", 0.25), S("mask_kind", kind),
                               F("fill", -INFINITY)};
    EXPECT_LE(compare("fused_attention",
                      {random(DType::F32, s, 63), random(DType::F32, s, 64),
                       random(DType::F32, s, 65), mask},
                      {empty(DType::F32, s), empty(DType::F32, l)}, attrs),
              1e-4)
        << kind;
    EXPECT_LE(compare("fused_attention_grad",
                      {random(DType::F32, s, 63), random(DType::F32, s, 64),
                       random(DType::F32, s, 65), random(DType::F32, s, 66),
                       random(DType::F32, l, 67), random(DType::F32, s, 68),
                       mask},
                      {empty(DType::F32, s), empty(DType::F32, s),
                       empty(DType::F32, s)},
                      attrs),
              1e-4)
        << kind;
  }
}

TEST(Cuda, Unary) {
  for (const char *op : {"neg", "abs", "exp", "log", "sqrt", "reciprocal",
                         "erf", "tanh", "relu", "sigmoid"})
    for (DType t : {DType::F32, DType::BF16}) {
      bool positive = std::string(op) == "log" || std::string(op) == "sqrt" ||
                      std::string(op) == "reciprocal";
      EXPECT_LE(compare(op, {random(t, {257}, 9, positive)}, {empty(t, {257})}),
                tol(t, false) * 4)
          << op << " " << dtypeName(t);
    }
  EXPECT_EQ(compare("not", {random(DType::Bool, {33}, 10)}, {empty(DType::Bool, {33})}), 0);
}

TEST(Cuda, Activations) {
  for (const char *kind : {"clip", "leaky_relu", "elu", "selu", "celu",
                           "softplus", "softsign", "hard_sigmoid",
                           "hard_swish", "sin", "cos"})
    for (DType t : {DType::F32, DType::BF16}) {
      std::vector<Attr> attrs = {S("kind", kind), F("alpha", 0.5),
                                 F("beta", 0.75)};
      EXPECT_LE(compare("activation", {random(t, {257}, 16)}, {empty(t, {257})},
                        attrs),
                tol(t, false))
          << kind << " " << dtypeName(t);
      EXPECT_LE(compare("activation_grad",
                        {random(t, {257}, 17), random(t, {257}, 18)},
                        {empty(t, {257})}, attrs),
                tol(t, false))
          << kind << " gradient " << dtypeName(t);
    }
}

TEST(Cuda, Resize) {
  struct Case {
    std::vector<int64_t> in, out;
    std::vector<double> scales;
    const char *mode, *coord, *nearest;
  };
  const Case cases[] = {
      {{2, 3, 5, 6}, {2, 3, 10, 12}, {2, 2}, "linear", "half_pixel", "floor"},
      {{2, 3, 5, 6}, {2, 3, 9, 4}, {1.8, 0.7}, "linear", "align_corners", "floor"},
      {{2, 3, 7}, {2, 3, 10}, {1.5}, "linear", "pytorch_half_pixel", "floor"},
      {{1, 2, 3, 4, 3}, {1, 2, 6, 8, 6}, {2, 2, 2}, "linear", "half_pixel", "floor"},
      {{2, 3, 5, 6}, {2, 3, 10, 3}, {2, 0.5}, "nearest", "asymmetric", "floor"},
      {{2, 3, 5, 6}, {2, 3, 8, 9}, {1.6, 1.5}, "nearest", "half_pixel",
       "round_prefer_ceil"},
  };
  for (const Case &c : cases)
    for (DType t : {DType::F32, DType::BF16}) {
      std::vector<Attr> attrs = {S("mode", c.mode),
                                 S("coordinate_transformation_mode", c.coord),
                                 S("nearest_mode", c.nearest),
                                 FL("scales", c.scales)};
      EXPECT_LE(compare("resize", {random(t, c.in, 19)}, {empty(t, c.out)},
                        attrs),
                tol(t, true))
          << c.mode << " " << c.coord << " " << dtypeName(t);
      EXPECT_LE(compare("resize_grad", {random(t, c.out, 20)},
                        {empty(t, c.in)}, attrs),
                tol(t, true))
          << c.mode << " " << c.coord << " gradient " << dtypeName(t);
    }
}

TEST(Cuda, CastWhereCopy) {
  for (DType from : {DType::F32, DType::F16, DType::BF16, DType::I64})
    for (DType to : {DType::F32, DType::F16, DType::BF16, DType::I64})
      EXPECT_EQ(compare("cast", {random(from, {4, 9}, 11)}, {empty(to, {4, 9})}), 0)
          << dtypeName(from) << " -> " << dtypeName(to);
  EXPECT_EQ(compare("where", {random(DType::Bool, {4, 1}, 12), random(DType::F32, {4, 6}, 13),
                              random(DType::F32, {6}, 14)},
                    {empty(DType::F32, {4, 6})}),
            0);
  EXPECT_EQ(compare("reshape", {random(DType::F32, {4, 6}, 15)}, {empty(DType::F32, {24})}), 0);
  EXPECT_EQ(compare("copy", {random(DType::BF16, {4, 6}, 16)}, {empty(DType::BF16, {4, 6})}), 0);
  EXPECT_EQ(compare("transfer", {random(DType::F32, {3, 5}, 17)}, {empty(DType::F32, {3, 5})}), 0);
  EXPECT_EQ(compare("transpose", {random(DType::F32, {2, 3, 4, 5}, 17)},
                    {empty(DType::F32, {2, 4, 3, 5})}, {L("perm", {0, 2, 1, 3})}),
            0);
}

TEST(Cuda, MatMul) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    auto ws = [&](int64_t n) { return empty(DType::F32, {n}); };
    // A shared right operand, equal batches, broadcast batches, transposes.
    EXPECT_LE(compare("matmul", {random(t, {2, 3, 4, 5}, 20), random(t, {5, 6}, 21)},
                      {empty(t, {2, 3, 4, 6}), ws(1024)}),
              tol(t, true));
    EXPECT_LE(compare("matmul", {random(t, {2, 3, 4, 5}, 22), random(t, {2, 3, 5, 6}, 23)},
                      {empty(t, {2, 3, 4, 6}), ws(1024)}),
              tol(t, true));
    EXPECT_LE(compare("matmul", {random(t, {2, 1, 4, 5}, 24), random(t, {3, 5, 6}, 25)},
                      {empty(t, {2, 3, 4, 6}), ws(1024)}),
              tol(t, true));
    EXPECT_LE(compare("matmul", {random(t, {3, 5, 4}, 26), random(t, {3, 6, 5}, 27)},
                      {empty(t, {3, 4, 6}), ws(1024)}, {I("trans_a", 1), I("trans_b", 1)}),
              tol(t, true));
    EXPECT_LE(compare("gemm", {random(t, {5, 4}, 28), random(t, {6, 5}, 29), random(t, {6}, 30)},
                      {empty(t, {4, 6}), ws(1024)},
                      {I("trans_a", 1), I("trans_b", 1), F("alpha", 0.5), F("beta", 2.0)}),
              tol(t, true));
  }
}

TEST(Cuda, Reductions) {
  for (const char *op : {"reduce_sum", "reduce_mean", "reduce_max"})
    for (DType t : {DType::F32, DType::BF16}) {
      EXPECT_LE(compare(op, {random(t, {3, 4, 5}, 31)}, {empty(t, {4})}, {L("axes", {0, 2})}),
                tol(t, true))
          << op;
      EXPECT_LE(compare(op, {random(t, {3, 4, 5}, 32)}, {empty(t, {3, 5})}, {L("axes", {1})}),
                tol(t, true))
          << op;
    }
  for (const char *op : {"softmax", "log_softmax"})
    for (int64_t axis : {0, 2})
      EXPECT_LE(compare(op, {random(DType::F32, {3, 4, 5}, 33)}, {empty(DType::F32, {3, 4, 5})},
                        {I("axis", axis)}),
                1e-5)
          << op << " axis " << axis;
}

Tensor ints(DType t, std::vector<int64_t> shape, std::vector<int64_t> v) {
  Tensor x = empty(t, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i)
    storeI(x.host.data(), t, static_cast<int64_t>(i), v[i]);
  return x;
}

Tensor scalarF(double v) {
  Tensor x = empty(DType::F32, {});
  storeD(x.host.data(), DType::F32, 0, v);
  return x;
}

TEST(Cuda, Movement) {
  for (DType t : {DType::F32, DType::BF16}) {
    EXPECT_EQ(compare("gather", {random(t, {7, 4}, 40), ints(DType::I64, {2, 3}, {0, 6, -1, 3, 3, 2})},
                      {empty(t, {2, 3, 4})}),
              0);
    EXPECT_EQ(compare("gather", {random(t, {2, 7, 3}, 41), ints(DType::I64, {2}, {5, 1})},
                      {empty(t, {2, 2, 3})}, {I("axis", 1)}),
              0);
    EXPECT_LE(compare("gather_grad", {random(t, {2, 3, 4}, 42), ints(DType::I64, {2, 3}, {0, 6, -1, 3, 3, 2})},
                      {empty(t, {7, 4})}),
              tol(t, true));
    EXPECT_EQ(compare("expand", {random(t, {3, 1}, 43)}, {empty(t, {2, 3, 4})}), 0);
    EXPECT_EQ(compare("concat", {random(t, {2, 3}, 44), random(t, {2, 5}, 45)},
                      {empty(t, {2, 8})}, {I("axis", 1)}),
              0);
    EXPECT_EQ(compare("split", {random(t, {4, 6}, 46)}, {empty(t, {1, 6}), empty(t, {3, 6})},
                      {I("axis", 0)}),
              0);
    EXPECT_EQ(compare("slice", {random(t, {5, 6}, 47)}, {empty(t, {2, 3})},
                      {L("starts", {1, 0}), L("steps", {2, 2})}),
              0);
    EXPECT_EQ(compare("slice_grad", {random(t, {2, 3}, 48)}, {empty(t, {5, 6})},
                      {L("starts", {1, 0}), L("steps", {2, 2})}),
              0);
    EXPECT_EQ(compare("trilu", {random(t, {2, 4, 4}, 49)}, {empty(t, {2, 4, 4})},
                      {I("upper", 0), I("k", 1)}),
              0);
  }
  EXPECT_EQ(compare("range", {ints(DType::I64, {}, {3}), ints(DType::I64, {}, {20}),
                              ints(DType::I64, {}, {2})},
                    {empty(DType::I64, {9})}),
            0);
  EXPECT_EQ(compare("shard", {random(DType::F32, {8}, 50)}, {empty(DType::F32, {8})}), 0);
}

TEST(Cuda, NormsLossesDropout) {
  for (DType t : {DType::F32, DType::BF16}) {
    EXPECT_LE(compare("layer_norm", {random(t, {6, 10}, 60), random(t, {10}, 61), random(t, {10}, 62)},
                      {empty(t, {6, 10})}, {I("axis", 1), F("epsilon", 1e-5)}),
              tol(t, true));
    EXPECT_LE(compare("layer_norm_grad", {random(t, {6, 10}, 63), random(t, {6, 10}, 64), random(t, {10}, 65)},
                      {empty(t, {6, 10}), empty(t, {10}), empty(t, {10})},
                      {I("axis", 1), F("epsilon", 1e-5)}),
              tol(t, true));
    for (int64_t log : {0, 1})
      EXPECT_LE(compare("softmax_grad", {random(t, {4, 7}, 66), random(t, {4, 7}, 67)},
                        {empty(t, {4, 7})}, {I("axis", 1), I("log", log)}),
                tol(t, true));
  }
  Tensor labels = ints(DType::I64, {4, 3}, {0, 4, 2, 1, 3, 3, 0, 2, 4, 1, 1, 0});
  EXPECT_LE(compare("softmax_cross_entropy_loss", {random(DType::F32, {4, 5, 3}, 68), labels},
                    {empty(DType::F32, {}), empty(DType::F32, {4, 5, 3})}),
            1e-5);
  EXPECT_LE(compare("nll_loss", {random(DType::F32, {4, 5, 3}, 69), labels},
                    {empty(DType::F32, {})}),
            1e-5);
  EXPECT_LE(compare("loss_grad", {scalarF(1.0), random(DType::F32, {4, 5, 3}, 70), labels},
                    {empty(DType::F32, {4, 5, 3})}),
            1e-5);
  EXPECT_EQ(compare("dropout", {random(DType::F32, {1000}, 71)},
                    {empty(DType::F32, {1000}), empty(DType::Bool, {1000})},
                    {I("training", 1), F("ratio", 0.3), I("seed", 1234)}),
            0);
}

TEST(Cuda, Optimizers) {
  auto f = [](uint32_t seed) { return random(DType::F32, {300}, seed, true); };
  Tensor step = ints(DType::I64, {}, {3});
  EXPECT_LE(compare("adam", {f(80), f(81), f(82), f(83), step},
                    {empty(DType::F32, {300}), empty(DType::F32, {300}), empty(DType::F32, {300})},
                    {F("lr", 1e-2), F("weight_decay", 0.1), I("decoupled", 1)}),
            1e-5);
  EXPECT_LE(compare("adam", {f(84), f(85), f(86), f(87), step},
                    {empty(DType::F32, {300}), empty(DType::F32, {300}), empty(DType::F32, {300})},
                    {F("lr", 1e-2), F("weight_decay", 0.1), I("lamb", 1)}),
            1e-5);
  EXPECT_LE(compare("sgd", {f(88), f(89), f(90), step},
                    {empty(DType::F32, {300}), empty(DType::F32, {300})},
                    {F("lr", 0.1), F("momentum", 0.9), F("dampening", 0.1)}),
            1e-5);
  EXPECT_LE(compare("onnx_update", {scalarF(0.1), ints(DType::I64, {}, {2}), f(91), f(92), f(93), f(94)},
                    {empty(DType::F32, {300}), empty(DType::F32, {300}), empty(DType::F32, {300})},
                    {S("kind", "adam"), F("epsilon", 1e-6)}),
            1e-5);
}

/// The multi-tensor updates: three tensors of sizes that do not fill a
/// block, the CPU kernel the reference.
TEST(Cuda, MultiTensorOptimizers) {
  auto f = [](int64_t n, uint32_t seed) {
    return random(DType::F32, {n}, seed, true);
  };
  auto e = [](int64_t n) { return empty(DType::F32, {n}); };
  Tensor step = ints(DType::I64, {}, {3});
  const int64_t sizes[3] = {300, 7, 1030};
  std::vector<Tensor> ins, outs;
  for (int g = 0; g < 4; ++g)
    for (int i = 0; i < 3; ++i)
      ins.push_back(f(sizes[i], 200 + 3 * g + i));
  ins.push_back(step);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 3; ++i)
      outs.push_back(e(sizes[i]));
  EXPECT_LE(compare("multi_adam", ins, outs,
                    {F("lr", 1e-2), F("weight_decay", 0.1), I("decoupled", 1)}),
            1e-5);
  std::vector<Tensor> sgdIns, sgdOuts;
  for (int g = 0; g < 3; ++g)
    for (int i = 0; i < 3; ++i)
      sgdIns.push_back(f(sizes[i], 220 + 3 * g + i));
  sgdIns.push_back(step);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i)
      sgdOuts.push_back(e(sizes[i]));
  EXPECT_LE(compare("multi_sgd", sgdIns, sgdOuts,
                    {F("lr", 0.1), F("momentum", 0.9), F("dampening", 0.1)}),
            1e-5);
}

/// 0/1 Adam on one rank (its exchanges are the identity there), one case
/// per phase: its counters are those of the step (ds::zeroone), the
/// accumulator and lrs not zero where the local-step phase has them.
TEST(Cuda, ZeroOneAdam) {
  namespace zo = ds::zeroone;
  zo::Policy pol{6, 2, 2, 4};
  auto f = [](uint32_t seed) { return random(DType::F32, {300}, seed, true); };
  for (int64_t t : {1, 4, 5, 7, 9, 12}) {
    zo::Counters c = zo::countersBefore(t, pol);
    double lrs = t >= zo::firstFrozenStep(pol) ? 3e-2 : 0.0;
    int64_t lrsBits;
    std::memcpy(&lrsBits, &lrs, 8);
    Tensor v = f(100 + static_cast<uint32_t>(t)); // a positive variance
    EXPECT_LE(compare("zero_one_adam",
                      {f(101), f(102), f(103), v, empty(DType::F32, {304}),
                       empty(DType::F32, {304}), f(104),
                       ints(DType::I64, {5}, {c.varInterval, c.varCounter,
                                              c.localInterval, c.localCounter,
                                              lrsBits}),
                       ints(DType::I64, {}, {t})},
                      {empty(DType::F32, {300}), empty(DType::F32, {300}),
                       empty(DType::F32, {300}), empty(DType::F32, {304}),
                       empty(DType::F32, {304}), empty(DType::F32, {300}),
                       empty(DType::I64, {5})},
                      {F("lr", 1e-2), F("weight_decay", 0.1),
                       I("var_freeze_step", pol.varFreezeStep),
                       I("var_update_scaler", pol.varUpdateScaler),
                       I("local_step_scaler", pol.localStepScaler),
                       I("local_step_clipper", pol.localStepClipper)}),
              1e-5)
        << "step " << t;
  }
}

TEST(Cuda, OneBitLamb) {
  // One rank: the warm-up (Lamb, steps 1-4) and the frozen steps after
  // freeze_step 4 (no exchange on one rank; the factor and its bounds).
  auto f = [](uint32_t seed) { return random(DType::F32, {300}, seed, true); };
  for (int64_t t : {1, 3, 4, 5, 6, 9}) {
    EXPECT_LE(compare("onebit_lamb",
                      {f(111), f(112), f(113), f(114), f(115),
                       empty(DType::F32, {304}), empty(DType::F32, {304}),
                       random(DType::F32, {2}, 116, true),
                       ints(DType::I64, {}, {t})},
                      {empty(DType::F32, {300}), empty(DType::F32, {300}),
                       empty(DType::F32, {300}), empty(DType::F32, {300}),
                       empty(DType::F32, {304}), empty(DType::F32, {304}),
                       empty(DType::F32, {2})},
                      {F("lr", 1e-2), F("weight_decay", 0.01),
                       I("freeze_step", 4), F("factor_threshold", 0.1)}),
              1e-5)
        << "step " << t;
  }
}

TEST(Cuda, QuantizedCollectives) {
  // ZeRO++ on one rank: 100 elements in blocks of 32 (4 scales + 100
  // int8 values = 116-byte records; the workspace holds two), as i32
  // words so that the records compare exactly; then 4 bits (52 bytes of
  // nibbles, padded to words).
  for (int bits : {8, 4}) {
    // Two records: 2 x 116 bytes at 8 bits, 2 x (16 + 52) at 4.
    int64_t words = bits == 8 ? 58 : 34;
    EXPECT_EQ(compare("quantized_all_gather",
                      {random(DType::F32, {100}, 117)},
                      {empty(DType::F32, {100}), empty(DType::I32, {words})},
                      {I("block_size", 32), I("bits", bits)}),
              0)
        << bits << " bits";
    EXPECT_EQ(compare("quantized_reduce_scatter",
                      {random(DType::F32, {100}, 118)},
                      {empty(DType::F32, {100}), empty(DType::I32, {words})},
                      {I("block_size", 32), I("bits", bits)}),
              0)
        << bits << " bits";
  }
}

TEST(Cuda, OneRankCollectives) {
  // Without a communicator each collective is its rank's copy.
  EXPECT_EQ(compare("all_reduce", {random(DType::F32, {9}, 95)}, {empty(DType::F32, {9})}), 0);
  EXPECT_EQ(compare("all_gather", {random(DType::BF16, {9}, 96)}, {empty(DType::BF16, {9})}), 0);
  EXPECT_EQ(compare("reduce_scatter", {random(DType::F32, {9}, 97)}, {empty(DType::F32, {9})}), 0);
  EXPECT_EQ(compare("check_overflow", {random(DType::F32, {9}, 98)}, {empty(DType::F32, {})}), 0);
  EXPECT_EQ(compare("wait", {random(DType::F32, {9}, 99)}, {}), 0);
}

TEST(Cuda, ConvAndPooling) {
  // Convolution (f32): groups with strides, dilations and asymmetric pads;
  // depthwise; pointwise; 1-D. The CPU runs im2col + GEMM or direct loops
  // in f32, the device sums in double: 1e-4.
  struct ConvCase {
    std::vector<int64_t> x, w, y;
    std::vector<Attr> attrs;
  };
  const std::vector<ConvCase> convs = {
      {{2, 4, 7, 6}, {6, 2, 3, 2}, {2, 6, 4, 5},
       {L("strides", {2, 1}), L("dilations", {1, 2}), L("pads", {1, 0, 2, 1}), I("group", 2)}},
      {{2, 6, 9, 9}, {6, 1, 3, 3}, {2, 6, 5, 5},
       {L("strides", {2, 2}), L("dilations", {1, 1}), L("pads", {1, 1, 1, 1}), I("group", 6)}},
      {{3, 5, 8, 8}, {4, 5, 1, 1}, {3, 4, 8, 8},
       {L("strides", {1, 1}), L("dilations", {1, 1}), L("pads", {0, 0, 0, 0}), I("group", 1)}},
      {{2, 3, 11}, {4, 3, 3}, {2, 4, 5},
       {L("strides", {2}), L("dilations", {1}), L("pads", {1, 0}), I("group", 1)}},
  };
  uint32_t seed = 200;
  for (const ConvCase &c : convs) {
    const DType f = DType::F32;
    EXPECT_LE(compare("conv", {random(f, c.x, seed), random(f, c.w, seed + 1), random(f, {c.w[0]}, seed + 2)},
                      {empty(f, c.y)}, c.attrs),
              tol(f, true));
    EXPECT_LE(compare("conv_grad_input", {random(f, c.y, seed + 3), random(f, c.w, seed + 4)},
                      {empty(f, c.x)}, c.attrs),
              tol(f, true));
    EXPECT_LE(compare("conv_grad_weight", {random(f, c.x, seed + 5), random(f, c.y, seed + 6)},
                      {empty(f, c.w)}, c.attrs),
              tol(f, true));
    seed += 7;
  }
  // Pooling: the same f32 arithmetic in the same order as the CPU, so f32
  // is exact; f16 and bf16 round the same f32 values.
  for (DType t : {DType::F32, DType::BF16}) {
    std::vector<Attr> max = {L("kernel_shape", {3, 3}), L("strides", {2, 2}),
                             L("pads", {1, 1, 1, 1}), L("dilations", {1, 2})};
    std::vector<Attr> avg = {L("kernel_shape", {3, 2}), L("strides", {2, 1}),
                             L("pads", {1, 0, 1, 1}), I("count_include_pad", 0)};
    std::vector<Attr> avgPad = avg;
    avgPad.back() = I("count_include_pad", 1);
    EXPECT_LE(compare("max_pool", {random(t, {2, 3, 9, 10}, 240)}, {empty(t, {2, 3, 5, 4})}, max), 0.0);
    EXPECT_LE(compare("max_pool_grad", {random(t, {2, 3, 9, 10}, 241), random(t, {2, 3, 5, 4}, 242)},
                      {empty(t, {2, 3, 9, 10})}, max),
              0.0);
    for (const std::vector<Attr> &a : {avg, avgPad}) {
      EXPECT_LE(compare("avg_pool", {random(t, {2, 3, 7, 6}, 243)}, {empty(t, {2, 3, 4, 6})}, a), 0.0);
      EXPECT_LE(compare("avg_pool_grad", {random(t, {2, 3, 4, 6}, 244)}, {empty(t, {2, 3, 7, 6})}, a),
                0.0);
    }
  }
}

// TopK (misc family): both select in Support/TopK.h's order, so values
// and indices agree exactly; the gradient adds one value per position.
TEST(Cuda, TopK) {
  for (DType t : {DType::F32, DType::BF16})
    for (int64_t largest : {1, 0}) {
      std::vector<Attr> attrs = {I("axis", 1), I("k", 3), I("largest", largest)};
      EXPECT_EQ(compare("topk", {random(t, {4, 37, 5}, 101)},
                        {empty(t, {4, 3, 5}), empty(DType::I64, {4, 3, 5})},
                        attrs),
                0)
          << dtypeName(t) << " largest " << largest;
    }
  Tensor idx = empty(DType::I64, {4, 3, 5});
  for (int64_t i = 0; i < idx.numel(); ++i)
    storeD(idx.host.data(), DType::I64, i, (i / 5 % 3) * 11 + i % 2);
  EXPECT_EQ(compare("topk_grad", {random(DType::F32, {4, 3, 5}, 102), idx},
                    {empty(DType::F32, {4, 37, 5})}, {I("axis", 1)}),
            0);
}

// EmbeddingBag (misc family): the forward sums each bag in the same order
// in f32 (exact for sum and max; mean divides the same sum); the gradient
// sums in f32 on the GPU and in double on the CPU (f32 rounding).
TEST(Cuda, EmbeddingBag) {
  Tensor idx = empty(DType::I64, {20}), bounds = empty(DType::I64, {7});
  for (int64_t i = 0; i < 20; ++i)
    storeD(idx.host.data(), DType::I64, i, (i * 7) % 13);
  const int64_t b[] = {0, 3, 3, 8, 9, 16, 20}; // an empty bag
  for (int64_t i = 0; i < 7; ++i)
    storeD(bounds.host.data(), DType::I64, i, b[i]);
  for (DType t : {DType::F32, DType::BF16})
    for (const char *mode : {"sum", "mean", "max"}) {
      std::vector<Attr> attrs = {S("mode", mode)};
      std::vector<Tensor> ins = {random(t, {13, 5}, 300), idx, bounds};
      if (std::string(mode) == "sum")
        ins.push_back(random(t, {20}, 301));
      EXPECT_LE(compare("embedding_bag", ins, {empty(t, {6, 5})}, attrs),
                tol(t, false))
          << dtypeName(t) << " " << mode;
      std::vector<Tensor> gins = {random(t, {6, 5}, 302), idx, bounds};
      if (std::string(mode) != "mean")
        gins.push_back(std::string(mode) == "sum" ? random(t, {20}, 303)
                                                  : random(t, {13, 5}, 304));
      EXPECT_LE(compare("embedding_bag_grad", gins, {empty(t, {13, 5})},
                        attrs),
                tol(t, true))
          << dtypeName(t) << " " << mode << " grad";
    }
}

TEST(Cuda, EveryKernelTested) {
  // The kernels above, so that a new CUDA kernel needs a test here.
  std::vector<std::string> tested = {
      "add", "sub", "mul", "div", "pow", "max", "min", "equal", "less",
      "less_or_equal", "greater", "greater_or_equal", "and", "or", "xor",
      "neg", "abs", "exp", "log", "sqrt", "reciprocal", "erf", "tanh",
      "relu", "sigmoid", "not", "cast", "where", "matmul", "gemm",
      "transpose", "reshape", "copy", "transfer", "reduce_sum", "reduce_mean",
      "reduce_max", "softmax", "log_softmax", "gather", "gather_grad",
      "expand", "concat", "split", "slice", "slice_grad", "trilu", "range",
      "shard", "layer_norm", "layer_norm_grad", "softmax_grad",
      "softmax_cross_entropy_loss", "nll_loss", "loss_grad", "dropout",
      "adam", "sgd", "onnx_update", "all_reduce", "all_gather",
      "reduce_scatter", "check_overflow", "wait", "activation",
      "activation_grad", "conv", "conv_grad_input", "conv_grad_weight",
      "max_pool", "max_pool_grad", "avg_pool", "avg_pool_grad", "topk",
      "topk_grad", "resize", "resize_grad", "fused_elementwise",
      "fused_attention", "fused_attention_grad",
      "zero_one_adam", "embedding_bag", "embedding_bag_grad", "onebit_lamb",
      "quantized_all_gather", "quantized_reduce_scatter", "multi_adam",
      "multi_sgd"};
  // Pipeline and tensor parallelism run on the CPU backend only so far
  // (the CUDA backend refuses stage and tensor-parallel plans): their
  // kernels have no CUDA twin yet.
  const std::vector<std::string> cpuOnly = {
      "pipe_send", "pipe_recv", "pipe_mark", "tied_grad_sum",
      "vocab_gather", "vocab_gather_grad", "vocab_cross_entropy",
      "vocab_cross_entropy_grad", "tp_rows", "sp_all_gather",
      "sp_reduce_scatter",
      // 1-bit Adam (docs/compression.md) runs on the CPU backend first.
      "onebit_adam", "onebit_adam_local", "compressed_reduce_scatter",
      "compressed_all_gather", "onebit_quantized_all_gather"};
  size_t twins = 0;
  for (const std::string &k : kernelNames()) {
    if (std::find(cpuOnly.begin(), cpuOnly.end(), k) != cpuOnly.end())
      continue;
    ++twins;
    EXPECT_NE(std::find(tested.begin(), tested.end(), k), tested.end())
        << "kernel '" << k << "' has no CUDA test";
  }
  if (gDevice)
    EXPECT_EQ(gDevice->kernelNames().size(), twins)
        << "every CPU kernel but the pipeline's and tensor parallelism's "
           "has a CUDA twin";
}

} // namespace

int main(int argc, char **argv) {
  bool cpuOnly = argc > 1 && std::string(argv[1]) == "--cpu-only";
  if (cpuOnly) {
    // The cases on the CPU kernels alone: runnable on any machine.
    std::printf("--cpu-only: checking the cases on the CPU kernels\n");
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
  }
  if (!builtWithCuda() || !cudaDeviceVisible()) {
    std::printf("no CUDA device visible: the CUDA kernel tests are skipped\n");
    return 77;
  }
  std::string err;
  gDevice = openCudaDevice(err);
  if (!gDevice) {
    std::printf("cannot open the CUDA device: %s\n", err.c_str());
    return 1;
  }
  std::printf("device: %s\n", gDevice->describe().c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
