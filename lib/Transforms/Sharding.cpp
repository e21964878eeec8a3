//===- Sharding.cpp - ZeRO's flat, padded partition of a tensor -----------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Sharding.h"
#include "ds/Dialect/Ds/IR/DsZeroPP.h"

namespace mlir::ds {

RankedTensorType shardType(RankedTensorType type, int64_t world) {
  return RankedTensorType::get({shardSize(type.getNumElements(), world)},
                               type.getElementType());
}

Value flattenPadded(OpBuilder &b, Location loc, Value v, int64_t world) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t n = type.getNumElements();
  int64_t padded = shardSize(n, world) * world;
  auto flatType = RankedTensorType::get({n}, type.getElementType());
  Value flat = type.getRank() == 1 ? v : ReshapeOp::create(b, loc, flatType, v);
  if (padded == n)
    return flat;
  auto padType = RankedTensorType::get({padded - n}, type.getElementType());
  Value zeros = ConstantOp::create(
      b, loc, padType,
      DenseElementsAttr::get(padType, b.getZeroAttr(type.getElementType())));
  return ConcatOp::create(
      b, loc, RankedTensorType::get({padded}, type.getElementType()),
      ValueRange{flat, zeros}, b.getI64IntegerAttr(0));
}

Value unpadReshape(OpBuilder &b, Location loc, Value flat,
                   RankedTensorType type) {
  int64_t n = type.getNumElements();
  auto flatType = cast<RankedTensorType>(flat.getType());
  if (flatType.getDimSize(0) != n)
    flat = SliceOp::create(
        b, loc, RankedTensorType::get({n}, type.getElementType()), flat,
        b.getDenseI64ArrayAttr({0}), b.getDenseI64ArrayAttr({1}));
  if (type.getRank() == 1)
    return flat;
  return ReshapeOp::create(b, loc, type, flat);
}

namespace {
/// Concatenation of `parts` along `axis`; one part is returned as it is.
Value concat(OpBuilder &b, Location loc, ValueRange parts, int64_t axis) {
  if (parts.size() == 1)
    return parts[0];
  auto first = cast<RankedTensorType>(parts[0].getType());
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value p : parts)
    shape[axis] += cast<RankedTensorType>(p.getType()).getDimSize(axis);
  return ConcatOp::create(
      b, loc, RankedTensorType::get(shape, first.getElementType()), parts,
      b.getI64IntegerAttr(axis));
}

/// `v` cut along `axis` into parts of `sizes`; one part is `v` itself.
SmallVector<Value> split(OpBuilder &b, Location loc, Value v,
                         ArrayRef<int64_t> sizes, int64_t axis) {
  if (sizes.size() == 1)
    return {v};
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<Type> types;
  for (int64_t n : sizes) {
    SmallVector<int64_t> shape(type.getShape());
    shape[axis] = n;
    types.push_back(RankedTensorType::get(shape, type.getElementType()));
  }
  auto op = SplitOp::create(b, loc, types, v, b.getI64IntegerAttr(axis));
  return SmallVector<Value>(op.getResults());
}

Value reshape(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getShape() == shape)
    return v;
  return ReshapeOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), v);
}
} // namespace

SmallVector<Value> gatherBucket(OpBuilder &b, Location loc, ValueRange shards,
                                ArrayRef<RankedTensorType> types,
                                int64_t world, Quantization quant,
                                int64_t group) {
  SmallVector<int64_t> sizes;
  for (Value s : shards)
    sizes.push_back(cast<RankedTensorType>(s.getType()).getDimSize(0));
  Value flat = concat(b, loc, shards, 0);
  auto flatType = cast<RankedTensorType>(flat.getType());
  int64_t total = flatType.getDimSize(0);
  auto wholeType =
      RankedTensorType::get({total * world}, flatType.getElementType());
  Value gathered =
      quant ? QuantizedAllGatherOp::create(
                  b, loc, wholeType, flat, b.getI64IntegerAttr(quant.blockSize),
                  b.getI64IntegerAttr(quant.bits), b.getI64IntegerAttr(group))
                  .getResult()
            : AllGatherOp::create(b, loc, wholeType, flat,
                                  b.getI64IntegerAttr(group))
                  .getResult();
  SmallVector<Value> out;
  if (shards.size() == 1)
    return {unpadReshape(b, loc, gathered, types[0])};
  // Row r of [world, total] is rank r's shards; column block i is tensor i.
  Value grid = reshape(b, loc, gathered, {world, total});
  for (auto [part, type, size] :
       llvm::zip(split(b, loc, grid, sizes, 1), types, sizes))
    out.push_back(
        unpadReshape(b, loc, reshape(b, loc, part, {world * size}), type));
  return out;
}

SmallVector<Value> reduceScatterBucket(OpBuilder &b, Location loc,
                                       ValueRange values, int64_t world,
                                       Quantization quant) {
  SmallVector<Value> grids;
  SmallVector<int64_t> sizes;
  for (Value v : values) {
    Value flat = flattenPadded(b, loc, v, world);
    int64_t s = cast<RankedTensorType>(flat.getType()).getDimSize(0) / world;
    sizes.push_back(s);
    grids.push_back(values.size() == 1 ? flat
                                       : reshape(b, loc, flat, {world, s}));
  }
  Value grid = concat(b, loc, grids, 1);
  auto gridType = cast<RankedTensorType>(grid.getType());
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  Value flat = reshape(b, loc, grid, {total * world});
  auto mineType = RankedTensorType::get({total}, gridType.getElementType());
  Value mine =
      quant ? QuantizedReduceScatterOp::create(
                  b, loc, mineType, flat, b.getStringAttr("mean"),
                  b.getI64IntegerAttr(quant.blockSize),
                  b.getI64IntegerAttr(quant.bits), b.getI64IntegerAttr(0))
                  .getResult()
            : ReduceScatterOp::create(b, loc, mineType, flat,
                                      b.getStringAttr("mean"),
                                      b.getI64IntegerAttr(0))
                  .getResult();
  return split(b, loc, mine, sizes, 0);
}

SmallVector<Value> allReduceBucket(OpBuilder &b, Location loc,
                                   ValueRange values) {
  auto mean = [&](Value v) -> Value {
    return AllReduceOp::create(b, loc, v, b.getStringAttr("mean"),
                               b.getI64IntegerAttr(0));
  };
  if (values.size() == 1)
    return {mean(values[0])};
  SmallVector<Value> flats;
  SmallVector<int64_t> sizes;
  for (Value v : values) {
    auto t = cast<RankedTensorType>(v.getType());
    sizes.push_back(t.getNumElements());
    flats.push_back(reshape(b, loc, v, {t.getNumElements()}));
  }
  SmallVector<Value> out;
  for (auto [part, v] :
       llvm::zip(split(b, loc, mean(concat(b, loc, flats, 0)), sizes, 0),
                 values))
    out.push_back(reshape(b, loc, part,
                          cast<RankedTensorType>(v.getType()).getShape()));
  return out;
}

} // namespace mlir::ds
