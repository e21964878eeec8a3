//===- Kernel.h - the kernel protocol of every backend ----------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM, no CUDA types).
//
// One signature and one registration protocol for the CPU and the CUDA
// kernels. A kernel is a `KernelFn` over a `KernelContext` (the
// instruction's operands as views, its attributes, the executor's state).
// Every kernel id of a plan has one operand signature (`kernelSignature`,
// what the loader checks); each backend fills a `KernelRegistry`, one
// `register<Family>Kernels(KernelRegistry &)` per family file, and the
// executor finds a kernel by its id in the registry of the backend it runs.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_KERNEL_H
#define DS_RUNTIME_KERNEL_H

#include "ds/Runtime/Runtime.h"
#include "ds/Runtime/Schedule.h"

#include <cmath>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace ds::plan {
class Instruction;
}

namespace ds::rt {

class Communicator;

/// A kernel operand: storage owned by the executor (host or device memory,
/// as the backend).
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// The instruction's attributes.
class Attrs {
public:
  explicit Attrs(const plan::Instruction *ins) : ins(ins) {}
  bool has(const char *name) const;
  int64_t getInt(const char *name, int64_t dflt = 0) const;
  double getFloat(const char *name, double dflt = 0) const;
  std::string getString(const char *name, const std::string &dflt = "") const;
  std::vector<int64_t> getInts(const char *name) const;
  std::vector<double> getFloats(const char *name) const;

private:
  const plan::Instruction *ins;
};

struct KernelContext {
  std::vector<TensorView> in, out;
  Attrs attrs;
  uint64_t seed = 0; // for random kernels: differs per instruction and run
  std::string error; // set by a kernel that fails
  double lr = NAN;   // learning-rate override (ds-run --lr); NaN: the plan's
  Communicator *comm = nullptr; // for collective kernels
  /// Collectives in flight (async kernels), by their output's address: the
  /// "wait" kernel finishes the one whose output it reads last.
  std::map<const void *, int> *inflight = nullptr;
  /// The step's loss-scaler state: check_overflow sets `overflow` (and,
  /// with `inject`, first turns one gradient element into inf); the
  /// optimizer kernels then keep parameters and state.
  struct StepState {
    bool overflow = false;
    bool inject = false;
  } *step = nullptr;
  /// Pipeline parallelism: every rank, the ranks per stage (a peer stage's
  /// rank is this one plus a multiple of it) and the micro-batch running.
  Communicator *pipe = nullptr;
  int pipeStride = 0;
  int micro = 0;
  int64_t freezeStep = -2; // ds-run's freeze_step auto (freezeStepOf)
  bool fail(const std::string &message) {
    error = message;
    return false;
  }
};

/// The learning rate of step `t` for an optimizer kernel: the plan's (or
/// ds-run --lr's, or the Python engine's) through the plan's schedule.
inline double stepLr(const KernelContext &ctx, int64_t t) {
  double base = std::isnan(ctx.lr) ? ctx.attrs.getFloat("lr", 1e-3) : ctx.lr;
  return ds::scheduledLr(ctx.attrs.getString("schedule", "constant"), base, t,
                         ctx.attrs.getInt("warmup_steps", 0),
                         ctx.attrs.getInt("total_steps", 0),
                         ctx.attrs.getFloat("min_lr", 0.0));
}

/// 1-bit Adam's last warm-up step: the plan's `freeze_step`, or with
/// `freeze_auto` the step ds-run decided (docs/compression.md; undecided:
/// none yet). False with the error set where nothing decides.
inline bool freezeStepOf(KernelContext &ctx, int64_t &freeze) {
  freeze = ctx.attrs.getInt("freeze_step", 100000);
  if (!ctx.attrs.getInt("freeze_auto", 0))
    return true;
  if (ctx.freezeStep < -1)
    return ctx.fail("freeze_step auto is decided by ds-run's training loop; "
                    "this run has none (compile with a freeze step)");
  if (ctx.freezeStep >= 0)
    freeze = ctx.freezeStep;
  return true;
}

/// Every kernel of every backend: true on success, else false with
/// `ctx.error` set.
using KernelFn = bool (*)(KernelContext &ctx);

/// A kernel id and the operand counts any implementation of it accepts.
struct KernelSignature {
  const char *name;
  int minIn, maxIn, minOut, maxOut;
};

/// The signature of kernel id `name`, or null when no kernel has that id.
const KernelSignature *kernelSignature(const std::string &name);

/// One backend's implementation of a kernel id.
struct KernelInfo : KernelSignature {
  KernelFn fn;
};

/// One backend's kernels by id, in registration order. Filled once (by the
/// backend's family files) before the first lookup; entries never move.
class KernelRegistry {
public:
  /// A family file's registration function.
  using Family = void (*)(KernelRegistry &);
  /// The registry that `families` fill, in turn.
  static KernelRegistry of(std::initializer_list<Family> families);
  /// Registers `fn` as kernel `name`, with the id's signature. An id
  /// without a signature, or registered twice, is a bug of the backend:
  /// it aborts naming the id.
  void add(const char *name, KernelFn fn);
  /// The kernel of id `name`, or null when this backend has none.
  const KernelInfo *find(const std::string &name) const;
  std::vector<std::string> names() const;
  size_t size() const { return kernels.size(); }

private:
  std::vector<KernelInfo> kernels;
};

} // namespace ds::rt

#endif // DS_RUNTIME_KERNEL_H
