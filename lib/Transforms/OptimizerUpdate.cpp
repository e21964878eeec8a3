//===- OptimizerUpdate.cpp - per-optimizer update rules -------------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "OptimizerUpdate.h"

namespace mlir::ds::optimizer {
namespace {

/// The result types of an update op: the new parameter, one per state
/// tensor, and the new accumulated gradient when there is one.
SmallVector<Type> updateTypes(const UpdateInput &in, unsigned states) {
  SmallVector<Type> types(1 + states, in.grad.getType());
  if (in.gradAccum)
    types.push_back(in.grad.getType());
  return types;
}

/// Adam and its relatives: torch's Adam (L2 weight decay), AdamW (decoupled
/// weight decay) and Lamb (Adam's step scaled by the trust ratio).
UpdateOutput buildAdamFamily(OpBuilder &b, const UpdateInput &in,
                             const Hyperparameters &hp, AddStateFn addState,
                             bool decoupled, bool lamb) {
  Value m = addState("exp_avg");
  Value v = addState("exp_avg_sq");
  const LrSchedule &s = hp.schedule;
  auto op = AdamOp::create(
      b, in.loc, updateTypes(in, 2), in.param, in.grad, m, v, in.step,
      in.gradAccum, in.clipCoef, b.getF64FloatAttr(hp.lr), b.getF64FloatAttr(hp.beta1),
      b.getF64FloatAttr(hp.beta2), b.getF64FloatAttr(hp.eps),
      b.getF64FloatAttr(hp.weightDecay), b.getBoolAttr(decoupled),
      b.getBoolAttr(lamb), b.getStringAttr(s.kind),
      b.getI64IntegerAttr(s.warmupSteps), b.getI64IntegerAttr(s.totalSteps),
      b.getF64FloatAttr(s.minLr), b.getI64IntegerAttr(hp.gradAccum),
      b.getBoolAttr(hp.biasCorrection), b.getF64FloatAttr(hp.maxCoeff),
      b.getF64FloatAttr(hp.minCoeff));
  // ZeRO 1-3: the kernel sums the partition's squares over the ranks, so
  // that the trust ratio is the whole tensor's (docs/compression.md).
  if (lamb && in.partitioned)
    op.setNormOverRanks(true);
  return {op.getNewParam(),
          {{"exp_avg", op.getNewExpAvg()}, {"exp_avg_sq", op.getNewExpAvgSq()}},
          op.getNewGradAccum()};
}

UpdateOutput buildAdam(OpBuilder &b, const UpdateInput &in,
                       const Hyperparameters &hp, AddStateFn addState) {
  return buildAdamFamily(b, in, hp, addState, /*decoupled=*/false,
                         /*lamb=*/false);
}

UpdateOutput buildAdamW(OpBuilder &b, const UpdateInput &in,
                        const Hyperparameters &hp, AddStateFn addState) {
  return buildAdamFamily(b, in, hp, addState, /*decoupled=*/true,
                         /*lamb=*/false);
}

UpdateOutput buildLamb(OpBuilder &b, const UpdateInput &in,
                       const Hyperparameters &hp, AddStateFn addState) {
  return buildAdamFamily(b, in, hp, addState, /*decoupled=*/false,
                         /*lamb=*/true);
}

/// SGD with optional momentum (a momentum buffer only when momentum is not
/// zero), dampening and Nesterov momentum, as torch.optim.SGD.
UpdateOutput buildSgd(OpBuilder &b, const UpdateInput &in,
                      const Hyperparameters &hp, AddStateFn addState) {
  bool withMomentum = hp.momentum != 0.0;
  Value buf = withMomentum ? addState("momentum_buffer") : in.grad;
  const LrSchedule &s = hp.schedule;
  auto op = SgdOp::create(
      b, in.loc, updateTypes(in, 1), in.param, in.grad, buf, in.step,
      in.gradAccum, in.clipCoef, b.getF64FloatAttr(hp.lr), b.getF64FloatAttr(hp.momentum),
      b.getF64FloatAttr(hp.dampening), b.getF64FloatAttr(hp.weightDecay),
      b.getBoolAttr(hp.nesterov), b.getStringAttr(s.kind),
      b.getI64IntegerAttr(s.warmupSteps), b.getI64IntegerAttr(s.totalSteps),
      b.getF64FloatAttr(s.minLr), b.getI64IntegerAttr(hp.gradAccum));
  UpdateOutput out{op.getNewParam(), {}, op.getNewGradAccum()};
  if (withMomentum)
    out.newState.push_back({"momentum_buffer", op.getNewMomentumBuffer()});
  return out;
}

const UpdateRule kRules[] = {
    {"adam", buildAdam, /*needsWholeTensors=*/false},
    {"adamw", buildAdamW, /*needsWholeTensors=*/false},
    {"sgd", buildSgd, /*needsWholeTensors=*/false},
    {"lamb", buildLamb, /*needsWholeTensors=*/true}, // ZeRO: norm_over_ranks
    {"onebit-adam", buildOneBitAdam, /*needsWholeTensors=*/false,
     prepareOneBitAdam},
    {"zero-one-adam", buildZeroOneAdam, /*needsWholeTensors=*/false,
     prepareZeroOneAdam},
    {"onebit-lamb", buildOneBitLamb, /*needsWholeTensors=*/true,
     prepareOneBitLamb},
};

} // namespace

ArrayRef<UpdateRule> updateRules() { return kRules; }

const UpdateRule *lookupUpdateRule(StringRef name) {
  for (const UpdateRule &rule : kRules)
    if (rule.name == name)
      return &rule;
  return nullptr;
}

std::string updateRuleNames() {
  std::string names;
  ArrayRef<UpdateRule> rules = updateRules();
  for (size_t i = 0; i < rules.size(); ++i) {
    if (i > 0)
      names += i + 1 == rules.size() ? " or " : ", ";
    names += rules[i].name.str();
  }
  return names;
}

} // namespace mlir::ds::optimizer
