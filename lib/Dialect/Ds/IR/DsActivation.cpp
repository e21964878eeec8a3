//===- DsActivation.cpp - ds.activation and its gradient ------------------===//
//
// Part of the ds project.
//
// The verifiers and costs of the parametrized activations. The kinds, their
// parameters and their math are include/ds/Support/Activation.h's table,
// which the runtime's kernels read too.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Support/Activation.h"

using namespace mlir;
using namespace mlir::ds;

namespace {

/// The verifier of both ops: a known kind, and Celu's alpha non-zero.
LogicalResult verifyActivation(Operation *op, StringRef name, float alpha) {
  ::ds::Activation kind;
  if (!::ds::activationFromName(name.str().c_str(), kind))
    return op->emitOpError("unknown activation kind '") << name << "'";
  if (kind == ::ds::Activation::Celu && alpha == 0.0f)
    return op->emitOpError("expects a non-zero alpha for celu");
  return success();
}

/// An exp or a comparison and a few multiply-adds: four FLOPs per element
/// (the gradient one more, its product with the incoming gradient).
constexpr int64_t kFlopsPerElement = 4;

} // namespace

LogicalResult ActivationOp::verify() {
  return verifyActivation(*this, getKind(), getAlpha().convertToFloat());
}

LogicalResult ActivationGradOp::verify() {
  return verifyActivation(*this, getKind(), getAlpha().convertToFloat());
}

int64_t ActivationOp::getFlops() {
  return detail::numElements(getType()) * kFlopsPerElement;
}

int64_t ActivationGradOp::getFlops() {
  return detail::numElements(getType()) * (kFlopsPerElement + 1);
}
