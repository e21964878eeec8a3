//===- Optimizer.cpp - parameter updates from gradients -------------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"
#include "ds/Runtime/Schedule.h"
#include "ds/Transforms/Sharding.h"

namespace mlir::ds {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

struct OptimizerPass : impl::OptimizerPassBase<OptimizerPass> {
  using OptimizerPassBase::OptimizerPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    if (optimizer != "adam" && optimizer != "adamw" && optimizer != "sgd" &&
        optimizer != "lamb") {
      func.emitError("unknown optimizer '")
          << optimizer << "' (choose adam, adamw, sgd or lamb)";
      return signalPassFailure();
    }
    if (!::ds::isSchedule(schedule)) {
      func.emitError("unknown learning-rate schedule '")
          << schedule
          << "' (constant, warmup, warmup-cosine, warmup-linear)";
      return signalPassFailure();
    }
    if ((schedule == "warmup-cosine" || schedule == "warmup-linear") &&
        totalSteps <= warmupSteps) {
      func.emitError("the ")
          << schedule << " schedule needs --total-steps ("
          << static_cast<int64_t>(totalSteps) << ") above --warmup-steps ("
          << static_cast<int64_t>(warmupSteps) << ")";
      return signalPassFailure();
    }
    if (gradAccum < 1) {
      func.emitError("--grad-accum must be at least 1, got ")
          << static_cast<int64_t>(gradAccum);
      return signalPassFailure();
    }
    if (gradAccum > 1 && gradClip > 0) {
      func.emitError("--grad-clip with --grad-accum is not supported yet "
                     "(the clip would apply to each micro-batch)");
      return signalPassFailure();
    }
    if (lr < 0 || weightDecay < 0 || momentum < 0 || gradClip < 0) {
      func.emitError("learning rate, weight decay and momentum must not be "
                     "negative (lr ")
          << lr << ", weight decay " << weightDecay << ", momentum "
          << momentum << ")";
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    Operation *ret = body.getTerminator();
    MLIRContext *ctx = func.getContext();
    OpBuilder b(ret);
    // A pipeline stage: the update section starts here. ds-run runs the last
    // micro-batch's update after the whole schedule, so that exchanging a
    // tied parameter's gradient never waits on a stage that is still
    // running its backwards.
    if (func->hasAttr("ds.pipeline"))
      PipeMarkOp::create(b, func.getLoc())
          ->setAttr("update", b.getI64IntegerAttr(1));

    // The loss-scale input of an fp16 step (looked up before arguments are
    // added below).
    BlockArgument lossScale;
    for (BlockArgument arg : body.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), "ds.loss_scale"))
        lossScale = arg;
    // Parameter arguments by name.
    llvm::StringMap<BlockArgument> params;
    for (BlockArgument arg : body.getArguments())
      if (auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                         attrs::kParam))
        params[name] = arg;

    SmallVector<Type> argTypes(body.getArgumentTypes());
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      argAttrs.push_back(func.getArgAttrDict(i));
    // ZeRO stages 1-3 hand the optimizer this rank's gradient shard: the
    // update and its state are for that shard only.
    auto stageAttr = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
    auto worldAttr = func->getAttrOfType<IntegerAttr>(kWorldSizeAttr);
    int64_t world = worldAttr ? worldAttr.getInt() : 1;
    bool sharded = stageAttr && stageAttr.getInt() >= 1;
    if (func->hasAttr("ds.tensor_parallel") && optimizer == "lamb") {
      func.emitError("lamb's trust ratio needs whole-tensor norms; it is "
                     "not supported with --tensor-parallel yet");
      return signalPassFailure();
    }
    if (sharded && optimizer == "lamb") {
      func.emitError("lamb's trust ratio needs whole-tensor norms; it is "
                     "not supported with ZeRO stages 1-3 yet (use --zero=0)");
      return signalPassFailure();
    }
    // The attribute of a state argument (with its parameter's whole shape
    // when it holds a shard).
    DenseI64ArrayAttr fullShape;
    // Tensor parallelism: a state of a split parameter is split the same.
    DenseI64ArrayAttr tpSplit;
    auto addArg = [&](Type type, NamedAttribute attr,
                      std::optional<NamedAttribute> extra = std::nullopt) {
      argTypes.push_back(type);
      SmallVector<NamedAttribute> attrList{attr};
      if (extra)
        attrList.push_back(*extra);
      if (fullShape)
        attrList.push_back(b.getNamedAttr(kFullShapeAttr, fullShape));
      if (tpSplit)
        attrList.push_back(b.getNamedAttr("ds.tp_split", tpSplit));
      argAttrs.push_back(b.getDictionaryAttr(attrList));
      return body.addArgument(type, func.getLoc());
    };
    auto stepType = RankedTensorType::get({}, b.getI64Type());
    Value step = addArg(stepType, b.getNamedAttr("ds.step", b.getUnitAttr()));

    SmallVector<Value> results(ret->getOperands());
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      resultAttrs.push_back(func.getResultAttrDict(i));
    auto update = [&](StringRef name) {
      return b.getDictionaryAttr(
          {b.getNamedAttr("ds.update", b.getStringAttr(name)),
           b.getNamedAttr(attrs::kOutput,
                          b.getStringAttr("update:" + name.str()))});
    };
    // Gradients as the optimizer reads them: in f32 (a 16-bit weight's
    // gradient is 16-bit; it is cast up one tensor at a time, just before
    // its use, so that f32 copies never pile up), unscaled by the fp16 loss
    // scale.
    Value invScale;
    auto prepared = [&](Value g) -> Value {
      auto t = cast<RankedTensorType>(g.getType());
      Location loc = g.getLoc();
      if (!t.getElementType().isF32() && isa<FloatType>(t.getElementType()))
        g = CastOp::create(b, loc, t.clone(b.getF32Type()), g);
      if (invScale)
        g = MulOp::create(b, loc, g.getType(), g, invScale);
      return g;
    };
    // Loss scaling: gradients come scaled by the `ds.loss_scale` input.
    // They are checked for inf/NaN over every rank as they are (unscaling
    // cannot create or remove one); on overflow the optimizer kernels keep
    // parameters and state.
    Value overflow; // a result once the optimizer ops are built
    if (lossScale) {
      if (gradAccum > 1) {
        func.emitError("loss scaling with --grad-accum is not supported yet");
        return signalPassFailure();
      }
      Location loc = func.getLoc();
      SmallVector<Value> grads;
      for (unsigned i = 0, e = results.size(); i < e; ++i)
        if (func.getResultAttr(i, "ds.grad"))
          grads.push_back(results[i]);
      overflow = CheckOverflowOp::create(
          b, loc, RankedTensorType::get({}, b.getF32Type()), grads);
      // With tensor parallelism a split gradient's overflow is on one rank
      // of a group: the check spans every rank (group -1, the world).
      if (func->hasAttr("ds.tensor_parallel"))
        overflow.getDefiningOp()->setAttr("group", b.getI64IntegerAttr(-1));
      invScale = ReciprocalOp::create(b, loc, lossScale);
    }
    // Clipping by the global norm of all gradients, as torch does.
    Value clipCoef;
    if (gradClip > 0) {
      // Tensor parallelism: a split parameter's gradient is in slices over
      // the group; their squares add up over it (the replicated ones count
      // once).
      Value total, totalSplit;
      for (unsigned i = 0, e = results.size(); i < e; ++i) {
        if (!func.getResultAttr(i, "ds.grad"))
          continue;
        BlockArgument gradParam = params.lookup(
            func.getResultAttrOfType<StringAttr>(i, "ds.grad").getValue());
        bool split = gradParam && func.getArgAttr(gradParam.getArgNumber(),
                                                  "ds.tp_split");
        Value g = prepared(results[i]);
        auto t = cast<RankedTensorType>(g.getType());
        SmallVector<int64_t> axes;
        for (int64_t d = 0; d < t.getRank(); ++d)
          axes.push_back(d);
        auto scalarType = RankedTensorType::get({}, t.getElementType());
        Value sq = MulOp::create(b, g.getLoc(), t, g, g);
        Value sum = t.getRank() == 0
                        ? sq
                        : Value(ReduceSumOp::create(
                              b, g.getLoc(), scalarType, sq,
                              b.getDenseI64ArrayAttr(axes), b.getBoolAttr(false)));
        Value &acc = split ? totalSplit : total;
        acc = acc ? Value(AddOp::create(b, g.getLoc(), scalarType, acc, sum))
                  : sum;
      }
      if (totalSplit) {
        Value summed = TpAllReduceOp::create(b, func.getLoc(),
                                             totalSplit.getType(), totalSplit,
                                             b.getI64IntegerAttr(1));
        total = total ? Value(AddOp::create(b, func.getLoc(),
                                            totalSplit.getType(), total, summed))
                      : summed;
      }
      // Shards hold disjoint parts (padding is zero): the squares add up
      // over the ranks.
      if (total && sharded && world > 1)
        total = AllReduceOp::create(b, func.getLoc(), total,
                                    b.getStringAttr("sum"),
                                    b.getI64IntegerAttr(0));
      if (total) {
        Location loc = func.getLoc();
        auto st = cast<RankedTensorType>(total.getType());
        auto cst = [&](double v) {
          return ConstantOp::create(
              b, loc, st,
              DenseElementsAttr::get(st, ArrayRef<Attribute>(FloatAttr::get(
                                             st.getElementType(), v))));
        };
        Value norm = SqrtOp::create(b, loc, total);
        Value coef = DivOp::create(b, loc, st, cst(gradClip),
                                   AddOp::create(b, loc, st, norm, cst(1e-6)));
        clipCoef = MinOp::create(b, loc, st, coef, cst(1.0));
      }
    }

    struct PendingGather {
      unsigned result;
      Value shard;
      RankedTensorType whole;
    };
    SmallVector<PendingGather> pendingGathers;
    int updated = 0;
    for (unsigned i = 0, e = results.size(); i < e; ++i) {
      auto name = func.getResultAttrOfType<StringAttr>(i, "ds.grad");
      if (!name)
        continue;
      BlockArgument param = params.lookup(name);
      if (!param) {
        func.emitError("gradient of '") << name << "' has no parameter";
        return signalPassFailure();
      }
      Value grad = prepared(results[i]);
      if (clipCoef)
        grad = MulOp::create(b, grad.getLoc(), grad.getType(), grad, clipCoef);
      Location loc = grad.getLoc();
      Type t = grad.getType();
      Value paramIn = param;
      fullShape = {};
      tpSplit = func.getArgAttrOfType<DenseI64ArrayAttr>(param.getArgNumber(),
                                                         "ds.tp_split");
      // A 16-bit weight (mixed precision) is updated through its f32 master
      // copy, optimizer state of the gradient's shape (this rank's shard
      // with ZeRO 1-3), which starts as the weight's initializer.
      auto paramType = cast<RankedTensorType>(param.getType());
      // Offload gives an f32 weight its master copy too: the host keeps
      // the f32 partition and the device weight is its copy.
      bool master = isa<FloatType>(paramType.getElementType()) &&
                    (!paramType.getElementType().isF32() || masterWeights);
      if (master && sharded) {
        fullShape = func.getArgAttrOfType<DenseI64ArrayAttr>(
            param.getArgNumber(), kFullShapeAttr);
        if (!fullShape)
          fullShape = b.getDenseI64ArrayAttr(paramType.getShape());
      }
      std::string masterName = name.str() + ".master";
      if (master && cast<RankedTensorType>(t).getShape() != paramType.getShape() &&
          (!sharded || cast<RankedTensorType>(t).getShape() !=
                           shardType(paramType, world).getShape())) {
        func.emitError("gradient of '")
            << name << "' is " << t << ", neither " << paramType
            << " nor its shard";
        return signalPassFailure();
      }
      if (master)
        paramIn = addArg(t, b.getNamedAttr("ds.state",
                                           b.getStringAttr(masterName)),
                         b.getNamedAttr("ds.master_of", name));
      if (sharded && !master) {
        auto full = cast<RankedTensorType>(param.getType());
        auto shard = cast<RankedTensorType>(t);
        fullShape = func.getArgAttrOfType<DenseI64ArrayAttr>(
            param.getArgNumber(), kFullShapeAttr);
        if (!fullShape)
          fullShape = b.getDenseI64ArrayAttr(full.getShape());
        if (param.getType() != t) {
          // A whole parameter: this rank's part of it.
          if (shardType(full, world) != shard) {
            func.emitError("gradient of '")
                << name << "' is " << shard << ", not the shard of " << full;
            return signalPassFailure();
          }
          paramIn = ShardOp::create(b, loc, shard,
                                    flattenPadded(b, loc, param, world),
                                    b.getI64IntegerAttr(0));
        }
      }
      // The new parameter: the updated shard, or (for a whole parameter)
      // gathered from every rank's updated shard after the loop.
      auto wholeParam = [&](Value updated) -> Value {
        if (master) {
          // The master goes back to its state; the weight is its cast down.
          results.push_back(updated);
          resultAttrs.push_back(update(masterName));
          if (!paramType.getElementType().isF32())
            updated = CastOp::create(
                b, loc,
                cast<RankedTensorType>(updated.getType())
                    .clone(paramType.getElementType()),
                updated);
        }
        if (cast<RankedTensorType>(updated.getType()).getShape() !=
            paramType.getShape())
          pendingGathers.push_back(
              {i, updated, cast<RankedTensorType>(param.getType())});
        return updated;
      };
      Value acc;
      std::string accName = name.str() + ".grad_accum";
      if (gradAccum > 1)
        acc = addArg(t, b.getNamedAttr("ds.state", b.getStringAttr(accName)));
      // Pipeline parallelism: a parameter several stages hold (tied
      // weights) is updated with the sum of their gradients.
      if (auto peers = func.getArgAttrOfType<DenseI64ArrayAttr>(
              param.getArgNumber(), "ds.tied_peers")) {
        if (gradClip > 0 || overflow) {
          func.emitError("tied parameter '")
              << name << "' across pipeline stages with --grad-clip or "
              << "loss scaling is not supported yet";
          return signalPassFailure();
        }
        auto id = func.getArgAttrOfType<IntegerAttr>(param.getArgNumber(),
                                                     "ds.tied_id");
        SmallVector<Type> types{t};
        SmallVector<Value> operands{grad, step};
        if (acc) {
          types.push_back(t);
          operands.push_back(acc);
        }
        auto tied = TiedGradSumOp::create(
            b, loc, types, operands,
            {b.getNamedAttr("peers", peers),
             b.getNamedAttr("accum_steps", b.getI64IntegerAttr(gradAccum)),
             b.getNamedAttr("tied_id",
                            id ? id : b.getI64IntegerAttr(0))});
        grad = tied.getResult();
        if (acc)
          acc = tied.getNewGradAccum();
      }
      SmallVector<Type> sgdTypes{t, t}, adamTypes{t, t, t};
      if (acc) {
        sgdTypes.push_back(t);
        adamTypes.push_back(t);
      }
      if (optimizer == "sgd") {
        Value buf = grad;
        std::string bufName = name.str() + ".momentum_buffer";
        if (momentum != 0.0)
          buf = addArg(t, b.getNamedAttr("ds.state", b.getStringAttr(bufName)));
        auto op = SgdOp::create(b, loc, sgdTypes, paramIn, grad, buf, step, acc,
                                b.getF64FloatAttr(lr),
                                b.getF64FloatAttr(momentum),
                                b.getF64FloatAttr(dampening),
                                b.getF64FloatAttr(weightDecay),
                                b.getBoolAttr(nesterov),
                                b.getStringAttr(schedule),
                                b.getI64IntegerAttr(warmupSteps),
                                b.getI64IntegerAttr(totalSteps),
                                b.getF64FloatAttr(minLr),
                                b.getI64IntegerAttr(gradAccum));
        Value newParam = wholeParam(op.getNewParam());
        results[i] = newParam;
        resultAttrs[i] = update(name);
        if (momentum != 0.0) {
          results.push_back(op.getNewMomentumBuffer());
          resultAttrs.push_back(update(bufName));
        }
        if (acc) {
          results.push_back(op.getNewGradAccum());
          resultAttrs.push_back(update(accName));
        }
      } else {
        std::string mName = name.str() + ".exp_avg";
        std::string vName = name.str() + ".exp_avg_sq";
        Value m = addArg(t, b.getNamedAttr("ds.state", b.getStringAttr(mName)));
        Value v = addArg(t, b.getNamedAttr("ds.state", b.getStringAttr(vName)));
        auto op = AdamOp::create(
            b, loc, adamTypes, paramIn, grad, m, v, step, acc,
            b.getF64FloatAttr(lr), b.getF64FloatAttr(beta1),
            b.getF64FloatAttr(beta2), b.getF64FloatAttr(eps),
            b.getF64FloatAttr(weightDecay),
            b.getBoolAttr(optimizer == "adamw"),
            b.getBoolAttr(optimizer == "lamb"), b.getStringAttr(schedule),
            b.getI64IntegerAttr(warmupSteps), b.getI64IntegerAttr(totalSteps),
            b.getF64FloatAttr(minLr), b.getI64IntegerAttr(gradAccum));
        Value newParam = wholeParam(op.getNewParam());
        results[i] = newParam;
        resultAttrs[i] = update(name);
        results.push_back(op.getNewExpAvg());
        resultAttrs.push_back(update(mName));
        results.push_back(op.getNewExpAvgSq());
        resultAttrs.push_back(update(vName));
        if (acc) {
          results.push_back(op.getNewGradAccum());
          resultAttrs.push_back(update(accName));
        }
      }
      ++updated;
    }
    if (updated == 0) {
      func.emitError("no gradients to apply: run --ds-autodiff first");
      return signalPassFailure();
    }
    if (overflow) {
      results.push_back(overflow);
      resultAttrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr(attrs::kOutput, b.getStringAttr("ds.overflow"))}));
    }
    // The updated shards of whole parameters, gathered in buckets.
    for (size_t first = 0; first < pendingGathers.size();) {
      size_t last = first;
      int64_t elements = 0;
      SmallVector<Value> shards;
      SmallVector<RankedTensorType> types;
      while (last < pendingGathers.size() &&
             (last == first || elements < allgatherBucketSize)) {
        shards.push_back(pendingGathers[last].shard);
        types.push_back(pendingGathers[last].whole);
        elements += cast<RankedTensorType>(shards.back().getType())
                        .getDimSize(0) * world;
        ++last;
      }
      SmallVector<Value> wholes =
          gatherBucket(b, func.getLoc(), shards, types, world);
      for (size_t k = first; k < last; ++k)
        results[pendingGathers[k].result] = wholes[k - first];
      first = last;
    }
    ret->setOperands(results);
    func.setType(FunctionType::get(ctx, argTypes,
                                   ValueRange(results).getTypes()));
    func.setAllArgAttrs(argAttrs);
    func.setAllResultAttrs(resultAttrs);
    func->setAttr("ds.optimizer", b.getStringAttr(optimizer));
  }
};
} // namespace
} // namespace mlir::ds
