//===- Movement.cu - data movement CUDA kernels ---------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// These kernels copy elements by size, whatever their type, as the CPU's
// Movement.cpp: gather, expand, transpose, concat and split, slice and its
// gradient (the inverse scatter), trilu, range and plain copies.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

namespace ds::rt::cuda {
namespace {

__global__ void gatherKernel(const char *src, const void *idx, int it,
                             char *dst, int64_t outer, int64_t dim,
                             int64_t count, int64_t inner, int64_t es,
                             long long *bad) {
  int64_t n = outer * count * inner;
  DS_GRID_LOOP(e, n) {
    int64_t at = gatherSource(e, idx, it, dim, count, inner, bad);
    if (at < 0)
      continue;
    const char *s = src + at * es;
    char *d = dst + e * es;
    for (int64_t b = 0; b < es; ++b)
      d[b] = s[b];
  }
}

/// A strided view (a layout's first strides plus `base`; bytes per
/// element `es`) copied out, dst[i] = src[base + offset(i)], or with
/// `scatter` the inverse, dst[base + offset(i)] = src[i].
__global__ void stridedKernel(Layout l, int64_t n, const char *src,
                              int64_t base, char *dst, int64_t es,
                              bool scatter) {
  DS_GRID_LOOP(i, n) {
    int64_t off[1];
    offsets(l, i, 1, off);
    int64_t view = base + off[0];
    const char *s = src + (scatter ? i : view) * es;
    char *d = dst + (scatter ? view : i) * es;
    for (int64_t b = 0; b < es; ++b)
      d[b] = s[b];
  }
}

/// Chunks of `chunk` elements: dst[o*dstStride + at + k] = src[o*chunk + k]
/// (concat), or the reverse with `split`.
__global__ void chunkKernel(const char *src, char *dst, int64_t outer,
                            int64_t chunk, int64_t wide, int64_t at, int64_t es,
                            bool split) {
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

__global__ void triluKernel(const char *src, char *dst, int64_t n, int64_t rows,
                            int64_t cols, bool upper, int64_t k, int64_t es) {
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

/// Same bytes, another shape (reshape, copy).
bool kCopyBytes(KernelContext &ctx) {
  const TensorView &a = ctx.in[0];
  TensorView &o = ctx.out[0];
  size_t bytes = o.numel() * dtypeSize(o.dtype);
  if (a.numel() != o.numel() || a.dtype != o.dtype)
    return ctx.fail("copy between tensors of different sizes or types");
  if (a.data != o.data && bytes &&
      cudaMemcpyAsync(o.data, a.data, bytes, cudaMemcpyDeviceToDevice,
                      gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

__global__ void permute(Layout l, int64_t n, const void *a, void *o, int dt,
                        int64_t elem) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    offsets(l, i, 1, off);
    const char *src = static_cast<const char *>(a) + off[0] * elem;
    char *dst = static_cast<char *>(o) + i * elem;
    for (int64_t b = 0; b < elem; ++b)
      dst[b] = src[b];
  }
}

bool kTranspose(KernelContext &ctx) {
  const TensorView &a = ctx.in[0];
  TensorView &o = ctx.out[0];
  std::vector<int64_t> perm = ctx.attrs.getInts("perm");
  if (static_cast<int64_t>(perm.size()) != a.rank() || a.rank() > kMaxRank)
    return ctx.fail("transpose perm does not match the operand");
  std::vector<int64_t> st(a.rank(), 1);
  for (int64_t d = a.rank() - 2; d >= 0; --d)
    st[d] = st[d + 1] * a.shape[d + 1];
  Layout l;
  l.rank = static_cast<int>(a.rank());
  for (int d = 0; d < l.rank; ++d) {
    if (perm[d] < 0 || perm[d] >= a.rank())
      return ctx.fail("transpose perm out of range");
    l.shape[d] = a.shape[perm[d]];
    l.strides[0][d] = st[perm[d]];
  }
  int64_t n = o.numel();
  if (n == 0)
    return true;
  permute<<<blocksFor(n), 256, 0, gStream>>>(l, n, a.data, o.data, int(a.dtype),
                                             int64_t(dtypeSize(a.dtype)));
  return launched(ctx);
}

bool kGather(KernelContext &ctx) {
  const TensorView &data = ctx.in[0], &idx = ctx.in[1];
  TensorView &out = ctx.out[0];
  GatherGeometry geo;
  if (!gatherShape(ctx, "gather", data.shape, idx, out.numel(), geo))
    return false;
  if (out.numel() == 0)
    return true;
  IndexCheck bad;
  if (!bad.reset(ctx))
    return false;
  gatherKernel<<<blocksFor(out.numel()), 256, 0, gStream>>>(
      static_cast<const char *>(data.data), idx.data, int(idx.dtype),
      static_cast<char *>(out.data), geo.outer, geo.dim, geo.count, geo.inner,
      int64_t(dtypeSize(data.dtype)), bad.device());
  return launched(ctx) && bad.check(ctx, "gather index", -geo.dim, geo.dim);
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
        static_cast<char *>(out.data), int64_t(dtypeSize(in.dtype)), false);
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
        static_cast<const char *>(in.data), base, static_cast<char *>(out.data),
        int64_t(dtypeSize(in.dtype)), false);
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
    stridedKernel<<<blocksFor(g.numel()), 256, 0, gStream>>>(
        contiguousLayout(g.shape, st), g.numel(),
        static_cast<const char *>(g.data), base, static_cast<char *>(out.data),
        int64_t(es), true);
  return launched(ctx);
}

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

bool kConcat(KernelContext &ctx) {
  return chunks(ctx, ctx.out[0], ctx.in, false);
}
bool kSplit(KernelContext &ctx) {
  return chunks(ctx, ctx.in[0], ctx.out, true);
}

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
        out.data, int(out.dtype), out.numel(), sf, df, !isFloat(out.dtype), si,
        di);
  return launched(ctx);
}

} // namespace

void registerMovementKernels(KernelRegistry &r) {
  r.add("gather", kGather);
  r.add("expand", kExpand);
  r.add("transpose", kTranspose);
  r.add("concat", kConcat);
  r.add("split", kSplit);
  r.add("slice", kSlice);
  r.add("slice_grad", kSliceGrad);
  r.add("trilu", kTrilu);
  r.add("range", kRange);
  r.add("reshape", kCopyBytes);
  r.add("copy", kCopyBytes);
  r.add("transfer", kCopyBytes); // offload plans are refused on CUDA
}

} // namespace ds::rt::cuda
