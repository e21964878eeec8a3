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
  // ZeRO 1-2: 1-bit Adam's partition ops, following the policy's phases.
  if (auto part = buildCompressedPartition(b, in, hp, addState, &hp.zeroOne))
    return std::move(*part);
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
  const char *scope = "0/1 Adam runs at ZeRO 0-2, f32, on data-parallel ranks";
  auto stage = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
  if (!stage || stage.getInt() == 0)
    return prepareAtZeroZero(func, hp, "zero-one-adam", scope);
  if (stage.getInt() > 2)
    return func.emitError("zero-one-adam with ZeRO stage ")
           << stage.getInt()
           << " is not supported (its local steps would still gather every "
              "partitioned parameter; docs/compression.md)";
  // ZeRO 1-2: the updates take over the bucket reduce-scatters and the
  // parameter all-gathers (OneBitAdam.cpp), phase by phase.
  if (failed(checkCompressedLayout(func, hp, "zero-one-adam", scope)))
    return failure();
  func.emitWarning("zero-one-adam with ZeRO stage ")
      << stage.getInt()
      << ": each rank's local steps move its own partition only, and the "
         "synchronisations send each partition's accumulated steps as int8 "
         "(docs/compression.md)";
  return success();
}

} // namespace mlir::ds::optimizer
