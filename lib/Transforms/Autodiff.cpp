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
      auto diag = func.emitError("autodiff needs a loss: ");
      if (auto names = func->getAttrOfType<ArrayAttr>("ds.loss_candidates")) {
        diag << "the graph has several scalar float outputs (";
        llvm::interleaveComma(names.getAsValueRange<StringAttr>(), diag);
        diag << "); choose the loss with --loss=NAME";
      } else {
        diag << "no result is marked ds.loss (choose one with --loss)";
      }
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
    auto lossTensor = cast<RankedTensorType>(lossType);
    // With loss scaling the backward pass starts from the scale (an input
    // the runtime sets each step), not from 1.
    Value seed;
    for (BlockArgument arg : body.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), "ds.loss_scale") &&
          arg.getType() == lossType)
        seed = arg;
    if (!seed)
      seed = ConstantOp::create(
          b, func.getLoc(), lossTensor,
          DenseElementsAttr::get(lossTensor,
                                 ArrayRef<Attribute>(FloatAttr::get(
                                     lossType.getElementType(), 1.0))));
    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      if (&op != seed.getDefiningOp())
        forwardOps.push_back(&op);
    SmallVector<Value> args(body.getArguments().begin(),
                            body.getArguments().end());
    FailureOr<SmallVector<Value>> argGrads =
        buildGradients(b, forwardOps, lossValue, seed, args);
    if (failed(argGrads))
      return signalPassFailure();

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
      Value g = (*argGrads)[i];
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
