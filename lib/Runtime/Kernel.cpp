//===- Kernel.cpp - kernel signatures, registries, attributes -------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//===----------------------------------------------------------------------===//

#include "Kernel.h"

#include "plan.pb.h"

#include <cstdio>
#include <cstdlib>

namespace ds::rt {

//===----------------------------------------------------------------------===//
// Signatures
//===----------------------------------------------------------------------===//

// One entry per kernel id the compiler emits (ds op names without `ds.`),
// with the operand counts the loader checks and every backend accepts.
static const KernelSignature kSignatures[] = {
    // Elementwise
    {"add", 2, 2, 1, 1},
    {"sub", 2, 2, 1, 1},
    {"mul", 2, 2, 1, 1},
    {"div", 2, 2, 1, 1},
    {"pow", 2, 2, 1, 1},
    {"max", 2, 2, 1, 1},
    {"min", 2, 2, 1, 1},
    {"equal", 2, 2, 1, 1},
    {"less", 2, 2, 1, 1},
    {"less_or_equal", 2, 2, 1, 1},
    {"greater", 2, 2, 1, 1},
    {"greater_or_equal", 2, 2, 1, 1},
    {"and", 2, 2, 1, 1},
    {"or", 2, 2, 1, 1},
    {"xor", 2, 2, 1, 1},
    {"neg", 1, 1, 1, 1},
    {"abs", 1, 1, 1, 1},
    {"exp", 1, 1, 1, 1},
    {"log", 1, 1, 1, 1},
    {"sqrt", 1, 1, 1, 1},
    {"reciprocal", 1, 1, 1, 1},
    {"erf", 1, 1, 1, 1},
    {"tanh", 1, 1, 1, 1},
    {"relu", 1, 1, 1, 1},
    {"sigmoid", 1, 1, 1, 1},
    {"not", 1, 1, 1, 1},
    {"cast", 1, 1, 1, 1},
    {"where", 3, 3, 1, 1},
    {"dropout", 1, 1, 1, 2},
    {"activation", 1, 1, 1, 1},
    // Linear algebra, normalization, losses (GEMMs: an optional workspace)
    {"matmul", 2, 2, 1, 2},
    {"gemm", 2, 3, 1, 2},
    {"softmax", 1, 1, 1, 1},
    {"log_softmax", 1, 1, 1, 1},
    {"layer_norm", 2, 3, 1, 1},
    {"softmax_cross_entropy_loss", 2, 3, 1, 2},
    {"nll_loss", 2, 3, 1, 1},
    // Movement
    {"gather", 2, 2, 1, 1},
    {"expand", 1, 1, 1, 1},
    {"transpose", 1, 1, 1, 1},
    {"concat", 1, 1 << 20, 1, 1},
    {"split", 1, 1, 1, 1 << 20},
    {"slice", 1, 1, 1, 1},
    {"trilu", 1, 1, 1, 1},
    {"copy", 1, 1, 1, 1},
    {"transfer", 1, 1, 1, 1}, // offload; NVMe ends are the executor's
    {"range", 3, 3, 1, 1},
    {"reshape", 1, 1, 1, 1},
    // Reductions
    {"reduce_sum", 1, 1, 1, 1},
    {"reduce_mean", 1, 1, 1, 1},
    {"reduce_max", 1, 1, 1, 1},
    // Gradients
    {"gather_grad", 2, 2, 1, 1},
    {"layer_norm_grad", 3, 3, 3, 3},
    {"softmax_grad", 2, 2, 1, 1},
    {"activation_grad", 2, 2, 1, 1},
    // Convolution: input, weight and an optional bias; the gradients
    {"conv", 2, 3, 1, 1},
    {"conv_grad_input", 2, 2, 1, 1},
    {"conv_grad_weight", 2, 2, 1, 1},
    {"loss_grad", 3, 4, 1, 1},
    {"slice_grad", 1, 1, 1, 1},
    // Pooling
    {"max_pool", 1, 1, 1, 1},
    {"max_pool_grad", 2, 2, 1, 1},
    {"avg_pool", 1, 1, 1, 1},
    {"avg_pool_grad", 1, 1, 1, 1},
    // Misc family
    {"topk", 1, 1, 2, 2},
    {"topk_grad", 2, 2, 1, 1},
    {"embedding_bag", 3, 4, 1, 1},
    {"embedding_bag_grad", 3, 5, 1, 1},
    // Spatial: resize
    {"resize", 1, 1, 1, 1},
    {"resize_grad", 1, 1, 1, 1},
    // Fusion: a program over any number of inputs (FusedProgram.h)
    {"fused_elementwise", 1, 1 << 20, 1, 1},
    // Speed: fused attention (q, k, v[, mask]) and its gradient
    {"fused_attention", 3, 4, 2, 2},
    {"fused_attention_grad", 6, 7, 3, 3},
    // Tensor and sequence parallelism
    {"vocab_gather", 2, 2, 1, 1},
    {"tp_rows", 1, 1, 1, 1},
    {"sp_all_gather", 1, 1, 1, 1},
    {"sp_reduce_scatter", 1, 1, 1, 1},
    {"vocab_gather_grad", 2, 2, 1, 1},
    {"vocab_cross_entropy", 2, 2, 2, 2},
    {"vocab_cross_entropy_grad", 4, 4, 1, 1},
    // Optimizers (an optional accumulator, then an optional clip coefficient)
    {"adam", 5, 7, 3, 4},
    {"onebit_adam", 7, 7, 5, 5}, // Cpu/OneBitAdam.cpp
    {"onebit_adam_local", 5, 5, 3, 3},
    {"compressed_reduce_scatter", 3, 4, 2, 3},
    {"compressed_all_gather", 4, 4, 2, 2}, // Cpu/CompressedGather.cpp
    {"onebit_quantized_all_gather", 2, 2, 1, 1},
    // ZeRO++ (Cpu/ZeroPP.cpp): the result and the records' workspace
    {"quantized_all_gather", 1, 1, 2, 2},
    {"quantized_reduce_scatter", 1, 1, 2, 2},
    {"zero_one_adam", 9, 9, 7, 7}, // Cpu/ZeroOneAdam.cpp
    {"onebit_lamb", 7, 9, 5, 7},   // Cpu/OneBitLamb.cpp (7, 5: ZeRO 1-3)
    {"sgd", 4, 6, 2, 3},
    {"onnx_update", 5, 6, 2, 3},
    // N parameters, N gradients, N of each state, the step (MultiTensor.cpp)
    {"multi_adam", 5, 1 << 20, 3, 1 << 20},
    {"multi_sgd", 3, 1 << 20, 1, 1 << 20},
    // Collectives and the loss scaler's overflow check
    {"all_reduce", 1, 1, 1, 1},
    {"all_gather", 1, 1, 1, 1},
    {"reduce_scatter", 1, 1, 1, 1},
    {"shard", 1, 1, 1, 1},
    {"wait", 1, 1 << 20, 0, 0},
    {"check_overflow", 1, 1 << 20, 1, 1},
    // Pipeline parallelism
    {"pipe_send", 1, 1, 0, 0},
    {"pipe_recv", 0, 0, 1, 1},
    {"pipe_mark", 0, 0, 0, 0},
    {"tied_grad_sum", 2, 3, 1, 2},
};

const KernelSignature *kernelSignature(const std::string &name) {
  for (const KernelSignature &s : kSignatures)
    if (name == s.name)
      return &s;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Registries
//===----------------------------------------------------------------------===//

KernelRegistry KernelRegistry::of(std::initializer_list<Family> families) {
  KernelRegistry r;
  for (Family f : families)
    f(r);
  return r;
}

void KernelRegistry::add(const char *name, KernelFn fn) {
  const KernelSignature *sig = kernelSignature(name);
  const char *bug = !sig         ? "has no signature"
                    : find(name) ? "is registered twice"
                                 : nullptr;
  if (bug) {
    std::fprintf(stderr, "ds runtime bug: kernel '%s' %s\n", name, bug);
    std::abort();
  }
  KernelInfo k{*sig, fn};
  kernels.push_back(k);
}

const KernelInfo *KernelRegistry::find(const std::string &name) const {
  for (const KernelInfo &k : kernels)
    if (name == k.name)
      return &k;
  return nullptr;
}

std::vector<std::string> KernelRegistry::names() const {
  std::vector<std::string> out;
  for (const KernelInfo &k : kernels)
    out.push_back(k.name);
  return out;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

static const plan::Attribute *find(const plan::Instruction *ins,
                                   const char *name) {
  for (const plan::Attribute &a : ins->attributes())
    if (a.name() == name)
      return &a;
  return nullptr;
}

bool Attrs::has(const char *name) const { return find(ins, name) != nullptr; }

int64_t Attrs::getInt(const char *name, int64_t dflt) const {
  const plan::Attribute *a = find(ins, name);
  if (!a)
    return dflt;
  if (a->value_case() == plan::Attribute::kI)
    return a->i();
  if (a->value_case() == plan::Attribute::kF)
    return static_cast<int64_t>(a->f());
  return dflt;
}

double Attrs::getFloat(const char *name, double dflt) const {
  const plan::Attribute *a = find(ins, name);
  if (!a)
    return dflt;
  if (a->value_case() == plan::Attribute::kF)
    return a->f();
  if (a->value_case() == plan::Attribute::kI)
    return static_cast<double>(a->i());
  return dflt;
}

std::string Attrs::getString(const char *name, const std::string &dflt) const {
  const plan::Attribute *a = find(ins, name);
  return a && a->value_case() == plan::Attribute::kS ? a->s() : dflt;
}

std::vector<int64_t> Attrs::getInts(const char *name) const {
  const plan::Attribute *a = find(ins, name);
  if (!a || a->value_case() != plan::Attribute::kInts)
    return {};
  return {a->ints().values().begin(), a->ints().values().end()};
}

std::vector<double> Attrs::getFloats(const char *name) const {
  const plan::Attribute *a = find(ins, name);
  if (!a || a->value_case() != plan::Attribute::kFloats)
    return {};
  return {a->floats().values().begin(), a->floats().values().end()};
}

} // namespace ds::rt
