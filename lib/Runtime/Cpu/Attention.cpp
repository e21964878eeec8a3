//===- Attention.cpp - CPU fused attention and its gradient ---------------===//
//
// Part of the ds project.
//
// FlashAttention-2 on the CPU (issue 24 item 2). The forward walks each
// head's queries in blocks of 32 or 64 rows over the run's threads; per
// block it computes the scores against kBlockK keys at a time with one
// sgemm, masks them, and keeps for each row the running maximum and sum of
// the online softmax, rescaling the accumulated output when the maximum
// grows. It writes the output and each row's logsumexp (lse), nothing of
// size T x T. The gradient, per head over the threads (each head's dQ, dK
// and dV are written by one thread: no atomics, a fixed summation order),
// recomputes each tile's probabilities exp(s - lse) and accumulates
//   dV += P^T dO,  dS = P (dO V^T - rowsum(dO O)),  dQ += scale dS K,
//   dK += scale dS^T Q
// with positions a fill mask sets getting no score gradient. Tiles are
// 32 (under a -inf fill) or 64 query rows by up to 256 keys (T <= 256:
// one key tile, no rescaling). A bool mask is read once per instruction
// into each row's first and last kept column (per distinct mask base: the
// heads it broadcasts over share them); a tile's columns outside every
// row's kept range under a -inf fill (the causal mask's upper triangle)
// are not computed, as their probabilities are exactly zero, and a row
// whose kept columns form one run is masked by filling its two ends
// instead of testing each element. A padding bias trims the key columns
// whose probability is provably 0 (readAddRanges). Q, K, V and dO are
// read through per-head offsets and row strides (HeadOperand: the head
// transposes --ds-fold-transpose folds). Scratch is a few tiles per
// thread (64 x kBlockK floats), not a plan buffer.
//
//===----------------------------------------------------------------------===//

#include "../AttentionGeometry.h"
#include "Kernels.h"
#include "Vec.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace ds::rt {
namespace {

constexpr int64_t kBlockK = 256;

/// Query rows per tile: 32 under a -inf fill mask (the causal triangle is
/// then skipped at a finer grain: 62.5% of a 128 x 128 head computed, not
/// 75%), else 64 (bigger GEMMs; 32 was slower without a mask to skip).
int64_t blockRows(const AttentionGeometry &g) {
  return g.fillsMinusInf() ? 32 : 64;
}

/// A fill mask's rows, read once per instruction: for each distinct mask
/// base (the heads the mask broadcasts over share one) and query row, the
/// first and one past the last kept column and whether every column
/// between them is kept (causal and padding masks: the row is then masked
/// by filling its two ends, not by testing each element).
struct MaskRows {
  std::vector<int64_t> table;  // head n -> index of its base
  std::vector<int32_t> lo, hi; // [table * tq + row]
  std::vector<uint8_t> dense;
};

/// The operands of one instruction, as raw pointers.
struct Operands {
  const float *q, *k, *v;
  const void *mask; // null: no mask
  MaskRows rows;    // fill masks only
  /// An additive mask the same for every query row: per head, the columns
  /// [addLo, addHi) outside which every probability is exactly 0 (empty
  /// when not computed; see readAddRanges).
  std::vector<int32_t> addLo, addHi;
};

/// Row t of head n of an operand read through `h`.
const float *rowOf(const float *p, const HeadOperand &h, int64_t n,
                   int64_t t) {
  return p + h.base[n] + t * h.row;
}

/// The Euclidean norm of n floats, summed in f32 vector lanes (a bound
/// only: its relative error, below n * 2^-24, is inside the 0.1% margin
/// readAddRanges adds).
DS_CLONES double norm(const float *x, int64_t n) {
  float sum = 0;
  {
    DS_REASSOCIATE
    for (int64_t c = 0; c < n; ++c)
      sum += x[c] * x[c];
  }
  return std::sqrt(static_cast<double>(sum));
}

/// For an additive mask that is the same for every query row (a padding
/// bias [B,1,1,T]), the key columns of each head whose probability is
/// exactly 0 in every row, trimmed from the two ends: by Cauchy-Schwarz a
/// score is within c |k_j| of 0, c = |scale| max_i |q_i|, so every row's
/// maximum is at least A = mask_t - c |k_t| for any t, and a column with
/// mask_j + c |k_j| below A - 100 has exp(s + mask - max) < e^-100, which
/// fastExp (like the unfused softmax's) rounds to 0. The bounds are
/// widened by 0.1% for the scores' f32 rounding and by 1e-6 of the
/// magnitudes for the f32 sum of score and bias; a key or value row with
/// a NaN or infinity is never trimmed, and a query row with one trims
/// nothing in its head (the NaN reaches the output as in the unfused
/// plan). The padded keys' columns are then not computed.
void readAddRanges(const AttentionGeometry &g, Operands &in) {
  if (g.kind != AttentionMask::Add || g.maskRow != 0 || g.tk == 0)
    return;
  const float *mask = static_cast<const float *>(in.mask);
  in.addLo.assign(g.batch, 0);
  in.addHi.assign(g.batch, static_cast<int32_t>(g.tk));
  for (int64_t n = 0; n < g.batch; ++n) {
    const float *m = mask + g.maskBase[n];
    auto maskAt = [&](int64_t j) {
      return static_cast<double>(m[j * g.maskCol]);
    };
    // A lower bound of A from one column of the largest bias (any lower
    // bound keeps the test sound): only columns biased 100 below it can be
    // trimmed, so a head whose two ends are not is left as it is, and the
    // norms are taken only of the query rows and the trimmed columns.
    int64_t top = 0;
    for (int64_t j = 1; j < g.tk; ++j)
      top = maskAt(j) > maskAt(top) ? j : top;
    double mtop = maskAt(top);
    if (!(maskAt(0) < mtop - 100.0) && !(maskAt(g.tk - 1) < mtop - 100.0))
      continue;
    double qmax = 0; // infinite when a query row is not finite
    for (int64_t i = 0; i < g.tq && std::isfinite(qmax); ++i) {
      double x = norm(rowOf(in.q, g.q, n, i), g.d);
      qmax = std::isfinite(x) ? std::max(qmax, x) : INFINITY;
    }
    double c = std::fabs(static_cast<double>(g.scale)) * qmax * 1.001;
    double ktop = c * norm(rowOf(in.k, g.k, n, top), g.d), a = mtop - ktop;
    if (!std::isfinite(a) || !std::isfinite(c))
      continue;
    auto dead = [&](int64_t j) {
      if (!(maskAt(j) < a - 100.0))
        return false;
      double kn = c * norm(rowOf(in.k, g.k, n, j), g.d);
      // The kernel adds score and bias in f32: 1e-6 of the magnitudes
      // covers those roundings (16 ulps) for biases of any size.
      double slack =
          1e-6 * (std::fabs(maskAt(j)) + kn + std::fabs(mtop) + ktop);
      return std::isfinite(kn) &&
             std::isfinite(norm(rowOf(in.v, g.v, n, j), g.dv)) &&
             maskAt(j) + kn < a - 100.0 - slack;
    };
    int64_t lo = 0, hi = g.tk;
    while (lo < hi && dead(lo))
      ++lo;
    while (hi > lo && dead(hi - 1))
      --hi;
    in.addLo[n] = static_cast<int32_t>(lo);
    in.addHi[n] = static_cast<int32_t>(hi);
  }
}

/// Reads a fill mask's rows into `in.rows` (nothing for other masks).
void readMaskRows(const AttentionGeometry &g, Operands &in) {
  if (g.kind != AttentionMask::FillTrue && g.kind != AttentionMask::FillFalse)
    return;
  const uint8_t *m = static_cast<const uint8_t *>(in.mask);
  bool fillWhen = g.kind == AttentionMask::FillTrue;
  MaskRows &mr = in.rows;
  std::vector<int64_t> bases;
  mr.table.resize(g.batch);
  for (int64_t n = 0; n < g.batch; ++n) {
    auto it = std::find(bases.begin(), bases.end(), g.maskBase[n]);
    mr.table[n] = it - bases.begin();
    if (it == bases.end())
      bases.push_back(g.maskBase[n]);
  }
  size_t count = bases.size() * g.tq;
  mr.lo.assign(count, 0), mr.hi.assign(count, 0), mr.dense.assign(count, 1);
  for (size_t b = 0; b < bases.size(); ++b)
    for (int64_t i = 0; i < g.tq; ++i) {
      const uint8_t *row = m + bases[b] + i * g.maskRow;
      int64_t lo = -1, hi = 0, kept = 0;
      for (int64_t j = 0; j < g.tk; ++j)
        if ((row[j * g.maskCol] != 0) != fillWhen) {
          lo = lo < 0 ? j : lo;
          hi = j + 1;
          ++kept;
        }
      size_t at = b * g.tq + i;
      mr.lo[at] = static_cast<int32_t>(lo < 0 ? 0 : lo);
      mr.hi[at] = static_cast<int32_t>(hi);
      mr.dense[at] = kept == hi - mr.lo[at];
    }
}

/// The columns [lo, hi) of tile [i0, i0+rows) x [j0, j0+cols) of head n
/// outside which a -inf fill mask fills every row (those columns
/// contribute exactly nothing: the causal mask's upper triangle), relative
/// to j0; lo == hi when it fills the whole tile.
std::pair<int64_t, int64_t> liveColumns(const AttentionGeometry &g,
                                        const Operands &in, int64_t n,
                                        int64_t i0, int64_t j0, int64_t rows,
                                        int64_t cols) {
  if (!in.addLo.empty()) { // a padding bias: the head's live keys
    int64_t lo = std::clamp<int64_t>(in.addLo[n] - j0, 0, cols);
    int64_t hi = std::clamp<int64_t>(in.addHi[n] - j0, lo, cols);
    return {lo, hi};
  }
  if (!g.fillsMinusInf())
    return {0, cols};
  const MaskRows &mr = in.rows;
  size_t at = mr.table[n] * g.tq + i0;
  int64_t lo = cols, hi = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t a = std::max<int64_t>(mr.lo[at + r] - j0, 0);
    int64_t e = std::min<int64_t>(mr.hi[at + r] - j0, cols);
    if (a < e)
      lo = std::min(lo, a), hi = std::max(hi, e);
  }
  return lo < hi ? std::make_pair(lo, hi)
                 : std::make_pair(int64_t(0), int64_t(0));
}

/// Applies the mask to the scaled scores S (rows x cols, ld cols) of
/// columns [j0, j0+cols). With `grad`, S holds score gradients instead:
/// filled positions become 0.
void applyMask(const AttentionGeometry &g, const Operands &in, int64_t n,
               int64_t i0, int64_t j0, int64_t rows, int64_t cols, float *S,
               bool grad) {
  if (g.kind == AttentionMask::None || (grad && g.kind == AttentionMask::Add))
    return;
  int64_t base = g.maskBase[n] + j0 * g.maskCol;
  if (g.kind == AttentionMask::Add) {
    for (int64_t r = 0; r < rows; ++r) {
      float *row = S + r * cols;
      const float *m =
          static_cast<const float *>(in.mask) + base + (i0 + r) * g.maskRow;
      if (g.maskCol == 1) {
        DS_VECTORIZE for (int64_t c = 0; c < cols; ++c) row[c] += m[c];
      } else {
        for (int64_t c = 0; c < cols; ++c)
          row[c] += m[c * g.maskCol];
      }
    }
    return;
  }
  bool fillWhen = g.kind == AttentionMask::FillTrue;
  float value = grad ? 0.0f : g.fill;
  size_t at = in.rows.table[n] * g.tq + i0;
  for (int64_t r = 0; r < rows; ++r) {
    float *row = S + r * cols;
    if (in.rows.dense[at + r]) { // fill the two ends
      int64_t lo = std::clamp<int64_t>(in.rows.lo[at + r] - j0, 0, cols);
      int64_t hi = std::clamp<int64_t>(in.rows.hi[at + r] - j0, lo, cols);
      std::fill(row, row + lo, value);
      std::fill(row + hi, row + cols, value);
      continue;
    }
    const uint8_t *m =
        static_cast<const uint8_t *>(in.mask) + base + (i0 + r) * g.maskRow;
    for (int64_t c = 0; c < cols; ++c)
      if ((m[c * g.maskCol] != 0) == fillWhen)
        row[c] = value;
  }
}

/// One row of the online softmax: folds scores `s` (overwritten by their
/// exponentials) into the running maximum `m` and sum `l`; returns the
/// factor the row's accumulated output must be scaled by.
DS_CLONES float onlineRow(float *s, int64_t cols, float &m, double &l) {
  // Eight running maxima: a select reduction the vectorizer can lane.
  float lanes[8] = {m, m, m, m, m, m, m, m};
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8)
    for (int k = 0; k < 8; ++k)
      lanes[k] = s[c + k] > lanes[k] ? s[c + k] : lanes[k];
  float mx = m;
  for (int k = 0; k < 8; ++k)
    mx = lanes[k] > mx ? lanes[k] : mx;
  for (; c < cols; ++c)
    mx = s[c] > mx ? s[c] : mx;
  if (mx == -INFINITY) { // every score so far is -inf
    std::fill(s, s + cols, 0.0f);
    return 1.0f;
  }
  float alpha = fastExp(m - mx); // 0 when m is -inf
  float sum = 0; // a tile's sum in f32 lanes (at most kBlockK terms <= 1)
  {
    DS_REASSOCIATE
    for (c = 0; c < cols; ++c) {
      s[c] = fastExp(s[c] - mx);
      sum += s[c];
    }
  }
  l = l * alpha + sum;
  m = mx;
  return alpha;
}

/// The forward of rows [i0, i0 + rows) of head n.
void forwardBlock(const AttentionGeometry &g, const Operands &in, int64_t n,
                  int64_t i0, int64_t rows, float *out, float *lse,
                  std::vector<float> &S, std::vector<float> &acc) {
  const float *Q = rowOf(in.q, g.q, n, i0);
  S.resize(rows * kBlockK);
  acc.assign(rows * g.dv, 0.0f);
  std::vector<float> m(rows, -INFINITY);
  std::vector<double> l(rows, 0.0);
  bool first = true; // acc holds nothing yet: no rescale, beta 0
  for (int64_t j0 = 0; j0 < g.tk; j0 += kBlockK) {
    auto [lo, hi] =
        liveColumns(g, in, n, i0, j0, rows, std::min(kBlockK, g.tk - j0));
    if (lo == hi)
      continue;
    int64_t jb = j0 + lo, cols = hi - lo;
    const float *K = rowOf(in.k, g.k, n, jb), *V = rowOf(in.v, g.v, n, jb);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, g.d,
                g.scale, Q, g.q.row, K, g.k.row, 0.0f, S.data(), cols);
    applyMask(g, in, n, i0, jb, rows, cols, S.data(), false);
    for (int64_t r = 0; r < rows; ++r) {
      float alpha = onlineRow(S.data() + r * cols, cols, m[r], l[r]);
      if (!first && alpha != 1.0f)
        for (int64_t c = 0; c < g.dv; ++c)
          acc[r * g.dv + c] *= alpha;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, g.dv, cols,
                1.0f, S.data(), cols, V, g.v.row, first ? 0.0f : 1.0f,
                acc.data(), g.dv);
    first = false;
  }
  float *O = out + (n * g.tq + i0) * g.dv;
  float *L = lse + n * g.tq + i0;
  for (int64_t r = 0; r < rows; ++r) {
    if (l[r] == 0.0) { // every score -inf: NaN, as the unfused softmax
      std::fill(O + r * g.dv, O + (r + 1) * g.dv,
                std::numeric_limits<float>::quiet_NaN());
      L[r] = -INFINITY;
      continue;
    }
    float inv = static_cast<float>(1.0 / l[r]);
    for (int64_t c = 0; c < g.dv; ++c)
      O[r * g.dv + c] = acc[r * g.dv + c] * inv;
    L[r] = m[r] + static_cast<float>(std::log(l[r]));
  }
}

bool kFusedAttention(KernelContext &ctx) {
  AttentionGeometry g;
  const TensorView *mask;
  if (!attentionForwardOperands(ctx, g, mask))
    return false;
  Operands in{ctx.in[0].as<float>(),
              ctx.in[1].as<float>(),
              ctx.in[2].as<float>(),
              mask ? mask->data : nullptr,
              {},
              {},
              {}};
  readMaskRows(g, in);
  readAddRanges(g, in);
  float *out = ctx.out[0].as<float>(), *lse = ctx.out[1].as<float>();
  int64_t blockQ = blockRows(g);
  int64_t blocks = (g.tq + blockQ - 1) / blockQ;
  parallelFor(g.batch * blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<float> S, acc;
    for (int64_t t = b; t < e; ++t) {
      int64_t n = t / blocks, i0 = (t % blocks) * blockQ;
      forwardBlock(g, in, n, i0, std::min(blockQ, g.tq - i0), out, lse, S,
                   acc);
    }
  });
  return true;
}

/// Per-thread tiles of the gradient.
struct GradScratch {
  std::vector<float> P, dS, rowDot;
};

/// P = exp(S - lse) of a rows x cols tile whose scaled, masked scores S
/// holds; dS = P (dP - rowDot) in place of dP.
DS_CLONES void probsAndScoreGrads(float *S, float *dP, const float *lse,
                                  const float *rowDot, int64_t rows,
                                  int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float *p = S + r * cols, *ds = dP + r * cols;
    float L = lse[r], D = rowDot[r];
    DS_VECTORIZE for (int64_t c = 0; c < cols; ++c) {
      p[c] = fastExp(p[c] - L);
      ds[c] = p[c] * (ds[c] - D);
    }
  }
}

/// dot[i] = rowsum(dO O) of the rows x cols head (dO's rows `ldo` apart),
/// summed in double.
DS_CLONES void rowDots(const float *O, const float *dO, int64_t ldo,
                       int64_t rows, int64_t cols, float *dot) {
  for (int64_t i = 0; i < rows; ++i) {
    double sum = 0;
    {
      DS_REASSOCIATE
      for (int64_t c = 0; c < cols; ++c)
        sum += static_cast<double>(dO[i * ldo + c]) * O[i * cols + c];
    }
    dot[i] = static_cast<float>(sum);
  }
}

/// The gradient of head n: dq, dk, dv of its rows.
void gradHead(const AttentionGeometry &g, const Operands &in, int64_t n,
              const float *O, const float *lse, const float *dO, float *dq,
              float *dk, float *dv, GradScratch &s) {
  const float *On = O + n * g.tq * g.dv, *dOn = rowOf(dO, g.dout, n, 0);
  const float *Ln = lse + n * g.tq;
  float *dQ = dq + n * g.tq * g.d, *dK = dk + n * g.tk * g.d,
        *dV = dv + n * g.tk * g.dv;
  std::fill(dQ, dQ + g.tq * g.d, 0.0f);
  std::fill(dK, dK + g.tk * g.d, 0.0f);
  std::fill(dV, dV + g.tk * g.dv, 0.0f);
  s.rowDot.resize(g.tq);
  rowDots(On, dOn, g.dout.row, g.tq, g.dv, s.rowDot.data());
  int64_t blockQ = blockRows(g);
  s.P.resize(blockQ * kBlockK);
  s.dS.resize(blockQ * kBlockK);
  for (int64_t j0 = 0; j0 < g.tk; j0 += kBlockK) {
    for (int64_t i0 = 0; i0 < g.tq; i0 += blockQ) {
      int64_t rows = std::min(blockQ, g.tq - i0);
      auto [lo, hi] =
          liveColumns(g, in, n, i0, j0, rows, std::min(kBlockK, g.tk - j0));
      if (lo == hi)
        continue;
      int64_t jb = j0 + lo, cols = hi - lo;
      const float *K = rowOf(in.k, g.k, n, jb), *V = rowOf(in.v, g.v, n, jb);
      const float *Q = rowOf(in.q, g.q, n, i0);
      const float *dOi = dOn + i0 * g.dout.row;
      int64_t ldq = g.q.row, ldk = g.k.row, ldv = g.v.row, ldo = g.dout.row;
      float *P = s.P.data(), *dS = s.dS.data();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, g.d,
                  g.scale, Q, ldq, K, ldk, 0.0f, P, cols);
      applyMask(g, in, n, i0, jb, rows, cols, P, false);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, g.dv,
                  1.0f, dOi, ldo, V, ldv, 0.0f, dS, cols);
      probsAndScoreGrads(P, dS, Ln + i0, s.rowDot.data() + i0, rows, cols);
      applyMask(g, in, n, i0, jb, rows, cols, dS, true);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, g.dv, rows,
                  1.0f, P, cols, dOi, ldo, 1.0f, dV + jb * g.dv, g.dv);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, g.d, cols,
                  g.scale, dS, cols, K, ldk, 1.0f, dQ + i0 * g.d, g.d);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, g.d, rows,
                  g.scale, dS, cols, Q, ldq, 1.0f, dK + jb * g.d, g.d);
    }
  }
}

bool kFusedAttentionGrad(KernelContext &ctx) {
  AttentionGeometry g;
  const TensorView *mask;
  if (!attentionGradOperands(ctx, g, mask))
    return false;
  Operands in{ctx.in[0].as<float>(),
              ctx.in[1].as<float>(),
              ctx.in[2].as<float>(),
              mask ? mask->data : nullptr,
              {},
              {},
              {}};
  readMaskRows(g, in);
  readAddRanges(g, in);
  parallelFor(g.batch, 1, [&](int64_t b, int64_t e) {
    GradScratch s;
    for (int64_t n = b; n < e; ++n)
      gradHead(g, in, n, ctx.in[3].as<float>(), ctx.in[4].as<float>(),
               ctx.in[5].as<float>(), ctx.out[0].as<float>(),
               ctx.out[1].as<float>(), ctx.out[2].as<float>(), s);
  });
  return true;
}

} // namespace

void registerAttentionKernels(KernelRegistry &r) {
  r.add("fused_attention", kFusedAttention);
  r.add("fused_attention_grad", kFusedAttentionGrad);
}

} // namespace ds::rt
