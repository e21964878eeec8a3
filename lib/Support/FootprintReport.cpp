//===- FootprintReport.cpp - a footprint as a table and as JSON -----------===//
//
// Part of the ds project (no MLIR or LLVM).
//
// ds-opt --report: each figure of a plan's footprint beside the ZeRO
// formula's, and the reasons they differ; the same as one JSON object.
//
//===----------------------------------------------------------------------===//

#include "ds/Support/PlanFootprint.h"

#include <cstdio>
#include <sstream>

namespace ds {

namespace {
std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", bytes / (1024.0 * 1024.0));
  return buf;
}
} // namespace

/// The ZeRO formulas' model states for a footprint. fp32 training: 4-byte
/// parameters, gradients and state. Mixed precision: 2-byte parameters and
/// gradients; the f32 master copy is one more state tensor (DeepSpeed's
/// 2Ψ + 2Ψ + 12Ψ).
struct Formulas {
  double params, grads, state, paramBytes;
  bool mixed;
  explicit Formulas(const Footprint &f) {
    const double psi = static_cast<double>(f.psi), n = f.world;
    const int s = f.stage;
    mixed = f.precision != "fp32";
    paramBytes = mixed ? 2 : 4;
    params = s >= 3 ? paramBytes * psi / n : paramBytes * psi;
    grads = s >= 2 ? paramBytes * psi / n : paramBytes * psi;
    state = 4 * f.statePerParam * psi / (s >= 1 ? n : 1);
  }
};

namespace {
/// Appends one printf-formatted line (the header names the grid and the
/// precision in full: lines are long).
template <typename... Args>
void appendf(std::string &out, const char *format, Args... args) {
  char line[1024];
  std::snprintf(line, sizeof line, format, args...);
  out += line;
}

/// A row of the table: the plan's figure beside the formula's.
void formulaRow(std::string &out, const char *what, double plan,
                double formula, const char *rule) {
  appendf(out, "  %-22s %14.0f %12s   %14.0f %12s  %6s  %s\n", what, plan,
          mib(plan).c_str(), formula, mib(formula).c_str(),
          formula > 0 ? (std::to_string(plan / formula).substr(0, 5)).c_str()
                      : "-",
          rule);
}

/// The first lines: stage, ranks, optimizer, precision and Ψ, and the
/// tensor-parallel split.
void reportHeader(std::string &out, const Footprint &f) {
  const int s = f.stage;
  char line[1024];
  std::string ranks = std::to_string(f.world) + " rank(s)";
  if (f.tensorParallel > 1)
    ranks = std::to_string(f.world * f.tensorParallel) + " rank(s) (" +
            std::to_string(f.world) + " data-parallel x " +
            std::to_string(f.tensorParallel) +
            " tensor-parallel; Ψ and N are per tensor-parallel slice and "
            "data-parallel group)";
  std::snprintf(line, sizeof line,
                "ZeRO stage %d, %s, optimizer %s, %s; Ψ = %llu "
                "trainable parameters (%llu with shard padding)\n",
                s, ranks.c_str(), f.optimizer.empty() ? "none" : f.optimizer.c_str(),
                f.precision == "fp32"
                    ? "fp32"
                    : (f.precision + " (16-bit weights and gradients; fp32 "
                                     "master weights in the optimizer state)")
                          .c_str(),
                static_cast<unsigned long long>(f.psi),
                static_cast<unsigned long long>(f.psiPadded));
  out += line;
  if (f.tensorParallel > 1) {
    std::string tp = "  tensor parallel: " + std::to_string(f.tp.split) +
                     " parameter(s) split over the group (" +
                     std::to_string(f.tp.splitBytes) + " bytes per rank), " +
                     std::to_string(f.tp.whole) + " whole on every rank (" +
                     std::to_string(f.tp.wholeBytes) + " bytes";
    for (size_t i = 0; i < f.tp.largestWhole.size(); ++i)
      tp += (i ? ", " : "; the largest: ") + f.tp.largestWhole[i].first + " " +
            std::to_string(f.tp.largestWhole[i].second);
    tp += ")";
    for (const auto &[name, rows, part] : f.tp.padded)
      tp += "; " + name + ": " + std::to_string(rows) + " rows padded to " +
            std::to_string(part) + " per rank";
    tp += f.tp.sequence ? "; sequence parallel between the blocks\n"
                        : "; activations between the blocks whole on every "
                          "rank\n";
    out += tp;
  }
  appendf(out,
          "  trainable set: %d trainable parameter(s) %llu bytes, %d frozen "
          "%llu bytes, %d buffer(s) %llu bytes per rank (frozen parameters "
          "and buffers: no gradient, no optimizer state)\n",
          f.trainable.count, static_cast<unsigned long long>(f.trainable.bytes),
          f.frozen.count, static_cast<unsigned long long>(f.frozen.bytes),
          f.bufferTensors.count,
          static_cast<unsigned long long>(f.bufferTensors.bytes));
}

/// The model states (parameters, gradients, optimizer state) beside the
/// ZeRO formulas, and DeepSpeed's mixed-precision table for reference.
void reportModelStates(std::string &out, const Footprint &f,
                       const Formulas &formulas) {
  const double psi = static_cast<double>(f.psi), n = f.world;
  const int s = f.stage;
  const bool mixedRun = formulas.mixed;
  double fParams = formulas.params, fGrads = formulas.grads,
         fState = formulas.state;
  // DeepSpeed's mixed-precision Adam table (REFERENCES.md): 16Ψ split.
  double mixed = s == 0   ? 16 * psi
                 : s == 1 ? 4 * psi + 12 * psi / n
                 : s == 2 ? 2 * psi + 14 * psi / n
                          : 16 * psi / n;
  char line[1024];
  auto row = [&](const char *what, double plan, double formula,
                 const char *rule) {
    formulaRow(out, what, plan, formula, rule);
  };
  std::snprintf(line, sizeof line, "  %-22s %14s %12s   %14s %12s  %6s  %s\n",
                "per rank", "plan bytes", "MiB", "formula bytes", "MiB",
                "ratio", "formula");
  out += line;
  row("parameters", f.params, fParams,
      mixedRun ? (s >= 3 ? "2Ψ/N" : "2Ψ") : (s >= 3 ? "4Ψ/N" : "4Ψ"));
  row("gradients", f.grads, fGrads,
      mixedRun ? (s >= 2 ? "2Ψ/N" : "2Ψ") : (s >= 2 ? "4Ψ/N" : "4Ψ"));
  char kRule[32];
  std::snprintf(kRule, sizeof kRule, "%gx4Ψ%s", f.statePerParam,
                s >= 1 ? "/N" : "");
  row("optimizer state", f.state, fState, kRule);
  row("model states", f.params + f.grads + f.state, fParams + fGrads + fState,
      "sum of the three");
  std::snprintf(line, sizeof line,
                "  (for reference, DeepSpeed's mixed-precision Adam table: "
                "%s = %.0f bytes, %s MiB)\n",
                s == 0   ? "16Ψ"
                : s == 1 ? "4Ψ+12Ψ/N"
                : s == 2 ? "2Ψ+14Ψ/N"
                         : "16Ψ/N",
                mixed, mib(mixed).c_str());
  out += line;
}

/// What the formulas do not count: buffers, saved activations, the arena
/// and its fullest point, the loss scaler; and the total per rank.
void reportArena(std::string &out, const Footprint &f) {
  char line[1024];
  std::snprintf(line, sizeof line, "  %-22s %14llu %12s   (not in the formula)\n",
                "buffers", static_cast<unsigned long long>(f.buffers),
                mib(f.buffers).c_str());
  out += line;
  if (f.savedActivations >= 0) {
    std::snprintf(line, sizeof line,
                  "  %-22s %14lld %12s   (not in the formula: forward tensors "
                  "the backward pass reads)\n",
                  "saved activations", static_cast<long long>(f.savedActivations),
                  mib(static_cast<double>(f.savedActivations)).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line,
                "  %-22s %14llu %12s   (not in the formula: activations, "
                "gathered parameters, gradients, workspace)\n",
                "arena peak", static_cast<unsigned long long>(f.arena),
                mib(f.arena).c_str());
  out += line;
  if (f.peakInstruction >= 0) {
    std::snprintf(line, sizeof line,
                  "  arena at its fullest: %llu bytes live (%s MiB; %llu of "
                  "them saved activations) at instruction %d, %s%s%s%s\n",
                  static_cast<unsigned long long>(f.liveAtPeak),
                  mib(f.liveAtPeak).c_str(),
                  static_cast<unsigned long long>(f.savedAtPeak),
                  f.peakInstruction, f.peakKernel.c_str(),
                  f.peakNode.empty() ? "" : " (node '", f.peakNode.c_str(),
                  f.peakNode.empty() ? "" : "')");
    out += line;
    std::snprintf(line, sizeof line,
                  "    arena / live peak: %.4f (the arena's planned bytes over "
                  "the most bytes live at once; the rest is fragmentation)\n",
                  f.arenaOverLive());
    out += line;
    std::snprintf(line, sizeof line,
                  "    by kind (overlaps counted once each): saved activations "
                  "%llu, collective buffers %llu, kernel workspace %llu, other "
                  "transients (gradients, activations in flight, gathered "
                  "parameters) %llu bytes\n",
                  static_cast<unsigned long long>(f.savedAtPeak),
                  static_cast<unsigned long long>(f.commAtPeak),
                  static_cast<unsigned long long>(f.workspaceAtPeak),
                  static_cast<unsigned long long>(f.transientAtPeak));
    out += line;
    for (const Footprint::LiveTensor &t : f.largestAtPeak) {
      std::snprintf(line, sizeof line, "    live: %14llu bytes from %s%s%s%s\n",
                    static_cast<unsigned long long>(t.bytes), t.kernel.c_str(),
                    t.node.empty() ? "" : " (node '", t.node.c_str(),
                    t.node.empty() ? "" : "')");
      out += line;
    }
  }
  if (f.lossScalerBytes) {
    std::snprintf(line, sizeof line,
                  "  %-22s %14llu %12s   (the scale the step reads; the "
                  "scaler's counters live in ds-run)\n",
                  "loss-scaler state", static_cast<unsigned long long>(f.lossScalerBytes),
                  mib(f.lossScalerBytes).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line,
                "  %-22s %14llu %12s   (parameters, buffers, optimizer state "
                "and the arena%s)\n",
                "total per rank", static_cast<unsigned long long>(f.total()),
                mib(f.total()).c_str(),
                f.hostStorage + f.nvmeStorage ? ", less what is offloaded"
                                              : "");
  out += line;
}

/// Offloaded storage and the bytes transfers move.
void reportOffload(std::string &out, const Footprint &f) {
  char line[1024];
  if (f.hostStorage + f.nvmeStorage + f.hostArena) {
    bool acts = f.offloadActivations != "none";
    std::snprintf(line, sizeof line,
                  "offload (optimizer: %s, parameters: %s%s%s), per rank and "
                  "step:\n",
                  f.offloadOptimizer.c_str(), f.offloadParam.c_str(),
                  acts ? ", activations: " : "",
                  acts ? f.offloadActivations.c_str() : "");
    out += line;
    auto row = [&](const char *what, uint64_t v, const char *note) {
      std::snprintf(line, sizeof line, "  %-22s %14llu %12s   %s\n", what,
                    static_cast<unsigned long long>(v), mib(v).c_str(), note);
      out += line;
    };
    row("device peak", f.total(), "(the total above)");
    row("host storage", f.hostStorage,
        "(offloaded parameters and optimizer state, pinned)");
    row("host arena", f.hostArena,
        acts ? "(gradients, updates and saved activations on the host)"
             : "(gradients and updates in flight on the host)");
    row("host peak", f.hostTotal(), "(host storage and arena)");
    if (f.nvmeStorage)
      row("nvme storage", f.nvmeStorage, "(the rank's swap file)");
    row("device -> host", f.toHostBytes, "(bytes moved per step)");
    row("host -> device", f.toDeviceBytes, "");
    if (f.nvmeStorage) {
      row("nvme -> host", f.nvmeReadBytes, "");
      row("host -> nvme", f.nvmeWriteBytes, "");
    }
  }
}

/// Collectives per run, their overlap, and the ring traffic beside the
/// formula's.
/// ZeRO++'s quantized collectives and the traffic split by node
/// (docs/zeropp.md).
void reportZeroPP(std::string &out, const Footprint &f) {
  char line[512];
  if (f.quantizedAllGathers + f.quantizedReduceScatters > 0) {
    std::snprintf(
        line, sizeof line,
        "  ZeRO++: %d quantized all-gather hand %llu bytes (plain: %llu), "
        "%d quantized reduce-scatter %llu bytes (plain: %llu)\n",
        f.quantizedAllGathers,
        static_cast<unsigned long long>(f.quantizedAllGatherBytes),
        static_cast<unsigned long long>(f.unquantizedAllGatherBytes),
        f.quantizedReduceScatters,
        static_cast<unsigned long long>(f.quantizedReduceScatterBytes),
        static_cast<unsigned long long>(f.unquantizedReduceScatterBytes));
    out += line;
  }
  if (f.hpzPartitionSize > 1) {
    std::snprintf(
        line, sizeof line,
        "  ZeRO++ hpZ (partition of %d ranks): secondary partition %llu "
        "bytes per rank (arena, forward to backward), %d node-group "
        "all-gather hand %llu bytes (within the node)\n",
        f.hpzPartitionSize,
        static_cast<unsigned long long>(f.hpzSecondaryBytes),
        f.nodeAllGathers,
        static_cast<unsigned long long>(f.nodeAllGatherBytes));
    out += line;
  }
  if (f.devicesPerNode > 0 && f.world > 1) {
    std::snprintf(line, sizeof line,
                  "  by node (%d ranks per node): %.0f bytes per rank stay "
                  "in the node, %.0f cross nodes",
                  f.devicesPerNode, f.intraNodeBytes(), f.crossNodeBytes());
    out += line;
    double unq = f.crossNodeBytesUnquantized();
    if (f.quantizedAllGathers + f.quantizedReduceScatters > 0) {
      std::snprintf(line, sizeof line,
                    " (%.0f without ZeRO++'s quantization, %.2fx)", unq,
                    f.crossNodeBytes() > 0 ? unq / f.crossNodeBytes() : 0.0);
      out += line;
    }
    out += "\n";
  }
}

void reportCollectives(std::string &out, const Footprint &f,
                       const Formulas &formulas) {
  const double psi = static_cast<double>(f.psi), n = f.world;
  const int s = f.stage;
  const double pb = formulas.paramBytes;
  // Ring traffic: gradients reduced in the communication type (stage 0:
  // an all-reduce, 2Ψ; otherwise a reduce-scatter, Ψ), parameters gathered
  // in their own (stages 1-2: Ψ after the update; stage 3: 2Ψ, forward and
  // backward).
  const double rb = f.commDtype == "fp32" ? 4 : 2;
  double ringElems = s == 0 ? 2 * psi * rb
                            : psi * rb + (s >= 3 ? 2 : 1) * psi * pb;
  double fRing = f.world > 1 ? ringElems * (n - 1) / n : 0;
  char ringRule[64];
  if (s == 0)
    std::snprintf(ringRule, sizeof ringRule, "2Ψ x %g x (N-1)/N", rb);
  else
    std::snprintf(ringRule, sizeof ringRule, "(Ψ x %g + %dΨ x %g) x (N-1)/N",
                  rb, s >= 3 ? 2 : 1, pb);
  char line[1024];
  if (f.accumSteps > 1) {
    std::snprintf(line, sizeof line,
                  "  gradient accumulation: %lld runs per optimizer step; the "
                  "collective figures are per run (%llu bytes per step, %llu "
                  "of them once per step in the update section)\n",
                  static_cast<long long>(f.accumSteps),
                  static_cast<unsigned long long>(f.collectiveBytesPerStep()),
                  static_cast<unsigned long long>(f.onceBytes));
    out += line;
  }
  std::snprintf(line, sizeof line,
                "  collectives per step: %d all-reduce (%llu bytes), %d "
                "all-gather (%llu bytes), %d reduce-scatter (%llu bytes); "
                "%llu bytes handed in all\n",
                f.allReduces, static_cast<unsigned long long>(f.allReduceBytes),
                f.allGathers, static_cast<unsigned long long>(f.allGatherBytes),
                f.reduceScatters,
                static_cast<unsigned long long>(f.reduceScatterBytes),
                static_cast<unsigned long long>(f.collectiveBytes()));
  out += line;
  if (f.world > 1) {
    int all = f.allReduces + f.allGathers + f.reduceScatters;
    std::snprintf(line, sizeof line,
                  "  overlap: %d of %d collectives (%llu of %llu bytes) run "
                  "while other kernels do (%lld kernels between their starts "
                  "and waits)\n",
                  f.asyncCollectives, all,
                  static_cast<unsigned long long>(f.asyncBytes),
                  static_cast<unsigned long long>(f.collectiveBytes()),
                  static_cast<long long>(f.overlappedKernels));
    out += line;
  }
  formulaRow(out, "ring traffic per rank", f.ringBytes(), fRing, ringRule);
  reportZeroPP(out, f);
  if (f.freezeStep >= 0) { // 1-bit Adam (docs/compression.md)
    std::snprintf(
        line, sizeof line,
        "  after the freeze (step > %lld%s): %d compressed all-reduce replace "
        "%llu bytes of gradient all-reduce, %d compressed reduce-scatter "
        "%llu bytes of gradient reduce-scatter, %d compressed all-gather "
        "%llu bytes of parameter all-gather; %llu bytes handed per "
        "step, ring traffic per rank %.0f bytes (%.1fx less)\n",
        static_cast<long long>(f.freezeStep),
        f.freezeAuto ? ", or the earlier step at which ds-run finds the "
                       "variance settled: freeze_step auto, decided at run time"
                     : "",
        f.compressedAllReduces,
        static_cast<unsigned long long>(f.warmupOnlyBytes -
                                        f.warmupOnlyReduceScatterBytes -
                                        f.warmupOnlyAllGatherBytes),
        f.compressedReduceScatters,
        static_cast<unsigned long long>(f.warmupOnlyReduceScatterBytes),
        f.compressedAllGathers,
        static_cast<unsigned long long>(f.warmupOnlyAllGatherBytes),
        static_cast<unsigned long long>(f.collectiveBytesAfterFreeze()),
        f.compressedRingBytes(),
        f.compressedRingBytes() > 0 ? f.ringBytes() / f.compressedRingBytes()
                                    : 0.0);
    out += line;
  }
  if (f.zeroOne) { // 0/1 Adam (docs/compression.md)
    using zeroone::Phase;
    std::snprintf(
        line, sizeof line,
        "  0/1 Adam (variance frozen after step %lld): bytes handed per "
        "step: %llu at variance steps, %llu at compressed steps and "
        "synchronisations (ring traffic per rank %.0f bytes, %.1fx less), "
        "%llu at local steps\n",
        static_cast<long long>(f.zeroOne->varFreezeStep),
        static_cast<unsigned long long>(f.collectiveBytesIn(Phase::Variance)),
        static_cast<unsigned long long>(f.collectiveBytesIn(Phase::Sync)),
        f.compressedRingBytes(),
        f.compressedRingBytes() > 0 ? f.ringBytes() / f.compressedRingBytes()
                                    : 0.0,
        static_cast<unsigned long long>(f.collectiveBytesIn(Phase::Local)));
    out += line;
  }
}

/// Why the plan's figures differ from the formulas'.
void reportDifferences(std::string &out, const Footprint &f,
                       const Formulas &formulas) {
  const int s = f.stage;
  const bool mixedRun = formulas.mixed;
  const double fParams = formulas.params;
  char line[1024];
  out += "  differences from the formulas:\n";
  if (f.psiPadded != f.psi) {
    std::snprintf(line, sizeof line,
                  "    - padding: every partitioned tensor is padded to N "
                  "equal shards (%llu elements in all)\n",
                  static_cast<unsigned long long>(f.psiPadded - f.psi));
    out += line;
  }
  if (s >= 3 && f.params > fParams * 1.01 + 64 * f.world)
    out += "    - parameters under --param-persistence-threshold stay whole "
           "on every rank\n";
  if (f.world > 1)
    out += "    - the loss (4 bytes) and, with --grad-clip, the squared norm "
           "are all-reduced too\n";
  if (f.world > 1 && f.commDtype != "fp32")
    out += "    - gradients are reduced in " + f.commDtype +
           " (2 bytes per element, --comm-dtype)\n";
  if (mixedRun && f.commDtype == "fp32" && f.world > 1)
    out += "    - --comm-dtype=fp32: 16-bit gradients are reduced, and kept, "
           "in fp32 (4 bytes per element)\n";
  if (s >= 3)
    out += "    - stage 3 gathers each parameter once in forward and once in "
           "backward (a parameter used only in one pass is gathered once)\n";
  if (s == 1)
    out += "    - stage 1 holds whole gradients until the backward pass ends, "
           "then keeps the reduced shard\n";
  out += "    - the formulas count no activations or buffers (the arena and "
         "buffers rows)\n";
}
} // namespace

std::string formatFootprint(const Footprint &f) {
  const Formulas formulas(f);
  std::string out;
  reportHeader(out, f);
  reportModelStates(out, f, formulas);
  reportArena(out, f);
  reportOffload(out, f);
  reportCollectives(out, f, formulas);
  reportDifferences(out, f, formulas);
  return out;
}

std::string jsonString(const std::string &v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string formatFootprintJson(const Footprint &f) {
  const int s = f.stage;
  const Formulas formulas(f);
  std::ostringstream o;
  o.precision(17);
  auto kv = [&](const char *k, auto v, bool comma = true) {
    o << "\"" << k << "\": " << v << (comma ? ", " : "");
  };
  o << "{";
  kv("world_size", f.world);
  kv("zero_stage", s);
  kv("optimizer", jsonString(f.optimizer));
  kv("precision", jsonString(f.precision));
  kv("comm_dtype", jsonString(f.commDtype));
  kv("psi", f.psi);
  kv("psi_padded", f.psiPadded);
  o << "\"memory\": {";
  kv("parameters", f.params);
  kv("gradients", f.grads);
  kv("optimizer_state", f.state);
  kv("buffers", f.buffers);
  kv("saved_activations", f.savedActivations);
  kv("arena", f.arena);
  kv("loss_scaler", f.lossScalerBytes);
  kv("total", f.total(), false);
  o << "}, \"offload\": {";
  kv("optimizer", jsonString(f.offloadOptimizer));
  kv("param", jsonString(f.offloadParam));
  kv("activations", jsonString(f.offloadActivations));
  kv("host_storage", f.hostStorage);
  kv("nvme_storage", f.nvmeStorage);
  kv("host_arena", f.hostArena);
  kv("host_peak", f.hostTotal());
  kv("device_to_host_bytes", f.toHostBytes);
  kv("host_to_device_bytes", f.toDeviceBytes);
  kv("nvme_read_bytes", f.nvmeReadBytes);
  kv("nvme_write_bytes", f.nvmeWriteBytes, false);
  o << "}, \"trainable_set\": {";
  kv("trainable", f.trainable.count);
  kv("trainable_bytes", f.trainable.bytes);
  kv("frozen", f.frozen.count);
  kv("frozen_bytes", f.frozen.bytes);
  kv("buffers", f.bufferTensors.count);
  kv("buffer_bytes", f.bufferTensors.bytes, false);
  o << "}, \"formula\": {";
  kv("parameters", formulas.params);
  kv("gradients", formulas.grads);
  kv("optimizer_state", formulas.state, false);
  o << "}, \"peak\": {";
  kv("instruction", f.peakInstruction);
  kv("kernel", jsonString(f.peakKernel));
  kv("node", jsonString(f.peakNode));
  kv("live_bytes", f.liveAtPeak);
  kv("arena_over_live", f.arenaOverLive());
  kv("saved_activation_bytes", f.savedAtPeak);
  kv("collective_buffer_bytes", f.commAtPeak);
  kv("workspace_bytes", f.workspaceAtPeak);
  kv("transient_bytes", f.transientAtPeak);
  o << "\"largest_live\": [";
  for (size_t i = 0; i < f.largestAtPeak.size(); ++i) {
    const Footprint::LiveTensor &t = f.largestAtPeak[i];
    o << (i ? ", " : "") << "{\"bytes\": " << t.bytes
      << ", \"kernel\": " << jsonString(t.kernel)
      << ", \"node\": " << jsonString(t.node) << "}";
  }
  o << "]}, \"collectives\": {";
  kv("all_reduce", f.allReduces);
  kv("all_reduce_bytes", f.allReduceBytes);
  kv("all_gather", f.allGathers);
  kv("all_gather_bytes", f.allGatherBytes);
  kv("reduce_scatter", f.reduceScatters);
  kv("reduce_scatter_bytes", f.reduceScatterBytes);
  kv("async", f.asyncCollectives);
  if (f.quantizedAllGathers + f.quantizedReduceScatters > 0) { // ZeRO++
    kv("quantized_all_gather", f.quantizedAllGathers);
    kv("quantized_all_gather_bytes", f.quantizedAllGatherBytes);
    kv("unquantized_all_gather_bytes", f.unquantizedAllGatherBytes);
    kv("quantized_reduce_scatter", f.quantizedReduceScatters);
    kv("quantized_reduce_scatter_bytes", f.quantizedReduceScatterBytes);
    kv("unquantized_reduce_scatter_bytes", f.unquantizedReduceScatterBytes);
  }
  if (f.hpzPartitionSize > 1) { // ZeRO++'s hpZ
    kv("hpz_partition_size", f.hpzPartitionSize);
    kv("hpz_secondary_bytes", f.hpzSecondaryBytes);
    kv("node_all_gather", f.nodeAllGathers);
    kv("node_all_gather_bytes", f.nodeAllGatherBytes);
  }
  if (f.devicesPerNode > 0 && f.world > 1) {
    kv("devices_per_node", f.devicesPerNode);
    kv("intra_node_bytes_per_rank", f.intraNodeBytes());
    kv("cross_node_bytes_per_rank", f.crossNodeBytes());
    kv("cross_node_bytes_per_rank_unquantized",
       f.crossNodeBytesUnquantized());
  }
  if (f.freezeStep >= 0) { // 1-bit Adam: the figures after the freeze
    kv("freeze_step", f.freezeStep);
    if (f.freezeAuto) // decided at run time; freeze_step is the latest
      kv("freeze_step_auto", "true");
    kv("compressed_all_reduce", f.compressedAllReduces);
    kv("compressed_all_reduce_bytes", f.compressedAllReduceBytes);
    kv("compressed_reduce_scatter", f.compressedReduceScatters);
    kv("compressed_reduce_scatter_bytes", f.compressedReduceScatterBytes);
    kv("compressed_all_gather", f.compressedAllGathers);
    kv("compressed_all_gather_bytes", f.compressedAllGatherBytes);
    // The uncompressed kinds' bytes that still run after the freeze.
    kv("all_reduce_bytes_after_freeze",
       f.allReduceBytes - (f.warmupOnlyBytes - f.warmupOnlyReduceScatterBytes -
                           f.warmupOnlyAllGatherBytes));
    kv("all_gather_bytes_after_freeze",
       f.allGatherBytes - f.warmupOnlyAllGatherBytes);
    kv("reduce_scatter_bytes_after_freeze",
       f.reduceScatterBytes - f.warmupOnlyReduceScatterBytes);
    kv("bytes_per_step_after_freeze", f.collectiveBytesAfterFreeze());
    kv("compressed_ring_bytes_per_rank", f.compressedRingBytes());
  }
  if (f.zeroOne) { // 0/1 Adam: the bytes of a step of each phase
    kv("var_freeze_step", f.zeroOne->varFreezeStep);
    kv("compressed_all_reduce", f.compressedAllReduces);
    kv("bytes_per_variance_step",
       f.collectiveBytesIn(zeroone::Phase::Variance));
    kv("bytes_per_compressed_step", f.collectiveBytesIn(zeroone::Phase::Sync));
    kv("bytes_per_local_step", f.collectiveBytesIn(zeroone::Phase::Local));
    kv("compressed_ring_bytes_per_rank", f.compressedRingBytes());
  }
    kv("ring_bytes_per_rank", f.ringBytes());
  kv("once_per_step_bytes", f.onceBytes);
  kv("bytes_per_step", f.collectiveBytesPerStep(), false);
  o << "}, ";
  kv("accum_steps", f.accumSteps, false);
  o << "}";
  return o.str();
}

} // namespace ds
