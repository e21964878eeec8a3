//===- CudaTraining.cu - the CUDA backend: movement, norms, losses, ------===//
//                      optimizers, overflow check and collectives
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Each kernel follows its CPU twin in lib/Runtime/Cpu (same operands,
// attributes, accumulation in double where the CPU accumulates in double)
// so that the unit tests can compare them element by element. Collectives
// go through NCCL (opened with dlopen, its communicator set up over MPI at
// the first collective); asynchronous ones run on a second stream and the
// wait kernel makes the compute stream wait for their event.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "ds/Runtime/Comm.h"
#include "ds/Runtime/Schedule.h"

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <map>

namespace ds::rt::cuda {
namespace {

__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// One device scratch word: an index found out of range (or none).
__device__ long long gBadIndex;

bool resetBad(KernelContext &ctx) {
  long long none = LLONG_MIN;
  if (cudaMemcpyToSymbolAsync(gBadIndex, &none, sizeof none, 0,
                              cudaMemcpyHostToDevice, gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

bool checkBad(KernelContext &ctx, const char *what, int64_t lo, int64_t hi) {
  long long bad = 0;
  if (cudaMemcpyFromSymbolAsync(&bad, gBadIndex, sizeof bad, 0,
                                cudaMemcpyDeviceToHost, gStream) != cudaSuccess ||
      cudaStreamSynchronize(gStream) != cudaSuccess)
    return launched(ctx);
  if (bad != LLONG_MIN)
    return ctx.fail(std::string(what) + " " + std::to_string(bad) +
                    " is outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + ")");
  return true;
}

//===----------------------------------------------------------------------===//
// Movement
//===----------------------------------------------------------------------===//

__global__ void gatherKernel(const char *src, const void *idx, int it,
                             char *dst, int64_t outer, int64_t dim,
                             int64_t count, int64_t inner, int64_t es) {
  int64_t n = outer * count * inner;
  DS_GRID_LOOP(e, n) {
    int64_t i = e % inner, r = e / inner, j = r % count, o = r / count;
    int64_t k = loadInt(idx, it, j);
    if (k < -dim || k >= dim) {
      gBadIndex = k;
      continue;
    }
    if (k < 0)
      k += dim;
    const char *s = src + ((o * dim + k) * inner + i) * es;
    char *d = dst + e * es;
    for (int64_t b = 0; b < es; ++b)
      d[b] = s[b];
  }
}

__global__ void gatherGradKernel(const void *g, int gt, const void *idx,
                                 int it, float *acc, int64_t outer,
                                 int64_t dim, int64_t count, int64_t inner) {
  int64_t n = outer * count * inner;
  DS_GRID_LOOP(e, n) {
    int64_t i = e % inner, r = e / inner, j = r % count, o = r / count;
    int64_t k = loadInt(idx, it, j);
    if (k < -dim || k >= dim) {
      gBadIndex = k;
      continue;
    }
    if (k < 0)
      k += dim;
    atomicAdd(acc + (o * dim + k) * inner + i, static_cast<float>(load(g, gt, e)));
  }
}

__global__ void convertKernel(const float *src, void *dst, int dt, int64_t n) {
  DS_GRID_LOOP(i, n) store(dst, dt, i, src[i]);
}

/// out[i] = in[offset(i)] by a layout's first strides plus `base` (bytes
/// per element `es`).
__global__ void stridedKernel(Layout l, int64_t n, const char *src,
                              int64_t base, char *dst, int64_t es) {
  DS_GRID_LOOP(i, n) {
    int64_t off[1];
    offsets(l, i, 1, off);
    const char *s = src + (base + off[0]) * es;
    char *d = dst + i * es;
    for (int64_t b = 0; b < es; ++b)
      d[b] = s[b];
  }
}

/// The inverse: dst[base + offset(i)] = src[i].
__global__ void scatterKernel(Layout l, int64_t n, const char *src,
                              int64_t base, char *dst, int64_t es) {
  DS_GRID_LOOP(i, n) {
    int64_t off[1];
    offsets(l, i, 1, off);
    const char *s = src + i * es;
    char *d = dst + (base + off[0]) * es;
    for (int64_t b = 0; b < es; ++b)
      d[b] = s[b];
  }
}

/// Chunks of `chunk` elements: dst[o*dstStride + at + k] = src[o*chunk + k]
/// (concat), or the reverse with `split`.
__global__ void chunkKernel(const char *src, char *dst, int64_t outer,
                            int64_t chunk, int64_t wide, int64_t at,
                            int64_t es, bool split) {
  int64_t n = outer * chunk;
  DS_GRID_LOOP(e, n) {
    int64_t o = e / chunk, k = e % chunk;
    int64_t narrow = e, broad = o * wide + at + k;
    const char *s = src + (split ? broad : narrow) * es;
    char *d = dst + (split ? narrow : broad) * es;
    for (int64_t b = 0; b < es; ++b)
      d[b] = s[b];
  }
}

__global__ void triluKernel(const char *src, char *dst, int64_t n,
                            int64_t rows, int64_t cols, bool upper, int64_t k,
                            int64_t es) {
  DS_GRID_LOOP(i, n) {
    int64_t r = (i / cols) % rows, c = i % cols;
    bool keep = upper ? (c - r >= k) : (c - r <= k);
    for (int64_t b = 0; b < es; ++b)
      dst[i * es + b] = keep ? src[i * es + b] : 0;
  }
}

__global__ void rangeKernel(void *out, int ot, int64_t n, double s, double d,
                            bool isInt, long long si, long long di) {
  DS_GRID_LOOP(i, n) {
    if (isInt)
      store(out, ot, i, static_cast<double>(si + i * di));
    else
      store(out, ot, i, s + i * d);
  }
}

Layout contiguousLayout(const std::vector<int64_t> &shape,
                        const std::vector<int64_t> &strides) {
  Layout l;
  l.rank = static_cast<int>(shape.size());
  for (int d = 0; d < l.rank; ++d) {
    l.shape[d] = shape[d];
    l.strides[0][d] = strides[d];
  }
  return l;
}

//===----------------------------------------------------------------------===//
// Norms, softmax gradient, losses
//===----------------------------------------------------------------------===//

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
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  double mean = part[0] / cols;
  __syncthreads();
  acc = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    double d = load(x, xt, base + c) - mean;
    acc += d * d;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  double rstd = 1.0 / sqrt(part[0] / cols + eps);
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
  __shared__ double part[2][256];
  int64_t r = blockIdx.x, base = r * cols;
  double m = mean[r], rs = rstd[r], a = 0, bsum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    double xh = (load(x, xt, base + c) - m) * rs;
    double dxh = load(dy, dyt, base + c) * load(s, st, c);
    a += dxh;
    bsum += dxh * xh;
  }
  part[0][threadIdx.x] = a;
  part[1][threadIdx.x] = bsum;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      part[0][threadIdx.x] += part[0][threadIdx.x + w];
      part[1][threadIdx.x] += part[1][threadIdx.x + w];
    }
    __syncthreads();
  }
  double meanD = part[0][0] / cols, meanDX = part[1][0] / cols;
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

/// Per (n, d): -w * log p(label) (and its weight), with log-softmax over C
/// first when `softmax`; `logp` (optional) receives the log-probabilities.
__global__ void lossRows(const void *scores, int st, const void *labels,
                         int lt, const void *weights, int wt, int64_t N,
                         int64_t C, int64_t D, bool softmax, bool hasIgnore,
                         long long ignore, double *loss, double *weight,
                         void *logp, int lpt) {
  DS_GRID_LOOP(r, N * D) {
    int64_t n = r / D, d = r % D;
    double ls = 0;
    if (softmax) {
      double mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < C; ++c)
        mx = fmax(mx, load(scores, st, (n * C + c) * D + d));
      for (int64_t c = 0; c < C; ++c)
        sum += exp(load(scores, st, (n * C + c) * D + d) - mx);
      ls = log(sum) + mx;
      if (logp)
        for (int64_t c = 0; c < C; ++c) {
          int64_t i = (n * C + c) * D + d;
          store(logp, lpt, i, load(scores, st, i) - ls);
        }
    }
    int64_t y = loadInt(labels, lt, r);
    double l = 0, w = 0;
    if (!(hasIgnore && y == ignore)) {
      if (y < 0 || y >= C) {
        gBadIndex = y;
      } else {
        w = weights ? load(weights, wt, y) : 1.0;
        l = -w * (load(scores, st, (n * C + y) * D + d) - ls);
      }
    }
    loss[r] = l;
    weight[r] = w;
  }
}

/// The mean or sum of per-row losses (one block, in double).
__global__ void lossTotal(const double *loss, const double *weight, int64_t n,
                          int mode, void *out, int ot) {
  __shared__ double part[2][256];
  double l = 0, w = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    l += loss[i];
    w += weight[i];
  }
  part[0][threadIdx.x] = l;
  part[1][threadIdx.x] = w;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      part[0][threadIdx.x] += part[0][threadIdx.x + s];
      part[1][threadIdx.x] += part[1][threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (mode == 1) // sum
      store(out, ot, 0, part[0][0]);
    else // mean
      store(out, ot, 0, part[1][0] == 0 ? NAN : part[0][0] / part[1][0]);
  }
}

__global__ void copyLoss(const double *loss, void *out, int ot, int64_t n) {
  DS_GRID_LOOP(i, n) store(out, ot, i, loss[i]);
}

/// The loss gradient per (n, d): scale * (p - onehot) with the CPU's
/// weighting; `wsum` is the total label weight (mean).
__global__ void lossGradRows(const void *g, int gt, const void *scores, int st,
                             const void *labels, int lt, const void *weights,
                             int wt, int64_t N, int64_t C, int64_t D,
                             int mode, bool softmax, bool hasIgnore,
                             long long ignore, const double *wsum, void *out,
                             int ot) {
  DS_GRID_LOOP(r, N * D) {
    int64_t n = r / D, d = r % D;
    int64_t y = loadInt(labels, lt, r);
    double w = 0;
    if (!(hasIgnore && y == ignore) && y >= 0 && y < C)
      w = weights ? load(weights, wt, y) : 1.0;
    double scale = mode == 2 ? load(g, gt, r) : load(g, gt, 0);
    if (mode == 0)
      scale = *wsum == 0 ? 0.0 : scale / *wsum;
    scale *= w;
    double mx = -INFINITY, sum = 0;
    if (softmax) {
      for (int64_t c = 0; c < C; ++c)
        mx = fmax(mx, load(scores, st, (n * C + c) * D + d));
      for (int64_t c = 0; c < C; ++c)
        sum += exp(load(scores, st, (n * C + c) * D + d) - mx);
    }
    for (int64_t c = 0; c < C; ++c) {
      int64_t at = (n * C + c) * D + d;
      double p = softmax ? exp(load(scores, st, at) - mx) / sum : 0.0;
      double v = scale * (p - (c == y && w != 0 ? 1.0 : 0.0));
      store(out, ot, at, w == 0 ? 0.0 : v);
    }
  }
}

__global__ void labelWeights(const void *labels, int lt, const void *weights,
                             int wt, int64_t n, int64_t C, bool hasIgnore,
                             long long ignore, double *w) {
  DS_GRID_LOOP(i, n) {
    int64_t y = loadInt(labels, lt, i);
    double v = 0;
    if (!(hasIgnore && y == ignore)) {
      if (y < 0 || y >= C)
        gBadIndex = y;
      else
        v = weights ? load(weights, wt, y) : 1.0;
    }
    w[i] = v;
  }
}

__global__ void sumDoubles(const double *v, int64_t n, double *out) {
  __shared__ double part[256];
  double a = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    a += v[i];
  part[threadIdx.x] = a;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *out = part[0];
}

/// Scratch device memory for a kernel, freed on the stream.
struct Scratch {
  void *p = nullptr;
  explicit Scratch(size_t bytes) {
    if (cudaMallocAsync(&p, std::max<size_t>(bytes, 8), gStream) != cudaSuccess)
      p = nullptr;
  }
  ~Scratch() {
    if (p)
      cudaFreeAsync(p, gStream);
  }
  template <typename T> T *as() const { return static_cast<T *>(p); }
};

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

/// The step counter (a device scalar) on the host.
bool hostStep(KernelContext &ctx, const TensorView &t, int64_t &step) {
  int64_t v = 0;
  if (t.dtype == DType::I64) {
    if (!readBack(ctx, &v, t.data, 8))
      return false;
  } else {
    return ctx.fail("optimizer step must be i64");
  }
  step = v;
  return true;
}

__global__ void copyFloats(const float *src, float *dst, int64_t n) {
  DS_GRID_LOOP(i, n) dst[i] = src[i];
}

/// Accumulation: acc += g (not the last micro-batch), or g := (acc + g) / k
/// into `mean` and acc := 0 (the last).
__global__ void accumulateKernel(const float *acc, const float *g,
                                 float *accOut, float *mean, int64_t n,
                                 bool last, float inv) {
  DS_GRID_LOOP(i, n) {
    float s = acc[i] + g[i];
    if (last) {
      mean[i] = s * inv;
      accOut[i] = 0.0f;
    } else {
      accOut[i] = s;
    }
  }
}

__global__ void adamKernel(const float *P, const float *G, const float *M,
                           const float *V, float *Po, float *Mo, float *Vo,
                           int64_t n, float b1, float b2, float a1, float a2,
                           float eps, float bc2Sqrt, float stepSize,
                           bool hasWd, bool decoupled, float wd, float decay) {
  DS_GRID_LOOP(i, n) {
    float p = P[i], gr = G[i];
    if (hasWd) {
      if (decoupled)
        p = p * decay;
      else
        gr = gr + wd * p;
    }
    float m = M[i] * b1 + gr * a1;
    float v = V[i] * b2 + a2 * gr * gr;
    float denom = sqrtf(v) / bc2Sqrt + eps;
    Mo[i] = m;
    Vo[i] = v;
    Po[i] = p + (-stepSize) * (m / denom);
  }
}

/// Lamb, first pass: moments, the update direction u, and the squares of p
/// and u summed per block.
__global__ void lambDirection(const float *P, const float *G, const float *M,
                              const float *V, float *Mo, float *Vo, float *U,
                              int64_t n, float b1, float b2, float a1,
                              float a2, float eps, float bc1, float bc2Sqrt,
                              float wd, double *sums) {
  __shared__ double part[2][256];
  double ps = 0, us = 0;
  DS_GRID_LOOP(i, n) {
    float m = M[i] * b1 + G[i] * a1;
    float v = V[i] * b2 + a2 * G[i] * G[i];
    Mo[i] = m;
    Vo[i] = v;
    float u = (m / bc1) / (sqrtf(v) / bc2Sqrt + eps) + wd * P[i];
    U[i] = u;
    ps += double(P[i]) * P[i];
    us += double(u) * u;
  }
  part[0][threadIdx.x] = ps;
  part[1][threadIdx.x] = us;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      part[0][threadIdx.x] += part[0][threadIdx.x + s];
      part[1][threadIdx.x] += part[1][threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(sums, part[0][0]);
    atomicAdd(sums + 1, part[1][0]);
  }
}

__global__ void lambApply(const float *P, const float *U, float *Po, int64_t n,
                          float scale) {
  DS_GRID_LOOP(i, n) Po[i] = P[i] - scale * U[i];
}

__global__ void sgdKernel(const float *P, const float *G, const float *B,
                          float *Po, float *Bo, int64_t n, float lr,
                          float momentum, float dampening, float wd,
                          bool nesterov, bool first) {
  DS_GRID_LOOP(i, n) {
    float d = G[i];
    if (wd != 0.0f)
      d = d + wd * P[i];
    if (momentum != 0.0f) {
      float buf = first ? d : B[i] * momentum + (1.0f - dampening) * d;
      Bo[i] = buf;
      d = nesterov ? d + momentum * buf : buf;
    }
    Po[i] = P[i] + (-lr) * d;
  }
}

bool checkOptimizer(KernelContext &ctx, size_t states) {
  return checkOptimizerOperands(ctx, states);
}

/// The CPU's accumulateOnly: true when this run only accumulates (or the
/// step overflowed) and the kernel is done.
bool accumulateOnly(KernelContext &ctx, size_t states, int64_t &t,
                    Scratch &mean, const float *&grad) {
  int64_t k = ctx.attrs.getInt("accum_steps", 1);
  size_t accIn = 3 + states;
  int64_t n = ctx.in[0].numel();
  auto keepAll = [&]() {
    auto keep = [&](const TensorView &in, TensorView &out) {
      if (in.data != out.data)
        copyFloats<<<blocksFor(n), 256, 0, gStream>>>(in.as<float>(),
                                                      out.as<float>(), n);
    };
    keep(ctx.in[0], ctx.out[0]);
    for (size_t s = 0; s < states; ++s)
      keep(ctx.in[2 + s], ctx.out[1 + s]);
  };
  if (ctx.step && ctx.step->overflow) {
    keepAll();
    return true;
  }
  if (k <= 1 || ctx.in.size() <= accIn)
    return false;
  int64_t micro = (t - 1) % k;
  t = (t - 1) / k + 1;
  bool last = micro == k - 1;
  accumulateKernel<<<blocksFor(n), 256, 0, gStream>>>(
      ctx.in[accIn].as<float>(), ctx.in[1].as<float>(),
      ctx.out.back().as<float>(), mean.as<float>(), n, last,
      1.0f / static_cast<float>(k));
  if (!last) {
    keepAll();
    return true;
  }
  grad = mean.as<float>();
  return false;
}

double scheduled(const KernelContext &ctx, int64_t t) {
  double base = std::isnan(ctx.lr) ? ctx.attrs.getFloat("lr", 1e-3) : ctx.lr;
  return ds::scheduledLr(ctx.attrs.getString("schedule", "constant"), base, t,
                         ctx.attrs.getInt("warmup_steps", 0),
                         ctx.attrs.getInt("total_steps", 0),
                         ctx.attrs.getFloat("min_lr", 0.0));
}

//===----------------------------------------------------------------------===//
// NCCL (opened with dlopen)
//===----------------------------------------------------------------------===//

using ncclComm_t = void *;
struct NcclUniqueId {
  char internal[128];
};
enum NcclType { NcclInt64 = 4, NcclFloat16 = 6, NcclFloat32 = 7, NcclBfloat16 = 9 };
enum NcclOp { NcclSum = 0, NcclAvg = 4 };

struct Nccl {
  int (*getUniqueId)(NcclUniqueId *) = nullptr;
  int (*commInitRank)(ncclComm_t *, int, NcclUniqueId, int) = nullptr;
  int (*allReduce)(const void *, void *, size_t, int, int, ncclComm_t,
                   cudaStream_t) = nullptr;
  int (*allGather)(const void *, void *, size_t, int, ncclComm_t,
                   cudaStream_t) = nullptr;
  int (*reduceScatter)(const void *, void *, size_t, int, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  const char *(*errorString)(int) = nullptr;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr; // asynchronous collectives
  std::vector<cudaEvent_t> events; // by handle: a collective's completion
} gNccl;

bool ncclType(DType t, int &out) {
  switch (t) {
  case DType::F32: out = NcclFloat32; return true;
  case DType::F16: out = NcclFloat16; return true;
  case DType::BF16: out = NcclBfloat16; return true;
  case DType::I64: out = NcclInt64; return true;
  default: return false;
  }
}

/// NCCL's communicator for this plan's ranks: rank 0's unique id reaches
/// every rank through the MPI communicator (an all-gather of ids).
bool openNccl(KernelContext &ctx) {
  if (gNccl.comm)
    return true;
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return ctx.fail(std::string("cannot load NCCL (libnccl.so.2): ") + dlerror());
  auto sym = [&](const char *name) { return dlsym(lib, name); };
  gNccl.getUniqueId = reinterpret_cast<decltype(gNccl.getUniqueId)>(sym("ncclGetUniqueId"));
  gNccl.commInitRank = reinterpret_cast<decltype(gNccl.commInitRank)>(sym("ncclCommInitRank"));
  gNccl.allReduce = reinterpret_cast<decltype(gNccl.allReduce)>(sym("ncclAllReduce"));
  gNccl.allGather = reinterpret_cast<decltype(gNccl.allGather)>(sym("ncclAllGather"));
  gNccl.reduceScatter = reinterpret_cast<decltype(gNccl.reduceScatter)>(sym("ncclReduceScatter"));
  gNccl.errorString = reinterpret_cast<decltype(gNccl.errorString)>(sym("ncclGetErrorString"));
  if (!gNccl.getUniqueId || !gNccl.commInitRank || !gNccl.allReduce ||
      !gNccl.allGather || !gNccl.reduceScatter || !gNccl.errorString)
    return ctx.fail("libnccl.so.2 lacks the collectives ds needs");
  Communicator &mpi = *ctx.comm;
  NcclUniqueId mine{};
  if (mpi.rank() == 0 && gNccl.getUniqueId(&mine) != 0)
    return ctx.fail("ncclGetUniqueId failed");
  std::vector<NcclUniqueId> all(mpi.size());
  std::string err;
  if (!mpi.allGather(&mine, all.data(), sizeof(NcclUniqueId) / 4, DType::I32,
                     err))
    return ctx.fail(err);
  int rc = gNccl.commInitRank(&gNccl.comm, mpi.size(), all[0], mpi.rank());
  if (rc != 0)
    return ctx.fail(std::string("ncclCommInitRank: ") + gNccl.errorString(rc));
  if (cudaStreamCreateWithFlags(&gNccl.stream, cudaStreamNonBlocking) !=
      cudaSuccess)
    return launched(ctx);
  return true;
}

enum class Coll { AllReduce, AllGather, ReduceScatter };

/// One collective: in place on the compute stream, or (async) on the
/// communication stream after the compute stream's work so far, its
/// completion event registered under the output for the wait kernel.
bool collective(KernelContext &ctx, Coll kind, const void *in, void *out,
                size_t count, DType dtype, bool mean) {
  if (!openNccl(ctx))
    return false;
  int type;
  if (!ncclType(dtype, type))
    return ctx.fail(std::string("NCCL has no ") + dtypeName(dtype));
  bool async = ctx.attrs.getInt("async", 0) != 0;
  cudaStream_t s = gStream;
  if (async) {
    cudaEvent_t ready;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, gStream);
    cudaStreamWaitEvent(gNccl.stream, ready, 0);
    cudaEventDestroy(ready);
    s = gNccl.stream;
  }
  int op = mean ? NcclAvg : NcclSum, rc = 0;
  switch (kind) {
  case Coll::AllReduce:
    rc = gNccl.allReduce(in, out, count, type, op, gNccl.comm, s);
    break;
  case Coll::AllGather:
    rc = gNccl.allGather(in, out, count, type, gNccl.comm, s);
    break;
  case Coll::ReduceScatter:
    rc = gNccl.reduceScatter(in, out, count, type, op, gNccl.comm, s);
    break;
  }
  if (rc != 0)
    return ctx.fail(std::string("NCCL: ") + gNccl.errorString(rc));
  if (async) {
    if (!ctx.inflight)
      return ctx.fail("an async collective needs the executor's table");
    cudaEvent_t done;
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    cudaEventRecord(done, gNccl.stream);
    gNccl.events.push_back(done);
    (*ctx.inflight)[out] = static_cast<int>(gNccl.events.size() - 1);
  }
  return launched(ctx);
}

bool copyDevice(KernelContext &ctx, const void *src, void *dst, size_t bytes) {
  if (src != dst && bytes &&
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gStream) !=
          cudaSuccess)
    return launched(ctx);
  return true;
}

bool shardCount(KernelContext &ctx, const TensorView &whole,
                const TensorView &shard, int64_t &count) {
  return checkShards(ctx, whole, shard, ctx.comm ? ctx.comm->size() : 1,
                     count);
}

__global__ void nonFinite(const void *x, int xt, int64_t n, int *flag) {
  DS_GRID_LOOP(i, n) {
    double v = load(x, xt, i);
    if (!isfinite(v))
      *flag = 1;
  }
}

__global__ void setInf(void *x, int xt) { store(x, xt, 0, INFINITY); }

} // namespace

//===----------------------------------------------------------------------===//
// Kernel entry points
//===----------------------------------------------------------------------===//

bool kGather(KernelContext &ctx) {
  const TensorView &data = ctx.in[0], &idx = ctx.in[1];
  TensorView &out = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis < 0 || axis >= data.rank())
    return ctx.fail("gather axis out of range");
  int64_t outer = prod(data.shape, 0, axis), dim = data.shape[axis];
  int64_t inner = prod(data.shape, axis + 1, data.shape.size());
  int64_t count = idx.numel();
  if (out.numel() != outer * count * inner)
    return ctx.fail("gather sizes do not match");
  if (out.numel() == 0)
    return true;
  if (!resetBad(ctx))
    return false;
  gatherKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
      static_cast<const char *>(data.data), idx.data, int(idx.dtype),
      static_cast<char *>(out.data), outer, dim, count, inner,
      int64_t(dtypeSize(data.dtype)));
  return launched(ctx) && checkBad(ctx, "gather index", -dim, dim);
}

bool kGatherGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0], &idx = ctx.in[1];
  TensorView &out = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis < 0 || axis >= out.rank())
    return ctx.fail("gather_grad axis out of range");
  int64_t outer = prod(out.shape, 0, axis), dim = out.shape[axis];
  int64_t inner = prod(out.shape, axis + 1, out.shape.size());
  int64_t count = idx.numel();
  if (g.numel() != outer * count * inner)
    return ctx.fail("gather_grad sizes do not match");
  // Float atomics into an f32 accumulator (the output itself when f32).
  bool direct = out.dtype == DType::F32;
  Scratch acc(direct ? 0 : out.numel() * sizeof(float));
  float *a = direct ? out.as<float>() : acc.as<float>();
  if (!a || cudaMemsetAsync(a, 0, out.numel() * sizeof(float), gStream) !=
                cudaSuccess)
    return ctx.fail("cannot clear the gather_grad accumulator");
  if (!resetBad(ctx))
    return false;
  if (g.numel())
    gatherGradKernel<<<blocksFor(g.numel()), 256, 0, gStream>>>(
        g.data, int(g.dtype), idx.data, int(idx.dtype), a, outer, dim, count,
        inner);
  if (!direct && out.numel())
    convertKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
        a, out.data, int(out.dtype), out.numel());
  return launched(ctx) && checkBad(ctx, "gather_grad index", -dim, dim);
}

bool kExpand(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  Layout l;
  std::string err;
  if (!makeLayout(out, {&in}, l, err))
    return ctx.fail(err);
  if (out.numel())
    stridedKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
        l, out.numel(), static_cast<const char *>(in.data), 0,
        static_cast<char *>(out.data), int64_t(dtypeSize(in.dtype)));
  return launched(ctx);
}

bool kSlice(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  std::vector<int64_t> st;
  int64_t base = 0;
  if (in.rank() > kMaxRank)
    return ctx.fail("slice: rank above 8");
  if (!sliceGeometry(ctx, "slice", in, out, st, base))
    return false;
  if (out.numel())
    stridedKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
        contiguousLayout(out.shape, st), out.numel(),
        static_cast<const char *>(in.data), base,
        static_cast<char *>(out.data), int64_t(dtypeSize(in.dtype)));
  return launched(ctx);
}

bool kSliceGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0];
  TensorView &out = ctx.out[0];
  std::vector<int64_t> st;
  int64_t base = 0;
  if (out.rank() > kMaxRank)
    return ctx.fail("slice_grad: rank above 8");
  if (!sliceGeometry(ctx, "slice_grad", out, g, st, base))
    return false;
  size_t es = dtypeSize(out.dtype);
  if (cudaMemsetAsync(out.data, 0, out.numel() * es, gStream) != cudaSuccess)
    return launched(ctx);
  if (g.numel())
    scatterKernel<<<blocksFor(g.numel()), 256, 0, gStream>>>(
        contiguousLayout(g.shape, st), g.numel(),
        static_cast<const char *>(g.data), base, static_cast<char *>(out.data),
        int64_t(es));
  return launched(ctx);
}

namespace {
/// Concat (`split` false: the inputs into the output) or split (the input
/// into the outputs) along `axis`: chunks of each narrow tensor placed in
/// turn along the wide one.
bool chunks(KernelContext &ctx, const TensorView &wide,
            std::vector<TensorView> &narrow, bool split) {
  const char *what = split ? "split" : "concat";
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis < 0 || axis >= wide.rank())
    return ctx.fail(std::string(what) + " axis out of range");
  int64_t es = dtypeSize(wide.dtype);
  int64_t outer = prod(wide.shape, 0, axis);
  int64_t inner = prod(wide.shape, axis + 1, wide.shape.size());
  int64_t width = wide.shape[axis] * inner, at = 0;
  for (TensorView &t : narrow) {
    int64_t chunk = t.shape[axis] * inner;
    if (at + chunk > width || t.numel() != outer * chunk)
      return ctx.fail(std::string(what) + " operands do not fit");
    const char *src = static_cast<const char *>(split ? wide.data : t.data);
    char *dst = static_cast<char *>(split ? t.data : wide.data);
    if (outer * chunk)
      chunkKernel<<<blocksFor(outer * chunk), 256, 0, gStream>>>(
          src, dst, outer, chunk, width, at, es, split);
    at += chunk;
  }
  return launched(ctx);
}
} // namespace

bool kConcat(KernelContext &ctx) { return chunks(ctx, ctx.out[0], ctx.in, false); }
bool kSplit(KernelContext &ctx) { return chunks(ctx, ctx.in[0], ctx.out, true); }

bool kTrilu(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  if (in.rank() < 2)
    return ctx.fail("trilu needs rank >= 2");
  int64_t rows = in.shape[in.rank() - 2], cols = in.shape.back();
  if (in.numel())
    triluKernel<<<blocksFor(in.numel()), 256, 0, gStream>>>(
        static_cast<const char *>(in.data), static_cast<char *>(out.data),
        in.numel(), rows, cols, ctx.attrs.getInt("upper", 1) != 0,
        ctx.attrs.getInt("k", 0), int64_t(dtypeSize(in.dtype)));
  return launched(ctx);
}

bool kRange(KernelContext &ctx) {
  TensorView &out = ctx.out[0];
  const TensorView &start = ctx.in[0], &delta = ctx.in[2];
  unsigned char s[8] = {}, d[8] = {};
  if (!readBack(ctx, s, start.data, dtypeSize(start.dtype)) ||
      !readBack(ctx, d, delta.data, dtypeSize(delta.dtype)))
    return false;
  double sf = loadD(s, start.dtype, 0), df = loadD(d, delta.dtype, 0);
  long long si = loadI(s, start.dtype, 0), di = loadI(d, delta.dtype, 0);
  if (out.numel())
    rangeKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
        out.data, int(out.dtype), out.numel(), sf, df, !isFloat(out.dtype),
        si, di);
  return launched(ctx);
}

namespace {
__global__ void dropoutKernel(const void *x, int xt, void *y, int yt,
                              uint8_t *mask, int64_t n, uint64_t seed,
                              uint64_t base, double ratio, double scale) {
  DS_GRID_LOOP(i, n) {
    uint64_t gi = base + static_cast<uint64_t>(i);
    double u = (splitmix64(seed ^ (gi * 0x9e37ULL)) >> 11) *
               (1.0 / 9007199254740992.0);
    bool keep = u >= ratio;
    if (mask)
      mask[i] = keep;
    store(y, yt, i, keep ? load(x, xt, i) * scale : 0.0);
  }
}
} // namespace

bool kDropout(KernelContext &ctx) {
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t n = x.numel();
  double ratio = ctx.attrs.getFloat("ratio", 0.5);
  bool training = ctx.attrs.getInt("training", 0) != 0;
  uint8_t *mask = ctx.out.size() > 1 ? ctx.out[1].as<uint8_t>() : nullptr;
  if (!training || ratio == 0.0) {
    if (!copyDevice(ctx, x.data, y.data, n * dtypeSize(x.dtype)))
      return false;
    if (mask && n && cudaMemsetAsync(mask, 1, n, gStream) != cudaSuccess)
      return launched(ctx);
    return true;
  }
  uint64_t seed = ctx.attrs.has("seed")
                      ? static_cast<uint64_t>(ctx.attrs.getInt("seed"))
                      : ctx.seed;
  uint64_t base = ctx.comm ? static_cast<uint64_t>(ctx.comm->rank()) *
                                 static_cast<uint64_t>(n)
                           : 0;
  if (n)
    dropoutKernel<<<blocksFor(n), 256, 0, gStream>>>(
        x.data, int(x.dtype), y.data, int(y.dtype), mask, n, seed, base, ratio,
        1.0 / (1.0 - ratio));
  return launched(ctx);
}

bool kLayerNorm(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &scale = ctx.in[1];
  const TensorView *bias = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  TensorView &y = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  double eps = ctx.attrs.getFloat("epsilon", 1e-5);
  if (axis < 0 || axis >= x.rank())
    return ctx.fail("layer_norm axis out of range");
  int64_t rows = prod(x.shape, 0, axis);
  int64_t cols = prod(x.shape, axis, x.shape.size());
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
  int64_t axis = ctx.attrs.getInt("axis", -1);
  double eps = ctx.attrs.getFloat("epsilon", 1e-5);
  if (axis < 0 || axis >= x.rank())
    return ctx.fail("layer_norm_grad axis out of range");
  int64_t rows = prod(x.shape, 0, axis);
  int64_t cols = prod(x.shape, axis, x.shape.size());
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
        rows, dim, inner, dy.data, int(dy.dtype), y.data, int(y.dtype),
        dx.data, int(dx.dtype), ctx.attrs.getInt("log", 0) != 0);
  return launched(ctx);
}

namespace {
bool lossImpl(KernelContext &ctx, bool softmax) {
  const TensorView &scores = ctx.in[0], &labels = ctx.in[1];
  const TensorView *weights = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  if (scores.rank() < 2)
    return ctx.fail("scores need rank >= 2");
  int64_t N = scores.shape[0], C = scores.shape[1];
  int64_t D = prod(scores.shape, 2, scores.shape.size());
  std::string reduction = ctx.attrs.getString("reduction", "mean");
  bool hasIgnore = ctx.attrs.has("ignore_index");
  long long ignore = ctx.attrs.getInt("ignore_index", 0);
  Scratch rowsBuf(2 * N * D * sizeof(double));
  double *loss = rowsBuf.as<double>(), *weight = loss + N * D;
  if (!resetBad(ctx))
    return false;
  void *logp = softmax && ctx.out.size() > 1 ? ctx.out[1].data : nullptr;
  if (N * D)
    lossRows<<<blocksFor(N * D), 256, 0, gStream>>>(
        scores.data, int(scores.dtype), labels.data, int(labels.dtype),
        weights ? weights->data : nullptr, weights ? int(weights->dtype) : 0,
        N, C, D, softmax, hasIgnore, ignore, loss, weight, logp,
        logp ? int(ctx.out[1].dtype) : 0);
  TensorView &out = ctx.out[0];
  if (reduction == "none") {
    if (N * D)
      copyLoss<<<blocksFor(N * D), 256, 0, gStream>>>(loss, out.data,
                                                      int(out.dtype), N * D);
  } else {
    lossTotal<<<1, 256, 0, gStream>>>(loss, weight, N * D,
                                      reduction == "sum" ? 1 : 0, out.data,
                                      int(out.dtype));
  }
  return launched(ctx) && checkBad(ctx, "label", 0, C);
}
} // namespace

bool kSoftmaxCrossEntropyLoss(KernelContext &ctx) { return lossImpl(ctx, true); }
bool kNllLoss(KernelContext &ctx) { return lossImpl(ctx, false); }

bool kLossGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0], &scores = ctx.in[1], &labels = ctx.in[2];
  const TensorView *weights = ctx.in.size() > 3 ? &ctx.in[3] : nullptr;
  TensorView &out = ctx.out[0];
  if (scores.rank() < 2)
    return ctx.fail("scores need rank >= 2");
  int64_t N = scores.shape[0], C = scores.shape[1];
  int64_t D = prod(scores.shape, 2, scores.shape.size());
  std::string reduction = ctx.attrs.getString("reduction", "mean");
  int mode = reduction == "mean" ? 0 : reduction == "sum" ? 1 : 2;
  bool hasIgnore = ctx.attrs.has("ignore_index");
  long long ignore = ctx.attrs.getInt("ignore_index", 0);
  Scratch w((N * D + 1) * sizeof(double));
  if (!resetBad(ctx))
    return false;
  if (N * D) {
    labelWeights<<<blocksFor(N * D), 256, 0, gStream>>>(
        labels.data, int(labels.dtype), weights ? weights->data : nullptr,
        weights ? int(weights->dtype) : 0, N * D, C, hasIgnore, ignore,
        w.as<double>());
    sumDoubles<<<1, 256, 0, gStream>>>(w.as<double>(), N * D,
                                       w.as<double>() + N * D);
    lossGradRows<<<blocksFor(N * D), 256, 0, gStream>>>(
        g.data, int(g.dtype), scores.data, int(scores.dtype), labels.data,
        int(labels.dtype), weights ? weights->data : nullptr,
        weights ? int(weights->dtype) : 0, N, C, D, mode,
        ctx.attrs.getInt("softmax", 1) != 0, hasIgnore, ignore,
        w.as<double>() + N * D, out.data, int(out.dtype));
  }
  return launched(ctx) && checkBad(ctx, "label", 0, C);
}

bool kAdam(KernelContext &ctx) {
  if (!checkOptimizer(ctx, 2))
    return false;
  int64_t t = 0;
  if (!hostStep(ctx, ctx.in[4], t))
    return false;
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  int64_t n = ctx.in[0].numel();
  Scratch mean(ctx.attrs.getInt("accum_steps", 1) > 1 ? n * sizeof(float) : 0);
  const float *G = ctx.in[1].as<float>();
  if (accumulateOnly(ctx, 2, t, mean, G))
    return launched(ctx);
  double lr = scheduled(ctx, t);
  double beta1 = ctx.attrs.getFloat("beta1", 0.9);
  double beta2 = ctx.attrs.getFloat("beta2", 0.999);
  float eps = static_cast<float>(ctx.attrs.getFloat("eps", 1e-8));
  double wd = ctx.attrs.getFloat("weight_decay", 0.0);
  bool decoupled = ctx.attrs.getInt("decoupled", 0) != 0;
  double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  float b1 = float(beta1), b2 = float(beta2);
  float a1 = float(1.0 - beta1), a2 = float(1.0 - beta2);
  const float *P = ctx.in[0].as<float>(), *M = ctx.in[2].as<float>(),
              *V = ctx.in[3].as<float>();
  float *Po = ctx.out[0].as<float>(), *Mo = ctx.out[1].as<float>(),
        *Vo = ctx.out[2].as<float>();
  if (n == 0)
    return true;
  if (ctx.attrs.getInt("lamb", 0)) {
    Scratch u(n * sizeof(float)), sums(2 * sizeof(double));
    if (cudaMemsetAsync(sums.p, 0, 2 * sizeof(double), gStream) != cudaSuccess)
      return launched(ctx);
    lambDirection<<<blocksFor(n), 256, 0, gStream>>>(
        P, G, M, V, Mo, Vo, u.as<float>(), n, b1, b2, a1, a2, eps, float(bc1),
        bc2Sqrt, float(wd), sums.as<double>());
    double host[2];
    if (!readBack(ctx, host, sums.p, sizeof host))
      return false;
    double pNorm = std::sqrt(host[0]), uNorm = std::sqrt(host[1]);
    double trust = pNorm > 0 && uNorm > 0
                       ? std::min(10.0, std::max(0.01, pNorm / uNorm))
                       : 1.0;
    lambApply<<<blocksFor(n), 256, 0, gStream>>>(P, u.as<float>(), Po, n,
                                                 float(lr * trust));
    return launched(ctx);
  }
  adamKernel<<<blocksFor(n), 256, 0, gStream>>>(
      P, G, M, V, Po, Mo, Vo, n, b1, b2, a1, a2, eps, bc2Sqrt,
      float(lr / bc1), wd != 0.0, decoupled, float(wd), float(1.0 - lr * wd));
  return launched(ctx);
}

bool kSgd(KernelContext &ctx) {
  if (!checkOptimizer(ctx, 1))
    return false;
  int64_t t = 0;
  if (!hostStep(ctx, ctx.in[3], t))
    return false;
  int64_t n = ctx.in[0].numel();
  Scratch mean(ctx.attrs.getInt("accum_steps", 1) > 1 ? n * sizeof(float) : 0);
  const float *G = ctx.in[1].as<float>();
  if (accumulateOnly(ctx, 1, t, mean, G))
    return launched(ctx);
  if (n)
    sgdKernel<<<blocksFor(n), 256, 0, gStream>>>(
        ctx.in[0].as<float>(), G, ctx.in[2].as<float>(),
        ctx.out[0].as<float>(), ctx.out[1].as<float>(), n,
        float(scheduled(ctx, t)), float(ctx.attrs.getFloat("momentum", 0.0)),
        float(ctx.attrs.getFloat("dampening", 0.0)),
        float(ctx.attrs.getFloat("weight_decay", 0.0)),
        ctx.attrs.getInt("nesterov", 0) != 0, t <= 1);
  return launched(ctx);
}

bool kCheckOverflow(KernelContext &ctx) {
  if (ctx.step && ctx.step->inject && ctx.in[0].numel() > 0) {
    setInf<<<1, 1, 0, gStream>>>(ctx.in[0].data, int(ctx.in[0].dtype));
  }
  Scratch flag(sizeof(int));
  if (cudaMemsetAsync(flag.p, 0, sizeof(int), gStream) != cudaSuccess)
    return launched(ctx);
  for (const TensorView &g : ctx.in)
    if (g.numel())
      nonFinite<<<blocksFor(g.numel()), 256, 0, gStream>>>(
          g.data, int(g.dtype), g.numel(), flag.as<int>());
  int host = 0;
  if (!launched(ctx) || !readBack(ctx, &host, flag.p, sizeof host))
    return false;
  float found = host ? 1.0f : 0.0f;
  // An overflow on any rank skips the step on every rank.
  if (ctx.comm && ctx.comm->size() > 1) {
    std::string err;
    ctx.comm->collectiveBytes += sizeof(float);
    if (!ctx.comm->allReduce(&found, 1, DType::F32, false, err))
      return ctx.fail(err);
  }
  bool overflow = found > 0.0f;
  if (ctx.step)
    ctx.step->overflow = overflow;
  float value = overflow ? 1.0f : 0.0f;
  unsigned char out[8];
  storeD(out, ctx.out[0].dtype, 0, value);
  if (cudaMemcpyAsync(ctx.out[0].data, out, dtypeSize(ctx.out[0].dtype),
                      cudaMemcpyHostToDevice, gStream) != cudaSuccess ||
      cudaStreamSynchronize(gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

bool kAllReduce(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  if (!copyDevice(ctx, in.data, out.data, out.numel() * dtypeSize(out.dtype)))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1)
    return true;
  ctx.comm->collectiveBytes += out.numel() * dtypeSize(out.dtype);
  return collective(ctx, Coll::AllReduce, out.data, out.data, out.numel(),
                    out.dtype,
                    ctx.attrs.getString("reduction", "sum") == "mean");
}

bool kAllGather(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, out, in, count))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1)
    return copyDevice(ctx, in.data, out.data, count * dtypeSize(in.dtype));
  ctx.comm->collectiveBytes += out.numel() * dtypeSize(out.dtype);
  return collective(ctx, Coll::AllGather, in.data, out.data, count, in.dtype,
                    false);
}

bool kReduceScatter(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, in, out, count))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1)
    return copyDevice(ctx, in.data, out.data, count * dtypeSize(in.dtype));
  ctx.comm->collectiveBytes += in.numel() * dtypeSize(in.dtype);
  return collective(ctx, Coll::ReduceScatter, in.data, out.data, count,
                    in.dtype,
                    ctx.attrs.getString("reduction", "sum") == "mean");
}

bool kShard(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, in, out, count))
    return false;
  int rank = ctx.comm ? ctx.comm->rank() : 0;
  size_t bytes = count * dtypeSize(in.dtype);
  return copyDevice(ctx, static_cast<const char *>(in.data) + rank * bytes,
                    out.data, bytes);
}

bool kWait(KernelContext &ctx) {
  if (!ctx.comm || ctx.comm->size() == 1)
    return true;
  const void *key = ctx.in.back().data;
  if (!ctx.inflight)
    return ctx.fail("wait for a collective that was not started");
  auto it = ctx.inflight->find(key);
  if (it == ctx.inflight->end())
    return ctx.fail("wait for a collective that was not started");
  int handle = it->second;
  ctx.inflight->erase(it);
  if (handle < 0 || handle >= static_cast<int>(gNccl.events.size()))
    return ctx.fail("wait for an unknown collective");
  cudaEvent_t done = gNccl.events[handle];
  if (cudaStreamWaitEvent(gStream, done, 0) != cudaSuccess)
    return launched(ctx);
  cudaEventDestroy(done);
  gNccl.events[handle] = nullptr;
  // Handles are reused once every collective of the step has finished.
  bool any = false;
  for (cudaEvent_t e : gNccl.events)
    any |= e != nullptr;
  if (!any)
    gNccl.events.clear();
  return true;
}


namespace {
/// ONNX's training operators (Adagrad, Momentum, Adam), elementwise in
/// double as the CPU kernel; kind 0 adagrad, 1 momentum, 2 nesterov, 3 adam.
__global__ void onnxUpdateKernel(int kind, int64_t n, double r, long long t,
                                 double alpha, double beta, double betaAdj,
                                 double rAdam, double eps, double decay,
                                 double norm, double normPost, const void *X,
                                 int xt, const void *G, int gt, const void *S1,
                                 int s1t, const void *S2, int s2t, void *XO,
                                 int xot, void *O1, int o1t, void *O2,
                                 int o2t) {
  DS_GRID_LOOP(i, n) {
    double x = load(X, xt, i);
    double g = norm * x + load(G, gt, i);
    if (kind == 0) {
      double rr = r / (1.0 + double(t) * decay);
      double h = load(S1, s1t, i) + g * g;
      store(O1, o1t, i, h);
      store(XO, xot, i, x - rr * g / (sqrt(h) + eps));
    } else if (kind == 1 || kind == 2) {
      double v = alpha * load(S1, s1t, i) + betaAdj * g;
      store(O1, o1t, i, v);
      double step = kind == 2 ? g + alpha * v : v;
      store(XO, xot, i, x - r * step);
    } else {
      double v = alpha * load(S1, s1t, i) + (1.0 - alpha) * g;
      double h = beta * load(S2, s2t, i) + (1.0 - beta) * (g * g);
      store(O1, o1t, i, v);
      store(O2, o2t, i, h);
      double xNew = x - rAdam * (v / (sqrt(h) + eps));
      store(XO, xot, i, (1.0 - normPost) * xNew);
    }
  }
}
} // namespace

bool kOnnxUpdate(KernelContext &ctx) {
  std::string kind = ctx.attrs.getString("kind");
  int k = kind == "adagrad"    ? 0
          : kind == "momentum" ? 1
          : kind == "nesterov" ? 2
          : kind == "adam"     ? 3
                               : -1;
  if (k < 0)
    return ctx.fail("unknown onnx_update kind '" + kind + "'");
  size_t states = k == 3 ? 2 : 1;
  if (ctx.in.size() != 4 + states || ctx.out.size() != 1 + states)
    return ctx.fail("onnx_update operand count does not match kind '" + kind + "'");
  const TensorView &R = ctx.in[0], &T = ctx.in[1], &X = ctx.in[2], &G = ctx.in[3];
  unsigned char rb[8] = {}, tb[8] = {};
  if (!readBack(ctx, rb, R.data, dtypeSize(R.dtype)) ||
      !readBack(ctx, tb, T.data, dtypeSize(T.dtype)))
    return false;
  double r = loadD(rb, R.dtype, 0);
  long long t = loadI(tb, T.dtype, 0);
  double alpha = ctx.attrs.getFloat("alpha", 0.9);
  double beta = ctx.attrs.getFloat("beta", 0.999);
  int64_t n = X.numel();
  for (size_t i = 2; i < ctx.in.size(); ++i)
    if (ctx.in[i].numel() != n)
      return ctx.fail("onnx_update tensors differ in size");
  double betaAdj = t > 0 ? beta : 1.0;
  double rAdam = t > 0 ? r * std::sqrt(1.0 - std::pow(beta, double(t))) /
                             (1.0 - std::pow(alpha, double(t)))
                       : r;
  const TensorView &S1 = ctx.in[4];
  const TensorView *S2 = states > 1 ? &ctx.in[5] : nullptr;
  TensorView *O2 = states > 1 ? &ctx.out[2] : nullptr;
  if (n)
    onnxUpdateKernel<<<blocksFor(n), 256, 0, gStream>>>(
        k, n, r, t, alpha, beta, betaAdj, rAdam,
        ctx.attrs.getFloat("epsilon", 0.0),
        ctx.attrs.getFloat("decay_factor", 0.0),
        ctx.attrs.getFloat("norm_coefficient", 0.0),
        ctx.attrs.getFloat("norm_coefficient_post", 0.0), X.data,
        int(X.dtype), G.data, int(G.dtype), S1.data, int(S1.dtype),
        S2 ? S2->data : nullptr, S2 ? int(S2->dtype) : 0, ctx.out[0].data,
        int(ctx.out[0].dtype), ctx.out[1].data, int(ctx.out[1].dtype),
        O2 ? O2->data : nullptr, O2 ? int(O2->dtype) : 0);
  return launched(ctx);
}

} // namespace ds::rt::cuda
