//===- PlanWriter.cpp - dsrt module to plan.bin ---------------------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "PlanWriterImpl.h"
#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/PlanFootprint.h"
#include "ds/Support/PlanFormat.h"
#include "ds/Support/PlanTimeline.h"

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
  else if (auto farr = dyn_cast<DenseF64ArrayAttr>(v))
    for (double x : farr.asArrayRef())
      a->mutable_floats()->add_values(x);
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
      v.memoryPlotPath.empty() && !v.cluster)
    return success();
  // --cluster: the predicted step, and its schedule for the trace.
  std::optional<::ds::Timeline> predicted;
  if (v.cluster &&
      failed(plan_writer::predictOnCluster(module, p, options,
                                           &predicted.emplace())))
    return failure();
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
      failed(writeText(module, v.tracePath,
                       ::ds::traceJson(predicted ? *predicted : tl,
                                       fp.world))))
    return failure();
  if (!v.memoryPlotPath.empty() &&
      failed(writeText(module, v.memoryPlotPath,
                       ::ds::memorySvg(fp, v.budget, v.plotTitle))))
    return failure();
  return success();
}
} // namespace

LogicalResult mlir::ds::plan_writer::writeTextFile(ModuleOp module,
                                                  const std::string &path,
                                                  const std::string &text) {
  return writeText(module, path, text);
}

namespace {
/// The section of the step from `ins` on: the backward pass from the loss's
/// gradient (or a stage plan's backward mark), the optimizer's from its
/// first kernel (or a stage plan's update mark).
pb::Phase sectionAfter(pb::Phase section, const pb::Instruction &ins) {
  bool mark = ins.kind() == pb::KIND_PIPE_MARK;
  if (::ds::startsBackward(ins.kind()) || (mark && !ins.update()))
    return pb::PHASE_BACKWARD;
  if (::ds::kernelFamily(ins.kind()) == ::ds::KernelFamily::Optimizer ||
      (mark && ins.update()))
    return pb::PHASE_OPTIMIZER;
  return section;
}

/// Builds one program's plan from @forward, op by op.
class PlanBuilder {
public:
  PlanBuilder(const PlanWriteOptions &options, pb::Plan &p)
      : options(options), p(p) {}

  LogicalResult build(func::FuncOp func, IntegerAttr arena, int64_t world);

private:
  void addHeader(func::FuncOp func, IntegerAttr arena, int64_t world);
  LogicalResult addOp(Operation &op);
  LogicalResult addBuffer(Value v, pb::Space space, uint64_t offset,
                          uint32_t slot);
  LogicalResult addParameter(dsrt::ParamOp pr);
  pb::Instruction &addInstruction(StringRef kernel, Location loc);
  LogicalResult addKernel(dsrt::KernelOp k);
  LogicalResult addCopy(dsrt::CopyOp copy);
  LogicalResult addParameters(func::FuncOp func);

  const PlanWriteOptions &options;
  pb::Plan &p;
  pb::Program *prog = nullptr;
  llvm::DenseMap<Value, uint32_t> ids;
  std::map<int64_t, pb::Parameter> params;
  /// The section of the step the next instruction is in: forward,
  /// backward once the loss's gradient is written, optimizer once an
  /// optimizer kernel is.
  pb::Phase section = pb::PHASE_FORWARD;
};

void PlanBuilder::addHeader(func::FuncOp func, IntegerAttr arena,
                            int64_t world) {
  p.set_format_version(::ds::kPlanFormatVersion);
  p.set_producer("ds-opt");
  p.set_world_size(static_cast<uint32_t>(world));
  if (auto tp = func->getAttrOfType<IntegerAttr>("ds.tensor_parallel"))
    p.set_tensor_parallel(static_cast<uint32_t>(tp.getInt()));
  if (auto stage = func->getAttrOfType<IntegerAttr>("ds.zero_stage"))
    p.set_zero_stage(static_cast<uint32_t>(stage.getInt()));
  if (auto hpz = func->getAttrOfType<IntegerAttr>("ds.hpz_partition_size"))
    p.set_hpz_partition_size(static_cast<uint32_t>(hpz.getInt()));
  if (auto loss = func->getAttrOfType<StringAttr>("dsrt.loss"))
    p.set_loss(loss.str());
  prog = p.add_programs();
  prog->set_name("forward");
  prog->set_arena_bytes(arena.getInt());
  if (auto host = func->getAttrOfType<IntegerAttr>("dsrt.host_arena_bytes"))
    prog->set_host_arena_bytes(host.getInt());
}

LogicalResult PlanBuilder::addBuffer(Value v, pb::Space space, uint64_t offset,
                                     uint32_t slot) {
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
}

LogicalResult PlanBuilder::addParameter(dsrt::ParamOp pr) {
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
  param.set_frozen(pr->hasAttr("dsrt.frozen"));
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
  return success();
}

pb::Instruction &PlanBuilder::addInstruction(StringRef kernel, Location loc) {
  pb::Instruction *ins = prog->add_instructions();
  ins->set_kernel(kernel.str());
  if (auto name = dyn_cast<NameLoc>(loc))
    ins->set_location(name.getName().str());
  return *ins;
}

LogicalResult PlanBuilder::addKernel(dsrt::KernelOp k) {
  pb::Instruction &ins = addInstruction(k.getKernel(), k.getLoc());
  ins.set_on_host(k->hasAttr("dsrt.host"));
  for (Value v : k.getIns())
    ins.add_inputs(ids.lookup(v));
  for (Value v : k.getOuts()) {
    ins.add_outputs(ids.lookup(v));
    if (isa_and_nonnull<dsrt::ParamOp>(dsrt::rootOf(v)))
      p.set_updates_parameters(true);
  }
  for (NamedAttribute attr : k.getParams())
    if (failed(addAttribute(ins, attr, k)))
      return failure();
  plan_writer::addTypedFields(p, k.getParams(), ins);
  section = sectionAfter(section, ins);
  return plan_writer::addCosts(k, p, ins, section);
}

LogicalResult PlanBuilder::addCopy(dsrt::CopyOp copy) {
  pb::Instruction &ins = addInstruction("copy", copy.getLoc());
  ins.add_inputs(ids.lookup(copy.getSource()));
  ins.add_outputs(ids.lookup(copy.getTarget()));
  plan_writer::addTypedFields(p, DictionaryAttr(), ins);
  return plan_writer::addCosts(copy, p, ins, section);
}

LogicalResult PlanBuilder::addOp(Operation &op) {
  if (auto a = dyn_cast<dsrt::AllocOp>(op)) {
    if (!a.getOffset())
      return a.emitOpError("has no offset (run --dsrt-plan-memory)");
    return addBuffer(a, a->hasAttr("dsrt.host") ? pb::HOST_ARENA : pb::ARENA,
                     *a.getOffset(), 0);
  }
  if (auto pr = dyn_cast<dsrt::ParamOp>(op))
    return addParameter(pr);
  if (auto in = dyn_cast<dsrt::InputOp>(op)) {
    if (failed(addBuffer(in, pb::INPUT, 0, in.getIndex())))
      return failure();
    pb::Value *v = p.add_inputs();
    v->set_name(in.getName().str());
    v->set_buffer(ids[in]);
    if (auto axis = in->getAttrOfType<IntegerAttr>("dsrt.batch_axis"))
      v->set_batch_axis(axis.getInt());
    if (auto n = in->getAttrOfType<IntegerAttr>("dsrt.bag_indices")) {
      v->set_bag_indices(n.getInt());
      v->set_bag_last_offset(in->hasAttr("dsrt.bag_last_offset"));
    }
    return success();
  }
  if (auto c = dyn_cast<dsrt::ConstOp>(op)) {
    p.add_constants(constantBytes(c.getValue()));
    return addBuffer(c, pb::CONST, 0, p.constants_size() - 1);
  }
  if (auto view = dyn_cast<dsrt::ViewOp>(op)) {
    const pb::Buffer &src = p.buffers(ids.lookup(view.getSource()));
    return addBuffer(view, src.space(), src.offset(), src.slot());
  }
  if (auto k = dyn_cast<dsrt::KernelOp>(op))
    return addKernel(k);
  if (auto copy = dyn_cast<dsrt::CopyOp>(op))
    return addCopy(copy);
  if (auto out = dyn_cast<dsrt::OutputOp>(op)) {
    pb::Value *v = p.add_outputs();
    v->set_name(out.getName().str());
    v->set_buffer(ids.lookup(out.getBuffer()));
    return success();
  }
  if (isa<func::ReturnOp>(op))
    return success();
  return op.emitOpError("cannot be written to plan format version ")
         << ::ds::kPlanFormatVersion;
}

/// The parameters in index order, and the NVMe options when some are
/// stored there.
LogicalResult PlanBuilder::addParameters(func::FuncOp func) {
  bool nvme = false;
  for (auto &[index, param] : params) {
    if (index != p.parameters_size())
      return func.emitError("parameter indices are not dense");
    nvme |= param.location() == pb::NVME;
    *p.add_parameters() = param;
  }
  if (!nvme)
    return success();
  if (options.nvmePath.empty())
    return func.emitError("storage is on NVMe but no folder was given "
                          "(--offload-optimizer=nvme:PATH)");
  p.mutable_nvme()->set_path(options.nvmePath);
  p.mutable_nvme()->set_block_size(options.aioBlockSize);
  p.mutable_nvme()->set_queue_depth(options.aioQueueDepth);
  p.mutable_nvme()->set_threads(options.aioThreads);
  p.mutable_nvme()->set_bandwidth(options.views.nvmeBytesPerSecond);
  return success();
}

LogicalResult PlanBuilder::build(func::FuncOp func, IntegerAttr arena,
                                 int64_t world) {
  addHeader(func, arena, world);
  for (Operation &op : func.getBody().front())
    if (failed(addOp(op)))
      return failure();
  return addParameters(func);
}
} // namespace

LogicalResult mlir::ds::plan_writer::buildPlan(ModuleOp module,
                                               const PlanWriteOptions &options,
                                               int64_t worldSize, pb::Plan &p) {
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func || func.getNumArguments() != 0)
    return module.emitError("writing a plan needs @forward lowered to dsrt");
  auto arena = func->getAttrOfType<IntegerAttr>(dsrt::kArenaBytes);
  if (!arena)
    return func.emitError("the memory plan is missing (run "
                          "--dsrt-plan-memory)");
  return PlanBuilder(options, p).build(func, arena, worldSize);
}

LogicalResult mlir::ds::plan_writer::addSource(ModuleOp module,
                                               StringRef planPath,
                                               const PlanWriteOptions &options,
                                               pb::Plan &p) {
  if (!options.weightsPath.empty()) {
    SmallString<256> planDir(planPath);
    llvm::sys::path::remove_filename(planDir);
    if (planDir.empty())
      planDir = ".";
    p.mutable_weights()->set_path(relativePath(options.weightsPath, planDir));
    // The importer's mark of a shapes-only model (lib/Import/ShapesOnly.cpp):
    // nothing to hash, and nothing ds-run could load.
    if (module->hasAttr("ds.shapes_only")) {
      p.mutable_weights()->set_shapes_only(true);
    } else {
      auto file =
          llvm::MemoryBuffer::getFile(options.weightsPath, false, false);
      if (!file)
        return module.emitError("cannot read '")
               << options.weightsPath << "' to hash it";
      StringRef bytes = (*file)->getBuffer();
      p.mutable_weights()->set_content_hash(
          ::ds::fnv1a64(bytes.data(), bytes.size()));
      p.mutable_weights()->set_size(bytes.size());
    }
  }
  for (const auto &[k, v] : options.compileOptions)
    (*p.mutable_options())[k] = v;

  return success();
}

SmallVector<ModuleOp> mlir::ds::plan_writer::stageModules(ModuleOp module) {
  SmallVector<ModuleOp> stages;
  for (Operation &op : *module.getBody())
    if (auto m = dyn_cast<ModuleOp>(op); m && m->hasAttr("ds.stage"))
      stages.push_back(m);
  return stages;
}

LogicalResult mlir::ds::writePlan(ModuleOp module, StringRef planPath,
                                  const PlanWriteOptions &options,
                                  std::string *bytes) {
  pb::Plan p;
  SmallVector<ModuleOp> stages = plan_writer::stageModules(module);
  if (!stages.empty()) {
    if (failed(plan_writer::writePipelinePlan(module, stages, planPath, options,
                                         p)))
      return failure();
    p.set_eval_refused("evaluation under pipeline parallelism is not "
                       "supported yet");
  } else {
    if (failed(plan_writer::buildPlan(module, options, options.worldSize, p)) ||
        failed(plan_writer::addSource(module, planPath, options, p)))
      return failure();
    plan_writer::addEvalSection(module, p);
    if (failed(writeViews(module, p, options)))
      return failure();
    if (options.report)
      *options.report = options.reportJson
                            ? ::ds::formatFootprintJson(::ds::footprint(p))
                            : ::ds::formatFootprint(::ds::footprint(p)) +
                                  plan_writer::evalReportLine(p);
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
  if (bytes) { // in memory: no file
    bytes->assign(reinterpret_cast<const char *>(head), ::ds::kPlanHeaderBytes);
    bytes->append(payload);
    return success();
  }

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
