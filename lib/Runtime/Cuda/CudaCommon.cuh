//===- CudaCommon.cuh - shared pieces of the CUDA kernels -------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The CUDA backend's kernels take the CPU kernels' KernelContext with
// device pointers and launch on one stream; each follows its CPU twin in
// lib/Runtime/Cpu (same operands, attributes, accumulation in double where
// the CPU accumulates in double) so that the unit tests can compare them
// element by element. One file per family (Elementwise.cu, Reduce.cu,
// Linalg.cu, LayerNorm.cu, Losses.cu, Movement.cu, Grad.cu, Optimizers.cu,
// Collectives.cu, Conv.cu, Pooling.cu), each registering its kernels;
// CudaDevice.cu holds the device and its registry.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CUDA_CUDACOMMON_CUH
#define DS_RUNTIME_CUDA_CUDACOMMON_CUH

#include "../Device.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

namespace ds::rt::cuda {

/// The device's stream: every kernel launches on it.
extern cudaStream_t gStream;

constexpr int kMaxRank = 8;

/// Shapes and strides passed to kernels by value.
struct Layout {
  int rank = 0;
  int64_t shape[kMaxRank] = {};      // of the output
  int64_t strides[3][kMaxRank] = {}; // of up to three inputs (0: broadcast)
};

/// The broadcast layout of `ins` against `out` (numpy rules).
bool makeLayout(const TensorView &out, const std::vector<const TensorView *> &ins,
                Layout &l, std::string &err);

__device__ inline double load(const void *p, int dt, int64_t i) {
  switch (dt) {
  case 1: return static_cast<const float *>(p)[i];
  case 2: return __half2float(static_cast<const __half *>(p)[i]);
  case 3: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  case 4: return static_cast<double>(static_cast<const int64_t *>(p)[i]);
  case 5: return static_cast<const int32_t *>(p)[i];
  case 6: return static_cast<const uint8_t *>(p)[i] != 0;
  }
  return 0;
}

__device__ inline int64_t loadInt(const void *p, int dt, int64_t i) {
  switch (dt) {
  case 4: return static_cast<const int64_t *>(p)[i];
  case 5: return static_cast<const int32_t *>(p)[i];
  case 6: return static_cast<const uint8_t *>(p)[i] != 0;
  }
  return static_cast<int64_t>(load(p, dt, i));
}

__device__ inline void store(void *p, int dt, int64_t i, double v) {
  switch (dt) {
  case 1: static_cast<float *>(p)[i] = static_cast<float>(v); break;
  case 2: static_cast<__half *>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
  case 3:
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
    break;
  case 4: static_cast<int64_t *>(p)[i] = static_cast<int64_t>(v); break;
  case 5: static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v); break;
  case 6: static_cast<uint8_t *>(p)[i] = v != 0; break;
  }
}

__device__ inline void offsets(const Layout &l, int64_t i, int n, int64_t *off) {
  for (int k = 0; k < n; ++k)
    off[k] = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    int64_t c = i % l.shape[d];
    i /= l.shape[d];
    for (int k = 0; k < n; ++k)
      off[k] += c * l.strides[k][d];
  }
}

/// The sum of `v` over the block's threads (a power of two of them, at
/// most 256), by a tree in `part` (shared memory, free again on return);
/// every thread gets it.
__device__ inline double blockSum(double *part, double v) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  double sum = part[0];
  __syncthreads();
  return sum;
}

#define DS_GRID_LOOP(i, n)                                                     \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

inline unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(
      1, std::min<int64_t>((n + 255) / 256, 65535)));
}

/// After a launch: the launch error, if any, as the kernel's failure.
inline bool launched(KernelContext &ctx) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return ctx.fail(std::string("CUDA: ") + cudaGetErrorString(e));
  return true;
}

/// Copies `bytes` from the device to the host, waiting for the stream.
inline bool readBack(KernelContext &ctx, void *dst, const void *src,
                     size_t bytes) {
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, gStream) !=
          cudaSuccess ||
      cudaStreamSynchronize(gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

/// Copies `bytes` from the host to the device, waiting for the stream.
inline bool fromHost(KernelContext &ctx, void *d, const void *h,
                     size_t bytes) {
  if (cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, gStream) !=
          cudaSuccess ||
      cudaStreamSynchronize(gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

/// `n` floats of the device read back into `h` (resized).
inline bool toHost(KernelContext &ctx, std::vector<float> &h, const float *d,
                   int64_t n) {
  h.resize(static_cast<size_t>(n));
  return readBack(ctx, h.data(), d, static_cast<size_t>(n) * sizeof(float));
}

inline bool isFloatType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

/// Device-to-device bytes on the stream (nothing when `src` is `dst`).
inline bool copyDevice(KernelContext &ctx, const void *src, void *dst,
                       size_t bytes) {
  if (src != dst && bytes &&
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gStream) !=
          cudaSuccess)
    return launched(ctx);
  return true;
}

/// Scratch device memory for a kernel, freed on the stream.
struct Scratch {
  void *p = nullptr;
  explicit Scratch(size_t bytes) {
    if (cudaMallocAsync(&p, std::max<size_t>(bytes, 8), gStream) != cudaSuccess)
      p = nullptr;
  }
  ~Scratch() {
    if (p)
      cudaFreeAsync(p, gStream);
  }
  template <typename T> T *as() const { return static_cast<T *>(p); }
};

/// A device word where kernels report an index out of range: reset before
/// the launch, checked after it (LLONG_MIN: every index was in range).
class IndexCheck {
public:
  IndexCheck() : word(sizeof(long long)) {}
  long long *device() const { return word.as<long long>(); }
  bool reset(KernelContext &ctx) {
    long long none = LLONG_MIN;
    if (cudaMemcpyAsync(word.p, &none, sizeof none, cudaMemcpyHostToDevice,
                        gStream) != cudaSuccess)
      return launched(ctx);
    return true;
  }
  /// Fails naming `what` and [lo, hi) when a kernel reported an index.
  bool check(KernelContext &ctx, const char *what, int64_t lo, int64_t hi) {
    long long bad = 0;
    if (!readBack(ctx, &bad, word.p, sizeof bad))
      return false;
    if (bad != LLONG_MIN)
      return ctx.fail(std::string(what) + " " + std::to_string(bad) +
                      " is outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + ")");
    return true;
  }

private:
  Scratch word;
};

/// Gather and its gradient: the element of an (outer, dim, inner) table
/// that element `e` of the (outer, count, inner) gathered side reads, by
/// index `idx[j]`; -1 when that index is outside [-dim, dim) (then
/// reported in `*bad`, an IndexCheck's word).
__device__ inline int64_t gatherSource(int64_t e, const void *idx, int it,
                                       int64_t dim, int64_t count,
                                       int64_t inner, long long *bad) {
  int64_t i = e % inner, r = e / inner, j = r % count, o = r / count;
  int64_t k = loadInt(idx, it, j);
  if (k < -dim || k >= dim) {
    *bad = k;
    return -1;
  }
  if (k < 0)
    k += dim;
  return (o * dim + k) * inner + i;
}

/// A layout whose first operand walks `shape` at `strides`.
inline Layout contiguousLayout(const std::vector<int64_t> &shape,
                        const std::vector<int64_t> &strides) {
  Layout l;
  l.rank = static_cast<int>(shape.size());
  for (int d = 0; d < l.rank; ++d) {
    l.shape[d] = shape[d];
    l.strides[0][d] = strides[d];
  }
  return l;
}

// Shared between families.

/// dst = broadcast(src), converted to dst's type (Elementwise.cu).
bool copyBroadcast(KernelContext &ctx, const TensorView &src, TensorView &dst);
/// Loads cuBLAS and creates its handle on `stream` (Linalg.cu).
bool openCublas(cudaStream_t stream, std::string &err);

// The kernel families, one file each, each registering its kernels.
void registerElementwiseKernels(KernelRegistry &r); // Elementwise.cu
void registerReduceKernels(KernelRegistry &r);      // Reduce.cu
void registerLinalgKernels(KernelRegistry &r);      // Linalg.cu
void registerLayerNormKernels(KernelRegistry &r);   // LayerNorm.cu
void registerLossKernels(KernelRegistry &r);        // Losses.cu
void registerMovementKernels(KernelRegistry &r);    // Movement.cu
void registerGradKernels(KernelRegistry &r);        // Grad.cu
void registerOptimizerKernels(KernelRegistry &r);   // Optimizers.cu
void registerCollectiveKernels(KernelRegistry &r);  // Collectives.cu
void registerConvKernels(KernelRegistry &r);        // Conv.cu
void registerPoolingKernels(KernelRegistry &r);     // Pooling.cu
void registerTopKKernels(KernelRegistry &r);        // TopK.cu (misc family)
void registerResizeKernels(KernelRegistry &r);      // Resize.cu (spatial)
void registerFusedKernels(KernelRegistry &r);       // Fused.cu (fusion)
void registerAttentionKernels(KernelRegistry &r);   // Attention.cu (speed)
void registerZeroOneKernels(KernelRegistry &r);     // ZeroOneAdam.cu (issue 26)
void registerOneBitLambKernels(KernelRegistry &r);  // OneBitLamb.cu (issue 26)
void registerZeroPPKernels(KernelRegistry &r);      // ZeroPP.cu (ZeRO++)

} // namespace ds::rt::cuda

#endif // DS_RUNTIME_CUDA_CUDACOMMON_CUH
