//===- ModelSummary.h - what a ds module holds ------------------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_ANALYSIS_MODELSUMMARY_H
#define DS_ANALYSIS_MODELSUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

namespace mlir::ds {

/// The facts `ds-opt --emit=summary` prints about `@forward`: inputs,
/// parameters, outputs and the loss, an op histogram, and the cost model's
/// forward FLOPs and bytes.
struct ModelSummary {
  struct Tensor {
    std::string name;
    std::string type;
    int64_t elements = 0;
    int64_t bytes = 0;
    bool trainable = false;
  };
  std::string source;
  int64_t opset = 0;
  std::vector<Tensor> inputs, params, outputs;
  std::string loss; // empty: no loss (forward-only model)
  int64_t paramElements = 0, paramBytes = 0, trainableElements = 0;
  std::map<std::string, int64_t> opHistogram;
  int64_t flops = 0, bytesRead = 0, bytesWritten = 0;
  int64_t trainingInfoEntries = 0;
};

/// Summarizes `module`'s `@forward`; fails (with a diagnostic) if absent.
FailureOr<ModelSummary> summarize(ModuleOp module);

/// Human-readable report.
void printSummary(const ModelSummary &summary, llvm::raw_ostream &os);

} // namespace mlir::ds

#endif // DS_ANALYSIS_MODELSUMMARY_H
