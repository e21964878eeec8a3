//===- DsRtOps.cpp - the ds runtime dialect -------------------------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/DsRt/IR/DsRtOps.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace mlir::dsrt;

#include "ds/Dialect/DsRt/IR/DsRtOpsDialect.cpp.inc"

void DsRtDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ds/Dialect/DsRt/IR/DsRtOps.cpp.inc"
      >();
}

int64_t dsrt::bufferBytes(Type type) {
  auto shaped = cast<ShapedType>(type);
  int64_t bits = shaped.getElementTypeBitWidth();
  return shaped.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}

Operation *dsrt::rootOf(Value buffer) {
  Operation *op = buffer.getDefiningOp();
  while (auto view = dyn_cast_or_null<ViewOp>(op))
    op = view.getSource().getDefiningOp();
  return op;
}

LogicalResult ConstOp::verify() {
  auto type = cast<MemRefType>(getType());
  auto value = cast<ShapedType>(getValue().getType());
  if (value.getShape() != type.getShape() ||
      value.getElementType() != type.getElementType())
    return emitOpError("value type ")
           << value << " does not match the buffer " << type;
  return success();
}

LogicalResult ViewOp::verify() {
  auto from = cast<MemRefType>(getSource().getType());
  auto to = cast<MemRefType>(getType());
  if (from.getElementType() != to.getElementType() ||
      from.getNumElements() != to.getNumElements())
    return emitOpError("must keep the element type and count: ")
           << from << " vs " << to;
  return success();
}

LogicalResult KernelOp::verify() {
  if (getKernel().empty())
    return emitOpError("needs a kernel id");
  // Only "wait" (completing an async collective) and the pipeline's send
  // and section mark write nothing.
  if (getOuts().empty() && getKernel() != "wait" &&
      getKernel() != "pipe_send" && getKernel() != "pipe_mark")
    return emitOpError("writes no buffer");
  if (auto inplace = getInplace())
    for (int64_t i : *inplace)
      if (i < 0 || i >= static_cast<int64_t>(getIns().size()))
        return emitOpError("inplace operand ") << i << " is not an input";
  return success();
}

LogicalResult CopyOp::verify() {
  if (getSource().getType() != getTarget().getType())
    return emitOpError("source and target types differ");
  return success();
}

#define GET_OP_CLASSES
#include "ds/Dialect/DsRt/IR/DsRtOps.cpp.inc"
