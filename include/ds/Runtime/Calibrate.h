//===- Calibrate.h - measuring this machine for the planner -----*- C++ -*-===//
//
// Part of the ds project. No MLIR or LLVM here.
//
// `ds-run --calibrate -o machine.json` (under `mpirun -np N` for the
// collectives) measures what the planner's cost model needs, through the
// runtime's own kernels and communicator: GEMM throughput by size class,
// memory bandwidth, each kernel family's throughput and the launch
// overhead, the collectives' latency and bandwidth (alpha-beta), and on
// request (--calibrate-nvme) the NVMe offload engine's rates. Rank 0 writes
// the cluster description (docs/calibration.md; the schema is the
// planner's, docs/planner.md).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_CALIBRATE_H
#define DS_RUNTIME_CALIBRATE_H

#include "ds/Runtime/RunOptions.h"
#include "ds/Runtime/Trainer.h"

#include <string>
#include <vector>

namespace ds::rt {

class Communicator;

/// Measures the machine as `options` say (--threads, --calibrate-quick,
/// --calibrate-nvme, --nvme-path) on every rank of `world` and writes the
/// description to options.outputPath (rank 0). Progress lines go to stderr.
RunResult calibrateMachine(const RunOptions &options, Communicator &world);

/// One timed collective: t = latency * steps + bytes / bandwidth, where
/// `steps` is n - 1 for n ranks and `bytes` is f * B (CLUSTER.md's factor
/// times the bytes per rank).
struct CollectiveSample {
  double steps = 0;
  double bytes = 0;
  double seconds = 0;
};

/// An alpha-beta fit: seconds per message step and bytes/s.
struct AlphaBeta {
  double latency = 0;
  double bandwidth = 0;
  /// False when the samples cannot determine a positive bandwidth (no
  /// byte count varies, or time falls as bytes grow); `error` says why.
  bool ok = false;
  std::string error;
};

/// The least-squares fit of `samples` weighted by 1/t^2 (so each sample's
/// relative error counts alike: a 1 KiB message's 5 us as much as a 64 MiB
/// one's 50 ms). When the fitted latency is not positive (noise), the
/// smallest message's time per step is taken as the latency (an upper
/// bound) and the bandwidth fitted to the other samples.
AlphaBeta fitAlphaBeta(const std::vector<CollectiveSample> &samples);

/// One kernel call: the bytes the planner's kernel model charges it and
/// its seconds.
struct KernelSample {
  double bytes = 0;
  double seconds = 0;
};

/// A kernel's time: overhead + bytes / bytesPerS (bytesPerS 0: no rate).
struct KernelLine {
  double overhead = 0;
  double bytesPerS = 0;
};

/// The line through `samples` by least squares weighted by 1/t^2 (each
/// call's relative error alike). One distinct size: the rate through the
/// origin; no growth with the bytes: the mean time as the overhead (with
/// `matchTotal`: the samples' bytes over their seconds); a
/// negative intercept: the rate through the origin. With `matchTotal`
/// (the in-step figures) the line is then scaled (overhead times s, rate
/// over s) so that its sum over the samples is theirs: a step adds its
/// calls up, and the 1/t^2 weights let the many small calls set the level.
KernelLine fitKernelLine(const std::vector<KernelSample> &samples,
                         bool matchTotal);

} // namespace ds::rt

#endif // DS_RUNTIME_CALIBRATE_H
