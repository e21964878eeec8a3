//===- EvalSection.cpp - the plan's forward-only evaluation section -------===//
//
// Part of the ds project.
//
// Evaluation (issue 25) runs the loss of a batch without gradients, update
// or dropout, as torch's eval() and no_grad() do. The training step's
// program already computes that loss first, so the section is a slice of
// it: walking the instructions backwards from the loss output, an
// instruction is kept when it writes bytes a kept instruction later reads
// (byte ranges per memory space and slot, so views and arena reuse count),
// and the reads of a kept instruction become needed in turn. Each wait of
// a kept asynchronous collective is kept too. The slice shares everything
// with the step: parameters (ZeRO-3 gathers them as the forward does),
// arena offsets, the data-parallel average of the loss. Dropout becomes a
// copy. Its arena peak is the highest arena byte it writes, never above
// the step's (a subset of its writes at the same offsets).
//
// Refused, with the reason in the plan: no loss, a pipeline, a slice that
// would write parameter storage or run an update or backward kernel, and
// training-mode BatchNormalization (eval would use the batch's statistics,
// torch's eval() the running ones).
//
//===----------------------------------------------------------------------===//

#include "PlanWriterImpl.h"

#include "ds/Support/KernelKinds.h"

#include <algorithm>
#include <set>

namespace pb = ::ds::plan;

namespace mlir::ds::plan_writer {
namespace {

/// Bytes [begin, end) of one memory space's slot.
struct Range {
  int space;
  uint32_t slot;
  uint64_t begin, end;
  bool overlaps(const Range &o) const {
    return space == o.space && slot == o.slot && begin < o.end &&
           o.begin < end;
  }
};

/// `ranges` without the bytes of `cut`.
std::vector<Range> subtract(const std::vector<Range> &ranges, const Range &cut) {
  std::vector<Range> rest;
  for (const Range &r : ranges) {
    if (!r.overlaps(cut)) {
      rest.push_back(r);
      continue;
    }
    if (r.begin < cut.begin)
      rest.push_back({r.space, r.slot, r.begin, cut.begin});
    if (cut.end < r.end)
      rest.push_back({r.space, r.slot, cut.end, r.end});
  }
  return rest;
}

Range rangeOf(const pb::Plan &p, uint32_t id) {
  const pb::Buffer &b = p.buffers(id);
  bool slotted = b.space() != pb::ARENA && b.space() != pb::HOST_ARENA;
  return {b.space(), slotted ? b.slot() : 0u, b.offset(),
          b.offset() + std::max<uint64_t>(1, b.bytes())};
}

/// The indices of the instructions the loss output depends on, in order;
/// empty with `why` set when the slice cannot be an evaluation.
std::vector<int> lossSlice(const pb::Plan &p, uint32_t lossBuffer,
                           std::string &why) {
  const pb::Program &prog = p.programs(0);
  std::vector<Range> needed = {rangeOf(p, lossBuffer)};
  std::vector<int> kept;
  for (int i = prog.instructions_size() - 1; i >= 0; --i) {
    const pb::Instruction &ins = prog.instructions(i);
    std::vector<Range> outs;
    for (uint32_t id : ins.outputs())
      outs.push_back(rangeOf(p, id));
    bool writesNeeded = llvm::any_of(outs, [&](const Range &o) {
      return llvm::any_of(needed, [&](const Range &n) { return o.overlaps(n); });
    });
    if (!writesNeeded)
      continue;
    if (ins.phase() == pb::PHASE_BACKWARD ||
        ins.phase() == pb::PHASE_OPTIMIZER) {
      why = "the loss depends on instruction " + std::to_string(i) + " (" +
            ins.kernel() + "), which is not part of the forward";
      return {};
    }
    for (const Range &o : outs)
      if (o.space == pb::PARAM) {
        why = "computing the loss writes parameter storage (instruction " +
              std::to_string(i) + ", " + ins.kernel() + ")";
        return {};
      }
    kept.push_back(i);
    // The bytes it writes are no longer needed from earlier writers.
    for (const Range &o : outs)
      needed = subtract(needed, o);
    for (uint32_t id : ins.inputs())
      needed.push_back(rangeOf(p, id));
  }
  std::reverse(kept.begin(), kept.end());
  // The waits of the kept asynchronous collectives.
  std::set<uint32_t> started;
  for (int i : kept)
    if (prog.instructions(i).async())
      started.insert(prog.instructions(i).outputs().begin(),
                     prog.instructions(i).outputs().end());
  std::set<int> all(kept.begin(), kept.end());
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const pb::Instruction &ins = prog.instructions(i);
    if (ins.kind() == pb::KIND_WAIT &&
        llvm::any_of(ins.inputs(), [&](uint32_t id) {
          return started.count(id) != 0;
        }))
      all.insert(i);
  }
  return std::vector<int>(all.begin(), all.end());
}

} // namespace

void addEvalSection(ModuleOp module, pb::Plan &p) {
  if (p.loss().empty()) {
    p.set_eval_refused("the plan has no loss");
    return;
  }
  if (p.pipeline().stages() > 1) {
    p.set_eval_refused("evaluation under pipeline parallelism is not "
                       "supported yet");
    return;
  }
  if (module->hasAttr("ds.batch_statistics")) {
    p.set_eval_refused(
        "the model has training-mode BatchNormalization: evaluation would "
        "normalize with the batch's statistics, torch's eval() uses the "
        "running ones (not supported yet)");
    return;
  }
  const pb::Value *loss = nullptr;
  for (const pb::Value &v : p.outputs())
    if (v.name() == p.loss())
      loss = &v;
  if (!loss) {
    p.set_eval_refused("the loss '" + p.loss() + "' is not a plan output");
    return;
  }
  std::string why;
  std::vector<int> slice = lossSlice(p, loss->buffer(), why);
  if (slice.empty()) {
    p.set_eval_refused(why.empty() ? "no instruction computes the loss" : why);
    return;
  }
  const pb::Program &prog = p.programs(0);
  pb::Program *eval = p.mutable_eval();
  eval->set_name("eval");
  uint64_t arena = 0, host = 0;
  for (int i : slice) {
    pb::Instruction *ins = eval->add_instructions();
    *ins = prog.instructions(i);
    if (ins->kind() == pb::KIND_DROPOUT) {
      // torch's eval(): the identity (the mask output is not read).
      ins->set_kernel("copy");
      ins->set_kind(pb::KIND_COPY);
      ins->clear_attributes();
      ins->mutable_outputs()->Truncate(1);
      ins->mutable_inputs()->Truncate(1);
    }
    for (uint32_t id : ins->outputs()) {
      const pb::Buffer &b = p.buffers(id);
      if (b.space() == pb::ARENA)
        arena = std::max<uint64_t>(arena, b.offset() + b.bytes());
      if (b.space() == pb::HOST_ARENA)
        host = std::max<uint64_t>(host, b.offset() + b.bytes());
    }
  }
  eval->set_arena_bytes(arena);
  eval->set_host_arena_bytes(host);
}

std::string evalReportLine(const pb::Plan &p) {
  if (p.eval().instructions_size() == 0)
    return "  eval section: none (" + p.eval_refused() + ")\n";
  return "  eval section: " + std::to_string(p.eval().instructions_size()) +
         " instructions, arena peak " + std::to_string(p.eval().arena_bytes()) +
         " bytes (in the step's arena of " +
         std::to_string(p.programs(0).arena_bytes()) + ")\n";
}

} // namespace mlir::ds::plan_writer
