//===- OverlapComm.cpp - collectives that overlap computation -------------===//
//
// Part of the ds project.
//
// A collective whose result is first read several kernels later becomes
// asynchronous: the kernel starts it (`async` in its params) and a "wait"
// kernel, placed just before the first kernel that reads the result
// (directly or through a view) or the next collective (one in flight at a
// time bounds the buffers held), completes it. The wait reads the buffers
// the communication still touches, so the memory plan keeps them alive
// until then, and nothing in between may reuse them.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::ds {
#define GEN_PASS_DEF_OVERLAPCOMMPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

bool isCollective(dsrt::KernelOp k) {
  StringRef id = k.getKernel();
  return id == "all_reduce" || id == "all_gather" || id == "reduce_scatter";
}

struct OverlapCommPass : impl::OverlapCommPassBase<OverlapCommPass> {
  using OverlapCommPassBase::OverlapCommPassBase;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block &body = func.getBody().front();
    SmallVector<dsrt::KernelOp> collectives;
    for (Operation &op : body)
      if (auto k = dyn_cast<dsrt::KernelOp>(op); k && isCollective(k))
        collectives.push_back(k);
    for (dsrt::KernelOp k : collectives) {
      if (k.getParams().get("async"))
        continue;
      // The first op after k that reads k's results; views are free and
      // only extend the set of values to watch.
      llvm::SmallPtrSet<Value, 4> results(k.getOuts().begin(),
                                          k.getOuts().end());
      Operation *first = nullptr;
      int kernelsBetween = 0;
      int64_t later = 0; // collectives started after k so far
      for (Operation *op = k->getNextNode(); op && !first;
           op = op->getNextNode()) {
        // At most max-in-flight collectives at once: the one that would
        // exceed it waits for this one.
        if (auto next = dyn_cast<dsrt::KernelOp>(op);
            next && isCollective(next) && ++later >= maxInFlight) {
          first = op;
          break;
        }
        // Nothing stays in flight across a pipeline hand-over or the
        // start of a stage's backward section.
        if (auto next = dyn_cast<dsrt::KernelOp>(op);
            next && next.getKernel().starts_with("pipe_")) {
          first = op;
          break;
        }
        bool reads = llvm::any_of(op->getOperands(), [&](Value v) {
          return results.contains(v);
        });
        if (auto view = dyn_cast<dsrt::ViewOp>(op); view && reads) {
          results.insert(view.getResult());
          continue;
        }
        if (reads || op->hasTrait<OpTrait::IsTerminator>())
          first = op;
        else if (isa<dsrt::KernelOp, dsrt::CopyOp>(op))
          ++kernelsBetween;
      }
      if (!first || kernelsBetween == 0)
        continue; // nothing to overlap with: stays synchronous
      OpBuilder b(k);
      NamedAttrList params(k.getParams());
      params.set("async", b.getI64IntegerAttr(1));
      k.setParamsAttr(params.getDictionary(b.getContext()));
      b.setInsertionPoint(first);
      // The wait reads what the communication still touches: all-reduce
      // took its input when it started (it reduces the output in place, so
      // the input may die, or share the output's storage); the others read
      // their input until they complete.
      SmallVector<Value> touched;
      if (k.getKernel() != "all_reduce")
        llvm::append_range(touched, k.getIns());
      llvm::append_range(touched, k.getOuts());
      // The wait completes it on the same group's communicator (group 0,
      // the data-parallel ranks, is the default and left implicit).
      NamedAttrList waitParams;
      if (auto group = dyn_cast_or_null<IntegerAttr>(params.get("group"));
          group && group.getInt() != 0)
        waitParams.set("group", group);
      dsrt::KernelOp::create(b, k.getLoc(), b.getStringAttr("wait"), touched,
                             ValueRange{},
                             waitParams.getDictionary(b.getContext()),
                             DenseI64ArrayAttr());
    }
  }
};
} // namespace
} // namespace mlir::ds
