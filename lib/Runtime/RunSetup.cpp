//===- RunSetup.cpp - a run's ranks, plan checks and executors ------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Before a run: the plan is loaded and the ranks laid out (pipeline stages
// and their model chunks, tensor-parallel groups, data-parallel ranks), the
// plan is checked against the options and the world, the backend chosen,
// one executor created per model chunk and the --inputs files bound.
//
//===----------------------------------------------------------------------===//

#include "Monitor.h"
#include "TrainerImpl.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ds::rt {

void RunContext::closeLog() {
  if (log)
    std::fclose(log);
  log = nullptr;
}

Executor *RunContext::execFor(int chunk) const {
  int k = stages > 1 ? chunk / stages : 0;
  return execs[k].get();
}

std::vector<Executor *> RunContext::allExecs() const {
  std::vector<Executor *> all;
  for (const auto &e : execs)
    all.push_back(e.get());
  return all;
}

bool RunContext::fail(const std::string &message) {
  result.ok = false;
  result.abortWorld = true;
  result.error = world.size() > 1 ? "rank " + std::to_string(world.rank()) +
                                        ": " + stageTag + message
                                  : message;
  return false;
}

bool RunContext::failEveryRank(const std::string &message) {
  result.ok = false;
  result.abortWorld = false;
  result.error = world.size() > 1
                     ? "rank " + std::to_string(world.rank()) + ": " + message
                     : message;
  return false;
}

namespace {

/// Pipeline parallelism: this rank's stage, its model chunks and its
/// schedule, and the stage's communicator.
bool layOutPipeline(RunContext &ctx) {
  std::string err;
  const std::string &planPath = ctx.opts.planPath;
  Communicator &world = ctx.world;
  std::shared_ptr<const Plan> first = stagePlan(*ctx.plan, 0, err);
  if (!first)
    return ctx.fail(err);
  int stages = ctx.stages;
  int want = describe(*first).worldSize * stages;
  if (want != world.size())
    return ctx.failEveryRank(
        "'" + planPath + "' is a pipeline of " + std::to_string(stages) +
        " stages x " + std::to_string(want / stages) +
        " rank(s) per stage = " + std::to_string(want) +
        " ranks; this run has " + std::to_string(world.size()) +
        " (start it with mpirun -np " + std::to_string(want) + ")");
  ctx.stageRanks = world.size() / stages;
  ctx.stage = world.rank() / ctx.stageRanks;
  ctx.scheduleName = pipelineScheduleName(*ctx.plan);
  ctx.virt = pipelineVirtualStages(*ctx.plan);
  std::vector<std::vector<ds::PipeStep>> all = ds::pipelineSchedule(
      ctx.scheduleName, stages, pipelineMicroBatches(*ctx.plan), ctx.virt);
  if (all.empty())
    return ctx.fail("'" + planPath + "' has an unknown pipeline schedule '" +
                    ctx.scheduleName + "'");
  ctx.order = all[ctx.stage];
  // This rank's model chunks: its stage, and with the interleaved
  // schedule stage + k x P for k < V.
  for (int k = 0; k < ctx.virt; ++k) {
    ctx.chunkPlans.push_back(stagePlan(*ctx.plan, ctx.stage + k * stages, err));
    if (!ctx.chunkPlans.back())
      return ctx.fail(err);
  }
  // Every stage's inputs (--token-inputs may name another stage's).
  for (int c = 0; c < stages * ctx.virt; ++c) {
    std::shared_ptr<const Plan> sp = stagePlan(*ctx.plan, c, err);
    if (!sp)
      return ctx.fail(err);
    for (auto &in : describe(*sp).inputs)
      ctx.pipelineInputs[in.first] = in.second;
  }
  ctx.pipelinePlan = ctx.plan;
  ctx.plan = ctx.chunkPlans[0];
  ctx.stageTag = "pipeline stage " + std::to_string(ctx.stage) + " of " +
                 std::to_string(stages) + ": ";
  ctx.stageComm = world.split(ctx.stage, world.rank() % ctx.stageRanks, err);
  if (!ctx.stageComm)
    return ctx.fail("cannot form the pipeline stage's group: " + err);
  ctx.sc = ctx.stageComm.get();
  return true;
}

/// Interleaved: the loss and the inputs of every chunk this rank holds.
void mergeChunkInfo(RunContext &ctx) {
  for (size_t k = 1; k < ctx.chunkPlans.size(); ++k) {
    PlanInfo more = describe(*ctx.chunkPlans[k]);
    if (ctx.info.loss.empty())
      ctx.info.loss = more.loss;
    ctx.info.batchAxes.insert(more.batchAxes.begin(), more.batchAxes.end());
    for (auto &in : more.inputs) {
      bool have = false;
      for (auto &mine : ctx.info.inputs)
        have |= mine.first == in.first;
      if (!have)
        ctx.info.inputs.push_back(in);
    }
  }
}

/// The plan against the world size and the options.
bool checkPlan(RunContext &ctx) {
  const RunOptions &o = ctx.opts;
  const PlanInfo &info = ctx.info;
  const std::string &planPath = o.planPath;
  int worldSize = ctx.world.size();
  if (ctx.stages == 1 && info.worldSize != worldSize)
    return ctx.failEveryRank(
        "'" + planPath + "' is compiled for " + std::to_string(info.worldSize) +
        " rank(s), this run has " + std::to_string(worldSize) +
        (info.worldSize > 1
             ? " (start it with mpirun -np " + std::to_string(info.worldSize) +
                   ")"
             : " (compile it with --world-size=" + std::to_string(worldSize) +
                   ")"));
  bool training = ctx.trainingPlan;
  if (!training && !o.forwardOnly)
    return ctx.fail("'" + planPath + "' holds a forward program only; run it "
                    "with --forward-only, or compile with ds-opt "
                    "--optimizer=... to train");
  if (training && o.forwardOnly)
    return ctx.fail("'" + planPath + "' is a training plan (" + info.optimizer +
                    "); run it with --steps N, or compile without "
                    "--optimizer for --forward-only");
  if (training && o.steps == 0)
    return ctx.fail("a training plan needs --steps N");
  if (!training && (o.steps || !o.dataPath.empty() || !o.tokensPath.empty()))
    return ctx.fail(
        "--steps and --data need a training plan (ds-opt --optimizer=...)");
  if (!training && (!o.saveDir.empty() || !o.resumeDir.empty()))
    return ctx.fail("--save and --resume need a training plan");
  return true;
}

/// Interleaved: this rank's chunks together (each has its own arena,
/// parameters and collectives).
Footprint plannedFootprint(const RunContext &ctx) {
  Footprint f = footprintOf(*ctx.plan);
  for (size_t k = 1; k < ctx.chunkPlans.size(); ++k) {
    Footprint more = footprintOf(*ctx.chunkPlans[k]);
    f.params += more.params;
    f.buffers += more.buffers;
    f.state += more.state;
    f.arena += more.arena;
    f.allReduceBytes += more.allReduceBytes;
    f.allGatherBytes += more.allGatherBytes;
    f.reduceScatterBytes += more.reduceScatterBytes;
    // The update sections' bytes (once per step) and the compressed
    // optimizers' phases (docs/compression.md, "With pipelines").
    f.onceBytes += more.onceBytes;
    f.warmupOnlyBytes += more.warmupOnlyBytes;
    f.warmupOnlyOnceBytes += more.warmupOnlyOnceBytes;
    f.compressedBytes += more.compressedBytes;
    f.compressedOnceBytes += more.compressedOnceBytes;
  }
  return f;
}

ExecutorOptions executorOptions(const RunContext &ctx) {
  const RunOptions &o = ctx.opts;
  ExecutorOptions options;
  options.threads = static_cast<int>(o.threads);
  options.seed = static_cast<uint64_t>(o.seed);
  options.profile = o.profile;
  options.lr = o.lr;
  options.comm = ctx.sc;
  if (ctx.stages > 1) {
    options.pipe = &ctx.world;
    options.pipeStride = ctx.stageRanks;
  }
  options.injectOverflow = o.injectOverflow;
  options.nanGuard = ctx.trainingPlan && o.onNan != "continue";
  options.nvmePath = o.nvmePath;
  // Test hook: DS_FAULT=nvme-free:BYTES pretends the NVMe folder has only
  // that much room.
  if (const char *fault = std::getenv("DS_FAULT");
      fault && std::strncmp(fault, "nvme-free:", 10) == 0)
    options.nvmePretendFree = std::strtoull(fault + 10, nullptr, 10);
  return options;
}

/// The backend: auto runs on a visible CUDA device when the CUDA backend
/// has every kernel the plan needs (and the plan does not offload), else
/// on the CPU; then one executor per model chunk.
bool createExecutors(RunContext &ctx) {
  ExecutorOptions &options = ctx.execOptions;
  bool isLead = ctx.world.rank() == 0;
  bool offloads = ctx.planned.hostTotal() + ctx.planned.nvmeStorage > 0;
  bool autoBackend = ctx.opts.backend == "auto";
  if (autoBackend) {
    bool gpu = builtWithCuda() && cudaDeviceVisible();
    options.backend = gpu && !offloads ? "cuda" : "cpu";
    if (gpu && offloads && isLead)
      std::fprintf(stderr, "note: running on the CPU: the plan offloads, and "
                           "offload on the CUDA backend is not yet proven on "
                           "a GPU (--backend=cuda runs it there)\n");
  } else {
    options.backend = ctx.opts.backend;
  }
  std::string err;
  std::unique_ptr<Executor> exec = Executor::create(ctx.plan, options, err);
  if (!exec && autoBackend && options.backend == "cuda") {
    if (isLead)
      std::fprintf(stderr, "note: running on the CPU: %s\n", err.c_str());
    options.backend = "cpu";
    exec = Executor::create(ctx.plan, options, err);
  }
  if (!exec)
    return ctx.fail(err);
  ctx.execs.push_back(std::move(exec));
  // Interleaved: one executor per model chunk (all on this rank's stage
  // communicator).
  for (size_t k = 1; k < ctx.chunkPlans.size(); ++k) {
    ctx.execs.push_back(Executor::create(ctx.chunkPlans[k], options, err));
    if (!ctx.execs.back())
      return ctx.fail(err);
  }
  if (options.backend != "cpu" && isLead)
    std::printf("device: %s\n", ctx.exec()->deviceName().c_str());
  return true;
}

/// A .npz's arrays that are graph inputs (the others, expected outputs
/// and such, are ignored).
bool bindNpz(RunContext &ctx, const std::string &file) {
  std::string err;
  std::map<std::string, HostTensor> arrays;
  if (!readNpz(file, arrays, err))
    return ctx.fail(err);
  Executor *exec = ctx.exec();
  std::vector<std::string> names = exec->inputNames();
  for (auto &[arrayName, t] : arrays) {
    if (std::find(names.begin(), names.end(), arrayName) == names.end())
      continue;
    if (!exec->setInput(arrayName, std::move(t), err))
      return ctx.fail(err);
  }
  return true;
}

/// --inputs: a .npz, NAME=FILE.npy, or [NAME=]FILE.pb.
bool bindInputFiles(RunContext &ctx) {
  Executor *exec = ctx.exec();
  std::string err;
  for (const std::string &spec : ctx.opts.inputs) {
    std::string name, file = spec;
    size_t eq = spec.find('=');
    if (eq != std::string::npos) {
      name = spec.substr(0, eq);
      file = spec.substr(eq + 1);
    }
    if (endsWith(file, ".npz")) {
      if (!name.empty())
        return ctx.fail("--inputs " + spec + ": a .npz names its arrays itself");
      if (!bindNpz(ctx, file))
        return false;
    } else if (endsWith(file, ".pb")) {
      HostTensor t;
      std::string own;
      if (!readTensorProto(file, own, t, err) ||
          !exec->setInput(name.empty() ? own : name, std::move(t), err))
        return ctx.fail(err);
    } else if (endsWith(file, ".npy")) {
      if (name.empty())
        return ctx.fail("--inputs " + spec + ": give a .npy as NAME=FILE.npy");
      HostTensor t;
      if (!readNpy(file, t, err) || !exec->setInput(name, std::move(t), err))
        return ctx.fail(err);
    } else {
      return ctx.fail("--inputs " + spec +
                      ": expected a .npz, .npy or .pb file");
    }
  }
  return true;
}

} // namespace

bool setUpRun(RunContext &ctx) {
  std::string err;
  ctx.lead = ctx.world.rank() == 0;
  ctx.plan = loadPlan(ctx.opts.planPath, err);
  if (!ctx.plan)
    return ctx.fail(err);
  if (PlanInfo first = describe(*ctx.plan); first.shapesOnly)
    return ctx.fail("the plan was compiled from '" + first.weightsPath +
                    "', a shapes-only model (no weights; metadata "
                    "ds.shapes_only): ds-opt can plan and report it, ds-run "
                    "cannot run it; export the model with its weights and "
                    "compile that");
  ctx.stages = pipelineStages(*ctx.plan);
  ctx.stageRanks = ctx.world.size();
  if (ctx.stages > 1 && !layOutPipeline(ctx))
    return false;
  ctx.info = describe(*ctx.plan);
  mergeChunkInfo(ctx);
  ctx.tensorParallel = std::max(1, ctx.info.tensorParallel);
  ctx.dpSize = ctx.sc->size() / ctx.tensorParallel;
  ctx.dpRank = ctx.sc->rank() / ctx.tensorParallel;
  if (ctx.stages > 1) // the last stage has the loss: its first rank prints
    ctx.lead = ctx.stage == ctx.stages - 1 && ctx.sc->rank() == 0;
  ctx.trainingPlan = ctx.info.updatesParameters;
  if (ctx.trainingPlan && ctx.info.optimizer.empty())
    ctx.info.optimizer = "training_info";
  if (!checkPlan(ctx))
    return false;
  ctx.execOptions = executorOptions(ctx);
  if (!setUpMonitors(ctx)) // may turn the executors' timing on
    return false;
  if (!ctx.opts.injectOverflow.empty() && !ctx.info.lossScaling)
    return ctx.fail(
        "--inject-overflow needs an fp16 plan (ds-opt --precision=fp16)");
  ctx.planned = plannedFootprint(ctx);
  if (!createExecutors(ctx) || !bindInputFiles(ctx))
    return false;
  const std::string &logPath = ctx.opts.logJson;
  if (!logPath.empty() && ctx.lead &&
      !(ctx.log = std::fopen(logPath.c_str(), "w")))
    return ctx.fail("cannot write '" + logPath + "'");
  return true;
}

} // namespace ds::rt
