//===- Grad.cpp - kernels of the gradient ops autodiff builds -------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM). Accumulation in double.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Vec.h"

#include <algorithm>
#include <limits>

namespace ds::rt {

bool kGatherGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0], &indices = ctx.in[1];
  TensorView &out = ctx.out[0];
  GatherGeometry geo;
  if (!gatherGeometry(ctx, "gather_grad", out.shape, indices, g.numel(), geo))
    return false;
  int64_t inner = geo.inner, dim = geo.dim, k = geo.count;
  std::vector<double> acc(out.numel(), 0.0);
  if (g.dtype == DType::F32 && out.dtype == DType::F32) {
    // Threads split the columns (a row index may repeat; each element's
    // sum keeps the order of j), then store in parallel.
    const float *G = g.as<float>();
    parallelFor(inner, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t o = 0; o < geo.outer; ++o)
        for (int64_t j = 0; j < k; ++j) {
          double *dst = acc.data() + (o * dim + geo.index(indices, j)) * inner;
          const float *gs = G + (o * k + j) * inner;
          DS_VECTORIZE for (int64_t i = c0; i < c1; ++i)
            dst[i] += gs[i];
        }
    });
    float *O = out.as<float>();
    parallelFor(out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        O[i] = static_cast<float>(acc[i]);
    });
    return true;
  }
  for (int64_t o = 0; o < geo.outer; ++o)
    for (int64_t j = 0; j < k; ++j) {
      double *dst = acc.data() + (o * dim + geo.index(indices, j)) * inner;
      int64_t src = (o * k + j) * inner;
      if (g.dtype == DType::F32) {
        const float *gs = g.as<float>() + src;
        for (int64_t i = 0; i < inner; ++i)
          dst[i] += gs[i];
      } else {
        for (int64_t i = 0; i < inner; ++i)
          dst[i] += loadD(g.data, g.dtype, src + i);
      }
    }
  for (int64_t i = 0; i < out.numel(); ++i)
    storeD(out.data, out.dtype, i, acc[i]);
  return true;
}

namespace {
/// One f32 layer-norm row's gradient, in double as the generic loop (the
/// row sums in vectorized order); ds and db accumulate this row.
DS_CLONES void layerNormGradRowF32(const float *x, const float *dy,
                                   const float *s, float *dx, double *ds,
                                   double *db, int64_t cols, double eps) {
  double mean = 0, var = 0, meanD = 0, meanDX = 0;
  {
    DS_REASSOCIATE
    for (int64_t c = 0; c < cols; ++c)
      mean += x[c];
  }
  mean /= cols;
  {
    DS_REASSOCIATE
    for (int64_t c = 0; c < cols; ++c)
      var += (x[c] - mean) * (x[c] - mean);
  }
  double rstd = 1.0 / std::sqrt(var / cols + eps);
  {
    DS_REASSOCIATE
    for (int64_t c = 0; c < cols; ++c) {
      double g = dy[c], xh = (x[c] - mean) * rstd, dxh = g * s[c];
      ds[c] += g * xh;
      db[c] += g;
      meanD += dxh;
      meanDX += dxh * xh;
    }
  }
  meanD /= cols;
  meanDX /= cols;
  for (int64_t c = 0; c < cols; ++c) {
    double xh = (x[c] - mean) * rstd, dxh = double(dy[c]) * s[c];
    dx[c] = static_cast<float>(rstd * (dxh - meanD - xh * meanDX));
  }
}

/// The f32 layer-norm gradient over the run's threads: each block of rows
/// has its own ds and db partial sums, added in block order.
void layerNormGradF32(const float *x, const float *dy, const float *s,
                      float *dx, float *dscale, float *dbias, int64_t rows,
                      int64_t cols, double eps) {
  int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threadCount(), rows));
  std::vector<double> part(blocks * 2 * cols, 0.0);
  parallelFor(blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      double *ds = part.data() + k * 2 * cols, *db = ds + cols;
      for (int64_t r = rows * k / blocks; r < rows * (k + 1) / blocks; ++r)
        layerNormGradRowF32(x + r * cols, dy + r * cols, s, dx + r * cols, ds,
                            db, cols, eps);
    }
  });
  for (int64_t c = 0; c < cols; ++c) {
    double ds = 0, db = 0;
    for (int64_t k = 0; k < blocks; ++k) {
      ds += part[k * 2 * cols + c];
      db += part[k * 2 * cols + cols + c];
    }
    dscale[c] = static_cast<float>(ds);
    dbias[c] = static_cast<float>(db);
  }
}

/// One contiguous f32 softmax row's gradient: dx = y (dy - sum(dy y)), in
/// double as the generic loop.
DS_CLONES void softmaxGradRowF32(const float *dy, const float *y, float *dx,
                                 int64_t dim) {
  double s = 0;
  {
    DS_REASSOCIATE
    for (int64_t k = 0; k < dim; ++k)
      s += double(dy[k]) * y[k];
  }
  DS_VECTORIZE for (int64_t k = 0; k < dim; ++k)
    dx[k] = static_cast<float>(y[k] * (dy[k] - s));
}

/// One f32 row of softmax cross-entropy's gradient over C classes:
/// scale * (softmax(x) - onehot(label)), the generic loop's double
/// arithmetic (libm exp: the gradient of every weight starts here, and
/// Adam turns a last-bit difference of a tiny gradient into a visible one).
void lossGradRowF32(const float *x, float *out, int64_t C, int64_t label,
                    double scale) {
  double mx = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t c = 0; c < C; ++c)
    mx = std::max(mx, double(x[c]));
  for (int64_t c = 0; c < C; ++c)
    sum += std::exp(double(x[c]) - mx);
  for (int64_t c = 0; c < C; ++c) {
    double p = std::exp(double(x[c]) - mx) / sum;
    out[c] = static_cast<float>(scale * (p - (c == label ? 1.0 : 0.0)));
  }
}
} // namespace

bool kLayerNormGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &x = ctx.in[1], &scale = ctx.in[2];
  TensorView &dx = ctx.out[0], &dscale = ctx.out[1], &dbias = ctx.out[2];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  double eps = ctx.attrs.getFloat("epsilon", 1e-5);
  if (axis < 0 || axis >= x.rank())
    return ctx.fail("layer_norm_grad axis out of range");
  int64_t rows = prod(x.shape, 0, axis), cols = prod(x.shape, axis, x.shape.size());
  if (scale.numel() != cols)
    return ctx.fail("layer_norm_grad scale size does not match");
  auto f32 = [](const TensorView &t) { return t.dtype == DType::F32; };
  if (f32(dy) && f32(x) && f32(scale) && f32(dx) && f32(dscale) && f32(dbias)) {
    layerNormGradF32(x.as<float>(), dy.as<float>(), scale.as<float>(),
                     dx.as<float>(), dscale.as<float>(), dbias.as<float>(),
                     rows, cols, eps);
    return true;
  }
  std::vector<double> ds(cols, 0.0), db(cols, 0.0), xhat(cols), dxhat(cols);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = r * cols;
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c)
      mean += loadD(x.data, x.dtype, base + c);
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) {
      double d = loadD(x.data, x.dtype, base + c) - mean;
      var += d * d;
    }
    double rstd = 1.0 / std::sqrt(var / cols + eps);
    double meanD = 0, meanDX = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double g = loadD(dy.data, dy.dtype, base + c);
      xhat[c] = (loadD(x.data, x.dtype, base + c) - mean) * rstd;
      dxhat[c] = g * loadD(scale.data, scale.dtype, c);
      ds[c] += g * xhat[c];
      db[c] += g;
      meanD += dxhat[c];
      meanDX += dxhat[c] * xhat[c];
    }
    meanD /= cols;
    meanDX /= cols;
    for (int64_t c = 0; c < cols; ++c)
      storeD(dx.data, dx.dtype, base + c,
             rstd * (dxhat[c] - meanD - xhat[c] * meanDX));
  }
  for (int64_t c = 0; c < cols; ++c) {
    storeD(dscale.data, dscale.dtype, c, ds[c]);
    storeD(dbias.data, dbias.dtype, c, db[c]);
  }
  return true;
}

bool kSoftmaxGrad(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &y = ctx.in[1];
  TensorView &dx = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  bool log = ctx.attrs.getInt("log", 0) != 0;
  if (axis < 0 || axis >= y.rank())
    return ctx.fail("softmax_grad axis out of range");
  int64_t outer = prod(y.shape, 0, axis), dim = y.shape[axis];
  int64_t inner = prod(y.shape, axis + 1, y.shape.size());
  if (inner == 1 && !log && dy.dtype == DType::F32 && y.dtype == DType::F32 &&
      dx.dtype == DType::F32) {
    const float *DY = dy.as<float>(), *Y = y.as<float>();
    float *DX = dx.as<float>();
    parallelFor(outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(dim, 1)),
                [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        softmaxGradRowF32(DY + r * dim, Y + r * dim, DX + r * dim, dim);
    });
    return true;
  }
  parallelFor(outer * inner, std::max<int64_t>(1, 8192 / std::max<int64_t>(dim, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t base = (r / inner) * dim * inner + r % inner;
      double s = 0;
      for (int64_t k = 0; k < dim; ++k) {
        int64_t i = base + k * inner;
        double g = loadD(dy.data, dy.dtype, i);
        s += log ? g : g * loadD(y.data, y.dtype, i);
      }
      for (int64_t k = 0; k < dim; ++k) {
        int64_t i = base + k * inner;
        double g = loadD(dy.data, dy.dtype, i), v = loadD(y.data, y.dtype, i);
        storeD(dx.data, dx.dtype, i, log ? g - std::exp(v) * s : v * (g - s));
      }
    }
  });
  return true;
}

bool kLossGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0], &scores = ctx.in[1], &labels = ctx.in[2];
  const TensorView *weights = ctx.in.size() > 3 ? &ctx.in[3] : nullptr;
  TensorView &out = ctx.out[0];
  if (scores.rank() < 2)
    return ctx.fail("scores need rank >= 2");
  int64_t N = scores.shape[0], C = scores.shape[1];
  int64_t D = prod(scores.shape, 2, scores.shape.size());
  std::string reduction = ctx.attrs.getString("reduction", "mean");
  bool softmax = ctx.attrs.getInt("softmax", 1) != 0;
  bool hasIgnore = ctx.attrs.has("ignore_index");
  int64_t ignore = ctx.attrs.getInt("ignore_index", 0);
  std::vector<double> w(N * D, 0.0);
  double weightSum = 0;
  for (int64_t i = 0; i < N * D; ++i) {
    int64_t y = loadI(labels.data, labels.dtype, i);
    if (hasIgnore && y == ignore)
      continue;
    if (y < 0 || y >= C)
      return ctx.fail("label " + std::to_string(y) + " is outside [0, " +
                      std::to_string(C) + ")");
    w[i] = weights ? loadD(weights->data, weights->dtype, y) : 1.0;
    weightSum += w[i];
  }
  if (D == 1 && softmax && reduction != "none" && scores.dtype == DType::F32 &&
      out.dtype == DType::F32) {
    double scale = loadD(g.data, g.dtype, 0);
    if (reduction == "mean")
      scale = weightSum == 0 ? 0.0 : scale / weightSum;
    const float *X = scores.as<float>();
    float *O = out.as<float>();
    parallelFor(N, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
                [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        if (w[n] == 0)
          std::fill(O + n * C, O + (n + 1) * C, 0.0f);
        else
          lossGradRowF32(X + n * C, O + n * C, C,
                         loadI(labels.data, labels.dtype, n), scale * w[n]);
      }
    });
    return true;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      int64_t i = n * D + d;
      double scale = reduction == "none" ? loadD(g.data, g.dtype, i)
                                         : loadD(g.data, g.dtype, 0);
      if (reduction == "mean")
        scale = weightSum == 0 ? 0.0 : scale / weightSum;
      scale *= w[i];
      int64_t y = loadI(labels.data, labels.dtype, i);
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      if (softmax) {
        for (int64_t c = 0; c < C; ++c)
          mx = std::max(mx, loadD(scores.data, scores.dtype, (n * C + c) * D + d));
        for (int64_t c = 0; c < C; ++c)
          sum += std::exp(loadD(scores.data, scores.dtype, (n * C + c) * D + d) - mx);
      }
      for (int64_t c = 0; c < C; ++c) {
        int64_t at = (n * C + c) * D + d;
        double p = softmax
                       ? std::exp(loadD(scores.data, scores.dtype, at) - mx) / sum
                       : 0.0;
        double v = scale * (p - (c == y && w[i] != 0 ? 1.0 : 0.0));
        storeD(out.data, out.dtype, at, w[i] == 0 ? 0.0 : v);
      }
    }
  return true;
}

bool kSliceGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0];
  TensorView &out = ctx.out[0];
  std::vector<int64_t> starts = ctx.attrs.getInts("starts");
  std::vector<int64_t> steps = ctx.attrs.getInts("steps");
  if (static_cast<int64_t>(starts.size()) != out.rank() ||
      static_cast<int64_t>(steps.size()) != out.rank() || g.rank() != out.rank())
    return ctx.fail("slice_grad needs a start and step per dimension");
  size_t es = dtypeSize(out.dtype);
  std::memset(out.data, 0, out.numel() * es);
  std::vector<int64_t> st = stridesOf(out.shape), pos(g.rank(), 0);
  for (int64_t i = 0; i < g.numel(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < g.rank(); ++d) {
      int64_t at = starts[d] + pos[d] * steps[d];
      if (at < 0 || at >= out.shape[d])
        return ctx.fail("slice_grad leaves its result");
      o += at * st[d];
    }
    std::memcpy(out.as<char>() + o * es, g.as<char>() + i * es, es);
    for (int64_t d = g.rank() - 1; d >= 0; --d) {
      if (++pos[d] < g.shape[d])
        break;
      pos[d] = 0;
    }
  }
  return true;
}

void registerGradKernels(KernelRegistry &r) {
  r.add("gather_grad", kGatherGrad);
  r.add("layer_norm_grad", kLayerNormGrad);
  r.add("softmax_grad", kSoftmaxGrad);
  r.add("loss_grad", kLossGrad);
  r.add("slice_grad", kSliceGrad);
}

} // namespace ds::rt
