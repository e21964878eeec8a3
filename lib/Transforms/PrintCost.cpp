//===- PrintCost.cpp - report the cost model per op -----------------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

namespace mlir::ds {
#define GEN_PASS_DEF_PRINTCOSTPASS
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
} // namespace
} // namespace mlir::ds
