//===- Session.h - a training plan run one step at a time -------*- C++ -*-===//
//
// Part of the ds project. No MLIR or LLVM here.
//
// The step-level runtime behind the Python engine (ds.initialize): a plan
// (from a file or from bytes compiled in the same process) and its weights
// are loaded once; then each call of run() feeds one micro-batch given by
// the caller as host arrays and runs the whole compiled step on it
// (forward, backward and, on the plan's accumulation boundary, the
// optimizer update). Parameters are read and written by name, checkpoints
// saved and loaded with the same code and layout as ds-run's. Errors come
// back as values; nothing here exits.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_SESSION_H
#define DS_RUNTIME_SESSION_H

#include "ds/Runtime/LossScaler.h"
#include "ds/Runtime/Runtime.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ds::rt {

class Communicator;

struct SessionOptions {
  int threads = 1;
  uint64_t seed = 0;
  /// "cpu" or "cuda".
  std::string backend = "cpu";
  /// Learning-rate override (NaN: the plan's).
  double lr = NAN;
};

class Session {
public:
  /// Creates the executor of `plan` on `world` (its size must be the
  /// plan's world size; a pipeline plan is refused).
  static std::unique_ptr<Session> open(std::shared_ptr<const Plan> plan,
                                       Communicator &world,
                                       const SessionOptions &options,
                                       std::string &err);
  ~Session();

  const PlanInfo &info() const { return planInfo; }
  /// The graph inputs a micro-batch gives (not ds.step nor ds.loss_scale),
  /// with the shapes and types the plan expects on this rank.
  const std::vector<std::pair<std::string, HostTensor>> &inputSpecs() const {
    return specs;
  }
  /// Runs the compiled step on one micro-batch (every input of
  /// inputSpecs(), this rank's rows); `loss` is this rank's loss. The
  /// update happens on every accumSteps-th call. Collective.
  bool run(const std::map<std::string, HostTensor> &inputs, double &loss,
           std::string &err);
  /// The loss of one batch (the same inputs as run()) by the plan's eval
  /// section: no gradients, no update, dropout off; changes nothing.
  /// Collective (the loss is the mean over the data-parallel ranks).
  bool eval(const std::map<std::string, HostTensor> &inputs, double &loss,
            std::string &err);
  /// Micro-batches run so far, and optimizer steps completed (boundaries
  /// passed, an fp16 overflow's skipped step included as DeepSpeed counts
  /// it).
  int64_t microSteps() const;
  int64_t globalSteps() const;
  /// Whether the last run ended an accumulation window.
  bool atBoundary() const;
  /// The learning rate of the next optimizer step (the plan's schedule).
  double lr() const;
  /// Sets the base learning rate of the optimizer steps that follow (every
  /// parameter's, through the plan's schedule: a constant one gives it
  /// as is). The Python engine feeds a torch lr_scheduler's value.
  void setLr(double lr);
  /// Whether the last boundary's update was skipped (fp16 overflow), and
  /// the loss scale in use.
  bool lastStepSkipped() const { return skippedLast; }
  double lossScale() const { return scaler.scale; }

  std::vector<std::string> parameterNames() const;
  /// A whole parameter (ZeRO shards gathered: collective).
  bool parameter(const std::string &name, HostTensor &out,
                 std::string &err) const;
  /// Overwrites parameter `name` with a whole value of its shape (each
  /// rank keeps its shard). Every rank calls it with the same value.
  bool setParameter(const std::string &name, const HostTensor &value,
                    std::string &err);

  /// ds-run's checkpoint format in `dir` (DIR/step-N, DIR/latest).
  /// Collective.
  bool save(const std::string &dir, std::string &err);
  bool load(const std::string &dir, std::string &err);

  Executor &executor() { return *exec; }

private:
  Session() = default;
  bool setBatch(const std::map<std::string, HostTensor> &inputs,
                std::string &err);
  bool readLoss(double &loss, std::string &err);
  std::shared_ptr<const Plan> plan;
  PlanInfo planInfo;
  Communicator *world = nullptr;
  std::unique_ptr<Executor> exec;
  std::vector<std::pair<std::string, HostTensor>> specs;
  LossScaler scaler;
  double baseLr = 0;
  bool skippedLast = false;
};

} // namespace ds::rt

#endif // DS_RUNTIME_SESSION_H
