//===- Quantize.h - ZeRO++'s block-wise quantized records -------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// ZeRO++ (docs/zeropp.md) sends parameters (qwZ) and gradients (qgZ) as
// block-wise symmetric integers: a run of n elements is cut into blocks of
// `block` elements (the last may be shorter); each block keeps one f32
// scale s = max|x| / qmax (qmax = 127 for 8 bits, 7 for 4 bits) and its
// elements q = round-half-even(x / s) in [-qmax, qmax]; x' = q s. A
// *record* is what one rank sends for one run: the ceil(n / block) f32
// scales, then the packed values (one byte each at 8 bits, two per byte at
// 4 bits, element k in the low nibble when k is even), padded to a whole
// number of 4-byte words. One rule for the compiler (workspace sizes), the
// plan writer (bytes) and the runtime (the exchange).
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_QUANTIZE_H
#define DS_SUPPORT_QUANTIZE_H

#include <cstdint>

namespace ds::quant {

/// Scales (blocks) of a run of `n` elements.
inline int64_t blocks(int64_t n, int64_t block) {
  return (n + block - 1) / block;
}

/// Bytes of the packed values of `n` elements at `bits` (8 or 4), padded
/// to 4-byte words.
inline uint64_t valueBytes(int64_t n, int bits) {
  uint64_t bytes = static_cast<uint64_t>((n * bits + 7) / 8);
  return (bytes + 3) / 4 * 4;
}

/// Bytes of one record: the scales, then the packed values.
inline uint64_t recordBytes(int64_t n, int64_t block, int bits) {
  return 4 * static_cast<uint64_t>(blocks(n, block)) + valueBytes(n, bits);
}

/// The bytes a quantized all-gather of `shard`-element shards over `world`
/// ranks hands to collectives, counted as ds-run counts an all-gather (its
/// output): `world` records.
inline uint64_t gatherBytes(int64_t shard, int64_t world, int64_t block,
                            int bits) {
  return static_cast<uint64_t>(world) * recordBytes(shard, block, bits);
}

/// The bytes a quantized reduce-scatter of `world` chunks of `chunk`
/// elements hands to collectives, its all-to-all's input: `world` records.
inline uint64_t reduceScatterBytes(int64_t chunk, int64_t world,
                                   int64_t block, int bits) {
  return static_cast<uint64_t>(world) * recordBytes(chunk, block, bits);
}

/// The workspace of a quantized all-gather (in the memory plan): this
/// rank's record, then the `world` gathered ones.
inline uint64_t gatherWorkspaceBytes(int64_t shard, int64_t world,
                                     int64_t block, int bits) {
  return static_cast<uint64_t>(world + 1) * recordBytes(shard, block, bits);
}

/// The workspace of a quantized reduce-scatter: the `world` records sent
/// and the `world` received.
inline uint64_t reduceScatterWorkspaceBytes(int64_t chunk, int64_t world,
                                            int64_t block, int bits) {
  return 2 * static_cast<uint64_t>(world) * recordBytes(chunk, block, bits);
}

} // namespace ds::quant

#endif // DS_SUPPORT_QUANTIZE_H
