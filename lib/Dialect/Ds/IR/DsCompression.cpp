//===- DsCompression.cpp - compressed-communication ops -------------------===//
//
// Part of the ds project.
//
// `ds.onebit_adam`, `ds.compressed_reduce_scatter`,
// `ds.onebit_adam_local`, `ds.compressed_all_gather` and
// `ds.onebit_quantized_all_gather` (DsCompression.td): their verifiers and costs.
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

namespace {
/// The checks both 1-bit Adam updates share: f32 parameter, gradient and
/// moments of one type, the first three results of that type, a scalar
/// step, a learning rate and weight decay not negative.
template <typename OpT> LogicalResult verifyAdamOperands(OpT op) {
  Type t = op.getParam().getType();
  for (Value v : {op.getGrad(), op.getExpAvg(), op.getExpAvgSq()})
    if (v.getType() != t)
      return op.emitOpError("parameter, gradient and moments must have one "
                            "type");
  if (!cast<RankedTensorType>(t).getElementType().isF32())
    return op.emitOpError("expects f32 parameters and state, got ") << t;
  for (unsigned i = 0; i < 3; ++i)
    if (op->getResult(i).getType() != t)
      return op.emitOpError("results must have the parameter's type");
  if (cast<ShapedType>(op.getStep().getType()).getNumElements() != 1)
    return op.emitOpError("step must be a scalar");
  if (op.getLr().convertToDouble() < 0 ||
      op.getWeightDecay().convertToDouble() < 0)
    return op.emitOpError("learning rate and weight decay must not be "
                          "negative");
  return success();
}
} // namespace

LogicalResult mlir::ds::detail::verifyOneBitErrors(Operation *op,
                                                   Type param,
                                                   Type workerError,
                                                   Type serverError) {
  auto we = cast<RankedTensorType>(workerError);
  auto se = cast<RankedTensorType>(serverError);
  if (we.getRank() != 1 || se.getRank() != 1 ||
      !we.getElementType().isF32() || !se.getElementType().isF32())
    return op->emitOpError("error buffers must be 1-D f32");
  int64_t n = detail::numElements(param);
  int64_t padded = we.getDimSize(0), chunk = se.getDimSize(0);
  int64_t world = chunk > 0 ? padded / chunk : 0;
  if (world < 1 || padded != world * chunk ||
      padded != ::ds::onebit::paddedSize(n, world))
    return op->emitOpError("worker error of ")
           << padded << " elements and server error of " << chunk
           << " are not the padding of " << n
           << " elements over any world size";
  return success();
}

LogicalResult OneBitAdamOp::verify() {
  if (failed(verifyAdamOperands(*this)))
    return failure();
  Type t = getParam().getType();
  if (failed(detail::verifyOneBitErrors(*this, t, getWorkerError().getType(),
                                       getServerError().getType())))
    return failure();
  Type we = getWorkerError().getType(), se = getServerError().getType();
  if (getNewWorkerError().getType() != we ||
      getNewServerError().getType() != se)
    return emitOpError("new error buffers must have the errors' types");
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
  Value mom = getMomentum(), newMom = getNewMomentum();
  if (bool(mom) != bool(newMom) || bool(mom) != getBeta1().has_value())
    return emitOpError("momentum, its new value and beta1 come together");
  if (mom && (mom.getType() != in || newMom.getType() != in))
    return emitOpError("momentum and its new value must have the input's "
                       "type ")
           << in;
  return success();
}

/// The compression's sign, scale and error: about 4 per element.
int64_t CompressedReduceScatterOp::getFlops() {
  return 4 * detail::numElements(getInput().getType());
}

LogicalResult OneBitAdamLocalOp::verify() { return verifyAdamOperands(*this); }

LogicalResult CompressedAllGatherOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto base = cast<RankedTensorType>(getBase().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (!in.getElementType().isF32() || in.getRank() != 1 ||
      base != out || out.getRank() != 1 ||
      out.getElementType() != in.getElementType())
    return emitOpError("expects a 1-D f32 input and a base and result of "
                       "one 1-D f32 type, got ")
           << in << ", " << base << " and " << out;
  int64_t c = in.getDimSize(0);
  if (c < 1 || out.getDimSize(0) % c != 0)
    return emitOpError("result of ")
           << out.getDimSize(0) << " elements is not whole chunks of the "
           << c << "-element input";
  if (static_cast<int64_t>(getValid()) > out.getDimSize(0))
    return emitOpError("valid elements ")
           << getValid() << " exceed the result's " << out.getDimSize(0);
  if (getError().getType() != in || getNewError().getType() != in)
    return emitOpError("error and its new value must have the input's type ")
           << in;
  if (cast<ShapedType>(getStep().getType()).getNumElements() != 1)
    return emitOpError("step must be a scalar");
  return success();
}

/// The delta, the compression's sign, scale and error, and the sum with
/// the base: about 4 per element of the input, 2 per element gathered.
int64_t CompressedAllGatherOp::getFlops() {
  return 4 * detail::numElements(getInput().getType()) +
         2 * detail::numElements(getResult().getType());
}

LogicalResult OneBitQuantizedAllGatherOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (!in.getElementType().isF32() || in.getRank() != 1 ||
      out.getRank() != 1 || out.getElementType() != in.getElementType())
    return emitOpError("expects a 1-D f32 input and result, got ")
           << in << " and " << out;
  ArrayRef<int64_t> pieces = getPieces(), valid = getValid();
  if (pieces.empty() || pieces.size() != valid.size())
    return emitOpError("expects one valid count per piece, got ")
           << pieces.size() << " pieces and " << valid.size() << " counts";
  int64_t total = 0;
  for (int64_t p : pieces) {
    if (p < 1)
      return emitOpError("piece sizes must be positive, got ") << p;
    total += p;
  }
  int64_t c = in.getDimSize(0);
  if (total != c || out.getDimSize(0) % c != 0)
    return emitOpError("pieces of ")
           << total << " elements, an input of " << c << " and a result of "
           << out.getDimSize(0) << " are not one rank's part of a gather";
  int64_t world = out.getDimSize(0) / c;
  for (auto [p, v] : llvm::zip(pieces, valid))
    if (v < 1 || v > p * world)
      return emitOpError("valid count ")
             << v << " is not within its piece's " << p * world
             << " gathered elements";
  if (cast<ShapedType>(getStep().getType()).getNumElements() != 1)
    return emitOpError("step must be a scalar");
  return success();
}

/// Quantizing (max, divide, round: 3 per input element) and dequantizing
/// (1 per gathered element).
int64_t OneBitQuantizedAllGatherOp::getFlops() {
  return 3 * detail::numElements(getInput().getType()) +
         detail::numElements(getResult().getType());
}
