//===- ds-run.cpp - execute a ds plan -------------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//   ds-run plan.bin --forward-only --inputs in.npz --outputs out.npz
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Checkpoint.h"
#include "ds/Runtime/Comm.h"
#include "ds/Runtime/LossScaler.h"
#include "ds/Runtime/Runtime.h"
#include "ds/Runtime/Schedule.h"
#include "ds/Support/PipelineSchedule.h"

#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace ds::rt;

namespace {

const char *kUsage = R"(ds-run: execute a plan compiled by ds-opt.

usage: ds-run PLAN [options]

  --forward-only        evaluate a forward plan (compiled without --optimizer)
  --steps N             train: run N steps of a training plan (ds-opt
                        --optimizer=...), printing step, loss, lr, samples/s
  --data FILE.npz       training data: arrays named by graph inputs, either
                        one batch (used every step) or k batches stacked
                        along the first dimension (used in turn)
  --tokens FILE         language-model data: token ids as raw .bin
                        (--token-dtype uint16 or uint32) or .npy; each step
                        samples batch windows at random (--seed), the
                        inputs at [o, o+T) and the targets at [o+1, o+T+1)
  --token-inputs A,B    the graph inputs that take the windows: inputs,
                        targets (default: idx,targets)
  --token-dtype T       uint16 (default) or uint32, for a raw .bin
  --lr X                override the plan's learning rate
  --inject-overflow K,..  debug (fp16 plans): at these runs turn one gradient
                        element into inf before the overflow check
  --save DIR            write a sharded checkpoint to DIR after the last
                        step (and every K steps with --save-every K): one
                        file per rank, a manifest with checksums, DIR/latest
                        naming the newest complete one
  --save-every K        checkpoint every K steps too
  --resume DIR          continue from the checkpoint in DIR (its latest, or
                        a step folder): --steps N is the total to reach; the
                        plan must be the one that saved it, or the same
                        model compiled for another world size or ZeRO stage
                        (the checkpoint is then re-partitioned)
  --consolidate DIR     merge the checkpoint's shards into whole tensors and
                        write them with -o FILE (.safetensors or .npz); no
                        plan or MPI needed (--with-optimizer-state adds the
                        optimizer state)
  --save-weights FILE   after training, write the parameters, named by their
                        ONNX initializer names: FILE.onnx (the source model
                        with trained initializers), FILE.safetensors or
                        FILE.npz
  --inputs FILE         graph inputs: a .npz whose arrays are named by graph
                        input names, a .npy or ONNX TensorProto .pb given as
                        NAME=FILE (a .pb's own name is used when NAME= is
                        left out); repeat for several files
  --outputs FILE.npz    write every graph output, named by output name
  --log-json FILE       one JSON object per step: step, loss, time_ms,
                        peak_bytes (arena high-water), planned_bytes
  --threads N           threads for kernels and OpenBLAS (default: all cores)
  --repeat N            run the forward program N times (timing); outputs
                        and losses are those of the last run
  --seed S              seed of random kernels (dropout); default 0
  --profile             print time per kernel id
  --list-devices        print the backends usable here (cpu, and cuda when
                        the CUDA backend is built and a device is visible)
  --backend=B           auto (default), cpu or cuda: where the plan runs;
                        auto takes a visible CUDA device when the CUDA
                        backend has every kernel the plan needs and the
                        plan does not offload, else the CPU (with a note
                        saying why)
  --nvme-path DIR        NVMe offload: the folder of this run's swap files
                        instead of the one the plan was compiled with
                        (each rank writes one, removed when it ends)
  --on-nan=M            when a step's loss is NaN or infinite (checked as
                        soon as the forward pass computes it, agreed over
                        ranks, before any update): stop (default: exit 1
                        naming the step and the first kernel result that is
                        not finite, found by running the forward pass again),
                        skip (the step changes nothing and is counted as
                        skipped) or continue (no check)
  --no-progress-bar     a line per step even on a terminal (by default a run
                        of more than 20 steps on a terminal shows a bar with
                        the ETA and a full line every tenth of the run); every
                        step line ends with the ETA, the run with a summary
                        (samples/s, tokens/s, peak memory measured and
                        planned, skipped steps)
  --list-kernels        print the kernel ids this runtime implements
  --help                this text

Errors are one line 'error: ...' and exit code 1.
)";

std::unique_ptr<Communicator> comm; // MPI world or one rank
// Pipeline parallelism: "stage S of P: ", named in every error.
std::string stageTag;

int fail(const std::string &message) {
  if (comm && comm->size() > 1) {
    // One line per rank, then end every rank: no rank may wait forever in
    // a collective the failed one will never join (a pipeline's other
    // stages stop too).
    std::fprintf(stderr, "error: rank %d: %s%s\n", comm->rank(),
                 stageTag.c_str(), message.c_str());
    std::fflush(stderr);
    comm->abort(1);
  }
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

/// For an error every rank finds on its own (a plan for another world
/// size): one line per rank, then a normal exit 1 on every rank, so each
/// says so (an abort could end the others before they print).
int failEveryRank(const std::string &message) {
  if (comm && comm->size() > 1)
    std::fprintf(stderr, "error: rank %d: %s\n", comm->rank(), message.c_str());
  else
    std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool parseInt(const std::string &s, long long &v) {
  char *end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end && *end == 0;
}

std::string human(uint64_t bytes) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

void printProfile(const RunStats &stats) {
  // The last run's kernels, slowest first; GEMMs with their throughput.
  std::vector<std::pair<double, std::string>> rows;
  for (const auto &[k, v] : stats.kernelTimes)
    rows.push_back({v.milliseconds, k});
  std::sort(rows.rbegin(), rows.rend());
  std::printf("profile of the last run:\n");
  for (const auto &[ms, k] : rows) {
    const RunStats::KernelTime &t = stats.kernelTimes.at(k);
    std::printf("  %-28s %9.3f ms  %6lld calls", k.c_str(), ms,
                static_cast<long long>(t.calls));
    if (t.flops > 0 && ms > 0)
      std::printf("  %8.2f GFLOP/s", t.flops / (ms * 1e6));
    std::printf("\n");
  }
}

} // namespace

int run(int argc, char **argv);

/// "42.1s", "3m07s", "2h05m".
std::string clockText(double seconds) {
  char buf[32];
  if (seconds < 1)
    std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  else if (seconds < 60)
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  else if (seconds < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(seconds) / 3600,
                  static_cast<int>(seconds) / 60 % 60);
  return buf;
}

/// Pipeline parallelism, --save-weights: each stage's first rank sends its
/// stage's weights (name, dtype, shape, bytes) to the writer.
bool exchangeStageWeights(
    Communicator &world, int stage, int stages, int stageRanks, bool stageLead,
    bool writer, const std::vector<std::pair<std::string, const HostTensor *>> &own,
    std::vector<std::pair<std::string, HostTensor>> &received,
    std::string &err) {
  const int writerRank = (stages - 1) * stageRanks, tag = 30001;
  if (stageLead && !writer) {
    std::string blob;
    auto put = [&](const void *p, size_t n) {
      blob.append(static_cast<const char *>(p), n);
    };
    uint64_t count = own.size();
    put(&count, 8);
    for (const auto &[name, t] : own) {
      uint64_t n = name.size(), rank = t->shape.size(), bytes = t->data.size();
      int32_t dtype = static_cast<int32_t>(t->dtype);
      put(&n, 8);
      put(name.data(), n);
      put(&dtype, 4);
      put(&rank, 8);
      put(t->shape.data(), rank * 8);
      put(&bytes, 8);
      put(t->data.data(), bytes);
    }
    uint64_t size = blob.size();
    return world.send(&size, 8, writerRank, tag, err) &&
           world.send(blob.data(), size, writerRank, tag + 1, err) &&
           world.flushSends(err);
  }
  if (!writer)
    return true;
  for (int st = 0; st < stages - 1; ++st) {
    uint64_t size = 0;
    int from = st * stageRanks;
    if (!world.recv(&size, 8, from, tag, err))
      return false;
    std::string blob(size, '\0');
    if (!world.recv(blob.data(), size, from, tag + 1, err))
      return false;
    size_t at = 0;
    auto get = [&](void *p, size_t n) {
      if (at + n > blob.size())
        return false;
      std::memcpy(p, blob.data() + at, n);
      at += n;
      return true;
    };
    uint64_t count = 0;
    if (!get(&count, 8))
      return (err = "stage " + std::to_string(st) + " sent bad weights", false);
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t n = 0, rank = 0, bytes = 0;
      int32_t dtype = 0;
      HostTensor t;
      std::string name;
      if (!get(&n, 8) || n > blob.size())
        return (err = "stage " + std::to_string(st) + " sent bad weights", false);
      name.resize(n);
      if (!get(name.data(), n) || !get(&dtype, 4) || !get(&rank, 8) || rank > 64)
        return (err = "stage " + std::to_string(st) + " sent bad weights", false);
      t.dtype = static_cast<DType>(dtype);
      t.shape.resize(rank);
      if (!get(t.shape.data(), rank * 8) || !get(&bytes, 8) || bytes > blob.size())
        return (err = "stage " + std::to_string(st) + " sent bad weights", false);
      t.data.resize(bytes);
      if (!get(t.data.data(), bytes))
        return (err = "stage " + std::to_string(st) + " sent bad weights", false);
      received.push_back({name, std::move(t)});
    }
  }
  return true;
}

int main(int argc, char **argv) {
  // Malformed plans and models are reported by ds-run in one line each;
  // protobuf's own log lines would repeat them.
  google::protobuf::SetLogHandler(nullptr);
  int rc = run(argc, argv);
  comm.reset(); // MPI_Finalize
  return rc;
}

int run(int argc, char **argv) {
  std::string planPath, outputsPath, logPath;
  std::vector<std::string> inputSpecs;
  bool forwardOnly = false, profile = false, noProgressBar = false;
  std::string backend = "auto";
  std::string nvmePath;
  std::string onNan = "stop";
  std::string saveDir, resumeDir, consolidateDir, consolidateOut;
  long long saveEvery = 0;
  std::vector<uint64_t> injectOverflow;
  bool withState = false;
  std::string dataPath, saveWeights, tokensPath, tokenDtype = "uint16",
                                      tokenInputs = "idx,targets";
  long long steps = 0;
  double lrOverride = NAN;
  long long threads = std::max(1u, std::thread::hardware_concurrency());
  long long repeat = 1, seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string &out) {
      size_t eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
        out = a.substr(eq + 1);
        return true;
      }
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    std::string flag = a.substr(0, a.find('='));
    std::string v;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--list-devices") {
      // The backends this ds-run can use here.
      std::printf("cpu\n");
      if (builtWithCuda() && cudaDeviceVisible())
        std::printf("cuda\n");
      return 0;
    } else if (a == "--list-kernels") {
      for (const std::string &k : kernelNames())
        std::printf("%s\n", k.c_str());
      return 0;
    } else if (a == "--forward-only") {
      forwardOnly = true;
    } else if (a == "--profile") {
      profile = true;
    } else if (a == "--no-progress-bar") {
      noProgressBar = true;
    } else if (flag == "--on-nan") {
      if (!value(onNan))
        return fail("--on-nan needs stop, skip or continue");
      if (onNan != "stop" && onNan != "skip" && onNan != "continue")
        return fail("--on-nan='" + onNan + "' is not one of stop, skip, continue");
    } else if (flag == "--nvme-path") {
      if (!value(nvmePath) || nvmePath.empty())
        return fail("--nvme-path needs a folder");
    } else if (flag == "--backend") {
      if (!value(backend))
        return fail("--backend needs auto, cpu or cuda");
      if (backend != "auto" && backend != "cpu" && backend != "cuda")
        return fail("--backend='" + backend + "' is not one of auto, cpu, cuda");
    } else if (flag == "--inputs") {
      if (!value(v))
        return fail("--inputs needs a file");
      inputSpecs.push_back(v);
    } else if (flag == "--outputs") {
      if (!value(outputsPath))
        return fail("--outputs needs a file");
    } else if (flag == "--log-json") {
      if (!value(logPath))
        return fail("--log-json needs a file");
    } else if (flag == "--save-weights") {
      if (!value(saveWeights))
        return fail("--save-weights needs a file");
      if (!endsWith(saveWeights, ".onnx") && !endsWith(saveWeights, ".npz") &&
          !endsWith(saveWeights, ".safetensors"))
        return fail("--save-weights writes .onnx, .safetensors or .npz, got '" +
                    saveWeights + "'");
    } else if (flag == "--save") {
      if (!value(saveDir))
        return fail("--save needs a folder");
    } else if (flag == "--resume") {
      if (!value(resumeDir))
        return fail("--resume needs a checkpoint folder");
    } else if (flag == "--consolidate") {
      if (!value(consolidateDir))
        return fail("--consolidate needs a checkpoint folder");
    } else if (a == "-o" || flag == "--output") {
      if (!value(consolidateOut))
        return fail("-o needs a file");
    } else if (a == "--with-optimizer-state") {
      withState = true;
    } else if (flag == "--inject-overflow") {
      if (!value(v))
        return fail("--inject-overflow needs run numbers, like 3,5");
      size_t start = 0;
      while (start <= v.size()) {
        size_t comma = v.find(',', start);
        std::string part = v.substr(start, comma == std::string::npos
                                               ? std::string::npos
                                               : comma - start);
        long long k;
        if (!parseInt(part, k) || k < 1)
          return fail("--inject-overflow needs positive run numbers, got '" +
                      v + "'");
        injectOverflow.push_back(static_cast<uint64_t>(k));
        if (comma == std::string::npos)
          break;
        start = comma + 1;
      }
    } else if (flag == "--save-every") {
      if (!value(v) || !parseInt(v, saveEvery) || saveEvery < 1)
        return fail("--save-every needs a positive integer, got '" + v + "'");
    } else if (flag == "--tokens") {
      if (!value(tokensPath))
        return fail("--tokens needs a file");
    } else if (flag == "--token-inputs") {
      if (!value(tokenInputs) || tokenInputs.find(',') == std::string::npos)
        return fail("--token-inputs needs two graph input names, like idx,targets");
    } else if (flag == "--token-dtype") {
      if (!value(tokenDtype) || (tokenDtype != "uint16" && tokenDtype != "uint32"))
        return fail("--token-dtype is uint16 or uint32, got '" + tokenDtype + "'");
    } else if (flag == "--data") {
      if (!value(dataPath))
        return fail("--data needs a file");
    } else if (flag == "--lr") {
      char *end = nullptr;
      if (!value(v) || (lrOverride = std::strtod(v.c_str(), &end), !end || *end) ||
          !(lrOverride >= 0))
        return fail("--lr needs a non-negative number, got '" + v + "'");
    } else if (flag == "--steps") {
      if (!value(v) || !parseInt(v, steps) || steps < 1)
        return fail("--steps needs a positive integer, got '" + v + "'");
    } else if (flag == "--threads" || flag == "--repeat" || flag == "--seed") {
      long long n;
      if (!value(v) || !parseInt(v, n) || (flag != "--seed" && n < 1))
        return fail(flag + " needs a positive integer, got '" + v + "'");
      (flag == "--threads" ? threads : flag == "--repeat" ? repeat : seed) = n;
    } else if (a.rfind("-", 0) == 0) {
      return fail("unknown option '" + a + "' (see ds-run --help)");
    } else if (planPath.empty()) {
      planPath = a;
    } else {
      return fail("more than one plan given: '" + planPath + "' and '" + a + "'");
    }
  }
  if (!consolidateDir.empty()) {
    if (consolidateOut.empty())
      return fail("--consolidate needs -o FILE (.safetensors or .npz)");
    if (!planPath.empty())
      return fail("--consolidate needs no plan (got '" + planPath + "')");
    std::string err;
    if (!consolidateCheckpoint(consolidateDir, consolidateOut, withState, err))
      return fail(err);
    std::printf("consolidated '%s' into '%s'\n", consolidateDir.c_str(),
                consolidateOut.c_str());
    return 0;
  }
  if (!consolidateOut.empty())
    return fail("-o is for --consolidate; a plan's outputs go to --outputs");
  if (saveEvery && saveDir.empty())
    return fail("--save-every needs --save DIR");
  if (planPath.empty())
    return fail("no plan given (usage: ds-run PLAN --forward-only ...; see --help)");

  std::string err;
  comm = createCommunicator(err);
  if (!comm)
    return fail(err);
  bool lead = comm->rank() == 0; // rank 0 prints progress and writes files
  std::shared_ptr<const Plan> plan = loadPlan(planPath, err);
  if (!plan)
    return fail(err);
  // Pipeline parallelism (MPMD): this rank runs its stage's plan; `sc` is
  // the communicator of its stage's ranks, `comm` stays every rank.
  int stages = pipelineStages(*plan), stage = 0;
  int stageRanks = comm->size();
  std::unique_ptr<Communicator> stageComm;
  Communicator *sc = comm.get();
  std::vector<ds::PipeStep> order;
  std::string scheduleName;
  int virt = 1; // model chunks per rank (interleaved)
  std::map<std::string, HostTensor> pipelineInputs;
  std::vector<std::shared_ptr<const Plan>> chunkPlans;
  if (stages > 1) {
    std::shared_ptr<const Plan> first = stagePlan(*plan, 0, err);
    if (!first)
      return fail(err);
    int want = describe(*first).worldSize * stages;
    if (want != comm->size())
      return failEveryRank("'" + planPath + "' is a pipeline of " +
                           std::to_string(stages) + " stages x " +
                           std::to_string(want / stages) +
                           " rank(s) per stage = " + std::to_string(want) +
                           " ranks; this run has " +
                           std::to_string(comm->size()) +
                           " (start it with mpirun -np " +
                           std::to_string(want) + ")");
    stageRanks = comm->size() / stages;
    stage = comm->rank() / stageRanks;
    scheduleName = pipelineScheduleName(*plan);
    virt = pipelineVirtualStages(*plan);
    std::vector<std::vector<ds::PipeStep>> all = ds::pipelineSchedule(
        scheduleName, stages, pipelineMicroBatches(*plan), virt);
    if (all.empty())
      return fail("'" + planPath + "' has an unknown pipeline schedule '" +
                  scheduleName + "'");
    order = all[stage];
    // This rank's model chunks: its stage, and with the interleaved
    // schedule stage + k x P for k < V.
    for (int k = 0; k < virt; ++k) {
      chunkPlans.push_back(stagePlan(*plan, stage + k * stages, err));
      if (!chunkPlans.back())
        return fail(err);
    }
    // Every stage's inputs (--token-inputs may name another stage's).
    for (int c = 0; c < stages * virt; ++c) {
      std::shared_ptr<const Plan> sp = stagePlan(*plan, c, err);
      if (!sp)
        return fail(err);
      for (auto &in : describe(*sp).inputs)
        pipelineInputs[in.first] = in.second;
    }
    plan = chunkPlans[0];
    stageTag = "pipeline stage " + std::to_string(stage) + " of " +
               std::to_string(stages) + ": ";
    stageComm = comm->split(stage, comm->rank() % stageRanks, err);
    if (!stageComm)
      return fail("cannot form the pipeline stage's group: " + err);
    sc = stageComm.get();
  }
  PlanInfo info = describe(*plan);
  // Interleaved: the loss and the inputs of every chunk this rank holds.
  for (size_t k = 1; k < chunkPlans.size(); ++k) {
    PlanInfo more = describe(*chunkPlans[k]);
    if (info.loss.empty())
      info.loss = more.loss;
    for (auto &in : more.inputs) {
      bool have = false;
      for (auto &mine : info.inputs)
        have |= mine.first == in.first;
      if (!have)
        info.inputs.push_back(in);
    }
  }
  // Data parallelism is over the ranks of different tensor-parallel
  // groups: the ranks of one group read the same batch.
  int tensorParallel = std::max(1, info.tensorParallel);
  int dpSize = sc->size() / tensorParallel;
  int dpRank = sc->rank() / tensorParallel;
  if (stages == 1 && info.worldSize != comm->size())
    return failEveryRank("'" + planPath + "' is compiled for " +
                std::to_string(info.worldSize) + " rank(s), this run has " +
                std::to_string(comm->size()) +
                (info.worldSize > 1 ? " (start it with mpirun -np " +
                                          std::to_string(info.worldSize) + ")"
                                    : " (compile it with --world-size=" +
                                          std::to_string(comm->size()) + ")"));
  if (stages > 1) {
    // The last stage has the loss: its first rank prints.
    lead = stage == stages - 1 && sc->rank() == 0;
  }
  bool trainingPlan = info.updatesParameters;
  if (trainingPlan && info.optimizer.empty())
    info.optimizer = "training_info";
  if (!trainingPlan && !forwardOnly)
    return fail("'" + planPath + "' holds a forward program only; run it with "
                "--forward-only, or compile with ds-opt --optimizer=... to train");
  if (trainingPlan && forwardOnly)
    return fail("'" + planPath + "' is a training plan (" + info.optimizer +
                "); run it with --steps N, or compile without --optimizer "
                "for --forward-only");
  if (trainingPlan && steps == 0)
    return fail("a training plan needs --steps N");
  if (!trainingPlan && (steps || !dataPath.empty() || !tokensPath.empty()))
    return fail("--steps and --data need a training plan (ds-opt --optimizer=...)");
  if (!trainingPlan && (!saveDir.empty() || !resumeDir.empty()))
    return fail("--save and --resume need a training plan");

  ExecutorOptions options;
  options.threads = static_cast<int>(threads);
  options.seed = static_cast<uint64_t>(seed);
  options.profile = profile;
  options.lr = lrOverride;
  options.comm = sc;
  if (stages > 1) {
    options.pipe = comm.get();
    options.pipeStride = stageRanks;
  }
  options.injectOverflow = injectOverflow;
  options.nanGuard = trainingPlan && onNan != "continue";
  if (!injectOverflow.empty() && !info.lossScaling)
    return fail("--inject-overflow needs an fp16 plan (ds-opt --precision=fp16)");
  // The backend: auto runs on a visible CUDA device when the CUDA backend
  // has every kernel the plan needs, else on the CPU.
  options.nvmePath = nvmePath;
  // Test hook: DS_FAULT=nvme-free:BYTES pretends the NVMe folder has only
  // that much room.
  if (const char *fault = std::getenv("DS_FAULT");
      fault && std::strncmp(fault, "nvme-free:", 10) == 0)
    options.nvmePretendFree = std::strtoull(fault + 10, nullptr, 10);
  // The plan's memory and communication figures: what ds-run checks and
  // prints against, and whether it offloads.
  // Interleaved: this rank's chunks together (each has its own arena,
  // parameters and collectives).
  const Footprint planned = [&] {
    Footprint f = footprintOf(*plan);
    for (size_t k = 1; k < chunkPlans.size(); ++k) {
      Footprint more = footprintOf(*chunkPlans[k]);
      f.params += more.params;
      f.buffers += more.buffers;
      f.state += more.state;
      f.arena += more.arena;
      f.allReduceBytes += more.allReduceBytes;
      f.allGatherBytes += more.allGatherBytes;
      f.reduceScatterBytes += more.reduceScatterBytes;
    }
    return f;
  }();
  bool offloads = planned.hostTotal() + planned.nvmeStorage > 0;
  if (backend == "auto") {
    bool gpu = builtWithCuda() && cudaDeviceVisible();
    options.backend = gpu && !offloads ? "cuda" : "cpu";
    if (gpu && offloads && comm->rank() == 0)
      std::fprintf(stderr, "note: running on the CPU: the plan offloads, and "
                           "offload on the CUDA backend is not yet proven on "
                           "a GPU (--backend=cuda runs it there)\n");
  } else
    options.backend = backend;
  std::unique_ptr<Executor> exec = Executor::create(plan, options, err);
  if (!exec && backend == "auto" && options.backend == "cuda") {
    if (comm->rank() == 0)
      std::fprintf(stderr, "note: running on the CPU: %s\n", err.c_str());
    options.backend = "cpu";
    exec = Executor::create(plan, options, err);
  }
  if (!exec)
    return fail(err);
  // Interleaved: one executor per model chunk (all on this rank's stage
  // communicator); execFor(chunk) runs a schedule item's chunk.
  std::vector<std::unique_ptr<Executor>> moreExecs;
  for (size_t k = 1; k < chunkPlans.size(); ++k) {
    moreExecs.push_back(Executor::create(chunkPlans[k], options, err));
    if (!moreExecs.back())
      return fail(err);
  }
  auto execFor = [&](int chunk) -> Executor * {
    int k = stages > 1 ? chunk / stages : 0;
    return k == 0 ? exec.get() : moreExecs[k - 1].get();
  };
  std::vector<Executor *> allExecs{exec.get()};
  for (auto &e : moreExecs)
    allExecs.push_back(e.get());
  if (options.backend != "cpu" && comm->rank() == 0)
    std::printf("device: %s\n", exec->deviceName().c_str());

  // Inputs.
  for (const std::string &spec : inputSpecs) {
    std::string name, file = spec;
    size_t eq = spec.find('=');
    if (eq != std::string::npos) {
      name = spec.substr(0, eq);
      file = spec.substr(eq + 1);
    }
    if (endsWith(file, ".npz")) {
      if (!name.empty())
        return fail("--inputs " + spec + ": a .npz names its arrays itself");
      std::map<std::string, HostTensor> arrays;
      if (!readNpz(file, arrays, err))
        return fail(err);
      for (auto &[arrayName, t] : arrays) {
        bool isInput = false;
        for (const std::string &n : exec->inputNames())
          isInput |= n == arrayName;
        if (!isInput)
          continue; // other arrays (expected outputs, ...) are ignored
        if (!exec->setInput(arrayName, std::move(t), err))
          return fail(err);
      }
    } else if (endsWith(file, ".pb")) {
      HostTensor t;
      std::string own;
      if (!readTensorProto(file, own, t, err))
        return fail(err);
      if (!exec->setInput(name.empty() ? own : name, std::move(t), err))
        return fail(err);
    } else if (endsWith(file, ".npy")) {
      if (name.empty())
        return fail("--inputs " + spec + ": give a .npy as NAME=FILE.npy");
      HostTensor t;
      if (!readNpy(file, t, err) || !exec->setInput(name, std::move(t), err))
        return fail(err);
    } else {
      return fail("--inputs " + spec + ": expected a .npz, .npy or .pb file");
    }
  }

  std::FILE *log = nullptr;
  if (!logPath.empty() && lead && !(log = std::fopen(logPath.c_str(), "w")))
    return fail("cannot write '" + logPath + "'");

  RunStats stats;
  if (trainingPlan) {
    // Batches: each data array is one batch or k of them along dim 0.
    std::map<std::string, HostTensor> data;
    if (!dataPath.empty() && !readNpz(dataPath, data, err))
      return fail(err);
    std::vector<std::pair<std::string, HostTensor>> specs;
    for (const auto &[name, spec] : info.inputs)
      if (name != "ds.step" && name != "ds.loss_scale")
        specs.push_back({name, spec});
    std::string names;
    for (const auto &[name, spec] : specs)
      names += (names.empty() ? "" : ", ") + name;
    int64_t batches = 1, samples = 0;
    int64_t tokensPerSample = 0; // of the first integer input (token ids)
    for (const auto &[name, spec] : specs) {
      auto it = data.find(name);
      if (it == data.end()) {
        bool fromTokens = !tokensPath.empty() &&
                          (tokenInputs.rfind(name + ",", 0) == 0 ||
                           (tokenInputs.size() > name.size() &&
                            tokenInputs.compare(tokenInputs.size() - name.size() - 1,
                                                name.size() + 1, "," + name) == 0));
        if (!dataPath.empty() && !fromTokens)
          return fail("'" + dataPath + "' has no array '" + name +
                      "' (graph inputs: " + names + ")");
        continue; // given with --inputs or --tokens
      }
      const HostTensor &t = it->second;
      // A global batch is world x the plan's (per-rank) batch.
      int64_t unit = spec.shape.empty() ? 0 : spec.shape[0] * dpSize;
      bool whole = t.shape == spec.shape;
      bool stacked = !spec.shape.empty() && t.shape.size() == spec.shape.size() &&
                     unit > 0 && t.shape[0] % unit == 0 &&
                     std::equal(t.shape.begin() + 1, t.shape.end(),
                                spec.shape.begin() + 1);
      if (!whole && !stacked)
        return fail("data array '" + name + "' has shape " + t.shapeString() +
                    ", the plan's input is " + spec.shapeString() +
                    (dpSize > 1 ? " per rank: give " +
                                            std::to_string(dpSize) +
                                            " x that many rows" : "") +
                    " (or k of them stacked along the first dimension)");
      int64_t k = stacked ? t.shape[0] / unit : 1;
      if (k > 1 && batches > 1 && k != batches)
        return fail("data arrays hold different numbers of batches (" +
                    std::to_string(batches) + " and " + std::to_string(k) + ")");
      batches = std::max(batches, k);
      samples = (spec.shape.empty() ? 1 : spec.shape[0]) * dpSize;
      if (tokensPerSample == 0 && spec.shape.size() >= 2 &&
          (t.dtype == DType::I64 || t.dtype == DType::I32)) {
        tokensPerSample = 1;
        for (size_t d = 1; d < spec.shape.size(); ++d)
          tokensPerSample *= spec.shape[d];
      }
    }
    // Token streams: windows sampled each step.
    std::vector<int64_t> tokens;
    std::string tokIn, tokOut;
    std::vector<int64_t> window;
    if (!tokensPath.empty()) {
      tokIn = tokenInputs.substr(0, tokenInputs.find(','));
      tokOut = tokenInputs.substr(tokenInputs.find(',') + 1);
      // With pipeline parallelism the stages split the inputs between
      // them: a name is checked against every stage's.
      std::vector<std::pair<std::string, HostTensor>> tokenSpecs = specs;
      for (const auto &[n, spec] : pipelineInputs)
        tokenSpecs.push_back({n, spec});
      for (const std::string &name : {tokIn, tokOut}) {
        bool found = false;
        for (const auto &[n, spec] : tokenSpecs)
          if (n == name) {
            found = true;
            if (spec.shape.size() != 2 || (spec.dtype != DType::I64 &&
                                           spec.dtype != DType::I32))
              return fail("--token-inputs: input '" + name +
                          "' must be an integer [batch, T] tensor, the plan has " +
                          std::string(dtypeName(spec.dtype)) + " " +
                          spec.shapeString());
            window = spec.shape;
          }
        if (!found)
          return fail("--token-inputs names '" + name +
                      "', which is not a graph input (inputs: " + names + ")");
      }
      if (endsWith(tokensPath, ".npy")) {
        HostTensor t;
        if (!readNpy(tokensPath, t, err))
          return fail(err);
        if (t.dtype != DType::I64 && t.dtype != DType::I32)
          return fail("'" + tokensPath + "' holds " + dtypeName(t.dtype) +
                      ", token ids must be integers");
        for (int64_t i = 0; i < t.numel(); ++i)
          tokens.push_back(t.dtype == DType::I64
                               ? reinterpret_cast<const int64_t *>(t.data.data())[i]
                               : reinterpret_cast<const int32_t *>(t.data.data())[i]);
      } else {
        std::ifstream in(tokensPath, std::ios::binary);
        if (!in)
          return fail("cannot open '" + tokensPath + "'");
        std::vector<char> raw((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
        size_t width = tokenDtype == "uint16" ? 2 : 4;
        if (raw.size() % width)
          return fail("'" + tokensPath + "' is not a whole number of " +
                      tokenDtype + " token ids");
        for (size_t i = 0; i < raw.size(); i += width) {
          uint32_t v = 0;
          std::memcpy(&v, raw.data() + i, width);
          tokens.push_back(v);
        }
      }
      if (static_cast<int64_t>(tokens.size()) < window[1] + 1)
        return fail("'" + tokensPath + "' holds " + std::to_string(tokens.size()) +
                    " tokens, fewer than a window of " +
                    std::to_string(window[1] + 1));
      for (const std::string &name : {tokIn, tokOut}) {
        auto lim = info.indexLimits.find(name);
        if (lim == info.indexLimits.end())
          continue;
        for (size_t i = 0; i < tokens.size(); ++i)
          if (tokens[i] < 0 || tokens[i] >= lim->second)
            return fail("token id " + std::to_string(tokens[i]) + " at position " +
                        std::to_string(i) + " of '" + tokensPath +
                        "' is outside the vocabulary of " +
                        std::to_string(lim->second) + " (input '" + name + "')");
      }
      samples = window[0] * dpSize;
      tokensPerSample = window[1];
    }
    double lr = std::isnan(lrOverride) ? info.lr : lrOverride;
    double firstLoss = NAN, lastLoss = NAN, totalMs = 0;
    long long stepsDone = 0;
    int64_t accum = std::max<int64_t>(1, info.accumSteps);
    if (onNan == "skip" && accum > 1)
      return fail("--on-nan=skip with gradient accumulation is not supported "
                  "yet (a skipped micro-batch would leave the accumulated "
                  "gradient partial); use --on-nan=stop");
    // What this rank holds and hands to collectives, measured, against
    // the plan's figures.
    uint64_t measuredParams = 0, measuredBuffers = 0, measuredState = 0;
    // Offload: what lives in host memory and on NVMe instead of the device.
    uint64_t measuredHost = 0, measuredNvme = 0;
    for (Executor *e : allExecs)
    for (const Executor::Storage &st : e->storage()) {
      (st.state ? measuredState : st.trainable ? measuredParams : measuredBuffers) +=
          st.bytes;
      (st.location == 1 ? measuredHost : st.location == 2 ? measuredNvme
                                                          : measuredState) +=
          st.location ? st.bytes : 0;
    }
    // A run moves what the plan's transfers say; measured per step.
    uint64_t stepToHost = 0, stepToDevice = 0, stepNvmeRead = 0,
             stepNvmeWrite = 0;
    if (measuredParams > planned.params || measuredBuffers > planned.buffers ||
        measuredState > planned.state)
      return fail("parameter storage exceeds the plan (" +
                  std::to_string(measuredParams + measuredBuffers + measuredState) +
                  " bytes)");
    uint64_t stepComm = 0, plannedComm = planned.collectiveBytes() * accum;
    LossScaler scaler;
    if (info.lossScaling && !scaler.configure(info.options, err))
      return fail(err);
    long long firstStep = 1;
    if (!saveDir.empty()) {
      // A folder that cannot take a checkpoint is refused before step 1,
      // not after hours of training.
      std::error_code ec;
      std::filesystem::create_directories(saveDir, ec);
      std::string probe = saveDir + "/.ds-write-test-" + std::to_string(comm->rank());
      std::FILE *f = ec ? nullptr : std::fopen(probe.c_str(), "w");
      if (!f)
        return failEveryRank("--save '" + saveDir + "' is not a writable folder" +
                             (ec ? " (" + ec.message() + ")" : ""));
      std::fclose(f);
      std::remove(probe.c_str());
    }
    if (!resumeDir.empty()) {
      // Every rank checks its own shard; all agree before going on.
      int64_t done = 0;
      bool repartitioned = false;
      std::map<std::string, std::string> extra;
      // A pipeline: each model chunk from its own DIR/stage-K, by its rank
      // in the stage.
      // A checkpoint of another pipeline layout (another stage or chunk
      // count, or none where the plan has stages, or stages where it has
      // none) is merged and re-partitioned.
      int savedStages = pipelineCheckpointStages(resumeDir);
      int chunks = stages * static_cast<int>(allExecs.size());
      bool otherLayout = stages == 1 ? savedStages > 0 : savedStages != chunks;
      bool ok = true;
      for (size_t k = 0; k < allExecs.size() && ok; ++k) {
        int64_t chunkDone = 0;
        std::string dir =
            stages == 1 ? resumeDir
                        : resumeDir + "/stage-" +
                              std::to_string(stage + static_cast<int>(k) * stages);
        int myRank = stages == 1 ? comm->rank() : sc->rank();
        PlanInfo chunkInfo = stages == 1 ? info : describe(*chunkPlans[k]);
        if (otherLayout) {
          ok = loadPipelineCheckpoint(resumeDir, *allExecs[k], myRank,
                                      chunkInfo, chunkDone, extra, err) &&
               allExecs[k]->commitStorage(err);
          repartitioned = true;
        } else {
          ok = loadCheckpoint(dir, *allExecs[k], myRank, chunkInfo, chunkDone,
                              repartitioned, extra, err) &&
               allExecs[k]->commitStorage(err);
        }
        if (ok && k > 0 && chunkDone != done) {
          err = "its model chunks were saved at different steps (" +
                std::to_string(done) + " and " + std::to_string(chunkDone) + ")";
          ok = false;
        }
        done = chunkDone;
      }
      if (ok && stages > 1) {
        // Every stage at the same step (a save that stopped half way
        // leaves them apart).
        float mine = static_cast<float>(done), sum = mine;
        if (!comm->allReduce(&sum, 1, DType::F32, false, err))
          return fail(err);
        if (sum != mine * static_cast<float>(comm->size())) {
          err = "the stages' checkpoints in '" + resumeDir +
                "' are at different steps (this stage's: " +
                std::to_string(done) + ")";
          ok = false;
        }
      }
      if (ok && info.lossScaling)
        ok = scaler.restore(extra, err);
      if (!comm->allOk(ok)) {
        std::fprintf(stderr, "error: %s%s\n",
                     comm->size() > 1
                         ? ("rank " + std::to_string(comm->rank()) + ": ").c_str()
                         : "",
                     ok ? "the checkpoint was rejected on another rank" : err.c_str());
        return 1;
      }
      if (done >= steps)
        return failEveryRank("the checkpoint in '" + resumeDir + "' is at step " +
                    std::to_string(done) + "; --steps " + std::to_string(steps) +
                    " asks for no more");
      firstStep = done + 1;
      if (lead)
        std::printf("resumed from '%s' at step %lld%s\n", resumeDir.c_str(),
                    static_cast<long long>(done),
                    repartitioned ? " (saved with another world size, "
                                    "ZeRO stage or pipeline layout: "
                                    "re-partitioned)"
                                  : "");
    }
    // A progress bar on a terminal for long runs (--no-progress-bar: lines).
    bool progressBar = isatty(STDOUT_FILENO) && !noProgressBar &&
                       steps - firstStep + 1 > 20;
    // The order of work in a step: each micro-batch's whole program, or
    // with pipeline parallelism this stage's schedule of forward and
    // backward sections.
    if (stages == 1) {
      order.clear();
      for (int64_t micro = 0; micro < accum; ++micro)
        order.push_back({true, static_cast<int>(micro)});
    } else if (static_cast<int64_t>(order.size()) != 2 * accum * virt) {
      return fail("the pipeline schedule has " + std::to_string(order.size()) +
                  " items for " + std::to_string(accum) + " micro-batches");
    }
    // With pipeline parallelism an input goes to the chunk that has it.
    Executor *ex = exec.get();
    auto hasInput = [&](const std::string &name) {
      if (stages == 1)
        return true;
      std::vector<std::string> names = ex->inputNames();
      return std::find(names.begin(), names.end(), name) != names.end();
    };
    for (long long s = firstStep; s <= steps; ++s) {
     bool nanStep = false;
     double lossSum = 0, msSum = 0;
     uint64_t comm0 = sc->collectiveBytes;
     uint64_t highWater = 0;
     // Interleaved: each chunk's executor has its own arena; the rank's
     // figures are their sums.
     std::map<Executor *, std::pair<uint64_t, uint64_t>> arenas;
     for (const ds::PipeStep &item : order) {
      int64_t micro = item.micro;
      ex = stages > 1 ? execFor(item.chunk) : exec.get();
      long long m = (s - 1) * accum + micro + 1; // run number, 1-based
      for (const auto &[name, spec] : item.forward ? specs : decltype(specs)()) {
        auto it = data.find(name);
        if (it == data.end())
          continue;
        const HostTensor &t = it->second;
        HostTensor batch = t;
        if (t.shape != spec.shape || sc->size() > 1) {
          // Global batch (m-1) mod k, this rank's rows of it.
          int64_t unit = spec.shape[0] * dpSize;
          int64_t k = t.shape[0] % unit == 0 ? t.shape[0] / unit : 1;
          size_t rowBytes = t.data.size() / t.shape[0];
          size_t first = t.shape[0] % unit == 0
                             ? (((m - 1) % k) * unit + dpRank * spec.shape[0])
                             : 0;
          batch.shape = spec.shape;
          batch.data.assign(t.data.begin() + first * rowBytes,
                            t.data.begin() + (first + spec.shape[0]) * rowBytes);
        }
        if (hasInput(name) && !ex->setInput(name, std::move(batch), err))
          return fail(err);
      }
      stats.kernelTimes.clear();
      if (!tokens.empty() && item.forward) {
        // splitmix64 of (seed, step, row): the same windows for the same
        // seed, whatever the thread count.
        HostTensor in, out;
        in.dtype = out.dtype = DType::I64;
        in.shape = out.shape = window;
        in.data.resize(window[0] * window[1] * 8);
        out.data.resize(in.data.size());
        uint64_t range = tokens.size() - window[1];
        for (int64_t r = 0; r < window[0]; ++r) {
          uint64_t z = static_cast<uint64_t>(seed) * 0x9e3779b97f4a7c15ULL +
                       static_cast<uint64_t>(m) * 0xbf58476d1ce4e5b9ULL +
                       static_cast<uint64_t>(r + dpRank * window[0]) *
                           0x94d049bb133111ebULL;
          z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
          z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
          uint64_t o = (z ^ (z >> 31)) % range;
          for (int64_t j = 0; j < window[1]; ++j) {
            int64_t a = tokens[o + j], b = tokens[o + j + 1];
            std::memcpy(in.data.data() + (r * window[1] + j) * 8, &a, 8);
            std::memcpy(out.data.data() + (r * window[1] + j) * 8, &b, 8);
          }
        }
        if ((hasInput(tokIn) && !ex->setInput(tokIn, std::move(in), err)) ||
            (hasInput(tokOut) && !ex->setInput(tokOut, std::move(out), err)))
          return fail(err);
      }
      if (info.lossScaling) {
        HostTensor scaleIn;
        scaleIn.dtype = DType::F32;
        scaleIn.data.resize(4);
        float f = static_cast<float>(scaler.scale);
        std::memcpy(scaleIn.data.data(), &f, 4);
        if (!exec->setInput("ds.loss_scale", std::move(scaleIn), err))
          return fail(err);
      }
      // Fault injection for the tests (docs/reliability.md): rank
      // DS_FAULT_RANK (default 1) fails (fail-at-step:K) or dies
      // (kill-at-step:K) as step K starts, while the others are inside it.
      if (const char *fault = std::getenv("DS_FAULT");
          fault && std::strncmp(fault, "fail-at-step:", 13) == 0 &&
          std::atoll(fault + 13) == s && item.forward && micro == 0 &&
          comm->rank() == (std::getenv("DS_FAULT_RANK")
                               ? std::atoi(std::getenv("DS_FAULT_RANK"))
                               : 1))
        return fail("step " + std::to_string(s) +
                    ": injected failure (DS_FAULT)");
      if (const char *fault = std::getenv("DS_FAULT");
          fault && std::strncmp(fault, "kill-at-step:", 13) == 0 &&
          std::atoll(fault + 13) == s &&
          comm->rank() == (std::getenv("DS_FAULT_RANK")
                               ? std::atoi(std::getenv("DS_FAULT_RANK"))
                               : 1))
        std::raise(SIGKILL);
      bool ran = stages == 1
                     ? exec->run(stats, err)
                     : ex->runSection(item.forward, static_cast<int>(micro),
                                        static_cast<uint64_t>(m - 1), stats,
                                        err,
                                        /*deferUpdate=*/!item.forward &&
                                            micro == accum - 1);
      if (!ran) {
        if (log)
          std::fclose(log);
        return fail("step " + std::to_string(s) +
                    (stages > 1 ? std::string(item.forward ? ", forward"
                                                           : ", backward") +
                                      " of micro-batch " +
                                      std::to_string(micro)
                                : std::string()) +
                    ": " + err);
      }
      msSum += stats.milliseconds;
      highWater = std::max<uint64_t>(highWater, stats.arenaHighWater);
      if (stages > 1) {
        auto &a = arenas[ex];
        a.first = std::max<uint64_t>(a.first, stats.arenaHighWater);
        a.second = stats.arenaPlanned;
      }
      if (stages > 1 && item.forward && !stats.nanLoss)
        continue; // the loss is read after the micro-batch's backward
      if (stats.nanLoss) {
        // The loss is not finite: nothing was updated.
        if (onNan == "skip") {
          if (lead)
            std::printf("step %lld/%lld | loss is not finite: step skipped "
                        "(no update)\n", s, steps);
          nanStep = true;
          break;
        }
        if (stages > 1) // a scan would run the hand-overs again
          return fail("step " + std::to_string(s) +
                      ": the loss is not finite (--on-nan=stop)");
        std::string where;
        if (!exec->scanForNan(stats, err))
          return fail("step " + std::to_string(s) + ": " + err);
        return fail("step " + std::to_string(s) +
                    ": the loss is not finite (--on-nan=stop); " +
                    (stats.firstNan.empty()
                         ? std::string("on this rank every forward result is "
                                       "finite (another rank's is not)")
                         : "the first non-finite result: " + stats.firstNan));
      }
      HostTensor l;
      double microLoss = NAN;
      if (stages > 1 && ex->outputNames().empty())
        continue; // not the chunk with the loss
      if (!info.loss.empty() && ex->output(info.loss, l, err) &&
          l.numel() == 1 && l.dtype == DType::F32) {
        float f;
        std::memcpy(&f, l.data.data(), 4);
        microLoss = f;
      }
      lossSum += microLoss;
     }
     // Pipeline: the last micro-batch's updates, after the schedule, in
     // chunk order (a tied parameter's exchange waits for no backward).
     if (stages > 1 && !nanStep)
       for (Executor *e : allExecs) {
         RunStats upd;
         if (!e->runDeferredUpdate(upd, err))
           return fail("step " + std::to_string(s) + ", the update: " + err);
         msSum += upd.milliseconds;
       }
     if (nanStep)
       continue;
      stepComm = sc->collectiveBytes - comm0;
      stepToHost = stats.toHostBytes;
      stepToDevice = stats.toDeviceBytes;
      stepNvmeRead = stats.nvmeReadBytes;
      stepNvmeWrite = stats.nvmeWriteBytes;
      if (stats.hostArenaHighWater > stats.hostArenaPlanned)
        return fail("the host arena high-water mark exceeds the plan");
      if (stepComm > plannedComm)
        return fail("step " + std::to_string(s) + " handed " +
                    std::to_string(stepComm) +
                    " bytes to collectives, the plan " +
                    std::to_string(plannedComm));
      // The step's loss: the mean over its micro-batches.
      // The loss scaler sees whether this step's gradients overflowed (the
      // step then changed nothing and does not count).
      bool overflow = info.lossScaling && exec->lastRunOverflowed();
      double usedScale = scaler.scale;
      if (info.lossScaling)
        scaler.update(overflow);
      double loss = lossSum / static_cast<double>(accum);
      stats.milliseconds = msSum;
      stats.arenaHighWater = highWater;
      if (stages > 1) {
        stats.arenaHighWater = stats.arenaPlanned = 0;
        for (auto &[e, a] : arenas) {
          stats.arenaHighWater += a.first;
          stats.arenaPlanned += a.second;
        }
      }
      totalMs += stats.milliseconds;
      if (s == firstStep)
        firstLoss = loss;
      lastLoss = loss;
      double perSec = samples * accum / (stats.milliseconds / 1e3);
      double stepLr = ds::scheduledLr(info.schedule, lr, s, info.warmupSteps,
                                      info.totalSteps, info.minLr);
      char lrText[32] = "-"; // unknown for a model's own training_info
      if (!std::isnan(stepLr))
        std::snprintf(lrText, sizeof lrText, "%.3g", stepLr);
      char scaleText[160] = "";
      if (info.lossScaling)
        std::snprintf(scaleText, sizeof scaleText,
                      " | loss scale %g%s | skipped %lld | hysteresis %lld",
                      usedScale, overflow ? " (overflow: step skipped)" : "",
                      static_cast<long long>(exec->skippedRuns()),
                      static_cast<long long>(scaler.curHysteresis));
      // Time left at the mean step time so far.
      ++stepsDone;
      double eta = totalMs / stepsDone * static_cast<double>(steps - s) / 1e3;
      char etaText[48] = "";
      if (s < steps)
        std::snprintf(etaText, sizeof etaText, " | ETA %s",
                      clockText(eta).c_str());
      if (lead && progressBar) {
        // A bar on a terminal when the run is long; a full line every tenth.
        int width = 30, filled = static_cast<int>(
                        width * (s - firstStep + 1) / (steps - firstStep + 1));
        std::printf("\r[%s%s] step %lld/%lld | loss %.6f | %.1f samples/s%s   ",
                    std::string(filled, '#').c_str(),
                    std::string(width - filled, '.').c_str(), s, steps, loss,
                    perSec, etaText);
        if (s == steps || (s - firstStep + 1) % std::max<long long>(
                              1, (steps - firstStep + 1) / 10) == 0)
          std::printf("\n");
      } else if (lead) {
        std::printf("step %lld/%lld | loss %.6f | lr %s | %.1f samples/s | %.3f ms | "
                    "arena %s of %s planned%s%s\n",
                    s, steps, loss, lrText, perSec, stats.milliseconds,
                    human(stats.arenaHighWater).c_str(),
                    human(stats.arenaPlanned).c_str(), scaleText, etaText);
      }
      std::fflush(stdout);
      if (log && lead)
        std::fprintf(log,
                     "{\"step\": %lld, \"loss\": %s, \"lr\": %s, "
                     "\"samples_per_s\": %.3f, \"time_ms\": %.3f, "
                     "\"peak_bytes\": %llu, \"planned_bytes\": %llu, "
                     "\"collective_bytes\": %llu, "
                     "\"planned_collective_bytes\": %llu%s}\n",
                     s, std::isnan(loss) ? "null" : std::to_string(loss).c_str(),
                     std::isnan(stepLr) ? "null" : std::to_string(stepLr).c_str(),
                     perSec, stats.milliseconds,
                     static_cast<unsigned long long>(stats.arenaHighWater),
                     static_cast<unsigned long long>(stats.arenaPlanned),
                     static_cast<unsigned long long>(stepComm),
                     static_cast<unsigned long long>(plannedComm),
                     info.lossScaling
                         ? (", \"loss_scale\": " + std::to_string(usedScale) +
                            ", \"overflow\": " + (overflow ? "true" : "false") +
                            ", \"skipped\": " + std::to_string(exec->skippedRuns()) +
                            ", \"hysteresis\": " +
                            std::to_string(scaler.curHysteresis) +
                            ", \"next_loss_scale\": " +
                            std::to_string(scaler.scale))
                               .c_str()
                         : "");
      if (stats.arenaHighWater > stats.arenaPlanned)
        return fail("the arena high-water mark exceeds the plan");
      if (!saveDir.empty() && (s == steps || (saveEvery && s % saveEvery == 0))) {
        // A pipeline: each model chunk to DIR/stage-K, over its stage's
        // ranks; every rank agrees that all saved before going on.
        bool saved = true;
        for (size_t k = 0; k < allExecs.size() && saved; ++k)
          saved = stages == 1
                      ? saveCheckpoint(saveDir, *exec, *comm, info, s,
                                       info.lossScaling
                                           ? scaler.state()
                                           : std::map<std::string, std::string>{},
                                       err)
                      : saveCheckpoint(
                            saveDir + "/stage-" +
                                std::to_string(stage + static_cast<int>(k) * stages),
                            *allExecs[k], *sc, describe(*chunkPlans[k]), s,
                            std::map<std::string, std::string>{}, err);
        if (stages > 1 && !comm->allOk(saved) && saved) {
          saved = false;
          err = "the checkpoint failed on another stage";
        }
        if (!saved) {
          // Every rank knows the save failed; the previous checkpoint stays.
          std::fprintf(stderr, "error: %scheckpoint at step %lld: %s\n",
                       comm->size() > 1
                           ? ("rank " + std::to_string(comm->rank()) + ": ").c_str()
                           : "",
                       s, err.c_str());
          return 1;
        }
        if (lead)
          std::printf("checkpoint: step %lld saved to '%s'\n", s, saveDir.c_str());
      }
    }
    if (log)
      std::fclose(log);
    // Every hand-over delivered before the stages go on (or end).
    if (stages > 1 && !comm->flushSends(err))
      return fail(err);
    // Per chunk: the bytes kept per micro-batch x the copies its part of
    // the schedule needs.
    uint64_t plannedStash = 0, stashHigh = 0;
    int stashCopies = 0;
    for (size_t k = 0; k < chunkPlans.size(); ++k) {
      int copies = ds::stashCopies(order, stage + static_cast<int>(k) * stages);
      plannedStash += pipelineStashBytes(*chunkPlans[k]) * copies;
      stashCopies += copies;
      stashHigh += allExecs[k]->stashHighWater();
    }
    if (stashHigh > plannedStash)
      return fail("the activation stash held " +
                  std::to_string(stashHigh) +
                  " bytes, more than the plan's " +
                  std::to_string(plannedStash));
    if (profile)
      printProfile(stats);
    if (!saveWeights.empty()) {
      // Every rank takes part (ZeRO-3 shards are gathered); rank 0 writes.
      std::vector<std::string> names;
      std::vector<Executor *> owner;
      for (Executor *e : allExecs)
        for (const std::string &n : e->parameterNames())
          if (std::find(names.begin(), names.end(), n) == names.end()) {
            names.push_back(n);
            owner.push_back(e);
          }
      std::vector<HostTensor> values(names.size());
      std::vector<std::pair<std::string, const HostTensor *>> arrays;
      for (size_t i = 0; i < names.size(); ++i) {
        if (!owner[i]->parameter(names[i], values[i], err))
          return fail(err);
        arrays.push_back({names[i], &values[i]});
      }
      // Pipeline parallelism: each stage's first rank hands its weights
      // to the writer (a parameter several stages hold is written once).
      std::vector<std::pair<std::string, HostTensor>> received;
      if (stages > 1 && !exchangeStageWeights(*comm, stage, stages, stageRanks,
                                              sc->rank() == 0, lead, arrays,
                                              received, err))
        return fail(err);
      for (auto &[name, t] : received) {
        bool have = false;
        for (auto &a : arrays)
          have |= a.first == name;
        if (!have)
          arrays.push_back({name, &t});
      }
      bool ok = !lead ||
                (endsWith(saveWeights, ".onnx")
                     ? writeOnnxWithWeights(info.weightsFile, saveWeights, arrays, err)
                 : endsWith(saveWeights, ".safetensors")
                     ? writeSafetensors(saveWeights, arrays, err)
                     : writeNpz(saveWeights, arrays, err));
      if (!ok)
        return fail(err);
    }
    if (stages > 1 && sc->rank() == 0) // every stage reports its own
      std::printf("pipeline of %d stages (schedule %s, %lld micro-batches per "
                  "step) x %d data-parallel x %d tensor-parallel ranks; this "
                  "is stage %d: activation stash %llu bytes at most, planned "
                  "%llu (%d cop%s of the kept bytes of %d chunk%s); figures "
                  "below are this stage's\n",
                  stages, scheduleName.c_str(), static_cast<long long>(accum),
                  dpSize, tensorParallel, stage,
                  static_cast<unsigned long long>(stashHigh),
                  static_cast<unsigned long long>(plannedStash), stashCopies,
                  stashCopies == 1 ? "y" : "ies", virt, virt == 1 ? "" : "s");
    if (!lead)
      return 0;
    if (accum > 1)
      std::printf("each step accumulated %lld micro-batches\n",
                  static_cast<long long>(accum));

    if (tensorParallel > 1)
      std::printf("data parallel over %d group(s) of %d tensor-parallel "
                  "ranks (%d ranks), ZeRO stage %d (losses and gradients are "
                  "the means over the groups)\n",
                  dpSize, tensorParallel, sc->size(), planned.stage);
    else if (sc->size() > 1)
      std::printf("data parallel over %d ranks, ZeRO stage %d (losses and "
                  "gradients are the means over ranks)\n",
                  sc->size(), planned.stage);
    std::printf("per rank, measured (plan): parameters %llu (%llu), buffers "
                "%llu (%llu), optimizer state %llu (%llu), arena high-water "
                "%llu (%llu) bytes; collectives %llu (%llu) bytes per step\n",
                static_cast<unsigned long long>(measuredParams),
                static_cast<unsigned long long>(planned.params),
                static_cast<unsigned long long>(measuredBuffers),
                static_cast<unsigned long long>(planned.buffers),
                static_cast<unsigned long long>(measuredState),
                static_cast<unsigned long long>(planned.state),
                static_cast<unsigned long long>(stats.arenaHighWater),
                static_cast<unsigned long long>(planned.arena),
                static_cast<unsigned long long>(stepComm),
                static_cast<unsigned long long>(plannedComm));
    std::printf("trained %lld steps (%s, %lld batch%s): loss %.6f -> %.6f, "
                "mean %.3f ms/step\n",
                steps - firstStep + 1, info.optimizer.c_str(), static_cast<long long>(batches),
                batches == 1 ? "" : "es", firstLoss, lastLoss,
                totalMs / (steps - firstStep + 1));
    {
      // The run in one line: throughput, memory against the plan, skips.
      long long ran = steps - firstStep + 1;
      double seconds = totalMs / 1e3;
      double sampleRate = seconds > 0 ? samples * accum * ran / seconds : 0;
      uint64_t plannedPeak = planned.total();
      uint64_t measuredPeak = measuredParams + measuredBuffers + measuredState +
                              stats.arenaHighWater - measuredHost - measuredNvme;
      std::printf("summary: %lld steps in %s; mean %.1f samples/s",
                  ran, clockText(seconds).c_str(), sampleRate);
      if (tokensPerSample > 0)
        std::printf(", %.1f tokens/s", sampleRate * tokensPerSample);
      std::printf("; peak memory per rank %llu bytes measured, %llu planned; "
                  "skipped steps %llu\n",
                  static_cast<unsigned long long>(measuredPeak),
                  static_cast<unsigned long long>(plannedPeak),
                  static_cast<unsigned long long>(exec->skippedRuns()));
      if (planned.hostTotal() + planned.nvmeStorage > 0)
        std::printf("offload: host memory per rank %llu bytes measured, %llu "
                    "planned (storage %llu, host arena %llu); NVMe %llu bytes; "
                    "per step device->host %llu, host->device %llu, NVMe "
                    "read %llu, written %llu bytes (planned %llu, %llu, %llu, "
                    "%llu)\n",
                    static_cast<unsigned long long>(measuredHost +
                                                    stats.hostArenaHighWater),
                    static_cast<unsigned long long>(planned.hostTotal()),
                    static_cast<unsigned long long>(measuredHost),
                    static_cast<unsigned long long>(stats.hostArenaHighWater),
                    static_cast<unsigned long long>(measuredNvme),
                    static_cast<unsigned long long>(stepToHost),
                    static_cast<unsigned long long>(stepToDevice),
                    static_cast<unsigned long long>(stepNvmeRead),
                    static_cast<unsigned long long>(stepNvmeWrite),
                    static_cast<unsigned long long>(planned.toHostBytes),
                    static_cast<unsigned long long>(planned.toDeviceBytes),
                    static_cast<unsigned long long>(planned.nvmeReadBytes),
                    static_cast<unsigned long long>(planned.nvmeWriteBytes));
    }
    return 0;
  }

  double totalMs = 0;
  for (long long r = 0; r < repeat; ++r) {
    stats.kernelTimes.clear();
    if (!exec->run(stats, err)) {
      if (log)
        std::fclose(log);
      return fail(err);
    }
    totalMs += stats.milliseconds;
    double loss = NAN;
    if (!info.loss.empty()) {
      HostTensor l;
      if (exec->output(info.loss, l, err) && l.numel() == 1 &&
          l.dtype == DType::F32) {
        float f;
        std::memcpy(&f, l.data.data(), 4);
        loss = f;
      }
    }
    if (log)
      std::fprintf(log,
                   "{\"step\": %lld, \"loss\": %s, \"time_ms\": %.3f, "
                   "\"peak_bytes\": %llu, \"planned_bytes\": %llu}\n",
                   r, std::isnan(loss) ? "null" : std::to_string(loss).c_str(),
                   stats.milliseconds,
                   static_cast<unsigned long long>(stats.arenaHighWater),
                   static_cast<unsigned long long>(stats.arenaPlanned));
    if (r + 1 == repeat) {
      std::printf("forward:");
      if (!std::isnan(loss))
        std::printf(" loss %.6f |", loss);
      std::printf(" %.3f ms", repeat > 1 ? totalMs / repeat : stats.milliseconds);
      if (repeat > 1)
        std::printf(" (mean of %lld)", repeat);
      std::printf(" | arena %s planned, %s high-water | %zu kernels, %lld threads\n",
                  human(stats.arenaPlanned).c_str(),
                  human(stats.arenaHighWater).c_str(), info.instructions,
                  threads);
    }
  }
  if (log)
    std::fclose(log);
  if (stats.arenaHighWater > stats.arenaPlanned)
    return fail("the arena high-water mark exceeds the plan");

  if (profile)
    printProfile(stats);

  if (!outputsPath.empty()) {
    std::vector<HostTensor> outs;
    std::vector<std::string> names = exec->outputNames();
    outs.reserve(names.size());
    std::vector<std::pair<std::string, const HostTensor *>> arrays;
    for (const std::string &n : names) {
      outs.emplace_back();
      if (!exec->output(n, outs.back(), err))
        return fail(err);
    }
    for (size_t i = 0; i < names.size(); ++i)
      arrays.push_back({names[i], &outs[i]});
    if (!writeNpz(outputsPath, arrays, err))
      return fail(err);
  }
  return 0;
}
