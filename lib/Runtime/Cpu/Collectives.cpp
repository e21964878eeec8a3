//===- Collectives.cpp - collective kernels over the communicator ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "ds/Runtime/Comm.h"

#include <cmath>
#include <cstring>

namespace ds::rt {

namespace {
/// Starts an async collective and records it under its output's address.
bool startAsync(KernelContext &ctx, Communicator::Kind kind, const void *in,
                void *out, int64_t count, DType dtype, bool mean) {
  if (!ctx.inflight)
    return ctx.fail("an async collective needs the executor's table");
  int handle = 0;
  std::string err;
  if (!ctx.comm->start(kind, in, out, count, dtype, mean, handle, err))
    return ctx.fail(err);
  (*ctx.inflight)[out] = handle;
  return true;
}

} // namespace

bool kAllReduce(KernelContext &ctx) {
  if (!kCopy(ctx)) // the local contribution, unless reduced in place
    return false;
  TensorView &out = ctx.out[0];
  if (!ctx.comm || ctx.comm->size() == 1)
    return true;
  ctx.comm->collectiveBytes += out.numel() * dtypeSize(out.dtype);
  bool mean = ctx.attrs.getString("reduction", "sum") == "mean";
  std::string err;
  if (ctx.attrs.getInt("async", 0))
    return startAsync(ctx, Communicator::Kind::AllReduce, out.data, out.data,
                      out.numel(), out.dtype, mean);
  if (!ctx.comm->allReduce(out.data, out.numel(), out.dtype, mean, err))
    return ctx.fail(err);
  return true;
}

namespace {
/// The world size a shard kernel's buffers imply, checked against the
/// communicator's.
bool shardCount(KernelContext &ctx, const TensorView &whole,
                const TensorView &shard, int64_t &count) {
  return checkShards(ctx, whole, shard, ctx.comm ? ctx.comm->size() : 1,
                     count);
}
} // namespace

bool kAllGather(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, out, in, count))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1) {
    std::memcpy(out.data, in.data, count * dtypeSize(in.dtype));
    return true;
  }
  ctx.comm->collectiveBytes += out.numel() * dtypeSize(out.dtype);
  if (ctx.attrs.getInt("async", 0))
    return startAsync(ctx, Communicator::Kind::AllGather, in.data, out.data,
                      count, in.dtype, false);
  std::string err;
  if (!ctx.comm->allGather(in.data, out.data, count, in.dtype, err))
    return ctx.fail(err);
  return true;
}

bool kReduceScatter(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, in, out, count))
    return false;
  if (!ctx.comm || ctx.comm->size() == 1) {
    std::memcpy(out.data, in.data, count * dtypeSize(in.dtype));
    return true;
  }
  ctx.comm->collectiveBytes += in.numel() * dtypeSize(in.dtype);
  bool mean = ctx.attrs.getString("reduction", "sum") == "mean";
  if (ctx.attrs.getInt("async", 0))
    return startAsync(ctx, Communicator::Kind::ReduceScatter, in.data,
                      out.data, count, in.dtype, mean);
  std::string err;
  if (!ctx.comm->reduceScatter(
          in.data, out.data, count, in.dtype,
          ctx.attrs.getString("reduction", "sum") == "mean", err))
    return ctx.fail(err);
  return true;
}

bool kShard(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  int64_t count;
  if (!shardCount(ctx, in, out, count))
    return false;
  int rank = ctx.comm ? ctx.comm->rank() : 0;
  size_t bytes = count * dtypeSize(in.dtype);
  std::memcpy(out.data, static_cast<const char *>(in.data) + rank * bytes,
              bytes);
  return true;
}

bool kCheckOverflow(KernelContext &ctx) {
  if (ctx.step && ctx.step->inject && ctx.in[0].numel() > 0)
    storeD(ctx.in[0].data, ctx.in[0].dtype, 0, INFINITY); // debug option
  float found = 0.0f;
  for (const TensorView &g : ctx.in) {
    int64_t n = g.numel();
    for (int64_t i = 0; i < n && found == 0.0f; ++i)
      if (!std::isfinite(loadD(g.data, g.dtype, i)))
        found = 1.0f;
  }
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
  storeD(ctx.out[0].data, ctx.out[0].dtype, 0, overflow ? 1.0 : 0.0);
  return true;
}

bool kWait(KernelContext &ctx) {
  // The collective's inputs then outputs: its output is the last input.
  if (!ctx.comm || ctx.comm->size() == 1)
    return true; // one rank: the collective completed when it started
  const void *key = ctx.in.back().data;
  auto it = ctx.inflight ? ctx.inflight->find(key) : decltype(ctx.inflight->end()){};
  if (!ctx.inflight || it == ctx.inflight->end())
    return ctx.fail("wait for a collective that was not started");
  int handle = it->second;
  ctx.inflight->erase(it);
  std::string err;
  if (!ctx.comm->finish(handle, err))
    return ctx.fail(err);
  return true;
}

void registerCollectiveKernels(KernelRegistry &r) {
  r.add("all_reduce", kAllReduce);
  r.add("all_gather", kAllGather);
  r.add("reduce_scatter", kReduceScatter);
  r.add("shard", kShard);
  r.add("wait", kWait);
  r.add("check_overflow", kCheckOverflow);
}

} // namespace ds::rt
