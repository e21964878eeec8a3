//===- Activation.h - the parametrized activations, one table ---*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM; also compiled by nvcc).
//
// The activations of `ds.activation` and `ds.activation_grad`: ONNX's
// Clip, LeakyRelu, Elu, Selu, Celu, Softplus, Softsign, HardSigmoid,
// HardSwish, Sin and Cos. Each is y = f(x; alpha, beta) with two float
// parameters (their meaning per kind below); its derivative dy/dx is a
// function of x alone. The verifier, the CPU kernels and the CUDA kernels
// all read this one table, so the compiler and both backends agree on the
// names and on the math (computed in double, as the reference).
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_ACTIVATION_H
#define DS_SUPPORT_ACTIVATION_H

#include <cmath>
#include <cstring>

#ifdef __CUDACC__
#define DS_HOST_DEVICE __host__ __device__
#else
#define DS_HOST_DEVICE
#endif

namespace ds {

/// The kinds, with their parameters.
enum class Activation : int {
  Clip,        // min(max(x, alpha), beta)
  LeakyRelu,   // x >= 0 ? x : alpha * x
  Elu,         // x >= 0 ? x : alpha * (exp(x) - 1)
  Selu,        // beta * (x > 0 ? x : alpha * (exp(x) - 1)); beta is gamma
  Celu,        // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
  Softplus,    // log(1 + exp(x))
  Softsign,    // x / (1 + |x|)
  HardSigmoid, // max(0, min(1, alpha * x + beta))
  HardSwish,   // x * max(0, min(1, x / 6 + 1 / 2))
  Sin,
  Cos,
};

/// The kinds' names, as the `kind` attribute spells them.
inline constexpr const char *kActivationNames[] = {
    "clip",        "leaky_relu", "elu",  "selu", "celu", "softplus",
    "softsign",    "hard_sigmoid", "hard_swish", "sin", "cos"};
inline constexpr int kNumActivations =
    sizeof(kActivationNames) / sizeof(kActivationNames[0]);

/// The kind named `name`; false when no kind has that name.
inline bool activationFromName(const char *name, Activation &kind) {
  for (int i = 0; i < kNumActivations; ++i)
    if (std::strcmp(name, kActivationNames[i]) == 0) {
      kind = static_cast<Activation>(i);
      return true;
    }
  return false;
}

/// f(x).
DS_HOST_DEVICE inline double activate(Activation kind, double x, double alpha,
                                      double beta) {
  switch (kind) {
  case Activation::Clip: return x < alpha ? alpha : (x > beta ? beta : x);
  case Activation::LeakyRelu: return x >= 0 ? x : alpha * x;
  case Activation::Elu: return x >= 0 ? x : alpha * expm1(x);
  case Activation::Selu: return beta * (x > 0 ? x : alpha * expm1(x));
  case Activation::Celu: return x > 0 ? x : alpha * expm1(x / alpha);
  case Activation::Softplus: // stable for large |x|
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  case Activation::Softsign: return x / (1 + fabs(x));
  case Activation::HardSigmoid: {
    double v = alpha * x + beta;
    return v < 0 ? 0 : (v > 1 ? 1 : v);
  }
  case Activation::HardSwish: {
    double v = x / 6 + 0.5;
    return x * (v < 0 ? 0 : (v > 1 ? 1 : v));
  }
  case Activation::Sin: return sin(x);
  case Activation::Cos: return cos(x);
  }
  return 0;
}

/// dy/dx at x, with PyTorch's choices at the kinks (clamp passes the
/// gradient at its bounds, hardswish takes the right derivative at -3 and
/// the left one at 3).
DS_HOST_DEVICE inline double activateGrad(Activation kind, double x,
                                          double alpha, double beta) {
  switch (kind) {
  case Activation::Clip: return x >= alpha && x <= beta ? 1 : 0;
  case Activation::LeakyRelu: return x > 0 ? 1 : alpha;
  case Activation::Elu: return x > 0 ? 1 : alpha * exp(x);
  case Activation::Selu: return beta * (x > 0 ? 1 : alpha * exp(x));
  case Activation::Celu: return x > 0 ? 1 : exp(x / alpha);
  case Activation::Softplus: return 1 / (1 + exp(-x));
  case Activation::Softsign: {
    double d = 1 + fabs(x);
    return 1 / (d * d);
  }
  case Activation::HardSigmoid: {
    double v = alpha * x + beta;
    return v > 0 && v < 1 ? alpha : 0;
  }
  case Activation::HardSwish: return x < -3 ? 0 : (x <= 3 ? x / 3 + 0.5 : 1);
  case Activation::Sin: return cos(x);
  case Activation::Cos: return -sin(x);
  }
  return 0;
}

} // namespace ds

#endif // DS_SUPPORT_ACTIVATION_H
