//===- DsOps.cpp - ds dialect: registration, verifiers, costs -------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsCompression.h"
#include "ds/Dialect/Ds/IR/DsZeroPP.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::ds;

#include "ds/Dialect/Ds/IR/DsOpsDialect.cpp.inc"
#include "ds/Dialect/Ds/IR/DsInterfaces.cpp.inc"

void DsDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ds/Dialect/Ds/IR/DsOps.cpp.inc"
      ,
#define GET_OP_LIST
#include "ds/Dialect/Ds/IR/DsCompression.cpp.inc"
      ,
#define GET_OP_LIST
#include "ds/Dialect/Ds/IR/DsZeroPP.cpp.inc"
      >();
  detail::attachVJPModels(*getContext());
  detail::attachSplitAxisModels(*getContext());
}

Operation *DsDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, type, elements);
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

bool ds::isPredicate(BinaryKind kind) {
  switch (kind) {
  case BinaryKind::Equal:
  case BinaryKind::Less:
  case BinaryKind::LessOrEqual:
  case BinaryKind::Greater:
  case BinaryKind::GreaterOrEqual:
  case BinaryKind::And:
  case BinaryKind::Or:
  case BinaryKind::Xor:
    return true;
  default:
    return false;
  }
}

bool ds::isLogical(BinaryKind kind) {
  return kind == BinaryKind::And || kind == BinaryKind::Or ||
         kind == BinaryKind::Xor;
}

int64_t ds::detail::numElements(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  return shaped.getNumElements();
}

int64_t ds::detail::tensorBytes(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  int64_t bits = shaped.getElementTypeBitWidth();
  return shaped.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}

int64_t ds::detail::sumTensorBytes(TypeRange types) {
  int64_t sum = 0;
  for (Type t : types)
    sum += tensorBytes(t);
  return sum;
}

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<ShapedType>(v.getType()).getShape();
}

static Type elementOf(Value v) {
  return cast<ShapedType>(v.getType()).getElementType();
}

/// Checks that `actual` equals the `expected` shape computed by a rule.
static LogicalResult checkShape(Operation *op, FailureOr<shapes::Shape> expected,
                                Value result) {
  if (failed(expected))
    return failure();
  if (!llvm::equal(*expected, shapeOf(result))) {
    auto diag = op->emitOpError("result shape [");
    llvm::interleaveComma(shapeOf(result), diag);
    diag << "] does not match the expected [";
    llvm::interleaveComma(*expected, diag);
    return diag << "]";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

LogicalResult ds::detail::verifyBinaryOp(Operation *op, BinaryKind kind) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Value result = op->getResult(0);
  Type lt = elementOf(lhs), rt = elementOf(rhs), ot = elementOf(result);
  if (kind != BinaryKind::Pow && lt != rt)
    return op->emitOpError("operand element types differ: ") << lt << " vs "
                                                             << rt;
  if (isLogical(kind) && !lt.isInteger(1))
    return op->emitOpError("expects i1 operands, got ") << lt;
  if (isPredicate(kind) && !ot.isInteger(1))
    return op->emitOpError("expects an i1 result, got ") << ot;
  if (!isPredicate(kind) && ot != lt)
    return op->emitOpError("result element type ")
           << ot << " differs from the operand's " << lt;
  if (!isLogical(kind) && lt.isInteger(1))
    return op->emitOpError("does not take i1 operands");
  auto emit = [&] { return op->emitOpError(); };
  return checkShape(op, shapes::broadcast(shapeOf(lhs), shapeOf(rhs), emit),
                    result);
}

LogicalResult ds::detail::verifyReduceOp(Operation *op, ArrayRef<int64_t> axes,
                                         bool keepdims) {
  Value input = op->getOperand(0), result = op->getResult(0);
  if (elementOf(input) != elementOf(result))
    return op->emitOpError("result element type differs from the input's");
  auto emit = [&] { return op->emitOpError(); };
  return checkShape(op, shapes::reduce(shapeOf(input), axes, keepdims, emit),
                    result);
}

LogicalResult ShapeOp::verify() {
  int64_t rank = getInput().getType().getRank();
  int64_t start = getStart(), end = getEnd();
  if (start < 0 || start > end || end > rank)
    return emitOpError("expects 0 <= start <= end <= rank, got start ")
           << start << ", end " << end << ", rank " << rank;
  if (getType().getRank() != 1 || getType().getDimSize(0) != end - start)
    return emitOpError("result must be tensor<") << end - start << "xi64>";
  return success();
}

LogicalResult RangeOp::verify() {
  for (Value v : {getStart(), getLimit(), getDelta()}) {
    if (cast<ShapedType>(v.getType()).getNumElements() != 1)
      return emitOpError("operands must be scalars");
    if (elementOf(v) != getType().getElementType())
      return emitOpError("operand and result element types differ");
  }
  if (getType().getRank() != 1)
    return emitOpError("result must be 1-D");
  DenseElementsAttr s, l, d;
  if (matchPattern(getStart(), m_Constant(&s)) &&
      matchPattern(getLimit(), m_Constant(&l)) &&
      matchPattern(getDelta(), m_Constant(&d))) {
    auto scalar = [](DenseElementsAttr a) {
      if (isa<FloatType>(a.getElementType()))
        return (*a.getValues<APFloat>().begin()).convertToDouble();
      return static_cast<double>((*a.getValues<APInt>().begin()).getSExtValue());
    };
    double delta = scalar(d);
    if (delta == 0)
      return emitOpError("delta must not be 0");
    int64_t count = std::max<int64_t>(
        0, static_cast<int64_t>(std::ceil((scalar(l) - scalar(s)) / delta)));
    if (count != getType().getDimSize(0))
      return emitOpError("result has ")
             << getType().getDimSize(0) << " elements, the operands give "
             << count;
  }
  return success();
}

LogicalResult ConstantOfShapeOp::verify() {
  auto value = dyn_cast<TypedAttr>(getValueAttr());
  if (!value || value.getType() != getType().getElementType())
    return emitOpError("value must be a scalar of the result element type ")
           << getType().getElementType();
  if (getShape().getType().getRank() != 1 ||
      getShape().getType().getDimSize(0) != getType().getRank())
    return emitOpError("shape operand must be tensor<")
           << getType().getRank() << "xi64>";
  return success();
}

LogicalResult CastOp::verify() {
  if (getInput().getType().getShape() != getType().getShape())
    return emitOpError("changes the shape");
  return success();
}

LogicalResult WhereOp::verify() {
  if (elementOf(getX()) != elementOf(getY()) ||
      elementOf(getX()) != getType().getElementType())
    return emitOpError("x, y and result element types must agree");
  auto emit = [&] { return emitOpError(); };
  FailureOr<shapes::Shape> xy =
      shapes::broadcast(shapeOf(getX()), shapeOf(getY()), emit);
  if (failed(xy))
    return failure();
  return checkShape(*this,
                    shapes::broadcast(shapeOf(getCondition()), *xy, emit),
                    getResult());
}

LogicalResult MatMulOp::verify() {
  if (elementOf(getLhs()) != elementOf(getRhs()) ||
      elementOf(getLhs()) != getType().getElementType())
    return emitOpError("operand and result element types must agree");
  auto emit = [&] { return emitOpError(); };
  return checkShape(*this,
                    shapes::matmul(shapeOf(getLhs()), shapeOf(getRhs()), emit),
                    getResult());
}

LogicalResult GemmOp::verify() {
  Type elt = getType().getElementType();
  if (elementOf(getA()) != elt || elementOf(getB()) != elt ||
      (getC() && elementOf(getC()) != elt))
    return emitOpError("operand and result element types must agree");
  auto emit = [&] { return emitOpError(); };
  std::optional<ArrayRef<int64_t>> c;
  if (getC())
    c = shapeOf(getC());
  return checkShape(*this,
                    shapes::gemm(shapeOf(getA()), shapeOf(getB()), c,
                                 getTransA(), getTransB(), emit),
                    getResult());
}

static LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError("axis ")
           << axis << " must be in [0, " << rank << ")";
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getType().getRank());
}

LogicalResult LogSoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getType().getRank());
}

LogicalResult LayerNormOp::verify() {
  int64_t rank = getType().getRank();
  if (failed(verifyAxis(*this, getAxis(), rank)))
    return failure();
  if (getInput().getType() != getType())
    return emitOpError("result type must equal the input type");
  ArrayRef<int64_t> normalized = getType().getShape().drop_front(getAxis());
  for (Value v : {getScale(), getBias()}) {
    if (!v)
      continue;
    if (!llvm::equal(shapeOf(v), normalized) ||
        elementOf(v) != getType().getElementType())
      return emitOpError("scale and bias must have the normalized shape "
                         "and the input element type");
  }
  return success();
}

/// A lookup of `data` rows along `axis` (gather, vocab_gather).
static LogicalResult verifyGather(Operation *op, Value data, Value indices,
                                  int64_t axis, Value result) {
  if (elementOf(data) != elementOf(result))
    return op->emitOpError("result element type differs from data's");
  auto emit = [&] { return op->emitOpError(); };
  return checkShape(
      op, shapes::gather(shapeOf(data), shapeOf(indices), axis, emit), result);
}

/// Its gradient: `grad` has the shape of gathering from `result`.
static LogicalResult verifyGatherGrad(Operation *op, Value grad, Value indices,
                                      int64_t axis, Value result) {
  if (elementOf(grad) != elementOf(result))
    return op->emitOpError("grad and result element types differ");
  auto emit = [&] { return op->emitOpError(); };
  FailureOr<shapes::Shape> expected =
      shapes::gather(shapeOf(result), shapeOf(indices), axis, emit);
  if (failed(expected))
    return failure();
  if (!llvm::equal(*expected, shapeOf(grad)))
    return op->emitOpError(
        "grad shape does not match gathering the result shape");
  return success();
}

LogicalResult GatherOp::verify() {
  return verifyGather(*this, getData(), getIndices(), getAxis(), getResult());
}

LogicalResult ReshapeOp::verify() {
  if (elementOf(getInput()) != getType().getElementType())
    return emitOpError("changes the element type");
  if (getInput().getType().getNumElements() != getType().getNumElements())
    return emitOpError("changes the element count from ")
           << getInput().getType().getNumElements() << " to "
           << getType().getNumElements();
  return success();
}

LogicalResult ExpandOp::verify() {
  if (elementOf(getInput()) != getType().getElementType())
    return emitOpError("changes the element type");
  if (!shapes::broadcastsTo(shapeOf(getInput()), getType().getShape()))
    return emitOpError("input ") << getInput().getType()
                                 << " does not broadcast to " << getType();
  return success();
}

LogicalResult TransposeOp::verify() {
  if (elementOf(getInput()) != getType().getElementType())
    return emitOpError("changes the element type");
  auto emit = [&] { return emitOpError(); };
  return checkShape(*this,
                    shapes::transpose(shapeOf(getInput()), getPerm(), emit),
                    getResult());
}

LogicalResult ConcatOp::verify() {
  SmallVector<ArrayRef<int64_t>> in;
  for (Value v : getInputs()) {
    if (elementOf(v) != getType().getElementType())
      return emitOpError("operand element types must equal the result's");
    in.push_back(shapeOf(v));
  }
  auto emit = [&] { return emitOpError(); };
  return checkShape(*this, shapes::concat(in, getAxis(), emit), getResult());
}

LogicalResult SplitOp::verify() {
  int64_t rank = getInput().getType().getRank();
  if (failed(verifyAxis(*this, getAxis(), rank)))
    return failure();
  if (getResults().empty())
    return emitOpError("needs at least one result");
  int64_t axis = getAxis(), total = 0;
  for (Value r : getResults()) {
    ArrayRef<int64_t> s = shapeOf(r);
    if (static_cast<int64_t>(s.size()) != rank ||
        elementOf(r) != elementOf(getInput()))
      return emitOpError("results must have the input's rank and element "
                         "type");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && s[d] != shapeOf(getInput())[d])
        return emitOpError("results differ from the input outside axis ")
               << axis;
    total += s[axis];
  }
  if (total != shapeOf(getInput())[axis])
    return emitOpError("result sizes add up to ")
           << total << ", the input has " << shapeOf(getInput())[axis];
  return success();
}

LogicalResult SliceOp::verify() {
  if (elementOf(getInput()) != getType().getElementType())
    return emitOpError("changes the element type");
  auto emit = [&] { return emitOpError(); };
  return shapes::verifySlice(shapeOf(getInput()), getStarts(), getSteps(),
                             getType().getShape(), emit);
}

LogicalResult TriluOp::verify() {
  if (getType().getRank() < 2)
    return emitOpError("needs rank >= 2");
  return success();
}

LogicalResult DropoutOp::verify() {
  double ratio = getRatio().convertToDouble();
  if (ratio < 0.0 || ratio >= 1.0)
    return emitOpError("ratio ") << ratio << " must be in [0, 1)";
  if (getOutput().getType() != getInput().getType() ||
      getMask().getType().getShape() != getInput().getType().getShape())
    return emitOpError("output and mask must have the input's shape");
  return success();
}

template <typename LossOp>
static LogicalResult verifyLoss(LossOp op, Value scores, Value labels,
                                Value weights) {
  auto emit = [&] { return op.emitOpError(); };
  std::optional<ArrayRef<int64_t>> w;
  if (weights)
    w = shapeOf(weights);
  if (elementOf(op.getLoss()) != elementOf(scores))
    return op.emitOpError("loss element type differs from the scores'");
  return checkShape(op,
                    shapes::loss(shapeOf(scores), shapeOf(labels), w,
                                 op.getReduction(), emit),
                    op.getLoss());
}

LogicalResult SoftmaxCrossEntropyLossOp::verify() {
  if (getLogProb() && getLogProb().getType() != getScores().getType())
    return emitOpError("log_prob must have the scores' type");
  return verifyLoss(*this, getScores(), getLabels(), getWeights());
}

LogicalResult NegativeLogLikelihoodLossOp::verify() {
  return verifyLoss(*this, getInput(), getTarget(), getWeight());
}

LogicalResult GatherGradOp::verify() {
  return verifyGatherGrad(*this, getGrad(), getIndices(), getAxis(),
                          getResult());
}

/// Sequence parallelism: `rows` has dimension `axis` of `whole` divided
/// by some parts, the rest equal, and one element type.
static LogicalResult verifyRows(Operation *op, Type whole, Type rows,
                                int64_t axis) {
  auto w = cast<RankedTensorType>(whole), r = cast<RankedTensorType>(rows);
  if (axis < 0 || axis >= w.getRank())
    return op->emitOpError("axis ") << axis << " is out of range";
  bool ok = w.getElementType() == r.getElementType() &&
            w.getRank() == r.getRank() && r.getDimSize(axis) > 0 &&
            w.getDimSize(axis) % r.getDimSize(axis) == 0;
  for (int64_t d = 0; ok && d < w.getRank(); ++d)
    ok = d == axis || w.getDimSize(d) == r.getDimSize(d);
  if (!ok)
    return op->emitOpError("the row block ")
           << rows << " does not divide dimension " << axis << " of "
           << whole;
  return success();
}

LogicalResult SpAllGatherOp::verify() {
  return verifyRows(*this, getType(), getInput().getType(), getAxis());
}
LogicalResult SpReduceScatterOp::verify() {
  return verifyRows(*this, getInput().getType(), getType(), getAxis());
}
LogicalResult SpSliceOp::verify() {
  return verifyRows(*this, getInput().getType(), getType(), getAxis());
}

LogicalResult VocabGatherOp::verify() {
  return verifyGather(*this, getTable(), getIndices(), 0, getResult());
}

LogicalResult VocabGatherGradOp::verify() {
  return verifyGatherGrad(*this, getGrad(), getIndices(), 0, getResult());
}

/// The vocabulary-parallel loss: 2-D scores, 1-D labels of their rows, and
/// the per-row log-sum-exp in f32.
static LogicalResult verifyVocabLoss(Operation *op, Value scores, Value labels,
                                     Value lse, StringRef reduction) {
  ArrayRef<int64_t> s = shapeOf(scores), l = shapeOf(labels);
  if (s.size() != 2 || l.size() != 1 || l[0] != s[0])
    return op->emitOpError("needs N x C scores and N labels");
  auto t = cast<RankedTensorType>(lse.getType());
  if (t.getRank() != 1 || t.getDimSize(0) != s[0] ||
      !t.getElementType().isF32())
    return op->emitOpError("lse must be N floats (f32)");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return op->emitOpError("reduction must be none, sum or mean");
  return success();
}

LogicalResult VocabCrossEntropyOp::verify() {
  if (failed(verifyVocabLoss(*this, getScores(), getLabels(), getLse(),
                             getReduction())))
    return failure();
  auto t = cast<RankedTensorType>(getLoss().getType());
  bool none = getReduction() == "none";
  if (none ? (t.getRank() != 1 || t.getDimSize(0) != shapeOf(getLabels())[0])
           : t.getRank() != 0)
    return emitOpError("loss must be a scalar, or N values with reduction "
                       "none");
  return success();
}

LogicalResult VocabCrossEntropyGradOp::verify() {
  if (failed(verifyVocabLoss(*this, getScores(), getLabels(), getLse(),
                             getReduction())))
    return failure();
  if (getType() != getScores().getType())
    return emitOpError("result must have the scores' type");
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  int64_t rank = getInput().getType().getRank();
  if (failed(verifyAxis(*this, getAxis(), rank)))
    return failure();
  if (getGrad().getType() != getInput().getType() ||
      getInputGrad().getType() != getInput().getType())
    return emitOpError("grad, input and input_grad must have one type");
  ArrayRef<int64_t> normalized =
      getInput().getType().getShape().drop_front(getAxis());
  if (!llvm::equal(shapeOf(getScale()), normalized) ||
      getScaleGrad().getType() != getScale().getType() ||
      getBiasGrad().getType() != getScale().getType())
    return emitOpError("scale and its gradients must have the normalized "
                       "shape");
  return success();
}

LogicalResult SoftmaxGradOp::verify() {
  if (getGrad().getType() != getOutput().getType() ||
      getType() != getOutput().getType())
    return emitOpError("grad, output and result must have one type");
  return verifyAxis(*this, getAxis(), getType().getRank());
}

LogicalResult LossGradOp::verify() {
  if (getType() != getScores().getType())
    return emitOpError("result must have the scores' type");
  auto emit = [&] { return emitOpError(); };
  std::optional<ArrayRef<int64_t>> w;
  if (getWeights())
    w = shapeOf(getWeights());
  return checkShape(*this,
                    shapes::loss(shapeOf(getScores()), shapeOf(getLabels()), w,
                                 getReduction(), emit),
                    getGrad());
}

LogicalResult SliceGradOp::verify() {
  if (elementOf(getGrad()) != getType().getElementType())
    return emitOpError("changes the element type");
  auto emit = [&] { return emitOpError(); };
  return shapes::verifySlice(getType().getShape(), getStarts(), getSteps(),
                             shapeOf(getGrad()), emit);
}

LogicalResult OnnxUpdateOp::verify() {
  StringRef kind = getKind();
  size_t states = kind == "adam" ? 2 : 1;
  if (kind != "adam" && kind != "adagrad" && kind != "momentum" &&
      kind != "nesterov")
    return emitOpError("unknown kind '") << kind << "'";
  if (getOperands().size() != 4 + states || getResults().size() != 1 + states)
    return emitOpError("expects R, T, X, G and ")
           << states << " state tensor(s), and as many results plus X_new";
  Type x = getOperands()[2].getType();
  for (Value v : getOperands().drop_front(2))
    if (v.getType() != x)
      return emitOpError("X, G and the states must have one type");
  for (Type r : getResultTypes())
    if (r != x)
      return emitOpError("results must have X's type");
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (getReduction() != "sum" && getReduction() != "mean")
    return emitOpError("reduction '") << getReduction()
                                      << "' is not one of 'sum', 'mean'";
  return success();
}

/// A shard and the whole it is cut from: 1-D, one element type, the whole
/// a positive multiple of the shard.
static LogicalResult verifyShardPair(Operation *op, Type shardType,
                                     Type wholeType) {
  auto shard = cast<RankedTensorType>(shardType);
  auto whole = cast<RankedTensorType>(wholeType);
  if (shard.getRank() != 1 || whole.getRank() != 1)
    return op->emitOpError("needs 1-D tensors, got ")
           << shard << " and " << whole;
  if (shard.getElementType() != whole.getElementType())
    return op->emitOpError("element types differ: ") << shard << " and "
                                                      << whole;
  int64_t s = shard.getDimSize(0), w = whole.getDimSize(0);
  if (s <= 0 || w % s != 0)
    return op->emitOpError("the whole (") << w
                                          << " elements) is not a multiple "
                                             "of the shard ("
                                          << s << ")";
  return success();
}

LogicalResult AllGatherOp::verify() {
  return verifyShardPair(*this, getInput().getType(), getType());
}

LogicalResult TransferOp::verify() {
  if (getTo() != "host" && getTo() != "device" && getTo() != "nvme")
    return emitOpError("moves to 'host', 'device' or 'nvme', not '")
           << getTo() << "'";
  if (getInput().getType() != getResult().getType())
    return emitOpError("keeps its type: ")
           << getInput().getType() << " became " << getResult().getType();
  return success();
}

LogicalResult ShardOp::verify() {
  return verifyShardPair(*this, getType(), getInput().getType());
}

LogicalResult ReduceScatterOp::verify() {
  if (getReduction() != "sum" && getReduction() != "mean")
    return emitOpError("reduction '") << getReduction()
                                      << "' is not one of 'sum', 'mean'";
  return verifyShardPair(*this, getType(), getInput().getType());
}

LogicalResult CheckOverflowOp::verify() {
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  if (getType().getRank() != 0 || !getType().getElementType().isF32())
    return emitOpError("result must be an f32 scalar, got ") << getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Canonicalization
//===----------------------------------------------------------------------===//

namespace {
/// reshape(reshape(x)) -> reshape(x).
struct FoldReshapeChain : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), inner.getInput());
    return success();
  }
};

/// Dropout that drops nothing is the identity; its mask is all true.
struct RemoveIdentityDropout : OpRewritePattern<DropoutOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DropoutOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getTraining() && op.getRatio().convertToDouble() != 0.0)
      return failure();
    Value mask;
    if (!op.getMask().use_empty())
      mask = ConstantOp::create(
          rewriter, op.getLoc(), op.getMask().getType(),
          DenseElementsAttr::get(op.getMask().getType(), true));
    rewriter.replaceOp(op, {op.getInput(), mask ? mask : op.getMask()});
    return success();
  }
};
} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<FoldReshapeChain>(context);
}

void DropoutOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<RemoveIdentityDropout>(context);
}

//===----------------------------------------------------------------------===//
// Cost (FLOPs); bytes come from the interface's defaults
//===----------------------------------------------------------------------===//

using ds::detail::numElements;

int64_t ConstantOp::getFlops() { return 0; }
int64_t ShapeOp::getFlops() { return 0; }
int64_t RangeOp::getFlops() { return 0; }
int64_t ConstantOfShapeOp::getFlops() { return 0; }
int64_t CastOp::getFlops() { return numElements(getType()); }
int64_t WhereOp::getFlops() { return numElements(getType()); }

int64_t MatMulOp::getFlops() {
  // 2*M*N*K per batch: the result has batch*M*N elements, each a K-dot.
  ArrayRef<int64_t> lhs = shapeOf(getLhs());
  return 2 * numElements(getType()) * lhs.back();
}

int64_t GemmOp::getFlops() {
  ArrayRef<int64_t> a = shapeOf(getA());
  int64_t k = getTransA() ? a[0] : a[1];
  int64_t mn = numElements(getType());
  return 2 * mn * k + (getC() ? 2 * mn : 0);
}

// max, subtract, exp, sum, divide.
int64_t SoftmaxOp::getFlops() { return 5 * numElements(getType()); }
// max, subtract, exp, sum, log-subtract.
int64_t LogSoftmaxOp::getFlops() { return 5 * numElements(getType()); }
// mean, centre, square-sum, normalize, scale, shift (and the rsqrt).
int64_t LayerNormOp::getFlops() { return 8 * numElements(getType()); }
int64_t GatherOp::getFlops() { return 0; }
int64_t ReshapeOp::getFlops() { return 0; }
int64_t ExpandOp::getFlops() { return 0; }
int64_t TransposeOp::getFlops() { return 0; }
int64_t ConcatOp::getFlops() { return 0; }
int64_t SplitOp::getFlops() { return 0; }
int64_t SliceOp::getFlops() { return 0; }
int64_t TriluOp::getFlops() { return numElements(getType()); }
// random draw, compare, scale.
int64_t DropoutOp::getFlops() { return 3 * numElements(getOutput().getType()); }
// log-softmax of the scores plus the pick and the reduction.
int64_t SoftmaxCrossEntropyLossOp::getFlops() {
  return 5 * numElements(getScores().getType()) +
         2 * numElements(getLabels().getType());
}
int64_t NegativeLogLikelihoodLossOp::getFlops() {
  return 2 * numElements(getTarget().getType());
}

int64_t GatherGradOp::getFlops() { return numElements(getGrad().getType()); }
// Recomputed statistics, then two reductions and the input gradient.
int64_t LayerNormGradOp::getFlops() { return 12 * numElements(getGrad().getType()); }
int64_t SoftmaxGradOp::getFlops() { return 4 * numElements(getType()); }
int64_t LossGradOp::getFlops() { return 6 * numElements(getType()); }
int64_t SliceGradOp::getFlops() { return 0; }
// Moments, bias corrections, the update: about 12 per element.
int64_t AdamOp::getFlops() { return 12 * numElements(getParam().getType()); }
int64_t SgdOp::getFlops() { return 6 * numElements(getParam().getType()); }
int64_t AllReduceOp::getFlops() { return numElements(getType()); }
int64_t AllGatherOp::getFlops() { return 0; }
int64_t ReduceScatterOp::getFlops() {
  return numElements(getInput().getType());
}
int64_t ShardOp::getFlops() { return 0; }
int64_t TransferOp::getFlops() { return 0; }
int64_t TpIdentityOp::getFlops() { return 0; }
int64_t TpAllReduceOp::getFlops() { return 0; }
int64_t SpAllGatherOp::getFlops() { return 0; }
int64_t SpReduceScatterOp::getFlops() {
  return numElements(getInput().getType());
}
int64_t SpSliceOp::getFlops() { return 0; }
int64_t VocabGatherOp::getFlops() { return 0; }
int64_t VocabGatherGradOp::getFlops() {
  return numElements(getGrad().getType());
}
// The local log-sum-exp terms, the pick and the reduction.
int64_t VocabCrossEntropyOp::getFlops() {
  return 5 * numElements(getScores().getType()) +
         2 * numElements(getLabels().getType());
}
int64_t VocabCrossEntropyGradOp::getFlops() {
  return 4 * numElements(getType());
}
int64_t PipeSendOp::getFlops() { return 0; }
int64_t PipeRecvOp::getFlops() { return 0; }
int64_t PipeMarkOp::getFlops() { return 0; }
int64_t TiedGradSumOp::getFlops() {
  return numElements(getResult().getType());
}
int64_t CheckOverflowOp::getFlops() {
  int64_t n = 0;
  for (Value g : getGrads())
    n += numElements(g.getType());
  return n;
}
int64_t OnnxUpdateOp::getFlops() {
  return 10 * numElements(getOperands()[2].getType());
}

#define GET_OP_CLASSES
#include "ds/Dialect/Ds/IR/DsOps.cpp.inc"
