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
    // A pipeline stage (docs/design.md section 10): its backward starts from
    // the gradients the next stage sends back for what this one sent, and
    // ends by sending the gradients of what it received.
    bool stage = static_cast<bool>(func->getAttr("ds.pipeline"));
    std::optional<unsigned> loss;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, attrs::kLoss))
        loss = i;
    SmallVector<PipeSendOp> sends;
    SmallVector<PipeRecvOp> recvs;
    for (Operation &op : body) {
      if (auto s = dyn_cast<PipeSendOp>(op); s && s->hasAttr("ds.needs_grad"))
        sends.push_back(s);
      if (auto r = dyn_cast<PipeRecvOp>(op); r && r->hasAttr("ds.needs_grad"))
        recvs.push_back(r);
    }
    if (!loss && !(stage && !sends.empty())) {
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
    OpBuilder b(ret);
    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      forwardOps.push_back(&op);
    if (stage)
      PipeMarkOp::create(b, func.getLoc());
    SmallVector<std::pair<Value, Value>> seeds;
    if (loss) {
      Value lossValue = ret->getOperand(*loss);
      auto lossType = cast<RankedTensorType>(lossValue.getType());
      if (lossType.getNumElements() != 1 ||
          !isa<FloatType>(lossType.getElementType())) {
        func.emitError("the loss must be a float scalar, got ") << lossType;
        return signalPassFailure();
      }
      // With loss scaling the backward pass starts from the scale (an input
      // the runtime sets each step), not from 1.
      Value seed;
      for (BlockArgument arg : body.getArguments())
        if (func.getArgAttr(arg.getArgNumber(), "ds.loss_scale") &&
            arg.getType() == lossType)
          seed = arg;
      if (!seed)
        seed = ConstantOp::create(
            b, func.getLoc(), lossType,
            DenseElementsAttr::get(lossType,
                                   ArrayRef<Attribute>(FloatAttr::get(
                                       lossType.getElementType(), 1.0))));
      seeds.push_back({lossValue, seed});
    }
    for (PipeSendOp s : sends)
      seeds.push_back(
          {s.getInput(),
           PipeRecvOp::create(b, s.getLoc(), s.getInput().getType(),
                              s.getPeerAttr(),
                              b.getI64IntegerAttr(s.getTag() + 1))});
    SmallVector<Value> args(body.getArguments().begin(),
                            body.getArguments().end());
    for (PipeRecvOp r : recvs)
      args.push_back(r.getResult());
    FailureOr<SmallVector<Value>> argGrads =
        buildGradients(b, forwardOps, seeds, args);
    if (failed(argGrads))
      return signalPassFailure();
    // The gradients of the received activations go back, in tag order
    // (a backward message's tag is its forward one's plus 1).
    for (auto [k, r] : llvm::enumerate(recvs)) {
      Value g = (*argGrads)[body.getNumArguments() + k];
      auto t = cast<RankedTensorType>(r.getType());
      if (!g)
        g = ConstantOp::create(
            b, r.getLoc(), t,
            DenseElementsAttr::get(t, ArrayRef<Attribute>(FloatAttr::get(
                                          t.getElementType(), 0.0))));
      PipeSendOp::create(b, r.getLoc(), g, r.getPeerAttr(),
                         b.getI64IntegerAttr(r.getTag() + 1));
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
