//===- ZeroOneAdam.cu - DeepSpeed's 0/1 Adam step on CUDA -----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The CUDA twin of Cpu/ZeroOneAdam.cpp (docs/compression.md): the same
// policy (ds::zeroone, the counters read back and checked on the host) and
// the same f32 arithmetic in element-wise kernels. The exchanges are staged
// through the host over the MPI communicator (the all-reduced gradient, and
// Mpi/Compressed.cpp's compressed all-reduce with the error buffers copied
// both ways), not over NCCL: correct, not fast. Compiled by nvcc; not run on
// a GPU yet.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/OneBit.h"
#include "ds/Support/ZeroOne.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace ds::rt::cuda {
namespace {
namespace zo = ::ds::zeroone;

__global__ void zoMoments(float *M, float *V, const float *g, int64_t n,
                          float b1, float a1, float b2, float a2,
                          bool variance) {
  DS_GRID_LOOP(i, n) {
    M[i] = M[i] * b1 + g[i] * a1;
    if (variance)
      V[i] = V[i] * b2 + a2 * g[i] * g[i];
  }
}

/// p -= lr (m / (sqrt(v) + eps) + wd p), the same step added to U when
/// there is one (the local-step phase).
__global__ void zoUpdate(float *P, const float *M, const float *V, float *U,
                         int64_t n, float lr, float eps, float wd) {
  DS_GRID_LOOP(i, n) {
    float update = M[i] / (sqrtf(V[i]) + eps);
    if (wd > 0.0f)
      update += wd * P[i];
    float delta = (-lr) * update;
    P[i] = P[i] + delta;
    if (U)
      U[i] = U[i] + delta;
  }
}

/// A synchronisation's first half: back to the synchronised parameter, the
/// accumulated step scaled by the denominator.
__global__ void zoSyncBefore(float *P, float *U, const float *V, int64_t n,
                             float eps) {
  DS_GRID_LOOP(i, n) {
    P[i] = P[i] - U[i];
    U[i] = U[i] * (sqrtf(V[i]) + eps);
  }
}

/// Its second half: the exchanged step applied, the momentum rebuilt.
__global__ void zoSyncAfter(float *P, float *M, float *U, const float *V,
                            int64_t n, float eps, float lrs) {
  DS_GRID_LOOP(i, n) {
    M[i] = -(U[i] / lrs);
    P[i] = P[i] + U[i] / (sqrtf(V[i]) + eps);
    U[i] = 0.0f;
  }
}

/// The exchange of `x` (n floats on the device) through the host: its
/// mean (an all-reduce) or its compressed mean with the error buffers.
bool hostExchange(KernelContext &ctx, float *x, int64_t n, bool compressed,
                  float *we, int64_t padded, float *se) {
  Communicator *comm = ctx.comm;
  if (!comm || comm->size() == 1)
    return true;
  std::vector<float> hx, hwe, hse;
  std::string err;
  if (!toHost(ctx, hx, x, n))
    return false;
  if (!compressed) {
    if (!onebit::meanAllReduce(*comm, hx.data(), n, err))
      return ctx.fail(err);
    return fromHost(ctx, x, hx.data(), hx.size() * sizeof(float));
  }
  int64_t chunk = padded / comm->size();
  if (!toHost(ctx, hwe, we, padded) || !toHost(ctx, hse, se, chunk))
    return false;
  if (!onebit::compressedAllReduce(*comm, hx.data(), n, hwe.data(), padded,
                                   hse.data(), err))
    return ctx.fail(err);
  return fromHost(ctx, x, hx.data(), hx.size() * sizeof(float)) &&
         fromHost(ctx, we, hwe.data(), hwe.size() * sizeof(float)) &&
         fromHost(ctx, se, hse.data(), hse.size() * sizeof(float));
}

/// Operand checks, the state copied to the results, the step and counters
/// read back.
bool prepare(KernelContext &ctx, int64_t &t, int64_t (&C)[5]) {
  if (ctx.in.size() != 9 || ctx.out.size() != 7)
    return ctx.fail("zero_one_adam expects 9 operands and 7 results");
  int world = ctx.comm ? ctx.comm->size() : 1;
  int64_t n = ctx.in[0].numel(), padded = ctx.in[4].numel();
  for (int i : {1, 2, 3, 6})
    if (ctx.in[i].numel() != n || ctx.in[i].dtype != DType::F32)
      return ctx.fail("zero_one_adam: gradient, moments and momentum "
                      "accumulator must be f32 of the parameter's size");
  if (ctx.in[0].dtype != DType::F32 ||
      padded != ::ds::onebit::paddedSize(n, world) ||
      ctx.in[5].numel() * world != padded)
    return ctx.fail("zero_one_adam: error buffers of " +
                    std::to_string(padded) + " elements do not pad " +
                    std::to_string(n) + " elements for " +
                    std::to_string(world) + " ranks");
  if (ctx.in[7].dtype != DType::I64 || ctx.in[7].numel() != 5 ||
      ctx.in[8].dtype != DType::I64)
    return ctx.fail("zero_one_adam: counters must be 5 i64, the step i64");
  for (int i = 0; i < 7; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    if (!copyDevice(ctx, in.data, ctx.out[i].data,
                    in.numel() * dtypeSize(in.dtype)))
      return false;
  }
  return readBack(ctx, &t, ctx.in[8].data, 8) &&
         readBack(ctx, C, ctx.out[6].data, sizeof C);
}

bool kZeroOneAdam(KernelContext &ctx) {
  int64_t t = 0, C[5] = {0, 0, 0, 0, 0};
  if (!prepare(ctx, t, C))
    return false;
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  zo::Policy policy{ctx.attrs.getInt("var_freeze_step", 100000),
                    ctx.attrs.getInt("var_update_scaler", 16),
                    ctx.attrs.getInt("local_step_scaler", 32678),
                    ctx.attrs.getInt("local_step_clipper", 16)};
  if (!zo::validPolicy(policy))
    return ctx.fail("zero_one_adam: var_freeze_step must not be negative "
                    "and the scalers and clipper must be at least 1");
  double lrs = 0;
  zo::Counters have = zo::loadCounters(C, lrs);
  if (!(have == zo::countersBefore(t, policy)))
    return ctx.fail("zero_one_adam: the state's counters are not those of "
                    "step " + std::to_string(t) +
                    " under this plan's policy (a checkpoint of another "
                    "0/1 Adam policy?)");
  double lrNow = stepLr(ctx, t);
  double beta1 = ctx.attrs.getFloat("beta1", 0.9);
  double beta2 = ctx.attrs.getFloat("beta2", 0.999);
  float lr = static_cast<float>(lrNow);
  float eps = static_cast<float>(ctx.attrs.getFloat("eps", 1e-8));
  float wd = static_cast<float>(ctx.attrs.getFloat("weight_decay", 0.0));
  int64_t n = ctx.in[0].numel(), padded = ctx.out[3].numel();
  float *P = ctx.out[0].as<float>(), *M = ctx.out[1].as<float>(),
        *V = ctx.out[2].as<float>(), *WE = ctx.out[3].as<float>(),
        *SE = ctx.out[4].as<float>(), *U = ctx.out[5].as<float>();
  unsigned blocks = blocksFor(n);
  auto moments = [&](const float *g, bool variance) {
    zoMoments<<<blocks, 256, 0, gStream>>>(
        M, V, g, n, static_cast<float>(beta1), static_cast<float>(1.0 - beta1),
        static_cast<float>(beta2), static_cast<float>(1.0 - beta2), variance);
    return launched(ctx);
  };
  if (t < zo::firstFrozenStep(policy)) {
    bool variance = (t + 1) % have.varInterval == 0;
    Scratch g(static_cast<size_t>(n) * sizeof(float));
    if (!g.p)
      return ctx.fail("CUDA: out of memory for 0/1 Adam's gradient copy");
    float *G = static_cast<float *>(g.p);
    if (!copyDevice(ctx, ctx.in[1].data, G, n * sizeof(float)) ||
        !hostExchange(ctx, G, n, !variance, WE, padded, SE) ||
        !moments(G, variance))
      return false;
    zoUpdate<<<blocks, 256, 0, gStream>>>(P, M, V, nullptr, n, lr, eps, wd);
    if (!launched(ctx))
      return false;
  } else {
    if (t == zo::firstFrozenStep(policy) &&
        (cudaMemsetAsync(WE, 0, padded * sizeof(float), gStream) !=
             cudaSuccess ||
         cudaMemsetAsync(SE, 0, ctx.out[4].numel() * sizeof(float),
                         gStream) != cudaSuccess))
      return launched(ctx);
    if (!moments(ctx.in[1].as<float>(), false))
      return false;
    lrs += lrNow;
    zoUpdate<<<blocks, 256, 0, gStream>>>(P, M, V, U, n, lr, eps, wd);
    if (!launched(ctx))
      return false;
    if ((t + 1) % have.localInterval == 0) {
      if (!(lrs > 0))
        return ctx.fail("zero_one_adam: the learning rates since the last "
                        "synchronisation sum to " + std::to_string(lrs));
      zoSyncBefore<<<blocks, 256, 0, gStream>>>(P, U, V, n, eps);
      if (!launched(ctx) || !hostExchange(ctx, U, n, true, WE, padded, SE))
        return false;
      zoSyncAfter<<<blocks, 256, 0, gStream>>>(P, M, U, V, n, eps,
                                               static_cast<float>(lrs));
      if (!launched(ctx))
        return false;
      lrs = 0;
    }
  }
  zo::advance(have, t, policy);
  zo::storeCounters(have, lrs, C);
  return fromHost(ctx, ctx.out[6].data, C, sizeof C);
}
} // namespace

void registerZeroOneKernels(KernelRegistry &r) {
  r.add("zero_one_adam", kZeroOneAdam);
}

} // namespace ds::rt::cuda
