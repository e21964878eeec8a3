//===- LossHandlers.cpp - ONNX dropout and loss ops to ds -----------------===//
//
// Part of the ds project.
//
// The default-domain ops that only training graphs use: Dropout (ratio and
// training mode as attributes before opset 12, constant inputs after),
// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

LogicalResult dropout(NodeContext &n) {
  if (failed(n.expectInputs(1, 3)) || failed(n.requireFloat(0)))
    return failure();
  double ratio = 0.5;
  bool training = false;
  if (n.opset() < 12) {
    ratio = n.floatAttr("ratio", 0.5f);
    training = n.intAttr("is_test", 0) == 0 && n.opset() < 7;
  } else {
    if (n.input(1)) {
      FailureOr<double> r = n.constFloat(1, "ratio");
      if (failed(r))
        return failure();
      ratio = *r;
    }
    if (n.input(2)) {
      FailureOr<bool> t = n.constBool(2, "training_mode");
      if (failed(t))
        return failure();
      training = *t;
    }
  }
  if (ratio < 0.0 || ratio >= 1.0)
    return n.error() << "unsupported attribute value ratio=" << ratio
                     << " (must be in [0, 1))";
  OpBuilder &b = n.builder();
  IntegerAttr seed;
  if (const onnx::AttributeProto *s = n.attr("seed"))
    seed = b.getI64IntegerAttr(s->i());
  auto type = cast<RankedTensorType>(n.input(0).getType());
  auto op = DropoutOp::create(
      b, n.loc, type, n.tensor(type.getShape(), b.getI1Type()), n.input(0),
      b.getF64FloatAttr(ratio), b.getBoolAttr(training), seed);
  return n.bind(op->getResults());
}

template <typename OpTy>
LogicalResult lossNode(NodeContext &n, bool hasLogProb) {
  if (failed(n.expectInputs(2, 3)) || failed(n.requireFloat(0)))
    return failure();
  if (!isa<IntegerType>(n.elementTypeOf(1)) || n.elementTypeOf(1).isInteger(1))
    return n.error() << "labels must be int64 or int32";
  std::string reduction = n.stringAttr("reduction", "mean");
  std::optional<ArrayRef<int64_t>> w;
  if (n.input(2)) {
    w = n.shape(2);
    if (n.elementTypeOf(2) != n.elementTypeOf(0))
      return n.error() << "weights element type differs from the scores'";
  }
  FailureOr<sh::Shape> shape =
      sh::loss(n.shape(0), n.shape(1), w, reduction, [&] {
        auto d = n.error();
        d << "unsupported attribute value: ";
        return d;
      });
  if (failed(shape))
    return failure();
  OpBuilder &b = n.builder();
  IntegerAttr ignore;
  if (const onnx::AttributeProto *a = n.attr("ignore_index"))
    ignore = b.getI64IntegerAttr(a->i());
  Type elt = n.elementTypeOf(0);
  if constexpr (std::is_same_v<OpTy, SoftmaxCrossEntropyLossOp>) {
    Type logProb;
    if (hasLogProb && n.outputUsed(1))
      logProb = n.input(0).getType();
    auto op = OpTy::create(b, n.loc, n.tensor(*shape, elt), logProb, n.input(0),
                           n.input(1), n.input(2), b.getStringAttr(reduction),
                           ignore);
    return n.bind(op->getResults());
  } else {
    auto op =
        OpTy::create(b, n.loc, n.tensor(*shape, elt), n.input(0), n.input(1),
                     n.input(2), b.getStringAttr(reduction), ignore);
    return n.bind(op->getResults());
  }
}

} // namespace

void registerLossHandlers(HandlerTable &t) {
  t.add("Dropout", dropout);
  t.add("SoftmaxCrossEntropyLoss", [](NodeContext &n) {
    return lossNode<SoftmaxCrossEntropyLossOp>(n, true);
  });
  t.add("NegativeLogLikelihoodLoss", [](NodeContext &n) {
    return lossNode<NegativeLogLikelihoodLossOp>(n, false);
  });
}

} // namespace mlir::ds::onnx_import
