//===- DoubleConstants.cpp - Python float literals exported as DOUBLE -----===//
//
// Part of the ds project.
//
// torch 1.13 exports some Python numbers as DOUBLE scalar Constant nodes:
// `torch.clamp(x, min=0.1)` and `clamp_min(eps)` (F.normalize) give
// Constant(double 0.1) -> Cast(to=FLOAT) -> Clip. ds computes in f32, f16
// and bf16 only, so such a constant is held back when its node is imported
// and built at each consumer in the consumer's float type: the `to` type of
// a Cast to a float type, else the element type of the consumer's first
// float input. That is what torch does with a Python scalar applied to a
// float tensor (the scalar is rounded to the tensor's type). Refused with
// an error naming the constant: a DOUBLE tensor of more than one element
// (data, not a literal), a value that overflows the target type, and a
// consumer with no float type to convert to.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/ADT/APFloat.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

/// The value of a one-element DOUBLE tensor (raw bytes or double_data).
static std::optional<double> doubleScalar(const onnx::TensorProto &t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return std::nullopt;
  if (t.has_raw_data()) {
    if (t.raw_data().size() != sizeof(double))
      return std::nullopt;
    double v;
    std::memcpy(&v, t.raw_data().data(), sizeof(double));
    return v;
  }
  if (t.double_data_size() != 1)
    return std::nullopt;
  return t.double_data(0);
}

FailureOr<bool> Importer::deferDoubleConstant(const onnx::NodeProto &node,
                                              Location loc) {
  if (node.op_type() != "Constant" ||
      !HandlerTable::isDefaultDomain(node.domain()) ||
      node.attribute_size() != 1 || node.attribute(0).name() != "value" ||
      node.attribute(0).t().data_type() != onnx::TensorProto::DOUBLE ||
      node.output_size() != 1)
    return false;
  const onnx::TensorProto &t = node.attribute(0).t();
  int64_t count = 1;
  for (int64_t d : t.dims())
    count *= d;
  std::optional<double> v = count == 1 ? doubleScalar(t) : std::nullopt;
  if (!v)
    return mlir::emitError(loc)
           << "node '" << cast<NameLoc>(loc).getName().getValue()
           << "' (Constant): a DOUBLE tensor of shape "
           << shapeStr(SmallVector<int64_t>(t.dims().begin(), t.dims().end()))
           << ": ds accepts DOUBLE constants only as scalars (Python number "
              "literals), which it converts to the consuming op's float type";
  doubleScalars[node.output(0)] = {*v, static_cast<int64_t>(t.dims_size())};
  return true;
}

/// The float type a DOUBLE scalar takes at `node`: a Cast's float `to`
/// type, else the element type of the node's first float input.
static FloatType consumerFloatType(MLIRContext *ctx,
                                   const onnx::NodeProto &node,
                                   ArrayRef<Value> inputs) {
  if (node.op_type() == "Cast") {
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == "to")
        return dyn_cast_or_null<FloatType>(elementType(ctx, a.i()));
    return nullptr;
  }
  for (Value v : inputs)
    if (v)
      if (auto t = dyn_cast<FloatType>(
              cast<ShapedType>(v.getType()).getElementType()))
        return t;
  return nullptr;
}

LogicalResult Importer::resolveDoubleInputs(const onnx::NodeProto &node,
                                            Location loc,
                                            SmallVectorImpl<Value> &inputs) {
  FloatType elt;
  bool searched = false;
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string &name = node.input(i);
    auto it = doubleScalars.find(name);
    if (name.empty() || it == doubleScalars.end())
      continue;
    if (!searched) {
      elt = consumerFloatType(ctx, node, inputs);
      searched = true;
    }
    auto fail = [&] {
      InFlightDiagnostic d = mlir::emitError(loc);
      d << "node '" << cast<NameLoc>(loc).getName().getValue() << "' ("
        << node.op_type() << "): DOUBLE constant '" << name << "' (value "
        << it->second.value << ") ";
      return d;
    };
    if (!elt)
      return fail() << "feeds an op without a float type to convert it to: "
                       "ds computes in f32, f16 or bf16 (write the number "
                       "as a float tensor in the model)";
    Value &cached = doubleConstants[name][elt];
    if (cached) {
      inputs[i] = cached;
      continue;
    }
    APFloat v(it->second.value);
    bool losesInfo = false;
    APFloat::opStatus status =
        v.convert(elt.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                  &losesInfo);
    if ((status & APFloat::opOverflow) && std::isfinite(it->second.value))
      return fail() << "overflows " << elt;
    SmallVector<int64_t> shape(it->second.rank, 1);
    auto type = RankedTensorType::get(shape, elt);
    cached = ConstantOp::create(builder, loc, type,
                                DenseElementsAttr::get(type, v));
    inputs[i] = cached;
  }
  return success();
}
