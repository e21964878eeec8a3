//===- PlanTimeline.cpp - a plan's schedule under a cost model ------------===//
//
// Part of the ds project (no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/PlanTimeline.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/PlanFormat.h"

#include "plan.pb.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace ds {
namespace {

double numel(const plan::Buffer &b) {
  double n = 1;
  for (int64_t d : b.shape())
    n *= static_cast<double>(d);
  return n;
}

/// The collective of `ins` in the phase timed (null: none): of a
/// compressed optimizer's pair, the plain collective of the warm-up and
/// the compressed one after the freeze (docs/compression.md).
const plan::Collective *phaseCollective(const plan::Instruction &ins,
                                        bool warmup) {
  const plan::Collective *plain = nullptr, *compressed = nullptr;
  for (const plan::Collective &c : ins.collectives()) {
    const plan::Collective *&slot =
        isCompressedCollective(c.kind()) ? compressed : plain;
    if (!slot)
      slot = &c;
  }
  return compressed && !warmup ? compressed : plain ? plain : compressed;
}

/// The step as the cost model runs it: the compute stream's clock, the
/// communication stream's, and the offload engines' (copies, NVMe, the
/// host optimizer).
class TimelineBuilder {
public:
  TimelineBuilder(const plan::Plan &p, const CostModel &m, Timeline &t)
      : p(p), m(m), t(t) {
    runtimeOrder = m.cluster != nullptr;
    gpu = !m.cluster || m.cluster->gpu;
    tp = std::max<int>(1, static_cast<int>(p.tensor_parallel()));
    int world = p.world_size() == 0 ? 1 : static_cast<int>(p.world_size());
    dp = std::max(1, world / tp);
    if (m.cluster) {
      RankLayout layout;
      layout.dp = dp;
      layout.tp = tp;
      layout.stages = std::max<int>(1, static_cast<int>(p.pipeline().stages()));
      layout.devicesPerNode = m.cluster->devicesPerNode;
      for (int g = 0; g < 5; ++g)
        across[g] = layout.acrossNodes(static_cast<plan::Group>(g));
    }
    if (p.pipeline().backward_start() > 0) {
      backwardStart = static_cast<int>(p.pipeline().backward_start());
      updateStart = static_cast<int>(p.pipeline().update_start());
    }
    if (auto it = p.options().find(kLabelFractionOption);
        it != p.options().end()) {
      double f = std::strtod(it->second.c_str(), nullptr);
      if (f > 0 && f < 1)
        labelFraction = f;
    }
  }

  void add(int i, const plan::Instruction &ins);
  void finish();

private:
  bool addTransfer(const plan::Instruction &ins, TimelineEvent &e);
  void addHostKernel(const plan::Instruction &ins, TimelineEvent &e);
  void waitForTransfers(const plan::Instruction &ins);
  void addCollective(const plan::Instruction &ins, TimelineEvent &e,
                     const plan::Collective &c);
  double collectiveDuration(const plan::Collective &c) const;
  void addCodec(const plan::Instruction &ins, const TimelineEvent &e);
  void addKernel(TimelineEvent &e, double duration);
  void addExchange(const plan::Instruction &ins, const TimelineEvent &e,
                   const plan::Collective &c);
  void addWait(const plan::Instruction &ins);
  double clusterKernelSeconds(const plan::Instruction &ins,
                              const TimelineEvent &e) const;
  double kernelTime(const plan::Instruction &ins, const TimelineEvent &e) const;
  double inputsReady(const plan::Instruction &ins, double base) const;
  /// When the executing thread reaches the next instruction: on a GPU it
  /// runs ahead of the device and only host kernels hold it; on a CPU it
  /// is the device.
  double thread() const { return gpu ? issue : std::max(issue, compute); }
  void waitForThread();
  void chargeExecutor(int i);

  const plan::Plan &p;
  const CostModel &m;
  Timeline &t;
  int tp = 1, dp = 1;
  double labelFraction = 1; // kLabelFractionOption
  bool across[5] = {}; // by plan::Group: some group spans nodes
  double compute = 0, comm = 0;
  std::map<uint32_t, double> commEnds; // collective output -> when it ends
  // Offload: when each transfer's or host kernel's output is ready, and
  // the copy engine's, the NVMe queue's and the host's clocks.
  std::map<uint32_t, double> ready, copyTime; // copyTime: a transfer's own
  double copyClock = 0, nvmeClock = 0, host = 0;
  /// With a cluster, transfers and host kernels are timed as ds-run runs
  /// them (runtimeOrder; lib/Runtime/ExecutorAsync.cpp): host kernels on
  /// the executing thread, which issues everything after them once they
  /// end (`issue`); on a GPU (CUDA), host copies on one copy stream after
  /// the compute stream's work so far; on a CPU, host copies in line.
  bool runtimeOrder = false, gpu = true;
  double issue = 0;
  /// A pipeline stage's sections, each a run of its own (-1: none).
  int backwardStart = -1, updateStart = -1;
};

/// The CPU executor's own time before instruction `i`: its dispatch, and
/// at the first instruction of a run (the program, or a stage's forward,
/// backward and update sections) the run's. A GPU's thread issues ahead
/// of the device: not charged there.
void TimelineBuilder::chargeExecutor(int i) {
  if (!m.cluster || gpu)
    return;
  double s = m.cluster->dispatchOverhead;
  if (i == 0 || i == backwardStart || (updateStart > 0 && i == updateStart))
    s += m.cluster->runOverhead;
  if (s <= 0)
    return;
  compute += s;
  t.overheadSeconds += s;
}

/// A device instruction is launched only when the thread reaches it: the
/// device waits for the host kernels before it (offload wait).
void TimelineBuilder::waitForThread() {
  if (runtimeOrder && issue > compute) {
    t.offloadWaitSeconds += issue - compute;
    compute = issue;
  }
}

double TimelineBuilder::inputsReady(const plan::Instruction &ins,
                                    double base) const {
  for (uint32_t id : ins.inputs())
    if (auto it = ready.find(id); it != ready.end())
      base = std::max(base, it->second);
  return base;
}

/// A copy on its engine, issued in program order; false if `ins` is not a
/// well-formed transfer.
bool TimelineBuilder::addTransfer(const plan::Instruction &ins,
                                  TimelineEvent &e) {
  if (!isTransfer(ins.kind()) || ins.inputs_size() != 1 ||
      ins.outputs_size() != 1 ||
      ins.inputs(0) >= static_cast<uint32_t>(p.buffers_size()) ||
      ins.outputs(0) >= static_cast<uint32_t>(p.buffers_size()))
    return false;
  int from = bufferLocation(p, ins.inputs(0)),
      to = bufferLocation(p, ins.outputs(0));
  bool nvme = from == 2 || to == 2;
  double &clock = nvme ? nvmeClock : copyClock;
  double bytes = static_cast<double>(p.buffers(ins.inputs(0)).bytes());
  e.track = nvme ? 4 : 2;
  e.bytes = bytes;
  // Issued in program order: a device source is ready when the device
  // reaches the transfer.
  e.start = std::max(clock, inputsReady(ins, from == 0 ? compute : 0));
  // As ds-run issues it: when the thread reaches it (an NVMe request, a
  // CPU's copy), and a CUDA copy after the compute stream's work so far.
  if (runtimeOrder)
    e.start = std::max({e.start, thread(), nvme || !gpu ? 0.0 : compute});
  double rate = nvme ? m.nvmeBytesPerSecond : m.pcieBytesPerSecond;
  if (const ClusterSpec *c = m.cluster)
    rate = !nvme ? c->host.bandwidth
           : to == 2 ? c->nvme.writeBandwidth
                     : c->nvme.readBandwidth;
  e.duration = rate > 0 ? bytes / rate : 0;
  clock = e.start + e.duration;
  // The thread waits for the copies an NVMe request reads before it
  // issues it (CUDA: the event, on the host).
  if (runtimeOrder && nvme)
    issue = std::max(issue, inputsReady(ins, 0));
  // On a CPU a host copy is a memcpy in the instruction stream.
  if (runtimeOrder && !gpu && !nvme) {
    t.exposedTransferSeconds += clock - std::max(compute, issue);
    issue = clock;
  }
  ready[ins.outputs(0)] = clock;
  copyTime[ins.outputs(0)] = e.duration;
  t.transferSeconds += e.duration;
  t.events.push_back(e);
  return true;
}

void TimelineBuilder::addHostKernel(const plan::Instruction &ins,
                                    TimelineEvent &e) {
  e.flops = static_cast<double>(ins.flops());
  e.track = 3;
  e.start = std::max(host, inputsReady(ins, runtimeOrder ? thread() : 0));
  double rate =
      m.cluster ? m.cluster->host.optimizerBandwidth : m.hostBytesPerSecond;
  e.duration = rate > 0 ? e.bytes / rate : 0;
  host = e.start + e.duration;
  if (runtimeOrder) // the thread runs it, then issues what follows
    issue = host;
  for (uint32_t id : ins.outputs())
    ready[id] = host;
  t.hostSeconds += e.duration;
  // Not in t.flops: those are the device's (its MFU); the host optimizer's
  // work is on the host's clock.
  t.events.push_back(e);
}

/// A device kernel waits for the transfers it reads; of the wait, at most
/// the copy's own time is the copy's (the rest is what it waited for, such
/// as the host optimizer).
void TimelineBuilder::waitForTransfers(const plan::Instruction &ins) {
  double r = inputsReady(ins, compute);
  if (r <= compute)
    return;
  double own = 0;
  for (uint32_t id : ins.inputs())
    if (auto it = ready.find(id); it != ready.end() && it->second > compute)
      own = std::max(own, std::min(it->second - compute, copyTime[id]));
  t.exposedTransferSeconds += own;
  t.offloadWaitSeconds += r - compute;
  compute = r;
}

/// The time of collective `c`: ring bytes over its group's link (with a
/// cluster, alpha-beta on the link it crosses; a compressed exchange by
/// compressedCollectiveSeconds).
double TimelineBuilder::collectiveDuration(const plan::Collective &c) const {
  int ranks = groupRanks(c.group(), dp, tp,
                         static_cast<int>(p.hpz_partition_size()));
  double bytes = static_cast<double>(c.bytes());
  if (m.cluster) {
    int g = static_cast<int>(c.group());
    bool spans = g >= 0 && g < 5 && across[g];
    return isCompressedCollective(c.kind())
               ? compressedCollectiveSeconds(*m.cluster, c.kind(), ranks,
                                             bytes, spans)
               : collectiveSeconds(*m.cluster, linkKindOf(c.kind()), ranks,
                                   bytes, spans);
  }
  double ring = static_cast<double>(ranks - 1) / ranks;
  double moved =
      (c.kind() == plan::COLLECTIVE_ALL_REDUCE ? 2 : 1) * ring * bytes;
  return moved / m.linkBytesPerSecond;
}

/// The quantize and dequantize work of a compressed or quantized
/// collective (ZeRO++'s always, the 1-bit optimizers' after the freeze)
/// as a kernel on the compute stream before the exchange: its calibrated
/// figures (kernels.kinds) or the roofline of its FLOPs and bytes.
void TimelineBuilder::addCodec(const plan::Instruction &ins,
                               const TimelineEvent &e) {
  TimelineEvent k = e;
  k.kernel += ".codec";
  k.flops = static_cast<double>(ins.flops());
  addKernel(k, m.cluster ? kernelSeconds(*m.cluster, ins.kind(), k.flops,
                                         k.bytes, Precision::FP32)
                         : std::max(k.flops / m.flopsPerSecond,
                                    k.bytes / m.bytesPerSecond));
}

/// `e` on the compute stream for `duration` seconds.
void TimelineBuilder::addKernel(TimelineEvent &e, double duration) {
  e.track = 0;
  e.start = compute;
  e.duration = duration;
  compute += duration;
  t.computeSeconds += duration;
  t.flops += e.flops;
  t.events.push_back(e);
}

/// The exchange a compressed optimizer's kernel runs inside itself (the
/// warm-up's all-reduce, the compressed all-reduce after the freeze): on
/// the communication stream after the kernel's arithmetic, the compute
/// stream waiting for it.
void TimelineBuilder::addExchange(const plan::Instruction &ins,
                                  const TimelineEvent &e,
                                  const plan::Collective &c) {
  TimelineEvent x = e;
  x.kernel += ".exchange";
  x.flops = 0;
  x.bytes = static_cast<double>(c.bytes());
  x.track = 1;
  x.start = std::max(compute, comm);
  x.duration = collectiveDuration(c);
  comm = x.start + x.duration;
  t.commSeconds += x.duration;
  t.exposedCommSeconds += comm - compute;
  compute = comm;
  t.events.push_back(x);
}

/// A collective on the communication stream: ring bytes over its group's
/// link; the compute stream waits unless it is asynchronous.
void TimelineBuilder::addCollective(const plan::Instruction &ins,
                                    TimelineEvent &e,
                                    const plan::Collective &c) {
  bool quantized = ins.kind() == plan::KIND_QUANTIZED_ALL_GATHER ||
                   ins.kind() == plan::KIND_QUANTIZED_REDUCE_SCATTER;
  if (quantized || isCompressedCollective(c.kind()))
    addCodec(ins, e);
  e.track = 1;
  e.start = std::max(compute, comm);
  e.duration = collectiveDuration(c);
  comm = e.start + e.duration;
  t.commSeconds += e.duration;
  if (ins.async()) {
    for (uint32_t id : ins.outputs())
      commEnds[id] = comm;
  } else {
    t.exposedCommSeconds += comm - compute;
    compute = comm; // in place: the compute stream waits
  }
  t.events.push_back(e);
}

/// The wait of an asynchronous collective (its last input is the
/// collective's output).
void TimelineBuilder::addWait(const plan::Instruction &ins) {
  auto it = commEnds.find(ins.inputs(ins.inputs_size() - 1));
  if (it != commEnds.end() && it->second > compute) {
    t.exposedCommSeconds += it->second - compute;
    compute = it->second;
  }
}

/// A device kernel under the cluster: a GEMM at the rate of its operands'
/// type; a pipeline hand-over costs nothing here (the pipeline's
/// simulation charges it between stages).
double TimelineBuilder::clusterKernelSeconds(const plan::Instruction &ins,
                                             const TimelineEvent &e) const {
  if (kernelFamily(ins.kind()) == KernelFamily::Pipeline)
    return 0;
  Precision prec = Precision::FP32;
  if (ins.inputs_size() > 0 &&
      ins.inputs(0) < static_cast<uint32_t>(p.buffers_size())) {
    plan::DType d = p.buffers(ins.inputs(0)).dtype();
    prec = d == plan::BF16  ? Precision::BF16
           : d == plan::F16 ? Precision::FP16
                            : Precision::FP32;
  }
  return kernelSeconds(*m.cluster, ins.kind(), e.flops, e.bytes, prec);
}

/// A device kernel's seconds: the cluster's rules, else the roofline of
/// the model's rates. On a CPU the loss's gradient with labelFraction < 1
/// computes that fraction of its rows (its call's figure at that fraction
/// of its bytes and FLOPs) and zero-fills the others' gradient at the
/// memory bandwidth (lib/Runtime/Cpu/Grad.cpp, kLossGrad); the CUDA
/// kernel computes every row (a thread each), so a GPU pays them all.
double TimelineBuilder::kernelTime(const plan::Instruction &ins,
                                   const TimelineEvent &e) const {
  auto seconds = [&](const TimelineEvent &k) {
    return m.cluster ? clusterKernelSeconds(ins, k)
                     : std::max(k.flops / m.flopsPerSecond,
                                k.bytes / m.bytesPerSecond);
  };
  if (ins.kind() != plan::KIND_LOSS_GRAD || labelFraction >= 1 || gpu ||
      ins.outputs_size() < 1 ||
      ins.outputs(0) >= static_cast<uint32_t>(p.buffers_size()))
    return seconds(e);
  TimelineEvent counted = e;
  counted.flops *= labelFraction;
  counted.bytes *= labelFraction;
  double fill = (1 - labelFraction) *
                static_cast<double>(p.buffers(ins.outputs(0)).bytes());
  double bw = m.cluster ? m.cluster->memoryBandwidth : m.bytesPerSecond;
  return seconds(counted) + (bw > 0 ? fill / bw : 0);
}

void TimelineBuilder::add(int i, const plan::Instruction &ins) {
  TimelineEvent e;
  e.instruction = i;
  e.kernel = ins.kernel();
  e.node = ins.location();
  e.bytes = static_cast<double>(ins.bytes());
  chargeExecutor(i);
  if (addTransfer(ins, e))
    return;
  if (ins.on_host())
    return addHostKernel(ins, e);
  waitForThread();
  waitForTransfers(ins);
  const plan::Collective *c = phaseCollective(ins, m.warmup);
  bool shared = c && groupRanks(c->group(), dp, tp) > 1;
  // A compressed or quantized exchange may write more than its result
  // (error feedback, its records' workspace).
  if (isCollective(ins.kind()) && shared && ins.outputs_size() >= 1)
    return addCollective(ins, e, *c);
  if (ins.kind() == plan::KIND_WAIT && ins.inputs_size() > 0)
    return addWait(ins);
  e.flops = static_cast<double>(ins.flops());
  addKernel(e, kernelTime(ins, e));
  if (shared && isOptimizer(ins.kind())) // a compressed optimizer's own
    addExchange(ins, e, *c);
}

/// The step's end: offload work still running when the device is done
/// delays it.
void TimelineBuilder::finish() {
  t.stepSeconds = std::max(compute, comm);
  double copiesEnd = std::max(copyClock, nvmeClock);
  double computeEnd = std::max(t.stepSeconds, host);
  if (copiesEnd > computeEnd)
    t.exposedTransferSeconds += copiesEnd - computeEnd;
  double offloadEnd = std::max(copiesEnd, host);
  if (offloadEnd > t.stepSeconds) {
    t.offloadWaitSeconds += offloadEnd - t.stepSeconds;
    t.stepSeconds = offloadEnd;
  }
}

/// Tokens per rank: the elements of the first integer input that is not
/// the step or the loss scale, else its leading dimension (samples).
int64_t tokensOf(const plan::Plan &p) {
  for (const plan::Value &v : p.inputs()) {
    if (v.name() == kStepInput || v.name() == kLossScaleInput ||
        v.buffer() >= static_cast<uint32_t>(p.buffers_size()))
      continue;
    const plan::Buffer &b = p.buffers(v.buffer());
    bool integer = b.dtype() == plan::I64 || b.dtype() == plan::I32;
    return integer ? static_cast<int64_t>(numel(b))
                   : (b.shape_size() ? b.shape(0) : 1);
  }
  return 0;
}
} // namespace

uint64_t estimateFlops(const plan::Plan &p, const plan::Instruction &ins) {
  auto buf = [&](uint32_t id) -> const plan::Buffer * {
    return id < static_cast<uint32_t>(p.buffers_size()) ? &p.buffers(id)
                                                        : nullptr;
  };
  const KernelFacts *k = kernelFacts(ins.kind());
  if (!k)
    return 0;
  switch (k->flops) {
  case FlopRule::None:
    return 0;
  case FlopRule::MatMul: {
    if (ins.inputs_size() < 2 || ins.outputs_size() < 1)
      return 0;
    const plan::Buffer *a = buf(ins.inputs(0)), *c = buf(ins.outputs(0));
    if (!a || !c || a->shape_size() == 0)
      return 0;
    int r = a->shape_size();
    int kAxis = ins.trans_a() && r >= 2 ? r - 2 : r - 1;
    for (const plan::Attribute &attr : ins.attributes()) // --ds-fold-transpose
      if (attr.name() == "perm_a" && attr.ints().values_size() == r &&
          attr.ints().values(r - 1) >= 0 && attr.ints().values(r - 1) < r)
        kAxis = static_cast<int>(attr.ints().values(r - 1));
    double kdim = static_cast<double>(a->shape(kAxis));
    return static_cast<uint64_t>(k->flopFactor * numel(*c) * kdim);
  }
  case FlopRule::PerInput: {
    double in = 0;
    for (uint32_t id : ins.inputs())
      if (const plan::Buffer *b = buf(id))
        in = std::max(in, numel(*b));
    return static_cast<uint64_t>(k->flopFactor * in);
  }
  case FlopRule::PerOutput: {
    double out = 0;
    for (uint32_t id : ins.outputs())
      if (const plan::Buffer *b = buf(id))
        out += numel(*b);
    return static_cast<uint64_t>(k->flopFactor * out);
  }
  }
  return 0;
}

uint64_t operandBytes(const plan::Plan &p, const plan::Instruction &ins) {
  uint64_t bytes = 0;
  for (uint32_t id : ins.inputs())
    if (id < static_cast<uint32_t>(p.buffers_size()))
      bytes += p.buffers(id).bytes();
  for (uint32_t id : ins.outputs())
    if (id < static_cast<uint32_t>(p.buffers_size()))
      bytes += p.buffers(id).bytes();
  return bytes;
}

Timeline timeline(const plan::Plan &p, const CostModel &m) {
  Timeline t;
  if (p.programs_size() == 0)
    return t;
  t.tokens = tokensOf(p);
  TimelineBuilder builder(p, m, t);
  const plan::Program &prog = p.programs(0);
  for (int i = 0; i < prog.instructions_size(); ++i)
    builder.add(i, prog.instructions(i));
  builder.finish();
  return t;
}

namespace {
/// `v` as SVG (XML) text.
std::string xmlText(const std::string &v) {
  std::string out;
  for (char c : v) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    default:
      if (static_cast<unsigned char>(c) >= 0x20)
        out += c;
    }
  }
  return out;
}
} // namespace

std::string traceJson(const Timeline &t, int world) {
  std::ostringstream o;
  o.precision(12);
  o << "[\n";
  const char *tracks[] = {"compute", "communication", "copies"};
  bool firstEvent = true;
  auto sep = [&]() {
    o << (firstEvent ? "" : ",\n");
    firstEvent = false;
  };
  for (int r = 0; r < std::max(world, 1); ++r) {
    sep();
    o << R"({"ph": "M", "name": "process_name", "pid": )" << r
      << R"(, "args": {"name": "rank )" << r << R"("}})";
    for (int k = 0; k < 3; ++k) {
      sep();
      o << R"({"ph": "M", "name": "thread_name", "pid": )" << r
        << R"(, "tid": )" << k << R"(, "args": {"name": ")" << tracks[k]
        << R"("}})";
    }
    // Every rank runs the same plan: the same events on each (unless an
    // event names its rank).
    for (const TimelineEvent &e : t.events) {
      if (e.rank >= 0 && e.rank != r)
        continue;
      sep();
      o << R"({"ph": "X", "pid": )" << r << R"(, "tid": )" << e.track
        << R"(, "name": )" << jsonString(e.kernel) << R"(, "ts": )"
        << e.start * 1e6 << R"(, "dur": )" << e.duration * 1e6
        << R"(, "args": {"instruction": )" << e.instruction
        << R"(, "node": )" << jsonString(e.node) << R"(, "flops": )" << e.flops
        << R"(, "bytes": )" << e.bytes << "}}";
    }
  }
  o << "\n]\n";
  return o.str();
}

std::string memorySvg(const Footprint &f, uint64_t budget,
                      const std::string &title) {
  const double W = 1120, H = 440, left = 80, right = 300, top = 40, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  const size_t n = f.liveByKind.size();
  const double base =
      static_cast<double>(f.params + f.buffers + f.state);
  double ymax = base + static_cast<double>(f.arena);
  ymax = std::max(ymax, static_cast<double>(budget));
  ymax = std::max(ymax, 1.0) * 1.08;
  auto X = [&](double i) { return left + pw * (n ? i / n : 0); };
  auto Y = [&](double bytes) { return top + ph * (1 - bytes / ymax); };
  auto mib = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
    return std::string(buf);
  };
  std::ostringstream o;
  o.precision(6);
  o << R"(<svg xmlns="http://www.w3.org/2000/svg" width=")" << W
    << R"(" height=")" << H << R"(" font-family="sans-serif" font-size="12">)"
    << "\n";
  o << R"(<rect width="100%" height="100%" fill="white"/>)" << "\n";
  o << R"(<text x=")" << left << R"(" y="22" font-size="15">)" << xmlText(title)
    << "</text>\n";
  // Stacked areas, bottom up: persistent storage, saved activations, other
  // transients, workspace, collective buffers.
  const char *names[] = {"parameters, buffers, optimizer state",
                         "saved activations", "other transients",
                         "kernel workspace", "collective buffers"};
  const char *colors[] = {"#9e9e9e", "#1f77b4", "#ff7f0e", "#2ca02c",
                          "#d62728"};
  const int order[] = {0, 3, 2, 1}; // liveByKind: saved, comm, work, other
  std::vector<double> below(n, base), above(n);
  auto band = [&](int layer, auto height) {
    for (size_t i = 0; i < n; ++i)
      above[i] = below[i] + height(i);
    o << R"(<path fill=")" << colors[layer] << R"(" fill-opacity="0.85" d="M)";
    for (size_t i = 0; i < n; ++i)
      o << X(i) << "," << Y(above[i]) << " L" << X(i + 1) << ","
        << Y(above[i]) << " L";
    for (size_t i = n; i-- > 0;)
      o << X(i + 1) << "," << Y(below[i]) << " L" << X(i) << ","
        << Y(below[i]) << (i ? " L" : "");
    o << R"( Z"/>)" << "\n";
    below = above;
  };
  if (n) {
    std::vector<double> zero(n, 0);
    below = zero;
    band(0, [&](size_t) { return base; });
    for (int k = 0; k < 4; ++k) {
      int kind = order[k];
      band(kind == 0 ? 1 : kind == 3 ? 2 : kind == 2 ? 3 : 4, [&](size_t i) {
        return static_cast<double>(f.liveByKind[i][kind]);
      });
    }
  }
  // Axes and ticks.
  o << R"(<line x1=")" << left << R"(" y1=")" << top + ph << R"(" x2=")"
    << left + pw << R"(" y2=")" << top + ph << R"(" stroke="black"/>)" << "\n";
  o << R"(<line x1=")" << left << R"(" y1=")" << top << R"(" x2=")" << left
    << R"(" y2=")" << top + ph << R"(" stroke="black"/>)" << "\n";
  for (int k = 0; k <= 4; ++k) {
    double v = ymax / 1.08 * k / 4;
    o << R"(<text x=")" << left - 6 << R"(" y=")" << Y(v) + 4
      << R"(" text-anchor="end">)" << mib(v) << "</text>\n";
  }
  o << R"(<text x=")" << left + pw / 2 << R"(" y=")" << H - 12
    << R"(" text-anchor="middle">instruction (program order)</text>)" << "\n";
  if (f.backwardStart >= 0) {
    o << R"(<line x1=")" << X(f.backwardStart) << R"(" y1=")" << top
      << R"(" x2=")" << X(f.backwardStart) << R"(" y2=")" << top + ph
      << R"(" stroke="#555" stroke-dasharray="2,3"/>)" << "\n";
    o << R"(<text x=")" << X(f.backwardStart) + 3 << R"(" y=")" << top + ph - 6
      << R"(" fill="#555">backward</text>)" << "\n";
  }
  // Labels: the planned peak at the right end, the budget at the left.
  auto hline = [&](double v, const char *color, const std::string &label,
                   bool atLeft) {
    o << R"(<line x1=")" << left << R"(" y1=")" << Y(v) << R"(" x2=")"
      << left + pw << R"(" y2=")" << Y(v) << R"(" stroke=")" << color
      << R"(" stroke-width="1.5" stroke-dasharray="6,3"/>)" << "\n";
    o << R"(<text x=")" << (atLeft ? left + 4 : left + pw - 4) << R"(" y=")"
      << Y(v) - 4 << R"(" text-anchor=")" << (atLeft ? "start" : "end")
      << R"(" fill=")" << color << R"(">)" << xmlText(label) << "</text>\n";
  };
  hline(base + static_cast<double>(f.arena), "#333",
        "planned peak " + mib(base + static_cast<double>(f.arena)), false);
  if (budget)
    hline(static_cast<double>(budget), "#c00", "budget " + mib(budget), true);
  if (f.peakInstruction >= 0) {
    double py = base + static_cast<double>(f.liveAtPeak);
    o << R"(<circle cx=")" << X(f.peakInstruction + 0.5) << R"(" cy=")"
      << Y(py) << R"(" r="4" fill="black"/>)" << "\n";
    o << R"(<text x=")" << X(f.peakInstruction + 0.5) + 6 << R"(" y=")"
      << Y(py) - 6 << R"(">fullest: )" << mib(py) << " at "
      << xmlText(f.peakKernel) << "</text>\n";
  }
  // Legend.
  for (int k = 0; k < 5; ++k) {
    double y = top + 10 + 20 * k;
    o << R"(<rect x=")" << left + pw + 15 << R"(" y=")" << y - 9
      << R"(" width="12" height="12" fill=")" << colors[k] << R"("/>)";
    o << R"(<text x=")" << left + pw + 32 << R"(" y=")" << y + 1 << R"(">)"
      << names[k] << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

} // namespace ds
