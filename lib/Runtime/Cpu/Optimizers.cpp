//===- Optimizers.cpp - Adam, AdamW and SGD updates, PyTorch semantics ----===//
//
// Part of the ds project (runtime: no MLIR or LLVM). The arithmetic follows
// torch.optim's single-tensor code in f32, in its order of operations, so
// that parameters match PyTorch's step for step. Outputs are the parameter
// and state buffers themselves (updated in place).
//
//===----------------------------------------------------------------------===//

#include "Adam.h"
#include "Kernels.h"
#include "Lamb.h"
#include "Vec.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/OneBit.h"

#include <algorithm>

#include <cstring>
#include <vector>

namespace ds::rt {

/// Operands: param, grad, `states` state tensors, step, then the optional
/// gradient accumulator.
static bool checkOptimizer(KernelContext &ctx, size_t states) {
  return checkOptimizerOperands(ctx, states);
}

/// Gradient accumulation over `accum_steps` micro-steps. Returns true when
/// this run only accumulated (no update); otherwise fills `grad` with the
/// mean gradient (times the clip coefficient when the plan gives one),
/// resets the accumulator and sets `t` to the update count.
static bool accumulateOnly(KernelContext &ctx, size_t states, int64_t &t,
                           std::vector<float> &mean, const float *&grad) {
  int64_t k = ctx.attrs.getInt("accum_steps", 1);
  size_t accIn = 3 + states;
  int64_t n = ctx.in[0].numel();
  // The parameter and state stay; where the plan gives them their own
  // output buffers (a ZeRO shard, gathered afterwards) copy them over.
  auto keepAll = [&]() {
    auto keep = [&](const TensorView &in, TensorView &out) {
      if (in.data != out.data)
        std::memcpy(out.data, in.data, n * sizeof(float));
    };
    keep(ctx.in[0], ctx.out[0]);
    for (size_t s = 0; s < states; ++s)
      keep(ctx.in[2 + s], ctx.out[1 + s]);
  };
  // A step whose gradients overflowed (loss scaling; with accumulation,
  // those of any micro-batch of the step: the executor carries the flag
  // over the window) changes nothing; at the window's end its accumulator
  // restarts from zero (DeepSpeed's check over the accumulated gradients).
  bool overflow = ctx.step && ctx.step->overflow;
  if (k <= 1 || ctx.in.size() <= accIn) {
    if (overflow)
      keepAll();
    return overflow;
  }
  const float *acc = ctx.in[accIn].as<float>();
  float *accOut = ctx.out.back().as<float>();
  // Clipping over the accumulated gradient: DeepSpeed scales the mean
  // gradient (the norm is the mean's, computed by the plan).
  float clip = ctx.in.size() > accIn + 1 ? ctx.in[accIn + 1].as<float>()[0]
                                         : 1.0f;
  const float *g = ctx.in[1].as<float>();
  int64_t micro = (t - 1) % k;
  t = (t - 1) / k + 1;
  if (micro < k - 1 || overflow) {
    bool last = micro == k - 1;
    for (int64_t i = 0; i < n; ++i)
      accOut[i] = last ? 0.0f : acc[i] + g[i];
    keepAll();
    return true;
  }
  mean.resize(n);
  float inv = 1.0f / static_cast<float>(k);
  for (int64_t i = 0; i < n; ++i) {
    mean[i] = (acc[i] + g[i]) * inv * clip;
    accOut[i] = 0.0f;
  }
  grad = mean.data();
  return false;
}

/// Adam over [0, n): torch's f32 operations in torch's order (vectorized:
/// the same IEEE operations per element, no contraction into FMA, so the
/// same bits). One loop per weight-decay mode, the test hoisted out.
DS_CLONES void adamRange(const AdamCoefficients &k, const float *P,
                         const float *G, const float *M, const float *V,
                         float *Po, float *Mo, float *Vo, int64_t n) {
#define DS_ADAM_BODY(P_EXPR, G_EXPR)                                           \
  DS_VECTORIZE for (int64_t i = 0; i < n; ++i) {                               \
    float p = P_EXPR, gr = G_EXPR;                                             \
    float m = M[i] * k.b1 + gr * k.a1;                                         \
    float v = V[i] * k.b2 + k.a2 * gr * gr;                                    \
    float denom = std::sqrt(v) / k.bc2Sqrt + k.eps;                            \
    Mo[i] = m;                                                                 \
    Vo[i] = v;                                                                 \
    Po[i] = p + (-k.stepSize) * (m / denom);                                   \
  }
  if (!k.decayed)
    DS_ADAM_BODY(P[i], G[i])
  else if (k.decoupled)
    DS_ADAM_BODY(P[i] * k.decay, G[i])
  else
    DS_ADAM_BODY(P[i], G[i] + k.wd * P[i])
#undef DS_ADAM_BODY
}

AdamCoefficients adamCoefficients(const KernelContext &ctx, int64_t t) {
  double lr = stepLr(ctx, t);
  double beta1 = ctx.attrs.getFloat("beta1", 0.9);
  double beta2 = ctx.attrs.getFloat("beta2", 0.999);
  double wd = ctx.attrs.getFloat("weight_decay", 0.0);
  // DeepSpeed's bias_correction: false leaves the moments undivided.
  bool correct = ctx.attrs.getInt("bias_correction", 1) != 0;
  double bc1 = correct ? 1.0 - std::pow(beta1, static_cast<double>(t)) : 1.0;
  double bc2 = correct ? 1.0 - std::pow(beta2, static_cast<double>(t)) : 1.0;
  AdamCoefficients k;
  k.stepSize = static_cast<float>(lr / bc1);
  k.bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  k.b1 = static_cast<float>(beta1), k.b2 = static_cast<float>(beta2);
  k.a1 = static_cast<float>(1.0 - beta1), k.a2 = static_cast<float>(1.0 - beta2);
  k.eps = static_cast<float>(ctx.attrs.getFloat("eps", 1e-8));
  k.wd = static_cast<float>(wd), k.decay = static_cast<float>(1.0 - lr * wd);
  k.decayed = wd != 0.0;
  k.decoupled = ctx.attrs.getInt("decoupled", 0) != 0;
  return k;
}

/// Lamb's constants of step `t` (the adam kernel's `lamb` form).
static LambCoefficients lambCoefficients(const KernelContext &ctx, int64_t t) {
  double lr = stepLr(ctx, t);
  double beta1 = ctx.attrs.getFloat("beta1", 0.9);
  double beta2 = ctx.attrs.getFloat("beta2", 0.999);
  bool correct = ctx.attrs.getInt("bias_correction", 1) != 0;
  double bc1 = correct ? 1.0 - std::pow(beta1, static_cast<double>(t)) : 1.0;
  double bc2 = correct ? 1.0 - std::pow(beta2, static_cast<double>(t)) : 1.0;
  return {static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(bc1),
          static_cast<float>(std::sqrt(bc2)),
          static_cast<float>(ctx.attrs.getFloat("eps", 1e-8)),
          static_cast<float>(ctx.attrs.getFloat("weight_decay", 0.0)),
          lr,
          ctx.attrs.getFloat("min_coeff", 0.01),
          ctx.attrs.getFloat("max_coeff", 10.0)};
}

SgdCoefficients sgdCoefficients(const KernelContext &ctx, int64_t t) {
  SgdCoefficients k;
  k.lr = static_cast<float>(stepLr(ctx, t));
  k.momentum = static_cast<float>(ctx.attrs.getFloat("momentum", 0.0));
  k.dampening = static_cast<float>(ctx.attrs.getFloat("dampening", 0.0));
  k.wd = static_cast<float>(ctx.attrs.getFloat("weight_decay", 0.0));
  k.nesterov = ctx.attrs.getInt("nesterov", 0) != 0;
  k.useMomentum = k.momentum != 0.0f;
  k.firstStep = t <= 1;
  return k;
}

void sgdRange(const SgdCoefficients &k, const float *P, const float *G,
              const float *B, float *Po, float *Bo, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float d = G[i];
    if (k.wd != 0.0f)
      d = d + k.wd * P[i];
    if (k.useMomentum) {
      float buf = k.firstStep ? d : B[i] * k.momentum + (1.0f - k.dampening) * d;
      Bo[i] = buf;
      d = k.nesterov ? d + k.momentum * buf : buf;
    }
    Po[i] = P[i] + (-k.lr) * d;
  }
}

void lambDirection(const LambCoefficients &k, const float *P, const float *G,
                   const float *M, const float *V, float *Mo, float *Vo,
                   float *U, int64_t n, double sums[2]) {
  double pSq = 0, uSq = 0;
  for (int64_t i = 0; i < n; ++i) {
    float m = M[i] * k.b1 + G[i] * k.a1;
    float v = V[i] * k.b2 + k.a2 * G[i] * G[i];
    Mo[i] = m;
    Vo[i] = v;
    U[i] = (m / k.bc1) / (std::sqrt(v) / k.bc2Sqrt + k.eps) + k.wd * P[i];
    pSq += double(P[i]) * P[i];
    uSq += double(U[i]) * U[i];
  }
  sums[0] = pSq;
  sums[1] = uSq;
}

double lambApply(const LambCoefficients &k, double pSq, double uSq,
                 const float *P, const float *U, float *Po, int64_t n) {
  double pNorm = std::sqrt(pSq), uNorm = std::sqrt(uSq);
  double trust = pNorm > 0 && uNorm > 0
                     ? std::clamp(pNorm / uNorm, k.minCoeff, k.maxCoeff)
                     : 1.0;
  float scale = static_cast<float>(k.lr * trust);
  for (int64_t i = 0; i < n; ++i)
    Po[i] = P[i] - scale * U[i];
  return trust;
}

double lambStep(const LambCoefficients &k, const float *P, const float *G,
                const float *M, const float *V, float *Po, float *Mo,
                float *Vo, int64_t n) {
  std::vector<float> u(n);
  double sums[2];
  lambDirection(k, P, G, M, V, Mo, Vo, u.data(), n, sums);
  return lambApply(k, sums[0], sums[1], P, u.data(), Po, n);
}

bool combineOverRanks(Communicator *comm, double *vals, int nSum, int nMax,
                      std::string &err) {
  int world = comm ? comm->size() : 1;
  if (world <= 1)
    return true;
  int count = nSum + nMax;
  // Gathered as 8-byte integers: the bits of the doubles travel unchanged.
  std::vector<int64_t> mine(count), all(static_cast<size_t>(count) * world);
  std::memcpy(mine.data(), vals, count * sizeof(double));
  if (!comm->allGather(mine.data(), all.data(), count, DType::I64, err))
    return false;
  comm->collectiveBytes += ::ds::onebit::partialSumsBytes(count, world);
  for (int j = 0; j < count; ++j) {
    double acc = 0;
    for (int r = 0; r < world; ++r) {
      double x;
      std::memcpy(&x, &all[static_cast<size_t>(r) * count + j], sizeof x);
      acc = j < nSum ? (r == 0 ? x : acc + x) : (r == 0 ? x : std::max(acc, x));
    }
    vals[j] = acc;
  }
  return true;
}

bool kAdam(KernelContext &ctx) {
  if (!checkOptimizer(ctx, 2))
    return false;
  const TensorView &pin = ctx.in[0], &g = ctx.in[1], &min = ctx.in[2],
                   &vin = ctx.in[3], &stepT = ctx.in[4];
  int64_t t = loadI(stepT.data, stepT.dtype, 0);
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  std::vector<float> mean;
  const float *gradData = g.as<float>();
  if (accumulateOnly(ctx, 2, t, mean, gradData))
    return true;
  const float *P = pin.as<float>(), *G = gradData, *M = min.as<float>(),
              *V = vin.as<float>();
  float *Po = ctx.out[0].as<float>(), *Mo = ctx.out[1].as<float>(),
        *Vo = ctx.out[2].as<float>();
  if (ctx.attrs.getInt("lamb", 0)) {
    // Lamb: Adam's direction plus decoupled decay, scaled per tensor by the
    // trust ratio (DeepSpeed's FusedLamb; Lamb.h).
    LambCoefficients l = lambCoefficients(ctx, t);
    if (!ctx.attrs.getInt("norm_over_ranks", 0)) {
      lambStep(l, P, G, M, V, Po, Mo, Vo, pin.numel());
      return true;
    }
    // ZeRO 1-3: this rank's partition of the tensor; the trust ratio takes
    // the whole tensor's norms from every rank's partial sums.
    std::vector<float> u(pin.numel());
    double sums[2];
    lambDirection(l, P, G, M, V, Mo, Vo, u.data(), pin.numel(), sums);
    std::string err;
    if (!combineOverRanks(ctx.comm, sums, 2, 0, err))
      return ctx.fail(err);
    lambApply(l, sums[0], sums[1], P, u.data(), Po, pin.numel());
    return true;
  }
  AdamCoefficients k = adamCoefficients(ctx, t);
  parallelFor(pin.numel(), 16384, [&](int64_t b, int64_t e) {
    adamRange(k, P + b, G + b, M + b, V + b, Po + b, Mo + b, Vo + b, e - b);
  });
  return true;
}

bool kSgd(KernelContext &ctx) {
  if (!checkOptimizer(ctx, 1))
    return false;
  const TensorView &pin = ctx.in[0], &g = ctx.in[1], &bufIn = ctx.in[2],
                   &stepT = ctx.in[3];
  int64_t t = loadI(stepT.data, stepT.dtype, 0);
  std::vector<float> mean;
  const float *gradData = g.as<float>();
  if (accumulateOnly(ctx, 1, t, mean, gradData))
    return true;
  SgdCoefficients k = sgdCoefficients(ctx, t);
  const float *P = pin.as<float>(), *G = gradData, *B = bufIn.as<float>();
  float *Po = ctx.out[0].as<float>(), *Bo = ctx.out[1].as<float>();
  parallelFor(pin.numel(), 16384, [&](int64_t b, int64_t e) {
    sgdRange(k, P + b, G + b, B + b, Po + b, Bo + b, e - b);
  });
  return true;
}

} // namespace ds::rt

namespace ds::rt {

/// ONNX's Adam, Adagrad and Momentum rules (ai.onnx.preview.training), per
/// the operator spec: operands R, T, X, G, states; results X_new, states.
bool kOnnxUpdate(KernelContext &ctx) {
  std::string kind = ctx.attrs.getString("kind");
  size_t states = kind == "adam" ? 2 : 1;
  if (ctx.in.size() != 4 + states || ctx.out.size() != 1 + states)
    return ctx.fail("onnx_update operand count does not match kind '" + kind + "'");
  const TensorView &R = ctx.in[0], &T = ctx.in[1], &X = ctx.in[2], &G = ctx.in[3];
  double r = loadD(R.data, R.dtype, 0);
  int64_t t = loadI(T.data, T.dtype, 0);
  double alpha = ctx.attrs.getFloat("alpha", 0.9);
  double beta = ctx.attrs.getFloat("beta", 0.999);
  double eps = ctx.attrs.getFloat("epsilon", 0.0);
  double decay = ctx.attrs.getFloat("decay_factor", 0.0);
  double norm = ctx.attrs.getFloat("norm_coefficient", 0.0);
  double normPost = ctx.attrs.getFloat("norm_coefficient_post", 0.0);
  int64_t n = X.numel();
  for (const TensorView &v : ctx.in)
    if (&v != &R && &v != &T && v.numel() != n)
      return ctx.fail("onnx_update tensors differ in size");
  double betaAdjusted = t > 0 ? beta : 1.0;
  double rAdam = t > 0 ? r * std::sqrt(1.0 - std::pow(beta, double(t))) /
                             (1.0 - std::pow(alpha, double(t)))
                       : r;
  for (int64_t i = 0; i < n; ++i) {
    double x = loadD(X.data, X.dtype, i);
    double g = norm * x + loadD(G.data, G.dtype, i);
    if (kind == "adagrad") {
      double rr = r / (1.0 + double(t) * decay);
      double h = loadD(ctx.in[4].data, ctx.in[4].dtype, i) + g * g;
      storeD(ctx.out[1].data, ctx.out[1].dtype, i, h);
      storeD(ctx.out[0].data, ctx.out[0].dtype, i, x - rr * g / (std::sqrt(h) + eps));
    } else if (kind == "momentum" || kind == "nesterov") {
      double v = alpha * loadD(ctx.in[4].data, ctx.in[4].dtype, i) + betaAdjusted * g;
      storeD(ctx.out[1].data, ctx.out[1].dtype, i, v);
      double step = kind == "nesterov" ? g + alpha * v : v;
      storeD(ctx.out[0].data, ctx.out[0].dtype, i, x - r * step);
    } else if (kind == "adam") {
      double v = alpha * loadD(ctx.in[4].data, ctx.in[4].dtype, i) + (1.0 - alpha) * g;
      double h = beta * loadD(ctx.in[5].data, ctx.in[5].dtype, i) + (1.0 - beta) * (g * g);
      storeD(ctx.out[1].data, ctx.out[1].dtype, i, v);
      storeD(ctx.out[2].data, ctx.out[2].dtype, i, h);
      double xNew = x - rAdam * (v / (std::sqrt(h) + eps));
      storeD(ctx.out[0].data, ctx.out[0].dtype, i, (1.0 - normPost) * xNew);
    } else {
      return ctx.fail("unknown onnx_update kind '" + kind + "'");
    }
  }
  return true;
}

void registerOptimizerKernels(KernelRegistry &r) {
  r.add("adam", kAdam);
  r.add("sgd", kSgd);
  r.add("onnx_update", kOnnxUpdate);
}

} // namespace ds::rt
