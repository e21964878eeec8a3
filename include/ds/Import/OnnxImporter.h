//===- OnnxImporter.h - ONNX ModelProto to the ds dialect -------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_IMPORT_ONNXIMPORTER_H
#define DS_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"

#include <functional>
#include <string>
#include <vector>

namespace mlir::ds {

struct ImportOptions {
  /// Graph output to use as the loss; empty: the single scalar float output.
  std::string lossName;
  /// Static shapes for graph inputs with dynamic dimensions (--input-shape).
  llvm::StringMap<SmallVector<int64_t>> inputShapes;
  /// Called after each import phase (read, parse, check, infer, build) with
  /// its duration in milliseconds; for progress and timing output.
  std::function<void(llvm::StringRef phase, double ms)> onPhase;
  /// Build the model's first training_info algorithm into the step: its
  /// nodes after the graph's (Gradient through the same reverse mode), its
  /// update_binding as in-place updates of the initializers.
  bool runTrainingInfo = false;
  /// Import an eval-mode export (a ds.export record whose ds.mode is not
  /// "training", or BatchNormalization without training_mode=1) instead of
  /// refusing it (--allow-eval-export).
  bool allowEvalExport = false;
  /// The batch of the data inputs whose leading dimension the export left
  /// dynamic (a config's train_micro_batch_size_per_gpu); 0: none.
  int64_t batchSize = 0;
  /// Training-mode BatchNormalization writes its running statistics (the
  /// initializers) as results of the step; off for a forward-only or
  /// --emit-grads compile, which leaves them as they are.
  bool updateRunningStats = true;
};

/// Parses `spec` of the form `NAME:4x64` (a scalar is `NAME:scalar`) into
/// `options.inputShapes`. Returns an error message on failure, empty on
/// success.
std::string parseInputShape(llvm::StringRef spec, ImportOptions &options);

/// The ONNX op types the importer has a handler for, sorted: default-domain
/// ones by name, others as `domain.OpType` (`ai.onnx.preview.training.Adam`).
std::vector<std::string> supportedOnnxOps();

/// Imports the ONNX model at `path` into a module holding `func.func
/// @forward`. Runs the ONNX checker and shape inference first, then checks
/// the export as a whole (eval mode, unsupported op types, constant
/// folding) before building anything. Errors and warnings are reported
/// through the context's diagnostic engine, located at the ONNX node they
/// concern; on failure nothing is returned.
FailureOr<OwningOpRef<ModuleOp>> importOnnxFile(MLIRContext *context,
                                                llvm::StringRef path,
                                                const ImportOptions &options);

} // namespace mlir::ds

#endif // DS_IMPORT_ONNXIMPORTER_H
