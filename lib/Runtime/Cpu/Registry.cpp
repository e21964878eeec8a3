//===- Registry.cpp - the CPU kernel registry, shapes, threads ------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace ds::rt {

//===----------------------------------------------------------------------===//
// The CPU registry: every kernel id has a CPU kernel
//===----------------------------------------------------------------------===//

void registerEmbeddingBagKernels(KernelRegistry &r); // EmbeddingBag.cpp (misc)
void registerMultiTensorKernels(KernelRegistry &r);  // MultiTensor.cpp

const KernelRegistry &cpuKernels() {
  static const KernelRegistry registry = KernelRegistry::of(
      {registerElementwiseKernels, registerLinalgKernels, registerConvKernels,
       registerMovementKernels, registerReduceKernels, registerGradKernels,
       registerTensorParallelKernels, registerOptimizerKernels,
       registerCollectiveKernels, registerPipelineKernels,
       registerPoolingKernels, registerTopKKernels, registerEmbeddingBagKernels,
       registerResizeKernels,
       registerOneBitKernels, registerFusedKernels,
       registerAttentionKernels,
       registerZeroOneKernels, registerCompressedGatherKernels,
       registerOneBitLambKernels, registerZeroPPKernels,
       registerMultiTensorKernels});
  return registry;
}

const KernelInfo *findKernel(const std::string &name) {
  return cpuKernels().find(name);
}

std::vector<std::string> kernelNames() { return cpuKernels().names(); }

//===----------------------------------------------------------------------===//
// Shapes and dtypes
//===----------------------------------------------------------------------===//

bool gatherShape(KernelContext &ctx, const char *kernel,
                 const std::vector<int64_t> &table, const TensorView &indices,
                 int64_t gathered, GatherGeometry &geo) {
  int64_t axis = ctx.attrs.getInt("axis", 0);
  if (axis < 0 || axis >= static_cast<int64_t>(table.size()))
    return ctx.fail(std::string(kernel) + " axis out of range");
  geo.outer = prod(table, 0, axis);
  geo.dim = table[axis];
  geo.inner = prod(table, axis + 1, table.size());
  geo.count = indices.numel();
  if (gathered != geo.outer * geo.count * geo.inner)
    return ctx.fail(std::string(kernel) + " sizes do not match");
  return true;
}

bool gatherGeometry(KernelContext &ctx, const char *kernel,
                    const std::vector<int64_t> &table,
                    const TensorView &indices, int64_t gathered,
                    GatherGeometry &geo) {
  if (!gatherShape(ctx, kernel, table, indices, gathered, geo))
    return false;
  for (int64_t j = 0; j < geo.count; ++j) {
    int64_t i = loadI(indices.data, indices.dtype, j);
    if (i < -geo.dim || i >= geo.dim)
      return ctx.fail(std::string(kernel) + " index " + std::to_string(i) +
                      " is outside [" + std::to_string(-geo.dim) + ", " +
                      std::to_string(geo.dim) + ")");
  }
  return true;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &in,
                                      size_t outRank) {
  std::vector<int64_t> own = stridesOf(in), out(outRank, 0);
  size_t off = outRank - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    out[d + off] = in[d] == 1 ? 0 : own[d];
  return out;
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::Bool: return "bool";
  }
  return "?";
}

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F32: case DType::I32: return 4;
  case DType::F16: case DType::BF16: return 2;
  case DType::I64: return 8;
  case DType::Bool: return 1;
  }
  return 0;
}

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

//===----------------------------------------------------------------------===//
// Threads: a fixed pool; parallelFor splits a range into one chunk per
// thread, the caller taking the first. Between jobs a worker spins for a
// few tens of microseconds before it sleeps (a step runs hundreds of short
// kernels back to back; waking a sleeping thread costs about as much as
// one of them), and the caller spins likewise for the last chunk.
//===----------------------------------------------------------------------===//

extern "C" void openblas_set_num_threads(int);

namespace {
/// Spin iterations (a pause each, roughly 20 ns) before a thread sleeps.
constexpr int kSpin = 2000;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class Pool {
public:
  ~Pool() { resize(1); }
  void resize(int n) {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
      generation.fetch_add(1, std::memory_order_release);
    }
    cv.notify_all();
    for (std::thread &t : workers)
      t.join();
    workers.clear();
    stop = false;
    size = std::max(1, n);
    for (int i = 1; i < size; ++i)
      workers.emplace_back([this, i] { loop(i); });
  }
  int threads() const { return size; }
  void run(int64_t n, const std::function<void(int64_t, int64_t)> &fn) {
    int parts = static_cast<int>(std::min<int64_t>(size, n));
    {
      std::lock_guard<std::mutex> lock(m);
      job = &fn;
      total = n;
      active = parts;
      pending.store(parts - 1, std::memory_order_relaxed);
      generation.fetch_add(1, std::memory_order_release);
    }
    cv.notify_all();
    fn(0, chunkEnd(0));
    for (int i = 0; i < kSpin && pending.load(std::memory_order_acquire); ++i)
      cpuRelax();
    std::unique_lock<std::mutex> lock(m);
    done.wait(lock, [&] { return pending.load(std::memory_order_acquire) == 0; });
    job = nullptr;
  }

private:
  int64_t chunkEnd(int i) const { return total * (i + 1) / active; }
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      for (int i = 0;
           i < kSpin && generation.load(std::memory_order_acquire) == seen; ++i)
        cpuRelax();
      const std::function<void(int64_t, int64_t)> *fn;
      int64_t begin, end;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return generation.load() != seen; });
        seen = generation.load();
        if (stop)
          return;
        if (!job || index >= active)
          continue;
        fn = job;
        begin = total * index / active;
        end = chunkEnd(index);
      }
      (*fn)(begin, end);
      if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(m);
        done.notify_one();
      }
    }
  }
  std::vector<std::thread> workers;
  std::mutex m;
  std::condition_variable cv, done;
  const std::function<void(int64_t, int64_t)> *job = nullptr;
  int64_t total = 0;
  int active = 0, size = 1;
  std::atomic<int> pending{0};
  std::atomic<uint64_t> generation{0};
  bool stop = false;
};

Pool &pool() {
  static Pool p;
  return p;
}
std::mutex poolUse;
} // namespace

void setThreadCount(int threads) {
  pool().resize(threads);
  openblas_set_num_threads(1);
}
int threadCount() { return pool().threads(); }

void parallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  if (pool().threads() == 1 || n < 2 * std::max<int64_t>(grain, 1)) {
    fn(0, n);
    return;
  }
  // Kernels run one at a time; a nested call runs serially.
  std::unique_lock<std::mutex> lock(poolUse, std::try_to_lock);
  if (!lock.owns_lock()) {
    fn(0, n);
    return;
  }
  pool().run(n, fn);
}

} // namespace ds::rt
