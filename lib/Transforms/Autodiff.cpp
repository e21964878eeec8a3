//===- Autodiff.cpp - reverse-mode gradients through VJPOpInterface -------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir::ds {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

struct AutodiffPass : impl::AutodiffPassBase<AutodiffPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    Block &body = func.getBody().front();
    Operation *ret = body.getTerminator();
    std::optional<unsigned> loss;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, attrs::kLoss))
        loss = i;
    if (!loss) {
      func.emitError("autodiff needs a loss: no result is marked ds.loss "
                     "(choose one with --loss)");
      return signalPassFailure();
    }
    Value lossValue = ret->getOperand(*loss);
    auto lossType = cast<RankedTensorType>(lossValue.getType());
    if (lossType.getNumElements() != 1 ||
        !isa<FloatType>(lossType.getElementType())) {
      func.emitError("the loss must be a float scalar, got ") << lossType;
      return signalPassFailure();
    }

    OpBuilder b(ret);
    llvm::DenseMap<Value, Value> grads;
    auto accumulate = [&](Value v, Value g) {
      auto [it, inserted] = grads.try_emplace(v, g);
      if (!inserted)
        it->second = AddOp::create(b, g.getLoc(), v.getType(), it->second, g);
    };
    auto lossTensor = cast<RankedTensorType>(lossType);
    accumulate(lossValue,
               ConstantOp::create(b, func.getLoc(), lossTensor,
                                  DenseElementsAttr::get(
                                      lossTensor,
                                      ArrayRef<Attribute>(FloatAttr::get(
                                          lossType.getElementType(), 1.0)))));

    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      forwardOps.push_back(&op);
    for (Operation *op : llvm::reverse(forwardOps)) {
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        resultGrads.push_back(grads.lookup(r));
        any |= static_cast<bool>(resultGrads.back());
      }
      if (!any || op->getNumOperands() == 0)
        continue;
      auto vjp = dyn_cast<VJPOpInterface>(op);
      if (!vjp) {
        if (llvm::none_of(op->getOperands(), isFloatTensor))
          continue; // nothing differentiable flows through it
        op->emitOpError("has no gradient rule (VJP) on the path to the loss");
        return signalPassFailure();
      }
      SmallVector<Value> operandGrads;
      if (failed(vjp.buildVJP(b, resultGrads, operandGrads)))
        return signalPassFailure();
      for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
        if (g && isFloatTensor(operand))
          accumulate(operand, g);
    }

    // Gradients of the trainable parameters become results.
    SmallVector<Value> results(ret->getOperands());
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      resultAttrs.push_back(func.getResultAttrDict(i));
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kParam);
      if (!name || !func.getArgAttr(i, attrs::kTrainable))
        continue;
      Value g = grads.lookup(arg);
      if (!g) {
        auto t = cast<RankedTensorType>(arg.getType());
        g = ConstantOp::create(
            b, func.getLoc(), t,
            DenseElementsAttr::get(t, ArrayRef<Attribute>(FloatAttr::get(
                                          t.getElementType(), 0.0))));
      }
      results.push_back(g);
      resultAttrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr(attrs::kOutput,
                          b.getStringAttr("grad:" + name.str())),
           b.getNamedAttr("ds.grad", name)}));
    }
    ret->setOperands(results);
    func.setType(FunctionType::get(func.getContext(),
                                   body.getArgumentTypes(),
                                   ValueRange(results).getTypes()));
    func.setAllResultAttrs(resultAttrs);
  }
};
} // namespace
} // namespace mlir::ds
