//===- Collectives.cpp - ds collectives as communication kernels ----------===//
//
// Part of the ds project.
//
// Ops with CollectiveOpInterface become the runtime's communication
// kernels (their `ds.phase` is "communication", PhaseMap). Most keep their
// name; tensor parallelism's group sum is an `all_reduce`, and sequence
// parallelism's row blocks take the plain collectives when they are
// contiguous rank shards.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace mlir::ds::lowering {
namespace {

/// Sequence parallelism: row blocks of the leading dimension (or of a later
/// one after leading dimensions of 1) are the collectives' contiguous rank
/// shards; others take the kernels that reorder. `ds.sp_slice` (no
/// communication) takes this rank's rows with `tp_rows`.
struct SequenceParallelLowering
    : LoweringOf<SpAllGatherOp, SpReduceScatterOp, SpSliceOp> {
  LogicalResult lower(Operation *op, LoweringState &state) const override {
    FailureOr<KernelCall> call = prepareKernelCall(op, state);
    if (failed(call))
      return failure();
    auto t = cast<RankedTensorType>(op->getOperand(0).getType());
    int64_t axis = cast<IntegerAttr>(op->getAttr("axis")).getInt();
    bool contiguous = llvm::all_of(t.getShape().take_front(axis),
                                   [](int64_t d) { return d == 1; });
    call->params.erase("partial_grad");
    if (isa<SpAllGatherOp>(op)) {
      call->kernel = contiguous ? "all_gather" : "sp_all_gather";
    } else if (isa<SpReduceScatterOp>(op)) {
      call->kernel = contiguous ? "reduce_scatter" : "sp_reduce_scatter";
      call->params.set("reduction", state.builder.getStringAttr("sum"));
    } else {
      call->kernel = "tp_rows";
    }
    emitKernelCall(op, *call, state);
    return success();
  }
};

/// The other collectives: the kernel of the op's name, except tensor
/// parallelism's `ds.tp_all_reduce`, the sum over its group.
struct CollectiveLowering : LoweringOf<CollectiveOpInterface> {
  LogicalResult lower(Operation *op, LoweringState &state) const override {
    FailureOr<KernelCall> call = prepareKernelCall(op, state);
    if (failed(call))
      return failure();
    if (isa<TpAllReduceOp>(op)) {
      call->kernel = "all_reduce";
      call->params.set("reduction", state.builder.getStringAttr("sum"));
    }
    emitKernelCall(op, *call, state);
    return success();
  }
};

} // namespace

void populateCollectiveLowerings(OpLowerings &lowerings) {
  lowerings.push_back(std::make_unique<SequenceParallelLowering>());
  lowerings.push_back(std::make_unique<CollectiveLowering>());
}

} // namespace mlir::ds::lowering
