//===- CompressedGather.cpp - 1-bit Adam's parameter exchange (ZeRO) ------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The parameter all-gathers of 1-bit Adam under ZeRO 1-3
// (docs/compression.md), plain until the freeze step and compressed after
// it: `compressed_all_gather` (stages 1-2) sends each partition's update
// delta as block-wise int8 with the owner's error feedback, and every
// rank adds it to its copy; `onebit_quantized_all_gather` (stage 3) sends the
// shards as block-wise int8.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Mpi/Compressed.h"
#include "ds/Runtime/Comm.h"

#include <cstring>

namespace ds::rt {

namespace {
/// The step counter and whether step t is after `freeze_step`.
bool afterFreeze(KernelContext &ctx, const TensorView &step, bool &frozen) {
  if (step.numel() != 1)
    return ctx.fail("the step counter must be a scalar");
  int64_t t = loadI(step.data, step.dtype, 0);
  if (t < 1)
    return ctx.fail("optimizer step " + std::to_string(t) + " is not >= 1");
  int64_t freeze = 0;
  if (!freezeStepOf(ctx, freeze))
    return false;
  frozen = t > freeze;
  return true;
}

/// The plain all-gather of the warm-up, counted as all_gather's.
bool plainGather(KernelContext &ctx, const TensorView &in, TensorView &out) {
  std::string err;
  ctx.comm->collectiveBytes += out.numel() * sizeof(float);
  if (!ctx.comm->allGather(in.data, out.data, in.numel(), DType::F32, err))
    return ctx.fail(err);
  return true;
}
} // namespace

/// Operands: this rank's updated chunk (c), the whole padded parameter
/// before the update (N c), the gather error (c), the step; results the
/// whole after the update and the new error (in place).
bool kCompressedAllGather(KernelContext &ctx) {
  if (ctx.in.size() != 4 || ctx.out.size() != 2)
    return ctx.fail("compressed_all_gather expects 4 operands and 2 results");
  int world = ctx.comm ? ctx.comm->size() : 1;
  const TensorView &in = ctx.in[0], &base = ctx.in[1];
  TensorView &out = ctx.out[0];
  int64_t chunk = in.numel();
  bool f32 = true;
  for (DType d : {in.dtype, base.dtype, ctx.in[2].dtype, out.dtype,
                  ctx.out[1].dtype})
    f32 &= d == DType::F32;
  if (!f32 || base.numel() != chunk * world || out.numel() != base.numel() ||
      ctx.in[2].numel() != chunk || ctx.out[1].numel() != chunk)
    return ctx.fail("compressed_all_gather: an f32 chunk of " +
                    std::to_string(chunk) + " elements, a base of " +
                    std::to_string(base.numel()) + " and a result of " +
                    std::to_string(out.numel()) + " are not " +
                    std::to_string(world) + " chunks");
  bool frozen;
  if (!afterFreeze(ctx, ctx.in[3], frozen))
    return false;
  float *error = ctx.out[1].as<float>();
  if (ctx.in[2].data != ctx.out[1].data)
    std::memcpy(error, ctx.in[2].data, chunk * sizeof(float));
  if (world == 1) {
    std::memcpy(out.data, in.data, chunk * sizeof(float));
    return true;
  }
  if (!frozen)
    return plainGather(ctx, in, out);
  std::string err;
  if (!onebit::compressedAllGather(*ctx.comm, in.as<float>(),
                                   base.as<float>(), chunk,
                                   ctx.attrs.getInt("valid", base.numel()),
                                   error, out.as<float>(), err))
    return ctx.fail(err);
  return true;
}

/// Operands: this rank's shards of a bucket's parameters, one after
/// another, and the step; the result every rank's, in rank order.
bool kOneBitQuantizedAllGather(KernelContext &ctx) {
  if (ctx.in.size() != 2 || ctx.out.size() != 1)
    return ctx.fail("onebit_quantized_all_gather expects 2 operands and 1 result");
  int world = ctx.comm ? ctx.comm->size() : 1;
  const TensorView &in = ctx.in[0];
  TensorView &out = ctx.out[0];
  std::vector<int64_t> pieces = ctx.attrs.getInts("pieces");
  std::vector<int64_t> valid = ctx.attrs.getInts("valid");
  int64_t total = 0;
  for (int64_t c : pieces)
    total += c;
  if (in.dtype != DType::F32 || out.dtype != DType::F32 ||
      total != in.numel() || out.numel() != total * world ||
      valid.size() != pieces.size())
    return ctx.fail("onebit_quantized_all_gather: an f32 input of " +
                    std::to_string(in.numel()) + " elements in " +
                    std::to_string(pieces.size()) + " pieces of " +
                    std::to_string(total) + " and a result of " +
                    std::to_string(out.numel()) + " are not " +
                    std::to_string(world) + " ranks' parts");
  bool frozen;
  if (!afterFreeze(ctx, ctx.in[1], frozen))
    return false;
  if (world == 1) {
    std::memcpy(out.data, in.data, total * sizeof(float));
    return true;
  }
  if (!frozen)
    return plainGather(ctx, in, out);
  std::string err;
  if (!onebit::quantizedAllGather(*ctx.comm, in.as<float>(), pieces, valid,
                                  out.as<float>(), err))
    return ctx.fail(err);
  return true;
}

void registerCompressedGatherKernels(KernelRegistry &r) {
  r.add("compressed_all_gather", kCompressedAllGather);
  r.add("onebit_quantized_all_gather", kOneBitQuantizedAllGather);
}

} // namespace ds::rt
