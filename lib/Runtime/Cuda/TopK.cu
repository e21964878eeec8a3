//===- TopK.cu - ds.topk and its gradient on CUDA -------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twins of Cpu/TopK.cpp, in Support/TopK.h's order, so that both
// agree element by element. TopK: one thread per input element counts the
// elements of its row that come before it (its rank, O(n) each, O(n^2)
// per row: fast for the rows of routing and sampling, n up to a few
// thousand) and, when the rank is below k, writes itself there. The
// gradient: one thread per row zero-fills the row and adds its k incoming
// elements at their indices (an index out of range is reported).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"
#include "ds/Support/TopK.h"

namespace ds::rt::cuda {
namespace {

__global__ void topkKernel(const void *x, int xt, void *values, int vt,
                           void *indices, int it, TopKGeometry g,
                           bool largest) {
  DS_GRID_LOOP(e, g.rows() * g.n) {
    int64_t r = e / g.n, p = e % g.n;
    float v = static_cast<float>(load(x, xt, g.at(r, p, g.n)));
    int64_t rank = 0;
    for (int64_t q = 0; q < g.n && rank < g.k; ++q)
      if (q != p &&
          topkBefore(static_cast<float>(load(x, xt, g.at(r, q, g.n))), q, v,
                     p, largest))
        ++rank;
    if (rank < g.k) {
      int64_t o = g.at(r, rank, g.k);
      store(values, vt, o, v);
      if (it == 4)
        static_cast<int64_t *>(indices)[o] = p;
      else
        static_cast<int32_t *>(indices)[o] = static_cast<int32_t>(p);
    }
  }
}

__global__ void topkGradKernel(const void *dy, int dyt, const void *idx,
                               int it, void *dx, int dxt, TopKGeometry g,
                               long long *bad) {
  DS_GRID_LOOP(r, g.rows()) {
    for (int64_t j = 0; j < g.n; ++j)
      store(dx, dxt, g.at(r, j, g.n), 0.0);
    for (int64_t j = 0; j < g.k; ++j) {
      int64_t o = g.at(r, j, g.k);
      int64_t i = loadInt(idx, it, o);
      if (i < 0 || i >= g.n) {
        *bad = i;
        continue;
      }
      int64_t at = g.at(r, i, g.n);
      store(dx, dxt, at, load(dx, dxt, at) + load(dy, dyt, o));
    }
  }
}

bool kTopK(KernelContext &ctx) {
  const TensorView &x = ctx.in[0];
  TensorView &values = ctx.out[0], &indices = ctx.out[1];
  TopKGeometry g;
  int64_t axis = ctx.attrs.getInt("axis", -1), k = ctx.attrs.getInt("k", 0);
  if (!g.set(x.shape.data(), x.rank(), axis, k))
    return ctx.fail("topk: axis or k out of range");
  if (indices.dtype != DType::I64 && indices.dtype != DType::I32)
    return ctx.fail("topk: indices must be i64 or i32");
  int64_t n = g.rows() * g.n;
  if (n)
    topkKernel<<<blocksFor(n), 256, 0, gStream>>>(
        x.data, int(x.dtype), values.data, int(values.dtype), indices.data,
        int(indices.dtype), g, ctx.attrs.getInt("largest", 1) != 0);
  return launched(ctx);
}

bool kTopKGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &idx = ctx.in[1];
  TensorView &dx = ctx.out[0];
  TopKGeometry g;
  if (dx.rank() != dy.rank() ||
      !g.setGrad(dx.shape.data(), dy.shape.data(), dx.rank(),
                 ctx.attrs.getInt("axis", -1)))
    return ctx.fail("topk_grad: the gradient does not fit the result along "
                    "the axis");
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  if (g.rows())
    topkGradKernel<<<blocksFor(g.rows()), 256, 0, gStream>>>(
        dy.data, int(dy.dtype), idx.data, int(idx.dtype), dx.data,
        int(dx.dtype), g, bad.device());
  return launched(ctx) && bad.check(ctx, "topk_grad index", 0, g.n);
}

} // namespace

void registerTopKKernels(KernelRegistry &r) {
  r.add("topk", kTopK);
  r.add("topk_grad", kTopKGrad);
}

} // namespace ds::rt::cuda
