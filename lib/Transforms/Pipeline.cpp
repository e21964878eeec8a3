//===- Pipeline.cpp - cutting the forward graph into pipeline stages ------===//
//
// Part of the ds project.
//
// The forward op list is cut at points where the fewest activation bytes
// cross (a transformer's residual stream between sublayers), balancing the
// stages' FLOPs; each stage becomes a nested module with its own @forward
// (MPMD). docs/design.md section 10.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Pipeline.h"
#include "ds/Dialect/Ds/IR/DsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

using namespace mlir;
using namespace mlir::ds;
using mlir::ds::detail::tensorBytes;

namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Values a stage never receives: arguments (each stage takes the
/// parameters and inputs it uses) and constants (each stage keeps its own).
bool isFree(Value v) {
  Operation *d = v.getDefiningOp();
  return !d || d->hasTrait<OpTrait::ConstantLike>();
}

} // namespace

SmallVector<ModuleOp> mlir::ds::pipelineStages(ModuleOp module) {
  SmallVector<ModuleOp> out;
  for (Operation &op : *module.getBody())
    if (auto m = dyn_cast<ModuleOp>(op); m && m->hasAttr("ds.stage"))
      out.push_back(m);
  return out;
}

FailureOr<PipelineSplit> mlir::ds::splitPipeline(ModuleOp module,
                                                 int64_t numStages,
                                                 int64_t ranks) {
  if (ranks <= 0)
    ranks = numStages;
  // Stage (chunk) c runs on pipeline rank c mod ranks; hand-overs name the
  // peer by its rank distance, and their tags by the boundary (the lower
  // chunk), the tensor and the direction.
  auto rankDelta = [&](int64_t from, int64_t to) {
    return to % ranks - from % ranks;
  };
  auto tagOf = [](int64_t boundary, int64_t index) {
    return ((boundary % 32) * 16 + index % 16) * 2;
  };
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func)
    return module.emitError("pipeline parallelism needs @forward");
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  SmallVector<Operation *> ops;
  llvm::DenseMap<Operation *, int64_t> index;
  for (Operation &op : body.without_terminator()) {
    if (op.getNumRegions() != 0)
      return op.emitOpError("has regions: pipeline stages cannot be cut "
                            "through it");
    index[&op] = static_cast<int64_t>(ops.size());
    ops.push_back(&op);
  }
  int64_t n = static_cast<int64_t>(ops.size());
  // The last place a cut may go: every returned value (the loss) is made
  // in the last stage.
  int64_t maxCut = n - 1;
  for (Value v : ret->getOperands())
    if (Operation *d = v.getDefiningOp(); d && !isFree(v))
      maxCut = std::min(maxCut, index.lookup(d));
  // Crossing bytes and counts at each cut c (between ops c-1 and c): the
  // values made before c and used at or after c.
  std::vector<int64_t> bytes(n + 2, 0), count(n + 2, 0);
  for (int64_t i = 0; i < n; ++i)
    for (Value r : ops[i]->getResults()) {
      if (isFree(r))
        continue;
      int64_t last = i;
      for (Operation *user : r.getUsers())
        last = std::max(last, user == ret ? n : index.lookup(user));
      if (last == i)
        continue;
      bytes[i + 1] += tensorBytes(r.getType());
      bytes[last + 1] -= tensorBytes(r.getType());
      count[i + 1] += 1;
      count[last + 1] -= 1;
    }
  for (int64_t c = 1; c <= n; ++c) {
    bytes[c] += bytes[c - 1];
    count[c] += count[c - 1];
  }
  // Cut points: where the fewest activations cross (one, for a
  // transformer's residual stream between sublayers or an MLP between
  // layers); `ref` is the most bytes one of them hands over.
  int64_t fewest = std::numeric_limits<int64_t>::max(), ref = 0;
  for (int64_t c = 1; c <= maxCut; ++c)
    if (count[c] > 0)
      fewest = std::min(fewest, count[c]);
  std::vector<int64_t> cuts;
  for (int64_t c = 1; c <= maxCut; ++c)
    if (count[c] > 0 && count[c] == fewest) {
      cuts.push_back(c);
      ref = std::max(ref, bytes[c]);
    }
  int64_t k = static_cast<int64_t>(cuts.size());
  // Every stage holds a trainable parameter (a stage of activations alone
  // would only forward them): ops using one, counted by prefix.
  std::vector<int64_t> withParam(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    bool uses = llvm::any_of(ops[i]->getOperands(), [&](Value v) {
      auto a = dyn_cast<BlockArgument>(v);
      return a && a.getOwner() == &body &&
             func.getArgAttr(a.getArgNumber(), attrs::kTrainable);
    });
    withParam[i + 1] = withParam[i] + (uses ? 1 : 0);
  }
  auto holds = [&](int64_t a, int64_t b) {
    return withParam[b] - withParam[a] > 0;
  };
  // The most stages the cut points allow (greedy: cut as soon as the stage
  // so far holds a parameter and the rest still does).
  int64_t most = 0;
  for (int64_t a = 0, x = 0; x <= k; ++x) {
    int64_t c = x < k ? cuts[x] : n;
    if (holds(a, c) && holds(c, n) && x < k) {
      ++most;
      a = c;
    } else if (x == k && holds(a, n)) {
      ++most;
    }
  }
  if (numStages > most) {
    auto diag = func.emitError("--pipeline-parallel=");
    if (ranks < numStages)
      diag << ranks << " with --schedule=interleaved:" << numStages / ranks
           << " needs " << numStages << " model chunks, more";
    else
      diag << numStages << " is more stages";
    return diag << " than the model's forward can be "
           << "cut into: at most " << most << " (" << k
           << " cut points, where " << fewest
           << " activation(s) of at most " << ref
           << " bytes cross, and every stage holds parameters)";
  }

  // Balance: a dynamic program over the cut points minimising the largest
  // stage's FLOPs (forward; the backward is about twice as much everywhere).
  std::vector<int64_t> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t f = 0;
    if (auto cost = dyn_cast<CostOpInterface>(ops[i]))
      f = cost.getFlops();
    prefix[i + 1] = prefix[i] + std::max<int64_t>(f, 1);
  }
  auto cost = [&](int64_t a, int64_t b) { return prefix[b] - prefix[a]; };
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> bounds{0};
  if (numStages > 1) {
    // best[j][x]: the smallest largest stage with j cuts, the last at cuts[x].
    std::vector<std::vector<int64_t>> best(numStages,
                                           std::vector<int64_t>(k, inf)),
        from(numStages, std::vector<int64_t>(k, -1));
    for (int64_t x = 0; x < k; ++x)
      if (holds(0, cuts[x]))
        best[1][x] = cost(0, cuts[x]);
    for (int64_t j = 2; j < numStages; ++j)
      for (int64_t x = 0; x < k; ++x)
        for (int64_t y = 0; y < x; ++y) {
          if (best[j - 1][y] == inf || !holds(cuts[y], cuts[x]))
            continue;
          int64_t v = std::max(best[j - 1][y], cost(cuts[y], cuts[x]));
          if (v < best[j][x]) {
            best[j][x] = v;
            from[j][x] = y;
          }
        }
    int64_t bestX = -1, bestV = inf;
    for (int64_t x = 0; x < k; ++x) {
      if (best[numStages - 1][x] == inf || !holds(cuts[x], n))
        continue;
      int64_t v = std::max(best[numStages - 1][x], cost(cuts[x], n));
      if (v < bestV) {
        bestV = v;
        bestX = x;
      }
    }
    std::vector<int64_t> chosen;
    for (int64_t j = numStages - 1, x = bestX; j >= 1; x = from[j][x], --j)
      chosen.push_back(cuts[x]);
    std::reverse(chosen.begin(), chosen.end());
    bounds.insert(bounds.end(), chosen.begin(), chosen.end());
  }
  bounds.push_back(n);
  auto stageOf = [&](int64_t i) {
    return static_cast<int64_t>(
               std::upper_bound(bounds.begin(), bounds.end(), i) -
               bounds.begin()) -
           1;
  };

  // Which values depend on a trainable parameter: their gradient goes back.
  llvm::DenseSet<Value> trained;
  for (BlockArgument a : body.getArguments())
    if (func.getArgAttr(a.getArgNumber(), attrs::kTrainable))
      trained.insert(a);
  for (Operation *op : ops)
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return trained.contains(v); }))
      for (Value r : op->getResults())
        trained.insert(r);

  // The stages that use each argument: parameters used by several are tied.
  PipelineSplit split;
  split.cutPoints = k;
  std::vector<std::set<int64_t>> argStages(body.getNumArguments());
  for (BlockArgument a : body.getArguments())
    for (Operation *user : a.getUsers())
      if (user != ret)
        argStages[a.getArgNumber()].insert(stageOf(index.lookup(user)));
  llvm::DenseMap<unsigned, int64_t> tiedIds;
  // Interleaved (several chunks per rank): the updates after the schedule
  // run in chunk order, so tied parameters must all join the same chunks
  // (two pairs in opposite orders would wait on each other).
  if (ranks < numStages) {
    std::set<std::set<int64_t>> groups;
    for (BlockArgument a : body.getArguments())
      if (argStages[a.getArgNumber()].size() > 1)
        groups.insert(argStages[a.getArgNumber()]);
    if (groups.size() > 1)
      return func.emitError("the interleaved schedule supports parameters "
                            "shared by one set of chunks; this model shares "
                            "them among ")
             << groups.size() << " different sets";
  }
  for (BlockArgument a : body.getArguments())
    if (argStages[a.getArgNumber()].size() > 1)
      if (auto name =
              func.getArgAttrOfType<StringAttr>(a.getArgNumber(), attrs::kParam)) {
        tiedIds[a.getArgNumber()] = static_cast<int64_t>(split.tied.size());
        split.tied.push_back(name.str());
      }

  // The crossing values at each boundary, in definition order (the tags).
  auto crossing = [&](int64_t c) {
    SmallVector<std::pair<int64_t, unsigned>> out; // (op, result)
    for (int64_t i = 0; i < c; ++i)
      for (OpResult r : ops[i]->getResults()) {
        if (isFree(r))
          continue;
        bool later = false;
        for (Operation *user : r.getUsers())
          later |= user == ret || index.lookup(user) >= c;
        if (later)
          out.push_back({i, r.getResultNumber()});
      }
    return out;
  };

  OpBuilder top(module.getContext());
  for (int64_t s = 0; s < numStages; ++s) {
    int64_t a = bounds[s], b = bounds[s + 1];
    PipelineStage info;
    info.firstOp = a;
    info.lastOp = b;
    info.flops = cost(a, b);
    OwningOpRef<ModuleOp> clone(module.clone());
    auto f = clone->lookupSymbol<func::FuncOp>("forward");
    Block &blk = f.getBody().front();
    SmallVector<Operation *> cops;
    for (Operation &op : blk.without_terminator())
      cops.push_back(&op);
    Operation *cret = blk.getTerminator();
    OpBuilder bld(&blk, blk.begin());
    llvm::DenseMap<Operation *, int64_t> cindex;
    std::map<std::pair<int64_t, unsigned>, Value> received;
    for (auto [i, op] : llvm::enumerate(cops))
      cindex[op] = static_cast<int64_t>(i);
    // Received: what the previous stage made and this one (or a later one)
    // uses.
    if (s > 0)
      for (auto [tag, vr] : llvm::enumerate(crossing(a))) {
        Value v = cops[vr.first]->getResult(vr.second);
        auto recv = PipeRecvOp::create(
            bld, v.getLoc(), v.getType(),
            bld.getI64IntegerAttr(rankDelta(s, s - 1)),
            bld.getI64IntegerAttr(tagOf(s - 1, static_cast<int64_t>(tag))));
        if (trained.contains(ops[vr.first]->getResult(vr.second)) &&
            isFloatTensor(v))
          recv->setAttr("ds.needs_grad", bld.getUnitAttr());
        received[vr] = recv.getResult();
        v.replaceUsesWithIf(recv.getResult(), [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return user == cret || (cindex.count(user) && cindex[user] >= a);
        });
      }
    // Sent: what this stage (or an earlier one) made and a later one uses.
    if (s + 1 < numStages) {
      bld.setInsertionPoint(cret);
      for (auto [tag, vr] : llvm::enumerate(crossing(b))) {
        // A value made before this stage that a later one uses passes
        // through: what was received goes on.
        Value v = vr.first < a ? received[vr]
                               : cops[vr.first]->getResult(vr.second);
        auto send = PipeSendOp::create(
            bld, v.getLoc(), v, bld.getI64IntegerAttr(rankDelta(s, s + 1)),
            bld.getI64IntegerAttr(tagOf(s, static_cast<int64_t>(tag))));
        info.sendBytes += tensorBytes(v.getType());
        if (trained.contains(ops[vr.first]->getResult(vr.second)) &&
            isFloatTensor(v))
          send->setAttr("ds.needs_grad", bld.getUnitAttr());
      }
      // Only the last stage returns the forward's results.
      cret->setOperands({});
      f.setType(FunctionType::get(f.getContext(), f.getArgumentTypes(), {}));
      f.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
    }
    // Drop the other stages' ops, users first.
    for (int64_t i = n - 1; i >= b; --i)
      if (cops[i]->use_empty())
        cops[i]->erase();
      else
        return cops[i]->emitOpError("is used before its stage");
    for (int64_t i = a - 1; i >= 0; --i)
      if (cops[i]->use_empty())
        cops[i]->erase();
    // Drop the arguments this stage does not use; mark tied parameters.
    llvm::BitVector unused(blk.getNumArguments());
    for (BlockArgument arg : blk.getArguments()) {
      unsigned i = arg.getArgNumber();
      if (arg.use_empty()) {
        unused.set(i);
        continue;
      }
      if (argStages[i].size() > 1) {
        SmallVector<int64_t> peers;
        for (int64_t other : argStages[i]) {
          if (other == s)
            continue;
          if (rankDelta(s, other) == 0)
            return func.emitError("parameter '")
                   << f.getArgAttrOfType<StringAttr>(i, attrs::kParam)
                   << "' is used by chunks " << s << " and " << other
                   << ", which run on the same pipeline rank; tied "
                      "parameters within one rank are not supported";
          peers.push_back(rankDelta(s, other));
        }
        f.setArgAttr(i, "ds.tied_peers", bld.getDenseI64ArrayAttr(peers));
        f.setArgAttr(i, "ds.tied_id",
                     bld.getI64IntegerAttr(tiedIds.lookup(i)));
      }
      if (f.getArgAttr(i, attrs::kParam))
        info.paramBytes += tensorBytes(arg.getType());
    }
    if (failed(f.eraseArguments(unused)))
      return func.emitError("cannot drop the arguments of stage ") << s;
    f->setAttr("ds.pipeline",
               bld.getDenseI64ArrayAttr({s, numStages}));
    // The stage's own module.
    top.setInsertionPointToEnd(module.getBody());
    auto m = ModuleOp::create(top, module.getLoc(),
                              ("stage" + std::to_string(s)));
    m->setAttr("ds.stage", top.getI64IntegerAttr(s));
    f->moveBefore(m.getBody(), m.getBody()->end());
    split.stages.push_back(info);
  }
  func.erase();
  return split;
}
