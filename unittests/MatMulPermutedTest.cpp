//===- MatMulPermutedTest.cpp - matmul with perm_a/perm_b against a copy --===//
//
// Part of the ds project. The matmul kernel reading its operands through
// permutations (--ds-fold-transpose) against the same matmul of explicitly
// transposed copies, each product summed in double from the definition:
// attention's [B, T, H, d] read as [B, H, T, d] and as [B, H, d, T], a
// broadcast batch, a trans_b operand beside a permuted one. Tolerance 1e-5
// relative (f32 sums in another order); the error cases fail by name.
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

namespace {

using ds::rt::test::view;

using Shape = std::vector<int64_t>;

int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

/// transpose(x, perm) copied, and its shape.
std::vector<float> permuted(const std::vector<float> &x, const Shape &shape,
                            const Shape &perm, Shape &out) {
  size_t r = shape.size();
  out.assign(r, 0);
  for (size_t d = 0; d < r; ++d)
    out[d] = shape[perm[d]];
  Shape stride(r, 1), idx(r, 0);
  for (size_t d = r - 1; d > 0; --d)
    stride[d - 1] = stride[d] * shape[d];
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < numel(out); ++i) {
    int64_t rem = i, src = 0;
    for (size_t d = r; d-- > 0;) {
      src += (rem % out[d]) * stride[perm[d]];
      rem /= out[d];
    }
    y[i] = x[src];
  }
  return y;
}

/// Batched [.., M, K] x [.., K, N] with the batch broadcast (equal ranks).
std::vector<float> reference(const std::vector<float> &a, const Shape &sa,
                             const std::vector<float> &b, const Shape &sb,
                             Shape &so) {
  size_t r = sa.size();
  int64_t M = sa[r - 2], K = sa[r - 1], N = sb[r - 1], batches = 1;
  so = sa;
  so[r - 1] = N;
  for (size_t d = 0; d + 2 < r; ++d)
    batches *= (so[d] = std::max(sa[d], sb[d]));
  std::vector<float> o(batches * M * N);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0, stA = M * K, stB = K * N;
    for (size_t d = r - 2; d-- > 0;) {
      int64_t i = rem % so[d];
      rem /= so[d];
      oa += (sa[d] == 1 ? 0 : i) * stA;
      ob += (sb[d] == 1 ? 0 : i) * stB;
      stA *= sa[d];
      stB *= sb[d];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(a[oa + m * K + k]) * b[ob + k * N + n];
        o[(bi * M + m) * N + n] = float(s);
      }
  }
  return o;
}

std::vector<float> random(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  std::generate(v.begin(), v.end(), [&] { return d(gen); });
  return v;
}

void addInts(ds::plan::Instruction &ins, const char *name, const Shape &v) {
  auto *a = ins.add_attributes();
  a->set_name(name);
  for (int64_t x : v)
    a->mutable_ints()->add_values(x);
}

bool run(std::vector<float> &a, Shape sa, std::vector<float> &b, Shape sb,
         std::vector<float> &o, Shape so, const ds::plan::Instruction &ins,
         std::string &error) {
  const KernelInfo *k = findKernel("matmul");
  EXPECT_NE(k, nullptr);
  KernelContext ctx{{view(a, sa), view(b, sb)}, {view(o, so)}, Attrs(&ins),
                    0, {}, NAN, nullptr};
  bool ok = k->fn(ctx);
  error = ctx.error;
  return ok;
}

/// A stored `sa` read through `pa`, B stored `sb` through `pb` (empty: as
/// is; transB: trans_b), against the copies' product.
void check(Shape sa, Shape pa, Shape sb, Shape pb, bool transB = false) {
  std::vector<float> a = random(numel(sa), 3), b = random(numel(sb), 4);
  Shape ta = sa, tb = sb, so;
  std::vector<float> ca = pa.empty() ? a : permuted(a, sa, pa, ta);
  Shape swap;
  for (size_t d = 0; d < sb.size(); ++d)
    swap.push_back(d);
  std::swap(swap[sb.size() - 1], swap[sb.size() - 2]);
  std::vector<float> cb = !pb.empty() ? permuted(b, sb, pb, tb)
                          : transB    ? permuted(b, sb, swap, tb)
                                      : b;
  std::vector<float> ref = reference(ca, ta, cb, tb, so);
  ds::plan::Instruction ins;
  if (!pa.empty())
    addInts(ins, "perm_a", pa);
  if (!pb.empty())
    addInts(ins, "perm_b", pb);
  if (transB) {
    auto *t = ins.add_attributes();
    t->set_name("trans_b");
    t->set_i(1);
  }
  std::vector<float> o(ref.size(), NAN);
  std::string error;
  ASSERT_TRUE(run(a, sa, b, sb, o, so, ins, error)) << error;
  double maxErr = 0, maxRef = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    maxErr = std::max(maxErr, std::fabs(double(o[i]) - ref[i]));
    maxRef = std::max(maxRef, std::fabs(double(ref[i])));
  }
  EXPECT_LT(maxErr / maxRef, 1e-5);
}

TEST(MatMulPermuted, AttentionScores) {
  // q [B, T, H, d] as [B, H, T, d]; k as [B, H, d, T].
  check({2, 7, 3, 5}, {0, 2, 1, 3}, {2, 7, 3, 5}, {0, 2, 3, 1});
}

TEST(MatMulPermuted, AttentionValues) {
  // p [B, H, T, T] as is; v [B, T, H, d] as [B, H, T, d].
  check({2, 3, 7, 7}, {}, {2, 7, 3, 5}, {0, 2, 1, 3});
}

TEST(MatMulPermuted, SequenceFirstAndBroadcast) {
  // nn.MultiheadAttention's [T, B*H, d] as [B*H, T, d]; B broadcast from 1.
  check({6, 4, 5}, {1, 0, 2}, {1, 5, 3}, {});
  check({6, 4, 5}, {1, 0, 2}, {4, 3, 5}, {}, /*transB=*/true);
}

TEST(MatMulPermuted, RejectsBadOperands) {
  std::vector<float> a(24), b(24), o(16);
  ds::plan::Instruction moved, notPerm;
  addInts(moved, "perm_a", {2, 0, 1}); // the unit-stride dimension first
  addInts(notPerm, "perm_a", {0, 0, 2});
  std::string error;
  EXPECT_FALSE(run(a, {2, 3, 4}, b, {2, 4, 3}, o, {4, 2, 2}, moved, error));
  EXPECT_EQ(error, "matmul A permutation moves the unit-stride dimension out "
                   "of the last two");
  EXPECT_FALSE(run(a, {2, 3, 4}, b, {2, 4, 3}, o, {2, 3, 3}, notPerm, error));
  EXPECT_EQ(error, "matmul A permutation is not a permutation");
}

} // namespace
