//===- Recompute.cpp - activation recomputation by memory cost -----------===//
//
// Part of the ds project.
//
// Runs after autodiff, before ZeRO. The forward pass is cut into segments
// at its cut points (exactly one data tensor crosses); a recomputed
// segment is cloned just before the backward pass first reads it, from
// its kept input, so its activations live only around their backward use.
// docs/design.md section 8 has the cost model and the solver; the choice
// itself is in RecomputeSearch.cpp.
//
//===----------------------------------------------------------------------===//

#include "RecomputeSearch.h"
#include "ds/Transforms/Passes.h"
#include "mlir/IR/IRMapping.h"

#include "llvm/ADT/DenseSet.h"

#include <chrono>
#include <set>

namespace mlir::ds {
#define GEN_PASS_DEF_RECOMPUTEPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

using recompute::ChainModel;
using recompute::Choice;
using recompute::Layers;
using recompute::Segment;

int64_t tensorBytes(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  if (!r || !r.hasStaticShape())
    return 0;
  int64_t bits = r.getElementType().getIntOrFloatBitWidth();
  return r.getNumElements() * ((bits + 7) / 8);
}

/// Whether argument `arg` is data (a graph input), not a parameter, buffer
/// or the step's scalars, which every segment may read.
bool isData(func::FuncOp func, BlockArgument arg) {
  unsigned i = arg.getArgNumber();
  return !func.getArgAttr(i, attrs::kParam) &&
         !func.getArgAttr(i, "ds.loss_scale") && !func.getArgAttr(i, "ds.step");
}

/// The ops of `ops` that computing `wanted` needs.
llvm::DenseSet<Operation *> closure(ArrayRef<Operation *> ops,
                                    ArrayRef<Value> wanted) {
  llvm::DenseSet<Operation *> in(ops.begin(), ops.end()), need;
  SmallVector<Operation *> work;
  auto add = [&](Value v) {
    if (Operation *d = v.getDefiningOp();
        d && in.contains(d) && need.insert(d).second)
      work.push_back(d);
  };
  for (Value v : wanted)
    add(v);
  while (!work.empty())
    for (Value v : work.pop_back_val()->getOperands())
      add(v);
  return need;
}

/// FLOPs of the ops of `ops` that computing `wanted` needs.
int64_t closureFlops(ArrayRef<Operation *> ops, ArrayRef<Value> wanted) {
  int64_t flops = 0;
  for (Operation *op : closure(ops, wanted))
    if (auto c = dyn_cast<CostOpInterface>(op))
      flops += c.getFlops();
  return flops;
}

/// The first reader of any of `values` in the backward pass (not in the
/// forward pass, not the return `ret`), or null.
Operation *firstBackwardUser(ValueRange values, Operation *ret,
                             llvm::function_ref<bool(Operation *)> inForward) {
  Operation *first = nullptr;
  for (Value v : values)
    for (Operation *user : v.getUsers())
      if (!inForward(user) && user != ret &&
          (!first || user->isBeforeInBlock(first)))
        first = user;
  return first;
}

/// The last op of the forward pass: the loss, or in a pipeline stage
/// without it the last op before its backward section starts; null when
/// there is none.
Operation *forwardEnd(func::FuncOp func) {
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  Operation *lossDef = nullptr;
  for (unsigned i = 0; i < ret->getNumOperands(); ++i)
    if (func.getResultAttr(i, attrs::kLoss))
      lossDef = ret->getOperand(i).getDefiningOp();
  if (!lossDef && func->hasAttr("ds.pipeline"))
    for (Operation &op : body)
      if (isa<PipeMarkOp>(op) && !op.hasAttr("update"))
        return op.getPrevNode();
  return lossDef;
}

/// Sequence parallelism: a block's gathered input is gathered again for
/// the backward pass (as Megatron does), so that only the rank's rows are
/// kept between the passes.
void regatherForBackward(Block &body, Operation *lossDef) {
  Operation *ret = body.getTerminator();
  llvm::DenseSet<Operation *> forward;
  for (Operation &op : body) {
    forward.insert(&op);
    if (&op == lossDef)
      break;
  }
  SmallVector<SpAllGatherOp> gathers;
  for (Operation *op : forward)
    if (auto g = dyn_cast<SpAllGatherOp>(op))
      gathers.push_back(g);
  for (SpAllGatherOp g : gathers) {
    Operation *firstBwd =
        firstBackwardUser(g.getResult(), ret,
                          [&](Operation *op) { return forward.contains(op); });
    if (!firstBwd)
      continue;
    OpBuilder b(firstBwd);
    Operation *again = b.clone(*g);
    g.getResult().replaceUsesWithIf(again->getResult(0), [&](OpOperand &u) {
      return !forward.contains(u.getOwner()) && u.getOwner() != ret;
    });
  }
}

/// The forward pass and how its values are used.
struct ForwardPass {
  SmallVector<Operation *> ops;         // in order, up to the loss
  llvm::DenseMap<Operation *, int> pos; // index in `ops`
  /// Computed from arguments and constants alone: kept, they cross every
  /// cut.
  llvm::DenseSet<Operation *> argOnly;
  /// Per data value: its last forward use, whether the backward pass (or
  /// the function's results: pinned) reads it.
  llvm::DenseMap<Value, int> lastUse;
  llvm::DenseSet<Value> bwdUsed, pinned;

  bool contains(Operation *op) const { return pos.count(op) != 0; }
};

ForwardPass analyzeForward(func::FuncOp func, Operation *lossDef) {
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  ForwardPass fp;
  for (Operation &op : body) {
    fp.pos[&op] = fp.ops.size();
    fp.ops.push_back(&op);
    bool fromArgs = op.hasTrait<OpTrait::ConstantLike>() ||
                    (isPure(&op) && op.getNumRegions() == 0);
    for (Value v : op.getOperands()) {
      Operation *def = v.getDefiningOp();
      fromArgs = fromArgs && (def ? fp.argOnly.contains(def)
                                  : !isData(func, cast<BlockArgument>(v)));
    }
    if (fromArgs)
      fp.argOnly.insert(&op);
    if (&op == lossDef)
      break;
  }
  for (Operation *op : fp.ops) {
    if (fp.argOnly.contains(op))
      continue;
    for (Value r : op->getResults()) {
      int last = fp.pos[op];
      for (Operation *user : r.getUsers()) {
        if (fp.contains(user))
          last = std::max(last, fp.pos[user]);
        else if (user == ret)
          fp.pinned.insert(r);
        else
          fp.bwdUsed.insert(r);
      }
      fp.lastUse[r] = last;
    }
  }
  return fp;
}

/// The segments between cut points: after op k exactly one data value (a
/// float tensor, not a result of the function) is still to be read by a
/// later forward op.
std::vector<Segment> cutSegments(ForwardPass &fp, Operation *lossDef) {
  std::vector<Segment> segs(1);
  std::set<std::pair<int, size_t>> open; // (last use, index in values)
  std::vector<Value> values;
  for (Operation *op : fp.ops) {
    int k = fp.pos[op];
    if (!fp.argOnly.contains(op)) {
      segs.back().ops.push_back(op);
      for (Value r : op->getResults()) {
        if (fp.lastUse[r] > k) {
          values.push_back(r);
          open.insert({fp.lastUse[r], values.size() - 1});
        }
      }
    }
    while (!open.empty() && open.begin()->first <= k)
      open.erase(open.begin());
    if (op == lossDef)
      break;
    if (open.size() == 1 && !segs.back().ops.empty()) {
      Value cut = values[open.begin()->second];
      auto t = dyn_cast<RankedTensorType>(cut.getType());
      if (t && isa<FloatType>(t.getElementType()) && !fp.pinned.contains(cut)) {
        segs.back().output = cut;
        Segment next;
        next.input = cut;
        segs.push_back(std::move(next));
      }
    }
  }
  return segs;
}

/// Measures each segment (input and saved bytes, FLOPs to recompute,
/// whether it can be, its op signature); returns the bytes kept whatever
/// the choice: cut values and pinned values.
int64_t measureSegments(std::vector<Segment> &segs, const ForwardPass &fp,
                        Operation *lossDef) {
  int64_t fixed = 0;
  for (Value v : fp.pinned)
    fixed += tensorBytes(v.getType());
  for (Segment &s : segs) {
    if (s.input)
      s.inputBytes = tensorBytes(s.input.getType());
    fixed += s.inputBytes;
    bool pure = true, hasLoss = false;
    llvm::hash_code sig = llvm::hash_value(s.ops.size());
    for (Operation *op : s.ops) {
      // A tensor-parallel all-reduce is recomputed like any op: every rank
      // of its group runs the same program, so the copies in the backward
      // pass meet in the same order (Megatron recomputes them).
      pure &=
          (isPure(op) ||
           isa<TpAllReduceOp, TpIdentityOp, SpAllGatherOp, SpReduceScatterOp>(
               op)) &&
          op->getNumRegions() == 0;
      hasLoss |= op == lossDef;
      sig = llvm::hash_combine(sig, op->getName().getStringRef());
      for (Value r : op->getResults())
        if (fp.bwdUsed.contains(r) && r != s.output && !fp.pinned.contains(r)) {
          s.saved.push_back(r);
          s.savedBytes += tensorBytes(r.getType());
        }
    }
    s.signature = sig;
    s.flops = closureFlops(s.ops, s.saved);
    s.recomputable = pure && !hasLoss && s.savedBytes > 0;
  }
  return fixed;
}

/// Clones segments [a, b] (their saved values, and for a unit of several
/// segments its inner cut values) just before the first backward use, and
/// points the backward pass at the clones.
void recomputeUnit(ArrayRef<Segment> segs, size_t a, size_t b, Operation *ret,
                   const ForwardPass &fp) {
  SmallVector<Value> wanted;
  SmallVector<Operation *> ops;
  for (size_t j = a; j <= b; ++j) {
    wanted.append(segs[j].saved);
    if (j < b && segs[j].output)
      wanted.push_back(segs[j].output);
    ops.append(segs[j].ops);
  }
  llvm::DenseSet<Operation *> need = closure(ops, wanted);
  Operation *at = firstBackwardUser(
      wanted, ret, [&](Operation *op) { return fp.contains(op); });
  if (!at)
    return;
  OpBuilder builder(at);
  IRMapping map;
  llvm::DenseSet<Operation *> clones;
  for (Operation *op : ops) {
    if (!need.contains(op))
      continue;
    Operation *copy = builder.clone(*op, map);
    copy->setAttr("ds.recompute", builder.getUnitAttr());
    clones.insert(copy);
  }
  for (Value v : wanted) {
    Value copy = map.lookupOrNull(v);
    if (!copy)
      continue;
    v.replaceUsesWithIf(copy, [&](OpOperand &use) {
      Operation *owner = use.getOwner();
      return !fp.contains(owner) && owner != ret && !clones.contains(owner);
    });
  }
}

/// The plans the summary compares, and the one chosen.
struct Plans {
  Choice none, full, everyLayer, chosen;
};

struct RecomputePass : impl::RecomputePassBase<RecomputePass> {
  using RecomputePassBase::RecomputePassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward")
      return;
    if (mode != "none" && mode != "full" && mode != "every-layer" &&
        mode != "budget") {
      func.emitError("unknown recompute mode '")
          << mode << "' (choose none, full, every-layer or budget)";
      return signalPassFailure();
    }
    auto started = std::chrono::steady_clock::now();
    Block &body = func.getBody().front();
    Operation *ret = body.getTerminator();
    Operation *lossDef = forwardEnd(func);
    if (!lossDef || lossDef->getNextNode() == ret) {
      if (mode != "none") {
        func.emitError("--recompute needs a training step (a loss and its "
                       "backward pass)");
        return signalPassFailure();
      }
      return;
    }
    regatherForBackward(body, lossDef);
    ForwardPass fp = analyzeForward(func, lossDef);
    int64_t stepFlops = 0;
    func.walk([&](CostOpInterface c) { stepFlops += c.getFlops(); });
    std::vector<Segment> segs = cutSegments(fp, lossDef);
    int64_t fixed = measureSegments(segs, fp, lossDef);

    ChainModel model(segs, fixed);
    Layers layers = recompute::findLayers(segs);
    Plans plans{model.none(),
                model.full(),
                recompute::planEveryLayer(segs, layers, fixed),
                {}};
    FailureOr<Choice> chosen = choose(func, model, plans);
    if (failed(chosen))
      return signalPassFailure();
    plans.chosen = *chosen;

    // Rewrite: clone each recomputed unit before its first backward use.
    if (mode == "every-layer") {
      for (auto [a, b] : layers.units)
        recomputeUnit(segs, a, b, ret, fp);
    } else {
      for (size_t j = 0; j < segs.size(); ++j)
        if (plans.chosen.recompute[j])
          recomputeUnit(segs, j, j, ret, fp);
    }
    int64_t planningUs = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - started)
                             .count();
    func->setAttr("ds.recompute",
                  summarize(segs, plans, fixed, layers, stepFlops, planningUs));
  }

  /// The plan of the mode.
  FailureOr<Choice> choose(func::FuncOp func, const ChainModel &model,
                           const Plans &plans) {
    if (mode == "full")
      return plans.full;
    if (mode == "every-layer")
      return plans.everyLayer;
    if (mode != "budget")
      return plans.none;
    std::optional<Choice> best = recompute::solveBudget(model, budget);
    if (!best && plans.full.activations <= budget)
      best = plans.full;
    if (!best)
      return func.emitError("recompute budget of ")
             << static_cast<int64_t>(budget)
             << " bytes of activations is below the minimum of "
             << plans.full.activations << " bytes (every segment recomputed)";
    return *best;
  }

  /// The `ds.recompute` summary --report prints: per segment its costs and
  /// the choice, and each plan's activation bytes and extra FLOPs.
  DictionaryAttr summarize(ArrayRef<Segment> segs, const Plans &plans,
                           int64_t fixed, const Layers &layers,
                           int64_t stepFlops, int64_t planningUs) {
    OpBuilder b(&getContext());
    auto ints = [&](auto f) {
      SmallVector<int64_t> v;
      for (size_t j = 0; j < segs.size(); ++j)
        v.push_back(f(j));
      return b.getDenseI64ArrayAttr(v);
    };
    auto plan = [&](StringRef name, const Choice &c) {
      return b.getNamedAttr(name,
                            b.getDenseI64ArrayAttr({c.activations, c.flops}));
    };
    SmallVector<NamedAttribute> summary{
        b.getNamedAttr("mode", b.getStringAttr(mode)),
        b.getNamedAttr("seg_saved",
                       ints([&](size_t j) { return segs[j].savedBytes; })),
        b.getNamedAttr("seg_input",
                       ints([&](size_t j) { return segs[j].inputBytes; })),
        b.getNamedAttr("seg_flops",
                       ints([&](size_t j) { return segs[j].flops; })),
        b.getNamedAttr("seg_recomputable", ints([&](size_t j) {
                         return int64_t(segs[j].recomputable);
                       })),
        b.getNamedAttr("seg_chosen", ints([&](size_t j) {
                         return int64_t(plans.chosen.recompute[j]);
                       })),
        b.getNamedAttr("fixed", b.getI64IntegerAttr(fixed)),
        b.getNamedAttr("layer_period", b.getI64IntegerAttr(layers.period)),
        b.getNamedAttr("layers", b.getI64IntegerAttr(layers.units.size())),
        b.getNamedAttr("step_flops", b.getI64IntegerAttr(stepFlops)),
        b.getNamedAttr("budget", b.getI64IntegerAttr(budget)),
        b.getNamedAttr("planning_us", b.getI64IntegerAttr(planningUs)),
        plan("none", plans.none),
        plan("full", plans.full),
        plan("every_layer", plans.everyLayer),
        plan("chosen", plans.chosen)};
    return b.getDictionaryAttr(summary);
  }
};

} // namespace
} // namespace mlir::ds
