//===- Trainer.h - running a plan: training loop and forward runs -*- C++ -*-===//
//
// Part of the ds project. No MLIR or LLVM here.
//
// The library behind ds-run: given RunOptions and the world's communicator
// it lays out the ranks (data, tensor and pipeline parallelism), creates the
// executors, feeds data (batches, token windows, input files), runs the
// training steps or the forward program, checkpoints and resumes, and prints
// the progress lines and the run report. Errors come back as values: no
// function here exits or aborts; the caller (ds-run, a binding) decides.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_TRAINER_H
#define DS_RUNTIME_TRAINER_H

#include "ds/Runtime/RunOptions.h"

#include <string>

namespace ds::rt {

class Communicator;

/// How a run ended.
struct RunResult {
  bool ok = true;
  /// One line, what follows "error: " ("rank 1: step 3: ..." on several
  /// ranks).
  std::string error;
  /// The failure is this rank's alone: the other ranks may wait forever in
  /// a collective it never joins, so the caller ends them all
  /// (Communicator::abort). Otherwise every rank failed alike and each
  /// ends normally.
  bool abortWorld = false;
};

/// Runs options.planPath on `world`: the forward program (--forward-only)
/// or options.steps training steps, printing progress to stdout.
RunResult runPlan(const RunOptions &options, Communicator &world);

/// --consolidate: merges the checkpoint options.consolidateDir into whole
/// tensors in options.outputPath (no plan, no communicator).
RunResult consolidate(const RunOptions &options);

} // namespace ds::rt

#endif // DS_RUNTIME_TRAINER_H
