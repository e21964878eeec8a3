//===- FuseOptimizer.cpp - per-parameter updates as one multi-tensor op --===//
//
// Part of the ds project.
//
// Issue 24 item 3 (see the pass description in Passes.td): the `ds.adam`
// (`ds.sgd`) ops of one step with identical attributes and step counter
// become one `ds.multi_adam` (`ds.multi_sgd`), one kernel call over all
// their tensors. The fused op runs at the place of the group's first op,
// so every operand of a member must already exist there, or be made from
// values that do by layout ops alone (ZeRO 1-2's shard copy of the
// parameter), which then move there too; the new values are the same
// results, written into the same storage.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "ds/Dialect/Ds/IR/DsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

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
  int64_t hoistedBytes = 0; // the copies moved before its first member
};

/// True when `v` exists at `first`'s place.
bool availableAt(Value v, Operation *first) {
  if (Operation *def = v.getDefiningOp())
    return def->getBlock() == first->getBlock() && def->isBeforeInBlock(first);
  return cast<BlockArgument>(v).getOwner() == first->getBlock();
}

/// The layout ops that make an update's operand from a parameter under
/// ZeRO 1-2 (Sharding.cpp's flattenPadded and the shard of it): copies and
/// views of values that exist earlier, which may run earlier.
bool isOperandLayout(Operation *op) {
  return isa<ReshapeOp, ShardOp, ConcatOp, ConstantOp>(op);
}

/// Appends to `chain` (each op once, after the ops it reads) the layout ops
/// between `first` and `op` that make `v`, when moving them before `first`
/// makes `v` available there; false when it does not.
bool collectChain(Value v, Operation *first, SetVector<Operation *> &chain) {
  if (availableAt(v, first))
    return true;
  Operation *def = v.getDefiningOp();
  if (!def || def->getBlock() != first->getBlock() || !isOperandLayout(def))
    return false;
  if (chain.contains(def))
    return true;
  for (Value in : def->getOperands()) {
    if (!collectChain(in, first, chain))
      return false;
    // No update from `first` on (the fused op's members included) reads
    // what `def` reads, which it may overwrite in place: a view moved
    // before the fused kernel would see the write inside it.
    for (Operation *user : in.getUsers())
      if (user->hasTrait<DsOptimizerStep>() &&
          user->getBlock() == first->getBlock() &&
          (user == first || first->isBeforeInBlock(user)))
        return false;
  }
  chain.insert(def);
  return true;
}

/// True when `op` can run at `first`'s place instead of its own: its
/// operands exist there, or are made from values that do by layout ops
/// (`chain`, to move before `first`: ZeRO 1-2's shard copies), and nothing
/// in between reads what it overwrites.
bool canMoveTo(Operation *op, Operation *first, ArrayRef<Value> targets,
               bool hoist, SetVector<Operation *> &chain) {
  for (Value v : op->getOperands()) {
    if (availableAt(v, first))
      continue;
    if (!hoist || !collectChain(v, first, chain))
      return false;
  }
  for (Value t : targets)
    for (Operation *user : t.getUsers())
      if (user != op && !chain.contains(user) &&
          user->getBlock() == first->getBlock() &&
          first->isBeforeInBlock(user) && user->isBeforeInBlock(op))
        return false;
  return true;
}

/// The bytes the copies of `chain` write (its shards and concatenations;
/// reshapes are views, constants the plan's).
int64_t copiedBytes(const SetVector<Operation *> &chain) {
  int64_t bytes = 0;
  for (Operation *op : chain)
    if (isa<ShardOp, ConcatOp>(op))
      for (Value r : op->getResults()) {
        auto t = cast<ShapedType>(r.getType());
        bytes += t.getNumElements() *
                 static_cast<int64_t>(t.getElementTypeBitWidth() / 8);
      }
  return bytes;
}

/// Moves `chain` (each op after the ops it reads) before `first`. The
/// moved ops keep the optimizer phase they were in (`ds.update_operand`,
/// lowering's PhaseMap): they make the update's operands, not the
/// gradients.
void hoistBefore(const SetVector<Operation *> &chain, Operation *first) {
  if (!chain.empty())
    if (auto module = first->getParentOfType<ModuleOp>())
      module->setAttr(attrs::kMovedUpdateOperands,
                      UnitAttr::get(first->getContext()));
  for (Operation *op : chain) {
    op->moveBefore(first);
    op->setAttr(attrs::kUpdateOperand, UnitAttr::get(op->getContext()));
  }
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
  using FuseOptimizerPassBase::FuseOptimizerPassBase;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    SmallVector<Group> groups;
    // Early increments: a member's layout ops move up, behind the walk.
    for (Operation &op : llvm::make_early_inc_range(func.getBody().front())) {
      std::optional<SmallVector<Value>> targets = fusableTargets(&op);
      if (!targets)
        continue;
      GroupKey key{op.getName(), op.getAttrDictionary(),
                   op.getOperand(op.getNumOperands() - 1)};
      Group *open = nullptr;
      for (Group &g : groups)
        if (g.key == key)
          open = &g;
      SetVector<Operation *> chain;
      bool movable = open && canMoveTo(&op, open->members.front(), *targets,
                                       hoistOperands, chain);
      int64_t copied = movable ? copiedBytes(chain) : 0;
      if (movable &&
          (chain.empty() || open->hoistedBytes + copied <= hoistLimit)) {
        open->hoistedBytes += copied;
        hoistBefore(chain, open->members.front());
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
