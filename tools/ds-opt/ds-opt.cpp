//===- ds-opt.cpp - the ds compiler driver --------------------------------===//
//
// Part of the ds project.
//
// On .mlir input ds-opt is an mlir-opt for the ds dialect and passes (and
// the ds-train pipeline). On .onnx input it imports the model, compiles it
// with the ds library (ds/Pipeline/Compile.h), then any passes given on the
// command line, and writes what --emit asks for. Its options come from
// include/ds/Pipeline/TrainingOptions.def; MLIR's own are under
// --help-hidden.
//
//===----------------------------------------------------------------------===//

#include "ds/Analysis/ModelSummary.h"
#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/DsRt/IR/DsRtOps.h"
#include "ds/Import/OnnxImporter.h"
#include "ds/Pipeline/CommandLine.h"
#include "ds/Pipeline/Compile.h"
#include "ds/Pipeline/DeepSpeedConfig.h"
#include "ds/Pipeline/PlanSearch.h"
#include "ds/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace mlir;

namespace {
/// Where a diagnostic is, as `file: node 'name'`; `isNode` when it names
/// an ONNX node.
std::string describeLocation(Location loc, bool &isNode) {
  isNode = false;
  if (auto name = dyn_cast<NameLoc>(loc)) {
    bool dummy;
    std::string file = describeLocation(name.getChildLoc(), dummy);
    isNode = true;
    return file + (file.empty() ? "" : ": ") + "node '" + name.getName().str() +
           "'";
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    std::string s = file.getFilename().str();
    if (file.getLine() != 0)
      s += ":" + std::to_string(file.getLine()) + ":" +
           std::to_string(file.getColumn());
    return s;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      return describeLocation(fused.getLocations().front(), isNode);
  return "";
}

/// Prints a diagnostic as one line: `error: file: message`.
void printDiagnostic(Diagnostic &diag) {
  const char *severity = "error";
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Error:
    break;
  case DiagnosticSeverity::Warning:
    severity = "warning";
    break;
  case DiagnosticSeverity::Remark:
    severity = "remark";
    break;
  case DiagnosticSeverity::Note:
    severity = "note";
    break;
  }
  std::string msg = diag.str();
  bool isNode;
  std::string where = describeLocation(diag.getLocation(), isNode);
  // Importer messages already start with the node; keep only the file.
  if (isNode && StringRef(msg).starts_with("node '"))
    where = where.substr(0, where.find(": node '"));
  llvm::errs() << severity << ": " << where << (where.empty() ? "" : ": ")
               << msg << "\n";
}

/// Prints an error (unless diagnostics reported it already); returns 1.
int fail(llvm::Error error) {
  llvm::handleAllErrors(
      std::move(error), [](const ds::ReportedError &) {},
      [](const llvm::ErrorInfoBase &e) {
        llvm::errs() << "error: " << e.message() << "\n";
      });
  return 1;
}

double millisecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t)
      .count();
}

/// Writes the compiled IR (or its summary) to `outputFilename`.
int writeIR(ModuleOp module, StringRef outputFilename, bool summary) {
  std::string errorMessage;
  auto output = openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    llvm::errs() << "error: " << errorMessage << "\n";
    return 1;
  }
  if (summary) {
    FailureOr<ds::ModelSummary> s = ds::summarize(module);
    if (failed(s))
      return 1;
    ds::printSummary(*s, output->os());
  } else {
    module->print(output->os());
    output->os() << "\n";
  }
  output->keep();
  return 0;
}

int runOnnx(const ds::TrainingOptions &options, ds::CompileRequest &request,
            DialectRegistry &registry) {
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  int errors = 0;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    errors += diag.getSeverity() == DiagnosticSeverity::Error;
    printDiagnostic(diag);
    return success();
  });
  if (llvm::Error e = ds::checkSearchFlags(options))
    return fail(std::move(e));
  if (!options.planMode.empty()) { // --plan=auto: the library's search
    llvm::Expected<ds::PlanSearchResult> searched =
        ds::searchPlan(context, options, request, llvm::errs());
    if (!searched)
      return fail(searched.takeError());
    for (const std::string &notice : searched->chosen.notices)
      llvm::errs() << "warning: " << notice << "\n";
    llvm::outs() << searched->output;
    return 0;
  }
  auto start = std::chrono::steady_clock::now();
  FailureOr<OwningOpRef<ModuleOp>> model =
      ds::importModel(context, options, request.modelPath);
  double importMs = millisecondsSince(start);
  if (failed(model) || errors)
    return 1;
  if (llvm::Error e = ds::checkConfigBatch(**model, options))
    return fail(std::move(e));
  if (options.showOptions) {
    llvm::outs() << ds::formatShownOptions(options);
    return 0;
  }
  auto compiled = std::chrono::steady_clock::now();
  llvm::Expected<ds::CompileResult> result =
      ds::compile(**model, options, request);
  if (!result)
    return fail(result.takeError());
  for (const std::string &notice : result->notices)
    llvm::errs() << "warning: " << notice << "\n";
  if (options.printTiming)
    llvm::errs() << "import total: " << llvm::format("%.1f", importMs)
                 << " ms\npipeline: "
                 << llvm::format("%.1f", millisecondsSince(compiled))
                 << " ms\n";
  if (options.emitKind == "plan") {
    llvm::outs() << ds::formatReport(*result, options);
    return 0;
  }
  return writeIR(*result->module, request.planPath,
                 options.emitKind == "summary");
}

/// The ONNX path: a plan is binary, so without -o it goes to plan.bin.
int compileOnnx(int argc, char **argv, StringRef inputFilename,
                StringRef outputFilename, const ds::TrainingOptions &options,
                DialectRegistry &registry) {
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  bool outputGiven = false;
  std::string commandLine;
  for (int i = 0; i < argc; ++i) {
    StringRef arg(argv[i]);
    outputGiven |= arg == "-o" || arg.starts_with("-o=") || arg == "--o" ||
                   arg.starts_with("--o=");
    commandLine += (i ? " " : "") + arg.str();
  }
  std::string out = outputFilename.str();
  if (options.emitKind == "plan" && !outputGiven)
    out = "plan.bin";
  if (options.emitKind == "plan" && out == "-") {
    llvm::errs() << "error: a plan is binary; give a file with -o\n";
    return 1;
  }
  ds::CompileRequest request;
  request.modelPath = inputFilename.str();
  request.planPath = out;
  request.commandLine = commandLine;
  request.extraPasses = [&](PassManager &pm) {
    return config.setupPassPipeline(pm);
  };
  return runOnnx(options, request, registry);
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  DialectRegistry registry;
  registry.insert<ds::DsDialect, dsrt::DsRtDialect, func::FuncDialect>();
  ds::registerDsPasses();
  ds::registerTrainingPipeline();
  registerCanonicalizerPass();
  registerCSEPass();
  registerSymbolDCEPass();
  registerInlinerPass();

  std::string header = registerCLIOptions(
      "ds-opt: the ds training compiler (MLIR's options: --help-hidden).\n\n"
      "  ds-opt model.onnx [--emit=...] [-o FILE]   import an ONNX model\n"
      "  ds-opt file.mlir --ds-<pass> ...           run passes on ds IR\n",
      registry);
  ds::TrainingOptions options;
  ds::TrainingOptionsCL commandLine(options);
  commandLine.hideOtherOptions();
  auto [inputFilename, outputFilename] = parseCLIOptions(argc, argv, header);
  commandLine.recordCommandLine();

  if (!options.configPath.empty())
    if (llvm::Error e = ds::applyDeepSpeedConfig(options.configPath, options))
      return fail(std::move(e));
  for (const std::string &notice : options.configNotices)
    llvm::errs() << "warning: " << notice << "\n";
  if (options.listOnnxOps) {
    for (const std::string &op : ds::supportedOnnxOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (options.printOptionsDoc) {
    llvm::outs() << ds::formatOptionsMarkdown();
    return 0;
  }
  if (llvm::Error e = ds::validateTrainingOptions(options))
    return fail(std::move(e));
  if (StringRef(inputFilename).ends_with_insensitive(".onnx"))
    return compileOnnx(argc, argv, inputFilename, outputFilename, options,
                       registry);
  return asMainReturnCode(
      MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
}
