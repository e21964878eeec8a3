//===- Offload.cpp - optimizer state and parameters off the device --------===//
//
// Part of the ds project.
//
// Places the optimizer state (and, at ZeRO-3, the parameter shards) in host
// memory or on NVMe, runs the ops that only touch host data on the host,
// and makes every crossing an explicit, scheduled `ds.transfer`. See
// docs/design.md, section 11.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"
#include "ds/Transforms/Sharding.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::ds {
#define GEN_PASS_DEF_OFFLOADPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kSpace = "ds.space";
constexpr llvm::StringLiteral kOnHost = "ds.on_host";

bool isCollective(Operation *op) {
  return isa<AllReduceOp, AllGatherOp, ReduceScatterOp, CheckOverflowOp>(op);
}

bool isScalar(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getNumElements() == 1;
}

/// An op that updates parameters and optimizer state: it runs where the
/// state lives.
bool isUpdateOp(Operation *op) { return isa<AdamOp, SgdOp>(op); }

/// The offload rewrite of @forward: where each stored tensor lives, which
/// ops run on the host, and a `ds.transfer` at every crossing.
class OffloadRewrite {
public:
  OffloadRewrite(func::FuncOp func, StringRef optimizer, StringRef param)
      : func(func), optimizer(optimizer), param(param),
        body(func.getBody().front()),
        ret(cast<func::ReturnOp>(body.getTerminator())), b(func.getContext()) {}

  void run() {
    assignSpaces();
    fetchFromNvme();
    placeOnHost();
    crossToHost();
    crossToDevice();
    storeResults();
  }

private:
  void assignSpaces();
  void fetchFromNvme();
  void place(Operation *op);
  void placeOnHost();
  Value toHost(Value v);
  void crossToHost();
  void crossToDevice();
  void storeResults();

  func::FuncOp func;
  StringRef optimizer, param; // where state and parameter shards go
  Block &body;
  func::ReturnOp ret;
  OpBuilder b;

  llvm::DenseMap<Value, StringRef> stored; // host or nvme arguments
  llvm::DenseSet<Value> onHost;            // values resident in host memory
  llvm::SetVector<Operation *> hostOps;    // ops that run on the host
  llvm::DenseMap<Value, Value> hostCopy;   // device value -> its host copy
};

/// Where each stored tensor lives: optimizer state (and the step counter,
/// on the host) with the optimizer, ZeRO-3 parameter shards with the
/// parameters.
void OffloadRewrite::assignSpaces() {
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    StringRef where;
    if (func.getArgAttr(i, "ds.state") && optimizer != "none")
      where = optimizer;
    else if (func.getArgAttr(i, "ds.step") && optimizer != "none")
      where = "host";
    else if (param != "none" && func.getArgAttr(i, attrs::kParam) &&
             func.getArgAttr(i, kFullShapeAttr))
      where = param; // trainable, frozen or a read-only buffer's shard
    if (where.empty())
      continue;
    func.setArgAttr(i, kSpace, b.getStringAttr(where));
    stored[arg] = where;
  }
  for (auto &[v, where] : stored)
    if (where == "host")
      onHost.insert(v);
}

/// NVMe reads: each reader of an NVMe tensor reads a host copy, fetched one
/// NVMe reader ahead (while the previous one computes).
void OffloadRewrite::fetchFromNvme() {
  auto onNvme = [&](Value v) {
    auto it = stored.find(v);
    return it != stored.end() && it->second == "nvme";
  };
  SmallVector<Operation *> nvmeReaders;
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op))
      continue;
    if (llvm::any_of(op.getOperands(), onNvme))
      nvmeReaders.push_back(&op);
  }
  for (size_t k = 0; k < nvmeReaders.size(); ++k) {
    Operation *reader = nvmeReaders[k];
    b.setInsertionPoint(k == 0 ? reader : nvmeReaders[k - 1]);
    for (OpOperand &use : reader->getOpOperands()) {
      if (!onNvme(use.get()))
        continue;
      auto t = TransferOp::create(b, reader->getLoc(), use.get().getType(),
                                  use.get(), b.getStringAttr("host"));
      onHost.insert(t.getResult());
      use.set(t.getResult());
    }
  }
}

void OffloadRewrite::place(Operation *op) {
  hostOps.insert(op);
  for (Value r : op->getResults())
    onHost.insert(r);
}

/// Placement: update ops reading host state, then every op whose tensors
/// are all on the host; then a cast, or a scale by a scalar, whose only
/// users run on the host moves there (the tensor crosses before it, in its
/// own type).
void OffloadRewrite::placeOnHost() {
  for (Operation &op : body) {
    if (isa<func::ReturnOp, TransferOp>(op) || isCollective(&op) ||
        op.getNumOperands() == 0)
      continue;
    bool anyHost = llvm::any_of(op.getOperands(),
                                [&](Value v) { return onHost.contains(v); });
    if (!anyHost)
      continue;
    bool allHost = llvm::all_of(op.getOperands(), [&](Value v) {
      return onHost.contains(v) || isScalar(v);
    });
    if (isUpdateOp(&op) || allHost)
      place(&op);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation &op : llvm::reverse(body)) {
      if (hostOps.contains(&op) || op.use_empty())
        continue;
      bool movable =
          isa<CastOp>(op) ||
          (isa<MulOp, DivOp>(op) && llvm::any_of(op.getOperands(), isScalar));
      if (!movable || !llvm::all_of(op.getUsers(), [&](Operation *u) {
            return hostOps.contains(u);
          }))
        continue;
      place(&op);
      changed = true;
    }
  }
  for (Operation *op : hostOps)
    op->setAttr(kOnHost, b.getUnitAttr());
}

/// The host copy of `v`: made once, right after `v` is.
Value OffloadRewrite::toHost(Value v) {
  if (Value c = hostCopy.lookup(v))
    return c;
  if (auto arg = dyn_cast<BlockArgument>(v))
    b.setInsertionPointToStart(&body);
  else
    b.setInsertionPointAfter(v.getDefiningOp());
  Value c = TransferOp::create(b, v.getLoc(), v.getType(), v,
                               b.getStringAttr("host"));
  hostCopy[v] = c;
  onHost.insert(c);
  return c;
}

/// Host ops read host copies of their device operands.
void OffloadRewrite::crossToHost() {
  for (Operation *op : hostOps)
    for (OpOperand &use : op->getOpOperands())
      if (!onHost.contains(use.get()))
        use.set(toHost(use.get()));
}

/// To the device: for each device op that reads a host value, one such
/// reader ahead (a parameter shard crosses while the previous layer
/// computes), or right after the value is made if that is later.
void OffloadRewrite::crossToDevice() {
  SmallVector<Operation *> readers;
  for (Operation &op : body)
    if (!hostOps.contains(&op) && !isa<TransferOp, func::ReturnOp>(op) &&
        llvm::any_of(op.getOperands(),
                     [&](Value v) { return onHost.contains(v); }))
      readers.push_back(&op);
  for (size_t k = 0; k < readers.size(); ++k) {
    Operation *op = readers[k];
    llvm::DenseMap<Value, Value> copies;
    for (OpOperand &use : op->getOpOperands()) {
      if (!onHost.contains(use.get()))
        continue;
      Value &c = copies[use.get()];
      if (!c) {
        Value v = use.get();
        Operation *at = k == 0 ? op : readers[k - 1];
        Operation *def = v.getDefiningOp();
        if (def && def->getBlock() == &body && !def->isBeforeInBlock(at))
          b.setInsertionPointAfter(def);
        else
          b.setInsertionPoint(at);
        c = TransferOp::create(b, op->getLoc(), v.getType(), v,
                               b.getStringAttr("device"));
      }
      use.set(c);
    }
  }
}

/// Results: an update goes to its storage's space, as soon as it is made;
/// any other result is read on the device side.
void OffloadRewrite::storeResults() {
  llvm::StringMap<StringRef> storedByName;
  for (auto &[v, where] : stored) {
    unsigned i = cast<BlockArgument>(v).getArgNumber();
    auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kParam);
    if (!name)
      name = func.getArgAttrOfType<StringAttr>(i, "ds.state");
    if (name)
      storedByName[name.getValue()] = where;
  }
  llvm::DenseSet<Value> hostUpdates;
  for (OpOperand &use : ret->getOpOperands()) {
    Value v = use.get();
    unsigned i = use.getOperandNumber();
    auto target = func.getResultAttrOfType<StringAttr>(i, "ds.update");
    StringRef want = "device";
    if (target)
      if (auto it = storedByName.find(target.getValue());
          it != storedByName.end())
        want = it->second;
    bool host = onHost.contains(v);
    if (want == "host" && host) {
      // One value updating two host tensors (an f32 master and the f32
      // shard it is, with both offloaded): the second gets its copy.
      if (!hostUpdates.insert(v).second) {
        b.setInsertionPointAfterValue(v);
        use.set(TransferOp::create(b, v.getLoc(), v.getType(), v,
                                   b.getStringAttr("host")));
      }
      continue;
    }
    if (want == "device" && !host)
      continue;
    if (want == "device") {
      if (auto arg = dyn_cast<BlockArgument>(v))
        b.setInsertionPoint(ret);
      else
        b.setInsertionPointAfter(v.getDefiningOp());
      use.set(TransferOp::create(b, v.getLoc(), v.getType(), v,
                                 b.getStringAttr("device")));
      continue;
    }
    Value h = host ? v : toHost(v);
    if (want == "nvme") {
      b.setInsertionPointAfter(h.getDefiningOp());
      h = TransferOp::create(b, v.getLoc(), v.getType(), h,
                             b.getStringAttr("nvme"));
    }
    use.set(h);
  }
}

struct OffloadPass : impl::OffloadPassBase<OffloadPass> {
  using OffloadPassBase::OffloadPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    if (failed(checkOptions(func)))
      return signalPassFailure();
    if (optimizer == "none" && param == "none")
      return;
    if (failed(checkFunction(func)))
      return signalPassFailure();
    OffloadRewrite(func, optimizer, param).run();
    OpBuilder b(func.getContext());
    func->setAttr("ds.offload",
                  b.getDictionaryAttr(
                      {b.getNamedAttr("optimizer", b.getStringAttr(optimizer)),
                       b.getNamedAttr("param", b.getStringAttr(param))}));
  }

  LogicalResult checkOptions(func::FuncOp func) {
    for (StringRef o : {StringRef(optimizer), StringRef(param)})
      if (o != "none" && o != "host" && o != "nvme")
        return func.emitError("offload to '")
               << o << "': choose none, host (cpu) or nvme";
    return success();
  }

  /// Offload needs what it moves: a training step, and for parameters the
  /// ZeRO-3 shards.
  LogicalResult checkFunction(func::FuncOp func) {
    if (!func->hasAttr("ds.optimizer"))
      return func.emitError(
          "offload needs a training step (an --optimizer): the plan has no "
          "optimizer state or parameter update");
    auto stage = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
    if (param != "none" && (!stage || stage.getInt() != 3))
      return func.emitError("--offload-param needs --zero=3 (it offloads the "
                            "ZeRO-3 parameter shards), got --zero=")
             << (stage ? stage.getInt() : 0);
    return success();
  }
};
} // namespace
} // namespace mlir::ds
