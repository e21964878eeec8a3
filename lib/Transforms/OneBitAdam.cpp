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
// `ds.compressed_reduce_scatter` (plain until the freeze, 1-bit with a
// worker error per partition after it) and `ds.onebit_adam_local`
// updates this rank's partition; ZeRO's parameter all-gather follows.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdate.h"
#include "ds/Dialect/Ds/IR/DsCompression.h"
#include "ds/Support/OneBit.h"
#include "ds/Transforms/Sharding.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::ds::optimizer {

namespace {
/// The gradient bucket's reduce-scatter (or the compressed one that
/// replaced it) a ZeRO gradient shard comes from, through the split of
/// the bucket; null at stage 0.
Operation *findBucketExchange(Value grad) {
  Operation *def = grad.getDefiningOp();
  if (isa_and_nonnull<SplitOp>(def))
    def = def->getOperand(0).getDefiningOp();
  if (isa_and_nonnull<ReduceScatterOp, CompressedReduceScatterOp>(def))
    return def;
  return nullptr;
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
  Value grad = in.grad;
  UpdateOutput out;
  if (auto rs = dyn_cast<ReduceScatterOp>(exchange)) {
    Type bucket = rs.getInput().getType();
    Value we = in.addTypedState("worker_error", bucket);
    OpBuilder rb(rs);
    auto crs = CompressedReduceScatterOp::create(
        rb, rs.getLoc(), TypeRange{rs.getResult().getType(), bucket},
        rs.getInput(), we, in.step, rb.getI64IntegerAttr(hp.freezeStep));
    if (grad == rs.getResult())
      grad = crs.getResult();
    rs.getResult().replaceAllUsesWith(crs.getResult());
    rs.erase();
    out.newState.push_back({"worker_error", crs.getNewWorkerError()});
  }
  const LrSchedule &s = hp.schedule;
  Type t = in.param.getType();
  auto op = OneBitAdamLocalOp::create(
      b, in.loc, TypeRange{t, t, t}, in.param, grad, m, v, in.step,
      b.getF64FloatAttr(hp.lr), b.getF64FloatAttr(hp.beta1),
      b.getF64FloatAttr(hp.beta2), b.getF64FloatAttr(hp.eps),
      b.getF64FloatAttr(hp.weightDecay), b.getI64IntegerAttr(hp.freezeStep),
      b.getStringAttr(s.kind), b.getI64IntegerAttr(s.warmupSteps),
      b.getI64IntegerAttr(s.totalSteps), b.getF64FloatAttr(s.minLr));
  out.newParam = op.getNewParam();
  out.newState.insert(out.newState.begin(),
                      {{"exp_avg", op.getNewExpAvg()},
                       {"exp_avg_sq", op.getNewExpAvgSq()}});
  return out;
}
} // namespace

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
  if (func->hasAttr("ds.pipeline"))
    return refuse("pipeline parallelism");
  if (func->hasAttr("ds.tensor_parallel"))
    return refuse("tensor parallelism");
  if (hp.gradAccum > 1)
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

LogicalResult prepareOneBitAdam(func::FuncOp func, const Hyperparameters &hp) {
  if (failed(checkCompressedLayout(
          func, hp, "onebit-adam",
          "1-bit Adam runs at ZeRO 0-3, f32, on data-parallel ranks")))
    return failure();
  auto stage = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
  if (stage && stage.getInt() > 0) {
    // ZeRO 1-3: the updates take over the reduce-scatters. DeepSpeed has no
    // 1-bit Adam under ZeRO; ds's differs from its ZeRO-0 algorithm, and
    // says so once.
    func.emitWarning("onebit-adam with ZeRO stage ")
        << stage.getInt()
        << ": after the freeze each gradient bucket's reduce-scatter is "
           "compressed (error feedback per partition), not the momentum as "
           "at ZeRO-0 (docs/compression.md)";
    return success();
  }
  takeOutGradientReduces(func);
  return success();
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
