//===- Cluster.h - the machine a plan is simulated on ----------*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// A cluster description (docs/planner.md): nodes of devices with their
// memory, GEMM rates by precision and memory bandwidth, the links inside
// and between nodes, the host and NVMe for offload, and the calibrated
// figures of `ds-run --calibrate` (GEMM shape classes, per kernel family
// rates, alpha-beta per collective kind). ds-opt parses the JSON
// (lib/Pipeline/Cluster.cpp); the presets and the rules that turn the
// figures into times live here, with no I/O, so that a planner can call
// them in process many times.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_CLUSTER_H
#define DS_SUPPORT_CLUSTER_H

#include "plan.pb.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

namespace ds {

/// The compute type of a GEMM: the index of its rate in ClusterSpec::flops.
enum class Precision { FP32 = 0, BF16 = 1, FP16 = 2 };
constexpr int kPrecisions = 3;
const char *precisionName(Precision p); // "fp32", "bf16", "fp16"
/// The precision named `name`; false if none is.
bool parsePrecision(const std::string &name, Precision &out);

/// The kernel classes with a calibrated rate of their own ("families" of
/// the cluster file): KernelFamily's compute families in lower case, plus
/// conv and pooling.
enum class RateFamily {
  Elementwise,
  MatMul,
  Normalization,
  Loss,
  Movement,
  Reduction,
  Gradient,
  LossGrad,
  Optimizer,
  Conv,
  Pooling,
  Count
};
constexpr int kRateFamilies = static_cast<int>(RateFamily::Count);
/// "elementwise", ..., "loss_grad", "optimizer", "conv", "pooling".
const char *rateFamilyName(RateFamily f);
/// The class whose calibrated rate times `kind`; Count for kernels that
/// have none (collectives, waits, transfers, pipeline hand-overs).
RateFamily rateFamilyOf(plan::Kind kind);

/// The collective kinds of the cluster file's "collectives" section.
enum class LinkKind { AllReduce, AllGather, ReduceScatter, Broadcast, SendRecv,
                      Count };
constexpr int kLinkKinds = static_cast<int>(LinkKind::Count);
const char *linkKindName(LinkKind k); // "all_reduce", ..., "send_recv"
LinkKind linkKindOf(plan::CollectiveKind k);

/// A link or a collective: alpha-beta figures.
struct AlphaBeta {
  bool present = false;
  double bandwidth = 0; // bytes/s per device
  double latency = 0;   // seconds per message step
};

struct ClusterSpec {
  std::string name;
  int nodes = 1, devicesPerNode = 1;
  bool gpu = true;
  double memory = 0;                 // bytes usable per device
  double flops[kPrecisions] = {0, 0, 0}; // dense GEMM FLOP/s; 0: not given
  double memoryBandwidth = 0;        // bytes/s
  AlphaBeta intraNode, interNode;
  struct Host {
    bool present = false;
    double memory = 0, bandwidth = 0, optimizerBandwidth = 0;
  } host;
  struct Nvme {
    bool present = false;
    double readBandwidth = 0, writeBandwidth = 0;
  } nvme;
  /// Seconds per kernel call (kernels.launch_overhead; when absent, the
  /// default of the device kind: kDefaultGpuLaunch or 0 on a CPU).
  double launchOverhead = 0;
  /// The CPU executor's own time (kernels.dispatch_overhead and
  /// run_overhead; 0 when absent): seconds per instruction it runs beyond
  /// the kernel's call (binding the operands' views, the waits' checks),
  /// and per run of a program or pipeline section. On a CPU the executing
  /// thread is the device, so both are on the compute clock; a GPU's
  /// thread issues ahead of its device and they are not charged.
  double dispatchOverhead = 0, runOverhead = 0;
  /// A pipeline stage's activation stash (kernels.stash_save_bytes_per_s
  /// and stash_restore_bytes_per_s): ds-run copies a micro-batch's kept
  /// bytes out of the arena into a fresh buffer when another micro-batch
  /// needs the arena, and back before its backward. Stash bytes per
  /// second of each; 0 (absent): a copy, 2 x bytes / memory_bandwidth.
  double stashSaveBytesPerSecond = 0, stashRestoreBytesPerSecond = 0;
  struct GemmClass {
    double maxFlops = std::numeric_limits<double>::infinity();
    double flopsPerSecond = 0;
  };
  std::vector<GemmClass> gemm; // calibrated classes, ascending max_flops
  struct FamilyRate {
    double flopsPerSecond = 0, bytesPerSecond = 0; // 0: not given
  };
  FamilyRate families[kRateFamilies];
  /// Per kernel (kernels.kinds, by plan::Kind; calibrated at the shapes of
  /// a sample plan): seconds = overhead + bytes / bytesPerSecond, which
  /// replaces the family's figure and the launch overhead for that kernel.
  struct KindRate {
    double bytesPerSecond = 0; // 0: the time does not grow with the bytes
    double overhead = 0;       // seconds per call
  };
  std::map<int, KindRate> kinds;
  AlphaBeta collectives[kLinkKinds];
  struct Calibration {
    bool present = false;
    std::string date, host;
    double threads = 0, ranks = 0, seconds = 0;
  } calibration;

  int devices() const { return nodes * devicesPerNode; }
};

/// A kernel launch's cost on a GPU when the file does not give one.
constexpr double kDefaultGpuLaunch = 5e-6;

/// The presets' names, in the order docs/planner.md lists them.
const std::vector<std::string> &clusterPresetNames();
/// Preset `name` with `nodes` x `devicesPerNode` (0: the preset's default,
/// 1x8 for GPUs, 1x1 for the cpu preset); false for an unknown name.
bool clusterPreset(const std::string &name, int nodes, int devicesPerNode,
                   ClusterSpec &out);

/// The GEMM shape class a call of `flops` FLOPs uses: the first with
/// flops <= max_flops; -1 when the cluster has no classes.
int gemmClass(const ClusterSpec &c, double flops);

/// The rate of GEMMs in `p`: the file's figure, else the nearest given one
/// (fp32 falls back to half the 16-bit rate, a 16-bit type to the other
/// 16-bit one, then to fp32).
double gemmRate(const ClusterSpec &c, Precision p);

/// One kernel's seconds: a GEMM (`FlopRule::MatMul`) by its calibrated
/// shape class scaled by `p`'s rate over fp32's (or the roofline at `p`'s
/// rate), other kernels by their family's rates (or the roofline at the
/// fp32 rate and the memory bandwidth); plus the launch overhead. A kernel
/// with figures of its own (`kinds`) takes overhead + bytes / bytes_per_s.
double kernelSeconds(const ClusterSpec &c, plan::Kind kind, double flops,
                     double bytes, Precision p);

/// Seconds to save (`restore` false) or restore `bytes` of a pipeline
/// stage's activation stash on `c`: the calibrated rate, else a copy at
/// the memory bandwidth (2 x bytes / memory_bandwidth); 0 without either.
double stashSeconds(const ClusterSpec &c, double bytes, bool restore);

/// t(n, B) = latency*(n-1) + f*B/bandwidth (f = 2(n-1)/n all-reduce,
/// (n-1)/n all-gather and reduce-scatter, 1 otherwise) with the
/// calibrated figures of `kind` when the file has them, else the
/// inter-node link when the group spans nodes and the intra-node link
/// otherwise. `bytes` is the whole buffer (the all-reduced tensor, the
/// gathered result, the input of a reduce-scatter). 0 for n < 2.
double collectiveSeconds(const ClusterSpec &c, LinkKind kind, int ranks,
                         double bytes, bool acrossNodes);

/// Whether `k` is a compressed exchange of the 1-bit optimizers
/// (COLLECTIVE_COMPRESSED_ALL_REDUCE, _REDUCE_SCATTER, _ALL_GATHER;
/// docs/compression.md) rather than a plain collective.
bool isCompressedCollective(plan::CollectiveKind k);
/// The collectives ds-run runs for one compressed exchange of kind `k`
/// (lib/Runtime/Mpi/Compressed.cpp): the all-reduce's all-to-all of signs,
/// all-gather of scales and the server's all-gathers of signs and scales
/// (4); the reduce-scatter's all-to-alls of signs and of scales (2); the
/// all-gather of int8 records (1). 1 for any other kind.
int compressedMessages(plan::CollectiveKind k);
/// A compressed exchange (docs/planner.md, "Compressed communication"):
/// latency*(n-1) per message, plus (n-1)/n of `bytes` over the link its
/// group crosses (the inter-node link when it spans nodes). `bytes` is the
/// plan's record of the exchange, what ds-run counts and the report's
/// collectives.compressed_ring_bytes_per_rank takes (n-1)/n of. The
/// calibrated per-kind figures of plain collectives do not apply. 0 for
/// n < 2.
double compressedCollectiveSeconds(const ClusterSpec &c,
                                   plan::CollectiveKind k, int ranks,
                                   double bytes, bool acrossNodes);

/// The placement of a plan's ranks: rank = stage*stageWorld + d*tp + t,
/// devicesPerNode consecutive ranks per node.
struct RankLayout {
  int dp = 1, tp = 1, stages = 1;
  int devicesPerNode = 1;
  /// Whether some group of `group` has ranks on two nodes.
  bool acrossNodes(plan::Group group) const;
};

/// Why `c` cannot time `p` (empty: it can): more ranks than devices, the
/// compute precision without a rate, offload without host or nvme figures.
/// `source` prefixes the message ("cluster.json" or the preset).
std::string checkClusterForPlan(const ClusterSpec &c, const plan::Plan &p,
                                Precision precision,
                                const std::string &source);

} // namespace ds

#endif // DS_SUPPORT_CLUSTER_H
