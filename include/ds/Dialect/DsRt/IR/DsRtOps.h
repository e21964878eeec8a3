//===- DsRtOps.h - the ds runtime dialect -----------------------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DSRT_IR_DSRTOPS_H
#define DS_DIALECT_DSRT_IR_DSRTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ds/Dialect/DsRt/IR/DsRtOpsDialect.h.inc"

#define GET_OP_CLASSES
#include "ds/Dialect/DsRt/IR/DsRtOps.h.inc"

namespace mlir::dsrt {
/// Name of the func attribute holding the planned arena size in bytes.
inline constexpr llvm::StringLiteral kArenaBytes = "dsrt.arena_bytes";
/// Alignment of every arena buffer, in bytes.
inline constexpr int64_t kAlignment = 64;
/// Bytes of a buffer (i1 takes one byte per element).
int64_t bufferBytes(Type type);
/// The buffer-defining op at the root of a chain of views.
Operation *rootOf(Value buffer);

/// Discardable attributes `--ds-lower-to-dsrt` sets on every `dsrt.kernel`
/// (see DsRt_KernelOp): the cost model's FLOPs and bytes read and written
/// of the ds op it runs, and the part of the step it belongs to.
namespace attrs {
inline constexpr llvm::StringLiteral kFlops = "ds.flops";
inline constexpr llvm::StringLiteral kBytes = "ds.bytes";
inline constexpr llvm::StringLiteral kPhase = "ds.phase";
} // namespace attrs

/// The values of `ds.phase`.
enum class KernelPhase {
  Forward,
  Backward,
  Optimizer,
  Communication,
  Transfer
};
/// "forward", "backward", "optimizer", "communication", "transfer".
llvm::StringRef stringifyKernelPhase(KernelPhase phase);
std::optional<KernelPhase> symbolizeKernelPhase(llvm::StringRef name);
} // namespace mlir::dsrt

#endif // DS_DIALECT_DSRT_IR_DSRTOPS_H
