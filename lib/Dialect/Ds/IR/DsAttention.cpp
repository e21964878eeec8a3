//===- DsAttention.cpp - ds.fused_attention and its gradient --------------===//
//
// Part of the ds project.
//
// The verifiers, costs and the VJP of the ops `--ds-fuse-attention` makes
// (issue 24 item 2; DsAttention.td). The kernels are
// lib/Runtime/Cpu/Attention.cpp and lib/Runtime/Cuda/Attention.cu.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsAttention.h"
#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"

using namespace mlir;
using namespace mlir::ds;
namespace sh = mlir::ds::shapes;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The checks both ops share: operand shapes and the mask's kind and type;
/// `tq`, `tk` get the scores' sizes.
LogicalResult verifyAttention(Operation *op, Value q, Value k, Value v,
                              Value mask, StringRef kind) {
  auto tq = typeOf(q), tk = typeOf(k), tv = typeOf(v);
  for (auto [name, t] : {std::make_pair("query", tq), std::make_pair("key", tk),
                         std::make_pair("value", tv)})
    if (!t.getElementType().isF32() || t.getRank() < 3)
      return op->emitOpError("expects an f32 ")
             << name << " of rank >= 3, got " << t;
  int64_t r = tq.getRank();
  if (tk.getRank() != r || tv.getRank() != r)
    return op->emitOpError("expects query, key and value of one rank");
  ArrayRef<int64_t> qs = tq.getShape(), ks = tk.getShape(), vs = tv.getShape();
  if (qs.drop_back(2) != ks.drop_back(2) || qs.drop_back(2) != vs.drop_back(2))
    return op->emitOpError("expects query, key and value with the same batch "
                           "dimensions, got ")
           << sh::toString(qs) << ", " << sh::toString(ks) << ", "
           << sh::toString(vs);
  if (qs.back() != ks.back())
    return op->emitOpError("expects query and key of one head size, got ")
           << qs.back() << " and " << ks.back();
  if (ks[r - 2] != vs[r - 2])
    return op->emitOpError("expects key and value of one length, got ")
           << ks[r - 2] << " and " << vs[r - 2];
  if (kind != "none" && kind != "fill_true" && kind != "fill_false" &&
      kind != "add")
    return op->emitOpError("expects mask_kind none, fill_true, fill_false or "
                           "add, got '")
           << kind << "'";
  if ((kind == "none") != !mask)
    return op->emitOpError("expects a mask operand exactly when mask_kind is "
                           "not 'none'");
  if (!mask)
    return success();
  auto tm = typeOf(mask);
  bool wantBool = kind != "add";
  if (wantBool ? !tm.getElementType().isInteger(1)
               : !tm.getElementType().isF32())
    return op->emitOpError("expects ")
           << (wantBool ? "an i1" : "an f32") << " mask for mask_kind '"
           << kind << "', got " << tm;
  SmallVector<int64_t> scores(qs.begin(), qs.end());
  scores.back() = ks[r - 2];
  if (!sh::broadcastsTo(tm.getShape(), scores))
    return op->emitOpError("mask of shape ")
           << sh::toString(tm.getShape())
           << " does not broadcast to the scores' " << sh::toString(scores);
  return success();
}

/// [batch..., Tq, Dv] and [batch..., Tq] of the forward's operands.
std::pair<SmallVector<int64_t>, SmallVector<int64_t>> resultShapes(Value q,
                                                                   Value v) {
  SmallVector<int64_t> out(typeOf(q).getShape());
  SmallVector<int64_t> lse(out.begin(), out.end() - 1);
  out.back() = typeOf(v).getShape().back();
  return {out, lse};
}

/// Multiply-adds of one Q K^T (and, with `dv`, one P V) per batch entry.
int64_t scoreElements(Value q, Value k) {
  auto qs = typeOf(q).getShape();
  int64_t n = 1;
  for (int64_t d : qs.drop_back(1))
    n *= d;
  return n * typeOf(k).getShape().drop_back(1).back();
}

} // namespace

LogicalResult FusedAttentionOp::verify() {
  if (failed(verifyAttention(*this, getQuery(), getKey(), getValue(),
                             getMask(), getMaskKind())))
    return failure();
  auto [out, lse] = resultShapes(getQuery(), getValue());
  if (typeOf(getResult()).getShape() != ArrayRef<int64_t>(out) ||
      typeOf(getLse()).getShape() != ArrayRef<int64_t>(lse) ||
      !typeOf(getResult()).getElementType().isF32() ||
      !typeOf(getLse()).getElementType().isF32())
    return emitOpError("expects an f32 result of shape ")
           << sh::toString(out) << " and an f32 lse of shape "
           << sh::toString(lse);
  return success();
}

LogicalResult FusedAttentionGradOp::verify() {
  if (failed(verifyAttention(*this, getQuery(), getKey(), getValue(),
                             getMask(), getMaskKind())))
    return failure();
  auto [out, lse] = resultShapes(getQuery(), getValue());
  if (typeOf(getResult()).getShape() != ArrayRef<int64_t>(out) ||
      typeOf(getGrad()).getShape() != ArrayRef<int64_t>(out) ||
      typeOf(getLse()).getShape() != ArrayRef<int64_t>(lse))
    return emitOpError("expects result and grad of shape ")
           << sh::toString(out) << " and lse of shape " << sh::toString(lse);
  if (getGradQuery().getType() != getQuery().getType() ||
      getGradKey().getType() != getKey().getType() ||
      getGradValue().getType() != getValue().getType())
    return emitOpError("expects gradients of the query's, key's and value's "
                       "types");
  return success();
}

// Forward: Q K^T and P V (2 FLOPs per multiply-add each) and about five per
// score for the mask, exp and sums. The gradient recomputes Q K^T and adds
// P^T dO, dO V^T, dS K and dS^T Q.
int64_t FusedAttentionOp::getFlops() {
  int64_t s = scoreElements(getQuery(), getKey());
  return 2 * s * (typeOf(getQuery()).getShape().back() +
                  typeOf(getValue()).getShape().back()) +
         5 * s;
}

int64_t FusedAttentionGradOp::getFlops() {
  int64_t s = scoreElements(getQuery(), getKey());
  return 2 * s * (3 * typeOf(getQuery()).getShape().back() +
                  2 * typeOf(getValue()).getShape().back()) +
         8 * s;
}

LogicalResult
FusedAttentionOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                           SmallVectorImpl<Value> &operandGrads) {
  if (resultGrads.size() > 1 && resultGrads[1])
    return emitOpError("has no gradient rule for its lse result");
  operandGrads.assign(getNumOperands(), Value());
  if (!resultGrads[0])
    return success();
  auto grad = FusedAttentionGradOp::create(
      b, getLoc(),
      TypeRange{getQuery().getType(), getKey().getType(), getValue().getType()},
      getQuery(), getKey(), getValue(), getResult(), getLse(), resultGrads[0],
      getMask(), getScaleAttr(), getMaskKindAttr(), getFillAttr());
  operandGrads[0] = grad.getGradQuery();
  operandGrads[1] = grad.getGradKey();
  operandGrads[2] = grad.getGradValue();
  return success();
}

StringRef mlir::ds::attentionStridedOperand(Operation *op, unsigned index) {
  static const char *const names[] = {"perm_q", "perm_k", "perm_v"};
  if (isa<FusedAttentionOp>(op))
    return index < 3 ? names[index] : "";
  if (isa<FusedAttentionGradOp>(op))
    return index < 3 ? names[index] : index == 5 ? "perm_grad" : "";
  return "";
}
