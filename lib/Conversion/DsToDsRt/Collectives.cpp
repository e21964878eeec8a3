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

#include "ds/Dialect/Ds/IR/DsZeroPP.h"
#include "ds/Support/Quantize.h"

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

/// ZeRO++'s quantized all-gather and reduce-scatter (docs/zeropp.md): the
/// kernel of the op's name with its packed records in a workspace, an
/// extra f32 output (records are whole 4-byte words) that the memory plan
/// places like any other buffer (include/ds/Support/Quantize.h sizes it).
struct QuantizedCollectiveLowering
    : LoweringOf<QuantizedAllGatherOp, QuantizedReduceScatterOp> {
  LogicalResult lower(Operation *op, LoweringState &state) const override {
    FailureOr<KernelCall> call = prepareKernelCall(op, state);
    if (failed(call))
      return failure();
    uint64_t bytes;
    if (auto g = dyn_cast<QuantizedAllGatherOp>(op)) {
      int64_t shard = detail::numElements(g.getInput().getType());
      bytes = ::ds::quant::gatherWorkspaceBytes(
          shard, detail::numElements(g.getType()) / shard, g.getBlockSize(),
          static_cast<int>(g.getBits()));
    } else {
      auto rs = cast<QuantizedReduceScatterOp>(op);
      int64_t chunk = detail::numElements(rs.getType());
      bytes = ::ds::quant::reduceScatterWorkspaceBytes(
          chunk, detail::numElements(rs.getInput().getType()) / chunk,
          rs.getBlockSize(), static_cast<int>(rs.getBits()));
    }
    OpBuilder &b = state.builder;
    call->outs.push_back(dsrt::AllocOp::create(
        b, op->getLoc(),
        MemRefType::get({static_cast<int64_t>(bytes / 4)}, b.getF32Type()),
        IntegerAttr()));
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
  lowerings.push_back(std::make_unique<QuantizedCollectiveLowering>());
  lowerings.push_back(std::make_unique<CollectiveLowering>());
}

} // namespace mlir::ds::lowering
