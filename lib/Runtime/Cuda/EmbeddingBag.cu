//===- EmbeddingBag.cu - ds.embedding_bag and its gradient on CUDA --------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twins of Cpu/EmbeddingBag.cpp. A first kernel checks the bag bounds
// (not decreasing, within [0, N]) and reports the first bad one. The
// forward pass: one thread per (bag, column) reduces the bag's rows in f32
// (sum times the per-sample weights, mean, max; an empty bag gives 0); an
// index outside the table is reported. The gradient: one thread per
// column walks the bags in order and accumulates into an f32 copy of the
// table's shape (no atomics: each column is one thread's, so runs agree
// bit for bit), then it is stored in the gradient's type; max adds each
// element at the first row that holds the bag's max, as the CPU kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"
#include "ds/Support/EmbeddingBag.h"

namespace ds::rt::cuda {
namespace {

/// Operand types and pointers both kernels pass down.
struct BagArgs {
  const void *idx;
  int it;
  const void *bounds;
  int bt;
  const void *psw; // null: every weight is 1
  int pt;
  BagGeometry g;
  int mode; // BagMode
};

__global__ void checkBoundsKernel(BagArgs a, long long *bad) {
  DS_GRID_LOOP(b, a.g.bags + 1) {
    int64_t v = loadInt(a.bounds, a.bt, b);
    int64_t prev = b ? loadInt(a.bounds, a.bt, b - 1) : 0;
    if (v < prev || v > a.g.count)
      *bad = v;
  }
}

__global__ void bagKernel(BagArgs a, const void *w, int wt, void *out,
                          int ot, long long *bad) {
  int64_t d = a.g.dim;
  DS_GRID_LOOP(e, a.g.bags * d) {
    int64_t b = e / d, c = e % d;
    int64_t lo = loadInt(a.bounds, a.bt, b), hi = loadInt(a.bounds, a.bt, b + 1);
    float acc = 0.0f;
    for (int64_t j = lo; j < hi; ++j) {
      int64_t r = loadInt(a.idx, a.it, j);
      if (r < 0 || r >= a.g.rows) {
        *bad = r;
        continue;
      }
      float v = static_cast<float>(load(w, wt, r * d + c));
      if (a.mode == int(BagMode::Max))
        acc = j == lo || v > acc ? v : acc;
      else
        acc += (a.psw ? static_cast<float>(load(a.psw, a.pt, j)) : 1.0f) * v;
    }
    if (a.mode == int(BagMode::Mean) && hi > lo)
      acc /= static_cast<float>(hi - lo);
    store(out, ot, e, acc);
  }
}

__global__ void bagGradKernel(BagArgs a, const void *dy, int dyt,
                              const void *w, int wt, float *acc,
                              long long *bad) {
  int64_t d = a.g.dim;
  DS_GRID_LOOP(c, d) {
    for (int64_t r = 0; r < a.g.rows; ++r)
      acc[r * d + c] = 0.0f;
    for (int64_t b = 0; b < a.g.bags; ++b) {
      int64_t lo = loadInt(a.bounds, a.bt, b),
              hi = loadInt(a.bounds, a.bt, b + 1);
      float g = static_cast<float>(load(dy, dyt, b * d + c));
      int64_t best = -1;
      float top = 0.0f;
      for (int64_t j = lo; j < hi; ++j) {
        int64_t r = loadInt(a.idx, a.it, j);
        if (r < 0 || r >= a.g.rows) {
          *bad = r;
          continue;
        }
        if (a.mode == int(BagMode::Max)) {
          float v = static_cast<float>(load(w, wt, r * d + c));
          if (best < 0 || v > top) {
            top = v;
            best = r;
          }
          continue;
        }
        float s = a.mode == int(BagMode::Mean)
                      ? 1.0f / static_cast<float>(hi - lo)
                      : (a.psw ? static_cast<float>(load(a.psw, a.pt, j)) : 1.0f);
        acc[r * d + c] += s * g;
      }
      if (best >= 0)
        acc[best * d + c] += g;
    }
  }
}

__global__ void storeKernel(const float *acc, void *out, int ot, int64_t n) {
  DS_GRID_LOOP(i, n) store(out, ot, i, acc[i]);
}

/// Checks shapes, mode and bounds; fills `a`.
bool prepare(KernelContext &ctx, const char *name, const TensorView &table,
             const TensorView &bags, const TensorView *psw, BagArgs &a) {
  const TensorView &idx = ctx.in[1], &bounds = ctx.in[2];
  std::string what = name;
  BagMode mode;
  if (!parseBagMode(ctx.attrs.getString("mode"), mode))
    return ctx.fail(what + ": unknown mode");
  if (!a.g.set(table.shape.data(), table.rank(), bags.shape.data(),
               bags.rank(), idx.shape.data(), idx.rank(), bounds.shape.data(),
               bounds.rank()))
    return ctx.fail(what + ": the table, bags, indices and offsets do not "
                           "fit ([V, D], [B, D], [N], [B + 1])");
  if (psw && psw->numel() != a.g.count)
    return ctx.fail(what + ": per_sample_weights are not one per index");
  a.idx = idx.data;
  a.it = int(idx.dtype);
  a.bounds = bounds.data;
  a.bt = int(bounds.dtype);
  a.psw = psw ? psw->data : nullptr;
  a.pt = psw ? int(psw->dtype) : 1;
  a.mode = int(mode);
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  checkBoundsKernel<<<blocksFor(a.g.bags + 1), 256, 0, gStream>>>(
      a, bad.device());
  return launched(ctx) &&
         bad.check(ctx, (what + " offset (the bounds may not decrease)")
                            .c_str(), 0, a.g.count + 1);
}

bool kEmbeddingBag(KernelContext &ctx) {
  const TensorView &w = ctx.in[0];
  TensorView &out = ctx.out[0];
  BagArgs a;
  if (!prepare(ctx, "embedding_bag", w, out,
               ctx.in.size() > 3 ? &ctx.in[3] : nullptr, a))
    return false;
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  int64_t n = a.g.bags * a.g.dim;
  if (n)
    bagKernel<<<blocksFor(n), 256, 0, gStream>>>(
        a, w.data, int(w.dtype), out.data, int(out.dtype), bad.device());
  return launched(ctx) &&
         bad.check(ctx, "embedding_bag index", 0, a.g.rows);
}

bool kEmbeddingBagGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0];
  TensorView &out = ctx.out[0];
  bool isMax = ctx.attrs.getString("mode") == "max";
  const TensorView *extra = ctx.in.size() > 3 ? &ctx.in[3] : nullptr;
  if (isMax && (!extra || extra->shape != out.shape))
    return ctx.fail("embedding_bag_grad: mode max needs the table");
  BagArgs a;
  if (!prepare(ctx, "embedding_bag_grad", out, dy, isMax ? nullptr : extra,
               a))
    return false;
  Scratch acc(sizeof(float) * out.numel());
  if (!acc.p)
    return ctx.fail("embedding_bag_grad: no device memory for the f32 sums");
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  if (a.g.dim)
    bagGradKernel<<<blocksFor(a.g.dim), 256, 0, gStream>>>(
        a, dy.data, int(dy.dtype), isMax ? extra->data : nullptr,
        isMax ? int(extra->dtype) : 1, acc.as<float>(), bad.device());
  if (out.numel())
    storeKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
        acc.as<float>(), out.data, int(out.dtype), out.numel());
  return launched(ctx) &&
         bad.check(ctx, "embedding_bag_grad index", 0, a.g.rows);
}

} // namespace

void registerEmbeddingBagKernels(KernelRegistry &r) {
  r.add("embedding_bag", kEmbeddingBag);
  r.add("embedding_bag_grad", kEmbeddingBagGrad);
}

} // namespace ds::rt::cuda
