//===- Elementwise.cu - elementwise CUDA kernels --------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Binary and unary ops broadcast (numpy rules) through a Layout of the
// operands' strides, one thread per output element; f32 operands compute
// in float as the CPU kernels, other types in double. Also where, cast,
// dropout and the activations (the CPU's Elementwise.cpp family; the
// activations' math is Support/Activation.h's, shared with the CPU).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "ds/Runtime/Comm.h"
#include "ds/Support/Activation.h"

namespace ds::rt::cuda {

bool makeLayout(const TensorView &out, const std::vector<const TensorView *> &ins,
                Layout &l, std::string &err) {
  if (out.rank() > kMaxRank) {
    err = "rank above 8";
    return false;
  }
  l.rank = static_cast<int>(out.rank());
  for (int d = 0; d < l.rank; ++d)
    l.shape[d] = out.shape[d];
  for (size_t k = 0; k < ins.size(); ++k) {
    const TensorView &t = *ins[k];
    if (t.rank() > out.rank()) {
      err = "an operand has a higher rank than the result";
      return false;
    }
    int64_t stride = 1;
    for (int d = l.rank - 1, s = static_cast<int>(t.rank()) - 1; d >= 0;
         --d, --s) {
      int64_t dim = s >= 0 ? t.shape[s] : 1;
      if (dim != 1 && dim != l.shape[d]) {
        err = "operands do not broadcast";
        return false;
      }
      l.strides[k][d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }
  return true;
}

namespace {

enum Op : int {
  Add, Sub, Mul, Div, Pow, Max, Min, Eq, Lt, Le, Gt, Ge, And, Or, Xor,
  Neg, Abs, Exp, Log, Sqrt, Recip, Erf, Tanh, Relu, Sigmoid, Not, Copy
};

__device__ double apply(int op, double a, double b, bool isFloat) {
  switch (op) {
  case Add: return a + b;
  case Sub: return a - b;
  case Mul: return a * b;
  case Div:
    if (isFloat)
      return a / b;
    // Integer division truncates, as ONNX.
    return b == 0 ? 0 : static_cast<double>(static_cast<int64_t>(a) /
                                            static_cast<int64_t>(b));
  case Pow: return pow(a, b);
  case Max: return a > b || isnan(a) ? a : b;
  case Min: return a < b || isnan(a) ? a : b;
  case Eq: return a == b;
  case Lt: return a < b;
  case Le: return a <= b;
  case Gt: return a > b;
  case Ge: return a >= b;
  case And: return (a != 0) && (b != 0);
  case Or: return (a != 0) || (b != 0);
  case Xor: return (a != 0) != (b != 0);
  case Neg: return -a;
  case Abs: return fabs(a);
  case Exp: return exp(a);
  case Log: return log(a);
  case Sqrt: return sqrt(a);
  case Recip: return 1.0 / a;
  case Erf: return erf(a);
  case Tanh: return tanh(a);
  case Relu: return a > 0 ? a : 0;
  case Sigmoid: return 1.0 / (1.0 + exp(-a));
  case Not: return a == 0;
  case Copy: return a;
  }
  return 0;
}

/// Rounds `v` through f32 when the result is f32, so that f32 arithmetic
/// matches the CPU kernels' (which compute f32 ops in float).
__device__ double asFloat(double v, int dt) {
  return dt == 1 ? static_cast<double>(static_cast<float>(v)) : v;
}

__global__ void elementwise(int op, Layout l, int64_t n, const void *a,
                            int at, const void *b, int bt, void *o, int ot,
                            bool isFloat) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets(l, i, b ? 2 : 1, off);
    double x = load(a, at, off[0]);
    double y = b ? load(b, bt, off[1]) : 0;
    if (at == 1 && (!b || bt == 1)) { // f32 operands: compute in float
      x = static_cast<float>(x);
      y = static_cast<float>(y);
    }
    store(o, ot, i, asFloat(apply(op, x, y, isFloat), ot));
  }
}

__global__ void whereKernel(Layout l, int64_t n, const void *c, int ct,
                            const void *x, int xt, const void *y, int yt,
                            void *o, int ot) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets(l, i, 3, off);
    store(o, ot, i, load(c, ct, off[0]) != 0 ? load(x, xt, off[1])
                                             : load(y, yt, off[2]));
  }
}

/// o = op(a) or op(a, b), broadcast.
bool launchElementwise(KernelContext &ctx, int op, const TensorView &a,
                       const TensorView *b, TensorView &o) {
  Layout l;
  std::string err;
  std::vector<const TensorView *> ins = {&a};
  if (b)
    ins.push_back(b);
  if (!makeLayout(o, ins, l, err))
    return ctx.fail(err);
  int64_t n = o.numel();
  if (n == 0)
    return true;
  elementwise<<<blocksFor(n), 256, 0, gStream>>>(
      op, l, n, a.data, int(a.dtype), b ? b->data : nullptr,
      b ? int(b->dtype) : 0, o.data, int(o.dtype), isFloatType(a.dtype));
  return launched(ctx);
}

template <int OP> bool kBinary(KernelContext &ctx) {
  return launchElementwise(ctx, OP, ctx.in[0], &ctx.in[1], ctx.out[0]);
}

template <int OP> bool kUnary(KernelContext &ctx) {
  return launchElementwise(ctx, OP, ctx.in[0], nullptr, ctx.out[0]);
}

bool kWhere(KernelContext &ctx) {
  const TensorView &c = ctx.in[0], &x = ctx.in[1], &y = ctx.in[2];
  TensorView &o = ctx.out[0];
  Layout l;
  std::string err;
  if (!makeLayout(o, {&c, &x, &y}, l, err))
    return ctx.fail(err);
  int64_t n = o.numel();
  if (n == 0)
    return true;
  whereKernel<<<blocksFor(n), 256, 0, gStream>>>(
      l, n, c.data, int(c.dtype), x.data, int(x.dtype), y.data, int(y.dtype),
      o.data, int(o.dtype));
  return launched(ctx);
}

__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void dropoutKernel(const void *x, int xt, void *y, int yt,
                              uint8_t *mask, int64_t n, uint64_t seed,
                              uint64_t base, double ratio, double scale) {
  DS_GRID_LOOP(i, n) {
    uint64_t gi = base + static_cast<uint64_t>(i);
    double u = (splitmix64(seed ^ (gi * 0x9e37ULL)) >> 11) *
               (1.0 / 9007199254740992.0);
    bool keep = u >= ratio;
    if (mask)
      mask[i] = keep;
    store(y, yt, i, keep ? load(x, xt, i) * scale : 0.0);
  }
}

bool kDropout(KernelContext &ctx) {
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t n = x.numel();
  double ratio = ctx.attrs.getFloat("ratio", 0.5);
  bool training = ctx.attrs.getInt("training", 0) != 0;
  uint8_t *mask = ctx.out.size() > 1 ? ctx.out[1].as<uint8_t>() : nullptr;
  if (!training || ratio == 0.0) {
    if (!copyDevice(ctx, x.data, y.data, n * dtypeSize(x.dtype)))
      return false;
    if (mask && n && cudaMemsetAsync(mask, 1, n, gStream) != cudaSuccess)
      return launched(ctx);
    return true;
  }
  uint64_t seed = ctx.attrs.has("seed")
                      ? static_cast<uint64_t>(ctx.attrs.getInt("seed"))
                      : ctx.seed;
  uint64_t base = ctx.comm ? static_cast<uint64_t>(ctx.comm->rank()) *
                                 static_cast<uint64_t>(n)
                           : 0;
  if (n)
    dropoutKernel<<<blocksFor(n), 256, 0, gStream>>>(
        x.data, int(x.dtype), y.data, int(y.dtype), mask, n, seed, base, ratio,
        1.0 / (1.0 - ratio));
  return launched(ctx);
}

/// y = f(x), or with `dy` dx = dy * f'(x), as the CPU's activationKernel.
__global__ void activationKernel(Activation kind, double alpha, double beta,
                                 const void *x, int xt, const void *dy, int dt,
                                 void *y, int yt, int64_t n) {
  DS_GRID_LOOP(i, n) {
    double v = load(x, xt, i);
    double r = dy ? load(dy, dt, i) * activateGrad(kind, v, alpha, beta)
                  : activate(kind, v, alpha, beta);
    store(y, yt, i, r);
  }
}

template <bool Grad> bool kActivation(KernelContext &ctx) {
  std::string name = ctx.attrs.getString("kind");
  Activation kind;
  if (!activationFromName(name.c_str(), kind))
    return ctx.fail("unknown activation kind '" + name + "'");
  const TensorView &x = ctx.in[0];
  TensorView &y = ctx.out[0];
  int64_t n = y.numel();
  if (x.numel() != n || (Grad && ctx.in[1].numel() != n))
    return ctx.fail("operand and result sizes differ");
  if (n == 0)
    return true;
  activationKernel<<<blocksFor(n), 256, 0, gStream>>>(
      kind, ctx.attrs.getFloat("alpha", 0), ctx.attrs.getFloat("beta", 0),
      x.data, int(x.dtype), Grad ? ctx.in[1].data : nullptr,
      Grad ? int(ctx.in[1].dtype) : 0, y.data, int(y.dtype), n);
  return launched(ctx);
}

} // namespace

bool copyBroadcast(KernelContext &ctx, const TensorView &src,
                   TensorView &dst) {
  return launchElementwise(ctx, Copy, src, nullptr, dst);
}

void registerElementwiseKernels(KernelRegistry &r) {
  r.add("add", kBinary<Add>);
  r.add("sub", kBinary<Sub>);
  r.add("mul", kBinary<Mul>);
  r.add("div", kBinary<Div>);
  r.add("pow", kBinary<Pow>);
  r.add("max", kBinary<Max>);
  r.add("min", kBinary<Min>);
  r.add("equal", kBinary<Eq>);
  r.add("less", kBinary<Lt>);
  r.add("less_or_equal", kBinary<Le>);
  r.add("greater", kBinary<Gt>);
  r.add("greater_or_equal", kBinary<Ge>);
  r.add("and", kBinary<And>);
  r.add("or", kBinary<Or>);
  r.add("xor", kBinary<Xor>);
  r.add("neg", kUnary<Neg>);
  r.add("abs", kUnary<Abs>);
  r.add("exp", kUnary<Exp>);
  r.add("log", kUnary<Log>);
  r.add("sqrt", kUnary<Sqrt>);
  r.add("reciprocal", kUnary<Recip>);
  r.add("erf", kUnary<Erf>);
  r.add("tanh", kUnary<Tanh>);
  r.add("relu", kUnary<Relu>);
  r.add("sigmoid", kUnary<Sigmoid>);
  r.add("not", kUnary<Not>);
  r.add("cast", kUnary<Copy>);
  r.add("where", kWhere);
  r.add("dropout", kDropout);
  r.add("activation", kActivation<false>);
  r.add("activation_grad", kActivation<true>);
}

} // namespace ds::rt::cuda
