//===- KernelKinds.cpp - the kernels of plan.bin and their facts ----------===//
//
// Part of the ds project (no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/KernelKinds.h"

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

plan::Phase defaultPhase(plan::Kind kind, plan::Phase section) {
  const KernelFacts *k = kernelFacts(kind);
  if (!k)
    return plan::PHASE_UNSPECIFIED;
  return k->phase == plan::PHASE_FORWARD ? section : k->phase;
}

plan::Group groupOf(int64_t group) {
  return group == 1    ? plan::GROUP_TENSOR
         : group == -1 ? plan::GROUP_WORLD
         : group == 2  ? plan::GROUP_NODE
                       : plan::GROUP_DATA;
}

int groupRanks(plan::Group group, int dataParallel, int tensorParallel,
               int nodeRanks) {
  switch (group) {
  case plan::GROUP_NODE: return nodeRanks > 0 ? nodeRanks : dataParallel;
  case plan::GROUP_TENSOR:
  case plan::GROUP_SEQUENCE: return tensorParallel;
  case plan::GROUP_WORLD: return dataParallel * tensorParallel;
  case plan::GROUP_PIPELINE: return 2; // a stage and its neighbour
  default: return dataParallel;
  }
}

} // namespace ds
