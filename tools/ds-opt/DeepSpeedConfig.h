//===- DeepSpeedConfig.h - ds_config.json to ds-opt options ----*- C++ -*-===//
//
// Part of the ds project.
//
// Reads DeepSpeed's config format and maps every key onto a ds-opt option,
// or refuses it: an unknown key names the nearest valid one; a DeepSpeed
// key that ds does not support yet is named with the reason. The mapping
// table is docs/config.md.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TOOLS_DSOPT_DEEPSPEEDCONFIG_H
#define DS_TOOLS_DSOPT_DEEPSPEEDCONFIG_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsconfig {

/// One ds-opt option set by the config: the flag (without dashes), its
/// value as the command line would spell it, and the config key it came
/// from (for messages).
struct ConfigSetting {
  std::string flag, value, key;
};

struct DeepSpeedConfig {
  std::vector<ConfigSetting> settings;
  /// The batch triad as given (any two fix the third with the world size).
  std::optional<int64_t> trainBatch, microBatch, accumSteps;
};

/// Parses `path`; on failure returns false with a one-line message in
/// `err` naming the file and the key.
bool readDeepSpeedConfig(llvm::StringRef path, DeepSpeedConfig &config,
                         std::string &err);

/// Resolves the batch triad as DeepSpeed does for `worldSize` data-parallel
/// ranks: train_batch_size = micro x accumulation x world; any two give the
/// third; one alone sets the other two (accumulation 1). Returns false with
/// `err` when they disagree or do not divide.
bool resolveBatch(DeepSpeedConfig &config, int64_t worldSize,
                  int64_t &microBatch, int64_t &accumSteps, std::string &err);

} // namespace dsconfig

#endif // DS_TOOLS_DSOPT_DEEPSPEEDCONFIG_H
