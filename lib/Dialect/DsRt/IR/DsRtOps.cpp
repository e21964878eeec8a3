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

static constexpr StringLiteral kPhaseNames[] = {
    "forward", "backward", "optimizer", "communication", "transfer"};

StringRef dsrt::stringifyKernelPhase(KernelPhase phase) {
  return kPhaseNames[static_cast<unsigned>(phase)];
}

std::optional<KernelPhase> dsrt::symbolizeKernelPhase(StringRef name) {
  const auto *it = llvm::find(kPhaseNames, name);
  if (it == std::end(kPhaseNames))
    return std::nullopt;
  return static_cast<KernelPhase>(it - std::begin(kPhaseNames));
}

// `"kernel"(ins) -> (outs) {params...} : (types) -> (types)`, then the
// annotations (`attributes {ds.bytes, ds.flops, ds.phase}`), so that the
// call reads first.
static constexpr StringLiteral kAnnotations[] = {attrs::kBytes, attrs::kFlops,
                                                 attrs::kPhase};

void KernelOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printAttributeWithoutType(getKernelAttr());
  p << '(' << getIns() << ") -> (" << getOuts() << ')';
  SmallVector<StringRef> elided = {getKernelAttrName(), "operandSegmentSizes"};
  SmallVector<NamedAttribute> annotations;
  for (StringRef name : kAnnotations) {
    elided.push_back(name);
    if (Attribute a = (*this)->getDiscardableAttr(name))
      annotations.emplace_back(StringAttr::get(getContext(), name), a);
  }
  p.printOptionalAttrDict((*this)->getAttrs(), elided);
  p << " : (" << getIns().getTypes() << ") -> (" << getOuts().getTypes() << ')';
  if (!annotations.empty()) {
    p << " attributes";
    p.printOptionalAttrDict(annotations);
  }
}

ParseResult KernelOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr kernel;
  SmallVector<OpAsmParser::UnresolvedOperand> ins, outs;
  SmallVector<Type> insTypes, outsTypes;
  auto parseTypes = [&](SmallVectorImpl<Type> &types) {
    return parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Paren, [&] {
      return parser.parseType(types.emplace_back());
    });
  };
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseAttribute(kernel, parser.getBuilder().getNoneType(), "kernel",
                            result.attributes) ||
      parser.parseOperandList(ins, OpAsmParser::Delimiter::Paren) ||
      parser.parseArrow() ||
      parser.parseOperandList(outs, OpAsmParser::Delimiter::Paren) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColon() ||
      parseTypes(insTypes) || parser.parseArrow() || parseTypes(outsTypes))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("attributes")) &&
      parser.parseOptionalAttrDict(result.attributes))
    return failure();
  result.addAttribute("operandSegmentSizes",
                      parser.getBuilder().getDenseI32ArrayAttr(
                          {static_cast<int32_t>(ins.size()),
                           static_cast<int32_t>(outs.size())}));
  return failure(parser.resolveOperands(ins, insTypes, loc, result.operands) ||
                 parser.resolveOperands(outs, outsTypes, loc, result.operands));
}

LogicalResult CopyOp::verify() {
  if (getSource().getType() != getTarget().getType())
    return emitOpError("source and target types differ");
  return success();
}

#define GET_OP_CLASSES
#include "ds/Dialect/DsRt/IR/DsRtOps.cpp.inc"
