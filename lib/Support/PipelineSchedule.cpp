//===- PipelineSchedule.cpp - pipeline schedules and their bubble ---------===//
//
// Part of the ds project (plain C++, shared by ds-opt and ds-run).
//
//===----------------------------------------------------------------------===//

#include "ds/Support/PipelineSchedule.h"

#include "plan.pb.h"

#include <algorithm>
#include <map>

namespace ds {

std::vector<std::vector<PipeStep>> pipelineSchedule(const std::string &kind,
                                                    int stages, int micro) {
  std::vector<std::vector<PipeStep>> out(stages);
  for (int s = 0; s < stages; ++s) {
    std::vector<PipeStep> &v = out[s];
    if (kind == "gpipe") {
      for (int m = 0; m < micro; ++m)
        v.push_back({true, m});
      for (int m = 0; m < micro; ++m)
        v.push_back({false, m});
    } else if (kind == "1f1b") {
      int warm = std::min(stages - s - 1, micro);
      int f = 0, b = 0;
      for (; f < warm; ++f)
        v.push_back({true, f});
      while (f < micro) {
        v.push_back({true, f++});
        v.push_back({false, b++});
      }
      while (b < micro)
        v.push_back({false, b++});
    } else {
      return {};
    }
  }
  return out;
}

int stashSlots(const std::vector<PipeStep> &stage) {
  int alive = 0, most = 0;
  for (const PipeStep &p : stage) {
    alive += p.forward ? 1 : -1;
    most = std::max(most, alive);
  }
  return most;
}

int stashCopies(const std::vector<PipeStep> &stage) {
  int holds = -1, saved = 0, most = 0;
  std::vector<char> isSaved(stage.size() + 1, 0);
  for (const PipeStep &p : stage) {
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
  int stages = static_cast<int>(s.size());
  PipeSimulation out;
  if (stages == 0)
    return out;
  // done[stage][(micro, forward)]: when it ended. Items run in each
  // stage's order; sweep until every item is placed (the schedules are
  // deadlock-free, so each sweep places at least one).
  std::vector<std::map<std::pair<int, bool>, double>> done(stages);
  std::vector<size_t> next(stages, 0);
  std::vector<double> freeAt(stages, 0), busy(stages, 0);
  size_t total = 0, placed = 0;
  for (const auto &v : s)
    total += v.size();
  while (placed < total) {
    bool progress = false;
    for (int st = 0; st < stages; ++st) {
      while (next[st] < s[st].size()) {
        const PipeStep &p = s[st][next[st]];
        double ready = freeAt[st];
        // Its input: the previous stage's forward, the next stage's
        // backward, and (for a backward) its own forward.
        int from = p.forward ? st - 1 : st + 1;
        if (from >= 0 && from < stages) {
          auto it = done[from].find({p.micro, p.forward});
          if (it == done[from].end())
            break;
          ready = std::max(ready, it->second + link);
        }
        double t = p.forward ? forward[st] : backward[st];
        freeAt[st] = ready + t;
        busy[st] += t;
        done[st][{p.micro, p.forward}] = freeAt[st];
        ++next[st];
        ++placed;
        progress = true;
      }
    }
    if (!progress)
      break; // not a valid schedule
  }
  for (int st = 0; st < stages; ++st)
    out.stepSeconds = std::max(out.stepSeconds, freeAt[st]);
  double idle = 0;
  for (int st = 0; st < stages; ++st)
    idle += out.stepSeconds - busy[st];
  out.bubble = out.stepSeconds > 0 ? idle / (stages * out.stepSeconds) : 0;
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
