//===- Kernels.h - CPU kernels: interface and helpers -----------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CPU_KERNELS_H
#define DS_RUNTIME_CPU_KERNELS_H

#include "../Kernel.h"
#include "ds/Support/OneBit.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace ds {
struct ConvGeometry;
struct PoolGeometry;
} // namespace ds

namespace ds::rt {

/// The CPU backend's kernels: every kernel id has one.
const KernelRegistry &cpuKernels();
/// The CPU kernel of id `name` (cpuKernels().find), or null.
const KernelInfo *findKernel(const std::string &name);

// The CPU kernels' families, one file each, each registering its kernels.
void registerElementwiseKernels(KernelRegistry &r); // Elementwise.cpp
void registerLinalgKernels(KernelRegistry &r);      // Linalg.cpp
void registerConvKernels(KernelRegistry &r);        // Conv.cpp
void registerMovementKernels(KernelRegistry &r);    // Movement.cpp
void registerReduceKernels(KernelRegistry &r);      // Reduce.cpp
void registerGradKernels(KernelRegistry &r);        // Grad.cpp
void registerTensorParallelKernels(KernelRegistry &r); // TensorParallel.cpp
void registerOptimizerKernels(KernelRegistry &r);   // Optimizers.cpp
void registerCollectiveKernels(KernelRegistry &r);  // Collectives.cpp
void registerPipelineKernels(KernelRegistry &r);    // Pipeline.cpp
void registerPoolingKernels(KernelRegistry &r);     // Pooling.cpp
void registerTopKKernels(KernelRegistry &r);        // TopK.cpp (misc family)
void registerResizeKernels(KernelRegistry &r);      // Resize.cpp (spatial)
void registerOneBitKernels(KernelRegistry &r);      // OneBitAdam.cpp (issue 26)
void registerCompressedGatherKernels(KernelRegistry &r); // CompressedGather.cpp
void registerZeroOneKernels(KernelRegistry &r);     // ZeroOneAdam.cpp (issue 26)
void registerOneBitLambKernels(KernelRegistry &r);  // OneBitLamb.cpp (issue 26)
void registerZeroPPKernels(KernelRegistry &r);      // ZeroPP.cpp (ZeRO++)
void registerFusedKernels(KernelRegistry &r);       // Fused.cpp (fusion)
void registerAttentionKernels(KernelRegistry &r);   // Attention.cpp (speed)

/// The matmul kernel's path for operands read through a permutation
/// (perm_a/perm_b; MatMulPermuted.cpp, issue 24).
bool kMatMulPermuted(KernelContext &ctx);

/// The copy kernel (Movement.cpp), also a collective's local contribution.
bool kCopy(KernelContext &ctx);

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

/// A compressed optimizer's error-feedback buffers (`op`'s `worker` and
/// `server` elements): the padding of `n` elements for `world` ranks
/// (ds::onebit::paddedSize) and its world-th part; a plan compiled for
/// another world size fails here, naming the sizes.
inline bool checkOneBitErrors(KernelContext &ctx, const std::string &op,
                              int64_t n, int64_t worker, int64_t server,
                              int world) {
  if (worker == ::ds::onebit::paddedSize(n, world) && server * world == worker)
    return true;
  return ctx.fail(op + ": error buffers of " + std::to_string(worker) +
                  " and " + std::to_string(server) +
                  " elements are not the padding of " + std::to_string(n) +
                  " elements for " + std::to_string(world) +
                  " ranks (the plan was compiled for another world size)");
}

/// An optimizer's operands: f32 of the parameter's size, a scalar step
/// after the parameter, gradient and `states` state tensors; after the
/// accumulator, the clip coefficient: an f32 scalar.
inline bool checkOptimizerOperands(KernelContext &ctx, size_t states) {
  const TensorView &p = ctx.in[0];
  size_t stepIndex = 2 + states, clipIndex = 4 + states;
  if (ctx.in.size() > clipIndex &&
      (ctx.in[clipIndex].dtype != DType::F32 || ctx.in[clipIndex].numel() != 1))
    return ctx.fail("the optimizer's clip coefficient must be an f32 scalar");
  for (size_t i = 0; i < ctx.in.size(); ++i) {
    if (i == stepIndex || i == clipIndex)
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
/// Sizes the pool to `threads` (the caller counted) and sets OpenBLAS to
/// one thread: GEMMs split over the pool (sgemm below), so the pool's
/// threads are the only ones and the cores are not oversubscribed.
void setThreadCount(int threads);
int threadCount();

/// Row-major C = alpha op(A) op(B) + beta C (cblas_sgemm's operands) split
/// over the run's threads: by rows of C, or by columns when C is wider than
/// tall; one call when small or inside another parallelFor.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
           float alpha, const float *A, int64_t lda, const float *B,
           int64_t ldb, float beta, float *C, int64_t ldc);

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
// Convolution and pooling (Conv.cpp, Pooling.cpp; their CUDA twins too):
// the geometry of an instruction from its operands and attributes, or a
// failure naming the mismatch. Convolution: x, w, y (the forward's
// operands; the gradients pass theirs in that role). Pooling: `plain` the
// pooling's input, `pooled` its output (the forward's result, the
// gradient's incoming gradient).
bool convGeometryOf(KernelContext &ctx, const TensorView &x,
                    const TensorView &w, const TensorView &y, ConvGeometry &g);
bool poolGeometryOf(KernelContext &ctx, const TensorView &plain,
                    const TensorView &pooled, PoolGeometry &g);

bool gatherGeometry(KernelContext &ctx, const char *kernel,
                    const std::vector<int64_t> &table,
                    const TensorView &indices, int64_t gathered,
                    GatherGeometry &geo);
/// gatherGeometry without reading the indices (the CUDA kernels check them
/// on the device).
bool gatherShape(KernelContext &ctx, const char *kernel,
                 const std::vector<int64_t> &table, const TensorView &indices,
                 int64_t gathered, GatherGeometry &geo);

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

} // namespace ds::rt

#endif // DS_RUNTIME_CPU_KERNELS_H
