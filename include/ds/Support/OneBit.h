//===- OneBit.h - 1-bit compression sizes -----------------------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// The sizes of 1-bit Adam's compressed exchange (docs/compression.md), one
// rule for the compiler (error buffers), the plan writer (bytes) and the
// runtime (the exchange): a tensor of n elements is padded with zeros to a
// multiple of N lcm(N, 8) for N ranks, as DeepSpeed's OnebitAdam does;
// rank j serves the j-th of N equal chunks, whose signs pack into bytes.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_ONEBIT_H
#define DS_SUPPORT_ONEBIT_H

#include <cstdint>
#include <numeric>

namespace ds::onebit {

/// The padded length of a tensor of `n` elements over `world` ranks.
inline int64_t paddedSize(int64_t n, int64_t world) {
  int64_t unit = world * std::lcm<int64_t>(world, 8);
  return (n + unit - 1) / unit * unit;
}

/// The bytes one exchange hands to collectives, counted as ds-run counts
/// them (the all-to-all's input, the all-gathers' outputs): the worker
/// signs (padded/8 bytes), the N worker scales, the gathered server signs
/// (padded/8) and the N server scales.
inline uint64_t exchangeBytes(int64_t padded, int64_t world) {
  return static_cast<uint64_t>(padded / 8 * 2 + 2 * 4 * world);
}

/// The bytes one compressed reduce-scatter (1-bit Adam under ZeRO 1-3)
/// hands to collectives, its all-to-alls' inputs: `world` chunks of
/// `chunk` elements as packed signs (ceil(chunk / 8) bytes each) and one
/// f32 scale per chunk.
inline uint64_t reduceScatterBytes(int64_t chunk, int64_t world) {
  return static_cast<uint64_t>(world) *
         (static_cast<uint64_t>((chunk + 7) / 8) + 4);
}

/// The elements per scale of the int8 block-quantized all-gather (stage
/// 3's parameter gathers after the freeze).
constexpr int64_t kQuantBlock = 256;

/// The bytes one rank's part of a quantized all-gather takes: each piece
/// (one parameter's shard of `chunk` elements) as int8 values and one f32
/// scale per block of kQuantBlock elements.
inline uint64_t quantizedPieceBytes(int64_t chunk) {
  return static_cast<uint64_t>(chunk) +
         4 * static_cast<uint64_t>((chunk + kQuantBlock - 1) / kQuantBlock);
}

/// The bytes one quantized all-gather hands to collectives (its output,
/// every rank's part): `world` times the sum of its pieces'.
template <typename Range>
uint64_t quantizedGatherBytes(const Range &chunks, int64_t world) {
  uint64_t part = 0;
  for (int64_t c : chunks)
    part += quantizedPieceBytes(c);
  return part * static_cast<uint64_t>(world);
}

/// The bytes one compressed all-gather of an update delta (1-bit Adam's
/// parameter exchange at ZeRO 1-2) hands to collectives, its all-gather's
/// output: every rank's chunk of `chunk` elements as int8 values and f32
/// block scales, as the quantized all-gather's.
inline uint64_t gatherBytes(int64_t chunk, int64_t world) {
  return quantizedPieceBytes(chunk) * static_cast<uint64_t>(world);
}

/// Lamb and 1-bit LAMB under ZeRO 1-3 (docs/compression.md): each rank's
/// partial figures of one tensor (sums of squares, maxima; `values` f64)
/// are all-gathered and combined in rank order. The bytes that hands to
/// collectives, the all-gather's output.
inline uint64_t partialSumsBytes(int64_t values, int64_t world) {
  return static_cast<uint64_t>(8 * values * world);
}
/// The partial figures per rank: plain Lamb's (the sums of squares of p
/// and u) and 1-bit LAMB's partition update's (two sums, one maximum; the
/// same count in both phases, so a step's bytes do not depend on it).
constexpr int64_t kLambPartials = 2;
constexpr int64_t kOneBitLambPartials = 3;

} // namespace ds::onebit

#endif // DS_SUPPORT_ONEBIT_H
