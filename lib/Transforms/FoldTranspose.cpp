//===- FoldTranspose.cpp - transposes folded into GEMM operands -----------===//
//
// Part of the ds project.
//
// Two rewrites that leave no transpose copied (issue 24 item 2; see the
// pass description in Passes.td): a transpose of the last two dimensions of
// a matmul's result becomes the product of the transposed operands, and a
// transpose that keeps the innermost dimension of its input as one of the
// two GEMM dimensions, read only by matmuls (or as fused attention's
// query, key, value or output gradient), is marked `ds.gemm_operand`:
// the lowering then hands the kernel the untransposed input and the
// permutation (a strided batched GEMM) instead of copying it.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "ds/Dialect/Ds/IR/DsAttention.h"
#include "ds/Dialect/Ds/IR/DsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::ds {
#define GEN_PASS_DEF_FOLDTRANSPOSEPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

/// True if `perm` swaps the last two dimensions and keeps the others.
bool swapsLastTwo(ArrayRef<int64_t> perm) {
  int64_t r = perm.size();
  if (r < 2 || perm[r - 1] != r - 2 || perm[r - 2] != r - 1)
    return false;
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[i] != i)
      return false;
  return true;
}

/// `x` with its last two dimensions swapped; a transpose `x` came from is
/// composed in (the pass runs after the last canonicalization), and vanishes
/// when the two cancel.
Value transposeLast2(OpBuilder &b, Location loc, Value x) {
  auto t = cast<RankedTensorType>(x.getType());
  int64_t r = t.getRank();
  SmallVector<int64_t> perm, shape(t.getShape());
  for (int64_t i = 0; i < r; ++i)
    perm.push_back(i);
  std::swap(perm[r - 1], perm[r - 2]);
  std::swap(shape[r - 1], shape[r - 2]);
  if (auto inner = x.getDefiningOp<TransposeOp>()) {
    bool identity = true;
    for (int64_t d = 0; d < r; ++d) {
      perm[d] = inner.getPerm()[perm[d]];
      identity &= perm[d] == d;
    }
    x = inner.getInput();
    if (identity)
      return x;
  }
  return TransposeOp::create(b, loc,
                             RankedTensorType::get(shape, t.getElementType()),
                             x, b.getDenseI64ArrayAttr(perm));
}

/// (A B)^T = B^T A^T: the transposed operands are read transposed by the
/// kernel (or cancel a transpose they came from), so no copy is made. Only
/// for a matmul whose sole user is the transpose and whose operands are
/// matrices (a 1-D operand's promotion does not commute).
bool swapProduct(TransposeOp t) {
  auto mm = t.getInput().getDefiningOp<MatMulOp>();
  if (!mm || !swapsLastTwo(t.getPerm()) || !mm->hasOneUse())
    return false;
  auto ta = cast<RankedTensorType>(mm.getLhs().getType());
  auto tb = cast<RankedTensorType>(mm.getRhs().getType());
  if (ta.getRank() < 2 || tb.getRank() < 2)
    return false;
  OpBuilder b(t);
  Value bt = transposeLast2(b, mm.getLoc(), mm.getRhs());
  Value at = transposeLast2(b, mm.getLoc(), mm.getLhs());
  auto product = MatMulOp::create(b, mm.getLoc(), t.getType(), bt, at);
  product->setDiscardableAttrs(mm->getDiscardableAttrDictionary());
  t.replaceAllUsesWith(product.getResult());
  t.erase();
  mm.erase();
  return true;
}

/// True if a matmul kernel reads `t`'s input through the permutation: f32
/// (the CPU kernel's strided path converts no 16-bit data), rank >= 3 (2-D
/// is trans_a/trans_b, folded without a mark), the input's innermost
/// dimension one of the two GEMM dimensions (unit stride), only matmuls of
/// matrices read it, or fused attentions as query, key, value or output
/// gradient when the innermost dimension stays last (their kernels read
/// each head's rows through a row stride).
bool gemmOperand(TransposeOp t) {
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t r = perm.size();
  if (r < 3 || swapsLastTwo(perm) || t.getType().getElementType() !=
                                         Float32Type::get(t.getContext()))
    return false;
  if (perm[r - 1] != r - 1 && perm[r - 2] != r - 1)
    return false;
  // Matrices both (a 1-D operand's promotion is not a strided GEMM).
  return !t->use_empty() && llvm::all_of(t->getUses(), [&](OpOperand &use) {
    if (!attentionStridedOperand(use.getOwner(), use.getOperandNumber())
             .empty())
      return perm[r - 1] == r - 1;
    auto mm = dyn_cast<MatMulOp>(use.getOwner());
    return mm && cast<RankedTensorType>(mm.getLhs().getType()).getRank() >= 2 &&
           cast<RankedTensorType>(mm.getRhs().getType()).getRank() >= 2;
  });
}

struct FoldTransposePass : impl::FoldTransposePassBase<FoldTransposePass> {
  using FoldTransposePassBase::FoldTransposePassBase;

  void runOnOperation() override {
    SmallVector<TransposeOp> transposes;
    getOperation().walk([&](TransposeOp t) { transposes.push_back(t); });
    for (TransposeOp t : transposes)
      swapProduct(t);
    // Marked after the swaps, which can leave a transpose unused (its
    // product's operands now read the source) or create one.
    getOperation().walk([&](TransposeOp t) {
      if (t->use_empty())
        t->erase();
      else if (gemmOperand(t))
        t->setAttr("ds.gemm_operand", UnitAttr::get(&getContext()));
    });
  }
};

} // namespace
} // namespace mlir::ds
