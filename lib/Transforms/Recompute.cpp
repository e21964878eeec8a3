//===- Recompute.cpp - activation recomputation by memory cost -----------===//
//
// Part of the ds project.
//
// Runs after autodiff, before ZeRO. The forward pass is cut into segments
// at its cut points (exactly one data tensor crosses); a recomputed
// segment is cloned just before the backward pass first reads it, from
// its kept input, so its activations live only around their backward use.
// docs/design.md section 8 has the cost model and the solver.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"
#include "mlir/IR/IRMapping.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"

#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <set>

namespace mlir::ds {
#define GEN_PASS_DEF_RECOMPUTEPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

int64_t tensorBytes(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  if (!r || !r.hasStaticShape())
    return 0;
  int64_t bits = r.getElementType().getIntOrFloatBitWidth();
  return r.getNumElements() * ((bits + 7) / 8);
}

struct Segment {
  SmallVector<Operation *> ops; // forward data ops, in order
  Value input, output;          // kept cut values entering and leaving
  SmallVector<Value> saved;     // values the backward pass reads
  int64_t savedBytes = 0, inputBytes = 0, flops = 0;
  bool recomputable = false;
  llvm::hash_code signature = 0;
};

/// A plan's modelled activation bytes: kept saved values, kept cut values,
/// and the largest recomputed unit while its backward runs.
struct Choice {
  std::vector<bool> recompute; // per segment
  int64_t activations = 0, flops = 0;
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
    Operation *lossDef = nullptr;
    for (unsigned i = 0; i < ret->getNumOperands(); ++i)
      if (func.getResultAttr(i, attrs::kLoss))
        lossDef = ret->getOperand(i).getDefiningOp();
    // A pipeline stage without the loss: its forward ends where its
    // backward section starts (the last op before the mark).
    if (!lossDef && func->hasAttr("ds.pipeline"))
      for (Operation &op : body)
        if (isa<PipeMarkOp>(op) && !op.hasAttr("update")) {
          lossDef = op.getPrevNode();
          break;
        }
    if (!lossDef || lossDef->getNextNode() == ret) {
      if (mode != "none") {
        func.emitError("--recompute needs a training step (a loss and its "
                       "backward pass)");
        return signalPassFailure();
      }
      return;
    }

    // Sequence parallelism: a block's gathered input is gathered again for
    // the backward pass (as Megatron does), so that only the rank's rows
    // are kept between the passes.
    {
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
        Operation *firstBwd = nullptr;
        for (Operation *user : g->getUsers())
          if (!forward.contains(user) && user != ret &&
              (!firstBwd || user->isBeforeInBlock(firstBwd)))
            firstBwd = user;
        if (!firstBwd)
          continue;
        OpBuilder b(firstBwd);
        Operation *again = b.clone(*g);
        g.getResult().replaceUsesWithIf(again->getResult(0), [&](OpOperand &u) {
          return !forward.contains(u.getOwner()) && u.getOwner() != ret;
        });
      }
    }

    // The forward pass, and the values computed from arguments and
    // constants alone (kept: they cross every cut).
    SmallVector<Operation *> fwd;
    llvm::DenseMap<Operation *, int> pos;
    llvm::DenseSet<Operation *> argOnly;
    for (Operation &op : body) {
      pos[&op] = fwd.size();
      fwd.push_back(&op);
      bool fromArgs = op.hasTrait<OpTrait::ConstantLike>() ||
                      (isPure(&op) && op.getNumRegions() == 0);
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        fromArgs = fromArgs && (def ? argOnly.contains(def)
                                    : !isData(func, cast<BlockArgument>(v)));
      }
      if (fromArgs)
        argOnly.insert(&op);
      if (&op == lossDef)
        break;
    }
    auto inFwd = [&](Operation *op) { return pos.count(op) != 0; };
    int64_t stepFlops = 0;
    func.walk([&](CostOpInterface c) { stepFlops += c.getFlops(); });

    // Per data value: its last forward use, whether the backward pass (or
    // the function's results: pinned) reads it.
    llvm::DenseMap<Value, int> lastUse;
    llvm::DenseSet<Value> bwdUsed, pinned;
    for (Operation *op : fwd) {
      if (argOnly.contains(op))
        continue;
      for (Value r : op->getResults()) {
        int last = pos[op];
        for (Operation *user : r.getUsers()) {
          if (inFwd(user))
            last = std::max(last, pos[user]);
          else if (user == ret)
            pinned.insert(r);
          else
            bwdUsed.insert(r);
        }
        lastUse[r] = last;
      }
    }

    // Cut points: after op k exactly one data value is still to be read by
    // a later forward op.
    std::vector<Segment> segs(1);
    std::set<std::pair<int, size_t>> open; // (last use, index in values)
    std::vector<Value> values;
    for (Operation *op : fwd) {
      int k = pos[op];
      if (!argOnly.contains(op)) {
        segs.back().ops.push_back(op);
        for (Value r : op->getResults()) {
          if (lastUse[r] > k) {
            values.push_back(r);
            open.insert({lastUse[r], values.size() - 1});
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
        if (t && isa<FloatType>(t.getElementType()) && !pinned.contains(cut)) {
          segs.back().output = cut;
          Segment next;
          next.input = cut;
          segs.push_back(std::move(next));
        }
      }
    }

    // Costs.
    int64_t fixed = 0; // kept whatever the choice: cut values, pinned
    for (Value v : pinned)
      fixed += tensorBytes(v.getType());
    for (size_t j = 0; j < segs.size(); ++j) {
      Segment &s = segs[j];
      if (s.input)
        s.inputBytes = tensorBytes(s.input.getType());
      fixed += s.inputBytes;
      bool pure = true, hasLoss = false;
      llvm::hash_code sig = llvm::hash_value(s.ops.size());
      for (Operation *op : s.ops) {
        // A tensor-parallel all-reduce is recomputed like any op: every
        // rank of its group runs the same program, so the copies in the
        // backward pass meet in the same order (Megatron recomputes them).
        pure &= (isPure(op) || isa<TpAllReduceOp, TpIdentityOp, SpAllGatherOp,
                                     SpReduceScatterOp>(op)) &&
                op->getNumRegions() == 0;
        hasLoss |= op == lossDef;
        sig = llvm::hash_combine(sig, op->getName().getStringRef());
        for (Value r : op->getResults())
          if (bwdUsed.contains(r) && r != s.output && !pinned.contains(r)) {
            s.saved.push_back(r);
            s.savedBytes += tensorBytes(r.getType());
          }
      }
      s.signature = sig;
      s.flops = closureFlops(s.ops, s.saved);
      s.recomputable = pure && !hasLoss && s.savedBytes > 0;
    }

    // The plans to compare: none, full, every-layer (layer units), and the
    // chosen one.
    std::vector<int64_t> saved(segs.size()), flops(segs.size());
    for (size_t j = 0; j < segs.size(); ++j) {
      saved[j] = segs[j].savedBytes;
      flops[j] = segs[j].flops;
    }
    auto model = [&](const std::vector<bool> &rc) {
      Choice c;
      c.recompute = rc;
      c.activations = fixed + chainPeak(saved, rc);
      for (size_t j = 0; j < segs.size(); ++j)
        if (rc[j])
          c.flops += flops[j];
      return c;
    };
    std::vector<bool> none(segs.size(), false), all(segs.size());
    for (size_t j = 0; j < segs.size(); ++j)
      all[j] = segs[j].recomputable;
    Choice noneC = model(none), fullC = model(all);
    // Layers: the longest run of segments repeating with period p (1-4).
    size_t period = 0, runStart = 0, runLen = 0;
    for (size_t p = 1; p <= 4; ++p)
      for (size_t i = 0; i + p < segs.size();) {
        size_t l = 0;
        while (i + l + p < segs.size() &&
               segs[i + l].signature == segs[i + l + p].signature)
          ++l;
        size_t covered = (l + p) / p * p;
        if (l >= p && covered > runLen) {
          period = p;
          runStart = i;
          runLen = covered;
        }
        i += std::max<size_t>(l, 1);
      }
    std::vector<std::pair<size_t, size_t>> units; // [first, last] segments
    for (size_t i = runStart; period && i + period <= runStart + runLen;
         i += period) {
      bool ok = true;
      for (size_t j = i; j < i + period; ++j)
        ok &= segs[j].recomputable || segs[j].savedBytes == 0;
      if (ok)
        units.push_back({i, i + period - 1});
    }
    // Every layer: a unit of `period` segments is recomputed whole, its
    // inner cut values with it (only the unit's input stays).
    Choice layerC;
    {
      std::vector<int64_t> merged;
      std::vector<bool> rc, perSeg(segs.size(), false);
      int64_t dropped = 0;
      size_t u = 0;
      for (size_t j = 0; j < segs.size();) {
        if (u < units.size() && units[u].first == j) {
          int64_t unit = 0;
          for (size_t k = units[u].first; k <= units[u].second; ++k) {
            unit += segs[k].savedBytes;
            perSeg[k] = segs[k].recomputable;
            layerC.flops += perSeg[k] ? segs[k].flops : 0;
            if (k < units[u].second) {
              unit += segs[k + 1].inputBytes;
              dropped += segs[k + 1].inputBytes;
            }
          }
          merged.push_back(unit);
          rc.push_back(true);
          j = units[u].second + 1;
          ++u;
        } else {
          merged.push_back(segs[j].savedBytes);
          rc.push_back(false);
          ++j;
        }
      }
      layerC.recompute = perSeg;
      layerC.activations = fixed - dropped + chainPeak(merged, rc);
    }

    Choice chosen = noneC;
    bool layerUnits = false;
    if (mode == "full") {
      chosen = fullC;
    } else if (mode == "every-layer") {
      chosen = layerC;
      layerUnits = true;
    } else if (mode == "budget") {
      std::optional<Choice> best = solveBudget(segs, fixed, budget, model);
      if (!best && fullC.activations <= budget)
        best = fullC;
      if (!best) {
        func.emitError("recompute budget of ")
            << static_cast<int64_t>(budget)
            << " bytes of activations is below the minimum of "
            << fullC.activations << " bytes (every segment recomputed)";
        return signalPassFailure();
      }
      chosen = *best;
    }

    // Rewrite: clone each recomputed unit before its first backward use.
    if (layerUnits) {
      for (auto [a, b] : units)
        recompute(segs, a, b, ret, inFwd);
    } else {
      for (size_t j = 0; j < segs.size(); ++j)
        if (chosen.recompute[j])
          recompute(segs, j, j, ret, inFwd);
    }

    OpBuilder b(func.getContext());
    auto ints = [&](auto f) {
      SmallVector<int64_t> v;
      for (size_t j = 0; j < segs.size(); ++j)
        v.push_back(f(j));
      return b.getDenseI64ArrayAttr(v);
    };
    auto plan = [&](StringRef name, const Choice &c) {
      return b.getNamedAttr(
          name, b.getDenseI64ArrayAttr({c.activations, c.flops}));
    };
    SmallVector<NamedAttribute> summary{
        b.getNamedAttr("mode", b.getStringAttr(mode)),
        b.getNamedAttr("seg_saved",
                       ints([&](size_t j) { return segs[j].savedBytes; })),
        b.getNamedAttr("seg_input",
                       ints([&](size_t j) { return segs[j].inputBytes; })),
        b.getNamedAttr("seg_flops", ints([&](size_t j) { return segs[j].flops; })),
        b.getNamedAttr("seg_recomputable", ints([&](size_t j) {
                         return int64_t(segs[j].recomputable);
                       })),
        b.getNamedAttr("seg_chosen", ints([&](size_t j) {
                         return int64_t(chosen.recompute[j]);
                       })),
        b.getNamedAttr("fixed", b.getI64IntegerAttr(fixed)),
        b.getNamedAttr("layer_period", b.getI64IntegerAttr(period)),
        b.getNamedAttr("layers", b.getI64IntegerAttr(units.size())),
        b.getNamedAttr("step_flops", b.getI64IntegerAttr(stepFlops)),
        b.getNamedAttr("budget", b.getI64IntegerAttr(budget)),
        b.getNamedAttr("planning_us",
                       b.getI64IntegerAttr(
                           std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::steady_clock::now() - started)
                               .count())),
        plan("none", noneC),
        plan("full", fullC),
        plan("every_layer", layerC),
        plan("chosen", chosen)};
    func->setAttr("ds.recompute", b.getDictionaryAttr(summary));
  }

  /// Whether argument `arg` is data (a graph input), not a parameter,
  /// buffer or the step's scalars, which every segment may read.
  static bool isData(func::FuncOp func, BlockArgument arg) {
    unsigned i = arg.getArgNumber();
    return !func.getArgAttr(i, attrs::kParam) &&
           !func.getArgAttr(i, "ds.loss_scale") && !func.getArgAttr(i, "ds.step");
  }

  /// The ops of `ops` that computing `wanted` needs.
  static llvm::DenseSet<Operation *> closure(ArrayRef<Operation *> ops,
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
  static int64_t closureFlops(ArrayRef<Operation *> ops,
                              ArrayRef<Value> wanted) {
    int64_t flops = 0;
    for (Operation *op : closure(ops, wanted))
      if (auto c = dyn_cast<CostOpInterface>(op))
        flops += c.getFlops();
    return flops;
  }

  /// The chain model's activation peak (without the always-kept bytes):
  /// at the end of the forward pass every kept segment's saved values are
  /// live; during segment j's backward pass the kept values of the
  /// segments before it and segment j's own (kept or recomputed) are.
  static int64_t chainPeak(ArrayRef<int64_t> saved,
                           const std::vector<bool> &rc) {
    int64_t prefix = 0, peak = 0;
    for (size_t j = 0; j < saved.size(); ++j) {
      peak = std::max(peak, prefix + saved[j]);
      if (!rc[j])
        prefix += saved[j];
    }
    return std::max(peak, prefix);
  }

  /// The cheapest set of recomputed segments (least FLOPs; then least
  /// activations) whose modelled activations fit `budget`. Exhaustive for
  /// up to 16 recomputable segments; beyond, a dynamic program over the
  /// chain whose state is the kept prefix in bytes, rounded up to
  /// 1/4096 of the budget (so its answer always fits).
  static std::optional<Choice>
  solveBudget(const std::vector<Segment> &segs, int64_t fixed, int64_t budget,
              llvm::function_ref<Choice(const std::vector<bool> &)> model) {
    std::vector<size_t> free;
    for (size_t j = 0; j < segs.size(); ++j)
      if (segs[j].recomputable)
        free.push_back(j);
    std::optional<Choice> best;
    auto consider = [&](const std::vector<bool> &rc) {
      Choice c = model(rc);
      if (c.activations > budget)
        return;
      if (!best || c.flops < best->flops ||
          (c.flops == best->flops && c.activations < best->activations))
        best = c;
    };
    if (free.size() <= 16) {
      for (uint32_t mask = 0; mask < (1u << free.size()); ++mask) {
        std::vector<bool> rc(segs.size(), false);
        for (size_t k = 0; k < free.size(); ++k)
          rc[free[k]] = (mask >> k) & 1;
        consider(rc);
      }
      return best;
    }
    int64_t room = budget - fixed;
    if (room < 0)
      return best;
    int64_t unit = std::max<int64_t>(1, room / 4096);
    int64_t cap = room / unit;
    auto up = [&](int64_t bytes) { return (bytes + unit - 1) / unit; };
    const int64_t inf = std::numeric_limits<int64_t>::max() / 4;
    // cost[p]: least FLOPs with a kept prefix of p units; from[j][p]: the
    // prefix before segment j, and whether j was recomputed.
    std::vector<int64_t> cost(cap + 1, inf);
    cost[0] = 0;
    std::vector<std::vector<std::pair<int32_t, bool>>> from(
        segs.size(), std::vector<std::pair<int32_t, bool>>(cap + 1, {-1, false}));
    for (size_t j = 0; j < segs.size(); ++j) {
      std::vector<int64_t> next(cap + 1, inf);
      int64_t a = up(segs[j].savedBytes);
      for (int64_t p = 0; p <= cap; ++p) {
        if (cost[p] >= inf || p + a > cap)
          continue; // segment j's backward would not fit
        if (p + a <= cap && cost[p] < next[p + a]) { // keep
          next[p + a] = cost[p];
          from[j][p + a] = {static_cast<int32_t>(p), false};
        }
        if (segs[j].recomputable && cost[p] + segs[j].flops < next[p]) {
          next[p] = cost[p] + segs[j].flops;
          from[j][p] = {static_cast<int32_t>(p), true};
        }
      }
      cost = std::move(next);
    }
    int64_t end = -1;
    for (int64_t p = 0; p <= cap; ++p)
      if (cost[p] < inf && (end < 0 || cost[p] < cost[end]))
        end = p;
    if (end < 0)
      return best;
    std::vector<bool> rc(segs.size(), false);
    for (size_t j = segs.size(); j-- > 0;) {
      auto [prev, recomputed] = from[j][end];
      rc[j] = recomputed;
      end = prev;
    }
    consider(rc);
    return best;
  }

  /// Clones segments [a, b] (their saved values, and for a unit of several
  /// segments its inner cut values) just before the first backward use,
  /// and points the backward pass at the clones.
  static void recompute(std::vector<Segment> &segs, size_t a, size_t b,
                        Operation *ret,
                        llvm::function_ref<bool(Operation *)> inFwd) {
    SmallVector<Value> wanted;
    SmallVector<Operation *> ops;
    for (size_t j = a; j <= b; ++j) {
      wanted.append(segs[j].saved);
      if (j < b && segs[j].output)
        wanted.push_back(segs[j].output);
      ops.append(segs[j].ops);
    }
    llvm::DenseSet<Operation *> need = closure(ops, wanted);
    // The first backward reader of any wanted value.
    Operation *at = nullptr;
    for (Value v : wanted)
      for (Operation *user : v.getUsers())
        if (!inFwd(user) && user != ret &&
            (!at || user->isBeforeInBlock(at)))
          at = user;
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
        return !inFwd(owner) && owner != ret && !clones.contains(owner);
      });
    }
  }
};
} // namespace
} // namespace mlir::ds
