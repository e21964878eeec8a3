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

struct OffloadPass : impl::OffloadPassBase<OffloadPass> {
  using OffloadPassBase::OffloadPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    for (StringRef o : {StringRef(optimizer), StringRef(param)})
      if (o != "none" && o != "host" && o != "nvme") {
        func.emitError("offload to '")
            << o << "': choose none, host (cpu) or nvme";
        return signalPassFailure();
      }
    if (optimizer == "none" && param == "none")
      return;
    if (!func->hasAttr("ds.optimizer")) {
      func.emitError("offload needs a training step (an --optimizer): the "
                     "plan has no optimizer state or parameter update");
      return signalPassFailure();
    }
    auto stage = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
    if (param != "none" && (!stage || stage.getInt() != 3)) {
      func.emitError("--offload-param needs --zero=3 (it offloads the "
                     "ZeRO-3 parameter shards), got --zero=")
          << (stage ? stage.getInt() : 0);
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    OpBuilder b(func.getContext());

    // Where each stored tensor lives.
    llvm::DenseMap<Value, StringRef> stored; // host or nvme arguments
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      StringRef where;
      if (func.getArgAttr(i, "ds.state") && optimizer != "none")
        where = optimizer;
      else if (func.getArgAttr(i, "ds.step") && optimizer != "none")
        where = "host";
      else if (param != "none" && func.getArgAttr(i, attrs::kParam) &&
               func.getArgAttr(i, attrs::kTrainable) &&
               func.getArgAttr(i, kFullShapeAttr))
        where = param;
      if (where.empty())
        continue;
      func.setArgAttr(i, kSpace, b.getStringAttr(where));
      stored[arg] = where;
    }

    // Values resident in host memory.
    llvm::DenseSet<Value> onHost;
    for (auto &[v, where] : stored)
      if (where == "host")
        onHost.insert(v);

    // NVMe reads: each reader of an NVMe tensor reads a host copy, fetched
    // one NVMe reader ahead (while the previous one computes).
    SmallVector<Operation *> nvmeReaders;
    for (Operation &op : body) {
      if (isa<func::ReturnOp>(op))
        continue;
      if (llvm::any_of(op.getOperands(), [&](Value v) {
            auto it = stored.find(v);
            return it != stored.end() && it->second == "nvme";
          }))
        nvmeReaders.push_back(&op);
    }
    for (size_t k = 0; k < nvmeReaders.size(); ++k) {
      Operation *reader = nvmeReaders[k];
      b.setInsertionPoint(k == 0 ? reader : nvmeReaders[k - 1]);
      for (OpOperand &use : reader->getOpOperands()) {
        auto it = stored.find(use.get());
        if (it == stored.end() || it->second != "nvme")
          continue;
        auto t = TransferOp::create(b, reader->getLoc(), use.get().getType(),
                                    use.get(), b.getStringAttr("host"));
        onHost.insert(t.getResult());
        use.set(t.getResult());
      }
    }

    // Placement: optimizer ops reading host state, then every op whose
    // tensors are all on the host.
    llvm::SetVector<Operation *> hostOps;
    auto place = [&](Operation *op) {
      hostOps.insert(op);
      for (Value r : op->getResults())
        onHost.insert(r);
    };
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
      if (isa<AdamOp, SgdOp>(op) || allHost)
        place(&op);
    }
    // A cast, or a scale by a scalar, whose only users run on the host
    // moves there: the tensor crosses before it, in its own type.
    for (bool changed = true; changed;) {
      changed = false;
      for (Operation &op : llvm::reverse(body)) {
        if (hostOps.contains(&op) || op.use_empty())
          continue;
        bool movable = isa<CastOp>(op) ||
                       (isa<MulOp, DivOp>(op) &&
                        llvm::any_of(op.getOperands(), isScalar));
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

    // Crossings. To the host: once per value, right after it is made.
    llvm::DenseMap<Value, Value> hostCopy;
    auto toHost = [&](Value v) -> Value {
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
    };
    for (Operation *op : hostOps)
      for (OpOperand &use : op->getOpOperands())
        if (!onHost.contains(use.get()))
          use.set(toHost(use.get()));
    // To the device: for each device op that reads a host value, one such
    // reader ahead (a parameter shard crosses while the previous layer
    // computes), or right after the value is made if that is later.
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
    // Results: an update goes to its storage's space, as soon as it is
    // made; any other result is read on the device side.
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
    func->setAttr("ds.offload",
                  b.getDictionaryAttr(
                      {b.getNamedAttr("optimizer", b.getStringAttr(optimizer)),
                       b.getNamedAttr("param", b.getStringAttr(param))}));
  }
};
} // namespace
} // namespace mlir::ds
