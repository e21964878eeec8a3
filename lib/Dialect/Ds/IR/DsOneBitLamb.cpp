//===- DsOneBitLamb.cpp - 1-bit LAMB's update op --------------------------===//
//
// Part of the ds project.
//
// `ds.onebit_lamb` and `ds.onebit_lamb_local` (DsCompression.td): their
// verifiers and costs. The first's error buffers are padded as 1-bit
// Adam's (ds::onebit::paddedSize); both ops' fresh variance has the
// parameter's type and their coefficients are two f32.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsCompression.h"

using namespace mlir;
using namespace mlir::ds;

namespace {
/// The learning rate, weight decay, and the coefficients' and factor's
/// bounds of either 1-bit LAMB op.
template <typename OpTy>
LogicalResult verifyHyper(OpTy op) {
  if (op.getLr().convertToDouble() < 0 ||
      op.getWeightDecay().convertToDouble() < 0)
    return op.emitOpError(
        "learning rate and weight decay must not be negative");
  double fmin = op.getFactorMin().convertToDouble(),
         fmax = op.getFactorMax().convertToDouble(),
         cmin = op.getMinCoeff().convertToDouble(),
         cmax = op.getMaxCoeff().convertToDouble(),
         beta = op.getCoeffBeta().convertToDouble(),
         threshold = op.getFactorThreshold().convertToDouble();
  if (!(fmin > 0 && fmin <= fmax) || !(cmin > 0 && cmin <= cmax) ||
      !(beta >= 0 && beta < 1) || !(threshold >= 0))
    return op.emitOpError("expects 0 < factor_min <= factor_max, 0 < "
                          "min_coeff <= max_coeff, 0 <= coeff_beta < 1 and "
                          "factor_threshold >= 0");
  return success();
}

/// The parameter, gradient, moments and fresh variance: one f32 type.
template <typename OpTy>
LogicalResult verifyStateTypes(OpTy op) {
  Type t = op.getParam().getType();
  for (Value v : {op.getGrad(), op.getExpAvg(), op.getExpAvgSq(),
                  op.getExpAvgSqFresh()})
    if (v.getType() != t)
      return op.emitOpError("parameter, gradient, moments and fresh "
                            "variance must have one type");
  if (!cast<RankedTensorType>(t).getElementType().isF32())
    return op.emitOpError("expects f32 parameters and state, got ") << t;
  return success();
}

/// Coefficients of two f32, a scalar step, results of the operands' types
/// but the gradient's and the step's, and the hyper-parameters.
template <typename OpTy>
LogicalResult verifyRest(OpTy op) {
  auto coeffs = cast<RankedTensorType>(op.getCoeffs().getType());
  if (coeffs.getNumElements() != 2 || !coeffs.getElementType().isF32())
    return op.emitOpError("coeffs must be 2 f32, got ") << coeffs;
  if (cast<ShapedType>(op.getStep().getType()).getNumElements() != 1)
    return op.emitOpError("step must be a scalar");
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    if (op->getResult(i).getType() !=
        op->getOperand(i < 1 ? 0 : i + 1).getType())
      return op.emitOpError("result ") << i << " must have its state's type";
  return verifyHyper(op);
}
} // namespace

LogicalResult OneBitLambOp::verify() {
  Type t = getParam().getType();
  if (failed(verifyStateTypes(*this)) ||
      failed(detail::verifyOneBitErrors(*this, t, getWorkerError().getType(),
                                       getServerError().getType())))
    return failure();
  return verifyRest(*this);
}

/// Lamb's 14 per element, the fresh variance and the factor (about 8 per
/// element), plus the compression's sign, scale and error (about 4 per
/// padded element, twice).
int64_t OneBitLambOp::getFlops() {
  return 22 * detail::numElements(getParam().getType()) +
         8 * detail::numElements(getWorkerError().getType());
}

LogicalResult OneBitLambLocalOp::verify() {
  if (failed(verifyStateTypes(*this)))
    return failure();
  return verifyRest(*this);
}

/// Lamb's 14 per element, the fresh variance and the factor (about 8 per
/// element); the all-gather of three partial figures is negligible.
int64_t OneBitLambLocalOp::getFlops() {
  return 22 * detail::numElements(getParam().getType());
}
