//===- Monitor.cpp - monitors and logging of a run -----------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The settings (the plan's "run.*" options, then ds-run's flags), the
// monitors' folders and files, the per-step scalars DeepSpeed's engine
// writes (Train/Samples/train_loss at the samples before the step;
// lr, loss_scale and the elapsed times at the samples after it), its CSV
// files (one per tag: "step,<last part of the tag>", then "samples,value"
// rows, as Python's csv module writes them), the wall-clock breakdown by
// the plan's phases and the comms logger's records and summary.
//
//===----------------------------------------------------------------------===//

#include "Monitor.h"
#include "PlanImpl.h"
#include "TrainerImpl.h"
#include "ds/Runtime/Schedule.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace ds::rt {

namespace {

/// DeepSpeed's names of the collectives the plan runs, by CollectiveKind.
const char *commName(int kind) {
  switch (kind) {
  case plan::COLLECTIVE_ALL_REDUCE:
    return "all_reduce";
  case plan::COLLECTIVE_REDUCE_SCATTER:
    return "reduce_scatter";
  case plan::COLLECTIVE_ALL_GATHER:
    return "all_gather";
  case plan::COLLECTIVE_BROADCAST:
    return "broadcast";
  case plan::COLLECTIVE_SEND:
    return "send";
  case plan::COLLECTIVE_RECV:
    return "recv";
  default:
    return "collective";
  }
}

bool parseInt(const std::string &s, int64_t &v) {
  char *end = nullptr;
  errno = 0;
  v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end && *end == 0 && errno == 0;
}

/// mkdir -p; false with errno set.
bool makeFolders(const std::string &dir) {
  if (dir.empty())
    return true;
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    errno = S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    return S_ISDIR(st.st_mode);
  }
  size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0 &&
      !makeFolders(dir.substr(0, slash)))
    return false;
  return mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST;
}

/// A folder the lead rank writes into, created when missing.
bool prepareFolder(const std::string &what, const std::string &dir,
                   std::string &err) {
  if (!makeFolders(dir) || access(dir.c_str(), W_OK) != 0) {
    err = what + ": cannot write the folder '" + dir + "': " +
          std::strerror(errno ? errno : EACCES);
    return false;
  }
  return true;
}

/// A number as Python's str() writes a float: the shortest digits that
/// read back, with ".0" on whole numbers.
std::string pythonFloat(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

/// The trimmed mean DeepSpeed's comms summary uses (10% off each end).
double trimMean(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::lround(v.size() * 0.1));
  double sum = 0;
  for (size_t i = k; i < v.size() - k; ++i)
    sum += v[i];
  return v.size() > 2 * k ? sum / static_cast<double>(v.size() - 2 * k) : 0;
}

/// DeepSpeed's convert_size: "1.5 KB" (powers of 1024).
std::string sizeText(uint64_t bytes) {
  const char *unit[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  if (bytes == 0)
    return "0B";
  int i = std::min(5, static_cast<int>(std::floor(std::log(double(bytes)) /
                                                  std::log(1024.0))));
  double v = std::round(bytes / std::pow(1024.0, i) * 100) / 100;
  return pythonFloat(v) + " " + unit[i];
}

/// Algorithm and bus bandwidth in Gbps (DeepSpeed's calc_bw_log; the
/// plan's bytes of an all-gather or reduce-scatter are already the whole
/// tensor's).
std::pair<double, double> bandwidth(int kind, uint64_t bytes, double ms,
                                    int ranks) {
  if (ms <= 0)
    return {0, 0};
  double n = ranks, size = static_cast<double>(bytes), tput = size / ms,
         bus = tput;
  if (kind == plan::COLLECTIVE_ALL_REDUCE) {
    tput = 2 * size / ms;
    bus = size / ms * 2 * (n - 1) / n;
  } else if (kind == plan::COLLECTIVE_ALL_GATHER ||
             kind == plan::COLLECTIVE_REDUCE_SCATTER) {
    bus = tput * (n - 1) / n;
  }
  return {tput * 8 / 1e6, bus * 8 / 1e6};
}

} // namespace

bool resolveMonitorSettings(const RunOptions &o,
                            const std::map<std::string, std::string> &plan,
                            MonitorSettings &s, std::string &err) {
  auto text = [&](const char *key) {
    auto it = plan.find(std::string("run.") + key);
    return it == plan.end() ? std::string() : it->second;
  };
  auto integer = [&](const char *key, int64_t min, int64_t &out) {
    std::string v = text(key);
    if (v.empty())
      return true;
    if (!parseInt(v, out) || out < min) {
      err = "the plan's run." + std::string(key) + " = '" + v +
            "' is not an integer >= " + std::to_string(min);
      return false;
    }
    return true;
  };
  if (!integer("steps_per_print", 1, s.stepsPerPrint) ||
      !integer("flops_profile_step", 0, s.flopsStep) ||
      !integer("flops_module_depth", -1, s.flopsDepth) ||
      !integer("flops_top_modules", 1, s.flopsTop))
    return false;
  s.wallClock = text("wall_clock_breakdown") == "1";
  s.tensorboardDir = text("tensorboard");
  s.csvDir = text("csv_monitor");
  s.comms = text("comms_logger");
  s.commsDebug = text("comms_logger_debug") == "1";
  s.flopsDetailed = text("flops_detailed") != "0";
  s.flopsFile = text("flops_output_file");
  if (std::string ops = text("comms_logger_ops"); !ops.empty()) {
    s.commsKinds.insert(-1); // "none" logs nothing
    for (int k = plan::COLLECTIVE_ALL_REDUCE; k <= plan::COLLECTIVE_RECV; ++k)
      if (("," + ops + ",").find(std::string(",") + commName(k) + ",") !=
          std::string::npos)
        s.commsKinds.insert(k);
  }
  // ds-run's flags win.
  if (o.stepsPerPrint > 0)
    s.stepsPerPrint = o.stepsPerPrint;
  s.wallClock |= o.wallClockBreakdown;
  if (!o.tensorboardDir.empty())
    s.tensorboardDir = o.tensorboardDir;
  if (!o.csvMonitorDir.empty())
    s.csvDir = o.csvMonitorDir;
  if (!o.commsLogger.empty())
    s.comms = o.commsLogger;
  if (o.flopsProfileStep > 0)
    s.flopsStep = o.flopsProfileStep;
  if (!o.flopsOutputFile.empty())
    s.flopsFile = o.flopsOutputFile;
  if (s.comms != "" && s.comms != "summary" && s.comms != "verbose") {
    err = "the plan's run.comms_logger = '" + s.comms +
          "' is not summary or verbose";
    return false;
  }
  return true;
}

bool Monitors::start(RunContext &ctx, std::string &err) {
  if (!ctx.lead)
    return true;
  if (!settings.tensorboardDir.empty()) {
    if (!prepareFolder("tensorboard", settings.tensorboardDir, err) ||
        !tensorboard.open(settings.tensorboardDir, err))
      return false;
    tensorboardOpen = true;
  }
  if (!settings.csvDir.empty() &&
      !prepareFolder("csv_monitor", settings.csvDir, err))
    return false;
  if (settings.flopsStep > 0 && !settings.flopsFile.empty()) {
    std::FILE *f = std::fopen(settings.flopsFile.c_str(), "w");
    if (!f) {
      err = "flops_profiler: cannot write the output file '" +
            settings.flopsFile + "': " + std::strerror(errno);
      return false;
    }
    std::fclose(f);
  }
  return true;
}

void Monitors::beginStep(RunStats &stats) const {
  std::fill(std::begin(stats.phaseMilliseconds),
            std::end(stats.phaseMilliseconds), 0.0);
  std::fill(stats.instructionMilliseconds.begin(),
            stats.instructionMilliseconds.end(), 0.0);
  stats.collectiveCalls.clear();
}

bool Monitors::printsStep(long long s, long long last) const {
  return settings.stepsPerPrint <= 1 || s % settings.stepsPerPrint == 0 ||
         s == last;
}

StepBreakdown Monitors::breakdown(const RunStats &stats) const {
  const double *p = stats.phaseMilliseconds;
  StepBreakdown b;
  b.other = p[plan::PHASE_UNSPECIFIED];
  b.forward = p[plan::PHASE_FORWARD];
  b.backward = p[plan::PHASE_BACKWARD];
  b.step = p[plan::PHASE_OPTIMIZER];
  b.communication = p[plan::PHASE_COMMUNICATION];
  b.transfer = p[plan::PHASE_TRANSFER];
  return b;
}

std::string Monitors::breakdownText(const RunStats &stats) const {
  if (!settings.wallClock)
    return "";
  StepBreakdown b = breakdown(stats);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "  time (ms) | forward: %.3f | backward: %.3f | step: %.3f | "
                "communication: %.3f | transfer: %.3f | other: %.3f\n",
                b.forward, b.backward, b.step, b.communication, b.transfer,
                b.other);
  return buf;
}

std::string Monitors::breakdownJson(const RunStats &stats) const {
  if (!settings.wallClock)
    return "";
  StepBreakdown b = breakdown(stats);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                ", \"time_forward_ms\": %.6f, \"time_backward_ms\": %.6f, "
                "\"time_step_ms\": %.6f, \"time_communication_ms\": %.6f, "
                "\"time_transfer_ms\": %.6f, \"time_other_ms\": %.6f",
                b.forward, b.backward, b.step, b.communication, b.transfer,
                b.other);
  return buf;
}

bool Monitors::writeCsv(const std::string &tag, double value, int64_t step,
                        std::string &err) {
  std::string name = tag;
  std::replace(name.begin(), name.end(), '/', '_');
  std::replace(name.begin(), name.end(), ' ', '_');
  std::string path = settings.csvDir + "/" + name + ".csv";
  std::FILE *f = std::fopen(path.c_str(), "a");
  if (!f) {
    err = "csv_monitor: cannot write '" + path + "': " + std::strerror(errno);
    return false;
  }
  // DeepSpeed writes the header the first time a run logs the tag; rows
  // end with "\r\n" (Python's csv module).
  if (csvStarted.insert(name).second)
    std::fprintf(f, "step,%s\r\n", tag.substr(tag.rfind('/') + 1).c_str());
  std::fprintf(f, "%lld,%s\r\n", static_cast<long long>(step),
               pythonFloat(value).c_str());
  return std::fclose(f) == 0 ||
         (err = "csv_monitor: cannot write '" + path + "'", false);
}

bool Monitors::writeScalars(RunContext &ctx, const TrainState &ts,
                            const StepFigures &f, std::string &err) {
  if (!tensorboardOpen && settings.csvDir.empty())
    return true;
  // DeepSpeed's x axis: the samples of every data-parallel rank so far.
  int64_t batch = ts.data.samples * ts.accum * ctx.dpSize;
  int64_t before = (f.step - 1) * batch, after = f.step * batch;
  std::vector<std::tuple<std::string, double, int64_t>> events = {
      {"Train/Samples/train_loss", f.loss, before}};
  // The rate after the step (DeepSpeed reads it after the scheduler's
  // step): the next step's.
  const PlanInfo &info = ctx.info;
  double next = ds::scheduledLr(info.schedule, ts.lr, f.step + 1,
                                info.warmupSteps, info.totalSteps, info.minLr);
  if (!std::isnan(next))
    events.push_back({"Train/Samples/lr", next, after});
  if (ctx.info.lossScaling)
    events.push_back({"Train/Samples/loss_scale", ts.scaler.scale, after});
  if (settings.wallClock || settings.flopsStep > 0) {
    StepBreakdown b = breakdown(ctx.stats);
    events.push_back({"Train/Samples/elapsed_time_ms_forward", b.forward,
                      after});
    events.push_back({"Train/Samples/elapsed_time_ms_backward",
                      b.backward + b.communication, after});
    events.push_back({"Train/Samples/elapsed_time_ms_backward_inner",
                      b.backward, after});
    events.push_back({"Train/Samples/elapsed_time_ms_backward_allreduce",
                      b.communication, after});
    events.push_back({"Train/Samples/elapsed_time_ms_step", b.step, after});
  }
  for (const auto &[tag, value, x] : events) {
    if (tensorboardOpen &&
        !tensorboard.addScalar(tag, static_cast<float>(value), x)) {
      err = "tensorboard: cannot write '" + tensorboard.path() + "'";
      return false;
    }
    if (!settings.csvDir.empty() && !writeCsv(tag, value, x, err))
      return false;
  }
  if (tensorboardOpen && !tensorboard.flush()) {
    err = "tensorboard: cannot write '" + tensorboard.path() + "'";
    return false;
  }
  return true;
}

void Monitors::recordComms(RunContext &ctx) {
  const plan::Program &prog = ctx.plan->proto.programs(0);
  for (const RunStats::CollectiveCall &c : ctx.stats.collectiveCalls) {
    if (!settings.commsKinds.empty() && !settings.commsKinds.count(c.kind))
      continue;
    std::string name = commName(c.kind);
    if (settings.commsDebug && c.instruction < prog.instructions_size())
      name += " | " + prog.instructions(c.instruction).location();
    comms[name][c.bytes].push_back(c.milliseconds);
    commsKindOf[name] = c.kind;
    if (settings.comms == "verbose" && ctx.lead) {
      auto [alg, bus] =
          bandwidth(c.kind, c.bytes, c.milliseconds, ctx.sc->size());
      std::printf("comm op: %s | time (ms): %.2f | msg size: %s | algbw "
                  "(Gbps): %.2f | busbw (Gbps): %.2f\n",
                  name.c_str(), c.milliseconds, sizeText(c.bytes).c_str(),
                  alg, bus);
    }
  }
}

bool Monitors::afterStep(RunContext &ctx, const TrainState &ts,
                         const StepFigures &f, std::string &err) {
  StepBreakdown b = breakdown(ctx.stats);
  if (settings.wallClock) {
    total.forward += b.forward;
    total.backward += b.backward;
    total.step += b.step;
    total.communication += b.communication;
    total.transfer += b.transfer;
    total.other += b.other;
    ++timedSteps;
  }
  if (!settings.comms.empty())
    recordComms(ctx);
  if (!ctx.lead)
    return true;
  if (!writeScalars(ctx, ts, f, err))
    return false;
  if (settings.flopsStep == f.step) {
    flopsDone = true;
    return writeFlopsProfile(ctx, ts, f, settings, b, err);
  }
  return true;
}

void Monitors::finish(RunContext &ctx) {
  if (!ctx.lead)
    return;
  if (settings.wallClock && timedSteps > 0) {
    double n = static_cast<double>(timedSteps);
    std::printf("wall clock breakdown, mean per step over %lld steps (ms): "
                "forward %.3f | backward %.3f | step %.3f | communication "
                "%.3f | transfer %.3f | other %.3f\n",
                timedSteps, total.forward / n, total.backward / n,
                total.step / n, total.communication / n, total.transfer / n,
                total.other / n);
  }
  if (settings.flopsStep > 0 && !flopsDone)
    std::printf("flops profiler: step %lld was not run (the run ended "
                "before it)\n",
                static_cast<long long>(settings.flopsStep));
  if (settings.comms.empty())
    return;
  // DeepSpeed's comms summary: per op, per message size.
  std::printf("comms summary (rank 0's collectives, %d ranks):\n",
              ctx.sc->size());
  std::printf("%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n", "Comm. Op",
              "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
              "tput_avg (Gbps)", "busbw_avg (Gbps)");
  for (const auto &[name, sizes] : comms) {
    std::printf("%s\n", name.c_str());
    for (const auto &[bytes, times] : sizes) {
      std::vector<double> alg, bus;
      double sum = 0;
      for (double ms : times) {
        auto [a, b] = bandwidth(commsKindOf[name], bytes, ms, ctx.sc->size());
        alg.push_back(a);
        bus.push_back(b);
        sum += ms;
      }
      std::printf("%-20s%-20s%-20zu%-20.2f%-20.2f%-20.2f%-20.2f\n", "",
                  sizeText(bytes).c_str(), times.size(), sum, trimMean(times),
                  trimMean(alg), trimMean(bus));
    }
  }
  if (comms.empty())
    std::printf("(no collectives were logged)\n");
}

bool monitorStep(RunContext &ctx, const TrainState &ts, const StepFigures &f) {
  std::string err;
  return ctx.monitors->afterStep(ctx, ts, f, err) || ctx.fail(err);
}

bool setUpMonitors(RunContext &ctx) {
  auto monitors = std::make_shared<Monitors>();
  std::string err;
  if (!resolveMonitorSettings(ctx.opts, ctx.info.options, monitors->settings,
                              err))
    return ctx.failEveryRank(err);
  if (ctx.trainingPlan) {
    if (monitors->settings.needsTiming())
      ctx.execOptions.profile = true;
    if (!monitors->start(ctx, err))
      return ctx.fail(err);
  }
  ctx.monitors = std::move(monitors);
  return true;
}

} // namespace ds::rt
