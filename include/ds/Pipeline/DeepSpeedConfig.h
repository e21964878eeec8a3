//===- DeepSpeedConfig.h - ds_config.json to training options ---*- C++ -*-===//
//
// Part of the ds project.
//
// Reads DeepSpeed's config format and maps every key onto a ds option, or
// refuses it: an unknown key names the nearest valid one; a DeepSpeed key
// that ds does not support yet is named with the reason. The mapping table
// is docs/config.md; the keys that map plainly onto an option are the
// CONFIG_KEY column of TrainingOptions.def.
//
//===----------------------------------------------------------------------===//

#ifndef DS_PIPELINE_DEEPSPEEDCONFIG_H
#define DS_PIPELINE_DEEPSPEEDCONFIG_H

#include "ds/Pipeline/TrainingOptions.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::ds {

/// One option set by the config: the flag (without dashes), its value as
/// the command line would spell it, and the config key it came from (for
/// messages).
struct ConfigSetting {
  std::string flag, value, key;
};

struct DeepSpeedConfig {
  std::vector<ConfigSetting> settings;
  /// The batch triad as given (any two fix the third with the world size).
  std::optional<int64_t> trainBatch, microBatch, accumSteps;
  /// One line each: keys accepted without effect, legacy spellings.
  std::vector<std::string> notices;
  /// The keys given as "auto" and what each became.
  std::vector<std::pair<std::string, std::string>> autoValues;
  /// zero_optimization.stage3_max_live_parameters: caps the ZeRO-3 gather
  /// bucket (applyDeepSpeedConfig).
  std::optional<int64_t> maxLiveParameters;
};

/// Parses `path`; the error is one line naming the file and the key.
llvm::Error readDeepSpeedConfig(llvm::StringRef path, DeepSpeedConfig &config);

/// Resolves the batch triad as DeepSpeed does for `worldSize` data-parallel
/// ranks: train_batch_size = micro x accumulation x world; any two give the
/// third; one alone sets the other two (accumulation 1). Fails when they
/// disagree or do not divide.
llvm::Error resolveBatch(DeepSpeedConfig &config, int64_t worldSize,
                         int64_t &microBatch, int64_t &accumSteps);

/// Reads the config at `path` into `options`: it sets the options the
/// command line left alone (TrainingOptions::origin), the accumulation
/// steps from the batch sizes and `configMicroBatch`.
llvm::Error applyDeepSpeedConfig(llvm::StringRef path,
                                 TrainingOptions &options);

/// The run-time settings of `options` (steps per print, wall-clock
/// breakdown, monitors, comms logger, flops profiler) as the plan's
/// "run.*" options, which ds-run reads (lib/Runtime/Monitor.cpp).
void addRunSettings(const TrainingOptions &options,
                    std::map<std::string, std::string> &record);

} // namespace mlir::ds

#endif // DS_PIPELINE_DEEPSPEEDCONFIG_H
