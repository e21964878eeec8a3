//===- CalibrateKernels.cpp - GEMM, memory and kernel-family rates --------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// What a plan's kernels achieve here, measured through the CPU kernel
// registry (the functions a plan runs, called with a context built as the
// executor builds it): the matmul kernel over GEMM shapes from tiny to
// large, grouped into FLOP classes; a copy and a triad over buffers
// several times the last-level cache; and one representative kernel of
// each family at a tiny and a large size, whose two times give the
// family's bytes/s (conv: FLOP/s) and the per-call overhead.
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "Cpu/Kernels.h"

#include "plan.pb.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <memory>

namespace ds::rt {

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

bool medianSeconds(const std::function<bool(std::string &)> &fn,
                   double budget, int minSamples, double &seconds,
                   std::string &err) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  if (!fn(err)) // warm-up: first touch of the pages, threads started
    return false;
  Clock::time_point t0 = Clock::now();
  if (!fn(err))
    return false;
  double one = since(t0);
  // Calls per sample: at least 100 us of them, for the clock's sake.
  int batch = one >= 1e-4 ? 1
                          : static_cast<int>(std::min(
                                1e5, std::ceil(1e-4 / std::max(one, 1e-9))));
  std::vector<double> samples;
  if (batch == 1)
    samples.push_back(one);
  Clock::time_point begin = Clock::now();
  while (samples.size() < 15 &&
         (static_cast<int>(samples.size()) < minSamples ||
          since(begin) < budget)) {
    Clock::time_point t = Clock::now();
    for (int i = 0; i < batch; ++i)
      if (!fn(err))
        return false;
    samples.push_back(since(t) / batch);
  }
  std::sort(samples.begin(), samples.end());
  size_t n = samples.size();
  seconds = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  return true;
}

//===----------------------------------------------------------------------===//
// Kernel calls through the registry
//===----------------------------------------------------------------------===//

TensorView CalibrationTensors::make(DType dtype, std::vector<int64_t> shape) {
  TensorView v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  int64_t n = v.numel();
  buffers.push_back(
      std::make_unique<std::vector<unsigned char>>(n * dtypeSize(dtype)));
  v.data = buffers.back()->data();
  // Small values of every kind (labels and indices stay in range: 0..6).
  for (int64_t i = 0; i < n; ++i)
    if (dtype == DType::F32)
      v.as<float>()[i] = static_cast<float>((i % 7) * 0.125 - 0.375);
    else
      storeD(v.data, dtype, i, isFloat(dtype) ? (i % 7) * 0.125 : i % 7);
  return v;
}

bool KernelCall::operator()(std::string &err) const {
  KernelContext ctx{in, out, Attrs(&attrs), 0, {}, NAN, comm};
  ctx.pipe = pipe;
  ctx.pipeStride = pipe ? 1 : 0;
  if (kernel->fn(ctx))
    return true;
  err = std::string("calibration kernel '") + kernel->name +
        "' failed: " + ctx.error;
  return false;
}

void KernelCall::setInt(const char *name, int64_t v) {
  plan::Attribute *a = attrs.add_attributes();
  a->set_name(name);
  a->set_i(v);
}

void KernelCall::setInts(const char *name, std::initializer_list<int64_t> vs) {
  plan::Attribute *a = attrs.add_attributes();
  a->set_name(name);
  for (int64_t v : vs)
    a->mutable_ints()->add_values(v);
}

void KernelCall::countBytes() {
  bytes = 0;
  for (const std::vector<TensorView> *side : {&in, &out})
    for (const TensorView &t : *side)
      bytes += static_cast<double>(t.numel() * dtypeSize(t.dtype));
}

bool KernelCall::find(const char *name, std::string &err) {
  kernel = findKernel(name);
  if (!kernel)
    err = std::string("calibration needs kernel '") + name +
          "', which this runtime lacks";
  return kernel != nullptr;
}

namespace {

//===----------------------------------------------------------------------===//
// GEMM classes
//===----------------------------------------------------------------------===//

/// A matmul call [M, K] x [K, N] in `dtype` (16-bit: with the f32
/// workspace the compiler plans for it).
bool matmulCall(CalibrationTensors &ts, DType dtype, int64_t M, int64_t N, int64_t K,
                KernelCall &call, std::string &err) {
  if (!call.find("matmul", err))
    return false;
  call.in = {ts.make(dtype, {M, K}), ts.make(dtype, {K, N})};
  call.out = {ts.make(dtype, {M, N})};
  if (dtype != DType::F32)
    call.out.push_back(ts.make(DType::F32, {M * K + K * N + M * N}));
  call.flops = 2.0 * M * N * K;
  return true;
}

/// Three shapes of about `flops` FLOPs: a cube, a tall one (M large) and a
/// deep one (K large), as the GEMMs of a layer and of its gradients.
std::vector<std::array<int64_t, 3>> shapesOf(double flops) {
  double s = std::cbrt(flops / 2);
  auto r = [](double v) { return std::max<int64_t>(1, std::llround(v)); };
  return {{r(s), r(s), r(s)},
          {r(4 * s), r(s / 2), r(s / 2)},
          {r(s / 2), r(s / 2), r(4 * s)}};
}

} // namespace

bool measureGemm(const CalibrationPlan &plan, ComputeFigures &f,
                 std::string &err) {
  // Classes by their upper bound (0: the last, unbounded), each measured
  // at the geometric middle of its range, the last at 4x its lower bound
  // (4e9 FLOPs: about 1250^3, where a CPU's sgemm rate has levelled).
  std::vector<double> bounds =
      plan.quick ? std::vector<double>{1e6, 1e8, 0}
                 : std::vector<double>{1e5, 1e6, 1e7, 1e8, 1e9, 0};
  double budget = plan.quick ? 0.03 : 0.25;
  f.gemm.clear();
  std::array<int64_t, 3> largest{};
  for (size_t c = 0; c < bounds.size(); ++c) {
    double lower = c ? bounds[c - 1] : bounds[0] / 10;
    double target = bounds[c] ? std::sqrt(lower * bounds[c]) : 4 * lower;
    double flops = 0, seconds = 0;
    for (const std::array<int64_t, 3> &s : shapesOf(target)) {
      CalibrationTensors ts;
      KernelCall call;
      double t;
      if (!matmulCall(ts, DType::F32, s[0], s[1], s[2], call, err) ||
          !medianSeconds(call, budget, 2, t, err))
        return false;
      flops += call.flops;
      seconds += t;
    }
    f.gemm.push_back({bounds[c], flops / seconds});
    char range[32];
    std::snprintf(range, sizeof range, bounds[c] ? "<= %.0e" : "> %.0e",
                  bounds[c] ? bounds[c] : lower);
    plan.progress("gemm %s FLOPs: %.3g FLOP/s\n", range,
                  flops / seconds);
    largest = shapesOf(target)[0];
  }
  f.fp32 = f.gemm.back().flopsPerS;
  // 16-bit GEMMs: the same kernel converts its operands to f32 in its
  // workspace, then runs sgemm; measured on the largest class's cube.
  for (DType dtype : {DType::BF16, DType::F16}) {
    CalibrationTensors ts;
    KernelCall call;
    double t;
    if (!matmulCall(ts, dtype, largest[0], largest[1], largest[2], call,
                    err) ||
        !medianSeconds(call, budget, 2, t, err))
      return false;
    (dtype == DType::BF16 ? f.bf16 : f.fp16) = call.flops / t;
  }
  plan.progress("gemm fp32 %.3g, bf16 %.3g, fp16 %.3g FLOP/s\n",
                f.fp32, f.bf16, f.fp16);
  return true;
}

//===----------------------------------------------------------------------===//
// Memory bandwidth
//===----------------------------------------------------------------------===//

uint64_t lastLevelCache() {
  uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" +
                     std::to_string(i) + "/size");
    std::string text;
    if (!(in >> text) || text.empty())
      continue;
    uint64_t v = std::strtoull(text.c_str(), nullptr, 10);
    char unit = text.back();
    v *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
    best = std::max(best, v);
  }
  return best ? best : 32ull << 20;
}

bool measureMemoryBandwidth(const CalibrationPlan &plan, ComputeFigures &f,
                            std::string &err) {
  // Each of the three arrays: 4x the last-level cache (quick: 1x), at
  // least 64 MiB (quick: 16 MiB).
  uint64_t llc = lastLevelCache();
  uint64_t bytes = plan.quick ? std::max<uint64_t>(llc, 16ull << 20)
                              : std::max<uint64_t>(4 * llc, 64ull << 20);
  int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
  const float s = 3.0f;
  auto copy = [&](std::string &) {
    parallelFor(n, 1 << 16, [&](int64_t lo, int64_t hi) {
      std::copy(b.data() + lo, b.data() + hi, a.data() + lo);
    });
    return true;
  };
  auto triad = [&](std::string &) {
    parallelFor(n, 1 << 16, [&](int64_t lo, int64_t hi) {
      float *A = a.data();
      const float *B = b.data(), *C = c.data();
      for (int64_t i = lo; i < hi; ++i)
        A[i] = B[i] + s * C[i];
    });
    return true;
  };
  double budget = plan.quick ? 0.1 : 0.8, tCopy, tTriad;
  if (!medianSeconds(copy, budget, 3, tCopy, err) ||
      !medianSeconds(triad, budget, 3, tTriad, err))
    return false;
  f.copyBandwidth = 2.0 * bytes / tCopy;
  f.memoryBandwidth = 3.0 * bytes / tTriad;
  plan.progress("memory bandwidth: triad %.3g B/s, copy %.3g B/s "
                "(3 x %.0f MiB, last-level cache %.0f MiB)\n",
                f.memoryBandwidth, f.copyBandwidth, bytes / 1048576.0,
                llc / 1048576.0);
  return true;
}

//===----------------------------------------------------------------------===//
// Kernel families
//===----------------------------------------------------------------------===//

namespace {

/// A family's representative call, tiny (`large` false: operands of at
/// most 1 KiB, its time is the call's overhead) or large (about 16 MiB per
/// tensor; quick: 4 MiB).
using FamilyBuilder = bool (*)(CalibrationTensors &, bool large, bool quick,
                               KernelCall &, std::string &);

/// Rows of 1024 (tiny: one row of 64) holding about 4M elements (quick 1M).
int64_t rowsOf(bool large, bool quick) {
  return large ? (quick ? 1024 : 4096) : 1;
}
int64_t colsOf(bool large) { return large ? 1024 : 64; }

bool elementwise(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
                 std::string &err) {
  int64_t n = rowsOf(large, quick) * colsOf(large);
  c.in = {ts.make(DType::F32, {n}), ts.make(DType::F32, {n})};
  c.out = {ts.make(DType::F32, {n})};
  return c.find("add", err);
}

bool reduction(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
               std::string &err) {
  int64_t r = rowsOf(large, quick), k = colsOf(large);
  c.in = {ts.make(DType::F32, {r, k})};
  c.out = {ts.make(DType::F32, {r})};
  c.setInts("axes", {1});
  return c.find("reduce_sum", err);
}

bool normalization(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
                   std::string &err) {
  int64_t r = rowsOf(large, quick), k = colsOf(large);
  c.in = {ts.make(DType::F32, {r, k}), ts.make(DType::F32, {k}),
          ts.make(DType::F32, {k})};
  c.out = {ts.make(DType::F32, {r, k})};
  c.setInt("axis", 1);
  return c.find("layer_norm", err);
}

bool movement(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
              std::string &err) {
  // Attention's [B, T, H, D] -> [B, H, T, D].
  int64_t b = large ? (quick ? 2 : 8) : 1, t = large ? 512 : 4,
          h = large ? 16 : 4, d = large ? 64 : 4;
  c.in = {ts.make(DType::F32, {b, t, h, d})};
  c.out = {ts.make(DType::F32, {b, h, t, d})};
  c.setInts("perm", {0, 2, 1, 3});
  return c.find("transpose", err);
}

bool loss(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
          std::string &err) {
  int64_t r = rowsOf(large, quick), k = colsOf(large);
  c.in = {ts.make(DType::F32, {r, k}), ts.make(DType::I64, {r})};
  c.out = {ts.make(DType::F32, {})};
  return c.find("softmax_cross_entropy_loss", err);
}

bool gradient(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
              std::string &err) {
  int64_t r = rowsOf(large, quick), k = colsOf(large);
  c.in = {ts.make(DType::F32, {r, k}), ts.make(DType::F32, {r, k})};
  c.out = {ts.make(DType::F32, {r, k})};
  c.setInt("axis", 1);
  return c.find("softmax_grad", err);
}

bool optimizer(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
               std::string &err) {
  int64_t n = rowsOf(large, quick) * colsOf(large);
  for (int i = 0; i < 4; ++i) // parameter, gradient, m, v
    c.in.push_back(ts.make(DType::F32, {n}));
  c.in.push_back(ts.make(DType::I64, {})); // the step
  storeI(c.in.back().data, DType::I64, 0, 1);
  for (int i = 0; i < 3; ++i)
    c.out.push_back(ts.make(DType::F32, {n}));
  return c.find("adam", err);
}

bool conv(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
          std::string &err) {
  // 3x3, padding 1: [N, C, H, H] -> [N, C, H, H].
  int64_t n = large ? (quick ? 1 : 4) : 1, ch = large ? 64 : 4,
          h = large ? 64 : 4;
  c.in = {ts.make(DType::F32, {n, ch, h, h}),
          ts.make(DType::F32, {ch, ch, 3, 3}), ts.make(DType::F32, {ch})};
  c.out = {ts.make(DType::F32, {n, ch, h, h})};
  c.setInts("strides", {1, 1});
  c.setInts("pads", {1, 1, 1, 1});
  c.setInts("dilations", {1, 1});
  c.setInt("group", 1);
  c.flops = 2.0 * n * ch * h * h * ch * 9;
  return c.find("conv", err);
}

bool pooling(CalibrationTensors &ts, bool large, bool quick, KernelCall &c,
             std::string &err) {
  // 2x2, stride 2: [1, 64, H, H] -> [1, 64, H/2, H/2].
  int64_t ch = large ? 64 : 4, h = large ? (quick ? 128 : 256) : 4;
  c.in = {ts.make(DType::F32, {1, ch, h, h})};
  c.out = {ts.make(DType::F32, {1, ch, h / 2, h / 2})};
  c.setInts("kernel_shape", {2, 2});
  c.setInts("strides", {2, 2});
  c.setInts("pads", {0, 0, 0, 0});
  return c.find("max_pool", err);
}

struct FamilyCase {
  const char *name;
  FamilyBuilder build;
  bool byFlops; // fitted on FLOPs (conv) rather than bytes
};

const FamilyCase kFamilies[] = {
    {"elementwise", elementwise, false}, {"reduction", reduction, false},
    {"normalization", normalization, false}, {"movement", movement, false},
    {"loss", loss, false},           {"gradient", gradient, false},
    {"optimizer", optimizer, false}, {"conv", conv, true},
    {"pooling", pooling, false},
};

} // namespace

bool measureFamilies(const CalibrationPlan &plan, ComputeFigures &f,
                     std::string &err) {
  double budget = plan.quick ? 0.03 : 0.3;
  f.families.clear();
  std::vector<double> tinyTimes;
  for (const FamilyCase &fc : kFamilies) {
    double amount[2], seconds[2];
    const char *kernel = "";
    for (int large = 0; large < 2; ++large) {
      CalibrationTensors ts;
      KernelCall call;
      if (!fc.build(ts, large, plan.quick, call, err))
        return false;
      call.countBytes();
      kernel = call.kernel->name;
      amount[large] = fc.byFlops ? call.flops : call.bytes;
      if (!medianSeconds(call, budget, 3, seconds[large], err))
        return false;
    }
    // t = overhead + amount / rate through the two points; should the
    // large call not take longer (noise), its own rate and no overhead.
    FamilyFigure fig;
    fig.name = fc.name;
    fig.kernel = kernel;
    double rate = seconds[1] > seconds[0]
                      ? (amount[1] - amount[0]) / (seconds[1] - seconds[0])
                      : amount[1] / seconds[1];
    fig.overhead = seconds[0];
    (fc.byFlops ? fig.flopsPerS : fig.bytesPerS) = rate;
    f.families.push_back(fig);
    tinyTimes.push_back(fig.overhead);
    plan.progress("family %s (%s): %.3g %s, %.3g s a tiny call\n",
                  fc.name, kernel, rate, fc.byFlops ? "FLOP/s" : "B/s",
                  fig.overhead);
  }
  // One overhead for every kernel call: the median over the families of
  // the tiny call's time (its operands move at most 1 KiB; the fits'
  // intercepts vanish where a tiny call in cache beats the large call's
  // rate).
  std::sort(tinyTimes.begin(), tinyTimes.end());
  f.launchOverhead = tinyTimes[tinyTimes.size() / 2];
  plan.progress("launch overhead %.3g s\n", f.launchOverhead);
  return true;
}

} // namespace ds::rt
