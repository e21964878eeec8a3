//===- ZeroPPTest.cpp - ZeRO++'s quantized collectives on one rank --------===//
//
// Part of the ds project. The kernels quantized_all_gather and
// quantized_reduce_scatter (Cpu/ZeroPP.cpp) on one rank against a
// reference written from the formulas of include/ds/Support/Quantize.h
// with plain loops: per block s = max|x| / qmax, q = round-half-even(x/s)
// clamped to [-qmax, qmax], x' = q s; blocks longer and shorter than the
// tensor, a last partial block, 8 and 4 bits, a block of zeros, a block
// with a NaN (NaN throughout that block only), a bf16 result, and a
// workspace the plan sized too small; the gathered shard itself stays
// unchanged. Tolerance: exact (the reference
// does the same f32 operations), and |x - x'| <= s/2 checked as well.
// Several ranks run in test/E2E/zeropp.test.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "TensorViews.h"
#include "ds/Support/Quantize.h"
#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

using namespace ds::rt;
using ds::rt::test::view;

namespace {

std::vector<float> reference(const std::vector<float> &x, int64_t block,
                             int bits) {
  float qmax = bits == 8 ? 127.0f : 7.0f;
  std::vector<float> out(x.size());
  for (size_t lo = 0; lo < x.size(); lo += block) {
    size_t hi = std::min(x.size(), lo + static_cast<size_t>(block));
    float amax = 0.0f;
    bool bad = false;
    for (size_t i = lo; i < hi; ++i) {
      bad |= !std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    float s = amax / qmax;
    for (size_t i = lo; i < hi; ++i) {
      float q = s > 0 ? std::rint(x[i] / s) : 0.0f;
      q = std::min(qmax, std::max(-qmax, q));
      out[i] = bad ? NAN : q * s;
    }
  }
  return out;
}

ds::plan::Instruction attrs(int64_t block, int bits) {
  ds::plan::Instruction ins;
  auto *b = ins.add_attributes();
  b->set_name("block_size");
  b->set_i(block);
  auto *q = ins.add_attributes();
  q->set_name("bits");
  q->set_i(bits);
  auto *r = ins.add_attributes();
  r->set_name("reduction");
  r->set_s("mean");
  return ins;
}

/// Runs kernel `name` on one rank; its error, or "" on success.
std::string run(const char *name, std::vector<float> &x, TensorView out,
                int64_t block, int bits, uint64_t workspaceBytes) {
  ds::plan::Instruction ins = attrs(block, bits);
  std::vector<float> ws(workspaceBytes / 4);
  const KernelInfo *k = findKernel(name);
  if (!k)
    return std::string("no kernel ") + name;
  KernelContext ctx{{view(x, {static_cast<int64_t>(x.size())})},
                    {out, view(ws, {static_cast<int64_t>(ws.size())})},
                    Attrs(&ins), 0, {}, NAN, nullptr};
  return k->fn(ctx) ? "" : (ctx.error.empty() ? "failed" : ctx.error);
}

void expectSame(const std::vector<float> &want, const std::vector<float> &got,
                const std::vector<float> &x, int64_t block, int bits) {
  ASSERT_EQ(want.size(), got.size());
  float qmax = bits == 8 ? 127.0f : 7.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
      continue;
    }
    EXPECT_EQ(want[i], got[i]) << "element " << i << " of " << want.size()
                               << ", block " << block << ", bits " << bits;
    size_t lo = i / block * block, hi = std::min(x.size(), lo + block);
    float amax = 0;
    for (size_t j = lo; j < hi; ++j)
      amax = std::max(amax, std::fabs(x[j]));
    EXPECT_LE(std::fabs(x[i] - got[i]), amax / qmax * 0.5f * (1 + 1e-6f));
  }
}

std::vector<float> random(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(g) * (1 + static_cast<float>(g() % 100));
  return v;
}

TEST(ZeroPP, GatherMatchesReference) {
  for (int bits : {8, 4})
    for (int64_t block : {1, 7, 64, 2048}) {
      std::vector<float> x = random(301, static_cast<unsigned>(block + bits));
      std::vector<float> got(x.size()), master = x;
      uint64_t ws = ds::quant::gatherWorkspaceBytes(301, 1, block, bits);
      ASSERT_EQ(run("quantized_all_gather", x, view(got, {301}), block, bits,
                    ws),
                "");
      expectSame(reference(x, block, bits), got, x, block, bits);
      EXPECT_EQ(x, master); // the shard (the master copy) is never changed
    }
}

TEST(ZeroPP, ReduceScatterMatchesReference) {
  for (int bits : {8, 4})
    for (int64_t block : {3, 100, 4096}) {
      std::vector<float> x = random(257, static_cast<unsigned>(block * bits));
      std::vector<float> got(x.size());
      uint64_t ws = ds::quant::reduceScatterWorkspaceBytes(257, 1, block, bits);
      ASSERT_EQ(run("quantized_reduce_scatter", x, view(got, {257}), block,
                    bits, ws),
                "");
      expectSame(reference(x, block, bits), got, x, block, bits);
    }
}

TEST(ZeroPP, ZeroAndNonFiniteBlocks) {
  std::vector<float> x(40, 0.0f);
  for (int i = 10; i < 20; ++i)
    x[i] = 0.25f * i;
  x[25] = NAN;
  x[35] = INFINITY;
  std::vector<float> got(40);
  ASSERT_EQ(run("quantized_reduce_scatter", x, view(got, {40}), 10, 8,
                ds::quant::reduceScatterWorkspaceBytes(40, 1, 10, 8)),
            "");
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(got[i], 0.0f);
  for (int i = 20; i < 40; ++i)
    EXPECT_TRUE(std::isnan(got[i])) << i; // the blocks with NaN and inf
  expectSame(reference(x, 10, 8), got, x, 10, 8);
}

TEST(ZeroPP, GatherIntoBf16) {
  std::vector<float> x = random(50, 3), want = reference(x, 16, 8);
  std::vector<uint16_t> got(50);
  ASSERT_EQ(run("quantized_all_gather", x, view(got.data(), DType::BF16, {50}),
                16, 8, ds::quant::gatherWorkspaceBytes(50, 1, 16, 8)),
            "");
  for (int i = 0; i < 50; ++i) {
    uint32_t bits = static_cast<uint32_t>(got[i]) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    EXPECT_NEAR(v, want[i], std::fabs(want[i]) / 128 + 1e-30f) << i;
  }
}

TEST(ZeroPP, RecordSizes) {
  // 301 elements in blocks of 64: 5 scales (20 bytes) + 301 bytes padded
  // to 304; at 4 bits 151 bytes padded to 152.
  EXPECT_EQ(ds::quant::recordBytes(301, 64, 8), 20u + 304u);
  EXPECT_EQ(ds::quant::recordBytes(301, 64, 4), 20u + 152u);
  EXPECT_EQ(ds::quant::gatherBytes(301, 4, 64, 8), 4u * 324u);
  EXPECT_EQ(ds::quant::gatherWorkspaceBytes(301, 4, 64, 8), 5u * 324u);
  EXPECT_EQ(ds::quant::reduceScatterWorkspaceBytes(301, 4, 64, 4),
            8u * 172u);
}

TEST(ZeroPP, WorkspaceTooSmallFails) {
  std::vector<float> x = random(100, 9), got(100);
  std::string err = run("quantized_all_gather", x, view(got, {100}), 32, 8,
                        ds::quant::gatherWorkspaceBytes(100, 1, 32, 8) - 4);
  EXPECT_NE(err.find("the quantized records need a workspace of"),
            std::string::npos)
      << err;
}

} // namespace
