//===- Optimizer.cpp - parameter updates from gradients -------------------===//
//
// Part of the ds project.
//
// Builds the update section of the training step: the gradients as the
// optimizer reads them (f32, unscaled by the fp16 loss scale, clipped by
// their global norm, summed over tied copies), the value each update
// changes (the parameter, its f32 master or its ZeRO shard), the update op
// of the chosen rule (OptimizerUpdate.cpp) with its state as new arguments
// and results, and the all-gather of updated shards of whole parameters.
//
//===----------------------------------------------------------------------===//

#include "GradAccumulate.h"
#include "OptimizerUpdate.h"
#include "ds/Runtime/Schedule.h"
#include "ds/Support/FreezeAuto.h"
#include "ds/Transforms/Passes.h"
#include "ds/Transforms/Sharding.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::ds {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

using optimizer::Hyperparameters;
using optimizer::UpdateRule;

/// The options of the update section (the pass options, checked).
struct UpdateOptions {
  const UpdateRule *rule;
  Hyperparameters hyper;
  double gradClip;
  bool masterWeights;
  int64_t allgatherBucketSize;
};

/// The value one parameter's update changes.
struct UpdateTarget {
  Value value;                // the parameter, its master or its shard
  RankedTensorType paramType; // the parameter argument's type
  bool master = false;        // updated through an f32 master copy
  std::string masterName;
};

/// An updated shard of a whole parameter, gathered after every update.
struct PendingGather {
  unsigned result;
  Value shard;
  RankedTensorType whole;
};

/// The update section of @forward under construction: the function's new
/// argument and result lists and the values every update shares.
class UpdateSection {
public:
  UpdateSection(func::FuncOp func, const UpdateOptions &options);

  /// Checks what the function asks of the optimizer (ZeRO, tensor
  /// parallelism, loss scaling) against the options.
  LogicalResult verify();
  /// Builds the whole section and rewrites the function's signature.
  LogicalResult build();

private:
  void collectParameters();
  Value addArg(Type type, NamedAttribute attr,
               std::optional<NamedAttribute> extra = std::nullopt);
  void addResult(Value value, StringRef updated);
  DictionaryAttr updateAttr(StringRef name);

  // Shared by every update.
  void buildOverflowCheck();
  void createAccumulators();
  void buildClipCoefficient();
  Value readGradient(Value grad);

  // One parameter.
  LogicalResult updateParameter(unsigned result, StringAttr name);
  FailureOr<UpdateTarget> resolveTarget(BlockArgument param, StringAttr name,
                                        Value grad);
  void setStateAttrs(BlockArgument param);
  LogicalResult sumTiedGradients(BlockArgument param, StringAttr name,
                                 Value &grad, Value &accum);
  Value newParameter(unsigned result, const UpdateTarget &target,
                     Value updated);

  void gatherUpdatedShards();
  void finish();

  /// The hyper-parameters of the update of parameter `name`: its group's
  /// (the export's `ds.param_groups`), else the pass options'.
  const Hyperparameters &hyperparametersOf(StringAttr name) const {
    auto it = groups.find(name.getValue());
    return it == groups.end() ? options.hyper : it->second;
  }
  llvm::StringMap<Hyperparameters> groups;
  llvm::StringSet<> updatedNames;

  func::FuncOp func;
  const UpdateOptions &options;
  Block &body;
  Operation *ret;
  OpBuilder b;
  int64_t world = 1;
  bool sharded = false; // ZeRO 1-3: updates see this rank's gradient shard

  llvm::StringMap<BlockArgument> params; // parameter arguments by name
  BlockArgument lossScale;               // the fp16 loss-scale input
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;

  Value step;
  /// A pipeline stage whose gradients are sums over the micro-batches
  /// (GradAccumulate.h): updates count optimizer steps, and gradients are
  /// divided by the micro-batch count.
  int64_t summedOver = 0;
  accumulate::StepCounter counter;
  Value invScale; // 1 / loss scale
  Value overflow; // the inf/NaN check of the scaled gradients
  Value clipCoef; // min(1, clip / norm)
  /// Clipping with accumulation in the update kernels: the accumulators,
  /// made before the norm (which is the accumulated gradient's), by
  /// parameter name; the update kernels scale the mean by `clipCoef`.
  llvm::StringMap<Value> accumulators;
  bool clipInKernel = false;
  SmallVector<PendingGather> pendingGathers;

  // Attributes of the state arguments of the parameter being updated: its
  // whole shape when the state holds a shard, its tensor-parallel split.
  DenseI64ArrayAttr fullShape, tpSplit;
};

UpdateSection::UpdateSection(func::FuncOp func, const UpdateOptions &options)
    : func(func), options(options), body(func.getBody().front()),
      ret(body.getTerminator()), b(ret) {
  auto stageAttr = func->getAttrOfType<IntegerAttr>(kZeroStageAttr);
  auto worldAttr = func->getAttrOfType<IntegerAttr>(kWorldSizeAttr);
  world = worldAttr ? worldAttr.getInt() : 1;
  sharded = stageAttr && stageAttr.getInt() >= 1;
}

LogicalResult UpdateSection::verify() {
  const UpdateRule &rule = *options.rule;
  if (rule.needsWholeTensors && func->hasAttr("ds.tensor_parallel"))
    return func.emitError(rule.name)
           << "'s trust ratio needs whole-tensor norms; it is not supported "
              "with --tensor-parallel yet";
  return success();
}

/// The loss-scale input and the parameters by name, and the function's
/// signature so far.
void UpdateSection::collectParameters() {
  for (BlockArgument arg : body.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), "ds.loss_scale"))
      lossScale = arg;
  for (BlockArgument arg : body.getArguments())
    if (auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                      attrs::kParam))
      params[name] = arg;
  argTypes.assign(body.getArgumentTypes().begin(),
                  body.getArgumentTypes().end());
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    argAttrs.push_back(func.getArgAttrDict(i));
  results.assign(ret->getOperands().begin(), ret->getOperands().end());
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    resultAttrs.push_back(func.getResultAttrDict(i));
}

/// A new argument (a state of the parameter being updated carries its
/// shard and split attributes).
Value UpdateSection::addArg(Type type, NamedAttribute attr,
                            std::optional<NamedAttribute> extra) {
  argTypes.push_back(type);
  SmallVector<NamedAttribute> attrList{attr};
  if (extra)
    attrList.push_back(*extra);
  if (fullShape)
    attrList.push_back(b.getNamedAttr(kFullShapeAttr, fullShape));
  if (tpSplit)
    attrList.push_back(b.getNamedAttr("ds.tp_split", tpSplit));
  argAttrs.push_back(b.getDictionaryAttr(attrList));
  return body.addArgument(type, func.getLoc());
}

DictionaryAttr UpdateSection::updateAttr(StringRef name) {
  return b.getDictionaryAttr(
      {b.getNamedAttr("ds.update", b.getStringAttr(name)),
       b.getNamedAttr(attrs::kOutput,
                      b.getStringAttr("update:" + name.str()))});
}

/// A new result: the new value of the argument named `updated`.
void UpdateSection::addResult(Value value, StringRef updated) {
  results.push_back(value);
  resultAttrs.push_back(updateAttr(updated));
}

/// Loss scaling: gradients come scaled by the `ds.loss_scale` input. They
/// are checked for inf/NaN over every rank as they are (unscaling cannot
/// create or remove one); on overflow the optimizer kernels keep
/// parameters and state.
void UpdateSection::buildOverflowCheck() {
  if (!lossScale)
    return;
  Location loc = func.getLoc();
  SmallVector<Value> grads;
  for (unsigned i = 0, e = results.size(); i < e; ++i)
    if (func.getResultAttr(i, "ds.grad"))
      grads.push_back(results[i]);
  overflow = CheckOverflowOp::create(
      b, loc, RankedTensorType::get({}, b.getF32Type()), grads);
  // With tensor parallelism a split gradient's overflow is on one rank of
  // a group: the check spans every rank (group -1, the world).
  if (func->hasAttr("ds.tensor_parallel"))
    overflow.getDefiningOp()->setAttr("group", b.getI64IntegerAttr(-1));
  invScale = ReciprocalOp::create(b, loc, lossScale);
}

/// A gradient as the optimizer reads it: in f32 (a 16-bit weight's gradient
/// is 16-bit; it is cast up one tensor at a time, just before its use, so
/// that f32 copies never pile up), unscaled by the fp16 loss scale.
Value UpdateSection::readGradient(Value g) {
  auto t = cast<RankedTensorType>(g.getType());
  Location loc = g.getLoc();
  if (!t.getElementType().isF32() && isa<FloatType>(t.getElementType()))
    g = CastOp::create(b, loc, t.clone(b.getF32Type()), g);
  if (summedOver)
    g = MulOp::create(b, loc, g.getType(), g, counter.inverse);
  if (invScale)
    g = MulOp::create(b, loc, g.getType(), g, invScale);
  return g;
}

/// The sum of the squares of `g`'s elements, a scalar.
static Value sumOfSquares(OpBuilder &b, Value g) {
  auto t = cast<RankedTensorType>(g.getType());
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < t.getRank(); ++d)
    axes.push_back(d);
  auto scalarType = RankedTensorType::get({}, t.getElementType());
  Value sq = MulOp::create(b, g.getLoc(), t, g, g);
  if (t.getRank() == 0)
    return sq;
  return ReduceSumOp::create(b, g.getLoc(), scalarType, sq,
                             b.getDenseI64ArrayAttr(axes),
                             b.getBoolAttr(false));
}

/// Clipping by the global norm of all gradients, as torch does: the
/// coefficient min(1, clip / (norm + 1e-6)) every gradient is scaled by.
void UpdateSection::buildClipCoefficient() {
  if (options.gradClip <= 0)
    return;
  // Tensor parallelism: a split parameter's gradient is in slices over the
  // group; their squares add up over it (the replicated ones count once).
  Value total, totalSplit;
  for (unsigned i = 0, e = results.size(); i < e; ++i) {
    auto name = func.getResultAttrOfType<StringAttr>(i, "ds.grad");
    if (!name)
      continue;
    BlockArgument param = params.lookup(name.getValue());
    bool split = param && func.getArgAttr(param.getArgNumber(), "ds.tp_split");
    Value g = readGradient(results[i]);
    // With accumulation in the kernels: the sum the update reads, this
    // micro-batch's gradient added to the accumulator (as the kernel adds
    // it); its norm is used on a step's last micro-batch.
    if (Value acc = accumulators.lookup(name.getValue()))
      g = AddOp::create(b, g.getLoc(), g.getType(), acc, g);
    Value sum = sumOfSquares(b, g);
    Value &acc = split ? totalSplit : total;
    acc = acc ? Value(AddOp::create(b, sum.getLoc(), sum.getType(), acc, sum))
              : sum;
  }
  Location loc = func.getLoc();
  if (totalSplit) {
    Value summed = TpAllReduceOp::create(b, loc, totalSplit.getType(),
                                         totalSplit, b.getI64IntegerAttr(1));
    total =
        total
            ? Value(AddOp::create(b, loc, totalSplit.getType(), total, summed))
            : summed;
  }
  // Shards hold disjoint parts (padding is zero): the squares add up over
  // the ranks.
  if (total && sharded && world > 1)
    total = AllReduceOp::create(b, loc, total, b.getStringAttr("sum"),
                                b.getI64IntegerAttr(0));
  if (!total)
    return;
  auto st = cast<RankedTensorType>(total.getType());
  auto cst = [&](double v) {
    return ConstantOp::create(
        b, loc, st,
        DenseElementsAttr::get(
            st, ArrayRef<Attribute>(FloatAttr::get(st.getElementType(), v))));
  };
  Value norm = SqrtOp::create(b, loc, total);
  // The norm of the mean over the micro-batches: the sum's, divided by K.
  if (clipInKernel)
    norm = MulOp::create(
        b, loc, st, norm,
        cst(1.0 / static_cast<double>(options.hyper.gradAccum)));
  Value coef = DivOp::create(b, loc, st, cst(options.gradClip),
                             AddOp::create(b, loc, st, norm, cst(1e-6)));
  clipCoef = MinOp::create(b, loc, st, coef, cst(1.0));
}

/// The value the update of `param` changes, for its gradient `grad`:
/// a 16-bit weight (mixed precision) is updated through its f32 master
/// copy, optimizer state of the gradient's shape (this rank's shard with
/// ZeRO 1-3) which starts as the weight's initializer; offload gives an f32
/// weight its master copy too (the host keeps the f32 partition and the
/// device weight is its copy). Under ZeRO 1-3 a whole parameter without a
/// master contributes this rank's part.
FailureOr<UpdateTarget>
UpdateSection::resolveTarget(BlockArgument param, StringAttr name, Value grad) {
  Type gradType = grad.getType();
  UpdateTarget target;
  target.value = param;
  target.paramType = cast<RankedTensorType>(param.getType());
  RankedTensorType paramType = target.paramType;
  auto shape = cast<RankedTensorType>(gradType);
  setStateAttrs(param);
  target.master =
      isa<FloatType>(paramType.getElementType()) &&
      (!paramType.getElementType().isF32() || options.masterWeights);
  target.masterName = name.str() + ".master";
  if (target.master) {
    if (shape.getShape() != paramType.getShape() &&
        (!sharded ||
         shape.getShape() != shardType(paramType, world).getShape())) {
      func.emitError("gradient of '")
          << name << "' is " << gradType << ", neither " << paramType
          << " nor its shard";
      return failure();
    }
    target.value =
        addArg(gradType,
               b.getNamedAttr("ds.state", b.getStringAttr(target.masterName)),
               b.getNamedAttr("ds.master_of", name));
    return target;
  }
  if (sharded && paramType != gradType) {
    // A whole parameter: this rank's part of it.
    if (shardType(paramType, world) != shape) {
      func.emitError("gradient of '")
          << name << "' is " << shape << ", not the shard of " << paramType;
      return failure();
    }
    Location loc = grad.getLoc();
    target.value =
        ShardOp::create(b, loc, shape, flattenPadded(b, loc, param, world),
                        b.getI64IntegerAttr(0));
  }
  return target;
}

/// The attributes of `param`'s state arguments: its whole shape when the
/// state holds a shard (ZeRO 1-3), its tensor-parallel split.
void UpdateSection::setStateAttrs(BlockArgument param) {
  unsigned n = param.getArgNumber();
  tpSplit = func.getArgAttrOfType<DenseI64ArrayAttr>(n, "ds.tp_split");
  fullShape = {};
  if (!sharded)
    return;
  fullShape = func.getArgAttrOfType<DenseI64ArrayAttr>(n, kFullShapeAttr);
  if (!fullShape)
    fullShape = b.getDenseI64ArrayAttr(
        cast<RankedTensorType>(param.getType()).getShape());
}

/// Clipping with accumulation in the update kernels: each parameter's
/// accumulator argument (f32, of its gradient's shape: this rank's shard
/// under ZeRO 1-3) made before the norm, which reads it.
void UpdateSection::createAccumulators() {
  clipInKernel =
      options.gradClip > 0 && options.hyper.gradAccum > 1 && !summedOver;
  if (!clipInKernel)
    return;
  for (unsigned i = 0, e = results.size(); i < e; ++i) {
    auto name = func.getResultAttrOfType<StringAttr>(i, "ds.grad");
    BlockArgument param = name ? params.lookup(name.getValue()) : nullptr;
    if (!param)
      continue; // updateParameter names the problem
    auto t = cast<RankedTensorType>(results[i].getType());
    setStateAttrs(param);
    accumulators[name.getValue()] = addArg(
        t.clone(b.getF32Type()),
        b.getNamedAttr("ds.state",
                       b.getStringAttr(name.str() + ".grad_accum")));
  }
  fullShape = {};
  tpSplit = {};
}

/// Pipeline parallelism: a parameter several stages hold (tied weights) is
/// updated with the sum of their gradients.
LogicalResult UpdateSection::sumTiedGradients(BlockArgument param,
                                              StringAttr name, Value &grad,
                                              Value &accum) {
  unsigned argNumber = param.getArgNumber();
  auto peers =
      func.getArgAttrOfType<DenseI64ArrayAttr>(argNumber, "ds.tied_peers");
  if (!peers)
    return success();
  if (options.gradClip > 0 || overflow)
    return func.emitError("tied parameter '")
           << name << "' across pipeline stages with --grad-clip or "
           << "loss scaling is not supported yet";
  auto id = func.getArgAttrOfType<IntegerAttr>(argNumber, "ds.tied_id");
  Type t = grad.getType();
  SmallVector<Type> types{t};
  SmallVector<Value> operands{grad, step};
  if (accum) {
    types.push_back(t);
    operands.push_back(accum);
  }
  auto tied = TiedGradSumOp::create(
      b, grad.getLoc(), types, operands,
      {b.getNamedAttr("peers", peers),
       b.getNamedAttr("accum_steps",
                      b.getI64IntegerAttr(summedOver ? 1
                                                     : options.hyper.gradAccum)),
       b.getNamedAttr("tied_id", id ? id : b.getI64IntegerAttr(0))});
  grad = tied.getResult();
  if (accum)
    accum = tied.getNewGradAccum();
  return success();
}

/// The new parameter from the `updated` target: a master goes back to its
/// state and the weight is its cast down; an updated shard of a whole
/// parameter is gathered from every rank's after all updates.
Value UpdateSection::newParameter(unsigned result, const UpdateTarget &target,
                                  Value updated) {
  RankedTensorType paramType = target.paramType;
  if (target.master) {
    addResult(updated, target.masterName);
    if (!paramType.getElementType().isF32())
      updated = CastOp::create(b, updated.getLoc(),
                               cast<RankedTensorType>(updated.getType())
                                   .clone(paramType.getElementType()),
                               updated);
  }
  if (cast<RankedTensorType>(updated.getType()).getShape() !=
      paramType.getShape())
    pendingGathers.push_back({result, updated, paramType});
  return updated;
}

/// Updates the parameter whose gradient is result `result`: the update op
/// of the rule replaces the gradient by the new parameter, and its state
/// becomes new arguments and results.
LogicalResult UpdateSection::updateParameter(unsigned result, StringAttr name) {
  BlockArgument param = params.lookup(name);
  if (!param)
    return func.emitError("gradient of '") << name << "' has no parameter";
  Value grad = readGradient(results[result]);
  if (clipCoef && !clipInKernel)
    grad = MulOp::create(b, grad.getLoc(), grad.getType(), grad, clipCoef);
  Location loc = grad.getLoc();
  Type t = grad.getType();
  FailureOr<UpdateTarget> target = resolveTarget(param, name, grad);
  if (failed(target))
    return failure();
  std::string accName = name.str() + ".grad_accum";
  Value accum = accumulators.lookup(name.getValue());
  if (options.hyper.gradAccum > 1 && !summedOver && !accum)
    accum = addArg(t, b.getNamedAttr("ds.state", b.getStringAttr(accName)));
  if (failed(sumTiedGradients(param, name, grad, accum)))
    return failure();
  auto stateName = [&](StringRef suffix) {
    return (name.getValue() + "." + suffix).str();
  };
  auto addState = [&](StringRef suffix) {
    return addArg(
        t, b.getNamedAttr("ds.state", b.getStringAttr(stateName(suffix))));
  };
  auto addTypedState = [&](StringRef suffix, Type type) {
    // A state of another type than the gradient's is not a shard of the
    // parameter (1-bit Adam's error buffers): no whole shape.
    DenseI64ArrayAttr whole = fullShape;
    if (type != t)
      fullShape = {};
    Value v = addArg(
        type, b.getNamedAttr("ds.state", b.getStringAttr(stateName(suffix))));
    fullShape = whole;
    return v;
  };
  optimizer::UpdateOutput out = options.rule->build(
      b,
      {name.getValue(), loc, target->value, grad,
       summedOver ? counter.updates : step, accum, world, addTypedState,
       clipInKernel ? clipCoef : Value(), target->paramType, sharded},
      hyperparametersOf(name), addState);
  results[result] = newParameter(result, *target, out.newParam);
  resultAttrs[result] = updateAttr(name);
  for (auto &[suffix, value] : out.newState)
    addResult(value, stateName(suffix));
  if (out.newGradAccum)
    addResult(out.newGradAccum, accName);
  return success();
}

/// The updated shards of whole parameters, gathered in buckets of at least
/// allgather-bucket-size elements.
void UpdateSection::gatherUpdatedShards() {
  for (size_t first = 0; first < pendingGathers.size();) {
    size_t last = first;
    int64_t elements = 0;
    SmallVector<Value> shards;
    SmallVector<RankedTensorType> types;
    while (last < pendingGathers.size() &&
           (last == first || elements < options.allgatherBucketSize)) {
      shards.push_back(pendingGathers[last].shard);
      types.push_back(pendingGathers[last].whole);
      elements +=
          cast<RankedTensorType>(shards.back().getType()).getDimSize(0) * world;
      ++last;
    }
    SmallVector<Value> wholes =
        gatherBucket(b, func.getLoc(), shards, types, world);
    for (size_t k = first; k < last; ++k)
      results[pendingGathers[k].result] = wholes[k - first];
    first = last;
  }
}

/// The function's new signature: parameters' and state's new values are
/// results, the state and the step counter arguments.
void UpdateSection::finish() {
  ret->setOperands(results);
  func.setType(FunctionType::get(func.getContext(), argTypes,
                                 ValueRange(results).getTypes()));
  func.setAllArgAttrs(argAttrs);
  func.setAllResultAttrs(resultAttrs);
  func->setAttr("ds.optimizer", b.getStringAttr(options.rule->name));
}

LogicalResult UpdateSection::build() {
  // A pipeline stage: the update section starts here. ds-run runs the last
  // micro-batch's update after the whole schedule, so that exchanging a
  // tied parameter's gradient never waits on a stage that is still running
  // its backwards. A stage summing its gradients has its mark already.
  summedOver = accumulate::accumulatedSteps(func);
  if (func->hasAttr("ds.pipeline") && !summedOver)
    PipeMarkOp::create(b, func.getLoc())
        ->setAttr("update", b.getI64IntegerAttr(1));
  FailureOr<llvm::StringMap<Hyperparameters>> read =
      optimizer::readParameterGroups(func->getParentOfType<ModuleOp>(),
                                     options.hyper);
  if (failed(read))
    return failure();
  groups = std::move(*read);
  if (options.rule->prepare &&
      failed(options.rule->prepare(func, options.hyper)))
    return failure();
  collectParameters();
  step = addArg(RankedTensorType::get({}, b.getI64Type()),
                b.getNamedAttr("ds.step", b.getUnitAttr()));
  if (summedOver)
    counter = accumulate::countSteps(b, func.getLoc(), step, summedOver);
  buildOverflowCheck();
  createAccumulators();
  buildClipCoefficient();
  int updated = 0;
  for (unsigned i = 0, e = results.size(); i < e; ++i) {
    auto name = func.getResultAttrOfType<StringAttr>(i, "ds.grad");
    if (!name)
      continue;
    if (failed(updateParameter(i, name)))
      return failure();
    updatedNames.insert(name.getValue());
    ++updated;
  }
  for (const auto &group : groups)
    if (!updatedNames.contains(group.getKey()))
      return func.emitError("the export's metadata 'ds.param_groups' names '")
             << group.getKey() << "', which is not a trained parameter";
  if (updated == 0)
    return func.emitError("no gradients to apply: run --ds-autodiff first");
  if (overflow) {
    results.push_back(overflow);
    resultAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(attrs::kOutput, b.getStringAttr("ds.overflow"))}));
  }
  gatherUpdatedShards();
  if (summedOver) {
    accumulate::zeroSums(func, b, counter.lastMicro, results, resultAttrs);
    // The updates that do not take the micro-batch count themselves (the
    // compressed optimizers') carry it for the plan (`accum_steps`: ds-run
    // runs that many micro-batches per step).
    func.walk([&](Operation *op) {
      if (op->hasTrait<DsOptimizerStep>() && !op->hasAttr("accum_steps"))
        op->setAttr("accum_steps", b.getI64IntegerAttr(summedOver));
    });
  }
  finish();
  return success();
}

struct OptimizerPass : impl::OptimizerPassBase<OptimizerPass> {
  using OptimizerPassBase::OptimizerPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    FailureOr<UpdateOptions> options = checkOptions(func);
    if (failed(options))
      return signalPassFailure();
    UpdateSection section(func, *options);
    if (failed(section.verify()) || failed(section.build()))
      return signalPassFailure();
    // freeze-step -1: freeze_step auto, decided by ds-run (FreezeAuto.cpp).
    if (freezeStep == -1 && failed(optimizer::markFreezeAuto(func, optimizer)))
      return signalPassFailure();
  }

  /// The pass options, checked, as the update section reads them.
  FailureOr<UpdateOptions> checkOptions(func::FuncOp func) {
    const UpdateRule *rule = optimizer::lookupUpdateRule(optimizer);
    if (!rule)
      return func.emitError("unknown optimizer '")
             << optimizer << "' (choose " << optimizer::updateRuleNames()
             << ")";
    if (failed(checkSchedule(func)))
      return failure();
    if (gradAccum < 1)
      return func.emitError("--grad-accum must be at least 1, got ")
             << static_cast<int64_t>(gradAccum);
    if (lr < 0 || weightDecay < 0 || momentum < 0 || gradClip < 0)
      return func.emitError("learning rate, weight decay and momentum must "
                            "not be negative (lr ")
             << lr << ", weight decay " << weightDecay << ", momentum "
             << momentum << ")";
    Hyperparameters hyper;
    hyper.lr = lr;
    hyper.beta1 = beta1;
    hyper.beta2 = beta2;
    hyper.eps = eps;
    hyper.weightDecay = weightDecay;
    hyper.momentum = momentum;
    hyper.dampening = dampening;
    hyper.nesterov = nesterov;
    hyper.biasCorrection = biasCorrection;
    hyper.maxCoeff = maxCoeff;
    hyper.minCoeff = minCoeff;
    hyper.schedule = {schedule, warmupSteps, totalSteps, minLr};
    hyper.gradAccum = gradAccum;
    // -1: auto (ds-run decides, at the latest after kMaxStep).
    hyper.freezeStep =
        freezeStep == -1 ? ::ds::freezeauto::kMaxStep : int64_t(freezeStep);
    hyper.zeroOne = {varFreezeStep, varUpdateScaler, localStepScaler,
                     localStepClipper};
    hyper.oneBitLamb = {coeffBeta, factorMax, factorMin, factorThreshold};
    if (freezeStep < -1)
      return func.emitError("freeze-step must not be below -1 (auto), got ")
             << static_cast<int64_t>(freezeStep);
    return UpdateOptions{rule, hyper, gradClip, masterWeights,
                         allgatherBucketSize};
  }

  /// The learning-rate schedule: a known kind, and a decay that ends after
  /// the warmup.
  LogicalResult checkSchedule(func::FuncOp func) {
    std::string problem = ::ds::scheduleProblem(
        schedule, static_cast<int64_t>(warmupSteps),
        static_cast<int64_t>(totalSteps));
    if (!problem.empty())
      return func.emitError(problem);
    return success();
  }
};

} // namespace
} // namespace mlir::ds
