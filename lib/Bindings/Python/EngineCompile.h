//===- EngineCompile.h - the Python engine's in-process compile -*- C++ -*-===//
//
// Part of the ds project.
//
// The one entry point from the Python binding into the compiler, in plain
// C++ types: the binding is built with exceptions and RTTI (pybind11 needs
// them), the compiler without, so no LLVM or MLIR type crosses here.
//
//===----------------------------------------------------------------------===//

#ifndef DS_BINDINGS_PYTHON_ENGINECOMPILE_H
#define DS_BINDINGS_PYTHON_ENGINECOMPILE_H

#include <string>
#include <utility>
#include <vector>

namespace ds::python {

struct CompileOutcome {
  bool ok = false;
  /// The plan (header and payload, as plan.bin holds it).
  std::string plan;
  /// The folder the plan's weights path is relative to.
  std::string planDir;
  /// Errors (when !ok) and warnings, one per line, "error: ..." /
  /// "warning: ...".
  std::string messages;
  /// ds-opt --report's text when "report" was among the flags.
  std::string report;
};

/// Compiles `modelPath` as `ds-opt modelPath --FLAG=VALUE ... [--config=
/// configPath]` would, without a process or a file: `flags` are ds-opt's
/// option names without dashes and their command-line values; the
/// config (a DeepSpeed JSON file, may be empty) is applied after them as
/// ds-opt applies --config. With a non-empty `planPath` the plan is also
/// written there.
CompileOutcome
compileModel(const std::string &modelPath,
             const std::vector<std::pair<std::string, std::string>> &flags,
             const std::string &configPath, const std::string &planPath);

/// Runs the --plan=auto search on `modelPath` as `ds-opt modelPath
/// --plan=auto --report=json ...` would (the flags must hold plan=auto,
/// report=json, a cluster and a global batch), without writing a plan:
/// `report` receives the JSON report with plan.candidates[].
CompileOutcome
estimateModel(const std::string &modelPath,
              const std::vector<std::pair<std::string, std::string>> &flags,
              const std::string &configPath);

} // namespace ds::python

#endif // DS_BINDINGS_PYTHON_ENGINECOMPILE_H
