//===- TrainerImpl.h - the state of a run (runtime internal) ----*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// A run of a plan in parts: the ranks' layout, the executors and the input
// files (RunSetup.cpp); batches and token windows (TrainerData.cpp); the
// step loop and forward runs (Trainer.cpp); checkpoints and trained
// weights (TrainerCheckpoint.cpp); progress lines and the report
// (RunReport.cpp). Each part returns false after recording the error in
// the context.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_TRAINERIMPL_H
#define DS_RUNTIME_TRAINERIMPL_H

#include "FreezeAuto.h"
#include "ds/Runtime/Comm.h"
#include "ds/Runtime/LossScaler.h"
#include "ds/Runtime/Runtime.h"
#include "ds/Runtime/Trainer.h"
#include "ds/Support/PipelineSchedule.h"

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ds::rt {

class Monitors; // Monitor.h

/// Everything a run holds: the options, the ranks' layout, the plan's
/// figures and the executors.
struct RunContext {
  const RunOptions &opts;
  Communicator &world;
  RunResult result;
  /// This rank's plan (with pipeline parallelism: its first chunk's).
  std::shared_ptr<const Plan> plan;
  PlanInfo info;
  // Pipeline parallelism (MPMD): this rank runs its stage's plan; `sc` is
  // the communicator of its stage's ranks (without pipeline: the world).
  int stages = 1, stage = 0, stageRanks = 1;
  int virt = 1; // model chunks per rank (interleaved)
  std::unique_ptr<Communicator> stageComm;
  Communicator *sc = nullptr;
  std::vector<ds::PipeStep> order;
  std::string scheduleName;
  std::map<std::string, HostTensor> pipelineInputs; // every stage's
  std::vector<std::shared_ptr<const Plan>> chunkPlans;
  std::shared_ptr<const Plan> pipelinePlan; // the container (its tied list)
  /// "pipeline stage S of P: ", named in this rank's errors.
  std::string stageTag;
  // Data parallelism is over the ranks of different tensor-parallel
  // groups: the ranks of one group read the same batch.
  int tensorParallel = 1, dpSize = 1, dpRank = 0;
  bool lead = false; // prints progress and writes files
  bool trainingPlan = false;
  /// The plan's memory and communication figures (this rank's chunks
  /// together): what the run checks and prints against.
  Footprint planned;
  ExecutorOptions execOptions;
  /// One executor per model chunk (one without interleaving).
  std::vector<std::unique_ptr<Executor>> execs;
  std::FILE *log = nullptr; // --log-json
  /// steps_per_print, wall_clock_breakdown, monitors, comms logger, flops
  /// profiler (Monitor.cpp); set by setUpRun.
  std::shared_ptr<Monitors> monitors;
  RunStats stats;

  RunContext(const RunOptions &opts, Communicator &world)
      : opts(opts), world(world), sc(&world) {}
  ~RunContext() { closeLog(); }
  void closeLog();
  Executor *exec() const { return execs[0].get(); }
  /// The executor of a schedule item's model chunk.
  Executor *execFor(int chunk) const;
  std::vector<Executor *> allExecs() const;
  /// This rank failed alone: "rank R: stage: message", the world ends.
  bool fail(const std::string &message);
  /// Every rank found the error itself: "rank R: message", each ends.
  bool failEveryRank(const std::string &message);
};

/// The training data: batches from --data, token windows from --tokens.
struct TrainData {
  std::map<std::string, HostTensor> arrays;
  /// The graph inputs the data feeds (not ds.step, ds.loss_scale).
  std::vector<std::pair<std::string, HostTensor>> specs;
  std::string names; // of the graph inputs, for messages
  int64_t batches = 1, samples = 0;
  int64_t tokensPerSample = 0; // of the first integer input (token ids)
  std::vector<int64_t> tokens;
  std::string tokIn, tokOut;
  std::vector<int64_t> window; // [batch, T]
};

/// Evaluation during training (TrainerEval.cpp): the --eval-data batches
/// and the eval losses so far (step, loss).
struct EvalRun {
  TrainData data;
  int64_t batches = 0; // evaluated per evaluation
  std::vector<std::pair<long long, double>> losses;
  uint64_t arenaHighWater = 0, arenaPlanned = 0;
};

/// A training run's progress and figures.
struct TrainState {
  TrainData data;
  EvalRun eval;
  double lr = 0;
  double firstLoss = 0, lastLoss = 0, totalMs = 0;
  long long stepsDone = 0, firstStep = 1;
  int64_t accum = 1;
  bool progressBar = false;
  // What this rank holds and hands to collectives, measured, against the
  // plan's figures; offload: what lives in host memory and on NVMe.
  uint64_t measuredParams = 0, measuredBuffers = 0, measuredState = 0;
  uint64_t measuredHost = 0, measuredNvme = 0;
  // A run moves what the plan's transfers say; measured per step.
  uint64_t stepToHost = 0, stepToDevice = 0, stepNvmeRead = 0,
           stepNvmeWrite = 0;
  uint64_t stepComm = 0, plannedComm = 0;
  // The steps whose handed bytes equal the plan's (each pipeline stage
  // reports its own).
  long long commAsPlanned = 0;
  LossScaler scaler;
  FreezeAuto freeze; // 1-bit Adam's freeze_step auto
  // With pipeline parallelism: the activation stash, measured and planned.
  uint64_t plannedStash = 0, stashHigh = 0;
  int stashCopies = 0;
};

/// One step's figures for its progress line.
struct StepFigures {
  long long step = 0;
  double loss = 0, samplesPerSecond = 0, lr = 0;
  double usedScale = 0;
  bool overflow = false;
};

// RunSetup.cpp
/// Loads the plan, lays out the ranks, checks the plan against the
/// options and the world, creates the executors and binds --inputs.
bool setUpRun(RunContext &ctx);

// TrainerData.cpp
bool loadBatches(RunContext &ctx, TrainData &data);
bool loadTokens(RunContext &ctx, TrainData &data);
/// Sets the inputs of run `m` (1-based) on `ex`: this rank's rows of the
/// batch, and with `tokens` the token windows.
bool feedBatches(RunContext &ctx, const TrainData &data, Executor *ex,
                 long long m);
bool feedTokens(RunContext &ctx, const TrainData &data, Executor *ex,
                long long m);

/// Checks data array `name` against graph input `spec` and counts its
/// batches; errors start with `what` ("data array").
bool checkArray(RunContext &ctx, TrainData &data, const std::string &name,
                const HostTensor &spec, const HostTensor &t,
                const std::string &what = "data array");

// TrainerEval.cpp
/// --eval-data: loads and checks the batches (before step 1).
bool prepareEval(RunContext &ctx, TrainState &ts);
/// Evaluates after step `step` (0: before training) when it is due: every
/// --eval-every steps and after the last (`last`).
bool evaluateIfDue(RunContext &ctx, TrainState &ts, long long step,
                   bool last);
/// The report's eval line.
void printEvalReport(RunContext &ctx, const TrainState &ts);

// TrainerCheckpoint.cpp
/// A folder that cannot take a checkpoint is refused before step 1.
bool probeSaveFolder(RunContext &ctx);
bool resumeRun(RunContext &ctx, TrainState &ts);
bool saveStep(RunContext &ctx, TrainState &ts, long long step);
/// --save-weights: every rank takes part, the lead writes.
bool saveTrainedWeights(RunContext &ctx);

// RunReport.cpp
void printStep(RunContext &ctx, const TrainState &ts, const StepFigures &f);
void printTrainingReport(RunContext &ctx, const TrainState &ts);
void printForward(RunContext &ctx, double loss, double totalMs);
void printProfile(const RunStats &stats);
/// "42.1s", "3m07s", "2h05m".
std::string clockText(double seconds);
bool endsWith(const std::string &s, const std::string &suffix);

} // namespace ds::rt

#endif // DS_RUNTIME_TRAINERIMPL_H
