//===- TopK.cpp - CPU ds.topk and its gradient ----------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// TopK: the rows along the axis are spread over the run's threads; each
// row is read as f32 with its indices and partially sorted
// (std::partial_sort, O(n log k)) in Support/TopK.h's order. The gradient
// zero-fills the input's shape and adds each incoming element at its
// index (out-of-range indices fail the kernel, naming the range).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ds/Support/TopK.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>
#include <vector>

namespace ds::rt {
namespace {

bool geometryOf(KernelContext &ctx, const TensorView &whole, TopKGeometry &g,
                int64_t k) {
  int64_t axis = ctx.attrs.getInt("axis", -1);
  if (!g.set(whole.shape.data(), whole.rank(), axis, k))
    return ctx.fail("topk: axis " + std::to_string(axis) + " or k " +
                    std::to_string(k) + " out of range");
  return true;
}

bool kTopK(KernelContext &ctx) {
  const TensorView &x = ctx.in[0];
  TensorView &values = ctx.out[0], &indices = ctx.out[1];
  TopKGeometry g;
  if (!geometryOf(ctx, x, g, ctx.attrs.getInt("k", 0)))
    return false;
  bool largest = ctx.attrs.getInt("largest", 1) != 0;
  parallelFor(g.rows(), 1, [&](int64_t b, int64_t e) {
    std::vector<float> row(g.n);
    std::vector<int64_t> order(g.n);
    for (int64_t r = b; r < e; ++r) {
      for (int64_t j = 0; j < g.n; ++j)
        row[j] = static_cast<float>(loadD(x.data, x.dtype, g.at(r, j, g.n)));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + g.k, order.end(),
                        [&](int64_t p, int64_t q) {
                          return topkBefore(row[p], p, row[q], q, largest);
                        });
      for (int64_t j = 0; j < g.k; ++j) {
        int64_t o = g.at(r, j, g.k);
        storeD(values.data, values.dtype, o, row[order[j]]);
        storeI(indices.data, indices.dtype, o, order[j]);
      }
    }
  });
  return true;
}

/// ds.topk_grad's rows: the incoming gradient is the result's shape with
/// k along the axis.
bool gradGeometry(KernelContext &ctx, TopKGeometry &g) {
  const TensorView &dy = ctx.in[0], &dx = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  if (dx.rank() == dy.rank() &&
      g.setGrad(dx.shape.data(), dy.shape.data(), dx.rank(), axis))
    return true;
  return ctx.fail("topk_grad: the gradient does not fit the result along "
                  "axis " + std::to_string(axis));
}

bool kTopKGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &idx = ctx.in[1];
  TensorView &dx = ctx.out[0];
  TopKGeometry g;
  if (!gradGeometry(ctx, g))
    return false;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  std::atomic<int64_t> bad{kNone};
  parallelFor(g.rows(), 1, [&](int64_t b, int64_t e) {
    std::vector<float> acc(g.n);
    for (int64_t r = b; r < e; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < g.k; ++j) {
        int64_t o = g.at(r, j, g.k);
        int64_t i = loadI(idx.data, idx.dtype, o);
        if (i < 0 || i >= g.n) {
          bad = i;
          continue;
        }
        acc[i] += static_cast<float>(loadD(dy.data, dy.dtype, o));
      }
      for (int64_t j = 0; j < g.n; ++j)
        storeD(dx.data, dx.dtype, g.at(r, j, g.n), acc[j]);
    }
  });
  if (bad.load() != kNone)
    return ctx.fail("topk_grad: index " + std::to_string(bad.load()) +
                    " is outside [0, " + std::to_string(g.n) + ")");
  return true;
}

} // namespace

void registerTopKKernels(KernelRegistry &r) {
  r.add("topk", kTopK);
  r.add("topk_grad", kTopKGrad);
}

} // namespace ds::rt
