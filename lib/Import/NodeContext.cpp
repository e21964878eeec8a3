//===- NodeContext.cpp - What an ONNX op handler sees of its node ---------===//
//
// Part of the ds project.
//
// Attribute and input access for handlers, compile-time constant inputs
// (folded constants or initializer data), and binding results to the
// node's outputs.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

DenseElementsAttr onnx_import::constantValue(Importer &importer, Value v) {
  DenseElementsAttr attr;
  if (matchPattern(v, m_Constant(&attr)))
    return attr;
  auto it = importer.paramData.find(v);
  if (it == importer.paramData.end())
    return nullptr;
  FailureOr<DenseElementsAttr> data = importer.tensorToAttr(
      *it->second, "initializer '" + it->second->name() + "'");
  return succeeded(data) ? *data : nullptr;
}

void onnx_import::recordBatchAxis(Value v, int64_t axis) {
  auto extent = [&](Value x) {
    auto t = dyn_cast<RankedTensorType>(x.getType());
    return t && axis < t.getRank() ? t.getDimSize(axis) : ShapedType::kDynamic;
  };
  int64_t batch = extent(v);
  while (auto slice = v.getDefiningOp<SliceOp>()) {
    if (extent(slice.getInput()) != batch)
      return; // the slice narrows the batch: not the input's own layout
    v = slice.getInput();
  }
  auto arg = dyn_cast<BlockArgument>(v);
  auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                  : func::FuncOp();
  if (!func || !func.getArgAttr(arg.getArgNumber(), attrs::kInput) ||
      axis == 0)
    return;
  func.setArgAttr(arg.getArgNumber(), "ds.batch_axis",
                  IntegerAttr::get(IntegerType::get(func.getContext(), 64),
                                   axis));
}

std::string NodeContext::name() const {
  return cast<NameLoc>(loc).getName().str();
}

LogicalResult NodeContext::expectInputs(size_t min, size_t max) const {
  for (size_t i = 0; i < min; ++i)
    if (!input(i))
      return error() << "missing required input " << i;
  if (inputs.size() > max)
    return error() << "takes at most " << max << " inputs, got "
                   << inputs.size();
  return success();
}

LogicalResult NodeContext::requireFloat(size_t i) const {
  if (!isa<FloatType>(elementTypeOf(i)))
    return error() << "unsupported element type " << elementTypeOf(i)
                   << " of input " << i << " (ds computes this op in "
                   << "f32, f16 or bf16)";
  return success();
}

const onnx::AttributeProto *NodeContext::attr(StringRef key) const {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == key)
      return &a;
  return nullptr;
}

std::optional<SmallVector<int64_t>> NodeContext::intsAttr(StringRef key) const {
  const onnx::AttributeProto *a = attr(key);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

Value NodeContext::constant(RankedTensorType type, Attribute value) const {
  return ConstantOp::create(builder(), loc, type, cast<ElementsAttr>(value));
}

//===----------------------------------------------------------------------===//
// Compile-time constant inputs
//===----------------------------------------------------------------------===//

bool NodeContext::isConstant(size_t i) const {
  return input(i) && constantValue(importer, input(i));
}

FailureOr<SmallVector<int64_t>> NodeContext::constInts(size_t i,
                                                       StringRef what) const {
  DenseElementsAttr attr =
      input(i) ? constantValue(importer, input(i)) : nullptr;
  if (!attr || !isa<IntegerType>(attr.getElementType())) {
    error() << what << " (input " << i
            << ") must be a compile-time constant: ds plans static shapes";
    return failure();
  }
  SmallVector<int64_t> out;
  for (APInt v : attr.getValues<APInt>())
    out.push_back(v.getSExtValue());
  return out;
}

FailureOr<double> NodeContext::constFloat(size_t i, StringRef what) const {
  DenseElementsAttr attr =
      input(i) ? constantValue(importer, input(i)) : nullptr;
  if (!attr || attr.getNumElements() != 1 ||
      !isa<FloatType>(attr.getElementType())) {
    error() << what << " (input " << i << ") must be a constant float scalar";
    return failure();
  }
  return (*attr.getValues<APFloat>().begin()).convertToDouble();
}

FailureOr<bool> NodeContext::constBool(size_t i, StringRef what) const {
  DenseElementsAttr attr =
      input(i) ? constantValue(importer, input(i)) : nullptr;
  if (!attr || attr.getNumElements() != 1 ||
      !attr.getElementType().isInteger(1)) {
    error() << what << " (input " << i << ") must be a constant bool scalar";
    return failure();
  }
  return *attr.getValues<bool>().begin();
}

FailureOr<std::optional<SmallVector<int64_t>>>
NodeContext::axesOperand(int64_t inputSince) const {
  if (opset() < inputSince)
    return intsAttr("axes");
  if (!input(1))
    return std::optional<SmallVector<int64_t>>();
  FailureOr<SmallVector<int64_t>> v = constInts(1, "axes");
  if (failed(v))
    return failure();
  return std::optional<SmallVector<int64_t>>(*v);
}

//===----------------------------------------------------------------------===//
// Result types and binding
//===----------------------------------------------------------------------===//

RankedTensorType NodeContext::inferredOutputType(size_t i) const {
  if (!outputUsed(i))
    return nullptr;
  auto it = importer.inferredTypes.find(node.output(i));
  if (it == importer.inferredTypes.end())
    return nullptr;
  const onnx::TypeProto &t = *it->second;
  if (!t.has_tensor_type() || !t.tensor_type().has_shape())
    return nullptr;
  Type elt = elementType(ctx(), t.tensor_type().elem_type());
  if (!elt)
    return nullptr;
  SmallVector<int64_t> shape;
  for (const auto &d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value())
      return nullptr;
    shape.push_back(d.dim_value());
  }
  return RankedTensorType::get(shape, elt);
}

FailureOr<RankedTensorType>
NodeContext::requireInferredOutputType(StringRef what) const {
  if (RankedTensorType t = inferredOutputType(0))
    return t;
  error() << what << " must be a compile-time constant: ds plans static shapes";
  return failure();
}

LogicalResult NodeContext::bind(ValueRange values) {
  for (auto [i, v] : llvm::enumerate(values))
    if (outputUsed(i))
      importer.values[node.output(i)] = v;
  for (size_t i = values.size(); i < numOutputs(); ++i)
    if (outputUsed(i))
      return error() << "output " << i << " ('" << node.output(i)
                     << "') is not supported";
  return success();
}
