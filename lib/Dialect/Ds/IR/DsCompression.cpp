//===- DsCompression.cpp - compressed-communication ops -------------------===//
//
// Part of the ds project.
//
// `ds.onebit_adam`, `ds.compressed_reduce_scatter` and
// `ds.onebit_adam_local` (DsCompression.td): their verifiers and costs.
// The padded lengths of ZeRO-0's error-feedback buffers follow DeepSpeed's
// OnebitAdam: the tensor is padded to a multiple of N lcm(N, 8) elements.
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

LogicalResult CompressedReduceScatterOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto we = cast<RankedTensorType>(getWorkerError().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (!in.getElementType().isF32() || in.getRank() != 1 ||
      out.getRank() != 1 || out.getElementType() != in.getElementType())
    return emitOpError("expects a 1-D f32 input and result, got ")
           << in << " and " << out;
  int64_t c = out.getDimSize(0);
  if (c < 1 || in.getDimSize(0) % c != 0)
    return emitOpError("input of ")
           << in.getDimSize(0) << " elements is not whole chunks of the "
           << c << "-element result";
  if (we != in || getNewWorkerError().getType() != we)
    return emitOpError("worker error and its new value must have the "
                       "input's type ")
           << in;
  if (cast<ShapedType>(getStep().getType()).getNumElements() != 1)
    return emitOpError("step must be a scalar");
  return success();
}

/// The compression's sign, scale and error: about 4 per element.
int64_t CompressedReduceScatterOp::getFlops() {
  return 4 * detail::numElements(getInput().getType());
}

LogicalResult OneBitAdamLocalOp::verify() {
  Type t = getParam().getType();
  for (Value v : {getGrad(), getExpAvg(), getExpAvgSq()})
    if (v.getType() != t)
      return emitOpError("parameter, gradient and moments must have one "
                         "type");
  if (!cast<RankedTensorType>(t).getElementType().isF32())
    return emitOpError("expects f32 parameters and state, got ") << t;
  for (unsigned i = 0; i < 3; ++i)
    if (getResult(i).getType() != t)
      return emitOpError("results must have the parameter's type");
  if (cast<ShapedType>(getStep().getType()).getNumElements() != 1)
    return emitOpError("step must be a scalar");
  if (getLr().convertToDouble() < 0 || getWeightDecay().convertToDouble() < 0)
    return emitOpError("learning rate and weight decay must not be negative");
  return success();
}
