//===- Plan.cpp - loading and checking plan.bin ---------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Nothing in a plan file is trusted: the header, the checksum and every
// cross-reference are checked before anything runs, so that a corrupt plan
// is one error line, never a crash.
//
//===----------------------------------------------------------------------===//

#include "PlanImpl.h"
#include "Cpu/Kernels.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/PlanFormat.h"


namespace ds::rt {

DType toDType(plan::DType t) { return static_cast<DType>(static_cast<int>(t)); }

static bool validDType(int t) { return t >= 1 && t <= 6; }

/// `n * d` when it stays below 2^56 (no tensor is that large); false
/// otherwise, so a crafted shape cannot overflow a size.
static bool mulSize(uint64_t &n, int64_t d) {
  constexpr uint64_t kLimit = uint64_t(1) << 56;
  if (d < 0)
    return false;
  if (d != 0 && n > kLimit / static_cast<uint64_t>(d))
    return false;
  n *= static_cast<uint64_t>(d);
  return true;
}

namespace {
bool fail(std::string &err, const std::string &m) {
  err = "inconsistent plan: " + m;
  return false;
}

/// Each parameter's dtype and shape (a shard: ceil of the whole over the
/// data-parallel ranks); `paramBytes` gets their sizes.
bool checkParameters(const plan::Plan &p, std::vector<uint64_t> &paramBytes,
                     std::string &err) {
  for (const plan::Parameter &param : p.parameters()) {
    if (!validDType(param.dtype()))
      return fail(err, "parameter '" + param.name() + "' has no valid dtype");
    uint64_t n = dtypeSize(toDType(param.dtype()));
    for (int64_t d : param.shape())
      if (!mulSize(n, d))
        return fail(err, "parameter '" + param.name() +
                    "' has a negative or too large dimension");
    if (param.sharded()) {
      // Shard size S = ceil(numel / N) of the whole tensor, N the ranks of
      // a data-parallel group (the world over the tensor-parallel size).
      uint64_t wholeN = 1;
      int64_t world = std::max<int64_t>(1, p.world_size()) /
                      std::max<int64_t>(1, p.tensor_parallel());
      world = std::max<int64_t>(1, world);
      for (int64_t d : param.full_shape())
        if (!mulSize(wholeN, d))
          return fail(err, "parameter '" + param.name() +
                      "' has an invalid whole shape");
      int64_t whole = static_cast<int64_t>(wholeN);
      if (param.shape_size() != 1 || param.shape(0) != (whole + world - 1) / world)
        return fail(err, "parameter '" + param.name() + "' is not a shard of " +
                    std::to_string(whole) + " elements over " +
                    std::to_string(world) + " ranks");
    }
    paramBytes.push_back(n);
  }
  // A master copy is f32 optimizer state of a parameter of the plan, of
  // that parameter's whole shape.
  for (const plan::Parameter &m : p.parameters()) {
    if (m.master_of().empty())
      continue;
    const plan::Parameter *of = nullptr;
    for (const plan::Parameter &q : p.parameters())
      if (q.name() == m.master_of() && !q.state())
        of = &q;
    auto whole = [](const plan::Parameter &q) {
      return q.sharded() ? std::vector<int64_t>(q.full_shape().begin(),
                                                q.full_shape().end())
                         : std::vector<int64_t>(q.shape().begin(),
                                                q.shape().end());
    };
    if (!m.state() || m.dtype() != plan::F32 || !of || whole(*of) != whole(m))
      return fail(err, "'" + m.name() + "' is not an f32 master copy of a "
                  "parameter of the plan ('" + m.master_of() + "')");
  }
  return true;
}

/// Each buffer lies inside its storage: the arena, a parameter, an input
/// or a constant.
bool checkBuffers(const plan::Plan &p, const std::vector<uint64_t> &paramBytes,
                  std::string &err) {
  const plan::Program &prog = p.programs(0);
  std::vector<uint64_t> constBytes(p.constants_size());
  for (int i = 0; i < p.constants_size(); ++i)
    constBytes[i] = p.constants(i).size();
  for (int i = 0; i < p.buffers_size(); ++i) {
    const plan::Buffer &b = p.buffers(i);
    std::string id = "buffer " + std::to_string(i);
    if (!validDType(b.dtype()))
      return fail(err, id + " has no valid dtype");
    uint64_t n = dtypeSize(toDType(b.dtype()));
    for (int64_t d : b.shape()) {
      if (!mulSize(n, d))
        return fail(err, id + " has an invalid dimension");
    }
    if (n != b.bytes())
      return fail(err, id + " holds " + std::to_string(b.bytes()) +
                  " bytes, its shape needs " + std::to_string(n));
    uint64_t limit = 0;
    switch (b.space()) {
    case plan::ARENA: limit = prog.arena_bytes(); break;
    case plan::HOST_ARENA: limit = prog.host_arena_bytes(); break;
    case plan::PARAM:
      if (b.slot() >= paramBytes.size())
        return fail(err, id + " names parameter " + std::to_string(b.slot()) +
                    " of " + std::to_string(paramBytes.size()));
      limit = paramBytes[b.slot()];
      break;
    case plan::INPUT: {
      if (static_cast<int>(b.slot()) >= p.inputs_size())
        return fail(err, id + " names input " + std::to_string(b.slot()) + " of " +
                    std::to_string(p.inputs_size()));
      // Bounded by the input's own buffer, whose size the executor checks
      // against the data it is given.
      uint32_t own = p.inputs(b.slot()).buffer();
      if (static_cast<int>(own) >= p.buffers_size() ||
          p.buffers(own).space() != plan::INPUT ||
          p.buffers(own).slot() != b.slot())
        return fail(err, "input " + std::to_string(b.slot()) +
                    " does not name an input buffer of its own");
      limit = p.buffers(own).bytes();
      break;
    }
    case plan::CONST:
      if (b.slot() >= constBytes.size())
        return fail(err, id + " names constant " + std::to_string(b.slot()) +
                    " of " + std::to_string(constBytes.size()));
      limit = constBytes[b.slot()];
      break;
    default:
      return fail(err, id + " has no valid memory space");
    }
    if (b.offset() > limit || b.bytes() > limit - b.offset())
      return fail(err, id + " [" + std::to_string(b.offset()) + ", " +
                  std::to_string(b.offset() + b.bytes()) +
                  ") lies outside its storage of " + std::to_string(limit) +
                  " bytes");
  }
  auto checkValue = [&](const plan::Value &v, const char *what) {
    if (static_cast<int>(v.buffer()) >= p.buffers_size())
      return fail(err, std::string(what) + " '" + v.name() + "' names buffer " +
                  std::to_string(v.buffer()) + " of " +
                  std::to_string(p.buffers_size()));
    return true;
  };
  for (const plan::Value &v : p.inputs())
    if (!checkValue(v, "input"))
      return false;
  for (const plan::Value &v : p.outputs())
    if (!checkValue(v, "output"))
      return false;
  return true;
}

/// Where buffer `id`'s bytes live for the memory-side check: 0 device,
/// 1 host, 2 NVMe, 3 both (inputs and constants: the runtime keeps both
/// copies).
int memorySide(const plan::Plan &p, uint32_t id) {
  const plan::Buffer &b = p.buffers(id);
  if (b.space() == plan::HOST_ARENA)
    return 1;
  if (b.space() == plan::PARAM)
    return static_cast<int>(p.parameters(b.slot()).location());
  if (b.space() == plan::ARENA)
    return 0;
  return 3;
}

std::string kindLabel(int kind) {
  return plan::Kind_IsValid(kind)
             ? plan::Kind_Name(static_cast<plan::Kind>(kind))
             : std::to_string(kind);
}

/// The kernel is known, its kind is its name's, its typed fields are
/// valid, and its operands exist and are writable where it writes.
bool checkKernel(const plan::Plan &p, const plan::Instruction &ins,
                 const std::string &id, std::string &err) {
  const KernelInfo *k = findKernel(ins.kernel());
  if (!k)
    return fail(err, id + ": unknown kernel '" + ins.kernel() + "'");
  if (ins.kind() != kindOf(ins.kernel()))
    return fail(err, id + ": kind " + kindLabel(ins.kind()) +
                         " is not the kernel's (" +
                         kindLabel(kindOf(ins.kernel())) + ")");
  if (!plan::Phase_IsValid(ins.phase()))
    return fail(err, id + ": no valid phase");
  for (const plan::Collective &c : ins.collectives())
    if (!plan::CollectiveKind_IsValid(c.kind()) ||
        !plan::Group_IsValid(c.group()))
      return fail(err, id + ": a collective of no valid kind or group");
  if (ins.inputs_size() < k->minIn || ins.inputs_size() > k->maxIn ||
      ins.outputs_size() < k->minOut || ins.outputs_size() > k->maxOut)
    return fail(err, id + ": wrong number of operands");
  for (uint32_t b : ins.inputs())
    if (static_cast<int>(b) >= p.buffers_size())
      return fail(err, id + ": input buffer " + std::to_string(b) + " of " +
                           std::to_string(p.buffers_size()));
  for (uint32_t b : ins.outputs()) {
    if (static_cast<int>(b) >= p.buffers_size())
      return fail(err, id + ": output buffer " + std::to_string(b) + " of " +
                           std::to_string(p.buffers_size()));
    plan::Space s = p.buffers(b).space();
    if (s != plan::ARENA && s != plan::HOST_ARENA &&
        !(s == plan::PARAM && p.updates_parameters()))
      return fail(err, id + " writes a buffer outside the arena");
  }
  return true;
}

/// Offload: host kernels touch host memory, device kernels device memory;
/// only a transfer crosses, and only a transfer touches NVMe.
bool checkMemorySides(const plan::Plan &p, const plan::Instruction &ins,
                      const std::string &id, std::string &err) {
  bool transfer = isTransfer(ins.kind());
  std::vector<uint32_t> all(ins.inputs().begin(), ins.inputs().end());
  all.insert(all.end(), ins.outputs().begin(), ins.outputs().end());
  for (uint32_t b : all) {
    int w = memorySide(p, b);
    if (w == 3 || transfer)
      continue;
    if (w == 2)
      return fail(err, id + " reads or writes NVMe storage directly (only a "
                            "transfer may)");
    if (w != (ins.on_host() ? 1 : 0))
      return fail(err, id + std::string(" runs on the ") +
                           (ins.on_host() ? "host" : "device") +
                           " but touches buffer " + std::to_string(b) +
                           " in " + (w == 1 ? "host" : "device") + " memory");
  }
  if (!transfer)
    return true;
  if (ins.inputs_size() != 1 || ins.outputs_size() != 1)
    return fail(err, id + ": a transfer has one input and one output");
  const plan::Buffer &from = p.buffers(ins.inputs(0));
  const plan::Buffer &to = p.buffers(ins.outputs(0));
  if (from.bytes() != to.bytes() || from.dtype() != to.dtype())
    return fail(err, id + ": a transfer keeps its bytes and type");
  int wf = memorySide(p, ins.inputs(0)), wt = memorySide(p, ins.outputs(0));
  if ((wf == 2 || wt == 2) && (wf != 1 && wt != 1))
    return fail(err, id + ": NVMe is read into and written from host memory "
                          "only");
  if ((wf == 2 || wt == 2) &&
      ((wf == 2 && from.offset() != 0) || (wt == 2 && to.offset() != 0)))
    return fail(err, id + ": an NVMe transfer moves a whole slot");
  return true;
}

bool checkInstructions(const plan::Plan &p, std::string &err) {
  const plan::Program &prog = p.programs(0);
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    std::string id =
        "instruction " + std::to_string(i) + " (" + ins.kernel() + ")";
    if (!checkKernel(p, ins, id, err) || !checkMemorySides(p, ins, id, err))
      return false;
  }
  // The eval section: the same checks, and its arena within the step's.
  for (int i = 0; i < p.eval().instructions_size(); ++i) {
    const plan::Instruction &ins = p.eval().instructions(i);
    std::string id =
        "eval instruction " + std::to_string(i) + " (" + ins.kernel() + ")";
    if (!checkKernel(p, ins, id, err) || !checkMemorySides(p, ins, id, err))
      return false;
  }
  if (p.eval().arena_bytes() > prog.arena_bytes() ||
      p.eval().host_arena_bytes() > prog.host_arena_bytes())
    return fail(err, "the eval section's arena exceeds the step's");
  return true;
}

/// The world is whole tensor-parallel groups, and each split parameter's
/// slices fit it.
bool checkTensorParallel(const plan::Plan &p, std::string &err) {
  uint32_t tp = std::max<uint32_t>(1, p.tensor_parallel());
  if ((p.world_size() ? p.world_size() : 1) % tp)
    return fail(err, "world size " + std::to_string(p.world_size()) +
                " is not a multiple of the tensor-parallel size " +
                std::to_string(tp));
  for (const plan::Parameter &param : p.parameters()) {
    if (param.tp_parts() <= 1)
      continue;
    bool bad = param.tp_parts() != tp || param.tp_axis() < 0 ||
               param.tp_axis() >= (param.sharded() ? param.full_shape_size()
                                                   : param.shape_size());
    if (!bad) {
      int64_t slice = param.sharded() ? param.full_shape(param.tp_axis())
                                      : param.shape(param.tp_axis());
      bad = slice % std::max<uint32_t>(1, param.tp_blocks()) != 0;
      // Padded slices: one block, and the slice is ceil(whole / parts).
      if (param.tp_whole() != 0)
        bad = bad || param.tp_blocks() > 1 || param.tp_whole() < 0 ||
              (param.tp_whole() + tp - 1) / tp != slice;
    }
    if (bad)
      return fail(err, "parameter '" + param.name() + "' has an invalid "
                  "tensor-parallel split");
  }
  return true;
}

/// Parameters' locations, and the NVMe options when some are there.
bool checkNvme(const plan::Plan &p, std::string &err) {
  bool nvme = false;
  for (const plan::Parameter &param : p.parameters()) {
    if (!plan::Location_IsValid(param.location()))
      return fail(err, "parameter '" + param.name() + "' has no valid location");
    nvme |= param.location() == plan::NVME;
  }
  if (nvme && (p.nvme().path().empty() || p.nvme().block_size() < 4096 ||
               p.nvme().block_size() % 4096 || p.nvme().queue_depth() < 1 ||
               p.nvme().queue_depth() > 1024 || p.nvme().threads() > 64))
    return fail(err, "storage is on NVMe but the plan's NVMe options are "
                "missing or invalid");
  return true;
}
} // namespace

static bool checkPlan(const plan::Plan &p, std::string &err) {
  if (p.programs_size() != 1)
    return fail(err, std::to_string(p.programs_size()) +
                         " programs, this runtime runs exactly one");
  std::vector<uint64_t> paramBytes;
  return checkParameters(p, paramBytes, err) &&
         checkBuffers(p, paramBytes, err) && checkInstructions(p, err) &&
         checkTensorParallel(p, err) && checkNvme(p, err);
}

std::shared_ptr<const Plan> loadPlan(const std::string &path, std::string &err) {
  std::string bytes;
  if (!readFile(path, bytes)) {
    err = "cannot open plan '" + path + "'";
    return nullptr;
  }
  return loadPlanBytes(bytes, path, err);
}

std::shared_ptr<const Plan> loadPlanBytes(const std::string &bytes,
                                          const std::string &path,
                                          std::string &err) {
  if (bytes.size() < kPlanHeaderBytes) {
    err = "'" + path + "' is not a ds plan (" + std::to_string(bytes.size()) +
          " bytes, shorter than the header)";
    return nullptr;
  }
  PlanHeader h;
  if (!decodePlanHeader(reinterpret_cast<const unsigned char *>(bytes.data()), h)) {
    err = "'" + path + "' is not a ds plan (bad magic)";
    return nullptr;
  }
  if (h.version != kPlanFormatVersion) {
    err = "'" + path + "' has plan format version " + std::to_string(h.version) +
          "; this ds-run reads version " + std::to_string(kPlanFormatVersion) +
          " (recompile the model with this ds-opt)";
    return nullptr;
  }
  uint64_t have = bytes.size() - kPlanHeaderBytes;
  if (h.payloadBytes != have) {
    err = "'" + path + "' is truncated or padded: the header says " +
          std::to_string(h.payloadBytes) + " payload bytes, the file has " +
          std::to_string(have);
    return nullptr;
  }
  if (fnv1a64(bytes.data() + kPlanHeaderBytes, have) != h.checksum) {
    err = "'" + path + "' is corrupt: checksum mismatch";
    return nullptr;
  }
  auto plan = std::make_shared<Plan>();
  if (!plan->proto.ParseFromArray(bytes.data() + kPlanHeaderBytes,
                                  static_cast<int>(have))) {
    err = "'" + path + "' is corrupt: the payload does not parse";
    return nullptr;
  }
  if (plan->proto.format_version() != kPlanFormatVersion) {
    err = "'" + path + "' is corrupt: payload version " +
          std::to_string(plan->proto.format_version()) +
          " differs from the header's";
    return nullptr;
  }
  if (const plan::Pipeline &pl = plan->proto.pipeline();
      pl.stage_plans_size() > 0) {
    // A pipeline: every stage's plan is checked; the container has none.
    if (plan->proto.programs_size() != 0 || pl.stages() < 2 ||
        static_cast<uint32_t>(pl.stage_plans_size()) !=
            pl.stages() * std::max<uint32_t>(1, pl.virtual_stages()) ||
        pl.micro_batches() < 1 || plan->proto.world_size() % pl.stages()) {
      err = "'" + path + "' is corrupt: a pipeline of " +
            std::to_string(pl.stages()) + " stages holds " +
            std::to_string(pl.stage_plans_size()) + " stage plans";
      return nullptr;
    }
    for (int s = 0; s < pl.stage_plans_size(); ++s) {
      const plan::Plan &sp = pl.stage_plans(s);
      if (!checkPlan(sp, err)) {
        err = "'" + path + "', stage " + std::to_string(s) + ": " + err;
        return nullptr;
      }
      uint32_t split = sp.pipeline().backward_start();
      uint32_t update = sp.pipeline().update_start();
      if (sp.pipeline().stage() != static_cast<uint32_t>(s) || split == 0 ||
          static_cast<int>(split) >= sp.programs(0).instructions_size() ||
          (update != 0 &&
           (update <= split ||
            static_cast<int>(update) >= sp.programs(0).instructions_size()))) {
        err = "'" + path + "' is corrupt: stage " + std::to_string(s) +
              "'s plan names stage " + std::to_string(sp.pipeline().stage()) +
              " or has no backward section";
        return nullptr;
      }
    }
  } else if (!checkPlan(plan->proto, err)) {
    err = "'" + path + "': " + err;
    return nullptr;
  }
  plan->path = path;
  plan->checksum = h.checksum;
  size_t slash = path.find_last_of('/');
  plan->dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (plan->dir.empty())
    plan->dir = "/";
  return plan;
}

Footprint footprintOf(const Plan &plan) {
  // A pipeline container: its first stage's figures.
  if (plan.proto.programs_size() == 0 &&
      plan.proto.pipeline().stage_plans_size() > 0)
    return footprint(plan.proto.pipeline().stage_plans(0));
  return footprint(plan.proto);
}

int pipelineStages(const Plan &plan) {
  return plan.proto.pipeline().stage_plans_size() > 0
             ? static_cast<int>(plan.proto.pipeline().stages())
             : 1;
}

std::string pipelineScheduleName(const Plan &plan) {
  return plan.proto.pipeline().schedule();
}

int pipelineMicroBatches(const Plan &plan) {
  return static_cast<int>(plan.proto.pipeline().micro_batches());
}

int pipelineVirtualStages(const Plan &plan) {
  return std::max<int>(1, static_cast<int>(plan.proto.pipeline().virtual_stages()));
}

uint64_t pipelineStashBytes(const Plan &plan) {
  return plan.proto.pipeline().stash_bytes();
}

std::shared_ptr<const Plan> stagePlan(const Plan &plan, int stage,
                                      std::string &err) {
  const plan::Pipeline &pl = plan.proto.pipeline();
  if (stage < 0 || stage >= pl.stage_plans_size()) {
    err = "'" + plan.path + "' has no stage " + std::to_string(stage);
    return nullptr;
  }
  auto out = std::make_shared<Plan>();
  out->proto = pl.stage_plans(stage);
  out->path = plan.path;
  out->dir = plan.dir;
  // A checkpoint of one stage names its own plan.
  out->checksum = plan.checksum ^ (0x9e3779b97f4a7c15ULL * (stage + 1));
  return out;
}

/// The bound of the indices `ins` reads as its second input (the gathered
/// dimension or the class count; -1: none). A vocabulary split over the
/// `tp` tensor-parallel ranks: each holds 1/tp of the rows (or classes),
/// or the true size when the slices are padded.
static int64_t indexLimit(const plan::Plan &p, const plan::Instruction &ins,
                          int64_t tp) {
  if (ins.inputs_size() < 2)
    return -1;
  const plan::Buffer &data = p.buffers(ins.inputs(0));
  switch (ins.kind()) {
  case plan::KIND_GATHER:
    if (ins.inputs_size() != 2 || ins.axis() < 0 ||
        ins.axis() >= data.shape_size())
      return -1;
    return data.shape(ins.axis());
  case plan::KIND_SOFTMAX_CROSS_ENTROPY_LOSS:
  case plan::KIND_NLL_LOSS:
    return data.shape_size() >= 2 ? data.shape(1) : -1;
  case plan::KIND_VOCAB_GATHER:
    if (ins.inputs_size() != 2)
      return -1;
    if (ins.vocab())
      return ins.vocab();
    return data.shape_size() >= 1 ? data.shape(0) * tp : -1;
  case plan::KIND_VOCAB_CROSS_ENTROPY:
    if (ins.inputs_size() != 2)
      return -1;
    if (ins.vocab())
      return ins.vocab();
    return data.shape_size() == 2 ? data.shape(1) * tp : -1;
  default:
    return -1;
  }
}

/// The optimizer's name and settings, from its kernel.
static void addOptimizer(const plan::Instruction &ins, PlanInfo &info) {
  const plan::Optimizer &o = ins.optimizer();
  info.optimizer = optimizerKernelName(ins.kind());
  if (o.has_lr())
    info.lr = o.lr();
  if (o.decoupled())
    info.optimizer = "adamw";
  if (o.lamb())
    info.optimizer = "lamb";
  if (o.has_schedule())
    info.schedule = o.schedule();
  if (o.has_warmup_steps())
    info.warmupSteps = o.warmup_steps();
  if (o.has_total_steps())
    info.totalSteps = o.total_steps();
  if (o.has_min_lr())
    info.minLr = o.min_lr();
  if (o.has_accum_steps())
    info.accumSteps = o.accum_steps();
}

PlanInfo describe(const Plan &plan) {
  if (plan.proto.programs_size() == 0 &&
      plan.proto.pipeline().stage_plans_size() > 0) {
    // A pipeline container: its first stage, on the whole world.
    Plan first;
    first.proto = plan.proto.pipeline().stage_plans(0);
    first.path = plan.path;
    first.dir = plan.dir;
    first.checksum = plan.checksum;
    PlanInfo info = describe(first);
    info.worldSize = static_cast<int>(plan.proto.world_size());
    return info;
  }
  const plan::Plan &p = plan.proto;
  PlanInfo info;
  info.arenaBytes = p.programs(0).arena_bytes();
  info.instructions = p.programs(0).instructions_size();
  info.buffers = p.buffers_size();
  info.parameters = p.parameters_size();
  info.loss = p.loss();
  info.updatesParameters = p.updates_parameters();
  info.planHash = plan.checksum;
  info.options.insert(p.options().begin(), p.options().end());
  for (const plan::Value &v : p.inputs())
    info.lossScaling |= v.name() == kLossScaleInput;
  info.zeroStage = static_cast<int>(p.zero_stage());
  info.worldSize = p.world_size() == 0 ? 1 : static_cast<int>(p.world_size());
  info.tensorParallel =
      p.tensor_parallel() == 0 ? 1 : static_cast<int>(p.tensor_parallel());
  info.weightsPath = p.weights().path();
  info.shapesOnly = p.weights().shapes_only();
  if (!info.weightsPath.empty())
    info.weightsFile = plan.dir + "/" + info.weightsPath;
  auto spec = [&](const plan::Value &v) {
    HostTensor t;
    const plan::Buffer &b = p.buffers(v.buffer());
    t.dtype = toDType(b.dtype());
    t.shape.assign(b.shape().begin(), b.shape().end());
    return std::make_pair(v.name(), t);
  };
  for (const plan::Value &v : p.inputs()) {
    info.inputs.push_back(spec(v));
    if (v.batch_axis() != 0)
      info.batchAxes[v.name()] = static_cast<int>(v.batch_axis());
  }
  // Inputs read as indices: the gathered dimension or the class count.
  for (const plan::Instruction &ins : p.programs(0).instructions()) {
    int64_t limit = indexLimit(p, ins, std::max(1, info.tensorParallel));
    if (limit <= 0 || ins.inputs_size() < 2)
      continue;
    const plan::Buffer &indices = p.buffers(ins.inputs(1));
    if (indices.space() != plan::INPUT)
      continue;
    const std::string &name = p.inputs(indices.slot()).name();
    auto it = info.indexLimits.find(name);
    info.indexLimits[name] =
        it == info.indexLimits.end() ? limit : std::min(it->second, limit);
  }
  for (const plan::Instruction &ins : p.programs(0).instructions())
    if (isOptimizer(ins.kind())) {
      addOptimizer(ins, info);
      break;
    }
  for (const plan::Value &v : p.outputs())
    info.outputs.push_back(spec(v));
  return info;
}

} // namespace ds::rt
