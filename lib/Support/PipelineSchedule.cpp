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

PipeSimulation simulatePipeline(const std::vector<std::vector<PipeStep>> &s,
                                const std::vector<double> &forward,
                                const std::vector<double> &backward,
                                double link) {
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

std::vector<ByteRange> stashRanges(const plan::Plan &p, int split) {
  const plan::Program &prog = p.programs(0);
  int n = prog.instructions_size();
  // Per buffer: written before the split, and read at or after it (an
  // in-place kernel reads its output as an input); outputs are read at the
  // end.
  std::vector<char> before(p.buffers_size(), 0), after(p.buffers_size(), 0);
  for (int i = 0; i < n; ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    if (i < split)
      for (uint32_t id : ins.outputs())
        before[id] = 1;
    if (i >= split)
      for (uint32_t id : ins.inputs())
        after[id] = 1;
  }
  for (const plan::Value &v : p.outputs())
    after[v.buffer()] = 1;
  // Views share their source's bytes: whole ranges, merged per space.
  std::vector<ByteRange> raw;
  for (int id = 0; id < p.buffers_size(); ++id) {
    const plan::Buffer &b = p.buffers(id);
    if ((b.space() != plan::ARENA && b.space() != plan::HOST_ARENA) ||
        !after[id])
      continue;
    raw.push_back({static_cast<int>(b.space()), b.offset(),
                   b.offset() + b.bytes()});
  }
  // A range counts when some buffer over its bytes was written before the
  // split: keep the ranges of buffers read after the split that overlap a
  // buffer written before it.
  std::vector<ByteRange> written;
  for (int id = 0; id < p.buffers_size(); ++id) {
    const plan::Buffer &b = p.buffers(id);
    if ((b.space() == plan::ARENA || b.space() == plan::HOST_ARENA) &&
        before[id])
      written.push_back({static_cast<int>(b.space()), b.offset(),
                         b.offset() + b.bytes()});
  }
  std::vector<ByteRange> keep;
  for (const ByteRange &r : raw)
    for (const ByteRange &w : written)
      if (w.space == r.space && w.begin < r.end && r.begin < w.end)
        keep.push_back({r.space, std::max(r.begin, w.begin),
                        std::min(r.end, w.end)});
  std::sort(keep.begin(), keep.end(), [](const ByteRange &a, const ByteRange &b) {
    return a.space != b.space ? a.space < b.space : a.begin < b.begin;
  });
  std::vector<ByteRange> merged;
  for (const ByteRange &r : keep) {
    if (!merged.empty() && merged.back().space == r.space &&
        r.begin <= merged.back().end)
      merged.back().end = std::max(merged.back().end, r.end);
    else
      merged.push_back(r);
  }
  return merged;
}

} // namespace ds
