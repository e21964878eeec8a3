//===- RunOptions.h - what a run of a plan is told ---------------*- C++ -*-===//
//
// Part of the ds project. No MLIR or LLVM here.
//
// Every option of a run is a field of RunOptions, declared once in the
// flag table (runFlags: its flag, its default as the field's initializer,
// its help); ds-run's argument parser and --help derive from the table, and
// any other driver (a Python binding) fills the same struct.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_RUNOPTIONS_H
#define DS_RUNTIME_RUNOPTIONS_H

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ds::rt {

struct RunOptions {
  /// The plan.bin to run.
  std::string planPath;
  // What runs: the forward program (repeated) or training steps.
  bool forwardOnly = false;
  int64_t steps = 0;
  int64_t repeat = 1;
  // Data: batches, token streams, graph inputs and outputs.
  std::string dataPath;
  std::string tokensPath;
  std::string tokenInputs = "idx,targets";
  std::string tokenDtype = "uint16";
  std::vector<std::string> inputs; // NAME=FILE or FILE.npz, in order
  std::string outputsPath;
  // Training.
  double lr = NAN; // NaN: the plan's
  std::vector<uint64_t> injectOverflow;
  std::string onNan = "stop"; // stop, skip or continue
  // Evaluation (TrainerEval.cpp): the plan's eval section over these
  // batches every evalEvery steps (0: at the end only).
  std::string evalDataPath;
  int64_t evalEvery = 0;
  int64_t evalBatches = 0; // 0: every batch of the file
  // Checkpoints and weights.
  std::string saveDir;
  int64_t saveEvery = 0;
  std::string resumeDir;
  std::string consolidateDir;
  /// -o FILE: what --consolidate or --calibrate writes.
  std::string outputPath;
  bool withOptimizerState = false;
  std::string saveWeights;
  // Logging and report.
  std::string logJson;
  bool profile = false;
  bool noProgressBar = false;
  // Monitors and logging (docs/training.md "Monitors and logging"); each
  // left at its zero value takes the plan's setting (a DeepSpeed config's).
  int64_t stepsPerPrint = 0;
  bool wallClockBreakdown = false;
  std::string tensorboardDir, csvMonitorDir;
  std::string commsLogger; // summary or verbose
  int64_t flopsProfileStep = 0;
  std::string flopsOutputFile;
  // Execution.
  int64_t threads = defaultThreads();
  int64_t seed = 0;
  std::string backend = "auto"; // auto, cpu or cuda
  std::string nvmePath;
  // Calibration (docs/calibration.md): measure the machine, run no plan.
  bool calibrate = false;
  bool calibrateQuick = false;
  bool calibrateNvme = false;
  std::vector<std::string> calibrateKernelsOf; // plans (comma-separated flag)
  /// With calibrateKernelsOf: keep the isolated per-kernel figures (the
  /// sample plans are not run in step).
  bool calibrateIsolated = false;

  /// Every core.
  static int64_t defaultThreads();
};

/// What a command line asks for besides a run.
enum class RunAction { Run, Help, ListDevices, ListKernels };

/// One flag: its names, its line in --help and how its value lands in
/// RunOptions.
struct RunFlag {
  /// "--steps"; the first is the one --help shows.
  std::vector<std::string> names;
  /// --help's left column ("--steps N"), empty when --help does not list
  /// the flag on its own line.
  std::string usage;
  /// --help's right column, lines separated by '\n'.
  std::string help;
  /// A flag without a value (--profile) sets its option or names an action.
  bool takesValue = true;
  RunAction action = RunAction::Run;
  /// Stores `value`; an error message when it is not valid ("" when it is).
  std::function<std::string(RunOptions &, const std::string &value)> set;
  /// The error when the value is missing (empty: set's for an empty value).
  std::string missing;
};

/// The flag table, in --help's order.
const std::vector<RunFlag> &runFlags();

/// ds-run --help.
std::string runUsage();

/// Parses a command line (argv[0] is the program) into `options` and
/// `action`, then checks the options together; false with `err` (one line).
bool parseRunArguments(int argc, const char *const *argv, RunOptions &options,
                       RunAction &action, std::string &err);

/// The checks between options (--save-every needs --save, ...).
bool checkRunOptions(const RunOptions &options, std::string &err);

} // namespace ds::rt

#endif // DS_RUNTIME_RUNOPTIONS_H
