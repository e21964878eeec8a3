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
// values of all but the gradient and the step (in place). Under ZeRO 1-3
// (`ds.onebit_lamb_local`) the kernel has 7 operands: this rank's
// partition, its exchanged gradient and state, no error buffers; the
// whole tensor's norms and the factor's maximum come from an all-gather
// of each rank's partial figures (combineOverRanks, Lamb.h).
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

/// The factor from the largest ratio `factor` of the old to the fresh
/// denominators: mixed with 1 by the share of the update that is not
/// weight decay (from the sums of squares of m / (sqrt(v) + eps) and of
/// u), clamped to [factor_min, factor_max] and to within factor_threshold
/// of the last factor.
double boundFactor(const LambHyper &h, double factor, double prelimSq,
                   double updateSq, double lastFactor) {
  double f = factor;
  if (h.wd > 0.0) { // the share of the update that is not weight decay
    double ratio =
        updateSq > 0 ? std::min(1.0, std::sqrt(prelimSq / updateSq)) : 1.0;
    f = f * ratio + (1.0 - ratio);
  }
  f = std::clamp(f, h.factorMin, h.factorMax);
  return std::clamp(f, lastFactor * (1.0 - h.factorThreshold),
                    lastFactor * (1.0 + h.factorThreshold));
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
  return boundFactor(h, factor, prelimSq, updateSq, s.coeffs[1]);
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

/// ZeRO 1-3: operands param, grad (this rank's partition of the mean),
/// exp_avg, exp_avg_sq, exp_avg_sq_fresh, coeffs, step; results the new
/// values of all but the gradient and the step (copied when not in place).
bool checkOneBitLambLocal(KernelContext &ctx) {
  if (ctx.in.size() != 7 || ctx.out.size() != 5)
    return ctx.fail("onebit_lamb (ZeRO 1-3) expects 7 operands and 5 results");
  int64_t n = ctx.in[0].numel();
  for (int i = 0; i < 6; ++i)
    if (ctx.in[i].dtype != DType::F32 ||
        (i < 5 && ctx.out[i].dtype != DType::F32))
      return ctx.fail("onebit_lamb operands must be f32");
  for (int i : {1, 2, 3, 4})
    if (ctx.in[i].numel() != n)
      return ctx.fail("onebit_lamb: gradient, moments and fresh "
                      "variance must have the parameter's size");
  if (ctx.in[5].numel() != 2)
    return ctx.fail("onebit_lamb: coeffs must be 2 f32");
  if (ctx.in[6].numel() != 1)
    return ctx.fail("optimizer step must be a scalar");
  for (int i = 0; i < 5; ++i) {
    const TensorView &in = ctx.in[i < 1 ? 0 : i + 1];
    if (in.data != ctx.out[i].data)
      std::memcpy(ctx.out[i].data, in.data, in.numel() * sizeof(float));
  }
  return true;
}

/// After the freeze, on this rank's partition (`mine` of its `n` elements
/// are the tensor's, the rest padding): the momentum and the fresh
/// variance from the exchanged gradient `G`, the update `U`, and this
/// partition's figures in `vals` (the sums of squares of m / (sqrt(v) +
/// eps) and of u, the largest ratio of the denominators).
void frozenPartition(const LambHyper &h, float *P, const float *G, float *M,
                     const float *V, float *VF, float *U, int64_t n,
                     int64_t mine, double vals[3]) {
  float b1 = static_cast<float>(h.beta1), a1 = static_cast<float>(1 - h.beta1);
  float b2 = static_cast<float>(h.beta2), a2 = static_cast<float>(1 - h.beta2);
  float eps = static_cast<float>(h.eps), wd = static_cast<float>(h.wd);
  float factor = 0.0f;
  double prelimSq = 0, updateSq = 0;
  for (int64_t i = 0; i < n; ++i) {
    M[i] = M[i] * b1 + G[i] * a1;
    VF[i] = VF[i] * b2 + a2 * G[i] * G[i];
    float denom = std::sqrt(V[i]) + eps;
    float prelim = M[i] / denom;
    U[i] = wd > 0.0f ? prelim + wd * P[i] : prelim;
    if (i < mine)
      factor = std::max(factor, denom / (std::sqrt(VF[i]) + eps));
    prelimSq += double(prelim) * prelim;
    updateSq += double(U[i]) * U[i];
  }
  vals[0] = prelimSq;
  vals[1] = updateSq;
  vals[2] = factor;
}

/// 1-bit LAMB's update of this rank's partition under ZeRO 1-3
/// (`ds.onebit_lamb_local`): the gradient arrives exchanged (plain until
/// the freeze, 1-bit after it); the whole tensor's figures come from one
/// all-gather of three partial figures per rank in both phases.
bool kOneBitLambLocal(KernelContext &ctx) {
  if (!checkOneBitLambLocal(ctx))
    return false;
  int64_t t = loadI(ctx.in[6].data, ctx.in[6].dtype, 0);
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  LambHyper h = readHyper(ctx);
  if (!freezeStepOf(ctx, h.freezeStep)) // freeze_step auto: ds-run's
    return false;
  double lr = stepLr(ctx, t);
  float *P = ctx.out[0].as<float>(), *M = ctx.out[1].as<float>(),
        *V = ctx.out[2].as<float>(), *VF = ctx.out[3].as<float>(),
        *C = ctx.out[4].as<float>();
  const float *G = ctx.in[1].as<float>();
  int64_t n = ctx.in[0].numel();
  int rank = ctx.comm ? ctx.comm->rank() : 0;
  int world = ctx.comm ? ctx.comm->size() : 1;
  int64_t valid = ctx.attrs.getInt("valid", n * world);
  int64_t mine = std::clamp<int64_t>(valid - rank * n, 0, n);
  std::vector<float> U(n);
  double vals[3] = {0, 0, 0};
  std::string err;
  if (t <= h.freezeStep) {
    LambCoefficients k{static_cast<float>(h.beta1),
                       static_cast<float>(1 - h.beta1),
                       static_cast<float>(h.beta2),
                       static_cast<float>(1 - h.beta2), 1.0f, 1.0f,
                       static_cast<float>(h.eps), static_cast<float>(h.wd),
                       lr, h.minCoeff, h.maxCoeff};
    lambDirection(k, P, G, M, V, M, V, U.data(), n, vals);
    if (!combineOverRanks(ctx.comm, vals, 2, 1, err))
      return ctx.fail(err);
    double trust = lambApply(k, vals[0], vals[1], P, U.data(), P, n);
    if (trust != 1.0) // as onebit_lamb: the coefficient 1 is skipped
      C[0] = static_cast<float>(h.coeffBeta * C[0] +
                                (1 - h.coeffBeta) * trust);
    return true;
  }
  if (t == h.freezeStep + 1) { // the first compressed step
    std::memcpy(VF, V, n * sizeof(float));
    C[1] = 1.0f;
  }
  frozenPartition(h, P, G, M, V, VF, U.data(), n, mine, vals);
  if (!combineOverRanks(ctx.comm, vals, 2, 1, err))
    return ctx.fail(err);
  double factor = boundFactor(h, vals[2], vals[0], vals[1], C[1]);
  C[1] = static_cast<float>(factor);
  float scale = static_cast<float>(lr * (double(C[0]) * factor));
  for (int64_t i = 0; i < n; ++i)
    P[i] = P[i] - scale * U[i];
  return true;
}

/// `onebit_lamb`: the ZeRO-0 step with its own exchange (9 operands), or
/// the ZeRO 1-3 update of an exchanged partition (`ds.onebit_lamb_local`,
/// 7 operands).
bool kOneBitLambAny(KernelContext &ctx) {
  return ctx.in.size() == 7 ? kOneBitLambLocal(ctx) : kOneBitLamb(ctx);
}
} // namespace

void registerOneBitLambKernels(KernelRegistry &r) {
  r.add("onebit_lamb", kOneBitLambAny);
}

} // namespace ds::rt
