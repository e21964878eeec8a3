//===- Kernels.h - CPU kernels: interface and helpers -----------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CPU_KERNELS_H
#define DS_RUNTIME_CPU_KERNELS_H

#include "ds/Runtime/Runtime.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ds::plan {
class Instruction;
}

namespace ds::rt {

class Communicator;

/// A kernel operand: storage owned by the executor.
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// The instruction's attributes.
class Attrs {
public:
  explicit Attrs(const plan::Instruction *ins) : ins(ins) {}
  bool has(const char *name) const;
  int64_t getInt(const char *name, int64_t dflt = 0) const;
  double getFloat(const char *name, double dflt = 0) const;
  std::string getString(const char *name, const std::string &dflt = "") const;
  std::vector<int64_t> getInts(const char *name) const;

private:
  const plan::Instruction *ins;
};

struct KernelContext {
  std::vector<TensorView> in, out;
  Attrs attrs;
  uint64_t seed = 0; // for random kernels: differs per instruction and run
  std::string error; // set by a kernel that fails
  double lr = NAN;   // learning-rate override (ds-run --lr); NaN: the plan's
  Communicator *comm = nullptr; // for collective kernels
  /// Collectives in flight (async kernels), by their output's address: the
  /// "wait" kernel finishes the one whose output it reads last.
  std::map<const void *, int> *inflight = nullptr;
  /// The step's loss-scaler state: check_overflow sets `overflow` (and,
  /// with `inject`, first turns one gradient element into inf); the
  /// optimizer kernels then keep parameters and state.
  struct StepState {
    bool overflow = false;
    bool inject = false;
  } *step = nullptr;
  /// Pipeline parallelism: every rank, the ranks per stage (a peer stage's
  /// rank is this one plus a multiple of it) and the micro-batch running.
  Communicator *pipe = nullptr;
  int pipeStride = 0;
  int micro = 0;
  bool fail(const std::string &message) {
    error = message;
    return false;
  }
};

using KernelFn = bool (*)(KernelContext &ctx);

struct KernelInfo {
  const char *name;
  int minIn, maxIn, minOut, maxOut;
  KernelFn fn;
};

const KernelInfo *findKernel(const std::string &name);

// Operand checks shared by the CPU kernels and their CUDA twins (they read
// shapes and types only, never data).

/// A collective's whole tensor is `world` shards of `shard`'s size;
/// `count` gets the shard's elements.
inline bool checkShards(KernelContext &ctx, const TensorView &whole,
                        const TensorView &shard, int world, int64_t &count) {
  count = shard.numel();
  if (whole.numel() != count * world)
    return ctx.fail("a " + std::to_string(whole.numel()) +
                    "-element tensor is not " + std::to_string(world) +
                    " shards of " + std::to_string(count));
  return true;
}

/// An optimizer's operands: f32 of the parameter's size, a scalar step
/// after the parameter, gradient and `states` state tensors.
inline bool checkOptimizerOperands(KernelContext &ctx, size_t states) {
  const TensorView &p = ctx.in[0];
  size_t stepIndex = 2 + states;
  for (size_t i = 0; i < ctx.in.size(); ++i) {
    if (i == stepIndex)
      continue;
    if (ctx.in[i].dtype != DType::F32 || ctx.in[i].numel() != p.numel())
      return ctx.fail("optimizer operands must be f32 of the parameter's size");
  }
  if (ctx.in[stepIndex].numel() != 1)
    return ctx.fail("optimizer step must be a scalar");
  return true;
}

// 16-bit float storage.
inline float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { // subnormal
      exp = 127 - 15 + 1;
      while ((man & 0x400) == 0) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ff;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) // rounds to >= 65520: inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (absx < 0x38800000u) { // subnormal or zero in half
    float a;
    std::memcpy(&a, &absx, 4);
    // Round to nearest even at 2^-24 granularity.
    float scaled = a * 16777216.0f; // 2^24
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((absx >> 23) - 127 + 15);
  uint32_t man = absx & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

/// Element i of a tensor as double / int64, whatever its storage.
inline double loadD(const void *p, DType t, int64_t i) {
  switch (t) {
  case DType::F32: return static_cast<const float *>(p)[i];
  case DType::F16: return halfToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::BF16: return bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::I64: return static_cast<double>(static_cast<const int64_t *>(p)[i]);
  case DType::I32: return static_cast<const int32_t *>(p)[i];
  case DType::Bool: return static_cast<const uint8_t *>(p)[i] != 0;
  }
  return 0;
}
inline int64_t loadI(const void *p, DType t, int64_t i) {
  switch (t) {
  case DType::I64: return static_cast<const int64_t *>(p)[i];
  case DType::I32: return static_cast<const int32_t *>(p)[i];
  case DType::Bool: return static_cast<const uint8_t *>(p)[i] != 0;
  default: return static_cast<int64_t>(loadD(p, t, i));
  }
}
inline void storeD(void *p, DType t, int64_t i, double v) {
  switch (t) {
  case DType::F32: static_cast<float *>(p)[i] = static_cast<float>(v); break;
  case DType::F16: static_cast<uint16_t *>(p)[i] = floatToHalf(static_cast<float>(v)); break;
  case DType::BF16: static_cast<uint16_t *>(p)[i] = floatToBf16(static_cast<float>(v)); break;
  case DType::I64: static_cast<int64_t *>(p)[i] = static_cast<int64_t>(v); break;
  case DType::I32: static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v); break;
  case DType::Bool: static_cast<uint8_t *>(p)[i] = v != 0; break;
  }
}
inline void storeI(void *p, DType t, int64_t i, int64_t v) {
  switch (t) {
  case DType::I64: static_cast<int64_t *>(p)[i] = v; break;
  case DType::I32: static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v); break;
  case DType::Bool: static_cast<uint8_t *>(p)[i] = v != 0; break;
  default: storeD(p, t, i, static_cast<double>(v)); break;
  }
}

/// Runs fn(begin, end) over [0, n) split across the runtime's threads;
/// serially when n is below `grain`.
void parallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &fn);
void setThreadCount(int threads);
int threadCount();

/// Product of shape[from, to) (1 when empty): outer, dim and inner sizes
/// of axis-based kernels.
inline int64_t prod(const std::vector<int64_t> &shape, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to && i < shape.size(); ++i)
    n *= shape[i];
  return n;
}

/// Gather along `axis` of a table of shape `table`, by `indices`: the
/// outer/dim/inner sizes, checked against the other side's element count
/// (`gathered`) and every index (in [-dim, dim)). Shared by gather and its
/// gradient so that both read indices the same way.
struct GatherGeometry {
  int64_t outer = 0, dim = 0, inner = 0, count = 0;
  /// Index j of `indices`, made non-negative.
  int64_t index(const TensorView &indices, int64_t j) const {
    int64_t i = loadI(indices.data, indices.dtype, j);
    return i < 0 ? i + dim : i;
  }
};
bool gatherGeometry(KernelContext &ctx, const char *kernel,
                    const std::vector<int64_t> &table,
                    const TensorView &indices, int64_t gathered,
                    GatherGeometry &geo);

/// Strides of a row-major shape.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape);
/// Strides of `in` aligned to an output of rank `outRank` with broadcast
/// dimensions given stride 0.
std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &in,
                                      size_t outRank);

/// A strided slice of `whole` (attributes starts, steps) that has the shape
/// of `part`: the strides of `part`'s dimensions in `whole` and the offset
/// of its first element. Fails, naming `what`, when the attributes do not
/// fit or the slice leaves `whole`. Shared by slice and slice_grad (CPU and
/// CUDA).
inline bool sliceGeometry(KernelContext &ctx, const char *what,
                          const TensorView &whole, const TensorView &part,
                          std::vector<int64_t> &strides, int64_t &base) {
  std::vector<int64_t> starts = ctx.attrs.getInts("starts");
  std::vector<int64_t> steps = ctx.attrs.getInts("steps");
  if (static_cast<int64_t>(starts.size()) != whole.rank() ||
      static_cast<int64_t>(steps.size()) != whole.rank() ||
      part.rank() != whole.rank())
    return ctx.fail(std::string(what) + " needs a start and step per dimension");
  std::vector<int64_t> wholeStrides = stridesOf(whole.shape);
  strides.assign(whole.rank(), 0);
  base = 0;
  for (int64_t d = 0; d < whole.rank(); ++d) {
    if (part.shape[d] > 0) {
      int64_t last = starts[d] + (part.shape[d] - 1) * steps[d];
      if (starts[d] < 0 || starts[d] >= whole.shape[d] || last < 0 ||
          last >= whole.shape[d])
        return ctx.fail(std::string(what) + " leaves its input");
    }
    strides[d] = wholeStrides[d] * steps[d];
    base += starts[d] * wholeStrides[d];
  }
  return true;
}

// Kernel entry points, by file.
#define DS_KERNEL(name) bool name(KernelContext &ctx)
// Elementwise.cpp
DS_KERNEL(kAdd); DS_KERNEL(kSub); DS_KERNEL(kMul); DS_KERNEL(kDiv);
DS_KERNEL(kPow); DS_KERNEL(kMax); DS_KERNEL(kMin); DS_KERNEL(kEqual);
DS_KERNEL(kLess); DS_KERNEL(kLessOrEqual); DS_KERNEL(kGreater);
DS_KERNEL(kGreaterOrEqual); DS_KERNEL(kAnd); DS_KERNEL(kOr); DS_KERNEL(kXor);
DS_KERNEL(kNeg); DS_KERNEL(kAbs); DS_KERNEL(kExp); DS_KERNEL(kLog);
DS_KERNEL(kSqrt); DS_KERNEL(kReciprocal); DS_KERNEL(kErf); DS_KERNEL(kTanh);
DS_KERNEL(kRelu); DS_KERNEL(kSigmoid); DS_KERNEL(kNot); DS_KERNEL(kCast);
DS_KERNEL(kWhere); DS_KERNEL(kDropout);
// Linalg.cpp
DS_KERNEL(kMatMul); DS_KERNEL(kGemm); DS_KERNEL(kSoftmax);
DS_KERNEL(kLogSoftmax); DS_KERNEL(kLayerNorm);
DS_KERNEL(kSoftmaxCrossEntropyLoss); DS_KERNEL(kNllLoss);
DS_KERNEL(kVocabGather); DS_KERNEL(kVocabGatherGrad);
DS_KERNEL(kVocabCrossEntropy); DS_KERNEL(kVocabCrossEntropyGrad);
DS_KERNEL(kTpRows); DS_KERNEL(kSpAllGather); DS_KERNEL(kSpReduceScatter);
// Movement.cpp
DS_KERNEL(kGather); DS_KERNEL(kExpand); DS_KERNEL(kTranspose);
DS_KERNEL(kConcat); DS_KERNEL(kSplit); DS_KERNEL(kSlice); DS_KERNEL(kTrilu);
DS_KERNEL(kCopy); DS_KERNEL(kRange); DS_KERNEL(kReshape);
// Reduce.cpp
DS_KERNEL(kReduceSum); DS_KERNEL(kReduceMean); DS_KERNEL(kReduceMax);
// Grad.cpp
DS_KERNEL(kGatherGrad); DS_KERNEL(kLayerNormGrad); DS_KERNEL(kSoftmaxGrad);
DS_KERNEL(kLossGrad); DS_KERNEL(kSliceGrad);
// Optimizers.cpp
DS_KERNEL(kAdam); DS_KERNEL(kSgd); DS_KERNEL(kOnnxUpdate);
// Collectives.cpp
DS_KERNEL(kAllReduce);
DS_KERNEL(kAllGather);
DS_KERNEL(kReduceScatter);
DS_KERNEL(kShard);
DS_KERNEL(kWait);
// Pipeline.cpp
DS_KERNEL(kPipeSend); DS_KERNEL(kPipeRecv); DS_KERNEL(kPipeMark);
DS_KERNEL(kTiedGradSum);
DS_KERNEL(kCheckOverflow);
#undef DS_KERNEL

} // namespace ds::rt

#endif // DS_RUNTIME_CPU_KERNELS_H
