//===- RecomputeSearch.cpp - what to keep and what to recompute -----------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "RecomputeSearch.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace mlir::ds::recompute {

int64_t chainPeak(ArrayRef<int64_t> saved, const std::vector<bool> &rc) {
  int64_t prefix = 0, peak = 0;
  for (size_t j = 0; j < saved.size(); ++j) {
    peak = std::max(peak, prefix + saved[j]);
    if (!rc[j])
      prefix += saved[j];
  }
  return std::max(peak, prefix);
}

ChainModel::ChainModel(ArrayRef<Segment> segs, int64_t fixed)
    : segs(segs), fixed(fixed), saved(segs.size()), flops(segs.size()) {
  for (size_t j = 0; j < segs.size(); ++j) {
    saved[j] = segs[j].savedBytes;
    flops[j] = segs[j].flops;
  }
}

Choice ChainModel::evaluate(const std::vector<bool> &rc) const {
  Choice c;
  c.recompute = rc;
  c.activations = fixed + chainPeak(saved, rc);
  for (size_t j = 0; j < segs.size(); ++j)
    if (rc[j])
      c.flops += flops[j];
  return c;
}

Choice ChainModel::none() const {
  return evaluate(std::vector<bool>(segs.size(), false));
}

Choice ChainModel::full() const {
  std::vector<bool> all(segs.size());
  for (size_t j = 0; j < segs.size(); ++j)
    all[j] = segs[j].recomputable;
  return evaluate(all);
}

Layers findLayers(ArrayRef<Segment> segs) {
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
  Layers layers;
  layers.period = period;
  for (size_t i = runStart; period && i + period <= runStart + runLen;
       i += period) {
    bool ok = true;
    for (size_t j = i; j < i + period; ++j)
      ok &= segs[j].recomputable || segs[j].savedBytes == 0;
    if (ok)
      layers.units.push_back({i, i + period - 1});
  }
  return layers;
}

Choice planEveryLayer(ArrayRef<Segment> segs, const Layers &layers,
                      int64_t fixed) {
  Choice layerC;
  std::vector<int64_t> merged;
  std::vector<bool> rc, perSeg(segs.size(), false);
  int64_t dropped = 0;
  size_t u = 0;
  const auto &units = layers.units;
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
  return layerC;
}

namespace {

/// The best plan seen so far that fits the budget.
class BestFit {
public:
  BestFit(const ChainModel &model, int64_t budget)
      : model(model), budget(budget) {}

  void consider(const std::vector<bool> &rc) {
    Choice c = model.evaluate(rc);
    if (c.activations > budget)
      return;
    if (!best || c.flops < best->flops ||
        (c.flops == best->flops && c.activations < best->activations))
      best = c;
  }
  std::optional<Choice> result() const { return best; }

private:
  const ChainModel &model;
  int64_t budget;
  std::optional<Choice> best;
};

/// Every subset of the recomputable segments `free` (up to 16).
void searchSubsets(const std::vector<size_t> &free, size_t numSegments,
                   BestFit &best) {
  for (uint32_t mask = 0; mask < (1u << free.size()); ++mask) {
    std::vector<bool> rc(numSegments, false);
    for (size_t k = 0; k < free.size(); ++k)
      rc[free[k]] = (mask >> k) & 1;
    best.consider(rc);
  }
}

/// A dynamic program over the chain whose state is the kept prefix in
/// bytes, rounded up to 1/4096 of the room the budget leaves (so its answer
/// always fits); the least-FLOPs choice, if one fits.
std::optional<std::vector<bool>> searchChain(ArrayRef<Segment> segs,
                                             int64_t room) {
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
    return std::nullopt;
  std::vector<bool> rc(segs.size(), false);
  for (size_t j = segs.size(); j-- > 0;) {
    auto [prev, recomputed] = from[j][end];
    rc[j] = recomputed;
    end = prev;
  }
  return rc;
}

} // namespace

std::optional<Choice> solveBudget(const ChainModel &model, int64_t budget) {
  ArrayRef<Segment> segs = model.segments();
  std::vector<size_t> free;
  for (size_t j = 0; j < segs.size(); ++j)
    if (segs[j].recomputable)
      free.push_back(j);
  BestFit best(model, budget);
  if (free.size() <= 16) {
    searchSubsets(free, segs.size(), best);
    return best.result();
  }
  int64_t room = budget - model.fixedBytes();
  if (room < 0)
    return best.result();
  if (std::optional<std::vector<bool>> rc = searchChain(segs, room))
    best.consider(*rc);
  return best.result();
}

} // namespace mlir::ds::recompute
