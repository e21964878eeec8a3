//===- Grad.cu - gradient kernels on CUDA: gather, softmax ----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The gradients of gather (float atomics into an f32 accumulator) and of
// softmax and log-softmax, as the CPU's Grad.cpp. The other gradients live
// with their forward kernels: layer_norm_grad (LayerNorm.cu), loss_grad
// (Losses.cu), slice_grad (Movement.cu).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

namespace ds::rt::cuda {
namespace {

__global__ void gatherGradKernel(const void *g, int gt, const void *idx, int it,
                                 float *acc, int64_t outer, int64_t dim,
                                 int64_t count, int64_t inner, long long *bad) {
  int64_t n = outer * count * inner;
  DS_GRID_LOOP(e, n) {
    int64_t at = gatherSource(e, idx, it, dim, count, inner, bad);
    if (at >= 0)
      atomicAdd(acc + at, static_cast<float>(load(g, gt, e)));
  }
}

__global__ void convertKernel(const float *src, void *dst, int dt, int64_t n) {
  DS_GRID_LOOP(i, n) store(dst, dt, i, src[i]);
}

__global__ void softmaxGradKernel(int64_t rows, int64_t dim, int64_t inner,
                                  const void *dy, int dyt, const void *y,
                                  int yt, void *dx, int dxt, bool logOut) {
  DS_GRID_LOOP(r, rows) {
    int64_t base = (r / inner) * dim * inner + r % inner;
    double s = 0;
    for (int64_t k = 0; k < dim; ++k) {
      int64_t i = base + k * inner;
      double g = load(dy, dyt, i);
      s += logOut ? g : g * load(y, yt, i);
    }
    for (int64_t k = 0; k < dim; ++k) {
      int64_t i = base + k * inner;
      double g = load(dy, dyt, i), v = load(y, yt, i);
      store(dx, dxt, i, logOut ? g - exp(v) * s : v * (g - s));
    }
  }
}

bool kGatherGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0], &idx = ctx.in[1];
  TensorView &out = ctx.out[0];
  GatherGeometry geo;
  if (!gatherShape(ctx, "gather_grad", out.shape, idx, g.numel(), geo))
    return false;
  // Float atomics into an f32 accumulator (the output itself when f32).
  bool direct = out.dtype == DType::F32;
  Scratch acc(direct ? 0 : out.numel() * sizeof(float));
  float *a = direct ? out.as<float>() : acc.as<float>();
  if (!a || cudaMemsetAsync(a, 0, out.numel() * sizeof(float), gStream) !=
                cudaSuccess)
    return ctx.fail("cannot clear the gather_grad accumulator");
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  if (g.numel())
    gatherGradKernel<<<blocksFor(g.numel()), 256, 0, gStream>>>(
        g.data, int(g.dtype), idx.data, int(idx.dtype), a, geo.outer, geo.dim,
        geo.count, geo.inner, bad.device());
  if (!direct && out.numel())
    convertKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
        a, out.data, int(out.dtype), out.numel());
  return launched(ctx) &&
         bad.check(ctx, "gather_grad index", -geo.dim, geo.dim);
}

bool kSoftmaxGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &y = ctx.in[1];
  TensorView &dx = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  if (axis < 0 || axis >= y.rank())
    return ctx.fail("softmax_grad axis out of range");
  int64_t outer = prod(y.shape, 0, axis), dim = y.shape[axis];
  int64_t inner = prod(y.shape, axis + 1, y.shape.size());
  int64_t rows = outer * inner;
  if (rows && dim)
    softmaxGradKernel<<<blocksFor(rows), 256, 0, gStream>>>(
        rows, dim, inner, dy.data, int(dy.dtype), y.data, int(y.dtype), dx.data,
        int(dx.dtype), ctx.attrs.getInt("log", 0) != 0);
  return launched(ctx);
}

} // namespace

void registerGradKernels(KernelRegistry &r) {
  r.add("gather_grad", kGatherGrad);
  r.add("softmax_grad", kSoftmaxGrad);
}

} // namespace ds::rt::cuda
