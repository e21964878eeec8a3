//===- Conv.cpp - CPU convolution kernels: im2col + GEMM ------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// conv, conv_grad_input and conv_grad_weight over 1 to 3 spatial
// dimensions (Support/ConvGeometry.h: fewer are the leading ones of three,
// of size 1). f32 only. Three paths:
//
// - GEMM (the general case): the images are taken in chunks (as many as
//   keep a chunk's column matrix under kColFloats), so that each GEMM is
//   wide even where the feature maps are small. Per chunk and group:
//   im2col of the chunk (rows channel x tap, columns image x output
//   position; the runtime's threads split its rows), then one sgemm
//   split over the run's threads (Kernels.h): the forward W x col, the
//   input gradient W^T x dY followed by col2im, the weight gradient
//   dY x col^T accumulated over the chunks. The chunk's dY and y are
//   regrouped between the image-major tensor and the GEMM's channel-major
//   columns by row copies. Output rows under 16 columns (the small feature
//   maps) gather through a per-tap index table instead of row copies. The
//   column buffers are each thread's own, kept between calls.
// - Pointwise (1x1 taps, strides 1, no padding) with large images: the
//   input is its own column matrix, one GEMM per image and no im2col.
// - Depthwise (one input channel per group): direct loops per (image,
//   channel) plane, no GEMM (ConvDepthwise below).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ds/Support/ConvGeometry.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ds::rt {

/// The geometry of the convolution of `x` by `w` into `y` (shapes from the
/// operands, strides/pads/dilations/group from the attributes), all f32.
bool convGeometryOf(KernelContext &ctx, const TensorView &x, const TensorView &w,
                    const TensorView &y, ConvGeometry &g) {
  for (const TensorView *t : {&x, &w, &y})
    if (t->dtype != DType::F32)
      return ctx.fail("convolution kernels are f32 only");
  std::string error = g.init(x.shape, w.shape, y.shape,
                             ctx.attrs.getInts("strides"),
                             ctx.attrs.getInts("pads"),
                             ctx.attrs.getInts("dilations"),
                             ctx.attrs.getInt("group", 1));
  return error.empty() || ctx.fail(error);
}

namespace {

/// The most floats of a chunk's column matrix (16 MiB).
constexpr int64_t kColFloats = int64_t(1) << 22;
/// Output rows shorter than this are gathered through a tap table.
constexpr int64_t kTableBelow = 16;
/// Pointwise convolutions run per image from this many output positions.
constexpr int64_t kPointwiseOwnGemm = 512;

/// Images per chunk: 1 for a pointwise convolution of large images (its
/// GEMMs read the input in place), else as many as fit kColFloats.
int64_t imagesPerChunk(const ConvGeometry &g) {
  if (g.pointwise() && g.outSize >= kPointwiseOwnGemm)
    return 1;
  int64_t perImage = std::max<int64_t>(1, g.colRows() * g.outSize);
  return std::clamp<int64_t>(kColFloats / perImage, 1, std::max<int64_t>(g.n, 1));
}

/// The column matrix (colRows x images * outSize) of `images` images' group
/// of channels (`x`: the first image's first channel of the group); zero
/// where a tap falls in the padding. The threads split the rows; a row's
/// tap is worked out once for all the images.
void im2col(const ConvGeometry &g, const float *x, int64_t images, float *col,
            const int32_t *table) {
  const int64_t ld = images * g.outSize, imageStride = g.c * g.inSize;
  const int64_t s = g.stride[2], width = g.out[2], P = g.outSize;
  if (table) {
    parallelFor(g.colRows(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int32_t *at = table + (r % g.kSize) * P;
        for (int64_t j = 0; j < images; ++j) {
          const float *xc = x + j * imageStride + (r / g.kSize) * g.inSize;
          float *dst = col + r * ld + j * P;
          // Loads at 0 for the padding, then a select: no branch.
          for (int64_t o = 0; o < P; ++o) {
            float v = xc[at[o] < 0 ? 0 : at[o]];
            dst[o] = at[o] < 0 ? 0.0f : v;
          }
        }
      }
    });
    return;
  }
  parallelFor(g.colRows(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      ConvGeometry::Tap tap = g.tapOf(r);
      int64_t lo, hi, off;
      g.columnRange(tap.kw, lo, hi, off);
      for (int64_t j = 0; j < images; ++j) {
        const float *xc = x + j * imageStride + tap.ch * g.inSize + off;
        float *dst = col + r * ld + j * g.outSize;
        g.forRows(tap.kd, tap.kh, [&](int64_t o, int64_t row) {
          float *d = dst + o;
          if (row < 0) {
            std::fill(d, d + width, 0.0f);
            return;
          }
          const float *src = xc + row;
          std::fill(d, d + lo, 0.0f);
          if (s == 1)
            std::copy(src + lo, src + hi, d + lo);
          else
            for (int64_t ow = lo; ow < hi; ++ow)
              d[ow] = src[ow * s];
          std::fill(d + hi, d + width, 0.0f);
        });
      }
    }
  });
}

/// Adds the column matrix back into the images it came from (the adjoint
/// of im2col); one (image, channel) plane per task, so no two threads
/// write the same element.
void col2im(const ConvGeometry &g, const float *col, int64_t images, float *x,
            const int32_t *table) {
  const int64_t ld = images * g.outSize, imageStride = g.c * g.inSize;
  parallelFor(g.cg() * images, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t ch = t / images, j = t % images;
      float *xc = x + j * imageStride + ch * g.inSize;
      for (int64_t r = ch * g.kSize; r < (ch + 1) * g.kSize && table; ++r) {
        const int32_t *at = table + (r % g.kSize) * g.outSize;
        const float *src = col + r * ld + j * g.outSize;
        for (int64_t o = 0; o < g.outSize; ++o)
          if (at[o] >= 0)
            xc[at[o]] += src[o];
      }
      for (int64_t r = ch * g.kSize; r < (ch + 1) * g.kSize && !table; ++r) {
        ConvGeometry::Tap tap = g.tapOf(r);
        const float *src = col + r * ld + j * g.outSize;
        int64_t lo, hi, off, s = g.stride[2];
        g.columnRange(tap.kw, lo, hi, off);
        g.forRows(tap.kd, tap.kh, [&](int64_t o, int64_t row) {
          if (row < 0)
            return;
          float *d = xc + row + off;
          if (s == 1)
            for (int64_t ow = lo; ow < hi; ++ow)
              d[ow] += src[o + ow];
          else
            for (int64_t ow = lo; ow < hi; ++ow)
              d[ow * s] += src[o + ow];
        });
      }
    }
  });
}

/// Between `rows` channels of `images` images of an image-major tensor
/// (`t`: the first image's first channel, images `imageStride` apart) and
/// the channel-major matrix `m` (rows x images * plane): gather copies
/// t -> m, scatter m -> t.
void regroup(const float *t, float *m, int64_t rows, int64_t images,
             int64_t plane, int64_t imageStride, bool gather, float *tOut) {
  parallelFor(rows * images, 16, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t r = k / images, j = k % images;
      float *mm = m + (r * images + j) * plane;
      int64_t at = j * imageStride + r * plane;
      if (gather)
        std::memcpy(mm, t + at, plane * sizeof(float));
      else
        std::memcpy(tOut + at, mm, plane * sizeof(float));
    }
  });
}

/// `n` floats of the calling thread's buffer `which`, kept from call to
/// call: a fresh multi-MiB buffer per call costs page faults and the
/// kernel's zeroing of every page, as much as the im2col itself.
float *scratch(int which, int64_t n) {
  thread_local std::vector<float> buffers[2];
  std::vector<float> &b = buffers[which];
  if (static_cast<int64_t>(b.size()) < n)
    b.resize(n);
  return b.data();
}

/// A GEMM path's sizes and buffers: K rows of the column matrix, P
/// output positions per image, `per` images per chunk, `direct` when the
/// input is its own column matrix (pointwise, one image per GEMM); `col`
/// the chunk's column matrix, `rows` its channel-major dY or y.
struct GemmWork {
  int64_t K, P, per;
  bool direct;
  float *col, *rows;
  /// With output rows shorter than kTableBelow: per tap and output
  /// position, the input position read (-1: padding), for im2col and
  /// col2im to gather by (per-row copies cost more than they move there).
  std::vector<int32_t> table;
  explicit GemmWork(const ConvGeometry &g)
      : K(g.colRows()), P(g.outSize), per(imagesPerChunk(g)),
        direct(g.pointwise() && per == 1),
        col(direct ? nullptr : scratch(0, K * per * P)),
        rows(per > 1 ? scratch(1, g.mg() * per * P) : nullptr) {
    if (direct || g.out[2] >= kTableBelow || g.inSize >= INT32_MAX)
      return;
    table.resize(g.kSize * P);
    for (int64_t t = 0; t < g.kSize; ++t)
      g.forTaps(t, [&](int64_t o, int64_t i) {
        table[t * P + o] = static_cast<int32_t>(i);
      });
  }
  const int32_t *tapTable() const { return table.empty() ? nullptr : table.data(); }
};

/// Calls fn(n0, b, gi) for every chunk of b images from n0 and group gi.
template <typename Fn> void forChunks(const ConvGeometry &g, Fn fn) {
  const int64_t per = imagesPerChunk(g);
  for (int64_t n0 = 0; n0 < g.n; n0 += per)
    for (int64_t gi = 0; gi < g.group; ++gi)
      fn(n0, std::min(per, g.n - n0), gi);
}

void gemmForward(const ConvGeometry &g, const float *X, const float *W,
                 float *Y) {
  GemmWork w(g);
  const int64_t K = w.K, P = w.P;
  forChunks(g, [&](int64_t n0, int64_t b, int64_t gi) {
    const float *xg = X + (n0 * g.c + gi * g.cg()) * g.inSize;
    float *yg = Y + (n0 * g.m + gi * g.mg()) * P;
    if (!w.direct)
      im2col(g, xg, b, w.col, w.tapTable());
    sgemm(false, false, g.mg(), b * P, K, 1.0f, W + gi * g.mg() * K, K,
          w.direct ? xg : w.col, b * P, 0.0f, b > 1 ? w.rows : yg, b * P);
    if (b > 1)
      regroup(nullptr, w.rows, g.mg(), b, P, g.m * P, false, yg);
  });
}

void gemmGradInput(const ConvGeometry &g, const float *DY, const float *W,
                   float *DX) {
  GemmWork w(g);
  const int64_t K = w.K, P = w.P;
  if (!w.direct)
    std::fill(DX, DX + g.n * g.c * g.inSize, 0.0f);
  forChunks(g, [&](int64_t n0, int64_t b, int64_t gi) {
    const float *dyg = DY + (n0 * g.m + gi * g.mg()) * P;
    float *dxg = DX + (n0 * g.c + gi * g.cg()) * g.inSize;
    if (b > 1)
      regroup(dyg, w.rows, g.mg(), b, P, g.m * P, true, nullptr);
    sgemm(true, false, K, b * P, g.mg(), 1.0f, W + gi * g.mg() * K, K,
          b > 1 ? w.rows : dyg, b * P, 0.0f, w.direct ? dxg : w.col, b * P);
    if (!w.direct)
      col2im(g, w.col, b, dxg, w.tapTable());
  });
}

void gemmGradWeight(const ConvGeometry &g, const float *X, const float *DY,
                    float *DW) {
  GemmWork w(g);
  const int64_t K = w.K, P = w.P;
  if (g.n == 0)
    std::fill(DW, DW + g.m * K, 0.0f);
  forChunks(g, [&](int64_t n0, int64_t b, int64_t gi) {
    const float *xg = X + (n0 * g.c + gi * g.cg()) * g.inSize;
    const float *dyg = DY + (n0 * g.m + gi * g.mg()) * P;
    if (!w.direct)
      im2col(g, xg, b, w.col, w.tapTable());
    if (b > 1)
      regroup(dyg, w.rows, g.mg(), b, P, g.m * P, true, nullptr);
    sgemm(false, true, g.mg(), K, b * P, 1.0f, b > 1 ? w.rows : dyg, b * P,
          w.direct ? xg : w.col, b * P, n0 == 0 ? 0.0f : 1.0f,
          DW + gi * g.mg() * K, K);
  });
}

//===----------------------------------------------------------------------===//
// Depthwise: one input channel per group (cg = 1, group = C), multiplier
// mg output channels per input channel. Output channel oc reads input
// channel oc / mg with the weights w[oc * kSize + tap]. Per output row the
// taps are the outer loops and the row's in-bounds columns the inner one.
//===----------------------------------------------------------------------===//

bool isDepthwise(const ConvGeometry &g) { return g.cg() == 1 && g.group > 1; }

/// Calls fn(tap, o, inOffset, lo, hi) for every tap and output row whose
/// input row is inside: columns [lo, hi) of the row starting at output
/// position o read input positions inOffset + ow * stride.
template <typename Fn> void forDepthwiseRows(const ConvGeometry &g, Fn fn) {
  for (int64_t t = 0; t < g.kSize; ++t) {
    ConvGeometry::Tap tap = g.tapOf(t);
    int64_t lo, hi, off;
    g.columnRange(tap.kw, lo, hi, off);
    g.forRows(tap.kd, tap.kh, [&](int64_t o, int64_t row) {
      if (row >= 0 && lo < hi)
        fn(t, o, row + off, lo, hi);
    });
  }
}

void depthwiseForward(const ConvGeometry &g, const float *X, const float *W,
                      float *Y) {
  const int64_t s = g.stride[2];
  parallelFor(g.n * g.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      int64_t n = p / g.m, oc = p % g.m;
      const float *x = X + (n * g.c + oc / g.mg()) * g.inSize;
      const float *w = W + oc * g.kSize;
      float *y = Y + p * g.outSize;
      std::fill(y, y + g.outSize, 0.0f);
      forDepthwiseRows(g, [&](int64_t t, int64_t o, int64_t in, int64_t lo,
                              int64_t hi) {
        const float wt = w[t], *src = x + in;
        float *dst = y + o;
        for (int64_t ow = lo; ow < hi; ++ow)
          dst[ow] += wt * src[ow * s];
      });
    }
  });
}

void depthwiseGradInput(const ConvGeometry &g, const float *DY, const float *W,
                        float *DX) {
  const int64_t s = g.stride[2];
  parallelFor(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      int64_t n = p / g.c, ic = p % g.c;
      float *dx = DX + p * g.inSize;
      std::fill(dx, dx + g.inSize, 0.0f);
      for (int64_t oc = ic * g.mg(); oc < (ic + 1) * g.mg(); ++oc) {
        const float *dy = DY + (n * g.m + oc) * g.outSize;
        const float *w = W + oc * g.kSize;
        forDepthwiseRows(g, [&](int64_t t, int64_t o, int64_t in, int64_t lo,
                                int64_t hi) {
          const float wt = w[t], *src = dy + o;
          float *dst = dx + in;
          for (int64_t ow = lo; ow < hi; ++ow)
            dst[ow * s] += wt * src[ow];
        });
      }
    }
  });
}

void depthwiseGradWeight(const ConvGeometry &g, const float *X, const float *DY,
                         float *DW) {
  const int64_t s = g.stride[2];
  parallelFor(g.m, 1, [&](int64_t begin, int64_t end) {
    // Per tap, the products summed per output column first (a vectorizable
    // loop), the columns at the end.
    std::vector<float> acc(g.kSize * g.out[2]);
    for (int64_t oc = begin; oc < end; ++oc) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t n = 0; n < g.n; ++n) {
        const float *x = X + (n * g.c + oc / g.mg()) * g.inSize;
        const float *dy = DY + (n * g.m + oc) * g.outSize;
        forDepthwiseRows(g, [&](int64_t t, int64_t o, int64_t in, int64_t lo,
                                int64_t hi) {
          float *a = acc.data() + t * g.out[2];
          const float *src = x + in, *d = dy + o;
          for (int64_t ow = lo; ow < hi; ++ow)
            a[ow] += d[ow] * src[ow * s];
        });
      }
      for (int64_t t = 0; t < g.kSize; ++t) {
        float sum = 0.0f;
        for (int64_t ow = 0; ow < g.out[2]; ++ow)
          sum += acc[t * g.out[2] + ow];
        DW[oc * g.kSize + t] = sum;
      }
    }
  });
}

//===----------------------------------------------------------------------===//
// The kernels.
//===----------------------------------------------------------------------===//

/// y = conv(x, w) + bias.
bool kConv(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &w = ctx.in[1];
  TensorView &y = ctx.out[0];
  ConvGeometry g;
  if (!convGeometryOf(ctx, x, w, y, g))
    return false;
  const float *bias = nullptr;
  if (ctx.in.size() > 2) {
    if (ctx.in[2].dtype != DType::F32 || ctx.in[2].numel() != g.m)
      return ctx.fail("conv bias must be f32 with one value per channel");
    bias = ctx.in[2].as<float>();
  }
  float *Y = y.as<float>();
  if (isDepthwise(g))
    depthwiseForward(g, x.as<float>(), w.as<float>(), Y);
  else
    gemmForward(g, x.as<float>(), w.as<float>(), Y);
  if (bias)
    parallelFor(g.n * g.m, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float b = bias[r % g.m];
        float *row = Y + r * g.outSize;
        for (int64_t i = 0; i < g.outSize; ++i)
          row[i] += b;
      }
    });
  return true;
}

/// dx of the convolution whose result gradient is in[0].
bool kConvGradInput(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &w = ctx.in[1];
  TensorView &dx = ctx.out[0];
  ConvGeometry g;
  if (!convGeometryOf(ctx, dx, w, dy, g))
    return false;
  if (isDepthwise(g))
    depthwiseGradInput(g, dy.as<float>(), w.as<float>(), dx.as<float>());
  else
    gemmGradInput(g, dy.as<float>(), w.as<float>(), dx.as<float>());
  return true;
}

/// dw = sum over the batch of dy x im2col(x)^T.
bool kConvGradWeight(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &dy = ctx.in[1];
  TensorView &dw = ctx.out[0];
  ConvGeometry g;
  if (!convGeometryOf(ctx, x, dw, dy, g))
    return false;
  if (isDepthwise(g))
    depthwiseGradWeight(g, x.as<float>(), dy.as<float>(), dw.as<float>());
  else
    gemmGradWeight(g, x.as<float>(), dy.as<float>(), dw.as<float>());
  return true;
}

} // namespace

void registerConvKernels(KernelRegistry &r) {
  r.add("conv", kConv);
  r.add("conv_grad_input", kConvGradInput);
  r.add("conv_grad_weight", kConvGradWeight);
}

} // namespace ds::rt
