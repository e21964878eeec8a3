//===- Attention.cu - fused attention and its gradient on CUDA ------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twins of Cpu/Attention.cpp, on AttentionGeometry.h (operands read
// through their per-head offsets and row strides). A plain,
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
  // Query, key, value and output gradient rows (HeadOperand): device
  // copies of the per-head bases, and the row strides.
  const int64_t *qBase, *kBase, *vBase, *oBase;
  int64_t qRow, kRow, vRow, oRow;
};

/// The five per-head offset tables in one device buffer of 5 x batch:
/// mask, query, key, value, output gradient (zeros where absent).
Geo deviceGeo(const AttentionGeometry &g, const int64_t *base,
              const void *mask) {
  int64_t b = g.batch;
  return Geo{g.batch,    g.tq,       g.tk,
             g.d,        g.dv,       g.maskRow,
             g.maskCol,  static_cast<int>(g.kind), g.scale,
             g.fill,     base,       mask,
             base + b,   base + 2 * b, base + 3 * b,
             base + 4 * b, g.q.row,  g.k.row,
             g.v.row,    g.dout.row};
}

__device__ const float *rowAt(const float *p, const int64_t *base,
                              int64_t row, int64_t n, int64_t t) {
  return p + base[n] + t * row;
}

/// The masked, scaled score of (n, i, j); `filled` tells a fill mask set it.
__device__ float score(const Geo &g, const float *q, const float *k,
                       int64_t n, int64_t i, int64_t j, bool &filled) {
  const float *qi = rowAt(q, g.qBase, g.qRow, n, i),
              *kj = rowAt(k, g.kBase, g.kRow, n, j);
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
      const float *vj = rowAt(v, g.vBase, g.vRow, n, j);
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
    const float *dOi = rowAt(dout, g.oBase, g.oRow, row / g.tq, row % g.tq);
    double s = 0.0;
    for (int64_t c = 0; c < g.dv; ++c)
      s += static_cast<double>(dOi[c]) * out[row * g.dv + c];
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
  const float *dOi = rowAt(dout, g.oBase, g.oRow, n, i),
              *vj = rowAt(v, g.vBase, g.vRow, n, j);
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
      const float *kj = rowAt(k, g.kBase, g.kRow, n, j);
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
      const float *qi = rowAt(q, g.qBase, g.qRow, n, i),
                  *dOi = rowAt(dout, g.oBase, g.oRow, n, i);
      for (int64_t c = 0; c < g.dv; ++c)
        dvj[c] += p * dOi[c];
      for (int64_t c = 0; c < g.d; ++c)
        dkj[c] += g.scale * ds * qi[c];
    }
  }
}

/// The per-head offsets of the mask and the operands on the device (the
/// layout deviceGeo reads; a copy from pageable memory is staged before
/// cudaMemcpyAsync returns).
bool uploadBase(KernelContext &ctx, const AttentionGeometry &g,
                Scratch &dev) {
  if (!dev.p)
    return ctx.fail("fused_attention: no device memory for the offsets");
  std::vector<int64_t> host(5 * g.batch, 0);
  const std::vector<int64_t> *parts[] = {&g.maskBase, &g.q.base, &g.k.base,
                                         &g.v.base, &g.dout.base};
  for (int i = 0; i < 5; ++i)
    if (static_cast<int64_t>(parts[i]->size()) == g.batch)
      std::copy(parts[i]->begin(), parts[i]->end(),
                host.begin() + i * g.batch);
  if (cudaMemcpyAsync(dev.p, host.data(), host.size() * sizeof(int64_t),
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
  Scratch base(5 * g.batch * sizeof(int64_t));
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
  Scratch base(5 * g.batch * sizeof(int64_t)), rowDot(rows * sizeof(float));
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
