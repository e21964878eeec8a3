//===- OnnxFuzzer.cpp - libFuzzer target: the ONNX importer ---------------===//
//
// Part of the ds project. Arbitrary bytes as an ONNX model: the importer
// either builds a module that verifies or reports errors, never crashes.
//
//===----------------------------------------------------------------------===//

#include "FuzzFile.h"
#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Import/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static mlir::MLIRContext *context = [] {
    mlir::DialectRegistry registry;
    registry.insert<mlir::ds::DsDialect, mlir::func::FuncDialect>();
    auto *c = new mlir::MLIRContext(registry);
    c->loadAllAvailableDialects();
    return c;
  }();
  std::string path = fuzzFile(data, size, ".onnx");
  mlir::ScopedDiagnosticHandler quiet(context, [](mlir::Diagnostic &) {
    return mlir::success();
  });
  mlir::ds::ImportOptions options;
  auto module = mlir::ds::importOnnxFile(context, path, options);
  if (mlir::succeeded(module) && mlir::failed(mlir::verify(**module)))
    __builtin_trap(); // an imported module must verify
  return 0;
}
