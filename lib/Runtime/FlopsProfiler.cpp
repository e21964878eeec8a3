//===- FlopsProfiler.cpp - DeepSpeed's flops profile of one step ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// At flops_profiler.profile_step ds-run prints (or writes to output_file)
// the profile DeepSpeed's flops profiler prints, from ds's own figures: the
// FLOPs are the plan's cost model's per instruction (what ds-opt --report
// counts), times the runs of a step; the latencies are the step's measured
// times per plan phase and per instruction (the executor's profile). The
// modules are the ONNX node names' path prefixes ("/h.0/attn/MatMul" is in
// module "h.0/attn", itself in "h.0"); depth 0 is the whole model.
//
//===----------------------------------------------------------------------===//

#include "Monitor.h"
#include "PlanImpl.h"
#include "TrainerImpl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace ds::rt {

namespace {

/// "12.3 G" as DeepSpeed's number_to_string prints FLOPs.
std::string scaled(double v, const char *unit) {
  const char *prefix[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f%s%s", v, i ? prefix[i] : " ", unit);
  return buf;
}

const char *phaseName(int phase) {
  switch (phase) {
  case plan::PHASE_FORWARD:
    return "forward";
  case plan::PHASE_BACKWARD:
    return "backward";
  case plan::PHASE_OPTIMIZER:
    return "optimizer";
  case plan::PHASE_COMMUNICATION:
    return "communication";
  case plan::PHASE_TRANSFER:
    return "transfer";
  default:
    return "other";
  }
}

/// The module path of an ONNX node name: its parts without the op's own.
std::vector<std::string> modulePath(const std::string &location) {
  std::vector<std::string> parts;
  std::stringstream in(location);
  std::string p;
  while (std::getline(in, p, '/'))
    if (!p.empty())
      parts.push_back(p);
  if (!parts.empty())
    parts.pop_back();
  return parts;
}

struct ModuleFigures {
  double flops = 0, ms = 0;
};

/// "Top K modules in terms of FLOPs and latency at each depth".
void printModules(std::ostringstream &out, const plan::Program &prog,
                  const std::vector<double> &insMs, double runs,
                  const MonitorSettings &s) {
  std::vector<std::map<std::string, ModuleFigures>> depths(1);
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    double flops = static_cast<double>(ins.flops()) * runs;
    double ms = i < static_cast<int>(insMs.size()) ? insMs[i] : 0;
    std::vector<std::string> path = modulePath(ins.location());
    std::string name = "model";
    for (size_t d = 0; d <= path.size(); ++d) {
      if (s.flopsDepth >= 0 && static_cast<int64_t>(d) > s.flopsDepth)
        break;
      if (depths.size() <= d)
        depths.resize(d + 1);
      if (d > 0)
        name = d == 1 ? path[0] : name + "/" + path[d - 1];
      ModuleFigures &m = depths[d][name];
      m.flops += flops;
      m.ms += ms;
    }
  }
  out << "Top " << s.flopsTop
      << " modules in terms of FLOPs and latency at different model "
         "depths:\n";
  for (size_t d = 0; d < depths.size(); ++d) {
    std::vector<std::pair<std::string, ModuleFigures>> rows(depths[d].begin(),
                                                            depths[d].end());
    auto top = [&](auto key, const char *unit) {
      std::sort(rows.begin(), rows.end(), [&](auto &a, auto &b) {
        double ka = key(a.second), kb = key(b.second);
        return ka != kb ? ka > kb : a.first < b.first;
      });
      std::string text;
      for (size_t k = 0; k < rows.size() && k < size_t(s.flopsTop); ++k)
        text += std::string(k ? ", " : "") + "'" + rows[k].first + "': '" +
                scaled(key(rows[k].second), unit) +
                "'";
      return text;
    };
    out << "depth " << d << ":\n";
    out << "    FLOPs       - {"
        << top([](const ModuleFigures &m) { return m.flops; }, "FLOPs")
        << "}\n";
    out << "    latency     - {"
        << top([](const ModuleFigures &m) { return m.ms; }, "ms") << "}\n";
  }
}

/// Every instruction: its kernel, phase, node, FLOPs, time and FLOP/s.
void printDetailed(std::ostringstream &out, const plan::Program &prog,
                   const std::vector<double> &insMs, double runs) {
  out << "-------------------------- Detailed Profile per rank "
         "--------------------------\n";
  out << "Each op: index, kernel, phase, ONNX node, FLOPs (the plan's x "
         "runs), latency, FLOP/s\n";
  char line[512];
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    double flops = static_cast<double>(ins.flops()) * runs;
    double ms = i < static_cast<int>(insMs.size()) ? insMs[i] : 0;
    std::snprintf(line, sizeof line, "  %5d %-24s %-13s %-40s %14s %12.4f ms %16s\n",
                  i, ins.kernel().c_str(), phaseName(ins.phase()),
                  ins.location().c_str(), scaled(flops, "FLOPs").c_str(), ms,
                  ms > 0 ? scaled(flops / (ms / 1e3), "FLOPS").c_str() : "-");
    out << line;
  }
}

} // namespace

bool writeFlopsProfile(RunContext &ctx, const TrainState &ts,
                       const StepFigures &f, const MonitorSettings &s,
                       const StepBreakdown &t, std::string &err) {
  const plan::Program &prog = ctx.plan->proto.programs(0);
  // Each micro-batch runs the whole program (pipeline: its sections).
  double runs = static_cast<double>(ts.accum);
  double phaseFlops[6] = {};
  for (const plan::Instruction &ins : prog.instructions()) {
    int ph = static_cast<int>(ins.phase());
    phaseFlops[ph >= 0 && ph < 6 ? ph : 0] +=
        static_cast<double>(ins.flops()) * runs;
  }
  double fwd = phaseFlops[plan::PHASE_FORWARD],
         bwd = phaseFlops[plan::PHASE_BACKWARD],
         opt = phaseFlops[plan::PHASE_OPTIMIZER];
  double all = 0;
  for (double v : phaseFlops)
    all += v;
  double iterMs = ctx.stats.milliseconds;
  auto rate = [](double flops, double ms) {
    return ms > 0 ? scaled(flops / (ms / 1e3), "FLOPS") : std::string("-");
  };
  std::ostringstream out;
  char buf[160];
  auto row = [&](const char *name, const std::string &value) {
    std::snprintf(buf, sizeof buf, "%-62s%s\n", name, value.c_str());
    out << buf;
  };
  out << "-------------------------- DeepSpeed Flops Profiler "
         "--------------------------\n";
  out << "Profile Summary at step " << f.step << ":\n";
  row("world size:", std::to_string(ctx.world.size()));
  row("data parallel size:", std::to_string(ctx.dpSize));
  row("model parallel size:", std::to_string(ctx.tensorParallel));
  row("batch size per rank:", std::to_string(ts.data.samples * ts.accum));
  row("parameter bytes per rank:", std::to_string(ts.measuredParams));
  row("fwd flops per rank:", scaled(fwd, "FLOPs"));
  row("fwd latency:", scaled(t.forward, "ms"));
  row("fwd FLOPS per rank = fwd flops per rank / fwd latency:",
      rate(fwd, t.forward));
  row("bwd flops per rank:", scaled(bwd, "FLOPs"));
  row("bwd latency:", scaled(t.backward, "ms"));
  row("bwd FLOPS per rank = bwd flops per rank / bwd latency:",
      rate(bwd, t.backward));
  row("step flops per rank:", scaled(opt, "FLOPs"));
  row("step latency:", scaled(t.step, "ms"));
  row("communication latency:", scaled(t.communication, "ms"));
  row("flops per rank (every instruction of the step):", scaled(all, "FLOPs"));
  row("iter latency:", scaled(iterMs, "ms"));
  row("FLOPS per rank = flops per rank / iter latency:", rate(all, iterMs));
  std::snprintf(buf, sizeof buf, "%.2f", f.samplesPerSecond * ctx.dpSize);
  row("samples/second:", buf);
  out << "----------------------------- Aggregated Profile per rank "
         "-----------------------------\n";
  printModules(out, prog, ctx.stats.instructionMilliseconds, runs, s);
  if (s.flopsDetailed)
    printDetailed(out, prog, ctx.stats.instructionMilliseconds, runs);
  out << "------------------------------------------------------------------"
         "------------\n";
  std::string text = out.str();
  if (s.flopsFile.empty()) {
    std::fputs(text.c_str(), stdout);
    return true;
  }
  std::FILE *file = std::fopen(s.flopsFile.c_str(), "w");
  if (!file || std::fputs(text.c_str(), file) < 0 || std::fclose(file) != 0) {
    err = "flops_profiler: cannot write '" + s.flopsFile +
          "': " + std::strerror(errno);
    return false;
  }
  std::printf("flops profile of step %lld written to %s\n", f.step,
              s.flopsFile.c_str());
  return true;
}

} // namespace ds::rt
