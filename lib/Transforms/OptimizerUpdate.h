//===- OptimizerUpdate.h - per-optimizer update rules -----------*- C++ -*-===//
//
// Part of the ds project.
//
// The optimizer pass prepares each parameter's gradient (f32, unscaled,
// clipped, summed over tied copies) and the value to update (the parameter,
// its f32 master or its ZeRO shard); an update rule turns them into the op
// that makes the new parameter and declares the state that op keeps. Adding
// an optimizer is one rule function and one row in `updateRules()`.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_OPTIMIZERUPDATE_H
#define DS_TRANSFORMS_OPTIMIZERUPDATE_H

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Support/ZeroOne.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>

namespace mlir::ds::optimizer {

/// The learning-rate schedule, evaluated by the update kernels from the
/// step counter (data, not recompilation).
struct LrSchedule {
  std::string kind; // constant, warmup, warmup-cosine or warmup-linear
  int64_t warmupSteps = 0, totalSteps = 0;
  double minLr = 0.0;
};

/// 1-bit LAMB's coefficients (DeepSpeed's OnebitLamb defaults): the
/// running average of the warm-up's trust ratios, and the bounds of the
/// factor that scales it after the freeze.
struct OneBitLambParams {
  double coeffBeta = 0.9;
  double factorMax = 4.0, factorMin = 0.5, factorThreshold = 0.1;
};

/// The hyper-parameters of one parameter's update.
struct Hyperparameters {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8; // Adam and Lamb moments
  double weightDecay = 0.0;
  double momentum = 0.0, dampening = 0.0; // SGD
  bool nesterov = false;
  bool biasCorrection = true; // Adam and Lamb: divide by 1 - beta^t
  double maxCoeff = 10.0, minCoeff = 0.01; // Lamb's trust-ratio bounds
  LrSchedule schedule;
  int64_t gradAccum = 1; // micro-batches per update
  int64_t freezeStep = 100000; // 1-bit Adam: the last warm-up step
  ::ds::zeroone::Policy zeroOne; // 0/1 Adam's variance and local steps
  OneBitLambParams oneBitLamb;   // 1-bit LAMB (with freezeStep, max/minCoeff)
};

/// What a rule updates, for one parameter.
struct UpdateInput {
  StringRef name; // the parameter's name; its state is `<name>.<suffix>`
  Location loc;
  Value param;     // the parameter, its f32 master, or this rank's shard
  Value grad;      // of `param`'s type
  Value step;      // the step counter
  Value gradAccum; // the accumulated gradient, or null without accumulation
  int64_t world = 1; // the data-parallel ranks
  /// Declares a state tensor `<name>.<suffix>` of type `type` (not the
  /// gradient's: 1-bit Adam's padded error buffers).
  llvm::function_ref<Value(StringRef suffix, Type type)> addTypedState = {};
  /// Gradient clipping over the accumulated gradient: the coefficient (an
  /// f32 scalar) the update scales the mean gradient by; null: none.
  Value clipCoef = {};
  /// The parameter argument's type (whole, or its ZeRO-3 shard): a rule
  /// may return the whole new parameter of a ZeRO 1-2 shard itself (1-bit
  /// Adam's compressed all-gather), which is then not gathered again.
  RankedTensorType paramType = {};
  /// ZeRO 1-3: `param` and `grad` are this rank's partition of a tensor
  /// flattened and padded over the `world` ranks (Lamb's norms are summed
  /// over them).
  bool partitioned = false;
};

/// What a rule made: the new parameter, the new value of each state it
/// declared (in the order it declared them), and the new accumulated
/// gradient (when there is one).
struct UpdateOutput {
  Value newParam;
  SmallVector<std::pair<std::string, Value>> newState; // (suffix, value)
  Value newGradAccum;
};

/// Declares a state tensor `<name>.<suffix>` of the gradient's type (an
/// argument of the step, zero at the start of training) and returns it.
using AddStateFn = llvm::function_ref<Value(StringRef suffix)>;

using BuildUpdateFn = UpdateOutput (*)(OpBuilder &b, const UpdateInput &in,
                                       const Hyperparameters &hp,
                                       AddStateFn addState);

/// One optimizer: its `--optimizer` name and how it updates a parameter.
struct UpdateRule {
  StringRef name;
  BuildUpdateFn build;
  /// The rule needs norms of whole tensors (Lamb's trust ratio), so it
  /// cannot update tensor-parallel slices (ZeRO partitions sum their
  /// partial norms over the ranks).
  bool needsWholeTensors;
  /// The rule's own checks and rewrites of the step before any update
  /// (1-bit Adam: it takes over the gradients' data-parallel exchange);
  /// null: none.
  LogicalResult (*prepare)(func::FuncOp func, const Hyperparameters &hp) =
      nullptr;
};

/// The gradient bucket's reduce-scatter (or the compressed one that
/// replaced it) a ZeRO gradient shard comes from, through the split of the
/// bucket; null at stage 0 (OneBitAdam.cpp).
Operation *findBucketExchange(Value grad);
/// ZeRO 1-3's 1-bit gradient exchange: the bucket's `ds.reduce_scatter`
/// (`exchange`) becomes `ds.compressed_reduce_scatter` (plain until
/// `freezeStep`), once per bucket; the first parameter updated from it
/// keeps the worker error (`<param>.worker_error`, in `out`). Returns the
/// gradient shard the update reads. With `momentumBeta1` (1-bit Adam) the
/// op exchanges this rank's momentum of its gradients instead, kept as
/// state `<param>.worker_momentum` (the bucket's length).
Value compressBucketExchange(const UpdateInput &in, int64_t freezeStep,
                             Operation *exchange, UpdateOutput &out,
                             std::optional<double> momentumBeta1 = {});
/// ZeRO 1-3's parameter exchange after a partition's update
/// `out.newParam`: the int8 update delta with error feedback of a
/// replicated parameter (`ds.compressed_all_gather`, which makes the whole
/// new parameter) or the int8 gathers of a stage-3 shard, both plain until
/// `freezeStep`.
void exchangeParameter(OpBuilder &b, const UpdateInput &in,
                       int64_t freezeStep, AddStateFn addState,
                       UpdateOutput &out);
/// The padded worker error and the server error (its per-rank part) of a
/// compressed optimizer's parameter, added as state (ds::onebit::paddedSize).
std::pair<Value, Value> addOneBitErrors(OpBuilder &b, const UpdateInput &in);
/// DeepSpeed's OneBitAdam (OneBitAdam.cpp): `ds.onebit_adam` with the
/// padded error-feedback buffers as state.
UpdateOutput buildOneBitAdam(OpBuilder &b, const UpdateInput &in,
                             const Hyperparameters &hp, AddStateFn addState);
/// The layouts the compressed optimizers do not run under yet (pipelines,
/// tensor parallelism, accumulation, fp16 loss scaling, non-f32
/// gradients): one error "<name> with X is not supported yet (<scope>)".
LogicalResult checkCompressedLayout(func::FuncOp func,
                                    const Hyperparameters &hp,
                                    StringRef name, StringRef scope);
/// The compressed optimizers that run at ZeRO-0 only (0/1 Adam, 1-bit
/// LAMB): refuses ZeRO 1-3 and checkCompressedLayout's layouts, then takes
/// out ZeRO-0's gradient all-reduce (their updates exchange).
LogicalResult prepareAtZeroZero(func::FuncOp func, const Hyperparameters &hp,
                                StringRef name, StringRef scope);
/// The compressed optimizers that run at ZeRO 0-3 (1-bit Adam, 1-bit
/// LAMB): refuses checkCompressedLayout's layouts; at ZeRO 1-3 says in one
/// warning how the exchange differs from ZeRO-0's (`exchanged`: what each
/// bucket's reduce-scatter compresses; `gathers`: what the parameter
/// all-gathers send, or empty, before "docs/compression.md"), at ZeRO-0
/// takes out the gradients' all-reduce.
LogicalResult prepareAtAnyStage(func::FuncOp func, const Hyperparameters &hp,
                                StringRef name, StringRef scope,
                                StringRef exchanged, StringRef gathers);
/// Refuses what 1-bit Adam does not run yet and returns the gradients of
/// ZeRO-0's all-reduce to this rank's own (the update exchanges them).
LogicalResult prepareOneBitAdam(func::FuncOp func, const Hyperparameters &hp);
/// `freeze_step: "auto"` (FreezeAuto.cpp): marks every op with a
/// `freeze_step` for ds-run's decision; refuses other optimizers.
LogicalResult markFreezeAuto(func::FuncOp func, StringRef optimizer);

/// DeepSpeed's ZeroOneAdam (ZeroOneAdam.cpp): `ds.zero_one_adam` with the
/// error-feedback buffers, the momentum accumulator and the counters as
/// state.
UpdateOutput buildZeroOneAdam(OpBuilder &b, const UpdateInput &in,
                              const Hyperparameters &hp, AddStateFn addState);
/// Refuses what 0/1 Adam does not run yet (and a policy out of range) and
/// takes out ZeRO-0's gradient all-reduce, as 1-bit Adam.
LogicalResult prepareZeroOneAdam(func::FuncOp func, const Hyperparameters &hp);
/// DeepSpeed's OnebitLamb (OneBitLamb.cpp): `ds.onebit_lamb` with the
/// fresh variance, the error-feedback buffers and the two coefficients as
/// state.
UpdateOutput buildOneBitLamb(OpBuilder &b, const UpdateInput &in,
                             const Hyperparameters &hp, AddStateFn addState);
/// Refuses what 1-bit LAMB does not run yet and takes out ZeRO-0's
/// gradient all-reduce, as 1-bit Adam (ZeRO 1-3 keep their reduce-scatters,
/// which buildOneBitLamb compresses).
LogicalResult prepareOneBitLamb(func::FuncOp func, const Hyperparameters &hp);
/// Takes the gradients' data-parallel all-reduce (ZeRO-0's) out of `func`:
/// each update then reads this rank's own gradient (OneBitAdam.cpp).
void takeOutGradientReduces(func::FuncOp func);

/// The optimizers, in the order the diagnostics list them.
ArrayRef<UpdateRule> updateRules();

/// Parameter groups (OptimizerGroups.cpp): the export record's
/// `ds.param_groups` (a JSON object: parameter name -> {"lr": x,
/// "weight_decay": y}, either key optional) applied over `base`, by
/// parameter name. An empty map without the record; a malformed record
/// fails with an error on `module`.
FailureOr<llvm::StringMap<Hyperparameters>>
readParameterGroups(ModuleOp module, const Hyperparameters &base);

/// The rule named `name`, or null.
const UpdateRule *lookupUpdateRule(StringRef name);

/// "a, b, c or d": the rule names, for diagnostics.
std::string updateRuleNames();

} // namespace mlir::ds::optimizer

#endif // DS_TRANSFORMS_OPTIMIZERUPDATE_H
