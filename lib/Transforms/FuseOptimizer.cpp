//===- FuseOptimizer.cpp - per-parameter updates as one multi-tensor op --===//
//
// Part of the ds project.
//
// Issue 24 item 3 (see the pass description in Passes.td): the `ds.adam`
// (`ds.sgd`) ops of one step with identical attributes and step counter
// become one `ds.multi_adam` (`ds.multi_sgd`), one kernel call over all
// their tensors. The fused op runs at the place of the group's first op,
// so every operand of a member must already exist there; the new values
// are the same results, written into the same storage.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "ds/Dialect/Ds/IR/DsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::ds {
#define GEN_PASS_DEF_FUSEOPTIMIZERPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

bool isF32(Value v) {
  return cast<ShapedType>(v.getType()).getElementType().isF32();
}

/// The in-place operands of an update (parameter and states): what its
/// results overwrite. Null when the op is not one the pass fuses.
std::optional<SmallVector<Value>> fusableTargets(Operation *op) {
  if (op->hasAttr("ds.on_host")) // offload: a host kernel of its own
    return std::nullopt;
  if (auto adam = dyn_cast<AdamOp>(op)) {
    if (adam.getLamb() || adam.getNormOverRanks() || adam.getGradAccum() ||
        adam.getClipCoef() || !isF32(adam.getParam()))
      return std::nullopt;
    return SmallVector<Value>{adam.getParam(), adam.getExpAvg(),
                              adam.getExpAvgSq()};
  }
  if (auto sgd = dyn_cast<SgdOp>(op)) {
    if (sgd.getGradAccum() || sgd.getClipCoef() || !isF32(sgd.getParam()))
      return std::nullopt;
    if (sgd.getMomentum().convertToDouble() == 0.0) {
      // No momentum: the buffer operand is the gradient, its result unused.
      if (!sgd.getNewMomentumBuffer().use_empty())
        return std::nullopt;
      return SmallVector<Value>{sgd.getParam()};
    }
    return SmallVector<Value>{sgd.getParam(), sgd.getMomentumBuffer()};
  }
  return std::nullopt;
}

/// Ops that may share one multi-tensor op: the same kind, attributes and
/// step counter.
struct GroupKey {
  OperationName name;
  DictionaryAttr attrs;
  Value step;
  bool operator==(const GroupKey &o) const {
    return name == o.name && attrs == o.attrs && step == o.step;
  }
};

struct Group {
  GroupKey key;
  SmallVector<Operation *> members;
};

/// True when `op` can run at `first`'s place instead of its own: its
/// operands exist there, and nothing in between reads what it overwrites.
bool canMoveTo(Operation *op, Operation *first, ArrayRef<Value> targets) {
  for (Value v : op->getOperands()) {
    Operation *def = v.getDefiningOp();
    if (def && (def->getBlock() != first->getBlock() ||
                !def->isBeforeInBlock(first)))
      return false;
    if (!def && cast<BlockArgument>(v).getOwner() != first->getBlock())
      return false;
  }
  for (Value t : targets)
    for (Operation *user : t.getUsers())
      if (user != op && user->getBlock() == first->getBlock() &&
          first->isBeforeInBlock(user) && user->isBeforeInBlock(op))
        return false;
  return true;
}

/// The multi-tensor op of `members` (all AdamOp or all SgdOp), at the
/// first member's place; the members' results are replaced by its.
void fuseGroup(ArrayRef<Operation *> members) {
  Operation *first = members.front();
  OpBuilder b(first);
  bool adam = isa<AdamOp>(first);
  bool momentum =
      !adam && cast<SgdOp>(first).getMomentum().convertToDouble() != 0.0;
  size_t states = adam ? 2 : momentum ? 1 : 0;
  size_t n = members.size();
  // Operand groups: params, grads, then each state; the step last.
  SmallVector<SmallVector<Value>> groups(2 + states);
  SmallVector<SmallVector<Type>> resultTypes(1 + states);
  for (Operation *op : members) {
    for (size_t g = 0; g < 2 + states; ++g)
      groups[g].push_back(op->getOperand(g));
    for (size_t r = 0; r < 1 + states; ++r)
      resultTypes[r].push_back(op->getResult(r).getType());
  }
  SmallVector<Value> operands;
  SmallVector<int32_t> segments;
  for (auto &g : groups) {
    llvm::append_range(operands, g);
    segments.push_back(static_cast<int32_t>(n));
  }
  if (!adam && !momentum)
    segments.push_back(0); // no momentum buffers
  operands.push_back(adam ? cast<AdamOp>(first).getStep()
                          : cast<SgdOp>(first).getStep());
  segments.push_back(1);
  SmallVector<Type> types;
  for (auto &t : resultTypes)
    llvm::append_range(types, t);
  NamedAttrList attrs(first->getAttrDictionary());
  for (StringRef single : {"operandSegmentSizes", "lamb", "max_coeff",
                           "min_coeff", "norm_over_ranks"})
    attrs.erase(single);
  attrs.set("operandSegmentSizes", b.getDenseI32ArrayAttr(segments));
  Location loc = b.getFusedLoc(llvm::to_vector(
      llvm::map_range(members, [](Operation *op) { return op->getLoc(); })));
  Operation *fused =
      adam ? MultiAdamOp::create(b, loc, types, operands, attrs.getAttrs())
                 .getOperation()
           : MultiSgdOp::create(b, loc, types, operands, attrs.getAttrs())
                 .getOperation();
  for (auto [i, op] : llvm::enumerate(members)) {
    for (size_t r = 0; r < 1 + states; ++r)
      op->getResult(r).replaceAllUsesWith(fused->getResult(r * n + i));
    op->erase();
  }
}

struct FuseOptimizerPass : impl::FuseOptimizerPassBase<FuseOptimizerPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    SmallVector<Group> groups;
    for (Operation &op : func.getBody().front()) {
      std::optional<SmallVector<Value>> targets = fusableTargets(&op);
      if (!targets)
        continue;
      GroupKey key{op.getName(), op.getAttrDictionary(),
                   op.getOperand(op.getNumOperands() - 1)};
      Group *open = nullptr;
      for (Group &g : groups)
        if (g.key == key)
          open = &g;
      if (open && canMoveTo(&op, open->members.front(), *targets)) {
        open->members.push_back(&op);
        continue;
      }
      // A new group starts here (an earlier one of this key stays as it is).
      if (open)
        open->key.step = Value();
      groups.push_back({key, {&op}});
    }
    for (Group &g : groups)
      if (g.members.size() > 1)
        fuseGroup(g.members);
  }
};

} // namespace
} // namespace mlir::ds
