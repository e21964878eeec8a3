//===- OneBitLamb.cpp - DeepSpeed's 1-bit LAMB step -----------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `onebit_lamb` (docs/compression.md): one parameter's step of DeepSpeed's
// OnebitLamb (deepspeed/runtime/fp16/onebit/lamb.py; Li et al. 2021) with
// its exchange, over 1-bit Adam's compressed all-reduce
// (Mpi/Compressed.cpp). Operands: param, this rank's gradient, exp_avg,
// exp_avg_sq, exp_avg_sq_fresh, worker error, server error, coeffs (the
// frozen Lamb coefficient and the last factor), step; results the new
// values of all but the gradient and the step (in place).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Lamb.h"
#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/OneBit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace ds::rt {

namespace {
/// 1-bit LAMB's hyper-parameters, read from the kernel's attributes.
struct LambHyper {
  double beta1, beta2, eps, wd, minCoeff, maxCoeff, coeffBeta;
  double factorMax, factorMin, factorThreshold;
  int64_t freezeStep;
};

LambHyper readHyper(const KernelContext &ctx) {
  const Attrs &a = ctx.attrs;
  return {a.getFloat("beta1", 0.9),      a.getFloat("beta2", 0.999),
          a.getFloat("eps", 1e-8),       a.getFloat("weight_decay", 0.0),
          a.getFloat("min_coeff", 0.01), a.getFloat("max_coeff", 10.0),
          a.getFloat("coeff_beta", 0.9), a.getFloat("factor_max", 4.0),
          a.getFloat("factor_min", 0.5), a.getFloat("factor_threshold", 0.1),
          a.getInt("freeze_step", 100000)};
}

/// After the freeze: the factor of the frozen coefficient, from the
/// exchanged momentum `M` (its previous value `last`), the frozen `V` and
/// the fresh variance `VF` (updated here with the gradient `M` implies);
/// `U` receives the update m / (sqrt(v) + eps) + wd p.
double frozenFactor(const LambHyper &h, const OneBitLambState &s,
                    const float *last, std::vector<float> &U) {
  float b1 = static_cast<float>(h.beta1), a1 = static_cast<float>(1 - h.beta1);
  float b2 = static_cast<float>(h.beta2), a2 = static_cast<float>(1 - h.beta2);
  float eps = static_cast<float>(h.eps), wd = static_cast<float>(h.wd);
  const float *P = s.param, *M = s.expAvg, *V = s.expAvgSq;
  float *VF = s.expAvgSqFresh;
  float factor = 0.0f;
  double prelimSq = 0, updateSq = 0;
  for (int64_t i = 0; i < s.n; ++i) {
    float g = (M[i] - last[i] * b1) / a1; // the gradient M implies
    VF[i] = VF[i] * b2 + a2 * g * g;
    float denom = std::sqrt(V[i]) + eps;
    float prelim = M[i] / denom;
    U[i] = wd > 0.0f ? prelim + wd * P[i] : prelim;
    factor = std::max(factor, denom / (std::sqrt(VF[i]) + eps));
    prelimSq += double(prelim) * prelim;
    updateSq += double(U[i]) * U[i];
  }
  double f = factor;
  if (wd > 0.0f) { // the share of the update that is not weight decay
    double ratio =
        updateSq > 0 ? std::min(1.0, std::sqrt(prelimSq / updateSq)) : 1.0;
    f = f * ratio + (1.0 - ratio);
  }
  f = std::clamp(f, h.factorMin, h.factorMax);
  double lastFactor = s.coeffs[1];
  f = std::clamp(f, lastFactor * (1.0 - h.factorThreshold),
                 lastFactor * (1.0 + h.factorThreshold));
  return f;
}
} // namespace

bool oneBitLambStep(KernelContext &ctx, const float *grad, int64_t t,
                    OneBitLambState &s) {
  Communicator *comm = ctx.comm;
  int world = comm ? comm->size() : 1;
  LambHyper h = readHyper(ctx);
  if (!freezeStepOf(ctx, h.freezeStep)) // freeze_step auto: ds-run's
    return false;
  double lr = stepLr(ctx, t);
  float b1 = static_cast<float>(h.beta1), a1 = static_cast<float>(1 - h.beta1);
  float *P = s.param, *M = s.expAvg;
  int64_t n = s.n;
  std::string err;
  if (t <= h.freezeStep) {
    // Warm-up: Lamb without bias correction on the gradient's mean; the
    // trust ratios' running average becomes the frozen coefficient.
    std::vector<float> g(grad, grad + n);
    if (world > 1 && !onebit::meanAllReduce(*comm, g.data(), n, err))
      return ctx.fail(err);
    LambCoefficients k{b1, a1, static_cast<float>(h.beta2),
                       static_cast<float>(1 - h.beta2), 1.0f, 1.0f,
                       static_cast<float>(h.eps), static_cast<float>(h.wd),
                       lr, h.minCoeff, h.maxCoeff};
    double trust = lambStep(k, P, g.data(), M, s.expAvgSq, P, M, s.expAvgSq, n);
    if (trust != 1.0) // DeepSpeed skips the coefficient 1 (a zero norm)
      s.coeffs[0] = static_cast<float>(h.coeffBeta * s.coeffs[0] +
                                       (1 - h.coeffBeta) * trust);
    return true;
  }
  if (t == h.freezeStep + 1) { // the first compressed step
    std::memcpy(s.expAvgSqFresh, s.expAvgSq, n * sizeof(float));
    s.coeffs[1] = 1.0f;
  }
  // The variance is frozen; the momentum takes the local gradient, then
  // its compressed mean over the ranks.
  std::vector<float> last(M, M + n), U(n);
  for (int64_t i = 0; i < n; ++i)
    M[i] = M[i] * b1 + grad[i] * a1;
  if (world > 1 &&
      !onebit::compressedAllReduce(*comm, M, n, s.workerError, s.padded,
                                   s.serverError, err))
    return ctx.fail(err);
  double factor = frozenFactor(h, s, last.data(), U);
  s.coeffs[1] = static_cast<float>(factor);
  float scale = static_cast<float>(lr * (double(s.coeffs[0]) * factor));
  for (int64_t i = 0; i < n; ++i)
    P[i] = P[i] - scale * U[i];
  return true;
}

namespace {
/// The operands' types and sizes (a plan compiled for another world size
/// is refused here, before anything changes), then the state copied to the
/// results when they are not in place.
bool checkOneBitLamb(KernelContext &ctx, int world) {
  if (ctx.in.size() != 9 || ctx.out.size() != 7)
    return ctx.fail("onebit_lamb expects 9 operands and 7 results");
  int64_t n = ctx.in[0].numel();
  for (int i = 0; i < 8; ++i)
    if (ctx.in[i].dtype != DType::F32 ||
        (i < 7 && ctx.out[i].dtype != DType::F32))
      return ctx.fail("onebit_lamb operands must be f32");
  for (int i : {1, 2, 3, 4})
    if (ctx.in[i].numel() != n)
      return ctx.fail("onebit_lamb: gradient, moments and fresh variance "
                      "must have the parameter's size");
  if (!checkOneBitErrors(ctx, "onebit_lamb", n, ctx.in[5].numel(),
                         ctx.in[6].numel(), world))
    return false;
  if (ctx.in[7].numel() != 2)
    return ctx.fail("onebit_lamb: coeffs must be 2 f32");
  if (ctx.in[8].numel() != 1)
    return ctx.fail("optimizer step must be a scalar");
  for (int i = 0; i < 7; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    if (in.data != ctx.out[i].data)
      std::memcpy(ctx.out[i].data, in.data, in.numel() * sizeof(float));
  }
  return true;
}

bool kOneBitLamb(KernelContext &ctx) {
  int world = ctx.comm ? ctx.comm->size() : 1;
  if (!checkOneBitLamb(ctx, world))
    return false;
  int64_t t = loadI(ctx.in[8].data, ctx.in[8].dtype, 0);
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  OneBitLambState s{ctx.out[0].as<float>(), ctx.out[1].as<float>(),
                    ctx.out[2].as<float>(), ctx.out[3].as<float>(),
                    ctx.out[4].as<float>(), ctx.out[5].as<float>(),
                    ctx.out[6].as<float>(), ctx.in[0].numel(),
                    ctx.out[4].numel()};
  return oneBitLambStep(ctx, ctx.in[1].as<float>(), t, s);
}
} // namespace

void registerOneBitLambKernels(KernelRegistry &r) {
  r.add("onebit_lamb", kOneBitLamb);
}

} // namespace ds::rt
