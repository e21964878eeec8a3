//===- Attention.cu - fused attention and its gradient on CUDA ------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twins of Cpu/Attention.cpp, on AttentionGeometry.h. A plain,
// correct kernel, not a tuned one: the forward is one thread per query
// row with the online softmax in registers and the output accumulated in
// place; the gradient is one thread per query row for dQ and one per key
// row for dK and dV, each recomputing its probabilities from the saved
// logsumexp, so no thread writes another's row (no atomics) and nothing of
// size T x T is stored.
//
//===----------------------------------------------------------------------===//

#include "../AttentionGeometry.h"
#include "CudaCommon.cuh"

namespace ds::rt::cuda {
namespace {

/// What the device kernels read of the geometry.
struct Geo {
  int64_t batch, tq, tk, d, dv, maskRow, maskCol;
  int kind; // AttentionMask
  float scale, fill;
  const int64_t *maskBase; // device copy, batch entries
  const void *mask;
};

Geo deviceGeo(const AttentionGeometry &g, const int64_t *base,
              const void *mask) {
  return Geo{g.batch,   g.tq,      g.tk,
             g.d,       g.dv,      g.maskRow,
             g.maskCol, static_cast<int>(g.kind), g.scale,
             g.fill,    base,      mask};
}

/// The masked, scaled score of (n, i, j); `filled` tells a fill mask set it.
__device__ float score(const Geo &g, const float *q, const float *k,
                       int64_t n, int64_t i, int64_t j, bool &filled) {
  const float *qi = q + (n * g.tq + i) * g.d, *kj = k + (n * g.tk + j) * g.d;
  float s = 0.0f;
  for (int64_t c = 0; c < g.d; ++c)
    s += qi[c] * kj[c];
  s *= g.scale;
  filled = false;
  if (g.kind == static_cast<int>(AttentionMask::None))
    return s;
  int64_t at = g.maskBase[n] + i * g.maskRow + j * g.maskCol;
  if (g.kind == static_cast<int>(AttentionMask::Add))
    return s + static_cast<const float *>(g.mask)[at];
  bool set = static_cast<const uint8_t *>(g.mask)[at] != 0;
  filled = set == (g.kind == static_cast<int>(AttentionMask::FillTrue));
  return filled ? g.fill : s;
}

__global__ void forwardKernel(Geo g, const float *q, const float *k,
                              const float *v, float *out, float *lse) {
  DS_GRID_LOOP(row, g.batch * g.tq) {
    int64_t n = row / g.tq, i = row % g.tq;
    float *o = out + row * g.dv;
    for (int64_t c = 0; c < g.dv; ++c)
      o[c] = 0.0f;
    float m = -INFINITY;
    double l = 0.0;
    for (int64_t j = 0; j < g.tk; ++j) {
      bool filled;
      float s = score(g, q, k, n, i, j, filled);
      if (s == -INFINITY)
        continue;
      float mx = fmaxf(m, s);
      float alpha = expf(m - mx), p = expf(s - mx);
      l = l * alpha + p;
      m = mx;
      const float *vj = v + (n * g.tk + j) * g.dv;
      for (int64_t c = 0; c < g.dv; ++c)
        o[c] = o[c] * alpha + p * vj[c];
    }
    if (l == 0.0) {
      for (int64_t c = 0; c < g.dv; ++c)
        o[c] = NAN;
      lse[row] = -INFINITY;
      continue;
    }
    float inv = static_cast<float>(1.0 / l);
    for (int64_t c = 0; c < g.dv; ++c)
      o[c] *= inv;
    lse[row] = m + static_cast<float>(log(l));
  }
}

/// rowDot[n, i] = sum_c dO O.
__global__ void rowDotKernel(Geo g, const float *out, const float *dout,
                             float *rowDot) {
  DS_GRID_LOOP(row, g.batch * g.tq) {
    double s = 0.0;
    for (int64_t c = 0; c < g.dv; ++c)
      s += static_cast<double>(dout[row * g.dv + c]) * out[row * g.dv + c];
    rowDot[row] = static_cast<float>(s);
  }
}

/// The score gradient dS of (n, i, j) and its probability p.
__device__ float scoreGrad(const Geo &g, const float *q, const float *k,
                           const float *v, const float *lse,
                           const float *dout, const float *rowDot, int64_t n,
                           int64_t i, int64_t j, float &p) {
  bool filled;
  float s = score(g, q, k, n, i, j, filled);
  int64_t row = n * g.tq + i;
  p = expf(s - lse[row]);
  const float *dOi = dout + row * g.dv, *vj = v + (n * g.tk + j) * g.dv;
  float dp = 0.0f;
  for (int64_t c = 0; c < g.dv; ++c)
    dp += dOi[c] * vj[c];
  return filled ? 0.0f : p * (dp - rowDot[row]);
}

__global__ void gradQueryKernel(Geo g, const float *q, const float *k,
                                const float *v, const float *lse,
                                const float *dout, const float *rowDot,
                                float *dq) {
  DS_GRID_LOOP(row, g.batch * g.tq) {
    int64_t n = row / g.tq, i = row % g.tq;
    float *dqi = dq + row * g.d;
    for (int64_t c = 0; c < g.d; ++c)
      dqi[c] = 0.0f;
    for (int64_t j = 0; j < g.tk; ++j) {
      float p, ds = scoreGrad(g, q, k, v, lse, dout, rowDot, n, i, j, p);
      if (p == 0.0f)
        continue;
      const float *kj = k + (n * g.tk + j) * g.d;
      for (int64_t c = 0; c < g.d; ++c)
        dqi[c] += g.scale * ds * kj[c];
    }
  }
}

__global__ void gradKeyValueKernel(Geo g, const float *q, const float *k,
                                   const float *v, const float *lse,
                                   const float *dout, const float *rowDot,
                                   float *dk, float *dv) {
  DS_GRID_LOOP(col, g.batch * g.tk) {
    int64_t n = col / g.tk, j = col % g.tk;
    float *dkj = dk + col * g.d, *dvj = dv + col * g.dv;
    for (int64_t c = 0; c < g.d; ++c)
      dkj[c] = 0.0f;
    for (int64_t c = 0; c < g.dv; ++c)
      dvj[c] = 0.0f;
    for (int64_t i = 0; i < g.tq; ++i) {
      float p, ds = scoreGrad(g, q, k, v, lse, dout, rowDot, n, i, j, p);
      if (p == 0.0f)
        continue;
      int64_t row = n * g.tq + i;
      const float *qi = q + row * g.d, *dOi = dout + row * g.dv;
      for (int64_t c = 0; c < g.dv; ++c)
        dvj[c] += p * dOi[c];
      for (int64_t c = 0; c < g.d; ++c)
        dkj[c] += g.scale * ds * qi[c];
    }
  }
}

/// The mask's per-head offsets on the device (null without a mask).
bool uploadBase(KernelContext &ctx, const AttentionGeometry &g,
                Scratch &dev) {
  if (!dev.p)
    return ctx.fail("fused_attention: no device memory for the mask offsets");
  if (cudaMemcpyAsync(dev.p, g.maskBase.data(), g.batch * sizeof(int64_t),
                      cudaMemcpyHostToDevice, gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

bool kFusedAttention(KernelContext &ctx) {
  AttentionGeometry g;
  const TensorView *mask;
  if (!attentionForwardOperands(ctx, g, mask))
    return false;
  int64_t rows = g.batch * g.tq;
  if (rows == 0)
    return true;
  Scratch base(g.batch * sizeof(int64_t));
  if (!uploadBase(ctx, g, base))
    return false;
  Geo dg = deviceGeo(g, base.as<int64_t>(), mask ? mask->data : nullptr);
  forwardKernel<<<blocksFor(rows), 256, 0, gStream>>>(
      dg, ctx.in[0].as<float>(), ctx.in[1].as<float>(), ctx.in[2].as<float>(),
      ctx.out[0].as<float>(), ctx.out[1].as<float>());
  return launched(ctx);
}

bool kFusedAttentionGrad(KernelContext &ctx) {
  AttentionGeometry g;
  const TensorView *mask;
  if (!attentionGradOperands(ctx, g, mask))
    return false;
  int64_t rows = g.batch * g.tq, cols = g.batch * g.tk;
  if (rows == 0 || cols == 0)
    return true;
  Scratch base(g.batch * sizeof(int64_t)), rowDot(rows * sizeof(float));
  if (!uploadBase(ctx, g, base))
    return false;
  if (!rowDot.p)
    return ctx.fail("fused_attention_grad: no device memory for row sums");
  Geo dg = deviceGeo(g, base.as<int64_t>(), mask ? mask->data : nullptr);
  const float *q = ctx.in[0].as<float>(), *k = ctx.in[1].as<float>(),
              *v = ctx.in[2].as<float>(), *lse = ctx.in[4].as<float>(),
              *dout = ctx.in[5].as<float>();
  rowDotKernel<<<blocksFor(rows), 256, 0, gStream>>>(
      dg, ctx.in[3].as<float>(), dout, rowDot.as<float>());
  gradQueryKernel<<<blocksFor(rows), 256, 0, gStream>>>(
      dg, q, k, v, lse, dout, rowDot.as<float>(), ctx.out[0].as<float>());
  gradKeyValueKernel<<<blocksFor(cols), 256, 0, gStream>>>(
      dg, q, k, v, lse, dout, rowDot.as<float>(), ctx.out[1].as<float>(),
      ctx.out[2].as<float>());
  return launched(ctx);
}

} // namespace

void registerAttentionKernels(KernelRegistry &r) {
  r.add("fused_attention", kFusedAttention);
  r.add("fused_attention_grad", kFusedAttentionGrad);
}

} // namespace ds::rt::cuda
