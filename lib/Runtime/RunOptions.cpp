//===- RunOptions.cpp - the flags of a run, declared once -----------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The flag table: each flag's names, --help text and parser, in --help's
// order. ds-run's command line and --help are derived from it.
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/RunOptions.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>

namespace ds::rt {

int64_t RunOptions::defaultThreads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

bool parseInt(const std::string &s, int64_t &v) {
  char *end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end && *end == 0;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

using Setter = std::function<std::string(RunOptions &, const std::string &)>;

/// A flag that stores its value in a string field.
Setter toString(std::string RunOptions::*field) {
  return [field](RunOptions &o, const std::string &v) {
    o.*field = v;
    return std::string();
  };
}

/// A flag that sets a boolean field.
Setter toTrue(bool RunOptions::*field) {
  return [field](RunOptions &o, const std::string &) {
    o.*field = true;
    return std::string();
  };
}

/// A flag that takes an integer: at least `min` (INT64_MIN: any).
Setter toInt(int64_t RunOptions::*field, const std::string &flag,
             int64_t min) {
  return [field, flag, min](RunOptions &o, const std::string &v) {
    int64_t n;
    if (!parseInt(v, n) || n < min)
      return flag + " needs a positive integer, got '" + v + "'";
    o.*field = n;
    return std::string();
  };
}

/// A flag whose value is one of `choices`.
Setter toChoice(std::string RunOptions::*field, const std::string &flag,
                const std::string &choices) {
  return [field, flag, choices](RunOptions &o, const std::string &v) {
    std::string list = ", " + choices + ",";
    if (v.empty() || v.find(',') != std::string::npos ||
        list.find(", " + v + ",") == std::string::npos)
      return flag + "='" + v + "' is not one of " + choices;
    o.*field = v;
    return std::string();
  };
}

std::string setInjectOverflow(RunOptions &o, const std::string &v) {
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string part = v.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t k;
    if (!parseInt(part, k) || k < 1)
      return "--inject-overflow needs positive run numbers, got '" + v + "'";
    o.injectOverflow.push_back(static_cast<uint64_t>(k));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return "";
}

std::string setSaveWeights(RunOptions &o, const std::string &v) {
  o.saveWeights = v;
  if (!endsWith(v, ".onnx") && !endsWith(v, ".npz") &&
      !endsWith(v, ".safetensors"))
    return "--save-weights writes .onnx, .safetensors or .npz, got '" + v + "'";
  return "";
}

std::string setLr(RunOptions &o, const std::string &v) {
  char *end = nullptr;
  o.lr = std::strtod(v.c_str(), &end);
  if (!end || *end || !(o.lr >= 0))
    return "--lr needs a non-negative number, got '" + v + "'";
  return "";
}

using O = RunOptions;

RunFlag flag(std::vector<std::string> names, std::string usage,
             std::string help, Setter set, std::string missing = "") {
  RunFlag f;
  f.names = std::move(names);
  f.usage = std::move(usage);
  f.help = std::move(help);
  f.set = std::move(set);
  f.missing = std::move(missing);
  return f;
}

/// A flag without a value that sets `field`.
RunFlag option(std::vector<std::string> names, std::string help,
               bool O::*field) {
  std::string usage = help.empty() ? "" : names[0]; // unlisted: no help
  RunFlag f = flag(names, usage, std::move(help), toTrue(field));
  f.takesValue = false;
  return f;
}

/// A flag that asks for something else than a run.
RunFlag action(std::vector<std::string> names, std::string help, RunAction a) {
  RunFlag f = flag(names, names[0], std::move(help), nullptr);
  f.takesValue = false;
  f.action = a;
  return f;
}

/// What runs, on which data.
std::vector<RunFlag> trainingFlags() {
  return {
      option({"--forward-only"},
             "evaluate a forward plan (compiled without --optimizer)",
             &O::forwardOnly),
      flag({"--steps"}, "--steps N",
           "train: run N steps of a training plan (ds-opt\n"
           "--optimizer=...), printing step, loss, lr, samples/s",
           toInt(&O::steps, "--steps", 1)),
      flag({"--data"}, "--data FILE.npz",
           "training data: arrays named by graph inputs, either\n"
           "one batch (used every step) or k batches stacked\n"
           "along the first dimension (used in turn)",
           toString(&O::dataPath), "--data needs a file"),
      flag({"--tokens"}, "--tokens FILE",
           "language-model data: token ids as raw .bin\n"
           "(--token-dtype uint8, uint16 or uint32) or .npy; each step\n"
           "samples batch windows at random (--seed), the\n"
           "inputs at [o, o+T) and the targets at [o+1, o+T+1)",
           toString(&O::tokensPath), "--tokens needs a file"),
      flag({"--token-inputs"}, "--token-inputs A,B",
           "the graph inputs that take the windows: inputs,\n"
           "targets (default: idx,targets)",
           [](O &o, const std::string &v) {
             o.tokenInputs = v;
             return v.find(',') == std::string::npos
                        ? "--token-inputs needs two graph input names, like "
                          "idx,targets"
                        : "";
           }),
      flag({"--token-dtype"}, "--token-dtype T",
           "uint16 (default), uint32, or uint8 (a text file's\n"
           "bytes as token ids), for a raw file",
           [](O &o, const std::string &v) {
             o.tokenDtype = v;
             return v != "uint8" && v != "uint16" && v != "uint32"
                        ? "--token-dtype is uint8, uint16 or uint32, got '" +
                              v + "'"
                        : std::string();
           }),
      flag({"--eval-data"}, "--eval-data FILE.npz",
           "evaluation data (--data's format): the plan's eval\n"
           "section (loss only: no gradients, update or dropout)\n"
           "runs over its batches at step 0, every --eval-every\n"
           "steps and after the last; prints 'eval loss X'",
           toString(&O::evalDataPath), "--eval-data needs a file"),
      flag({"--eval-every"}, "--eval-every N",
           "evaluate every N steps (without it: after the last)",
           toInt(&O::evalEvery, "--eval-every", 1)),
      flag({"--eval-batches"}, "--eval-batches K",
           "evaluate the first K batches of --eval-data (default:\n"
           "all)",
           toInt(&O::evalBatches, "--eval-batches", 1)),
      flag({"--lr"}, "--lr X", "override the plan's learning rate", setLr),
      flag({"--inject-overflow"}, "--inject-overflow K,..",
           "debug (fp16 plans): at these runs turn one gradient\n"
           "element into inf before the overflow check",
           setInjectOverflow, "--inject-overflow needs run numbers, like 3,5"),
  };
}

/// Checkpoints and trained weights.
std::vector<RunFlag> checkpointFlags() {
  return {
      flag({"--save"}, "--save DIR",
           "write a sharded checkpoint to DIR after the last\n"
           "step (and every K steps with --save-every K): one\n"
           "file per rank, a manifest with checksums, DIR/latest\n"
           "naming the newest complete one",
           toString(&O::saveDir), "--save needs a folder"),
      flag({"--save-every"}, "--save-every K", "checkpoint every K steps too",
           [](O &o, const std::string &v) {
             int64_t n;
             if (!parseInt(v, n) || n < 1)
               return "--save-every needs a positive integer, got '" + v + "'";
             o.saveEvery = n;
             return std::string();
           }),
      flag({"--resume"}, "--resume DIR",
           "continue from the checkpoint in DIR (its latest, or\n"
           "a step folder): --steps N is the total to reach; any\n"
           "plan of the same model and optimizer resumes it (other\n"
           "world size, ZeRO stage, TP/PP layout, recompute or\n"
           "buckets: the checkpoint is re-partitioned)",
           toString(&O::resumeDir), "--resume needs a checkpoint folder"),
      flag({"--consolidate"}, "--consolidate DIR",
           "merge the checkpoint's shards into whole tensors and\n"
           "write them with -o FILE (.safetensors or .npz); no\n"
           "plan or MPI needed (--with-optimizer-state adds the\n"
           "optimizer state)",
           toString(&O::consolidateDir),
           "--consolidate needs a checkpoint folder"),
      flag({"-o", "--output"}, "-o FILE",
           "the file --consolidate or --calibrate writes",
           toString(&O::outputPath), "-o needs a file"),
      option({"--with-optimizer-state"}, "", &O::withOptimizerState),
      flag({"--save-weights"}, "--save-weights FILE",
           "after training, write the parameters, named by their\n"
           "ONNX initializer names: FILE.onnx (the source model\n"
           "with trained initializers), FILE.safetensors or\n"
           "FILE.npz",
           setSaveWeights, "--save-weights needs a file"),
  };
}

/// Inputs and outputs, execution, logging, and the actions.
std::vector<RunFlag> runningFlags() {
  return {
      flag({"--inputs"}, "--inputs FILE",
           "graph inputs: a .npz whose arrays are named by graph\n"
           "input names, a .npy or ONNX TensorProto .pb given as\n"
           "NAME=FILE (a .pb's own name is used when NAME= is\n"
           "left out); repeat for several files",
           [](O &o, const std::string &v) {
             o.inputs.push_back(v);
             return std::string();
           },
           "--inputs needs a file"),
      flag({"--outputs"}, "--outputs FILE.npz",
           "write every graph output, named by output name",
           toString(&O::outputsPath), "--outputs needs a file"),
      flag({"--log-json"}, "--log-json FILE",
           "one JSON object per step: step, loss, time_ms,\n"
           "peak_bytes (arena high-water), planned_bytes",
           toString(&O::logJson), "--log-json needs a file"),
      flag({"--threads"}, "--threads N",
           "threads of the kernels' pool, GEMMs split over it\n"
           "(OpenBLAS one thread per call; default: all cores)",
           toInt(&O::threads, "--threads", 1)),
      flag({"--repeat"}, "--repeat N",
           "run the forward program N times (timing); outputs\n"
           "and losses are those of the last run",
           toInt(&O::repeat, "--repeat", 1)),
      flag({"--seed"}, "--seed S", "seed of random kernels (dropout); default 0",
           toInt(&O::seed, "--seed", INT64_MIN)),
      option({"--profile"}, "print time per kernel id", &O::profile),
      action({"--list-devices"},
             "print the backends usable here (cpu, and cuda when\n"
             "the CUDA backend is built and a device is visible)",
             RunAction::ListDevices),
      flag({"--backend"}, "--backend=B",
           "auto (default), cpu or cuda: where the plan runs;\n"
           "auto takes a visible CUDA device when the CUDA\n"
           "backend has every kernel the plan needs and the\n"
           "plan does not offload, else the CPU (with a note\n"
           "saying why)",
           toChoice(&O::backend, "--backend", "auto, cpu, cuda"),
           "--backend needs auto, cpu or cuda"),
      flag({"--nvme-path"}, "--nvme-path DIR",
           "NVMe offload: the folder of this run's swap files\n"
           "instead of the one the plan was compiled with\n"
           "(each rank writes one, removed when it ends); also\n"
           "--calibrate-nvme's",
           [](O &o, const std::string &v) {
             o.nvmePath = v;
             return v.empty() ? "--nvme-path needs a folder" : "";
           }),
      flag({"--on-nan"}, "--on-nan=M",
           "when a step's loss is NaN or infinite (checked as\n"
           "soon as the forward pass computes it, agreed over\n"
           "ranks, before any update): stop (default: exit 1\n"
           "naming the step and the first kernel result that is\n"
           "not finite, found by running the forward pass again),\n"
           "skip (the step changes nothing and is counted as\n"
           "skipped) or continue (no check)",
           toChoice(&O::onNan, "--on-nan", "stop, skip, continue"),
           "--on-nan needs stop, skip or continue"),
      option({"--no-progress-bar"},
             "a line per step even on a terminal (by default a run\n"
             "of more than 20 steps on a terminal shows a bar with\n"
             "the ETA and a full line every tenth of the run); every\n"
             "step line ends with the ETA, the run with a summary\n"
             "(samples/s, tokens/s, peak memory measured and\n"
             "planned, skipped steps)",
             &O::noProgressBar),
      action({"--list-kernels"},
             "print the kernel ids this runtime implements",
             RunAction::ListKernels),
      action({"--help", "-h"}, "this text", RunAction::Help),
  };
}

/// Monitors and logging: DeepSpeed's steps_per_print, wall_clock_breakdown,
/// tensorboard, csv_monitor, comms_logger and flops_profiler, which the plan
/// records from the config; these flags override it.
std::vector<RunFlag> monitorFlags() {
  return {
      flag({"--steps-per-print"}, "--steps-per-print N",
           "print the progress line of every N-th step (and the\n"
           "last); default: the plan's steps_per_print, else 1",
           toInt(&O::stepsPerPrint, "--steps-per-print", 1)),
      option({"--wall-clock-breakdown"},
             "time each step's forward, backward, optimizer step\n"
             "and communication (the plan's phases; kernels are\n"
             "synchronized): printed with each progress line, in\n"
             "--log-json and the monitors",
             &O::wallClockBreakdown),
      flag({"--tensorboard-dir"}, "--tensorboard-dir DIR",
           "write a TensorBoard event file into DIR: DeepSpeed's\n"
           "Train/Samples/train_loss, lr, loss_scale (fp16) and\n"
           "the wall-clock times, against samples",
           toString(&O::tensorboardDir), "--tensorboard-dir needs a folder"),
      flag({"--csv-monitor-dir"}, "--csv-monitor-dir DIR",
           "the same scalars as DeepSpeed's CSV monitor: one\n"
           "file per tag in DIR (step,<name> rows)",
           toString(&O::csvMonitorDir), "--csv-monitor-dir needs a folder"),
      flag({"--comms-logger"}, "--comms-logger=M",
           "summary: log every collective and print count,\n"
           "bytes and time per kind and message size at the\n"
           "end (DeepSpeed's comms summary); verbose: each call\n"
           "too",
           toChoice(&O::commsLogger, "--comms-logger", "summary, verbose"),
           "--comms-logger needs summary or verbose"),
      flag({"--flops-profile-step"}, "--flops-profile-step N",
           "profile step N: the plan's FLOPs per op and module,\n"
           "the step's measured time and FLOP/s",
           toInt(&O::flopsProfileStep, "--flops-profile-step", 1)),
      flag({"--flops-output-file"}, "--flops-output-file FILE",
           "write the flops profile to FILE (default: stdout)",
           toString(&O::flopsOutputFile), "--flops-output-file needs a file"),
  };
}

/// Measuring the machine for the planner.
std::vector<RunFlag> calibrationFlags() {
  return {
      option({"--calibrate"},
             "measure this machine for the planner and write its\n"
             "description (JSON) to -o FILE: GEMM classes, memory\n"
             "bandwidth, kernel families; under mpirun -np N the\n"
             "collectives too (docs/calibration.md); runs no plan",
             &O::calibrate),
      option({"--calibrate-quick"},
             "with --calibrate: fewer sizes and repetitions (a\n"
             "few seconds, for tests; rougher figures)",
             &O::calibrateQuick),
      option({"--calibrate-nvme"},
             "with --calibrate: also the NVMe offload engine's\n"
             "write and read rates, through a temporary file in\n"
             "--nvme-path (default $TMPDIR, else /tmp)",
             &O::calibrateNvme),
      option({"--calibrate-isolated"},
             "with --calibrate-kernels-of: keep each kernel's\n"
             "isolated figure (the sample plans are not run and\n"
             "timed in step; docs/calibration.md)",
             &O::calibrateIsolated),
      flag({"--calibrate-kernels-of"}, "--calibrate-kernels-of=PLANS",
           "with --calibrate: also time each kernel of these\n"
           "plans (comma-separated plan.bin files) at the\n"
           "plans' own operand shapes, written as kernels.kinds\n"
           "(per kernel: overhead and bytes/s)",
           [](O &o, const std::string &v) {
             o.calibrateKernelsOf.clear();
             size_t at = 0;
             while (at <= v.size()) {
               size_t comma = v.find(',', at);
               std::string one = v.substr(at, comma == std::string::npos
                                                  ? std::string::npos
                                                  : comma - at);
               if (one.empty())
                 return std::string("--calibrate-kernels-of needs plan "
                                    "files, comma-separated");
               o.calibrateKernelsOf.push_back(one);
               if (comma == std::string::npos)
                 break;
               at = comma + 1;
             }
             return std::string();
           }),
  };
}

/// Whether argument `a` (its part before '=' is `flagPart`) is flag `f`.
bool matches(const RunFlag &f, const std::string &a,
             const std::string &flagPart) {
  for (const std::string &n : f.names) {
    bool longForm = f.takesValue && n.rfind("--", 0) == 0;
    if (a == n || (longForm && flagPart == n))
      return true;
  }
  return false;
}

} // namespace

const std::vector<RunFlag> &runFlags() {
  static const std::vector<RunFlag> flags = [] {
    std::vector<RunFlag> all;
    for (auto group :
         {trainingFlags, checkpointFlags, runningFlags, monitorFlags,
          calibrationFlags})
      for (RunFlag &f : group())
        all.push_back(std::move(f));
    return all;
  }();
  return flags;
}

std::string runUsage() {
  std::string text = "ds-run: execute a plan compiled by ds-opt.\n\n"
                     "usage: ds-run PLAN [options]\n\n";
  const size_t column = 24;
  for (const RunFlag &f : runFlags()) {
    if (f.usage.empty())
      continue;
    std::string left = "  " + f.usage;
    size_t at = 0;
    for (bool first = true; at <= f.help.size(); first = false) {
      size_t nl = f.help.find('\n', at);
      std::string line = f.help.substr(at, nl == std::string::npos
                                               ? std::string::npos
                                               : nl - at);
      // The help starts at column 24, at least two spaces after the flag.
      std::string head = first ? left : "";
      head += head.size() < column ? std::string(column - head.size(), ' ')
                                   : std::string(2, ' ');
      text += head + line + "\n";
      if (nl == std::string::npos)
        break;
      at = nl + 1;
    }
  }
  return text + "\nErrors are one line 'error: ...' and exit code 1.\n";
}

bool parseRunArguments(int argc, const char *const *argv, RunOptions &options,
                       RunAction &action, std::string &err) {
  action = RunAction::Run;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string flagPart = a.substr(0, a.find('='));
    const RunFlag *f = nullptr;
    for (const RunFlag &candidate : runFlags())
      if (matches(candidate, a, flagPart))
        f = &candidate;
    if (!f) {
      if (a.rfind("-", 0) == 0)
        err = "unknown option '" + a + "' (see ds-run --help)";
      else if (!options.planPath.empty())
        err = "more than one plan given: '" + options.planPath + "' and '" +
              a + "'";
      else
        options.planPath = a;
      if (!err.empty())
        return false;
      continue;
    }
    if (f->action != RunAction::Run) {
      action = f->action;
      return true;
    }
    std::string value;
    size_t eq = a.find('=');
    if (!f->takesValue) {
      // a flag alone
    } else if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      err = f->missing.empty() ? f->set(options, "") : f->missing;
      return false;
    }
    if (err = f->set(options, value); !err.empty())
      return false;
  }
  return checkRunOptions(options, err);
}

namespace {
/// --calibrate runs no plan: the flags of a run are refused beside it.
std::string checkCalibrateOptions(const RunOptions &o) {
  if (!o.planPath.empty())
    return "--calibrate measures the machine and runs no plan (got '" +
           o.planPath + "')";
  if (!o.consolidateDir.empty())
    return "--calibrate and --consolidate are separate runs";
  const std::pair<bool, const char *> planFlags[] = {
      {o.forwardOnly, "--forward-only"}, {o.steps != 0, "--steps"},
      {!o.dataPath.empty(), "--data"},   {!o.tokensPath.empty(), "--tokens"},
      {!o.inputs.empty(), "--inputs"},   {!o.outputsPath.empty(), "--outputs"},
      {!o.saveDir.empty(), "--save"},    {!o.resumeDir.empty(), "--resume"},
      {!o.logJson.empty(), "--log-json"},
      {!o.saveWeights.empty(), "--save-weights"},
      {o.repeat != 1, "--repeat"},       {o.profile, "--profile"}};
  for (const auto &[given, name] : planFlags)
    if (given)
      return std::string(name) +
             " is a plan's; --calibrate takes -o, --threads, "
             "--calibrate-quick, --calibrate-nvme, --calibrate-kernels-of, "
             "--calibrate-isolated and --nvme-path";
  if (o.backend == "cuda")
    return "--calibrate measures the CPU backend; calibrating CUDA devices "
           "is not implemented (leave out --backend=cuda)";
  if (o.outputPath.empty())
    return "--calibrate needs -o FILE (the machine description to write, "
           "JSON)";
  if (o.calibrateIsolated && o.calibrateKernelsOf.empty())
    return "--calibrate-isolated needs --calibrate-kernels-of";
  return "";
}
} // namespace

bool checkRunOptions(const RunOptions &o, std::string &err) {
  if (o.calibrate) {
    err = checkCalibrateOptions(o);
  } else if (o.calibrateQuick || o.calibrateNvme ||
             !o.calibrateKernelsOf.empty() || o.calibrateIsolated) {
    err = std::string(o.calibrateQuick    ? "--calibrate-quick"
                      : o.calibrateNvme   ? "--calibrate-nvme"
                      : o.calibrateIsolated ? "--calibrate-isolated"
                                          : "--calibrate-kernels-of") +
          " needs --calibrate";
  } else if (!o.consolidateDir.empty()) {
    if (o.outputPath.empty())
      err = "--consolidate needs -o FILE (.safetensors or .npz)";
    else if (!o.planPath.empty())
      err = "--consolidate needs no plan (got '" + o.planPath + "')";
  } else if (!o.outputPath.empty()) {
    err = "-o is for --consolidate or --calibrate; a plan's outputs go to "
          "--outputs";
  } else if (o.saveEvery && o.saveDir.empty()) {
    err = "--save-every needs --save DIR";
  } else if ((o.evalEvery || o.evalBatches) && o.evalDataPath.empty()) {
    err = std::string(o.evalEvery ? "--eval-every" : "--eval-batches") +
          " needs --eval-data FILE.npz (the evaluation batches)";
  } else if (!o.evalDataPath.empty() && o.forwardOnly) {
    err = "--eval-data evaluates during training (--steps); a forward plan "
          "runs with --forward-only --inputs";
  } else if (o.planPath.empty()) {
    err = "no plan given (usage: ds-run PLAN --forward-only ...; see --help)";
  }
  return err.empty();
}

} // namespace ds::rt
