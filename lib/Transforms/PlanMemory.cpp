//===- PlanMemory.cpp - static arena offsets from liveness ----------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

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

/// First-fit allocator over [0, infinity) with coalescing free blocks.
class Arena {
public:
  int64_t allocate(int64_t bytes) {
    bytes = align(bytes);
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < bytes)
        continue;
      int64_t offset = it->first, size = it->second;
      free.erase(it);
      if (size > bytes)
        free[offset + bytes] = size - bytes;
      return offset;
    }
    int64_t offset = end;
    // Grow from a free block that touches the end, if any.
    if (!free.empty()) {
      auto last = std::prev(free.end());
      if (last->first + last->second == end) {
        offset = last->first;
        free.erase(last);
      }
    }
    end = offset + bytes;
    peak = std::max(peak, end);
    return offset;
  }
  void release(int64_t offset, int64_t bytes) {
    bytes = align(bytes);
    auto it = free.emplace(offset, bytes).first;
    auto next = std::next(it);
    if (next != free.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free.erase(next);
    }
    if (it != free.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free.erase(it);
      }
    }
  }
  static int64_t align(int64_t bytes) {
    return (bytes + dsrt::kAlignment - 1) / dsrt::kAlignment *
           dsrt::kAlignment;
  }
  int64_t peak = 0;

private:
  std::map<int64_t, int64_t> free;
  int64_t end = 0;
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
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block &body = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> step;
    int64_t n = 0;
    for (Operation &op : body)
      step[&op] = n++;
    int64_t end = n;

    // Lifetimes of arena allocs: [first write, last read], views included.
    llvm::DenseMap<Operation *, int64_t> firstUse, lastUse;
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
    SmallVector<AllocOp> allocs;
    func.walk([&](AllocOp alloc) {
      allocs.push_back(alloc);
      visit(alloc.getResult(), alloc);
    });

    // Two arenas: the device's, and the host's (offload).
    Arena arena, hostArena;
    auto arenaOf = [&](AllocOp a) -> Arena & {
      return a->hasAttr("dsrt.host") ? hostArena : arena;
    };
    llvm::DenseMap<Operation *, int64_t> offset;
    llvm::DenseMap<int64_t, SmallVector<AllocOp>> dyingAt;
    for (AllocOp a : allocs)
      if (lastUse.count(a))
        dyingAt[lastUse[a]].push_back(a);
    llvm::DenseSet<Operation *> handedOver;
    SmallVector<std::pair<Operation *, Operation *>> inplacePairs;

    for (Operation &op : body) {
      int64_t s = step[&op];
      // Place the buffers first written here.
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
        if (!alloc || offset.count(alloc) || firstUse.lookup(alloc) != s)
          continue;
        int64_t bytes = dsrt::bufferBytes(alloc.getType());
        // An elementwise kernel's first output may take a dying input.
        auto kernel = dyn_cast<dsrt::KernelOp>(op);
        if (kernel && i == 0 && kernel.getInplace()) {
          ArrayRef<int64_t> candidates = *kernel.getInplace();
          for (int64_t in : candidates) {
            auto src = dyn_cast_or_null<AllocOp>(
                dsrt::rootOf(kernel.getIns()[in]));
            if (!src || !offset.count(src) || handedOver.count(src) ||
                src->hasAttr("dsrt.host") != alloc->hasAttr("dsrt.host") ||
                lastUse.lookup(src) != s ||
                dsrt::bufferBytes(src.getType()) != bytes)
              continue;
            // Another input reading the same storage under another shape
            // (a broadcast view) could see elements already overwritten.
            Value chosen = kernel.getIns()[in];
            bool otherView = llvm::any_of(kernel.getIns(), [&](Value other) {
              return other != chosen && dsrt::rootOf(other) == src &&
                     other.getType() != chosen.getType();
            });
            if (otherView)
              continue;
            offset[alloc] = offset[src];
            handedOver.insert(src);
            inplacePairs.push_back({src, alloc});
            break;
          }
        }
        if (!offset.count(alloc))
          offset[alloc] = arenaOf(alloc).allocate(bytes);
      }
      // Free what died here.
      for (AllocOp a : dyingAt.lookup(s))
        if (offset.count(a) && !handedOver.count(a))
          arenaOf(a).release(offset[a], dsrt::bufferBytes(a.getType()));
    }

    OpBuilder b(func.getContext());
    for (AllocOp a : allocs) {
      if (!offset.count(a)) {
        a.emitOpError("is never written");
        return signalPassFailure();
      }
      a.setOffsetAttr(b.getI64IntegerAttr(offset[a]));
    }
    func->setAttr(dsrt::kArenaBytes, b.getI64IntegerAttr(arena.peak));
    if (hostArena.peak > 0)
      func->setAttr("dsrt.host_arena_bytes",
                    b.getI64IntegerAttr(hostArena.peak));

    if (failed(checkDisjoint(allocs, firstUse, lastUse, offset, inplacePairs)))
      return signalPassFailure();
  }
};
} // namespace
} // namespace mlir::ds
