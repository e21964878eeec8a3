//===- QuantizeRecord.h - ZeRO++'s block-wise records -----------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Writing and reading one quantized record (include/ds/Support/Quantize.h:
// the block scales, then the packed values) on the host: the CPU kernels
// (Cpu/ZeroPP.cpp) and the unit test's reference. Symmetric, as
// DeepSpeed's ZeRO++ quantizer: s = max|x| / qmax per block (qmax = 127
// at 8 bits, 7 at 4), q = round-half-even(x / s) clamped to [-qmax, qmax],
// x' = q s. A block of zeros has s = 0; a block holding inf or NaN keeps a
// non-finite s and q = 0, so every x' of it is NaN (an overflow the loss
// scaler's check sees, never a silent finite value).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_QUANTIZERECORD_H
#define DS_RUNTIME_QUANTIZERECORD_H

#include "Cpu/Kernels.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/Quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ds::rt::quant {

// Operand checks the CPU kernels and their CUDA twins share.

/// The block size and bits of the instruction, checked.
inline bool readQuantization(KernelContext &ctx, int64_t &block, int &bits) {
  block = ctx.attrs.getInt("block_size", 0);
  bits = static_cast<int>(ctx.attrs.getInt("bits", 8));
  if (block < 1 || (bits != 8 && bits != 4))
    return ctx.fail("a quantized collective needs block_size >= 1 and 8 or "
                    "4 bits, got " + std::to_string(block) + " and " +
                    std::to_string(bits));
  return true;
}

/// The workspace holds `records` records of `part` elements.
inline bool checkWorkspace(KernelContext &ctx, int64_t part, int64_t records,
                    int64_t block, int bits) {
  uint64_t need =
      static_cast<uint64_t>(records) * ::ds::quant::recordBytes(part, block, bits);
  const TensorView &ws = ctx.out[1];
  if (ws.numel() * dtypeSize(ws.dtype) < need)
    return ctx.fail("the quantized records need a workspace of " +
                    std::to_string(need) + " bytes, the plan gave " +
                    std::to_string(ws.numel() * dtypeSize(ws.dtype)));
  return true;
}

/// A quantized collective's sizes: its ranks, the elements of a shard (the
/// gather) or chunk (the reduce-scatter), the block, the bits and the bytes
/// of one record.
struct QuantizedSizes {
  int world = 1;
  int64_t part = 0, block = 0;
  int bits = 8;
  uint64_t record = 0;
};

/// The operands of a quantized all-gather (`gather`: a shard gathered from
/// every rank) or reduce-scatter (a chunk per rank), its attributes and
/// its workspace, checked; `q` gets the sizes.
inline bool checkQuantizedCollective(KernelContext &ctx, bool gather,
                                     QuantizedSizes &q) {
  const TensorView &in = ctx.in[0], &out = ctx.out[0];
  q.world = ctx.comm ? ctx.comm->size() : 1;
  if (!gather && (in.dtype != DType::F32 || out.dtype != DType::F32))
    return ctx.fail("quantized_reduce_scatter sums in f32: its input and "
                    "result must be f32");
  if (!checkShards(ctx, gather ? out : in, gather ? in : out, q.world,
                   q.part) ||
      !readQuantization(ctx, q.block, q.bits) ||
      !checkWorkspace(ctx, q.part, gather ? q.world + 1 : 2 * q.world,
                      q.block, q.bits))
    return false;
  q.record = ::ds::quant::recordBytes(q.part, q.block, q.bits);
  return true;
}

inline int qmax(int bits) { return (1 << (bits - 1)) - 1; }

/// The quantized value of x with scale s.
inline int quantizeValue(float x, float s, int bits) {
  if (!(s > 0.0f) || !std::isfinite(s))
    return 0;
  float q = std::nearbyint(x / s);
  float m = static_cast<float>(qmax(bits));
  return static_cast<int>(std::min(m, std::max(-m, q)));
}

/// Stores q as element k of the packed values.
inline void packValue(uint8_t *values, int64_t k, int q, int bits) {
  if (bits == 8) {
    values[k] = static_cast<uint8_t>(static_cast<int8_t>(q));
    return;
  }
  uint8_t nib = static_cast<uint8_t>(q) & 0xF;
  uint8_t &byte = values[k / 2];
  byte = (k % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0) | nib)
                      : static_cast<uint8_t>((byte & 0x0F) | (nib << 4));
}

/// Element k of the packed values.
inline int unpackValue(const uint8_t *values, int64_t k, int bits) {
  if (bits == 8)
    return static_cast<int8_t>(values[k]);
  int nib = (k % 2 == 0) ? (values[k / 2] & 0xF) : (values[k / 2] >> 4);
  return nib >= 8 ? nib - 16 : nib;
}

/// The scale of the elements `load(i)`, lo <= i < hi: max|x| / qmax (0
/// for none); an inf or NaN among them keeps a non-finite scale.
template <typename Load>
float blockScale(Load load, int64_t lo, int64_t hi, int bits) {
  float amax = 0.0f;
  for (int64_t i = lo; i < hi; ++i) {
    float a = std::fabs(load(i));
    if (!std::isnan(amax) && !(a <= amax)) // a NaN stays once seen
      amax = a;
  }
  return std::isfinite(amax) ? amax / static_cast<float>(qmax(bits)) : amax;
}

/// x' = q s; NaN for a block whose scale is not finite.
inline float dequantizeValue(int q, float s) {
  return std::isfinite(s) ? static_cast<float>(q) * s : NAN;
}

/// Writes the record of the n elements `load(i)` (i < n) to `rec`
/// (ds::quant::recordBytes(n, block, bits) bytes).
template <typename Load>
void writeRecord(Load load, int64_t n, int64_t block, int bits,
                 uint8_t *rec) {
  int64_t nb = ::ds::quant::blocks(n, block);
  float *scales = reinterpret_cast<float *>(rec);
  uint8_t *values = rec + 4 * nb;
  std::memset(values, 0, ::ds::quant::valueBytes(n, bits));
  for (int64_t b = 0; b < nb; ++b) {
    int64_t lo = b * block, hi = std::min(n, lo + block);
    float s = blockScale(load, lo, hi, bits);
    scales[b] = s;
    for (int64_t i = lo; i < hi; ++i)
      packValue(values, i, quantizeValue(load(i), s, bits), bits);
  }
}

/// Calls `store(i, x')` for the n dequantized elements of `rec`.
template <typename Store>
void readRecord(const uint8_t *rec, int64_t n, int64_t block, int bits,
                Store store) {
  int64_t nb = ::ds::quant::blocks(n, block);
  const float *scales = reinterpret_cast<const float *>(rec);
  const uint8_t *values = rec + 4 * nb;
  for (int64_t i = 0; i < n; ++i) {
    store(i, dequantizeValue(unpackValue(values, i, bits), scales[i / block]));
  }
}

} // namespace ds::rt::quant

#endif // DS_RUNTIME_QUANTIZERECORD_H
