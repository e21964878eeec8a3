//===- OnnxImporter.cpp - ONNX ModelProto to the ds dialect ---------------===//
//
// Part of the ds project.
//
// The importer's public entry points and its front end: read and parse the
// ModelProto, run the ONNX checker, fix dynamic input dimensions from
// --input-shape, run ONNX shape inference, then hand the model to the
// graph importer (GraphImporter.cpp), which builds `func.func @forward` of
// ds ops with one handler per ONNX op type (the *Handlers.cpp files). Every
// handler computes its result types with the shape rules of DsShapes.h, so
// that a malformed model is reported at its node instead of failing an op
// verifier later. Ops are folded as they are built, which turns PyTorch's
// shape arithmetic into constants on the fly: later Reshape/Expand/Slice
// nodes then see constant operands.
//
// libonnx reports errors by throwing; this file is the one compiled with
// exceptions, and no exception leaves it.
//
//===----------------------------------------------------------------------===//

#include "ds/Import/OnnxImporter.h"
#include "ImporterImpl.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <exception>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

std::string ds::parseInputShape(StringRef spec, ImportOptions &options) {
  auto [name, dims] = spec.rsplit(':');
  if (name.empty() || dims.empty() || !spec.contains(':'))
    return "--input-shape expects NAME:DIMS such as tokens:4x64, got '" +
           spec.str() + "'";
  SmallVector<int64_t> shape;
  if (dims != "scalar") {
    SmallVector<StringRef> parts;
    dims.split(parts, 'x');
    for (StringRef p : parts) {
      int64_t d;
      if (p.getAsInteger(10, d) || d < 0)
        return "--input-shape '" + spec.str() + "': '" + p.str() +
               "' is not a dimension (DIMS is like 4x64, or 'scalar')";
      shape.push_back(d);
    }
  }
  if (options.inputShapes.count(name))
    return "--input-shape gives input '" + name.str() + "' twice";
  options.inputShapes[name] = shape;
  return "";
}

std::vector<std::string> ds::supportedOnnxOps() {
  return handlerTable().opNames();
}

//===----------------------------------------------------------------------===//
// libonnx: checker and shape inference (the code that may throw)
//===----------------------------------------------------------------------===//

/// The ONNX checker on the parsed model. libonnx's check_model(path) reads
/// and parses the file again (7 s of a 10 s GPT-2 import); this runs the
/// same checks as its check_model(model) with the model's folder set, so
/// that external data is found beside the model. Throws ValidationError.
static void checkModel(const onnx::ModelProto &model, StringRef path) {
  namespace ck = onnx::checker;
  if (!model.ir_version())
    fail_check("The model does not have an ir_version set properly.");
  if (model.ir_version() > onnx::IR_VERSION)
    fail_check("Your model ir_version ", model.ir_version(),
               " is higher than the checker's (", onnx::IR_VERSION, ").");
  std::unordered_map<std::string, int> opsets;
  for (const auto &op : model.opset_import())
    opsets[op.domain()] = static_cast<int>(op.version());
  if (model.ir_version() >= 3 && opsets.empty())
    fail_check("model with IR version >= 3 must specify opset_import for "
               "ONNX");
  ck::CheckerContext ctx;
  ctx.set_ir_version(static_cast<int>(model.ir_version()));
  ctx.set_opset_imports(opsets);
  std::string dir = llvm::sys::path::parent_path(path).str();
  ctx.set_model_dir(dir.empty() ? "." : dir);
  ck::LexicalScopeContext lex;
  ck::check_graph(model.graph(), ctx, lex);
  if (ctx.get_ir_version() >= 8)
    ck::check_model_local_functions(model, ctx, lex);
}

/// Runs `step`, turning an exception into an error at `loc` that starts
/// with `what` and ends with the exception's message on one line.
static LogicalResult catchOnnxError(Location loc, const Twine &what,
                                    llvm::function_ref<void()> step) {
  try {
    step();
  } catch (const std::exception &e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    return mlir::emitError(loc) << what << msg;
  }
  return success();
}

/// Fixes dynamic input dimensions from --input-shape before shape
/// inference, so that inferred shapes are static wherever they can be; a
/// data input's dynamic leading dimension not named there is the batch
/// (options.batchSize) when one is given. Conflicts are left for the graph
/// importer to report.
static void applyInputShapes(onnx::ModelProto &model,
                             const ImportOptions &options) {
  llvm::StringSet<> initializers;
  for (const auto &init : model.graph().initializer())
    initializers.insert(init.name());
  for (auto &in : *model.mutable_graph()->mutable_input()) {
    auto it = options.inputShapes.find(in.name());
    if (it == options.inputShapes.end() && options.batchSize > 0 &&
        in.type().has_tensor_type() && !initializers.contains(in.name()) &&
        in.type().tensor_type().has_shape() &&
        in.type().tensor_type().shape().dim_size() > 0 &&
        !in.type().tensor_type().shape().dim(0).has_dim_value())
      in.mutable_type()
          ->mutable_tensor_type()
          ->mutable_shape()
          ->mutable_dim(0)
          ->set_dim_value(options.batchSize);
    if (it == options.inputShapes.end() || !in.type().has_tensor_type())
      continue;
    auto *shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() != 0 &&
        static_cast<size_t>(shape->dim_size()) != it->second.size())
      continue; // the importer reports the rank mismatch
    bool conflict = false;
    for (int i = 0; i < shape->dim_size(); ++i)
      conflict |= shape->dim(i).has_dim_value() &&
                  shape->dim(i).dim_value() != it->second[i];
    if (conflict)
      continue; // the importer reports the conflicting dimension
    shape->clear_dim();
    for (int64_t d : it->second)
      shape->add_dim()->set_dim_value(d);
  }
}

//===----------------------------------------------------------------------===//
// importOnnxFile
//===----------------------------------------------------------------------===//

FailureOr<OwningOpRef<ModuleOp>>
ds::importOnnxFile(MLIRContext *context, StringRef path,
                   const ImportOptions &options) {
  context->loadDialect<DsDialect, func::FuncDialect>();
  Location fileLoc =
      FileLineColLoc::get(context, llvm::sys::path::filename(path), 0, 0);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return mlir::emitError(fileLoc)
           << "cannot read '" << path << "': " << buffer.getError().message();
  StringRef bytes = (*buffer)->getBuffer();
  auto phase =
      [&, t = std::chrono::steady_clock::now()](const char *what) mutable {
        auto now = std::chrono::steady_clock::now();
        if (options.onPhase)
          options.onPhase(
              what, std::chrono::duration<double, std::milli>(now - t).count());
        t = now;
      };
  phase("read");

  onnx::ModelProto model;
  if (bytes.empty() ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
      !model.has_graph())
    return mlir::emitError(fileLoc)
           << "'" << path
           << "' is not an ONNX model (the protobuf does not parse, or has "
              "no graph)";
  phase("parse");

  // A shapes-only model's data-less initializers are graph inputs of the
  // same type while libonnx looks at the model (ShapesOnly.cpp).
  FailureOr<bool> shapesOnly = onnx_import::readShapesOnly(model, fileLoc);
  if (failed(shapesOnly))
    return failure();
  onnx_import::LiftedInitializers lifted;
  if (*shapesOnly)
    lifted = onnx_import::liftDatalessInitializers(model);

  if (failed(catchOnnxError(fileLoc,
                            "the ONNX checker rejects '" + path + "': ", [&] {
                              checkModel(model, path);
                            })))
    return failure();
  phase("check");

  applyInputShapes(model, options);
  if (failed(catchOnnxError(
          fileLoc, "ONNX shape inference fails on '" + path + "': ", [&] {
            onnx::shape_inference::InferShapes(model);
          })))
    return failure();
  phase("infer");
  if (*shapesOnly)
    onnx_import::restoreInitializers(model, std::move(lifted));

  Importer importer(context, model, path, options);
  importer.shapesOnly = *shapesOnly;
  auto result = importer.run();
  phase("build");
  return result;
}
