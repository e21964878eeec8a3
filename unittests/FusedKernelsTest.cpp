//===- FusedKernelsTest.cpp - fused_elementwise against unfused kernels ---===//
//
// Part of the ds project. The fused kernel (Cpu/Fused.cpp) evaluates each
// instruction with the unfused f32 kernel's expression and approximations,
// so it is compared bit for bit (NaN equal to NaN) with the chain of
// unfused kernels (Cpu/Elementwise.cpp) run one after the other on whole
// tensors: every opcode alone, with broadcast operands, a constant, rows
// longer than the kernel's block, more threads, in place; then the GELU
// chain and attention's scale and mask. Bad programs and operands fail
// with a message.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "ds/Support/FusedProgram.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

using namespace ds::rt;
using ds::FusedOp;

namespace {

using ds::rt::test::view;

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<float> random(const std::vector<int64_t> &shape, unsigned seed,
                          float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(count(shape));
  for (float &x : v)
    x = u(g);
  return v;
}

/// Runs kernel `name`; its error message, or "" on success.
std::string run(const char *name, std::vector<TensorView> in, TensorView out,
                const std::vector<int64_t> &program = {},
                const std::vector<double> &constants = {}) {
  ds::plan::Instruction ins;
  if (!program.empty()) {
    auto *p = ins.add_attributes();
    p->set_name("program");
    for (int64_t v : program)
      p->mutable_ints()->add_values(v);
    auto *c = ins.add_attributes();
    c->set_name("constants");
    for (double v : constants)
      c->mutable_floats()->add_values(v);
  }
  const KernelInfo *k = findKernel(name);
  if (!k)
    return std::string("no kernel ") + name;
  KernelContext ctx{std::move(in), {out}, Attrs(&ins), 0, {}, NAN, nullptr};
  return k->fn(ctx) ? "" : (ctx.error.empty() ? "failed" : ctx.error);
}

/// Elements that differ in bits (NaNs are equal).
int64_t mismatches(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size())
    return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) &&
        std::memcmp(&a[i], &b[i], 4) != 0)
      ++bad;
  return bad;
}

int64_t op(FusedOp f) { return static_cast<int64_t>(f); }

// Every opcode alone against its kernel: unary ops on [7, 300] (rows
// longer than the 256-element block), binary ops on [7, 300] x [300] and
// on [7, 1] x [300] (the first operand broadcast along the row), and with
// a constant second operand.
TEST(FusedKernels, EveryOpcodeMatchesItsKernel) {
  std::vector<int64_t> shape = {7, 300};
  std::vector<float> x = random(shape, 1), row = random({300}, 2),
                     col = random({7, 1}, 3);
  for (int64_t o = ds::kFusedOpFirst; o <= ds::kFusedOpLast; ++o) {
    FusedOp f = static_cast<FusedOp>(o);
    const char *name = ds::fusedOpName(f);
    if (f == FusedOp::Where)
      continue; // below, with a mask
    std::vector<float> want(count(shape)), got(count(shape));
    if (ds::fusedArity(f) == 1) {
      ASSERT_EQ(run(name, {view(x, shape)}, view(want, shape)), "");
      ASSERT_EQ(run("fused_elementwise", {view(x, shape)}, view(got, shape),
                    {o, 0, 0, 0}),
                "");
      EXPECT_EQ(mismatches(got, want), 0) << name;
      continue;
    }
    for (auto *a : {&x, &col}) {
      std::vector<int64_t> as = a == &x ? shape : std::vector<int64_t>{7, 1};
      ASSERT_EQ(run(name, {view(*a, as), view(row, {300})}, view(want, shape)), "");
      ASSERT_EQ(run("fused_elementwise", {view(*a, as), view(row, {300})},
                    view(got, shape), {o, 0, 1, 0}),
                "");
      EXPECT_EQ(mismatches(got, want), 0) << name << " broadcast";
    }
    float two = 2.0f;
    ASSERT_EQ(run(name, {view(x, shape), view(&two, {})}, view(want, shape)), "");
    ASSERT_EQ(run("fused_elementwise", {view(x, shape)}, view(got, shape),
                  {o, 0, -1, 0}, {2.0}),
              "");
    EXPECT_EQ(mismatches(got, want), 0) << name << " constant";
  }
}

/// The tanh-GELU of x + b, 0.5 y (1 + tanh(0.7978845608 (y + 0.044715 y^3))),
/// as the unfused kernels compute it.
std::vector<float> geluUnfused(std::vector<float> &x, std::vector<float> &b,
                               const std::vector<int64_t> &shape) {
  std::vector<int64_t> row = {shape.back()};
  float c3 = 3.0f, k0 = 0.044715f, k1 = 0.7978845608f, one = 1.0f, half = 0.5f;
  int64_t n = count(shape);
  std::vector<float> y(n), y3(n), t0(n), t1(n), t2(n), t3(n), t4(n), t5(n), g(n);
  auto v = [&](std::vector<float> &t) { return view(t, shape); };
  auto s = [](float &c) { return view(&c, {}); };
  EXPECT_EQ(run("add", {v(x), view(b, row)}, v(y)), "");
  EXPECT_EQ(run("pow", {v(y), s(c3)}, v(y3)), "");
  EXPECT_EQ(run("mul", {v(y3), s(k0)}, v(t0)), "");
  EXPECT_EQ(run("add", {v(y), v(t0)}, v(t1)), "");
  EXPECT_EQ(run("mul", {v(t1), s(k1)}, v(t2)), "");
  EXPECT_EQ(run("tanh", {v(t2)}, v(t3)), "");
  EXPECT_EQ(run("add", {v(t3), s(one)}, v(t4)), "");
  EXPECT_EQ(run("mul", {v(y), s(half)}, v(t5)), "");
  EXPECT_EQ(run("mul", {v(t5), v(t4)}, v(g)), "");
  return g;
}

// The program --ds-fuse-elementwise makes of the chain above
// (test/Transforms/ds-fuse-elementwise.mlir), on 1 and 2 threads, out of
// place and in place (the result over x).
TEST(FusedKernels, GeluChainBitIdentical) {
  std::vector<int64_t> shape = {3, 5, 300};
  std::vector<float> x = random(shape, 4), b = random({300}, 5);
  std::vector<float> want = geluUnfused(x, b, shape);
  // r2 = x + b, r3 = 0.5 r2, r4 = r2^3, r5 = 0.044715 r4, r6 = r2 + r5,
  // r7 = 0.79788456 r6, r8 = tanh r7, r9 = r8 + 1, result r3 r9.
  std::vector<int64_t> program = {
      op(FusedOp::Add), 0, 1, 0,  op(FusedOp::Mul), 2, -1, 0,
      op(FusedOp::Pow), 2, -2, 0, op(FusedOp::Mul), 4, -3, 0,
      op(FusedOp::Add), 2, 5, 0,  op(FusedOp::Mul), 6, -4, 0,
      op(FusedOp::Tanh), 7, 0, 0, op(FusedOp::Add), 8, -5, 0,
      op(FusedOp::Mul), 3, 9, 0};
  std::vector<double> constants = {0.5, 3.0, 0.044715f, 0.7978845608f, 1.0};
  for (int threads : {1, 2}) {
    setThreadCount(threads);
    std::vector<float> got(x.size());
    ASSERT_EQ(run("fused_elementwise", {view(x, shape), view(b, {300})},
                  view(got, shape), program, constants),
              "");
    EXPECT_EQ(mismatches(got, want), 0) << threads << " threads";
    std::vector<float> inplace = x;
    ASSERT_EQ(run("fused_elementwise", {view(inplace, shape), view(b, {300})},
                  view(inplace, shape), program, constants),
              "");
    EXPECT_EQ(mismatches(inplace, want), 0) << threads << " threads, in place";
  }
  setThreadCount(1);
}

// Attention's scale and causal mask: where(mask, -inf, s * 0.125), the
// [8, 8] mask broadcast over [2, 3, 8, 8] scores.
TEST(FusedKernels, ScaleAndMask) {
  std::vector<int64_t> shape = {2, 3, 8, 8};
  std::vector<float> s = random(shape, 6);
  std::vector<uint8_t> mask(64);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      mask[i * 8 + j] = j > i;
  float scale = 0.125f, ninf = -INFINITY;
  std::vector<float> t(s.size()), want(s.size()), got(s.size());
  ASSERT_EQ(run("mul", {view(s, shape), view(&scale, {})}, view(t, shape)), "");
  ASSERT_EQ(run("where", {view(mask.data(), DType::Bool, {8, 8}),
                          view(&ninf, {}), view(t, shape)},
                view(want, shape)),
            "");
  ASSERT_EQ(run("fused_elementwise",
                {view(s, shape), view(mask.data(), DType::Bool, {8, 8})},
                view(got, shape),
                {op(FusedOp::Mul), 0, -1, 0, op(FusedOp::Where), 1, -2, 2},
                {0.125, -INFINITY}),
            "");
  EXPECT_EQ(mismatches(got, want), 0);
}

// A bad plan is refused with a message naming the problem.
TEST(FusedKernels, BadOperandsFail) {
  std::vector<float> x(8), y(8);
  std::vector<int64_t> i64(8);
  EXPECT_NE(run("fused_elementwise", {view(x, {8})}, view(y, {8}),
                {99, 0, 0, 0})
                .find("unknown opcode 99"),
            std::string::npos);
  EXPECT_NE(run("fused_elementwise", {view(x, {8})}, view(y, {8}),
                {op(FusedOp::Add), 0, 1, 0})
                .find("register 1 is not defined yet"),
            std::string::npos);
  EXPECT_NE(run("fused_elementwise", {view(i64.data(), DType::I64, {8})},
                view(y, {8}), {op(FusedOp::Neg), 0, 0, 0})
                .find("neither f32 nor bool"),
            std::string::npos);
  EXPECT_NE(run("fused_elementwise", {view(x, {4, 2})}, view(y, {8}),
                {op(FusedOp::Neg), 0, 0, 0})
                .find("does not broadcast"),
            std::string::npos);
}

} // namespace
