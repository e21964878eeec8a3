//===- MixedPrecision.cpp - 16-bit compute with fp32 master weights -------===//
//
// Part of the ds project.
//
// Runs on the forward pass, before autodiff. Trainable parameters become
// 16-bit arguments (the optimizer pass adds their f32 master copies), and
// every float op computes in 16 bits, except the ops marked Ds_F32Island
// (softmax, LayerNorm, losses, reductions) or `ds.f32_island` (the parts of
// BatchNormalization), whose 16-bit operands are cast up to f32. Other f32
// values (inputs, buffers, constants) are cast down once. With auto-cast
// (DeepSpeed's fp16.auto_cast) the f32 graph inputs are rounded to fp16
// first, so f32 islands read the rounded values too. Graph results keep
// their types. Autodiff then differentiates
// through the casts: gradients flow, and reach each weight, in 16 bits.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"
#include "mlir/IR/Verifier.h"

namespace mlir::ds {
#define GEN_PASS_DEF_MIXEDPRECISIONPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

bool isF32Tensor(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r && r.getElementType().isF32();
}

struct MixedPrecisionPass : impl::MixedPrecisionPassBase<MixedPrecisionPass> {
  using MixedPrecisionPassBase::MixedPrecisionPassBase;

  /// DeepSpeed's fp16.auto_cast: every f32 graph input (not a parameter,
  /// buffer or ds.* input) is rounded to `half` once, at the start; 16-bit
  /// ops read the rounded value, f32 islands its cast back up.
  void roundInputs(func::FuncOp func, Type half,
                   llvm::DenseMap<std::pair<Value, Type>, Value> &casts) {
    Block &body = func.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kInput);
      if (!name || name.getValue().starts_with("ds.") ||
          func.getArgAttr(i, attrs::kParam) || !isF32Tensor(arg.getType()) ||
          arg.use_empty())
        continue;
      auto wide = cast<RankedTensorType>(arg.getType());
      OpBuilder cb(func.getContext());
      cb.setInsertionPointToStart(&body);
      auto down = CastOp::create(cb, arg.getLoc(), wide.clone(half), arg);
      auto up = CastOp::create(cb, arg.getLoc(), wide, down.getResult());
      arg.replaceAllUsesExcept(up.getResult(), down);
      casts[{up.getResult(), half}] = down.getResult();
    }
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    OpBuilder b(func.getContext());
    Type half;
    if (precision == "fp32")
      return;
    if (precision == "bf16") {
      half = b.getBF16Type();
    } else if (precision == "fp16") {
      half = b.getF16Type();
    } else {
      func.emitError("unknown precision '")
          << precision << "' (choose fp32, fp16 or bf16)";
      return signalPassFailure();
    }
    func->setAttr("ds.precision", b.getStringAttr(precision));
    Block &body = func.getBody().front();
    if (precision == "fp16") {
      // fp16 gradients underflow without loss scaling: the runtime's
      // scaler gives the scale each step as input `ds.loss_scale`, which
      // autodiff seeds the backward pass with.
      auto scalar = RankedTensorType::get({}, b.getF32Type());
      body.addArgument(scalar, func.getLoc());
      SmallVector<DictionaryAttr> argAttrs;
      for (unsigned i = 0; i + 1 < body.getNumArguments(); ++i)
        argAttrs.push_back(func.getArgAttrDict(i));
      argAttrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("ds.loss_scale", b.getUnitAttr()),
           b.getNamedAttr(attrs::kInput, b.getStringAttr("ds.loss_scale"))}));
      func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                     func.getResultTypes()));
      func.setAllArgAttrs(argAttrs);
    }
    // The value of `v` with element type `to`, by a cast placed after `v`'s
    // definition (one per value and type).
    llvm::DenseMap<std::pair<Value, Type>, Value> casts;
    auto as = [&](Value v, Type to) -> Value {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      if (!t || !isa<FloatType>(t.getElementType()) ||
          t.getElementType() == to)
        return v;
      Value &c = casts[{v, to}];
      if (!c) {
        OpBuilder cb(func.getContext());
        cb.setInsertionPointAfterValue(v);
        c = CastOp::create(cb, v.getLoc(), t.clone(to), v);
      }
      return c;
    };
    // Trainable f32 parameters become 16-bit arguments: the weights the
    // step computes with, kept between steps. The optimizer pass gives each
    // an f32 master copy. An f32 island reads the cast up of the 16-bit
    // weight.
    SmallVector<Type> argTypes(body.getArgumentTypes());
    bool retyped = false;
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      if (!func.getArgAttr(i, attrs::kParam) ||
          !func.getArgAttr(i, attrs::kTrainable) || !isF32Tensor(arg.getType()))
        continue;
      auto wide = cast<RankedTensorType>(arg.getType());
      arg.setType(wide.clone(half));
      argTypes[i] = arg.getType();
      retyped = true;
      if (arg.use_empty())
        continue;
      OpBuilder cb(func.getContext());
      cb.setInsertionPointToStart(&body);
      auto up = CastOp::create(cb, arg.getLoc(), wide, arg);
      arg.replaceAllUsesExcept(up, up);
      casts[{up.getResult(), half}] = arg;
    }
    if (retyped)
      func.setType(FunctionType::get(func.getContext(), argTypes,
                                     func.getResultTypes()));
    if (autoCast && precision == "fp16")
      roundInputs(func, half, casts);
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (!isa<DsDialect>(op->getDialect()) ||
          op->hasTrait<OpTrait::ConstantLike>() || isa<CastOp>(op))
        continue;
      // `ds.f32_island`: an op of a composition the importer keeps in f32
      // (BatchNormalization's statistics and running-stat updates).
      bool island =
          op->hasTrait<DsF32Island>() || op->hasAttr("ds.f32_island");
      Type compute = island ? Type(b.getF32Type()) : half;
      bool anyFloat = false;
      for (Value r : op->getResults())
        anyFloat |= isa<FloatType>(getElementTypeOrSelf(r.getType()));
      for (Value v : op->getOperands())
        anyFloat |= isa<FloatType>(getElementTypeOrSelf(v.getType()));
      if (!anyFloat)
        continue;
      // Float operands in the compute type; float results too.
      for (OpOperand &use : op->getOpOperands())
        use.set(as(use.get(), compute));
      for (Value r : op->getResults())
        if (auto t = dyn_cast<RankedTensorType>(r.getType());
            t && isa<FloatType>(t.getElementType()))
          r.setType(t.clone(compute));
    }
    // Graph results keep their declared types.
    Operation *ret = body.getTerminator();
    for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
      Type want = func.getResultTypes()[i];
      Value v = ret->getOperand(i);
      if (v.getType() != want)
        ret->setOperand(i, as(v, cast<RankedTensorType>(want).getElementType()));
    }
    // Every op verifies with its new types.
    for (Operation *op : ops)
      if (failed(mlir::verify(op))) {
        op->emitError("cannot compute in ") << precision;
        return signalPassFailure();
      }
    // Up-casts of 16-bit weights that no f32 island reads.
    for (Operation &op : llvm::make_early_inc_range(body.without_terminator()))
      if (auto c = dyn_cast<CastOp>(op);
          c && c->use_empty() && isa<BlockArgument>(c.getInput()))
        c->erase();
  }
};
} // namespace
} // namespace mlir::ds
