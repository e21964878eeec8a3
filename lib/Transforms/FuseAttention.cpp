//===- FuseAttention.cpp - softmax(Q K^T) V as ds.fused_attention ---------===//
//
// Part of the ds project.
//
// Issue 24 item 2 (see the pass description in Passes.td): the attention
// pattern the importer makes from PyTorch's exports (GPT's masked_fill
// causal mask, BERT's additive padding bias, nn.MultiheadAttention's
// pre-scaled query) becomes one `ds.fused_attention`, whose kernel keeps
// O(T) state per row and whose VJP recomputes the probabilities.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "ds/Dialect/Ds/IR/DsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::ds {
#define GEN_PASS_DEF_FUSEATTENTIONPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

bool isF32(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

/// The value of a splat f32 constant, if `v` is one.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!isF32(v) || !matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

/// The op defining `v` when it is of type OpTy and `v` its only use.
template <typename OpTy> OpTy soleProducer(Value v) {
  auto op = v.getDefiningOp<OpTy>();
  return op && v.hasOneUse() ? op : OpTy();
}

/// Whether `v` depends on a trainable parameter of `func` (its gradient
/// would be needed).
bool dependsOnTrainable(func::FuncOp func, Value v) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Value, 16> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(x)) {
      if (arg.getOwner()->getParentOp() == func &&
          func.getArgAttr(arg.getArgNumber(), attrs::kTrainable))
        return true;
      continue;
    }
    for (Value o : x.getDefiningOp()->getOperands())
      work.push_back(o);
  }
  return false;
}

/// One matched attention: the fused op's operands and attributes and the
/// ops it replaces (erased last to first).
struct Match {
  Value q, kt, v, mask;
  double scale = 1.0, fill = 0.0;
  StringRef kind = "none";
  SmallVector<Operation *> replaced; // the P V matmul first
};

/// Walks up from the softmax's input: [mask] [scale] Q K^T.
bool matchScores(func::FuncOp func, Value x, Match &m) {
  // The mask, outermost.
  if (auto w = soleProducer<WhereOp>(x)) {
    std::optional<double> a = splatValue(w.getX()), b = splatValue(w.getY());
    if (a && !b) {
      m.kind = "fill_true", m.fill = *a, x = w.getY();
    } else if (b && !a) {
      m.kind = "fill_false", m.fill = *b, x = w.getX();
    } else {
      return false;
    }
    if (x.getType() != w.getType())
      return false;
    m.mask = w.getCondition();
    m.replaced.push_back(w);
  } else if (auto add = soleProducer<AddOp>(x)) {
    auto isScores = [&](Value s) {
      return s.getType() == add.getType() && s.hasOneUse() &&
             (s.getDefiningOp<MatMulOp>() || s.getDefiningOp<MulOp>() ||
              s.getDefiningOp<DivOp>());
    };
    Value a = add.getLhs(), b = add.getRhs();
    Value s = isScores(a) ? a : isScores(b) ? b : Value();
    if (!s)
      return false;
    Value bias = s == a ? b : a;
    if (!isF32(bias) || dependsOnTrainable(func, bias))
      return false;
    m.kind = "add", m.mask = bias, x = s;
    m.replaced.push_back(add);
  }
  // The scale.
  if (auto mul = soleProducer<MulOp>(x)) {
    std::optional<double> a = splatValue(mul.getLhs()),
                          b = splatValue(mul.getRhs());
    if (b && mul.getLhs().getType() == mul.getType()) {
      m.scale = *b, x = mul.getLhs();
    } else if (a && mul.getRhs().getType() == mul.getType()) {
      m.scale = *a, x = mul.getRhs();
    } else {
      return false;
    }
    m.replaced.push_back(mul);
  } else if (auto div = soleProducer<DivOp>(x)) {
    std::optional<double> b = splatValue(div.getRhs());
    if (!b || *b == 0.0 || div.getLhs().getType() != div.getType())
      return false;
    m.scale = 1.0 / *b, x = div.getLhs();
    m.replaced.push_back(div);
  }
  auto qk = soleProducer<MatMulOp>(x);
  if (!qk)
    return false;
  m.q = qk.getLhs(), m.kt = qk.getRhs();
  m.replaced.push_back(qk);
  return true;
}

/// Whether query [b.., Tq, D], K^T [b.., D, Tk] and value [b.., Tk, Dv]
/// fit the fused op (f32, one rank >= 3, equal batch dimensions).
bool shapesFit(const Match &m) {
  if (!isF32(m.q) || !isF32(m.kt) || !isF32(m.v))
    return false;
  auto q = cast<RankedTensorType>(m.q.getType()).getShape();
  auto kt = cast<RankedTensorType>(m.kt.getType()).getShape();
  auto v = cast<RankedTensorType>(m.v.getType()).getShape();
  size_t r = q.size();
  if (r < 3 || kt.size() != r || v.size() != r)
    return false;
  return q.drop_back(2) == kt.drop_back(2) && q.drop_back(2) == v.drop_back(2) &&
         q[r - 1] == kt[r - 2] && kt[r - 1] == v[r - 2];
}

/// K from K^T: the transpose that made K^T composed with a swap of the last
/// two dimensions (its source when that is the identity), else a new one.
Value keyOf(OpBuilder &b, Value kt) {
  auto t = cast<RankedTensorType>(kt.getType());
  int64_t r = t.getRank();
  SmallVector<int64_t> swap(r);
  for (int64_t i = 0; i < r; ++i)
    swap[i] = i;
  std::swap(swap[r - 1], swap[r - 2]);
  SmallVector<int64_t> shape(t.getShape());
  std::swap(shape[r - 1], shape[r - 2]);
  auto type = t.clone(shape);
  Value src = kt;
  SmallVector<int64_t> perm = swap;
  if (auto tr = kt.getDefiningOp<TransposeOp>()) {
    // (X^p)^swap = X^(p o swap): result dim i is source dim p[swap[i]].
    ArrayRef<int64_t> p = tr.getPerm();
    for (int64_t i = 0; i < r; ++i)
      perm[i] = p[swap[i]];
    src = tr.getInput();
  }
  bool identity = true;
  for (int64_t i = 0; i < r; ++i)
    identity &= perm[i] == i;
  if (identity && src.getType() == type)
    return src;
  return TransposeOp::create(b, kt.getLoc(), type, src,
                             b.getDenseI64ArrayAttr(perm));
}

struct FuseAttentionPass
    : impl::FuseAttentionPassBase<FuseAttentionPass> {
  /// Matches the attention whose softmax is `sm`, or fails.
  std::optional<Match> match(func::FuncOp func, SoftmaxOp sm) {
    auto type = cast<RankedTensorType>(sm.getType());
    int64_t axis = sm.getAxis();
    if (!type.getElementType().isF32() || type.getRank() < 3 ||
        (axis != type.getRank() - 1 && axis != -1) || !sm->hasOneUse())
      return std::nullopt;
    auto pv = dyn_cast<MatMulOp>(*sm->getUsers().begin());
    if (!pv || pv.getLhs() != sm.getResult() || pv.getRhs() == sm.getResult())
      return std::nullopt;
    Match m;
    m.v = pv.getRhs();
    m.replaced = {pv, sm};
    if (!matchScores(func, sm.getInput(), m) || !shapesFit(m))
      return std::nullopt;
    for (Operation *op : m.replaced) // marks would be lost
      for (NamedAttribute a : op->getDiscardableAttrs())
        if (a.getName() != "ds.recompute")
          return std::nullopt;
    return m;
  }

  void fuse(Match &m) {
    auto pv = cast<MatMulOp>(m.replaced.front());
    OpBuilder b(pv);
    Value k = keyOf(b, m.kt);
    auto q = cast<RankedTensorType>(m.q.getType());
    SmallVector<int64_t> lseShape(q.getShape().drop_back(1));
    auto fused = FusedAttentionOp::create(
        b, pv.getLoc(),
        TypeRange{pv.getType(), q.clone(lseShape)}, m.q, k, m.v, m.mask,
        b.getF64FloatAttr(m.scale), b.getStringAttr(m.kind),
        b.getF64FloatAttr(m.fill));
    if (pv->hasAttr("ds.recompute"))
      fused->setAttr("ds.recompute", b.getUnitAttr());
    pv.getResult().replaceAllUsesWith(fused.getResult());
    Operation *kt = m.kt.getDefiningOp();
    for (Operation *op : m.replaced) // users before producers
      op->erase();
    if (kt && isa<TransposeOp>(kt) && kt->use_empty())
      kt->erase();
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<SoftmaxOp> softmaxes;
    func.walk([&](SoftmaxOp sm) { softmaxes.push_back(sm); });
    for (SoftmaxOp sm : softmaxes)
      if (std::optional<Match> m = match(func, sm))
        fuse(*m);
  }
};

} // namespace
} // namespace mlir::ds
