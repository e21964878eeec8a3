//===- Zero.cpp - data parallelism and ZeRO stages 0-3 --------------------===//
//
// Part of the ds project.
//
// Runs after autodiff and before the optimizer pass. Stage 0 averages every
// gradient with an all-reduce. Stages 1-3 reduce-scatter each gradient
// (flattened, padded to N shards), so that the optimizer pass updates only
// this rank's shard; stage 1 does it after the whole backward pass (full
// gradients stay until then), stages 2 and 3 right after each gradient is
// produced (the full gradient dies there); in a pipeline stage with
// several micro-batches, stages 0-1 (and 2-3 with sum-once, for the
// compressed optimizers' exchange) reduce the stage's local sum of them
// once per step, in its update section (GradAccumulate.h); stages 2-3
// otherwise reduce each micro-batch's gradients as they are produced.
// Stage 3 also turns every parameter argument (trainable, frozen, or a
// float buffer no result of the step writes) into its shard and
// all-gathers it before its uses: once for the forward pass and again for
// the backward pass where that reads it, so that the whole parameter
// lives only around its uses (a frozen one gets no gradient, so nothing is
// reduced for it). Values
// computed from parameters alone (a transposed weight) that the backward
// pass reads are recomputed there from the second gather instead of being
// kept alive. ZeRO++ (docs/zeropp.md): with quantize-weights the stage-3
// gathers are `ds.quantized_all_gather` (qwZ), with quantize-gradients the
// stage 1-3 reductions `ds.quantized_reduce_scatter` (qgZ); with
// hpz-partition-size H > 1 (hpZ) each forward gather leaves this rank's
// 1/H of every parameter (a `ds.sp_slice` over group 2, the H ranks of its
// node) and the backward gathers that within the node.
//
//===----------------------------------------------------------------------===//

#include "GradAccumulate.h"
#include "ds/Transforms/Passes.h"
#include "ds/Transforms/Sharding.h"
#include "ds/Dialect/Ds/IR/DsZeroPP.h"
#include "mlir/IR/IRMapping.h"

#include "llvm/ADT/StringSet.h"

namespace mlir::ds {
#define GEN_PASS_DEF_ZEROPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

/// The nearest op before `at` that is one of `OpTys`, or null.
template <typename... OpTys> Operation *lastOpBefore(Operation *at) {
  for (Operation *op = at->getPrevNode(); op; op = op->getPrevNode())
    if (isa<OpTys...>(op))
      return op;
  return nullptr;
}

/// Moves the ops strictly between `after` and `end` (a later op of the
/// same block) before `dest`, in order.
void moveOpsBetween(Operation *after, Operation *end, Operation *dest) {
  SmallVector<Operation *> ops;
  for (Operation *op = after->getNextNode(); op != end; op = op->getNextNode())
    ops.push_back(op);
  for (Operation *op : ops)
    op->moveBefore(dest);
}

/// A ZeRO-3 parameter: its argument (now the shard), its whole type, and
/// its first use in each pass; with hpZ, its secondary partition once the
/// forward gathered it.
struct ShardedParam {
  BlockArgument arg;
  RankedTensorType type; // whole
  Operation *firstFwd, *firstBwd;
  Value secondary = nullptr;
};

struct ZeroPass : impl::ZeroPassBase<ZeroPass> {
  using ZeroPassBase::ZeroPassBase;
  Type commType; // the element type gradients are reduced in
  /// A pipeline stage summing its gradients over the micro-batches: they
  /// are reduced once, in the update section (GradAccumulate.h).
  bool once = false;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    FailureOr<Type> comm = checkOptions(func);
    if (failed(comm))
      return signalPassFailure();
    commType = *comm;
    OpBuilder b(func.getContext());
    func->setAttr(kWorldSizeAttr, b.getI64IntegerAttr(worldSize));
    func->setAttr(kZeroStageAttr, b.getI64IntegerAttr(stage));
    if (hpzPartitionSize > 1)
      func->setAttr(kHpzAttr, b.getI64IntegerAttr(hpzPartitionSize));
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
    averageLoss(func);
    once = (stage <= 1 || sumOnce) && worldSize > 1 && accumSteps > 1 &&
           func->hasAttr("ds.pipeline");
    if (once)
      accumulate::sumLocally(func, accumSteps);
    reduceGradients(func);
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   ret->getOperandTypes()));
  }

  /// The options, checked; returns the communication type.
  FailureOr<Type> checkOptions(func::FuncOp func) {
    if (worldSize < 1)
      return func.emitError("world size must be at least 1, got ")
             << static_cast<int64_t>(worldSize);
    if (stage < 0 || stage > 3)
      return func.emitError("ZeRO stage must be 0, 1, 2 or 3, got ")
             << static_cast<int64_t>(stage);
    if (persistenceThreshold < 0)
      return func.emitError("param-persistence-threshold must not be negative");
    if (commDtype != "fp32" && commDtype != "bf16" && commDtype != "fp16")
      return func.emitError("unknown communication type '")
             << commDtype << "' (choose fp32, bf16 or fp16)";
    if ((quantizeWeights || quantizeGradients) && quantizeBlockSize < 1)
      return func.emitError("quantize-block-size must be at least 1");
    if (quantizeGradients && gradientBits != 8 && gradientBits != 4)
      return func.emitError("gradient-bits must be 8 or 4, got ")
             << static_cast<int64_t>(gradientBits);
    if (quantizeWeights && stage != 3)
      return func.emitError("quantize-weights needs ZeRO stage 3 (it "
                            "quantizes the parameter gathers)");
    if (hpzPartitionSize < 1 ||
        (hpzPartitionSize > 1 &&
         (stage != 3 || worldSize % hpzPartitionSize != 0)))
      return func.emitError("hpz-partition-size must be 1, or at ZeRO stage "
                            "3 divide the world size, got ")
             << static_cast<int64_t>(hpzPartitionSize);
    if (quantizeGradients && (stage == 0 || commDtype != "fp32"))
      return func.emitError("quantize-gradients needs ZeRO stage 1-3 and "
                            "fp32 gradient communication");
    OpBuilder b(func.getContext());
    return commDtype == "bf16"   ? Type(b.getBF16Type())
           : commDtype == "fp16" ? Type(b.getF16Type())
                                 : Type(b.getF32Type());
  }

  /// qgZ's quantization of the gradient reduce-scatters, or none.
  Quantization gradientQuantization() {
    Quantization q;
    if (quantizeGradients)
      q = {quantizeBlockSize, gradientBits};
    return q;
  }

  /// The loss: its mean over ranks, once the step is done.
  void averageLoss(func::FuncOp func) {
    Operation *ret = func.getBody().front().getTerminator();
    OpBuilder b(ret);
    for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
      if (func.getResultAttr(i, "ds.grad") ||
          !func.getResultAttr(i, attrs::kLoss))
        continue;
      Value v = ret->getOperand(i);
      ret->setOperand(i, AllReduceOp::create(b, v.getLoc(), v,
                                             b.getStringAttr("mean"),
                                             b.getI64IntegerAttr(0)));
    }
  }

  /// Gradients in the order the backward pass produces them, reduced in
  /// buckets of at least reduce-bucket-size elements: stage 1 after the
  /// backward pass (whole gradients stay until then), the others as soon
  /// as a bucket is complete.
  void reduceGradients(func::FuncOp func) {
    Operation *ret = func.getBody().front().getTerminator();
    SmallVector<unsigned> grads;
    for (unsigned i = 0; i < ret->getNumOperands(); ++i)
      if (func.getResultAttr(i, "ds.grad"))
        grads.push_back(i);
    auto producedBefore = [&](unsigned x, unsigned y) {
      Operation *a = ret->getOperand(x).getDefiningOp();
      Operation *c = ret->getOperand(y).getDefiningOp();
      if (a == c)
        return x < y;
      if (!a || !c)
        return !a;
      return a->isBeforeInBlock(c);
    };
    llvm::sort(grads, producedBefore);
    SmallVector<unsigned> bucket;
    int64_t elements = 0;
    for (unsigned i : grads) {
      auto type = cast<RankedTensorType>(ret->getOperand(i).getType());
      bucket.push_back(i);
      elements += stage == 0
                      ? type.getNumElements()
                      : shardSize(type.getNumElements(), worldSize) * worldSize;
      if (elements >= reduceBucketSize) {
        reduceBucket(ret, bucket);
        bucket.clear();
        elements = 0;
      }
    }
    if (!bucket.empty())
      reduceBucket(ret, bucket);
  }

  /// `g` in the communication type: a gradient cast up from it (mixed
  /// precision) is reduced before its cast, others are cast down.
  Value inCommType(OpBuilder &b, Value g) {
    if (getElementTypeOrSelf(g.getType()) == commType)
      return g;
    auto c = g.getDefiningOp<CastOp>();
    if (c && getElementTypeOrSelf(c.getInput().getType()) == commType)
      return c.getInput();
    return CastOp::create(
        b, g.getLoc(), cast<RankedTensorType>(g.getType()).clone(commType), g);
  }

  /// One collective for the gradients (result numbers) of `bucket`: an
  /// all-reduce at stage 0, else a reduce-scatter to this rank's shards.
  void reduceBucket(Operation *ret, ArrayRef<unsigned> bucket) {
    Value last = ret->getOperand(bucket.back());
    OpBuilder b(ret);
    if (stage != 1 && !once)
      b.setInsertionPointAfterValue(last);
    Operation *next = &*b.getInsertionPoint();
    SmallVector<Value> values;
    for (unsigned i : bucket)
      values.push_back(inCommType(b, ret->getOperand(i)));
    SmallVector<Value> reduced =
        stage == 0 ? allReduceBucket(b, last.getLoc(), values)
                   : reduceScatterBucket(b, last.getLoc(), values, worldSize,
                                         gradientQuantization());
    deferUnpack(next, ret);
    for (auto [i, v] : llvm::zip(bucket, reduced)) {
      // Back to the gradient's type when the collective's is narrower (a
      // 16-bit gradient reduced in f32 stays f32: the optimizer computes in
      // f32 anyway).
      Type want = getElementTypeOrSelf(ret->getOperand(i).getType());
      Type have = getElementTypeOrSelf(v.getType());
      if (have != want &&
          have.getIntOrFloatBitWidth() < want.getIntOrFloatBitWidth()) {
        OpBuilder cb(ret);
        v = CastOp::create(cb, v.getLoc(),
                           cast<RankedTensorType>(v.getType()).clone(want), v);
      }
      ret->setOperand(i, v);
    }
  }

  /// What unpacks a reduced bucket (the ops between its collective and
  /// `next`) moves to the end of the step, where the optimizer reads it:
  /// the collective can overlap the rest of the backward pass
  /// (dsrt-overlap-comm waits just before the first use).
  static void deferUnpack(Operation *next, Operation *ret) {
    Operation *collective =
        lastOpBefore<ReduceScatterOp, QuantizedReduceScatterOp, AllReduceOp>(
            next);
    if (!collective || next == ret)
      return;
    moveOpsBetween(collective, next, ret);
  }

  /// Stage 3: parameters (trainable, frozen, read-only buffers) at or
  /// above the persistence threshold become shards, gathered just before
  /// their uses in each pass.
  LogicalResult
  partitionParameters(func::FuncOp func,
                      llvm::function_ref<bool(Operation *)> inForward) {
    SmallVector<ShardedParam> params;
    if (failed(shardParameters(func, inForward, params)))
      return failure();
    for (bool fwd : {true, false})
      gatherForPass(params, fwd, inForward);
    func.setType(FunctionType::get(func.getContext(),
                                   func.getBody().front().getArgumentTypes(),
                                   func.getResultTypes()));
    return success();
  }

  /// Turns each partitioned parameter argument into its shard (recording
  /// its whole shape and its first use in each pass).
  LogicalResult shardParameters(func::FuncOp func,
                                llvm::function_ref<bool(Operation *)> inForward,
                                SmallVectorImpl<ShardedParam> &params) {
    Block &body = func.getBody().front();
    OpBuilder b(func.getContext());
    llvm::StringSet<> written = writtenByStep(func);
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kParam);
      if (!name)
        continue;
      bool trainable = func.getArgAttr(i, attrs::kTrainable) != nullptr;
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getNumElements() < persistenceThreshold)
        continue; // small: kept whole on every rank, like DeepSpeed
      if (!isa<FloatType>(type.getElementType())) {
        if (!trainable)
          continue; // an integer buffer: whole
        return func.emitError("trainable parameter '")
               << name << "' is not a float";
      }
      // A frozen parameter or a float buffer is partitioned like a weight
      // unless the step writes it (BatchNorm's running statistics: their
      // update reads and writes the whole tensor, which stays whole).
      if (!trainable && written.contains(name.getValue()))
        continue;
      recomputeInBackward(arg, inForward);
      ShardedParam param{arg, type, nullptr, nullptr};
      for (Operation *user : arg.getUsers()) {
        Operation *&first = inForward(user) ? param.firstFwd : param.firstBwd;
        if (!first || user->isBeforeInBlock(first))
          first = user;
      }
      arg.setType(shardType(type, worldSize));
      func.setArgAttr(i, kFullShapeAttr,
                      b.getDenseI64ArrayAttr(type.getShape()));
      params.push_back(param);
    }
    return success();
  }

  /// The parameters and buffers a result of the step writes (`ds.update`,
  /// before the optimizer's: BatchNorm's running statistics).
  static llvm::StringSet<> writtenByStep(func::FuncOp func) {
    llvm::StringSet<> written;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (auto target = func.getResultAttrOfType<StringAttr>(i, "ds.update"))
        written.insert(target.getValue());
    return written;
  }

  /// In one pass (forward or backward), parameters in the order of their
  /// first use there, gathered in buckets of at least prefetch-bucket-size
  /// elements before the first use of the bucket's first parameter.
  void gatherForPass(MutableArrayRef<ShardedParam> params, bool fwd,
                     llvm::function_ref<bool(Operation *)> inForward) {
    auto first = [&](ShardedParam *p) {
      return fwd ? p->firstFwd : p->firstBwd;
    };
    SmallVector<ShardedParam *> order;
    for (ShardedParam &p : params)
      if (first(&p))
        order.push_back(&p);
    llvm::sort(order, [&](ShardedParam *x, ShardedParam *y) {
      if (first(x) == first(y))
        return x->arg.getArgNumber() < y->arg.getArgNumber();
      return first(x)->isBeforeInBlock(first(y));
    });
    SmallVector<ShardedParam *> bucket;
    int64_t elements = 0;
    Operation *prevStart = nullptr; // the previous bucket's first use
    auto flush = [&] {
      prevStart = gatherBucketBefore(bucket, first(bucket.front()), prevStart,
                                     fwd, inForward);
      bucket.clear();
      elements = 0;
    };
    for (ShardedParam *p : order) {
      // One collective gathers one element type: a frozen f32 weight
      // beside 16-bit trainable ones starts a bucket of its own (and with
      // hpZ one group: a parameter without a secondary partition too).
      if (!bucket.empty() &&
          (bucket.front()->type.getElementType() !=
               p->type.getElementType() ||
           fromSecondary(bucket.front(), fwd) != fromSecondary(p, fwd)))
        flush();
      bucket.push_back(p);
      elements += p->type.getNumElements();
      if (elements >= prefetchBucketSize)
        flush();
    }
    if (!bucket.empty())
      flush();
  }

  /// Gathers `bucket` for its uses in one pass, the first of which is
  /// `use`: the gather starts where the previous bucket's did (`prevStart`:
  /// one bucket of prefetch, it overlaps the previous bucket's layers) and
  /// what unpacks it goes just before `use`. Returns `use`, where the next
  /// bucket's gather starts.
  Operation *
  gatherBucketBefore(ArrayRef<ShardedParam *> bucket, Operation *use,
                     Operation *prevStart, bool fwd,
                     llvm::function_ref<bool(Operation *)> inForward) {
    Operation *start = prevStart ? prevStart : use;
    OpBuilder b(start);
    bool secondary = fromSecondary(bucket.front(), fwd);
    SmallVector<Value> shards;
    SmallVector<RankedTensorType> types;
    for (ShardedParam *p : bucket) {
      shards.push_back(secondary ? p->secondary : Value(p->arg));
      types.push_back(p->type);
    }
    llvm::SmallPtrSet<Operation *, 16> users;
    for (ShardedParam *p : bucket)
      users.insert(p->arg.user_begin(), p->arg.user_end());
    Quantization quant;
    if (quantizeWeights && !secondary)
      quant = {quantizeBlockSize, 8};
    SmallVector<Value> wholes =
        gatherBucket(b, bucket.front()->arg.getLoc(), shards, types,
                     secondary ? hpzPartitionSize : worldSize, quant,
                     secondary ? kNodeGroup : 0);
    if (fwd && hpzPartitionSize > 1)
      keepSecondaries(b, bucket, wholes);
    moveOpsBetween(lastOpBefore<AllGatherOp, QuantizedAllGatherOp>(start),
                   start, use);
    for (auto [p, whole] : llvm::zip(bucket, wholes)) {
      // The uses in this pass, not the bucket's own concat or gather.
      p->arg.replaceUsesWithIf(whole, [&](OpOperand &operand) {
        Operation *owner = operand.getOwner();
        return users.contains(owner) && inForward(owner) == fwd;
      });
    }
    return use;
  }

  /// hpZ: the backward gathers `p` from its secondary partition.
  static bool fromSecondary(const ShardedParam *p, bool fwd) {
    return !fwd && p->secondary;
  }

  /// hpZ: of each parameter of `bucket` the backward reads, this rank's
  /// 1/H of the padded whole just gathered (node rank l keeps elements
  /// [l N S / H, (l+1) N S / H)): the node's H ranks gather it back.
  void keepSecondaries(OpBuilder &b, ArrayRef<ShardedParam *> bucket,
                       ArrayRef<Value> wholes) {
    for (auto [p, whole] : llvm::zip(bucket, wholes)) {
      if (!p->firstBwd)
        continue;
      Value flat = flattenPadded(b, whole.getLoc(), whole, worldSize);
      auto t = cast<RankedTensorType>(flat.getType());
      p->secondary = SpSliceOp::create(
          b, whole.getLoc(),
          RankedTensorType::get({t.getDimSize(0) / hpzPartitionSize},
                                t.getElementType()),
          flat, b.getI64IntegerAttr(0), b.getI64IntegerAttr(kNodeGroup));
    }
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
