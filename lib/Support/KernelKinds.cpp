//===- KernelKinds.cpp - the kernels of plan.bin and their facts ----------===//
//
// Part of the ds project (no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/KernelKinds.h"

#include <algorithm>
#include <unordered_map>

namespace ds {

const std::vector<KernelFacts> &kernelTable() {
  static const std::vector<KernelFacts> table = {
#define DS_KERNEL(Id, Name, Family, Phase, Comm, Flops, Factor)               \
  {plan::KIND_##Id,          Name,                                             \
   KernelFamily::Family,     plan::PHASE_##Phase,                              \
   plan::COLLECTIVE_##Comm, FlopRule::Flops,                         \
   Factor},
#include "ds/Support/KernelKinds.def"
  };
  return table;
}

namespace {
/// Kind value -> its row, and name -> kind.
struct Index {
  std::vector<const KernelFacts *> byKind;
  std::unordered_map<std::string, plan::Kind> byName;
  Index() {
    for (const KernelFacts &k : kernelTable()) {
      size_t v = static_cast<size_t>(k.kind);
      if (byKind.size() <= v)
        byKind.resize(v + 1, nullptr);
      byKind[v] = &k;
      byName.emplace(k.name, k.kind);
    }
  }
};
const Index &index() {
  static const Index i;
  return i;
}
} // namespace

const KernelFacts *kernelFacts(plan::Kind kind) {
  size_t v = static_cast<size_t>(kind);
  const Index &i = index();
  return v < i.byKind.size() ? i.byKind[v] : nullptr;
}

plan::Kind kindOf(const std::string &name) {
  const Index &i = index();
  auto it = i.byName.find(name);
  return it == i.byName.end() ? plan::KIND_UNSPECIFIED : it->second;
}

const char *kernelName(plan::Kind kind) {
  const KernelFacts *k = kernelFacts(kind);
  return k ? k->name : "";
}

KernelFamily kernelFamily(plan::Kind kind) {
  const KernelFacts *k = kernelFacts(kind);
  return k ? k->family : KernelFamily::Elementwise;
}

plan::Phase defaultPhase(plan::Kind kind, bool afterBackwardStart) {
  const KernelFacts *k = kernelFacts(kind);
  if (!k)
    return plan::PHASE_UNSPECIFIED;
  if (k->phase == plan::PHASE_FORWARD && afterBackwardStart)
    return plan::PHASE_BACKWARD;
  return k->phase;
}

plan::Group groupOf(int64_t group) {
  return group == 1    ? plan::GROUP_TENSOR
         : group == -1 ? plan::GROUP_WORLD
                       : plan::GROUP_DATA;
}

int groupRanks(plan::Group group, int dataParallel, int tensorParallel) {
  switch (group) {
  case plan::GROUP_TENSOR:
  case plan::GROUP_SEQUENCE: return tensorParallel;
  case plan::GROUP_WORLD: return dataParallel * tensorParallel;
  case plan::GROUP_PIPELINE: return 2; // a stage and its neighbour
  default: return dataParallel;
  }
}

namespace {
double numel(const plan::Buffer &b) {
  double n = 1;
  for (int64_t d : b.shape())
    n *= static_cast<double>(d);
  return n;
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
    double kdim = static_cast<double>(
        ins.trans_a() && r >= 2 ? a->shape(r - 2) : a->shape(r - 1));
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

} // namespace ds
