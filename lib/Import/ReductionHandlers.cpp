//===- ReductionHandlers.cpp - ONNX reductions to ds ----------------------===//
//
// Part of the ds project.
//
// ReduceSum, ReduceMean and ReduceMax map to one ds reduction each; axes as
// an attribute or (from the opset where each op moved them) a constant
// input, keepdims, and noop_with_empty_axes. ReduceMin, ReduceL2 and
// ReduceLogSumExp are spelled with those reductions and elementwise ops, so
// that their gradients come from the parts' VJPs:
//   ReduceMin(x)       = -ReduceMax(-x)  (gradient split evenly among ties,
//                                         as torch.amin does)
//   ReduceL2(x)        = Sqrt(ReduceSum(x * x))
//   ReduceLogSumExp(x) = m + Log(ReduceSum(Exp(x - m))),  m = ReduceMax(x)
//                        kept as 1 (stable for large |x|).
// CumSum (float) is a MatMul with a constant 0/1 triangle along its axis
// (exclusive and reverse pick the triangle), so its gradient is the
// transposed triangle: the reverse cumulative sum. O(n^2) in the axis length.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include <algorithm>

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

/// A node's normalized reduction: sorted unique axes, keepdims, the result
/// type; `identity` when the node is a no-op (noop_with_empty_axes, or a
/// scalar input).
struct Reduction {
  SmallVector<int64_t> axes;
  bool keepdims = true;
  RankedTensorType type;
  bool identity = false;
};

FailureOr<Reduction> reduction(NodeContext &n, int64_t axesInputSince) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  auto axes = n.axesOperand(axesInputSince);
  if (failed(axes))
    return failure();
  ArrayRef<int64_t> s = n.shape(0);
  Reduction r;
  r.keepdims = n.intAttr("keepdims", 1) != 0;
  if (!*axes || (*axes)->empty()) {
    if (n.intAttr("noop_with_empty_axes", 0)) {
      r.identity = true;
      return r;
    }
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
      r.axes.push_back(d);
  } else {
    for (int64_t a : **axes) {
      FailureOr<int64_t> ax = n.axis(a, s.size());
      if (failed(ax))
        return failure();
      r.axes.push_back(*ax);
    }
    llvm::sort(r.axes);
    if (std::adjacent_find(r.axes.begin(), r.axes.end()) != r.axes.end())
      return n.error() << "repeated reduction axis";
  }
  if (s.empty()) {
    r.identity = true;
    return r;
  }
  if (isa<IntegerType>(n.elementTypeOf(0)) && n.elementTypeOf(0).isInteger(1))
    return n.error() << "cannot reduce bool tensors";
  FailureOr<sh::Shape> shape = sh::reduce(s, r.axes, r.keepdims, n.emitFn());
  if (failed(shape))
    return failure();
  r.type = RankedTensorType::get(*shape, n.elementTypeOf(0));
  return r;
}

template <typename OpTy>
LogicalResult reduce(NodeContext &n, int64_t axesInputSince) {
  FailureOr<Reduction> r = reduction(n, axesInputSince);
  if (failed(r))
    return failure();
  if (r->identity)
    return n.bind(n.input(0));
  OpBuilder &b = n.builder();
  return n.emit<OpTy>(Type(r->type), n.input(0),
                      b.getDenseI64ArrayAttr(r->axes),
                      b.getBoolAttr(r->keepdims));
}

/// `OpTy` over the node's axes, keeping the reduced dimensions when `keep`.
template <typename OpTy>
Value reduceOver(NodeContext &n, const Reduction &r, Value x, bool keep) {
  OpBuilder &b = n.builder();
  auto in = cast<RankedTensorType>(x.getType());
  FailureOr<sh::Shape> shape =
      sh::reduce(in.getShape(), r.axes, keep, n.emitFn());
  return OpTy::create(b, n.loc, RankedTensorType::get(*shape, in.getElementType()),
                      x, b.getDenseI64ArrayAttr(r.axes), b.getBoolAttr(keep));
}

LogicalResult reduceMin(NodeContext &n) {
  FailureOr<Reduction> r = reduction(n, 18);
  if (failed(r))
    return failure();
  if (r->identity)
    return n.bind(n.input(0));
  Value neg = NegOp::create(n.builder(), n.loc, n.input(0));
  Value max = reduceOver<ReduceMaxOp>(n, *r, neg, r->keepdims);
  return n.bind(NegOp::create(n.builder(), n.loc, max)->getResults());
}

LogicalResult reduceL2(NodeContext &n) {
  FailureOr<Reduction> r = reduction(n, 18);
  if (failed(r) || failed(n.requireFloat(0)))
    return failure();
  OpBuilder &b = n.builder();
  Value x = n.input(0);
  Value sq = MulOp::create(b, n.loc, x.getType(), x, x);
  if (r->identity)
    return n.bind(AbsOp::create(b, n.loc, x)->getResults());
  Value sum = reduceOver<ReduceSumOp>(n, *r, sq, r->keepdims);
  return n.bind(SqrtOp::create(b, n.loc, sum)->getResults());
}

LogicalResult reduceLogSumExp(NodeContext &n) {
  FailureOr<Reduction> r = reduction(n, 18);
  if (failed(r) || failed(n.requireFloat(0)))
    return failure();
  if (r->identity)
    return n.bind(n.input(0));
  OpBuilder &b = n.builder();
  Value x = n.input(0);
  Value m = reduceOver<ReduceMaxOp>(n, *r, x, /*keep=*/true);
  Value shifted = ExpOp::create(
      b, n.loc, SubOp::create(b, n.loc, x.getType(), x, m).getResult());
  Value sum = reduceOver<ReduceSumOp>(n, *r, shifted, /*keep=*/true);
  Value lse = AddOp::create(b, n.loc, m.getType(),
                            LogOp::create(b, n.loc, sum).getResult(), m);
  if (r->keepdims)
    return n.bind(lse);
  return n.bind(ReshapeOp::create(b, n.loc, r->type, lse)->getResults());
}

/// The [n, n] matrix T with T[i][j] = 1 when input i adds into output j.
DenseElementsAttr cumSumTriangle(FloatType elt, int64_t len, bool exclusive,
                                 bool reverse) {
  const llvm::fltSemantics &sem = elt.getFloatSemantics();
  SmallVector<APFloat> t(len * len, APFloat::getZero(sem));
  for (int64_t i = 0; i < len; ++i)
    for (int64_t j = 0; j < len; ++j)
      if (reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j))
        t[i * len + j] = APFloat::getOne(sem);
  return DenseElementsAttr::get(RankedTensorType::get({len, len}, elt), t);
}

LogicalResult cumSum(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)) || failed(n.requireFloat(0)))
    return failure();
  FailureOr<SmallVector<int64_t>> axisValue = n.constInts(1, "axis");
  if (failed(axisValue))
    return failure();
  auto type = cast<RankedTensorType>(n.input(0).getType());
  int64_t rank = type.getRank();
  if (axisValue->size() != 1 || rank == 0)
    return n.error() << "expects a tensor of rank >= 1 and one axis";
  FailureOr<int64_t> axis = n.axis(axisValue->front(), rank);
  if (failed(axis))
    return failure();
  auto elt = cast<FloatType>(type.getElementType());
  int64_t len = type.getDimSize(*axis);
  DenseElementsAttr tri = cumSumTriangle(elt, len, n.intAttr("exclusive", 0),
                                         n.intAttr("reverse", 0));
  OpBuilder &b = n.builder();
  Value t = n.constant(cast<RankedTensorType>(tri.getType()), tri);
  if (*axis == rank - 1)
    return n.emit<MatMulOp>(Type(type), n.input(0), t);
  // Move the axis last, multiply, move it back.
  SmallVector<int64_t> perm, back(rank), moved;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis)
      perm.push_back(d);
  perm.push_back(*axis);
  for (int64_t d = 0; d < rank; ++d) {
    back[perm[d]] = d;
    moved.push_back(type.getDimSize(perm[d]));
  }
  auto movedType = RankedTensorType::get(moved, elt);
  Value x = TransposeOp::create(b, n.loc, movedType, n.input(0),
                                b.getDenseI64ArrayAttr(perm));
  Value y = MatMulOp::create(b, n.loc, movedType, x, t);
  return n.emit<TransposeOp>(Type(type), y, b.getDenseI64ArrayAttr(back));
}

} // namespace

void registerReductionHandlers(HandlerTable &t) {
  // The opset from which each op takes its axes as an input.
  t.add("ReduceSum", [](NodeContext &n) { return reduce<ReduceSumOp>(n, 13); });
  t.add("ReduceMean",
        [](NodeContext &n) { return reduce<ReduceMeanOp>(n, 18); });
  t.add("ReduceMax", [](NodeContext &n) { return reduce<ReduceMaxOp>(n, 18); });
  t.add("ReduceMin", reduceMin);
  t.add("ReduceL2", reduceL2);
  t.add("ReduceLogSumExp", reduceLogSumExp);
  t.add("CumSum", cumSum);
}

} // namespace mlir::ds::onnx_import
