//===- EngineCompile.cpp - the Python engine's in-process compile --------===//
//
// Part of the ds project.
//
// ds-opt's main for an ONNX model, in a function: options from (flag,
// value) pairs and the DeepSpeed config, diagnostics collected as lines,
// the plan returned as bytes.
//
//===----------------------------------------------------------------------===//

#include "EngineCompile.h"

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Pipeline/Compile.h"
#include "ds/Pipeline/DeepSpeedConfig.h"
#include "ds/Pipeline/PlanSearch.h"
#include "ds/Pipeline/TrainingOptions.h"
#include "ds/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <mutex>

using namespace mlir;

namespace ds::python {

namespace {

/// "error: message" from an llvm::Error (nothing for one the diagnostics
/// reported already).
void addError(llvm::Error error, std::string &messages) {
  llvm::handleAllErrors(
      std::move(error), [](const mlir::ds::ReportedError &) {},
      [&](const llvm::ErrorInfoBase &e) {
        messages += "error: " + e.message() + "\n";
      });
}

/// Options from the flags and the config, validated.
bool buildOptions(const std::vector<std::pair<std::string, std::string>> &flags,
                  const std::string &configPath,
                  mlir::ds::TrainingOptions &options, std::string &messages) {
  for (const auto &[flag, value] : flags) {
    const mlir::ds::OptionInfo *info = mlir::ds::findOption(flag);
    if (!info) {
      messages += "error: unknown ds-opt option '--" + flag + "'\n";
      return false;
    }
    if (llvm::Error e = mlir::ds::setOption(options, *info, value)) {
      messages += "error: --" + flag + "=" + value + ": " +
                  llvm::toString(std::move(e)) + "\n";
      return false;
    }
    options.origin[info->flag] = "command line";
  }
  if (!configPath.empty()) {
    options.configPath = configPath;
    if (llvm::Error e = mlir::ds::applyDeepSpeedConfig(configPath, options)) {
      addError(std::move(e), messages);
      return false;
    }
  }
  for (const std::string &notice : options.configNotices)
    messages += "warning: " + notice + "\n";
  if (llvm::Error e = mlir::ds::validateTrainingOptions(options)) {
    addError(std::move(e), messages);
    return false;
  }
  return true;
}

} // namespace

namespace {
/// Runs `body` with a context whose diagnostics become lines of
/// `messages` ("error: ...", "warning: ...").
template <typename Body>
void withContext(std::string &messages, Body body) {
  static std::once_flag registered;
  std::call_once(registered, [] {
    mlir::ds::registerDsPasses();
    mlir::ds::registerTrainingPipeline();
  });
  DialectRegistry registry;
  registry.insert<mlir::ds::DsDialect, mlir::dsrt::DsRtDialect,
                  func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    const char *severity =
        diag.getSeverity() == DiagnosticSeverity::Error     ? "error"
        : diag.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                                                            : "note";
    messages += std::string(severity) + ": " + diag.str() + "\n";
    return success();
  });
  body(context);
}

/// The model's folder (where a plan's weights path is relative to).
std::string folderOf(const std::string &modelPath) {
  llvm::SmallString<256> dir(modelPath);
  llvm::sys::path::remove_filename(dir);
  return dir.empty() ? std::string(".") : dir.str().str();
}

/// The request for `modelPath`: with an empty `planPath` the plan goes
/// to out.plan (no file); the command line records `tool` and the flags.
mlir::ds::CompileRequest
requestFor(const std::string &tool, const std::string &modelPath,
           const std::vector<std::pair<std::string, std::string>> &flags,
           const std::string &planPath, CompileOutcome &out) {
  mlir::ds::CompileRequest request;
  request.modelPath = modelPath;
  out.planDir = folderOf(modelPath);
  request.planPath = planPath.empty() ? out.planDir + "/plan.bin" : planPath;
  if (planPath.empty())
    request.planBytes = &out.plan;
  request.commandLine = tool + " " + modelPath;
  for (const auto &[flag, value] : flags)
    request.commandLine += " --" + flag + "=" + value;
  return request;
}
} // namespace

CompileOutcome
compileModel(const std::string &modelPath,
             const std::vector<std::pair<std::string, std::string>> &flags,
             const std::string &configPath, const std::string &planPath) {
  CompileOutcome out;
  mlir::ds::TrainingOptions options;
  if (!buildOptions(flags, configPath, options, out.messages))
    return out;
  if (options.emitKind != "plan") {
    out.messages += "error: the engine needs --emit=plan\n";
    return out;
  }
  withContext(out.messages, [&](MLIRContext &context) {
    mlir::ds::CompileRequest request =
        requestFor("ds.initialize", modelPath, flags, planPath, out);
    llvm::Expected<mlir::ds::CompileResult> result =
        mlir::ds::compile(context, options, request);
    if (!result) {
      addError(result.takeError(), out.messages);
      return;
    }
    for (const std::string &notice : result->notices)
      out.messages += "warning: " + notice + "\n";
    out.report = mlir::ds::formatReport(*result, options);
    out.ok = true;
  });
  return out;
}

CompileOutcome
estimateModel(const std::string &modelPath,
              const std::vector<std::pair<std::string, std::string>> &flags,
              const std::string &configPath) {
  CompileOutcome out;
  mlir::ds::TrainingOptions options;
  if (!buildOptions(flags, configPath, options, out.messages))
    return out;
  if (options.planMode != "auto" || options.reportKind != "json") {
    out.messages += "error: ds.estimate runs --plan=auto --report=json\n";
    return out;
  }
  withContext(out.messages, [&](MLIRContext &context) {
    mlir::ds::CompileRequest request =
        requestFor("ds.estimate", modelPath, flags, "", out); // no file
    std::string progress;
    llvm::raw_string_ostream progressStream(progress);
    llvm::Expected<mlir::ds::PlanSearchResult> result =
        mlir::ds::searchPlan(context, options, request, progressStream);
    if (!result) {
      addError(result.takeError(), out.messages);
      return;
    }
    for (const std::string &notice : result->chosen.notices)
      out.messages += "warning: " + notice + "\n";
    out.report = result->output;
    out.ok = true;
  });
  return out;
}

} // namespace ds::python
