//===- DsZeroOne.cpp - 0/1 Adam's update op -------------------------------===//
//
// Part of the ds project.
//
// `ds.zero_one_adam` (DsCompression.td): its verifier and cost. Its error
// buffers are padded as 1-bit Adam's (ds::onebit::paddedSize); its momentum
// accumulator has the parameter's type and its counters are five i64.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsCompression.h"
#include "ds/Support/OneBit.h"

using namespace mlir;
using namespace mlir::ds;

LogicalResult ZeroOneAdamOp::verify() {
  Type t = getParam().getType();
  for (Value v : {getGrad(), getExpAvg(), getExpAvgSq(), getMomentumAcc()})
    if (v.getType() != t)
      return emitOpError("parameter, gradient, moments and momentum "
                         "accumulator must have one type");
  if (!cast<RankedTensorType>(t).getElementType().isF32())
    return emitOpError("expects f32 parameters and state, got ") << t;
  if (failed(detail::verifyOneBitErrors(*this, t, getWorkerError().getType(),
                                       getServerError().getType())))
    return failure();
  if (cast<ShapedType>(getCounters().getType()).getNumElements() != 5)
    return emitOpError("counters must hold 5 elements, got ")
           << getCounters().getType();
  if (cast<ShapedType>(getStep().getType()).getNumElements() != 1)
    return emitOpError("step must be a scalar");
  for (unsigned i = 0; i < getNumOperands() - 1; ++i)
    if (i != 1 && getResult(i < 1 ? 0 : i - 1).getType() !=
                      getOperand(i).getType())
      return emitOpError("result ") << (i < 1 ? 0 : i - 1)
                                    << " must have its state's type";
  if (getLr().convertToDouble() < 0 || getWeightDecay().convertToDouble() < 0)
    return emitOpError("learning rate and weight decay must not be negative");
  return success();
}

/// Adam's 12 per element, the local step's accumulation and the
/// synchronisation (about 8 per element), plus the compression's sign,
/// scale and error (about 4 per padded element, twice).
int64_t ZeroOneAdamOp::getFlops() {
  return 20 * detail::numElements(getParam().getType()) +
         8 * detail::numElements(getWorkerError().getType());
}
