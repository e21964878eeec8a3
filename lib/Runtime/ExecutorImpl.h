//===- ExecutorImpl.h - the executor's state (runtime internal) -*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// What the executor's parts share: the arenas and parameter storage
// (ExecutorMemory.cpp), the weights loader (ExecutorWeights.cpp), the
// hazards of asynchronous copies, NVMe transfers and collectives
// (ExecutorAsync.cpp), the collective groups (ExecutorCollectives.cpp) and
// the instruction loop (ExecutorDispatch.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_EXECUTORIMPL_H
#define DS_RUNTIME_EXECUTORIMPL_H

#include "Cpu/Kernels.h"
#include "Device.h"
#include "Nvme/NvmeStore.h"
#include "PlanImpl.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/PipelineSchedule.h"

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

namespace ds::rt {

/// The kernels the executor treats apart, by the plan's typed kind: a
/// transfer between memory spaces (an asynchronous copy or NVMe I/O), and
/// the GEMMs whose FLOPs the profile counts.
inline bool isTransfer(const plan::Instruction &ins) {
  return ds::isTransfer(ins.kind());
}
inline bool isGemm(const plan::Instruction &ins) {
  return ds::isMatMul(ins.kind());
}

struct AlignedFree {
  void operator()(void *p) const { std::free(p); }
};
using AlignedBlock = std::unique_ptr<unsigned char, AlignedFree>;

/// 64-byte aligned host memory of at least `bytes` (null when it cannot
/// be had).
AlignedBlock alignedAlloc(uint64_t bytes);

/// Device memory, released with its device.
struct DeviceBlock {
  Device *device = nullptr;
  void *ptr = nullptr;
  DeviceBlock() = default;
  DeviceBlock(const DeviceBlock &) = delete;
  DeviceBlock &operator=(const DeviceBlock &) = delete;
  ~DeviceBlock() {
    if (device && ptr)
      device->release(ptr);
  }
};

struct WeightsSource;

struct Executor::Impl {
  std::shared_ptr<const Plan> plan;
  ExecutorOptions options;
  AlignedBlock arena, params;
  // Offload: the host arena and host-stored parameters and state, apart
  // from the device's; NVMe-stored ones live in `nvme`, with a host copy
  // (`nvmeShadow`) only while loading, checkpointing or resuming.
  AlignedBlock hostArena, hostParams, nvmeShadow;
  std::unique_ptr<NvmeStore> nvme;
  std::vector<int> location;   // per parameter: 0 device, 1 host, 2 NVMe
  std::vector<int> nvmeSlot;   // per parameter: its NVMe slot, or -1
  std::vector<uint64_t> paramSize;
  uint64_t hostParamBytes = 0, nvmeBytes = 0, hostArenaHighWater = 0;
  // The CUDA backend: the arena, parameters, constants and inputs in device
  // memory; `params` stays the host copy that loading, checkpoints and
  // outputs go through.
  std::unique_ptr<Device> device;
  std::unique_ptr<DeviceBlock> deviceArena, deviceParams;
  // The CUDA backend with offload: host pointers of every buffer (host
  // instructions run the CPU kernels on them), and the copies in flight on
  // the copy stream with the bytes they read and write.
  std::vector<void *> hostBufferPtr;
  struct PendingCopy {
    int handle;
    const unsigned char *src, *srcEnd, *dst, *dstEnd;
  };
  std::vector<PendingCopy> copies;
  std::vector<void *> pinned;
  // Tensor parallelism: the communicators of the groups a collective's
  // `group` names: 0 the data-parallel ranks (same tensor-parallel index),
  // 1 the tensor-parallel ranks (same data-parallel index); rank =
  // dp * T + tp. Without tensor parallelism both are the world. ZeRO++'s
  // hpZ: 2 the plan's hpz_partition_size consecutive ranks of this rank's
  // node (nodeComm).
  std::unique_ptr<Communicator> dpComm, tpComm, nodeComm;
  ~Impl();
  std::vector<std::unique_ptr<DeviceBlock>> deviceConsts, deviceInputs;
  uint64_t paramBytes = 0;
  std::vector<uint64_t> paramOffsets;
  std::vector<unsigned char *> paramPtr;
  std::vector<HostTensor> inputs;
  std::vector<bool> inputSet;
  std::vector<void *> bufferPtr;
  // Resolved once at creation: each instruction's kernel (the plan was
  // validated against the registry when loaded) and the arena high-water
  // mark the program's results reach.
  std::vector<const KernelInfo *> kernels;
  uint64_t arenaHighWater = 0;
  uint64_t runs = 0;
  // Async collectives by output, per group (-1 all ranks, 0 data-parallel,
  // 1 tensor-parallel, 2 hpZ's node): each completes on its group's
  // communicator.
  std::array<std::map<const void *, int>, 4> inflight;
  KernelContext::StepState stepState;   // the loss scaler's, per run
  uint64_t skipped = 0;                 // runs whose update overflowed
  // Gradient accumulation: runs per update, and whether a micro-batch of
  // the update's window overflowed so far (the flag carries to its end).
  uint64_t accum = 1;
  bool windowOverflow = false;
  uint64_t lastRunSeed = 0;
  // Pipeline parallelism: the backward section's first instruction, the
  // byte ranges a forward leaves for its backward, and per micro-batch the
  // saved bytes, inputs and run seed. `arenaHolds` is the micro-batch whose
  // forward state is still in the arena (-1: none).
  int backwardStart = -1, updateStart = 0, micro = 0;
  int deferred = -1; // the micro-batch whose update waits (-1: none)
  bool updateOnce = false; // the update section runs for the last only
  std::vector<ByteRange> stashSpans;
  struct Stashed {
    std::vector<unsigned char> bytes;
    std::vector<HostTensor> inputs;
    uint64_t seed = 0;
    bool saved = false;
  };
  std::map<int, Stashed> stash;
  /// Buffers of stashes whose micro-batch is done, kept for the next
  /// saves: a fresh buffer per save paid the host's first touch of every
  /// page (on the 2-core VM a 5.6 MB save took about 3 ms instead of
  /// 0.15 ms; docs/benchmarks.md).
  std::vector<std::vector<unsigned char>> stashPool;
  int arenaHolds = -1;
  uint64_t stashBytes = 0, stashHigh = 0;
  /// The instruction that computes this rank's loss (-1: none).
  int lossInstruction = -1;
  // Evaluation (ExecutorEval.cpp): while `evalRunning` the instruction
  // loop runs the plan's eval section, with its own kernels.
  bool evalRunning = false;
  std::vector<const KernelInfo *> evalKernels;
  uint64_t evalHighWater = 0, evalHostHighWater = 0;

  const plan::Plan &p() const { return plan->proto; }
  /// The program the instruction loop runs: the step's, or the eval's.
  const plan::Program &program() const {
    return evalRunning ? p().eval() : p().programs(0);
  }
  const KernelInfo *kernelAt(int i) const {
    return evalRunning ? evalKernels[i] : kernels[i];
  }
  /// Binds the buffers and, on a device, uploads the inputs (run, runEval).
  bool bindForRun(std::string &err);
  /// The eval section's kernels (the device's on a device) and the arena
  /// bytes its results reach; checks the inputs it reads are set.
  bool prepareEval(std::string &err);

  // Memory (ExecutorMemory.cpp).
  /// The arena and host arena at the plan's sizes, and the high-water
  /// marks the program's results reach.
  bool allocateArenas(std::string &err);
  /// The CUDA backend: every kernel must have a device version; the arena,
  /// parameters and constants go to device memory.
  bool openDevice(std::string &err);
  std::unique_ptr<DeviceBlock> deviceAlloc(uint64_t bytes, std::string &err);
  /// Where buffer `b` lives (the host copy with `hostSide`).
  void *pointer(const plan::Buffer &b, bool hostSide = false);
  /// Every buffer's pointer, before a run.
  void bindBuffers();
  /// NVMe: the host copies into the swap file, then the copies freed.
  bool pushShadow(std::string &err);
  /// NVMe: a host copy of every slot (checkpoints and weights read it).
  bool pullShadow(std::string &err);
  /// Device parameters into the host copy.
  bool pullParams(std::string &err);
  unsigned char *spanBase(const ByteRange &r);
  void saveStash(int micro);
  void restoreStash(int micro);
  /// A micro-batch's backward and update are done: its stash goes, and the
  /// run counts (for the step input and the loss scaler).
  void endMicroBatch(int micro);

  // Weights (ExecutorWeights.cpp).
  /// Lays out the parameters per location and reads them from the plan's
  /// weights source (this rank's shards and slices).
  bool loadWeights(std::string &err);
  bool layoutParameters(int rank, std::string &err);
  /// Parameter i's value from the weights source: this rank's slice and
  /// shard, in the plan's type.
  bool loadParameter(int i, const WeightsSource &src, int rank,
                     std::string &err);
  /// Tensor parallelism: parameter i's slice axis and parts (a master copy
  /// is sliced as its parameter); parts 1 when whole.
  std::tuple<int, int, int, int64_t> tpSplitOf(int i) const;
  /// The index of the f32 master copy of parameter `i`, or -1.
  int masterOf(int i) const;

  // Collective groups (ExecutorCollectives.cpp).
  Communicator *group(int64_t g) const;
  static int groupOf(const Attrs &attrs);
  size_t inflightCount() const {
    return inflight[0].size() + inflight[1].size() + inflight[2].size() +
           inflight[3].size();
  }
  /// Collective bytes the group communicators counted, handed to the
  /// world's counter (which ds-run reads).
  void collectBytes();
  /// Tensor parallelism: the data-parallel and tensor-parallel groups;
  /// ZeRO++'s hpZ: the node group.
  bool formGroups(std::string &err);
  bool formNodeGroup(std::string &err);
  /// The instruction that writes the loss: the loss output's writer, or
  /// under data parallelism the writer of what its all-reduce averages.
  void findLossInstruction();
  /// Lets the collectives in flight progress.
  void progressCollectives();

  // Hazards of asynchronous work (ExecutorAsync.cpp).
  /// NVMe: waits for the reads and writes whose host bytes `ctx` touches.
  bool awaitNvme(const KernelContext &ctx, std::string &err);
  /// Whether transfer `ins` reads or writes an NVMe slot.
  bool isNvmeTransfer(const plan::Instruction &ins) const;
  /// CUDA offload: waits for the copies whose bytes `ctx` reads or writes
  /// (or whose source it overwrites).
  bool awaitCopies(const plan::Instruction &ins, const KernelContext &ctx,
                   bool nvmeIo, std::string &err);
  /// Runs transfer `ins`: an asynchronous copy, an NVMe read or write, or
  /// (`handled` false) a plain copy the kernel does; counts its bytes.
  bool startTransfer(const plan::Instruction &ins, const KernelContext &ctx,
                     bool nvmeIo, RunStats &stats, bool &handled,
                     std::string &err);
  /// Finishes every collective in flight (a run stopped early).
  bool drain(std::string &err);
  /// After a synchronize: the finished copies' handles freed.
  bool dropCopies(std::string &err);

  // Dispatch (ExecutorDispatch.cpp).
  bool runInstructions(int from, int to, uint64_t runSeed, bool scan,
                       RunStats &stats, std::string &err);
  KernelContext contextOf(int i, uint64_t runSeed);
  bool runInstruction(int i, KernelContext &ctx, RunStats &stats,
                      std::string &err);
  void recordProfile(int i, const plan::Instruction &ins,
                     const KernelContext &ctx,
                     double ms, RunStats &stats);
  /// The `ds.step` input: 1 on the first run that updates.
  void setStepInput(uint64_t runIndex);
  bool checkInputsSet(std::string &err) const;
  /// With nanGuard: whether the loss instruction's result is not finite on
  /// some rank (all agree).
  bool lossNotFinite(const KernelContext &ctx, bool &bad, std::string &err);
  /// Whether the loss (a scalar float result) is NaN or infinite.
  bool lossIsBad(const TensorView &loss, bool &bad, std::string &err);
  /// The first NaN or infinity among instruction i's float results.
  bool firstNonFinite(int i, const KernelContext &ctx, std::string &found,
                      std::string &err);
};

} // namespace ds::rt

#endif // DS_RUNTIME_EXECUTORIMPL_H
