//===- ds-run.cpp - execute a ds plan -------------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//   ds-run plan.bin --forward-only --inputs in.npz --outputs out.npz
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace ds::rt;

namespace {

const char *kUsage = R"(ds-run: execute a plan compiled by ds-opt.

usage: ds-run PLAN [options]

  --forward-only        evaluate the graph once (the plans of this version
                        hold the forward program only)
  --inputs FILE         graph inputs: a .npz whose arrays are named by graph
                        input names, a .npy or ONNX TensorProto .pb given as
                        NAME=FILE (a .pb's own name is used when NAME= is
                        left out); repeat for several files
  --outputs FILE.npz    write every graph output, named by output name
  --log-json FILE       one JSON object per step: step, loss, time_ms,
                        peak_bytes (arena high-water), planned_bytes
  --threads N           threads for kernels and OpenBLAS (default: all cores)
  --repeat N            run the forward program N times (timing); outputs
                        and losses are those of the last run
  --seed S              seed of random kernels (dropout); default 0
  --profile             print time per kernel id
  --list-kernels        print the kernel ids this runtime implements
  --help                this text

Errors are one line 'error: ...' and exit code 1.
)";

int fail(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool parseInt(const std::string &s, long long &v) {
  char *end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end && *end == 0;
}

std::string human(uint64_t bytes) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

} // namespace

int main(int argc, char **argv) {
  std::string planPath, outputsPath, logPath;
  std::vector<std::string> inputSpecs;
  bool forwardOnly = false, profile = false;
  long long threads = std::max(1u, std::thread::hardware_concurrency());
  long long repeat = 1, seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string &out) {
      size_t eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
        out = a.substr(eq + 1);
        return true;
      }
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    std::string flag = a.substr(0, a.find('='));
    std::string v;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--list-kernels") {
      for (const std::string &k : kernelNames())
        std::printf("%s\n", k.c_str());
      return 0;
    } else if (a == "--forward-only") {
      forwardOnly = true;
    } else if (a == "--profile") {
      profile = true;
    } else if (flag == "--inputs") {
      if (!value(v))
        return fail("--inputs needs a file");
      inputSpecs.push_back(v);
    } else if (flag == "--outputs") {
      if (!value(outputsPath))
        return fail("--outputs needs a file");
    } else if (flag == "--log-json") {
      if (!value(logPath))
        return fail("--log-json needs a file");
    } else if (flag == "--threads" || flag == "--repeat" || flag == "--seed") {
      long long n;
      if (!value(v) || !parseInt(v, n) || (flag != "--seed" && n < 1))
        return fail(flag + " needs a positive integer, got '" + v + "'");
      (flag == "--threads" ? threads : flag == "--repeat" ? repeat : seed) = n;
    } else if (a.rfind("-", 0) == 0) {
      return fail("unknown option '" + a + "' (see ds-run --help)");
    } else if (planPath.empty()) {
      planPath = a;
    } else {
      return fail("more than one plan given: '" + planPath + "' and '" + a + "'");
    }
  }
  if (planPath.empty())
    return fail("no plan given (usage: ds-run PLAN --forward-only ...; see --help)");

  std::string err;
  std::shared_ptr<const Plan> plan = loadPlan(planPath, err);
  if (!plan)
    return fail(err);
  PlanInfo info = describe(*plan);
  if (!forwardOnly)
    return fail("'" + planPath + "' holds a forward program only; run it with "
                "--forward-only (training steps come with the autodiff passes)");

  ExecutorOptions options;
  options.threads = static_cast<int>(threads);
  options.seed = static_cast<uint64_t>(seed);
  options.profile = profile;
  std::unique_ptr<Executor> exec = Executor::create(plan, options, err);
  if (!exec)
    return fail(err);

  // Inputs.
  for (const std::string &spec : inputSpecs) {
    std::string name, file = spec;
    size_t eq = spec.find('=');
    if (eq != std::string::npos) {
      name = spec.substr(0, eq);
      file = spec.substr(eq + 1);
    }
    if (endsWith(file, ".npz")) {
      if (!name.empty())
        return fail("--inputs " + spec + ": a .npz names its arrays itself");
      std::map<std::string, HostTensor> arrays;
      if (!readNpz(file, arrays, err))
        return fail(err);
      for (auto &[arrayName, t] : arrays) {
        bool isInput = false;
        for (const std::string &n : exec->inputNames())
          isInput |= n == arrayName;
        if (!isInput)
          continue; // other arrays (expected outputs, ...) are ignored
        if (!exec->setInput(arrayName, std::move(t), err))
          return fail(err);
      }
    } else if (endsWith(file, ".pb")) {
      HostTensor t;
      std::string own;
      if (!readTensorProto(file, own, t, err))
        return fail(err);
      if (!exec->setInput(name.empty() ? own : name, std::move(t), err))
        return fail(err);
    } else if (endsWith(file, ".npy")) {
      if (name.empty())
        return fail("--inputs " + spec + ": give a .npy as NAME=FILE.npy");
      HostTensor t;
      if (!readNpy(file, t, err) || !exec->setInput(name, std::move(t), err))
        return fail(err);
    } else {
      return fail("--inputs " + spec + ": expected a .npz, .npy or .pb file");
    }
  }

  std::FILE *log = nullptr;
  if (!logPath.empty() && !(log = std::fopen(logPath.c_str(), "w")))
    return fail("cannot write '" + logPath + "'");

  RunStats stats;
  double totalMs = 0;
  for (long long r = 0; r < repeat; ++r) {
    stats.kernelTimes.clear();
    if (!exec->run(stats, err)) {
      if (log)
        std::fclose(log);
      return fail(err);
    }
    totalMs += stats.milliseconds;
    double loss = NAN;
    if (!info.loss.empty()) {
      HostTensor l;
      if (exec->output(info.loss, l, err) && l.numel() == 1 &&
          l.dtype == DType::F32) {
        float f;
        std::memcpy(&f, l.data.data(), 4);
        loss = f;
      }
    }
    if (log)
      std::fprintf(log,
                   "{\"step\": %lld, \"loss\": %s, \"time_ms\": %.3f, "
                   "\"peak_bytes\": %llu, \"planned_bytes\": %llu}\n",
                   r, std::isnan(loss) ? "null" : std::to_string(loss).c_str(),
                   stats.milliseconds,
                   static_cast<unsigned long long>(stats.arenaHighWater),
                   static_cast<unsigned long long>(stats.arenaPlanned));
    if (r + 1 == repeat) {
      std::printf("forward:");
      if (!std::isnan(loss))
        std::printf(" loss %.6f |", loss);
      std::printf(" %.3f ms", repeat > 1 ? totalMs / repeat : stats.milliseconds);
      if (repeat > 1)
        std::printf(" (mean of %lld)", repeat);
      std::printf(" | arena %s planned, %s high-water | %zu kernels, %lld threads\n",
                  human(stats.arenaPlanned).c_str(),
                  human(stats.arenaHighWater).c_str(), info.instructions,
                  threads);
    }
  }
  if (log)
    std::fclose(log);
  if (stats.arenaHighWater > stats.arenaPlanned)
    return fail("the arena high-water mark exceeds the plan");

  if (profile) {
    // The last run's kernels, slowest first; GEMMs with their throughput.
    std::vector<std::pair<double, std::string>> rows;
    for (const auto &[k, v] : stats.kernelTimes)
      rows.push_back({v.milliseconds, k});
    std::sort(rows.rbegin(), rows.rend());
    std::printf("profile of the last run:\n");
    for (const auto &[ms, k] : rows) {
      const RunStats::KernelTime &t = stats.kernelTimes[k];
      std::printf("  %-28s %9.3f ms  %6lld calls", k.c_str(), ms,
                  static_cast<long long>(t.calls));
      if (t.flops > 0 && ms > 0)
        std::printf("  %8.2f GFLOP/s", t.flops / (ms * 1e6));
      std::printf("\n");
    }
  }

  if (!outputsPath.empty()) {
    std::vector<HostTensor> outs;
    std::vector<std::string> names = exec->outputNames();
    outs.reserve(names.size());
    std::vector<std::pair<std::string, const HostTensor *>> arrays;
    for (const std::string &n : names) {
      outs.emplace_back();
      if (!exec->output(n, outs.back(), err))
        return fail(err);
    }
    for (size_t i = 0; i < names.size(); ++i)
      arrays.push_back({names[i], &outs[i]});
    if (!writeNpz(outputsPath, arrays, err))
      return fail(err);
  }
  return 0;
}
