//===- DsOptimizerOps.cpp - verifiers of ds.adam and ds.sgd ---------------===//
//
// Part of the ds project.
//
// The parameter, its gradient, the state and the accumulator share one
// type; the step is a scalar; the clip coefficient (gradient clipping over
// an accumulated gradient) is an f32 scalar and comes with an accumulator.
// Their kernels are in lib/Runtime/Cpu/Optimizers.cpp and
// lib/Runtime/Cuda/Optimizers.cu.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"

using namespace mlir;
using namespace mlir::ds;

static LogicalResult verifyOptimizer(Operation *op, double lr, Value step,
                                     Value gradAccum, Value clipCoef) {
  Type t = op->getOperand(0).getType();
  for (Value v : op->getOperands())
    if (v != step && v != clipCoef && v.getType() != t)
      return op->emitOpError("parameter, gradient and state must have one type");
  for (Type r : op->getResultTypes())
    if (r != t)
      return op->emitOpError("results must have the parameter's type");
  if (cast<ShapedType>(step.getType()).getNumElements() != 1)
    return op->emitOpError("step must be a scalar");
  if (clipCoef && !gradAccum)
    return op->emitOpError("a clip coefficient needs a gradient accumulator "
                           "(without one, scale the gradient)");
  if (clipCoef && cast<ShapedType>(clipCoef.getType()).getRank() != 0)
    return op->emitOpError("the clip coefficient must be a scalar");
  if (lr < 0)
    return op->emitOpError("learning rate ") << lr << " is negative";
  return success();
}

LogicalResult AdamOp::verify() {
  if (getNormOverRanks() && !getLamb())
    return emitOpError("norm_over_ranks is only for lamb = true");
  return verifyOptimizer(*this, getLr().convertToDouble(), getStep(),
                         getGradAccum(), getClipCoef());
}

LogicalResult SgdOp::verify() {
  return verifyOptimizer(*this, getLr().convertToDouble(), getStep(),
                         getGradAccum(), getClipCoef());
}
