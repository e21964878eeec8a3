//===- LinalgHandlers.cpp - ONNX matrix and normalization ops to ds -------===//
//
// Part of the ds project.
//
// MatMul, Gemm, Softmax/LogSoftmax (with the pre-opset-13 2-D coercion),
// LayerNormalization (with its optional statistics outputs) and Trilu.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

LogicalResult matmul(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)) || failed(n.requireFloat(0)) ||
      failed(n.requireFloat(1)))
    return failure();
  if (n.elementTypeOf(0) != n.elementTypeOf(1))
    return n.error() << "operand element types differ";
  FailureOr<sh::Shape> shape = sh::matmul(n.shape(0), n.shape(1), n.emitFn());
  if (failed(shape))
    return failure();
  return n.emit<MatMulOp>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                          n.input(1));
}

LogicalResult gemm(NodeContext &n) {
  if (failed(n.expectInputs(2, 3)) || failed(n.requireFloat(0)))
    return failure();
  bool ta = n.intAttr("transA", 0), tb = n.intAttr("transB", 0);
  std::optional<ArrayRef<int64_t>> c;
  if (n.input(2))
    c = n.shape(2);
  FailureOr<sh::Shape> shape =
      sh::gemm(n.shape(0), n.shape(1), c, ta, tb, n.emitFn());
  if (failed(shape))
    return failure();
  OpBuilder &b = n.builder();
  return n.emit<GemmOp>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                        n.input(1), n.input(2),
                        b.getF32FloatAttr(n.floatAttr("alpha", 1.0f)),
                        b.getF32FloatAttr(n.floatAttr("beta", 1.0f)),
                        b.getBoolAttr(ta), b.getBoolAttr(tb));
}

/// Softmax and LogSoftmax; before opset 13 they flatten to 2-D at `axis`.
template <typename OpTy> LogicalResult softmax(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)) || failed(n.requireFloat(0)))
    return failure();
  auto type = cast<RankedTensorType>(n.input(0).getType());
  int64_t rank = type.getRank();
  bool legacy = n.opset() < 13;
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", legacy ? 1 : -1), rank);
  if (failed(axis))
    return failure();
  OpBuilder &b = n.builder();
  if (!legacy || *axis == rank - 1)
    return n.emit<OpTy>(n.input(0), b.getI64IntegerAttr(*axis));
  // Coerced to 2-D: [prod(dims[:axis]), prod(dims[axis:])], softmax on 1.
  ArrayRef<int64_t> s = type.getShape();
  auto flat = n.tensor(
      {sh::product(s.take_front(*axis)), sh::product(s.drop_front(*axis))},
      type.getElementType());
  Value x = ReshapeOp::create(n.builder(), n.loc, flat, n.input(0));
  Value y = OpTy::create(n.builder(), n.loc, x, b.getI64IntegerAttr(1));
  return n.bind(ReshapeOp::create(n.builder(), n.loc, type, y)->getResults());
}

/// LayerNormalization's optional outputs, Mean and InvStdDev (f32, the
/// normalized dimensions kept as 1), spelled out with reductions; training
/// graphs from PyTorch never ask for them.
std::pair<Value, Value> layerNormStatistics(NodeContext &n, int64_t axis,
                                            float eps) {
  OpBuilder &b = n.builder();
  auto type = cast<RankedTensorType>(n.input(0).getType());
  Type f32 = b.getF32Type();
  Value x = n.input(0);
  if (type.getElementType() != f32)
    x = CastOp::create(b, n.loc, RankedTensorType::get(type.getShape(), f32),
                       x);
  SmallVector<int64_t> axes;
  sh::Shape statShape(type.getShape().begin(), type.getShape().end());
  for (int64_t d = axis; d < type.getRank(); ++d) {
    axes.push_back(d);
    statShape[d] = 1;
  }
  auto statType = RankedTensorType::get(statShape, f32);
  auto fullType = RankedTensorType::get(type.getShape(), f32);
  auto axesAttr = b.getDenseI64ArrayAttr(axes);
  Value mean = ReduceMeanOp::create(b, n.loc, statType, x, axesAttr,
                                    b.getBoolAttr(true));
  Value centred = SubOp::create(b, n.loc, fullType, x, mean);
  Value sq = MulOp::create(b, n.loc, fullType, centred, centred);
  Value var = ReduceMeanOp::create(b, n.loc, statType, sq, axesAttr,
                                   b.getBoolAttr(true));
  auto scalar = RankedTensorType::get({}, f32);
  Value epsV = ConstantOp::create(
      b, n.loc, scalar, DenseElementsAttr::get(scalar, ArrayRef<float>(eps)));
  Value inv = ReciprocalOp::create(
      b, n.loc,
      SqrtOp::create(b, n.loc, AddOp::create(b, n.loc, statType, var, epsV)));
  return {mean, inv};
}

LogicalResult layerNorm(NodeContext &n) {
  if (failed(n.expectInputs(2, 3)) || failed(n.requireFloat(0)))
    return failure();
  if (n.intAttr("stash_type", 1) != 1)
    return n.error() << "unsupported attribute value stash_type="
                     << n.intAttr("stash_type", 1)
                     << " (ds keeps statistics in f32: stash_type=1)";
  auto type = cast<RankedTensorType>(n.input(0).getType());
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = type.getShape().drop_front(*axis);
  for (size_t i = 1; i < 3; ++i) {
    if (!n.input(i))
      continue;
    if (n.elementTypeOf(i) != type.getElementType())
      return n.error() << "input " << i << " element type differs from X";
    if (!llvm::equal(n.shape(i), normalized))
      return n.error() << "input " << i << " has shape " << shapeStr(n.shape(i))
                       << ", expected " << shapeStr(normalized);
  }
  OpBuilder &b = n.builder();
  float eps = n.floatAttr("epsilon", 1e-5f);
  auto ln =
      LayerNormOp::create(b, n.loc, type, n.input(0), n.input(1), n.input(2),
                          b.getI64IntegerAttr(*axis), b.getF32FloatAttr(eps));
  SmallVector<Value> results{ln};
  if (n.outputUsed(1) || n.outputUsed(2)) {
    auto [mean, invStdDev] = layerNormStatistics(n, *axis, eps);
    results.push_back(mean);
    results.push_back(invStdDev);
  }
  return n.bind(results);
}

LogicalResult trilu(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  if (n.shape(0).size() < 2)
    return n.error() << "input must have rank >= 2";
  int64_t k = 0;
  if (n.input(1)) {
    FailureOr<SmallVector<int64_t>> v = n.constInts(1, "k");
    if (failed(v))
      return failure();
    k = (*v)[0];
  }
  OpBuilder &b = n.builder();
  return n.emit<TriluOp>(n.input(0), b.getBoolAttr(n.intAttr("upper", 1)),
                         b.getI64IntegerAttr(k));
}

} // namespace

void registerLinalgHandlers(HandlerTable &t) {
  t.add("MatMul", matmul);
  t.add("Gemm", gemm);
  t.add("Softmax", softmax<SoftmaxOp>);
  t.add("LogSoftmax", softmax<LogSoftmaxOp>);
  t.add("LayerNormalization", layerNorm);
  t.add("Trilu", trilu);
}

} // namespace mlir::ds::onnx_import
