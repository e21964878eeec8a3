//===- PlanInstructions.cpp - a dsrt kernel's typed plan fields -----------===//
//
// Part of the ds project.
//
// An instruction of plan.bin carries, besides its kernel's parameters,
// typed fields its readers use (the footprint, the timeline, the runtime's
// checks): its kind, phase, FLOPs and bytes, the collectives it runs and
// the parameters they need. The compiler's own figures (ds.flops,
// ds.bytes, ds.phase on the dsrt.kernel op) are taken when present;
// otherwise the writer estimates them from the kind table.
//
//===----------------------------------------------------------------------===//

#include "PlanWriterImpl.h"

#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Support/KernelKinds.h"
#include "ds/Support/OneBit.h"
#include "ds/Support/Quantize.h"
#include "ds/Support/PlanTimeline.h"

#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace mlir::ds;
namespace pb = ::ds::plan;

namespace {

/// An integer or boolean parameter of a kernel, if it has it.
std::optional<int64_t> intParam(DictionaryAttr params, StringRef name) {
  Attribute v = params ? params.get(name) : Attribute();
  if (auto b = dyn_cast_or_null<BoolAttr>(v))
    return b.getValue();
  if (auto i = dyn_cast_or_null<IntegerAttr>(v))
    return i.getValue().getSExtValue();
  return std::nullopt;
}

std::optional<double> floatParam(DictionaryAttr params, StringRef name) {
  if (auto f = dyn_cast_or_null<FloatAttr>(params ? params.get(name)
                                                  : Attribute()))
    return f.getValueAsDouble();
  return std::nullopt;
}

/// The optimizer's settings of an adam or sgd kernel.
void addOptimizer(DictionaryAttr params, pb::Optimizer &o) {
  if (auto lr = floatParam(params, "lr"))
    o.set_lr(*lr);
  o.set_decoupled(intParam(params, "decoupled").value_or(0) != 0);
  o.set_lamb(intParam(params, "lamb").value_or(0) != 0);
  if (auto s = dyn_cast_or_null<StringAttr>(params ? params.get("schedule")
                                                   : Attribute()))
    o.set_schedule(s.str());
  if (auto n = intParam(params, "warmup_steps"))
    o.set_warmup_steps(*n);
  if (auto n = intParam(params, "total_steps"))
    o.set_total_steps(*n);
  if (auto lr = floatParam(params, "min_lr"))
    o.set_min_lr(*lr);
  if (auto n = intParam(params, "accum_steps"))
    o.set_accum_steps(*n);
  if (auto n = intParam(params, "freeze_step")) // 1-bit Adam
    o.set_freeze_step(*n);
  if (auto n = intParam(params, "var_freeze_step")) { // 0/1 Adam
    o.set_var_freeze_step(*n);
    o.set_var_update_scaler(intParam(params, "var_update_scaler").value_or(16));
    o.set_local_step_scaler(
        intParam(params, "local_step_scaler").value_or(32678));
    o.set_local_step_clipper(
        intParam(params, "local_step_clipper").value_or(16));
  }
}

uint64_t bufferBytes(const pb::Plan &p, uint32_t id) {
  return id < static_cast<uint32_t>(p.buffers_size()) ? p.buffers(id).bytes()
                                                       : 0;
}

/// Appends one collective of `kind` over `g` moving `bytes` to `ins`.
void addCollective(pb::Instruction &ins, pb::CollectiveKind kind, pb::Group g,
                   uint64_t bytes) {
  pb::Collective *c = ins.add_collectives();
  c->set_kind(kind);
  c->set_group(g);
  c->set_bytes(bytes);
}

/// ZeRO++'s quantized gather or reduce-scatter (docs/zeropp.md): the bytes
/// of its records (Support/Quantize.h).
void addQuantizedCollective(const pb::Plan &p, DictionaryAttr params,
                            pb::Instruction &ins, pb::Group g) {
  if (ins.inputs_size() != 1 || ins.outputs_size() != 2)
    return;
  bool gather = ins.kind() == pb::KIND_QUANTIZED_ALL_GATHER;
  int64_t block = intParam(params, "block_size").value_or(1);
  int bits = static_cast<int>(intParam(params, "bits").value_or(8));
  auto elements = [&](uint32_t id) {
    int64_t n = 1;
    if (id < static_cast<uint32_t>(p.buffers_size()))
      for (int64_t d : p.buffers(id).shape())
        n *= d;
    return n;
  };
  // Elements: the shard gathered, or the chunk reduced to; N = the whole
  // tensor over it.
  int64_t in = elements(ins.inputs(0)), out = elements(ins.outputs(0));
  int64_t part = gather ? in : out;
  int64_t world = part > 0 ? (gather ? out : in) / part : 1;
  addCollective(ins,
                gather ? pb::COLLECTIVE_ALL_GATHER
                       : pb::COLLECTIVE_REDUCE_SCATTER,
                g,
                gather ? ::ds::quant::gatherBytes(part, world, block, bits)
                       : ::ds::quant::reduceScatterBytes(part, world, block,
                                                         bits));
}

/// The collective a plain kernel's facts name (KernelKinds.cpp), with its
/// result's or operand's bytes.
void addKernelCollective(const pb::Plan &p, pb::Instruction &ins,
                         pb::Group g) {
  auto add = [&](pb::CollectiveKind kind, pb::Group grp, uint64_t bytes) {
    addCollective(ins, kind, grp, bytes);
  };
  auto out0 = [&] {
    return ins.outputs_size() ? bufferBytes(p, ins.outputs(0)) : 0;
  };
  auto in0 = [&] {
    return ins.inputs_size() ? bufferBytes(p, ins.inputs(0)) : 0;
  };
  const ::ds::KernelFacts *facts = ::ds::kernelFacts(ins.kind());
  if (!facts || facts->comm == pb::COLLECTIVE_NONE)
    return;
  switch (facts->comm) {
  case pb::COLLECTIVE_ALL_REDUCE:
    add(facts->comm, g, out0());
    return;
  case pb::COLLECTIVE_ALL_GATHER:
  case pb::COLLECTIVE_REDUCE_SCATTER: {
    // Over the tensor-parallel ranks these move sequence-parallel row
    // blocks.
    bool sequence = ins.kind() == pb::KIND_SP_ALL_GATHER ||
                    ins.kind() == pb::KIND_SP_REDUCE_SCATTER ||
                    g == pb::GROUP_TENSOR;
    bool scatter = facts->comm == pb::COLLECTIVE_REDUCE_SCATTER &&
                   ins.inputs_size() == 1;
    add(facts->comm, sequence ? pb::GROUP_SEQUENCE : g,
        scatter ? in0() : out0());
    return;
  }
  case pb::COLLECTIVE_SEND:
    add(facts->comm, pb::GROUP_PIPELINE, in0());
    return;
  case pb::COLLECTIVE_RECV:
    add(facts->comm, pb::GROUP_PIPELINE, out0());
    return;
  default:
    return;
  }
}

/// The collectives `ins` runs over `group` (its `group` parameter).
void addCollectives(const pb::Plan &p, DictionaryAttr params,
                    pb::Instruction &ins, int64_t group) {
  auto add = [&](pb::CollectiveKind kind, pb::Group grp, uint64_t bytes) {
    addCollective(ins, kind, grp, bytes);
  };
  pb::Group g = ::ds::groupOf(group);
  auto out0 = [&] {
    return ins.outputs_size() ? bufferBytes(p, ins.outputs(0)) : 0;
  };
  auto in0 = [&] {
    return ins.inputs_size() ? bufferBytes(p, ins.inputs(0)) : 0;
  };
  switch (ins.kind()) {
  case pb::KIND_CHECK_OVERFLOW: // the overflow flag (one float)
    add(pb::COLLECTIVE_ALL_REDUCE, g, 4);
    return;
  case pb::KIND_VOCAB_CROSS_ENTROPY: {
    if (ins.inputs_size() != 2 || ins.outputs_size() != 2)
      return;
    // Each row's maximum gathered (N floats per rank), then the sums of
    // exponentials and the target scores reduced (2N floats).
    uint64_t rows = bufferBytes(p, ins.outputs(1)); // lse: N floats
    int tp = std::max(1, static_cast<int>(p.tensor_parallel()));
    int dp = std::max(1, std::max(1, static_cast<int>(p.world_size())) / tp);
    add(pb::COLLECTIVE_ALL_GATHER, g,
        rows * ::ds::groupRanks(g, dp, tp));
    add(pb::COLLECTIVE_ALL_REDUCE, g, 2 * rows);
    return;
  }
  case pb::KIND_ONEBIT_ADAM:      // docs/compression.md
  case pb::KIND_ZERO_ONE_ADAM:   // (0/1 Adam: 9 inputs)
  case pb::KIND_ONEBIT_LAMB: {   // (1-bit LAMB: 9, worker error 6th)
    // The warm-up's all-reduce of the gradient; after the freeze, the
    // compressed exchange of the padded momentum (its worker error's size).
    // 0/1 Adam runs one or the other or neither per step. 1-bit LAMB's
    // ZeRO 1-3 form (7 inputs, ds.onebit_lamb_local) exchanges nothing but
    // its partial figures' all-gather, in both phases.
    if (ins.kind() == pb::KIND_ONEBIT_LAMB && ins.inputs_size() == 7) {
      add(pb::COLLECTIVE_ALL_GATHER, g,
          ::ds::onebit::partialSumsBytes(::ds::onebit::kOneBitLambPartials,
                                         std::max<int64_t>(1, p.world_size())));
      return;
    }
    if (ins.inputs_size() != (ins.kind() == pb::KIND_ONEBIT_ADAM ? 7 : 9))
      return;
    int workerError = ins.kind() == pb::KIND_ONEBIT_LAMB ? 5 : 4;
    int64_t world = std::max<int64_t>(1, p.world_size());
    add(pb::COLLECTIVE_ALL_REDUCE, g, bufferBytes(p, ins.inputs(1)));
    add(pb::COLLECTIVE_COMPRESSED_ALL_REDUCE, g,
        ::ds::onebit::exchangeBytes(
            static_cast<int64_t>(bufferBytes(p, ins.inputs(workerError)) / 4),
            world));
    return;
  }
  case pb::KIND_ADAM: { // Lamb under ZeRO 1-3: the partial norms' all-gather
    if (intParam(params, "norm_over_ranks").value_or(0) == 0)
      return;
    add(pb::COLLECTIVE_ALL_GATHER, g,
        ::ds::onebit::partialSumsBytes(::ds::onebit::kLambPartials,
                                       std::max<int64_t>(1, p.world_size())));
    return;
  }
  case pb::KIND_COMPRESSED_REDUCE_SCATTER: { // ZeRO 1-3, docs/compression.md
    // The warm-up's reduce-scatter of the bucket; after the freeze, its
    // packed signs and scales by all-to-all.
    if (ins.inputs_size() < 3 || ins.outputs_size() < 2)
      return;
    int64_t world = std::max<int64_t>(1, p.world_size());
    add(pb::COLLECTIVE_REDUCE_SCATTER, g, in0());
    add(pb::COLLECTIVE_COMPRESSED_REDUCE_SCATTER, g,
        ::ds::onebit::reduceScatterBytes(
            static_cast<int64_t>(out0() / 4), world));
    return;
  }
  case pb::KIND_COMPRESSED_ALL_GATHER:   // ZeRO 1-2, docs/compression.md
  case pb::KIND_ONEBIT_QUANTIZED_ALL_GATHER: { // ZeRO 3
    // The warm-up's all-gather; after the freeze, the packed signs and
    // scales of the update delta, or the int8 pieces and block scales.
    int64_t world = std::max<int64_t>(1, p.world_size());
    add(pb::COLLECTIVE_ALL_GATHER, g, out0());
    if (ins.kind() == pb::KIND_COMPRESSED_ALL_GATHER) {
      add(pb::COLLECTIVE_COMPRESSED_ALL_GATHER, g,
          ::ds::onebit::gatherBytes(static_cast<int64_t>(in0() / 4), world));
      return;
    }
    for (const pb::Attribute &a : ins.attributes())
      if (a.name() == "pieces")
        add(pb::COLLECTIVE_COMPRESSED_ALL_GATHER, g,
            ::ds::onebit::quantizedGatherBytes(a.ints().values(), world));
    return;
  }
  case pb::KIND_QUANTIZED_ALL_GATHER:        // ZeRO++, docs/zeropp.md
  case pb::KIND_QUANTIZED_REDUCE_SCATTER:
    return addQuantizedCollective(p, params, ins, g);
  default:
    break;
  }
  addKernelCollective(p, ins, g);
}

} // namespace

void mlir::ds::plan_writer::addTypedFields(const pb::Plan &p,
                                           DictionaryAttr params,
                                           pb::Instruction &ins) {
  ins.set_kind(::ds::kindOf(ins.kernel()));
  ins.set_async(intParam(params, "async").value_or(0) != 0);
  ins.set_trans_a(intParam(params, "trans_a").value_or(0) != 0);
  ins.set_trans_b(intParam(params, "trans_b").value_or(0) != 0);
  ins.set_update(params && params.get("update"));
  if (ins.kind() == pb::KIND_GATHER)
    ins.set_axis(intParam(params, "axis").value_or(0));
  ins.set_vocab(intParam(params, "vocab").value_or(0));
  if (::ds::isOptimizer(ins.kind()))
    addOptimizer(params, *ins.mutable_optimizer());
  addCollectives(p, params, ins, intParam(params, "group").value_or(0));
}

LogicalResult mlir::ds::plan_writer::addCosts(Operation *op,
                                              const pb::Plan &p,
                                              pb::Instruction &ins,
                                              pb::Phase section) {
  if (auto flops = op->getAttrOfType<IntegerAttr>("ds.flops"))
    ins.set_flops(flops.getInt());
  else
    ins.set_flops(::ds::estimateFlops(p, ins));
  if (auto bytes = op->getAttrOfType<IntegerAttr>("ds.bytes"))
    ins.set_bytes(bytes.getInt());
  else
    ins.set_bytes(::ds::operandBytes(p, ins));
  auto phase = op->getAttrOfType<StringAttr>("ds.phase");
  if (!phase) {
    ins.set_phase(::ds::defaultPhase(ins.kind(), section));
    return success();
  }
  pb::Phase named = llvm::StringSwitch<pb::Phase>(phase.getValue())
                        .Case("forward", pb::PHASE_FORWARD)
                        .Case("backward", pb::PHASE_BACKWARD)
                        .Case("optimizer", pb::PHASE_OPTIMIZER)
                        .Case("communication", pb::PHASE_COMMUNICATION)
                        .Case("transfer", pb::PHASE_TRANSFER)
                        .Default(pb::PHASE_UNSPECIFIED);
  if (named == pb::PHASE_UNSPECIFIED)
    return op->emitOpError("has an unknown phase ") << phase;
  ins.set_phase(named);
  return success();
}
