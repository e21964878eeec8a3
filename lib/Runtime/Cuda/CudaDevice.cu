//===- CudaDevice.cu - the CUDA backend: device, memory, registry ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// One device, one stream (every kernel launches on it), one cuBLAS handle,
// a copy stream for offload transfers. The device's kernels come from the
// family files (CudaCommon.cuh lists them), registered as the CPU's; a plan
// that needs a kernel without a CUDA version is refused when the executor
// is created, naming the kernel.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace ds::rt {
namespace cuda {

cudaStream_t gStream = nullptr;

void registerEmbeddingBagKernels(KernelRegistry &r); // EmbeddingBag.cu (misc)
void registerMultiTensorKernels(KernelRegistry &r);  // MultiTensor.cu

/// The CUDA kernels: every CPU kernel but pipeline and tensor parallelism's.
const KernelRegistry &cudaKernels() {
  static const KernelRegistry registry = KernelRegistry::of(
      {registerElementwiseKernels, registerLinalgKernels,
       registerMovementKernels, registerReduceKernels, registerLayerNormKernels,
       registerLossKernels, registerGradKernels, registerOptimizerKernels,
       registerCollectiveKernels, registerConvKernels, registerPoolingKernels,
       registerTopKKernels, registerEmbeddingBagKernels, registerResizeKernels,
       registerFusedKernels,
       registerAttentionKernels,
       registerZeroOneKernels, registerOneBitLambKernels,
       registerZeroPPKernels, registerMultiTensorKernels});
  return registry;
}

} // namespace cuda

namespace {
using namespace cuda;

class CudaDevice : public Device {
public:
  int index = 0;
  cudaDeviceProp prop{};

  std::string describe() const override {
    char buf[256];
    std::snprintf(buf, sizeof buf, "cuda:%d (%s, %.0f GiB, sm_%d%d)", index,
                  prop.name, prop.totalGlobalMem / 1073741824.0, prop.major,
                  prop.minor);
    return buf;
  }
  void *allocate(size_t bytes, std::string &err) override {
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (e != cudaSuccess) {
      err = "cannot allocate " + std::to_string(bytes) + " bytes on " +
            describe() + ": " + cudaGetErrorString(e);
      return nullptr;
    }
    return p;
  }
  void release(void *p) override { cudaFree(p); }
  bool toDevice(void *dst, const void *src, size_t bytes,
                std::string &err) override {
    // Default: UVA tells host from device (the host end may be pinned).
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, gStream),
                 err) &&
           synchronize(err);
  }
  bool toHost(void *dst, const void *src, size_t bytes,
              std::string &err) override {
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, gStream),
                 err) &&
           synchronize(err);
  }
  bool synchronize(std::string &err) override {
    return check(cudaStreamSynchronize(gStream), err) &&
           (!copyStream || check(cudaStreamSynchronize(copyStream), err));
  }
  bool pinHost(void *p, size_t bytes, std::string &err) override {
    if (!p || bytes == 0)
      return true;
    return check(cudaHostRegister(p, bytes, cudaHostRegisterDefault), err);
  }
  void unpinHost(void *p) override {
    if (p)
      cudaHostUnregister(p);
  }
  bool copyAsync(void *dst, const void *src, size_t bytes, int &handle,
                 std::string &err) override {
    if (!copyStream &&
        !check(cudaStreamCreateWithFlags(&copyStream, cudaStreamNonBlocking),
               err))
      return false;
    // The copy starts once the compute stream's work so far is done.
    cudaEvent_t after = event(err), done;
    if (!after || !check(cudaEventRecord(after, gStream), err) ||
        !check(cudaStreamWaitEvent(copyStream, after, 0), err))
      return false;
    recycle(after);
    if (bytes &&
        !check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copyStream),
               err))
      return false;
    if (!(done = event(err)) || !check(cudaEventRecord(done, copyStream), err))
      return false;
    handle = nextHandle++;
    pending[handle] = done;
    return true;
  }
  bool waitCopy(int handle, bool onHost, std::string &err) override {
    auto it = pending.find(handle);
    if (it == pending.end())
      return true;
    cudaEvent_t e = it->second;
    pending.erase(it);
    bool ok = onHost ? check(cudaEventSynchronize(e), err)
                     : check(cudaStreamWaitEvent(gStream, e, 0), err);
    recycle(e);
    return ok;
  }
  const KernelRegistry &kernels() const override { return cudaKernels(); }

  ~CudaDevice() override {
    for (auto &[h, e] : pending)
      cudaEventDestroy(e);
    for (cudaEvent_t e : spare)
      cudaEventDestroy(e);
  }

private:
  cudaStream_t copyStream = nullptr;
  std::map<int, cudaEvent_t> pending;
  std::vector<cudaEvent_t> spare; // events to reuse
  int nextHandle = 1;
  cudaEvent_t event(std::string &err) {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (!check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), err))
      return nullptr;
    return e;
  }
  void recycle(cudaEvent_t e) { spare.push_back(e); }
  static bool check(cudaError_t e, std::string &err) {
    if (e == cudaSuccess)
      return true;
    err = std::string("CUDA: ") + cudaGetErrorString(e);
    return false;
  }
};

} // namespace

bool builtWithCuda() { return true; }

bool cudaDeviceVisible() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<Device> openCudaDevice(std::string &err) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    err = std::string("no CUDA device is visible (") +
          (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
          "); use --backend=cpu";
    return nullptr;
  }
  // Ranks on one node take devices in turn: the launcher's local rank
  // (Open MPI, MVAPICH, Slurm, torchrun) modulo the visible devices.
  int local = 0;
  for (const char *var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
        "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  auto d = std::make_unique<CudaDevice>();
  d->index = local % n;
  if (cudaSetDevice(d->index) != cudaSuccess ||
      cudaGetDeviceProperties(&d->prop, d->index) != cudaSuccess ||
      (!gStream && cudaStreamCreateWithFlags(&gStream, cudaStreamNonBlocking) !=
                       cudaSuccess)) {
    err = "cannot initialize CUDA device 0";
    return nullptr;
  }
  if (!openCublas(gStream, err))
    return nullptr;
  return d;
}

} // namespace ds::rt
