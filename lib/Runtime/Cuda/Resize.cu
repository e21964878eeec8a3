//===- Resize.cu - resize (nearest, linear) and its gradient on CUDA ------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twins of Cpu/Resize.cpp, on Support/Resize.h's geometry. The
// forward is one thread per output element, its taps computed on the
// device in the CPU's order. The gradient is a gather, not a scatter, so
// that it needs no atomics and sums in a fixed order: the host inverts
// each dimension's tap table into, per input index, the list of (output
// index, weight) pairs that read it (in increasing output order, the CPU's
// scatter order), and one thread per input element sums its products.
//
//===----------------------------------------------------------------------===//

#include "../ResizeGeometry.h"
#include "CudaCommon.cuh"

namespace ds::rt::cuda {
namespace {

/// Per dimension, the outputs that read each input index: entries
/// [start[i], start[i + 1]) of (out, weight). Offsets into one buffer.
struct Inverse {
  int64_t start[kMaxResizeDims] = {}; // offset of the dimension's starts
  int64_t entry[kMaxResizeDims] = {}; // offset of its entries
};

__global__ void resizeKernel(ResizeGeometry g, const void *x, int xt, void *y,
                             int yt) {
  int64_t plane = g.outPlane(), inPlane = g.inPlane();
  DS_GRID_LOOP(e, g.planes * plane) {
    int64_t p = e / plane, r = e % plane;
    int64_t o2 = r % g.out[2], o1 = r / g.out[2] % g.out[1],
            o0 = r / (g.out[2] * g.out[1]);
    ResizeTap t0 = g.tap(0, o0), t1 = g.tap(1, o1), t2 = g.tap(2, o2);
    int64_t i0[2] = {t0.i0, t0.i1}, i1[2] = {t1.i0, t1.i1},
            i2[2] = {t2.i0, t2.i1};
    float w0[2] = {t0.w0, t0.w1}, w1[2] = {t1.w0, t1.w1},
          w2[2] = {t2.w0, t2.w1};
    int n0 = t0.w1 == 0.0f ? 1 : 2, n1 = t1.w1 == 0.0f ? 1 : 2,
        n2 = t2.w1 == 0.0f ? 1 : 2;
    float acc0 = 0.0f;
    for (int a = 0; a < n0; ++a) {
      float acc1 = 0.0f;
      for (int b = 0; b < n1; ++b) {
        int64_t row = p * inPlane + (i0[a] * g.in[1] + i1[b]) * g.in[2];
        float acc2 = 0.0f;
        for (int c = 0; c < n2; ++c)
          acc2 += w2[c] * static_cast<float>(load(x, xt, row + i2[c]));
        acc1 += w1[b] * acc2;
      }
      acc0 += w0[a] * acc1;
    }
    store(y, yt, e, acc0);
  }
}

__global__ void resizeGradKernel(ResizeGeometry g, Inverse inv,
                                 const int64_t *starts, const int64_t *outs,
                                 const float *weights, const void *dy, int dyt,
                                 void *dx, int dxt) {
  int64_t plane = g.inPlane(), outPlane = g.outPlane();
  DS_GRID_LOOP(e, g.planes * plane) {
    int64_t p = e / plane, r = e % plane;
    int64_t i[3] = {r / (g.in[2] * g.in[1]), r / g.in[2] % g.in[1],
                    r % g.in[2]};
    const int64_t *s0 = starts + inv.start[0] + i[0];
    const int64_t *s1 = starts + inv.start[1] + i[1];
    const int64_t *s2 = starts + inv.start[2] + i[2];
    float acc = 0.0f;
    for (int64_t a = s0[0]; a < s0[1]; ++a) {
      int64_t o0 = outs[inv.entry[0] + a];
      float wa = weights[inv.entry[0] + a];
      for (int64_t b = s1[0]; b < s1[1]; ++b) {
        int64_t o1 = outs[inv.entry[1] + b];
        float wab = wa * weights[inv.entry[1] + b];
        int64_t row = p * outPlane + (o0 * g.out[1] + o1) * g.out[2];
        for (int64_t c = s2[0]; c < s2[1]; ++c) {
          float scaled = wab * static_cast<float>(
                                   load(dy, dyt, row + outs[inv.entry[2] + c]));
          acc += weights[inv.entry[2] + c] * scaled;
        }
      }
    }
    store(dx, dxt, e, acc);
  }
}

bool kResize(KernelContext &ctx) {
  ResizeGeometry g;
  if (!resizeGeometryOf(ctx, ctx.in[0], ctx.out[0], g))
    return false;
  int64_t n = g.planes * g.outPlane();
  resizeKernel<<<blocksFor(n), 256, 0, gStream>>>(
      g, ctx.in[0].data, int(ctx.in[0].dtype), ctx.out[0].data,
      int(ctx.out[0].dtype));
  return launched(ctx);
}

bool kResizeGrad(KernelContext &ctx) {
  ResizeGeometry g;
  if (!resizeGeometryOf(ctx, ctx.out[0], ctx.in[0], g))
    return false;
  // The inverse tap tables, built on the host.
  Inverse inv;
  std::vector<int64_t> starts, outs;
  std::vector<float> weights;
  for (int d = 0; d < kMaxResizeDims; ++d) {
    std::vector<std::vector<std::pair<int64_t, float>>> readers(g.in[d]);
    for (int64_t o = 0; o < g.out[d]; ++o) {
      ResizeTap t = g.tap(d, o);
      readers[t.i0].push_back({o, t.w0});
      if (t.w1 != 0.0f)
        readers[t.i1].push_back({o, t.w1});
    }
    inv.start[d] = static_cast<int64_t>(starts.size());
    inv.entry[d] = static_cast<int64_t>(outs.size());
    int64_t count = 0;
    for (auto &list : readers) {
      starts.push_back(count);
      for (auto [o, w] : list) {
        outs.push_back(o);
        weights.push_back(w);
      }
      count += static_cast<int64_t>(list.size());
    }
    starts.push_back(count);
  }
  size_t sb = starts.size() * sizeof(int64_t),
         ob = outs.size() * sizeof(int64_t),
         wb = weights.size() * sizeof(float);
  Scratch tables(sb + ob + wb);
  if (!tables.p)
    return ctx.fail("resize_grad: no device memory for the tap tables");
  char *base = tables.as<char>();
  if (cudaMemcpyAsync(base, starts.data(), sb, cudaMemcpyHostToDevice,
                      gStream) != cudaSuccess ||
      cudaMemcpyAsync(base + sb, outs.data(), ob, cudaMemcpyHostToDevice,
                      gStream) != cudaSuccess ||
      cudaMemcpyAsync(base + sb + ob, weights.data(), wb,
                      cudaMemcpyHostToDevice, gStream) != cudaSuccess)
    return launched(ctx);
  int64_t n = g.planes * g.inPlane();
  resizeGradKernel<<<blocksFor(n), 256, 0, gStream>>>(
      g, inv, reinterpret_cast<const int64_t *>(base),
      reinterpret_cast<const int64_t *>(base + sb),
      reinterpret_cast<const float *>(base + sb + ob), ctx.in[0].data,
      int(ctx.in[0].dtype), ctx.out[0].data, int(ctx.out[0].dtype));
  if (!launched(ctx))
    return false;
  // The host tables must outlive the copies.
  if (cudaStreamSynchronize(gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

} // namespace

void registerResizeKernels(KernelRegistry &r) {
  r.add("resize", kResize);
  r.add("resize_grad", kResizeGrad);
}

} // namespace ds::rt::cuda
