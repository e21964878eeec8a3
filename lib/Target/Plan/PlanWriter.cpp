//===- PlanWriter.cpp - dsrt module to plan.bin ---------------------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Target/Plan/PlanWriter.h"
#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Support/PlanFootprint.h"
#include "ds/Support/PlanTimeline.h"
#include "ds/Support/PipelineSchedule.h"
#include "ds/Support/PlanFormat.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "plan.pb.h"

using namespace mlir;
using namespace mlir::ds;
namespace pb = ::ds::plan;

namespace {

FailureOr<pb::DType> dtypeOf(Type t) {
  if (t.isF32()) return pb::F32;
  if (t.isF16()) return pb::F16;
  if (t.isBF16()) return pb::BF16;
  if (t.isInteger(64)) return pb::I64;
  if (t.isInteger(32)) return pb::I32;
  if (t.isInteger(1)) return pb::BOOL;
  return failure();
}

/// Row-major little-endian bytes of a constant (i1 one byte each).
std::string constantBytes(ElementsAttr value) {
  auto dense = cast<DenseElementsAttr>(value);
  Type elt = dense.getElementType();
  std::string out;
  if (elt.isInteger(1)) {
    for (bool b : dense.getValues<bool>())
      out.push_back(b ? 1 : 0);
    return out;
  }
  int64_t width = elt.getIntOrFloatBitWidth() / 8;
  if (!dense.isSplat()) {
    ArrayRef<char> raw = dense.getRawData();
    return std::string(raw.data(), raw.size());
  }
  ArrayRef<char> one = dense.getRawData();
  for (int64_t i = 0; i < dense.getNumElements(); ++i)
    out.append(one.data(), width);
  return out;
}

/// `target` relative to the folder `fromDir` (both made absolute).
std::string relativePath(StringRef target, StringRef fromDir) {
  SmallString<256> t(target), d(fromDir);
  llvm::sys::fs::make_absolute(t);
  llvm::sys::fs::make_absolute(d);
  llvm::sys::path::remove_dots(t, true);
  llvm::sys::path::remove_dots(d, true);
  SmallVector<StringRef> tp(llvm::sys::path::begin(t),
                            llvm::sys::path::end(t));
  SmallVector<StringRef> dp(llvm::sys::path::begin(d),
                            llvm::sys::path::end(d));
  size_t common = 0;
  while (common < tp.size() && common < dp.size() && tp[common] == dp[common])
    ++common;
  SmallString<256> rel;
  for (size_t i = common; i < dp.size(); ++i)
    llvm::sys::path::append(rel, "..");
  for (size_t i = common; i < tp.size(); ++i)
    llvm::sys::path::append(rel, tp[i]);
  return rel.empty() ? "." : rel.str().str();
}

LogicalResult addAttribute(pb::Instruction &ins, NamedAttribute attr,
                           Operation *op) {
  pb::Attribute *a = ins.add_attributes();
  a->set_name(attr.getName().str());
  Attribute v = attr.getValue();
  if (auto b = dyn_cast<BoolAttr>(v))
    a->set_i(b.getValue());
  else if (auto i = dyn_cast<IntegerAttr>(v))
    a->set_i(i.getValue().getSExtValue());
  else if (auto f = dyn_cast<FloatAttr>(v))
    a->set_f(f.getValueAsDouble());
  else if (auto s = dyn_cast<StringAttr>(v))
    a->set_s(s.str());
  else if (auto arr = dyn_cast<DenseI64ArrayAttr>(v))
    for (int64_t x : arr.asArrayRef())
      a->mutable_ints()->add_values(x);
  else
    return op->emitOpError("attribute '")
           << attr.getName() << "' of unsupported kind " << v;
  return success();
}

/// Writes `text` to `path` through a temporary file and a rename.
LogicalResult writeText(ModuleOp module, const std::string &path,
                        const std::string &text) {
  std::string tmp = path + ".tmp";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return module.emitError("cannot write '") << path << "': "
                                                << ec.message();
    os << text;
    os.close();
    if (os.has_error()) {
      llvm::sys::fs::remove(tmp);
      return module.emitError("cannot write '") << path << "'";
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return module.emitError("cannot write '") << path << "': " << ec.message();
  }
  return success();
}

/// The cost model's estimate, trace and memory plot of a finished plan.
LogicalResult writeViews(ModuleOp module, const pb::Plan &p,
                         const PlanWriteOptions &options) {
  const PlanWriteOptions::Views &v = options.views;
  if (!v.costReport && !v.costJson && v.tracePath.empty() &&
      v.memoryPlotPath.empty())
    return success();
  ::ds::CostModel model;
  model.flopsPerSecond = v.flopsPerSecond;
  model.bytesPerSecond = v.bytesPerSecond;
  model.linkBytesPerSecond = v.linkBytesPerSecond;
  model.pcieBytesPerSecond = v.pcieBytesPerSecond;
  model.nvmeBytesPerSecond = v.nvmeBytesPerSecond;
  ::ds::Timeline tl = ::ds::timeline(p, model);
  ::ds::Footprint fp = ::ds::footprint(p);
  if (v.costReport) {
    double bound = 6.0 * static_cast<double>(fp.psi) *
                   static_cast<double>(tl.tokens);
    llvm::raw_string_ostream os(*v.costReport);
    os << "cost model (" << llvm::format("%.3g", model.flopsPerSecond)
       << " FLOP/s, " << llvm::format("%.3g", model.bytesPerSecond)
       << " B/s memory, " << llvm::format("%.3g", model.linkBytesPerSecond)
       << " B/s link): step " << llvm::format("%.3f", tl.stepSeconds * 1e3)
       << " ms (kernels " << llvm::format("%.3f", tl.computeSeconds * 1e3)
       << " ms, collectives " << llvm::format("%.3f", tl.commSeconds * 1e3)
       << " ms of which " << llvm::format("%.3f", tl.exposedCommSeconds * 1e3)
       << " ms exposed)\n  FLOPs per rank and step "
       << llvm::format("%.4g", tl.flops) << "; 6·Ψ·tokens = 6 x " << fp.psi
       << " x " << tl.tokens << " = " << llvm::format("%.4g", bound);
    if (bound > 0)
      os << " (ratio " << llvm::format("%.3f", tl.flops / bound)
         << "; the bound omits attention and counts every parameter once)";
    os << "\n";
    if (tl.transferSeconds > 0 || tl.hostSeconds > 0) {
      double hidden = std::max(0.0, tl.transferSeconds - tl.exposedTransferSeconds);
      os << "  offload transfers " << llvm::format("%.3f", tl.transferSeconds * 1e3)
         << " ms at " << llvm::format("%.3g", model.pcieBytesPerSecond)
         << " B/s PCIe, " << llvm::format("%.3g", model.nvmeBytesPerSecond)
         << " B/s NVMe: " << llvm::format("%.3f", hidden * 1e3)
         << " ms hidden behind compute ("
         << llvm::format("%.0f", tl.transferSeconds > 0
                                     ? 100.0 * hidden / tl.transferSeconds
                                     : 100.0)
         << "%), " << llvm::format("%.3f", tl.exposedTransferSeconds * 1e3)
         << " ms exposed; host optimizer "
         << llvm::format("%.3f", tl.hostSeconds * 1e3) << " ms at "
         << llvm::format("%.3g", model.hostBytesPerSecond)
         << " B/s; the device waits " << llvm::format("%.3f", tl.offloadWaitSeconds * 1e3)
         << " ms on offload in all\n";
    }
  }
  if (v.costJson) {
    double bound = 6.0 * static_cast<double>(fp.psi) *
                   static_cast<double>(tl.tokens);
    llvm::raw_string_ostream os(*v.costJson);
    os << "{\"flops_per_second\": " << model.flopsPerSecond
       << ", \"bytes_per_second\": " << model.bytesPerSecond
       << ", \"link_bytes_per_second\": " << model.linkBytesPerSecond
       << ", \"step_seconds\": " << tl.stepSeconds
       << ", \"kernel_seconds\": " << tl.computeSeconds
       << ", \"collective_seconds\": " << tl.commSeconds
       << ", \"exposed_collective_seconds\": " << tl.exposedCommSeconds
       << ", \"transfer_seconds\": " << tl.transferSeconds
       << ", \"exposed_transfer_seconds\": " << tl.exposedTransferSeconds
       << ", \"host_seconds\": " << tl.hostSeconds
       << ", \"offload_wait_seconds\": " << tl.offloadWaitSeconds
       << ", \"flops\": " << tl.flops << ", \"tokens\": " << tl.tokens
       << ", \"flops_bound_6_psi_tokens\": " << bound
       << ", \"flops_ratio\": " << (bound > 0 ? tl.flops / bound : 0) << "}";
  }
  if (!v.tracePath.empty() &&
      failed(writeText(module, v.tracePath, ::ds::traceJson(tl, fp.world))))
    return failure();
  if (!v.memoryPlotPath.empty() &&
      failed(writeText(module, v.memoryPlotPath,
                       ::ds::memorySvg(fp, v.budget, v.plotTitle))))
    return failure();
  return success();
}
} // namespace

namespace {
/// One program's plan: @forward of `module`, lowered and memory-planned.
LogicalResult buildPlan(ModuleOp module, const PlanWriteOptions &options,
                        int64_t worldSize, pb::Plan &p) {
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func || func.getNumArguments() != 0)
    return module.emitError("writing a plan needs @forward lowered to dsrt");
  auto arena = func->getAttrOfType<IntegerAttr>(dsrt::kArenaBytes);
  if (!arena)
    return func.emitError("the memory plan is missing (run "
                          "--dsrt-plan-memory)");

  p.set_format_version(::ds::kPlanFormatVersion);
  p.set_producer("ds-opt");
  p.set_world_size(static_cast<uint32_t>(worldSize));
  if (auto tp = func->getAttrOfType<IntegerAttr>("ds.tensor_parallel"))
    p.set_tensor_parallel(static_cast<uint32_t>(tp.getInt()));
  if (auto stage = func->getAttrOfType<IntegerAttr>("ds.zero_stage"))
    p.set_zero_stage(static_cast<uint32_t>(stage.getInt()));
  if (auto loss = func->getAttrOfType<StringAttr>("dsrt.loss"))
    p.set_loss(loss.str());
  pb::Program *prog = p.add_programs();
  prog->set_name("forward");
  prog->set_arena_bytes(arena.getInt());
  if (auto host = func->getAttrOfType<IntegerAttr>("dsrt.host_arena_bytes"))
    prog->set_host_arena_bytes(host.getInt());

  llvm::DenseMap<Value, uint32_t> ids;
  auto addBuffer = [&](Value v, pb::Space space, uint64_t offset,
                       uint32_t slot) -> LogicalResult {
    auto type = cast<MemRefType>(v.getType());
    FailureOr<pb::DType> dt = dtypeOf(type.getElementType());
    if (failed(dt))
      return v.getDefiningOp()->emitOpError("unsupported element type");
    pb::Buffer *b = p.add_buffers();
    b->set_space(space);
    b->set_offset(offset);
    b->set_bytes(dsrt::bufferBytes(type));
    b->set_dtype(*dt);
    for (int64_t d : type.getShape())
      b->add_shape(d);
    b->set_slot(slot);
    ids[v] = p.buffers_size() - 1;
    return success();
  };

  std::map<int64_t, pb::Parameter> params;
  for (Operation &op : func.getBody().front()) {
    Location loc = op.getLoc();
    std::string where;
    if (auto name = dyn_cast<NameLoc>(loc))
      where = name.getName().str();
    if (auto a = dyn_cast<dsrt::AllocOp>(op)) {
      if (!a.getOffset())
        return a.emitOpError("has no offset (run --dsrt-plan-memory)");
      if (failed(addBuffer(a, a->hasAttr("dsrt.host") ? pb::HOST_ARENA
                                                       : pb::ARENA,
                           *a.getOffset(), 0)))
        return failure();
    } else if (auto pr = dyn_cast<dsrt::ParamOp>(op)) {
      if (failed(addBuffer(pr, pb::PARAM, 0, pr.getIndex())))
        return failure();
      pb::Parameter param;
      param.set_name(pr.getName().str());
      auto type = cast<MemRefType>(pr.getType());
      param.set_dtype(*dtypeOf(type.getElementType()));
      for (int64_t d : type.getShape())
        param.add_shape(d);
      param.set_trainable(pr.getTrainable());
      param.set_state(pr.getState());
      if (auto full = pr.getFullShapeAttr()) {
        param.set_sharded(true);
        for (int64_t d : full.asArrayRef())
          param.add_full_shape(d);
      }
      if (auto master = pr.getMasterOfAttr())
        param.set_master_of(master.getValue().str());
      if (auto space = pr->getAttrOfType<StringAttr>("dsrt.space"))
        param.set_location(space.getValue() == "nvme" ? pb::NVME : pb::HOST);
      if (auto tp = pr->getAttrOfType<DenseI64ArrayAttr>("dsrt.tp_split");
          tp && tp.size() >= 2 && tp.size() <= 4) {
        // [axis, parts, blocks, whole size when the slices are padded]
        param.set_tp_axis(static_cast<int32_t>(tp[0]));
        param.set_tp_parts(static_cast<uint32_t>(tp[1]));
        if (tp.size() >= 3 && tp[2] > 1)
          param.set_tp_blocks(static_cast<uint32_t>(tp[2]));
        if (tp.size() == 4)
          param.set_tp_whole(tp[3]);
      }
      params[pr.getIndex()] = param;
    } else if (auto in = dyn_cast<dsrt::InputOp>(op)) {
      if (failed(addBuffer(in, pb::INPUT, 0, in.getIndex())))
        return failure();
      pb::Value *v = p.add_inputs();
      v->set_name(in.getName().str());
      v->set_buffer(ids[in]);
    } else if (auto c = dyn_cast<dsrt::ConstOp>(op)) {
      p.add_constants(constantBytes(c.getValue()));
      if (failed(addBuffer(c, pb::CONST, 0, p.constants_size() - 1)))
        return failure();
    } else if (auto view = dyn_cast<dsrt::ViewOp>(op)) {
      const pb::Buffer &src = p.buffers(ids.lookup(view.getSource()));
      if (failed(addBuffer(view, src.space(), src.offset(), src.slot())))
        return failure();
    } else if (auto k = dyn_cast<dsrt::KernelOp>(op)) {
      pb::Instruction *ins = prog->add_instructions();
      ins->set_kernel(k.getKernel().str());
      ins->set_location(where);
      ins->set_on_host(k->hasAttr("dsrt.host"));
      for (Value v : k.getIns())
        ins->add_inputs(ids.lookup(v));
      for (Value v : k.getOuts()) {
        ins->add_outputs(ids.lookup(v));
        if (isa_and_nonnull<dsrt::ParamOp>(dsrt::rootOf(v)))
          p.set_updates_parameters(true);
      }
      for (NamedAttribute attr : k.getParams())
        if (failed(addAttribute(*ins, attr, k)))
          return failure();
    } else if (auto copy = dyn_cast<dsrt::CopyOp>(op)) {
      pb::Instruction *ins = prog->add_instructions();
      ins->set_kernel("copy");
      ins->set_location(where);
      ins->add_inputs(ids.lookup(copy.getSource()));
      ins->add_outputs(ids.lookup(copy.getTarget()));
    } else if (auto out = dyn_cast<dsrt::OutputOp>(op)) {
      pb::Value *v = p.add_outputs();
      v->set_name(out.getName().str());
      v->set_buffer(ids.lookup(out.getBuffer()));
    } else if (isa<func::ReturnOp>(op)) {
      continue;
    } else {
      return op.emitOpError("cannot be written to plan format version ")
             << ::ds::kPlanFormatVersion;
    }
  }
  bool nvme = false;
  for (auto &[index, param] : params) {
    if (index != p.parameters_size())
      return func.emitError("parameter indices are not dense");
    nvme |= param.location() == pb::NVME;
    *p.add_parameters() = param;
  }
  if (nvme) {
    if (options.nvmePath.empty())
      return func.emitError("storage is on NVMe but no folder was given "
                            "(--offload-optimizer=nvme:PATH)");
    p.mutable_nvme()->set_path(options.nvmePath);
    p.mutable_nvme()->set_block_size(options.aioBlockSize);
    p.mutable_nvme()->set_queue_depth(options.aioQueueDepth);
    p.mutable_nvme()->set_threads(options.aioThreads);
    p.mutable_nvme()->set_bandwidth(options.views.nvmeBytesPerSecond);
  }

  return success();
}

/// The weights source (the ONNX file relative to the plan, and its hash)
/// and the compile options.
LogicalResult addSource(ModuleOp module, StringRef planPath,
                        const PlanWriteOptions &options, pb::Plan &p) {
  if (!options.weightsPath.empty()) {
    auto file = llvm::MemoryBuffer::getFile(options.weightsPath, false, false);
    if (!file)
      return module.emitError("cannot read '")
             << options.weightsPath << "' to hash it";
    StringRef bytes = (*file)->getBuffer();
    SmallString<256> planDir(planPath);
    llvm::sys::path::remove_filename(planDir);
    if (planDir.empty())
      planDir = ".";
    p.mutable_weights()->set_path(relativePath(options.weightsPath, planDir));
    p.mutable_weights()->set_content_hash(::ds::fnv1a64(bytes.data(), bytes.size()));
    p.mutable_weights()->set_size(bytes.size());
  }
  for (const auto &[k, v] : options.compileOptions)
    (*p.mutable_options())[k] = v;

  return success();
}

/// Bytes of a parameter as the plan stores it.
uint64_t parameterBytes(const pb::Parameter &par) {
  uint64_t n = 4;
  switch (par.dtype()) {
  case pb::F16: case pb::BF16: n = 2; break;
  case pb::I64: n = 8; break;
  case pb::BOOL: n = 1; break;
  default: break;
  }
  for (int64_t d : par.shape())
    n *= static_cast<uint64_t>(d);
  return n;
}

/// The container of a pipeline's stage plans, and its report.
LogicalResult writePipelinePlan(ModuleOp module, ArrayRef<ModuleOp> stages,
                                StringRef planPath,
                                const PlanWriteOptions &options, pb::Plan &p) {
  const PlanWriteOptions::Pipeline &pipe = options.pipeline;
  // Chunks: one per stage, or V per pipeline rank (interleaved; chunk c on
  // rank c mod P).
  int chunks = static_cast<int>(stages.size());
  int virt = static_cast<int>(std::max<int64_t>(1, pipe.virtualStages));
  int stageCount = chunks / virt;
  int64_t stageWorld = options.worldSize / stageCount;
  p.set_format_version(::ds::kPlanFormatVersion);
  p.set_producer("ds-opt");
  p.set_world_size(static_cast<uint32_t>(options.worldSize));
  if (failed(addSource(module, planPath, options, p)))
    return failure();
  pb::Pipeline *pl = p.mutable_pipeline();
  pl->set_stages(stageCount);
  pl->set_micro_batches(static_cast<uint32_t>(pipe.microBatches));
  pl->set_schedule(pipe.schedule);
  pl->set_virtual_stages(virt);
  for (const std::string &t : pipe.tied)
    pl->add_tied(t);
  std::vector<std::vector<::ds::PipeStep>> sched = ::ds::pipelineSchedule(
      pipe.schedule, stageCount, static_cast<int>(pipe.microBatches), virt);
  if (sched.empty())
    return module.emitError("unknown pipeline schedule '")
           << pipe.schedule << "'";
  ::ds::CostModel model;
  model.flopsPerSecond = options.views.flopsPerSecond;
  model.bytesPerSecond = options.views.bytesPerSecond;
  model.linkBytesPerSecond = options.views.linkBytesPerSecond;
  std::vector<double> fwd, bwd;
  std::vector<uint64_t> stash, peak;
  std::vector<int> slots;
  uint64_t maxSend = 0;
  for (int s = 0; s < chunks; ++s) {
    pb::Plan *sp = pl->add_stage_plans();
    if (failed(buildPlan(stages[s], options, stageWorld, *sp)) ||
        failed(addSource(module, planPath, options, *sp)))
      return failure();
    // The marks: the backward section's start, and the update's.
    int split = -1, update = 0;
    const pb::Program &prog = sp->programs(0);
    for (int i = 0; i < prog.instructions_size(); ++i) {
      const pb::Instruction &ins = prog.instructions(i);
      if (ins.kernel() != "pipe_mark")
        continue;
      bool isUpdate = false;
      for (const pb::Attribute &a : ins.attributes())
        isUpdate |= a.name() == "update";
      (isUpdate ? update : split) = i;
    }
    if (split < 0)
      return module.emitError("stage ")
             << s << " has no backward section (run --ds-autodiff)";
    pb::Pipeline *own = sp->mutable_pipeline();
    own->set_stages(stageCount);
    own->set_virtual_stages(virt);
    own->set_micro_batches(static_cast<uint32_t>(pipe.microBatches));
    own->set_schedule(pipe.schedule);
    own->set_stage(s);
    own->set_backward_start(split);
    own->set_update_start(update);
    uint64_t bytes = 0;
    for (const ::ds::ByteRange &r : ::ds::stashRanges(*sp, split))
      bytes += r.end - r.begin;
    own->set_stash_bytes(bytes);
    stash.push_back(bytes);
    slots.push_back(::ds::stashCopies(sched[s % stageCount], s));
    ::ds::Timeline tl = ::ds::timeline(*sp, model);
    double fwdEnd = 0;
    for (const ::ds::TimelineEvent &e : tl.events)
      if (e.instruction < split)
        fwdEnd = std::max(fwdEnd, e.start + e.duration);
    fwd.push_back(fwdEnd);
    bwd.push_back(std::max(0.0, tl.stepSeconds - fwdEnd));
    uint64_t params = 0;
    for (const pb::Parameter &par : sp->parameters())
      params += parameterBytes(par);
    peak.push_back(prog.arena_bytes() + params + bytes * slots.back());
    if (s < static_cast<int>(pipe.stages.size()))
      maxSend = std::max<uint64_t>(maxSend, pipe.stages[s].sendBytes);
  }
  // Per pipeline rank: the sum of its chunks, with the activation stash
  // (what --device-memory is held to).
  std::vector<uint64_t> rankPeak(stageCount, 0);
  for (int c = 0; c < chunks; ++c)
    rankPeak[c % stageCount] += peak[c];
  for (int r = 0; r < stageCount; ++r)
    if (options.views.budget && rankPeak[r] > options.views.budget)
      return module.emitError("pipeline rank ")
             << r << " needs " << rankPeak[r]
             << " bytes (its stages' arenas, parameters and state, and "
                "activation stash), more than --device-memory ("
             << options.views.budget << " bytes)";
  if (!options.report)
    return success();
  int m = static_cast<int>(pipe.microBatches);
  double formula =
      double(stageCount - 1) / double(virt * m + stageCount - 1);
  ::ds::PipeSimulation equal = ::ds::simulatePipeline(
      sched, std::vector<double>(chunks, 1.0), std::vector<double>(chunks, 2.0));
  ::ds::PipeSimulation costed = ::ds::simulatePipeline(
      sched, fwd, bwd,
      model.linkBytesPerSecond > 0 ? maxSend / model.linkBytesPerSecond : 0);
  int tp = pl->stage_plans(0).tensor_parallel() ? pl->stage_plans(0).tensor_parallel() : 1;
  int64_t dp = stageWorld / tp;
  uint64_t maxPeak = *std::max_element(rankPeak.begin(), rankPeak.end());
  std::string &out = *options.report;
  llvm::raw_string_ostream os(out);
  if (options.reportJson) {
    os << "{\"pipeline\": {\"stages\": " << stageCount
       << ", \"data_parallel\": " << dp << ", \"tensor_parallel\": " << tp
       << ", \"micro_batches\": " << m << ", \"schedule\": \""
       << pipe.schedule << "\", \"virtual_stages\": " << virt
       << ", \"bubble\": " << equal.bubble
       << ", \"bubble_formula\": " << formula
       << ", \"bubble_cost_model\": " << costed.bubble
       << ", \"step_seconds\": " << costed.stepSeconds
       << ", \"per_rank_peak\": " << maxPeak << ", \"per_stage\": [";
    for (int s = 0; s < chunks; ++s)
      os << (s ? ", " : "") << "{\"stage\": " << s
         << ", \"rank\": " << s % stageCount
         << ", \"forward_seconds\": " << fwd[s]
         << ", \"backward_seconds\": " << bwd[s]
         << ", \"stash_bytes\": " << stash[s] << ", \"stash_copies\": "
         << slots[s] << ", \"peak\": " << peak[s] << ", \"footprint\": "
         << ::ds::formatFootprintJson(::ds::footprint(pl->stage_plans(s)))
         << "}";
    os << "]}}\n";
    return success();
  }
  os << "pipeline parallelism: " << stageCount << " stages x " << dp
     << " data-parallel x " << tp << " tensor-parallel = "
     << options.worldSize << " ranks (rank = stage*" << stageWorld
     << " + dp*" << tp << " + tp); " << m << " micro-batches per step, "
     << "schedule " << pipe.schedule;
  if (virt > 1)
    os << " with " << virt << " model chunks per rank (chunk c on rank c mod "
       << stageCount << ")";
  os << "\n";
  os << llvm::format("  %-5s %-11s %10s %10s %10s %10s %5s %11s %9s %9s\n",
                     "stage", "fwd ops", "fwd GFLOP", "params MiB",
                     "send KiB", "stash KiB", "copies", "peak MiB", "F ms",
                     "B ms");
  for (int s = 0; s < chunks; ++s) {
    const pb::Plan &sp = pl->stage_plans(s);
    uint64_t params = 0;
    for (const pb::Parameter &par : sp.parameters())
      params += parameterBytes(par);
    PlanWriteOptions::Pipeline::Stage info;
    if (s < static_cast<int>(pipe.stages.size()))
      info = pipe.stages[s];
    std::string range = std::to_string(info.firstOp) + "-" +
                        std::to_string(info.lastOp);
    os << llvm::format("  %-5d %-11s %10.3f %10.2f %10.1f %10.1f %5d %11.2f "
                       "%9.3f %9.3f\n",
                       s, range.c_str(), info.flops / 1e9, params / 1048576.0,
                       info.sendBytes / 1024.0, stash[s] / 1024.0, slots[s],
                       peak[s] / 1048576.0, fwd[s] * 1e3, bwd[s] * 1e3);
  }
  // The schedule itself: each rank's order of forward (F) and backward (B)
  // sections by micro-batch (and chunk), as ds-run walks it.
  for (int r = 0; r < stageCount; ++r) {
    os << "  rank " << r << ":";
    size_t shown = 0;
    for (const ::ds::PipeStep &x : sched[r]) {
      if (++shown > 32) {
        os << " ... (" << sched[r].size() << " in all)";
        break;
      }
      os << " " << (x.forward ? "F" : "B") << x.micro;
      if (virt > 1)
        os << "." << x.chunk;
    }
    os << "\n";
  }
  if (virt > 1)
    os << llvm::format("  bubble %.4f (the schedule with equal stages), "
                       "formula (p-1)/(v*m+p-1) = %.4f\n",
                       equal.bubble, formula);
  else
    os << llvm::format("  bubble %.4f (the schedule with equal stages), "
                       "formula (p-1)/(m+p-1) = %.4f\n",
                       equal.bubble, formula);
  os << llvm::format("  cost model: step %.3f ms, bubble %.4f (the stages' "
                     "forward and backward times above, %.3g B/s link)\n",
                     costed.stepSeconds * 1e3, costed.bubble,
                     model.linkBytesPerSecond);
  os << "  per-rank peak " << llvm::format("%.2f", maxPeak / 1048576.0)
     << " MiB (largest " << (virt > 1 ? "rank's chunks" : "stage")
     << ": arena + parameters + stash x copies)\n";
  if (!pipe.tied.empty()) {
    os << "  tied parameters (held by several stages, gradients summed "
          "before the update):";
    for (const std::string &t : pipe.tied)
      os << " " << t;
    os << "\n";
  }
  for (int s = 0; s < chunks; ++s)
    os << "stage " << s << ":\n"
       << ::ds::formatFootprint(::ds::footprint(pl->stage_plans(s)));
  return success();
}
} // namespace

LogicalResult mlir::ds::writePlan(ModuleOp module, StringRef planPath,
                                  const PlanWriteOptions &options) {
  pb::Plan p;
  SmallVector<ModuleOp> stages;
  for (Operation &op : *module.getBody())
    if (auto m = dyn_cast<ModuleOp>(op); m && m->hasAttr("ds.stage"))
      stages.push_back(m);
  if (!stages.empty()) {
    if (failed(writePipelinePlan(module, stages, planPath, options, p)))
      return failure();
  } else {
    if (failed(buildPlan(module, options, options.worldSize, p)) ||
        failed(addSource(module, planPath, options, p)))
      return failure();
    if (failed(writeViews(module, p, options)))
      return failure();
    if (options.report)
      *options.report = options.reportJson
                            ? ::ds::formatFootprintJson(::ds::footprint(p))
                            : ::ds::formatFootprint(::ds::footprint(p));
  }

  std::string payload;
  if (!p.SerializeToString(&payload))
    return module.emitError("cannot serialize the plan");
  ::ds::PlanHeader header;
  header.version = ::ds::kPlanFormatVersion;
  header.payloadBytes = payload.size();
  header.checksum = ::ds::fnv1a64(payload.data(), payload.size());
  unsigned char head[::ds::kPlanHeaderBytes];
  ::ds::encodePlanHeader(header, head);

  // Write beside the target, then rename: a failed write never leaves a
  // half plan behind.
  std::string tmp = planPath.str() + ".tmp";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
    if (ec)
      return module.emitError("cannot write '") << tmp << "': "
                                                << ec.message();
    os.write(reinterpret_cast<const char *>(head), ::ds::kPlanHeaderBytes);
    os << payload;
    os.close();
    if (os.has_error()) {
      llvm::sys::fs::remove(tmp);
      return module.emitError("cannot write '") << tmp << "'";
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, planPath)) {
    llvm::sys::fs::remove(tmp);
    return module.emitError("cannot write '") << planPath << "': "
                                              << ec.message();
  }
  return success();
}
