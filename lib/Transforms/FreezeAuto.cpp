//===- FreezeAuto.cpp - marks 1-bit Adam's ops for a run-time freeze ------===//
//
// Part of the ds project.
//
// `freeze_step: "auto"` (docs/compression.md): the optimizer pass builds
// 1-bit Adam's ops with the latest freeze step the criterion allows
// (ds::freezeauto::kMaxStep) and marks every op with a `freeze_step` with
// `freeze_auto`; its kernels then freeze after the step ds-run decides.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdate.h"

namespace mlir::ds::optimizer {

LogicalResult markFreezeAuto(func::FuncOp func, StringRef optimizer) {
  if (optimizer != "onebit-adam" && optimizer != "onebit-lamb")
    return func.emitError("freeze-step auto is built for onebit-adam and "
                          "onebit-lamb only, not '")
           << optimizer << "'";
  Builder b(func.getContext());
  func.walk([&](Operation *op) {
    if (op->hasAttr("freeze_step"))
      op->setAttr("freeze_auto", b.getBoolAttr(true));
  });
  return success();
}

} // namespace mlir::ds::optimizer
