//===- CudaCommon.cuh - shared pieces of the CUDA kernels ------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CUDA_CUDACOMMON_CUH
#define DS_RUNTIME_CUDA_CUDACOMMON_CUH

#include "../Device.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

inline bool isFloatType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// The training kernels (CudaTraining.cu), for the registry.
#define DS_CUDA_KERNEL(name) bool name(KernelContext &ctx)
DS_CUDA_KERNEL(kGather); DS_CUDA_KERNEL(kGatherGrad); DS_CUDA_KERNEL(kExpand);
DS_CUDA_KERNEL(kConcat); DS_CUDA_KERNEL(kSplit); DS_CUDA_KERNEL(kSlice);
DS_CUDA_KERNEL(kSliceGrad); DS_CUDA_KERNEL(kTrilu); DS_CUDA_KERNEL(kRange);
DS_CUDA_KERNEL(kDropout); DS_CUDA_KERNEL(kLayerNorm);
DS_CUDA_KERNEL(kLayerNormGrad); DS_CUDA_KERNEL(kSoftmaxGrad);
DS_CUDA_KERNEL(kSoftmaxCrossEntropyLoss); DS_CUDA_KERNEL(kNllLoss);
DS_CUDA_KERNEL(kLossGrad); DS_CUDA_KERNEL(kAdam); DS_CUDA_KERNEL(kSgd);
DS_CUDA_KERNEL(kCheckOverflow); DS_CUDA_KERNEL(kAllReduce);
DS_CUDA_KERNEL(kAllGather); DS_CUDA_KERNEL(kReduceScatter);
DS_CUDA_KERNEL(kShard); DS_CUDA_KERNEL(kWait); DS_CUDA_KERNEL(kOnnxUpdate);
#undef DS_CUDA_KERNEL

} // namespace ds::rt::cuda

#endif // DS_RUNTIME_CUDA_CUDACOMMON_CUH
