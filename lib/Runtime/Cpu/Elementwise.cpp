//===- Elementwise.cpp - elementwise CPU kernels --------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Binary ops broadcast (numpy rules): the output is walked row by row (all
// dimensions but the last), each operand with its own strides (0 where it
// broadcasts). f32 has a direct path; other types go through double (floats)
// or int64 (integers and bool). The activations (Support/Activation.h)
// compute in double and round to the result's type.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "RowWalk.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/Activation.h"
#include "Vec.h"

#include <algorithm>

namespace ds::rt {
namespace {

enum class Bin { Add, Sub, Mul, Div, Pow, Max, Min, Eq, Lt, Le, Gt, Ge, And, Or, Xor };

bool checkBroadcast(KernelContext &ctx, const TensorView &in,
                    const TensorView &out) {
  if (in.shape.size() > out.shape.size())
    return ctx.fail("operand rank exceeds the result's");
  size_t off = out.shape.size() - in.shape.size();
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (in.shape[d] != 1 && in.shape[d] != out.shape[d + off])
      return ctx.fail("operand does not broadcast to the result");
  return true;
}

/// One row of an f32 binary op; a and b step by sa and sb (0 or 1).
DS_CLONES void binaryRowF32(Bin op, const float *a, int64_t sa, const float *b,
                            int64_t sb, float *o, int64_t n) {
#define DS_ROW(EXPR)                                                           \
  if (sa == 1 && sb == 1)                                                      \
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) { float x = a[i], y = b[i]; o[i] = EXPR; } \
  else if (sa == 1)                                                            \
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) { float x = a[i], y = b[0]; o[i] = EXPR; } \
  else if (sb == 1)                                                            \
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) { float x = a[0], y = b[i]; o[i] = EXPR; } \
  else                                                                         \
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) { float x = a[0], y = b[0]; o[i] = EXPR; }
  switch (op) {
  case Bin::Add: DS_ROW(x + y) break;
  case Bin::Sub: DS_ROW(x - y) break;
  case Bin::Mul: DS_ROW(x * y) break;
  case Bin::Div: DS_ROW(x / y) break;
  default: break;
  }
#undef DS_ROW
}

template <typename F>
void binaryF32(const RowWalk &w, const float *A, const float *B, float *O, F f) {
  int64_t ia = w.innerStride(0), ib = w.innerStride(1), inner = w.inner;
  parallelFor(w.rows, w.grain(), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *a = A + w.offset(0, r), *b = B + w.offset(1, r);
      float *o = O + r * inner;
      if (ia == 1 && ib == 1)
        for (int64_t i = 0; i < inner; ++i)
          o[i] = f(a[i], b[i]);
      else if (ia == 1 && ib == 0)
        for (int64_t i = 0; i < inner; ++i)
          o[i] = f(a[i], b[0]);
      else if (ia == 0 && ib == 1)
        for (int64_t i = 0; i < inner; ++i)
          o[i] = f(a[0], b[i]);
      else
        for (int64_t i = 0; i < inner; ++i)
          o[i] = f(a[i * ia], b[i * ib]);
    }
  });
}

double applyD(Bin op, double x, double y) {
  switch (op) {
  case Bin::Add: return x + y;
  case Bin::Sub: return x - y;
  case Bin::Mul: return x * y;
  case Bin::Div: return x / y;
  case Bin::Pow: return std::pow(x, y);
  case Bin::Max: return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
  case Bin::Min: return std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y);
  case Bin::Eq: return x == y;
  case Bin::Lt: return x < y;
  case Bin::Le: return x <= y;
  case Bin::Gt: return x > y;
  case Bin::Ge: return x >= y;
  case Bin::And: return (x != 0) && (y != 0);
  case Bin::Or: return (x != 0) || (y != 0);
  case Bin::Xor: return (x != 0) != (y != 0);
  }
  return 0;
}

bool applyI(Bin op, int64_t x, int64_t y, int64_t &r) {
  switch (op) {
  case Bin::Add: r = static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y)); return true;
  case Bin::Sub: r = static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y)); return true;
  case Bin::Mul: r = static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y)); return true;
  case Bin::Div:
    if (y == 0)
      return false;
    r = (x == INT64_MIN && y == -1) ? x : x / y;
    return true;
  case Bin::Pow: {
    r = 1;
    if (y < 0) {
      r = (x == 1) ? 1 : (x == -1 ? (y % 2 ? -1 : 1) : 0);
      return true;
    }
    for (int64_t e = 0; e < y; ++e)
      r *= x;
    return true;
  }
  case Bin::Max: r = std::max(x, y); return true;
  case Bin::Min: r = std::min(x, y); return true;
  case Bin::Eq: r = x == y; return true;
  case Bin::Lt: r = x < y; return true;
  case Bin::Le: r = x <= y; return true;
  case Bin::Gt: r = x > y; return true;
  case Bin::Ge: r = x >= y; return true;
  case Bin::And: r = x && y; return true;
  case Bin::Or: r = x || y; return true;
  case Bin::Xor: r = (x != 0) != (y != 0); return true;
  }
  return false;
}

bool binary(KernelContext &ctx, Bin op) {
  const TensorView &a = ctx.in[0], &b = ctx.in[1];
  TensorView &o = ctx.out[0];
  if (!checkBroadcast(ctx, a, o) || !checkBroadcast(ctx, b, o))
    return false;
  RowWalk w(o.shape, {&a.shape, &b.shape});
  if (w.rows == 0)
    return true;
  if (a.dtype == DType::F32 && b.dtype == DType::F32 && o.dtype == DType::F32) {
    const float *A = a.as<float>(), *B = b.as<float>();
    float *O = o.as<float>();
    int64_t ia = w.innerStride(0), ib = w.innerStride(1);
    bool simple = (ia == 0 || ia == 1) && (ib == 0 || ib == 1);
    if (simple && (op == Bin::Add || op == Bin::Sub || op == Bin::Mul ||
                   op == Bin::Div)) {
      parallelFor(w.rows, w.grain(), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          binaryRowF32(op, A + w.offset(0, r), ia, B + w.offset(1, r), ib,
                       O + r * w.inner, w.inner);
      });
      return true;
    }
    switch (op) {
    case Bin::Add: binaryF32(w, A, B, O, [](float x, float y) { return x + y; }); return true;
    case Bin::Sub: binaryF32(w, A, B, O, [](float x, float y) { return x - y; }); return true;
    case Bin::Mul: binaryF32(w, A, B, O, [](float x, float y) { return x * y; }); return true;
    case Bin::Div: binaryF32(w, A, B, O, [](float x, float y) { return x / y; }); return true;
    case Bin::Pow:
      binaryF32(w, A, B, O, [](float x, float y) {
        return y == 2.0f ? x * x : (y == 0.5f ? std::sqrt(x) : std::pow(x, y));
      });
      return true;
    default: break;
    }
  }
  bool floatMath = isFloat(a.dtype) || isFloat(b.dtype);
  bool ok = true;
  int64_t ia = w.innerStride(0), ib = w.innerStride(1);
  parallelFor(w.rows, w.grain(), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t oa = w.offset(0, r), ob = w.offset(1, r);
      for (int64_t i = 0; i < w.inner; ++i) {
        int64_t at = r * w.inner + i;
        if (floatMath) {
          double v = applyD(op, loadD(a.data, a.dtype, oa + i * ia),
                            loadD(b.data, b.dtype, ob + i * ib));
          storeD(o.data, o.dtype, at, v);
        } else {
          int64_t v;
          if (!applyI(op, loadI(a.data, a.dtype, oa + i * ia),
                      loadI(b.data, b.dtype, ob + i * ib), v)) {
            ok = false;
            v = 0;
          }
          storeI(o.data, o.dtype, at, v);
        }
      }
    }
  });
  if (!ok)
    return ctx.fail("integer division by zero");
  return true;
}

enum class Un { Neg, Abs, Exp, Log, Sqrt, Reciprocal, Erf, Tanh, Relu, Sigmoid, Not };

/// The f32 unary ops that vectorize (exp, erf, tanh, log and sigmoid
/// through Vec.h); false for the others. n = 0 asks only whether `op` is
/// one of them.
DS_CLONES bool unaryRowF32(Un op, const float *x, float *y, int64_t n) {
  switch (op) {
  case Un::Exp: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = fastExp(x[i]); return true;
  case Un::Erf: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = fastErf(x[i]); return true;
  case Un::Tanh: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = fastTanh(x[i]); return true;
  case Un::Log: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = fastLog(x[i]); return true;
  case Un::Abs: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]); return true;
  case Un::Sigmoid:
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + fastExp(-x[i]));
    return true;
  case Un::Relu: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i]; return true;
  case Un::Neg: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = -x[i]; return true;
  case Un::Sqrt: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]); return true;
  case Un::Reciprocal: DS_VECTORIZE for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / x[i]; return true;
  default: return false;
  }
}

template <typename F>
void unaryF32(const float *X, float *Y, int64_t n, F f) {
  parallelFor(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      Y[i] = f(X[i]);
  });
}

double applyU(Un op, double x) {
  switch (op) {
  case Un::Neg: return -x;
  case Un::Abs: return std::fabs(x);
  case Un::Exp: return std::exp(x);
  case Un::Log: return std::log(x);
  case Un::Sqrt: return std::sqrt(x);
  case Un::Reciprocal: return 1.0 / x;
  case Un::Erf: return std::erf(x);
  case Un::Tanh: return std::tanh(x);
  case Un::Relu: return x < 0 ? 0 : x;
  case Un::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
  case Un::Not: return x == 0;
  }
  return 0;
}

bool unary(KernelContext &ctx, Un op) {
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t n = y.numel();
  if (x.numel() != n)
    return ctx.fail("operand and result sizes differ");
  if (x.dtype == DType::F32 && y.dtype == DType::F32 &&
      unaryRowF32(op, x.as<float>(), y.as<float>(), 0)) {
    const float *X = x.as<float>();
    float *Y = y.as<float>();
    parallelFor(n, 16384, [&](int64_t b, int64_t e) {
      unaryRowF32(op, X + b, Y + b, e - b);
    });
    return true;
  }
  if (x.dtype == DType::F32 && y.dtype == DType::F32) {
    const float *X = x.as<float>();
    float *Y = y.as<float>();
    switch (op) {
    case Un::Neg: unaryF32(X, Y, n, [](float v) { return -v; }); return true;
    case Un::Abs: unaryF32(X, Y, n, [](float v) { return std::fabs(v); }); return true;
    case Un::Exp: unaryF32(X, Y, n, [](float v) { return std::exp(v); }); return true;
    case Un::Log: unaryF32(X, Y, n, [](float v) { return std::log(v); }); return true;
    case Un::Sqrt: unaryF32(X, Y, n, [](float v) { return std::sqrt(v); }); return true;
    case Un::Reciprocal: unaryF32(X, Y, n, [](float v) { return 1.0f / v; }); return true;
    case Un::Erf: unaryF32(X, Y, n, [](float v) { return std::erf(v); }); return true;
    case Un::Tanh: unaryF32(X, Y, n, [](float v) { return std::tanh(v); }); return true;
    case Un::Relu: unaryF32(X, Y, n, [](float v) { return v < 0.0f ? 0.0f : v; }); return true;
    case Un::Sigmoid: unaryF32(X, Y, n, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }); return true;
    case Un::Not: break;
    }
  }
  bool ints = !isFloat(x.dtype);
  parallelFor(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (ints) {
        int64_t v = loadI(x.data, x.dtype, i), r = 0;
        switch (op) {
        case Un::Neg: r = -v; break;
        case Un::Abs: r = v < 0 ? -v : v; break;
        case Un::Relu: r = v < 0 ? 0 : v; break;
        case Un::Not: r = v == 0; break;
        default: r = static_cast<int64_t>(applyU(op, static_cast<double>(v)));
        }
        storeI(y.data, y.dtype, i, r);
      } else {
        storeD(y.data, y.dtype, i, applyU(op, loadD(x.data, x.dtype, i)));
      }
    }
  });
  return true;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

#define BINARY(fn, op)                                                         \
  bool fn(KernelContext &ctx) { return binary(ctx, Bin::op); }
BINARY(kAdd, Add) BINARY(kSub, Sub) BINARY(kMul, Mul) BINARY(kDiv, Div)
BINARY(kPow, Pow) BINARY(kMax, Max) BINARY(kMin, Min) BINARY(kEqual, Eq)
BINARY(kLess, Lt) BINARY(kLessOrEqual, Le) BINARY(kGreater, Gt)
BINARY(kGreaterOrEqual, Ge) BINARY(kAnd, And) BINARY(kOr, Or) BINARY(kXor, Xor)
#undef BINARY

#define UNARY(fn, op)                                                          \
  bool fn(KernelContext &ctx) { return unary(ctx, Un::op); }
UNARY(kNeg, Neg) UNARY(kAbs, Abs) UNARY(kExp, Exp) UNARY(kLog, Log)
UNARY(kSqrt, Sqrt) UNARY(kReciprocal, Reciprocal) UNARY(kErf, Erf)
UNARY(kTanh, Tanh) UNARY(kRelu, Relu) UNARY(kSigmoid, Sigmoid) UNARY(kNot, Not)
#undef UNARY

bool kCast(KernelContext &ctx) {
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t n = y.numel();
  if (x.numel() != n)
    return ctx.fail("operand and result sizes differ");
  bool fromFloat = isFloat(x.dtype), toFloat = isFloat(y.dtype);
  parallelFor(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (fromFloat || toFloat) {
        double v = loadD(x.data, x.dtype, i);
        if (!toFloat && y.dtype != DType::Bool)
          v = std::trunc(v);
        storeD(y.data, y.dtype, i, v);
      } else {
        storeI(y.data, y.dtype, i, loadI(x.data, x.dtype, i));
      }
    }
  });
  return true;
}

template <typename T>
static void selectRow(char *out, const uint8_t *c, const char *x, const char *y,
                      int64_t n, int64_t ic, int64_t ix, int64_t iy) {
  T *o = reinterpret_cast<T *>(out);
  const T *xs = reinterpret_cast<const T *>(x);
  const T *ys = reinterpret_cast<const T *>(y);
  for (int64_t i = 0; i < n; ++i)
    o[i] = c[i * ic] ? xs[i * ix] : ys[i * iy];
}

bool kWhere(KernelContext &ctx) {
  const TensorView &c = ctx.in[0], &x = ctx.in[1], &yv = ctx.in[2];
  TensorView &o = ctx.out[0];
  if (!checkBroadcast(ctx, c, o) || !checkBroadcast(ctx, x, o) ||
      !checkBroadcast(ctx, yv, o))
    return false;
  RowWalk w(o.shape, {&c.shape, &x.shape, &yv.shape});
  size_t es = dtypeSize(o.dtype);
  const uint8_t *C = c.as<uint8_t>();
  const char *X = x.as<char>(), *Y = yv.as<char>();
  char *O = o.as<char>();
  int64_t ic = w.innerStride(0), ix = w.innerStride(1), iy = w.innerStride(2);
  parallelFor(w.rows, w.grain(), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t oc = w.offset(0, r), ox = w.offset(1, r), oy = w.offset(2, r);
      char *o = O + r * w.inner * es;
      switch (es) {
      case 4: selectRow<uint32_t>(o, C + oc, X + ox * es, Y + oy * es, w.inner, ic, ix, iy); break;
      case 8: selectRow<uint64_t>(o, C + oc, X + ox * es, Y + oy * es, w.inner, ic, ix, iy); break;
      case 2: selectRow<uint16_t>(o, C + oc, X + ox * es, Y + oy * es, w.inner, ic, ix, iy); break;
      default: selectRow<uint8_t>(o, C + oc, X + ox * es, Y + oy * es, w.inner, ic, ix, iy); break;
      }
    }
  });
  return true;
}

bool kDropout(KernelContext &ctx) {
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t n = x.numel();
  double ratio = ctx.attrs.getFloat("ratio", 0.5);
  bool training = ctx.attrs.getInt("training", 0) != 0;
  uint8_t *mask = ctx.out.size() > 1 ? ctx.out[1].as<uint8_t>() : nullptr;
  if (!training || ratio == 0.0) {
    if (y.data != x.data)
      std::memcpy(y.data, x.data, n * dtypeSize(x.dtype));
    if (mask)
      std::memset(mask, 1, n);
    return true;
  }
  uint64_t seed = ctx.attrs.has("seed")
                      ? static_cast<uint64_t>(ctx.attrs.getInt("seed"))
                      : ctx.seed;
  double scale = 1.0 / (1.0 - ratio);
  // Data parallel: rank r holds rows [r*B, (r+1)*B) of the global batch, so
  // its element i is element r*n + i of the global tensor; drawing by the
  // global index gives N ranks the masks one rank draws for the whole batch.
  uint64_t base = ctx.comm ? static_cast<uint64_t>(ctx.comm->rank()) *
                                 static_cast<uint64_t>(n)
                           : 0;
  parallelFor(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint64_t gi = base + static_cast<uint64_t>(i);
      double u = (splitmix64(seed ^ (gi * 0x9e37ULL)) >> 11) *
                 (1.0 / 9007199254740992.0);
      bool keep = u >= ratio;
      if (mask)
        mask[i] = keep;
      storeD(y.data, y.dtype, i, keep ? loadD(x.data, x.dtype, i) * scale : 0.0);
    }
  });
  return true;
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

/// The activation an instruction names, with its parameters.
struct ActivationParams {
  Activation kind = Activation::Clip;
  double alpha = 0, beta = 0;
};

static bool activationOf(KernelContext &ctx, ActivationParams &p) {
  std::string name = ctx.attrs.getString("kind");
  if (!activationFromName(name.c_str(), p.kind))
    return ctx.fail("unknown activation kind '" + name + "'");
  p.alpha = ctx.attrs.getFloat("alpha", 0);
  p.beta = ctx.attrs.getFloat("beta", 0);
  return true;
}

/// y = f(x), or with `grad` dx = dy * f'(x); x, dy and the result have one
/// size (the result may be either operand).
static bool activationKernel(KernelContext &ctx, bool grad) {
  ActivationParams p;
  if (!activationOf(ctx, p))
    return false;
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t n = y.numel();
  if (x.numel() != n || (grad && ctx.in[1].numel() != n))
    return ctx.fail("operand and result sizes differ");
  const TensorView *dy = grad ? &ctx.in[1] : nullptr;
  parallelFor(n, 8192, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double v = loadD(x.data, x.dtype, i);
      double r = grad ? loadD(dy->data, dy->dtype, i) *
                            activateGrad(p.kind, v, p.alpha, p.beta)
                      : activate(p.kind, v, p.alpha, p.beta);
      storeD(y.data, y.dtype, i, r);
    }
  });
  return true;
}

bool kActivation(KernelContext &ctx) { return activationKernel(ctx, false); }
bool kActivationGrad(KernelContext &ctx) { return activationKernel(ctx, true); }

void registerElementwiseKernels(KernelRegistry &r) {
  r.add("add", kAdd);
  r.add("sub", kSub);
  r.add("mul", kMul);
  r.add("div", kDiv);
  r.add("pow", kPow);
  r.add("max", kMax);
  r.add("min", kMin);
  r.add("equal", kEqual);
  r.add("less", kLess);
  r.add("less_or_equal", kLessOrEqual);
  r.add("greater", kGreater);
  r.add("greater_or_equal", kGreaterOrEqual);
  r.add("and", kAnd);
  r.add("or", kOr);
  r.add("xor", kXor);
  r.add("neg", kNeg);
  r.add("abs", kAbs);
  r.add("exp", kExp);
  r.add("log", kLog);
  r.add("sqrt", kSqrt);
  r.add("reciprocal", kReciprocal);
  r.add("erf", kErf);
  r.add("tanh", kTanh);
  r.add("relu", kRelu);
  r.add("sigmoid", kSigmoid);
  r.add("not", kNot);
  r.add("cast", kCast);
  r.add("where", kWhere);
  r.add("dropout", kDropout);
  r.add("activation", kActivation);
  r.add("activation_grad", kActivationGrad);
}

} // namespace ds::rt
