//===- Signature.cpp - @forward's arguments and results as dsrt -----------===//
//
// Part of the ds project.
//
// Arguments become `dsrt.param` storage (parameters and optimizer state,
// by name) or `dsrt.input` buffers; results become `dsrt.output`s, except
// an update (`ds.update`), which the kernel that computes it writes into
// the storage it updates.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

namespace mlir::ds::lowering {
namespace {

/// Parameter or optimizer-state storage for argument `i` (parameter
/// `param` or state `stateName`), registered by name for the updates.
Value lowerStorage(unsigned i, StringAttr param, StringAttr stateName,
                   int64_t index, LoweringState &state) {
  func::FuncOp func = state.func;
  OpBuilder &b = state.builder;
  StringAttr name = param ? param : stateName;
  auto op = dsrt::ParamOp::create(
      b, func.getLoc(), bufferType(func.getArgumentTypes()[i]),
      b.getI64IntegerAttr(index), name,
      func.getArgAttr(i, attrs::kTrainable) ? b.getUnitAttr() : nullptr,
      stateName ? b.getUnitAttr() : nullptr,
      func.getArgAttrOfType<DenseI64ArrayAttr>(i, "ds.full_shape"),
      func.getArgAttrOfType<StringAttr>(i, "ds.master_of"));
  if (func.getArgAttr(i, "ds.frozen"))
    op->setAttr("dsrt.frozen", b.getUnitAttr());
  if (auto space = func.getArgAttrOfType<StringAttr>(i, "ds.space"))
    op->setAttr("dsrt.space", space);
  if (auto tp = func.getArgAttrOfType<DenseI64ArrayAttr>(i, "ds.tp_split"))
    op->setAttr("dsrt.tp_split", tp);
  state.storage[name.getValue()] = op;
  return op;
}

/// Writes the update `v` of `target` into its storage in place: the buffer
/// the optimizer kernel writes is replaced by the storage (through a view
/// when the update is a view of it, a parameter rebuilt from ZeRO shards).
LogicalResult lowerUpdate(Location loc, Value v, StringAttr target,
                          LoweringState &state) {
  func::FuncOp func = state.func;
  Value into = state.storage.lookup(target.getValue());
  Value written = state.map.lookup(v);
  while (auto view = written.getDefiningOp<dsrt::ViewOp>())
    written = view.getSource();
  auto alloc = written.getDefiningOp<dsrt::AllocOp>();
  if (into && alloc && alloc.getType() != into.getType()) {
    OpBuilder vb(into.getContext());
    vb.setInsertionPointAfterValue(into);
    into = dsrt::ViewOp::create(vb, loc, alloc.getType(), into);
  }
  if (!into || !alloc)
    return func.emitError("update of '")
           << target.getValue()
           << "' is not an optimizer result for a parameter";
  // The update writes the storage in place: nothing after the writing
  // kernel may read the old value.
  Operation *writer = nullptr;
  for (Operation *user : alloc->getUsers())
    if (auto k = dyn_cast<dsrt::KernelOp>(user);
        k && llvm::is_contained(k.getOuts(), alloc.getResult()))
      writer = user;
  Value stored = state.storage.lookup(target.getValue());
  SmallVector<Operation *> readers(stored.getUsers());
  if (into != stored)
    llvm::append_range(readers, into.getUsers());
  if (writer)
    for (Operation *user : readers)
      if (user->getBlock() == writer->getBlock() &&
          writer->isBeforeInBlock(user))
        return user->emitOpError("reads '")
               << target.getValue()
               << "' after its update; ds cannot update it in place";
  alloc.getResult().replaceAllUsesWith(into);
  alloc.erase();
  return success();
}

} // namespace

void lowerArguments(LoweringState &state) {
  func::FuncOp func = state.func;
  OpBuilder &b = state.builder;
  int64_t inputIndex = 0, paramIndex = 0;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    Value buffer;
    auto param = func.getArgAttrOfType<StringAttr>(i, attrs::kParam);
    auto stateName = func.getArgAttrOfType<StringAttr>(i, "ds.state");
    if (param || stateName) {
      buffer = lowerStorage(i, param, stateName, paramIndex++, state);
    } else {
      auto inName = func.getArgAttrOfType<StringAttr>(i, attrs::kInput);
      if (func.getArgAttr(i, "ds.step"))
        inName = b.getStringAttr("ds.step");
      buffer = dsrt::InputOp::create(
          b, func.getLoc(), bufferType(arg.getType()),
          b.getI64IntegerAttr(inputIndex++),
          inName ? inName : b.getStringAttr("arg" + std::to_string(i)));
      if (auto axis = func.getArgAttrOfType<IntegerAttr>(i, "ds.batch_axis"))
        buffer.getDefiningOp()->setAttr("dsrt.batch_axis", axis);
      // EmbeddingBag offsets (lib/Import/EmbeddingBagHandlers.cpp).
      for (StringRef mark : {"ds.bag_indices", "ds.bag_last_offset"})
        if (Attribute a = func.getArgAttr(i, mark))
          buffer.getDefiningOp()->setAttr(
              ("dsrt." + mark.drop_front(3)).str(), a);
    }
    state.map.map(arg, buffer);
  }
}

LogicalResult lowerReturn(func::ReturnOp ret, LoweringState &state) {
  func::FuncOp func = state.func;
  OpBuilder &b = state.builder;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    if (auto target = func.getResultAttrOfType<StringAttr>(i, "ds.update")) {
      if (failed(lowerUpdate(ret.getLoc(), v, target, state)))
        return failure();
      continue;
    }
    auto name = func.getResultAttrOfType<StringAttr>(i, attrs::kOutput);
    dsrt::OutputOp::create(
        b, ret.getLoc(), state.map.lookup(v), b.getI64IntegerAttr(i),
        name ? name : b.getStringAttr("result" + std::to_string(i)));
    if (func.getResultAttr(i, attrs::kLoss) && name)
      func->setAttr("dsrt.loss", name);
  }
  return success();
}

} // namespace mlir::ds::lowering
