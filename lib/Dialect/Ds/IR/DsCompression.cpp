//===- DsCompression.cpp - compressed-communication ops -------------------===//
//
// Part of the ds project.
//
// `ds.onebit_adam` (DsCompression.td): its verifier and cost. The padded
// lengths of the error-feedback buffers follow DeepSpeed's OnebitAdam:
// the tensor is padded to a multiple of N lcm(N, 8) elements.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsCompression.h"
#include "ds/Support/OneBit.h"

#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::ds;

#define GET_OP_CLASSES
#include "ds/Dialect/Ds/IR/DsCompression.cpp.inc"

LogicalResult OneBitAdamOp::verify() {
  Type t = getParam().getType();
  for (Value v : {getGrad(), getExpAvg(), getExpAvgSq()})
    if (v.getType() != t)
      return emitOpError("parameter, gradient and moments must have one "
                         "type");
  if (!cast<RankedTensorType>(t).getElementType().isF32())
    return emitOpError("expects f32 parameters and state, got ") << t;
  auto we = cast<RankedTensorType>(getWorkerError().getType());
  auto se = cast<RankedTensorType>(getServerError().getType());
  int64_t n = detail::numElements(t);
  if (we.getRank() != 1 || se.getRank() != 1 ||
      !we.getElementType().isF32() || !se.getElementType().isF32())
    return emitOpError("error buffers must be 1-D f32");
  int64_t padded = we.getDimSize(0), chunk = se.getDimSize(0);
  int64_t world = chunk > 0 ? padded / chunk : 0;
  if (world < 1 || padded != world * chunk ||
      padded != ::ds::onebit::paddedSize(n, world))
    return emitOpError("worker error of ")
           << padded << " elements and server error of " << chunk
           << " are not the padding of " << n
           << " elements over any world size";
  for (unsigned i = 0; i < 3; ++i)
    if (getResult(i).getType() != t)
      return emitOpError("results must have the parameter's type");
  if (getNewWorkerError().getType() != we ||
      getNewServerError().getType() != se)
    return emitOpError("new error buffers must have the errors' types");
  if (cast<ShapedType>(getStep().getType()).getNumElements() != 1)
    return emitOpError("step must be a scalar");
  if (getLr().convertToDouble() < 0 || getWeightDecay().convertToDouble() < 0)
    return emitOpError("learning rate and weight decay must not be negative");
  return success();
}

/// Adam's 12 per element, plus the compression's sign, scale and error
/// (about 4 per padded element, twice).
int64_t OneBitAdamOp::getFlops() {
  return 12 * detail::numElements(getParam().getType()) +
         8 * detail::numElements(getWorkerError().getType());
}
