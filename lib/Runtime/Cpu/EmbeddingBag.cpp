//===- EmbeddingBag.cpp - CPU ds.embedding_bag and its gradient -----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Both kernels first read the indices and the B + 1 bag bounds and check
// them (bounds that do not decrease within [0, N], indices within the
// table's rows), failing with one message that names the first bad one:
// they are run-time data. The forward pass spreads the bags over the
// run's threads; each bag's rows are summed (times their per-sample
// weights), averaged or maxed in f32 over vectorized rows (16-bit tables
// are widened a row at a time). An empty bag gives zeros, as torch. The
// gradient accumulates in double into the table's shape, the threads
// splitting its columns (a row may repeat across bags; each element's sum
// keeps the bags' order, so runs are bit for bit the same): sum adds the
// bag's gradient (times the weight), mean divides it by the bag's length,
// max adds each element at the first row that holds the bag's max.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Vec.h"
#include "ds/Support/EmbeddingBag.h"

#include <algorithm>
#include <vector>

namespace ds::rt {
namespace {

/// The checked operands of either kernel.
struct Bags {
  BagGeometry g;
  BagMode mode = BagMode::Sum;
  std::vector<int64_t> idx, bounds;
  const TensorView *psw = nullptr;

  int64_t begin(int64_t b) const { return bounds[b]; }
  int64_t end(int64_t b) const { return bounds[b + 1]; }
};

bool prepare(KernelContext &ctx, const char *name, const TensorView &table,
             const TensorView &bags, const TensorView &indices,
             const TensorView &bounds, const TensorView *psw, Bags &out) {
  std::string what = name;
  if (!out.g.set(table.shape.data(), table.rank(), bags.shape.data(),
                 bags.rank(), indices.shape.data(), indices.rank(),
                 bounds.shape.data(), bounds.rank()))
    return ctx.fail(what + ": the table, bags, indices and offsets do not "
                           "fit ([V, D], [B, D], [N], [B + 1])");
  if (!parseBagMode(ctx.attrs.getString("mode"), out.mode))
    return ctx.fail(what + ": unknown mode '" + ctx.attrs.getString("mode") +
                    "'");
  if (psw && psw->numel() != out.g.count)
    return ctx.fail(what + ": per_sample_weights are not one per index");
  out.psw = psw;
  const BagGeometry &g = out.g;
  out.idx.resize(g.count);
  out.bounds.resize(g.bags + 1);
  for (int64_t b = 0; b <= g.bags; ++b) {
    out.bounds[b] = loadI(bounds.data, bounds.dtype, b);
    int64_t prev = b ? out.bounds[b - 1] : 0;
    if (out.bounds[b] < prev || out.bounds[b] > g.count)
      return ctx.fail(what + ": offset " + std::to_string(out.bounds[b]) +
                      " of bag " + std::to_string(b) + " is below the one "
                      "before it or outside [0, " + std::to_string(g.count) +
                      "] (the number of indices)");
  }
  for (int64_t j = 0; j < g.count; ++j) {
    out.idx[j] = loadI(indices.data, indices.dtype, j);
    if (out.idx[j] < 0 || out.idx[j] >= g.rows)
      return ctx.fail(what + ": index " + std::to_string(out.idx[j]) +
                      " at position " + std::to_string(j) +
                      " is outside the table's " + std::to_string(g.rows) +
                      " rows");
  }
  return true;
}

/// Row `r` of a [*, d] tensor as f32: in place for f32, else widened into
/// `tmp`.
const float *rowOf(const TensorView &t, int64_t r, int64_t d,
                   std::vector<float> &tmp) {
  if (t.dtype == DType::F32)
    return t.as<float>() + r * d;
  for (int64_t c = 0; c < d; ++c)
    tmp[c] = static_cast<float>(loadD(t.data, t.dtype, r * d + c));
  return tmp.data();
}

double weightOf(const Bags &s, int64_t j) {
  return s.psw ? loadD(s.psw->data, s.psw->dtype, j) : 1.0;
}

/// One bag's row of the result into `acc` (D floats).
void reduceBag(const Bags &s, const TensorView &table, int64_t b,
               float *acc, std::vector<float> &tmp) {
  int64_t d = s.g.dim, lo = s.begin(b), hi = s.end(b);
  std::fill(acc, acc + d, 0.0f);
  for (int64_t j = lo; j < hi; ++j) {
    const float *r = rowOf(table, s.idx[j], d, tmp);
    if (s.mode == BagMode::Max) {
      if (j == lo) {
        std::copy(r, r + d, acc);
        continue;
      }
      DS_VECTORIZE for (int64_t c = 0; c < d; ++c) acc[c] =
          r[c] > acc[c] ? r[c] : acc[c];
      continue;
    }
    float w = static_cast<float>(weightOf(s, j));
    DS_VECTORIZE for (int64_t c = 0; c < d; ++c) acc[c] += w * r[c];
  }
  if (s.mode == BagMode::Mean && hi > lo) {
    float n = static_cast<float>(hi - lo);
    DS_VECTORIZE for (int64_t c = 0; c < d; ++c) acc[c] /= n;
  }
}

bool kEmbeddingBag(KernelContext &ctx) {
  const TensorView &table = ctx.in[0];
  TensorView &out = ctx.out[0];
  Bags s;
  if (!prepare(ctx, "embedding_bag", table, out, ctx.in[1], ctx.in[2],
               ctx.in.size() > 3 ? &ctx.in[3] : nullptr, s))
    return false;
  int64_t d = s.g.dim;
  parallelFor(s.g.bags, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)),
              [&](int64_t b0, int64_t b1) {
    std::vector<float> acc(d), tmp(d);
    for (int64_t b = b0; b < b1; ++b) {
      reduceBag(s, table, b, acc.data(), tmp);
      if (out.dtype == DType::F32)
        std::copy(acc.begin(), acc.end(), out.as<float>() + b * d);
      else
        for (int64_t c = 0; c < d; ++c)
          storeD(out.data, out.dtype, b * d + c, acc[c]);
    }
  });
  return true;
}

/// Columns [c0, c1) of the gradient, accumulated into `acc` (V x D).
void accumulateColumns(const Bags &s, const std::vector<float> &dy,
                       const TensorView *table, int64_t c0, int64_t c1,
                       double *acc) {
  int64_t d = s.g.dim;
  for (int64_t b = 0; b < s.g.bags; ++b) {
    int64_t lo = s.begin(b), hi = s.end(b);
    const float *gb = dy.data() + b * d;
    if (s.mode == BagMode::Max) {
      for (int64_t c = c0; c < c1 && hi > lo; ++c) {
        int64_t best = lo;
        double top = loadD(table->data, table->dtype, s.idx[lo] * d + c);
        for (int64_t j = lo + 1; j < hi; ++j) {
          double v = loadD(table->data, table->dtype, s.idx[j] * d + c);
          if (v > top) {
            top = v;
            best = j;
          }
        }
        acc[s.idx[best] * d + c] += gb[c];
      }
      continue;
    }
    double mean = s.mode == BagMode::Mean && hi > lo ? 1.0 / (hi - lo) : 1.0;
    for (int64_t j = lo; j < hi; ++j) {
      double w = s.mode == BagMode::Mean ? mean : weightOf(s, j);
      double *dst = acc + s.idx[j] * d;
      DS_VECTORIZE for (int64_t c = c0; c < c1; ++c) dst[c] += w * gb[c];
    }
  }
}

bool kEmbeddingBagGrad(KernelContext &ctx) {
  const TensorView &dyView = ctx.in[0];
  TensorView &out = ctx.out[0];
  BagMode mode;
  if (!parseBagMode(ctx.attrs.getString("mode"), mode))
    return ctx.fail("embedding_bag_grad: unknown mode '" +
                    ctx.attrs.getString("mode") + "'");
  // Operands: grad, indices, bounds, then per-sample weights (sum) or the
  // table (max).
  const TensorView *extra = ctx.in.size() > 3 ? &ctx.in[3] : nullptr;
  const TensorView *psw = mode == BagMode::Sum ? extra : nullptr;
  const TensorView *table = mode == BagMode::Max ? extra : nullptr;
  if (mode == BagMode::Max && (!table || table->shape != out.shape))
    return ctx.fail("embedding_bag_grad: mode max needs the table");
  Bags s;
  if (!prepare(ctx, "embedding_bag_grad", out, dyView, ctx.in[1], ctx.in[2],
               psw, s))
    return false;
  std::vector<float> dy(dyView.numel());
  for (int64_t i = 0; i < dyView.numel(); ++i)
    dy[i] = dyView.dtype == DType::F32
                ? dyView.as<float>()[i]
                : static_cast<float>(loadD(dyView.data, dyView.dtype, i));
  std::vector<double> acc(out.numel(), 0.0);
  parallelFor(s.g.dim, 64, [&](int64_t c0, int64_t c1) {
    accumulateColumns(s, dy, table, c0, c1, acc.data());
  });
  parallelFor(out.numel(), 16384, [&](int64_t b, int64_t e) {
    if (out.dtype == DType::F32) {
      float *o = out.as<float>();
      for (int64_t i = b; i < e; ++i)
        o[i] = static_cast<float>(acc[i]);
      return;
    }
    for (int64_t i = b; i < e; ++i)
      storeD(out.data, out.dtype, i, acc[i]);
  });
  return true;
}

} // namespace

void registerEmbeddingBagKernels(KernelRegistry &r) {
  r.add("embedding_bag", kEmbeddingBag);
  r.add("embedding_bag_grad", kEmbeddingBagGrad);
}

} // namespace ds::rt
