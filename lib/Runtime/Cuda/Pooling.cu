//===- Pooling.cu - CUDA max and average pooling and their gradients ------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twins of Cpu/Pooling.cpp (f32, f16, bf16; 1 to 3 spatial
// dimensions; the geometry from poolGeometryOf, as the CPU's). Forward:
// one thread per output element, the window's taps in the CPU's order
// (depth, row, column), f32 arithmetic as the CPU's, so that results are
// equal. Gradients: one thread per input element, which gathers the
// windows that read it (no two threads write one element) in the order
// the CPU adds them: max pooling adds each window's gradient at the
// window's first argmax (a NaN wins, as PyTorch) in ascending output
// order; average pooling adds dy / divisor, rows ascending and within a
// row the columns descending (the CPU's tap-major loop).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "ds/Support/Pooling.h"

namespace ds::rt::cuda {
namespace {

/// Splits a flat position of `size` (three dimensions) into its indices.
__device__ inline void split3(int64_t p, const int64_t size[3], int64_t idx[3]) {
  idx[2] = p % size[2];
  idx[1] = (p / size[2]) % size[1];
  idx[0] = p / (size[2] * size[1]);
}

/// Calls fn(i) for every tap of the window at output position `op` that
/// is inside the input, i its position in the plane, in the CPU's order
/// (depth, row, column).
template <typename Fn>
__device__ void forWindowTaps(const PoolGeometry &g, const int64_t op[3], Fn fn) {
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t id = op[0] * g.stride[0] - g.pad[0] + kd * g.dilation[0];
    if (id < 0 || id >= g.in[0])
      continue;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      int64_t ih = op[1] * g.stride[1] - g.pad[1] + kh * g.dilation[1];
      if (ih < 0 || ih >= g.in[1])
        continue;
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        int64_t iw = op[2] * g.stride[2] - g.pad[2] + kw * g.dilation[2];
        if (iw >= 0 && iw < g.in[2])
          fn((id * g.in[1] + ih) * g.in[2] + iw);
      }
    }
  }
}

/// The maximum of the window at output position `o` of the plane that
/// starts at element `base` of `x`, and its first argmax within the plane
/// (-1 when no tap is inside).
__device__ float windowMax(const PoolGeometry &g, const void *x, int xt,
                           int64_t base, int64_t o, int64_t &arg) {
  int64_t op[3];
  split3(o, g.out, op);
  float best = -INFINITY;
  arg = -1;
  forWindowTaps(g, op, [&](int64_t i) {
    float v = static_cast<float>(load(x, xt, base + i));
    if (v > best || isnan(v) || arg < 0) {
      best = v;
      arg = i;
    }
  });
  return best;
}

__global__ void maxPoolKernel(PoolGeometry g, const void *x, int xt, void *y,
                              int yt) {
  DS_GRID_LOOP(e, g.planes * g.outPlane()) {
    int64_t p = e / g.outPlane(), o = e % g.outPlane(), arg;
    store(y, yt, e, windowMax(g, x, xt, p * g.inPlane(), o, arg));
  }
}

__global__ void avgPoolKernel(PoolGeometry g, const void *x, int xt, void *y,
                              int yt) {
  DS_GRID_LOOP(e, g.planes * g.outPlane()) {
    int64_t p = e / g.outPlane(), op[3];
    split3(e % g.outPlane(), g.out, op);
    const int64_t base = p * g.inPlane();
    float sum = 0.0f;
    forWindowTaps(g, op, [&](int64_t i) {
      sum += static_cast<float>(load(x, xt, base + i));
    });
    int64_t div = g.divisor(op);
    store(y, yt, e, div > 0 ? sum / static_cast<float>(div) : 0.0f);
  }
}

/// The output index along dimension d whose tap k reads input index i, or
/// -1 when none does.
__device__ inline int64_t outputOf(const PoolGeometry &g, int d, int64_t i,
                                   int64_t k) {
  int64_t num = i + g.pad[d] - k * g.dilation[d];
  if (num < 0 || num % g.stride[d] != 0 || num / g.stride[d] >= g.out[d])
    return -1;
  return num / g.stride[d];
}

/// Calls fn(od, oh, ow) for every window that reads input position `ip`:
/// depth and row taps descending (the windows' rows ascending), column
/// taps descending (the windows ascending) or, with `columnTapsUp`,
/// ascending (the CPU's tap-major order in a row).
template <bool columnTapsUp, typename Fn>
__device__ void forWindowsReading(const PoolGeometry &g, const int64_t ip[3],
                                  Fn fn) {
  for (int64_t kd = g.kernel[0] - 1; kd >= 0; --kd) {
    int64_t od = outputOf(g, 0, ip[0], kd);
    if (od < 0)
      continue;
    for (int64_t kh = g.kernel[1] - 1; kh >= 0; --kh) {
      int64_t oh = outputOf(g, 1, ip[1], kh);
      if (oh < 0)
        continue;
      for (int64_t j = 0; j < g.kernel[2]; ++j) {
        int64_t ow = outputOf(g, 2, ip[2], columnTapsUp ? j : g.kernel[2] - 1 - j);
        if (ow >= 0)
          fn(od, oh, ow);
      }
    }
  }
}

__global__ void maxPoolGradKernel(PoolGeometry g, const void *x, int xt,
                                  const void *dy, int dyt, void *dx, int dxt) {
  DS_GRID_LOOP(e, g.planes * g.inPlane()) {
    int64_t p = e / g.inPlane(), i = e % g.inPlane(), ip[3];
    split3(i, g.in, ip);
    float acc = 0.0f;
    forWindowsReading<false>(g, ip, [&](int64_t od, int64_t oh, int64_t ow) {
      int64_t o = (od * g.out[1] + oh) * g.out[2] + ow, arg;
      windowMax(g, x, xt, p * g.inPlane(), o, arg);
      if (arg == i)
        acc += static_cast<float>(load(dy, dyt, p * g.outPlane() + o));
    });
    store(dx, dxt, e, acc);
  }
}

__global__ void avgPoolGradKernel(PoolGeometry g, const void *dy, int dyt,
                                  void *dx, int dxt) {
  DS_GRID_LOOP(e, g.planes * g.inPlane()) {
    int64_t p = e / g.inPlane(), ip[3];
    split3(e % g.inPlane(), g.in, ip);
    float acc = 0.0f;
    forWindowsReading<true>(g, ip, [&](int64_t od, int64_t oh, int64_t ow) {
      int64_t o[3] = {od, oh, ow};
      int64_t div = g.divisor(o);
      float v = static_cast<float>(
          load(dy, dyt, p * g.outPlane() + (od * g.out[1] + oh) * g.out[2] + ow));
      acc += div > 0 ? v / static_cast<float>(div) : 0.0f;
    });
    store(dx, dxt, e, acc);
  }
}

bool floatOperands(KernelContext &ctx) {
  for (const TensorView *t : {&ctx.in[0], &ctx.out[0]})
    if (!isFloatType(t->dtype))
      return ctx.fail("pooling operands must be f32, f16 or bf16");
  return true;
}

/// The geometry of (plain, pooled), then `launch(g, blocks)` over one
/// thread per output element, or per input element with `perInput`.
template <typename Launch>
bool runPool(KernelContext &ctx, const TensorView &plain,
             const TensorView &pooled, bool perInput, Launch launch) {
  PoolGeometry g;
  if (!floatOperands(ctx) || !poolGeometryOf(ctx, plain, pooled, g))
    return false;
  int64_t total = g.planes * (perInput ? g.inPlane() : g.outPlane());
  if (total == 0)
    return true;
  launch(g, blocksFor(total));
  return launched(ctx);
}

bool kMaxPool(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &y = ctx.out[0];
  return runPool(ctx, x, y, false, [&](const PoolGeometry &g, unsigned b) {
    maxPoolKernel<<<b, 256, 0, gStream>>>(g, x.data, int(x.dtype), y.data,
                                          int(y.dtype));
  });
}

bool kMaxPoolGrad(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &dy = ctx.in[1], &dx = ctx.out[0];
  return runPool(ctx, x, dy, true, [&](const PoolGeometry &g, unsigned b) {
    maxPoolGradKernel<<<b, 256, 0, gStream>>>(g, x.data, int(x.dtype), dy.data,
                                              int(dy.dtype), dx.data,
                                              int(dx.dtype));
  });
}

bool kAvgPool(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &y = ctx.out[0];
  return runPool(ctx, x, y, false, [&](const PoolGeometry &g, unsigned b) {
    avgPoolKernel<<<b, 256, 0, gStream>>>(g, x.data, int(x.dtype), y.data,
                                          int(y.dtype));
  });
}

bool kAvgPoolGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &dx = ctx.out[0];
  return runPool(ctx, dx, dy, true, [&](const PoolGeometry &g, unsigned b) {
    avgPoolGradKernel<<<b, 256, 0, gStream>>>(g, dy.data, int(dy.dtype),
                                              dx.data, int(dx.dtype));
  });
}

} // namespace

void registerPoolingKernels(KernelRegistry &r) {
  r.add("max_pool", kMaxPool);
  r.add("max_pool_grad", kMaxPoolGrad);
  r.add("avg_pool", kAvgPool);
  r.add("avg_pool_grad", kAvgPoolGrad);
}

} // namespace ds::rt::cuda
