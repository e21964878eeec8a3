//===- Calibrate.cpp - ds-run --calibrate: measure, then describe ---------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The driver of a calibration: checks that the description can be written
// (before a minute of measuring), finds the launch's layout (ranks per
// host), measures the kernels on every rank at once (each rank a device of
// the description; the figures are averaged over the ranks), then the
// collectives, and rank 0 writes the description as CLUSTER.md's JSON
// (docs/calibration.md): same keys in the same order for the same flags
// and rank count.
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "Cpu/Kernels.h"
#include "ds/Runtime/Comm.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

namespace ds::rt {

void CalibrationPlan::progress(const char *fmt, ...) const {
  if (rank != 0)
    return;
  std::fprintf(stderr, "calibrate: [%.1f s] ", elapsed());
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fflush(stderr);
}

std::vector<float> ComputeFigures::flatten() const {
  std::vector<float> v;
  for (const GemmClass &g : gemm)
    v.push_back(static_cast<float>(g.flopsPerS));
  for (double x : {fp32, bf16, fp16, memoryBandwidth, copyBandwidth,
                   launchOverhead, dispatchOverhead, runOverhead, stashSave,
                   stashRestore, share})
    v.push_back(static_cast<float>(x));
  for (const FamilyFigure &f : families)
    for (double x : {f.bytesPerS, f.flopsPerS, f.overhead})
      v.push_back(static_cast<float>(x));
  for (const KindFigure &k : kinds)
    for (double x : {k.bytesPerS, k.overhead})
      v.push_back(static_cast<float>(x));
  return v;
}

void ComputeFigures::unflatten(const std::vector<float> &v) {
  size_t i = 0;
  for (GemmClass &g : gemm)
    g.flopsPerS = v[i++];
  for (double *x : {&fp32, &bf16, &fp16, &memoryBandwidth, &copyBandwidth,
                    &launchOverhead, &dispatchOverhead, &runOverhead,
                    &stashSave, &stashRestore, &share})
    *x = v[i++];
  for (FamilyFigure &f : families)
    for (double *x : {&f.bytesPerS, &f.flopsPerS, &f.overhead})
      *x = v[i++];
  for (KindFigure &k : kinds)
    for (double *x : {&k.bytesPerS, &k.overhead})
      *x = v[i++];
}

namespace {

//===----------------------------------------------------------------------===//
// The launch: hosts, ranks per host, memory
//===----------------------------------------------------------------------===//

struct Layout {
  int nodes = 1, perNode = 1;
  int node = 0, local = 0; // this rank's node and its index there
  std::string host;        // rank 0's
};

/// Ranks per host from every rank's host name (DS_CALIBRATE_FAKE_NODES=K,
/// a test hook, splits the ranks into K pretend hosts in rank order).
bool layoutOf(Communicator &world, Layout &l, std::string &err) {
  char name[64] = {};
  ::gethostname(name, sizeof name - 1);
  int n = world.size(), rank = world.rank();
  if (const char *fake = std::getenv("DS_CALIBRATE_FAKE_NODES")) {
    int k = std::max(1, std::atoi(fake));
    std::snprintf(name, sizeof name, "node%d", rank * k / n);
  }
  std::vector<char> all(64 * static_cast<size_t>(n));
  if (!world.allGather(name, all.data(), 16, DType::I32, err))
    return false;
  std::map<std::string, int> index; // host -> node, in order of first rank
  std::vector<int> count;
  for (int r = 0; r < n; ++r) {
    std::string h(&all[64 * r]);
    auto [it, fresh] = index.emplace(h, static_cast<int>(count.size()));
    if (fresh)
      count.push_back(0);
    if (r == rank) {
      l.node = it->second;
      l.local = count[it->second];
    }
    ++count[it->second];
    if (r == 0)
      l.host = h;
  }
  l.nodes = static_cast<int>(count.size());
  l.perNode = count[0];
  for (const auto &[host, node] : index)
    if (count[node] != l.perNode) {
      err = "the ranks are spread unevenly over the hosts (" +
            std::to_string(count[node]) + " on '" + host + "', " +
            std::to_string(l.perNode) + " on '" + l.host +
            "'): start the same number on each";
      return false;
    }
  return true;
}

/// Bytes of the host's available memory (MemAvailable, else MemTotal) and
/// which figure it is.
uint64_t hostMemory(std::string &source) {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0, total = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") {
      source = "MemAvailable";
      return kb * 1024;
    }
    if (key == "MemTotal:")
      total = kb * 1024;
  }
  source = "MemTotal";
  return total;
}

/// Whether `path` can be written (its folder exists and takes files, and
/// it is not a folder itself).
bool checkWritable(const std::string &path, std::string &err) {
  std::string dir = ".";
  if (size_t slash = path.rfind('/'); slash != std::string::npos)
    dir = slash ? path.substr(0, slash) : "/";
  struct stat st;
  const char *why = nullptr;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    why = "its folder does not exist";
  else if (::access(dir.c_str(), W_OK) != 0)
    why = "its folder is not writable";
  else if (::stat(path.c_str(), &st) == 0 &&
           (S_ISDIR(st.st_mode) || ::access(path.c_str(), W_OK) != 0))
    why = S_ISDIR(st.st_mode) ? "it is a folder" : "it is not writable";
  if (why)
    err = "cannot write the machine description '" + path + "': " + why;
  return why == nullptr;
}

//===----------------------------------------------------------------------===//
// The description (JSON)
//===----------------------------------------------------------------------===//

std::string quoted(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      continue;
    out += c;
  }
  return out + "\"";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string alphaBeta(const AlphaBeta &f) {
  return "{\"latency\": " + num(f.latency) +
         ", \"bandwidth\": " + num(f.bandwidth) + "}";
}

/// Everything measured, for the description.
struct Measured {
  Layout layout;
  uint64_t memory = 0;
  std::string memorySource;
  ComputeFigures compute;
  std::vector<CollectiveFigure> collectives;
  AlphaBeta intra, inter;
  bool nvme = false;
  double nvmeWrite = 0, nvmeRead = 0;
  std::vector<std::string> notes;
};

std::string kernelsJson(const ComputeFigures &c) {
  // The executor's overheads only when the fit left them positive (a
  // note says so otherwise; absent means 0).
  std::string j = "  \"kernels\": {\n    \"launch_overhead\": " +
                  num(c.launchOverhead) + ",\n";
  if (c.dispatchOverhead > 0)
    j += "    \"dispatch_overhead\": " + num(c.dispatchOverhead) + ",\n";
  if (c.runOverhead > 0)
    j += "    \"run_overhead\": " + num(c.runOverhead) + ",\n";
  j += "    \"stash_save_bytes_per_s\": " + num(c.stashSave) +
       ",\n    \"stash_restore_bytes_per_s\": " + num(c.stashRestore) +
       ",\n    \"gemm\": [\n";
  for (size_t i = 0; i < c.gemm.size(); ++i)
    j += "      {" +
         (c.gemm[i].maxFlops ? "\"max_flops\": " + num(c.gemm[i].maxFlops) +
                                   ", "
                             : std::string()) +
         "\"flops_per_s\": " + num(c.gemm[i].flopsPerS) + "}" +
         (i + 1 < c.gemm.size() ? ",\n" : "\n");
  j += "    ],\n    \"families\": {\n";
  for (size_t i = 0; i < c.families.size(); ++i) {
    const FamilyFigure &f = c.families[i];
    j += std::string("      \"") + f.name + "\": {" +
         (f.bytesPerS ? "\"bytes_per_s\": " + num(f.bytesPerS) : "") +
         (f.bytesPerS && f.flopsPerS ? ", " : "") +
         (f.flopsPerS ? "\"flops_per_s\": " + num(f.flopsPerS) : "") + "}" +
         (i + 1 < c.families.size() ? ",\n" : "\n");
  }
  std::vector<const KindFigure *> kinds;
  for (const KindFigure &k : c.kinds)
    if (k.measured)
      kinds.push_back(&k);
  if (kinds.empty())
    return j + "    }\n  }";
  j += "    },\n    \"kinds\": {\n";
  for (size_t i = 0; i < kinds.size(); ++i) {
    // Only the positive figures (a kernel without growth has no rate; one
    // through the origin no overhead).
    const KindFigure &k = *kinds[i];
    std::string rate = k.bytesPerS > 0 ? "\"bytes_per_s\": " + num(k.bytesPerS)
                                       : std::string();
    std::string over =
        k.overhead > 0 || rate.empty() ? "\"overhead\": " + num(k.overhead)
                                       : std::string();
    j += "      \"" + k.kernel + "\": {" + rate +
         (!rate.empty() && !over.empty() ? ", " : "") + over + "}" +
         (i + 1 < kinds.size() ? ",\n" : "\n");
  }
  return j + "    }\n  }";
}

std::string describe(const Measured &m, const CalibrationPlan &plan,
                     int ranks) {
  const Layout &l = m.layout;
  const ComputeFigures &c = m.compute;
  std::vector<std::string> top;
  top.push_back("  \"name\": " + quoted("cpu:" + l.host + ":" +
                                         std::to_string(l.nodes) + "x" +
                                         std::to_string(l.perNode)));
  top.push_back("  \"nodes\": " + std::to_string(l.nodes));
  top.push_back("  \"devices_per_node\": " + std::to_string(l.perNode));
  top.push_back("  \"device\": {\n    \"kind\": \"cpu\",\n    \"memory\": " +
                std::to_string(m.memory) + ",\n    \"flops\": {\"fp32\": " +
                num(c.fp32) + ", \"bf16\": " + num(c.bf16) +
                ", \"fp16\": " + num(c.fp16) +
                "},\n    \"memory_bandwidth\": " + num(c.memoryBandwidth) +
                "\n  }");
  if (l.perNode > 1)
    top.push_back("  \"intra_node\": " + alphaBeta(m.intra));
  if (l.nodes > 1)
    top.push_back("  \"inter_node\": " + alphaBeta(m.inter));
  if (m.nvme)
    top.push_back("  \"nvme\": {\"read_bandwidth\": " + num(m.nvmeRead) +
                  ", \"write_bandwidth\": " + num(m.nvmeWrite) + "}");
  top.push_back(kernelsJson(c));
  if (!m.collectives.empty()) {
    std::string j = "  \"collectives\": {\n";
    std::vector<std::string> rows;
    for (const CollectiveFigure &f : m.collectives)
      if (f.fit.ok)
        rows.push_back(std::string("    \"") + f.name +
                       "\": " + alphaBeta(f.fit));
    for (size_t i = 0; i < rows.size(); ++i)
      j += rows[i] + (i + 1 < rows.size() ? ",\n" : "\n");
    top.push_back(j + "  }");
  }
  char date[32];
  std::time_t now = std::time(nullptr);
  std::tm utc;
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  std::string cal = "  \"calibration\": {\n    \"date\": \"" +
                    std::string(date) +
                    "\",\n    \"threads\": " + std::to_string(plan.threads) +
                    ",\n    \"ranks\": " + std::to_string(ranks) +
                    ",\n    \"host\": " + quoted(l.host) +
                    ",\n    \"seconds\": " + num(plan.elapsed()) +
                    ",\n    \"quick\": " + (plan.quick ? "true" : "false") +
                    ",\n    \"copy_bandwidth\": " + num(c.copyBandwidth) +
                    ",\n    \"notes\": [\n";
  for (size_t i = 0; i < m.notes.size(); ++i)
    cal += "      " + quoted(m.notes[i]) +
           (i + 1 < m.notes.size() ? ",\n" : "\n");
  top.push_back(cal + "    ]\n  }");
  std::string j = "{\n";
  for (size_t i = 0; i < top.size(); ++i)
    j += top[i] + (i + 1 < top.size() ? ",\n" : "\n");
  return j + "}\n";
}

/// Writes `text` to `path` whole (a temporary file renamed over it).
bool writeFile(const std::string &path, const std::string &text,
               std::string &err) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      err = "cannot write '" + tmp + "': " + std::strerror(errno);
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = "cannot write '" + path + "': " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace

//===----------------------------------------------------------------------===//
// The calibration
//===----------------------------------------------------------------------===//

namespace {

/// Agrees on `ok` over the ranks: a rank that did not fail itself says
/// that another did.
bool agree(Communicator &world, bool ok, std::string &err) {
  if (world.allOk(ok))
    return true;
  if (ok)
    err = "another rank failed during the calibration";
  return false;
}

/// Where --calibrate-nvme writes its swap file.
std::string nvmeFolder(const RunOptions &o) {
  const char *tmp = std::getenv("TMPDIR");
  return !o.nvmePath.empty() ? o.nvmePath : tmp && *tmp ? tmp : "/tmp";
}

/// Before measuring: the description can be written, and the NVMe folder
/// (when asked) takes files.
bool checkPaths(const RunOptions &o, std::string &err) {
  if (!checkWritable(o.outputPath, err))
    return false;
  if (!o.calibrateNvme)
    return true;
  std::string dir = nvmeFolder(o);
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
      ::access(dir.c_str(), W_OK) == 0)
    return true;
  err = "--calibrate-nvme cannot write its temporary file in '" + dir +
        "': not a writable folder";
  return false;
}

/// The NVMe engine's rates (every rank its own swap file, at once).
bool calibrateNvme(const RunOptions &o, const CalibrationPlan &plan,
                   Communicator &world, Measured &m, std::string &err) {
  if (!o.calibrateNvme) {
    m.notes.push_back("nvme: not measured (--calibrate-nvme writes a "
                      "temporary file to measure it)");
    return true;
  }
  std::string dir = nvmeFolder(o);
  bool ok = measureNvme(plan, dir, m.nvmeWrite, m.nvmeRead, err);
  if (!agree(world, ok, err))
    return false;
  float rates[2] = {static_cast<float>(m.nvmeWrite),
                    static_cast<float>(m.nvmeRead)};
  if (world.size() > 1 &&
      !world.allReduce(rates, 2, DType::F32, /*mean=*/true, err))
    return false;
  m.nvme = true;
  m.nvmeWrite = rates[0];
  m.nvmeRead = rates[1];
  m.notes.push_back("nvme: the offload engine's swap file in '" + dir +
                    "', through the page cache as a run's offload goes");
  return true;
}

/// The kernels, on every rank at once, averaged over the ranks.
bool calibrateCompute(const CalibrationPlan &plan, Communicator &world,
                      Measured &m, std::string &err) {
  if (!agree(world, measureGemm(plan, m.compute, err), err) ||
      !agree(world, measureMemoryBandwidth(plan, m.compute, err), err) ||
      !agree(world, measureFamilies(plan, m.compute, err), err) ||
      !agree(world, measureKinds(plan, m.compute, err), err) ||
      !agree(world, measureInStep(plan, world, m.compute, m.notes, err),
             err) ||
      !agree(world, measureExecutor(plan, m.compute, err), err) ||
      !agree(world, measureStash(plan, m.compute, err), err) ||
      !agree(world, measureShare(plan, m.compute.share, err), err))
    return false;
  scaleByShare(m.compute.share, m.compute);
  if (world.size() > 1) {
    std::vector<float> v = m.compute.flatten();
    if (!world.allReduce(v.data(), static_cast<int64_t>(v.size()),
                         DType::F32, /*mean=*/true, err))
      return false;
    m.compute.unflatten(v);
  }
  m.notes.push_back("device.flops.bf16 and fp16: the CPU matmul kernel "
                    "converts 16-bit operands to f32 in its workspace and "
                    "runs sgemm; measured through it on the largest "
                    "class's cube");
  char shareNote[200];
  std::snprintf(shareNote, sizeof shareNote,
                "kernels, device.flops and memory_bandwidth: scaled by the "
                "share of the host's cores a run got while calibrating, "
                "%.2f (mean over the ranks; 1: a host of its own)",
                m.compute.share);
  m.notes.push_back(shareNote);
  m.notes.push_back(
      "kernels.dispatch_overhead and run_overhead: plans of 8 and 512 tiny "
      "adds (quick 128) run through the executor, less the add's own call; "
      "stash_save and stash_restore_bytes_per_s: a pipeline stash's copy "
      "out of the arena and back, at 2 and 8 MiB (quick 1 and 4)");
  for (auto [name, v] : {std::pair{"dispatch_overhead",
                                   m.compute.dispatchOverhead},
                         {"run_overhead", m.compute.runOverhead}})
    if (v <= 0)
      m.notes.push_back(std::string("kernels.") + name +
                        ": left out, the fit left it at or below zero (the "
                        "planner takes 0)");
  m.notes.push_back("device.memory_bandwidth: a triad (12 bytes per "
                    "element) over three arrays of 4x the last-level cache "
                    "(quick: 1x); copy_bandwidth: a copy (8 bytes)");
  return true;
}

/// The collectives on the world; the intra- and inter-node links.
bool calibrateLinks(const CalibrationPlan &plan, Communicator &world,
                    Measured &m, std::string &err) {
  const Layout &l = m.layout;
  if (world.size() == 1) {
    m.notes.push_back("collectives: left out with one rank (mpirun -np N "
                      "ds-run --calibrate measures them)");
    return true;
  }
  if (!agree(world, measureCollectives(plan, world, m.collectives, err),
             err))
    return false;
  for (const CollectiveFigure &f : m.collectives)
    if (!f.fit.ok)
      m.notes.push_back(std::string("collectives.") + f.name +
                        ": left out: " + f.fit.error);
  const AlphaBeta &worldAllReduce = m.collectives[0].fit;
  if (l.nodes == 1) {
    m.intra = worldAllReduce;
  } else {
    // All-reduce inside each host, then across hosts (one rank of each).
    std::unique_ptr<Communicator> host = world.split(l.node, l.local, err);
    std::unique_ptr<Communicator> across =
        host ? world.split(l.local, l.node, err) : nullptr;
    if (!across ||
        (l.perNode > 1 &&
         !agree(world, measureAllReduce(plan, *host, m.intra, err), err)) ||
        !agree(world, measureAllReduce(plan, *across, m.inter, err), err))
      return false;
  }
  // The links are required: every rank fails alike when one lacks them.
  bool linksOk =
      (l.perNode == 1 || m.intra.ok) && (l.nodes == 1 || m.inter.ok);
  if (!world.allOk(linksOk)) {
    std::string why = !m.intra.ok   ? m.intra.error
                      : !m.inter.ok ? m.inter.error
                                    : "on another rank";
    err = "the all-reduce times fit no latency and bandwidth (" + why +
          "): calibrate again on a quieter machine";
    return false;
  }
  m.notes.push_back(l.nodes == 1
                        ? "intra_node: the all-reduce fit of the world"
                        : "intra_node, inter_node: all-reduce fits within a "
                          "host and across hosts (one rank each)");
  return true;
}

} // namespace

RunResult calibrateMachine(const RunOptions &o, Communicator &world) {
  RunResult result;
  std::string err;
  auto fail = [&](const std::string &e) {
    result.ok = false;
    result.error = e;
    return result;
  };
  CalibrationPlan plan;
  plan.quick = o.calibrateQuick;
  plan.kernelsOf = o.calibrateKernelsOf;
  plan.isolated = o.calibrateIsolated;
  plan.threads = static_cast<int>(o.threads);
  plan.rank = world.rank();
  if (!agree(world, world.rank() != 0 || checkPaths(o, err), err))
    return fail(err);
  // The sample plans must load before a minute of measuring.
  for (const std::string &path : plan.kernelsOf)
    if (!agree(world, loadPlan(path, err) != nullptr, err))
      return fail("--calibrate-kernels-of: " + err);
  setThreadCount(plan.threads);
  Measured m;
  if (!layoutOf(world, m.layout, err))
    return fail(err);
  m.memory = hostMemory(m.memorySource) / m.layout.perNode;
  m.notes.push_back("device.memory: " + m.memorySource + " of host '" +
                    m.layout.host + "' / " +
                    std::to_string(m.layout.perNode) + " rank(s) on it");
  m.notes.push_back("host: left out; on the CPU backend host and device "
                    "memory are one (no host-device copy; offload would "
                    "free nothing)");
  plan.progress("%d rank(s) on %d host(s), %d thread(s) each%s\n",
                world.size(), m.layout.nodes, plan.threads,
                plan.quick ? " (quick)" : "");
  if (!calibrateNvme(o, plan, world, m, err) ||
      !calibrateCompute(plan, world, m, err) ||
      !calibrateLinks(plan, world, m, err)) {
    // A rank may have failed inside a collective the others still wait
    // in: the caller ends them all.
    result.abortWorld = world.size() > 1;
    return fail(err);
  }
  bool ok = world.rank() != 0 ||
            writeFile(o.outputPath, describe(m, plan, world.size()), err);
  if (!agree(world, ok, err))
    return fail(err);
  plan.progress("wrote '%s' in %.1f s\n", o.outputPath.c_str(),
                plan.elapsed());
  return result;
}

} // namespace ds::rt
