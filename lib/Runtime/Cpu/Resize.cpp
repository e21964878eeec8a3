//===- Resize.cpp - CPU resize (nearest, linear) and its gradient ---------===//
//
// Part of the ds project.
//
// Support/Resize.h gives each spatial dimension a tap table (up to two
// input indices and weights per output index); the kernels build the
// three tables once and walk the (N, C) planes over the run's threads.
// The forward blends the innermost dimension first, then the outer ones
// (PyTorch's order for bilinear); the gradient scatters each output
// gradient onto the same taps, plane by plane (no two threads write one
// element, so the sums are deterministic). f16 and bf16 planes are widened
// to f32 and rounded back.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ResizeGeometry.h"

#include <algorithm>
#include <vector>

namespace ds::rt {
namespace {

/// The tap tables of one resize, one per (padded) dimension.
struct TapTables {
  std::vector<ResizeTap> dim[kMaxResizeDims];

  explicit TapTables(const ResizeGeometry &g) {
    for (int d = 0; d < kMaxResizeDims; ++d) {
      dim[d].resize(g.out[d]);
      for (int64_t o = 0; o < g.out[d]; ++o)
        dim[d][o] = g.tap(d, o);
    }
  }
};

/// The taps of dimension `d` as (index, weight) pairs: one for nearest or
/// a zero second weight, two otherwise.
int tapsOf(const ResizeTap &t, int64_t idx[2], float w[2]) {
  idx[0] = t.i0;
  w[0] = t.w0;
  if (t.w1 == 0.0f)
    return 1;
  idx[1] = t.i1;
  w[1] = t.w1;
  return 2;
}

/// One output element's taps: per dimension, up to two (index, weight).
struct ElementTaps {
  int64_t idx[kMaxResizeDims][2];
  float w[kMaxResizeDims][2];
  int n[kMaxResizeDims];
};

/// Calls fn(taps, outputIndex) for every output element of a plane, in
/// order.
template <typename Fn>
void forEachOutput(const ResizeGeometry &g, const TapTables &t, Fn fn) {
  ElementTaps e;
  int64_t o = 0;
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
    e.n[0] = tapsOf(t.dim[0][o0], e.idx[0], e.w[0]);
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
      e.n[1] = tapsOf(t.dim[1][o1], e.idx[1], e.w[1]);
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++o) {
        e.n[2] = tapsOf(t.dim[2][o2], e.idx[2], e.w[2]);
        fn(e, o);
      }
    }
  }
}

/// One plane of the forward: y[o] = sum of the taps' products.
void resizePlane(const ResizeGeometry &g, const TapTables &t, const float *x,
                 float *y) {
  forEachOutput(g, t, [&](const ElementTaps &e, int64_t o) {
    float acc0 = 0.0f;
    for (int a = 0; a < e.n[0]; ++a) {
      float acc1 = 0.0f;
      for (int b = 0; b < e.n[1]; ++b) {
        const float *src = x + (e.idx[0][a] * g.in[1] + e.idx[1][b]) * g.in[2];
        float acc2 = 0.0f;
        for (int c = 0; c < e.n[2]; ++c)
          acc2 += e.w[2][c] * src[e.idx[2][c]];
        acc1 += e.w[1][b] * acc2;
      }
      acc0 += e.w[0][a] * acc1;
    }
    y[o] = acc0;
  });
}

/// One plane of the gradient: dx[taps] += weight * dy[o].
void resizeGradPlane(const ResizeGeometry &g, const TapTables &t,
                     const float *dy, float *dx) {
  std::fill(dx, dx + g.inPlane(), 0.0f);
  forEachOutput(g, t, [&](const ElementTaps &e, int64_t o) {
    for (int a = 0; a < e.n[0]; ++a)
      for (int b = 0; b < e.n[1]; ++b) {
        float *dst = dx + (e.idx[0][a] * g.in[1] + e.idx[1][b]) * g.in[2];
        float scaled = e.w[0][a] * e.w[1][b] * dy[o];
        for (int c = 0; c < e.n[2]; ++c)
          dst[e.idx[2][c]] += e.w[2][c] * scaled;
      }
  });
}

/// Runs `fn(in, out)` plane by plane over the threads, widening 16-bit
/// planes to f32 and rounding the result back to `out`'s type.
template <typename Fn>
void forEachPlane(int64_t planes, const TensorView &in, int64_t inSize,
                  TensorView &out, int64_t outSize, Fn fn) {
  parallelFor(planes, 1, [&](int64_t b, int64_t e) {
    std::vector<float> inBuf, outBuf;
    for (int64_t p = b; p < e; ++p) {
      const float *x = in.as<const float>() + p * inSize;
      if (in.dtype != DType::F32) {
        inBuf.resize(inSize);
        for (int64_t i = 0; i < inSize; ++i)
          inBuf[i] =
              static_cast<float>(loadD(in.data, in.dtype, p * inSize + i));
        x = inBuf.data();
      }
      bool direct = out.dtype == DType::F32;
      outBuf.resize(direct ? 0 : outSize);
      float *y = direct ? out.as<float>() + p * outSize : outBuf.data();
      fn(x, y);
      if (!direct)
        for (int64_t i = 0; i < outSize; ++i)
          storeD(out.data, out.dtype, p * outSize + i, outBuf[i]);
    }
  });
}

bool kResize(KernelContext &ctx) {
  ResizeGeometry g;
  if (!resizeGeometryOf(ctx, ctx.in[0], ctx.out[0], g))
    return false;
  TapTables t(g);
  forEachPlane(g.planes, ctx.in[0], g.inPlane(), ctx.out[0], g.outPlane(),
               [&](const float *x, float *y) { resizePlane(g, t, x, y); });
  return true;
}

bool kResizeGrad(KernelContext &ctx) {
  ResizeGeometry g;
  if (!resizeGeometryOf(ctx, ctx.out[0], ctx.in[0], g))
    return false;
  TapTables t(g);
  forEachPlane(
      g.planes, ctx.in[0], g.outPlane(), ctx.out[0], g.inPlane(),
      [&](const float *dy, float *dx) { resizeGradPlane(g, t, dy, dx); });
  return true;
}

} // namespace

void registerResizeKernels(KernelRegistry &r) {
  r.add("resize", kResize);
  r.add("resize_grad", kResizeGrad);
}

} // namespace ds::rt
