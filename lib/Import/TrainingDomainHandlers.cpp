//===- TrainingDomainHandlers.cpp - ai.onnx.preview.training ops to ds ----===//
//
// Part of the ds project.
//
// The ops of ONNX's training domain, met in training_info's algorithm (with
// --training-info) or in the main graph: Adam, Adagrad and Momentum become
// one ds.onnx_update per tensor; Gradient runs reverse mode over the ops
// built so far, through the same VJP rules as --ds-autodiff.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

/// The ds.onnx_update kind of a Momentum node (its `mode`), checking its
/// required attributes.
FailureOr<std::string> momentumKind(NodeContext &n) {
  const onnx::AttributeProto *mode = n.attr("mode");
  if (!mode || (mode->s() != "standard" && mode->s() != "nesterov"))
    return n.error() << "unsupported attribute value mode (standard or "
                        "nesterov)";
  for (const char *req : {"alpha", "beta", "norm_coefficient"})
    if (!n.attr(req))
      return n.error() << "missing required attribute '" << req << "'";
  return std::string(mode->s() == "nesterov" ? "nesterov" : "momentum");
}

/// ONNX Adam, Adagrad and Momentum: R, T, then groups of X, G and states,
/// one ds.onnx_update per tensor.
LogicalResult onnxTrainingUpdate(NodeContext &n, StringRef op) {
  size_t states = op == "Adam" ? 2 : 1;
  size_t groups = 2 + states;
  if (n.numInputs() < 2 + groups || (n.numInputs() - 2) % groups != 0)
    return n.error() << "expects R, T and " << groups
                     << " tensors per parameter, got " << n.numInputs()
                     << " inputs";
  size_t count = (n.numInputs() - 2) / groups;
  if (n.numOutputs() != count * (1 + states))
    return n.error() << "expects " << count * (1 + states) << " outputs";
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (!n.input(i))
      return n.error() << "missing input " << i;
  if (!n.elementTypeOf(1).isInteger(64) || sh::product(n.shape(1)) != 1 ||
      !isa<FloatType>(n.elementTypeOf(0)) || sh::product(n.shape(0)) != 1)
    return n.error() << "R must be a float scalar and T an int64 scalar";
  std::string kind = op == "Adam" ? "adam" : op == "Adagrad" ? "adagrad" : "";
  if (op == "Momentum") {
    FailureOr<std::string> k = momentumKind(n);
    if (failed(k))
      return failure();
    kind = *k;
  }
  OpBuilder &b = n.builder();
  SmallVector<Value> outputs(n.numOutputs());
  for (size_t i = 0; i < count; ++i) {
    SmallVector<Value> operands{n.input(0), n.input(1)};
    for (size_t g = 0; g < groups; ++g)
      operands.push_back(n.input(2 + g * count + i));
    Type x = operands[2].getType();
    for (Value v : ArrayRef<Value>(operands).drop_front(2))
      if (v.getType() != x ||
          !isa<FloatType>(cast<ShapedType>(x).getElementType()))
        return n.error() << "X, G and the states of tensor " << i
                         << " must be float tensors of one type";
    SmallVector<Type> types(1 + states, x);
    auto update = OnnxUpdateOp::create(
        b, n.loc, types, operands, b.getStringAttr(kind),
        b.getF64FloatAttr(n.floatAttr("alpha", 0.9f)),
        b.getF64FloatAttr(n.floatAttr("beta", op == "Adam" ? 0.999f : 0.0f)),
        b.getF64FloatAttr(n.floatAttr("epsilon", 0.0f)),
        b.getF64FloatAttr(n.floatAttr("decay_factor", 0.0f)),
        b.getF64FloatAttr(n.floatAttr("norm_coefficient", 0.0f)),
        b.getF64FloatAttr(n.floatAttr("norm_coefficient_post", 0.0f)));
    for (size_t r = 0; r <= states; ++r)
      outputs[r * count + i] = update.getResult(r);
  }
  return n.bind(outputs);
}

/// A constant of `type` filled with `value`.
Value splat(NodeContext &n, RankedTensorType type, double value) {
  return ConstantOp::create(
      n.builder(), n.loc, type,
      DenseElementsAttr::get(type, ArrayRef<Attribute>(FloatAttr::get(
                                       type.getElementType(), value))));
}

/// ONNX Gradient in the main graph: reverse mode from y to xs over the ops
/// built so far, through the same VJP rules as --ds-autodiff.
LogicalResult gradientNode(NodeContext &n) {
  const onnx::AttributeProto *xsAttr = n.attr("xs"), *yAttr = n.attr("y");
  if (!xsAttr || !yAttr)
    return n.error() << "needs attributes 'xs' and 'y'";
  auto yIt = n.importer.values.find(yAttr->s());
  if (yIt == n.importer.values.end())
    return n.error() << "y names '" << yAttr->s()
                     << "', which is not computed before this node";
  SmallVector<Value> xs;
  for (const std::string &x : xsAttr->strings()) {
    auto it = n.importer.values.find(x);
    if (it == n.importer.values.end())
      return n.error() << "xs names '" << x << "', which is not defined";
    xs.push_back(it->second);
  }
  if (n.numOutputs() != xs.size())
    return n.error() << "has " << n.numOutputs() << " outputs for " << xs.size()
                     << " xs";
  Value y = yIt->second;
  auto yType = cast<RankedTensorType>(y.getType());
  if (!isa<FloatType>(yType.getElementType()))
    return n.error() << "y must be a float tensor";
  OpBuilder &b = n.builder();
  SmallVector<Operation *> ops;
  for (Operation &op : *b.getInsertionBlock())
    ops.push_back(&op);
  Value seed = splat(n, yType, 1.0);
  FailureOr<SmallVector<Value>> grads = buildGradients(b, ops, y, seed, xs);
  if (failed(grads))
    return failure();
  // An x that y does not depend on has a zero gradient.
  SmallVector<Value> outputs;
  for (auto [x, g] : llvm::zip(xs, *grads))
    outputs.push_back(g ? g
                        : splat(n, cast<RankedTensorType>(x.getType()), 0.0));
  return n.bind(outputs);
}

} // namespace

void registerTrainingDomainHandlers(HandlerTable &t) {
  for (StringRef op : {"Adam", "Adagrad", "Momentum"})
    t.add(kTrainingDomain, op,
          [op](NodeContext &n) { return onnxTrainingUpdate(n, op); });
  t.add(kTrainingDomain, "Gradient", gradientNode);
}

} // namespace mlir::ds::onnx_import
