//===- Lamb.h - Lamb's and 1-bit LAMB's host arithmetic ---------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Lamb's step on one tensor (Optimizers.cpp, the adam kernel's `lamb`
// form) and 1-bit LAMB's step with its exchange (OneBitLamb.cpp), on host
// memory: the CPU kernels call them, and the CUDA twin of `onebit_lamb`
// stages its buffers through the host and calls the same code.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CPU_LAMB_H
#define DS_RUNTIME_CPU_LAMB_H

#include "../Kernel.h"

#include <string>

#include <cstdint>

namespace ds::rt {

/// One Lamb step's coefficients (f32 as the arithmetic; the learning rate
/// and the trust ratio's bounds in double).
struct LambCoefficients {
  float b1, a1, b2, a2; // beta1, 1 - beta1, beta2, 1 - beta2
  float bc1, bc2Sqrt;   // 1 - beta1^t and sqrt(1 - beta2^t), or 1 and 1
  float eps, wd;
  double lr, minCoeff, maxCoeff;
};

/// DeepSpeed's FusedLamb on one tensor of `n` elements: `m = b1 m + a1 g`,
/// `v = b2 v + a2 g^2`, `u = (m / bc1) / (sqrt(v) / bc2Sqrt + eps) + wd p`,
/// the trust ratio ||p|| / ||u|| clamped to [minCoeff, maxCoeff] (1 when a
/// norm is 0), `p -= lr trust u`. The outputs may alias the inputs.
/// Returns the trust ratio.
double lambStep(const LambCoefficients &k, const float *P, const float *G,
                const float *M, const float *V, float *Po, float *Mo,
                float *Vo, int64_t n);

/// Lamb's moments and direction without the trust ratio: `Mo`, `Vo` and
/// `U` (u, n elements) as lambStep's; `sums` receives the sums of the
/// squares of P and of u (double).
void lambDirection(const LambCoefficients &k, const float *P, const float *G,
                   const float *M, const float *V, float *Mo, float *Vo,
                   float *U, int64_t n, double sums[2]);
/// The trust ratio of the sums of squares `pSq` and `uSq` (lambStep's
/// rule), then `Po = P - lr trust U`. Returns the trust ratio.
double lambApply(const LambCoefficients &k, double pSq, double uSq,
                 const float *P, const float *U, float *Po, int64_t n);

/// Whole-tensor figures of a tensor partitioned over the ranks of `comm`
/// (ZeRO 1-3): this rank's `nSum` partial sums and then `nMax` partial
/// maxima in `vals` are all-gathered (f64, counted in the communicator's
/// bytes, ds::onebit::partialSumsBytes) and replaced by their sums and
/// maxima over the ranks, added in rank order so that every rank gets the
/// same figures. Nothing happens with one rank or no communicator.
bool combineOverRanks(Communicator *comm, double *vals, int nSum, int nMax,
                      std::string &err);

/// One parameter's 1-bit LAMB state, on the host, updated in place.
struct OneBitLambState {
  float *param, *expAvg, *expAvgSq, *expAvgSqFresh; // n elements each
  float *workerError, *serverError;                 // padded, padded / N
  float *coeffs; // the frozen Lamb coefficient and the last factor
  int64_t n, padded;
};

/// One step `t` of DeepSpeed's OnebitLamb on `s` with this rank's gradient
/// `grad` (docs/compression.md; the kernel's attributes give the
/// hyper-parameters): Lamb on the gradient's mean until `freeze_step`, the
/// compressed momentum and the frozen coefficient times its factor after
/// it. Exchanges over ctx.comm (nothing with one rank).
bool oneBitLambStep(KernelContext &ctx, const float *grad, int64_t t,
                    OneBitLambState &s);

} // namespace ds::rt

#endif // DS_RUNTIME_CPU_LAMB_H
