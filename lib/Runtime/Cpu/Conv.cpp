//===- Conv.cpp - CPU convolution kernels: im2col + GEMM ------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// conv, conv_grad_input and conv_grad_weight over 1 to 3 spatial
// dimensions (Support/ConvGeometry.h: fewer are the leading ones of three,
// of size 1). Per image and group: im2col (the column matrix of every
// kernel tap's input pixels, the runtime's threads splitting its rows),
// then one cblas_sgemm (OpenBLAS's threads): the forward W x col, the input
// gradient W^T x dY followed by col2im, the weight gradient dY x col^T
// accumulated over the batch. f32 only.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ds/Support/ConvGeometry.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

namespace ds::rt {
namespace {

/// The geometry of the convolution of `x` by `w` into `y` (shapes from the
/// operands, strides/pads/dilations/group from the attributes), all f32.
bool geometryOf(KernelContext &ctx, const TensorView &x, const TensorView &w,
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

/// The column matrix (colRows x outSize) of one image's group of channels
/// `x` (cg x inSize); zero where a tap falls in the padding.
void im2col(const ConvGeometry &g, const float *x, float *col) {
  parallelFor(g.colRows(), 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      g.forTaps(r, [&](int64_t o, int64_t i) {
        col[r * g.outSize + o] = i < 0 ? 0.0f : x[i];
      });
  });
}

/// Adds the column matrix back into the image it came from (the adjoint of
/// im2col); the rows of one channel run on one thread.
void col2im(const ConvGeometry &g, const float *col, float *x) {
  parallelFor(g.cg(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin * g.kSize; r < end * g.kSize; ++r)
      g.forTaps(r, [&](int64_t o, int64_t i) {
        if (i >= 0)
          x[i] += col[r * g.outSize + o];
      });
  });
}

/// Calls fn(x, w, y, n) for every image n and group: the offsets of the
/// group's channels in the input, the weight and the output.
template <typename Fn> void forImageGroups(const ConvGeometry &g, Fn fn) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t gi = 0; gi < g.group; ++gi)
      fn((n * g.c + gi * g.cg()) * g.inSize, gi * g.mg() * g.colRows(),
         (n * g.m + gi * g.mg()) * g.outSize, n);
}

/// y = conv(x, w) + bias.
bool kConv(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &w = ctx.in[1];
  TensorView &y = ctx.out[0];
  ConvGeometry g;
  if (!geometryOf(ctx, x, w, y, g))
    return false;
  const float *bias = nullptr;
  if (ctx.in.size() > 2) {
    if (ctx.in[2].dtype != DType::F32 || ctx.in[2].numel() != g.m)
      return ctx.fail("conv bias must be f32 with one value per channel");
    bias = ctx.in[2].as<float>();
  }
  std::vector<float> col(g.colRows() * g.outSize);
  const float *X = x.as<float>(), *W = w.as<float>();
  float *Y = y.as<float>();
  forImageGroups(g, [&](int64_t xo, int64_t wo, int64_t yo, int64_t) {
    im2col(g, X + xo, col.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.mg(), g.outSize,
                g.colRows(), 1.0f, W + wo, g.colRows(), col.data(), g.outSize,
                0.0f, Y + yo, g.outSize);
  });
  if (bias)
    parallelFor(g.n * g.m, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        std::for_each(Y + r * g.outSize, Y + (r + 1) * g.outSize,
                      [&](float &v) { v += bias[r % g.m]; });
    });
  return true;
}

/// dx = col2im(W^T dy) of the convolution whose result gradient is in[0].
bool kConvGradInput(KernelContext &ctx) {
  const TensorView &dy = ctx.in[0], &w = ctx.in[1];
  TensorView &dx = ctx.out[0];
  ConvGeometry g;
  if (!geometryOf(ctx, dx, w, dy, g))
    return false;
  std::vector<float> col(g.colRows() * g.outSize);
  const float *DY = dy.as<float>(), *W = w.as<float>();
  float *DX = dx.as<float>();
  std::fill(DX, DX + dx.numel(), 0.0f);
  forImageGroups(g, [&](int64_t xo, int64_t wo, int64_t yo, int64_t) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g.colRows(),
                g.outSize, g.mg(), 1.0f, W + wo, g.colRows(), DY + yo,
                g.outSize, 0.0f, col.data(), g.outSize);
    col2im(g, col.data(), DX + xo);
  });
  return true;
}

/// dw = sum over the batch of dy x im2col(x)^T.
bool kConvGradWeight(KernelContext &ctx) {
  const TensorView &x = ctx.in[0], &dy = ctx.in[1];
  TensorView &dw = ctx.out[0];
  ConvGeometry g;
  if (!geometryOf(ctx, x, dw, dy, g))
    return false;
  std::vector<float> col(g.colRows() * g.outSize);
  const float *X = x.as<float>(), *DY = dy.as<float>();
  float *DW = dw.as<float>();
  forImageGroups(g, [&](int64_t xo, int64_t wo, int64_t yo, int64_t n) {
    im2col(g, X + xo, col.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.mg(), g.colRows(),
                g.outSize, 1.0f, DY + yo, g.outSize, col.data(), g.outSize,
                n == 0 ? 0.0f : 1.0f, DW + wo, g.colRows());
  });
  if (g.n == 0)
    std::fill(DW, DW + dw.numel(), 0.0f);
  return true;
}

} // namespace

void registerConvKernels(KernelRegistry &r) {
  r.add("conv", kConv);
  r.add("conv_grad_input", kConvGradInput);
  r.add("conv_grad_weight", kConvGradWeight);
}

} // namespace ds::rt
