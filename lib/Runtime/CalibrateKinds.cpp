//===- CalibrateKinds.cpp - each kernel of a sample plan, at its shapes ----===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// `ds-run --calibrate --calibrate-kernels-of=PLAN[,PLAN...]`: the family
// figures time one kernel per family, and within a family kernels differ
// by an order of magnitude (erf against add, the loss's gradient against
// softmax's); each kernel's call also has an overhead of its own (Adam's
// schedule, a LayerNorm gradient's passes). So every kernel the sample
// plans run (GEMMs, collectives, waits, transfers, host kernels and
// pipeline hand-overs aside) is called through the CPU registry on fresh
// operands of its instructions' shapes and attributes, at up to four
// distinct operand sizes, and the times are fitted to
// t = overhead + bytes / rate by least squares weighted by 1/t^2.
//
// Two exceptions. The optimizers keep their family's figure here: a
// step's update reads every parameter and its state once, out of cache,
// while a repeated call on one parameter runs in cache (several times
// faster). And the GEMMs refit the shape classes (kernels.gemm): every
// distinct GEMM of the plans is timed, and a class with samples gets their
// FLOPs over their time, each weighted by how often the plans run it (the
// synthetic cube, tall and deep shapes miss attention's batched products
// and a model's thin projections).
//
// These isolated figures are then refitted on the sample plans' steps
// where the plans can run here (CalibrateInStep.cpp), the optimizers
// included; a kernel of a plan that could not run keeps its figure here.
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "Cpu/Kernels.h"
#include "PlanImpl.h"
#include "ds/Support/Cluster.h"
#include "ds/Support/KernelKinds.h"

#include "plan.pb.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace ds::rt {

namespace {

/// A plan's instructions that a kernel figure can time, by kernel name,
/// each name's instructions by their operand bytes (one per size).
using Samples = std::map<std::string, std::map<double, plan::Instruction>>;

/// Timed alone: the optimizers keep their family's figure here.
bool timedAlone(const plan::Instruction &ins) {
  return hasKernelFigure(ins) &&
         kernelFacts(ins.kind())->family != KernelFamily::Optimizer;
}

bool isGemm(const plan::Instruction &ins) {
  const KernelFacts *k = kernelFacts(ins.kind());
  return k && k->flops == FlopRule::MatMul;
}

/// A GEMM of the sample plans: its operands, and how often they run it.
struct GemmSample {
  plan::Instruction ins;
  std::vector<plan::Buffer> bufs;
  double flops = 0;
  int count = 0;
};

void collect(const plan::Plan &p, Samples &out,
             std::map<std::string, std::vector<plan::Buffer>> &shapes,
             std::map<std::string, GemmSample> &gemms) {
  for (const plan::Plan &sp : p.pipeline().stage_plans())
    collect(sp, out, shapes, gemms);
  if (p.programs_size() == 0)
    return;
  for (const plan::Instruction &ins : p.programs(0).instructions()) {
    if (!timedAlone(ins))
      continue;
    double bytes = 0;
    bool ok = true;
    for (const auto *ids : {&ins.inputs(), &ins.outputs()})
      for (uint32_t id : *ids) {
        if (id >= static_cast<uint32_t>(p.buffers_size())) {
          ok = false;
          continue;
        }
        bytes += static_cast<double>(p.buffers(id).bytes());
      }
    if (!ok)
      continue;
    if (isGemm(ins)) {
      // Keyed by the operands' shapes and the transposes.
      std::string key = ins.kernel() + (ins.trans_a() ? " ta" : "") +
                        (ins.trans_b() ? " tb" : "");
      std::vector<plan::Buffer> bufs;
      for (const auto *ids : {&ins.inputs(), &ins.outputs()})
        for (uint32_t id : *ids) {
          bufs.push_back(p.buffers(id));
          key += " " + std::to_string(bufs.back().dtype()) + ":";
          for (int64_t d : bufs.back().shape())
            key += std::to_string(d) + "x";
        }
      GemmSample &g = gemms[key];
      if (g.count++ == 0) {
        g.ins = ins;
        g.bufs = std::move(bufs);
        g.flops = static_cast<double>(ins.flops());
      }
      continue;
    }
    if (out[ins.kernel()].count(bytes))
      continue;
    out[ins.kernel()][bytes] = ins;
    // The operands' buffers travel with the sample (keyed by kernel and
    // bytes): the instruction's ids point into this plan's buffers.
    std::vector<plan::Buffer> &b =
        shapes[ins.kernel() + "@" + std::to_string(bytes)];
    for (const auto *ids : {&ins.inputs(), &ins.outputs()})
      for (uint32_t id : *ids)
        b.push_back(p.buffers(id));
  }
}

/// A call of `ins` on fresh operands shaped as `bufs` (its inputs, then its
/// outputs).
bool callOf(const plan::Instruction &ins, const std::vector<plan::Buffer> &bufs,
            CalibrationTensors &tensors, KernelCall &call, std::string &err) {
  call.attrs = ins;
  if (!call.find(ins.kernel().c_str(), err))
    return false;
  size_t nin = static_cast<size_t>(ins.inputs_size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::vector<int64_t> shape(bufs[i].shape().begin(), bufs[i].shape().end());
    TensorView v = tensors.make(toDType(bufs[i].dtype()), shape);
    // An integer scalar input is a step counter (counted from 1).
    if (i < nin && v.numel() == 1 && !isFloat(v.dtype))
      storeI(v.data, v.dtype, 0, 1);
    (i < nin ? call.in : call.out).push_back(v);
  }
  return true;
}

/// The seconds of `call` as a step runs it: right after `prev` (whose own
/// seconds `prevSeconds` are taken off), so that the hand-over between the
/// runtime's threads and OpenBLAS's (whose idle threads keep spinning for
/// a while after a GEMM) is in the figure; never below the call alone
/// (noise). Without `prev`: the call alone.
bool timedAfter(const KernelCall *prev, double prevSeconds,
                const std::function<bool(std::string &)> &call, double budget,
                double &t, std::string &err) {
  double alone = 0;
  if (!medianSeconds(call, budget, 3, alone, err))
    return false;
  t = alone;
  if (!prev)
    return true;
  double both = 0;
  auto pair = [&](std::string &e) { return (*prev)(e) && call(e); };
  if (!medianSeconds(pair, budget, 3, both, err))
    return false;
  t = std::max(both - prevSeconds, alone);
  return true;
}

/// Calls of one instruction as a step makes them. Operands of at most a
/// quarter of the last-level cache are used in cache: in a step the
/// kernel before has just written them (an elementwise kernel on 1 MiB ran
/// about 3x faster in the GPT and BERT steps than on operands out of
/// cache, a GEMM about 1.25x; docs/benchmarks.md, "Quiet-machine figures
/// after the sixth session's merges"). Larger ones rotate over copies that
/// together exceed twice the last-level cache, so that each call finds its
/// operands out of cache.
struct Rotation {
  CalibrationTensors tensors;
  std::vector<KernelCall> calls;
  size_t next = 0;
  bool operator()(std::string &err) {
    return calls[next++ % calls.size()](err);
  }
};

bool rotationOf(const plan::Instruction &ins,
                const std::vector<plan::Buffer> &bufs, double bytes,
                Rotation &r, std::string &err) {
  double llc = static_cast<double>(lastLevelCache());
  if (bytes <= llc / 4) { // in cache, as its producer just left them
    r.calls.resize(1);
    return callOf(ins, bufs, r.tensors, r.calls[0], err);
  }
  int copies = static_cast<int>(std::clamp(
      std::ceil(2 * llc / std::max(bytes, 1.0)), 1.0,
      std::min(64.0, std::max(1.0, std::floor(512e6 / std::max(bytes, 1.0))))));
  r.calls.resize(copies);
  for (KernelCall &c : r.calls)
    if (!callOf(ins, bufs, r.tensors, c, err))
      return false;
  return true;
}

/// Refits the GEMM classes that the sample plans' GEMMs fall in; each
/// GEMM timed after `add` (whose seconds after a GEMM are `addSeconds`).

bool refitGemm(const CalibrationPlan &plan,
               const std::map<std::string, GemmSample> &gemms,
               const KernelCall &add, double addSeconds, ComputeFigures &f) {
  if (gemms.empty() || f.gemm.empty())
    return true;
  std::vector<double> flops(f.gemm.size(), 0), secs(f.gemm.size(), 0);
  std::vector<int> shapes(f.gemm.size(), 0);
  double budget = plan.quick ? 0.005 : 0.03;
  for (const auto &[key, g] : gemms) {
    Rotation call;
    double t = 0, bytes = 0;
    std::string why;
    for (const plan::Buffer &b : g.bufs)
      bytes += static_cast<double>(b.bytes());
    if (!rotationOf(g.ins, g.bufs, bytes, call, why) ||
        !timedAfter(&add, addSeconds, std::ref(call), budget, t, why)) {
      plan.progress("gemm %s: not measured (%s)\n", key.c_str(), why.c_str());
      continue;
    }
    size_t c = gemmClassOf(f, g.flops);
    flops[c] += g.flops * g.count;
    secs[c] += t * g.count;
    shapes[c]++;
  }
  for (size_t c = 0; c < f.gemm.size(); ++c) {
    if (!shapes[c] || secs[c] <= 0)
      continue;
    plan.progress("gemm class %zu (sample plans, %d shapes): %.3g FLOP/s "
                  "(synthetic shapes: %.3g)\n",
                  c, shapes[c], flops[c] / secs[c], f.gemm[c].flopsPerS);
    f.gemm[c].flopsPerS = flops[c] / secs[c];
  }
  return true;
}

/// Up to four of a kernel's sizes: the smallest, the largest and two
/// between them.
std::vector<double> pickSizes(const std::map<double, plan::Instruction> &m) {
  std::vector<double> all;
  for (const auto &kv : m)
    all.push_back(kv.first);
  if (all.size() <= 4)
    return all;
  std::vector<double> out;
  for (int i = 0; i < 4; ++i)
    out.push_back(all[(all.size() - 1) * i / 3]);
  return out;
}

} // namespace

bool measureKinds(const CalibrationPlan &plan, ComputeFigures &f,
                  std::string &err) {
  f.kinds.clear();
  if (plan.kernelsOf.empty())
    return true;
  Samples samples;
  std::map<std::string, std::vector<plan::Buffer>> shapes;
  std::map<std::string, GemmSample> gemms;
  for (const std::string &path : plan.kernelsOf) {
    std::shared_ptr<const Plan> p = loadPlan(path, err);
    if (!p) {
      err = "--calibrate-kernels-of: " + err;
      return false;
    }
    collect(p->proto, samples, shapes, gemms);
  }
  double budget = plan.quick ? 0.005 : 0.03;
  // The context a step gives a kernel: a GEMM before it (the plans' most
  // frequent), and for a GEMM an elementwise call of 256K elements before
  // it.
  const GemmSample *ctx = nullptr;
  for (const auto &kv : gemms)
    if (!ctx || kv.second.count > ctx->count)
      ctx = &kv.second;
  CalibrationTensors ctxTensors;
  KernelCall ctxCall, add;
  double ctxSeconds = 0, addSeconds = 0;
  if (ctx && (!callOf(ctx->ins, ctx->bufs, ctxTensors, ctxCall, err) ||
              !medianSeconds(ctxCall, budget, 3, ctxSeconds, err)))
    return false;
  const KernelCall *before = ctx ? &ctxCall : nullptr;
  const int64_t n = 1 << 18;
  add.in = {ctxTensors.make(DType::F32, {n}), ctxTensors.make(DType::F32, {n})};
  add.out = {ctxTensors.make(DType::F32, {n})};
  if (!add.find("add", err) ||
      !timedAfter(before, ctxSeconds, add, budget, addSeconds, err))
    return false;
  if (!refitGemm(plan, gemms, add, addSeconds, f))
    return false;
  for (const auto &[name, bySize] : samples) {
    KindFigure k;
    k.kernel = name;
    std::vector<double> xs, ts;
    std::string why;
    for (double bytes : pickSizes(bySize)) {
      const std::vector<plan::Buffer> &bufs =
          shapes[name + "@" + std::to_string(bytes)];
      Rotation call;
      double t = 0;
      if (!rotationOf(bySize.at(bytes), bufs, bytes, call, why) ||
          !timedAfter(before, ctxSeconds, std::ref(call), budget, t, why))
        break;
      xs.push_back(bytes);
      ts.push_back(std::max(t, 1e-9));
    }
    if (!why.empty() || xs.empty()) {
      // Synthetic operands do not suit every kernel (a value it checks):
      // its family's figure stays in use.
      plan.progress("kernel %s: not measured (%s); its family's figure "
                    "applies\n", name.c_str(), why.c_str());
      f.kinds.push_back(k);
      continue;
    }
    std::vector<KernelSample> pts;
    for (size_t i = 0; i < xs.size(); ++i)
      pts.push_back({xs[i], ts[i]});
    KernelLine line = fitKernelLine(pts, /*matchTotal=*/false);
    k.overhead = line.overhead;
    k.bytesPerS = line.bytesPerS;
    k.sizes = static_cast<int>(xs.size());
    k.measured = true;
    plan.progress("kernel %s: %.3g B/s, %.3g s a call (%d sizes, %.3g to "
                  "%.3g bytes)\n",
                  name.c_str(), k.bytesPerS, k.overhead, k.sizes, xs.front(),
                  xs.back());
    f.kinds.push_back(k);
  }
  return true;
}

bool hasKernelFigure(const plan::Instruction &ins) {
  return kernelFacts(ins.kind()) && !ins.on_host() &&
         ins.collectives_size() == 0 &&
         ::ds::rateFamilyOf(ins.kind()) != ::ds::RateFamily::Count;
}

size_t gemmClassOf(const ComputeFigures &f, double flops) {
  size_t c = 0;
  while (c + 1 < f.gemm.size() && flops > f.gemm[c].maxFlops)
    ++c;
  return c;
}

KernelLine fitKernelLine(const std::vector<KernelSample> &pts,
                         bool matchTotal) {
  KernelLine k;
  if (pts.empty())
    return k;
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0, total = 0;
  bool oneSize = true;
  for (const KernelSample &p : pts) {
    double w = 1 / (p.seconds * p.seconds);
    sw += w, sx += w * p.bytes, st += w * p.seconds;
    sxx += w * p.bytes * p.bytes, sxt += w * p.bytes * p.seconds;
    total += p.seconds;
    oneSize &= p.bytes == pts[0].bytes;
  }
  double mean = total / pts.size();
  double det = sw * sxx - sx * sx;
  double slope = !oneSize && det > 0 ? (sw * sxt - sx * st) / det : 0;
  double a = !oneSize && det > 0 ? (st - slope * sx) / sw : 0;
  if (oneSize || slope <= 0) {
    // One size (it says nothing about the split: the rate through the
    // origin); no growth with the bytes: the mean time a call, or with
    // `matchTotal` the samples' bytes over their seconds (a few calls of
    // a step, noisy, should not leave a kernel without a rate: the ranks'
    // figures are averaged, and a rate of 0 averaged with another halves
    // it).
    double bytes = 0;
    for (const KernelSample &p : pts)
      bytes += p.bytes;
    if (oneSize && pts[0].bytes > 0 && mean > 0)
      k.bytesPerS = pts[0].bytes / mean;
    else if (matchTotal && bytes > 0 && total > 0)
      k.bytesPerS = bytes / total;
    else
      k.overhead = mean;
    return k;
  }
  if (a < 0) { // through the origin: the bytes alone
    double num = 0, den = 0;
    for (const KernelSample &p : pts) {
      double w = 1 / (p.seconds * p.seconds);
      num += w * p.bytes * p.bytes;
      den += w * p.bytes * p.seconds;
    }
    k.bytesPerS = den > 0 ? num / den : 0;
  } else {
    k.overhead = a;
    k.bytesPerS = 1 / slope;
  }
  if (matchTotal && k.bytesPerS > 0) {
    // The line's shape from the weighted fit (each call's relative error
    // alike), its level from the calls' sum: the step adds them up.
    double fitted = 0;
    for (const KernelSample &p : pts)
      fitted += k.overhead + p.bytes / k.bytesPerS;
    double s = fitted > 0 ? total / fitted : 1;
    k.overhead *= s;
    k.bytesPerS /= s;
  }
  return k;
}

} // namespace ds::rt
