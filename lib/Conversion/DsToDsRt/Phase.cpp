//===- Phase.cpp - which part of the step each op of @forward is ----------===//
//
// Part of the ds project.
//
// Collectives and offload transfers have phases of their own. The
// optimizer appends its steps after the gradients, so the optimizer phase
// is the first step (`DsOptimizerStep`) and what follows it, and the ops
// that make an update's operand moved before it (`ds.update_operand`, by
// --ds-fuse-optimizer). Of the rest,
// the forward is what the loss is computed from (later passes move ops,
// and reduce or scale the loss after the backward, but never feed the
// backward into it), or, in a pipeline stage, what precedes its
// `ds.pipe_mark`; recompute's copies of forward ops (`ds.recompute`) stay
// forward; everything else is backward.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace mlir::ds::lowering {

PhaseMap::PhaseMap(func::FuncOp func) {
  Block &body = func.getBody().front();
  unsigned end = 0;
  for (Operation &op : body)
    position[&op] = end++;
  optimizerStart = end;
  for (Operation &op : body)
    if (op.hasTrait<DsOptimizerStep>()) {
      optimizerStart = position[&op];
      break;
    }
  // A pipeline stage: its forward section.
  if (auto mark = llvm::find_if(body, llvm::IsaPred<PipeMarkOp>);
      mark != body.end()) {
    for (Operation &op : llvm::make_range(body.begin(), mark))
      forward.insert(&op);
    return;
  }
  // Without a loss there is no backward.
  Operation *ret = body.getTerminator();
  std::optional<unsigned> loss;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, attrs::kLoss))
      loss = i;
  if (!loss) {
    for (Operation &op : body)
      forward.insert(&op);
    return;
  }
  // The ops the loss is computed from.
  SmallVector<Value> worklist = {ret->getOperand(*loss)};
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (def && forward.insert(def).second)
      llvm::append_range(worklist, def->getOperands());
  }
}

dsrt::KernelPhase PhaseMap::phaseOf(Operation *op) const {
  if (isa<CollectiveOpInterface>(op))
    return dsrt::KernelPhase::Communication;
  if (isa<TransferOp>(op))
    return dsrt::KernelPhase::Transfer;
  if (op->hasTrait<DsOptimizerStep>() || op->hasAttr(attrs::kUpdateOperand) ||
      position.lookup(op) >= optimizerStart)
    return dsrt::KernelPhase::Optimizer;
  if (op->hasAttr("ds.recompute") || forward.contains(op))
    return dsrt::KernelPhase::Forward;
  return dsrt::KernelPhase::Backward;
}

} // namespace mlir::ds::lowering
