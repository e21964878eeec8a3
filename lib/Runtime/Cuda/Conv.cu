//===- Conv.cu - CUDA convolution and its gradients -----------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The twins of Cpu/Conv.cpp's conv, conv_grad_input and conv_grad_weight
// (f32, 1 to 3 spatial dimensions, groups, strides, dilations, pads; the
// geometry from convGeometryOf, as the CPU's). Direct loops in double:
// one thread per output element (conv), per input element (the input
// gradient gathers the outputs whose taps read it, so that no two threads
// write one element), and one block per weight element (the weight
// gradient sums the batch's products by a block reduction).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "ds/Support/ConvGeometry.h"

namespace ds::rt::cuda {
namespace {

/// The geometry in the form the kernels read (by value).
struct Geo {
  int64_t n, c, m, cg, mg;
  int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
  int64_t inSize, outSize, kSize;
};

Geo geoOf(const ConvGeometry &g) {
  Geo r{g.n, g.c, g.m, g.cg(), g.mg(), {}, {}, {}, {}, {}, {}, g.inSize,
        g.outSize, g.kSize};
  for (int d = 0; d < 3; ++d) {
    r.in[d] = g.in[d], r.out[d] = g.out[d], r.k[d] = g.k[d];
    r.stride[d] = g.stride[d], r.dil[d] = g.dil[d], r.pad[d] = g.pad[d];
  }
  return r;
}

/// Splits a flat position of `size` (three dimensions) into its indices.
__device__ inline void split3(int64_t p, const int64_t size[3], int64_t idx[3]) {
  idx[2] = p % size[2];
  idx[1] = (p / size[2]) % size[1];
  idx[0] = p / (size[2] * size[1]);
}

/// The input position (within a channel) that tap t reads at output
/// position o, or -1 in the padding.
__device__ inline int64_t tapInput(const Geo &g, int64_t o, int64_t t) {
  int64_t op[3], kp[3];
  split3(o, g.out, op);
  split3(t, g.k, kp);
  int64_t at = 0;
  for (int d = 0; d < 3; ++d) {
    int64_t i = op[d] * g.stride[d] - g.pad[d] + kp[d] * g.dil[d];
    if (i < 0 || i >= g.in[d])
      return -1;
    at = at * g.in[d] + i;
  }
  return at;
}

__global__ void convForward(Geo g, const float *x, const float *w,
                            const float *bias, float *y) {
  DS_GRID_LOOP(e, g.n * g.m * g.outSize) {
    int64_t o = e % g.outSize, r = e / g.outSize, oc = r % g.m, n = r / g.m;
    int64_t first = (oc / g.mg) * g.cg;
    double acc = 0;
    for (int64_t ci = 0; ci < g.cg; ++ci) {
      const float *xc = x + (n * g.c + first + ci) * g.inSize;
      const float *wc = w + (oc * g.cg + ci) * g.kSize;
      for (int64_t t = 0; t < g.kSize; ++t) {
        int64_t i = tapInput(g, o, t);
        if (i >= 0)
          acc += double(wc[t]) * xc[i];
      }
    }
    y[e] = static_cast<float>(acc) + (bias ? bias[oc] : 0.0f);
  }
}

__global__ void convGradInput(Geo g, const float *dy, const float *w,
                              float *dx) {
  DS_GRID_LOOP(e, g.n * g.c * g.inSize) {
    int64_t i = e % g.inSize, r = e / g.inSize, ic = r % g.c, n = r / g.c;
    int64_t gi = ic / g.cg, ci = ic % g.cg, ip[3];
    split3(i, g.in, ip);
    double acc = 0;
    for (int64_t t = 0; t < g.kSize; ++t) {
      int64_t kp[3], o = 0;
      split3(t, g.k, kp);
      bool hit = true;
      for (int d = 0; d < 3 && hit; ++d) {
        int64_t num = ip[d] + g.pad[d] - kp[d] * g.dil[d];
        int64_t od = num / g.stride[d];
        hit = num >= 0 && num % g.stride[d] == 0 && od < g.out[d];
        o = o * g.out[d] + od;
      }
      if (!hit)
        continue;
      for (int64_t oc = gi * g.mg; oc < (gi + 1) * g.mg; ++oc)
        acc += double(w[(oc * g.cg + ci) * g.kSize + t]) *
               dy[(n * g.m + oc) * g.outSize + o];
    }
    dx[e] = static_cast<float>(acc);
  }
}

__global__ void convGradWeight(Geo g, const float *x, const float *dy,
                               float *dw) {
  __shared__ double part[256];
  const int64_t count = g.m * g.cg * g.kSize, terms = g.n * g.outSize;
  for (int64_t e = blockIdx.x; e < count; e += gridDim.x) {
    int64_t t = e % g.kSize, r = e / g.kSize, ci = r % g.cg, oc = r / g.cg;
    int64_t ic = (oc / g.mg) * g.cg + ci;
    double acc = 0;
    for (int64_t j = threadIdx.x; j < terms; j += blockDim.x) {
      int64_t o = j % g.outSize, n = j / g.outSize;
      int64_t i = tapInput(g, o, t);
      if (i >= 0)
        acc += double(dy[(n * g.m + oc) * g.outSize + o]) *
               x[(n * g.c + ic) * g.inSize + i];
    }
    double sum = blockSum(part, acc);
    if (threadIdx.x == 0)
      dw[e] = static_cast<float>(sum);
  }
}

bool kConv(KernelContext &ctx) {
  ConvGeometry cg;
  if (!convGeometryOf(ctx, ctx.in[0], ctx.in[1], ctx.out[0], cg))
    return false;
  const float *bias = nullptr;
  if (ctx.in.size() > 2) {
    if (ctx.in[2].dtype != DType::F32 || ctx.in[2].numel() != cg.m)
      return ctx.fail("conv bias must be f32 with one value per channel");
    bias = ctx.in[2].as<float>();
  }
  Geo g = geoOf(cg);
  int64_t total = g.n * g.m * g.outSize;
  if (total == 0)
    return true;
  convForward<<<blocksFor(total), 256, 0, gStream>>>(
      g, ctx.in[0].as<float>(), ctx.in[1].as<float>(), bias,
      ctx.out[0].as<float>());
  return launched(ctx);
}

bool kConvGradInput(KernelContext &ctx) {
  ConvGeometry cg;
  if (!convGeometryOf(ctx, ctx.out[0], ctx.in[1], ctx.in[0], cg))
    return false;
  Geo g = geoOf(cg);
  int64_t total = g.n * g.c * g.inSize;
  if (total == 0)
    return true;
  convGradInput<<<blocksFor(total), 256, 0, gStream>>>(
      g, ctx.in[0].as<float>(), ctx.in[1].as<float>(), ctx.out[0].as<float>());
  return launched(ctx);
}

bool kConvGradWeight(KernelContext &ctx) {
  ConvGeometry cg;
  if (!convGeometryOf(ctx, ctx.in[0], ctx.out[0], ctx.in[1], cg))
    return false;
  Geo g = geoOf(cg);
  int64_t count = g.m * g.cg * g.kSize;
  if (count == 0)
    return true;
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(count, 65535));
  convGradWeight<<<blocks, 256, 0, gStream>>>(
      g, ctx.in[0].as<float>(), ctx.in[1].as<float>(), ctx.out[0].as<float>());
  return launched(ctx);
}

} // namespace

void registerConvKernels(KernelRegistry &r) {
  r.add("conv", kConv);
  r.add("conv_grad_input", kConvGradInput);
  r.add("conv_grad_weight", kConvGradWeight);
}

} // namespace ds::rt::cuda
