//===- DataParallel.cpp - gradient averaging over data-parallel ranks -----===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

namespace mlir::ds {
#define GEN_PASS_DEF_DATAPARALLELPASS
#include "ds/Transforms/Passes.h.inc"

namespace {
struct DataParallelPass : impl::DataParallelPassBase<DataParallelPass> {
  using DataParallelPassBase::DataParallelPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    if (worldSize < 1) {
      func.emitError("world size must be at least 1, got ")
          << static_cast<int64_t>(worldSize);
      return signalPassFailure();
    }
    OpBuilder b(func.getContext());
    func->setAttr("ds.world_size", b.getI64IntegerAttr(worldSize));
    if (worldSize == 1)
      return;
    Operation *ret = func.getBody().front().getTerminator();
    b.setInsertionPoint(ret);
    bool any = false;
    for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
      if (!func.getResultAttr(i, "ds.grad") && !func.getResultAttr(i, attrs::kLoss))
        continue;
      Value v = ret->getOperand(i);
      ret->setOperand(i, AllReduceOp::create(b, v.getLoc(), v,
                                             b.getStringAttr("mean"),
                                             b.getI64IntegerAttr(0)));
      any |= func.getResultAttr(i, "ds.grad") != nullptr;
    }
    if (!any) {
      func.emitError("data parallelism needs gradients: run --ds-autodiff "
                     "first");
      return signalPassFailure();
    }
  }
};
} // namespace
} // namespace mlir::ds
