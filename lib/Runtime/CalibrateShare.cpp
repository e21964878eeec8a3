//===- CalibrateShare.cpp - the share of the host a run gets ---------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The figures are medians of short samples, so a sample during which
// another process held a core is left out: they are the host's speed when
// the run has its cores to itself. A step of tens of milliseconds spans
// many scheduler ticks and is slowed by every other process that wants
// the cores (and a parallel kernel waits at its barrier for a thread that
// was descheduled). So the share of the host a run gets is measured too:
// the same short parallel call (an elementwise add of 256K elements on
// every thread) repeated back to back for a while, its median call over
// its mean call. (A GEMM and an add in turn, which adds the hand-over
// between OpenBLAS's threads and the runtime's, measured about half this
// share under load and over-predicted one-rank steps by 20-50%; the
// per-kernel figures already time each kernel after a GEMM.) On a host of its own the two agree (share about 1); a
// host with twice as many runnable threads as cores gives about a half.
// The time figures are scaled by the share: rates multiplied, overheads
// and latencies divided, so that the description predicts the host as it
// is while it is calibrated (docs/calibration.md).
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "Cpu/Kernels.h"

#include <algorithm>
#include <chrono>
#include <numeric>

namespace ds::rt {

bool measureShare(const CalibrationPlan &plan, double &share,
                  std::string &err) {
  using Clock = std::chrono::steady_clock;
  CalibrationTensors ts;
  KernelCall add;
  const int64_t n = 1 << 18;
  add.in = {ts.make(DType::F32, {n}), ts.make(DType::F32, {n})};
  add.out = {ts.make(DType::F32, {n})};
  if (!add.find("add", err) || !add(err)) // warm-up
    return false;
  double budget = plan.quick ? 0.2 : 1.0;
  std::vector<double> samples;
  Clock::time_point begin = Clock::now();
  double total = 0;
  while (total < budget) {
    Clock::time_point t = Clock::now();
    if (!add(err))
      return false;
    samples.push_back(
        std::chrono::duration<double>(Clock::now() - t).count());
    total = std::chrono::duration<double>(Clock::now() - begin).count();
  }
  double mean = total / static_cast<double>(samples.size());
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2,
                   samples.end());
  double median = samples[samples.size() / 2];
  share = std::clamp(median / mean, 0.01, 1.0);
  plan.progress("cpu share %.2f (an add of 256K elements: median %.3g s, "
                "mean %.3g s over %zu calls)\n",
                share, median, mean, samples.size());
  return true;
}

void scaleByShare(double share, ComputeFigures &f) {
  // Figures timed in the sample plans' steps already are the step's on
  // this host as it ran them (its share included): not scaled again.
  for (GemmClass &g : f.gemm)
    if (!g.inStep)
      g.flopsPerS *= share;
  for (double *x : {&f.fp32, &f.bf16, &f.fp16, &f.memoryBandwidth,
                    &f.copyBandwidth})
    *x *= share;
  f.launchOverhead /= share;
  f.dispatchOverhead /= share;
  f.runOverhead /= share;
  f.stashSave *= share;
  f.stashRestore *= share;
  for (FamilyFigure &fam : f.families) {
    fam.bytesPerS *= share;
    fam.flopsPerS *= share;
    fam.overhead /= share;
  }
  for (KindFigure &k : f.kinds) {
    if (k.inStep)
      continue;
    k.bytesPerS *= share;
    k.overhead /= share;
  }
}

} // namespace ds::rt
