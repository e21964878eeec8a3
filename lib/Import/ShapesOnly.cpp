//===- ShapesOnly.cpp - Models whose initializers carry shapes, no data ---===//
//
// Part of the ds project.
//
// A shapes-only export (examples/gpt/export_gpt.py --shapes-only, docs/
// planner.md "Models without weights") marks itself with the metadata
// `ds.shapes_only` = `1` and gives every float initializer its dims and type
// but no data. The importer checks the mark against the initializers
// (either way round: a mark with weights, or data-less weights without the
// mark, is an error naming the initializer), hides the data-less
// initializers from the ONNX checker and shape inference as graph inputs
// of the same type (the checker wants one data field per initializer), and
// puts them back before the graph is built. Nothing here reads or copies
// tensor data.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

static bool isFloatType(int32_t t) {
  return t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::FLOAT16 ||
         t == onnx::TensorProto::BFLOAT16 || t == onnx::TensorProto::DOUBLE;
}

bool onnx_import::hasTensorData(const onnx::TensorProto &t) {
  return t.has_raw_data() || t.float_data_size() || t.int32_data_size() ||
         t.int64_data_size() || t.double_data_size() ||
         t.uint64_data_size() || t.string_data_size() ||
         t.data_location() == onnx::TensorProto::EXTERNAL;
}

static int64_t elementCount(const onnx::TensorProto &t) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    n *= d;
  return n;
}

static std::string dimsStr(const onnx::TensorProto &t) {
  SmallVector<int64_t> dims(t.dims().begin(), t.dims().end());
  return shapeStr(dims);
}

FailureOr<bool> onnx_import::readShapesOnly(const onnx::ModelProto &model,
                                            Location loc) {
  const onnx::StringStringEntryProto *mark = nullptr;
  for (const auto &prop : model.metadata_props())
    if (prop.key() == kShapesOnlyKey)
      mark = &prop;
  if (mark && mark->value() != "1")
    return emitError(loc) << "metadata '" << kShapesOnlyKey << "' is '"
                          << mark->value()
                          << "'; a shapes-only model says '1' (docs/"
                             "planner.md, Models without weights)";
  for (const auto &init : model.graph().initializer()) {
    if (!isFloatType(init.data_type()))
      continue;
    bool data = hasTensorData(init);
    if (mark && data)
      return emitError(loc)
             << "initializer '" << init.name()
             << "' carries data, but the model is marked shapes-only "
                "(metadata '"
             << kShapesOnlyKey
             << "' = '1'): a shapes-only model has no data in any float "
                "initializer";
    if (!mark && !data && elementCount(init) > 0)
      return emitError(loc)
             << "initializer '" << init.name() << "' has shape "
             << dimsStr(init)
             << " and no data; a model without weights must be marked "
                "shapes-only (metadata '"
             << kShapesOnlyKey
             << "' = '1', as examples/gpt/export_gpt.py --shapes-only "
                "writes)";
  }
  return mark != nullptr;
}

LiftedInitializers
onnx_import::liftDatalessInitializers(onnx::ModelProto &model) {
  LiftedInitializers lifted;
  onnx::GraphProto &g = *model.mutable_graph();
  llvm::StringSet<> inputs;
  for (const auto &in : g.input())
    inputs.insert(in.name());
  lifted.saved = g.initializer(); // no float data to copy
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (const auto &init : g.initializer()) {
    if (hasTensorData(init) || !isFloatType(init.data_type())) {
      *kept.Add() = init;
      continue;
    }
    if (inputs.contains(init.name()))
      continue; // an IR < 4 model lists it as an input already
    onnx::ValueInfoProto *in = g.add_input();
    in->set_name(init.name());
    auto *tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(init.data_type());
    auto *shape = tt->mutable_shape();
    for (int64_t d : init.dims())
      shape->add_dim()->set_dim_value(d);
    lifted.addedInputs.push_back(init.name());
  }
  *g.mutable_initializer() = std::move(kept);
  return lifted;
}

void onnx_import::restoreInitializers(onnx::ModelProto &model,
                                      LiftedInitializers lifted) {
  onnx::GraphProto &g = *model.mutable_graph();
  llvm::StringSet<> added;
  for (const std::string &name : lifted.addedInputs)
    added.insert(name);
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (auto &in : *g.mutable_input())
    if (!added.contains(in.name()))
      *inputs.Add() = std::move(in);
  *g.mutable_input() = std::move(inputs);
  *g.mutable_initializer() = std::move(lifted.saved);
}
