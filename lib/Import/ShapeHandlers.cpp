//===- ShapeHandlers.cpp - ONNX constants and shape arithmetic to ds ------===//
//
// Part of the ds project.
//
// Constant, Shape, ConstantOfShape and Range: the ops of PyTorch's shape
// arithmetic. They fold as they are built, so that the Reshape, Expand and
// Slice nodes after them see constant operands.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include <algorithm>
#include <cmath>

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

/// A Constant's value_float(s) or value_int(s) attribute as a tensor: a
/// scalar for the singular spelling (`single`), 1-D for the plural one.
template <typename T, typename List>
LogicalResult bindListConstant(NodeContext &n, Type elt, bool scalar, T single,
                               const List &list) {
  SmallVector<T> values;
  if (scalar)
    values.push_back(single);
  else
    values.assign(list.begin(), list.end());
  auto type = scalar ? RankedTensorType::get({}, elt)
                     : RankedTensorType::get({(int64_t)values.size()}, elt);
  return n.bind(
      n.constant(type, DenseElementsAttr::get(type, ArrayRef<T>(values))));
}

LogicalResult constantNode(NodeContext &n) {
  if (n.node.attribute_size() != 1)
    return n.error() << "expects exactly one value attribute";
  const onnx::AttributeProto &a = n.node.attribute(0);
  MLIRContext *ctx = n.ctx();
  if (a.name() == "value") {
    FailureOr<DenseElementsAttr> attr =
        n.importer.tensorToAttr(a.t(), "constant '" + n.name() + "'");
    if (failed(attr))
      return failure();
    return n.bind(n.constant(cast<RankedTensorType>(attr->getType()), *attr));
  }
  if (a.name() == "value_float" || a.name() == "value_floats")
    return bindListConstant<float>(
        n, Float32Type::get(ctx), a.name() == "value_float", a.f(), a.floats());
  if (a.name() == "value_int" || a.name() == "value_ints")
    return bindListConstant<int64_t>(n, IntegerType::get(ctx, 64),
                                     a.name() == "value_int", a.i(), a.ints());
  return n.error() << "unsupported attribute '" << a.name()
                   << "' (ds supports numeric tensor constants)";
}

LogicalResult shapeNode(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  int64_t rank = n.shape(0).size();
  auto clampDim = [&](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  int64_t start = clampDim(n.intAttr("start", 0));
  int64_t end = clampDim(n.intAttr("end", rank));
  end = std::max(start, end);
  OpBuilder &b = n.builder();
  return n.emit<ShapeOp>(n.tensor({end - start}, b.getI64Type()), n.input(0),
                         b.getI64IntegerAttr(start), b.getI64IntegerAttr(end));
}

LogicalResult constantOfShape(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  Attribute value;
  Type elt = Float32Type::get(n.ctx());
  if (const onnx::AttributeProto *a = n.attr("value")) {
    FailureOr<DenseElementsAttr> t =
        n.importer.tensorToAttr(a->t(), "value of '" + n.name() + "'");
    if (failed(t))
      return failure();
    if (t->getNumElements() != 1)
      return n.error() << "value must hold one element";
    value = t->getValues<Attribute>()[0];
    elt = t->getElementType();
  } else {
    value = FloatAttr::get(elt, 0.0);
  }
  RankedTensorType type;
  if (n.isConstant(0)) {
    FailureOr<SmallVector<int64_t>> dims = n.constInts(0, "shape");
    if (failed(dims))
      return failure();
    for (int64_t d : *dims)
      if (d < 0)
        return n.error() << "negative dimension in shape " << shapeStr(*dims);
    type = RankedTensorType::get(*dims, elt);
  } else {
    FailureOr<RankedTensorType> t =
        n.requireInferredOutputType("shape (input 0)");
    if (failed(t))
      return failure();
    type = *t;
  }
  if (n.shape(0).size() != 1)
    return n.error() << "shape input must be 1-D";
  return n.emit<ConstantOfShapeOp>(type, n.input(0), cast<TypedAttr>(value));
}

LogicalResult range(NodeContext &n) {
  if (failed(n.expectInputs(3, 3)))
    return failure();
  Type elt = n.elementTypeOf(0);
  for (size_t i = 0; i < 3; ++i) {
    if (n.elementTypeOf(i) != elt)
      return n.error() << "start, limit and delta element types differ";
    if (sh::product(n.shape(i)) != 1)
      return n.error() << "input " << i << " must be a scalar";
  }
  auto scalar = [&](size_t i) -> FailureOr<double> {
    if (isa<FloatType>(elt))
      return n.constFloat(i, i == 0 ? "start" : i == 1 ? "limit" : "delta");
    FailureOr<SmallVector<int64_t>> v = n.constInts(i, i == 0   ? "start"
                                                       : i == 1 ? "limit"
                                                                : "delta");
    if (failed(v))
      return failure();
    return static_cast<double>((*v)[0]);
  };
  FailureOr<double> start = scalar(0), limit = scalar(1), delta = scalar(2);
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  if (*delta == 0)
    return n.error() << "delta must not be 0";
  int64_t count = std::max<int64_t>(
      0, static_cast<int64_t>(std::ceil((*limit - *start) / *delta)));
  return n.emit<RangeOp>(n.tensor({count}, elt), n.input(0), n.input(1),
                         n.input(2));
}

} // namespace

// Constant is here: most constants in exported graphs are shapes.
void registerShapeHandlers(HandlerTable &t) {
  t.add("Constant", constantNode);
  t.add("Shape", shapeNode);
  t.add("ConstantOfShape", constantOfShape);
  t.add("Range", range);
}

} // namespace mlir::ds::onnx_import
