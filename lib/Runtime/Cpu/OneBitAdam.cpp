//===- OneBitAdam.cpp - DeepSpeed's 1-bit Adam step -----------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `onebit_adam` (docs/compression.md): one parameter's step of DeepSpeed's
// OnebitAdam (deepspeed/runtime/fp16/onebit/adam.py) with its exchange.
// Operands: param, this rank's gradient, exp_avg, exp_avg_sq, worker error,
// server error, step; results the first five's new values (in place).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"
#include "ds/Runtime/Schedule.h"
#include "ds/Support/OneBit.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace ds::rt {

namespace {
/// The operands' types and sizes: the error buffers pad the parameter for
/// the communicator's ranks (a plan compiled for another world size is
/// refused here, before anything changes).
bool checkOneBit(KernelContext &ctx, int world) {
  if (ctx.in.size() != 7 || ctx.out.size() != 5)
    return ctx.fail("onebit_adam expects 7 operands and 5 results");
  int64_t n = ctx.in[0].numel();
  for (int i = 0; i < 6; ++i)
    if (ctx.in[i].dtype != DType::F32 || (i < 5 && ctx.out[i].dtype != DType::F32))
      return ctx.fail("onebit_adam operands must be f32");
  for (int i = 1; i < 4; ++i)
    if (ctx.in[i].numel() != n)
      return ctx.fail("onebit_adam: gradient and moments must have the "
                      "parameter's size");
  int64_t padded = ctx.in[4].numel();
  if (padded != ::ds::onebit::paddedSize(n, world) ||
      ctx.in[5].numel() * world != padded)
    return ctx.fail("onebit_adam: error buffers of " + std::to_string(padded) +
                    " and " + std::to_string(ctx.in[5].numel()) +
                    " elements are not the padding of " + std::to_string(n) +
                    " elements for " + std::to_string(world) +
                    " ranks (the plan was compiled for another world size)");
  if (ctx.in[6].numel() != 1)
    return ctx.fail("optimizer step must be a scalar");
  for (int i = 0; i < 5; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    TensorView &out = ctx.out[i];
    if (in.data != out.data)
      std::memcpy(out.data, in.data, in.numel() * sizeof(float));
  }
  return true;
}
} // namespace

bool kOneBitAdam(KernelContext &ctx) {
  Communicator *comm = ctx.comm;
  int world = comm ? comm->size() : 1;
  if (!checkOneBit(ctx, world))
    return false;
  int64_t t = loadI(ctx.in[6].data, ctx.in[6].dtype, 0);
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  int64_t n = ctx.in[0].numel();
  double base = std::isnan(ctx.lr) ? ctx.attrs.getFloat("lr", 1e-3) : ctx.lr;
  float lr = static_cast<float>(ds::scheduledLr(
      ctx.attrs.getString("schedule", "constant"), base, t,
      ctx.attrs.getInt("warmup_steps", 0), ctx.attrs.getInt("total_steps", 0),
      ctx.attrs.getFloat("min_lr", 0.0)));
  double beta1 = ctx.attrs.getFloat("beta1", 0.9);
  double beta2 = ctx.attrs.getFloat("beta2", 0.999);
  float b1 = static_cast<float>(beta1), a1 = static_cast<float>(1.0 - beta1);
  float b2 = static_cast<float>(beta2), a2 = static_cast<float>(1.0 - beta2);
  float eps = static_cast<float>(ctx.attrs.getFloat("eps", 1e-8));
  float wd = static_cast<float>(ctx.attrs.getFloat("weight_decay", 0.0));
  bool frozen = t > ctx.attrs.getInt("freeze_step", 100000);
  const float *G = ctx.in[1].as<float>();
  float *P = ctx.out[0].as<float>(), *M = ctx.out[1].as<float>(),
        *V = ctx.out[2].as<float>();
  std::string err;
  if (!frozen) {
    // Warm-up: Adam on the gradient's mean over the ranks.
    std::vector<float> g(G, G + n);
    if (world > 1) {
      comm->collectiveBytes += static_cast<uint64_t>(n) * sizeof(float);
      if (!comm->allReduce(g.data(), n, DType::F32, /*mean=*/true, err))
        return ctx.fail(err);
    }
    for (int64_t i = 0; i < n; ++i) {
      M[i] = M[i] * b1 + g[i] * a1;
      V[i] = V[i] * b2 + a2 * g[i] * g[i];
    }
  } else {
    // The variance is frozen; the momentum takes the local gradient, then
    // its compressed mean over the ranks.
    for (int64_t i = 0; i < n; ++i)
      M[i] = M[i] * b1 + G[i] * a1;
    if (world > 1 &&
        !onebit::compressedAllReduce(*comm, M, n, ctx.out[3].as<float>(),
                                     ctx.out[3].numel(),
                                     ctx.out[4].as<float>(), err))
      return ctx.fail(err);
  }
  // update = m / (sqrt(v) + eps) + wd p; p -= lr update (no bias
  // correction, DeepSpeed's order).
  for (int64_t i = 0; i < n; ++i) {
    float update = M[i] / (std::sqrt(V[i]) + eps);
    if (wd > 0.0f)
      update += wd * P[i];
    P[i] = P[i] + (-lr) * update;
  }
  return true;
}

void registerOneBitKernels(KernelRegistry &r) {
  r.add("onebit_adam", kOneBitAdam);
}

} // namespace ds::rt
