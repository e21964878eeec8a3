//===- CalibrateInStep.cpp - the sample plans' kernels in their step ----===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `ds-run --calibrate --calibrate-kernels-of=PLANS`: after each kernel's
// isolated figure (CalibrateKinds.cpp), every sample plan that this
// calibration's ranks can run is run through the executor for a few steps
// on synthetic inputs, each instruction timed as `ds-run --profile` times
// it, and each kernel's figure is refitted on those in-step times (each
// instruction's mean over its fastest half of the timed steps): the
// isolated calls miss what a step does to a kernel (its operands evicted
// by the backward's other tensors, the pool's threads and OpenBLAS's
// handing the cores over; on this VM a 1-rank, 2-thread GPT step ran its
// elementwise kernels 2-10x slower than isolated, docs/calibration.md).
// The GEMM
// classes the plans' GEMMs fall in take the in-step FLOPs over seconds.
// A plan that cannot run here (a pipeline, another world size, a kernel
// failing on the synthetic inputs) is left out with a note; its kernels
// keep their isolated figures.
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "Cpu/Kernels.h"
#include "PlanImpl.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/Cluster.h"
#include "ds/Support/KernelKinds.h"

#include "plan.pb.h"

#include <algorithm>
#include <map>
#include <random>

namespace ds::rt {

namespace {

/// Synthetic inputs: integers valid indices (below the plan's bound for
/// that input, else 0), a scalar integer (a step counter) 1, booleans
/// true, floats uniform in [-1, 1) (the loss scale 1).
HostTensor syntheticInput(const std::string &name, const HostTensor &spec,
                          const PlanInfo &info, std::mt19937 &rng) {
  HostTensor t = spec;
  int64_t n = t.numel();
  t.data.assign(static_cast<size_t>(n) * dtypeSize(t.dtype), 0);
  auto limit = info.indexLimits.find(name);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype == DType::Bool)
      t.data[i] = 1;
    else if (isFloat(t.dtype))
      storeD(t.data.data(), t.dtype, i,
             name == "ds.loss_scale" ? 1.0 : u(rng));
    else if (n == 1 && limit == info.indexLimits.end())
      storeI(t.data.data(), t.dtype, i, 1);
    else if (limit != info.indexLimits.end() && limit->second > 0)
      storeI(t.data.data(), t.dtype, i,
             static_cast<int64_t>(rng() %
                                  static_cast<uint64_t>(limit->second)));
  }
  return t;
}

/// Runs `p` for `warm` untimed and `timed` timed steps on this rank's
/// executor; `ms` gets each instruction's milliseconds: the mean of its
/// fastest half over the timed steps (as the accuracy bench takes a run's
/// step), so that a step or two disturbed by another process count not.
bool runSample(const CalibrationPlan &plan, std::shared_ptr<const Plan> p,
               Communicator &world, int warm, int timed,
               std::vector<double> &ms, std::string &err) {
  PlanInfo info = describe(*p);
  ExecutorOptions o;
  o.comm = world.size() > 1 ? &world : nullptr;
  o.threads = plan.threads;
  o.profile = true;
  o.seed = 1;
  std::unique_ptr<Executor> ex = Executor::create(p, o, err);
  if (!ex)
    return false;
  std::mt19937 rng(7 + world.rank());
  for (const auto &[name, spec] : info.inputs)
    if (!ex->setInput(name, syntheticInput(name, spec, info, rng), err))
      return false;
  // A step of a plan with gradient accumulation is `accum` runs, the
  // update's kernels working in the last one only.
  int64_t accum = std::max<int64_t>(1, info.accumSteps);
  std::vector<std::vector<double>> runs, lastRuns;
  std::vector<double> stepMs(timed, 0);
  for (int64_t r = 0; r < (warm + timed) * accum; ++r) {
    RunStats stats;
    if (!ex->run(stats, err))
      return false;
    if (r < warm * accum)
      continue;
    stepMs[r / accum - warm] += stats.milliseconds;
    runs.push_back(stats.instructionMilliseconds);
    if (r % accum == accum - 1)
      lastRuns.push_back(stats.instructionMilliseconds);
  }
  const plan::Program &prog = p->proto.programs(0);
  ms.assign(static_cast<size_t>(prog.instructions_size()), 0);
  for (size_t i = 0; i < ms.size(); ++i) {
    std::vector<double> v;
    for (const auto &r : isOptimizer(prog.instructions(i).kind()) ? lastRuns
                                                                  : runs)
      v.push_back(i < r.size() ? r[i] : 0);
    std::sort(v.begin(), v.end());
    size_t half = (v.size() + 1) / 2;
    for (size_t k = 0; k < half; ++k)
      ms[i] += v[k] / static_cast<double>(half);
  }
  std::sort(stepMs.begin(), stepMs.end());
  plan.progress("in step: '%s': %d x %lld run(s) timed, median step %.3g ms\n",
                p->path.c_str(), timed, static_cast<long long>(accum),
                stepMs[stepMs.size() / 2]);
  return true;
}

/// Why `p` cannot run in this calibration (empty when it can).
std::string cannotRun(const Plan &p, int ranks) {
  PlanInfo info = describe(p);
  if (pipelineStages(p) > 1)
    return "a pipeline plan (ds-run's schedule runs its stages)";
  if (info.shapesOnly)
    return "compiled from a shapes-only model";
  if (p.proto.programs_size() == 0)
    return "no program";
  if (info.worldSize != ranks)
    return "compiled for " + std::to_string(info.worldSize) +
           " rank(s), calibrating " + std::to_string(ranks);
  return "";
}

/// What the in-step runs gathered: each kernel's calls, each GEMM class's
/// FLOPs and seconds.
struct InStep {
  std::map<std::string, std::vector<KernelSample>> kinds;
  std::vector<double> gemmFlops, gemmSecs;
  std::vector<int> gemmCalls;
};

/// The instructions of `p` with their in-step seconds `ms`: kernels as the
/// isolated figures take them (plus the optimizers), and the GEMMs.
void gather(const plan::Plan &p, const std::vector<double> &ms,
            const ComputeFigures &f, InStep &in) {
  const plan::Program &prog = p.programs(0);
  for (int i = 0; i < prog.instructions_size() && i < (int)ms.size(); ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    // Which instructions count depends on the plan alone, so that every
    // rank refits the same kernels (their figures are averaged in order).
    if (!hasKernelFigure(ins))
      continue;
    double s = std::max(ms[i], 1e-6) * 1e-3;
    if (kernelFacts(ins.kind())->flops == FlopRule::MatMul) {
      size_t c = gemmClassOf(f, static_cast<double>(ins.flops()));
      if (c < in.gemmFlops.size() && ins.flops() > 0) {
        in.gemmFlops[c] += static_cast<double>(ins.flops());
        in.gemmSecs[c] += s;
        in.gemmCalls[c]++;
      }
      continue;
    }
    // The bytes the planner's kernel model charges (ins.bytes()).
    in.kinds[ins.kernel()].push_back({static_cast<double>(ins.bytes()), s});
  }
}

/// Replaces (or adds) each gathered kernel's figure and GEMM class rate.
void refit(const CalibrationPlan &plan, const InStep &in, ComputeFigures &f,
           std::vector<std::string> &notes) {
  std::string names;
  for (const auto &kv : in.kinds) {
    const std::string &name = kv.first;
    const std::vector<KernelSample> &samples = kv.second;
    KernelLine l = fitKernelLine(samples, /*matchTotal=*/true);
    if (l.overhead <= 0 && l.bytesPerS <= 0)
      continue;
    auto it =
        std::find_if(f.kinds.begin(), f.kinds.end(),
                     [&](const KindFigure &k) { return k.kernel == name; });
    if (it == f.kinds.end())
      it = f.kinds.insert(f.kinds.end(), KindFigure{name});
    plan.progress("kernel %s in step: %.3g B/s, %.3g s a call (%zu calls; "
                  "isolated: %.3g B/s, %.3g s)\n",
                  name.c_str(), l.bytesPerS, l.overhead, samples.size(),
                  it->bytesPerS, it->overhead);
    it->bytesPerS = l.bytesPerS;
    it->overhead = l.overhead;
    it->sizes = static_cast<int>(samples.size());
    it->measured = it->inStep = true;
    names += (names.empty() ? "" : ", ") + name;
  }
  for (size_t c = 0; c < in.gemmSecs.size(); ++c) {
    if (in.gemmSecs[c] <= 0)
      continue;
    double rate = in.gemmFlops[c] / in.gemmSecs[c];
    plan.progress("gemm class %zu in step (%d calls): %.3g FLOP/s (isolated: "
                  "%.3g)\n",
                  c, in.gemmCalls[c], rate, f.gemm[c].flopsPerS);
    f.gemm[c].flopsPerS = rate;
    f.gemm[c].inStep = true;
  }
  if (!names.empty())
    notes.push_back("kernels.kinds: in-step figures (the sample plans run, "
                    "each instruction timed in the step) for " + names +
                    "; the others isolated calls at the plans' shapes");
}

} // namespace

bool measureInStep(const CalibrationPlan &plan, Communicator &world,
                   ComputeFigures &f, std::vector<std::string> &notes,
                   std::string &err) {
  if (plan.kernelsOf.empty() || plan.isolated)
    return true;
  InStep in;
  in.gemmFlops.assign(f.gemm.size(), 0);
  in.gemmSecs.assign(f.gemm.size(), 0);
  in.gemmCalls.assign(f.gemm.size(), 0);
  const int warm = 2, timed = plan.quick ? 3 : 8;
  for (const std::string &path : plan.kernelsOf) {
    std::shared_ptr<const Plan> p = loadPlan(path, err);
    if (!p)
      return false;
    std::string why = cannotRun(*p, world.size());
    std::vector<double> ms;
    bool ok = why.empty() && runSample(plan, p, world, warm, timed, ms, why);
    // Every rank leaves a plan out when one could not run it.
    if (!world.allOk(ok) && ok)
      why = "another rank could not run it";
    if (!why.empty()) {
      plan.progress("in step: '%s' not run (%s); its kernels keep their "
                    "isolated figures\n", path.c_str(), why.c_str());
      notes.push_back("kernels.kinds: sample plan '" + path +
                      "' not run in step (" + why + ")");
      continue;
    }
    gather(p->proto, ms, f, in);
  }
  refit(plan, in, f, notes);
  return true;
}

} // namespace ds::rt
