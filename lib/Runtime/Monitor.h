//===- Monitor.h - monitors and logging of a run (runtime internal) -*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// DeepSpeed's logging keys, honoured by ds-run: steps_per_print,
// wall_clock_breakdown, the tensorboard and csv_monitor monitors,
// comms_logger and flops_profiler. The plan records them ("run.*" options,
// from the config or ds-opt's flags); ds-run's flags override them. The
// times come from the executor's profile (RunStats): per plan phase, per
// instruction and per collective call.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_MONITOR_H
#define DS_RUNTIME_MONITOR_H

#include "ds/Runtime/RunOptions.h"
#include "ds/Runtime/Runtime.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ds::rt {

struct RunContext;
struct TrainState;
struct StepFigures;

/// The settings in effect: the plan's, overridden by ds-run's flags.
struct MonitorSettings {
  int64_t stepsPerPrint = 1;
  bool wallClock = false;
  std::string tensorboardDir, csvDir;
  std::string comms;         // "", summary or verbose
  std::set<int> commsKinds;  // plan::CollectiveKind; empty: every kind
  bool commsDebug = false;   // one record per instruction
  int64_t flopsStep = 0;     // 0: off
  int64_t flopsDepth = -1, flopsTop = 1;
  bool flopsDetailed = true;
  std::string flopsFile;
  /// Anything that needs the executor's per-kernel times.
  bool needsTiming() const {
    return wallClock || !comms.empty() || flopsStep > 0;
  }
};

/// Reads the plan's "run.*" options and the flags; false with `err` naming
/// the bad value.
bool resolveMonitorSettings(const RunOptions &options,
                            const std::map<std::string, std::string> &plan,
                            MonitorSettings &settings, std::string &err);

/// One step's wall-clock times by the plan's phases, milliseconds.
struct StepBreakdown {
  double forward = 0, backward = 0, step = 0, communication = 0,
         transfer = 0, other = 0;
};

/// A TensorBoard event file (TFRecord framing, masked CRC-32C, Event
/// protobufs): a file_version event, then scalar summaries.
class TensorBoardWriter {
public:
  ~TensorBoardWriter();
  /// Creates DIR/events.out.tfevents.<time>.<host>.<pid>.0.
  bool open(const std::string &dir, std::string &err);
  bool addScalar(const std::string &tag, float value, int64_t step);
  bool flush();
  const std::string &path() const { return filePath; }

private:
  bool writeRecord(const std::string &data);
  std::FILE *file = nullptr;
  std::string filePath;
};

/// CRC-32C (Castagnoli) and TFRecord's mask of it.
uint32_t crc32c(const void *data, size_t size);
uint32_t maskedCrc32c(const void *data, size_t size);

/// What a training run logs besides its progress lines.
class Monitors {
public:
  MonitorSettings settings;

  /// The lead rank creates the monitor folders and files (an error before
  /// step 1 when one cannot be written).
  bool start(RunContext &ctx, std::string &err);
  /// Clears the executor's per-step counters.
  void beginStep(RunStats &stats) const;
  /// Step `s` gets a progress line (every steps_per_print-th and the last).
  bool printsStep(long long s, long long last) const;
  StepBreakdown breakdown(const RunStats &stats) const;
  /// After step `s`'s progress line: the monitors' scalars, the comms
  /// records, the flops profile at its step. False with `err` when a
  /// file cannot be written.
  bool afterStep(RunContext &ctx, const TrainState &ts, const StepFigures &f,
                 std::string &err);
  /// The end of the run: the comms summary and the mean breakdown.
  void finish(RunContext &ctx);
  /// " | fwd ... ms" for a progress line; "" without wall_clock_breakdown.
  std::string breakdownText(const RunStats &stats) const;
  /// ", \"time_forward_ms\": ..." for --log-json; "" without it.
  std::string breakdownJson(const RunStats &stats) const;

private:
  bool writeScalars(RunContext &ctx, const TrainState &ts,
                    const StepFigures &f, std::string &err);
  bool writeCsv(const std::string &tag, double value, int64_t step,
                std::string &err);
  void recordComms(RunContext &ctx);

  TensorBoardWriter tensorboard;
  bool tensorboardOpen = false;
  std::set<std::string> csvStarted;
  /// Comms logger: per record name and message size, each call's
  /// milliseconds.
  std::map<std::string, std::map<uint64_t, std::vector<double>>> comms;
  std::map<std::string, int> commsKindOf; // record name -> kind
  StepBreakdown total;
  long long timedSteps = 0;
  bool flopsDone = false;
};

/// The flops profile of one step (FlopsProfiler.cpp): the plan's FLOPs per
/// instruction and module, the step's measured times; to stdout or `file`.
bool writeFlopsProfile(RunContext &ctx, const TrainState &ts,
                       const StepFigures &f, const MonitorSettings &settings,
                       const StepBreakdown &times, std::string &err);

/// Monitors::afterStep for step f.step; a failure ends the run.
bool monitorStep(RunContext &ctx, const TrainState &ts, const StepFigures &f);

/// Resolves the settings, sets the executors' timing and creates the
/// monitors' files (RunSetup calls it before the executors exist).
bool setUpMonitors(RunContext &ctx);

} // namespace ds::rt

#endif // DS_RUNTIME_MONITOR_H
