//===- SyncBatchNorm.cpp - BatchNorm statistics over data-parallel ranks --===//
//
// Part of the ds project.
//
// Sums the partial batch statistics that the BatchNormalization import
// marks (`ds.batch_stat`) over data-parallel group 0 and rescales the
// divisions by the count (`ds.batch_count`) to the global count; see the
// pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "ds/Dialect/Ds/IR/DsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::ds {
#define GEN_PASS_DEF_SYNCBATCHNORMPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

struct SyncBatchNormPass : impl::SyncBatchNormPassBase<SyncBatchNormPass> {
  using SyncBatchNormPassBase::SyncBatchNormPassBase;

  /// The divisor of a `ds.batch_count` division made global: `size * n -
  /// offset` where the divisor was `n - offset`.
  LogicalResult rescale(DivOp div, OpBuilder &b) {
    int64_t offset = cast<IntegerAttr>(div->getAttr("ds.batch_count")).getInt();
    auto cst = div.getRhs().getDefiningOp<ConstantOp>();
    auto value = cst ? dyn_cast<DenseElementsAttr>(cst.getValue()) : nullptr;
    if (!value || !value.isSplat() ||
        !isa<FloatType>(value.getElementType()))
      return div.emitOpError("a ds.batch_count division must divide by a "
                             "float constant");
    double n = value.getSplatValue<APFloat>().convertToDouble() + offset;
    double global = n * static_cast<double>(size) - offset;
    auto type = cast<RankedTensorType>(cst.getType());
    b.setInsertionPoint(div);
    auto scaled = ConstantOp::create(
        b, cst.getLoc(), type,
        DenseElementsAttr::get(
            type, FloatAttr::get(type.getElementType(), global)));
    div->setOperand(1, scaled);
    return success();
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (size < 1) {
      func.emitError("sync-batchnorm size must be at least 1, got ")
          << static_cast<int64_t>(size);
      return signalPassFailure();
    }
    if (size == 1)
      return;
    OpBuilder b(func.getContext());
    SmallVector<Operation *> sums;
    SmallVector<DivOp> divs;
    func.walk([&](Operation *op) {
      if (op->hasAttr("ds.batch_stat") && isa<ReduceSumOp>(op))
        sums.push_back(op);
      if (auto div = dyn_cast<DivOp>(op); div && div->hasAttr("ds.batch_count"))
        divs.push_back(div);
    });
    for (Operation *sum : sums) {
      Value partial = sum->getResult(0);
      b.setInsertionPointAfter(sum);
      auto global = AllReduceOp::create(b, sum->getLoc(), partial,
                                        b.getStringAttr("sum"),
                                        b.getI64IntegerAttr(0));
      global->setAttr("ds.f32_island", b.getUnitAttr());
      partial.replaceAllUsesExcept(global, global);
      sum->removeAttr("ds.batch_stat"); // synchronized once
    }
    for (DivOp div : divs) {
      if (failed(rescale(div, b)))
        return signalPassFailure();
      div->removeAttr("ds.batch_count");
    }
  }
};

} // namespace
} // namespace mlir::ds
