//===- Zero.cpp - data parallelism and ZeRO stages 0-3 --------------------===//
//
// Part of the ds project.
//
// Runs after autodiff and before the optimizer pass. Stage 0 averages every
// gradient with an all-reduce. Stages 1-3 reduce-scatter each gradient
// (flattened, padded to N shards), so that the optimizer pass updates only
// this rank's shard; stage 1 does it after the whole backward pass (full
// gradients stay until then), stages 2 and 3 right after each gradient is
// produced (the full gradient dies there). Stage 3 also turns every
// trainable parameter argument into its shard and all-gathers it before
// its uses: once for the forward pass and again for the backward pass, so
// that the whole parameter lives only around its uses. Values computed from
// parameters alone (a transposed weight) that the backward pass reads are
// recomputed there from the second gather instead of being kept alive.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"
#include "ds/Transforms/Sharding.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::ds {
#define GEN_PASS_DEF_ZEROPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

struct ZeroPass : impl::ZeroPassBase<ZeroPass> {
  using ZeroPassBase::ZeroPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    if (worldSize < 1) {
      func.emitError("world size must be at least 1, got ")
          << static_cast<int64_t>(worldSize);
      return signalPassFailure();
    }
    if (stage < 0 || stage > 3) {
      func.emitError("ZeRO stage must be 0, 1, 2 or 3, got ")
          << static_cast<int64_t>(stage);
      return signalPassFailure();
    }
    if (persistenceThreshold < 0) {
      func.emitError("param-persistence-threshold must not be negative");
      return signalPassFailure();
    }
    OpBuilder b(func.getContext());
    func->setAttr(kWorldSizeAttr, b.getI64IntegerAttr(worldSize));
    func->setAttr(kZeroStageAttr, b.getI64IntegerAttr(stage));
    if (worldSize == 1 && stage == 0)
      return;
    Block &body = func.getBody().front();
    Operation *ret = body.getTerminator();

    // The forward pass ends at the op that computes the loss.
    Operation *lossDef = nullptr;
    bool anyGrad = false;
    for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
      if (func.getResultAttr(i, attrs::kLoss))
        lossDef = ret->getOperand(i).getDefiningOp();
      anyGrad |= func.getResultAttr(i, "ds.grad") != nullptr;
    }
    if (!anyGrad) {
      func.emitError("data parallelism needs gradients: run --ds-autodiff "
                     "first");
      return signalPassFailure();
    }
    auto inForward = [&](Operation *op) {
      return lossDef && (op == lossDef || op->isBeforeInBlock(lossDef));
    };

    if (stage == 3 && failed(partitionParameters(func, inForward)))
      return signalPassFailure();

    for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
      Value v = ret->getOperand(i);
      bool isLoss = func.getResultAttr(i, attrs::kLoss) != nullptr;
      bool isGrad = func.getResultAttr(i, "ds.grad") != nullptr;
      if (!isLoss && !isGrad)
        continue;
      if (isLoss || stage == 0) {
        b.setInsertionPoint(ret);
        ret->setOperand(i, AllReduceOp::create(b, v.getLoc(), v,
                                               b.getStringAttr("mean"),
                                               b.getI64IntegerAttr(0)));
        continue;
      }
      // Stage 1: after the backward pass; 2 and 3: as soon as it exists.
      Operation *def = v.getDefiningOp();
      if (stage == 1 || !def)
        b.setInsertionPoint(ret);
      else
        b.setInsertionPointAfter(def);
      auto type = cast<RankedTensorType>(v.getType());
      Value flat = flattenPadded(b, v.getLoc(), v, worldSize);
      ret->setOperand(i, ReduceScatterOp::create(
                             b, v.getLoc(), shardType(type, worldSize), flat,
                             b.getStringAttr("mean"), b.getI64IntegerAttr(0)));
    }
    func.setType(FunctionType::get(func.getContext(),
                                   body.getArgumentTypes(),
                                   ret->getOperandTypes()));
  }

  /// Stage 3: trainable parameters at or above the persistence threshold
  /// become shards, gathered just before their uses in each pass.
  LogicalResult
  partitionParameters(func::FuncOp func,
                      llvm::function_ref<bool(Operation *)> inForward) {
    Block &body = func.getBody().front();
    OpBuilder b(func.getContext());
    SmallVector<Type> argTypes(body.getArgumentTypes());
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      if (!func.getArgAttr(i, attrs::kParam) ||
          !func.getArgAttr(i, attrs::kTrainable))
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getNumElements() < persistenceThreshold)
        continue; // small: kept whole on every rank, like DeepSpeed
      if (!isa<FloatType>(type.getElementType()))
        return func.emitError("trainable parameter '")
               << func.getArgAttr(i, attrs::kParam) << "' is not a float";
      recomputeInBackward(arg, inForward);
      // One gather per pass, before its first use there.
      Operation *firstFwd = nullptr, *firstBwd = nullptr;
      for (Operation *user : arg.getUsers()) {
        Operation *&first = inForward(user) ? firstFwd : firstBwd;
        if (!first || user->isBeforeInBlock(first))
          first = user;
      }
      auto shard = shardType(type, worldSize);
      arg.setType(shard);
      argTypes[i] = shard;
      func.setArgAttr(i, kFullShapeAttr,
                      b.getDenseI64ArrayAttr(type.getShape()));
      for (Operation *first : {firstFwd, firstBwd}) {
        if (!first)
          continue;
        bool fwd = inForward(first);
        b.setInsertionPoint(first);
        auto whole = RankedTensorType::get(
            {shard.getDimSize(0) * worldSize}, type.getElementType());
        Value gathered =
            AllGatherOp::create(b, arg.getLoc(), whole, arg,
                                b.getI64IntegerAttr(0));
        Value full = unpadReshape(b, arg.getLoc(), gathered, type);
        arg.replaceUsesWithIf(full, [&](OpOperand &use) {
          Operation *owner = use.getOwner();
          return owner != gathered.getDefiningOp() &&
                 inForward(owner) == fwd;
        });
      }
    }
    func.setType(FunctionType::get(func.getContext(), argTypes,
                                   func.getResultTypes()));
    return success();
  }

  /// Ops of the forward pass that depend on `param` alone (and constants)
  /// and whose results the backward pass reads are cloned into the backward
  /// pass, so the forward gather can be released after the forward uses.
  void recomputeInBackward(BlockArgument param,
                           llvm::function_ref<bool(Operation *)> inForward) {
    llvm::DenseMap<Operation *, bool> paramOnly;
    std::function<bool(Operation *)> fromParam = [&](Operation *op) {
      auto it = paramOnly.find(op);
      if (it != paramOnly.end())
        return it->second;
      bool ok = isPure(op) && op->getNumRegions() == 0 &&
                !op->hasTrait<OpTrait::ConstantLike>();
      bool usesParam = false;
      for (Value v : op->getOperands()) {
        if (!ok)
          break;
        if (v == param) {
          usesParam = true;
          continue;
        }
        Operation *def = v.getDefiningOp();
        if (def && def->hasTrait<OpTrait::ConstantLike>())
          continue;
        ok = def && fromParam(def);
        usesParam |= ok;
      }
      return paramOnly[op] = ok && usesParam;
    };
    llvm::DenseMap<Value, Value> clones;
    std::function<Value(Value, Operation *)> cloneBefore =
        [&](Value v, Operation *at) -> Value {
      Operation *def = v.getDefiningOp();
      if (!def || def->hasTrait<OpTrait::ConstantLike>())
        return v;
      if (Value c = clones.lookup(v))
        return c;
      IRMapping map;
      for (Value operand : def->getOperands())
        map.map(operand, cloneBefore(operand, at));
      OpBuilder b(at);
      Operation *copy = b.clone(*def, map);
      for (auto [orig, cloned] :
           llvm::zip(def->getResults(), copy->getResults()))
        clones[orig] = cloned;
      return clones.lookup(v);
    };
    // Backward users of forward values derived from the parameter alone.
    SmallVector<std::pair<OpOperand *, Operation *>> rewrites;
    for (Operation &opRef : *param.getOwner()) {
      Operation *op = &opRef;
      if (inForward(op))
        continue;
      for (OpOperand &use : op->getOpOperands()) {
        Operation *def = use.get().getDefiningOp();
        if (def && inForward(def) && fromParam(def))
          rewrites.push_back({&use, op});
      }
    }
    for (auto [use, user] : rewrites)
      use->set(cloneBefore(use->get(), user));
  }
};
} // namespace
} // namespace mlir::ds
