//===- DsVJP.cpp - vector-Jacobian products of the ds ops -----------------===//
//
// Part of the ds project.
//
// Each differentiable op gets VJPOpInterface through an external model:
// given the gradients of its results (null where a result does not reach the
// loss), it builds the gradients of its operands (null for operands that are
// not differentiable: indices, conditions, shapes). Broadcast operands get
// their gradient summed back to their own shape (reduceTo).
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;
using namespace mlir::ds;
namespace sh = mlir::ds::shapes;

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// A scalar constant of element type `elt`.
Value scalar(OpBuilder &b, Location loc, Type elt, double v) {
  auto type = RankedTensorType::get({}, elt);
  Attribute a = isa<FloatType>(elt)
                    ? Attribute(FloatAttr::get(elt, v))
                    : Attribute(IntegerAttr::get(elt, static_cast<int64_t>(v)));
  return ConstantOp::create(b, loc, type,
                            DenseElementsAttr::get(type, ArrayRef<Attribute>(a)));
}

Value zerosLike(OpBuilder &b, Location loc, RankedTensorType type) {
  Type elt = type.getElementType();
  Attribute zero = isa<FloatType>(elt) ? Attribute(FloatAttr::get(elt, 0.0))
                                       : Attribute(IntegerAttr::get(elt, 0));
  return ConstantOp::create(b, loc, type,
                            DenseElementsAttr::get(type, ArrayRef<Attribute>(zero)));
}

/// Elementwise binary op with the broadcast result type.
template <typename OpTy>
Value binary(OpBuilder &b, Location loc, Value x, Value y) {
  auto tx = tensorType(x), ty = tensorType(y);
  FailureOr<sh::Shape> shape = sh::broadcast(
      tx.getShape(), ty.getShape(), [&] { return mlir::emitError(loc); });
  Type elt = isPredicate(OpTy::getKind()) ? b.getI1Type() : tx.getElementType();
  return OpTy::create(b, loc, RankedTensorType::get(*shape, elt), x, y);
}
Value add(OpBuilder &b, Location l, Value x, Value y) { return binary<AddOp>(b, l, x, y); }
Value sub(OpBuilder &b, Location l, Value x, Value y) { return binary<SubOp>(b, l, x, y); }
Value mul(OpBuilder &b, Location l, Value x, Value y) { return binary<MulOp>(b, l, x, y); }
Value div(OpBuilder &b, Location l, Value x, Value y) { return binary<DivOp>(b, l, x, y); }

Value mulScalar(OpBuilder &b, Location l, Value x, double v) {
  return mul(b, l, x, scalar(b, l, tensorType(x).getElementType(), v));
}

/// `where(c, x, 0)` or `where(c, 0, x)` at the broadcast shape.
Value select(OpBuilder &b, Location l, Value c, Value x, bool keepWhenTrue) {
  Value zero = scalar(b, l, tensorType(x).getElementType(), 0.0);
  auto tc = tensorType(c), tx = tensorType(x);
  FailureOr<sh::Shape> shape = sh::broadcast(
      tc.getShape(), tx.getShape(), [&] { return mlir::emitError(l); });
  auto type = RankedTensorType::get(*shape, tx.getElementType());
  return keepWhenTrue ? WhereOp::create(b, l, type, c, x, zero)
                      : WhereOp::create(b, l, type, c, zero, x);
}

/// Sums `g` over the dimensions `target` broadcast, then reshapes to it.
Value reduceTo(OpBuilder &b, Location loc, Value g, RankedTensorType target) {
  auto tg = tensorType(g);
  if (tg.getShape() == target.getShape())
    return g;
  int64_t lead = tg.getRank() - target.getRank();
  SmallVector<int64_t> axes;
  sh::Shape kept(tg.getShape().begin(), tg.getShape().end());
  for (int64_t d = 0; d < tg.getRank(); ++d) {
    bool reduce = d < lead || (target.getDimSize(d - lead) == 1 &&
                               tg.getDimSize(d) != 1);
    if (reduce) {
      axes.push_back(d);
      kept[d] = 1;
    }
  }
  Value r = g;
  if (!axes.empty())
    r = ReduceSumOp::create(b, loc,
                            RankedTensorType::get(kept, tg.getElementType()), g,
                            b.getDenseI64ArrayAttr(axes), b.getBoolAttr(true));
  return ReshapeOp::create(b, loc, target, r);
}

/// Swaps the last two dimensions.
Value transposeLast2(OpBuilder &b, Location loc, Value x) {
  auto t = tensorType(x);
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < t.getRank(); ++i)
    perm.push_back(i);
  std::swap(perm[t.getRank() - 1], perm[t.getRank() - 2]);
  sh::Shape shape(t.getShape().begin(), t.getShape().end());
  std::swap(shape[t.getRank() - 1], shape[t.getRank() - 2]);
  return TransposeOp::create(b, loc,
                             RankedTensorType::get(shape, t.getElementType()),
                             x, b.getDenseI64ArrayAttr(perm));
}

Value matmul(OpBuilder &b, Location loc, Value x, Value y) {
  auto tx = tensorType(x), ty = tensorType(y);
  FailureOr<sh::Shape> shape = sh::matmul(tx.getShape(), ty.getShape(),
                                          [&] { return mlir::emitError(loc); });
  return MatMulOp::create(b, loc,
                          RankedTensorType::get(*shape, tx.getElementType()), x,
                          y);
}

/// Reshapes a reduction's result gradient to the kept-dimensions shape and
/// broadcasts it to the input.
Value expandReduced(OpBuilder &b, Location loc, Value g, RankedTensorType in,
                    ArrayRef<int64_t> axes) {
  sh::Shape kept(in.getShape().begin(), in.getShape().end());
  for (int64_t a : axes)
    kept[a] = 1;
  auto keptType = RankedTensorType::get(kept, in.getElementType());
  Value r = ReshapeOp::create(b, loc, keptType, g);
  return ExpandOp::create(b, loc, in, r);
}

//===----------------------------------------------------------------------===//
// Per-op rules
//===----------------------------------------------------------------------===//

using Grads = SmallVectorImpl<Value>;

LogicalResult vjp(AddOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  out.assign({reduceTo(b, l, gs[0], tensorType(op.getLhs())),
         reduceTo(b, l, gs[0], tensorType(op.getRhs()))});
  return success();
}
LogicalResult vjp(SubOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  out.assign({reduceTo(b, l, gs[0], tensorType(op.getLhs())),
         reduceTo(b, l, NegOp::create(b, l, gs[0]), tensorType(op.getRhs()))});
  return success();
}
LogicalResult vjp(MulOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  out.assign({reduceTo(b, l, mul(b, l, gs[0], op.getRhs()), tensorType(op.getLhs())),
         reduceTo(b, l, mul(b, l, gs[0], op.getLhs()), tensorType(op.getRhs()))});
  return success();
}
LogicalResult vjp(DivOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value da = div(b, l, gs[0], op.getRhs());
  // d(a/b)/db = -(a/b)/b
  Value db = NegOp::create(b, l, div(b, l, mul(b, l, gs[0], op.getResult()),
                                     op.getRhs()));
  out.assign({reduceTo(b, l, da, tensorType(op.getLhs())),
         reduceTo(b, l, db, tensorType(op.getRhs()))});
  return success();
}
LogicalResult vjp(PowOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Type elt = tensorType(op.getLhs()).getElementType();
  Value e = op.getRhs();
  bool floatExp = isa<FloatType>(tensorType(e).getElementType());
  if (!floatExp)
    e = CastOp::create(b, l,
                       RankedTensorType::get(tensorType(e).getShape(), elt), e);
  // d/dx x^e = e * x^(e-1)
  Value em1 = sub(b, l, e, scalar(b, l, elt, 1.0));
  Value da = mul(b, l, gs[0], mul(b, l, e, binary<PowOp>(b, l, op.getLhs(), em1)));
  out.push_back(reduceTo(b, l, da, tensorType(op.getLhs())));
  if (floatExp) // d/de x^e = x^e * log(x)
    out.push_back(reduceTo(b, l,
                           mul(b, l, gs[0],
                               mul(b, l, op.getResult(),
                                   LogOp::create(b, l, op.getLhs()))),
                           tensorType(op.getRhs())));
  else
    out.push_back(Value());
  return success();
}
template <typename OpTy, bool isMax>
LogicalResult vjpMaxMin(OpTy op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value pick = isMax ? binary<GreaterOrEqualOp>(b, l, op.getLhs(), op.getRhs())
                     : binary<LessOrEqualOp>(b, l, op.getLhs(), op.getRhs());
  out.assign({reduceTo(b, l, select(b, l, pick, gs[0], true), tensorType(op.getLhs())),
         reduceTo(b, l, select(b, l, pick, gs[0], false), tensorType(op.getRhs()))});
  return success();
}
LogicalResult vjp(MaxOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  return vjpMaxMin<MaxOp, true>(op, b, gs, out);
}
LogicalResult vjp(MinOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  return vjpMaxMin<MinOp, false>(op, b, gs, out);
}

LogicalResult vjp(NegOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({NegOp::create(b, op.getLoc(), gs[0])});
  return success();
}
LogicalResult vjp(ExpOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({mul(b, op.getLoc(), gs[0], op.getResult())});
  return success();
}
LogicalResult vjp(LogOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({div(b, op.getLoc(), gs[0], op.getInput())});
  return success();
}
LogicalResult vjp(SqrtOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  out.assign({div(b, l, mulScalar(b, l, gs[0], 0.5), op.getResult())});
  return success();
}
LogicalResult vjp(ReciprocalOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value y = op.getResult();
  out.assign({NegOp::create(b, l, mul(b, l, gs[0], mul(b, l, y, y)))});
  return success();
}
LogicalResult vjp(ErfOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value x = op.getInput();
  // d erf(x)/dx = 2/sqrt(pi) * exp(-x^2)
  Value e = ExpOp::create(b, l, NegOp::create(b, l, mul(b, l, x, x)));
  out.assign({mul(b, l, gs[0], mulScalar(b, l, e, 2.0 / std::sqrt(M_PI)))});
  return success();
}
LogicalResult vjp(TanhOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value y = op.getResult();
  Type elt = tensorType(y).getElementType();
  out.assign({mul(b, l, gs[0], sub(b, l, scalar(b, l, elt, 1.0), mul(b, l, y, y)))});
  return success();
}
LogicalResult vjp(SigmoidOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value y = op.getResult();
  Type elt = tensorType(y).getElementType();
  out.assign({mul(b, l, gs[0], mul(b, l, y, sub(b, l, scalar(b, l, elt, 1.0), y)))});
  return success();
}
LogicalResult vjp(ReluOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value x = op.getInput();
  Value pos = binary<GreaterOp>(b, l, x, scalar(b, l, tensorType(x).getElementType(), 0.0));
  out.assign({select(b, l, pos, gs[0], true)});
  return success();
}
LogicalResult vjp(AbsOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value x = op.getInput();
  Value zero = scalar(b, l, tensorType(x).getElementType(), 0.0);
  Value pos = binary<GreaterOp>(b, l, x, zero);
  Value neg = binary<LessOp>(b, l, x, zero);
  out.assign({add(b, l, select(b, l, pos, gs[0], true),
             select(b, l, neg, NegOp::create(b, l, gs[0]), true))});
  return success();
}
LogicalResult vjp(CastOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  auto in = tensorType(op.getInput());
  if (!isa<FloatType>(in.getElementType())) {
    out.assign({Value()});
    return success();
  }
  out.assign({CastOp::create(b, op.getLoc(), in, gs[0])});
  return success();
}
LogicalResult vjp(WhereOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  out.assign({Value(),
         reduceTo(b, l, select(b, l, op.getCondition(), gs[0], true),
                  tensorType(op.getX())),
         reduceTo(b, l, select(b, l, op.getCondition(), gs[0], false),
                  tensorType(op.getY()))});
  return success();
}

//===----------------------------------------------------------------------===//
// Activations: the gradient is one ds.activation_grad of the input
//===----------------------------------------------------------------------===//

LogicalResult vjp(ActivationOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({ActivationGradOp::create(
      b, op.getLoc(), op.getType(), op.getInput(), gs[0], op.getKindAttr(),
      op.getAlphaAttr(), op.getBetaAttr())});
  return success();
}

//===----------------------------------------------------------------------===//
// Pooling: ds.max_pool_grad recomputes the argmax from the input
//===----------------------------------------------------------------------===//

LogicalResult vjp(MaxPoolOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({MaxPoolGradOp::create(
      b, op.getLoc(), op.getInput().getType(), op.getInput(), gs[0],
      op.getKernelShapeAttr(), op.getStridesAttr(), op.getPadsAttr(),
      op.getDilationsAttr(), op.getCeilModeAttr())});
  return success();
}

LogicalResult vjp(AvgPoolOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({AvgPoolGradOp::create(
      b, op.getLoc(), op.getInput().getType(), gs[0], op.getKernelShapeAttr(),
      op.getStridesAttr(), op.getPadsAttr(), op.getCountIncludePadAttr(),
      op.getCeilModeAttr())});
  return success();
}

/// TopK (misc family): the values' gradient added at the selected
/// positions; the indices have none.
LogicalResult vjp(TopKOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Value dx;
  if (gs[0])
    dx = TopKGradOp::create(b, op.getLoc(), op.getInput().getType(), gs[0],
                            op.getIndices(), op.getAxisAttr());
  out.assign({dx});
  return success();
}

/// Resize: the adjoint of the sampling (Support/Resize.h).
LogicalResult vjp(ResizeOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({ResizeGradOp::create(
      b, op.getLoc(), op.getInput().getType(), gs[0], op.getModeAttr(),
      op.getCoordinateTransformationModeAttr(), op.getNearestModeAttr(),
      op.getScalesAttr())});
  return success();
}

/// The gradient of a right operand every batch position shares (a weight:
/// its batch dimensions absent or 1): x^T g as one GEMM with the batch
/// folded into the contraction (x as [P, K], g as [P, N]; the lowering reads
/// x transposed), never a per-position [.., K, N] product summed afterwards.
/// Null when the operand has a batch dimension above 1 or x none.
Value sharedRhsGrad(OpBuilder &b, Location l, Value x, Value g,
                    RankedTensorType tw) {
  auto tx = tensorType(x), tg = tensorType(g);
  if (tx.getRank() <= 2 ||
      llvm::any_of(tw.getShape().drop_back(2), [](int64_t d) { return d != 1; }))
    return {};
  int64_t k = tx.getShape().back(), n = tg.getShape().back();
  int64_t rows = tg.getNumElements() / n;
  Type elt = tx.getElementType();
  Value x2 = ReshapeOp::create(b, l, RankedTensorType::get({rows, k}, elt), x);
  Value g2 = ReshapeOp::create(b, l, RankedTensorType::get({rows, n}, elt), g);
  Value w = matmul(b, l, transposeLast2(b, l, x2), g2);
  return tw.getRank() == 2 ? w : ReshapeOp::create(b, l, tw, w);
}

/// EmbeddingBag (misc family): the weight's rows get the bags' gradient;
/// max reads the weight to find each element's row. The indices, bounds
/// and per-sample weights (a graph input or constant: the importer's
/// rule) have none.
LogicalResult vjp(EmbeddingBagOp op, OpBuilder &b, ValueRange gs,
                  Grads &out) {
  Value w = op.getMode() == "max" ? op.getWeight() : Value();
  out.assign({EmbeddingBagGradOp::create(
                  b, op.getLoc(), op.getWeight().getType(), gs[0],
                  op.getIndices(), op.getOffsets(), op.getPerSampleWeights(),
                  w, op.getModeAttr()),
              Value(), Value()});
  if (op.getPerSampleWeights())
    out.push_back(Value());
  return success();
}

LogicalResult vjp(MatMulOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  auto ta = tensorType(op.getLhs()), tb = tensorType(op.getRhs());
  if (ta.getRank() < 2 || tb.getRank() < 2)
    return op.emitOpError("has no gradient rule for 1-D operands yet");
  Value g = gs[0];
  Value ga =
      reduceTo(b, l, matmul(b, l, g, transposeLast2(b, l, op.getRhs())), ta);
  Value gb = sharedRhsGrad(b, l, op.getLhs(), g, tb);
  if (!gb)
    gb = reduceTo(b, l, matmul(b, l, transposeLast2(b, l, op.getLhs()), g), tb);
  out.assign({ga, gb});
  return success();
}
LogicalResult vjp(GemmOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value g = gs[0];
  double alpha = op.getAlpha().convertToDouble();
  double beta = op.getBeta().convertToDouble();
  Value opA = op.getTransA() ? transposeLast2(b, l, op.getA()) : op.getA();
  Value opB = op.getTransB() ? transposeLast2(b, l, op.getB()) : op.getB();
  Value dOpA = matmul(b, l, g, transposeLast2(b, l, opB));
  Value dOpB = matmul(b, l, transposeLast2(b, l, opA), g);
  if (alpha != 1.0) {
    dOpA = mulScalar(b, l, dOpA, alpha);
    dOpB = mulScalar(b, l, dOpB, alpha);
  }
  out.assign({op.getTransA() ? transposeLast2(b, l, dOpA) : dOpA,
         op.getTransB() ? transposeLast2(b, l, dOpB) : dOpB});
  if (op.getC()) {
    Value gc = beta == 1.0 ? g : mulScalar(b, l, g, beta);
    out.push_back(reduceTo(b, l, gc, tensorType(op.getC())));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution: the gradients are ds.conv_grad_input and ds.conv_grad_weight
// (ConvTranspose's: a convolution and ds.conv_grad_weight)
//===----------------------------------------------------------------------===//

LogicalResult vjp(ConvOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Location l = op.getLoc();
  Value g = gs[0];
  out.assign({ConvGradInputOp::create(
                  b, l, op.getInput().getType(), g, op.getWeight(),
                  op.getStridesAttr(), op.getPadsAttr(),
                  op.getDilationsAttr(), op.getGroupAttr()),
              ConvGradWeightOp::create(
                  b, l, op.getWeight().getType(), op.getInput(), g,
                  op.getStridesAttr(), op.getPadsAttr(),
                  op.getDilationsAttr(), op.getGroupAttr())});
  if (op.getBias()) {
    SmallVector<int64_t> axes{0};
    for (int64_t d = 2; d < op.getType().getRank(); ++d)
      axes.push_back(d);
    out.push_back(ReduceSumOp::create(b, l, op.getBias().getType(), g,
                                      b.getDenseI64ArrayAttr(axes),
                                      b.getBoolAttr(false)));
  }
  return success();
}

LogicalResult vjp(ConvGradInputOp op, OpBuilder &b, ValueRange gs,
                  Grads &out) {
  Location l = op.getLoc();
  Value g = gs[0];
  out.assign({ConvOp::create(b, l, op.getGrad().getType(), g, op.getWeight(),
                             Value(), op.getStridesAttr(), op.getPadsAttr(),
                             op.getDilationsAttr(), op.getGroupAttr()),
              ConvGradWeightOp::create(
                  b, l, op.getWeight().getType(), g, op.getGrad(),
                  op.getStridesAttr(), op.getPadsAttr(),
                  op.getDilationsAttr(), op.getGroupAttr())});
  return success();
}

LogicalResult vjp(SoftmaxOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({SoftmaxGradOp::create(b, op.getLoc(), op.getType(), gs[0],
                               op.getResult(), op.getAxisAttr(),
                               b.getBoolAttr(false))});
  return success();
}
LogicalResult vjp(LogSoftmaxOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({SoftmaxGradOp::create(b, op.getLoc(), op.getType(), gs[0],
                               op.getResult(), op.getAxisAttr(),
                               b.getBoolAttr(true))});
  return success();
}
LogicalResult vjp(LayerNormOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  auto scale = tensorType(op.getScale());
  auto grads = LayerNormGradOp::create(
      b, op.getLoc(), TypeRange{op.getType(), scale, scale}, gs[0],
      op.getInput(), op.getScale(), op.getAxisAttr(), op.getEpsilonAttr());
  out.assign({grads.getInputGrad(), grads.getScaleGrad()});
  if (op.getBias())
    out.push_back(grads.getBiasGrad());
  return success();
}

/// The gradient of an embedding lookup with the rows it read from the
/// padding row zeroed, when the trainable-set pass marked the lookup with
/// the table's `ds.padding_idx` (torch's padding_idx: the lookup adds
/// nothing to that row's gradient); otherwise `g` itself.
Value maskPaddingRow(Operation *lookup, Value indices, Value g,
                     OpBuilder &b) {
  auto row = lookup->getAttrOfType<IntegerAttr>("ds.padding_idx");
  if (!row)
    return g;
  Location l = lookup->getLoc();
  auto ti = tensorType(indices);
  Value hit = binary<EqualOp>(
      b, l, indices, scalar(b, l, ti.getElementType(), row.getInt()));
  // indices.shape ++ [1]*(rank(g) - rank(indices)): one flag per row read.
  SmallVector<int64_t> shape(ti.getShape());
  shape.resize(tensorType(g).getRank(), 1);
  hit = ReshapeOp::create(b, l, RankedTensorType::get(shape, b.getI1Type()),
                          hit);
  return select(b, l, hit, g, /*keepWhenTrue=*/false);
}

LogicalResult vjp(GatherOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Value g = op.getAxis() == 0 ? maskPaddingRow(op, op.getIndices(), gs[0], b)
                              : gs[0];
  out.assign({GatherGradOp::create(b, op.getLoc(), tensorType(op.getData()), g,
                              op.getIndices(), op.getAxisAttr()),
         Value()});
  return success();
}
LogicalResult vjp(SpAllGatherOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Type t = op.getInput().getType();
  Value g = op.getPartialGrad()
                ? Value(SpReduceScatterOp::create(b, op.getLoc(), t, gs[0],
                                                  op.getAxisAttr(),
                                                  op.getGroupAttr()))
                : Value(SpSliceOp::create(b, op.getLoc(), t, gs[0],
                                          op.getAxisAttr(), op.getGroupAttr()));
  out.assign({g});
  return success();
}
LogicalResult vjp(SpReduceScatterOp op, OpBuilder &b, ValueRange gs,
                  Grads &out) {
  out.assign({SpAllGatherOp::create(b, op.getLoc(), op.getInput().getType(),
                                    gs[0], op.getAxisAttr(), op.getGroupAttr(),
                                    b.getBoolAttr(false))});
  return success();
}
LogicalResult vjp(SpSliceOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({SpAllGatherOp::create(b, op.getLoc(), op.getInput().getType(),
                                    gs[0], op.getAxisAttr(), op.getGroupAttr(),
                                    b.getBoolAttr(false))});
  return success();
}
LogicalResult vjp(VocabGatherOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  Value g = maskPaddingRow(op, op.getIndices(), gs[0], b);
  out.assign({VocabGatherGradOp::create(b, op.getLoc(),
                                        tensorType(op.getTable()), g,
                                        op.getIndices(), op.getGroupAttr(),
                                        op.getVocabAttr()),
              Value()});
  return success();
}
LogicalResult vjp(VocabCrossEntropyOp op, OpBuilder &b, ValueRange gs,
                  Grads &out) {
  if (gs.size() > 1 && gs[1])
    return op.emitOpError("its log-sum-exp result has no gradient rule");
  Value dScores;
  if (gs[0])
    dScores = VocabCrossEntropyGradOp::create(
        b, op.getLoc(), tensorType(op.getScores()), gs[0], op.getScores(),
        op.getLabels(), op.getLse(), op.getReductionAttr(),
        op.getIgnoreIndexAttr(), op.getGroupAttr(), op.getVocabAttr());
  out.assign({dScores, Value()});
  return success();
}
LogicalResult vjp(TpIdentityOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({TpAllReduceOp::create(b, op.getLoc(), gs[0].getType(), gs[0],
                                    op.getGroupAttr())});
  return success();
}
/// A sum (or mean) over the ranks in the forward pass (--sync-batchnorm's
/// statistics): each rank's input reaches every rank's result, so its
/// gradient is the same reduction of the result gradients.
LogicalResult vjp(AllReduceOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  auto g = AllReduceOp::create(b, op.getLoc(), gs[0], op.getReductionAttr(),
                               op.getGroupAttr());
  g->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  out.assign({g});
  return success();
}
LogicalResult vjp(TpAllReduceOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({gs[0]});
  return success();
}
LogicalResult vjp(ReshapeOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({ReshapeOp::create(b, op.getLoc(), tensorType(op.getInput()), gs[0])});
  return success();
}
LogicalResult vjp(ExpandOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({reduceTo(b, op.getLoc(), gs[0], tensorType(op.getInput()))});
  return success();
}
LogicalResult vjp(TransposeOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  ArrayRef<int64_t> perm = op.getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  out.assign({TransposeOp::create(b, op.getLoc(), tensorType(op.getInput()), gs[0],
                             b.getDenseI64ArrayAttr(inverse))});
  return success();
}
LogicalResult vjp(ConcatOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  int64_t axis = op.getAxis(), at = 0;
  int64_t rank = op.getType().getRank();
  for (Value in : op.getInputs()) {
    SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
    starts[axis] = at;
    auto t = tensorType(in);
    at += t.getDimSize(axis);
    out.push_back(SliceOp::create(b, op.getLoc(), t, gs[0],
                                  b.getDenseI64ArrayAttr(starts),
                                  b.getDenseI64ArrayAttr(steps)));
  }
  return success();
}
LogicalResult vjp(SplitOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  SmallVector<Value> parts;
  for (auto [g, r] : llvm::zip(gs, op.getResults()))
    parts.push_back(g ? g : zerosLike(b, op.getLoc(), tensorType(r)));
  out.assign({ConcatOp::create(b, op.getLoc(), tensorType(op.getInput()), parts,
                          op.getAxisAttr())});
  return success();
}
LogicalResult vjp(SliceOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({SliceGradOp::create(b, op.getLoc(), tensorType(op.getInput()), gs[0],
                             op.getStartsAttr(), op.getStepsAttr())});
  return success();
}
LogicalResult vjp(TriluOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({TriluOp::create(b, op.getLoc(), gs[0], op.getUpperAttr(),
                         op.getKAttr())});
  return success();
}
LogicalResult vjp(ReduceSumOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  out.assign({expandReduced(b, op.getLoc(), gs[0], tensorType(op.getInput()),
                       op.getAxes())});
  return success();
}
LogicalResult vjp(ReduceMeanOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  auto in = tensorType(op.getInput());
  int64_t count = 1;
  for (int64_t a : op.getAxes())
    count *= in.getDimSize(a);
  Location l = op.getLoc();
  out.assign({mulScalar(b, l, expandReduced(b, l, gs[0], in, op.getAxes()),
                   1.0 / static_cast<double>(count))});
  return success();
}
LogicalResult vjp(ReduceMaxOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  // Split evenly among the positions that hold the maximum.
  Location l = op.getLoc();
  auto in = tensorType(op.getInput());
  Value y = expandReduced(b, l, op.getResult(), in, op.getAxes());
  Value hit = CastOp::create(b, l, in, binary<EqualOp>(b, l, op.getInput(), y));
  sh::Shape kept(in.getShape().begin(), in.getShape().end());
  for (int64_t a : op.getAxes())
    kept[a] = 1;
  Value count = ReduceSumOp::create(
      b, l, RankedTensorType::get(kept, in.getElementType()), hit,
      op.getAxesAttr(), b.getBoolAttr(true));
  Value g = expandReduced(b, l, gs[0], in, op.getAxes());
  out.assign({div(b, l, mul(b, l, g, hit), count)});
  return success();
}
LogicalResult vjp(DropoutOp op, OpBuilder &b, ValueRange gs, Grads &out) {
  double ratio = op.getRatio().convertToDouble();
  if (!gs[0]) {
    out.assign({Value()});
    return success();
  }
  if (!op.getTraining() || ratio == 0.0) {
    out.assign({gs[0]});
    return success();
  }
  Location l = op.getLoc();
  Value keep = CastOp::create(b, l, op.getType(0), op.getMask());
  out.assign({mulScalar(b, l, mul(b, l, gs[0], keep), 1.0 / (1.0 - ratio))});
  return success();
}
LogicalResult vjp(SoftmaxCrossEntropyLossOp op, OpBuilder &b, ValueRange gs,
                  Grads &out) {
  Location l = op.getLoc();
  Value dScores;
  if (gs[0])
    dScores = LossGradOp::create(b, l, tensorType(op.getScores()), gs[0],
                                 op.getScores(), op.getLabels(),
                                 op.getWeights(), op.getReductionAttr(),
                                 op.getIgnoreIndexAttr(), b.getBoolAttr(true));
  if (gs.size() > 1 && gs[1]) {
    Value d = SoftmaxGradOp::create(b, l, tensorType(op.getScores()), gs[1],
                                    op.getLogProb(), b.getI64IntegerAttr(1),
                                    b.getBoolAttr(true));
    dScores = dScores ? add(b, l, dScores, d) : d;
  }
  out.assign({dScores, Value()});
  if (op.getWeights())
    out.push_back(Value());
  return success();
}
LogicalResult vjp(NegativeLogLikelihoodLossOp op, OpBuilder &b, ValueRange gs,
                  Grads &out) {
  out.assign({LossGradOp::create(b, op.getLoc(), tensorType(op.getInput()), gs[0],
                            op.getInput(), op.getTarget(), op.getWeight(),
                            op.getReductionAttr(), op.getIgnoreIndexAttr(),
                            b.getBoolAttr(false)),
         Value()});
  if (op.getWeight())
    out.push_back(Value());
  return success();
}

template <typename OpTy>
struct VJPModel
    : public VJPOpInterface::ExternalModel<VJPModel<OpTy>, OpTy> {
  LogicalResult buildVJP(Operation *op, OpBuilder &builder,
                         ValueRange resultGrads,
                         SmallVectorImpl<Value> &operandGrads) const {
    operandGrads.clear();
    // Ops of one result need its gradient; multi-result ops check theirs.
    if (op->getNumResults() == 1 && !resultGrads[0]) {
      operandGrads.assign(op->getNumOperands(), Value());
      return success();
    }
    return vjp(cast<OpTy>(op), builder, resultGrads, operandGrads);
  }
};

template <typename... Ops>
void attach(MLIRContext &ctx) {
  (Ops::template attachInterface<VJPModel<Ops>>(ctx), ...);
}

} // namespace

static bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

FailureOr<SmallVector<Value>> ds::buildGradients(OpBuilder &b,
                                                 ArrayRef<Operation *> ops,
                                                 Value y, Value seed,
                                                 ValueRange xs) {
  std::pair<Value, Value> one{y, seed};
  return buildGradients(b, ops, ArrayRef(one), xs);
}

FailureOr<SmallVector<Value>>
ds::buildGradients(OpBuilder &b, ArrayRef<Operation *> ops,
                   ArrayRef<std::pair<Value, Value>> seeds, ValueRange xs) {
  llvm::DenseMap<Value, Value> grads;
  auto accumulate = [&](Value v, Value g) {
    auto [it, inserted] = grads.try_emplace(v, g);
    if (!inserted)
      it->second = AddOp::create(b, g.getLoc(), v.getType(), it->second, g);
  };
  for (auto [y, seed] : seeds)
    accumulate(y, seed);
  for (Operation *op : llvm::reverse(ops)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(grads.lookup(r));
      any |= static_cast<bool>(resultGrads.back());
    }
    if (!any || op->getNumOperands() == 0)
      continue;
    auto vjp = dyn_cast<VJPOpInterface>(op);
    if (!vjp) {
      if (llvm::none_of(op->getOperands(), isFloatTensor))
        continue; // nothing differentiable flows through it
      return op->emitOpError(
          "has no gradient rule (VJP) on the path to the loss");
    }
    SmallVector<Value> operandGrads;
    if (failed(vjp.buildVJP(b, resultGrads, operandGrads)))
      return failure();
    for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
      if (g && isFloatTensor(operand))
        accumulate(operand, g);
  }
  SmallVector<Value> out;
  for (Value x : xs)
    out.push_back(grads.lookup(x));
  return out;
}

void ds::detail::attachVJPModels(MLIRContext &ctx) {
  attach<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, NegOp, ExpOp, LogOp,
         SqrtOp, ReciprocalOp, ErfOp, TanhOp, SigmoidOp, ReluOp, AbsOp, CastOp,
         WhereOp, MatMulOp, GemmOp, SoftmaxOp, LogSoftmaxOp, LayerNormOp,
         GatherOp, ReshapeOp, ExpandOp, TransposeOp, ConcatOp, SplitOp,
         SliceOp, TriluOp, ReduceSumOp, ReduceMeanOp, ReduceMaxOp, DropoutOp,
         SoftmaxCrossEntropyLossOp, NegativeLogLikelihoodLossOp, TpIdentityOp,
         TpAllReduceOp, VocabGatherOp, VocabCrossEntropyOp, SpAllGatherOp,
         SpReduceScatterOp, SpSliceOp>(ctx);
  attach<ActivationOp>(ctx);
  attach<MaxPoolOp, AvgPoolOp>(ctx);
  attach<TopKOp, EmbeddingBagOp>(ctx); // misc family
  attach<ConvOp, ConvGradInputOp>(ctx);
  attach<AllReduceOp>(ctx);
  attach<ResizeOp>(ctx); // spatial
}
