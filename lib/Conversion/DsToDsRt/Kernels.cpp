//===- Kernels.cpp - ds compute ops as kernel calls -----------------------===//
//
// Part of the ds project.
//
// Matmuls (with their 16-bit workspace), offload transfers (into the host
// arena), and the default: any other ds op is the kernel of its name with
// its attributes as params. Elementwise, reduction, training and optimizer
// ops all take the default; what sets them apart (in-place inputs, the
// phase) comes from their traits (KernelCall.cpp, Phase.cpp).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"
#include "ds/Dialect/Ds/IR/DsCompression.h"

namespace mlir::ds::lowering {
namespace {

/// Matmul and gemm: a 16-bit GEMM converts through an f32 workspace (A, B
/// and the result), an extra output.
struct MatMulLowering : LoweringOf<MatMulOp, GemmOp> {
  LogicalResult lower(Operation *op, LoweringState &state) const override {
    FailureOr<KernelCall> call = prepareKernelCall(op, state);
    if (failed(call))
      return failure();
    Type result = op->getResult(0).getType();
    if (!cast<ShapedType>(result).getElementType().isF32()) {
      int64_t elems = detail::numElements(result);
      for (Value v : op->getOperands())
        elems += detail::numElements(v.getType());
      OpBuilder &b = state.builder;
      call->outs.push_back(dsrt::AllocOp::create(
          b, op->getLoc(), MemRefType::get({elems}, b.getF32Type()),
          IntegerAttr()));
    }
    emitKernelCall(op, *call, state);
    return success();
  }
};

/// Offload: what a transfer to the host makes lives in the host arena.
struct TransferLowering : LoweringOf<TransferOp> {
  LogicalResult lower(Operation *op, LoweringState &state) const override {
    return lowerToKernel(op, state,
                         /*hostResults=*/cast<TransferOp>(op).getTo() ==
                             "host");
  }
};

/// 1-bit LAMB's ZeRO 1-3 update runs the `onebit_lamb` kernel, which
/// tells it from the ZeRO-0 step by its operand count (7 against 9).
struct OneBitLambLocalLowering : LoweringOf<OneBitLambLocalOp> {
  LogicalResult lower(Operation *op, LoweringState &state) const override {
    FailureOr<KernelCall> call = prepareKernelCall(op, state);
    if (failed(call))
      return failure();
    call->kernel = "onebit_lamb";
    emitKernelCall(op, *call, state);
    return success();
  }
};

/// Every other ds op: the kernel of its name.
struct DefaultKernelLowering : OpLowering {
  bool match(Operation *op) const override {
    return isa_and_nonnull<DsDialect>(op->getDialect());
  }

  LogicalResult lower(Operation *op, LoweringState &state) const override {
    return lowerToKernel(op, state);
  }
};

} // namespace

void populateKernelLowerings(OpLowerings &lowerings) {
  lowerings.push_back(std::make_unique<MatMulLowering>());
  lowerings.push_back(std::make_unique<TransferLowering>());
  lowerings.push_back(std::make_unique<OneBitLambLocalLowering>());
  lowerings.push_back(std::make_unique<DefaultKernelLowering>());
}

} // namespace mlir::ds::lowering
