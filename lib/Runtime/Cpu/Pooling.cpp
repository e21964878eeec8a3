//===- Pooling.cpp - CPU max and average pooling and their gradients ------===//
//
// Part of the ds project.
//
// The (N, C) planes are spread over the run's threads; each plane is one
// loop nest over Support/Pooling.h's three-dimensional geometry. Per output
// row the taps are the outer loops and the row's columns the inner one (a
// contiguous, vectorizable loop over the columns a tap keeps in bounds).
// Max pooling's gradient recomputes each window's argmax, the first
// maximum (a NaN wins) as PyTorch. f32 runs in place; f16 and bf16 planes
// are widened to f32 and rounded back.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Vec.h"
#include "ds/Support/Pooling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ds::rt {
namespace {

/// floor(a / b) for b > 0.
int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// The output columns [lo, hi) whose tap `kw` lands inside the row.
void columnRange(const PoolGeometry &g, int64_t kw, int64_t &lo, int64_t &hi) {
  int64_t off = kw * g.dilation[2] - g.pad[2];
  lo = std::max<int64_t>(0, -floorDiv(off, g.stride[2]));
  hi = std::min<int64_t>(g.out[2], floorDiv(g.in[2] - 1 - off, g.stride[2]) + 1);
}

/// Calls fn(inRowOffset, kw-range) for every in-bounds (kd, kh) tap of the
/// output row (od, oh), in PyTorch's order.
template <typename Fn>
void forEachRowTap(const PoolGeometry &g, int64_t od, int64_t oh, Fn fn) {
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
    if (id < 0 || id >= g.in[0])
      continue;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
      if (ih < 0 || ih >= g.in[1])
        continue;
      fn((id * g.in[1] + ih) * g.in[2]);
    }
  }
}

/// The maximum (and with `arg` the first argmax, -1 when no tap is in
/// bounds or all are -inf) of every window of one plane. (The argmax is
/// 32-bit, as wide as the floats, so that the loop vectorizes; the
/// gradient refuses planes of 2^31 elements or more.)
DS_CLONES void maxPlane(const PoolGeometry &g, const float *x, float *y,
                        int32_t *arg) {
  const float lowest = -std::numeric_limits<float>::infinity();
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      int64_t row = (od * g.out[1] + oh) * g.out[2];
      float *best = y + row;
      std::fill(best, best + g.out[2], lowest);
      if (arg)
        std::fill(arg + row, arg + row + g.out[2], -1);
      forEachRowTap(g, od, oh, [&](int64_t base) {
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          int64_t lo, hi, off = base + kw * g.dilation[2] - g.pad[2];
          columnRange(g, kw, lo, hi);
          const int64_t s = g.stride[2];
          if (!arg) {
            for (int64_t ow = lo; ow < hi; ++ow) {
              float v = x[off + ow * s];
              best[ow] = (v > best[ow] || v != v) ? v : best[ow];
            }
            continue;
          }
          for (int64_t ow = lo; ow < hi; ++ow) {
            float v = x[off + ow * s];
            bool take = v > best[ow] || v != v || arg[row + ow] < 0;
            best[ow] = take ? v : best[ow];
            arg[row + ow] = take ? static_cast<int32_t>(off + ow * s) : arg[row + ow];
          }
        }
      });
    }
}

/// The window sums of one plane divided by their divisors.
DS_CLONES void avgPlane(const PoolGeometry &g, const float *x, float *y) {
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      float *sum = y + (od * g.out[1] + oh) * g.out[2];
      std::fill(sum, sum + g.out[2], 0.0f);
      forEachRowTap(g, od, oh, [&](int64_t base) {
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          int64_t lo, hi, off = base + kw * g.dilation[2] - g.pad[2];
          columnRange(g, kw, lo, hi);
          for (int64_t ow = lo; ow < hi; ++ow)
            sum[ow] += x[off + ow * g.stride[2]];
        }
      });
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        int64_t o[kMaxPoolDims] = {od, oh, ow};
        int64_t div = g.divisor(o);
        sum[ow] = div > 0 ? sum[ow] / static_cast<float>(div) : 0.0f;
      }
    }
}

/// Scratch rows of one thread, kept from plane to plane.
struct Scratch {
  std::vector<float> f;
  std::vector<int32_t> i;
};

/// dx of one plane: each dy spread evenly (by its divisor) over its window.
DS_CLONES void avgGradPlane(const PoolGeometry &g, const float *dy, float *dx,
                            float *scaled) {
  std::fill(dx, dx + g.inPlane(), 0.0f);
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      const float *row = dy + (od * g.out[1] + oh) * g.out[2];
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        int64_t o[kMaxPoolDims] = {od, oh, ow};
        int64_t div = g.divisor(o);
        scaled[ow] = div > 0 ? row[ow] / static_cast<float>(div) : 0.0f;
      }
      forEachRowTap(g, od, oh, [&](int64_t base) {
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          int64_t lo, hi, off = base + kw * g.dilation[2] - g.pad[2];
          columnRange(g, kw, lo, hi);
          for (int64_t ow = lo; ow < hi; ++ow)
            dx[off + ow * g.stride[2]] += scaled[ow];
        }
      });
    }
}

/// dx of one plane: each dy added at its window's argmax.
void maxGradPlane(const PoolGeometry &g, const float *x, const float *dy,
                  float *dx, Scratch &scratch) {
  std::vector<float> &best = scratch.f;
  std::vector<int32_t> &arg = scratch.i;
  best.resize(g.outPlane());
  arg.resize(g.outPlane());
  maxPlane(g, x, best.data(), arg.data());
  std::fill(dx, dx + g.inPlane(), 0.0f);
  for (int64_t o = 0; o < g.outPlane(); ++o)
    if (arg[o] >= 0)
      dx[arg[o]] += dy[o];
}

} // namespace

/// The geometry of an instruction: `pooled` is the pooling's output (the
/// forward's result, the gradient's incoming gradient), `plain` its input.
bool poolGeometryOf(KernelContext &ctx, const TensorView &plain,
                    const TensorView &pooled, PoolGeometry &g) {
  std::vector<int64_t> kernel = ctx.attrs.getInts("kernel_shape");
  std::vector<int64_t> strides = ctx.attrs.getInts("strides");
  std::vector<int64_t> pads = ctx.attrs.getInts("pads");
  std::vector<int64_t> dilations = ctx.attrs.getInts("dilations");
  int nd = static_cast<int>(plain.rank()) - 2;
  if (nd < 1 || nd > kMaxPoolDims || pooled.rank() != plain.rank() ||
      static_cast<int>(kernel.size()) != nd ||
      static_cast<int>(strides.size()) != nd ||
      static_cast<int>(pads.size()) != 2 * nd ||
      (!dilations.empty() && static_cast<int>(dilations.size()) != nd))
    return ctx.fail("pooling attributes do not match the operands' rank");
  g.set(plain.shape.data(), pooled.shape.data(), nd, kernel.data(),
        strides.data(), pads.data(),
        dilations.empty() ? nullptr : dilations.data());
  g.countIncludePad = ctx.attrs.getInt("count_include_pad", 0) != 0;
  return true;
}

namespace {

/// A plane of `t` as f32: its own storage, or `buf` filled from it.
const float *planeIn(const TensorView &t, int64_t plane, int64_t size,
                     std::vector<float> &buf) {
  if (t.dtype == DType::F32)
    return t.as<const float>() + plane * size;
  buf.resize(size);
  for (int64_t i = 0; i < size; ++i)
    buf[i] = static_cast<float>(loadD(t.data, t.dtype, plane * size + i));
  return buf.data();
}

/// Runs `fn(inputs, out, scratch)` plane by plane over the threads (the
/// scratch rows are the task's own, kept from plane to plane). `ins` are
/// the operands with their plane sizes; `out` is written as f32 in place
/// or through a buffer rounded to its type.
template <typename Fn>
void forEachPlane(const PoolGeometry &g,
                  std::initializer_list<std::pair<const TensorView *, int64_t>> ins,
                  TensorView &out, int64_t outSize, Fn fn) {
  std::vector<std::pair<const TensorView *, int64_t>> operands(ins);
  parallelFor(g.planes, 1, [&](int64_t b, int64_t e) {
    std::vector<std::vector<float>> bufs(operands.size());
    std::vector<const float *> ptrs(operands.size());
    std::vector<float> outBuf;
    Scratch scratch;
    for (int64_t p = b; p < e; ++p) {
      for (size_t i = 0; i < operands.size(); ++i)
        ptrs[i] = planeIn(*operands[i].first, p, operands[i].second, bufs[i]);
      bool direct = out.dtype == DType::F32;
      outBuf.resize(direct ? 0 : outSize);
      float *o = direct ? out.as<float>() + p * outSize : outBuf.data();
      fn(ptrs, o, scratch);
      if (!direct)
        for (int64_t i = 0; i < outSize; ++i)
          storeD(out.data, out.dtype, p * outSize + i, outBuf[i]);
    }
  });
}

bool kMaxPool(KernelContext &ctx) {
  PoolGeometry g;
  if (!poolGeometryOf(ctx, ctx.in[0], ctx.out[0], g))
    return false;
  forEachPlane(g, {{&ctx.in[0], g.inPlane()}}, ctx.out[0], g.outPlane(),
               [&](auto &in, float *y, Scratch &) { maxPlane(g, in[0], y, nullptr); });
  return true;
}

bool kMaxPoolGrad(KernelContext &ctx) {
  PoolGeometry g;
  if (!poolGeometryOf(ctx, ctx.in[0], ctx.in[1], g))
    return false;
  if (g.inPlane() > INT32_MAX)
    return ctx.fail("max_pool_grad: a plane of 2^31 elements or more is not "
                    "supported");
  forEachPlane(g, {{&ctx.in[0], g.inPlane()}, {&ctx.in[1], g.outPlane()}},
               ctx.out[0], g.inPlane(), [&](auto &in, float *dx, Scratch &s) {
                 maxGradPlane(g, in[0], in[1], dx, s);
               });
  return true;
}

bool kAvgPool(KernelContext &ctx) {
  PoolGeometry g;
  if (!poolGeometryOf(ctx, ctx.in[0], ctx.out[0], g))
    return false;
  forEachPlane(g, {{&ctx.in[0], g.inPlane()}}, ctx.out[0], g.outPlane(),
               [&](auto &in, float *y, Scratch &) { avgPlane(g, in[0], y); });
  return true;
}

bool kAvgPoolGrad(KernelContext &ctx) {
  PoolGeometry g;
  if (!poolGeometryOf(ctx, ctx.out[0], ctx.in[0], g))
    return false;
  forEachPlane(g, {{&ctx.in[0], g.outPlane()}}, ctx.out[0], g.inPlane(),
               [&](auto &in, float *dx, Scratch &s) {
                 s.f.resize(g.out[2]);
                 avgGradPlane(g, in[0], dx, s.f.data());
               });
  return true;
}

} // namespace

void registerPoolingKernels(KernelRegistry &r) {
  r.add("max_pool", kMaxPool);
  r.add("max_pool_grad", kMaxPoolGrad);
  r.add("avg_pool", kAvgPool);
  r.add("avg_pool_grad", kAvgPoolGrad);
}

} // namespace ds::rt
