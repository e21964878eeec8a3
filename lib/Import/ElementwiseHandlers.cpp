//===- ElementwiseHandlers.cpp - ONNX elementwise ops to ds ---------------===//
//
// Part of the ds project.
//
// Unary and binary arithmetic, comparisons and logic (with ONNX's
// multidirectional broadcasting), the variadic Max/Min/Sum, Cast, Where,
// Identity, and the parametrized activations (ds.activation; PRelu as a
// select, so that its slope's gradient is the existing ops').
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include <cmath>
#include <utility>

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

template <typename OpTy> LogicalResult binary(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)))
    return failure();
  // Before opset 7, broadcasting was opt-in through these attributes.
  if (n.intAttr("broadcast", 0) != 0 || n.attr("axis"))
    return n.error() << "unsupported attribute value: legacy (opset < 7) "
                        "broadcast attributes";
  Type lt = n.elementTypeOf(0), rt = n.elementTypeOf(1);
  bool isPow = std::is_same_v<OpTy, PowOp>;
  if (!isPow && lt != rt)
    return n.error() << "operand element types differ: " << lt << " and " << rt;
  FailureOr<sh::Shape> shape =
      sh::broadcast(n.shape(0), n.shape(1), n.emitFn());
  if (failed(shape))
    return failure();
  Type elt = isPredicate(OpTy::getKind()) ? IntegerType::get(n.ctx(), 1) : lt;
  if (isLogical(OpTy::getKind()) != lt.isInteger(1))
    return n.error() << "unsupported operand element type " << lt;
  return n.emit<OpTy>(n.tensor(*shape, elt), n.input(0), n.input(1));
}

/// Max/Min/Sum are variadic in ONNX: fold them pairwise.
template <typename OpTy> LogicalResult variadic(NodeContext &n) {
  if (n.numInputs() == 0 || !n.input(0))
    return n.error() << "needs at least one input";
  if (n.numInputs() == 1)
    return n.bind(n.input(0));
  Value acc = n.input(0);
  for (size_t i = 1; i < n.numInputs(); ++i) {
    Value rhs = n.input(i);
    auto lt = cast<ShapedType>(acc.getType());
    if (lt.getElementType() != n.elementTypeOf(i))
      return n.error() << "operand element types differ";
    FailureOr<sh::Shape> shape =
        sh::broadcast(lt.getShape(), n.shape(i), n.emitFn());
    if (failed(shape))
      return failure();
    acc = n.builder().createOrFold<OpTy>(
        n.loc, n.tensor(*shape, lt.getElementType()), acc, rhs);
  }
  return n.bind(acc);
}

template <typename OpTy> LogicalResult unary(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  Type elt = n.elementTypeOf(0);
  UnaryKind kind = OpTy::getKind();
  bool floatOnly = kind == UnaryKind::Exp || kind == UnaryKind::Log ||
                   kind == UnaryKind::Sqrt || kind == UnaryKind::Reciprocal ||
                   kind == UnaryKind::Erf || kind == UnaryKind::Tanh ||
                   kind == UnaryKind::Sigmoid;
  if ((kind == UnaryKind::Not) != elt.isInteger(1) ||
      (floatOnly && !isa<FloatType>(elt)))
    return n.error() << "unsupported operand element type " << elt;
  return n.emit<OpTy>(n.input(0));
}

LogicalResult identity(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  return n.bind(n.input(0));
}

LogicalResult castNode(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  int64_t to = n.intAttr("to", 0);
  Type elt = elementType(n.ctx(), to);
  if (!elt)
    return n.error() << "unsupported attribute value to="
                     << elementTypeName(to);
  return n.emit<CastOp>(n.tensor(n.shape(0), elt), n.input(0));
}

LogicalResult where(NodeContext &n) {
  if (failed(n.expectInputs(3, 3)))
    return failure();
  if (!n.elementTypeOf(0).isInteger(1))
    return n.error() << "condition must be bool";
  if (n.elementTypeOf(1) != n.elementTypeOf(2))
    return n.error() << "x and y element types differ";
  FailureOr<sh::Shape> xy = sh::broadcast(n.shape(1), n.shape(2), n.emitFn());
  if (failed(xy))
    return failure();
  FailureOr<sh::Shape> shape = sh::broadcast(n.shape(0), *xy, n.emitFn());
  if (failed(shape))
    return failure();
  return n.emit<WhereOp>(n.tensor(*shape, n.elementTypeOf(1)), n.input(0),
                         n.input(1), n.input(2));
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

/// `ds.activation` of input 0, its two parameters given.
LogicalResult activation(NodeContext &n, StringRef kind, double alpha = 0,
                         double beta = 0) {
  if (failed(n.requireFloat(0)))
    return failure();
  OpBuilder &b = n.builder();
  return n.emit<ActivationOp>(n.input(0).getType(), n.input(0),
                              b.getStringAttr(kind), b.getF32FloatAttr(alpha),
                              b.getF32FloatAttr(beta));
}

/// A one-input activation.
LogicalResult unaryActivation(NodeContext &n, StringRef kind, double alpha = 0,
                              double beta = 0) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  return activation(n, kind, alpha, beta);
}

/// Clip: bounds as attributes before opset 11, optional constant inputs
/// from then on (unbounded when absent).
LogicalResult clip(NodeContext &n) {
  if (failed(n.expectInputs(1, 3)))
    return failure();
  double lo = -INFINITY, hi = INFINITY;
  if (n.opset() < 11) {
    lo = n.floatAttr("min", -INFINITY);
    hi = n.floatAttr("max", INFINITY);
  }
  for (auto [i, bound] : {std::pair<size_t, double *>{1, &lo}, {2, &hi}}) {
    if (!n.input(i))
      continue;
    FailureOr<double> v =
        n.constFloat(i, i == 1 ? "Clip's min" : "Clip's max");
    if (failed(v))
      return failure();
    *bound = *v;
  }
  return activation(n, "clip", lo, hi);
}

/// PRelu: `where(x < 0, x * slope, x)`, the slope broadcast to x.
LogicalResult prelu(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)) || failed(n.requireFloat(0)))
    return failure();
  Type elt = n.elementTypeOf(0);
  if (n.elementTypeOf(1) != elt)
    return n.error() << "operand element types differ: " << elt << " and "
                     << n.elementTypeOf(1);
  FailureOr<sh::Shape> shape =
      sh::broadcast(n.shape(0), n.shape(1), n.emitFn());
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) != n.shape(0))
    return n.error() << "slope does not broadcast to the input's shape";
  OpBuilder &b = n.builder();
  auto scalar = RankedTensorType::get({}, elt);
  Value zero = n.constant(
      scalar, DenseElementsAttr::get(scalar, b.getFloatAttr(elt, 0.0)));
  Value x = n.input(0);
  Value negative =
      LessOp::create(b, n.loc, n.tensor(*shape, b.getI1Type()), x, zero);
  Value scaled = MulOp::create(b, n.loc, x.getType(), x, n.input(1));
  return n.emit<WhereOp>(x.getType(), negative, scaled, x);
}

} // namespace

void registerElementwiseHandlers(HandlerTable &t) {
  t.add("Identity", identity);
  t.add("Add", binary<AddOp>);
  t.add("Sub", binary<SubOp>);
  t.add("Mul", binary<MulOp>);
  t.add("Div", binary<DivOp>);
  t.add("Pow", binary<PowOp>);
  t.add("Equal", binary<EqualOp>);
  t.add("Less", binary<LessOp>);
  t.add("LessOrEqual", binary<LessOrEqualOp>);
  t.add("Greater", binary<GreaterOp>);
  t.add("GreaterOrEqual", binary<GreaterOrEqualOp>);
  t.add("And", binary<AndOp>);
  t.add("Or", binary<OrOp>);
  t.add("Xor", binary<XorOp>);
  t.add("Max", variadic<MaxOp>);
  t.add("Min", variadic<MinOp>);
  t.add("Sum", variadic<AddOp>);
  t.add("Neg", unary<NegOp>);
  t.add("Abs", unary<AbsOp>);
  t.add("Exp", unary<ExpOp>);
  t.add("Log", unary<LogOp>);
  t.add("Sqrt", unary<SqrtOp>);
  t.add("Reciprocal", unary<ReciprocalOp>);
  t.add("Erf", unary<ErfOp>);
  t.add("Tanh", unary<TanhOp>);
  t.add("Relu", unary<ReluOp>);
  t.add("Sigmoid", unary<SigmoidOp>);
  t.add("Not", unary<NotOp>);
  t.add("Clip", clip);
  t.add("PRelu", prelu);
  t.add("LeakyRelu", [](NodeContext &n) {
    return unaryActivation(n, "leaky_relu", n.floatAttr("alpha", 0.01f));
  });
  t.add("Elu", [](NodeContext &n) {
    return unaryActivation(n, "elu", n.floatAttr("alpha", 1.0f));
  });
  t.add("Selu", [](NodeContext &n) {
    return unaryActivation(n, "selu",
                           n.floatAttr("alpha", 1.67326319217681884765625f),
                           n.floatAttr("gamma", 1.05070102214813232421875f));
  });
  t.add("Celu", [](NodeContext &n) {
    return unaryActivation(n, "celu", n.floatAttr("alpha", 1.0f));
  });
  t.add("HardSigmoid", [](NodeContext &n) {
    return unaryActivation(n, "hard_sigmoid", n.floatAttr("alpha", 0.2f),
                           n.floatAttr("beta", 0.5f));
  });
  for (auto [onnx, kind] : {std::pair<StringRef, StringRef>{"Softplus", "softplus"},
                            {"Softsign", "softsign"},
                            {"HardSwish", "hard_swish"},
                            {"Sin", "sin"},
                            {"Cos", "cos"}})
    t.add(onnx, [kind = kind](NodeContext &n) { return unaryActivation(n, kind); });
  t.add("Cast", castNode);
  t.add("Where", where);
}

} // namespace mlir::ds::onnx_import
