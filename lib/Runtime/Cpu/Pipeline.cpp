//===- Pipeline.cpp - pipeline parallelism: send, receive, tied sums -----===//
//
// Part of the ds project (runtime: no MLIR or LLVM). docs/design.md
// section 10.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include "ds/Runtime/Comm.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace ds::rt {

namespace {
/// The pipeline peer: the rank `delta` stages away with the same data- and
/// tensor-parallel index.
bool peerOf(KernelContext &ctx, int64_t delta, int &peer) {
  if (!ctx.pipe || ctx.pipeStride <= 0)
    return ctx.fail("a pipeline stage's plan runs only as part of its "
                    "pipeline (mpirun -np WORLD ds-run on the whole plan)");
  peer = ctx.pipe->rank() + static_cast<int>(delta) * ctx.pipeStride;
  if (peer < 0 || peer >= ctx.pipe->size())
    return ctx.fail("pipeline peer rank " + std::to_string(peer) +
                    " is outside the world of " +
                    std::to_string(ctx.pipe->size()));
  return true;
}

/// Messages between neighbours: the compiler's tag (boundary, tensor and
/// direction, below 1024) per micro-batch; tags from 16384 are the tied
/// gradients'.
int messageTag(int micro, int64_t tag) {
  return (micro % 16) * 1024 + static_cast<int>(tag % 1024);
}

uint64_t bytesOf(const TensorView &v) { return v.numel() * dtypeSize(v.dtype); }
} // namespace

bool kPipeSend(KernelContext &ctx) {
  int peer;
  int64_t delta = ctx.attrs.getInt("peer", 1);
  if (!peerOf(ctx, delta, peer))
    return false;
  std::string err;
  if (!ctx.pipe->send(ctx.in[0].data, bytesOf(ctx.in[0]), peer,
                      messageTag(ctx.micro, ctx.attrs.getInt("tag", 0)),
                      err))
    return ctx.fail(err);
  return true;
}

bool kPipeRecv(KernelContext &ctx) {
  int peer;
  int64_t delta = ctx.attrs.getInt("peer", -1);
  if (!peerOf(ctx, delta, peer))
    return false;
  std::string err;
  if (!ctx.pipe->recv(ctx.out[0].data, bytesOf(ctx.out[0]), peer,
                      messageTag(ctx.micro, ctx.attrs.getInt("tag", 0)),
                      err))
    return ctx.fail("from pipeline rank " + std::to_string(peer) + ": " +
                    err);
  return true;
}

bool kPipeMark(KernelContext &) { return true; }

bool kTiedGradSum(KernelContext &ctx) {
  const TensorView &g = ctx.in[0];
  if (g.dtype != DType::F32 || ctx.out[0].dtype != DType::F32)
    return ctx.fail("tied_grad_sum needs f32 gradients");
  int64_t n = g.numel();
  bool hasAcc = ctx.in.size() > 2;
  if (hasAcc != (ctx.out.size() > 1))
    return ctx.fail("tied_grad_sum: the accumulator is an input and an "
                    "output, or neither");
  int64_t k = std::max<int64_t>(1, ctx.attrs.getInt("accum_steps", 1));
  int64_t t = 1;
  std::memcpy(&t, ctx.in[1].data, 8);
  float *out = ctx.out[0].as<float>();
  const float *gd = g.as<float>();
  if (k > 1 && (t - 1) % k != k - 1) {
    // Not the last micro-batch: nothing crosses.
    if (out != gd)
      std::memmove(out, gd, n * sizeof(float));
    if (hasAcc && ctx.out[1].data != ctx.in[2].data)
      std::memmove(ctx.out[1].data, ctx.in[2].data, n * sizeof(float));
    return true;
  }
  // This stage's total, then every stage's in stage order.
  std::vector<float> own(gd, gd + n);
  if (hasAcc) {
    const float *acc = ctx.in[2].as<float>();
    for (int64_t i = 0; i < n; ++i)
      own[i] = acc[i] + own[i];
  }
  std::vector<int64_t> peers = ctx.attrs.getInts("peers");
  int tag = 16384 + static_cast<int>(ctx.attrs.getInt("tied_id", 0) % 16384);
  std::string err;
  std::map<int64_t, std::vector<float>> totals;
  for (int64_t d : peers) {
    int peer;
    if (!peerOf(ctx, d, peer))
      return false;
    if (!ctx.pipe->send(own.data(), n * sizeof(float), peer, tag, err))
      return ctx.fail(err);
  }
  for (int64_t d : peers) {
    int peer;
    if (!peerOf(ctx, d, peer))
      return false;
    std::vector<float> &v = totals[d];
    v.resize(n);
    if (!ctx.pipe->recv(v.data(), n * sizeof(float), peer, tag, err))
      return ctx.fail("the tied parameter's gradient from stage offset " +
                      std::to_string(d) + ": " + err);
  }
  totals[0] = std::move(own);
  std::vector<float> sum(n, 0.0f);
  bool first = true;
  for (auto &[d, v] : totals) { // stage order
    for (int64_t i = 0; i < n; ++i)
      sum[i] = first ? v[i] : sum[i] + v[i];
    first = false;
  }
  std::memcpy(out, sum.data(), n * sizeof(float));
  if (hasAcc)
    std::memset(ctx.out[1].data, 0, n * sizeof(float));
  return true;
}

void registerPipelineKernels(KernelRegistry &r) {
  r.add("pipe_send", kPipeSend);
  r.add("pipe_recv", kPipeRecv);
  r.add("pipe_mark", kPipeMark);
  r.add("tied_grad_sum", kTiedGradSum);
}

} // namespace ds::rt
