//===- ZeroOneAdam.cpp - DeepSpeed's 0/1 Adam as an update rule -----------===//
//
// Part of the ds project.
//
// The `zero-one-adam` rule of --ds-optimizer (docs/compression.md). Its
// update op, `ds.zero_one_adam`, runs the data-parallel exchange itself
// (the all-reduced gradient at variance steps, the 1-bit compressed
// gradient between them, the compressed accumulated update at the
// synchronisations of the local-step phase), so ZeRO-0's gradient
// all-reduce is taken out as for 1-bit Adam (OneBitAdam.cpp), and what the
// rule does not run yet is refused by name.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdate.h"
#include "ds/Dialect/Ds/IR/DsCompression.h"
#include "ds/Support/OneBit.h"
#include "ds/Transforms/Sharding.h"

namespace mlir::ds::optimizer {

UpdateOutput buildZeroOneAdam(OpBuilder &b, const UpdateInput &in,
                              const Hyperparameters &hp, AddStateFn addState) {
  Value m = addState("exp_avg");
  Value v = addState("exp_avg_sq");
  auto t = cast<RankedTensorType>(in.grad.getType());
  auto [we, se] = addOneBitErrors(b, in);
  Value u = addState("momentum_accumulator");
  auto countersType = RankedTensorType::get({5}, b.getI64Type());
  Value counters = in.addTypedState("zero_one_counters", countersType);
  const LrSchedule &s = hp.schedule;
  SmallVector<Type> types{t, t, t, we.getType(), se.getType(), t,
                          countersType};
  auto op = ZeroOneAdamOp::create(
      b, in.loc, types, in.param, in.grad, m, v, we, se, u, counters, in.step,
      b.getF64FloatAttr(hp.lr), b.getF64FloatAttr(hp.beta1),
      b.getF64FloatAttr(hp.beta2), b.getF64FloatAttr(hp.eps),
      b.getF64FloatAttr(hp.weightDecay),
      b.getI64IntegerAttr(hp.zeroOne.varFreezeStep),
      b.getI64IntegerAttr(hp.zeroOne.varUpdateScaler),
      b.getI64IntegerAttr(hp.zeroOne.localStepScaler),
      b.getI64IntegerAttr(hp.zeroOne.localStepClipper),
      b.getStringAttr(s.kind), b.getI64IntegerAttr(s.warmupSteps),
      b.getI64IntegerAttr(s.totalSteps), b.getF64FloatAttr(s.minLr));
  return {op.getNewParam(),
          {{"exp_avg", op.getNewExpAvg()},
           {"exp_avg_sq", op.getNewExpAvgSq()},
           {"worker_error", op.getNewWorkerError()},
           {"server_error", op.getNewServerError()},
           {"momentum_accumulator", op.getNewMomentumAcc()},
           {"zero_one_counters", op.getNewCounters()}},
          Value()};
}

LogicalResult prepareZeroOneAdam(func::FuncOp func,
                                 const Hyperparameters &hp) {
  if (!::ds::zeroone::validPolicy(hp.zeroOne))
    return func.emitError("zero-one-adam: var-freeze-step must not be "
                          "negative and var-update-scaler, local-step-scaler "
                          "and local-step-clipper must be at least 1");
  return prepareAtZeroZero(
      func, hp, "zero-one-adam",
      "0/1 Adam runs at ZeRO-0, f32, on data-parallel ranks");
}

} // namespace mlir::ds::optimizer
