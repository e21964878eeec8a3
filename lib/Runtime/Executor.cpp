//===- Executor.cpp - running a plan ---------------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The arena is allocated once at the planned size; parameters are loaded from
// the plan's weights source after checking its size and hash; each
// instruction's buffers are bound to pointers and its kernel called. The
// executor records the highest arena byte any kernel wrote.
//
// This file creates the executor and binds its inputs; the parts it is
// made of are listed in ExecutorImpl.h.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include <cstring>

namespace ds::rt {

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string HostTensor::shapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool convertTensor(HostTensor &t, DType to, std::string &err) {
  if (t.dtype == to)
    return true;
  bool ok = (isFloat(t.dtype) && isFloat(to)) ||
            ((t.dtype == DType::I64 || t.dtype == DType::I32) &&
             (to == DType::I64 || to == DType::I32));
  if (!ok) {
    err = std::string("cannot convert ") + dtypeName(t.dtype) + " to " +
          dtypeName(to);
    return false;
  }
  std::vector<unsigned char> data(t.numel() * dtypeSize(to));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloat(to))
      storeD(data.data(), to, i, loadD(t.data.data(), t.dtype, i));
    else
      storeI(data.data(), to, i, loadI(t.data.data(), t.dtype, i));
  }
  t.data = std::move(data);
  t.dtype = to;
  return true;
}

Executor::Executor(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
Executor::~Executor() = default;

std::unique_ptr<Executor> Executor::create(std::shared_ptr<const Plan> plan,
                                           const ExecutorOptions &options,
                                           std::string &err) {
  if (plan->proto.programs_size() == 0) {
    err = plan->proto.pipeline().stage_plans_size() > 0
              ? "'" + plan->path + "' is a pipeline of " +
                    std::to_string(plan->proto.pipeline().stages()) +
                    " stages: each rank runs its stage's plan (ds-run "
                    "picks it)"
              : "the plan has no program";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->plan = std::move(plan);
  impl->options = options;
  setThreadCount(options.threads);
  const plan::Plan &p = impl->p();
  if (!impl->allocateArenas(err))
    return nullptr;
  impl->inputs.resize(p.inputs_size());
  impl->inputSet.assign(p.inputs_size(), false);
  for (const plan::Instruction &ins : p.programs(0).instructions()) {
    impl->kernels.push_back(findKernel(ins.kernel()));
    if (ins.optimizer().accum_steps() > 1)
      impl->accum = static_cast<uint64_t>(ins.optimizer().accum_steps());
  }
  if (p.pipeline().stages() > 1) {
    if (options.backend == "cuda") {
      err = "this plan is a pipeline stage, which the CUDA backend does not "
            "run yet; run it with --backend=cpu";
      return nullptr;
    }
    impl->backwardStart = static_cast<int>(p.pipeline().backward_start());
    impl->updateStart = static_cast<int>(p.pipeline().update_start());
    impl->updateOnce = p.pipeline().update_once() && impl->updateStart > 0;
    if (impl->backwardStart <= 0 ||
        impl->backwardStart >= p.programs(0).instructions_size()) {
      err = "the plan's backward section starts at instruction " +
            std::to_string(impl->backwardStart) + ", outside its program";
      return nullptr;
    }
    impl->stashSpans = stashRanges(p, impl->backwardStart);
  }
  impl->findLossInstruction();
  if (!impl->formGroups(err) || !impl->loadWeights(err))
    return nullptr;
  if (options.backend == "cuda" && !impl->openDevice(err))
    return nullptr;
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

bool Executor::setInput(const std::string &name, HostTensor tensor,
                        std::string &err) {
  const plan::Plan &p = impl->p();
  for (int i = 0; i < p.inputs_size(); ++i) {
    if (p.inputs(i).name() != name)
      continue;
    const plan::Buffer &b = p.buffers(p.inputs(i).buffer());
    DType want = toDType(b.dtype());
    std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
    if (tensor.shape != shape) {
      HostTensor spec;
      spec.shape = shape;
      err = "input '" + name + "' has shape " + tensor.shapeString() +
            ", the plan was compiled for " + spec.shapeString();
      return false;
    }
    std::string why;
    if (!convertTensor(tensor, want, why)) {
      err = "input '" + name + "' is " + dtypeName(tensor.dtype) +
            ", the plan expects " + dtypeName(want) + " (" + why + ")";
      return false;
    }
    impl->inputs[i] = std::move(tensor);
    impl->inputSet[i] = true;
    return true;
  }
  std::string names;
  for (const plan::Value &v : p.inputs())
    names += (names.empty() ? "" : ", ") + v.name();
  err = "'" + name + "' is not an input of the plan (inputs: " + names + ")";
  return false;
}

std::vector<std::string> Executor::inputNames() const {
  std::vector<std::string> names;
  for (const plan::Value &v : impl->p().inputs())
    names.push_back(v.name());
  return names;
}

std::vector<std::string> Executor::parameterNames() const {
  std::vector<std::string> names;
  for (const plan::Parameter &param : impl->p().parameters())
    if (!param.state())
      names.push_back(param.name());
  return names;
}

uint64_t Executor::completedRuns() const { return impl->runs; }

void Executor::setLr(double lr) { impl->options.lr = lr; }
void Executor::setFreezeStep(int64_t step) { impl->options.freezeStep = step; }
bool Executor::lastRunOverflowed() const { return impl->stepState.overflow; }
uint64_t Executor::skippedRuns() const { return impl->skipped; }
uint64_t Executor::skippedSteps() const {
  return impl->skipped / impl->accum;
}
void Executor::setSkippedRuns(uint64_t skipped) { impl->skipped = skipped; }
void Executor::setCompletedRuns(uint64_t runs) { impl->runs = runs; }

std::vector<std::string> Executor::outputNames() const {
  std::vector<std::string> names;
  for (const plan::Value &v : impl->p().outputs())
    names.push_back(v.name());
  return names;
}

} // namespace ds::rt
