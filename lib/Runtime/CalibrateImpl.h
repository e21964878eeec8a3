//===- CalibrateImpl.h - the measurements of ds-run --calibrate -*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The parts of a calibration (Calibrate.cpp drives them): the kernels
// through the CPU registry (CalibrateKernels.cpp: GEMM classes, memory
// bandwidth, kernel families), the collectives through the communicator
// and the NVMe store (CalibrateCollectives.cpp). Every figure is in bytes,
// FLOP/s, bytes/s or seconds.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CALIBRATEIMPL_H
#define DS_RUNTIME_CALIBRATEIMPL_H

#include "Kernel.h"
#include "ds/Runtime/Calibrate.h"

#include "plan.pb.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace ds::rt {

class Communicator;

/// What a calibration is asked to do, and where it reports.
struct CalibrationPlan {
  bool quick = false;
  /// Plans whose kernels are also measured at their own shapes
  /// (--calibrate-kernels-of).
  std::vector<std::string> kernelsOf;
  /// --calibrate-isolated: no in-step refit of the kernels of kernelsOf.
  bool isolated = false;
  int threads = 1;
  int rank = 0;
  /// Progress lines (stderr, "calibrate: [SECONDS s] ...") come from rank
  /// 0 only.
  void progress(const char *fmt, ...) const
      __attribute__((format(printf, 2, 3)));
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  }
};

/// Operand storage of the calls being measured (stable addresses, small
/// values of every kind; integers in 0..6, so that labels stay in range).
class CalibrationTensors {
public:
  TensorView make(DType dtype, std::vector<int64_t> shape);

private:
  std::vector<std::unique_ptr<std::vector<unsigned char>>> buffers;
};

/// One call of a registered CPU kernel: its attributes and operands, run
/// with a context built per call as the executor builds it.
struct KernelCall {
  const KernelInfo *kernel = nullptr;
  plan::Instruction attrs;
  std::vector<TensorView> in, out;
  /// For collectives; `pipe` for the pipeline's send and receive (the
  /// peer is this rank plus the kernel's `peer`).
  Communicator *comm = nullptr, *pipe = nullptr;
  double bytes = 0, flops = 0;

  /// Looks kernel `name` up in the CPU registry.
  bool find(const char *name, std::string &err);
  bool operator()(std::string &err) const;
  void setInt(const char *name, int64_t v);
  void setInts(const char *name, std::initializer_list<int64_t> vs);
  /// `bytes`: every operand's (what the planner's kernel model counts).
  void countBytes();
};

/// A GEMM size class: calls of at most `maxFlops` FLOPs (0: no bound, the
/// last class) run at `flopsPerS`.
struct GemmClass {
  double maxFlops = 0;
  double flopsPerS = 0;
  bool inStep = false; // refitted on the sample plans' steps
};

/// A kernel family's fitted throughput and the time of its tiny call.
struct FamilyFigure {
  const char *name = "";
  const char *kernel = ""; // the registered kernel that represents it
  double bytesPerS = 0;    // 0: not given (conv: FLOPs only)
  double flopsPerS = 0;    // 0: not given
  double overhead = 0;     // seconds of the tiny call
};

/// A kernel measured at a sample plan's shapes: t = overhead + bytes / rate
/// fitted over its distinct operand sizes (rate 0: no growth with bytes).
struct KindFigure {
  std::string kernel;
  double bytesPerS = 0, overhead = 0;
  int sizes = 0;          // distinct operand sizes measured
  bool measured = false;  // false: the kernel failed on synthetic operands
  bool inStep = false;    // refitted on a sample plan's step (in-step)
};

/// Everything one rank measures on its own (the ranks measure at once and
/// the figures are averaged over them).
struct ComputeFigures {
  std::vector<GemmClass> gemm;
  double fp32 = 0, bf16 = 0, fp16 = 0;
  double memoryBandwidth = 0; // triad bytes/s
  double copyBandwidth = 0;   // copy bytes/s (reported in the provenance)
  std::vector<FamilyFigure> families;
  std::vector<KindFigure> kinds; // --calibrate-kernels-of
  double launchOverhead = 0;
  /// The executor's seconds per instruction beyond its kernel's call and
  /// per run; the stash's save and restore bytes/s (CalibrateExecutor.cpp).
  double dispatchOverhead = 0, runOverhead = 0;
  double stashSave = 0, stashRestore = 0;
  double share = 1; // of the host's cores (measureShare); figures scaled
  /// Flattened (for averaging over ranks) and back.
  std::vector<float> flatten() const;
  void unflatten(const std::vector<float> &v);
};

/// The median seconds of one call of `fn` after one untimed call: samples
/// are taken until `budget` seconds have passed (at least `minSamples`, at
/// most 15), each sample a batch of calls long enough for the clock
/// (>= 100 us). False with `err` when a call fails.
bool medianSeconds(const std::function<bool(std::string &)> &fn,
                   double budget, int minSamples, double &seconds,
                   std::string &err);

/// GEMM classes and the fp32/bf16/fp16 rates through the matmul kernel.
bool measureGemm(const CalibrationPlan &plan, ComputeFigures &f,
                 std::string &err);
/// Copy and triad over buffers several times the last-level cache.
bool measureMemoryBandwidth(const CalibrationPlan &plan, ComputeFigures &f,
                            std::string &err);
/// One registered kernel per family at two sizes; the launch overhead.
/// Each kernel of the plans in `plan.kernelsOf` (--calibrate-kernels-of)
/// at those plans' operand shapes; nothing without such plans.
bool measureKinds(const CalibrationPlan &plan, ComputeFigures &f,
                  std::string &err);
/// An instruction a per-kernel figure describes: a device kernel of a rate
/// family, without collectives (the optimizers included).
bool hasKernelFigure(const plan::Instruction &ins);
/// The GEMM class (index into `f.gemm`) a call of `flops` falls in.
size_t gemmClassOf(const ComputeFigures &f, double flops);
/// Each sample plan of `plan.kernelsOf` that this calibration's ranks can
/// run, run through the executor on synthetic inputs: each kernel's figure
/// (and the GEMM classes) refitted on its instructions' in-step times
/// (CalibrateInStep.cpp); a plan that cannot run adds a note instead.
bool measureInStep(const CalibrationPlan &plan, Communicator &world,
                   ComputeFigures &f, std::vector<std::string> &notes,
                   std::string &err);
/// The executor's dispatch and run overheads: plans of tiny adds run
/// through the executor, less the add's own call.
bool measureExecutor(const CalibrationPlan &plan, ComputeFigures &f,
                     std::string &err);
/// The pipeline stash's save (a copy out of the arena into a reused
/// buffer) and restore (a copy back) rates.
bool measureStash(const CalibrationPlan &plan, ComputeFigures &f,
                  std::string &err);
/// The last-level cache's bytes (sysfs), or 32 MiB when it does not say.
uint64_t lastLevelCache();
/// The share of the host this rank gets (CalibrateShare.cpp): a short
/// parallel call's median time over its mean time in a long run of them.
bool measureShare(const CalibrationPlan &plan, double &share,
                  std::string &err);
/// Rates times `share`; overheads over it.
void scaleByShare(double share, ComputeFigures &f);
bool measureFamilies(const CalibrationPlan &plan, ComputeFigures &f,
                     std::string &err);

/// A collective's alpha-beta fit (or why there is none).
struct CollectiveFigure {
  const char *name = "";
  AlphaBeta fit;
};

/// Every collective on `comm` by message size, fitted; `figures` is
/// filled on every rank (rank 0's timings).
bool measureCollectives(const CalibrationPlan &plan, Communicator &comm,
                        std::vector<CollectiveFigure> &figures,
                        std::string &err);
/// All-reduce alone on `comm` (the intra- and inter-node groups).
bool measureAllReduce(const CalibrationPlan &plan, Communicator &comm,
                      AlphaBeta &fit, std::string &err);

/// NVMe write and read bytes/s through the offload engine, with a swap
/// file in `dir`.
bool measureNvme(const CalibrationPlan &plan, const std::string &dir,
                 double &writeBps, double &readBps, std::string &err);

} // namespace ds::rt

#endif // DS_RUNTIME_CALIBRATEIMPL_H
