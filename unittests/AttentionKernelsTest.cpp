//===- AttentionKernelsTest.cpp - fused attention against a reference -----===//
//
// Part of the ds project. The CPU kernels fused_attention and
// fused_attention_grad (Cpu/Attention.cpp: tiles of 32 or 64 x 256, online
// softmax, probabilities recomputed from the logsumexp) against a naive
// double-precision reference that materializes the T x T scores: causal,
// padding (fill where false), additive (trimmed or not), finite-fill and
// scattered per-head masks, no mask with Tq != Tk, lengths not multiples
// of the tile and across key tiles, one and two threads.
// Tolerance: |got - want| <= 1e-5 * (|want| + mean |want| of the tensor),
// relative 1e-5 with a floor for elements near zero (the kernel sums in
// f32 in tile order, the reference in double). A fully masked row gives
// NaN and lse -inf, as the unfused softmax; bad operands fail naming them.
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
using ds::rt::test::view;

namespace {

struct Case {
  int64_t batch = 2, heads = 3, tq = 70, tk = 70, d = 16, dv = 16;
  std::string kind = "none"; // mask_kind
  double scale = 0.25, fill = -INFINITY;
  std::vector<int64_t> maskShape; // broadcast to [batch, heads, tq, tk]
  std::vector<uint8_t> boolMask;
  std::vector<float> addMask;
  /// Query, key, value and output gradient stored [batch, T, heads, D] and
  /// read through perm_q/perm_k/perm_v/perm_grad = [0, 2, 1, 3] (the head
  /// transposes --ds-fold-transpose folds).
  bool strided = false;
};

std::vector<float> random(int64_t n, unsigned seed, float lo = -1.0f,
                          float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = u(g);
  return v;
}

/// The mask element of (b, h, i, j) under numpy broadcasting.
int64_t maskIndex(const Case &c, int64_t b, int64_t h, int64_t i, int64_t j) {
  int64_t idx[4] = {b, h, i, j}, at = 0;
  size_t r = c.maskShape.size();
  for (size_t k = 0; k < r; ++k) {
    int64_t dim = c.maskShape[k], coord = idx[4 - r + k];
    at = at * dim + (dim == 1 ? 0 : coord);
  }
  return at;
}

ds::plan::Instruction attrs(const Case &c) {
  ds::plan::Instruction ins;
  auto *s = ins.add_attributes();
  s->set_name("scale");
  s->set_f(c.scale);
  auto *k = ins.add_attributes();
  k->set_name("mask_kind");
  k->set_s(c.kind);
  auto *f = ins.add_attributes();
  f->set_name("fill");
  f->set_f(c.fill);
  if (c.strided)
    for (const char *name : {"perm_q", "perm_k", "perm_v", "perm_grad"}) {
      auto *p = ins.add_attributes();
      p->set_name(name);
      for (int64_t d : {0, 2, 1, 3})
        p->mutable_ints()->add_values(d);
    }
  return ins;
}

struct Tensors {
  std::vector<float> q, k, v, dout;
  // reference (double) and kernel results
  std::vector<double> out, lse, dq, dk, dv;
};

/// Naive attention with the T x T matrices, forward and backward.
void reference(const Case &c, Tensors &t) {
  int64_t N = c.batch * c.heads;
  t.out.assign(N * c.tq * c.dv, 0), t.lse.assign(N * c.tq, 0);
  t.dq.assign(N * c.tq * c.d, 0), t.dk.assign(N * c.tk * c.d, 0);
  t.dv.assign(N * c.tk * c.dv, 0);
  for (int64_t n = 0; n < N; ++n) {
    int64_t b = n / c.heads, h = n % c.heads;
    for (int64_t i = 0; i < c.tq; ++i) {
      std::vector<double> s(c.tk), p(c.tk);
      std::vector<bool> filled(c.tk, false);
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.tk; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < c.d; ++e)
          dot += double(t.q[(n * c.tq + i) * c.d + e]) * t.k[(n * c.tk + j) * c.d + e];
        s[j] = c.scale * dot;
        if (c.kind == "add") {
          s[j] += c.addMask[maskIndex(c, b, h, i, j)];
        } else if (c.kind != "none") {
          bool m = c.boolMask[maskIndex(c, b, h, i, j)] != 0;
          filled[j] = m == (c.kind == "fill_true");
          if (filled[j])
            s[j] = c.fill;
        }
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < c.tk; ++j)
        sum += p[j] = std::exp(s[j] - mx);
      for (int64_t j = 0; j < c.tk; ++j)
        p[j] /= sum;
      t.lse[n * c.tq + i] = mx + std::log(sum);
      const float *dO = &t.dout[(n * c.tq + i) * c.dv];
      std::vector<double> dp(c.tk, 0);
      double rowDot = 0;
      for (int64_t e = 0; e < c.dv; ++e) {
        double o = 0;
        for (int64_t j = 0; j < c.tk; ++j)
          o += p[j] * t.v[(n * c.tk + j) * c.dv + e];
        t.out[(n * c.tq + i) * c.dv + e] = o;
        rowDot += o * dO[e];
      }
      for (int64_t j = 0; j < c.tk; ++j) {
        for (int64_t e = 0; e < c.dv; ++e) {
          dp[j] += double(dO[e]) * t.v[(n * c.tk + j) * c.dv + e];
          t.dv[(n * c.tk + j) * c.dv + e] += p[j] * dO[e];
        }
        double ds = filled[j] ? 0.0 : p[j] * (dp[j] - rowDot) * c.scale;
        for (int64_t e = 0; e < c.d; ++e) {
          t.dq[(n * c.tq + i) * c.d + e] += ds * t.k[(n * c.tk + j) * c.d + e];
          t.dk[(n * c.tk + j) * c.d + e] += ds * t.q[(n * c.tq + i) * c.d + e];
        }
      }
    }
  }
}

void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double mean = 0;
  for (double w : want)
    mean += std::fabs(w) / want.size();
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = 1e-5 * (std::fabs(want[i]) + mean);
    if (!(std::fabs(got[i] - want[i]) <= tol) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

std::string runKernel(const char *name, const Case &c,
                      std::vector<TensorView> in, std::vector<TensorView> out) {
  ds::plan::Instruction ins = attrs(c);
  const KernelInfo *k = findKernel(name);
  if (!k)
    return std::string("no kernel ") + name;
  KernelContext ctx{std::move(in), std::move(out), Attrs(&ins), 0, {}, NAN,
                    nullptr};
  return k->fn(ctx) ? "" : (ctx.error.empty() ? "failed" : ctx.error);
}

/// `x` [batch, heads, rows, cols] stored as [batch, rows, heads, cols].
std::vector<float> headsInner(const Case &c, const std::vector<float> &x,
                              int64_t rows, int64_t cols) {
  std::vector<float> y(x.size());
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t e = 0; e < cols; ++e)
          y[((b * rows + r) * c.heads + h) * cols + e] =
              x[((b * c.heads + h) * rows + r) * cols + e];
  return y;
}

/// Runs forward and gradient and compares them with the reference.
void check(Case c, int threads) {
  setThreadCount(threads);
  int64_t N = c.batch * c.heads;
  Tensors t;
  t.q = random(N * c.tq * c.d, 1), t.k = random(N * c.tk * c.d, 2);
  t.v = random(N * c.tk * c.dv, 3), t.dout = random(N * c.tq * c.dv, 4);
  reference(c, t);
  auto shape = [&](int64_t r, int64_t cols) {
    return std::vector<int64_t>{c.batch, c.heads, r, cols};
  };
  // The kernels' operands: head-major, or [batch, T, heads, D] read
  // through the permutation.
  std::vector<float> sq = t.q, sk = t.k, sv = t.v, sdout = t.dout;
  auto operand = [&](std::vector<float> &x, int64_t rows, int64_t cols) {
    if (!c.strided)
      return view(x, shape(rows, cols));
    x = headsInner(c, x, rows, cols);
    return view(x, {c.batch, rows, c.heads, cols});
  };
  std::vector<TensorView> in = {operand(sq, c.tq, c.d),
                                operand(sk, c.tk, c.d),
                                operand(sv, c.tk, c.dv)};
  if (c.kind == "add")
    in.push_back(view(c.addMask, c.maskShape));
  else if (c.kind != "none")
    in.push_back(view(c.boolMask.data(), DType::Bool, c.maskShape));
  std::vector<float> out(N * c.tq * c.dv), lse(N * c.tq);
  ASSERT_EQ(runKernel("fused_attention", c, in,
                      {view(out, shape(c.tq, c.dv)),
                       view(lse, {c.batch, c.heads, c.tq})}),
            "");
  expectClose(out, t.out, "out");
  expectClose(lse, t.lse, "lse");
  std::vector<float> dq(t.q.size()), dk(t.k.size()), dv(t.v.size());
  std::vector<TensorView> gin = {in[0], in[1], in[2],
                                 view(out, shape(c.tq, c.dv)),
                                 view(lse, {c.batch, c.heads, c.tq}),
                                 operand(sdout, c.tq, c.dv)};
  if (in.size() > 3)
    gin.push_back(in[3]);
  ASSERT_EQ(runKernel("fused_attention_grad", c, gin,
                      {view(dq, shape(c.tq, c.d)), view(dk, shape(c.tk, c.d)),
                       view(dv, shape(c.tk, c.dv))}),
            "");
  expectClose(dq, t.dq, "dq");
  expectClose(dk, t.dk, "dk");
  expectClose(dv, t.dv, "dv");
  setThreadCount(1);
}

Case causal(int64_t T) {
  Case c;
  c.tq = c.tk = T;
  c.kind = "fill_true";
  c.maskShape = {1, 1, T, T};
  c.boolMask.resize(T * T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      c.boolMask[i * T + j] = j > i; // masked_fill(tril == 0, -inf)
  return c;
}

TEST(AttentionKernels, CausalNotMultipleOfTile) { check(causal(70), 1); }
TEST(AttentionKernels, CausalTwoThreads) { check(causal(130), 2); }

// Across the 256-column key tiles: the online softmax rescales rows whose
// maximum grows in the second tile, and the causal mask trims each row
// block's columns (rows 0-63 read keys 0-63 only).
TEST(AttentionKernels, CausalAcrossKeyTiles) {
  Case c = causal(300);
  c.batch = 1, c.heads = 2;
  check(c, 1);
}

// A mask whose kept columns are not one run (every third column filled,
// per head: [batch, heads, T, T]): each element is tested, not the row's
// two ends; rows keep their diagonal so none is fully masked.
TEST(AttentionKernels, ScatteredPerHeadMask) {
  Case c;
  c.tq = c.tk = 100;
  c.kind = "fill_true";
  c.maskShape = {c.batch, c.heads, c.tq, c.tk};
  c.boolMask.resize(c.batch * c.heads * c.tq * c.tk);
  for (size_t e = 0; e < c.boolMask.size(); ++e) {
    int64_t i = (e / c.tk) % c.tq, j = e % c.tk;
    c.boolMask[e] = j != i && (i + j + e / (c.tq * c.tk)) % 3 == 0;
  }
  check(c, 2);
}

// A padding mask on Tk = 280 keys (two key tiles) with Tq = 40: sequence
// 1's keys after 200 are filled, so its second tile is trimmed.
TEST(AttentionKernels, PaddingAcrossKeyTiles) {
  Case c;
  c.tq = 40, c.tk = 280;
  c.kind = "fill_false";
  c.maskShape = {c.batch, 1, 1, c.tk};
  c.boolMask.assign(c.batch * c.tk, 1);
  for (int64_t j = 200; j < c.tk; ++j)
    c.boolMask[1 * c.tk + j] = 0;
  check(c, 2);
}

TEST(AttentionKernels, PaddingKeepMask) {
  Case c;
  c.tq = c.tk = 90;
  c.kind = "fill_false"; // Where(keep, s, -inf)
  c.maskShape = {c.batch, 1, 1, c.tk};
  c.boolMask.assign(c.batch * c.tk, 1);
  for (int64_t j = 60; j < c.tk; ++j)
    c.boolMask[1 * c.tk + j] = 0; // sequence 1 padded after 60 tokens
  check(c, 2);
}

/// T queries and keys, an additive bias [batch, 1, 1, T]: sequence 1's
/// keys from `from` on get `bias`.
Case paddingBias(int64_t T, int64_t from, float bias) {
  Case c;
  c.tq = c.tk = T;
  c.kind = "add";
  c.maskShape = {c.batch, 1, 1, c.tk};
  c.addMask.assign(c.batch * c.tk, 0.0f);
  for (int64_t j = from; j < c.tk; ++j)
    c.addMask[c.tk + j] = bias;
  return c;
}

TEST(AttentionKernels, AdditivePaddingBias) {
  Case c = paddingBias(77, 50, -10000.0f); // BERT: (keep - 1) * 10000
  c.d = c.dv = 32;
  check(c, 1);
}

// A padding bias the scores cannot overcome trims the padded keys'
// columns (the kernel skips them: exactly zero probability); across two
// key tiles (Tk = 280): sequence 1's second tile is all padding, sequence
// 0's is trimmed after key 270. (A row padded everywhere is not tested:
// its scores + -10000 keep only 1e-3 of their f32 precision, unfused too.)
TEST(AttentionKernels, AdditivePaddingTrimmedAcrossKeyTiles) {
  Case c;
  c.tq = 40, c.tk = 280;
  c.kind = "add";
  c.maskShape = {c.batch, 1, 1, c.tk};
  c.addMask.assign(c.batch * c.tk, -10000.0f);
  for (int64_t j = 0; j < 270; ++j)
    c.addMask[j] = 0.0f;
  for (int64_t j = 0; j < 250; ++j)
    c.addMask[c.tk + j] = 0.0f;
  check(c, 2);
}

// A bias of -5 leaves the padded keys e^-5 of the weight: nothing may be
// trimmed (a trimmed column would miss the tolerance by far).
TEST(AttentionKernels, AdditiveBiasTooSmallToTrim) {
  check(paddingBias(60, 40, -5.0f), 1);
}

// Operands read through the head transposes (perm_q, perm_k, perm_v,
// perm_grad): causal across the key tiles, a padding bias, and Tq != Tk
// with D != Dv, on two threads.
TEST(AttentionKernels, StridedOperands) {
  Case c = causal(300);
  c.batch = 1, c.strided = true;
  check(c, 2);
  Case p = paddingBias(77, 50, -10000.0f);
  p.strided = true;
  check(p, 1);
  Case r;
  r.tq = 65, r.tk = 130, r.d = 8, r.dv = 24, r.strided = true;
  check(r, 2);
}

// A permutation that moves the innermost dimension is refused by name.
TEST(AttentionKernels, StridedOperandMustKeepInnermost) {
  Case c;
  c.batch = c.heads = 1;
  c.tq = c.tk = 4, c.d = c.dv = 4;
  ds::plan::Instruction ins = attrs(c);
  auto *p = ins.add_attributes();
  p->set_name("perm_k");
  for (int64_t d : {0, 1, 3, 2})
    p->mutable_ints()->add_values(d);
  std::vector<float> x(16), out(16), lse(4);
  std::vector<int64_t> s = {1, 1, 4, 4};
  KernelContext ctx{{view(x, s), view(x, s), view(x, s)},
                    {view(out, s), view(lse, {1, 1, 4})},
                    Attrs(&ins), 0, {}, NAN, nullptr};
  ASSERT_FALSE(findKernel("fused_attention")->fn(ctx));
  EXPECT_NE(ctx.error.find("perm_k is not a permutation keeping the "
                           "innermost dimension last"),
            std::string::npos)
      << ctx.error;
}

TEST(AttentionKernels, NoMaskRectangular) {
  Case c;
  c.tq = 65, c.tk = 130, c.d = 8, c.dv = 24, c.scale = 0.35;
  check(c, 2);
}

TEST(AttentionKernels, FiniteFill) {
  Case c = causal(40);
  c.fill = -3.0; // masked_fill with a finite value: still gets probability
  check(c, 1);
}

TEST(AttentionKernels, FullyMaskedRowIsNaN) {
  Case c = causal(8);
  c.batch = c.heads = 1, c.d = c.dv = 4;
  c.boolMask.assign(64, 0);
  for (int64_t j = 0; j < 8; ++j)
    c.boolMask[3 * 8 + j] = 1; // row 3 entirely masked
  std::vector<float> q = random(32, 1), out(32), lse(8);
  std::vector<int64_t> s = {1, 1, 8, 4};
  ASSERT_EQ(runKernel("fused_attention", c,
                      {view(q, s), view(q, s), view(q, s),
                       view(c.boolMask.data(), DType::Bool, c.maskShape)},
                      {view(out, s), view(lse, {1, 1, 8})}),
            "");
  EXPECT_TRUE(std::isnan(out[3 * 4]));
  EXPECT_EQ(lse[3], -INFINITY);
  EXPECT_FALSE(std::isnan(out[2 * 4]));
}

TEST(AttentionKernels, BadOperandsFail) {
  Case c = causal(8);
  std::vector<float> q(2 * 8 * 4), out(2 * 8 * 4), lse(2 * 8);
  std::vector<int64_t> s = {2, 8, 4};
  std::vector<uint8_t> m(3 * 8);
  c.kind = "causal";
  EXPECT_NE(runKernel("fused_attention", c,
                      {view(q, s), view(q, s), view(q, s),
                       view(m.data(), DType::Bool, {3, 8})},
                      {view(out, s), view(lse, {2, 8})})
                .find("unknown mask_kind 'causal'"),
            std::string::npos);
  c.kind = "fill_true";
  EXPECT_NE(runKernel("fused_attention", c,
                      {view(q, s), view(q, s), view(q, s),
                       view(m.data(), DType::Bool, {3, 8})},
                      {view(out, s), view(lse, {2, 8})})
                .find("the mask does not broadcast"),
            std::string::npos);
  c.kind = "none";
  EXPECT_NE(runKernel("fused_attention", c,
                      {view(q, s), view(q, s), view(q, s)},
                      {view(out, s), view(lse, {2, 4})})
                .find("result or lse does not have the query's rows"),
            std::string::npos);
}

} // namespace
