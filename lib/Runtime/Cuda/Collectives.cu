//===- Collectives.cu - collectives over NCCL, the overflow check ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// NCCL is opened with dlopen, its communicator set up over MPI at the
// first collective; asynchronous collectives run on a second stream and
// the wait kernel makes the compute stream wait for their event. As the
// CPU's Collectives.cpp, the loss scaler's overflow check lives here (it
// agrees across ranks with an all-reduce).
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include "ds/Runtime/Comm.h"

#include <dlfcn.h>

namespace ds::rt::cuda {
namespace {

using ncclComm_t = void *;
struct NcclUniqueId {
  char internal[128];
};
enum NcclType { NcclInt64 = 4, NcclFloat16 = 6, NcclFloat32 = 7, NcclBfloat16 = 9 };
enum NcclOp { NcclSum = 0, NcclAvg = 4 };

struct Nccl {
  int (*getUniqueId)(NcclUniqueId *) = nullptr;
  int (*commInitRank)(ncclComm_t *, int, NcclUniqueId, int) = nullptr;
  int (*allReduce)(const void *, void *, size_t, int, int, ncclComm_t,
                   cudaStream_t) = nullptr;
  int (*allGather)(const void *, void *, size_t, int, ncclComm_t,
                   cudaStream_t) = nullptr;
  int (*reduceScatter)(const void *, void *, size_t, int, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  const char *(*errorString)(int) = nullptr;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr; // asynchronous collectives
  std::vector<cudaEvent_t> events; // by handle: a collective's completion
} gNccl;

bool ncclType(DType t, int &out) {
  switch (t) {
  case DType::F32: out = NcclFloat32; return true;
  case DType::F16: out = NcclFloat16; return true;
  case DType::BF16: out = NcclBfloat16; return true;
  case DType::I64: out = NcclInt64; return true;
  default: return false;
  }
}

/// NCCL's communicator for this plan's ranks: rank 0's unique id reaches
/// every rank through the MPI communicator (an all-gather of ids).
bool openNccl(KernelContext &ctx) {
  if (gNccl.comm)
    return true;
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return ctx.fail(std::string("cannot load NCCL (libnccl.so.2): ") + dlerror());
  auto sym = [&](const char *name) { return dlsym(lib, name); };
  gNccl.getUniqueId = reinterpret_cast<decltype(gNccl.getUniqueId)>(sym("ncclGetUniqueId"));
  gNccl.commInitRank = reinterpret_cast<decltype(gNccl.commInitRank)>(sym("ncclCommInitRank"));
  gNccl.allReduce = reinterpret_cast<decltype(gNccl.allReduce)>(sym("ncclAllReduce"));
  gNccl.allGather = reinterpret_cast<decltype(gNccl.allGather)>(sym("ncclAllGather"));
  gNccl.reduceScatter = reinterpret_cast<decltype(gNccl.reduceScatter)>(sym("ncclReduceScatter"));
  gNccl.errorString = reinterpret_cast<decltype(gNccl.errorString)>(sym("ncclGetErrorString"));
  if (!gNccl.getUniqueId || !gNccl.commInitRank || !gNccl.allReduce ||
      !gNccl.allGather || !gNccl.reduceScatter || !gNccl.errorString)
    return ctx.fail("libnccl.so.2 lacks the collectives ds needs");
  Communicator &mpi = *ctx.comm;
  NcclUniqueId mine{};
  if (mpi.rank() == 0 && gNccl.getUniqueId(&mine) != 0)
    return ctx.fail("ncclGetUniqueId failed");
  std::vector<NcclUniqueId> all(mpi.size());
  std::string err;
  if (!mpi.allGather(&mine, all.data(), sizeof(NcclUniqueId) / 4, DType::I32,
                     err))
    return ctx.fail(err);
  int rc = gNccl.commInitRank(&gNccl.comm, mpi.size(), all[0], mpi.rank());
  if (rc != 0)
    return ctx.fail(std::string("ncclCommInitRank: ") + gNccl.errorString(rc));
  if (cudaStreamCreateWithFlags(&gNccl.stream, cudaStreamNonBlocking) !=
      cudaSuccess)
    return launched(ctx);
  return true;
}

enum class Coll { AllReduce, AllGather, ReduceScatter };

/// One collective: in place on the compute stream, or (async) on the
/// communication stream after the compute stream's work so far, its
/// completion event registered under the output for the wait kernel.
bool collective(KernelContext &ctx, Coll kind, const void *in, void *out,
                size_t count, DType dtype, bool mean) {
  if (!openNccl(ctx))
    return false;
  int type;
  if (!ncclType(dtype, type))
    return ctx.fail(std::string("NCCL has no ") + dtypeName(dtype));
  bool async = ctx.attrs.getInt("async", 0) != 0;
  cudaStream_t s = gStream;
  if (async) {
    cudaEvent_t ready;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, gStream);
    cudaStreamWaitEvent(gNccl.stream, ready, 0);
    cudaEventDestroy(ready);
    s = gNccl.stream;
  }
  int op = mean ? NcclAvg : NcclSum, rc = 0;
  switch (kind) {
  case Coll::AllReduce:
    rc = gNccl.allReduce(in, out, count, type, op, gNccl.comm, s);
    break;
  case Coll::AllGather:
    rc = gNccl.allGather(in, out, count, type, gNccl.comm, s);
    break;
  case Coll::ReduceScatter:
    rc = gNccl.reduceScatter(in, out, count, type, op, gNccl.comm, s);
    break;
  }
  if (rc != 0)
    return ctx.fail(std::string("NCCL: ") + gNccl.errorString(rc));
  if (async) {
    if (!ctx.inflight)
      return ctx.fail("an async collective needs the executor's table");
    cudaEvent_t done;
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    cudaEventRecord(done, gNccl.stream);
    gNccl.events.push_back(done);
    (*ctx.inflight)[out] = static_cast<int>(gNccl.events.size() - 1);
  }
  return launched(ctx);
}

bool shardCount(KernelContext &ctx, const TensorView &whole,
                const TensorView &shard, int64_t &count) {
  return checkShards(ctx, whole, shard, ctx.comm ? ctx.comm->size() : 1,
                     count);
}

__global__ void nonFinite(const void *x, int xt, int64_t n, int *flag) {
  DS_GRID_LOOP(i, n) {
    double v = load(x, xt, i);
    if (!isfinite(v))
      *flag = 1;
  }
}

__global__ void setInf(void *x, int xt) { store(x, xt, 0, INFINITY); }

bool kCheckOverflow(KernelContext &ctx) {
  if (ctx.step && ctx.step->inject && ctx.in[0].numel() > 0) {
    setInf<<<1, 1, 0, gStream>>>(ctx.in[0].data, int(ctx.in[0].dtype));
  }
  Scratch flag(sizeof(int));
  if (cudaMemsetAsync(flag.p, 0, sizeof(int), gStream) != cudaSuccess)
    return launched(ctx);
  for (const TensorView &g : ctx.in)
    if (g.numel())
      nonFinite<<<blocksFor(g.numel()), 256, 0, gStream>>>(
          g.data, int(g.dtype), g.numel(), flag.as<int>());
  int host = 0;
  if (!launched(ctx) || !readBack(ctx, &host, flag.p, sizeof host))
    return false;
  float found = host ? 1.0f : 0.0f;
  // An overflow on any rank skips the step on every rank.
  if (ctx.comm && ctx.comm->size() > 1) {
    std::string err;
    ctx.comm->collectiveBytes += sizeof(float);
    if (!ctx.comm->allReduce(&found, 1, DType::F32, false, err))
      return ctx.fail(err);
  }
  bool overflow = found > 0.0f;
  // With accumulation the flag may carry an earlier micro-batch's overflow.
  if (ctx.step)
    ctx.step->overflow = ctx.step->overflow || overflow;
  float value = overflow ? 1.0f : 0.0f;
  unsigned char out[8];
  storeD(out, ctx.out[0].dtype, 0, value);
  if (cudaMemcpyAsync(ctx.out[0].data, out, dtypeSize(ctx.out[0].dtype),
                      cudaMemcpyHostToDevice, gStream) != cudaSuccess ||
      cudaStreamSynchronize(gStream) != cudaSuccess)
    return launched(ctx);
  return true;
}

bool kAllReduce(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  if (!copyDevice(ctx, in.data, out.data, out.numel() * dtypeSize(out.dtype)))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1)
    return true;
  ctx.comm->collectiveBytes += out.numel() * dtypeSize(out.dtype);
  return collective(ctx, Coll::AllReduce, out.data, out.data, out.numel(),
                    out.dtype,
                    ctx.attrs.getString("reduction", "sum") == "mean");
}

bool kAllGather(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, out, in, count))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1)
    return copyDevice(ctx, in.data, out.data, count * dtypeSize(in.dtype));
  ctx.comm->collectiveBytes += out.numel() * dtypeSize(out.dtype);
  return collective(ctx, Coll::AllGather, in.data, out.data, count, in.dtype,
                    false);
}

bool kReduceScatter(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, in, out, count))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1)
    return copyDevice(ctx, in.data, out.data, count * dtypeSize(in.dtype));
  ctx.comm->collectiveBytes += in.numel() * dtypeSize(in.dtype);
  return collective(ctx, Coll::ReduceScatter, in.data, out.data, count,
                    in.dtype,
                    ctx.attrs.getString("reduction", "sum") == "mean");
}

bool kShard(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, in, out, count))
    return false;
  int rank = ctx.comm ? ctx.comm->rank() : 0;
  size_t bytes = count * dtypeSize(in.dtype);
  return copyDevice(ctx, static_cast<const char *>(in.data) + rank * bytes,
                    out.data, bytes);
}

bool kWait(KernelContext &ctx) {
  if (!ctx.comm || ctx.comm->size() == 1)
    return true;
  const void *key = ctx.in.back().data;
  if (!ctx.inflight)
    return ctx.fail("wait for a collective that was not started");
  auto it = ctx.inflight->find(key);
  if (it == ctx.inflight->end())
    return ctx.fail("wait for a collective that was not started");
  int handle = it->second;
  ctx.inflight->erase(it);
  if (handle < 0 || handle >= static_cast<int>(gNccl.events.size()))
    return ctx.fail("wait for an unknown collective");
  cudaEvent_t done = gNccl.events[handle];
  if (cudaStreamWaitEvent(gStream, done, 0) != cudaSuccess)
    return launched(ctx);
  cudaEventDestroy(done);
  gNccl.events[handle] = nullptr;
  // Handles are reused once every collective of the step has finished.
  bool any = false;
  for (cudaEvent_t e : gNccl.events)
    any |= e != nullptr;
  if (!any)
    gNccl.events.clear();
  return true;
}

} // namespace

void registerCollectiveKernels(KernelRegistry &r) {
  r.add("all_reduce", kAllReduce);
  r.add("all_gather", kAllGather);
  r.add("reduce_scatter", kReduceScatter);
  r.add("shard", kShard);
  r.add("wait", kWait);
  r.add("check_overflow", kCheckOverflow);
}

} // namespace ds::rt::cuda
