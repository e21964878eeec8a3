//===- OneBitAdam.cpp - DeepSpeed's 1-bit Adam step -----------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `onebit_adam` (docs/compression.md): one parameter's step of DeepSpeed's
// OnebitAdam (deepspeed/runtime/fp16/onebit/adam.py) with its exchange.
// Operands: param, this rank's gradient, exp_avg, exp_avg_sq, worker error,
// server error, step; results the first five's new values (in place).
// Under ZeRO 1-3 the exchange is the gradient bucket's
// `compressed_reduce_scatter` (of each rank's momentum, for 1-bit Adam)
// and `onebit_adam_local` updates the partition it made (the same
// arithmetic without the exchange; m = the exchanged momentum after the
// freeze).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"
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
  if (!checkOneBitErrors(ctx, "onebit_adam", n, ctx.in[4].numel(),
                         ctx.in[5].numel(), world))
    return false;
  for (int i = 0; i < 5; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    TensorView &out = ctx.out[i];
    if (in.data != out.data)
      std::memcpy(out.data, in.data, in.numel() * sizeof(float));
  }
  return true;
}

/// One step's hyper-parameters, read from the kernel's attributes.
struct OneBitStep {
  float lr, b1, a1, b2, a2, eps, wd;
  bool frozen;
};

/// The hyper-parameters of step `t` (the scheduled learning rate).
OneBitStep readStep(KernelContext &ctx, int64_t t) {
  OneBitStep s;
  s.lr = static_cast<float>(stepLr(ctx, t));
  double beta1 = ctx.attrs.getFloat("beta1", 0.9);
  double beta2 = ctx.attrs.getFloat("beta2", 0.999);
  s.b1 = static_cast<float>(beta1), s.a1 = static_cast<float>(1.0 - beta1);
  s.b2 = static_cast<float>(beta2), s.a2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(ctx.attrs.getFloat("eps", 1e-8));
  s.wd = static_cast<float>(ctx.attrs.getFloat("weight_decay", 0.0));
  int64_t freeze = 0;
  s.frozen = freezeStepOf(ctx, freeze) && t > freeze;
  return s;
}

/// update = m / (sqrt(v) + eps) + wd p; p -= lr update (no bias
/// correction, DeepSpeed's order).
void applyUpdate(const OneBitStep &s, float *P, const float *M,
                 const float *V, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float update = M[i] / (std::sqrt(V[i]) + s.eps);
    if (s.wd > 0.0f)
      update += s.wd * P[i];
    P[i] = P[i] + (-s.lr) * update;
  }
}

/// The step counter, checked.
bool readCounter(KernelContext &ctx, const TensorView &step, int64_t &t) {
  if (step.numel() != 1)
    return ctx.fail("optimizer step must be a scalar");
  t = loadI(step.data, step.dtype, 0);
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  return true;
}
} // namespace

bool kOneBitAdam(KernelContext &ctx) {
  Communicator *comm = ctx.comm;
  int world = comm ? comm->size() : 1;
  int64_t t;
  if (!checkOneBit(ctx, world) || !readCounter(ctx, ctx.in[6], t))
    return false;
  int64_t n = ctx.in[0].numel();
  OneBitStep s = readStep(ctx, t);
  if (!ctx.error.empty())
    return false;
  float b1 = s.b1, a1 = s.a1, b2 = s.b2, a2 = s.a2;
  bool frozen = s.frozen;
  const float *G = ctx.in[1].as<float>();
  float *P = ctx.out[0].as<float>(), *M = ctx.out[1].as<float>(),
        *V = ctx.out[2].as<float>();
  std::string err;
  if (!frozen) {
    // Warm-up: Adam on the gradient's mean over the ranks.
    std::vector<float> g(G, G + n);
    if (world > 1 && !onebit::meanAllReduce(*comm, g.data(), n, err))
      return ctx.fail(err);
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
  applyUpdate(s, P, M, V, n);
  return true;
}

/// ZeRO 1-3: the update of this rank's partition of the exchanged
/// gradient (param, grad, exp_avg, exp_avg_sq, step; the first four's new
/// values in place).
bool kOneBitAdamLocal(KernelContext &ctx) {
  if (ctx.in.size() != 5 || ctx.out.size() != 3)
    return ctx.fail("onebit_adam_local expects 5 operands and 3 results");
  int64_t n = ctx.in[0].numel(), t;
  for (int i = 0; i < 4; ++i)
    if (ctx.in[i].dtype != DType::F32 || ctx.in[i].numel() != n ||
        (i < 3 && (ctx.out[i].dtype != DType::F32 || ctx.out[i].numel() != n)))
      return ctx.fail("onebit_adam_local: parameter, gradient and moments "
                      "must be f32 of one size");
  if (!readCounter(ctx, ctx.in[4], t))
    return false;
  for (int i = 0; i < 3; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    if (in.data != ctx.out[i].data)
      std::memcpy(ctx.out[i].data, in.data, n * sizeof(float));
  }
  OneBitStep s = readStep(ctx, t);
  if (!ctx.error.empty())
    return false;
  const float *G = ctx.in[1].as<float>();
  float *P = ctx.out[0].as<float>(), *M = ctx.out[1].as<float>(),
        *V = ctx.out[2].as<float>();
  if (s.frozen && ctx.attrs.getInt("momentum_exchange", 0))
    std::memcpy(M, G, n * sizeof(float)); // the exchanged momentum
  else
    for (int64_t i = 0; i < n; ++i)
      M[i] = M[i] * s.b1 + G[i] * s.a1;
  if (!s.frozen)
    for (int64_t i = 0; i < n; ++i)
      V[i] = V[i] * s.b2 + s.a2 * G[i] * G[i];
  applyUpdate(s, P, M, V, n);
  return true;
}

/// The gradient bucket's reduce-scatter (mean) of 1-bit Adam under ZeRO
/// 1-3: input (N chunks), worker error (the input's length), step and
/// optionally this rank's momentum (the input's length); results this
/// rank's chunk, the new worker error and momentum (in place). Plain until
/// the freeze step, compressed after it: the gradient, or with the
/// momentum operand the momentum `b1 m + (1-b1) input`, which the op
/// updates every step.
bool kCompressedReduceScatter(KernelContext &ctx) {
  bool withMomentum = ctx.in.size() == 4;
  if (ctx.in.size() != 3 + withMomentum || ctx.out.size() != 2 + withMomentum)
    return ctx.fail("compressed_reduce_scatter expects 3 operands and 2 "
                    "results, or 4 and 3");
  Communicator *comm = ctx.comm;
  int world = comm ? comm->size() : 1;
  const TensorView &in = ctx.in[0];
  int64_t chunk = ctx.out[0].numel(), t, n = in.numel();
  bool sizes = !withMomentum || (ctx.in[3].dtype == DType::F32 &&
                                 ctx.in[3].numel() == n &&
                                 ctx.out[2].numel() == n);
  if (in.dtype != DType::F32 || ctx.out[0].dtype != DType::F32 ||
      ctx.in[1].dtype != DType::F32 || ctx.in[1].numel() != n ||
      ctx.out[1].numel() != n || chunk * world != n || !sizes)
    return ctx.fail("compressed_reduce_scatter: an f32 input of " +
                    std::to_string(n) + " elements, its worker error (and "
                    "momentum) and a result of " + std::to_string(chunk) +
                    " are not " + std::to_string(world) + " chunks");
  int64_t freeze = 0;
  if (!readCounter(ctx, ctx.in[2], t) || !freezeStepOf(ctx, freeze))
    return false;
  float *we = ctx.out[1].as<float>();
  if (ctx.in[1].data != ctx.out[1].data)
    std::memcpy(we, ctx.in[1].data, n * sizeof(float));
  const float *x = in.as<float>();
  if (withMomentum) {
    // This rank's momentum of its own gradients (DeepSpeed's worker-side
    // m before its exchange); after the freeze it is what is compressed.
    float *mom = ctx.out[2].as<float>();
    if (ctx.in[3].data != ctx.out[2].data)
      std::memcpy(mom, ctx.in[3].data, n * sizeof(float));
    float b1 = static_cast<float>(ctx.attrs.getFloat("beta1", 0.9));
    float a1 = static_cast<float>(1.0 - ctx.attrs.getFloat("beta1", 0.9));
    for (int64_t i = 0; i < n; ++i)
      mom[i] = mom[i] * b1 + x[i] * a1;
    if (t > freeze)
      x = mom;
  }
  float *out = ctx.out[0].as<float>();
  std::string err;
  if (world == 1) {
    std::memcpy(out, x, chunk * sizeof(float));
  } else if (t <= freeze) {
    // The warm-up: the plain reduce-scatter, counted as reduce_scatter's.
    comm->collectiveBytes += n * sizeof(float);
    if (!comm->reduceScatter(in.data, out, chunk, DType::F32, true, err))
      return ctx.fail(err);
  } else if (!onebit::compressedReduceScatter(*comm, x, chunk, we, out,
                                              err)) {
    return ctx.fail(err);
  }
  return true;
}

void registerOneBitKernels(KernelRegistry &r) {
  r.add("onebit_adam", kOneBitAdam);
  r.add("onebit_adam_local", kOneBitAdamLocal);
  r.add("compressed_reduce_scatter", kCompressedReduceScatter);
}

} // namespace ds::rt
