//===- OneBitAdam.cpp - DeepSpeed's 1-bit Adam as an update rule ----------===//
//
// Part of the ds project.
//
// The `onebit-adam` rule of --ds-optimizer (docs/compression.md). Its
// update op, `ds.onebit_adam`, runs the data-parallel exchange itself: the
// all-reduced gradient during the warm-up, the 1-bit compressed momentum
// after the freeze. So before the updates are built, the gradients' mean
// all-reduce that --ds-zero inserted at stage 0 is taken out again (each
// update reads this rank's own gradient), and what the rule does not run
// yet is refused by name. Under ZeRO 1-3 the exchange stays where ZeRO put
// it: each gradient bucket's reduce-scatter becomes a
// `ds.compressed_reduce_scatter` that keeps this rank's momentum of its
// gradients (`<param>.worker_momentum`) and exchanges it after the freeze
// (plain gradient mean until then, 1-bit with a worker error per
// partition after it), and `ds.onebit_adam_local` updates this rank's
// partition (m = the exchanged momentum after the freeze); ZeRO's
// parameter all-gathers become compressed ones too: the int8 update delta
// (with error feedback) of a replicated parameter
// (`ds.compressed_all_gather`, stages 1-2) and the int8 gathers of a
// stage-3 shard (`ds.onebit_quantized_all_gather`).
//
//===----------------------------------------------------------------------===//

#include "GradAccumulate.h"
#include "OptimizerUpdate.h"
#include "ds/Dialect/Ds/IR/DsCompression.h"
#include "ds/Support/OneBit.h"
#include "ds/Transforms/Sharding.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::ds::optimizer {

namespace {
/// Moves the ops `v` is computed from before `point` (a pipeline stage's
/// optimizer step: arithmetic on the step argument and constants, built
/// after the reduce-scatters of its update section), so that an exchange
/// built at `point` can read it.
void hoistBefore(Value v, Operation *point) {
  Operation *def = v.getDefiningOp();
  if (!def || def->getBlock() != point->getBlock() ||
      def->isBeforeInBlock(point))
    return;
  for (Value operand : def->getOperands())
    hoistBefore(operand, point);
  def->moveBefore(point);
}

/// ZeRO-3: the gathers of the bucket(s) that hold partitioned parameter
/// `shard` (ZeRO's `ds.all_gather` of one shard or of a concat of shards)
/// become `ds.onebit_quantized_all_gather`, plain until the freeze; each piece's
/// valid count is its parameter's whole size (ds.full_shape).
void quantizeGathers(BlockArgument shard, Value step, int64_t freezeStep) {
  auto func = dyn_cast<func::FuncOp>(shard.getOwner()->getParentOp());
  if (!func)
    return;
  SmallVector<AllGatherOp> gathers;
  for (Operation *user : shard.getUsers()) {
    if (auto ag = dyn_cast<AllGatherOp>(user))
      gathers.push_back(ag);
    else if (isa<ConcatOp>(user))
      for (Operation *u : user->getUsers())
        if (auto ag = dyn_cast<AllGatherOp>(u))
          gathers.push_back(ag);
  }
  for (AllGatherOp ag : gathers) {
    if (ag.getGroup() != 0)
      continue;
    Value in = ag.getInput();
    SmallVector<Value> parts{in};
    if (auto cat = in.getDefiningOp<ConcatOp>())
      parts.assign(cat->operand_begin(), cat->operand_end());
    SmallVector<int64_t> pieces, valid;
    for (Value v : parts) {
      auto arg = dyn_cast<BlockArgument>(v);
      auto whole = arg ? func.getArgAttrOfType<DenseI64ArrayAttr>(
                             arg.getArgNumber(), kFullShapeAttr)
                       : DenseI64ArrayAttr();
      if (!whole)
        break;
      int64_t n = 1;
      for (int64_t d : whole.asArrayRef())
        n *= d;
      pieces.push_back(cast<RankedTensorType>(v.getType()).getDimSize(0));
      valid.push_back(n);
    }
    if (pieces.size() != parts.size())
      continue; // not only parameter shards: the plain gather stays
    // A pipeline stage counts its optimizer steps after its micro-batch
    // sums (GradAccumulate.h); the forward's gathers read that count too.
    hoistBefore(step, ag);
    OpBuilder b(ag);
    auto q = OneBitQuantizedAllGatherOp::create(
        b, ag.getLoc(), ag.getResult().getType(), in, step,
        b.getI64IntegerAttr(freezeStep), b.getDenseI64ArrayAttr(pieces),
        b.getDenseI64ArrayAttr(valid));
    ag.getResult().replaceAllUsesWith(q.getResult());
    ag.erase();
  }
}

/// ZeRO 1-2 (and stage 3's persistent parameters): the new whole parameter
/// from this rank's new chunk `updated` of `in.param` (`ds.shard` of the
/// flattened, padded whole `base`): `ds.compressed_all_gather` of the
/// update delta with this rank's gather error, plain until the freeze.
Value gatherDelta(OpBuilder &b, const UpdateInput &in, int64_t freezeStep,
                  AddStateFn addState, Value updated, UpdateOutput &out) {
  Value base = in.param.getDefiningOp<ShardOp>().getInput();
  Value error = addState("gather_error");
  auto g = CompressedAllGatherOp::create(
      b, in.loc, TypeRange{base.getType(), error.getType()}, updated, base,
      error, in.step, b.getI64IntegerAttr(freezeStep),
      b.getI64IntegerAttr(in.paramType.getNumElements()));
  out.newState.push_back({"gather_error", g.getNewError()});
  return unpadReshape(b, in.loc, g.getResult(), in.paramType);
}


/// ZeRO 1-3: the bucket's reduce-scatter becomes the compressed one (once
/// per bucket: the first parameter updated from it keeps its worker
/// error, `<param>.worker_error`, the bucket's length), then the update of
/// this rank's partition.
UpdateOutput buildOneBitAdamPartition(OpBuilder &b, const UpdateInput &in,
                                      const Hyperparameters &hp,
                                      AddStateFn addState,
                                      Operation *exchange) {
  Value m = addState("exp_avg");
  Value v = addState("exp_avg_sq");
  UpdateOutput out;
  Value grad =
      compressBucketExchange(in, hp.freezeStep, exchange, out, hp.beta1);
  const LrSchedule &s = hp.schedule;
  Type t = in.param.getType();
  auto op = OneBitAdamLocalOp::create(
      b, in.loc, TypeRange{t, t, t}, in.param, grad, m, v, in.step,
      b.getF64FloatAttr(hp.lr), b.getF64FloatAttr(hp.beta1),
      b.getF64FloatAttr(hp.beta2), b.getF64FloatAttr(hp.eps),
      b.getF64FloatAttr(hp.weightDecay), b.getI64IntegerAttr(hp.freezeStep),
      b.getStringAttr(s.kind), b.getI64IntegerAttr(s.warmupSteps),
      b.getI64IntegerAttr(s.totalSteps), b.getF64FloatAttr(s.minLr),
      b.getBoolAttr(true));
  out.newParam = op.getNewParam();
  out.newState.insert(out.newState.begin(),
                      {{"exp_avg", op.getNewExpAvg()},
                       {"exp_avg_sq", op.getNewExpAvgSq()}});
  exchangeParameter(b, in, hp.freezeStep, addState, out);
  return out;
}
} // namespace

Operation *findBucketExchange(Value grad) {
  Operation *def = grad.getDefiningOp();
  // A pipeline stage's mean over its micro-batches (the sum times 1/M) and
  // a tied parameter's sum over the stages come after the exchange.
  while (isa_and_nonnull<MulOp, TiedGradSumOp>(def))
    def = def->getOperand(0).getDefiningOp();
  if (isa_and_nonnull<SplitOp>(def))
    def = def->getOperand(0).getDefiningOp();
  if (isa_and_nonnull<ReduceScatterOp, CompressedReduceScatterOp>(def))
    return def;
  return nullptr;
}

Value compressBucketExchange(const UpdateInput &in, int64_t freezeStep,
                             Operation *exchange, UpdateOutput &out,
                             std::optional<double> momentumBeta1) {
  Value grad = in.grad;
  auto rs = dyn_cast<ReduceScatterOp>(exchange);
  if (!rs)
    return grad; // compressed already, by an earlier parameter's update
  Type bucket = rs.getInput().getType();
  Value we = in.addTypedState("worker_error", bucket);
  Value momentum;
  SmallVector<Type> types{rs.getResult().getType(), bucket};
  if (momentumBeta1) {
    momentum = in.addTypedState("worker_momentum", bucket);
    types.push_back(bucket);
  }
  hoistBefore(in.step, rs);
  OpBuilder rb(rs);
  auto crs = CompressedReduceScatterOp::create(
      rb, rs.getLoc(), types, rs.getInput(), we, in.step, momentum,
      rb.getI64IntegerAttr(freezeStep),
      momentumBeta1 ? rb.getF64FloatAttr(*momentumBeta1) : FloatAttr());
  if (grad == rs.getResult())
    grad = crs.getResult();
  rs.getResult().replaceAllUsesWith(crs.getResult());
  rs.erase();
  out.newState.push_back({"worker_error", crs.getNewWorkerError()});
  if (momentumBeta1)
    out.newState.push_back({"worker_momentum", crs.getNewMomentum()});
  return grad;
}

void exchangeParameter(OpBuilder &b, const UpdateInput &in,
                       int64_t freezeStep, AddStateFn addState,
                       UpdateOutput &out) {
  // The update delta of a replicated parameter's chunk, or the quantized
  // gathers of a stage-3 shard.
  if (in.param.getDefiningOp<ShardOp>() && in.paramType)
    out.newParam = gatherDelta(b, in, freezeStep, addState, out.newParam, out);
  else if (auto arg = dyn_cast<BlockArgument>(in.param))
    quantizeGathers(arg, in.step, freezeStep);
}

std::pair<Value, Value> addOneBitErrors(OpBuilder &b, const UpdateInput &in) {
  auto t = cast<RankedTensorType>(in.grad.getType());
  int64_t padded = ::ds::onebit::paddedSize(t.getNumElements(), in.world);
  auto errType = [&](int64_t n) {
    return RankedTensorType::get({n}, b.getF32Type());
  };
  return {in.addTypedState("worker_error", errType(padded)),
          in.addTypedState("server_error", errType(padded / in.world))};
}

UpdateOutput buildOneBitAdam(OpBuilder &b, const UpdateInput &in,
                             const Hyperparameters &hp, AddStateFn addState) {
  if (Operation *exchange = findBucketExchange(in.grad))
    return buildOneBitAdamPartition(b, in, hp, addState, exchange);
  Value m = addState("exp_avg");
  Value v = addState("exp_avg_sq");
  auto t = cast<RankedTensorType>(in.grad.getType());
  auto [we, se] = addOneBitErrors(b, in);
  const LrSchedule &s = hp.schedule;
  SmallVector<Type> types{t, t, t, we.getType(), se.getType()};
  auto op = OneBitAdamOp::create(
      b, in.loc, types, in.param, in.grad, m, v, we, se, in.step,
      b.getF64FloatAttr(hp.lr), b.getF64FloatAttr(hp.beta1),
      b.getF64FloatAttr(hp.beta2), b.getF64FloatAttr(hp.eps),
      b.getF64FloatAttr(hp.weightDecay), b.getI64IntegerAttr(hp.freezeStep),
      b.getStringAttr(s.kind), b.getI64IntegerAttr(s.warmupSteps),
      b.getI64IntegerAttr(s.totalSteps), b.getF64FloatAttr(s.minLr));
  return {op.getNewParam(),
          {{"exp_avg", op.getNewExpAvg()},
           {"exp_avg_sq", op.getNewExpAvgSq()},
           {"worker_error", op.getNewWorkerError()},
           {"server_error", op.getNewServerError()}},
          Value()};
}

namespace {
/// The all-reduces a gradient result comes from: its defining ops are
/// followed up through the unpacking of a bucket (reshape, split, slice,
/// concat) to the collective.
void findGradientReduces(Value grad, llvm::SetVector<Operation *> &found) {
  SmallVector<Value> work{grad};
  for (int depth = 0; depth < 6 && !work.empty(); ++depth) {
    SmallVector<Value> next;
    for (Value v : work) {
      Operation *def = v.getDefiningOp();
      if (!def)
        continue;
      if (isa<AllReduceOp>(def)) {
        found.insert(def);
        continue;
      }
      if (isa<ReshapeOp, SplitOp, SliceOp, ConcatOp>(def))
        next.append(def->operand_begin(), def->operand_end());
    }
    work = std::move(next);
  }
}
} // namespace

LogicalResult checkCompressedLayout(func::FuncOp func,
                                    const Hyperparameters &hp,
                                    StringRef name, StringRef scope) {
  auto refuse = [&](const Twine &what) {
    return func.emitError(name + " with ")
           << what << " is not supported yet (" << scope << ")";
  };
  if (func->hasAttr("ds.tensor_parallel"))
    return refuse("tensor parallelism");
  // A pipeline stage's micro-batch sums are exchanged once per step
  // (GradAccumulate.h): the exchange sees one gradient, as without them.
  if (hp.gradAccum > 1 && !accumulate::accumulatedSteps(func))
    return refuse("gradient accumulation");
  Block &body = func.getBody().front();
  for (BlockArgument arg : body.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), "ds.loss_scale"))
      return refuse("loss scaling (fp16)");
  Operation *ret = body.getTerminator();
  for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
    auto t = cast<RankedTensorType>(ret->getOperand(i).getType());
    if (func.getResultAttr(i, "ds.grad") && !t.getElementType().isF32())
      return refuse("a gradient of " + Twine(t.getNumElements()) +
                    " non-f32 elements");
  }
  return success();
}

LogicalResult prepareAtZeroZero(func::FuncOp func, const Hyperparameters &hp,
                                StringRef name, StringRef scope) {
  auto stage = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
  if (stage && stage.getInt() > 0)
    return func.emitError(name + " with ZeRO stage ")
           << stage.getInt() << " is not supported yet (" << scope << ")";
  if (failed(checkCompressedLayout(func, hp, name, scope)))
    return failure();
  takeOutGradientReduces(func);
  return success();
}

LogicalResult prepareAtAnyStage(func::FuncOp func, const Hyperparameters &hp,
                                StringRef name, StringRef scope,
                                StringRef exchanged, StringRef gathers) {
  if (failed(checkCompressedLayout(func, hp, name, scope)))
    return failure();
  auto stage = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
  if (stage && stage.getInt() > 0) {
    // ZeRO 1-3: the updates take over the reduce-scatters. DeepSpeed has no
    // compressed optimizer under ZeRO; ds's differs from its ZeRO-0
    // algorithm, and says so once.
    func.emitWarning(name + " with ZeRO stage ")
        << stage.getInt()
        << ": after the freeze " << exchanged
        << ", and the parameter all-gathers are compressed too (" << gathers
        << "docs/compression.md)";
    return success();
  }
  takeOutGradientReduces(func);
  return success();
}

LogicalResult prepareOneBitAdam(func::FuncOp func, const Hyperparameters &hp) {
  return prepareAtAnyStage(
      func, hp, "onebit-adam",
      "1-bit Adam runs at ZeRO 0-3, f32, on data-parallel ranks",
      "each gradient bucket's reduce-scatter exchanges this rank's "
      "momentum, 1-bit with error feedback per partition (no server "
      "compression and no all-gather of the momentum as at ZeRO-0)",
      "int8 update deltas of replicated parameters, int8 stage-3 shards; ");
}

void takeOutGradientReduces(func::FuncOp func) {
  Operation *ret = func.getBody().front().getTerminator();
  llvm::SetVector<Operation *> found;
  for (unsigned i = 0; i < ret->getNumOperands(); ++i)
    if (func.getResultAttr(i, "ds.grad"))
      findGradientReduces(ret->getOperand(i), found);
  for (Operation *op : found) {
    op->getResult(0).replaceAllUsesWith(op->getOperand(0));
    op->erase();
  }
}

} // namespace mlir::ds::optimizer
