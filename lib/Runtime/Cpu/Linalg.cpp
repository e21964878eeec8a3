//===- Linalg.cpp - GEMMs, softmax, layer norm and losses on CPU ----------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// MatMul and Gemm call OpenBLAS sgemm. 16-bit operands are converted to f32
// in the workspace buffer the compiler planned (the kernel's last output).
// Softmax, LayerNorm and the losses accumulate in double.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Vec.h"

#include <cblas.h>

#include <algorithm>
#include <limits>

namespace ds::rt {
namespace {


/// A tensor as f32: the data itself, or a converted copy in `scratch`.
const float *asF32(const TensorView &t, float *scratch) {
  if (t.dtype == DType::F32)
    return t.as<float>();
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    scratch[i] = static_cast<float>(loadD(t.data, t.dtype, i));
  return scratch;
}

void storeFromF32(const float *src, TensorView &t) {
  if (t.dtype == DType::F32)
    return; // computed in place
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    storeD(t.data, t.dtype, i, src[i]);
}

/// f32 views of a GEMM's A, B and C: the buffers themselves when the result
/// is f32, else converted copies in the planned workspace (ctx.out[1], laid
/// out A, B, C as the lowering sizes it).
bool f32Operands(KernelContext &ctx, const char *op, const TensorView &a,
                 const TensorView &b, TensorView &o, const float *&A,
                 const float *&B, float *&C) {
  if (o.dtype == DType::F32) {
    A = a.as<float>();
    B = b.as<float>();
    C = o.as<float>();
    return true;
  }
  if (ctx.out.size() < 2 ||
      ctx.out[1].numel() < a.numel() + b.numel() + o.numel())
    return ctx.fail(std::string("16-bit ") + op + " needs its f32 workspace");
  float *ws = ctx.out[1].as<float>();
  A = asF32(a, ws);
  B = asF32(b, ws + a.numel());
  C = ws + a.numel() + b.numel();
  return true;
}

} // namespace

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
           float alpha, const float *A, int64_t lda, const float *B,
           int64_t ldb, float beta, float *C, int64_t ldc) {
  auto call = [&](int64_t m, int64_t n, const float *a, const float *b,
                  float *c) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, m, n, K, alpha, a, lda, b,
                ldb, beta, c, ldc);
  };
  // Each part keeps at least 2^21 multiply-adds (and 16 rows or columns):
  // smaller ones gain little, and OpenBLAS sends a GEMM of up to 10^6
  // multiply-adds to its small-matrix kernels (SkylakeX), whose rounding
  // differs from the blocked kernel's. A part that big takes the path the
  // whole GEMM would, so splitting changes no result bit.
  int64_t parts = threadCount();
  if (parts == 1 || M * N * K < parts * (int64_t(1) << 21)) {
    call(M, N, A, B, C);
  } else if (M >= N) {
    parallelFor(M, 16, [&](int64_t b, int64_t e) {
      call(e - b, N, transA ? A + b : A + b * lda, B, C + b * ldc);
    });
  } else {
    parallelFor(N, 16, [&](int64_t b, int64_t e) {
      call(M, e - b, A, transB ? B + b * ldb : B + b, C + b);
    });
  }
}

bool kMatMul(KernelContext &ctx) {
  if (ctx.attrs.has("perm_a") || ctx.attrs.has("perm_b"))
    return kMatMulPermuted(ctx); // --ds-fold-transpose (MatMulPermuted.cpp)
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  TensorView &o = ctx.out[0];
  if (a.rank() < 1 || b.rank() < 1)
    return ctx.fail("matmul operands need rank >= 1");
  // trans_a / trans_b: A is stored [..., K, M], B [..., N, K] (the
  // compiler folded a transpose of the last two dimensions).
  bool transA = ctx.attrs.getInt("trans_a", 0) != 0 && a.rank() >= 2;
  bool transB = ctx.attrs.getInt("trans_b", 0) != 0 && b.rank() >= 2;
  int64_t M = a.rank() == 1 ? 1 : a.shape[a.rank() - (transA ? 1 : 2)];
  int64_t K = a.rank() == 1 ? a.shape[0] : a.shape[a.rank() - (transA ? 2 : 1)];
  int64_t Kb = b.rank() == 1 ? b.shape[0]
                             : b.shape[b.rank() - (transB ? 1 : 2)];
  int64_t N = b.rank() == 1 ? 1 : b.shape[b.rank() - (transB ? 2 : 1)];
  if (K != Kb)
    return ctx.fail("matmul contraction mismatch");
  std::vector<int64_t> aBatch(a.shape.begin(), a.shape.end() - std::min<int64_t>(a.rank(), 2));
  std::vector<int64_t> bBatch(b.shape.begin(), b.shape.end() - std::min<int64_t>(b.rank(), 2));
  size_t batchRank = std::max(aBatch.size(), bBatch.size());
  std::vector<int64_t> batch(batchRank);
  for (size_t i = 0; i < batchRank; ++i) {
    int64_t da = i < batchRank - aBatch.size() ? 1 : aBatch[i - (batchRank - aBatch.size())];
    int64_t db = i < batchRank - bBatch.size() ? 1 : bBatch[i - (batchRank - bBatch.size())];
    if (da != db && da != 1 && db != 1)
      return ctx.fail("matmul batch dimensions do not broadcast");
    batch[i] = std::max(da, db);
  }
  int64_t batches = prod(batch, 0, batch.size());
  if (batches * M * N != o.numel())
    return ctx.fail("matmul result size does not match its operands");

  const float *A, *B;
  float *C;
  if (!f32Operands(ctx, "matmul", a, b, o, A, B, C))
    return false;
  if (M * N * K == 0) {
    std::fill(C, C + batches * M * N, 0.0f);
  } else if (bBatch.empty() && !transA) {
    // Shared right operand: one GEMM over all rows of A.
    int64_t rows = (aBatch.empty() ? 1 : prod(aBatch, 0, aBatch.size())) * M;
    sgemm(false, transB, rows, N, K, 1.0f, A, K, B, transB ? K : N, 0.0f, C, N);
  } else {
    std::vector<int64_t> sa = broadcastStrides(aBatch, batchRank);
    std::vector<int64_t> sb = broadcastStrides(bBatch, batchRank);
    auto one = [&](int64_t bi) {
      int64_t rem = bi, oa = 0, ob = 0;
      for (int64_t d = static_cast<int64_t>(batchRank) - 1; d >= 0; --d) {
        int64_t idx = rem % batch[d];
        rem /= batch[d];
        oa += idx * sa[d];
        ob += idx * sb[d];
      }
      sgemm(transA, transB, M, N, K, 1.0f, A + oa * M * K, transA ? M : K,
            B + ob * K * N, transB ? K : N, 0.0f, C + bi * M * N, N);
    };
    // Enough batches for every thread: one GEMM per batch and thread (each
    // sgemm then runs whole in its thread); else each GEMM split.
    if (batches >= threadCount())
      parallelFor(batches, 1, [&](int64_t b, int64_t e) {
        for (int64_t bi = b; bi < e; ++bi)
          one(bi);
      });
    else
      for (int64_t bi = 0; bi < batches; ++bi)
        one(bi);
  }
  storeFromF32(C, o);
  return true;
}

bool kGemm(KernelContext &ctx) {
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  const TensorView *c = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  TensorView &o = ctx.out[0];
  bool ta = ctx.attrs.getInt("trans_a", 0), tb = ctx.attrs.getInt("trans_b", 0);
  float alpha = static_cast<float>(ctx.attrs.getFloat("alpha", 1.0));
  float beta = static_cast<float>(ctx.attrs.getFloat("beta", 1.0));
  if (a.rank() != 2 || b.rank() != 2 || o.rank() != 2)
    return ctx.fail("gemm operands must be 2-D");
  int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  int64_t Kb = tb ? b.shape[1] : b.shape[0], N = tb ? b.shape[0] : b.shape[1];
  if (K != Kb || o.shape[0] != M || o.shape[1] != N)
    return ctx.fail("gemm shapes do not match");
  const float *A, *B;
  float *C;
  if (!f32Operands(ctx, "gemm", a, b, o, A, B, C))
    return false;
  // C starts as beta * broadcast(c), or zero.
  if (c && beta != 0.0f) {
    std::vector<int64_t> sc = broadcastStrides(c->shape, 2);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * N + j] =
            beta * static_cast<float>(loadD(c->data, c->dtype, i * sc[0] + j * sc[1]));
  }
  bool accumulate = c && beta != 0.0f;
  if (M * N != 0 && K != 0)
    sgemm(ta, tb, M, N, K, alpha, A, a.shape[1], B, b.shape[1],
          accumulate ? 1.0f : 0.0f, C, N);
  else if (!accumulate)
    std::fill(C, C + M * N, 0.0f);
  storeFromF32(C, o);
  return true;
}

namespace {
/// sum_c e^(row[c] - mx) of one f32 row, in double, vectorized (fastExp,
/// lanes summed in any order).
DS_CLONES double expSumRowF32(const float *row, int64_t C, float mx) {
  double sum = 0;
  {
    DS_REASSOCIATE
    for (int64_t c = 0; c < C; ++c)
      sum += fastExp(row[c] - mx);
  }
  return sum;
}

/// One contiguous f32 softmax row; the sum in double.
DS_CLONES void softmaxRowF32(const float *xr, float *yr, int64_t dim,
                             bool logOut) {
  float mx = -INFINITY;
  for (int64_t k = 0; k < dim; ++k)
    mx = std::max(mx, xr[k]);
  if (mx == -INFINITY) { // every element -inf: NaN, as torch
    for (int64_t k = 0; k < dim; ++k)
      yr[k] = NAN;
    return;
  }
  double sum = 0;
  if (logOut) {
    sum = expSumRowF32(xr, dim, mx);
    float ls = static_cast<float>(std::log(sum));
    for (int64_t k = 0; k < dim; ++k)
      yr[k] = xr[k] - mx - ls;
    return;
  }
  DS_VECTORIZE for (int64_t k = 0; k < dim; ++k)
    yr[k] = fastExp(xr[k] - mx);
  for (int64_t k = 0; k < dim; ++k)
    sum += yr[k];
  float inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < dim; ++k)
    yr[k] *= inv;
}

/// One f32 LayerNorm row: two passes for mean and variance (in double).
DS_CLONES void layerNormRowF32(const float *xr, float *yr, const float *s,
                               const float *bb, int64_t cols, double eps) {
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c)
    sum += xr[c];
  double mean = sum / cols, sq = 0;
  for (int64_t c = 0; c < cols; ++c)
    sq += (xr[c] - mean) * (xr[c] - mean);
  float rstd = static_cast<float>(1.0 / std::sqrt(sq / cols + eps));
  float m = static_cast<float>(mean);
  if (bb)
    DS_VECTORIZE for (int64_t c = 0; c < cols; ++c)
      yr[c] = (xr[c] - m) * rstd * s[c] + bb[c];
  else
    DS_VECTORIZE for (int64_t c = 0; c < cols; ++c)
      yr[c] = (xr[c] - m) * rstd * s[c];
}

bool softmaxImpl(KernelContext &ctx, bool logOut) {
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  if (axis < 0 || axis >= x.rank())
    return ctx.fail("softmax axis out of range");
  int64_t outer = prod(x.shape, 0, axis), dim = x.shape[axis];
  int64_t inner = prod(x.shape, axis + 1, x.shape.size());
  bool f32 = x.dtype == DType::F32 && y.dtype == DType::F32;
  if (f32 && inner == 1) {
    // Contiguous rows: one exp per element, the sum in double.
    parallelFor(outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(dim, 1)),
                [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        softmaxRowF32(x.as<float>() + r * dim, y.as<float>() + r * dim, dim,
                      logOut);
    });
    return true;
  }
  parallelFor(outer * inner, std::max<int64_t>(1, 8192 / std::max<int64_t>(dim, 1)),
              [&](int64_t b, int64_t e) {
    std::vector<double> buf(dim);
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / inner, in = r % inner;
      int64_t base = o * dim * inner + in;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < dim; ++k) {
        double v = f32 ? x.as<float>()[base + k * inner]
                       : loadD(x.data, x.dtype, base + k * inner);
        buf[k] = v;
        mx = std::max(mx, v);
      }
      double sum = 0;
      for (int64_t k = 0; k < dim; ++k)
        sum += std::exp(buf[k] - mx);
      double logSum = std::log(sum);
      for (int64_t k = 0; k < dim; ++k) {
        double v = logOut ? buf[k] - mx - logSum : std::exp(buf[k] - mx) / sum;
        if (f32)
          y.as<float>()[base + k * inner] = static_cast<float>(v);
        else
          storeD(y.data, y.dtype, base + k * inner, v);
      }
    }
  });
  return true;
}

/// Per-position cross entropy from log-probabilities (`logp(n, c, d)`).
template <typename LogP>
bool lossImpl(KernelContext &ctx, const TensorView &scores,
              const TensorView &labels, const TensorView *weights,
              TensorView &loss, LogP logp) {
  int64_t N = scores.shape[0], C = scores.shape[1];
  int64_t D = prod(scores.shape, 2, scores.shape.size());
  std::string reduction = ctx.attrs.getString("reduction", "mean");
  bool hasIgnore = ctx.attrs.has("ignore_index");
  int64_t ignore = ctx.attrs.getInt("ignore_index", 0);
  double total = 0, weightSum = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t d = 0; d < D; ++d) {
      int64_t i = n * D + d;
      int64_t y = loadI(labels.data, labels.dtype, i);
      double l = 0, w = 0;
      if (!(hasIgnore && y == ignore)) {
        if (y < 0 || y >= C)
          return ctx.fail("label " + std::to_string(y) +
                          " is outside [0, " + std::to_string(C) + ")");
        w = weights ? loadD(weights->data, weights->dtype, y) : 1.0;
        l = -w * logp(n, y, d);
      }
      if (reduction == "none")
        storeD(loss.data, loss.dtype, i, l);
      total += l;
      weightSum += w;
    }
  }
  if (reduction == "sum")
    storeD(loss.data, loss.dtype, 0, total);
  else if (reduction == "mean")
    storeD(loss.data, loss.dtype, 0,
           weightSum == 0 ? std::numeric_limits<double>::quiet_NaN()
                          : total / weightSum);
  return true;
}
} // namespace

bool kSoftmax(KernelContext &ctx) { return softmaxImpl(ctx, false); }
bool kLogSoftmax(KernelContext &ctx) { return softmaxImpl(ctx, true); }

bool kLayerNorm(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &scale = ctx.in[1];
  const TensorView *bias = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  TensorView &y = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", -1);
  double eps = ctx.attrs.getFloat("epsilon", 1e-5);
  if (axis < 0 || axis >= x.rank())
    return ctx.fail("layer_norm axis out of range");
  int64_t rows = prod(x.shape, 0, axis), cols = prod(x.shape, axis, x.shape.size());
  if (scale.numel() != cols || (bias && bias->numel() != cols))
    return ctx.fail("layer_norm scale/bias size does not match");
  bool f32 = x.dtype == DType::F32 && y.dtype == DType::F32 &&
             scale.dtype == DType::F32 && (!bias || bias->dtype == DType::F32);
  parallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t base = r * cols;
      double sum = 0, sq = 0;
      if (f32) {
        layerNormRowF32(x.as<float>() + base, y.as<float>() + base,
                        scale.as<float>(), bias ? bias->as<float>() : nullptr,
                        cols, eps);
        continue;
      }
      for (int64_t c = 0; c < cols; ++c)
        sum += loadD(x.data, x.dtype, base + c);
      double mean = sum / cols;
      for (int64_t c = 0; c < cols; ++c) {
        double d = loadD(x.data, x.dtype, base + c) - mean;
        sq += d * d;
      }
      double rstd = 1.0 / std::sqrt(sq / cols + eps);
      for (int64_t c = 0; c < cols; ++c) {
        double v = (loadD(x.data, x.dtype, base + c) - mean) * rstd *
                       loadD(scale.data, scale.dtype, c) +
                   (bias ? loadD(bias->data, bias->dtype, c) : 0.0);
        storeD(y.data, y.dtype, base + c, v);
      }
    }
  });
  return true;
}


bool kSoftmaxCrossEntropyLoss(KernelContext &ctx) {
  const TensorView &scores = ctx.in[0], &labels = ctx.in[1];
  const TensorView *weights = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  if (scores.rank() < 2)
    return ctx.fail("scores need rank >= 2");
  int64_t N = scores.shape[0], C = scores.shape[1];
  int64_t D = prod(scores.shape, 2, scores.shape.size());
  // log-softmax over C at every (n, d), kept for the loss and log_prob.
  std::vector<double> logp(static_cast<size_t>(N * C * D));
  if (scores.dtype == DType::F32 && D == 1) {
    const float *S = scores.as<float>();
    parallelFor(N, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
                [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const float *row = S + n * C;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < C; ++c)
          mx = std::max(mx, row[c]);
        double ls = std::log(expSumRowF32(row, C, mx)) + mx;
        for (int64_t c = 0; c < C; ++c)
          logp[n * C + c] = row[c] - ls;
      }
    });
  } else
  parallelFor(N * D, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t n = r / D, d = r % D;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < C; ++c)
        mx = std::max(mx, loadD(scores.data, scores.dtype, (n * C + c) * D + d));
      double sum = 0;
      for (int64_t c = 0; c < C; ++c)
        sum += std::exp(loadD(scores.data, scores.dtype, (n * C + c) * D + d) - mx);
      double ls = std::log(sum) + mx;
      for (int64_t c = 0; c < C; ++c) {
        int64_t i = (n * C + c) * D + d;
        logp[i] = loadD(scores.data, scores.dtype, i) - ls;
      }
    }
  });
  if (ctx.out.size() > 1)
    for (int64_t i = 0; i < N * C * D; ++i)
      storeD(ctx.out[1].data, ctx.out[1].dtype, i, logp[i]);
  return lossImpl(ctx, scores, labels, weights, ctx.out[0],
                  [&](int64_t n, int64_t c, int64_t d) {
                    return logp[(n * C + c) * D + d];
                  });
}

bool kNllLoss(KernelContext &ctx) {
  const TensorView &input = ctx.in[0], &target = ctx.in[1];
  const TensorView *weights = ctx.in.size() > 2 ? &ctx.in[2] : nullptr;
  if (input.rank() < 2)
    return ctx.fail("input needs rank >= 2");
  int64_t C = input.shape[1], D = prod(input.shape, 2, input.shape.size());
  return lossImpl(ctx, input, target, weights, ctx.out[0],
                  [&](int64_t n, int64_t c, int64_t d) {
                    return loadD(input.data, input.dtype, (n * C + c) * D + d);
                  });
}

void registerLinalgKernels(KernelRegistry &r) {
  r.add("matmul", kMatMul);
  r.add("gemm", kGemm);
  r.add("softmax", kSoftmax);
  r.add("log_softmax", kLogSoftmax);
  r.add("layer_norm", kLayerNorm);
  r.add("softmax_cross_entropy_loss", kSoftmaxCrossEntropyLoss);
  r.add("nll_loss", kNllLoss);
}

} // namespace ds::rt
