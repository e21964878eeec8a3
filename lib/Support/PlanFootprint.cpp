//===- PlanFootprint.cpp - a plan's per-rank memory and traffic -----------===//
//
// Part of the ds project (no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/PlanFootprint.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/PlanFormat.h"

#include "plan.pb.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
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

namespace {
/// hpZ's node-group gathers: (H-1)/H of their bytes, all within the node.
double nodeRingBytes(const Footprint &f) {
  int h = f.hpzPartitionSize;
  return h > 1 ? static_cast<double>(h - 1) / h *
                     static_cast<double>(f.nodeAllGatherBytes)
               : 0;
}
/// The ring traffic of the collectives over the N data-parallel ranks.
double worldRingBytes(const Footprint &f) {
  return f.ringBytes() - nodeRingBytes(f);
}
} // namespace

double Footprint::ringBytes() const {
  if (world <= 1)
    return 0;
  double part = static_cast<double>(world - 1) / world;
  return part * (2.0 * allReduceBytes + allGatherBytes + reduceScatterBytes -
                 nodeAllGatherBytes) +
         nodeRingBytes(*this);
}

double Footprint::compressedRingBytes() const {
  if (world <= 1)
    return 0;
  double part = static_cast<double>(world - 1) / world;
  // The warm-up's all-reduces ring twice, its reduce-scatters and
  // all-gathers once.
  uint64_t once = warmupOnlyReduceScatterBytes + warmupOnlyAllGatherBytes;
  double warmupRing = part * (2.0 * static_cast<double>(warmupOnlyBytes - once) +
                              static_cast<double>(once));
  return ringBytes() - warmupRing + part * static_cast<double>(compressedBytes);
}

namespace {
/// The share of a data-parallel collective's ring traffic that crosses
/// nodes: N-d of the N-1 other ranks are on other nodes.
double crossShare(const Footprint &f) {
  int d = std::min(f.devicesPerNode, f.world);
  return f.world > 1 ? static_cast<double>(f.world - d) / (f.world - 1) : 0;
}
} // namespace

double Footprint::crossNodeBytes() const {
  return devicesPerNode > 0 ? worldRingBytes(*this) * crossShare(*this) : -1;
}

double Footprint::intraNodeBytes() const {
  return devicesPerNode > 0 ? ringBytes() - crossNodeBytes() : -1;
}

double Footprint::crossNodeBytesUnquantized() const {
  if (devicesPerNode <= 0 || world <= 1)
    return -1;
  double part = static_cast<double>(world - 1) / world;
  double extra =
      static_cast<double>(unquantizedAllGatherBytes) -
      static_cast<double>(quantizedAllGatherBytes) +
      static_cast<double>(unquantizedReduceScatterBytes) -
      static_cast<double>(quantizedReduceScatterBytes);
  return (worldRingBytes(*this) + part * extra) * crossShare(*this);
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

namespace {

/// The compile options the report names.
void addOptions(const plan::Plan &p, Footprint &f) {
  if (auto it = p.options().find("precision");
      it != p.options().end() && !it->second.empty())
    f.precision = it->second;
  if (auto it = p.options().find("comm_dtype");
      it != p.options().end() && !it->second.empty())
    f.commDtype = it->second;
  if (auto it = p.options().find("devices_per_node"); it != p.options().end())
    f.devicesPerNode = std::atoi(it->second.c_str());
  if (auto it = p.options().find("offload_optimizer"); it != p.options().end())
    f.offloadOptimizer = it->second;
  if (auto it = p.options().find("offload_param"); it != p.options().end())
    f.offloadParam = it->second;
  if (auto it = p.options().find("offload_activations");
      it != p.options().end())
    f.offloadActivations = it->second;
}

/// Storage per rank: parameters, optimizer state and buffers, where they
/// are stored, Ψ, and the tensor-parallel split.
void addStorage(const plan::Plan &p, Footprint &f) {
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
      f.trainable.count += 1;
      f.trainable.bytes += bytes;
      uint64_t whole = param.sharded() ? product(param.full_shape())
                                       : product(param.shape());
      f.psi += whole;
      f.psiPadded += param.sharded() ? product(param.shape()) * f.world : whole;
    } else {
      f.buffers += bytes;
      Footprint::TensorKind &kind = param.frozen() ? f.frozen : f.bufferTensors;
      kind.count += 1;
      kind.bytes += bytes;
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
  for (const plan::Value &v : p.inputs())
    if (v.name() == kLossScaleInput &&
        v.buffer() < static_cast<uint32_t>(p.buffers_size()))
      f.lossScalerBytes += p.buffers(v.buffer()).bytes();
}

/// Sequence parallelism: activations between the blocks are reduce-
/// scattered over the tensor-parallel ranks.
bool sequenceParallel(const plan::Plan &p) {
  for (const plan::Program &prog : p.programs())
    for (const plan::Instruction &ins : prog.instructions())
      for (const plan::Collective &c : ins.collectives())
        if (c.kind() == plan::COLLECTIVE_REDUCE_SCATTER &&
            c.group() == plan::GROUP_SEQUENCE)
          return true;
  return false;
}

/// Bytes the offload transfers move, by direction.
void addTransfers(const plan::Plan &p, const plan::Program &prog,
                  Footprint &f) {
  for (const plan::Instruction &ins : prog.instructions()) {
    if (!isTransfer(ins.kind()) || ins.inputs_size() != 1 ||
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
}

uint64_t bytesOf(const plan::Plan &p, uint32_t id) {
  return id < static_cast<uint32_t>(p.buffers_size()) ? p.buffers(id).bytes()
                                                       : 0;
}

/// A gradient as the step keeps it: before the optimizer's f32 copy (a
/// 16-bit gradient is cast up, unscaled and clipped one tensor at a time
/// just before its update). `writer`: the instruction that last wrote each
/// buffer so far.
uint64_t keptGradient(
    const plan::Plan &p, uint32_t id,
    const std::map<uint32_t, const plan::Instruction *> &writer) {
  bool castSeen = false;
  for (auto it = writer.find(id); it != writer.end() && !castSeen;
       it = writer.find(id)) {
    const plan::Instruction &w = *it->second;
    // A multiply by a scalar (the loss scale's inverse, the clip
    // coefficient) or a cast.
    bool byScalar = w.kind() == plan::KIND_MUL && w.inputs_size() == 2 &&
                    w.inputs(1) < static_cast<uint32_t>(p.buffers_size()) &&
                    product(p.buffers(w.inputs(1)).shape()) == 1;
    bool cast = w.kind() == plan::KIND_CAST && w.inputs_size() == 1;
    if (!byScalar && !cast)
      break;
    castSeen = cast;
    id = w.inputs(0);
  }
  return bytesOf(p, id);
}

/// The collectives per run (those whose group has more than one rank),
/// the optimizer, and the gradients it reads.
void addCollectivesAndOptimizer(const plan::Plan &p,
                                const plan::Program &prog, Footprint &f) {
  std::map<uint32_t, const plan::Instruction *> writer;
  const int once = p.pipeline().update_once()
                       ? static_cast<int>(p.pipeline().update_start())
                       : prog.instructions_size();
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    for (const plan::Collective &c : ins.collectives()) {
      if (groupRanks(c.group(), f.world, f.tensorParallel,
                     f.hpzPartitionSize) <= 1)
        continue;
      if (c.group() == plan::GROUP_NODE &&
          c.kind() == plan::COLLECTIVE_ALL_GATHER) { // hpZ's backward gathers
        ++f.nodeAllGathers;
        f.nodeAllGatherBytes += c.bytes();
      }
      if (i >= once && (c.kind() == plan::COLLECTIVE_ALL_REDUCE ||
                        c.kind() == plan::COLLECTIVE_ALL_GATHER ||
                        c.kind() == plan::COLLECTIVE_REDUCE_SCATTER))
        f.onceBytes += c.bytes();
      const uint64_t warmup0 = f.warmupOnlyBytes, compressed0 = f.compressedBytes;
      switch (c.kind()) {
      case plan::COLLECTIVE_ALL_REDUCE:
        ++f.allReduces;
        f.allReduceBytes += c.bytes();
        if (ins.kind() == plan::KIND_ONEBIT_ADAM || // the warm-up's gradient
            ins.kind() == plan::KIND_ONEBIT_LAMB ||
            ins.kind() == plan::KIND_ZERO_ONE_ADAM) // 0/1: variance steps
          f.warmupOnlyBytes += c.bytes();
        break;
      case plan::COLLECTIVE_COMPRESSED_ALL_REDUCE: // after the freeze
        ++f.compressedAllReduces;
        f.compressedBytes += c.bytes();
        f.compressedAllReduceBytes += c.bytes();
        break;
      case plan::COLLECTIVE_COMPRESSED_REDUCE_SCATTER: // ZeRO 1-3, after it
        ++f.compressedReduceScatters;
        f.compressedBytes += c.bytes();
        f.compressedReduceScatterBytes += c.bytes();
        break;
      case plan::COLLECTIVE_COMPRESSED_ALL_GATHER: // ZeRO 1-3, after it
        ++f.compressedAllGathers;
        f.compressedBytes += c.bytes();
        f.compressedAllGatherBytes += c.bytes();
        break;
      case plan::COLLECTIVE_ALL_GATHER:
        ++f.allGathers;
        f.allGatherBytes += c.bytes();
        if (ins.kind() == plan::KIND_COMPRESSED_ALL_GATHER ||
            ins.kind() == plan::KIND_ONEBIT_QUANTIZED_ALL_GATHER) {
          f.warmupOnlyBytes += c.bytes(); // the warm-up's parameters
          f.warmupOnlyAllGatherBytes += c.bytes();
        }
        if (ins.kind() == plan::KIND_QUANTIZED_ALL_GATHER) { // ZeRO++ qwZ
          ++f.quantizedAllGathers;
          f.quantizedAllGatherBytes += c.bytes();
          f.unquantizedAllGatherBytes += bytesOf(p, ins.outputs(0));
        }
        break;
      case plan::COLLECTIVE_REDUCE_SCATTER:
        ++f.reduceScatters;
        f.reduceScatterBytes += c.bytes();
        if (ins.kind() == plan::KIND_QUANTIZED_REDUCE_SCATTER) { // qgZ
          ++f.quantizedReduceScatters;
          f.quantizedReduceScatterBytes += c.bytes();
          f.unquantizedReduceScatterBytes += bytesOf(p, ins.inputs(0));
        }
        if (ins.kind() == plan::KIND_COMPRESSED_REDUCE_SCATTER) {
          f.warmupOnlyBytes += c.bytes(); // the warm-up's gradient bucket
          f.warmupOnlyReduceScatterBytes += c.bytes();
        }
        break;
      default: // pipeline sends are the pipeline report's
        break;
      }
      if (i >= once) { // the update section of a pipeline stage
        f.warmupOnlyOnceBytes += f.warmupOnlyBytes - warmup0;
        f.compressedOnceBytes += f.compressedBytes - compressed0;
      }
    }
    if (isOptimizer(ins.kind()) && ins.inputs_size() >= 2) {
      // The optimizer asked for: AdamW and Lamb run the adam kernel.
      f.optimizer = ins.optimizer().lamb()        ? "lamb"
                    : ins.optimizer().decoupled() ? "adamw"
                                                  : optimizerKernelName(ins.kind());
      if (ins.optimizer().has_freeze_step())
        f.freezeStep = ins.optimizer().freeze_step();
      for (const plan::Attribute &a : ins.attributes())
        f.freezeAuto |= a.name() == "freeze_auto" && a.i() != 0;
      if (ins.optimizer().has_var_freeze_step()) // 0/1 Adam
        f.zeroOne = ::ds::zeroone::Policy{
            ins.optimizer().var_freeze_step(),
            ins.optimizer().var_update_scaler(),
            ins.optimizer().local_step_scaler(),
            ins.optimizer().local_step_clipper()};
      if (ins.optimizer().accum_steps() > 1)
        f.accumSteps = ins.optimizer().accum_steps();
      if (isMultiTensorOptimizer(ins.kind())) {
        // N params, N gradients, N of each state and the step in; N new
        // params and N of each new state out: N is ins - 1 - outs.
        int n = ins.inputs_size() - 1 - ins.outputs_size();
        for (int i = 0; i < n; ++i)
          f.grads += keptGradient(p, ins.inputs(n + i), writer);
      } else {
        f.grads += keptGradient(p, ins.inputs(1), writer);
      }
    }
    if (ins.kind() == plan::KIND_TP_ROWS && ins.outputs_size() == 1)
      for (const plan::Attribute &a : ins.attributes())
        if (a.name() == "group" && a.i() == 2) // hpZ's secondary partition
          f.hpzSecondaryBytes += bytesOf(p, ins.outputs(0));
    for (uint32_t id : ins.outputs())
      writer[id] = &ins;
  }
}

/// The first instruction of the backward pass (the loss's gradient); -1
/// if none.
int backwardStart(const plan::Program &prog) {
  for (int i = 0; i < prog.instructions_size(); ++i)
    if (startsBackward(prog.instructions(i).kind()))
      return i;
  return -1;
}

/// Saved activations: arena ranges written before the backward pass and
/// read after its start (a range reused later is a new tensor).
int64_t savedActivations(const plan::Plan &p, const plan::Program &prog,
                         int boundary) {
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
  int64_t total = 0;
  for (const auto &[offset, bytes] : saved)
    total += static_cast<int64_t>(bytes);
  return total;
}

/// Arena tensors' live ranges: the first and last instruction that
/// touches each buffer (a graph output: the last instruction), the last
/// that touches it, and the instruction that wrote it (-1: none). A view
/// first read under its own id reads what the last write over the same
/// bytes left: it is live, and written, from that write.
struct LiveRanges {
  std::vector<int> first, last, touched, writer;
};

LiveRanges liveRanges(const plan::Plan &p, const plan::Program &prog) {
  const size_t nb = p.buffers_size();
  LiveRanges r{std::vector<int>(nb, -1), std::vector<int>(nb, -1),
               std::vector<int>(nb, -1), std::vector<int>(nb, -1)};
  std::map<std::pair<uint64_t, uint64_t>, int> lastWrite;
  auto key = [&](uint32_t id) {
    return std::make_pair(static_cast<uint64_t>(p.buffers(id).offset()),
                          static_cast<uint64_t>(p.buffers(id).bytes()));
  };
  auto touch = [&](uint32_t id, int i, bool write) {
    if (id >= nb || p.buffers(id).space() != plan::ARENA)
      return;
    if (r.first[id] < 0) {
      r.first[id] = i;
      auto it = lastWrite.find(key(id));
      if (!write && it != lastWrite.end())
        r.first[id] = r.writer[id] = it->second;
    }
    r.last[id] = std::max(r.last[id], i);
    if (write && r.writer[id] < 0)
      r.writer[id] = i;
  };
  for (int i = 0; i < prog.instructions_size(); ++i) {
    for (uint32_t id : prog.instructions(i).inputs())
      touch(id, i, false);
    for (uint32_t id : prog.instructions(i).outputs()) {
      touch(id, i, true);
      if (id < nb && p.buffers(id).space() == plan::ARENA)
        lastWrite[key(id)] = i;
    }
  }
  r.touched = r.last;
  // Graph outputs live to the end: ds-run reads them after the step.
  for (const plan::Value &v : p.outputs())
    if (v.buffer() < nb && r.first[v.buffer()] >= 0)
      r.last[v.buffer()] = prog.instructions_size() - 1;
  return r;
}

/// Collective buffers (any arena buffer over the same bytes as a
/// collective's input or output: the packed bucket and its views), and
/// extra outputs (a kernel's outputs after its first: workspace when
/// nothing else reads them, such as a GEMM's f32 accumulator).
void bufferRoles(const plan::Plan &p, const plan::Program &prog,
                 std::vector<bool> &comm, std::vector<bool> &extraOutput) {
  const size_t nb = p.buffers_size();
  comm.assign(nb, false);
  extraOutput.assign(nb, false);
  std::set<std::pair<uint64_t, uint64_t>> commRanges;
  auto range = [&](uint32_t id) {
    return std::make_pair(static_cast<uint64_t>(p.buffers(id).offset()),
                          static_cast<uint64_t>(p.buffers(id).bytes()));
  };
  for (const plan::Instruction &ins : prog.instructions()) {
    for (int o = 1; o < ins.outputs_size(); ++o)
      if (ins.outputs(o) < nb)
        extraOutput[ins.outputs(o)] = true;
    if (!isCollective(ins.kind()))
      continue;
    for (uint32_t id : ins.inputs())
      if (id < nb && p.buffers(id).space() == plan::ARENA)
        commRanges.insert(range(id));
    for (uint32_t id : ins.outputs())
      if (id < nb && p.buffers(id).space() == plan::ARENA)
        commRanges.insert(range(id));
  }
  for (uint32_t id = 0; id < nb; ++id)
    comm[id] = p.buffers(id).space() == plan::ARENA &&
               commRanges.count(range(id)) > 0;
}

/// The largest tensors live at the peak (`active`: (offset, id) of the
/// live arena buffers), each range once, with the kernel and node that
/// wrote them.
void noteLargestAtPeak(const plan::Plan &p, const plan::Program &prog,
                       const std::set<std::pair<uint64_t, uint32_t>> &active,
                       const std::vector<int> &writer, Footprint &f) {
  std::vector<std::pair<uint64_t, uint32_t>> bySize;
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (const auto &[offset, id] : active)
    if (writer[id] >= 0 && seen.insert({offset, p.buffers(id).bytes()}).second)
      bySize.push_back({p.buffers(id).bytes(), id});
  std::sort(bySize.begin(), bySize.end(),
            [](auto &x, auto &y) { return x.first > y.first; });
  f.largestAtPeak.clear();
  for (size_t k = 0; k < bySize.size() && k < 5; ++k) {
    const plan::Instruction &w = prog.instructions(writer[bySize[k].second]);
    f.largestAtPeak.push_back({bySize[k].first, w.kernel(), w.location()});
  }
}

/// The arena at its fullest: live ranges of arena tensors, and the union
/// of their byte ranges at each instruction, by kind (saved activations,
/// collective buffers, workspace, other transients).
void addArenaPeak(const plan::Plan &p, const plan::Program &prog,
                  int boundary, Footprint &f) {
  const int n = prog.instructions_size();
  const size_t nb = p.buffers_size();
  LiveRanges live = liveRanges(p, prog);
  std::vector<bool> comm, extraOutput;
  bufferRoles(p, prog, comm, extraOutput);
  std::vector<std::vector<uint32_t>> starts(n), ends(n);
  for (uint32_t id = 0; id < nb; ++id)
    if (live.first[id] >= 0) {
      starts[live.first[id]].push_back(id);
      ends[live.last[id]].push_back(id);
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
    return boundary >= 0 && live.writer[id] >= 0 &&
           live.writer[id] < boundary && live.touched[id] >= boundary;
  };
  auto isComm = [&](uint32_t id) { return !saved(id) && comm[id]; };
  auto isWork = [&](uint32_t id) {
    return !saved(id) && !comm[id] && live.first[id] == live.last[id] &&
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
    uint64_t bytes = unionBytes([](uint32_t) { return true; });
    if (f.peakInstruction < 0 || bytes > f.liveAtPeak) {
      f.liveAtPeak = bytes;
      f.peakInstruction = i;
      const plan::Instruction &ins = prog.instructions(i);
      f.peakKernel = ins.kernel();
      f.peakNode = ins.location();
      f.savedAtPeak = kinds[0];
      f.commAtPeak = kinds[1];
      f.workspaceAtPeak = kinds[2];
      f.transientAtPeak = kinds[3];
      noteLargestAtPeak(p, prog, active, live.writer, f);
    }
    for (uint32_t id : ends[i])
      active.erase({p.buffers(id).offset(), id});
  }
}

/// Async collectives and the kernels between each start and its wait (the
/// wait's last input is the collective's output).
void addOverlap(const plan::Plan &p, const plan::Program &prog,
                Footprint &f) {
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    if (!ins.async() || ins.outputs_size() != 1)
      continue;
    ++f.asyncCollectives;
    f.asyncBytes += ins.kind() == plan::KIND_REDUCE_SCATTER &&
                            ins.inputs_size() == 1
                        ? bytesOf(p, ins.inputs(0))
                        : bytesOf(p, ins.outputs(0));
    for (int j = i + 1; j < prog.instructions_size(); ++j) {
      const plan::Instruction &w = prog.instructions(j);
      if (w.kind() == plan::KIND_WAIT && w.inputs_size() > 0 &&
          w.inputs(w.inputs_size() - 1) == ins.outputs(0)) {
        f.overlappedKernels += j - i - 1;
        break;
      }
    }
  }
}

} // namespace

Footprint footprint(const plan::Plan &p) {
  Footprint f;
  f.tensorParallel = std::max(1, static_cast<int>(p.tensor_parallel()));
  f.world = std::max(1, (p.world_size() == 0 ? 1 : static_cast<int>(p.world_size())) /
                            f.tensorParallel);
  f.stage = static_cast<int>(p.zero_stage());
  f.hpzPartitionSize = static_cast<int>(p.hpz_partition_size());
  f.arena = p.programs_size() ? p.programs(0).arena_bytes() : 0;
  addOptions(p, f);
  addStorage(p, f);
  f.tp.sequence = sequenceParallel(p);
  if (p.programs_size() == 0)
    return f;
  const plan::Program &prog = p.programs(0);
  f.hostArena = prog.host_arena_bytes();
  addTransfers(p, prog, f);
  addCollectivesAndOptimizer(p, prog, f);
  int boundary = backwardStart(prog);
  if (boundary >= 0)
    f.savedActivations = savedActivations(p, prog, boundary);
  addArenaPeak(p, prog, boundary, f);
  addOverlap(p, prog, f);
  // Stage 1 keeps whole gradients until it reduces them after the backward
  // pass: the reduce-scatters' inputs (padded, bucketed or not).
  if (f.stage == 1 && f.world > 1)
    f.grads = f.reduceScatterBytes;
  return f;
}

} // namespace ds
