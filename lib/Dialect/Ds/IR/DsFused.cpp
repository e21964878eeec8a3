//===- DsFused.cpp - ds.fused_elementwise ---------------------------------===//
//
// Part of the ds project.
//
// The verifier and cost of the op `--ds-fuse-elementwise` makes. The
// program's rules are include/ds/Support/FusedProgram.h's, which the
// runtime's kernels check with the same function.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"
#include "ds/Support/FusedProgram.h"

using namespace mlir;
using namespace mlir::ds;

LogicalResult FusedElementwiseOp::verify() {
  auto result = cast<RankedTensorType>(getResult().getType());
  if (!result.getElementType().isF32())
    return emitOpError("expects an f32 result, got ") << result;
  if (getInputs().empty())
    return emitOpError("expects at least one input");
  std::vector<bool> boolInput;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    auto t = cast<RankedTensorType>(v.getType());
    Type e = t.getElementType();
    if (!e.isF32() && !e.isInteger(1))
      return emitOpError("expects f32 or i1 inputs, input ") << i << " is "
                                                             << t;
    if (!shapes::broadcastsTo(t.getShape(), result.getShape()))
      return emitOpError("input ")
             << i << " of shape " << shapes::toString(t.getShape())
             << " does not broadcast to the result's "
             << shapes::toString(result.getShape());
    boolInput.push_back(e.isInteger(1));
  }
  std::vector<int64_t> program(getProgram().begin(), getProgram().end());
  std::string error = ::ds::checkFusedProgram(
      program, boolInput, static_cast<int64_t>(getConstants().size()));
  if (!error.empty())
    return emitOpError("has an invalid program: ") << error;
  return success();
}

int64_t FusedElementwiseOp::getFlops() {
  return detail::numElements(getType()) * getNumInstructions();
}
