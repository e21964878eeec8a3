//===- Losses.cu - cross-entropy losses and their gradient on CUDA --------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// softmax_cross_entropy_loss, nll_loss and loss_grad: one thread per
// (sample, position) row over the classes, totals in double, labels
// checked as the CPU's (Linalg.cpp, Grad.cpp).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

namespace ds::rt::cuda {
namespace {

/// Per (n, d): -w * log p(label) (and its weight), with log-softmax over C
/// first when `softmax`; `logp` (optional) receives the log-probabilities.
__global__ void lossRows(const void *scores, int st, const void *labels, int lt,
                         const void *weights, int wt, int64_t N, int64_t C,
                         int64_t D, bool softmax, bool hasIgnore,
                         long long ignore, double *loss, double *weight,
                         void *logp, int lpt, long long *bad) {
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
        *bad = y;
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
  __shared__ double part[256];
  double l = 0, w = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    l += loss[i];
    w += weight[i];
  }
  l = blockSum(part, l);
  w = blockSum(part, w);
  if (threadIdx.x == 0) {
    if (mode == 1) // sum
      store(out, ot, 0, l);
    else // mean
      store(out, ot, 0, w == 0 ? NAN : l / w);
  }
}

__global__ void copyLoss(const double *loss, void *out, int ot, int64_t n) {
  DS_GRID_LOOP(i, n) store(out, ot, i, loss[i]);
}

/// The loss gradient per (n, d): scale * (p - onehot) with the CPU's
/// weighting; `wsum` is the total label weight (mean).
__global__ void lossGradRows(const void *g, int gt, const void *scores, int st,
                             const void *labels, int lt, const void *weights,
                             int wt, int64_t N, int64_t C, int64_t D, int mode,
                             bool softmax, bool hasIgnore, long long ignore,
                             const double *wsum, void *out, int ot) {
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
                             long long ignore, double *w, long long *bad) {
  DS_GRID_LOOP(i, n) {
    int64_t y = loadInt(labels, lt, i);
    double v = 0;
    if (!(hasIgnore && y == ignore)) {
      if (y < 0 || y >= C)
        *bad = y;
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
  a = blockSum(part, a);
  if (threadIdx.x == 0)
    *out = a;
}

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
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  void *logp = softmax && ctx.out.size() > 1 ? ctx.out[1].data : nullptr;
  if (N * D)
    lossRows<<<blocksFor(N * D), 256, 0, gStream>>>(
        scores.data, int(scores.dtype), labels.data, int(labels.dtype),
        weights ? weights->data : nullptr, weights ? int(weights->dtype) : 0, N,
        C, D, softmax, hasIgnore, ignore, loss, weight, logp,
        logp ? int(ctx.out[1].dtype) : 0, bad.device());
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
  return launched(ctx) && bad.check(ctx, "label", 0, C);
}

bool kSoftmaxCrossEntropyLoss(KernelContext &ctx) {
  return lossImpl(ctx, true);
}
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
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  if (N * D) {
    labelWeights<<<blocksFor(N * D), 256, 0, gStream>>>(
        labels.data, int(labels.dtype), weights ? weights->data : nullptr,
        weights ? int(weights->dtype) : 0, N * D, C, hasIgnore, ignore,
        w.as<double>(), bad.device());
    sumDoubles<<<1, 256, 0, gStream>>>(w.as<double>(), N * D,
                                       w.as<double>() + N * D);
    lossGradRows<<<blocksFor(N * D), 256, 0, gStream>>>(
        g.data, int(g.dtype), scores.data, int(scores.dtype), labels.data,
        int(labels.dtype), weights ? weights->data : nullptr,
        weights ? int(weights->dtype) : 0, N, C, D, mode,
        ctx.attrs.getInt("softmax", 1) != 0, hasIgnore, ignore,
        w.as<double>() + N * D, out.data, int(out.dtype));
  }
  return launched(ctx) && bad.check(ctx, "label", 0, C);
}

} // namespace

void registerLossKernels(KernelRegistry &r) {
  r.add("softmax_cross_entropy_loss", kSoftmaxCrossEntropyLoss);
  r.add("nll_loss", kNllLoss);
  r.add("loss_grad", kLossGrad);
}

} // namespace ds::rt::cuda
