//===- KernelKinds.h - the kernels of plan.bin and their facts --*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// One table (KernelKinds.def) maps each kernel the runtime knows to its
// plan.proto `Kind`, its name and the facts the compiler's writer and the
// plan's readers share: its family, the phase it runs in by default, the
// collective it is and the cost model's FLOPs rule. Readers of a plan
// switch on an instruction's kind and read its typed fields; none matches
// kernel or attribute names.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_KERNELKINDS_H
#define DS_SUPPORT_KERNELKINDS_H

#include "plan.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ds {

/// What a kernel does.
enum class KernelFamily {
  Elementwise,
  MatMul,
  Normalization,
  Loss,
  Movement,
  Transfer,
  Reduction,
  Gradient,
  LossGrad, // the loss's gradient: the backward pass starts with it
  Optimizer,
  Collective,
  Wait,
  Pipeline,
};

/// How the cost model counts a kernel's FLOPs when the compiler does not.
enum class FlopRule { PerOutput, PerInput, MatMul, None };

struct KernelFacts {
  plan::Kind kind;
  const char *name;
  KernelFamily family;
  plan::Phase phase;         // the default phase
  plan::CollectiveKind comm; // COLLECTIVE_NONE: not a collective
  FlopRule flops;
  int flopFactor;
};

/// Every kernel of the table, in its order.
const std::vector<KernelFacts> &kernelTable();

/// The facts of `kind`; null for KIND_UNSPECIFIED and unknown values.
const KernelFacts *kernelFacts(plan::Kind kind);

/// The kind of the kernel named `name`; KIND_UNSPECIFIED if none.
plan::Kind kindOf(const std::string &name);

/// The name of `kind`'s kernel ("" for KIND_UNSPECIFIED or an unknown one).
const char *kernelName(plan::Kind kind);

KernelFamily kernelFamily(plan::Kind kind);

/// A collective kernel (all-reduce, all-gather, reduce-scatter and their
/// sequence-parallel forms): it runs on the communication stream.
inline bool isCollective(plan::Kind kind) {
  return kernelFamily(kind) == KernelFamily::Collective;
}
/// An offload transfer (device, host, NVMe): only it crosses memories.
inline bool isTransfer(plan::Kind kind) { return kind == plan::KIND_TRANSFER; }
inline bool isMatMul(plan::Kind kind) {
  return kernelFamily(kind) == KernelFamily::MatMul;
}
inline bool isOptimizer(plan::Kind kind) {
  return kind == plan::KIND_ADAM || kind == plan::KIND_SGD ||
         kind == plan::KIND_ONEBIT_ADAM || kind == plan::KIND_ONEBIT_ADAM_LOCAL ||
         kind == plan::KIND_ZERO_ONE_ADAM || kind == plan::KIND_ONEBIT_LAMB ||
         kind == plan::KIND_MULTI_ADAM || kind == plan::KIND_MULTI_SGD;
}
/// A multi-tensor optimizer step (ds.multi_adam, ds.multi_sgd): N params,
/// then N gradients, then the states.
inline bool isMultiTensorOptimizer(plan::Kind kind) {
  return kind == plan::KIND_MULTI_ADAM || kind == plan::KIND_MULTI_SGD;
}
/// The optimizer an update kernel of `kind` runs: a multi-tensor step's
/// single-tensor kernel ("adam" for multi_adam), else the kernel's name.
inline const char *optimizerKernelName(plan::Kind kind) {
  return kind == plan::KIND_MULTI_ADAM  ? "adam"
         : kind == plan::KIND_MULTI_SGD ? "sgd"
                                        : kernelName(kind);
}
/// The loss's gradient, where the backward pass starts.
inline bool startsBackward(plan::Kind kind) {
  return kernelFamily(kind) == KernelFamily::LossGrad;
}

/// The phase of `kind` when the compiler does not say: its default; a
/// kernel whose default is forward takes the phase of the section of the
/// step it is in (`section`: forward, backward once the loss's gradient
/// ran, optimizer once an optimizer kernel did).
plan::Phase defaultPhase(plan::Kind kind, plan::Phase section);

/// The group of a kernel's `group` parameter (0 the data-parallel ranks,
/// 1 the tensor-parallel ones, -1 every rank, 2 hpZ's node group).
plan::Group groupOf(int64_t group);

/// Ranks in `group` of a plan of `dataParallel` x `tensorParallel` ranks
/// (hpZ's node group: `nodeRanks`, the plan's hpz_partition_size; 0: not
/// known, counted as the data-parallel ranks).
int groupRanks(plan::Group group, int dataParallel, int tensorParallel,
               int nodeRanks = 0);

} // namespace ds

#endif // DS_SUPPORT_KERNELKINDS_H
