//===- Fused.cpp - the fused elementwise CPU kernel -----------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `fused_elementwise` (--ds-fuse-elementwise) evaluates its program
// (include/ds/Support/FusedProgram.h) over the output in blocks of up to
// kBlock elements of one row: inputs read in place (unit stride) or as one
// broadcast value (stride 0), each instruction one vectorized loop into a
// block-sized register, the last one straight into the output. Each
// instruction is the expression of the unfused f32 kernel
// (Elementwise.cpp), with the same Vec.h approximations, so results are
// bit-identical to the chain of kernels. Work items (row, block) are split
// over the run's threads.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "RowWalk.h"
#include "Vec.h"
#include "ds/Support/FusedProgram.h"

#include <algorithm>

namespace ds::rt {
namespace {

constexpr int64_t kBlock = 256;

// The row loops below are inlined into evalInstruction, so they are built
// for its AVX2 clone too (an out-of-line template would be baseline code).
#if defined(__clang__) || defined(__GNUC__)
#define DS_INLINE inline __attribute__((always_inline))
#else
#define DS_INLINE inline
#endif

/// A block-sized operand: `p[i]`, or `p[0]` for every i when `scalar`.
struct Operand {
  const float *p = nullptr;
  bool scalar = false;
};

template <typename F>
DS_INLINE void unary(Operand a, float *o, int64_t n, F f) {
  if (a.scalar) {
    float v = f(a.p[0]);
    for (int64_t i = 0; i < n; ++i)
      o[i] = v;
    return;
  }
  DS_VECTORIZE for (int64_t i = 0; i < n; ++i) o[i] = f(a.p[i]);
}

template <typename F>
DS_INLINE void binary(Operand a, Operand b, float *o, int64_t n, F f) {
  const float *x = a.p, *y = b.p;
  if (!a.scalar && !b.scalar) {
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
  } else if (!a.scalar) {
    float yv = y[0];
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
  } else if (!b.scalar) {
    float xv = x[0];
    DS_VECTORIZE for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
  } else {
    float v = f(x[0], y[0]);
    for (int64_t i = 0; i < n; ++i)
      o[i] = v;
  }
}

/// max/min as the unfused kernel computes them (through double: NaN in,
/// NaN out).
inline float maxF(float x, float y) { return x != x || y != y ? NAN : std::max(x, y); }
inline float minF(float x, float y) { return x != x || y != y ? NAN : std::min(x, y); }
/// pow as Elementwise.cpp's f32 path.
inline float powF(float x, float y) {
  return y == 2.0f ? x * x : (y == 0.5f ? std::sqrt(x) : std::pow(x, y));
}

/// One instruction over a block of n elements into `o`.
DS_CLONES void evalInstruction(FusedOp op, Operand a, Operand b, Operand c,
                               float *o, int64_t n) {
  switch (op) {
  case FusedOp::Add: binary(a, b, o, n, [](float x, float y) { return x + y; }); break;
  case FusedOp::Sub: binary(a, b, o, n, [](float x, float y) { return x - y; }); break;
  case FusedOp::Mul: binary(a, b, o, n, [](float x, float y) { return x * y; }); break;
  case FusedOp::Div: binary(a, b, o, n, [](float x, float y) { return x / y; }); break;
  case FusedOp::Pow: binary(a, b, o, n, powF); break;
  case FusedOp::Max: binary(a, b, o, n, maxF); break;
  case FusedOp::Min: binary(a, b, o, n, minF); break;
  case FusedOp::Neg: unary(a, o, n, [](float x) { return -x; }); break;
  case FusedOp::Abs: unary(a, o, n, [](float x) { return std::fabs(x); }); break;
  case FusedOp::Exp: unary(a, o, n, [](float x) { return fastExp(x); }); break;
  case FusedOp::Log: unary(a, o, n, [](float x) { return fastLog(x); }); break;
  case FusedOp::Sqrt: unary(a, o, n, [](float x) { return std::sqrt(x); }); break;
  case FusedOp::Reciprocal: unary(a, o, n, [](float x) { return 1.0f / x; }); break;
  case FusedOp::Erf: unary(a, o, n, [](float x) { return fastErf(x); }); break;
  case FusedOp::Tanh: unary(a, o, n, [](float x) { return fastTanh(x); }); break;
  case FusedOp::Relu: unary(a, o, n, [](float x) { return x < 0.0f ? 0.0f : x; }); break;
  case FusedOp::Sigmoid:
    unary(a, o, n, [](float x) { return 1.0f / (1.0f + fastExp(-x)); });
    break;
  case FusedOp::Where: {
    // The condition is a mask input as 0/1; x and y are selected bitwise.
    for (int64_t i = 0; i < n; ++i) {
      bool take = a.p[a.scalar ? 0 : i] != 0.0f;
      o[i] = take ? b.p[b.scalar ? 0 : i] : c.p[c.scalar ? 0 : i];
    }
    break;
  }
  }
}

/// The kernel's operands checked: an f32 output, f32 or bool inputs that
/// broadcast to it, a valid program.
bool checkFused(KernelContext &ctx, const std::vector<int64_t> &program,
                int64_t numConstants) {
  const TensorView &o = ctx.out[0];
  if (o.dtype != DType::F32)
    return ctx.fail("fused_elementwise: the result is not f32");
  std::vector<bool> mask;
  for (size_t k = 0; k < ctx.in.size(); ++k) {
    const TensorView &t = ctx.in[k];
    if (t.dtype != DType::F32 && t.dtype != DType::Bool)
      return ctx.fail("fused_elementwise: input " + std::to_string(k) +
                      " is neither f32 nor bool");
    bool fits = t.shape.size() <= o.shape.size();
    size_t off = o.shape.size() - std::min(o.shape.size(), t.shape.size());
    for (size_t d = 0; fits && d < t.shape.size(); ++d)
      fits = t.shape[d] == 1 || t.shape[d] == o.shape[d + off];
    if (!fits)
      return ctx.fail("fused_elementwise: input " + std::to_string(k) +
                      " does not broadcast to the result");
    mask.push_back(t.dtype == DType::Bool);
  }
  std::string error = checkFusedProgram(program, mask, numConstants);
  if (!error.empty())
    return ctx.fail("fused_elementwise: " + error);
  return true;
}

bool kFusedElementwise(KernelContext &ctx) {
  std::vector<int64_t> program = ctx.attrs.getInts("program");
  std::vector<double> constants64 = ctx.attrs.getFloats("constants");
  if (!checkFused(ctx, program, static_cast<int64_t>(constants64.size())))
    return false;
  std::vector<float> constants(constants64.begin(), constants64.end());
  TensorView &out = ctx.out[0];
  if (out.numel() == 0)
    return true;
  std::vector<const std::vector<int64_t> *> shapes;
  for (const TensorView &t : ctx.in)
    shapes.push_back(&t.shape);
  RowWalk w(out.shape, shapes);
  size_t numIn = ctx.in.size(), numIns = program.size() / 4;
  int64_t blocks = (w.inner + kBlock - 1) / kBlock;
  int64_t perItem = std::min(w.inner, kBlock);
  float *O = out.as<float>();
  parallelFor(w.rows * blocks, std::max<int64_t>(1, 32768 / std::max<int64_t>(perItem, 1)),
              [&](int64_t i0, int64_t i1) {
    // Registers: the inputs' blocks (masks converted, broadcast values),
    // then the instructions' results.
    std::vector<float> scratch((numIn + numIns) * kBlock);
    std::vector<Operand> reg(numIn + numIns);
    for (int64_t item = i0; item < i1; ++item) {
      int64_t r = item / blocks, j0 = (item % blocks) * kBlock;
      int64_t n = std::min(kBlock, w.inner - j0);
      for (size_t k = 0; k < numIn; ++k) {
        const TensorView &t = ctx.in[k];
        bool scalar = w.innerStride(k) == 0;
        int64_t at = w.offset(k, r) + (scalar ? 0 : j0);
        float *buf = scratch.data() + k * kBlock;
        if (t.dtype == DType::F32) {
          reg[k] = {t.as<float>() + at, scalar};
          continue;
        }
        const uint8_t *m = t.as<uint8_t>() + at;
        for (int64_t i = 0; i < (scalar ? 1 : n); ++i)
          buf[i] = m[i] ? 1.0f : 0.0f;
        reg[k] = {buf, scalar};
      }
      auto operand = [&](int64_t ref) -> Operand {
        return ref < 0 ? Operand{&constants[-ref - 1], true} : reg[ref];
      };
      for (size_t q = 0; q < numIns; ++q) {
        const int64_t *ins = &program[4 * q];
        float *dst = q + 1 == numIns ? O + r * w.inner + j0
                                     : scratch.data() + (numIn + q) * kBlock;
        evalInstruction(static_cast<FusedOp>(ins[0]), operand(ins[1]),
                        operand(ins[2]), operand(ins[3]), dst, n);
        reg[numIn + q] = {dst, false};
      }
    }
  });
  return true;
}

} // namespace

void registerFusedKernels(KernelRegistry &r) {
  r.add("fused_elementwise", kFusedElementwise);
}

} // namespace ds::rt
