//===- Movement.cpp - data movement CPU kernels ---------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM). These kernels copy
// elements by size, whatever their type.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <algorithm>

namespace ds::rt {
namespace {


inline void copyElem(char *dst, const char *src, size_t es) {
  switch (es) {
  case 1: *dst = *src; break;
  case 2: std::memcpy(dst, src, 2); break;
  case 4: std::memcpy(dst, src, 4); break;
  case 8: std::memcpy(dst, src, 8); break;
  default: std::memcpy(dst, src, es);
  }
}

/// dst[i] = src[i * stride] for elements of type T.
template <typename T>
inline void stridedRow(char *dst, const char *src, int64_t n, int64_t stride) {
  T *d = reinterpret_cast<T *>(dst);
  const T *s = reinterpret_cast<const T *>(src);
  if (stride == 0) {
    std::fill(d, d + n, s[0]);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    d[i] = s[i * stride];
}

/// Copies `out` from `in` where output row r (all dims but the last) starts
/// at input element rowOffset(r) and steps by innerStride.
template <typename RowOffset>
void stridedCopy(const TensorView &in, TensorView &out, RowOffset rowOffset,
                 int64_t innerStride) {
  size_t es = dtypeSize(out.dtype);
  int64_t inner = out.shape.empty() ? 1 : out.shape.back();
  int64_t n = out.numel();
  if (n == 0)
    return;
  int64_t rows = n / inner;
  const char *src = in.as<char>();
  char *dst = out.as<char>();
  parallelFor(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t off = rowOffset(r);
      char *d = dst + r * inner * es;
      if (innerStride == 1) {
        std::memcpy(d, src + off * es, inner * es);
        continue;
      }
      switch (es) {
      case 4: stridedRow<uint32_t>(d, src + off * es, inner, innerStride); break;
      case 8: stridedRow<uint64_t>(d, src + off * es, inner, innerStride); break;
      case 2: stridedRow<uint16_t>(d, src + off * es, inner, innerStride); break;
      case 1: stridedRow<uint8_t>(d, src + off * es, inner, innerStride); break;
      default:
        for (int64_t i = 0; i < inner; ++i)
          copyElem(d + i * es, src + (off + i * innerStride) * es, es);
      }
    }
  });
}

/// Input offset of output row r, for per-dimension input strides `st`
/// (aligned to the output's dimensions) and start offsets `base`.
int64_t rowOffset(const std::vector<int64_t> &outShape,
                  const std::vector<int64_t> &st, int64_t r, int64_t base = 0) {
  int64_t off = base;
  for (int64_t d = static_cast<int64_t>(outShape.size()) - 2; d >= 0; --d) {
    int64_t idx = r % outShape[d];
    r /= outShape[d];
    off += idx * st[d];
  }
  return off;
}

/// A transpose of 4-byte elements whose output rows would gather (the
/// output dimension q that walks the input contiguously is not the last):
/// per batch of the other dimensions, 32 x 32 tiles of (q, last), so that
/// both the reads and the writes of a tile stay in cache. False when the
/// permutation is not of that kind.
bool tiledTranspose(const TensorView &in, TensorView &out,
                    const std::vector<int64_t> &st) {
  int64_t rank = out.rank(), last = rank - 1, q = -1;
  if (dtypeSize(out.dtype) != 4 || rank < 2 || st[last] == 1 ||
      out.shape[last] < 2)
    return false;
  for (int64_t d = 0; d < rank; ++d)
    if (st[d] == 1 && out.shape[d] > 1)
      q = d;
  if (q < 0)
    return false;
  std::vector<int64_t> oStr = stridesOf(out.shape), others;
  for (int64_t d = 0; d < last; ++d)
    if (d != q)
      others.push_back(d);
  constexpr int64_t tile = 32;
  int64_t R = out.shape[q], C = out.shape[last], sl = st[last], oq = oStr[q];
  int64_t tilesR = (R + tile - 1) / tile, batches = 1;
  for (int64_t d : others)
    batches *= out.shape[d];
  const uint32_t *I = in.as<uint32_t>();
  uint32_t *O = out.as<uint32_t>();
  parallelFor(batches * tilesR, std::max<int64_t>(1, 8192 / (tile * C)),
              [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t rem = t / tilesR, io = 0, oo = 0;
      for (int64_t k = static_cast<int64_t>(others.size()) - 1; k >= 0; --k) {
        int64_t d = others[k], idx = rem % out.shape[d];
        rem /= out.shape[d];
        io += idx * st[d];
        oo += idx * oStr[d];
      }
      int64_t i0 = (t % tilesR) * tile, i1 = std::min(R, i0 + tile);
      for (int64_t j0 = 0; j0 < C; j0 += tile) {
        int64_t j1 = std::min(C, j0 + tile);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j)
            O[oo + i * oq + j] = I[io + i + j * sl];
      }
    }
  });
  return true;
}

} // namespace

bool kCopy(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  if (in.numel() != out.numel() || in.dtype != out.dtype)
    return ctx.fail("copy between buffers of different types");
  if (in.data != out.data)
    std::memcpy(out.data, in.data, in.numel() * dtypeSize(in.dtype));
  return true;
}

bool kReshape(KernelContext &ctx) { return kCopy(ctx); }

bool kGather(KernelContext &ctx) {
  const TensorView &data = ctx.in[0], &indices = ctx.in[1];
  TensorView &out = ctx.out[0];
  GatherGeometry geo;
  if (!gatherGeometry(ctx, "gather", data.shape, indices, out.numel(), geo))
    return false;
  size_t es = dtypeSize(data.dtype);
  int64_t inner = geo.inner, dim = geo.dim, k = geo.count;
  const char *src = data.as<char>();
  char *dst = out.as<char>();
  parallelFor(geo.outer * k, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / k, idx = geo.index(indices, r % k);
      std::memcpy(dst + r * inner * es, src + (o * dim + idx) * inner * es,
                  inner * es);
    }
  });
  return true;
}

bool kExpand(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  if (in.rank() > out.rank())
    return ctx.fail("expand to a lower rank");
  std::vector<int64_t> st = broadcastStrides(in.shape, out.shape.size());
  stridedCopy(in, out, [&](int64_t r) { return rowOffset(out.shape, st, r); },
              out.shape.empty() ? 0 : st.back());
  return true;
}

bool kTranspose(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  std::vector<int64_t> perm = ctx.attrs.getInts("perm");
  if (static_cast<int64_t>(perm.size()) != in.rank())
    return ctx.fail("transpose permutation does not match the rank");
  std::vector<int64_t> inStrides = stridesOf(in.shape), st(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= in.rank())
      return ctx.fail("invalid permutation");
    st[i] = inStrides[perm[i]];
  }
  if (out.numel() > 0 && tiledTranspose(in, out, st))
    return true;
  stridedCopy(in, out, [&](int64_t r) { return rowOffset(out.shape, st, r); },
              st.empty() ? 0 : st.back());
  return true;
}

bool kSlice(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  std::vector<int64_t> st;
  int64_t base = 0;
  if (!sliceGeometry(ctx, "slice", in, out, st, base))
    return false;
  stridedCopy(in, out,
              [&](int64_t r) { return rowOffset(out.shape, st, r, base); },
              st.empty() ? 0 : st.back());
  return true;
}

bool kConcat(KernelContext &ctx) {
  TensorView &out = ctx.out[0];
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis < 0 || axis >= out.rank())
    return ctx.fail("concat axis out of range");
  size_t es = dtypeSize(out.dtype);
  int64_t outer = prod(out.shape, 0, axis);
  int64_t inner = prod(out.shape, axis + 1, out.shape.size());
  int64_t outChunk = out.shape[axis] * inner, at = 0;
  for (const TensorView &in : ctx.in) {
    int64_t chunk = in.shape[axis] * inner;
    if (at + chunk > outChunk || in.numel() != outer * chunk)
      return ctx.fail("concat operands do not fit the result");
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.as<char>() + (o * outChunk + at) * es,
                  in.as<char>() + o * chunk * es, chunk * es);
    at += chunk;
  }
  return true;
}

bool kSplit(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis < 0 || axis >= in.rank())
    return ctx.fail("split axis out of range");
  size_t es = dtypeSize(in.dtype);
  int64_t outer = prod(in.shape, 0, axis);
  int64_t inner = prod(in.shape, axis + 1, in.shape.size());
  int64_t inChunk = in.shape[axis] * inner, at = 0;
  for (TensorView &out : ctx.out) {
    int64_t chunk = out.shape[axis] * inner;
    if (at + chunk > inChunk || out.numel() != outer * chunk)
      return ctx.fail("split results do not fit the input");
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.as<char>() + o * chunk * es,
                  in.as<char>() + (o * inChunk + at) * es, chunk * es);
    at += chunk;
  }
  return true;
}

bool kTrilu(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  if (in.rank() < 2)
    return ctx.fail("trilu needs rank >= 2");
  bool upper = ctx.attrs.getInt("upper", 1) != 0;
  int64_t k = ctx.attrs.getInt("k", 0);
  int64_t rows = in.shape[in.rank() - 2], cols = in.shape.back();
  size_t es = dtypeSize(in.dtype);
  int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = (i / cols) % rows, c = i % cols;
    bool keep = upper ? (c - r >= k) : (c - r <= k);
    if (keep)
      copyElem(out.as<char>() + i * es, in.as<char>() + i * es, es);
    else
      std::memset(out.as<char>() + i * es, 0, es);
  }
  return true;
}

bool kRange(KernelContext &ctx) {
  TensorView &out = ctx.out[0];
  const TensorView &start = ctx.in[0], &delta = ctx.in[2];
  int64_t n = out.numel();
  if (isFloat(out.dtype)) {
    double s = loadD(start.data, start.dtype, 0), d = loadD(delta.data, delta.dtype, 0);
    for (int64_t i = 0; i < n; ++i)
      storeD(out.data, out.dtype, i, s + i * d);
  } else {
    int64_t s = loadI(start.data, start.dtype, 0), d = loadI(delta.data, delta.dtype, 0);
    for (int64_t i = 0; i < n; ++i)
      storeI(out.data, out.dtype, i, s + i * d);
  }
  return true;
}

void registerMovementKernels(KernelRegistry &r) {
  r.add("gather", kGather);
  r.add("expand", kExpand);
  r.add("transpose", kTranspose);
  r.add("concat", kConcat);
  r.add("split", kSplit);
  r.add("slice", kSlice);
  r.add("trilu", kTrilu);
  r.add("copy", kCopy);
  r.add("transfer", kCopy); // offload; NVMe ends are the executor's
  r.add("range", kRange);
  r.add("reshape", kReshape);
}

} // namespace ds::rt
