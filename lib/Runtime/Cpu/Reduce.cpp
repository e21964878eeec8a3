//===- Reduce.cpp - reductions on CPU -------------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM). Accumulates in double
// (sums) and compares in double (max); integers stay exact up to 2^53.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Vec.h"

#include <algorithm>
#include <limits>

namespace ds::rt {
namespace {

enum class Red { Sum, Mean, Max };

/// acc[c] += x[c]: one f32 row added into double sums (each column's sum
/// keeps its row order, so vectorizing across columns changes no bit).
DS_CLONES void addRowD(double *acc, const float *x, int64_t n) {
  DS_VECTORIZE for (int64_t c = 0; c < n; ++c) acc[c] += x[c];
}

/// Stores n sums (divided by `count` for a mean) at out[o, o + n).
void storeSums(TensorView &out, int64_t o, const double *v, int64_t n,
               double count, bool mean) {
  if (out.dtype == DType::F32) {
    float *f = out.as<float>() + o;
    for (int64_t i = 0; i < n; ++i)
      f[i] = static_cast<float>(mean ? v[i] / count : v[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    double x = mean ? v[i] / count : v[i];
    if (isFloat(out.dtype))
      storeD(out.data, out.dtype, o + i, x);
    else
      storeI(out.data, out.dtype, o + i, static_cast<int64_t>(x));
  }
}

void storeSum(TensorView &out, int64_t o, double v) {
  if (out.dtype == DType::F32)
    out.as<float>()[o] = static_cast<float>(v);
  else if (isFloat(out.dtype))
    storeD(out.data, out.dtype, o, v);
  else
    storeI(out.data, out.dtype, o, static_cast<int64_t>(v));
}

/// f32 sum or mean over leading axes: rows of `cols` added column-wise, in
/// blocks of columns that keep their double sums in L1.
void sumLeadingF32(const float *x, int64_t rows, int64_t cols, bool mean,
                   TensorView &out) {
  constexpr int64_t block = 512;
  parallelFor(cols, block, [&](int64_t b, int64_t e) {
    double acc[block];
    for (int64_t c0 = b; c0 < e; c0 += block) {
      int64_t n = std::min(block, e - c0);
      std::fill(acc, acc + n, 0.0);
      for (int64_t r = 0; r < rows; ++r)
        addRowD(acc, x + r * cols + c0, n);
      storeSums(out, c0, acc, n, static_cast<double>(rows), mean);
    }
  });
}

/// f32 sum or mean over trailing axes: each row summed in order in double,
/// eight rows at a time (eight independent chains instead of one).
void sumTrailingF32(const float *x, int64_t rows, int64_t count, bool mean,
                    TensorView &out) {
  parallelFor(rows, std::max<int64_t>(8, 16384 / std::max<int64_t>(count, 1)),
              [&](int64_t b, int64_t e) {
    int64_t o = b;
    for (; o + 8 <= e; o += 8) {
      double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const float *row = x + o * count;
      for (int64_t i = 0; i < count; ++i)
        for (int j = 0; j < 8; ++j)
          a[j] += row[j * count + i];
      storeSums(out, o, a, 8, static_cast<double>(count), mean);
    }
    for (; o < e; ++o) {
      double a = 0;
      for (int64_t i = 0; i < count; ++i)
        a += x[o * count + i];
      storeSum(out, o, mean ? a / static_cast<double>(count) : a);
    }
  });
}

/// Axes [0, lead) and [trail, rank) reduced, [lead, trail) kept, with both
/// reduced runs non-empty.
bool middleKept(const std::vector<bool> &reduced, int64_t lead,
                int64_t trail) {
  int64_t rank = static_cast<int64_t>(reduced.size());
  return lead > 0 && trail < rank && lead < trail &&
         std::none_of(reduced.begin() + lead, reduced.begin() + trail,
                      [](bool r) { return r; });
}

bool reduce(KernelContext &ctx, Red kind) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  std::vector<int64_t> axes = ctx.attrs.getInts("axes");
  std::vector<bool> reduced(in.rank(), false);
  for (int64_t a : axes) {
    if (a < 0 || a >= in.rank())
      return ctx.fail("reduction axis out of range");
    reduced[a] = true;
  }
  // Output strides over the input's dimensions (0 on reduced ones).
  std::vector<int64_t> kept(in.shape);
  for (int64_t d = 0; d < in.rank(); ++d)
    if (reduced[d])
      kept[d] = 1;
  std::vector<int64_t> st = stridesOf(kept);
  for (int64_t d = 0; d < in.rank(); ++d)
    if (reduced[d])
      st[d] = 0;
  int64_t outN = out.numel(), inN = in.numel();
  int64_t count = outN == 0 ? 0 : inN / outN;
  double init = kind == Red::Max ? -std::numeric_limits<double>::infinity() : 0.0;

  // Trailing axes reduced: contiguous rows, in parallel.
  int64_t firstReduced = in.rank();
  while (firstReduced > 0 && reduced[firstReduced - 1])
    --firstReduced;
  bool trailing = std::none_of(reduced.begin(), reduced.begin() + firstReduced,
                               [](bool b) { return b; });
  // Leading axes reduced (bias gradients: sum over batch and tokens):
  // rows added into the output, in parallel over output columns.
  int64_t lastReduced = 0;
  while (lastReduced < in.rank() && reduced[lastReduced])
    ++lastReduced;
  bool leading = lastReduced > 0 &&
                 std::none_of(reduced.begin() + lastReduced, reduced.end(),
                              [](bool b) { return b; });
  if (in.dtype == DType::F32 && kind != Red::Max && outN > 0) {
    if (leading && !trailing) {
      sumLeadingF32(in.as<float>(), count, outN, kind == Red::Mean, out);
      return true;
    }
    if (trailing) {
      sumTrailingF32(in.as<float>(), outN, count, kind == Red::Mean, out);
      return true;
    }
  }
  std::vector<double> acc(outN, init);
  if (leading && !trailing) {
    int64_t rows = count, cols = outN;
    bool f32 = in.dtype == DType::F32;
    parallelFor(cols, 1024, [&](int64_t b, int64_t e) {
      for (int64_t r = 0; r < rows; ++r) {
        if (f32) {
          const float *x = in.as<float>() + r * cols;
          for (int64_t c = b; c < e; ++c)
            acc[c] = kind == Red::Max ? (std::isnan(x[c]) || std::isnan(acc[c]) ? NAN : std::max<double>(acc[c], x[c]))
                                      : acc[c] + x[c];
        } else {
          for (int64_t c = b; c < e; ++c) {
            double v = loadD(in.data, in.dtype, r * cols + c);
            acc[c] = kind == Red::Max ? (std::isnan(v) || std::isnan(acc[c]) ? NAN : std::max(acc[c], v))
                                      : acc[c] + v;
          }
        }
      }
    });
  } else if (trailing) {
    parallelFor(outN, std::max<int64_t>(1, 16384 / std::max<int64_t>(count, 1)),
                [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        double a = init;
        for (int64_t i = 0; i < count; ++i) {
          double v = loadD(in.data, in.dtype, o * count + i);
          a = kind == Red::Max ? (std::isnan(v) || std::isnan(a) ? NAN : std::max(a, v)) : a + v;
        }
        acc[o] = a;
      }
    });
  } else if (middleKept(reduced, lastReduced, firstReduced)) {
    // Leading and trailing axes reduced around a kept middle block
    // (BatchNorm's statistics of NCHW over N, H and W): each kept element
    // sums its [outer x inner] entries in input order (the generic loop's
    // order, so the same result), in parallel over kept elements.
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < lastReduced; ++d)
      outer *= in.shape[d];
    for (int64_t d = firstReduced; d < in.rank(); ++d)
      inner *= in.shape[d];
    bool f32 = in.dtype == DType::F32;
    parallelFor(outN, std::max<int64_t>(1, 16384 / std::max<int64_t>(count, 1)),
                [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        double a = init;
        for (int64_t i = 0; i < outer; ++i) {
          int64_t base = (i * outN + k) * inner;
          for (int64_t j = 0; j < inner; ++j) {
            double v = f32 ? double(in.as<float>()[base + j])
                           : loadD(in.data, in.dtype, base + j);
            a = kind == Red::Max ? (std::isnan(v) || std::isnan(a) ? NAN : std::max(a, v))
                                 : a + v;
          }
        }
        acc[k] = a;
      }
    });
  } else {
    std::vector<int64_t> pos(in.rank(), 0);
    for (int64_t i = 0; i < inN; ++i) {
      int64_t o = 0;
      for (int64_t d = 0; d < in.rank(); ++d)
        o += pos[d] * st[d];
      double v = loadD(in.data, in.dtype, i);
      acc[o] = kind == Red::Max ? (std::isnan(v) || std::isnan(acc[o]) ? NAN : std::max(acc[o], v))
                                : acc[o] + v;
      for (int64_t d = in.rank() - 1; d >= 0; --d) {
        if (++pos[d] < in.shape[d])
          break;
        pos[d] = 0;
      }
    }
  }
  for (int64_t o = 0; o < outN; ++o) {
    double v = kind == Red::Mean ? acc[o] / static_cast<double>(count) : acc[o];
    if (isFloat(out.dtype))
      storeD(out.data, out.dtype, o, v);
    else
      storeI(out.data, out.dtype, o, static_cast<int64_t>(v));
  }
  return true;
}

} // namespace

bool kReduceSum(KernelContext &ctx) { return reduce(ctx, Red::Sum); }
bool kReduceMean(KernelContext &ctx) { return reduce(ctx, Red::Mean); }
bool kReduceMax(KernelContext &ctx) { return reduce(ctx, Red::Max); }

void registerReduceKernels(KernelRegistry &r) {
  r.add("reduce_sum", kReduceSum);
  r.add("reduce_mean", kReduceMean);
  r.add("reduce_max", kReduceMax);
}

} // namespace ds::rt
