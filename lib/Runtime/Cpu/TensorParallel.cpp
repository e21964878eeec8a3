//===- TensorParallel.cpp - vocabulary split, sequence-parallel rows ------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Kernels that need the rank in the tensor-parallel group (the
// communicator of the instruction's group): the vocabulary split (rank r
// holds rows, or score columns, [r*n, (r+1)*n) of the whole vocabulary of
// n*T entries) and a rank's rows of a replicated activation (sequence
// parallelism).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ds/Runtime/Comm.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ds::rt {

namespace {
struct Slice {
  int64_t ranks = 1, first = 0; // group size, this rank's first entry
};
Slice sliceOf(const KernelContext &ctx, int64_t n) {
  Slice s;
  if (ctx.comm) {
    s.ranks = ctx.comm->size();
    s.first = static_cast<int64_t>(ctx.comm->rank()) * n;
  }
  return s;
}

/// The rows of `table` (the slice, [n, inner...]) and the checks of the
/// whole vocabulary's indices, shared by the lookup and its gradient.
bool lookupGeometry(KernelContext &ctx, const char *kernel,
                    const TensorView &table, const TensorView &indices,
                    int64_t gathered, int64_t &rows, int64_t &inner,
                    int64_t &vocab, Slice &s) {
  if (table.rank() < 1)
    return ctx.fail(std::string(kernel) + " needs a table of rank >= 1");
  rows = table.shape[0];
  inner = prod(table.shape, 1, table.shape.size());
  s = sliceOf(ctx, rows);
  vocab = ctx.attrs.getInt("vocab", rows * s.ranks); // padded slices: true size
  if (gathered != indices.numel() * inner)
    return ctx.fail(std::string(kernel) + " sizes do not match");
  for (int64_t j = 0; j < indices.numel(); ++j) {
    int64_t i = loadI(indices.data, indices.dtype, j);
    if (i < -vocab || i >= vocab)
      return ctx.fail(std::string(kernel) + " index " + std::to_string(i) +
                      " is outside [" + std::to_string(-vocab) + ", " +
                      std::to_string(vocab) + ")");
  }
  return true;
}

/// Index j of `indices` as a row of this rank's slice, or -1.
int64_t localRow(const TensorView &indices, int64_t j, int64_t vocab,
                 int64_t rows, const Slice &s) {
  int64_t i = loadI(indices.data, indices.dtype, j);
  if (i < 0)
    i += vocab;
  i -= s.first;
  return i >= 0 && i < rows ? i : -1;
}

/// The labels' checks and the rows' loss scale, shared by the loss and its
/// gradient: `weight[n]` is 1 for a counted label, 0 for an ignored one.
bool labelWeights(KernelContext &ctx, const TensorView &labels, int64_t vocab,
                  std::vector<double> &weight, double &count) {
  bool hasIgnore = ctx.attrs.has("ignore_index");
  int64_t ignore = ctx.attrs.getInt("ignore_index", 0);
  weight.assign(labels.numel(), 0.0);
  count = 0;
  for (int64_t n = 0; n < labels.numel(); ++n) {
    int64_t y = loadI(labels.data, labels.dtype, n);
    if (hasIgnore && y == ignore)
      continue;
    if (y < 0 || y >= vocab)
      return ctx.fail("label " + std::to_string(y) + " is outside [0, " +
                      std::to_string(vocab) + ")");
    weight[n] = 1.0;
    count += 1.0;
  }
  return true;
}

/// The loss and its gradient over a split vocabulary: the shapes checked,
/// this rank's columns (`valid` of them before the padding) and the
/// labels' weights.
struct VocabRows {
  int64_t N = 0, C = 0, vocab = 0, valid = 0;
  Slice s;
  std::vector<double> weight;
  double count = 0;
};
bool vocabRows(KernelContext &ctx, const char *kernel, const TensorView &scores,
               const TensorView &labels, const TensorView &lse,
               VocabRows &v) {
  if (scores.rank() != 2 || labels.numel() != scores.shape[0] ||
      lse.numel() != scores.shape[0] || lse.dtype != DType::F32)
    return ctx.fail(std::string(kernel) +
                    " needs N x C scores, N labels and N f32 lse");
  v.N = scores.shape[0];
  v.C = scores.shape[1];
  v.s = sliceOf(ctx, v.C);
  // Classes from `vocab` on are padding (a vocabulary T does not divide).
  v.vocab = ctx.attrs.getInt("vocab", v.C * v.s.ranks);
  v.valid = std::max<int64_t>(0, std::min(v.C, v.vocab - v.s.first));
  // Every rank holds the same labels: all fail here, before any exchange.
  return labelWeights(ctx, labels, v.vocab, v.weight, v.count);
}
} // namespace

bool kVocabGather(KernelContext &ctx) {
  const TensorView &table = ctx.in[0], &indices = ctx.in[1];
  TensorView &out = ctx.out[0];
  int64_t rows, inner, vocab;
  Slice s;
  if (!lookupGeometry(ctx, "vocab_gather", table, indices, out.numel(), rows,
                      inner, vocab, s))
    return false;
  size_t es = dtypeSize(table.dtype);
  const char *src = table.as<char>();
  char *dst = out.as<char>();
  parallelFor(indices.numel(),
              std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      int64_t r = localRow(indices, j, vocab, rows, s);
      if (r < 0)
        std::memset(dst + j * inner * es, 0, inner * es);
      else
        std::memcpy(dst + j * inner * es, src + r * inner * es, inner * es);
    }
  });
  return true;
}

bool kVocabGatherGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0], &indices = ctx.in[1];
  TensorView &out = ctx.out[0];
  int64_t rows, inner, vocab;
  Slice s;
  if (!lookupGeometry(ctx, "vocab_gather_grad", out, indices, g.numel(), rows,
                      inner, vocab, s))
    return false;
  std::vector<double> acc(out.numel(), 0.0);
  for (int64_t j = 0; j < indices.numel(); ++j) {
    int64_t r = localRow(indices, j, vocab, rows, s);
    if (r < 0)
      continue;
    double *dst = acc.data() + r * inner;
    for (int64_t i = 0; i < inner; ++i)
      dst[i] += loadD(g.data, g.dtype, j * inner + i);
  }
  for (int64_t i = 0; i < out.numel(); ++i)
    storeD(out.data, out.dtype, i, acc[i]);
  return true;
}

bool kVocabCrossEntropy(KernelContext &ctx) {
  const TensorView &scores = ctx.in[0], &labels = ctx.in[1];
  TensorView &loss = ctx.out[0], &lse = ctx.out[1];
  VocabRows v;
  if (!vocabRows(ctx, "vocab_cross_entropy", scores, labels, lse, v))
    return false;
  int64_t N = v.N, C = v.C, valid = v.valid;
  const Slice &s = v.s;
  const std::vector<double> &weight = v.weight;
  double count = v.count;
  // 1. Each row's maximum over the whole vocabulary.
  std::vector<float> mx(N), all(N * s.ranks);
  for (int64_t n = 0; n < N; ++n) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < valid; ++c)
      m = std::max(m, static_cast<float>(loadD(scores.data, scores.dtype,
                                               n * C + c)));
    mx[n] = m;
  }
  std::string err;
  bool shared = ctx.comm && s.ranks > 1;
  if (shared) {
    ctx.comm->collectiveBytes += all.size() * sizeof(float);
    if (!ctx.comm->allGather(mx.data(), all.data(), N, DType::F32, err))
      return ctx.fail(err);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < s.ranks; ++r)
        mx[n] = std::max(mx[n], all[r * N + n]);
  }
  // 2. The sums of exponentials and the target scores, summed over ranks.
  std::vector<float> sums(2 * N, 0.0f);
  parallelFor(N, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      double sum = 0;
      for (int64_t c = 0; c < valid; ++c)
        sum += std::exp(loadD(scores.data, scores.dtype, n * C + c) - mx[n]);
      sums[n] = static_cast<float>(sum);
      int64_t y = loadI(labels.data, labels.dtype, n) - s.first;
      if (weight[n] != 0 && y >= 0 && y < C)
        sums[N + n] =
            static_cast<float>(loadD(scores.data, scores.dtype, n * C + y));
    }
  });
  if (shared) {
    ctx.comm->collectiveBytes += sums.size() * sizeof(float);
    if (!ctx.comm->allReduce(sums.data(), 2 * N, DType::F32, false, err))
      return ctx.fail(err);
  }
  std::string reduction = ctx.attrs.getString("reduction", "mean");
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    double l = std::log(static_cast<double>(sums[n])) + mx[n];
    lse.as<float>()[n] = static_cast<float>(l);
    double row = weight[n] != 0 ? l - sums[N + n] : 0.0;
    if (reduction == "none")
      storeD(loss.data, loss.dtype, n, row);
    total += row;
  }
  if (reduction == "sum")
    storeD(loss.data, loss.dtype, 0, total);
  else if (reduction == "mean")
    storeD(loss.data, loss.dtype, 0,
           count == 0 ? std::numeric_limits<double>::quiet_NaN()
                      : total / count);
  return true;
}

bool kVocabCrossEntropyGrad(KernelContext &ctx) {
  const TensorView &g = ctx.in[0], &scores = ctx.in[1], &labels = ctx.in[2],
                   &lse = ctx.in[3];
  TensorView &out = ctx.out[0];
  VocabRows v;
  if (!vocabRows(ctx, "vocab_cross_entropy_grad", scores, labels, lse, v))
    return false;
  if (out.numel() != scores.numel())
    return ctx.fail("vocab_cross_entropy_grad: the result is not the scores' "
                    "size");
  int64_t N = v.N, C = v.C, valid = v.valid;
  const Slice &s = v.s;
  const std::vector<double> &weight = v.weight;
  double count = v.count;
  std::string reduction = ctx.attrs.getString("reduction", "mean");
  parallelFor(N, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      double scale = reduction == "none" ? loadD(g.data, g.dtype, n)
                                         : loadD(g.data, g.dtype, 0);
      if (reduction == "mean")
        scale = count == 0 ? 0.0 : scale / count;
      scale *= weight[n];
      int64_t y = loadI(labels.data, labels.dtype, n) - s.first;
      double l = lse.as<float>()[n];
      for (int64_t c = 0; c < C; ++c) {
        double p = std::exp(loadD(scores.data, scores.dtype, n * C + c) - l);
        double v = scale * (p - (c == y ? 1.0 : 0.0));
        storeD(out.data, out.dtype, n * C + c,
               weight[n] == 0 || c >= valid ? 0.0 : v);
      }
    }
  });
  return true;
}

namespace {
/// Row blocks of dimension `axis`: `whole` is [outer, n*T, inner] and
/// `rows` [outer, n, inner]; the sizes of one block in each, in bytes.
struct RowBlocks {
  int64_t outer = 1, wholeBlock = 0, rowBlock = 0, ranks = 1, rank = 0;
};
bool rowBlocks(KernelContext &ctx, const TensorView &whole,
               const TensorView &rows, RowBlocks &g) {
  int64_t axis = ctx.attrs.getInt("axis", 0);
  g.ranks = ctx.comm ? ctx.comm->size() : 1;
  g.rank = ctx.comm ? ctx.comm->rank() : 0;
  if (axis < 0 || axis >= whole.rank() || whole.rank() != rows.rank() ||
      whole.dtype != rows.dtype)
    return ctx.fail("row blocks: the axis or the shapes do not match");
  for (int64_t d = 0; d < whole.rank(); ++d)
    if (whole.shape[d] != (d == axis ? rows.shape[d] * g.ranks : rows.shape[d]))
      return ctx.fail("a " + std::to_string(whole.numel()) +
                      "-element tensor is not " + std::to_string(g.ranks) +
                      " row blocks of " + std::to_string(rows.numel()) +
                      " elements along dimension " + std::to_string(axis));
  size_t es = dtypeSize(whole.dtype);
  g.outer = prod(whole.shape, 0, axis);
  int64_t inner = prod(whole.shape, axis + 1, whole.shape.size());
  g.rowBlock = rows.shape[axis] * inner * es;
  g.wholeBlock = g.rowBlock * g.ranks;
  return true;
}
/// Moves row blocks between their place in the whole tensor
/// ([outer][T][rows]) and rank order ([T][outer][rows]: the collectives'
/// contiguous rank shards).
void reorderRows(const RowBlocks &g, const char *src, char *dst,
                 bool toRankOrder) {
  for (int64_t r = 0; r < g.ranks; ++r)
    for (int64_t o = 0; o < g.outer; ++o) {
      int64_t placed = o * g.wholeBlock + r * g.rowBlock,
              ranked = (r * g.outer + o) * g.rowBlock;
      std::memcpy(dst + (toRankOrder ? ranked : placed),
                  src + (toRankOrder ? placed : ranked), g.rowBlock);
    }
}
} // namespace

bool kTpRows(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  RowBlocks g;
  if (!rowBlocks(ctx, in, out, g))
    return false;
  for (int64_t o = 0; o < g.outer; ++o)
    std::memcpy(out.as<char>() + o * g.rowBlock,
                in.as<char>() + o * g.wholeBlock + g.rank * g.rowBlock,
                g.rowBlock);
  return true;
}

bool kSpAllGather(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  RowBlocks g;
  if (!rowBlocks(ctx, out, in, g))
    return false;
  // Gathered rank by rank ([T][outer][rows]), then put in place.
  std::vector<char> all(static_cast<size_t>(g.wholeBlock * g.outer));
  if (g.ranks > 1) {
    ctx.comm->collectiveBytes += all.size();
    std::string err;
    if (!ctx.comm->allGather(in.data, all.data(), in.numel(), in.dtype, err))
      return ctx.fail(err);
  } else {
    std::memcpy(all.data(), in.data, all.size());
  }
  reorderRows(g, all.data(), out.as<char>(), /*toRankOrder=*/false);
  return true;
}

bool kSpReduceScatter(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  RowBlocks g;
  if (!rowBlocks(ctx, in, out, g))
    return false;
  // Each rank's rows made contiguous ([T][outer][rows]), then reduced.
  std::vector<char> packed(static_cast<size_t>(g.wholeBlock * g.outer));
  reorderRows(g, in.as<char>(), packed.data(), /*toRankOrder=*/true);
  if (g.ranks == 1) {
    std::memcpy(out.data, packed.data(), packed.size());
    return true;
  }
  ctx.comm->collectiveBytes += packed.size();
  std::string err;
  if (!ctx.comm->reduceScatter(packed.data(), out.data, out.numel(), out.dtype,
                               false, err))
    return ctx.fail(err);
  return true;
}

void registerTensorParallelKernels(KernelRegistry &r) {
  r.add("vocab_gather", kVocabGather);
  r.add("vocab_gather_grad", kVocabGatherGrad);
  r.add("vocab_cross_entropy", kVocabCrossEntropy);
  r.add("vocab_cross_entropy_grad", kVocabCrossEntropyGrad);
  r.add("tp_rows", kTpRows);
  r.add("sp_all_gather", kSpAllGather);
  r.add("sp_reduce_scatter", kSpReduceScatter);
}

} // namespace ds::rt
