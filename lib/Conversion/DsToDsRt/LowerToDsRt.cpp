//===- LowerToDsRt.cpp - ds tensors to dsrt buffers and kernels -----------===//
//
// Part of the ds project.
//
// The pass: lowers @forward's arguments, then walks its body once in
// program order, offering each op to the op families (Lowering.h) and the
// return to the outputs' lowering, and finally erases the tensor program.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "ds/Transforms/Passes.h"

namespace mlir::ds {
#define GEN_PASS_DEF_LOWERTODSRTPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

using namespace lowering;

/// Lowers each op of @forward's body with the first family that matches.
LogicalResult lowerBody(LoweringState &state, const OpLowerings &lowerings) {
  Block &body = state.func.getBody().front();
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (isa_and_nonnull<dsrt::DsRtDialect>(op.getDialect()))
      continue;
    state.builder.setInsertionPoint(&op);
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (failed(lowerReturn(ret, state)))
        return failure();
      continue;
    }
    const auto *lowering =
        llvm::find_if(lowerings, [&](const std::unique_ptr<OpLowering> &l) {
          return l->match(&op);
        });
    if (lowering == lowerings.end())
      return op.emitOpError("cannot be lowered to dsrt");
    if (failed((*lowering)->lower(&op, state)))
      return failure();
  }
  return success();
}

/// Erases the tensor program, users first, and leaves @forward without
/// arguments or results.
void eraseTensorProgram(LoweringState &state) {
  func::FuncOp func = state.func;
  Block &body = func.getBody().front();
  body.getTerminator()->setOperands({});
  for (Operation *op : llvm::reverse(state.toErase))
    op->erase();
  body.eraseArguments(0, body.getNumArguments());
  func.setType(FunctionType::get(func.getContext(), {}, {}));
  func.setAllArgAttrs(ArrayRef<DictionaryAttr>{});
  func.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
}

struct LowerToDsRtPass : impl::LowerToDsRtPassBase<LowerToDsRtPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func) {
      module.emitError("no func.func @forward to lower");
      return signalPassFailure();
    }
    OpLowerings lowerings;
    populateValueLowerings(lowerings);
    populateCollectiveLowerings(lowerings);
    populateKernelLowerings(lowerings);
    LoweringState state(func);
    state.builder.setInsertionPointToStart(&func.getBody().front());
    lowerArguments(state);
    if (failed(lowerBody(state, lowerings)))
      return signalPassFailure();
    eraseTensorProgram(state);
  }
};

} // namespace
} // namespace mlir::ds
