//===- ArenaAssign.cpp - offsets for blocks with known lifetimes ----------===//
//
// Part of the ds project.
//
// Three strategies over the same blocks; the smallest arena wins:
//   - first fit in program order: blocks are placed as the step that first
//     writes them is reached, each at the lowest free range that holds it,
//     and freed after their last step (the online allocator a runtime would
//     be; it cannot see that a large block is coming);
//   - greedy by size with best fit: the largest block first, each at the
//     smallest gap between the blocks already placed that overlap it in
//     time (or on top of them), as TFLite's and XLA's heap simulators do:
//     the large blocks, which decide the peak, are packed first;
//   - greedy by lifetime with best fit: the longest-lived first (they fence
//     the arena for the others), then by size;
//   - greedy by breadth with best fit (Pisarchyk and Lee's "greedy by
//     breadth"): the steps by the bytes live at them, fullest first, and at
//     each the blocks live there not yet placed, by size: the fullest
//     steps, which decide the arena, are packed first;
// and each best-fit order is improved by moving the blocks that end at the
// top of its arena to the front and placing again (a few rounds).
//
//===----------------------------------------------------------------------===//

#include "ArenaAssign.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <queue>

namespace mlir::ds::arena {

namespace {

bool overlapInTime(const Block &a, const Block &b) {
  return a.first <= b.last && b.first <= a.last;
}

/// First-fit allocator over [0, infinity) with coalescing free ranges.
class FirstFit {
public:
  int64_t allocate(int64_t bytes) {
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
    // Grow from a free range that touches the end, if any.
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
  int64_t peak = 0;

private:
  std::map<int64_t, int64_t> free;
  int64_t end = 0;
};

Assignment firstFitInOrder(const std::vector<Block> &blocks) {
  std::vector<size_t> idx(blocks.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (blocks[a].first != blocks[b].first)
      return blocks[a].first < blocks[b].first;
    return blocks[a].order != blocks[b].order ? blocks[a].order < blocks[b].order
                                              : a < b;
  });
  Assignment out;
  out.offsets.assign(blocks.size(), 0);
  out.strategy = "first fit in program order";
  FirstFit arena;
  // Live blocks by their last step: freed once a later step is reached.
  using Live = std::pair<int64_t, size_t>;
  std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;
  for (size_t i : idx) {
    while (!live.empty() && live.top().first < blocks[i].first) {
      size_t dead = live.top().second;
      live.pop();
      arena.release(out.offsets[dead], blocks[dead].bytes);
    }
    out.offsets[i] = arena.allocate(blocks[i].bytes);
    live.push({blocks[i].last, i});
  }
  out.bytes = arena.peak;
  return out;
}

/// Places blocks in the order `idx`, each at the smallest gap that holds
/// it among the placed blocks live at the same time (the lowest such gap
/// on a tie), or above them all.
Assignment bestFit(const std::vector<Block> &blocks,
                   const std::vector<size_t> &idx, const char *strategy) {
  Assignment out;
  out.offsets.assign(blocks.size(), 0);
  out.strategy = strategy;
  std::vector<size_t> placed; // by offset
  placed.reserve(blocks.size());
  for (size_t i : idx) {
    const Block &b = blocks[i];
    int64_t reach = 0, bestGap = -1, bestOffset = -1;
    for (size_t j : placed) {
      if (!overlapInTime(b, blocks[j]))
        continue;
      int64_t offset = out.offsets[j];
      if (offset >= reach + b.bytes) {
        int64_t gap = offset - reach;
        if (bestGap < 0 || gap < bestGap) {
          bestGap = gap;
          bestOffset = reach;
        }
      }
      reach = std::max(reach, offset + blocks[j].bytes);
    }
    int64_t at = bestOffset >= 0 ? bestOffset : reach;
    out.offsets[i] = at;
    out.bytes = std::max(out.bytes, at + b.bytes);
    auto pos = std::upper_bound(
        placed.begin(), placed.end(), at,
        [&](int64_t o, size_t j) { return o < out.offsets[j]; });
    placed.insert(pos, i);
  }
  return out;
}

/// The blocks in greedy-by-breadth order, from their order by size.
std::vector<size_t> byBreadth(const std::vector<Block> &blocks,
                              const std::vector<size_t> &bySize) {
  // The bytes live at each step where a block starts (the live bytes only
  // grow there).
  std::map<int64_t, int64_t> delta;
  for (const Block &b : blocks) {
    delta[b.first] += b.bytes;
    delta[b.last + 1] -= b.bytes;
  }
  std::vector<std::pair<int64_t, int64_t>> steps; // (live bytes, step)
  int64_t live = 0;
  for (const auto &[step, d] : delta) {
    live += d;
    if (d > 0)
      steps.push_back({live, step});
  }
  std::sort(steps.begin(), steps.end(), [](const auto &x, const auto &y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  std::vector<size_t> order;
  order.reserve(blocks.size());
  std::vector<size_t> left = bySize;
  for (const auto &[bytes, step] : steps) {
    if (left.empty())
      break;
    std::vector<size_t> rest;
    for (size_t i : left)
      (blocks[i].first <= step && step <= blocks[i].last ? order : rest)
          .push_back(i);
    left = std::move(rest);
  }
  order.insert(order.end(), left.begin(), left.end());
  return order;
}

} // namespace

int64_t livePeak(const std::vector<Block> &blocks) {
  // (step, +bytes) at the first step; (last + 1, -bytes) after the last.
  std::vector<std::pair<int64_t, int64_t>> events;
  events.reserve(2 * blocks.size());
  for (const Block &b : blocks) {
    events.push_back({b.first, b.bytes});
    events.push_back({b.last + 1, -b.bytes});
  }
  // At one step, the blocks that end before it leave first.
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto &[step, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return peak;
}

/// Improves a best-fit order: the blocks that reach the top of the arena
/// move to the front (they were placed too late to find room low down),
/// and the order is placed again, at most `rounds` times; the smallest
/// arena is kept.
Assignment promoteTop(const std::vector<Block> &blocks,
                      std::vector<size_t> order, Assignment placed,
                      int64_t floor, int rounds) {
  Assignment best = placed;
  for (int r = 0; r < rounds && best.bytes > floor; ++r) {
    std::vector<size_t> top, rest;
    for (size_t i : order)
      (placed.offsets[i] + blocks[i].bytes == placed.bytes ? top : rest)
          .push_back(i);
    if (std::equal(top.begin(), top.end(), order.begin()))
      break; // already first: nothing to promote
    order = std::move(top);
    order.insert(order.end(), rest.begin(), rest.end());
    placed = bestFit(blocks, order, best.strategy);
    if (placed.bytes < best.bytes)
      best = placed;
  }
  return best;
}

Assignment assign(const std::vector<Block> &blocks) {
  Assignment best = firstFitInOrder(blocks);
  const int64_t floor = livePeak(blocks);
  auto span = [&](size_t i) { return blocks[i].last - blocks[i].first; };
  std::vector<size_t> all(blocks.size());
  std::iota(all.begin(), all.end(), 0);
  // By size; among equal sizes the longest-lived first, or the earliest.
  // (Which order packs better depends on the program: all are tried.)
  std::vector<size_t> sizeLife = all, sizeFirst = all, life = all;
  std::sort(sizeLife.begin(), sizeLife.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes)
      return blocks[a].bytes > blocks[b].bytes;
    if (span(a) != span(b))
      return span(a) > span(b);
    return blocks[a].first != blocks[b].first ? blocks[a].first < blocks[b].first
                                              : a < b;
  });
  std::sort(sizeFirst.begin(), sizeFirst.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes)
      return blocks[a].bytes > blocks[b].bytes;
    return blocks[a].first != blocks[b].first ? blocks[a].first < blocks[b].first
                                              : a < b;
  });
  std::sort(life.begin(), life.end(), [&](size_t a, size_t b) {
    if (span(a) != span(b))
      return span(a) > span(b);
    if (blocks[a].bytes != blocks[b].bytes)
      return blocks[a].bytes > blocks[b].bytes;
    return a < b;
  });
  std::vector<std::pair<std::vector<size_t>, const char *>> orders = {
      {sizeLife, "greedy by size, best fit"},
      {sizeFirst, "greedy by size, best fit"},
      {life, "greedy by lifetime, best fit"},
      {byBreadth(blocks, sizeFirst), "greedy by breadth, best fit"},
      {byBreadth(blocks, sizeLife), "greedy by breadth, best fit"}};
  for (auto &[order, name] : orders) {
    if (best.bytes <= floor)
      break; // no arena is smaller than the live peak
    Assignment placed = bestFit(blocks, order, name);
    placed = promoteTop(blocks, order, placed, floor, /*rounds=*/8);
    if (placed.bytes < best.bytes)
      best = std::move(placed);
  }
  return best;
}

} // namespace mlir::ds::arena
