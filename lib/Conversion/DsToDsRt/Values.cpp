//===- Values.cpp - ds ops that lower to no kernel ------------------------===//
//
// Part of the ds project.
//
// Constants become `dsrt.const` data in the plan; reshapes become views of
// the same bytes; `ds.tp_identity` is its input; a transpose of the last
// two dimensions that only matmuls read is folded into them (`trans_a` /
// `trans_b`, KernelCall.cpp), and so is one --ds-fold-transpose marked
// (`perm_a` / `perm_b`).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "ds/Dialect/Ds/IR/DsAttention.h"

namespace mlir::ds::lowering {
namespace {

/// `ds.constant`, and the shape arithmetic that always folds (static
/// shapes): the constant's data in the plan.
struct ConstantLowering : LoweringOf<ConstantOp, ShapeOp, ConstantOfShapeOp> {
  LogicalResult lower(Operation *op, LoweringState &state) const override {
    ElementsAttr value;
    if (auto c = dyn_cast<ConstantOp>(op)) {
      value = c.getValue();
    } else {
      SmallVector<OpFoldResult> folded;
      if (failed(op->fold(folded)) || folded.size() != 1 ||
          !isa<Attribute>(folded[0]))
        return op->emitOpError("should have folded to a constant");
      value = cast<ElementsAttr>(cast<Attribute>(folded[0]));
    }
    Value result = op->getResult(0);
    state.map.map(result,
                  dsrt::ConstOp::create(state.builder, op->getLoc(),
                                        bufferType(result.getType()), value));
    state.toErase.push_back(op);
    return success();
  }
};

/// True if `t` swaps the last two dimensions only and every user is a
/// matmul: the matmul kernel then reads the source transposed (`trans_a` /
/// `trans_b`) and no copy is made. PyTorch exports every Linear layer as
/// Transpose(W) + MatMul.
///
/// Or a transpose --ds-fold-transpose marked `ds.gemm_operand`: f32, its
/// input's innermost dimension one of the last two (unit stride for the
/// GEMM); the kernel reads the input through the permutation (`perm_a` /
/// `perm_b`, a strided batched GEMM; fused attention's `perm_q`, ...:
/// attentionStridedOperand). Checked again here: a canonicalization
/// after the pass may have composed the permutation.
bool foldsIntoMatMul(TransposeOp t) {
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t rank = perm.size();
  bool swap = rank >= 2 && perm[rank - 1] == rank - 2 &&
              perm[rank - 2] == rank - 1;
  for (int64_t i = 0; swap && i + 2 < rank; ++i)
    swap = perm[i] == i;
  bool strided = t->hasAttr("ds.gemm_operand") && rank >= 3 &&
                 (perm[rank - 1] == rank - 1 || perm[rank - 2] == rank - 1) &&
                 t.getType().getElementType().isF32();
  if (!swap && !strided)
    return false;
  // Either operand of a matmul (the backward pass's weight gradients are
  // A^T @ G), or a fused attention's strided operand (innermost dimension
  // last).
  return llvm::all_of(t->getUses(), [&](OpOperand &use) {
    if (strided && perm[rank - 1] == rank - 1 &&
        !attentionStridedOperand(use.getOwner(), use.getOperandNumber())
             .empty())
      return true;
    return isa<MatMulOp>(use.getOwner());
  });
}

/// Ops whose result is their input's bytes: reshapes (a view under the new
/// shape), tensor parallelism's forward identity, transposes folded into
/// matmuls.
struct ViewLowering : OpLowering {
  bool match(Operation *op) const override {
    if (auto t = dyn_cast<TransposeOp>(op))
      return foldsIntoMatMul(t);
    return isa<ReshapeOp, TpIdentityOp>(op);
  }

  LogicalResult lower(Operation *op, LoweringState &state) const override {
    Value input = state.map.lookup(op->getOperand(0));
    Value result = op->getResult(0);
    if (isa<TransposeOp>(op))
      state.transposedFrom[result] = input;
    else if (isa<TpIdentityOp>(op))
      state.map.map(result, input);
    else
      state.map.map(result,
                    dsrt::ViewOp::create(state.builder, op->getLoc(),
                                         bufferType(result.getType()), input));
    state.toErase.push_back(op);
    return success();
  }
};

} // namespace

void populateValueLowerings(OpLowerings &lowerings) {
  lowerings.push_back(std::make_unique<ConstantLowering>());
  lowerings.push_back(std::make_unique<ViewLowering>());
}

} // namespace mlir::ds::lowering
