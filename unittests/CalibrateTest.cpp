//===- CalibrateTest.cpp - the alpha-beta fit and the calibrate flags -----===//
//
// Part of the ds project. The least-squares fit of collective times
// (ds/Runtime/Calibrate.h) on synthetic points with known latency and
// bandwidth: exact points give them back to 1e-9 relative (double
// rounding of sums over nine points); points with +-5% deterministic noise
// within 10% (the weighted fit's error stays below twice the noise); and
// the fallbacks when the points cannot determine a fit. The per-kernel
// line of the isolated and in-step figures likewise, and the host's share
// scaling only the isolated figures. Then the flags:
// --calibrate with its options parses, and what cannot go with it is
// refused with one line.
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "ds/Runtime/Calibrate.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ds::rt;

namespace {

/// t = latency * (n - 1) + f * B / bandwidth, for `ranks` and all-reduce's
/// f, over 1 KiB .. 64 MiB; `noise` scales sample i by 1 +- noise.
std::vector<CollectiveSample> allReduceSamples(double latency, double bw,
                                               std::vector<int> ranks,
                                               double noise = 0) {
  std::vector<CollectiveSample> out;
  int i = 0;
  for (int n : ranks)
    for (double b = 1024; b <= 64 * 1048576.0; b *= 4, ++i) {
      double f = 2.0 * (n - 1) / n;
      double t = latency * (n - 1) + f * b / bw;
      out.push_back({double(n - 1), f * b, t * (1 + (i % 2 ? noise : -noise))});
    }
  return out;
}

double rel(double got, double want) { return std::fabs(got / want - 1); }

TEST(AlphaBeta, ExactPointsGiveTheirLatencyAndBandwidth) {
  for (std::vector<int> ranks :
       {std::vector<int>{2}, std::vector<int>{8}, std::vector<int>{2, 4, 8}}) {
    AlphaBeta fit = fitAlphaBeta(allReduceSamples(2e-5, 3e9, ranks));
    ASSERT_TRUE(fit.ok) << fit.error;
    EXPECT_LT(rel(fit.latency, 2e-5), 1e-9);
    EXPECT_LT(rel(fit.bandwidth, 3e9), 1e-9);
  }
}

TEST(AlphaBeta, NoisyPointsWithinTenPercent) {
  AlphaBeta fit = fitAlphaBeta(allReduceSamples(5e-6, 1e10, {2, 4}, 0.05));
  ASSERT_TRUE(fit.ok) << fit.error;
  EXPECT_LT(rel(fit.latency, 5e-6), 0.1);
  EXPECT_LT(rel(fit.bandwidth, 1e10), 0.1);
}

TEST(AlphaBeta, HiddenLatencyFallsBackToTheSmallestMessage) {
  // The small messages are faster than any positive latency allows (as a
  // noisy measurement gives): the latency becomes the smallest message's
  // time per step, the bandwidth the rest.
  std::vector<CollectiveSample> s = {
      {1, 1e3, 1e-7}, {1, 1e6, 1e-3}, {1, 1e7, 1e-2}, {1, 1e8, 1e-1}};
  AlphaBeta fit = fitAlphaBeta(s);
  ASSERT_TRUE(fit.ok) << fit.error;
  EXPECT_DOUBLE_EQ(fit.latency, 1e-7);
  EXPECT_LT(rel(fit.bandwidth, 1e9), 0.01);
}

TEST(AlphaBeta, RefusesWhatCannotBeFitted) {
  EXPECT_FALSE(fitAlphaBeta({}).ok);
  AlphaBeta one = fitAlphaBeta({{1, 1e6, 1e-3}, {1, 1e6, 2e-3}});
  EXPECT_FALSE(one.ok);
  EXPECT_EQ(one.error, "fewer than two message sizes");
  AlphaBeta falling = fitAlphaBeta({{1, 1e3, 1e-2}, {1, 1e6, 1e-3}});
  EXPECT_FALSE(falling.ok);
  EXPECT_EQ(falling.error, "the times do not grow with the message size");
  AlphaBeta bad = fitAlphaBeta({{1, 1e3, 0}, {1, 1e6, 1e-3}});
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.error, "a sample is not a positive time of a non-negative size");
}

// The per-kernel line (docs/calibration.md, "Per-kernel figures"): calls
// on t = 2 us + bytes / 1e10 at many sizes, several calls a size (as a
// step's instructions give), come back within 1e-9 (exact) and 10% (+-5%
// noise); the in-step fit's sum over the calls equals theirs to 1e-9.
std::vector<KernelSample> lineSamples(double noise) {
  std::vector<KernelSample> s;
  int i = 0;
  for (double b = 4096; b <= 4 * 1048576.0; b *= 2)
    for (int rep = 0; rep < 3; ++rep, ++i)
      s.push_back({b, (2e-6 + b / 1e10) * (1 + (i % 2 ? noise : -noise))});
  return s;
}

TEST(KernelLine, ExactCallsGiveTheirOverheadAndRate) {
  for (bool match : {false, true}) {
    KernelLine l = fitKernelLine(lineSamples(0), match);
    EXPECT_LT(rel(l.overhead, 2e-6), 1e-9);
    EXPECT_LT(rel(l.bytesPerS, 1e10), 1e-9);
  }
}

TEST(KernelLine, InStepFitKeepsTheCallsTotal) {
  std::vector<KernelSample> s = lineSamples(0.05);
  // A step's calls: the large ones slower (out of cache) than the line.
  for (KernelSample &k : s)
    if (k.bytes >= 1048576)
      k.seconds *= 1.5;
  KernelLine l = fitKernelLine(s, true);
  double total = 0, fitted = 0;
  for (const KernelSample &k : s) {
    total += k.seconds;
    fitted += l.overhead + k.bytes / l.bytesPerS;
  }
  EXPECT_LT(rel(fitted, total), 1e-9);
  // Without the match the weighted fit follows the many small calls and
  // falls short of the total by more than 5%.
  KernelLine w = fitKernelLine(s, false);
  double unmatched = 0;
  for (const KernelSample &k : s)
    unmatched += w.overhead + k.bytes / w.bytesPerS;
  EXPECT_LT(unmatched, 0.95 * total);
}

TEST(HostShare, ScalesIsolatedFiguresOnly) {
  // In-step figures were timed in the sample plans' steps on this host as
  // it ran them (its share included): scaling them again would count the
  // share twice.
  ComputeFigures f;
  f.gemm = {{1e6, 4e10, false}, {1e9, 8e10, true}};
  f.kinds = {{"add", 1e10, 2e-6, 4, true, false},
             {"neg", 2e10, 3e-6, 12, true, true}};
  scaleByShare(0.5, f);
  EXPECT_DOUBLE_EQ(f.gemm[0].flopsPerS, 2e10);
  EXPECT_DOUBLE_EQ(f.gemm[1].flopsPerS, 8e10);
  EXPECT_DOUBLE_EQ(f.kinds[0].bytesPerS, 5e9);
  EXPECT_DOUBLE_EQ(f.kinds[0].overhead, 4e-6);
  EXPECT_DOUBLE_EQ(f.kinds[1].bytesPerS, 2e10);
  EXPECT_DOUBLE_EQ(f.kinds[1].overhead, 3e-6);
}

TEST(KernelLine, OneSizeOrNoGrowth) {
  // One size, several calls: the rate through the origin of their mean.
  KernelLine one = fitKernelLine({{1e6, 1e-4}, {1e6, 3e-4}}, true);
  EXPECT_DOUBLE_EQ(one.overhead, 0);
  EXPECT_LT(rel(one.bytesPerS, 1e6 / 2e-4), 1e-12);
  // Times falling with the bytes: the mean time a call, no rate
  // (isolated); in step the calls' bytes over their seconds.
  KernelLine flat = fitKernelLine({{1e3, 3e-5}, {1e6, 1e-5}}, false);
  EXPECT_DOUBLE_EQ(flat.bytesPerS, 0);
  EXPECT_LT(rel(flat.overhead, 2e-5), 1e-12);
  KernelLine step = fitKernelLine({{1e3, 3e-5}, {1e6, 1e-5}}, true);
  EXPECT_DOUBLE_EQ(step.overhead, 0);
  EXPECT_LT(rel(step.bytesPerS, 1.001e6 / 4e-5), 1e-12);
  KernelLine none = fitKernelLine({}, true);
  EXPECT_EQ(none.overhead + none.bytesPerS, 0);
}

bool parse(std::vector<const char *> args, RunOptions &o, std::string &err) {
  args.insert(args.begin(), "ds-run");
  RunAction action;
  return parseRunArguments(static_cast<int>(args.size()), args.data(), o,
                           action, err);
}

TEST(CalibrateFlags, ParseAndRefuse) {
  RunOptions o;
  std::string err;
  ASSERT_TRUE(parse({"--calibrate", "--calibrate-quick", "--calibrate-nvme",
                     "--nvme-path=/tmp", "--threads", "1", "-o", "m.json"},
                    o, err))
      << err;
  EXPECT_TRUE(o.calibrate && o.calibrateQuick && o.calibrateNvme);
  EXPECT_EQ(o.outputPath, "m.json");
  EXPECT_EQ(o.threads, 1);
  struct Case {
    std::vector<const char *> args;
    const char *error;
  } cases[] = {
      {{"--calibrate"},
       "--calibrate needs -o FILE (the machine description to write, JSON)"},
      {{"p.plan", "--calibrate", "-o", "m.json"},
       "--calibrate measures the machine and runs no plan (got 'p.plan')"},
      {{"--calibrate", "--forward-only", "-o", "m.json"},
       "--forward-only is a plan's; --calibrate takes -o, --threads, "
       "--calibrate-quick, --calibrate-nvme, --calibrate-kernels-of, "
       "--calibrate-isolated and --nvme-path"},
      {{"--calibrate", "--calibrate-isolated", "-o", "m.json"},
       "--calibrate-isolated needs --calibrate-kernels-of"},
      {{"--calibrate-isolated", "--calibrate-kernels-of=a.plan", "-o", "m.json"},
       "--calibrate-isolated needs --calibrate"},
      {{"--calibrate-nvme", "-o", "m.json"},
       "--calibrate-nvme needs --calibrate"},
      {{"--calibrate-kernels-of=a.plan", "-o", "m.json"},
       "--calibrate-kernels-of needs --calibrate"},
      {{"--calibrate", "--calibrate-kernels-of=a.plan,", "-o", "m.json"},
       "--calibrate-kernels-of needs plan files, comma-separated"},
      {{"--calibrate", "--consolidate", "ck", "-o", "m.json"},
       "--calibrate and --consolidate are separate runs"},
  };
  for (const Case &c : cases) {
    RunOptions fresh;
    std::string e;
    EXPECT_FALSE(parse(c.args, fresh, e)) << c.error;
    EXPECT_EQ(e, c.error);
  }
}

} // namespace
