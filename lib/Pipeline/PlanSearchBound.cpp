//===- PlanSearchBound.cpp - --plan=auto's analytic memory bound ----------===//
//
// Part of the ds project.
//
// The device bytes no plan of a candidate goes below, computed before any
// compile: parameters, optimizer state and gradient accumulators, plus the
// larger of the gradients a step holds at once and the activations the
// backward pass needs kept (the model's cut values, as the recompute pass
// finds them: what even full recompute keeps). Every term is a lower
// bound of what the compiled plan holds (docs/planner.md, "--plan=auto",
// "The memory lower bound"); test/Pipeline/plan-auto-bound.test compiles
// candidates the bound rejects and checks that none fits.
//
//===----------------------------------------------------------------------===//

#include "PlanSearchImpl.h"

#include "ds/Dialect/Ds/IR/DsDialect.h"
#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Pipeline/TrainingPipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <set>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::plan_search;

namespace {

/// Elements of a static float tensor (0 otherwise).
int64_t floatElements(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape() || !isa<FloatType>(t.getElementType()))
    return 0;
  return t.getNumElements();
}

/// The forward pass of `@forward` up to its loss, which of its values come
/// from parameters and constants alone (kept, they cross every cut), and
/// which need a gradient (they depend on a trainable parameter).
struct Walk {
  std::vector<Operation *> ops;
  llvm::DenseMap<Operation *, int> pos;
  llvm::DenseSet<Operation *> argOnly;
  /// Values computed from trainable parameters alone (a weight, or its
  /// transpose).
  llvm::DenseSet<Value> trainableWeights;
  llvm::DenseSet<Value> needsGrad;
  llvm::DenseSet<Value> pinned; // read by the function's return
};

Walk walkForward(func::FuncOp f) {
  Walk w;
  Block &body = f.getBody().front();
  Operation *ret = body.getTerminator();
  Operation *loss = nullptr;
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    if (f.getResultAttr(i, "ds.loss"))
      loss = ret->getOperand(i).getDefiningOp();
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (f.getArgAttr(i, attrs::kParam) && f.getArgAttr(i, "ds.trainable")) {
      w.trainableWeights.insert(f.getArgument(i));
      w.needsGrad.insert(f.getArgument(i));
    }
  for (Value v : ret->getOperands())
    w.pinned.insert(v);
  for (Operation &op : body) {
    if (&op == ret)
      break;
    w.pos[&op] = int(w.ops.size());
    w.ops.push_back(&op);
    bool fromArgs = op.getNumRegions() == 0, fromWeights = fromArgs;
    bool grad = false;
    for (Value v : op.getOperands()) {
      Operation *def = v.getDefiningOp();
      auto arg = dyn_cast<BlockArgument>(v);
      fromArgs = fromArgs && (def ? w.argOnly.contains(def)
                                  : bool(f.getArgAttr(arg.getArgNumber(),
                                                      attrs::kParam)));
      fromWeights = fromWeights && w.trainableWeights.contains(v);
      grad = grad || w.needsGrad.contains(v);
    }
    if (fromArgs || op.hasTrait<OpTrait::ConstantLike>())
      w.argOnly.insert(&op);
    for (Value r : op.getResults()) {
      if (fromWeights && op.getNumOperands() > 0)
        w.trainableWeights.insert(r);
      if (grad)
        w.needsGrad.insert(r);
    }
    if (&op == loss)
      break;
  }
  return w;
}

/// Whether `v` is an activation: computed from the data, not from
/// parameters and constants alone.
bool isActivation(Value v, const Walk &w) {
  Operation *def = v.getDefiningOp();
  return def && !w.argOnly.contains(def) && floatElements(v) > 0;
}

/// The data operand's elements of a GEMM-like op with a trainable weight
/// operand: its backward pass reads that operand for the weight's
/// gradient (0 when the op is not one).
int64_t weightGradInput(Operation *op, const Walk &w) {
  if (!isa<MatMulOp, GemmOp, ConvOp>(op) || op->getNumOperands() < 2)
    return 0;
  Value a = op->getOperand(0), b = op->getOperand(1);
  if (w.trainableWeights.contains(b) && isActivation(a, w))
    return floatElements(a);
  if (w.trainableWeights.contains(a) && isActivation(b, w))
    return floatElements(b);
  return 0;
}
} // namespace

ActivationFacts plan_search::activationFacts(ModuleOp model) {
  ActivationFacts out;
  func::FuncOp f = model.lookupSymbol<func::FuncOp>("forward");
  if (!f || f.getBody().empty())
    return out;
  Walk w = walkForward(f);
  // Without recompute: a GEMM's backward pass reads each activation
  // operand whose partner needs a gradient (x of x.W for W's gradient; q
  // and k of q.k^T, the probabilities and v of p.v for each other's).
  // Sequence parallelism gathers a block's input again for the backward
  // pass: only the rows before the gather count.
  llvm::DenseSet<Value> saved;
  auto save = [&](Value v) {
    if (auto g = v.getDefiningOp<SpAllGatherOp>())
      v = g->getOperand(0);
    if (saved.insert(v).second)
      out.saved += floatElements(v);
  };
  for (Operation *op : w.ops) {
    if (!isa<MatMulOp, GemmOp, ConvOp>(op) || op->getNumOperands() < 2)
      continue;
    Value a = op->getOperand(0), b = op->getOperand(1);
    if (isActivation(a, w) && w.needsGrad.contains(b))
      save(a);
    if (isActivation(b, w) && w.needsGrad.contains(a))
      save(b);
  }
  // Each data value's last forward reader.
  llvm::DenseMap<Value, int> lastUse;
  for (Operation *op : w.ops) {
    if (w.argOnly.contains(op))
      continue;
    for (Value r : op->getResults()) {
      int last = w.pos[op];
      for (Operation *user : r.getUsers())
        if (w.pos.count(user))
          last = std::max(last, w.pos.lookup(user));
      lastUse[r] = last;
    }
  }
  // The cut values (after op k exactly one float data value is still to be
  // read: the recompute pass's segment boundaries) and, per segment, the
  // largest data operand of a GEMM with a trainable weight. Whatever the
  // recompute choice, the backward pass of such a segment needs its input
  // kept (to recompute it) or the GEMM's operand kept (to use it): at
  // least the smaller of the two, all of them live when the backward
  // pass begins. The last segment, the loss's, counts nothing.
  int64_t input = 0, gemm = 0;
  std::vector<Value> values;
  std::multiset<std::pair<int, size_t>> open; // (last use, index)
  for (Operation *op : w.ops) {
    int k = w.pos[op];
    if (!w.argOnly.contains(op)) {
      gemm = std::max(gemm, weightGradInput(op, w));
      for (Value r : op->getResults())
        if (lastUse.lookup(r) > k) {
          values.push_back(r);
          open.insert({lastUse.lookup(r), values.size() - 1});
        }
    }
    while (!open.empty() && open.begin()->first <= k)
      open.erase(open.begin());
    if (open.size() != 1)
      continue;
    Value cut = values[open.begin()->second];
    if (floatElements(cut) == 0 || w.pinned.contains(cut))
      continue;
    if (input > 0 && gemm > 0)
      out.kept += std::min(input, gemm);
    input = floatElements(cut);
    gemm = 0;
  }
  out.saved = std::max(out.saved, out.kept);
  return out;
}

FailureOr<ModelFacts::Split>
plan_search::partitionFacts(ModuleOp model, const TrainingOptions &o,
                            int64_t tp, bool sp) {
  OwningOpRef<ModuleOp> copy(cast<ModuleOp>(model->clone()));
  TrainingOptions po = o;
  po.tensorParallel = tp;
  po.sequenceParallel = sp;
  po.pipelineParallel = 1;
  po.worldSize = tp; // one data-parallel rank: no batch-norm sync
  PassManager pm(model.getContext());
  addPartitionPasses(pm, po);
  ScopedDiagnosticHandler quiet(model.getContext(),
                                [](Diagnostic &) { return success(); });
  if (failed(pm.run(*copy)))
    return failure();
  func::FuncOp f = copy->lookupSymbol<func::FuncOp>("forward");
  if (!f)
    return failure();
  ModelFacts::Split out;
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    if (!f.getArgAttr(i, attrs::kParam))
      continue;
    auto t = dyn_cast<RankedTensorType>(f.getArgumentTypes()[i]);
    int64_t n = t && t.hasStaticShape() ? t.getNumElements() : 0;
    out.parameters += n;
    if (f.getArgAttr(i, "ds.trainable"))
      out.trainable += n;
  }
  ActivationFacts a = activationFacts(*copy);
  out.kept = a.kept;
  out.saved = a.saved;
  return out;
}

BoundParts plan_search::boundParts(const Candidate &cand,
                                   const TrainingOptions &o,
                                   const ModelFacts &m, bool noRecompute) {
  BoundParts b;
  int64_t wb = o.precision == "fp32" ? 4 : 2;
  // One tensor-parallel rank's figures: measured on the partitioned model
  // where the search has them (parameters TP leaves whole count whole),
  // else the model's divided by the degree.
  ModelFacts::Split split{m.trainable / cand.tp, m.parameters / cand.tp,
                          m.keptElements / cand.tp, m.savedElements / cand.tp};
  auto it = m.splits.find({cand.tp, cand.sp});
  if (it != m.splits.end())
    split = it->second;
  int64_t trainable = split.trainable / cand.pp;
  int64_t frozen = (split.parameters - split.trainable) / cand.pp;
  int64_t dp = cand.dp;
  // With a host, ZeRO-3 may keep the parameters there (the search tries
  // --offload-param last): then none need stay on the device. ZeRO-3
  // partitions frozen parameters and read-only buffers like weights (a
  // buffer the step writes stays whole: counted partitioned here, the
  // bound stays below the plan).
  b.weights = cand.offload && cand.zero == 3
                  ? 0
                  : (trainable + frozen) * wb / (cand.zero == 3 ? dp : 1);
  int64_t perElem = 0;
  llvm::StringRef opt = o.optimizerName;
  if (opt == "adam" || opt == "adamw" || opt == "lamb")
    perElem = 8;
  else if (opt == "sgd" && o.momentum != 0)
    perElem = 4;
  if (wb == 2)
    perElem += 4; // the fp32 master weights
  // Gradient accumulation without a pipeline: an f32 buffer per parameter
  // (sharded at ZeRO >= 1), kept with the optimizer state (and offloaded
  // with it).
  if (cand.pp == 1 && cand.accum > 1)
    perElem += 4;
  b.state = cand.offload ? 0
                         : trainable * perElem / (cand.zero >= 1 ? dp : 1);
  // The gradients: whole until the backward pass ends at ZeRO 0-1 (the
  // update reads them after their all-reduce; ZeRO-1 reduce-scatters at
  // the end), a shard at ZeRO 2-3. With the optimizer on the host they
  // leave the device as they are made: none counted. A pipeline stage
  // with data parallelism and several micro-batches sums them in a whole
  // f32 buffer instead, where each dies as soon as it is made
  // (docs/parallel.md); with offload possible, not counted either.
  int64_t gradShare = cand.zero >= 2 ? dp : 1;
  b.gradients = cand.offload ? 0 : trainable * wb / gradShare;
  if (cand.pp > 1 && dp > 1 && cand.accum > 1) {
    b.gradients = 0;
    if (!cand.offload)
      b.state += trainable * 4 / gradShare;
  }
  // The kept activations of one micro-batch (with `noRecompute`, those
  // no recompute keeps), 16-bit under bf16/fp16, of one tensor-parallel
  // rank, spread over the pipeline's stages (their average: GPipe holds
  // every micro-batch, 1F1B at least one).
  double perSample = double(noRecompute ? split.saved : split.kept) /
                     double(m.importBatch);
  double act = perSample * double(cand.micro) * double(wb);
  if (cand.pp > 1)
    act = act * double(cand.schedule == "gpipe" ? cand.accum : 1) /
          double(cand.pp);
  // With the saved activations on the host (a cluster with a host, no
  // pipeline) none need stay on the device.
  b.activations = cand.offloadActivations ? 0 : int64_t(act);
  return b;
}

int64_t plan_search::memoryLowerBound(const Candidate &cand,
                                      const TrainingOptions &o,
                                      const ModelFacts &m) {
  BoundParts b = boundParts(cand, o, m);
  return b.total();
}
