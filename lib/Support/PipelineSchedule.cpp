//===- PipelineSchedule.cpp - pipeline schedules and their bubble ---------===//
//
// Part of the ds project (plain C++, shared by ds-opt and ds-run).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/PipelineSchedule.h"

#include "plan.pb.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace ds {

std::vector<std::vector<PipeStep>>
pipelineSchedule(const std::string &kind, int stages, int micro, int virt) {
  std::vector<std::vector<PipeStep>> out(stages);
  if (stages < 1 || micro < 1 || virt < 1)
    return {};
  for (int s = 0; s < stages; ++s) {
    std::vector<PipeStep> &v = out[s];
    if (kind == "gpipe" && virt == 1) {
      for (int m = 0; m < micro; ++m)
        v.push_back({true, m, s});
      for (int m = 0; m < micro; ++m)
        v.push_back({false, m, s});
    } else if (kind == "1f1b" && virt == 1) {
      int warm = std::min(stages - s - 1, micro);
      int f = 0, b = 0;
      for (; f < warm; ++f)
        v.push_back({true, f, s});
      while (f < micro) {
        v.push_back({true, f++, s});
        v.push_back({false, b++, s});
      }
      while (b < micro)
        v.push_back({false, b++, s});
    } else if (kind == "interleaved") {
      if (micro % stages)
        return {};
      // The k-th forward (backward) of this rank: chunk and micro-batch,
      // in groups of P micro-batches per chunk.
      int total = micro * virt;
      auto fwd = [&](int k) {
        int local = (k / stages) % virt;
        int m = (k / (stages * virt)) * stages + k % stages;
        return PipeStep{true, m, local * stages + s};
      };
      auto bwd = [&](int k) {
        int local = virt - 1 - (k / stages) % virt;
        int m = (k / (stages * virt)) * stages + k % stages;
        return PipeStep{false, m, local * stages + s};
      };
      int warm = micro == stages
                     ? total
                     : std::min(total, (stages - s - 1) * 2 +
                                           (virt - 1) * stages);
      int f = 0, b = 0;
      for (; f < warm; ++f)
        v.push_back(fwd(f));
      while (f < total) {
        v.push_back(fwd(f++));
        v.push_back(bwd(b++));
      }
      while (b < total)
        v.push_back(bwd(b++));
    } else {
      return {};
    }
  }
  return out;
}

int stashSlots(const std::vector<PipeStep> &stage, int chunk) {
  int alive = 0, most = 0;
  for (const PipeStep &p : stage) {
    if (chunk >= 0 && p.chunk != chunk)
      continue;
    alive += p.forward ? 1 : -1;
    most = std::max(most, alive);
  }
  return most;
}

int stashCopies(const std::vector<PipeStep> &stage, int chunk) {
  int holds = -1, saved = 0, most = 0;
  std::vector<char> isSaved(stage.size() + 1, 0);
  for (const PipeStep &p : stage) {
    if (chunk >= 0 && p.chunk != chunk)
      continue;
    if (p.forward || holds != p.micro) {
      if (holds >= 0) {
        ++saved;
        if (static_cast<size_t>(holds) < isSaved.size())
          isSaved[holds] = 1;
      }
    }
    most = std::max(most, saved);
    if (p.forward) {
      holds = p.micro;
    } else {
      if (static_cast<size_t>(p.micro) < isSaved.size() && isSaved[p.micro]) {
        --saved;
        isSaved[p.micro] = 0;
      }
      holds = -1;
    }
  }
  return most;
}

std::vector<StashTraffic> stashTraffic(const std::vector<PipeStep> &stage) {
  std::map<int, int> holds; // chunk -> the micro-batch its arena holds
  std::vector<StashTraffic> out(stage.size());
  for (size_t i = 0; i < stage.size(); ++i) {
    const PipeStep &p = stage[i];
    auto it = holds.emplace(p.chunk, -1).first;
    int &h = it->second;
    if (p.forward || h != p.micro) {
      out[i].save = h >= 0;
      out[i].restore = !p.forward;
    }
    h = p.forward ? p.micro : -1;
  }
  return out;
}

PipeSimulation simulatePipeline(const std::vector<std::vector<PipeStep>> &s,
                                const std::vector<double> &forward,
                                const std::vector<double> &backward,
                                double link,
                                const std::vector<std::vector<double>> *extra) {
  int ranks = static_cast<int>(s.size());
  int chunks = static_cast<int>(forward.size());
  PipeSimulation out;
  if (ranks == 0 || chunks == 0)
    return out;
  // done[(chunk, micro, forward)]: when it ended. Items run in each rank's
  // order; sweep until every item is placed (a sweep that places none is
  // a deadlock).
  std::map<std::tuple<int, int, bool>, double> done;
  std::vector<size_t> next(ranks, 0);
  std::vector<double> freeAt(ranks, 0), busy(ranks, 0);
  size_t total = 0, placed = 0;
  for (const auto &v : s)
    total += v.size();
  while (placed < total) {
    bool progress = false;
    for (int r = 0; r < ranks; ++r) {
      while (next[r] < s[r].size()) {
        const PipeStep &p = s[r][next[r]];
        if (p.chunk < 0 || p.chunk >= chunks)
          return PipeSimulation();
        double ready = freeAt[r];
        // Its input: the previous chunk's forward or the next chunk's
        // backward (its own forward ran before, on this rank).
        int from = p.forward ? p.chunk - 1 : p.chunk + 1;
        if (from >= 0 && from < chunks) {
          auto it = done.find({from, p.micro, p.forward});
          if (it == done.end())
            break;
          ready = std::max(ready, it->second + link);
        }
        double t = p.forward ? forward[p.chunk] : backward[p.chunk];
        if (extra && r < static_cast<int>(extra->size()) &&
            next[r] < (*extra)[r].size())
          t += (*extra)[r][next[r]];
        out.items.push_back({r, p, ready, ready + t});
        freeAt[r] = ready + t;
        busy[r] += t;
        done[{p.chunk, p.micro, p.forward}] = freeAt[r];
        ++next[r];
        ++placed;
        progress = true;
      }
    }
    if (!progress)
      return PipeSimulation(); // not a valid schedule
  }
  for (int r = 0; r < ranks; ++r)
    out.stepSeconds = std::max(out.stepSeconds, freeAt[r]);
  double idle = 0;
  for (int r = 0; r < ranks; ++r)
    idle += out.stepSeconds - busy[r];
  out.bubble = out.stepSeconds > 0 ? idle / (ranks * out.stepSeconds) : 0;
  return out;
}

namespace {
/// Disjoint half-open byte ranges per space, kept merged.
class RangeSet {
public:
  void add(int space, uint64_t begin, uint64_t end) {
    auto &m = spaces[space];
    auto it = m.upper_bound(begin);
    if (it != m.begin() && std::prev(it)->second >= begin)
      --it;
    while (it != m.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = m.erase(it);
    }
    m[begin] = end;
  }
  /// The parts of [begin, end) this set covers.
  std::vector<std::pair<uint64_t, uint64_t>> covered(int space, uint64_t begin,
                                                     uint64_t end) const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    auto sit = spaces.find(space);
    if (sit == spaces.end())
      return out;
    const auto &m = sit->second;
    auto it = m.upper_bound(begin);
    if (it != m.begin())
      --it;
    for (; it != m.end() && it->first < end; ++it)
      if (it->second > begin)
        out.push_back({std::max(begin, it->first), std::min(end, it->second)});
    return out;
  }
  std::vector<ByteRange> ranges() const {
    std::vector<ByteRange> out;
    for (const auto &[space, m] : spaces)
      for (const auto &[b, e] : m)
        out.push_back({space, b, e});
    return out;
  }

private:
  std::map<int, std::map<uint64_t, uint64_t>> spaces;
};
} // namespace

std::vector<ByteRange> stashRanges(const plan::Plan &p, int split) {
  const plan::Program &prog = p.programs(0);
  int n = prog.instructions_size();
  // A byte is stashed when the backward section (or ds-run, reading the
  // outputs after the step) reads it before writing it and the forward
  // section wrote it: what forward left there is needed. Views share their
  // source's bytes, so the test is by bytes, not by buffer.
  auto inArena = [&](uint32_t id) {
    if (id >= static_cast<uint32_t>(p.buffers_size()))
      return false;
    plan::Space s = p.buffers(id).space();
    return s == plan::ARENA || s == plan::HOST_ARENA;
  };
  RangeSet before, after, keep;
  auto read = [&](uint32_t id) {
    if (!inArena(id))
      return;
    const plan::Buffer &b = p.buffers(id);
    int space = static_cast<int>(b.space());
    for (auto [lo, hi] : before.covered(space, b.offset(), b.offset() + b.bytes())) {
      // Less what the backward section wrote since the split.
      uint64_t at = lo;
      for (auto [wlo, whi] : after.covered(space, lo, hi)) {
        if (wlo > at)
          keep.add(space, at, wlo);
        at = std::max(at, whi);
      }
      if (at < hi)
        keep.add(space, at, hi);
    }
  };
  for (int i = 0; i < n; ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    if (i >= split)
      for (uint32_t id : ins.inputs())
        read(id);
    for (uint32_t id : ins.outputs())
      if (inArena(id)) {
        const plan::Buffer &b = p.buffers(id);
        (i < split ? before : after)
            .add(static_cast<int>(b.space()), b.offset(),
                 b.offset() + b.bytes());
      }
  }
  for (const plan::Value &v : p.outputs())
    read(v.buffer());
  return keep.ranges();
}

} // namespace ds
