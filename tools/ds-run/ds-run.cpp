//===- ds-run.cpp - execute a ds plan -------------------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
//   ds-run plan.bin --forward-only --inputs in.npz --outputs out.npz
//   mpirun -np 2 ds-run train.plan --steps 10 --data train.npz
//   mpirun -np 2 ds-run --calibrate -o machine.json
//
// A thin driver over the runtime library: the flags come from the
// RunOptions table (ds/Runtime/RunOptions.h), the run from runPlan
// (ds/Runtime/Trainer.h); this file parses, calls and reports errors.
//
//===----------------------------------------------------------------------===//

#include "ds/Runtime/Calibrate.h"
#include "ds/Runtime/Comm.h"
#include "ds/Runtime/RunOptions.h"
#include "ds/Runtime/Runtime.h"
#include "ds/Runtime/Trainer.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdio>

using namespace ds::rt;

namespace {

/// Prints `result`'s error; a rank's own failure ends every rank (no rank
/// may wait forever in a collective the failed one will never join).
int report(const RunResult &result, Communicator *world) {
  if (result.ok)
    return 0;
  std::fprintf(stderr, "error: %s\n", result.error.c_str());
  if (result.abortWorld && world && world->size() > 1) {
    std::fflush(stderr);
    world->abort(1);
  }
  return 1;
}

int printAction(RunAction action) {
  switch (action) {
  case RunAction::Help:
    std::fputs(runUsage().c_str(), stdout);
    break;
  case RunAction::ListDevices: // the backends this ds-run can use here
    std::printf("cpu\n");
    if (builtWithCuda() && cudaDeviceVisible())
      std::printf("cuda\n");
    break;
  case RunAction::ListKernels:
    for (const std::string &k : kernelNames())
      std::printf("%s\n", k.c_str());
    break;
  case RunAction::Run:
    break;
  }
  return 0;
}

int run(int argc, char **argv, std::unique_ptr<Communicator> &world) {
  RunOptions options;
  RunAction action;
  std::string err;
  if (!parseRunArguments(argc, argv, options, action, err))
    return report({false, err, false}, nullptr);
  if (action != RunAction::Run)
    return printAction(action);
  if (!options.consolidateDir.empty()) {
    if (int rc = report(consolidate(options), nullptr))
      return rc;
    std::printf("consolidated '%s' into '%s'\n", options.consolidateDir.c_str(),
                options.outputPath.c_str());
    return 0;
  }
  world = createCommunicator(err);
  if (!world)
    return report({false, err, false}, nullptr);
  if (options.calibrate)
    return report(calibrateMachine(options, *world), world.get());
  return report(runPlan(options, *world), world.get());
}

} // namespace

int main(int argc, char **argv) {
  // Malformed plans and models are reported by ds-run in one line each;
  // protobuf's own log lines would repeat them.
  google::protobuf::SetLogHandler(nullptr);
  std::unique_ptr<Communicator> world; // MPI world or one rank
  int rc = run(argc, argv, world);
  world.reset(); // MPI_Finalize
  return rc;
}
