//===- ExecutorDispatch.cpp - running a plan's instructions --------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Each instruction's buffers are bound to views and its kernel (resolved
// once at creation) called; random kernels draw from the run's seed and
// their ONNX node. A run is the whole program, or with pipeline
// parallelism a micro-batch's forward, backward or update section. With
// the NaN guard every rank checks the loss as soon as it is computed.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"
#include "ds/Support/PlanFormat.h"

#include <chrono>
#include <cmath>
#include <cstring>

namespace ds::rt {

namespace {

double millisecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

/// The seed of run `runIndex` (0-based).
uint64_t runSeedOf(uint64_t runIndex, uint64_t seed) {
  return fnv1a64(&runIndex, sizeof(runIndex), 0xcbf29ce484222325ULL ^ seed);
}

/// "instruction 12 (matmul, node '/h.0/...')".
std::string instructionName(int i, const plan::Instruction &ins) {
  return "instruction " + std::to_string(i) + " (" + ins.kernel() +
         (ins.location().empty() ? "" : ", node '" + ins.location() + "'") +
         ")";
}

} // namespace

void Executor::Impl::setStepInput(uint64_t runIndex) {
  // A training plan's step counter (1 on the first run) feeds the optimizer.
  for (int i = 0; i < p().inputs_size(); ++i) {
    if (p().inputs(i).name() != "ds.step")
      continue;
    HostTensor step;
    step.dtype = DType::I64;
    int64_t value = static_cast<int64_t>(runIndex - skipped) + 1;
    step.data.resize(8);
    std::memcpy(step.data.data(), &value, 8);
    inputs[i] = std::move(step);
    inputSet[i] = true;
  }
}

bool Executor::Impl::checkInputsSet(std::string &err) const {
  for (int i = 0; i < p().inputs_size(); ++i)
    if (!inputSet[i]) {
      err = "input '" + p().inputs(i).name() + "' was not given";
      return false;
    }
  return true;
}

bool Executor::run(RunStats &stats, std::string &err) {
  Impl &im = *impl;
  const plan::Plan &p = im.p();
  im.setStepInput(im.runs);
  if (!im.checkInputsSet(err))
    return false;
  // A host copy of the NVMe state (a checkpoint read it) is stale once the
  // step runs: written back if a resume changed it, then freed.
  if (im.nvmeShadow && !im.pushShadow(err))
    return false;
  if (!im.bindForRun(err))
    return false;
  stats.arenaPlanned = p.programs(0).arena_bytes();
  stats.arenaHighWater = im.arenaHighWater;
  stats.hostArenaPlanned = p.programs(0).host_arena_bytes();
  stats.hostArenaHighWater = im.hostArenaHighWater;
  stats.toHostBytes = stats.toDeviceBytes = 0;
  stats.nvmeReadBytes = stats.nvmeWriteBytes = 0;
  auto t0 = std::chrono::steady_clock::now();
  uint64_t runSeed = runSeedOf(im.runs, im.options.seed);
  im.lastRunSeed = runSeed;
  // This run's place in the gradient-accumulation window.
  bool windowEnd = (im.runs - im.skipped) % im.accum == im.accum - 1;
  ++im.runs;
  im.stepState = {};
  im.stepState.overflow = im.windowOverflow; // an earlier micro-batch's
  for (uint64_t r : im.options.injectOverflow)
    im.stepState.inject |= r == im.runs;
  stats.nanLoss = false;
  stats.firstNan.clear();
  if (!im.runInstructions(0, p.programs(0).instructions_size(), runSeed, false,
                          stats, err))
    return false;
  if (stats.nanLoss) {
    // Stopped before any update: drain what is in flight; the run counts
    // as skipped (the optimizer's step counter does not move).
    if (!im.drain(err))
      return false;
    ++im.skipped;
    stats.milliseconds = millisecondsSince(t0);
    return true;
  }
  if (im.device && !(im.device->synchronize(err) && im.dropCopies(err))) {
    err = "the step failed on " + im.device->describe() + ": " + err;
    return false;
  }
  if (im.nvme && !im.nvme->waitAll(err))
    return false;
  // An overflow skips the whole step: its runs do not count for the step
  // input (the optimizer's update count), as DeepSpeed's skipped step.
  if (windowEnd && im.stepState.overflow)
    im.skipped += im.accum;
  im.windowOverflow = !windowEnd && im.stepState.overflow;
  if (im.inflightCount() != 0) {
    err = "the plan started " + std::to_string(im.inflightCount()) +
          " collective(s) it never waited for";
    return false;
  }
  stats.milliseconds = millisecondsSince(t0);
  return true;
}

bool Executor::Impl::bindForRun(std::string &err) {
  bindBuffers();
  if (!device)
    return true;
  hostBufferPtr.resize(p().buffers_size());
  for (int i = 0; i < p().buffers_size(); ++i)
    hostBufferPtr[i] = pointer(p().buffers(i), true);
  for (int i = 0; i < p().inputs_size(); ++i) {
    const HostTensor &t = inputs[i];
    if (!t.data.empty() &&
        !device->toDevice(deviceInputs[i]->ptr, t.data.data(), t.data.size(),
                          err))
      return false;
  }
  return true;
}

bool Executor::runSection(bool forward, int micro, uint64_t runIndex,
                          RunStats &stats, std::string &err,
                          bool deferUpdate) {
  Impl &im = *impl;
  if (im.backwardStart < 0) {
    err = "the plan is not a pipeline stage";
    return false;
  }
  if (im.deferred >= 0) {
    err = "a section ran before the deferred update of micro-batch " +
          std::to_string(im.deferred);
    return false;
  }
  if (deferUpdate && (forward || im.updateStart <= 0)) {
    err = "only a backward section with an update section can defer it";
    return false;
  }
  const plan::Program &prog = im.p().programs(0);
  auto t0 = std::chrono::steady_clock::now();
  stats.nanLoss = false;
  stats.firstNan.clear();
  if (forward) {
    // The micro-batch still in the arena keeps its forward state aside.
    if (im.arenaHolds >= 0)
      im.saveStash(im.arenaHolds);
    im.arenaHolds = -1;
    im.setStepInput(runIndex);
    if (!im.checkInputsSet(err))
      return false;
    Impl::Stashed &st = im.stash[micro];
    st = Impl::Stashed();
    st.inputs = im.inputs;
    st.seed = runSeedOf(runIndex, im.options.seed);
    im.stepState = {};
  } else {
    auto it = im.stash.find(micro);
    if (it == im.stash.end()) {
      err = "the backward of micro-batch " + std::to_string(micro) +
            " comes before its forward";
      return false;
    }
    if (im.arenaHolds != micro) {
      if (im.arenaHolds >= 0)
        im.saveStash(im.arenaHolds);
      im.restoreStash(micro);
    }
    im.inputs = it->second.inputs;
  }
  Impl::Stashed &st = im.stash[micro];
  im.bindBuffers();
  stats.arenaPlanned = prog.arena_bytes();
  stats.arenaHighWater = im.arenaHighWater;
  stats.hostArenaPlanned = prog.host_arena_bytes();
  stats.hostArenaHighWater = im.hostArenaHighWater;
  im.micro = micro;
  im.lastRunSeed = st.seed;
  int from = forward ? 0 : im.backwardStart;
  // A plan summing its gradients over the micro-batches updates once per
  // step: the update section runs for the last micro-batch only.
  int to = forward                        ? im.backwardStart
           : deferUpdate || im.updateOnce ? im.updateStart
                                          : prog.instructions_size();
  if (!im.runInstructions(from, to, st.seed, false, stats, err))
    return false;
  if (stats.nanLoss)
    return im.drain(err);
  if (im.inflightCount() != 0) {
    err = "the plan left " + std::to_string(im.inflightCount()) +
          " collective(s) in flight at the end of a pipeline section";
    return false;
  }
  im.arenaHolds = forward ? micro : -1;
  if (!forward && deferUpdate)
    im.deferred = micro; // the arena keeps the gradients for the update
  else if (!forward)
    im.endMicroBatch(micro);
  stats.milliseconds = millisecondsSince(t0);
  return true;
}

bool Executor::runDeferredUpdate(RunStats &stats, std::string &err) {
  Impl &im = *impl;
  if (im.deferred < 0)
    return true;
  int micro = im.deferred;
  im.deferred = -1;
  auto t0 = std::chrono::steady_clock::now();
  Impl::Stashed &st = im.stash[micro];
  im.inputs = st.inputs;
  im.bindBuffers();
  im.micro = micro;
  if (!im.runInstructions(im.updateStart,
                          im.p().programs(0).instructions_size(), st.seed,
                          false, stats, err))
    return false;
  if (im.inflightCount() != 0) {
    err = "the plan left " + std::to_string(im.inflightCount()) +
          " collective(s) in flight after an update";
    return false;
  }
  im.endMicroBatch(micro);
  stats.milliseconds = millisecondsSince(t0);
  return true;
}

uint64_t Executor::stashHighWater() const { return impl->stashHigh; }

bool Executor::scanForNan(RunStats &stats, std::string &err) {
  stats.firstNan.clear();
  int end = impl->lossInstruction >= 0
                ? impl->lossInstruction + 1
                : impl->p().programs(0).instructions_size();
  bool guard = impl->options.nanGuard;
  impl->options.nanGuard = false;
  bool ok = impl->runInstructions(0, end, impl->lastRunSeed, true, stats, err) &&
            impl->drain(err);
  impl->options.nanGuard = guard;
  return ok;
}

KernelContext Executor::Impl::contextOf(int i, uint64_t runSeed) {
  const plan::Instruction &ins = program().instructions(i);
  KernelContext ctx{{}, {}, Attrs(&ins), 0, {}, NAN, nullptr};
  // On the CUDA backend a host instruction reads host copies.
  const std::vector<void *> &ptrs =
      device && ins.on_host() ? hostBufferPtr : bufferPtr;
  auto view = [&](uint32_t id) {
    const plan::Buffer &b = p().buffers(id);
    TensorView v;
    v.data = ptrs[id];
    v.dtype = toDType(b.dtype());
    v.shape.assign(b.shape().begin(), b.shape().end());
    return v;
  };
  for (uint32_t id : ins.inputs())
    ctx.in.push_back(view(id));
  for (uint32_t id : ins.outputs())
    ctx.out.push_back(view(id));
  // Random kernels draw from the run and their ONNX node, so that plans
  // that differ elsewhere (ZeRO's collectives, another world size, a
  // recomputed copy of the node) draw the same numbers.
  ctx.seed = runSeed ^ (ins.location().empty()
                            ? static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL
                            : fnv1a64(ins.location().data(),
                                      ins.location().size()));
  ctx.lr = options.lr;
  ctx.freezeStep = options.freezeStep;
  int g = groupOf(ctx.attrs);
  ctx.comm = group(g);
  ctx.inflight = &inflight[g + 1];
  ctx.step = &stepState;
  ctx.pipe = options.pipe;
  ctx.pipeStride = options.pipeStride;
  ctx.micro = micro;
  return ctx;
}

bool Executor::Impl::runInstruction(int i, KernelContext &ctx, RunStats &stats,
                                    std::string &err) {
  const plan::Instruction &ins = program().instructions(i);
  // Wait for the NVMe I/O and device copies whose bytes this instruction
  // touches; a transfer starts its own.
  if (!awaitNvme(ctx, err))
    return false;
  bool nvmeIo = isNvmeTransfer(ins);
  if (!awaitCopies(ins, ctx, nvmeIo, err))
    return false;
  bool handled = false;
  if (isTransfer(ins) && !startTransfer(ins, ctx, nvmeIo, stats, handled, err))
    return false;
  if (!handled && !kernelAt(i)->fn(ctx)) {
    err = instructionName(i, ins) + ": " + ctx.error;
    return false;
  }
  progressCollectives();
  return true;
}

void Executor::Impl::recordProfile(int i, const plan::Instruction &ins,
                                   const KernelContext &ctx, double ms,
                                   RunStats &stats) {
  // Per phase, instruction and collective call (the monitors').
  int phase = static_cast<int>(ins.phase());
  stats.phaseMilliseconds[phase >= 0 && phase < 6 ? phase : 0] += ms;
  if (stats.instructionMilliseconds.size() <= static_cast<size_t>(i))
    stats.instructionMilliseconds.resize(i + 1, 0.0);
  stats.instructionMilliseconds[i] += ms;
  for (const plan::Collective &c : ins.collectives())
    stats.collectiveCalls.push_back({static_cast<int>(c.kind()), c.bytes(),
                                     ms / ins.collectives_size(), i});
  auto &entry = stats.kernelTimes[ins.kernel()];
  entry.milliseconds += ms;
  entry.calls += 1;
  if (ins.kind() == plan::KIND_FUSED_ATTENTION ||
      ins.kind() == plan::KIND_FUSED_ATTENTION_GRAD) {
    // Several GEMMs per head: the cost model's count (the whole T x T
    // products; the masked tiles the kernels skip are not subtracted).
    entry.flops += static_cast<double>(ins.flops());
  } else if (isGemm(ins)) {
    // 2*M*N*K: every result element is a K-long dot product.
    const TensorView &a = ctx.in[0];
    bool transA = ctx.attrs.getInt("trans_a", 0) && a.rank() >= 2;
    int64_t k = transA ? a.shape[a.rank() - 2] : a.shape.back();
    std::vector<int64_t> permA = ctx.attrs.getInts("perm_a");
    if (static_cast<int64_t>(permA.size()) == a.rank() && permA.back() >= 0 &&
        permA.back() < a.rank()) // --ds-fold-transpose
      k = a.shape[permA.back()];
    entry.flops += 2.0 * static_cast<double>(ctx.out[0].numel()) * k;
  }
}

bool Executor::Impl::runInstructions(int from, int to, uint64_t runSeed,
                                     bool scan, RunStats &stats,
                                     std::string &err) {
  // What the groups' collectives moved counts on the world's counter.
  struct Collect {
    Impl *impl;
    ~Collect() { impl->collectBytes(); }
  } collect{this};
  const plan::Program &prog = program();
  for (int i = from; i < to; ++i) {
    KernelContext ctx = contextOf(i, runSeed);
    auto k0 = std::chrono::steady_clock::now();
    if (!runInstruction(i, ctx, stats, err))
      return false;
    if (device && options.profile && !device->synchronize(err))
      return false;
    if (options.profile)
      recordProfile(i, prog.instructions(i), ctx, millisecondsSince(k0), stats);
    // Scanning goes on to the end (other ranks run the same collectives).
    if (scan && stats.firstNan.empty() &&
        !firstNonFinite(i, ctx, stats.firstNan, err))
      return false;
    if (i == lossInstruction && options.nanGuard && !evalRunning) {
      bool bad = false;
      if (!lossNotFinite(ctx, bad, err))
        return false;
      if (bad) {
        stats.nanLoss = true;
        return true;
      }
    }
  }
  return true;
}

bool Executor::Impl::lossNotFinite(const KernelContext &ctx, bool &bad,
                                   std::string &err) {
  // Every rank checks its local loss; all stop if one is not finite.
  if (!lossIsBad(ctx.out[0], bad, err))
    return false;
  float flag = bad ? 1.0f : 0.0f;
  if (options.comm && options.comm->size() > 1 &&
      !options.comm->allReduce(&flag, 1, DType::F32, false, err))
    return false;
  bad = flag > 0.0f;
  return true;
}

bool Executor::Impl::lossIsBad(const TensorView &loss, bool &bad,
                               std::string &err) {
  unsigned char v[8] = {};
  size_t bytes = dtypeSize(loss.dtype);
  if (device) {
    if (!device->toHost(v, loss.data, bytes, err))
      return false;
  } else {
    std::memcpy(v, loss.data, bytes);
  }
  bad = !std::isfinite(loadD(v, loss.dtype, 0));
  return true;
}

bool Executor::Impl::firstNonFinite(int i, const KernelContext &ctx,
                                    std::string &found, std::string &err) {
  const plan::Instruction &ins = program().instructions(i);
  for (size_t o = 0; o < ctx.out.size() && found.empty(); ++o) {
    const TensorView &t = ctx.out[o];
    if (!isFloat(t.dtype))
      continue;
    std::vector<unsigned char> host;
    const void *data = t.data;
    if (device) {
      host.resize(t.numel() * dtypeSize(t.dtype));
      if (!host.empty() && !device->toHost(host.data(), t.data, host.size(), err))
        return false;
      data = host.data();
    }
    for (int64_t e = 0; e < t.numel(); ++e) {
      double v = loadD(data, t.dtype, e);
      if (std::isfinite(v))
        continue;
      HostTensor spec;
      spec.shape = t.shape;
      found = instructionName(i, ins) + ": result " + std::to_string(o) +
              " of shape " + spec.shapeString() + " holds " +
              (std::isnan(v) ? "NaN" : "inf") + " at element " +
              std::to_string(e);
      break;
    }
  }
  return true;
}

} // namespace ds::rt
