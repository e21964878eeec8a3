//===- Runtime.h - the ds runtime: plans, tensors, execution ----*- C++ -*-===//
//
// Part of the ds project. No MLIR or LLVM here: plain C++17, protobuf,
// OpenBLAS and zlib.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_RUNTIME_H
#define DS_RUNTIME_RUNTIME_H

#include "ds/Support/PlanFootprint.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ds::rt {

using ds::Footprint;

enum class DType : int { F32 = 1, F16 = 2, BF16 = 3, I64 = 4, I32 = 5, Bool = 6 };
const char *dtypeName(DType t);
size_t dtypeSize(DType t);
bool isFloat(DType t);

/// A tensor in host memory, owned.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> data;
  int64_t numel() const;
  std::string shapeString() const;
};

/// Converts `t` in place to `to` (float to float, integer to integer, bool
/// to bool); false with `err` set for other pairs.
bool convertTensor(HostTensor &t, DType to, std::string &err);

// Data files.
/// `u2AsBf16`: uint16 arrays are bfloat16 bits (how ds writes bf16, which
/// numpy lacks; checkpoints), not an error.
bool readNpz(const std::string &path, std::map<std::string, HostTensor> &out,
             std::string &err, bool u2AsBf16 = false);
bool readNpy(const std::string &path, HostTensor &out, std::string &err);
bool writeNpz(const std::string &path,
              const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
              std::string &err);
/// Writes `arrays` as safetensors (8-byte header size, JSON header, data).
bool writeSafetensors(const std::string &path,
                      const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
                      std::string &err);
/// Copies the ONNX model `source` to `path` with the initializers named in
/// `arrays` replaced (stored inline): the trained model, for PyTorch or ONNX
/// tools.
bool writeOnnxWithWeights(const std::string &source, const std::string &path,
                          const std::vector<std::pair<std::string, const HostTensor *>> &arrays,
                          std::string &err);

/// An ONNX TensorProto file; `name` is the tensor's name field. UINT16
/// data is read as bfloat16 bits (how ONNX's test data stores bfloat16).
bool readTensorProto(const std::string &path, std::string &name,
                     HostTensor &out, std::string &err);

/// A plan.bin, loaded and validated.
class Plan;
struct PlanInfo {
  uint64_t arenaBytes = 0;
  size_t instructions = 0, buffers = 0, parameters = 0;
  std::vector<std::pair<std::string, HostTensor>> inputs, outputs; // specs
  std::string loss, weightsPath;
  /// The weights source as a path usable from the current directory.
  std::string weightsFile;
  /// The plan was compiled from a shapes-only model (no weights): it can
  /// be inspected, not run.
  bool shapesOnly = false;
  /// Ranks the plan is compiled for, and its ZeRO stage.
  int worldSize = 1, zeroStage = 0;
  int tensorParallel = 1; // ranks per tensor-parallel group
  /// The plan's checksum: a checkpoint records it to refuse another plan.
  uint64_t planHash = 0;
  /// True for a training step (its kernels update parameters).
  bool updatesParameters = false;
  /// For a training plan: the optimizer kernel id and its learning rate.
  std::string optimizer;
  double lr = NAN;
  /// For graph inputs used as gather indices or loss labels: the bound the
  /// plan implies (embedding rows, classes). Used to check token data.
  std::map<std::string, int64_t> indexLimits;
  /// Graph inputs whose batch is not on axis 0 (an LSTM/GRU initial
  /// state): the axis ranks split the data along.
  std::map<std::string, int> batchAxes;
  std::string schedule = "constant";
  int64_t warmupSteps = 0, totalSteps = 0, accumSteps = 1;
  double minLr = 0;
  /// The options the plan was compiled with (ds-opt's command line,
  /// precision, the loss scaler's settings).
  std::map<std::string, std::string> options;
  /// An fp16 step: the runtime gives the loss scale as input
  /// `ds.loss_scale` and reads the overflow flag `ds.overflow`.
  bool lossScaling = false;
};
/// Loads and checks `path`: header, version, size, checksum, consistency.
/// On failure returns null and sets `err` to one line.
std::shared_ptr<const Plan> loadPlan(const std::string &path, std::string &err);
/// The same for a plan held in memory (ds.initialize compiles in-process):
/// `path` names it in errors and its folder is where the plan's relative
/// weights path is resolved from (as for a file of that name).
std::shared_ptr<const Plan> loadPlanBytes(const std::string &bytes,
                                          const std::string &path,
                                          std::string &err);
PlanInfo describe(const Plan &plan);
/// Pipeline parallelism: the stages of a pipeline plan (1 for any other),
/// and the plan of one stage (its world: the stage's ranks).
int pipelineStages(const Plan &plan);
std::shared_ptr<const Plan> stagePlan(const Plan &plan, int stage,
                                      std::string &err);
/// The pipeline schedule's name and micro-batches of a pipeline plan.
std::string pipelineScheduleName(const Plan &plan);
int pipelineMicroBatches(const Plan &plan);
/// The interleaved schedule's model chunks per pipeline rank (1 otherwise);
/// a pipeline plan holds stages x this many stage plans.
int pipelineVirtualStages(const Plan &plan);
/// A stage plan's bytes kept from a micro-batch's forward to its backward.
uint64_t pipelineStashBytes(const Plan &plan);
/// The plan's per-rank memory and collective bytes (what ds-opt --report
/// prints), for checking measurements against.
Footprint footprintOf(const Plan &plan);

class Communicator;

/// Whether this runtime was built with the CUDA backend, and whether a
/// CUDA device is visible to the process.
bool builtWithCuda();
bool cudaDeviceVisible();

struct ExecutorOptions {
  /// The communicator of collective kernels (null: one rank). With
  /// pipeline parallelism: the ranks of this rank's stage.
  Communicator *comm = nullptr;
  /// Pipeline parallelism: every rank (the send/recv peers are this rank
  /// plus or minus `pipeStride`, the ranks per stage).
  Communicator *pipe = nullptr;
  int pipeStride = 0;
  int threads = 1;
  uint64_t seed = 0;
  bool profile = false;
  /// Learning-rate override for the optimizer kernels (NaN: the plan's).
  double lr = NAN;
  /// 1-bit Adam's `freeze_step: "auto"` (docs/compression.md): the last
  /// warm-up step ds-run decided, -1 while undecided, -2 when nothing
  /// decides (a kernel marked freeze_auto then fails).
  int64_t freezeStep = -2;
  /// Debug: runs (1-based) whose overflow check first turns one gradient
  /// element into inf (ds-run --inject-overflow).
  std::vector<uint64_t> injectOverflow;
  /// "cpu" or "cuda": where the arena, parameters and kernels live.
  std::string backend = "cpu";
  /// Check the loss as soon as the forward pass has computed it (agreed
  /// over ranks) and stop the run before any update when it is not finite
  /// (ds-run --on-nan).
  bool nanGuard = false;
  /// NVMe offload: the swap folder (empty: the plan's), and a test hook
  /// that pretends the folder has only this many free bytes (0: off).
  std::string nvmePath;
  uint64_t nvmePretendFree = 0;
};

struct RunStats {
  uint64_t arenaPlanned = 0;   // bytes the plan reserves
  uint64_t arenaHighWater = 0; // highest arena byte any kernel wrote
  /// Offload: the host arena, planned and reached; bytes transfers moved
  /// this run between device and host, and between host and NVMe.
  uint64_t hostArenaPlanned = 0, hostArenaHighWater = 0;
  uint64_t toHostBytes = 0, toDeviceBytes = 0, nvmeReadBytes = 0,
           nvmeWriteBytes = 0;
  double milliseconds = 0;
  /// With profile: per kernel id, total milliseconds, calls and FLOPs (the
  /// FLOPs are counted for matmul and gemm: 2*M*N*K).
  struct KernelTime {
    double milliseconds = 0;
    int64_t calls = 0;
    double flops = 0;
  };
  std::map<std::string, KernelTime> kernelTimes;
  /// With profile, for the monitors (lib/Runtime/Monitor.cpp): milliseconds
  /// per plan phase (plan::Phase: 0 unspecified, forward, backward,
  /// optimizer, communication, transfer), per instruction of the plan's
  /// program, and each collective call (its plan::CollectiveKind, bytes,
  /// the instruction's time split over its collectives, the instruction).
  /// They add up until the caller clears them.
  double phaseMilliseconds[6] = {};
  std::vector<double> instructionMilliseconds;
  struct CollectiveCall {
    int kind = 0;
    uint64_t bytes = 0;
    double milliseconds = 0;
    int instruction = 0;
  };
  std::vector<CollectiveCall> collectiveCalls;
  /// With ExecutorOptions::nanGuard: the run stopped once the loss was
  /// computed because it is NaN or infinite on some rank; no parameter or
  /// state changed (the optimizer kernels come later).
  bool nanLoss = false;
  /// With scanForNan: the first kernel whose result holds a NaN or an
  /// infinity ("instruction 12 (matmul, node '/h.0/...'): result 0 of 4x64
  /// holds NaN at element 3"), empty when none did.
  std::string firstNan;
};

/// Runs a plan: owns the arena (allocated once at the planned size), the
/// parameters (loaded from the plan's weights source) and the inputs.
class Executor {
public:
  static std::unique_ptr<Executor> create(std::shared_ptr<const Plan> plan,
                                          const ExecutorOptions &options,
                                          std::string &err);
  ~Executor();
  /// Binds graph input `name`; converts compatible dtypes, checks the shape.
  bool setInput(const std::string &name, HostTensor tensor, std::string &err);
  /// Runs the forward program once.
  bool run(RunStats &stats, std::string &err);
  /// Pipeline parallelism: runs the forward or backward section of
  /// micro-batch `micro`, the `runIndex`-th (0-based) run of the training.
  /// What a forward leaves for its backward is kept per micro-batch; the
  /// inputs set before a forward are the ones its backward sees.
  /// With `deferUpdate` a backward stops at the update section (the
  /// optimizer), which runDeferredUpdate runs later.
  bool runSection(bool forward, int micro, uint64_t runIndex, RunStats &stats,
                  std::string &err, bool deferUpdate = false);
  bool runDeferredUpdate(RunStats &stats, std::string &err);
  /// Bytes the activation stash holds at most (pipeline parallelism).
  uint64_t stashHighWater() const;
  /// Runs the forward pass of the last run again, as it was (same inputs,
  /// same random draws), checking each kernel's results for NaN and
  /// infinity; the first found goes to stats.firstNan. For a run that
  /// nanGuard stopped: the parameters are those it read.
  bool scanForNan(RunStats &stats, std::string &err);
  /// Evaluation (ExecutorEval.cpp): runs the plan's eval section on the
  /// inputs set (the loss without gradients, update or dropout; the
  /// parameters as they are); the loss is then output(loss). Changes no
  /// parameter, state or step count. Collective like run(). False with
  /// `err` when the plan has no eval section (its reason).
  bool runEval(RunStats &stats, std::string &err);
  /// Why the plan has no eval section (empty when it has one).
  std::string evalRefused() const;
  /// A copy of graph output `name` after run().
  bool output(const std::string &name, HostTensor &out, std::string &err) const;
  std::vector<std::string> inputNames() const;
  /// Names of the model parameters (not optimizer state), in plan order.
  std::vector<std::string> parameterNames() const;
  /// A copy of parameter `name`'s whole current value. For a ZeRO shard
  /// this gathers every rank's part: a collective, every rank must call it.
  bool parameter(const std::string &name, HostTensor &out, std::string &err) const;
  /// The storage of every parameter and optimizer state, as this rank holds
  /// it (shards under ZeRO), for checkpoints.
  struct Storage {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape, fullShape;
    bool sharded = false, state = false, trainable = false;
    /// Where it is stored: 0 device, 1 host, 2 NVMe (then `data` is a
    /// host copy read for this call; commitStorage writes it back).
    int location = 0;
    /// Tensor parallelism: this rank's slice (rank % tpParts) along tpAxis
    /// of a tensor of wholeShape (tpParts 1: whole).
    int tpAxis = 0, tpParts = 1, tpBlocks = 1;
    /// The whole size along tpAxis when the slices are padded (0: exact).
    int64_t tpWhole = 0;
    std::vector<int64_t> wholeShape() const {
      std::vector<int64_t> s = sharded ? fullShape : shape;
      if (tpParts > 1)
        s[tpAxis] = tpWhole > 0 ? tpWhole : s[tpAxis] * tpParts;
      return s;
    }
    void *data = nullptr;
    uint64_t bytes = 0;
  };
  std::vector<Storage> storage();
  /// After writing into storage() (a resumed checkpoint): hands the values
  /// to the device. Nothing to do on the CPU backend.
  bool commitStorage(std::string &err);
  /// The device the plan runs on ("cpu" or its description).
  std::string deviceName() const;
  /// Runs completed so far (the step counter and the random streams derive
  /// from it); a resumed run sets it to the checkpoint's.
  uint64_t completedRuns() const;
  void setCompletedRuns(uint64_t runs);
  /// Replaces the learning-rate override (ExecutorOptions::lr; NaN: the
  /// plan's) for the runs that follow: the Python engine feeds a torch
  /// lr_scheduler's value before each update.
  void setLr(double lr);
  /// Sets ExecutorOptions::freezeStep for the runs that follow.
  void setFreezeStep(int64_t step);
  /// Loss scaling: whether the last run's gradients overflowed (its update
  /// was skipped), and how many runs were skipped so far. The optimizer's
  /// step counter counts the runs that updated.
  bool lastRunOverflowed() const;
  uint64_t skippedRuns() const;
  /// Skipped optimizer steps (with gradient accumulation an overflow
  /// skips the step's runs together).
  uint64_t skippedSteps() const;
  void setSkippedRuns(uint64_t skipped);
  std::vector<std::string> outputNames() const;

private:
  struct Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

/// Kernel ids the runtime implements (the plan's instruction names).
std::vector<std::string> kernelNames();

} // namespace ds::rt

#endif // DS_RUNTIME_RUNTIME_H
