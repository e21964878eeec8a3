//===- Session.cpp - a training plan run one step at a time --------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// What ds-run's step loop does for one micro-batch, with the batch given by
// the caller: bind the inputs (and the loss scale of an fp16 plan), run the
// plan's program, read the loss, and on an accumulation boundary let the
// loss scaler see the overflow flag. Checkpoints are Checkpoint.cpp's.
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Session.h"
#include "ds/Runtime/Checkpoint.h"
#include "ds/Runtime/Comm.h"
#include "ds/Runtime/Schedule.h"

#include <algorithm>
#include <cstring>

namespace ds::rt {

std::unique_ptr<Session> Session::open(std::shared_ptr<const Plan> plan,
                                       Communicator &world,
                                       const SessionOptions &options,
                                       std::string &err) {
  if (pipelineStages(*plan) > 1) {
    err = "a pipeline-parallel plan cannot run step by step yet; compile "
          "without --pipeline-parallel or run it with ds-run";
    return nullptr;
  }
  std::unique_ptr<Session> s(new Session());
  s->plan = plan;
  s->planInfo = describe(*plan);
  s->world = &world;
  const PlanInfo &info = s->planInfo;
  if (info.worldSize != world.size()) {
    err = "the plan is compiled for " + std::to_string(info.worldSize) +
          " rank(s); this process runs in a world of " +
          std::to_string(world.size()) +
          " (start it with mpirun -np " + std::to_string(info.worldSize) + ")";
    return nullptr;
  }
  if (info.tensorParallel > 1) {
    err = "a tensor-parallel plan cannot run step by step yet; run it with "
          "ds-run";
    return nullptr;
  }
  if (info.lossScaling && !s->scaler.configure(info.options, err))
    return nullptr;
  ExecutorOptions eo;
  eo.comm = &world;
  eo.threads = options.threads;
  eo.seed = options.seed;
  eo.backend = options.backend;
  eo.lr = options.lr;
  s->exec = Executor::create(plan, eo, err);
  if (!s->exec)
    return nullptr;
  s->baseLr = std::isnan(options.lr) ? info.lr : options.lr;
  for (const auto &[name, spec] : info.inputs)
    if (name != "ds.step" && name != "ds.loss_scale")
      s->specs.push_back({name, spec});
  return s;
}

Session::~Session() = default;

bool Session::setBatch(const std::map<std::string, HostTensor> &inputs,
                       std::string &err) {
  for (const auto &[name, spec] : specs) {
    auto it = inputs.find(name);
    if (it == inputs.end()) {
      err = "the batch has no input '" + name + "'";
      return false;
    }
    if (it->second.shape != spec.shape) {
      err = "input '" + name + "' has shape " + it->second.shapeString() +
            "; the plan takes " + spec.shapeString() + " on each rank";
      return false;
    }
    if (!exec->setInput(name, it->second, err))
      return false;
  }
  for (const auto &given : inputs)
    if (std::none_of(specs.begin(), specs.end(), [&](const auto &s) {
          return s.first == given.first;
        })) {
      err = "the batch's '" + given.first + "' is not an input of the plan";
      return false;
    }
  return true;
}

bool Session::readLoss(double &loss, std::string &err) {
  loss = NAN;
  HostTensor l;
  if (!planInfo.loss.empty() && exec->output(planInfo.loss, l, err) &&
      l.numel() == 1) {
    if (!convertTensor(l, DType::F32, err))
      return false;
    float f;
    std::memcpy(&f, l.data.data(), 4);
    loss = f;
  }
  return true;
}

bool Session::eval(const std::map<std::string, HostTensor> &inputs,
                   double &loss, std::string &err) {
  RunStats stats;
  return setBatch(inputs, err) && exec->runEval(stats, err) &&
         readLoss(loss, err);
}

bool Session::run(const std::map<std::string, HostTensor> &inputs,
                  double &loss, std::string &err) {
  if (!setBatch(inputs, err))
    return false;
  if (planInfo.lossScaling) {
    HostTensor scaleIn;
    scaleIn.dtype = DType::F32;
    scaleIn.data.resize(4);
    float f = static_cast<float>(scaler.scale);
    std::memcpy(scaleIn.data.data(), &f, 4);
    if (!exec->setInput("ds.loss_scale", std::move(scaleIn), err))
      return false;
  }
  RunStats stats;
  if (!exec->run(stats, err))
    return false;
  if (stats.nanLoss) {
    err = "the loss is not finite";
    return false;
  }
  if (!readLoss(loss, err))
    return false;
  if (atBoundary()) {
    skippedLast = planInfo.lossScaling && exec->lastRunOverflowed();
    if (planInfo.lossScaling)
      scaler.update(skippedLast);
  }
  return true;
}

int64_t Session::microSteps() const {
  return static_cast<int64_t>(exec->completedRuns());
}

int64_t Session::globalSteps() const {
  return microSteps() / std::max<int64_t>(1, planInfo.accumSteps);
}

bool Session::atBoundary() const {
  return microSteps() > 0 &&
         microSteps() % std::max<int64_t>(1, planInfo.accumSteps) == 0;
}

double Session::lr() const {
  if (!planInfo.updatesParameters)
    return 0;
  int64_t next = globalSteps() + 1 -
                 static_cast<int64_t>(exec->skippedRuns()) /
                     std::max<int64_t>(1, planInfo.accumSteps);
  return ds::scheduledLr(planInfo.schedule, baseLr, next,
                         planInfo.warmupSteps, planInfo.totalSteps,
                         planInfo.minLr);
}

void Session::setLr(double lr) {
  exec->setLr(lr);
  baseLr = lr;
}

std::vector<std::string> Session::parameterNames() const {
  return exec->parameterNames();
}

bool Session::parameter(const std::string &name, HostTensor &out,
                        std::string &err) const {
  return exec->parameter(name, out, err);
}

bool Session::setParameter(const std::string &name, const HostTensor &value,
                           std::string &err) {
  if (planInfo.options.count("precision") &&
      planInfo.options.at("precision") != "fp32") {
    err = "setting a parameter of a " + planInfo.options.at("precision") +
          " plan is not supported (its fp32 master copy would keep the old "
          "value)";
    return false;
  }
  bool found = false;
  for (const Executor::Storage &st : exec->storage()) {
    if (st.state || st.name != name)
      continue;
    found = true;
    if (st.tpParts > 1) {
      err = "parameter '" + name + "' is a tensor-parallel slice; setting it "
            "is not supported";
      return false;
    }
    HostTensor v = value;
    if (v.shape != st.wholeShape()) {
      HostTensor want;
      want.shape = st.wholeShape();
      err = "parameter '" + name + "' has shape " + want.shapeString() +
            ", the value " + v.shapeString();
      return false;
    }
    if (!convertTensor(v, st.dtype, err))
      return false;
    auto *dst = static_cast<unsigned char *>(st.data);
    size_t first = st.sharded ? st.bytes * world->rank() : 0;
    std::memset(dst, 0, st.bytes);
    if (first < v.data.size())
      std::memcpy(dst, v.data.data() + first,
                  std::min<size_t>(st.bytes, v.data.size() - first));
  }
  if (!found) {
    err = "the plan has no parameter '" + name + "'";
    return false;
  }
  return exec->commitStorage(err);
}

bool Session::save(const std::string &dir, std::string &err) {
  return saveCheckpoint(dir, *exec, *world, planInfo, globalSteps(),
                        planInfo.lossScaling
                            ? scaler.state()
                            : std::map<std::string, std::string>{},
                        err);
}

bool Session::load(const std::string &dir, std::string &err) {
  int64_t done = 0;
  bool repartitioned = false;
  std::map<std::string, std::string> extra;
  bool ok = loadCheckpoint(dir, *exec, world->rank(), planInfo, done,
                           repartitioned, extra, err) &&
            exec->commitStorage(err);
  if (ok && planInfo.lossScaling)
    ok = scaler.restore(extra, err);
  if (!world->allOk(ok)) {
    if (ok)
      err = "the checkpoint was rejected on another rank";
    return false;
  }
  return true;
}

} // namespace ds::rt
