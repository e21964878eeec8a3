//===- TrainingOptions.h - every training decision ds takes -----*- C++ -*-===//
//
// Part of the ds project.
//
// TrainingOptions holds every decision of a ds compile: the optimizer, the
// precision, the parallelism, the memory plan and what to emit. Its fields,
// flags, DeepSpeed config keys, defaults and help are declared once, in
// TrainingOptions.def; the command line (CommandLine.h), the config reader
// (DeepSpeedConfig.h), the ds-train pass pipeline and docs/options.md are
// derived from that table.
//
//===----------------------------------------------------------------------===//

#ifndef DS_PIPELINE_TRAININGOPTIONS_H
#define DS_PIPELINE_TRAININGOPTIONS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace mlir::ds {

using StringList = std::vector<std::string>;

struct TrainingOptions {
#define DS_OPTION(KIND, CAT, TYPE, MEMBER, FLAG, DEFAULT, VDESC, KEY, HELP)    \
  TYPE MEMBER = TYPE(DEFAULT);
#include "ds/Pipeline/TrainingOptions.def"

  /// Where each option that is not at its default came from: "command
  /// line", "config: <key>" or "config: the batch sizes" (by flag).
  llvm::StringMap<std::string> origin;
  /// The flags given explicitly (on the command line or by a config key).
  bool isGiven(llvm::StringRef flag) const {
    auto it = origin.find(flag);
    return it != origin.end() && it->second != "config: the batch sizes";
  }

  /// The config's per-rank micro-batch (0: none given); the model's inputs
  /// must have it as their batch.
  int64_t configMicroBatch = 0;
  /// The config's notices (keys without effect, "auto" values), one line
  /// each, for the caller to print once.
  std::vector<std::string> configNotices;
  /// The config keys set to "auto" (their paths, e.g.
  /// "zero_optimization.stage"): --plan=auto says what it chose for them.
  std::vector<std::string> configAutoKeys;
  /// The interleaved schedule's model chunks per pipeline rank (1 otherwise;
  /// set by validateTrainingOptions).
  int64_t virtualStages = 1;

  bool training() const { return optimizerName != "none"; }
  /// The gradient collectives' element type: --comm-dtype, else the
  /// precision.
  std::string effectiveCommDtype() const {
    return commDtype.empty() ? precision : commDtype;
  }
  /// The ZeRO stage the step is built at: --zero, except 0/1 Adam's ZeRO
  /// 1-3, whose step is ZeRO-0's (its local steps need each rank's whole
  /// parameters, momentum, frozen variance and accumulator;
  /// docs/compression.md).
  int64_t builtZeroStage() const {
    return optimizerName == "zero-one-adam" ? 0 : zeroStage;
  }
  /// 1-bit Adam or 1-bit LAMB: a freeze step, then the compressed momentum
  /// exchange, once per step (docs/compression.md).
  bool oneBitExchange() const {
    return optimizerName == "onebit-adam" || optimizerName == "onebit-lamb";
  }
  /// Ranks of one data-parallel group.
  int64_t dataParallelSize() const {
    return worldSize / (tensorParallel * pipelineParallel);
  }
};

/// One row of TrainingOptions.def, with a pointer to its field.
enum class OptionKind { Shown, Train, Tool, ToolOptionalValue };
enum class OptionCategory { Input, Train, Parallel, Memory, Cost };

struct OptionInfo {
  using Field = std::variant<int64_t TrainingOptions::*, int TrainingOptions::*,
                             double TrainingOptions::*, bool TrainingOptions::*,
                             std::string TrainingOptions::*,
                             StringList TrainingOptions::*>;
  OptionKind kind;
  OptionCategory category;
  Field field;
  llvm::StringLiteral flag, defaultText, valueDesc, configKey, help;
};
/// Every option, in the table's order.
llvm::ArrayRef<OptionInfo> trainingOptionTable();
/// The option with this flag, or null.
const OptionInfo *findOption(llvm::StringRef flag);
/// The --help heading of a category.
llvm::StringRef categoryTitle(OptionCategory category);

/// Sets the option `flag` from its command-line spelling `value`; the error
/// names neither: the caller knows where the value came from.
llvm::Error setOption(TrainingOptions &options, const OptionInfo &info,
                      llvm::StringRef value);
/// The option's value as --show-options prints it.
std::string optionValueText(const TrainingOptions &options,
                            const OptionInfo &info);

/// Checks the options against each other and completes the derived ones
/// (micro-batches, virtual stages); the error is one line.
llvm::Error validateTrainingOptions(TrainingOptions &options);

/// The --show-options listing: each training decision, its value and where
/// it came from.
std::string formatShownOptions(const TrainingOptions &options);
/// docs/options.md: every option by category.
std::string formatOptionsMarkdown();

} // namespace mlir::ds

#endif // DS_PIPELINE_TRAININGOPTIONS_H
