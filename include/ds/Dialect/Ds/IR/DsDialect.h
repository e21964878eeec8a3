//===- DsDialect.h - ds dialect ---------------------------------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSDIALECT_H
#define DS_DIALECT_DS_IR_DSDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/Dialect.h"

#include "ds/Dialect/Ds/IR/DsOpsDialect.h.inc"

namespace mlir::ds {
/// Names of the module attributes the importer sets.
namespace attrs {
inline constexpr llvm::StringLiteral kSource = "ds.source";
inline constexpr llvm::StringLiteral kOpset = "ds.opset";
inline constexpr llvm::StringLiteral kProducer = "ds.producer";
inline constexpr llvm::StringLiteral kTrainingInfo = "ds.training_info";
/// The `ds.*` metadata_props of the export (python/ds's ds.export record).
inline constexpr llvm::StringLiteral kExportRecord = "ds.export_record";
// Argument and result attributes of @forward.
inline constexpr llvm::StringLiteral kInput = "ds.input";
inline constexpr llvm::StringLiteral kParam = "ds.param";
inline constexpr llvm::StringLiteral kTrainable = "ds.trainable";
inline constexpr llvm::StringLiteral kOutput = "ds.output";
inline constexpr llvm::StringLiteral kLoss = "ds.loss";
/// An op that makes an optimizer update's operand (ZeRO 1-2's shard copy of
/// a parameter) and that --ds-fuse-optimizer moved before the first update:
/// it stays in the optimizer phase.
inline constexpr llvm::StringLiteral kUpdateOperand = "ds.update_operand";
/// On the module when --ds-fuse-optimizer moved any update operand (so a
/// compile without the moves may plan a lower peak; Compile.cpp).
inline constexpr llvm::StringLiteral kMovedUpdateOperands =
    "ds.moved_update_operands";
} // namespace attrs
} // namespace mlir::ds

#endif // DS_DIALECT_DS_IR_DSDIALECT_H
