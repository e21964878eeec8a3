//===- ZeroOneAdam.cpp - DeepSpeed's 0/1 Adam step ------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `zero_one_adam` (docs/compression.md): one parameter's step of DeepSpeed's
// ZeroOneAdam (deepspeed/runtime/fp16/onebit/zoadam.py) with its exchange,
// over 1-bit Adam's compressed all-reduce (Mpi/Compressed.cpp). Operands:
// param, this rank's gradient, exp_avg, exp_avg_sq, worker error, server
// error, momentum accumulator, counters, step; results the first eight's
// new values but the gradient's (in place). The counters are DeepSpeed's
// var_interval, var_counter, local_step_interval, local_step_counter (kept
// by DeepSpeed's rule and checked against ds::zeroone::countersBefore, the
// plan's rule) and the bits of the double lrs.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/OneBit.h"
#include "ds/Support/ZeroOne.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace ds::rt {

namespace {
namespace zo = ::ds::zeroone;

/// The operands' types and sizes (a plan compiled for another world size
/// is refused here, before anything changes), then the state copied to the
/// results when they are not in place.
bool checkZeroOne(KernelContext &ctx, int world) {
  if (ctx.in.size() != 9 || ctx.out.size() != 7)
    return ctx.fail("zero_one_adam expects 9 operands and 7 results");
  int64_t n = ctx.in[0].numel();
  for (int i = 0; i < 7; ++i)
    if (ctx.in[i].dtype != DType::F32 ||
        (i < 6 && ctx.out[i].dtype != DType::F32))
      return ctx.fail("zero_one_adam operands must be f32");
  for (int i : {1, 2, 3, 6})
    if (ctx.in[i].numel() != n)
      return ctx.fail("zero_one_adam: gradient, moments and momentum "
                      "accumulator must have the parameter's size");
  if (!checkOneBitErrors(ctx, "zero_one_adam", n, ctx.in[4].numel(),
                         ctx.in[5].numel(), world))
    return false;
  if (ctx.in[7].dtype != DType::I64 || ctx.in[7].numel() != 5 ||
      ctx.out[6].dtype != DType::I64)
    return ctx.fail("zero_one_adam: counters must be 5 i64");
  if (ctx.in[8].numel() != 1)
    return ctx.fail("optimizer step must be a scalar");
  for (int i = 0; i < 7; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    TensorView &out = ctx.out[i];
    if (in.data != out.data)
      std::memcpy(out.data, in.data, in.numel() * dtypeSize(in.dtype));
  }
  return true;
}

zo::Policy policyOf(const Attrs &a) {
  return {a.getInt("var_freeze_step", 100000),
          a.getInt("var_update_scaler", 16),
          a.getInt("local_step_scaler", 32678),
          a.getInt("local_step_clipper", 16)};
}

std::string countersText(const zo::Counters &c) {
  return "var_interval " + std::to_string(c.varInterval) + ", var_counter " +
         std::to_string(c.varCounter) + ", local_step_interval " +
         std::to_string(c.localInterval) + ", local_step_counter " +
         std::to_string(c.localCounter);
}

/// The step's hyper-parameters in f32, as the kernel computes.
struct Hyper {
  float lr, b1, a1, b2, a2, eps, wd;
};

/// p -= lr (m / (sqrt(v) + eps) + wd p); the same step is added to the
/// momentum accumulator `U` when there is one (the local-step phase).
void applyUpdate(const Hyper &h, int64_t n, float *P, const float *M,
                 const float *V, float *U) {
  for (int64_t i = 0; i < n; ++i) {
    float update = M[i] / (std::sqrt(V[i]) + h.eps);
    if (h.wd > 0.0f)
      update += h.wd * P[i];
    float delta = (-h.lr) * update;
    P[i] = P[i] + delta;
    if (U)
      U[i] = U[i] + delta;
  }
}
} // namespace

bool kZeroOneAdam(KernelContext &ctx) {
  Communicator *comm = ctx.comm;
  int world = comm ? comm->size() : 1;
  if (!checkZeroOne(ctx, world))
    return false;
  int64_t t = loadI(ctx.in[8].data, ctx.in[8].dtype, 0);
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  zo::Policy policy = policyOf(ctx.attrs);
  if (!zo::validPolicy(policy))
    return ctx.fail("zero_one_adam: var_freeze_step must not be negative "
                    "and the scalers and clipper must be at least 1");
  int64_t *C = ctx.out[6].as<int64_t>();
  double lrs = 0;
  zo::Counters have = zo::loadCounters(C, lrs);
  zo::Counters want = zo::countersBefore(t, policy);
  if (!(have == want))
    return ctx.fail("zero_one_adam: the state's counters (" +
                    countersText(have) + ") are not those of step " +
                    std::to_string(t) + " under this plan's policy (" +
                    countersText(want) +
                    "): was the checkpoint written with another "
                    "var_freeze_step, var_update_scaler, local_step_scaler "
                    "or local_step_clipper?");
  int64_t n = ctx.in[0].numel();
  double lrNow = stepLr(ctx, t);
  double beta1 = ctx.attrs.getFloat("beta1", 0.9);
  double beta2 = ctx.attrs.getFloat("beta2", 0.999);
  Hyper h{static_cast<float>(lrNow),
          static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(ctx.attrs.getFloat("eps", 1e-8)),
          static_cast<float>(ctx.attrs.getFloat("weight_decay", 0.0))};
  const float *G = ctx.in[1].as<float>();
  float *P = ctx.out[0].as<float>(), *M = ctx.out[1].as<float>(),
        *V = ctx.out[2].as<float>(), *WE = ctx.out[3].as<float>(),
        *SE = ctx.out[4].as<float>(), *U = ctx.out[5].as<float>();
  int64_t padded = ctx.out[3].numel();
  std::string err;
  auto exchange = [&](float *x) {
    return world == 1 ||
           onebit::compressedAllReduce(*comm, x, n, WE, padded, SE, err);
  };
  bool frozen = t >= zo::firstFrozenStep(policy);
  if (!frozen) {
    // Before the freeze: the all-reduced gradient at variance steps (m
    // and v, plain Adam), else its compressed mean (m only).
    std::vector<float> g(G, G + n);
    bool variance = (t + 1) % have.varInterval == 0;
    if (variance && world > 1 &&
        !onebit::meanAllReduce(*comm, g.data(), n, err))
      return ctx.fail(err);
    if (!variance && !exchange(g.data()))
      return ctx.fail(err);
    for (int64_t i = 0; i < n; ++i) {
      M[i] = M[i] * h.b1 + g[i] * h.a1;
      if (variance)
        V[i] = V[i] * h.b2 + h.a2 * g[i] * g[i];
    }
    applyUpdate(h, n, P, M, V, nullptr);
  } else {
    // The local-step phase: the errors start again at its first step
    // (they held the gradient's; now they hold the accumulated update's).
    if (t == zo::firstFrozenStep(policy)) {
      std::fill(WE, WE + padded, 0.0f);
      std::fill(SE, SE + ctx.out[4].numel(), 0.0f);
    }
    for (int64_t i = 0; i < n; ++i)
      M[i] = M[i] * h.b1 + G[i] * h.a1;
    lrs += lrNow;
    applyUpdate(h, n, P, M, V, U);
    if ((t + 1) % have.localInterval == 0) {
      // Synchronise: back to the last synchronised parameter, exchange
      // the accumulated step (scaled by the denominator), and apply the
      // mean; the momentum becomes the mean step over the learning rates.
      if (!(lrs > 0))
        return ctx.fail("zero_one_adam: the learning rates since the last "
                        "synchronisation sum to " + std::to_string(lrs) +
                        " (0/1 Adam divides the exchanged step by them)");
      for (int64_t i = 0; i < n; ++i) {
        P[i] = P[i] - U[i];
        U[i] = U[i] * (std::sqrt(V[i]) + h.eps);
      }
      if (!exchange(U))
        return ctx.fail(err);
      float lrsF = static_cast<float>(lrs);
      for (int64_t i = 0; i < n; ++i) {
        M[i] = -(U[i] / lrsF);
        P[i] = P[i] + U[i] / (std::sqrt(V[i]) + h.eps);
        U[i] = 0.0f;
      }
      lrs = 0;
    }
  }
  zo::advance(have, t, policy);
  zo::storeCounters(have, lrs, C);
  return true;
}

void registerZeroOneKernels(KernelRegistry &r) {
  r.add("zero_one_adam", kZeroOneAdam);
}

} // namespace ds::rt
