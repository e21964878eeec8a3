//===- OffloadActivations.cpp - saved activations off the device ----------===//
//
// Part of the ds project.
//
// The tensors the forward pass makes and the backward pass reads wait for
// the backward pass in host memory: a `ds.transfer` to the host after
// their last forward reader, one back to the device just ahead of their
// first backward reader. DeepSpeed's activation_checkpointing
// .cpu_checkpointing does the same for the checkpointed layer inputs.
// docs/offload.md, "Activations".
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/DenseSet.h"

namespace mlir::ds {
#define GEN_PASS_DEF_OFFLOADACTIVATIONSPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

/// Bytes of a static tensor value; 0 for anything else.
int64_t staticBytes(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() ? detail::tensorBytes(t) : 0;
}

/// Whether argument `arg` is data (a graph input), not a parameter, buffer,
/// optimizer state or one of the step's scalars.
bool isData(func::FuncOp func, BlockArgument arg) {
  unsigned i = arg.getArgNumber();
  return !func.getArgAttr(i, attrs::kParam) &&
         !func.getArgAttr(i, "ds.state") &&
         !func.getArgAttr(i, "ds.loss_scale") && !func.getArgAttr(i, "ds.step");
}

/// The op that makes the loss: the forward pass is the block up to it.
/// The loss the step reports may be averaged over the ranks at the end of
/// the step (data parallelism): the forward pass ends at the loss itself.
Operation *lossOp(func::FuncOp func) {
  Operation *ret = func.getBody().front().getTerminator();
  for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
    if (!func.getResultAttr(i, attrs::kLoss))
      continue;
    Operation *def = ret->getOperand(i).getDefiningOp();
    while (def && isa<CollectiveOpInterface>(def) && def->getNumOperands() == 1)
      def = def->getOperand(0).getDefiningOp();
    return def;
  }
  return nullptr;
}

/// One saved activation: the value, where its host copy is made and its
/// first backward reader.
struct Saved {
  Value value;
  Operation *lastForward;
  Operation *firstBackward;
};

/// The activations to offload, in forward order.
SmallVector<Saved> findSaved(func::FuncOp func, Operation *loss,
                             int64_t minBytes) {
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  llvm::DenseSet<Operation *> forward;
  llvm::DenseSet<Value> fromData; // computed from the data
  SmallVector<Saved> saved;
  for (Operation &op : body) {
    forward.insert(&op);
    bool data = llvm::any_of(op.getOperands(), [&](Value v) {
      if (auto arg = dyn_cast<BlockArgument>(v))
        return isData(func, arg);
      return fromData.contains(v);
    });
    if (data)
      fromData.insert(op.getResults().begin(), op.getResults().end());
    if (&op == loss)
      break;
  }
  for (Operation &op : body) {
    if (!forward.contains(&op))
      break;
    // Host values and copies are offload's already.
    if (isa<TransferOp>(op) || op.hasAttr("ds.on_host"))
      continue;
    for (Value r : op.getResults()) {
      if (!fromData.contains(r) || staticBytes(r) < minBytes)
        continue;
      Saved s{r, &op, nullptr};
      bool pinned = false;
      for (Operation *user : r.getUsers()) {
        if (user == ret || user->getBlock() != &body)
          pinned = true; // a result, or read inside a region: stays
        else if (forward.contains(user))
          s.lastForward =
              s.lastForward->isBeforeInBlock(user) ? user : s.lastForward;
        else if (!s.firstBackward || user->isBeforeInBlock(s.firstBackward))
          s.firstBackward = user;
      }
      if (!pinned && s.firstBackward)
        saved.push_back(s);
    }
  }
  return saved;
}

/// Copies each saved activation to the host after its last forward reader
/// and back one fetching reader ahead of its first backward reader (the
/// copy runs while that reader computes); the backward pass reads the
/// device copy.
void offload(ArrayRef<Saved> saved) {
  if (saved.empty())
    return;
  OpBuilder b(saved.front().value.getContext());
  SmallVector<Operation *> readers;
  for (const Saved &s : saved)
    readers.push_back(s.firstBackward);
  llvm::sort(readers,
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  readers.erase(llvm::unique(readers), readers.end());
  for (const Saved &s : saved) {
    Value v = s.value;
    b.setInsertionPointAfter(s.lastForward);
    Value host = TransferOp::create(b, v.getLoc(), v.getType(), v,
                                    b.getStringAttr("host"));
    auto at = llvm::lower_bound(
        readers, s.firstBackward,
        [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
    b.setInsertionPoint(at == readers.begin() ? *at : *std::prev(at));
    Value device = TransferOp::create(b, v.getLoc(), v.getType(), host,
                                      b.getStringAttr("device"));
    Operation *toHost = host.getDefiningOp();
    v.replaceUsesWithIf(device, [&](OpOperand &use) {
      Operation *owner = use.getOwner();
      return owner != toHost && s.lastForward->isBeforeInBlock(owner);
    });
  }
}

struct OffloadActivationsPass
    : impl::OffloadActivationsPassBase<OffloadActivationsPass> {
  using OffloadActivationsPassBase::OffloadActivationsPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    if (to != "none" && to != "host") {
      func.emitError("offload activations to '")
          << to << "': choose none or host (cpu)";
      return signalPassFailure();
    }
    if (to == "none")
      return;
    if (func->hasAttr("ds.pipeline")) {
      func.emitError("activation offload is not supported with pipeline "
                     "parallelism yet");
      return signalPassFailure();
    }
    Operation *loss = lossOp(func);
    Block &body = func.getBody().front();
    if (!loss || loss->getBlock() != &body ||
        loss->getNextNode() == body.getTerminator()) {
      func.emitError("activation offload needs a training step (a loss and "
                     "its backward pass)");
      return signalPassFailure();
    }
    SmallVector<Saved> saved = findSaved(func, loss, minBytes);
    int64_t bytes = 0;
    for (const Saved &s : saved)
      bytes += staticBytes(s.value);
    offload(saved);
    OpBuilder b(func.getContext());
    func->setAttr(
        "ds.offload_activations",
        b.getDictionaryAttr(
            {b.getNamedAttr("tensors",
                            b.getI64IntegerAttr(int64_t(saved.size()))),
             b.getNamedAttr("bytes", b.getI64IntegerAttr(bytes)),
             b.getNamedAttr("min_bytes", b.getI64IntegerAttr(minBytes))}));
  }
};
} // namespace
} // namespace mlir::ds
