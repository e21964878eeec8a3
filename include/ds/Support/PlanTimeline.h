//===- PlanTimeline.h - a plan's schedule under a cost model ----*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// The cost model's view of one step of a plan: each kernel's FLOPs and
// bytes, its time on a roofline (max of FLOPs / rate and bytes /
// bandwidth), collectives on their own stream (ring bytes / link
// bandwidth), asynchronous ones overlapping the kernels before their wait.
// ds-opt prints the estimate, writes it as a Chrome/Perfetto trace
// (--emit-trace) and draws the memory over the step (--emit-memory-plot).
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_PLANTIMELINE_H
#define DS_SUPPORT_PLANTIMELINE_H

#include "ds/Support/Cluster.h"
#include "ds/Support/PlanFootprint.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ds {
namespace plan {
class Instruction;
}

/// The plan option (plan.options, ds-opt --label-fraction) giving the
/// fraction of the loss's labels that count, the rest being its
/// ignore_index: the loss's gradient (loss_grad) computes a softmax for
/// the rows that count and only zero-fills the others, so the cost model
/// charges its call for that fraction of its bytes and FLOPs plus a
/// zero-fill of the other rows' gradient, on a CPU (the CUDA kernel
/// computes every row). Absent: every label counts.
inline constexpr const char *kLabelFractionOption = "label_fraction";

/// `f` as kLabelFractionOption's value (9 significant digits).
inline std::string labelFractionText(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", f);
  return b;
}

struct CostModel {
  double flopsPerSecond = 180e9;   // dense f32 GEMM rate
  double bytesPerSecond = 20e9;    // memory bandwidth
  double linkBytesPerSecond = 5e9; // per-rank collective bandwidth
  // Offload: host<->device copies, NVMe reads and writes, and host kernels
  // (the offloaded optimizer; memory-bound, so bytes over this rate).
  double pcieBytesPerSecond = 25e9, nvmeBytesPerSecond = 3e9,
         hostBytesPerSecond = 10e9;
  /// When set, the cluster's rules time the step instead of the rates
  /// above (ds/Support/Cluster.h): kernels by their precision, calibrated
  /// GEMM class or family and launch overhead; collectives by alpha-beta
  /// on the links their group crosses; transfers and the host optimizer
  /// at the host's and NVMe's rates; pipeline hand-overs cost nothing
  /// inside a stage (predictStep charges them between stages).
  const ClusterSpec *cluster = nullptr;
  /// The phase of the compressed optimizers (docs/compression.md) timed:
  /// false (the default) the steady state after the freeze, whose
  /// exchanges are the compressed collectives with their quantize and
  /// dequantize kernels; true the warm-up (0/1 Adam's variance steps),
  /// whose exchanges are the plain collectives of the same instructions.
  bool warmup = false;
};

struct TimelineEvent {
  int instruction = 0;
  std::string kernel, node;
  int track = 0; // 0 compute, 1 communication, 2 copies, 3 host, 4 NVMe
  double start = 0, duration = 0; // seconds
  double flops = 0, bytes = 0;
  /// The rank (process) that runs it; -1: every rank runs the same plan.
  /// A pipeline's predicted schedule names each item's pipeline rank.
  int rank = -1;
};

struct Timeline {
  std::vector<TimelineEvent> events;
  double stepSeconds = 0;   // when the last kernel ends
  double computeSeconds = 0, commSeconds = 0, exposedCommSeconds = 0;
  /// Offload: time of the transfers (copies and NVMe I/O), and the part of
  /// it the device waits for (its kernels stalled on a transfer, or the
  /// step's end pushed past the device's last kernel); host kernel time.
  double transferSeconds = 0, exposedTransferSeconds = 0, hostSeconds = 0;
  /// All the time the device waits on offload (transfers and the host
  /// optimizer), the step's tail included.
  double offloadWaitSeconds = 0;
  /// The CPU executor's own time on the compute clock (the cluster's
  /// dispatch_overhead per instruction and run_overhead per run), not in
  /// computeSeconds.
  double overheadSeconds = 0;
  double flops = 0;         // per rank, per step (run)
  int64_t tokens = 0;       // per rank: elements of the first integer input,
                            // else its leading dimension (samples)
};

/// The cost model's FLOPs of `ins` from its kind's rule and its buffers'
/// shapes (`ins.trans_a()` for a contraction).
uint64_t estimateFlops(const plan::Plan &plan, const plan::Instruction &ins);

/// Bytes `ins` reads and writes: its buffers' bytes.
uint64_t operandBytes(const plan::Plan &plan, const plan::Instruction &ins);

Timeline timeline(const plan::Plan &plan, const CostModel &model);

/// The planned step as a Chrome trace (JSON array of events): a track per
/// stream (compute, communication, copies) of one process per rank.
std::string traceJson(const Timeline &t, int world);

/// Memory over the step, stacked by kind (persistent storage, saved
/// activations, other transients, workspace, collective buffers), the
/// peak and the arena's planned size marked, and `budget` (0: none).
std::string memorySvg(const Footprint &f, uint64_t budget,
                      const std::string &title);

} // namespace ds

#endif // DS_SUPPORT_PLANTIMELINE_H
