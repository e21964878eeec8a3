//===- PrintCost.cpp - report the cost model and split rules per op -------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

namespace mlir::ds {
#define GEN_PASS_DEF_PRINTCOSTPASS
#define GEN_PASS_DEF_PRINTSPLITAXESPASS
#include "ds/Transforms/Passes.h.inc"

namespace {
struct PrintCostPass : impl::PrintCostPassBase<PrintCostPass> {
  void runOnOperation() override {
    int64_t flops = 0, read = 0, written = 0;
    getOperation().walk([&](CostOpInterface op) {
      int64_t f = op.getFlops(), r = op.getBytesRead(),
              w = op.getBytesWritten();
      op->emitRemark() << "flops=" << f << " read=" << r << " written=" << w;
      flops += f;
      read += r;
      written += w;
    });
    getOperation()->emitRemark()
        << "total flops=" << flops << " read=" << read
        << " written=" << written;
    markAllAnalysesPreserved();
  }
};

struct PrintSplitAxesPass
    : impl::PrintSplitAxesPassBase<PrintSplitAxesPass> {
  void runOnOperation() override {
    getOperation().walk([&](SplitAxisOpInterface op) {
      std::string text = "split axes:";
      for (OpOperand &o : op->getOpOperands()) {
        auto t = dyn_cast<RankedTensorType>(o.get().getType());
        if (!t)
          continue;
        text += " [";
        for (int64_t a = 0; a < t.getRank(); ++a) {
          int64_t r = op.getResultSplitAxis(o.getOperandNumber(), a);
          text += (a ? " " : "") + (r < 0 ? std::string("-") : std::to_string(r));
        }
        text += "]";
      }
      op->emitRemark() << text;
    });
    markAllAnalysesPreserved();
  }
};
} // namespace
} // namespace mlir::ds
