//===- CalibrateCollectives.cpp - collectives, their fit, NVMe ------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// Each collective runs through what a plan runs: the all_reduce,
// all_gather and reduce_scatter kernels of the CPU registry (the
// communicator underneath), the pipeline's pipe_send and pipe_recv kernels
// (a ping-pong between ranks 0 and 1) and the communicator's broadcast. At
// each message size every rank waits for the others, then times its call;
// the median over repetitions is one sample, and the samples are fitted to
// CLUSTER.md's t = latency * (n - 1) + f * B / bandwidth. B is the full
// buffer in bytes (all-reduce and broadcast: the tensor; all-gather: the
// gathered output; reduce-scatter: the input; send/recv: the message), as
// the communicator counts collectiveBytes.
//
//===----------------------------------------------------------------------===//

#include "CalibrateImpl.h"
#include "Nvme/NvmeStore.h"
#include "ds/Runtime/Comm.h"

#include <algorithm>
#include <cmath>

namespace ds::rt {

AlphaBeta fitAlphaBeta(const std::vector<CollectiveSample> &samples) {
  AlphaBeta fit;
  // Weighted least squares (weights 1/t^2) of t = L * s + x * beta.
  double ss = 0, sx = 0, xx = 0, st = 0, xt = 0;
  bool sizesVary = false;
  for (const CollectiveSample &p : samples) {
    if (!(p.seconds > 0) || !std::isfinite(p.seconds) || !(p.steps >= 0) ||
        !(p.bytes >= 0)) {
      fit.error = "a sample is not a positive time of a non-negative size";
      return fit;
    }
    sizesVary = sizesVary || p.bytes != samples[0].bytes;
    double w = 1 / (p.seconds * p.seconds);
    ss += w * p.steps * p.steps;
    sx += w * p.steps * p.bytes;
    xx += w * p.bytes * p.bytes;
    st += w * p.steps * p.seconds;
    xt += w * p.bytes * p.seconds;
  }
  if (!sizesVary) {
    fit.error = "fewer than two message sizes";
    return fit;
  }
  double det = ss * xx - sx * sx, latency = 0, beta = 0;
  if (det > 1e-12 * ss * xx) {
    latency = (st * xx - sx * xt) / det;
    beta = (ss * xt - sx * st) / det;
  }
  if (!(latency > 0)) {
    // Noise hid the latency: take the smallest message's time per step
    // (an upper bound; 0 without steps) and fit the bytes' time alone.
    const CollectiveSample *small = &samples[0];
    for (const CollectiveSample &p : samples)
      if (p.bytes < small->bytes)
        small = &p;
    latency = small->steps > 0 ? small->seconds / small->steps : 0;
    double num = 0, den = 0; // the others' bytes against their time left
    for (const CollectiveSample &p : samples) {
      if (&p == small)
        continue;
      double w = 1 / (p.seconds * p.seconds);
      num += w * p.bytes * (p.seconds - latency * p.steps);
      den += w * p.bytes * p.bytes;
    }
    beta = den > 0 ? num / den : 0;
  }
  if (!(beta > 0)) {
    fit.error = "the times do not grow with the message size";
    return fit;
  }
  fit.latency = latency;
  fit.bandwidth = 1 / beta;
  fit.ok = true;
  return fit;
}

namespace {

enum class Kind { AllReduce, AllGather, ReduceScatter, Broadcast, SendRecv };

struct KindInfo {
  Kind kind;
  const char *name;
};
const KindInfo kKinds[] = {{Kind::AllReduce, "all_reduce"},
                           {Kind::AllGather, "all_gather"},
                           {Kind::ReduceScatter, "reduce_scatter"},
                           {Kind::Broadcast, "broadcast"},
                           {Kind::SendRecv, "send_recv"}};

/// CLUSTER.md's f for n ranks.
double factorOf(Kind kind, int n) {
  switch (kind) {
  case Kind::AllReduce:
    return 2.0 * (n - 1) / n;
  case Kind::AllGather:
  case Kind::ReduceScatter:
    return static_cast<double>(n - 1) / n;
  default:
    return 1;
  }
}

/// Message sizes in bytes: 1 KiB to 64 MiB by factors of 4 (quick: four).
std::vector<uint64_t> sizesOf(bool quick) {
  if (quick)
    return {1 << 10, 32 << 10, 1 << 20, 4 << 20};
  std::vector<uint64_t> v;
  for (uint64_t b = 1 << 10; b <= (64u << 20); b *= 4)
    v.push_back(b);
  return v;
}

/// Repetitions at a size: enough that the median stands when a few are
/// slowed (a rank descheduled on a busy host costs milliseconds).
int repetitionsOf(uint64_t bytes, bool quick) {
  if (quick)
    return bytes <= (64u << 10) ? 15 : 7;
  return bytes <= (64u << 10) ? 20 : bytes <= (1u << 20) ? 10
                                 : bytes <= (16u << 20)  ? 5
                                                         : 3;
}

/// `bytes` rounded down to whole f32 elements, a multiple of `n` of them
/// (the shards of all-gather and reduce-scatter).
uint64_t bytesFor(uint64_t bytes, int n) {
  return bytes / sizeof(float) / n * n * sizeof(float);
}

/// The calls of one repetition on this rank, for `bytes` (elements of f32,
/// a multiple of the group size).
struct Step {
  std::vector<KernelCall> calls;
  std::vector<float> buffer; // broadcast's
};

bool stepOf(Kind kind, Communicator &comm, uint64_t bytes,
            CalibrationTensors &ts, Step &step, std::string &err) {
  int n = comm.size(), rank = comm.rank();
  int64_t count = static_cast<int64_t>(bytesFor(bytes, n) / sizeof(float));
  auto call = [&](const char *name, std::vector<TensorView> in,
                  std::vector<TensorView> out) {
    KernelCall c;
    c.in = std::move(in);
    c.out = std::move(out);
    c.comm = &comm;
    c.pipe = &comm;
    step.calls.push_back(std::move(c));
    return step.calls.back().find(name, err);
  };
  switch (kind) {
  case Kind::AllReduce:
    return call("all_reduce", {ts.make(DType::F32, {count})},
                {ts.make(DType::F32, {count})});
  case Kind::AllGather:
    return call("all_gather", {ts.make(DType::F32, {count / n})},
                {ts.make(DType::F32, {count})});
  case Kind::ReduceScatter:
    return call("reduce_scatter", {ts.make(DType::F32, {count})},
                {ts.make(DType::F32, {count / n})});
  case Kind::Broadcast:
    step.buffer.assign(count, 1.0f);
    return true;
  case Kind::SendRecv: {
    if (rank > 1)
      return true; // ranks 0 and 1 play ping-pong
    int64_t peer = rank == 0 ? 1 : -1;
    TensorView msg = ts.make(DType::F32, {count});
    // Rank 0 sends (tag 1) then receives (tag 2); rank 1 the other way.
    bool ok = rank == 0 ? call("pipe_send", {msg}, {}) &&
                              call("pipe_recv", {}, {msg})
                        : call("pipe_recv", {}, {msg}) &&
                              call("pipe_send", {msg}, {});
    for (size_t i = 0; ok && i < 2; ++i) {
      step.calls[i].setInt("peer", peer);
      bool sends = step.calls[i].kernel->name == std::string("pipe_send");
      step.calls[i].setInt("tag", sends == (rank == 0) ? 1 : 2);
    }
    return ok;
  }
  }
  return false;
}

/// The median seconds of `kind` on `comm` at `bytes`; every rank calls.
bool timeCollective(const CalibrationPlan &plan, Kind kind,
                    Communicator &comm, uint64_t bytes, double &seconds,
                    std::string &err) {
  CalibrationTensors ts;
  Step step;
  if (!stepOf(kind, comm, bytes, ts, step, err))
    return false;
  int reps = repetitionsOf(bytes, plan.quick);
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) { // the first is a warm-up
    if (!comm.allOk(true)) {
      err = "a rank failed during the collectives' calibration";
      return false;
    }
    auto t0 = std::chrono::steady_clock::now();
    bool ok = true;
    if (kind == Kind::Broadcast)
      ok = comm.broadcast(step.buffer.data(),
                          step.buffer.size() * sizeof(float), 0, err);
    for (const KernelCall &c : step.calls)
      ok = ok && c(err);
    if (!ok)
      return false;
    double t = std::chrono::duration<double>(
                   std::chrono::steady_clock::now() - t0)
                   .count();
    if (r > 0)
      times.push_back(kind == Kind::SendRecv ? t / 2 : t); // one way
  }
  if (!comm.flushSends(err))
    return false;
  std::sort(times.begin(), times.end());
  seconds = times[times.size() / 2];
  return true;
}

/// `kind` at every size, fitted. A rank descheduled on a busy host can
/// slow most repetitions at a size; when a rank's times then fit no line,
/// every rank measures the kind again (at most twice more).
bool measureKind(const CalibrationPlan &plan, Kind kind, const char *name,
                 Communicator &comm, AlphaBeta &fit, std::string &err) {
  int n = kind == Kind::SendRecv ? 2 : comm.size();
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<CollectiveSample> samples;
    for (uint64_t bytes : sizesOf(plan.quick)) {
      double t;
      if (!timeCollective(plan, kind, comm, bytes, t, err))
        return false;
      double b = static_cast<double>(bytesFor(bytes, comm.size()));
      samples.push_back({static_cast<double>(n - 1), factorOf(kind, n) * b, t});
    }
    fit = fitAlphaBeta(samples);
    if (comm.allOk(fit.ok))
      break;
    plan.progress("%s: %s%s\n", name,
                  fit.ok ? "another rank's times fit no line"
                         : fit.error.c_str(),
                  attempt < 2 ? "; measuring again" : "");
  }
  if (fit.ok)
    plan.progress("%s on %s: latency %.3g s, bandwidth %.3g "
                  "B/s\n",
                  name,
                  kind == Kind::SendRecv
                      ? "ranks 0 and 1"
                      : (std::to_string(comm.size()) + " ranks").c_str(),
                  fit.latency, fit.bandwidth);
  return true;
}

} // namespace

bool measureCollectives(const CalibrationPlan &plan, Communicator &comm,
                        std::vector<CollectiveFigure> &figures,
                        std::string &err) {
  figures.clear();
  for (const KindInfo &k : kKinds) {
    CollectiveFigure f;
    f.name = k.name;
    if (!measureKind(plan, k.kind, k.name, comm, f.fit, err))
      return false;
    figures.push_back(f);
  }
  return true;
}

bool measureAllReduce(const CalibrationPlan &plan, Communicator &comm,
                      AlphaBeta &fit, std::string &err) {
  return measureKind(plan, Kind::AllReduce, "all_reduce", comm, fit, err);
}

bool measureNvme(const CalibrationPlan &plan, const std::string &dir,
                 double &writeBps, double &readBps, std::string &err) {
  // 256 MiB in 16 MiB slots (quick: 32 MiB in 4 MiB), the engine's
  // default requests; the first round is not timed (this VM pays for the
  // first kernel access to a page; a training step reuses its buffers).
  uint64_t slot = plan.quick ? 4u << 20 : 16u << 20;
  int slots = 8 * (plan.quick ? 1 : 2);
  NvmeOptions o;
  o.dir = dir;
  o.rank = plan.rank;
  std::unique_ptr<NvmeStore> store =
      NvmeStore::open(o, std::vector<uint64_t>(slots, slot), err);
  if (!store)
    return false;
  std::vector<std::vector<unsigned char>> data(
      slots, std::vector<unsigned char>(slot, 0x5a));
  double total = static_cast<double>(slot) * slots;
  // Every slot written (or read), then waited for: bytes/s.
  auto pass = [&](bool write, double &rate) {
    auto t0 = std::chrono::steady_clock::now();
    int ticket;
    for (int s = 0; s < slots; ++s)
      if (!(write ? store->write(s, data[s].data(), slot, ticket, err)
                  : store->read(s, data[s].data(), slot, ticket, err)))
        return false;
    if (!store->waitAll(err))
      return false;
    rate = total / std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
    return true;
  };
  for (int round = 0; round < 2; ++round)
    if (!pass(true, writeBps) || !pass(false, readBps))
      return false;
  plan.progress("nvme in '%s' (%s): write %.3g B/s, read %.3g "
                "B/s\n",
                dir.c_str(), store->async() ? "io_uring" : "synchronous I/O",
                writeBps, readBps);
  return true;
}

} // namespace ds::rt
