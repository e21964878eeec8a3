//===- Pipeline.cpp - cutting the forward graph into pipeline stages ------===//
//
// Part of the ds project.
//
// The forward op list is cut at points where the fewest activation bytes
// cross (a transformer's residual stream between sublayers), balancing the
// stages' FLOPs; each stage becomes a nested module with its own @forward
// (MPMD). docs/design.md section 10.
//
// The split runs in three steps: the cut search (the crossing activations
// at each place, the cut points, the most stages they allow), the balance
// (a dynamic program over the cut points), and the construction of each
// stage's module (hand-overs, the stage's ops and arguments).
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

/// A value handed over at a boundary: (the op's position, its result).
using Crossing = std::pair<int64_t, unsigned>;

/// The places the forward can be cut at: where the fewest activations
/// cross. `ref` is the most bytes one of them hands over.
struct CutPoints {
  std::vector<int64_t> cuts;
  int64_t fewest = std::numeric_limits<int64_t>::max(), ref = 0;
};

/// Cuts one @forward into pipeline stages. Positions are indices into the
/// forward's op list; a cut c lies between ops c-1 and c.
class PipelineSplitter {
public:
  PipelineSplitter(ModuleOp module, func::FuncOp func, int64_t numStages,
                   int64_t ranks)
      : module(module), func(func), body(func.getBody().front()),
        ret(body.getTerminator()), numStages(numStages), ranks(ranks) {}

  FailureOr<PipelineSplit> run();

private:
  // The cut search.
  LogicalResult collectOps();
  CutPoints findCutPoints() const;
  void countParamOps();
  bool holds(int64_t a, int64_t b) const {
    return withParam[b] - withParam[a] > 0;
  }
  int64_t mostStages(ArrayRef<int64_t> cuts) const;
  LogicalResult checkStageCount(const CutPoints &cp);
  // The balance.
  void countFlops();
  int64_t cost(int64_t a, int64_t b) const { return prefix[b] - prefix[a]; }
  void balance(ArrayRef<int64_t> cuts);
  int64_t stageOf(int64_t i) const {
    return static_cast<int64_t>(
               std::upper_bound(bounds.begin(), bounds.end(), i) -
               bounds.begin()) -
           1;
  }
  // Bookkeeping the stages need.
  void findTrained();
  LogicalResult findTiedParams(PipelineSplit &split);
  /// The position of the last reader of `r`, made by op `i` (n: the
  /// return; `i` when nothing reads it).
  int64_t lastUse(int64_t i, Value r) const {
    int64_t last = i;
    for (Operation *user : r.getUsers())
      last = std::max(last, user == ret ? n : index.lookup(user));
    return last;
  }
  SmallVector<Crossing> crossing(int64_t c) const;
  // The stages' modules.
  LogicalResult buildStage(int64_t s, PipelineSplit &split);
  LogicalResult keepStageOps(ArrayRef<Operation *> cops, int64_t a,
                             int64_t b);
  LogicalResult keepStageArgs(func::FuncOp f, int64_t s, PipelineStage &info);

  /// Stage (chunk) c runs on pipeline rank c mod ranks; hand-overs name
  /// the peer by its rank distance, and their tags by the boundary (the
  /// lower chunk), the tensor and the direction.
  int64_t rankDelta(int64_t from, int64_t to) const {
    return to % ranks - from % ranks;
  }
  static int64_t tagOf(int64_t boundary, int64_t index) {
    return ((boundary % 32) * 16 + index % 16) * 2;
  }

  ModuleOp module;
  func::FuncOp func;
  Block &body;
  Operation *ret;
  int64_t numStages, ranks;
  SmallVector<Operation *> ops;
  llvm::DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  /// Ops using a trainable parameter, and cost-model FLOPs, by prefix.
  std::vector<int64_t> withParam, prefix;
  std::vector<int64_t> bounds; // stage s holds ops [bounds[s], bounds[s+1])
  /// Values that depend on a trainable parameter: their gradient goes back.
  llvm::DenseSet<Value> trained;
  /// The stages that use each argument: parameters used by several are
  /// tied (`tiedIds` numbers them).
  std::vector<std::set<int64_t>> argStages;
  llvm::DenseMap<unsigned, int64_t> tiedIds;
};

LogicalResult PipelineSplitter::collectOps() {
  for (Operation &op : body.without_terminator()) {
    if (op.getNumRegions() != 0)
      return op.emitOpError("has regions: pipeline stages cannot be cut "
                            "through it");
    index[&op] = static_cast<int64_t>(ops.size());
    ops.push_back(&op);
  }
  n = static_cast<int64_t>(ops.size());
  return success();
}

CutPoints PipelineSplitter::findCutPoints() const {
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
      int64_t last = lastUse(i, r);
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
  // layers).
  CutPoints cp;
  for (int64_t c = 1; c <= maxCut; ++c)
    if (count[c] > 0)
      cp.fewest = std::min(cp.fewest, count[c]);
  for (int64_t c = 1; c <= maxCut; ++c)
    if (count[c] > 0 && count[c] == cp.fewest) {
      cp.cuts.push_back(c);
      cp.ref = std::max(cp.ref, bytes[c]);
    }
  return cp;
}

void PipelineSplitter::countParamOps() {
  // Every stage holds a trainable parameter (a stage of activations alone
  // would only forward them): ops using one, counted by prefix.
  withParam.assign(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    bool uses = llvm::any_of(ops[i]->getOperands(), [&](Value v) {
      auto a = dyn_cast<BlockArgument>(v);
      return a && a.getOwner() == &body &&
             func.getArgAttr(a.getArgNumber(), attrs::kTrainable);
    });
    withParam[i + 1] = withParam[i] + (uses ? 1 : 0);
  }
}

int64_t PipelineSplitter::mostStages(ArrayRef<int64_t> cuts) const {
  // Greedy: cut as soon as the stage so far holds a parameter and the rest
  // still does.
  int64_t k = static_cast<int64_t>(cuts.size()), most = 0;
  for (int64_t a = 0, x = 0; x <= k; ++x) {
    int64_t c = x < k ? cuts[x] : n;
    if (holds(a, c) && holds(c, n) && x < k) {
      ++most;
      a = c;
    } else if (x == k && holds(a, n)) {
      ++most;
    }
  }
  return most;
}

LogicalResult PipelineSplitter::checkStageCount(const CutPoints &cp) {
  int64_t most = mostStages(cp.cuts);
  if (numStages <= most)
    return success();
  auto diag = func.emitError("--pipeline-parallel=");
  if (ranks < numStages)
    diag << ranks << " with --schedule=interleaved:" << numStages / ranks
         << " needs " << numStages << " model chunks, more";
  else
    diag << numStages << " is more stages";
  return diag << " than the model's forward can be "
              << "cut into: at most " << most << " (" << cp.cuts.size()
              << " cut points, where " << cp.fewest
              << " activation(s) of at most " << cp.ref
              << " bytes cross, and every stage holds parameters)";
}

void PipelineSplitter::countFlops() {
  prefix.assign(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t f = 0;
    if (auto c = dyn_cast<CostOpInterface>(ops[i]))
      f = c.getFlops();
    prefix[i + 1] = prefix[i] + std::max<int64_t>(f, 1);
  }
}

/// A dynamic program over the cut points minimising the largest stage's
/// FLOPs (forward; the backward is about twice as much everywhere).
void PipelineSplitter::balance(ArrayRef<int64_t> cuts) {
  int64_t k = static_cast<int64_t>(cuts.size());
  const int64_t inf = std::numeric_limits<int64_t>::max();
  bounds = {0};
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
}

void PipelineSplitter::findTrained() {
  for (BlockArgument a : body.getArguments())
    if (func.getArgAttr(a.getArgNumber(), attrs::kTrainable))
      trained.insert(a);
  for (Operation *op : ops)
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return trained.contains(v); }))
      for (Value r : op->getResults())
        trained.insert(r);
}

LogicalResult PipelineSplitter::findTiedParams(PipelineSplit &split) {
  argStages.assign(body.getNumArguments(), {});
  for (BlockArgument a : body.getArguments())
    for (Operation *user : a.getUsers())
      if (user != ret)
        argStages[a.getArgNumber()].insert(stageOf(index.lookup(user)));
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
      if (auto name = func.getArgAttrOfType<StringAttr>(a.getArgNumber(),
                                                        attrs::kParam)) {
        tiedIds[a.getArgNumber()] = static_cast<int64_t>(split.tied.size());
        split.tied.push_back(name.str());
      }
  return success();
}

/// The crossing values at cut `c`, in definition order (the tags).
SmallVector<Crossing> PipelineSplitter::crossing(int64_t c) const {
  SmallVector<Crossing> out;
  for (int64_t i = 0; i < c; ++i)
    for (OpResult r : ops[i]->getResults()) {
      if (isFree(r))
        continue;
      if (lastUse(i, r) >= c)
        out.push_back({i, r.getResultNumber()});
    }
  return out;
}

/// Drops the other stages' ops from a stage's clone, users first.
LogicalResult PipelineSplitter::keepStageOps(ArrayRef<Operation *> cops,
                                             int64_t a, int64_t b) {
  for (int64_t i = n - 1; i >= b; --i)
    if (cops[i]->use_empty())
      cops[i]->erase();
    else
      return cops[i]->emitOpError("is used before its stage");
  for (int64_t i = a - 1; i >= 0; --i)
    if (cops[i]->use_empty())
      cops[i]->erase();
  return success();
}

/// Drops the arguments stage `s` does not use and marks tied parameters.
LogicalResult PipelineSplitter::keepStageArgs(func::FuncOp f, int64_t s,
                                              PipelineStage &info) {
  Block &blk = f.getBody().front();
  Builder bld(f.getContext());
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
      f.setArgAttr(i, "ds.tied_id", bld.getI64IntegerAttr(tiedIds.lookup(i)));
    }
    if (f.getArgAttr(i, attrs::kParam))
      info.paramBytes += tensorBytes(arg.getType());
  }
  if (failed(f.eraseArguments(unused)))
    return func.emitError("cannot drop the arguments of stage ") << s;
  return success();
}

/// Stage `s`'s module: a clone of the whole forward that receives what
/// the previous stage made, sends what later ones use, and keeps its own
/// ops and arguments.
LogicalResult PipelineSplitter::buildStage(int64_t s, PipelineSplit &split) {
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
  std::map<Crossing, Value> received;
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
      Value v =
          vr.first < a ? received[vr] : cops[vr.first]->getResult(vr.second);
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
  if (failed(keepStageOps(cops, a, b)) || failed(keepStageArgs(f, s, info)))
    return failure();
  f->setAttr("ds.pipeline", bld.getDenseI64ArrayAttr({s, numStages}));
  // The stage's own module.
  OpBuilder top(module.getContext());
  top.setInsertionPointToEnd(module.getBody());
  auto m =
      ModuleOp::create(top, module.getLoc(), ("stage" + std::to_string(s)));
  m->setAttr("ds.stage", top.getI64IntegerAttr(s));
  f->moveBefore(m.getBody(), m.getBody()->end());
  split.stages.push_back(info);
  return success();
}

FailureOr<PipelineSplit> PipelineSplitter::run() {
  if (failed(collectOps()))
    return failure();
  CutPoints cp = findCutPoints();
  countParamOps();
  if (failed(checkStageCount(cp)))
    return failure();
  countFlops();
  balance(cp.cuts);
  findTrained();
  PipelineSplit split;
  split.cutPoints = static_cast<int64_t>(cp.cuts.size());
  if (failed(findTiedParams(split)))
    return failure();
  for (int64_t s = 0; s < numStages; ++s)
    if (failed(buildStage(s, split)))
      return failure();
  func.erase();
  return split;
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
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func)
    return module.emitError("pipeline parallelism needs @forward");
  return PipelineSplitter(module, func, numStages, ranks).run();
}
