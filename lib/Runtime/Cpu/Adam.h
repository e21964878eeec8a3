//===- Adam.h - Adam's and SGD's per-element arithmetic ---------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The update loops of the `adam` and `sgd` kernels (Optimizers.cpp) and of
// their multi-tensor forms (MultiTensor.cpp), shared so that both compute
// the same bits: torch's f32 operations in torch's order.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CPU_ADAM_H
#define DS_RUNTIME_CPU_ADAM_H

#include "../Kernel.h"

#include <cstdint>

namespace ds::rt {

/// Adam's per-element constants.
struct AdamCoefficients {
  float stepSize, bc2Sqrt, b1, b2, a1, a2, eps, wd, decay;
  bool decayed, decoupled;
};

/// The constants of step `t` (>= 1) from the kernel's attributes (the
/// learning rate after the schedule).
AdamCoefficients adamCoefficients(const KernelContext &ctx, int64_t t);

/// Adam over [0, n): Po, Mo, Vo from P, G, M, V.
void adamRange(const AdamCoefficients &k, const float *P, const float *G,
               const float *M, const float *V, float *Po, float *Mo,
               float *Vo, int64_t n);

/// SGD's per-element constants.
struct SgdCoefficients {
  float lr, momentum, dampening, wd;
  bool nesterov, useMomentum, firstStep;
};

SgdCoefficients sgdCoefficients(const KernelContext &ctx, int64_t t);

/// SGD over [0, n); B and Bo are read and written only with momentum.
void sgdRange(const SgdCoefficients &k, const float *P, const float *G,
              const float *B, float *Po, float *Bo, int64_t n);

} // namespace ds::rt

#endif // DS_RUNTIME_CPU_ADAM_H
