//===- LayerNorm.cu - layer normalization and its gradient on CUDA --------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// One block per row, statistics in double as the CPU's layer_norm
// (Linalg.cpp) and layer_norm_grad (Grad.cpp); the gradient recomputes the
// row statistics with the forward kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

namespace ds::rt::cuda {
namespace {

/// One block per row: mean and variance in double (two passes, as the
/// CPU), then the normalized row.
__global__ void layerNormKernel(const void *x, int xt, const void *s, int st,
                                const void *b, int bt, void *y, int yt,
                                int64_t cols, double eps, double *meanOut,
                                double *rstdOut) {
  __shared__ double part[256];
  int64_t r = blockIdx.x;
  int64_t base = r * cols;
  double acc = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    acc += load(x, xt, base + c);
  double mean = blockSum(part, acc) / cols;
  acc = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    double d = load(x, xt, base + c) - mean;
    acc += d * d;
  }
  double rstd = 1.0 / sqrt(blockSum(part, acc) / cols + eps);
  if (threadIdx.x == 0 && meanOut) {
    meanOut[r] = mean;
    rstdOut[r] = rstd;
  }
  if (!y)
    return;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store(y, yt, base + c,
          (load(x, xt, base + c) - mean) * rstd * load(s, st, c) +
              (b ? load(b, bt, c) : 0.0));
}

/// Layer norm's dx, one block per row, from the saved mean and rstd.
__global__ void layerNormGradRows(const void *dy, int dyt, const void *x,
                                  int xt, const void *s, int st, void *dx,
                                  int dxt, int64_t cols, const double *mean,
                                  const double *rstd) {
  __shared__ double part[256];
  int64_t r = blockIdx.x, base = r * cols;
  double m = mean[r], rs = rstd[r], a = 0, bsum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    double xh = (load(x, xt, base + c) - m) * rs;
    double dxh = load(dy, dyt, base + c) * load(s, st, c);
    a += dxh;
    bsum += dxh * xh;
  }
  double meanD = blockSum(part, a) / cols;
  double meanDX = blockSum(part, bsum) / cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    double xh = (load(x, xt, base + c) - m) * rs;
    double dxh = load(dy, dyt, base + c) * load(s, st, c);
    store(dx, dxt, base + c, rs * (dxh - meanD - xh * meanDX));
  }
}

/// Layer norm's dscale and dbias: one thread per column over the rows.
__global__ void layerNormGradCols(const void *dy, int dyt, const void *x,
                                  int xt, void *ds, int dst, void *db, int dbt,
                                  int64_t rows, int64_t cols,
                                  const double *mean, const double *rstd) {
  DS_GRID_LOOP(c, cols) {
    double s = 0, b = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double g = load(dy, dyt, r * cols + c);
      s += g * (load(x, xt, r * cols + c) - mean[r]) * rstd[r];
      b += g;
    }
    store(ds, dst, c, s);
    store(db, dbt, c, b);
  }
}

/// The rows layer norm normalizes (the dimensions before attribute `axis`)
/// and their columns (the dimensions from it on); fails naming `kernel`
/// when `axis` is not one of x's.
bool normRows(KernelContext &ctx, const char *kernel, const TensorView &x,
              int64_t &rows, int64_t &cols) {
  int64_t axis = ctx.attrs.getInt("axis", -1);
  if (axis < 0 || axis >= x.rank())
    return ctx.fail(std::string(kernel) + " axis out of range");
  rows = prod(x.shape, 0, axis);
  cols = prod(x.shape, axis, x.shape.size());
  return true;
}

bool kLayerNorm(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &scale = ctx.in[1];
  const TensorView *bias = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  TensorView &y = ctx.out[0];
  double eps = ctx.attrs.getFloat("epsilon", 1e-5);
  int64_t rows, cols;
  if (!normRows(ctx, "layer_norm", x, rows, cols))
    return false;
  if (scale.numel() != cols || (bias && bias->numel() != cols))
    return ctx.fail("layer_norm scale/bias size does not match");
  if (rows * cols)
    layerNormKernel<<<static_cast<unsigned>(rows), 256, 0, gStream>>>(
        x.data, int(x.dtype), scale.data, int(scale.dtype),
        bias ? bias->data : nullptr, bias ? int(bias->dtype) : 0, y.data,
        int(y.dtype), cols, eps, nullptr, nullptr);
  return launched(ctx);
}

bool kLayerNormGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &x = ctx.in[1], &scale = ctx.in[2];
  TensorView &dx = ctx.out[0], &dscale = ctx.out[1], &dbias = ctx.out[2];
  double eps = ctx.attrs.getFloat("epsilon", 1e-5);
  int64_t rows, cols;
  if (!normRows(ctx, "layer_norm_grad", x, rows, cols))
    return false;
  if (scale.numel() != cols)
    return ctx.fail("layer_norm_grad scale size does not match");
  if (rows * cols == 0)
    return true;
  Scratch stats(2 * rows * sizeof(double));
  double *mean = stats.as<double>(), *rstd = mean + rows;
  layerNormKernel<<<static_cast<unsigned>(rows), 256, 0, gStream>>>(
      x.data, int(x.dtype), scale.data, int(scale.dtype), nullptr, 0, nullptr,
      0, cols, eps, mean, rstd);
  layerNormGradRows<<<static_cast<unsigned>(rows), 256, 0, gStream>>>(
      dy.data, int(dy.dtype), x.data, int(x.dtype), scale.data,
      int(scale.dtype), dx.data, int(dx.dtype), cols, mean, rstd);
  layerNormGradCols<<<blocksFor(cols), 256, 0, gStream>>>(
      dy.data, int(dy.dtype), x.data, int(x.dtype), dscale.data,
      int(dscale.dtype), dbias.data, int(dbias.dtype), rows, cols, mean, rstd);
  return launched(ctx);
}

} // namespace

void registerLayerNormKernels(KernelRegistry &r) {
  r.add("layer_norm", kLayerNorm);
  r.add("layer_norm_grad", kLayerNormGrad);
}

} // namespace ds::rt::cuda
