//===- GradAccumulate.cpp - a pipeline stage's local gradient sum ---------===//
//
// Part of the ds project.
//
// DeepSpeed's pipeline engine adds each micro-batch's gradients into the
// parameters' .grad and reduces them over the data-parallel ranks once,
// after the last micro-batch. A ds pipeline stage does the same: the
// backward section adds each gradient to `grad_accum` (in place, f32) as
// soon as it is made, the update section (which ds-run runs once per
// step, `update_once` in the plan) reduces the sums, scales them by 1/M,
// updates and zeroes the sums. GradAccumulate.h.
//
//===----------------------------------------------------------------------===//

#include "GradAccumulate.h"

#include "llvm/ADT/StringSet.h"

namespace mlir::ds::accumulate {
namespace {

/// A scalar constant of `type`'s element type.
Value scalar(OpBuilder &b, Location loc, Type element, Attribute value) {
  auto t = RankedTensorType::get({}, element);
  return ConstantOp::create(b, loc, t,
                            DenseElementsAttr::get(t, ArrayRef(value)));
}

DictionaryAttr updateAttr(OpBuilder &b, StringRef name) {
  return b.getDictionaryAttr(
      {b.getNamedAttr("ds.update", b.getStringAttr(name)),
       b.getNamedAttr(attrs::kOutput,
                      b.getStringAttr("update:" + name.str()))});
}

} // namespace

void sumLocally(func::FuncOp func, int64_t accumSteps) {
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  OpBuilder b(ret);
  Location loc = func.getLoc();
  SmallVector<Value> results(ret->getOperands());
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    resultAttrs.push_back(func.getResultAttrDict(i));
  SmallVector<DictionaryAttr> argAttrs;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    argAttrs.push_back(func.getArgAttrDict(i));
  for (unsigned i = 0, e = results.size(); i < e; ++i) {
    auto name = func.getResultAttrOfType<StringAttr>(i, "ds.grad");
    if (!name)
      continue;
    Value g = results[i];
    auto type = cast<RankedTensorType>(g.getType());
    auto f32 = type.clone(b.getF32Type());
    // Added as soon as the backward makes it, so that the gradient itself
    // dies there (the sum is the stage's whole gradient already).
    OpBuilder at(ret);
    if (Operation *def = g.getDefiningOp())
      at.setInsertionPointAfter(def);
    if (type != f32)
      g = CastOp::create(at, g.getLoc(), f32, g);
    std::string accName = name.str() + ".grad_accum";
    BlockArgument acc = body.addArgument(f32, loc);
    argAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("ds.state", b.getStringAttr(accName)),
         b.getNamedAttr(kAccumulator, b.getUnitAttr())}));
    Value sum = AddOp::create(at, g.getLoc(), f32, acc, g);
    results[i] = sum;
    results.push_back(sum);
    resultAttrs.push_back(updateAttr(b, accName));
  }
  // The update section: what the data-parallel pass and the optimizer
  // build before the terminator from here on runs once per step.
  PipeMarkOp::create(b, loc)->setAttr("update", b.getI64IntegerAttr(1));
  ret->setOperands(results);
  func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  func.setAllArgAttrs(argAttrs);
  func.setAllResultAttrs(resultAttrs);
  func->setAttr(kAccumulateOnce, b.getI64IntegerAttr(accumSteps));
}

int64_t accumulatedSteps(func::FuncOp func) {
  auto a = func->getAttrOfType<IntegerAttr>(kAccumulateOnce);
  return a ? a.getInt() : 0;
}

StepCounter countSteps(OpBuilder &b, Location loc, Value step,
                       int64_t accumSteps) {
  Type i64 = b.getI64Type();
  auto s = RankedTensorType::get({}, i64);
  auto c = [&](int64_t v) {
    return scalar(b, loc, i64, b.getI64IntegerAttr(v));
  };
  Value run = SubOp::create(b, loc, s, step, c(1)); // 0-based
  Value done = DivOp::create(b, loc, s, run, c(accumSteps));
  StepCounter out;
  out.updates = AddOp::create(b, loc, s, done, c(1));
  Value micro = SubOp::create(b, loc, s, run,
                              MulOp::create(b, loc, s, done, c(accumSteps)));
  out.lastMicro =
      EqualOp::create(b, loc, RankedTensorType::get({}, b.getI1Type()), micro,
                      c(accumSteps - 1));
  out.inverse = scalar(b, loc, b.getF32Type(),
                       b.getF32FloatAttr(1.0f / static_cast<float>(accumSteps)));
  return out;
}

void zeroSums(func::FuncOp func, OpBuilder &b, Value lastMicro,
              SmallVectorImpl<Value> &results,
              SmallVectorImpl<DictionaryAttr> &resultAttrs) {
  llvm::StringSet<> sums;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, kAccumulator))
      sums.insert(func.getArgAttrOfType<StringAttr>(i, "ds.state").getValue());
  Value zero;
  for (unsigned i = 0, e = results.size(); i < e; ++i) {
    auto target = resultAttrs[i]
                      ? resultAttrs[i].getAs<StringAttr>("ds.update")
                      : StringAttr();
    if (!target || !sums.contains(target.getValue()))
      continue;
    Value sum = results[i];
    Location loc = sum.getLoc();
    if (!zero)
      zero = scalar(b, loc, b.getF32Type(), b.getF32FloatAttr(0.0f));
    // Written over the sum in place, after every read of it.
    results.push_back(
        WhereOp::create(b, loc, sum.getType(), lastMicro, zero, sum));
    resultAttrs.push_back(updateAttr(b, target.getValue()));
  }
}

} // namespace mlir::ds::accumulate
