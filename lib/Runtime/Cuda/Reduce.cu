//===- Reduce.cu - reductions on CUDA -------------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// One thread per output element over its reduced elements; sums in double
// and comparisons in double, as the CPU's Reduce.cpp.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

namespace ds::rt::cuda {
namespace {

/// Reductions: one thread per output element over its reduced elements
/// (`count` of them, at `rstrides` over the reduced dimensions), the sum
/// in double as the CPU kernel.
struct Reduction {
  int keptRank = 0, redRank = 0;
  int64_t keptShape[kMaxRank] = {}, keptStride[kMaxRank] = {};
  int64_t redShape[kMaxRank] = {}, redStride[kMaxRank] = {};
};

__global__ void reduceKernel(Reduction r, int64_t n, int64_t count,
                             const void *a, int at, void *o, int ot, int kind) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = 0, rem = i;
    for (int d = r.keptRank - 1; d >= 0; --d) {
      base += (rem % r.keptShape[d]) * r.keptStride[d];
      rem /= r.keptShape[d];
    }
    double acc = kind == 2 ? -INFINITY : 0.0;
    for (int64_t j = 0; j < count; ++j) {
      int64_t off = base, q = j;
      for (int d = r.redRank - 1; d >= 0; --d) {
        off += (q % r.redShape[d]) * r.redStride[d];
        q /= r.redShape[d];
      }
      double v = load(a, at, off);
      acc = kind == 2 ? (v > acc || isnan(v) ? v : acc) : acc + v;
    }
    if (kind == 1 && count > 0)
      acc /= static_cast<double>(count);
    store(o, ot, i, acc);
  }
}

template <int KIND> bool kReduce(KernelContext &ctx) {
  const TensorView &a = ctx.in[0];
  TensorView &o = ctx.out[0];
  std::vector<int64_t> axes = ctx.attrs.getInts("axes");
  if (a.rank() > kMaxRank)
    return ctx.fail("rank above 8");
  std::vector<bool> reduced(a.rank(), false);
  for (int64_t ax : axes) {
    if (ax < 0 || ax >= a.rank())
      return ctx.fail("reduction axis out of range");
    reduced[ax] = true;
  }
  std::vector<int64_t> st(a.rank(), 1);
  for (int64_t d = a.rank() - 2; d >= 0; --d)
    st[d] = st[d + 1] * a.shape[d + 1];
  Reduction r;
  int64_t count = 1;
  for (int64_t d = 0; d < a.rank(); ++d) {
    if (reduced[d]) {
      r.redShape[r.redRank] = a.shape[d];
      r.redStride[r.redRank++] = st[d];
      count *= a.shape[d];
    } else {
      r.keptShape[r.keptRank] = a.shape[d];
      r.keptStride[r.keptRank++] = st[d];
    }
  }
  int64_t n = o.numel();
  if (n == 0)
    return true;
  reduceKernel<<<blocksFor(n), 256, 0, gStream>>>(
      r, n, count, a.data, int(a.dtype), o.data, int(o.dtype), KIND);
  return launched(ctx);
}

} // namespace

void registerReduceKernels(KernelRegistry &r) {
  r.add("reduce_sum", kReduce<0>);
  r.add("reduce_mean", kReduce<1>);
  r.add("reduce_max", kReduce<2>);
}

} // namespace ds::rt::cuda
