//===- OneBitLamb.cpp - DeepSpeed's 1-bit LAMB as an update rule ----------===//
//
// Part of the ds project.
//
// The `onebit-lamb` rule of --ds-optimizer (docs/compression.md). Its
// update op, `ds.onebit_lamb`, runs the data-parallel exchange itself (the
// all-reduced gradient during the warm-up, the 1-bit compressed momentum
// after the freeze), so ZeRO-0's gradient all-reduce is taken out as for
// 1-bit Adam (OneBitAdam.cpp), and what the rule does not run yet is
// refused by name.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdate.h"
#include "ds/Dialect/Ds/IR/DsCompression.h"
#include "ds/Transforms/Sharding.h"

namespace mlir::ds::optimizer {

UpdateOutput buildOneBitLamb(OpBuilder &b, const UpdateInput &in,
                             const Hyperparameters &hp, AddStateFn addState) {
  Value m = addState("exp_avg");
  Value v = addState("exp_avg_sq");
  Value vFresh = addState("exp_avg_sq_fresh");
  auto t = cast<RankedTensorType>(in.grad.getType());
  auto [we, se] = addOneBitErrors(b, in);
  auto coeffsType = RankedTensorType::get({2}, b.getF32Type());
  Value coeffs = in.addTypedState("lamb_coeffs", coeffsType);
  const LrSchedule &s = hp.schedule;
  const OneBitLambParams &l = hp.oneBitLamb;
  SmallVector<Type> types{t, t, t, t, we.getType(), se.getType(), coeffsType};
  auto f = [&](double x) { return b.getF64FloatAttr(x); };
  auto op = OneBitLambOp::create(
      b, in.loc, types, in.param, in.grad, m, v, vFresh, we, se, coeffs,
      in.step, f(hp.lr), f(hp.beta1), f(hp.beta2), f(hp.eps),
      f(hp.weightDecay), b.getI64IntegerAttr(hp.freezeStep), f(hp.maxCoeff),
      f(hp.minCoeff), f(l.coeffBeta), f(l.factorMax), f(l.factorMin),
      f(l.factorThreshold), b.getStringAttr(s.kind),
      b.getI64IntegerAttr(s.warmupSteps), b.getI64IntegerAttr(s.totalSteps),
      f(s.minLr));
  return {op.getNewParam(),
          {{"exp_avg", op.getNewExpAvg()},
           {"exp_avg_sq", op.getNewExpAvgSq()},
           {"exp_avg_sq_fresh", op.getNewExpAvgSqFresh()},
           {"worker_error", op.getNewWorkerError()},
           {"server_error", op.getNewServerError()},
           {"lamb_coeffs", op.getNewCoeffs()}},
          Value()};
}

LogicalResult prepareOneBitLamb(func::FuncOp func, const Hyperparameters &hp) {
  const OneBitLambParams &l = hp.oneBitLamb;
  if (!(l.factorMin > 0 && l.factorMin <= l.factorMax) ||
      !(hp.minCoeff > 0 && hp.minCoeff <= hp.maxCoeff) ||
      !(l.coeffBeta >= 0 && l.coeffBeta < 1) || !(l.factorThreshold >= 0))
    return func.emitError("onebit-lamb: expects 0 < factor-min <= "
                          "factor-max, 0 < lamb-min-coeff <= lamb-max-coeff, "
                          "0 <= coeff-beta < 1 and factor-threshold >= 0");
  return prepareAtZeroZero(
      func, hp, "onebit-lamb",
      "1-bit LAMB runs at ZeRO-0, f32, on data-parallel ranks");
}

} // namespace mlir::ds::optimizer
