//===- ZeroPP.cpp - ZeRO++'s quantized collectives ------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `quantized_all_gather` (qwZ) and `quantized_reduce_scatter` (qgZ),
// docs/zeropp.md. Operands: the tensor; results: the gathered or reduced
// tensor, then the workspace the memory plan gives the packed records
// (include/ds/Support/Quantize.h). The gather all-gathers one record per
// rank and dequantizes every one (this rank's too: the result is the
// compute copy, the shard itself is never changed). The reduce-scatter
// sends chunk j's record to rank j by one all-to-all and adds the N
// records it receives in f32, in rank order. Both add the bytes they hand
// to the communicator's count (the gather's records received, the
// all-to-all's records sent), which the plan lists (PlanInstructions.cpp).
//
//===----------------------------------------------------------------------===//

#include "../QuantizeRecord.h"
#include "Kernels.h"
#include "ds/Runtime/Comm.h"

namespace ds::rt {

bool kQuantizedAllGather(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  quant::QuantizedSizes q;
  if (!quant::checkQuantizedCollective(ctx, true, q))
    return false;
  const int world = q.world, bits = q.bits;
  const int64_t shard = q.part, block = q.block;
  const uint64_t record = q.record;
  uint8_t *mine = ctx.out[1].as<uint8_t>(), *all = mine + record;
  quant::writeRecord([&](int64_t i) { return static_cast<float>(
                                          loadD(in.data, in.dtype, i)); },
                     shard, block, bits, mine);
  if (world > 1) {
    ctx.comm->collectiveBytes += world * record;
    std::string err;
    if (!ctx.comm->allGather(mine, all, static_cast<int64_t>(record / 4),
                             DType::F32, err))
      return ctx.fail(err);
  } else {
    std::memcpy(all, mine, record);
  }
  for (int r = 0; r < world; ++r) {
    int64_t base = r * shard;
    if (out.dtype == DType::F32) {
      float *o = out.as<float>() + base;
      quant::readRecord(all + r * record, shard, block, bits,
                        [&](int64_t i, float x) { o[i] = x; });
    } else {
      quant::readRecord(all + r * record, shard, block, bits,
                        [&](int64_t i, float x) {
                          storeD(out.data, out.dtype, base + i, x);
                        });
    }
  }
  return true;
}

bool kQuantizedReduceScatter(KernelContext &ctx) {
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  quant::QuantizedSizes q;
  if (!quant::checkQuantizedCollective(ctx, false, q))
    return false;
  const int world = q.world, bits = q.bits;
  const int64_t chunk = q.part, block = q.block;
  const uint64_t record = q.record;
  uint8_t *sent = ctx.out[1].as<uint8_t>(), *got = sent + world * record;
  const float *x = in.as<float>();
  for (int j = 0; j < world; ++j)
    quant::writeRecord([&](int64_t i) { return x[j * chunk + i]; }, chunk,
                       block, bits, sent + j * record);
  if (world > 1) {
    ctx.comm->collectiveBytes += world * record;
    std::string err;
    if (!ctx.comm->allToAll(sent, got, record, err))
      return ctx.fail(err);
  } else {
    std::memcpy(got, sent, record);
  }
  float *o = out.as<float>();
  std::fill(o, o + chunk, 0.0f);
  for (int r = 0; r < world; ++r)
    quant::readRecord(got + r * record, chunk, block, bits,
                      [&](int64_t i, float v) { o[i] += v; });
  if (ctx.attrs.getString("reduction", "sum") == "mean") {
    float inv = 1.0f / static_cast<float>(world);
    for (int64_t i = 0; i < chunk; ++i)
      o[i] *= inv;
  }
  return true;
}

void registerZeroPPKernels(KernelRegistry &r) {
  r.add("quantized_all_gather", kQuantizedAllGather);
  r.add("quantized_reduce_scatter", kQuantizedReduceScatter);
}

} // namespace ds::rt
