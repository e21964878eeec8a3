//===- Sharding.cpp - ZeRO's flat, padded partition of a tensor -----------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Sharding.h"

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

} // namespace mlir::ds
