//===- PlanFootprint.cpp - a plan's per-rank memory and traffic -----------===//
//
// Part of the ds project (no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/PlanFootprint.h"

#include "plan.pb.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>
#include <map>
#include <set>

namespace ds {

namespace {
uint64_t elementBytes(plan::DType t) {
  switch (t) {
  case plan::F16:
  case plan::BF16: return 2;
  case plan::I64: return 8;
  case plan::BOOL: return 1;
  default: return 4;
  }
}

uint64_t product(const google::protobuf::RepeatedField<int64_t> &dims) {
  uint64_t n = 1;
  for (int64_t d : dims)
    n *= static_cast<uint64_t>(d);
  return n;
}
} // namespace

double Footprint::ringBytes() const {
  if (world <= 1)
    return 0;
  double part = static_cast<double>(world - 1) / world;
  return part * (2.0 * allReduceBytes + allGatherBytes + reduceScatterBytes);
}

int bufferLocation(const plan::Plan &p, uint32_t id) {
  const plan::Buffer &b = p.buffers(id);
  if (b.space() == plan::HOST_ARENA)
    return 1;
  if (b.space() == plan::PARAM &&
      b.slot() < static_cast<uint32_t>(p.parameters_size()))
    return static_cast<int>(p.parameters(b.slot()).location());
  return 0;
}

Footprint footprint(const plan::Plan &p) {
  Footprint f;
  f.tensorParallel = std::max(1, static_cast<int>(p.tensor_parallel()));
  f.world = std::max(1, (p.world_size() == 0 ? 1 : static_cast<int>(p.world_size())) /
                            f.tensorParallel);
  f.stage = static_cast<int>(p.zero_stage());
  f.arena = p.programs_size() ? p.programs(0).arena_bytes() : 0;
  if (auto it = p.options().find("precision");
      it != p.options().end() && !it->second.empty())
    f.precision = it->second;
  if (auto it = p.options().find("comm_dtype");
      it != p.options().end() && !it->second.empty())
    f.commDtype = it->second;
  int trainable = 0, states = 0;
  for (const plan::Parameter &param : p.parameters()) {
    uint64_t bytes = product(param.shape()) * elementBytes(param.dtype());
    if (param.location() == plan::HOST)
      f.hostStorage += bytes;
    else if (param.location() == plan::NVME)
      f.nvmeStorage += bytes;
    if (!param.state() && f.tensorParallel > 1) {
      bool split = param.tp_parts() > 1;
      (split ? f.tp.split : f.tp.whole) += 1;
      (split ? f.tp.splitBytes : f.tp.wholeBytes) += bytes;
      if (!split)
        f.tp.largestWhole.push_back({param.name(), bytes});
      if (split && param.tp_whole() > 0)
        f.tp.padded.push_back(
            {param.name(), param.tp_whole(),
             (param.tp_whole() + param.tp_parts() - 1) / param.tp_parts()});
    }
    if (param.state()) {
      f.state += bytes;
      ++states;
    } else if (param.trainable()) {
      f.params += bytes;
      ++trainable;
      uint64_t whole = param.sharded() ? product(param.full_shape())
                                       : product(param.shape());
      f.psi += whole;
      f.psiPadded += param.sharded() ? product(param.shape()) * f.world : whole;
    } else {
      f.buffers += bytes;
    }
  }
  f.statePerParam = trainable ? static_cast<double>(states) / trainable : 0;
  std::sort(f.tp.largestWhole.begin(), f.tp.largestWhole.end(),
            [](const auto &a, const auto &b) {
              return a.second != b.second ? a.second > b.second
                                          : a.first < b.first;
            });
  if (f.tp.largestWhole.size() > 3)
    f.tp.largestWhole.resize(3);
  for (const plan::Program &prog : p.programs())
    for (const plan::Instruction &ins : prog.instructions())
      f.tp.sequence |= ins.kernel() == "sp_reduce_scatter" ||
                       (ins.kernel() == "reduce_scatter" &&
                        std::any_of(ins.attributes().begin(),
                                    ins.attributes().end(),
                                    [](const plan::Attribute &a) {
                                      return a.name() == "group" && a.i() == 1;
                                    }));
  for (const plan::Value &v : p.inputs())
    if (v.name() == "ds.loss_scale" &&
        v.buffer() < static_cast<uint32_t>(p.buffers_size()))
      f.lossScalerBytes += p.buffers(v.buffer()).bytes();
  if (auto it = p.options().find("offload_optimizer"); it != p.options().end())
    f.offloadOptimizer = it->second;
  if (auto it = p.options().find("offload_param"); it != p.options().end())
    f.offloadParam = it->second;
  if (p.programs_size() == 0)
    return f;
  const plan::Program &prog = p.programs(0);
  f.hostArena = prog.host_arena_bytes();
  for (const plan::Instruction &ins : prog.instructions()) {
    if (ins.kernel() != "transfer" || ins.inputs_size() != 1 ||
        ins.outputs_size() != 1 ||
        ins.inputs(0) >= static_cast<uint32_t>(p.buffers_size()) ||
        ins.outputs(0) >= static_cast<uint32_t>(p.buffers_size()))
      continue;
    uint64_t bytes = p.buffers(ins.inputs(0)).bytes();
    int from = bufferLocation(p, ins.inputs(0)),
        to = bufferLocation(p, ins.outputs(0));
    if (from == 2)
      f.nvmeReadBytes += bytes;
    else if (to == 2)
      f.nvmeWriteBytes += bytes;
    else if (to == 1)
      f.toHostBytes += bytes;
    else
      f.toDeviceBytes += bytes;
  }
  auto bytesOf = [&](uint32_t id) -> uint64_t {
    return id < static_cast<uint32_t>(p.buffers_size()) ? p.buffers(id).bytes()
                                                         : 0;
  };
  // The instruction that last wrote each buffer, as instructions go.
  std::map<uint32_t, const plan::Instruction *> writer;
  // A gradient as the step keeps it: before the optimizer's f32 copy (a
  // 16-bit gradient is cast up, unscaled and clipped one tensor at a time
  // just before its update).
  auto keptGradient = [&](uint32_t id) {
    bool castSeen = false;
    for (auto it = writer.find(id); it != writer.end() && !castSeen;
         it = writer.find(id)) {
      const plan::Instruction &w = *it->second;
      // A multiply by a scalar (the loss scale's inverse, the clip
      // coefficient) or a cast.
      bool byScalar = w.kernel() == "mul" && w.inputs_size() == 2 &&
                      w.inputs(1) < static_cast<uint32_t>(p.buffers_size()) &&
                      product(p.buffers(w.inputs(1)).shape()) == 1;
      if (!byScalar && !(w.kernel() == "cast" && w.inputs_size() == 1))
        break;
      castSeen = w.kernel() == "cast";
      id = w.inputs(0);
    }
    return bytesOf(id);
  };
  // A collective moves bytes when its group has more than one rank: group
  // 0 the data-parallel ranks, 1 the tensor-parallel ones, -1 all.
  auto groupRanks = [&](const plan::Instruction &ins) {
    int64_t g = 0;
    for (const plan::Attribute &a : ins.attributes())
      if (a.name() == "group")
        g = a.i();
    return g == 1 ? f.tensorParallel
           : g == -1 ? f.world * f.tensorParallel
                     : f.world;
  };
  for (const plan::Instruction &ins : prog.instructions()) {
    const std::string &k = ins.kernel();
    bool shared = groupRanks(ins) > 1;
    if (shared && k == "all_reduce" && ins.outputs_size() == 1) {
      ++f.allReduces;
      f.allReduceBytes += bytesOf(ins.outputs(0));
    } else if (shared && k == "check_overflow") {
      ++f.allReduces; // the overflow flag, reduced over ranks (one float)
      f.allReduceBytes += 4;
    } else if (shared && (k == "all_gather" || k == "sp_all_gather") &&
               ins.outputs_size() == 1) {
      ++f.allGathers;
      f.allGatherBytes += bytesOf(ins.outputs(0));
    } else if (shared && k == "vocab_cross_entropy" &&
               ins.inputs_size() == 2 && ins.outputs_size() == 2) {
      // Each row's maximum gathered (N floats per rank), then the sums of
      // exponentials and the target scores reduced (2N floats).
      uint64_t rows = bytesOf(ins.outputs(1)); // lse: N floats
      ++f.allGathers;
      f.allGatherBytes += rows * groupRanks(ins);
      ++f.allReduces;
      f.allReduceBytes += 2 * rows;
    } else if (shared && (k == "reduce_scatter" || k == "sp_reduce_scatter") &&
               ins.inputs_size() == 1) {
      ++f.reduceScatters;
      f.reduceScatterBytes += bytesOf(ins.inputs(0));
    } else if ((k == "adam" || k == "sgd") && ins.inputs_size() >= 2) {
      f.optimizer = k;
      for (const plan::Attribute &a : ins.attributes())
        if (a.name() == "accum_steps" && a.i() > 1)
          f.accumSteps = a.i();
      f.grads += keptGradient(ins.inputs(1));
    }
    for (uint32_t id : ins.outputs())
      writer[id] = &ins;
  }
  // Saved activations: arena ranges written before the backward pass and
  // read after its start (a range reused later is a new tensor).
  int boundary = -1;
  for (int i = 0; i < prog.instructions_size() && boundary < 0; ++i)
    if (prog.instructions(i).kernel() == "loss_grad" ||
        prog.instructions(i).kernel() == "vocab_cross_entropy_grad")
      boundary = i;
  if (boundary >= 0) {
    std::map<std::pair<uint64_t, uint64_t>, int> lastWriter;
    std::set<std::pair<uint64_t, uint64_t>> saved;
    auto key = [&](uint32_t id) {
      const plan::Buffer &b = p.buffers(id);
      return std::make_pair(static_cast<uint64_t>(b.offset()),
                            static_cast<uint64_t>(b.bytes()));
    };
    auto inArena = [&](uint32_t id) {
      return id < static_cast<uint32_t>(p.buffers_size()) &&
             p.buffers(id).space() == plan::ARENA;
    };
    for (int i = 0; i < prog.instructions_size(); ++i) {
      const plan::Instruction &ins = prog.instructions(i);
      if (i >= boundary)
        for (uint32_t id : ins.inputs()) {
          if (!inArena(id))
            continue;
          auto it = lastWriter.find(key(id));
          if (it != lastWriter.end() && it->second < boundary)
            saved.insert(key(id));
        }
      for (uint32_t id : ins.outputs())
        if (inArena(id))
          lastWriter[key(id)] = i;
    }
    f.savedActivations = 0;
    for (const auto &[offset, bytes] : saved)
      f.savedActivations += static_cast<int64_t>(bytes);
  }
  // The arena at its fullest: live ranges of arena tensors, and the union
  // of their byte ranges at each instruction.
  {
    const int n = prog.instructions_size();
    const size_t nb = p.buffers_size();
    std::vector<int> first(nb, -1), last(nb, -1), writer(nb, -1);
    auto touch = [&](uint32_t id, int i, bool write) {
      if (id >= nb || p.buffers(id).space() != plan::ARENA)
        return;
      if (first[id] < 0)
        first[id] = i;
      last[id] = std::max(last[id], i);
      if (write && writer[id] < 0)
        writer[id] = i;
    };
    for (int i = 0; i < n; ++i) {
      for (uint32_t id : prog.instructions(i).inputs())
        touch(id, i, false);
      for (uint32_t id : prog.instructions(i).outputs())
        touch(id, i, true);
    }
    // Collective buffers (any buffer over the same bytes as a collective's
    // input or output: the packed bucket and its views), and workspace (an
    // extra output of a kernel that nothing else reads, such as a GEMM's
    // f32 accumulator).
    std::set<std::pair<uint64_t, uint64_t>> commRanges;
    std::vector<bool> comm(nb, false), extraOutput(nb, false);
    auto range = [&](uint32_t id) {
      return std::make_pair(static_cast<uint64_t>(p.buffers(id).offset()),
                            static_cast<uint64_t>(p.buffers(id).bytes()));
    };
    for (int i = 0; i < n; ++i) {
      const plan::Instruction &ins = prog.instructions(i);
      const std::string &k = ins.kernel();
      for (int o = 1; o < ins.outputs_size(); ++o)
        if (ins.outputs(o) < nb)
          extraOutput[ins.outputs(o)] = true;
      if (k == "all_gather" || k == "reduce_scatter" || k == "all_reduce" ||
          k == "sp_all_gather" || k == "sp_reduce_scatter") {
        for (uint32_t id : ins.inputs())
          if (id < nb && p.buffers(id).space() == plan::ARENA)
            commRanges.insert(range(id));
        for (uint32_t id : ins.outputs())
          if (id < nb && p.buffers(id).space() == plan::ARENA)
            commRanges.insert(range(id));
      }
    }
    for (uint32_t id = 0; id < nb; ++id)
      comm[id] = p.buffers(id).space() == plan::ARENA &&
                 commRanges.count(range(id)) > 0;
    std::vector<std::vector<uint32_t>> starts(n), ends(n);
    for (uint32_t id = 0; id < nb; ++id)
      if (first[id] >= 0) {
        starts[first[id]].push_back(id);
        ends[last[id]].push_back(id);
      }
    std::set<std::pair<uint64_t, uint32_t>> active; // (offset, id)
    auto unionBytes = [&](auto keep) {
      uint64_t total = 0, reach = 0;
      for (const auto &[offset, id] : active) {
        if (!keep(id))
          continue;
        uint64_t end = offset + p.buffers(id).bytes();
        if (end <= reach)
          continue;
        total += end - std::max(offset, reach);
        reach = end;
      }
      return total;
    };
    auto saved = [&](uint32_t id) {
      return boundary >= 0 && writer[id] >= 0 && writer[id] < boundary &&
             last[id] >= boundary;
    };
    auto isComm = [&](uint32_t id) { return !saved(id) && comm[id]; };
    auto isWork = [&](uint32_t id) {
      return !saved(id) && !comm[id] && first[id] == last[id] &&
             extraOutput[id];
    };
    auto isOther = [&](uint32_t id) {
      return !saved(id) && !isComm(id) && !isWork(id);
    };
    f.backwardStart = boundary;
    f.liveByKind.assign(n, {0, 0, 0, 0});
    for (int i = 0; i < n; ++i) {
      for (uint32_t id : starts[i])
        active.insert({p.buffers(id).offset(), id});
      std::array<uint64_t, 4> kinds = {unionBytes(saved), unionBytes(isComm),
                                       unionBytes(isWork), unionBytes(isOther)};
      f.liveByKind[i] = kinds;
      uint64_t live = unionBytes([](uint32_t) { return true; });
      if (f.peakInstruction < 0 || live > f.liveAtPeak) {
        f.liveAtPeak = live;
        f.peakInstruction = i;
        const plan::Instruction &ins = prog.instructions(i);
        f.peakKernel = ins.kernel();
        f.peakNode = ins.location();
        f.savedAtPeak = kinds[0];
        f.commAtPeak = kinds[1];
        f.workspaceAtPeak = kinds[2];
        f.transientAtPeak = kinds[3];
        std::vector<std::pair<uint64_t, uint32_t>> bySize;
        std::set<std::pair<uint64_t, uint64_t>> seen;
        for (const auto &[offset, id] : active)
          if (writer[id] >= 0 &&
              seen.insert({offset, p.buffers(id).bytes()}).second)
            bySize.push_back({p.buffers(id).bytes(), id});
        std::sort(bySize.begin(), bySize.end(),
                  [](auto &x, auto &y) { return x.first > y.first; });
        f.largestAtPeak.clear();
        for (size_t k = 0; k < bySize.size() && k < 5; ++k) {
          const plan::Instruction &w = prog.instructions(writer[bySize[k].second]);
          f.largestAtPeak.push_back({bySize[k].first, w.kernel(), w.location()});
        }
      }
      for (uint32_t id : ends[i])
        active.erase({p.buffers(id).offset(), id});
    }
  }
  // Async collectives and the kernels between each start and its wait (the
  // wait's last input is the collective's output).
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    bool async = false;
    for (const plan::Attribute &a : ins.attributes())
      async |= a.name() == "async" && a.i() != 0;
    if (!async || ins.outputs_size() != 1)
      continue;
    ++f.asyncCollectives;
    f.asyncBytes += ins.kernel() == "reduce_scatter" && ins.inputs_size() == 1
                        ? bytesOf(ins.inputs(0))
                        : bytesOf(ins.outputs(0));
    for (int j = i + 1; j < prog.instructions_size(); ++j) {
      const plan::Instruction &w = prog.instructions(j);
      if (w.kernel() == "wait" && w.inputs_size() > 0 &&
          w.inputs(w.inputs_size() - 1) == ins.outputs(0)) {
        f.overlappedKernels += j - i - 1;
        break;
      }
    }
  }
  // Stage 1 keeps whole gradients until it reduces them after the backward
  // pass: the reduce-scatters' inputs (padded, bucketed or not).
  if (f.stage == 1 && f.world > 1)
    f.grads = f.reduceScatterBytes;
  return f;
}

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

std::string formatFootprint(const Footprint &f) {
  const double psi = static_cast<double>(f.psi), n = f.world;
  const int s = f.stage;
  const Formulas formulas(f);
  const bool mixedRun = formulas.mixed;
  const double pb = formulas.paramBytes;
  double fParams = formulas.params, fGrads = formulas.grads,
         fState = formulas.state;
  // DeepSpeed's mixed-precision Adam table (REFERENCES.md): 16Ψ split.
  double mixed = s == 0   ? 16 * psi
                 : s == 1 ? 4 * psi + 12 * psi / n
                 : s == 2 ? 2 * psi + 14 * psi / n
                          : 16 * psi / n;
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
  std::string out;
  char line[1024]; // the header names the grid and the precision in full
  auto row = [&](const char *what, double plan, double formula,
                 const char *rule) {
    std::snprintf(line, sizeof line, "  %-22s %14.0f %12s   %14.0f %12s  %6s  %s\n",
                  what, plan, mib(plan).c_str(), formula,
                  mib(formula).c_str(),
                  formula > 0 ? (std::to_string(plan / formula).substr(0, 5)).c_str()
                              : "-",
                  rule);
    out += line;
  };
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
  if (f.hostStorage + f.nvmeStorage + f.hostArena) {
    std::snprintf(line, sizeof line,
                  "offload (optimizer: %s, parameters: %s), per rank and "
                  "step:\n",
                  f.offloadOptimizer.c_str(), f.offloadParam.c_str());
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
        "(gradients and updates in flight on the host)");
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
  if (f.accumSteps > 1) {
    std::snprintf(line, sizeof line,
                  "  gradient accumulation: %lld runs per optimizer step; the "
                  "collective figures are per run\n",
                  static_cast<long long>(f.accumSteps));
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
  row("ring traffic per rank", f.ringBytes(), fRing, ringRule);
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
  kv("host_storage", f.hostStorage);
  kv("nvme_storage", f.nvmeStorage);
  kv("host_arena", f.hostArena);
  kv("host_peak", f.hostTotal());
  kv("device_to_host_bytes", f.toHostBytes);
  kv("host_to_device_bytes", f.toDeviceBytes);
  kv("nvme_read_bytes", f.nvmeReadBytes);
  kv("nvme_write_bytes", f.nvmeWriteBytes, false);
  o << "}, \"formula\": {";
  kv("parameters", formulas.params);
  kv("gradients", formulas.grads);
  kv("optimizer_state", formulas.state, false);
  o << "}, \"peak\": {";
  kv("instruction", f.peakInstruction);
  kv("kernel", jsonString(f.peakKernel));
  kv("node", jsonString(f.peakNode));
  kv("live_bytes", f.liveAtPeak);
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
  kv("ring_bytes_per_rank", f.ringBytes(), false);
  o << "}, ";
  kv("accum_steps", f.accumSteps, false);
  o << "}";
  return o.str();
}

} // namespace ds
