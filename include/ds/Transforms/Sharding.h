//===- Sharding.h - ZeRO's flat, padded partition of a tensor --*- C++ -*-===//
//
// Part of the ds project.
//
// ZeRO partitions each tensor on its own: flattened row-major, padded with
// zeros to a multiple of the world size N, rank r owning elements
// [r*S, (r+1)*S) with S = ceil(numel / N). The runtime (weight loading,
// checkpoints, consolidation) uses the same rule; see docs/parallel.md.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_SHARDING_H
#define DS_TRANSFORMS_SHARDING_H

#include "ds/Dialect/Ds/IR/DsOps.h"

namespace mlir::ds {

/// Elements per rank of a tensor of `numel` elements over `world` ranks.
inline int64_t shardSize(int64_t numel, int64_t world) {
  return (numel + world - 1) / world;
}

/// The 1-D shard type of `type` over `world` ranks.
RankedTensorType shardType(RankedTensorType type, int64_t world);

/// `v` flattened to 1-D and padded with zeros to `world` shards.
Value flattenPadded(OpBuilder &b, Location loc, Value v, int64_t world);

/// The first numel(`type`) elements of the 1-D `flat`, reshaped to `type`.
Value unpadReshape(OpBuilder &b, Location loc, Value flat,
                   RankedTensorType type);

/// ZeRO++'s quantization of a collective (docs/zeropp.md): none when
/// `blockSize` is 0, else blocks of `blockSize` elements at `bits` bits.
struct Quantization {
  int64_t blockSize = 0;
  int64_t bits = 8;
  explicit operator bool() const { return blockSize > 0; }
};

/// One all-gather for several shards (a bucket): the shards are
/// concatenated, gathered, and split back per tensor; returns each tensor
/// whole, with the `types` given. One shard needs no concatenation. With
/// `quant` the gather is a `ds.quantized_all_gather` (ZeRO++'s qwZ). It
/// runs over collective group `group` of `world` ranks (ZeRO++'s hpZ
/// gathers over group 2, the node's ranks, kNodeGroup).
SmallVector<Value> gatherBucket(OpBuilder &b, Location loc, ValueRange shards,
                                ArrayRef<RankedTensorType> types,
                                int64_t world, Quantization quant = {},
                                int64_t group = 0);

/// One reduce-scatter (mean) for several tensors: each is flattened and
/// padded, laid out so that rank r's part of every tensor is contiguous,
/// reduced, and split into this rank's shard of each. With `quant` the
/// reduction is a `ds.quantized_reduce_scatter` (ZeRO++'s qgZ).
SmallVector<Value> reduceScatterBucket(OpBuilder &b, Location loc,
                                       ValueRange values, int64_t world,
                                       Quantization quant = {});

/// One all-reduce (mean) for several tensors, flattened and concatenated;
/// returns each reduced with its own type.
SmallVector<Value> allReduceBucket(OpBuilder &b, Location loc,
                                   ValueRange values);

/// The collective group of ZeRO++'s hpZ: the hpz-partition-size
/// consecutive data-parallel ranks of this rank's node.
inline constexpr int64_t kNodeGroup = 2;

/// Function attribute names the ZeRO pass sets on @forward.
inline constexpr llvm::StringLiteral kWorldSizeAttr = "ds.world_size";
inline constexpr llvm::StringLiteral kZeroStageAttr = "ds.zero_stage";
inline constexpr llvm::StringLiteral kHpzAttr = "ds.hpz_partition_size";
/// Argument attribute of a partitioned parameter or state: its whole shape.
inline constexpr llvm::StringLiteral kFullShapeAttr = "ds.full_shape";

} // namespace mlir::ds

#endif // DS_TRANSFORMS_SHARDING_H
