//===- ConfigReader.h - reading a ds_config.json, section by section ------===//
//
// Part of the ds project. Internal to lib/Pipeline.
//
// The reader every section of a DeepSpeed config goes through. It keeps
// every problem it finds (all of them are reported at once, not one per
// attempt), the notices (keys accepted without effect, "auto" values and
// what they became, legacy spellings), and the options the config sets.
//
//===----------------------------------------------------------------------===//

#ifndef DS_LIB_PIPELINE_CONFIGREADER_H
#define DS_LIB_PIPELINE_CONFIGREADER_H

#include "ds/Pipeline/DeepSpeedConfig.h"

#include "llvm/Support/JSON.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::ds::config {

using llvm::json::Object;
using llvm::json::Value;

/// "%.17g": a number as the option parser reads it back exactly.
std::string fmt(double v);

/// The option a DeepSpeed key sets, or null.
const OptionInfo *findOptionByKey(llvm::StringRef configKey);

/// The valid key close enough to `key` to be a typo of it (or a known
/// synonym, e.g. learning_rate for lr); "" if none is.
std::string closeKey(llvm::StringRef key,
                     const std::vector<std::string> &valid);

/// What a key that ds accepts without a counterpart does: nothing when
/// its value is the harmless one, a notice otherwise; or a refusal with a
/// reason when ds cannot honour the value.
struct KnownKey {
  enum Kind {
    NoOp,       // accepted; a notice names why it has no effect
    OffOnly,    // accepted when false/0/null/disabled; refused otherwise
    Refused,    // refused whatever the value (the reason says why)
  } kind;
  std::string reason;
};

struct Reader {
  std::string file;
  DeepSpeedConfig &config;
  std::vector<std::string> errors;

  void set(const std::string &flag, const std::string &value,
           const std::string &key) {
    config.settings.push_back({flag, value, key});
  }
  /// Records a problem; returns false so callers can `return r.fail(...)`.
  bool fail(const std::string &key, const std::string &msg) {
    errors.push_back((key.empty() ? "" : "'" + key + "': ") + msg);
    return false;
  }
  /// Records a notice (printed once, as a warning).
  void note(const std::string &key, const std::string &msg) {
    config.notices.push_back(file + ": '" + key + "': " + msg);
  }
  /// Records an "auto" value and what it became (one line for all of
  /// them is printed at the end).
  void autoValue(const std::string &key, const std::string &becomes) {
    config.autoValues.push_back({key, becomes});
  }

  /// Every key of `obj` must be in `valid` or `known`; each one that is
  /// not is recorded. Known keys are handled by `handleKnown`. Returns
  /// false if any key was refused.
  bool checkKeys(const Object &obj, const std::string &where,
                 const std::vector<std::string> &valid,
                 const std::map<std::string, KnownKey> &known = {});
  /// A known key's value: accepted (maybe with a notice) or refused.
  bool handleKnown(const std::string &path, const KnownKey &k,
                   const Value &v);

  std::optional<double> number(const Value &v, const std::string &key);
  /// A whole number; floats such as 1e5 are accepted when whole.
  std::optional<int64_t> integer(const Value &v, const std::string &key);
  std::optional<bool> boolean(const Value &v, const std::string &key);
  std::optional<std::string> string(const Value &v, const std::string &key);
  const Object *object(const Value &v, const std::string &key);
  /// A {"type": ..., "params": {...}} section (optimizer, scheduler): sets
  /// `o` and returns the type; nullopt with the problem recorded otherwise.
  std::optional<std::string> typedSection(const Value &v,
                                          const std::string &key,
                                          const Object *&o);

  /// A key that maps plainly onto the option whose CONFIG_KEY is
  /// `configKey`: its value read as the option's type; "auto" leaves the
  /// option as the command line or its default has it (for a number or a
  /// switch; a string option takes "auto" as its value). `path` names it
  /// in messages.
  bool plain(const Value &v, llvm::StringRef configKey,
             const std::string &path);
};

/// True if `v` is the string "auto" (any case).
bool isAuto(const Value &v);

/// True for a value that switches a feature off: false, 0, null, "none",
/// or an object whose "enabled" is false or absent.
bool isOff(const Value &v);

// The sections (DeepSpeedConfigSections.cpp, ConfigScheduler.cpp).
bool readBatchKey(Reader &r, const std::string &key, const Value &v);
bool readCommDtype(Reader &r, const std::string &key, const Value &v);
bool readOptimizer(Reader &r, const std::string &key, const Value &v);
bool readPrecision(Reader &r, const std::string &key, const Value &v);
bool readZero(Reader &r, const std::string &key, const Value &v);
bool readCheckpointing(Reader &r, const std::string &key, const Value &v);
bool readParallelism(Reader &r, const std::string &key, const Value &v);
bool readAio(Reader &r, const std::string &key, const Value &v);
bool readDsExtensions(Reader &r, const std::string &key, const Value &v);
bool readScheduler(Reader &r, const std::string &key, const Value &v);
/// steps_per_print, wall_clock_breakdown, tensorboard, csv_monitor,
/// comms_logger, flops_profiler (DeepSpeedConfigMonitors.cpp).
bool readMonitorKey(Reader &r, const std::string &key, const Value &v);

/// The text of a config as DeepSpeed's HJSON reader takes it, made JSON:
/// comments (#, //, /* */) and trailing commas removed. Strings are kept
/// as they are.
std::string stripHjson(llvm::StringRef text);

} // namespace mlir::ds::config

#endif // DS_LIB_PIPELINE_CONFIGREADER_H
