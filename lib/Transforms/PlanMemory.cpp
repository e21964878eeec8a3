//===- PlanMemory.cpp - static arena offsets from liveness ----------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "ArenaAssign.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <map>
#include <vector>

namespace mlir::ds {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

using dsrt::AllocOp;

int64_t alignBytes(int64_t bytes) {
  return (bytes + dsrt::kAlignment - 1) / dsrt::kAlignment * dsrt::kAlignment;
}

/// Buffers that share bytes through in-place reuse: one block of the
/// arena, live from its first buffer's first write to its last buffer's
/// last read.
struct Group {
  arena::Block block;
  bool host = false;
};

/// Checks that buffers live at the same time never share bytes, except an
/// in-place output and the input it replaced (same offset and size). A
/// sweep over time keeps the live buffers of each arena ordered by offset;
/// as the live ones are disjoint but for those pairs, a new buffer can only
/// overlap those starting inside it or the group starting just before it:
/// O(n log n) where comparing all pairs was quadratic (seconds to minutes
/// for an unrolled LSTM of a few thousand buffers).
LogicalResult
checkDisjoint(ArrayRef<AllocOp> allocs,
              const llvm::DenseMap<Operation *, int64_t> &firstUse,
              const llvm::DenseMap<Operation *, int64_t> &lastUse,
              const llvm::DenseMap<Operation *, int64_t> &offset,
              ArrayRef<std::pair<Operation *, Operation *>> inplacePairs) {
  llvm::DenseSet<std::pair<Operation *, Operation *>> allowed(
      inplacePairs.begin(), inplacePairs.end());
  struct Live {
    int64_t first, last, begin, end;
    bool host;
  };
  std::vector<Live> bufs;
  for (AllocOp a : allocs)
    bufs.push_back({firstUse.lookup(a), lastUse.lookup(a), offset.lookup(a),
                    offset.lookup(a) + dsrt::bufferBytes(a.getType()),
                    a->hasAttr("dsrt.host")});
  std::vector<size_t> order(bufs.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  llvm::sort(order, [&](size_t x, size_t y) {
    return std::make_pair(bufs[x].first, x) < std::make_pair(bufs[y].first, y);
  });
  // Per arena: live buffers by offset, and by when they die.
  std::multimap<int64_t, size_t> live[2];
  std::multimap<int64_t, size_t> dying[2];
  for (size_t x : order) {
    const Live &b = bufs[x];
    auto &byOffset = live[b.host];
    auto &byDeath = dying[b.host];
    while (!byDeath.empty() && byDeath.begin()->first < b.first) {
      size_t gone = byDeath.begin()->second;
      auto range = byOffset.equal_range(bufs[gone].begin);
      for (auto it = range.first; it != range.second; ++it)
        if (it->second == gone) {
          byOffset.erase(it);
          break;
        }
      byDeath.erase(byDeath.begin());
    }
    auto conflict = [&](size_t y) {
      Operation *p = allocs[x], *q = allocs[y];
      return b.begin < bufs[y].end && bufs[y].begin < b.end &&
             !allowed.count({p, q}) && !allowed.count({q, p});
    };
    auto report = [&](size_t y) {
      auto diag = AllocOp(allocs[x]).emitOpError(
          "overlaps a buffer that is live at the same time");
      diag.attachNote(AllocOp(allocs[y]).getLoc()) << "this one";
      return failure();
    };
    auto it = byOffset.lower_bound(b.begin);
    for (auto j = it; j != byOffset.end() && j->first < b.end; ++j)
      if (conflict(j->second))
        return report(j->second);
    if (it != byOffset.begin()) {
      int64_t before = std::prev(it)->first;
      for (auto j = byOffset.lower_bound(before); j != it; ++j)
        if (conflict(j->second))
          return report(j->second);
    }
    byOffset.emplace(b.begin, x);
    byDeath.emplace(b.last, x);
  }
  return success();
}

struct PlanMemoryPass : impl::PlanMemoryPassBase<PlanMemoryPass> {
  llvm::DenseMap<Operation *, int64_t> step, firstUse, lastUse;
  SmallVector<AllocOp> allocs;
  // The block each alloc belongs to; buffers an in-place kernel handed on.
  llvm::DenseMap<Operation *, size_t> groupOf;
  std::vector<Group> groups;
  llvm::DenseSet<Operation *> handedOver;
  SmallVector<std::pair<Operation *, Operation *>> inplacePairs;

  void runOnOperation() override {
    // The pass object runs on every function in turn: fresh state each.
    step.clear();
    firstUse.clear();
    lastUse.clear();
    allocs.clear();
    groupOf.clear();
    groups.clear();
    handedOver.clear();
    inplacePairs.clear();
    func::FuncOp func = getOperation();
    computeLifetimes(func);
    for (Operation &op : func.getBody().front())
      formGroups(op);
    OpBuilder b(func.getContext());
    for (AllocOp a : allocs)
      if (!groupOf.count(a)) {
        a.emitOpError("is never written");
        return signalPassFailure();
      }

    // Two arenas: the device's, and the host's (offload).
    llvm::DenseMap<Operation *, int64_t> offset;
    int64_t arenaBytes[2] = {0, 0};
    for (bool host : {false, true}) {
      std::vector<arena::Block> blocks;
      std::vector<size_t> ids;
      for (size_t g = 0; g < groups.size(); ++g)
        if (groups[g].host == host) {
          blocks.push_back(groups[g].block);
          ids.push_back(g);
        }
      arena::Assignment placed = arena::assign(blocks);
      std::vector<int64_t> groupOffset(groups.size(), 0);
      for (size_t k = 0; k < ids.size(); ++k)
        groupOffset[ids[k]] = placed.offsets[k];
      // The arena's size: the end of its highest buffer (ds-run measures
      // the same; the last buffer's alignment padding is not needed).
      for (AllocOp a : allocs)
        if (groups[groupOf[a]].host == host) {
          offset[a] = groupOffset[groupOf[a]];
          arenaBytes[host] =
              std::max(arenaBytes[host],
                       offset[a] + dsrt::bufferBytes(a.getType()));
        }
    }
    for (AllocOp a : allocs)
      a.setOffsetAttr(b.getI64IntegerAttr(offset[a]));
    func->setAttr(dsrt::kArenaBytes, b.getI64IntegerAttr(arenaBytes[0]));
    if (arenaBytes[1] > 0)
      func->setAttr("dsrt.host_arena_bytes",
                    b.getI64IntegerAttr(arenaBytes[1]));
    if (failed(checkNoOverlap(offset)))
      return signalPassFailure();
  }

  /// Lifetimes of arena allocs: [first use, last read], views included;
  /// graph outputs live to the end.
  void computeLifetimes(func::FuncOp func) {
    Block &body = func.getBody().front();
    int64_t n = 0;
    for (Operation &op : body)
      step[&op] = n++;
    int64_t end = n;
    std::function<void(Value, AllocOp)> visit = [&](Value v, AllocOp root) {
      for (Operation *user : v.getUsers()) {
        if (auto view = dyn_cast<dsrt::ViewOp>(user)) {
          visit(view.getResult(), root);
          continue;
        }
        int64_t s = isa<dsrt::OutputOp>(user) ? end : step[user];
        int64_t at = isa<dsrt::OutputOp>(user) ? step[user] : s;
        auto [f, fNew] = firstUse.try_emplace(root, at);
        if (!fNew)
          f->second = std::min(f->second, at);
        auto [l, lNew] = lastUse.try_emplace(root, s);
        if (!lNew)
          l->second = std::max(l->second, s);
      }
    };
    func.walk([&](AllocOp alloc) {
      allocs.push_back(alloc);
      visit(alloc.getResult(), alloc);
    });
  }

  /// The dying input an elementwise kernel's first output may take (same
  /// arena, same bytes, dying here, not handed on already); null if none.
  AllocOp inplaceSource(dsrt::KernelOp kernel, AllocOp alloc, int64_t s) {
    int64_t bytes = dsrt::bufferBytes(alloc.getType());
    ArrayRef<int64_t> candidates = *kernel.getInplace();
    for (int64_t in : candidates) {
      auto src = dyn_cast_or_null<AllocOp>(dsrt::rootOf(kernel.getIns()[in]));
      if (!src || !groupOf.count(src) || handedOver.count(src) ||
          src->hasAttr("dsrt.host") != alloc->hasAttr("dsrt.host") ||
          lastUse.lookup(src) != s ||
          dsrt::bufferBytes(src.getType()) != bytes)
        continue;
      // Another input reading the same storage under another shape (a
      // broadcast view) could see elements already overwritten.
      Value chosen = kernel.getIns()[in];
      bool otherView = llvm::any_of(kernel.getIns(), [&](Value other) {
        return other != chosen && dsrt::rootOf(other) == src &&
               other.getType() != chosen.getType();
      });
      if (!otherView)
        return src;
    }
    return nullptr;
  }

  /// The buffers `op` writes first: each joins the block of the input it
  /// replaces in place, or starts a block of its own.
  void formGroups(Operation &op) {
    int64_t s = step[&op];
    SmallVector<Value> written;
    if (auto k = dyn_cast<dsrt::KernelOp>(op))
      written.append(k.getOuts().begin(), k.getOuts().end());
    else if (auto c = dyn_cast<dsrt::CopyOp>(op))
      written.push_back(c.getTarget());
    else
      for (Value v : op.getOperands())
        written.push_back(v);
    for (auto [i, v] : llvm::enumerate(written)) {
      auto alloc = dyn_cast_or_null<AllocOp>(dsrt::rootOf(v));
      if (!alloc || groupOf.count(alloc) || firstUse.lookup(alloc) != s)
        continue;
      auto kernel = dyn_cast<dsrt::KernelOp>(op);
      if (kernel && i == 0 && kernel.getInplace())
        if (AllocOp src = inplaceSource(kernel, alloc, s)) {
          size_t g = groupOf[src];
          groupOf[alloc] = g;
          groups[g].block.last =
              std::max(groups[g].block.last, lastUse.lookup(alloc));
          handedOver.insert(src);
          inplacePairs.push_back({src, alloc});
          continue;
        }
      Group g;
      g.block.first = s;
      g.block.last = lastUse.lookup(alloc);
      g.block.bytes = alignBytes(dsrt::bufferBytes(alloc.getType()));
      g.block.order = static_cast<int64_t>(groups.size());
      g.host = alloc->hasAttr("dsrt.host");
      groupOf[alloc] = groups.size();
      groups.push_back(g);
    }
  }

  /// The pass checks its own result: buffers live at the same time never
  /// share bytes, except an in-place output and the input it replaced
  /// (checkDisjoint's sweep: O(n log n)).
  LogicalResult
  checkNoOverlap(const llvm::DenseMap<Operation *, int64_t> &offset) {
    return checkDisjoint(allocs, firstUse, lastUse, offset, inplacePairs);
  }
};
} // namespace
} // namespace mlir::ds
