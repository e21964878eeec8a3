//===- DsZeroPP.cpp - ZeRO++'s quantized collectives ----------------------===//
//
// Part of the ds project.
//
// `ds.quantized_all_gather` and `ds.quantized_reduce_scatter`
// (DsZeroPP.td): their verifiers, costs and bytes on the wire, which are
// the quantized records of include/ds/Support/Quantize.h.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsZeroPP.h"
#include "ds/Support/Quantize.h"

#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::ds;

#define GET_OP_CLASSES
#include "ds/Dialect/Ds/IR/DsZeroPP.cpp.inc"

namespace {
/// The checks both ops share: 1-D `whole` and `part` of one float type
/// (f32 when `f32Only`), `whole` a multiple of `part`, 8 or 4 bits.
LogicalResult verifyQuantized(Operation *op, Type wholeType, Type partType,
                              int64_t bits, bool f32Only) {
  auto whole = cast<RankedTensorType>(wholeType);
  auto part = cast<RankedTensorType>(partType);
  if (whole.getRank() != 1 || part.getRank() != 1 ||
      whole.getElementType() != part.getElementType())
    return op->emitOpError("expects 1-D input and result of one element "
                           "type, got ")
           << partType << " and " << wholeType;
  if (f32Only && !whole.getElementType().isF32())
    return op->emitOpError("expects f32 (the sum is accumulated in f32), got ")
           << whole.getElementType();
  int64_t p = part.getDimSize(0), w = whole.getDimSize(0);
  if (p < 1 || w % p != 0)
    return op->emitOpError("the ")
           << w << "-element tensor is not whole shards of " << p
           << " elements";
  if (bits != 8 && bits != 4)
    return op->emitOpError("bits must be 8 or 4, got ") << bits;
  return success();
}
} // namespace

LogicalResult QuantizedAllGatherOp::verify() {
  return verifyQuantized(*this, getResult().getType(), getInput().getType(),
                         getBits(), /*f32Only=*/false);
}

CollectiveKind QuantizedAllGatherOp::getCollectiveKind() {
  return CollectiveKind::AllGather;
}

/// One record: this rank's shard, quantized.
int64_t QuantizedAllGatherOp::getBytesPerRank() {
  return static_cast<int64_t>(::ds::quant::recordBytes(
      detail::numElements(getInput().getType()), getBlockSize(), getBits()));
}

/// Quantizing the shard (a maximum, a division, a rounding per element)
/// and dequantizing the gathered result (a product per element).
int64_t QuantizedAllGatherOp::getFlops() {
  return 3 * detail::numElements(getInput().getType()) +
         detail::numElements(getResult().getType());
}

LogicalResult QuantizedReduceScatterOp::verify() {
  if (getReduction() != "sum" && getReduction() != "mean")
    return emitOpError("reduction must be 'sum' or 'mean', got '")
           << getReduction() << "'";
  return verifyQuantized(*this, getInput().getType(), getResult().getType(),
                         getBits(), /*f32Only=*/true);
}

CollectiveKind QuantizedReduceScatterOp::getCollectiveKind() {
  return CollectiveKind::ReduceScatter;
}

/// The all-to-all's input: one record per chunk.
int64_t QuantizedReduceScatterOp::getBytesPerRank() {
  int64_t chunk = detail::numElements(getResult().getType());
  int64_t world = detail::numElements(getInput().getType()) / chunk;
  return static_cast<int64_t>(::ds::quant::reduceScatterBytes(
      chunk, world, getBlockSize(), getBits()));
}

/// Quantizing every chunk, then dequantizing and adding the N received.
int64_t QuantizedReduceScatterOp::getFlops() {
  return 5 * detail::numElements(getInput().getType());
}
