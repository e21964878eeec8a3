//===- DsResize.cpp - ds.resize and ds.resize_grad ------------------------===//
//
// Part of the ds project.
//
// The verifiers and costs of the resize ops. The sampling rule (mode and
// coordinate names, taps) is include/ds/Support/Resize.h's, which the
// importer and the kernels read too.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Support/Resize.h"

using namespace mlir;
using namespace mlir::ds;

namespace {

ShapedType shaped(Value v) { return cast<ShapedType>(v.getType()); }

/// Known names, one positive scale per spatial dimension, and `resized`
/// the resize of `input`: same rank and element type, N and C kept.
LogicalResult verifyResize(Operation *op, StringRef mode, StringRef coord,
                           StringRef nearest, ArrayRef<double> scales,
                           ShapedType input, ShapedType resized) {
  ::ds::ResizeRule rule;
  if (!::ds::resizeEnumFromName(::ds::kResizeModeNames, mode.str().c_str(),
                                rule.mode))
    return op->emitOpError("unknown mode '") << mode << "'";
  if (!::ds::resizeEnumFromName(::ds::kResizeCoordNames, coord.str().c_str(),
                                rule.coord))
    return op->emitOpError("unknown coordinate_transformation_mode '")
           << coord << "'";
  if (!::ds::resizeEnumFromName(::ds::kResizeNearestNames,
                                nearest.str().c_str(), rule.nearest))
    return op->emitOpError("unknown nearest_mode '") << nearest << "'";
  int64_t nd = input.getRank() - 2;
  if (nd < 1 || nd > ::ds::kMaxResizeDims)
    return op->emitOpError("expects 1 to 3 spatial dimensions, got ") << nd;
  if (static_cast<int64_t>(scales.size()) != nd)
    return op->emitOpError("expects ")
           << nd << " scales, got " << scales.size();
  if (llvm::any_of(scales, [](double s) { return !(s > 0.0); }))
    return op->emitOpError("expects positive scales");
  if (resized.getRank() != input.getRank() ||
      resized.getDimSize(0) != input.getDimSize(0) ||
      resized.getDimSize(1) != input.getDimSize(1))
    return op->emitOpError("expects the resized tensor to keep N and C");
  if (resized.getElementType() != input.getElementType())
    return op->emitOpError("expects one element type");
  for (int64_t d = 0; d < nd; ++d)
    if (resized.getDimSize(2 + d) < 1)
      return op->emitOpError("expects non-empty spatial dimensions");
  return success();
}

/// Taps per output element (one for nearest, two per dimension for
/// linear), a multiply-add each.
int64_t resizeFlops(StringRef mode, ShapedType input, ShapedType resized) {
  int64_t taps = 1;
  if (mode == "linear")
    for (int64_t d = 2; d < input.getRank(); ++d)
      taps *= 2;
  return 2 * taps * resized.getNumElements();
}

} // namespace

LogicalResult ResizeOp::verify() {
  return verifyResize(*this, getMode(), getCoordinateTransformationMode(),
                      getNearestMode(), getScales(), shaped(getInput()),
                      shaped(getResult()));
}

LogicalResult ResizeGradOp::verify() {
  return verifyResize(*this, getMode(), getCoordinateTransformationMode(),
                      getNearestMode(), getScales(), shaped(getResult()),
                      shaped(getGrad()));
}

int64_t ResizeOp::getFlops() {
  return resizeFlops(getMode(), shaped(getInput()), shaped(getResult()));
}

int64_t ResizeGradOp::getFlops() {
  return resizeFlops(getMode(), shaped(getResult()), shaped(getGrad()));
}
