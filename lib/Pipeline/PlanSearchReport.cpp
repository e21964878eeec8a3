//===- PlanSearchReport.cpp - what --plan=auto prints ---------------------===//
//
// Part of the ds project.
//
// The ranked table of the fitting candidates, one line per rejected
// family, --explain's every candidate, plan.candidates[] for
// --report=json, the --plot-candidates SVG and the error when nothing fits
// (docs/planner.md, "--plan=auto").
//
//===----------------------------------------------------------------------===//

#include "PlanSearchImpl.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::plan_search;

namespace {
std::string megabytes(int64_t bytes) {
  return llvm::formatv("{0:F1} MiB", double(bytes) / (1 << 20)).str();
}

/// The fitting candidates, fastest first (ties: the smaller peak, then
/// the layout's name).
std::vector<int> ranked(const std::vector<Candidate> &all) {
  std::vector<int> out;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].state == State::Fits)
      out.push_back(int(i));
  std::sort(out.begin(), out.end(), [&](int a, int b) {
    const Candidate &x = all[a], &y = all[b];
    if (x.step != y.step)
      return x.step < y.step;
    if (x.peak != y.peak)
      return x.peak < y.peak;
    return a < b;
  });
  return out;
}

/// One row of the ranked table, its layout left-justified in `width`
/// (the longest layout shown, so that long layouts keep the columns).
void row(llvm::raw_ostream &os, const Candidate &c, llvm::StringRef mark,
         unsigned width) {
  os << llvm::left_justify(mark, 2) << llvm::left_justify(c.layout(), width);
  os << llvm::formatv(" {0,12} {1,10} {2,6} {3,12} {4,-13} "
                      "{5,-9} {6,-6} {7,-10} {8,-11} {9}\n",
                      llvm::formatv("{0:F4} ms", c.step * 1e3).str(),
                      llvm::formatv("{0:E3}", c.tokensPerSecond).str(),
                      llvm::formatv("{0:F1}%", 100 * c.mfu).str(),
                      megabytes(c.peak), c.bottleneck, c.optimizerAt(),
                      c.paramsAt(), c.hostPeak ? megabytes(c.hostPeak) : "-",
                      c.activationsAt(), c.compression);
}

/// Where offload went for `c`'s reason: NVMe tried, or why it was not.
std::string nvmeNote(const Candidate &c, const ::ds::ClusterSpec &cluster) {
  if (!c.offload)
    return c.pp > 1 && cluster.host.present
               ? " (offload not tried: not supported with pipeline "
                 "parallelism yet)"
               : "";
  if (c.nvme || c.paramNvme)
    return " (with offload to NVMe)";
  if (!cluster.nvme.present)
    return " (NVMe not tried: the cluster has no \"nvme\" section)";
  return "";
}

/// Why no candidate of a family fits: the furthest any got.
std::string familyReason(const std::vector<const Candidate *> &cands,
                         const ::ds::ClusterSpec &c) {
  const Candidate *small = nullptr, *failed = nullptr, *bound = nullptr;
  int notCompiled = 0;
  for (const Candidate *x : cands) {
    if (x->state == State::TooBig && (!small || x->peak < small->peak))
      small = x;
    if (x->state == State::Failed && !failed)
      failed = x;
    if (x->state == State::Pruned &&
        (!bound || x->lowerBound < bound->lowerBound))
      bound = x;
    notCompiled += x->state == State::NotCompiled;
  }
  if (small && small->hostTooBig)
    return "the smallest compiled peak, " + megabytes(small->peak) + " (" +
           small->layout() + "), fits the device but its " + small->why +
           nvmeNote(*small, c);
  if (small)
    return "the smallest compiled peak, " + megabytes(small->peak) + " (" +
           small->layout() + "), is over the device's " +
           megabytes(int64_t(c.memory)) + nvmeNote(*small, c);
  if (failed)
    return "the compiler refused it (" + failed->layout() +
           "): " + failed->why;
  if (notCompiled)
    return "not compiled: " + cands.front()->why;
  if (bound)
    return "its memory lower bound (parameters, optimizer state, "
           "gradients, kept activations) is " +
           megabytes(bound->lowerBound) + " (" + bound->layout() + ")";
  return cands.front()->why;
}
} // namespace

std::string plan_search::formatTable(const std::vector<Candidate> &all,
                                     int chosen, const ::ds::ClusterSpec &c,
                                     bool explain, const std::string &header) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << header << "\n";
  std::vector<int> order = ranked(all);
  size_t shown = std::min<size_t>(order.size(), 10);
  unsigned width = 40;
  for (size_t i = 0; i < shown; ++i)
    width = std::max<unsigned>(width, all[order[i]].layout().size());
  os << "  " << llvm::left_justify("layout", width);
  os << llvm::formatv(" {0,12} {1,10} {2,6} {3,12} {4,-13} "
                      "{5,-9} {6,-6} {7,-10} {8,-11} {9}\n",
                      "step", "tokens/s", "MFU", "peak", "bottleneck",
                      "optimizer", "params", "host", "activations",
                      "compression");
  for (size_t i = 0; i < shown; ++i)
    row(os, all[order[i]], order[i] == chosen ? "*" : " ", width);
  // One line per family without a fitting candidate.
  std::map<std::string, std::vector<const Candidate *>> families;
  for (const Candidate &x : all)
    families[x.family()].push_back(&x);
  for (const auto &[name, cands] : families) {
    if (llvm::any_of(cands,
                     [](const Candidate *x) { return x->state == State::Fits; }))
      continue;
    os << "rejected " << name << ": " << familyReason(cands, c) << "\n";
  }
  if (!explain)
    return text;
  os << "every candidate (state, memory bound, estimate, peak, step):\n";
  for (const Candidate &x : all)
    os << "  " << x.layout() << ": " << stateName(x.state) << ", bound "
       << megabytes(x.lowerBound) << ", estimate "
       << llvm::formatv("{0:F4} ms", x.estimate * 1e3)
       << (x.peak >= 0 ? ", peak " + megabytes(x.peak) : std::string())
       << (x.state == State::Fits
               ? llvm::formatv(", step {0:F4} ms", x.step * 1e3).str()
               : std::string())
       << (x.why.empty() ? "" : "; " + x.why) << "\n";
  return text;
}

std::string plan_search::candidatesJson(const std::vector<Candidate> &all,
                                        int chosen, int compiles,
                                        bool every) {
  std::string text;
  llvm::raw_string_ostream os(text);
  std::map<std::string, int> counts;
  for (const Candidate &c : all)
    ++counts[stateName(c.state)];
  os << "{\"chosen\": \"" << all[chosen].layout() << "\", \"compiles\": "
     << compiles << ", \"states\": {";
  for (auto it = counts.begin(); it != counts.end(); ++it)
    os << (it == counts.begin() ? "" : ", ") << "\"" << it->first
       << "\": " << it->second;
  os << "}, \"candidates\": [";
  // The fitting ones fastest first, then the other compiled ones (all of
  // them with --explain: a large cluster has tens of thousands).
  std::vector<int> order = ranked(all);
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].state != State::Fits &&
        (every || all[i].state == State::TooBig ||
         all[i].state == State::Failed))
      order.push_back(int(i));
  for (size_t k = 0; k < order.size(); ++k) {
    const Candidate &c = all[order[k]];
    os << (k ? ", " : "") << "{\"layout\": \"" << c.layout()
       << "\", \"family\": \"" << c.family() << "\", \"dp\": " << c.dp
       << ", \"tp\": " << c.tp << ", \"pp\": " << c.pp
       << ", \"sequence_parallel\": " << (c.sp ? "true" : "false")
       << ", \"zero\": " << c.zero << ", \"micro_batch\": " << c.micro
       << ", \"grad_accum\": " << c.accum << ", \"schedule\": \"" << c.schedule
       << "\", \"recompute\": \"" << c.recompute
       << "\", \"offload_optimizer\": " << (c.offload ? "true" : "false")
       << ", \"offload_param\": " << (c.offloadParam ? "true" : "false")
       << ", \"offload_activations\": "
       << (c.offloadActivations ? "true" : "false")
       << ", \"activations_at\": \"" << c.activationsAt()
       << "\", \"optimizer_at\": \"" << c.optimizerAt() << "\", \"params_at\": \""
       << c.paramsAt() << "\", \"host_peak\": " << c.hostPeak
       << ", \"bucket\": " << c.bucket
       << ", \"reduce_bucket\": " << c.reduceBucket
       << ", \"allgather_bucket\": " << c.gatherBucket
       << ", \"prefetch_bucket\": " << c.prefetchBucket
       << ", \"persistence_threshold\": " << c.persistence
       << ", \"max_inflight\": " << c.inFlight
       << ", \"compression\": \"" << c.compression << "\", \"state\": \""
       << stateName(c.state)
       << "\", \"chosen\": " << (order[k] == chosen ? "true" : "false")
       << ", \"memory_bound\": " << c.lowerBound
       << ", \"memory_bound_device\": " << c.boundDevice
       << ", \"memory_bound_none\": " << c.boundNone << ", \"peak\": " << c.peak
       << ", \"step_time_s\": " << c.step
       << ", \"tokens_per_s\": " << c.tokensPerSecond << ", \"mfu\": " << c.mfu
       << ", \"bottleneck\": \"" << c.bottleneck << "\", \"why\": \"";
    for (char ch : c.why)
      if (ch == '"' || ch == '\\')
        os << '\\' << ch;
      else if (static_cast<unsigned char>(ch) >= 0x20)
        os << ch;
    os << "\"}";
  }
  os << "]}";
  return text;
}

std::string plan_search::plotCandidates(const std::vector<Candidate> &all,
                                        int chosen, const ::ds::ClusterSpec &c,
                                        const std::string &title) {
  // Step time (y) against peak memory (x) of every candidate that was
  // predicted or measured too big; the device's memory as a line.
  const double w = 760, h = 440, left = 70, right = 20, top = 40, bottom = 50;
  double maxPeak = c.memory, maxStep = 0;
  std::map<std::string, int> colour;
  for (const Candidate &x : all) {
    if (x.peak < 0)
      continue;
    maxPeak = std::max(maxPeak, double(x.peak));
    maxStep = std::max(maxStep, x.step);
    colour.emplace(x.family(), int(colour.size()));
  }
  maxPeak *= 1.05;
  maxStep = maxStep > 0 ? maxStep * 1.1 : 1;
  static const char *palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                  "#bcbd22", "#17becf"};
  auto px = [&](double bytes) {
    return left + (w - left - right) * bytes / maxPeak;
  };
  auto py = [&](double step) {
    return h - bottom - (h - top - bottom) * step / maxStep;
  };
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w
     << "\" height=\"" << h << "\" font-family=\"sans-serif\" "
     << "font-size=\"11\">\n<text x=\"" << left << "\" y=\"20\">";
  for (char ch : title)
    os << (ch == '<' ? std::string("&lt;") : std::string(1, ch));
  os << "</text>\n";
  os << llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" "
                      "stroke=\"black\"/>\n",
                      left, h - bottom, w - right);
  os << llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" "
                      "stroke=\"black\"/>\n",
                      left, h - bottom, top);
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\">peak memory per rank "
                      "(MiB, up to {2:F0})</text>\n",
                      left + 200, h - 15, maxPeak / (1 << 20));
  os << llvm::formatv("<text x=\"10\" y=\"{0}\">step (ms, up to {1:F3})"
                      "</text>\n",
                      top - 5, maxStep * 1e3);
  os << llvm::formatv("<line class=\"device-memory\" x1=\"{0:F1}\" "
                      "y1=\"{1}\" x2=\"{0:F1}\" y2=\"{2}\" stroke=\"red\" "
                      "stroke-dasharray=\"4 3\"/>\n",
                      px(c.memory), h - bottom, top);
  for (size_t i = 0; i < all.size(); ++i) {
    const Candidate &x = all[i];
    if (x.peak < 0)
      continue;
    // Too big: drawn on the axis, hollow.
    double y = x.state == State::Fits ? py(x.step) : py(0);
    const char *fill = palette[colour[x.family()] % 10];
    os << llvm::formatv("<circle cx=\"{0:F1}\" cy=\"{1:F1}\" r=\"4\" "
                        "fill=\"{2}\" stroke=\"{3}\"><title>{4}</title>"
                        "</circle>\n",
                        px(double(x.peak)), y,
                        x.state == State::Fits ? fill : "none", fill,
                        x.layout());
    if (int(i) == chosen)
      os << llvm::formatv("<circle class=\"chosen\" cx=\"{0:F1}\" "
                          "cy=\"{1:F1}\" r=\"9\" fill=\"none\" "
                          "stroke=\"black\" stroke-width=\"2\"/>\n",
                          px(double(x.peak)), y);
  }
  int k = 0;
  for (const auto &[family, index] : colour)
    os << llvm::formatv("<text class=\"family\" x=\"{0}\" y=\"{1}\" "
                        "fill=\"{2}\">{3}</text>\n",
                        w - right - 120, top + 14 * k++, palette[index % 10],
                        family);
  os << "</svg>\n";
  return text;
}

std::string plan_search::nothingFits(const std::vector<Candidate> &all,
                                     const ::ds::ClusterSpec &c,
                                     const std::string &source,
                                     const ModelFacts &m) {
  // Per family: the smallest compiled peak, else the smallest memory
  // bound of a pruned candidate.
  std::map<std::string, int64_t> peaks, bounds;
  int64_t least = -1, minMicro = -1, hostNeed = -1;
  bool triedOffload = false, triedNvme = false, triedActivations = false;
  // Candidates the compile budget left out: their family is not ruled out.
  std::map<std::string, int> leftOut;
  auto lower = [](std::map<std::string, int64_t> &m, const std::string &k,
                  int64_t v) {
    auto it = m.find(k);
    if (it == m.end() || v < it->second)
      m[k] = v;
  };
  for (const Candidate &x : all) {
    if (x.state == State::NotCompiled)
      ++leftOut[x.family()];
    if (x.state == State::Pruned)
      lower(bounds, x.family(), x.lowerBound);
    if (x.peak < 0)
      continue;
    lower(peaks, x.family(), x.peak);
    minMicro = minMicro < 0 ? x.micro : std::min(minMicro, x.micro);
    triedOffload |= x.offload;
    triedNvme |= x.nvme || x.paramNvme;
    triedActivations |= x.offloadActivations || x.activationsTried;
    if (x.hostTooBig) { // fits the device: the host is short
      int64_t node =
          x.hostPeak * std::min<int64_t>(x.world(), c.devicesPerNode);
      hostNeed = hostNeed < 0 ? node : std::min(hostNeed, node);
      continue;
    }
    least = least < 0 ? x.peak : std::min(least, x.peak);
  }
  std::map<std::string, int64_t> smallest = bounds;
  int64_t leastBound = -1; // of the families with no compiled candidate
  for (const auto &[family, bound] : bounds)
    if (!peaks.count(family))
      leastBound = leastBound < 0 ? bound : std::min(leastBound, bound);
  for (const auto &[family, peak] : peaks)
    smallest[family] = peak;
  std::string text = "no layout fits " + source + "'s " +
                     megabytes(int64_t(c.memory)) +
                     " per device; the smallest peak per layout family:";
  for (const auto &[family, peak] : smallest) {
    text += " " + family + " " + megabytes(peak) +
            (peaks.count(family) ? "" : " (memory bound)");
    if (int n = leftOut[family])
      text += " and " + std::to_string(n) +
              " not compiled (raise --plan-compiles)";
    text += ";";
  }
  int untouched = 0;
  for (const auto &[family, n] : leftOut)
    untouched += smallest.count(family) ? 0 : 1;
  if (untouched)
    text += " " + std::to_string(untouched) +
            " more families not compiled (raise --plan-compiles);";
  if (smallest.empty())
    text += " none compiled;";
  if (least >= 0)
    text += " would fit: devices of " + megabytes(least) +
            " (the smallest compiled peak)";
  else if (leastBound >= 0)
    text += " would fit: devices of more than " + megabytes(leastBound) +
            " (the memory bound)";
  else
    text += " would fit: unknown (raise --plan-compiles)";
  // A family only the bound rejected may fit a device between its bound
  // and the smallest compiled peak.
  if (least >= 0 && leastBound >= 0 && leastBound < least)
    text += " or perhaps smaller, down to " + megabytes(leastBound) +
            " (the smallest memory bound of a family not compiled)";
  text += ", or more devices (ZeRO-3 divides the parameters and optimizer "
          "state by the data-parallel ranks)";
  if (hostNeed >= 0)
    text += ", or host memory of " + megabytes(hostNeed) +
            " per node (offloading layouts fit the device)";
  if (!c.host.present)
    text += ", or optimizer, parameter or activation offload (give the "
            "cluster a \"host\" section, and \"nvme\" for NVMe; offload "
            "was not considered without one)";
  else if (!triedOffload)
    text += ", or optimizer offload";
  if (c.host.present && !c.nvme.present)
    text += ", or NVMe offload (give the cluster an \"nvme\" section; "
            "not considered without one)";
  else if (triedNvme)
    text += " (offload to the host and to NVMe was tried)";
  if (c.host.present && !triedActivations) // pass 2 tries it otherwise
    text += ", or activation offload (--offload-activations=cpu)";
  if (m.fixedBatch && m.fixedBatch > 1)
    text += ", or a smaller micro-batch (the export fixes it at " +
            std::to_string(m.fixedBatch) + ": export with a dynamic batch)";
  else if (minMicro > 1)
    text += ", or a micro-batch below " + std::to_string(minMicro);
  return text;
}
