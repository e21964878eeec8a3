//===- Cluster.cpp - presets and the cluster's time rules -----------------===//
//
// Part of the ds project (no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/Cluster.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/PlanFootprint.h"

#include <algorithm>

namespace ds {

const char *precisionName(Precision p) {
  switch (p) {
  case Precision::BF16: return "bf16";
  case Precision::FP16: return "fp16";
  default: return "fp32";
  }
}

bool parsePrecision(const std::string &name, Precision &out) {
  for (int i = 0; i < kPrecisions; ++i)
    if (name == precisionName(static_cast<Precision>(i))) {
      out = static_cast<Precision>(i);
      return true;
    }
  return false;
}

const char *rateFamilyName(RateFamily f) {
  static const char *const names[] = {
      "elementwise", "matmul",    "normalization", "loss",
      "movement",    "reduction", "gradient",      "loss_grad",
      "optimizer",   "conv",      "pooling"};
  int i = static_cast<int>(f);
  return i >= 0 && i < kRateFamilies ? names[i] : "";
}

RateFamily rateFamilyOf(plan::Kind kind) {
  switch (kind) {
  case plan::KIND_CONV:
  case plan::KIND_CONV_GRAD_INPUT:
  case plan::KIND_CONV_GRAD_WEIGHT:
    return RateFamily::Conv;
  case plan::KIND_MAX_POOL:
  case plan::KIND_MAX_POOL_GRAD:
  case plan::KIND_AVG_POOL:
  case plan::KIND_AVG_POOL_GRAD:
    return RateFamily::Pooling;
  default:
    break;
  }
  switch (kernelFamily(kind)) {
  case KernelFamily::Elementwise: return RateFamily::Elementwise;
  case KernelFamily::MatMul: return RateFamily::MatMul;
  case KernelFamily::Normalization: return RateFamily::Normalization;
  case KernelFamily::Loss: return RateFamily::Loss;
  case KernelFamily::Movement: return RateFamily::Movement;
  case KernelFamily::Reduction: return RateFamily::Reduction;
  case KernelFamily::Gradient: return RateFamily::Gradient;
  case KernelFamily::LossGrad: return RateFamily::LossGrad;
  case KernelFamily::Optimizer: return RateFamily::Optimizer;
  default: return RateFamily::Count;
  }
}

const char *linkKindName(LinkKind k) {
  static const char *const names[] = {"all_reduce", "all_gather",
                                      "reduce_scatter", "broadcast",
                                      "send_recv"};
  int i = static_cast<int>(k);
  return i >= 0 && i < kLinkKinds ? names[i] : "";
}

LinkKind linkKindOf(plan::CollectiveKind k) {
  switch (k) {
  case plan::COLLECTIVE_ALL_REDUCE: return LinkKind::AllReduce;
  case plan::COLLECTIVE_ALL_GATHER: return LinkKind::AllGather;
  case plan::COLLECTIVE_REDUCE_SCATTER: return LinkKind::ReduceScatter;
  case plan::COLLECTIVE_BROADCAST: return LinkKind::Broadcast;
  default: return LinkKind::SendRecv;
  }
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// A preset's figures (docs/planner.md gives the sources): memory,
/// fp32/bf16/fp16 dense FLOP/s, memory bandwidth, intra-node link,
/// inter-node link, host copies, host memory per node, NVMe.
struct PresetRow {
  const char *name;
  bool gpu;
  double memory, fp32, bf16, fp16, memBw;
  double intraBw, intraLat, interBw, interLat;
  double hostBw, hostMemory, hostOptimizer, nvmeRead, nvmeWrite;
  double launch;
  int devicesPerNode;
};

const PresetRow kPresets[] = {
    // NVIDIA H100 SXM5 80GB: 67 TF fp32, 989 TF dense bf16/fp16, 3.35 TB/s
    // HBM3, NVLink 4 900 GB/s (450 each way), one 400 Gb/s NIC per GPU,
    // PCIe 5.0 x16.
    {"h100-80g", true, 80 * kGiB, 6.7e13, 9.89e14, 9.89e14, 3.35e12, 4.5e11,
     3e-6, 5e10, 1e-5, 5e10, 2e12, 1e11, 6e9, 3e9, kDefaultGpuLaunch, 8},
    // H100 PCIe 80GB: 51 TF fp32, 756 TF bf16/fp16, 2.0 TB/s; peers over
    // PCIe 5.0; a 200 Gb/s NIC per GPU.
    {"h100-pcie", true, 80 * kGiB, 5.1e13, 7.56e14, 7.56e14, 2.0e12, 5e10,
     5e-6, 2.5e10, 1e-5, 5e10, 1e12, 1e11, 6e9, 3e9, kDefaultGpuLaunch, 8},
    // A100 SXM4 80GB: 19.5 TF fp32, 312 TF bf16/fp16, 2.04 TB/s; NVLink 3
    // 600 GB/s (300 each way); one 200 Gb/s HDR NIC per GPU; PCIe 4.0.
    {"a100-80g", true, 80 * kGiB, 1.95e13, 3.12e14, 3.12e14, 2.039e12, 3e11,
     3e-6, 2.5e10, 1e-5, 2.5e10, 2e12, 5e10, 3e9, 1.5e9, kDefaultGpuLaunch,
     8},
    // A100 SXM4 40GB: as the 80GB one with 1.555 TB/s HBM2.
    {"a100-40g", true, 40 * kGiB, 1.95e13, 3.12e14, 3.12e14, 1.555e12, 3e11,
     3e-6, 2.5e10, 1e-5, 2.5e10, 1e12, 5e10, 3e9, 1.5e9, kDefaultGpuLaunch,
     8},
    // H200 SXM 141GB: H100's compute, 4.8 TB/s HBM3e.
    {"h200-141g", true, 141 * kGiB, 6.7e13, 9.89e14, 9.89e14, 4.8e12, 4.5e11,
     3e-6, 5e10, 1e-5, 5e10, 2e12, 1e11, 6e9, 3e9, kDefaultGpuLaunch, 8},
    // V100 SXM2 32GB: 15.7 TF fp32, 125 TF fp16 tensor cores, no bf16;
    // 900 GB/s HBM2; NVLink 2 300 GB/s (150 each way); DGX-1: four 100 Gb/s
    // EDR NICs for 8 GPUs; PCIe 3.0 x16.
    {"v100-32g", true, 32 * kGiB, 1.57e13, 0, 1.25e14, 9e11, 1.5e11, 5e-6,
     6.25e9, 1.5e-5, 1.2e10, 5e11, 3e10, 3e9, 1.5e9, kDefaultGpuLaunch, 8},
    // This kind of machine: a few x86 cores, MPI over shared memory; the
    // 16-bit GEMMs convert to fp32 (half the rate).
    {"cpu", false, 8 * kGiB, 1e11, 5e10, 5e10, 1e10, 5e9, 5e-6, 1.25e9, 5e-5,
     1e10, 16 * kGiB, 1e10, 2e9, 1e9, 2e-6, 2},
};

} // namespace

const std::vector<std::string> &clusterPresetNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const PresetRow &r : kPresets)
      v.push_back(r.name);
    return v;
  }();
  return names;
}

bool clusterPreset(const std::string &name, int nodes, int devicesPerNode,
                   ClusterSpec &c) {
  for (const PresetRow &r : kPresets) {
    if (name != r.name)
      continue;
    c = ClusterSpec();
    c.nodes = nodes > 0 ? nodes : 1;
    c.devicesPerNode = devicesPerNode > 0 ? devicesPerNode : r.devicesPerNode;
    c.name = name + ":" + std::to_string(c.nodes) + "x" +
             std::to_string(c.devicesPerNode);
    c.gpu = r.gpu;
    c.memory = r.memory;
    c.flops[0] = r.fp32;
    c.flops[1] = r.bf16;
    c.flops[2] = r.fp16;
    c.memoryBandwidth = r.memBw;
    c.intraNode = {true, r.intraBw, r.intraLat};
    c.interNode = {true, r.interBw, r.interLat};
    c.host = {true, r.hostMemory, r.hostBw, r.hostOptimizer};
    c.nvme = {true, r.nvmeRead, r.nvmeWrite};
    c.launchOverhead = r.launch;
    return true;
  }
  return false;
}

int gemmClass(const ClusterSpec &c, double flops) {
  for (size_t i = 0; i < c.gemm.size(); ++i)
    if (flops <= c.gemm[i].maxFlops || i + 1 == c.gemm.size())
      return static_cast<int>(i);
  return -1;
}

double gemmRate(const ClusterSpec &c, Precision p) {
  double own = c.flops[static_cast<int>(p)];
  if (own > 0)
    return own;
  double bf16 = c.flops[1], fp16 = c.flops[2], fp32 = c.flops[0];
  if (p == Precision::FP32)
    return std::max(bf16, fp16) / 2;
  double other = p == Precision::BF16 ? fp16 : bf16;
  return other > 0 ? other : fp32;
}

double kernelSeconds(const ClusterSpec &c, plan::Kind kind, double flops,
                     double bytes, Precision p) {
  const KernelFacts *k = kernelFacts(kind);
  double launch = c.launchOverhead;
  double membw = c.memoryBandwidth > 0 ? c.memoryBandwidth : 1;
  // A kernel calibrated on its own (kernels.kinds) at a sample plan's
  // shapes: its call overhead and bytes/s replace the family's figures.
  if (auto it = c.kinds.find(static_cast<int>(kind)); it != c.kinds.end()) {
    const ClusterSpec::KindRate &r = it->second;
    return r.overhead + (r.bytesPerSecond > 0 ? bytes / r.bytesPerSecond : 0);
  }
  if (k && k->flops == FlopRule::MatMul) {
    double rate = gemmRate(c, p);
    int cls = gemmClass(c, flops);
    if (cls >= 0) {
      // The calibrated classes are fp32 figures; a 16-bit GEMM gains its
      // type's rate over fp32's.
      double scale = c.flops[0] > 0 ? gemmRate(c, p) / c.flops[0] : 1;
      rate = c.gemm[cls].flopsPerSecond * scale;
    }
    double t = rate > 0 ? flops / rate : 0;
    return std::max(t, bytes / membw) + launch;
  }
  double flopRate = gemmRate(c, Precision::FP32), byteRate = membw;
  RateFamily f = rateFamilyOf(kind);
  if (f != RateFamily::Count) {
    const ClusterSpec::FamilyRate &r = c.families[static_cast<int>(f)];
    if (r.flopsPerSecond > 0)
      flopRate = r.flopsPerSecond;
    if (r.bytesPerSecond > 0)
      byteRate = r.bytesPerSecond;
  }
  double t = flopRate > 0 ? flops / flopRate : 0;
  return std::max(t, bytes / byteRate) + launch;
}

double stashSeconds(const ClusterSpec &c, double bytes, bool restore) {
  double rate =
      restore ? c.stashRestoreBytesPerSecond : c.stashSaveBytesPerSecond;
  if (rate > 0)
    return bytes / rate;
  return c.memoryBandwidth > 0 ? 2 * bytes / c.memoryBandwidth : 0;
}

double collectiveSeconds(const ClusterSpec &c, LinkKind kind, int ranks,
                         double bytes, bool acrossNodes) {
  if (ranks < 2)
    return 0;
  AlphaBeta ab = c.collectives[static_cast<int>(kind)];
  if (!ab.present)
    ab = acrossNodes ? c.interNode : c.intraNode;
  if (!ab.present || ab.bandwidth <= 0)
    ab = c.intraNode.present ? c.intraNode : c.interNode;
  double n = ranks;
  double f = kind == LinkKind::AllReduce ? 2 * (n - 1) / n
             : kind == LinkKind::AllGather || kind == LinkKind::ReduceScatter
                 ? (n - 1) / n
                 : 1;
  double beta = ab.bandwidth > 0 ? f * bytes / ab.bandwidth : 0;
  return ab.latency * (n - 1) + beta;
}

bool isCompressedCollective(plan::CollectiveKind k) {
  return k == plan::COLLECTIVE_COMPRESSED_ALL_REDUCE ||
         k == plan::COLLECTIVE_COMPRESSED_REDUCE_SCATTER ||
         k == plan::COLLECTIVE_COMPRESSED_ALL_GATHER;
}

int compressedMessages(plan::CollectiveKind k) {
  switch (k) {
  case plan::COLLECTIVE_COMPRESSED_ALL_REDUCE: return 4;
  case plan::COLLECTIVE_COMPRESSED_REDUCE_SCATTER: return 2;
  default: return 1;
  }
}

double compressedCollectiveSeconds(const ClusterSpec &c,
                                   plan::CollectiveKind k, int ranks,
                                   double bytes, bool acrossNodes) {
  if (ranks < 2)
    return 0;
  AlphaBeta ab = acrossNodes ? c.interNode : c.intraNode;
  if (!ab.present || ab.bandwidth <= 0)
    ab = c.intraNode.present ? c.intraNode : c.interNode;
  double n = ranks;
  double beta = ab.bandwidth > 0 ? (n - 1) / n * bytes / ab.bandwidth : 0;
  return compressedMessages(k) * ab.latency * (n - 1) + beta;
}

bool RankLayout::acrossNodes(plan::Group group) const {
  int per = std::max(1, devicesPerNode), sw = dp * tp;
  // Ranks grow with the node (devicesPerNode consecutive ranks each) and a
  // group's members are increasing ranks: it spans nodes when its lowest
  // and highest do.
  for (int s = 0; s < stages; ++s)
    for (int d = 0; d < dp; ++d)
      for (int t = 0; t < tp; ++t) {
        int lo, hi;
        switch (group) {
        case plan::GROUP_TENSOR:
        case plan::GROUP_SEQUENCE:
          lo = s * sw + d * tp;
          hi = lo + tp - 1;
          break;
        case plan::GROUP_WORLD:
          lo = s * sw;
          hi = lo + sw - 1;
          break;
        case plan::GROUP_PIPELINE:
          lo = d * tp + t;
          hi = (stages - 1) * sw + lo;
          break;
        default:
          lo = s * sw + t;
          hi = lo + (dp - 1) * tp;
          break;
        }
        if (lo / per != hi / per)
          return true;
      }
  return false;
}

std::string checkClusterForPlan(const ClusterSpec &c, const plan::Plan &p,
                                Precision precision,
                                const std::string &source) {
  int world = std::max<int>(1, static_cast<int>(p.world_size()));
  if (world > c.devices())
    return source + ": the plan runs on " + std::to_string(world) +
           " ranks, the cluster has " + std::to_string(c.nodes) + " x " +
           std::to_string(c.devicesPerNode) + " = " +
           std::to_string(c.devices()) + " devices";
  if (c.flops[static_cast<int>(precision)] <= 0)
    return source + ": device.flops." + precisionName(precision) +
           ": required for --precision=" + precisionName(precision);
  if (world > c.devicesPerNode && !c.interNode.present)
    return source + ": inter_node: required for a plan of " +
           std::to_string(world) + " ranks on nodes of " +
           std::to_string(c.devicesPerNode);
  // Offload needs the host's (or NVMe's) figures.
  std::vector<const plan::Plan *> plans{&p};
  for (const plan::Plan &s : p.pipeline().stage_plans())
    plans.push_back(&s);
  bool host = false, nvme = false;
  for (const plan::Plan *q : plans) {
    for (int i = 0; i < q->parameters_size(); ++i) {
      host |= q->parameters(i).location() == 1;
      nvme |= q->parameters(i).location() == 2;
    }
    for (const plan::Program &prog : q->programs())
      for (const plan::Instruction &ins : prog.instructions())
        host |= ins.on_host() || isTransfer(ins.kind());
  }
  if (host && !c.host.present)
    return source + ": host: required for a plan that offloads to the host";
  if (nvme && !c.nvme.present)
    return source + ": nvme: required for a plan that offloads to NVMe";
  return "";
}

} // namespace ds
