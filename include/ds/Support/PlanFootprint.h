//===- PlanFootprint.h - a plan's per-rank memory and traffic ---*- C++ -*-===//
//
// Part of the ds project. Plain C++ on the plan.bin schema (no MLIR, no
// runtime): ds-opt --report prints it, ds-run checks its measurements
// against it.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_PLANFOOTPRINT_H
#define DS_SUPPORT_PLANFOOTPRINT_H

#include "ds/Support/ZeroOne.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ds {
namespace plan {
class Plan;
}

/// What one rank of a plan holds and moves per step, and the ZeRO paper's
/// figures for the same model (Ψ trainable parameters, N ranks).
struct Footprint {
  /// The ranks ZeRO partitions over (the data-parallel group: the world
  /// over the tensor-parallel size), and that size.
  int world = 1, stage = 0, tensorParallel = 1;
  /// Tensor parallelism: the parameters (not state) split over the group
  /// and those whole on every rank of it, their bytes per rank, the
  /// largest whole ones, the vocabularies padded to split (name, rows,
  /// rows per rank), and whether activations are sequence-parallel.
  struct TpSummary {
    int split = 0, whole = 0;
    uint64_t splitBytes = 0, wholeBytes = 0;
    std::vector<std::pair<std::string, uint64_t>> largestWhole;
    std::vector<std::tuple<std::string, int64_t, int64_t>> padded;
    bool sequence = false;
  } tp;
  std::string optimizer; // adam, sgd, ... (empty: no training step)
  std::string precision = "fp32"; // the compile option --precision
  std::string commDtype = "fp32"; // and --comm-dtype (gradient collectives)
  /// Trainable elements Ψ, and Ψ padded to whole shards.
  uint64_t psi = 0, psiPadded = 0;
  /// Optimizer state tensors per trainable parameter (Adam 2, SGD with
  /// momentum 1, plus 1 with gradient accumulation, plus the f32 master
  /// copy in mixed precision).
  double statePerParam = 0;
  /// Storage per rank, bytes: trainable parameters (whole or shards),
  /// non-trainable tensors (buffers such as masks), optimizer state.
  uint64_t params = 0, buffers = 0, state = 0;
  /// The model's own tensors by kind, their count and bytes per rank:
  /// trainable parameters, frozen parameters (ds.frozen: not trained) and
  /// buffers (the frozen and buffer bytes together are `buffers` above).
  struct TensorKind {
    int count = 0;
    uint64_t bytes = 0;
  };
  TensorKind trainable, frozen, bufferTensors;
  /// Gradient bytes the step keeps for the optimizer: whole gradients
  /// (stages 0 and 1, which reduce after the backward pass) or this rank's
  /// reduced shards (stages 2 and 3), in their own type (16-bit in mixed
  /// precision, before the optimizer's f32 copy of each). They live in the
  /// arena.
  uint64_t grads = 0;
  /// The arena's planned peak: activations, gradients, gathered
  /// parameters and workspace.
  uint64_t arena = 0;
  /// Activations saved for the backward pass: arena bytes written before
  /// the backward pass starts (the first loss_grad kernel) and read after
  /// it. -1 when the plan has no backward pass.
  int64_t savedActivations = -1;
  /// Runs per optimizer step (gradient accumulation); the collective
  /// figures below are per run.
  int64_t accumSteps = 1;
  /// Collectives per run: count and bytes handed to them (all-reduce: the
  /// tensor; all-gather: the gathered output; reduce-scatter: the input).
  int allReduces = 0, allGathers = 0, reduceScatters = 0;
  uint64_t allReduceBytes = 0, allGatherBytes = 0, reduceScatterBytes = 0;
  uint64_t collectiveBytes() const {
    return allReduceBytes + allGatherBytes + reduceScatterBytes;
  }
  /// ZeRO++ (docs/zeropp.md): the quantized all-gathers (qwZ) and
  /// reduce-scatters (qgZ) among the above, the bytes they hand (their
  /// records) and the bytes plain collectives of the same tensors would.
  int quantizedAllGathers = 0, quantizedReduceScatters = 0;
  uint64_t quantizedAllGatherBytes = 0, quantizedReduceScatterBytes = 0;
  uint64_t unquantizedAllGatherBytes = 0, unquantizedReduceScatterBytes = 0;
  /// Ranks per node (--devices-per-node; 0: unknown), consecutive ranks
  /// sharing one: each rank's ring traffic split into the bytes that stay
  /// in its node and those that cross nodes (a collective over N ranks
  /// exchanges (N-1)/N of its bytes with the other ranks, d-1 of them in
  /// the node for d ranks per node, N-d outside). -1 when not split.
  int devicesPerNode = 0;
  /// ZeRO++'s hpZ (docs/zeropp.md): the partition size (0 or 1: off), the
  /// all-gathers over its node group among the above and their bytes (a
  /// node-group collective rings (H-1)/H of them, all within the node), and
  /// the secondary partition's bytes per rank (each rank's 1/H of every
  /// gathered parameter, kept from the forward to the backward).
  int hpzPartitionSize = 0;
  int nodeAllGathers = 0;
  uint64_t nodeAllGatherBytes = 0, hpzSecondaryBytes = 0;
  double intraNodeBytes() const;
  double crossNodeBytes() const;
  /// The same with every quantized collective plain (the reduction ZeRO++
  /// brings shows against it).
  double crossNodeBytesUnquantized() const;
  /// 1-bit Adam (docs/compression.md): the step after which the momentum
  /// is exchanged compressed (-1: no such optimizer), the bytes of the
  /// collectives that run only until then (the gradients' all-reduce) and
  /// those of the compressed exchanges that replace them afterwards.
  int64_t freezeStep = -1;
  /// freeze_step auto: ds-run decides the freeze step (at most freezeStep).
  bool freezeAuto = false;
  int compressedAllReduces = 0;
  uint64_t warmupOnlyBytes = 0, compressedBytes = 0;
  /// Of those, by kind: the warm-up-only bytes that are reduce-scatters
  /// (ZeRO 1-3's gradient buckets; the rest are ZeRO-0's all-reduces), and
  /// the compressed reduce-scatters that replace them after the freeze.
  uint64_t warmupOnlyReduceScatterBytes = 0;
  int compressedReduceScatters = 0;
  uint64_t compressedAllReduceBytes = 0, compressedReduceScatterBytes = 0;
  /// ZeRO 1-3's parameter all-gathers that are compressed after the freeze
  /// (docs/compression.md): their warm-up bytes (in warmupOnlyBytes) and
  /// the compressed gathers that replace them.
  uint64_t warmupOnlyAllGatherBytes = 0;
  int compressedAllGathers = 0;
  uint64_t compressedAllGatherBytes = 0;
  /// Of the warm-up-only and compressed bytes, those in a pipeline stage's
  /// update section, which runs once per step (docs/compression.md, "With
  /// pipelines").
  uint64_t warmupOnlyOnceBytes = 0, compressedOnceBytes = 0;
  /// `bytes` handed per run, `once` of them once per step: per step.
  uint64_t perStep(uint64_t bytes, uint64_t once) const {
    return (bytes - once) *
               static_cast<uint64_t>(std::max<int64_t>(1, accumSteps)) +
           once;
  }
  /// The bytes handed to collectives by a step after the freeze.
  uint64_t collectiveBytesAfterFreeze() const {
    return collectiveBytesPerStep() -
           perStep(warmupOnlyBytes, warmupOnlyOnceBytes) +
           perStep(compressedBytes, compressedOnceBytes);
  }
  /// 0/1 Adam (docs/compression.md): its policy when the plan trains with
  /// it (its gradient all-reduce is in warmupOnlyBytes, its compressed
  /// exchange in compressedBytes), and the bytes a step of each phase
  /// hands: the all-reduce at variance steps, the compressed exchange at
  /// the compressed-gradient steps and synchronisations, neither at local
  /// steps.
  std::optional<zeroone::Policy> zeroOne;
  uint64_t collectiveBytesIn(zeroone::Phase phase) const {
    switch (phase) {
    case zeroone::Phase::Variance:
      return collectiveBytesPerStep();
    case zeroone::Phase::Local:
      return collectiveBytesPerStep() -
             perStep(warmupOnlyBytes, warmupOnlyOnceBytes);
    default:
      return collectiveBytesAfterFreeze();
    }
  }
  /// The bytes handed by optimizer step `step` (1-based), all its
  /// micro-batches together.
  uint64_t collectiveBytesAt(int64_t step) const {
    if (zeroOne)
      return collectiveBytesIn(zeroone::phaseAt(step, *zeroOne));
    if (freezeStep >= 0 && step > freezeStep)
      return collectiveBytesAfterFreeze();
    return collectiveBytesPerStep();
  }
  /// Of those, the bytes of a pipeline stage's update section that runs
  /// once per step (the plan's `update_once`: gradients summed over the
  /// micro-batches, reduced once), and the bytes handed per optimizer step.
  uint64_t onceBytes = 0;
  uint64_t collectiveBytesPerStep() const {
    return (collectiveBytes() - onceBytes) *
               static_cast<uint64_t>(std::max<int64_t>(1, accumSteps)) +
           onceBytes;
  }
  /// Collectives that run asynchronously (dsrt-overlap-comm), their bytes,
  /// and the kernels that run between their start and their wait.
  int asyncCollectives = 0;
  uint64_t asyncBytes = 0;
  int64_t overlappedKernels = 0;
  /// Bytes a rank sends per step with ring algorithms: 2(N-1)/N of an
  /// all-reduce, (N-1)/N of an all-gather or reduce-scatter.
  double ringBytes() const;
  /// The same after the freeze: the compressed exchanges' signs and scales
  /// are all-to-all and all-gather traffic, (N-1)/N of their bytes.
  double compressedRingBytes() const;

  /// The arena at its fullest: the instruction at which the most arena
  /// bytes are live (a tensor is live from its first write to its last
  /// read, a graph output to the end of the program, since ds-run reads it
  /// after the step; views count once), those bytes, and the largest tensors live
  /// then (their bytes, and the kernel and ONNX node that wrote them).
  struct LiveTensor {
    uint64_t bytes = 0;
    std::string kernel, node;
  };
  int peakInstruction = -1;
  std::string peakKernel, peakNode;
  uint64_t liveAtPeak = 0;
  /// The arena's planned size over the most bytes live at once (1: no
  /// byte wasted to fragmentation; 0 when nothing is live).
  double arenaOverLive() const {
    return liveAtPeak ? static_cast<double>(arena) / liveAtPeak : 0;
  }
  /// Of those: forward tensors the backward pass still reads; buffers of
  /// collectives (their inputs and outputs); kernel workspace (written and
  /// read by one instruction only); the rest are transients (gradients,
  /// activations in flight, gathered parameters).
  uint64_t savedAtPeak = 0, commAtPeak = 0, workspaceAtPeak = 0,
           transientAtPeak = 0;
  /// The fp16 loss scale the step reads (an input; the scaler's counters
  /// live in ds-run, outside the plan).
  uint64_t lossScalerBytes = 0;
  std::vector<LiveTensor> largestAtPeak; // at most 5, largest first
  /// Per instruction: live arena bytes of each kind (saved activations,
  /// collective buffers, workspace, other transients), and the first
  /// backward instruction (-1: none). The memory plot draws these.
  std::vector<std::array<uint64_t, 4>> liveByKind;
  int backwardStart = -1;
  /// Offload: bytes of parameters and state stored on the host and on
  /// NVMe (included in params/buffers/state above, not on the device),
  /// the host arena's peak, and the bytes transfers move per run.
  uint64_t hostStorage = 0, nvmeStorage = 0, hostArena = 0;
  uint64_t toHostBytes = 0, toDeviceBytes = 0, nvmeReadBytes = 0,
           nvmeWriteBytes = 0;
  std::string offloadOptimizer = "none", offloadParam = "none";
  /// Where saved activations wait for the backward pass: none or host.
  std::string offloadActivations = "none";
  /// Per-rank device total: parameters, buffers, optimizer state and the
  /// arena, less what is offloaded.
  uint64_t total() const {
    return params + buffers + state + arena - hostStorage - nvmeStorage;
  }
  /// Host memory the plan uses: offloaded storage and the host arena.
  uint64_t hostTotal() const { return hostStorage + hostArena; }
};

Footprint footprint(const plan::Plan &plan);

/// Where buffer `id`'s bytes live: 0 the device, 1 host memory (the host
/// arena or a host-stored parameter), 2 NVMe (an NVMe-stored parameter).
int bufferLocation(const plan::Plan &plan, uint32_t id);

/// The table `ds-opt --report` prints: each figure beside the ZeRO
/// formula's (fp32 and, for reference, DeepSpeed's mixed precision), and
/// the reasons they differ.
std::string formatFootprint(const Footprint &f);

/// The same figures as one JSON object (ds-opt --report=json), with the
/// formulas' values beside them.
std::string formatFootprintJson(const Footprint &f);

/// `v` as a quoted JSON string (quotes, backslashes and control characters
/// escaped).
std::string jsonString(const std::string &v);

} // namespace ds

#endif // DS_SUPPORT_PLANFOOTPRINT_H
