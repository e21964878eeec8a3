//===- CommandLine.h - TrainingOptions as llvm::cl options ------*- C++ -*-===//
//
// Part of the ds project.
//
// Registers one llvm::cl option per row of TrainingOptions.def, stored in a
// TrainingOptions, grouped by the table's categories.
//
//===----------------------------------------------------------------------===//

#ifndef DS_PIPELINE_COMMANDLINE_H
#define DS_PIPELINE_COMMANDLINE_H

#include "ds/Pipeline/TrainingOptions.h"

#include "llvm/Support/CommandLine.h"

#include <memory>
#include <vector>

namespace mlir::ds {

class TrainingOptionsCL {
public:
  /// Registers the options; they write into `storage`, which must outlive
  /// this object.
  explicit TrainingOptionsCL(TrainingOptions &storage);
  ~TrainingOptionsCL();

  /// Hides every option registered so far outside ds's categories from
  /// --help (--help-hidden still lists them).
  void hideOtherOptions();
  /// After parsing: marks the options given on the command line in
  /// `TrainingOptions::origin`.
  void recordCommandLine();

private:
  TrainingOptions &storage;
  std::vector<std::unique_ptr<llvm::cl::OptionCategory>> categories;
  std::vector<std::pair<const OptionInfo *, std::unique_ptr<llvm::cl::Option>>>
      options;
};

} // namespace mlir::ds

#endif // DS_PIPELINE_COMMANDLINE_H
