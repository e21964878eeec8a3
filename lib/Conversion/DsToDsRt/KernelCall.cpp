//===- KernelCall.cpp - one ds op as one dsrt.kernel call -----------------===//
//
// Part of the ds project.
//
// What every kernel family shares: inputs looked up through the mapping
// (and through transposes folded into matmuls), fresh arena buffers for the
// results, the op's attributes as params, the in-place inputs of
// elementwise ops, and the annotations the plan writer reads.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "ds/Dialect/Ds/IR/DsAttention.h"

namespace mlir::ds::lowering {
MemRefType bufferType(Type tensor) {
  auto t = cast<RankedTensorType>(tensor);
  return MemRefType::get(t.getShape(), t.getElementType());
}

namespace {

/// Inputs whose storage the (single) output of `op` may take: elementwise
/// ops (DsElementwise) read element i before writing element i.
SmallVector<int64_t> inplaceOperands(Operation *op) {
  SmallVector<int64_t> out;
  if (!op->hasTrait<DsElementwise>() || op->getNumResults() != 1)
    return out;
  auto r = cast<ShapedType>(op->getResult(0).getType());
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    auto t = cast<ShapedType>(operand.getType());
    if (t.getShape() == r.getShape() &&
        detail::tensorBytes(t) == detail::tensorBytes(r))
      out.push_back(i);
  }
  return out;
}

/// The cost model's FLOPs and bytes of `op` and the phase of the step it
/// belongs to, on the kernel that runs it.
void annotate(dsrt::KernelOp kernel, Operation *op, dsrt::KernelPhase phase) {
  Builder b(kernel.getContext());
  int64_t flops = 0, bytes = 0;
  if (auto cost = dyn_cast<CostOpInterface>(op)) {
    flops = cost.getFlops();
    bytes = cost.getBytesRead() + cost.getBytesWritten();
  }
  kernel->setAttr(dsrt::attrs::kFlops, b.getI64IntegerAttr(flops));
  kernel->setAttr(dsrt::attrs::kBytes, b.getI64IntegerAttr(bytes));
  kernel->setAttr(dsrt::attrs::kPhase,
                  b.getStringAttr(dsrt::stringifyKernelPhase(phase)));
}

} // namespace

FailureOr<KernelCall> prepareKernelCall(Operation *op, LoweringState &state,
                                        bool hostResults) {
  OpBuilder &b = state.builder;
  KernelCall call;
  call.kernel = op->getName().stripDialect();
  call.params = NamedAttrList(op->getAttrDictionary());
  call.params.erase("ds.recompute"); // a compiler mark, not a kernel parameter
  call.params.erase("ds.needs_grad");
  call.params.erase(attrs::kUpdateOperand); // a phase mark (Phase.cpp)
  // ODS's operand segments (ds.adam's optional operands): the kernel
  // counts its inputs.
  call.params.erase("operandSegmentSizes");
  // BatchNormalization's marks (lib/Import/BatchNormHandlers.cpp).
  for (StringRef mark : {"ds.f32_island", "ds.batch_stat", "ds.batch_count"})
    call.params.erase(mark);
  // Offload: a host op's results live in the host arena.
  call.onHost = call.params.erase("ds.on_host") != nullptr;
  hostResults |= call.onHost;
  for (auto [index, v] : llvm::enumerate(op->getOperands())) {
    if (Value source = state.transposedFrom.lookup(v)) {
      // A swap of the last two dimensions is trans_a/trans_b; any other
      // folded permutation (Values.cpp) travels whole.
      ArrayRef<int64_t> perm = v.getDefiningOp<TransposeOp>().getPerm();
      int64_t r = perm.size();
      bool swap = perm[r - 1] == r - 2 && perm[r - 2] == r - 1;
      for (int64_t i = 0; swap && i + 2 < r; ++i)
        swap = perm[i] == i;
      call.ins.push_back(source);
      StringRef attention = attentionStridedOperand(op, index);
      if (!attention.empty())
        call.params.set(attention, b.getDenseI64ArrayAttr(perm));
      else if (swap)
        call.params.set(index == 0 ? "trans_a" : "trans_b", b.getBoolAttr(true));
      else
        call.params.set(index == 0 ? "perm_a" : "perm_b",
                        b.getDenseI64ArrayAttr(perm));
      continue;
    }
    Value m = state.map.lookupOrNull(v);
    if (!m)
      return op->emitOpError("operand was not lowered");
    call.ins.push_back(m);
  }
  for (Value r : op->getResults()) {
    auto alloc = dsrt::AllocOp::create(b, op->getLoc(), bufferType(r.getType()),
                                       IntegerAttr());
    if (hostResults)
      alloc->setAttr("dsrt.host", b.getUnitAttr());
    state.map.map(r, alloc);
    call.outs.push_back(alloc);
  }
  return call;
}

dsrt::KernelOp emitKernelCall(Operation *op, const KernelCall &call,
                              LoweringState &state) {
  OpBuilder &b = state.builder;
  SmallVector<int64_t> inplace = inplaceOperands(op);
  auto kernel = dsrt::KernelOp::create(
      b, op->getLoc(), b.getStringAttr(call.kernel), call.ins, call.outs,
      call.params.getDictionary(b.getContext()),
      inplace.empty() ? DenseI64ArrayAttr() : b.getDenseI64ArrayAttr(inplace));
  if (call.onHost)
    kernel->setAttr("dsrt.host", b.getUnitAttr());
  annotate(kernel, op, state.phases.phaseOf(op));
  state.toErase.push_back(op);
  return kernel;
}

LogicalResult lowerToKernel(Operation *op, LoweringState &state,
                            bool hostResults) {
  FailureOr<KernelCall> call = prepareKernelCall(op, state, hostResults);
  if (failed(call))
    return failure();
  emitKernelCall(op, *call, state);
  return success();
}

} // namespace mlir::ds::lowering
