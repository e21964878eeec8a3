//===- GraphImporter.cpp - Walk an ONNX graph into func.func @forward -----===//
//
// Part of the ds project.
//
// The importer's driver: the opset, the function signature (graph inputs,
// then float initializers as parameters, integer initializers as
// constants), one handler call per node in graph order, the optional
// training_info algorithm, and the results (graph outputs, the loss marked,
// training_info's updates). Values are found by ONNX name in
// `Importer::values`.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/IR/Verifier.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

Importer::Importer(MLIRContext *ctx, const onnx::ModelProto &model,
                   StringRef path, const ImportOptions &options)
    : ctx(ctx), model(model), path(path), options(options), builder(ctx),
      fileLoc(FileLineColLoc::get(ctx, llvm::sys::path::filename(path), 0, 0)) {
  baseDir = llvm::sys::path::parent_path(path).str();
}

//===----------------------------------------------------------------------===//
// Nodes
//===----------------------------------------------------------------------===//

std::string onnx_import::nodeName(const onnx::NodeProto &node, size_t index) {
  return node.name().empty() ? node.op_type() + "#" + std::to_string(index)
                             : node.name();
}

Location Importer::nodeLoc(const onnx::NodeProto &node, size_t index) {
  return NameLoc::get(StringAttr::get(ctx, nodeName(node, index)), fileLoc);
}

LogicalResult Importer::importNode(const onnx::NodeProto &node, size_t index) {
  Location loc = nodeLoc(node, index);
  FailureOr<bool> deferred = deferDoubleConstant(node, loc);
  if (failed(deferred) || *deferred)
    return success(succeeded(deferred));
  SmallVector<Value> inputs;
  for (const std::string &in : node.input()) {
    if (in.empty() || doubleScalars.contains(in)) {
      inputs.push_back(Value());
      continue;
    }
    auto it = values.find(in);
    if (it == values.end())
      return mlir::emitError(loc)
             << "node '" << cast<NameLoc>(loc).getName().getValue() << "' ("
             << node.op_type() << "): input '" << in
             << "' is not defined before it";
    inputs.push_back(it->second);
  }
  if (!doubleScalars.empty() &&
      failed(resolveDoubleInputs(node, loc, inputs)))
    return failure();
  NodeContext n(*this, node, loc, std::move(inputs));
  const std::string &domain = node.domain();
  const Handler *handler = handlerTable().lookup(domain, node.op_type());
  if (handler)
    return (*handler)(n);
  if (!HandlerTable::isDefaultDomain(domain))
    return n.error() << "unsupported op '" << node.op_type() << "' of domain '"
                     << domain << "'";
  return n.error() << "unsupported op type '" << node.op_type() << "' (opset "
                   << opset << ")";
}

//===----------------------------------------------------------------------===//
// Module and signature
//===----------------------------------------------------------------------===//

LogicalResult Importer::readOpset() {
  for (const auto &op : model.opset_import())
    if (HandlerTable::isDefaultDomain(op.domain()))
      opset = op.version();
  if (opset != 0)
    return success();
  bool onlyTraining =
      llvm::all_of(model.graph().node(), [](const onnx::NodeProto &n) {
        return n.domain() == kTrainingDomain;
      });
  if (!onlyTraining)
    return error() << "the model imports no default-domain opset";
  opset = 17; // nothing of the default domain is used
  return success();
}

/// --input-shape must name graph inputs.
LogicalResult
Importer::checkInputShapeNames(const llvm::StringSet<> &initNames) {
  const onnx::GraphProto &g = model.graph();
  llvm::StringSet<> inputNames;
  for (const auto &in : g.input())
    if (!initNames.contains(in.name()))
      inputNames.insert(in.name());
  for (const auto &entry : options.inputShapes) {
    if (inputNames.contains(entry.getKey()))
      continue;
    std::string list;
    for (const auto &in : g.input())
      if (!initNames.contains(in.name()))
        list += (list.empty() ? "" : ", ") + in.name();
    return error() << "--input-shape names '" << entry.getKey()
                   << "', which is not a graph input (inputs: " << list << ")";
  }
  return success();
}

OwningOpRef<ModuleOp> Importer::createModule() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  builder.setInsertionPointToEnd(module->getBody());
  (*module)->setAttr(attrs::kSource,
                     builder.getStringAttr(llvm::sys::path::filename(path)));
  (*module)->setAttr(attrs::kOpset, builder.getI64IntegerAttr(opset));
  if (!model.producer_name().empty())
    (*module)->setAttr(
        attrs::kProducer,
        builder.getStringAttr(model.producer_version().empty()
                                  ? model.producer_name()
                                  : model.producer_name() + " " +
                                        model.producer_version()));
  // What ds.export records that ONNX loses (the trainable set, buffers,
  // padding rows), for the ds-trainable-set pass.
  SmallVector<NamedAttribute> record;
  if (shapesOnly)
    (*module)->setAttr(kShapesOnlyKey, builder.getUnitAttr());
  for (const auto &prop : model.metadata_props())
    if (llvm::StringRef(prop.key()).starts_with("ds.") &&
        prop.key() != kShapesOnlyKey)
      record.push_back(builder.getNamedAttr(
          prop.key(), builder.getStringAttr(prop.value())));
  if (!record.empty())
    (*module)->setAttr(attrs::kExportRecord,
                       builder.getDictionaryAttr(record));
  return module;
}

LogicalResult Importer::addInputArguments(const llvm::StringSet<> &initNames,
                                          Signature &sig) {
  for (const auto &in : model.graph().input()) {
    if (initNames.contains(in.name()))
      continue;
    FailureOr<RankedTensorType> t =
        typeFromProto(in.type(), in.name(), "input");
    if (failed(t))
      return failure();
    sig.argTypes.push_back(*t);
    sig.argAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(attrs::kInput, builder.getStringAttr(in.name()))));
    sig.argNames.push_back(in.name());
  }
  return success();
}

LogicalResult Importer::addInitializers(Signature &sig) {
  llvm::StringSet<> seenInit;
  for (const auto &init : model.graph().initializer()) {
    std::string what = "initializer '" + init.name() + "'";
    if (!seenInit.insert(init.name()).second)
      return error() << what << " is defined twice";
    Type elt = elementType(ctx, init.data_type());
    if (!elt)
      return error() << what << " has unsupported element type "
                     << elementTypeName(init.data_type());
    if (init.data_location() == onnx::TensorProto::EXTERNAL &&
        failed(readExternal(init, what, /*load=*/false)))
      return failure();
    if (!isa<FloatType>(elt)) {
      // Integer and bool initializers are constants (shape tensors,
      // position ids, masks); folding may need their values.
      sig.constInits.push_back(&init);
      continue;
    }
    SmallVector<int64_t> shape(init.dims().begin(), init.dims().end());
    sig.paramArgs.push_back(sig.argTypes.size());
    sig.paramInits.push_back(&init);
    sig.argTypes.push_back(RankedTensorType::get(shape, elt));
    sig.argAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        attrs::kParam, builder.getStringAttr(init.name()))));
    sig.argNames.push_back(init.name());
  }
  return success();
}

/// Creates @forward with the signature's arguments (results are set at the
/// end) and binds the arguments and constant initializers by name.
FailureOr<func::FuncOp> Importer::createFunction(const Signature &sig) {
  auto func = func::FuncOp::create(builder, fileLoc, "forward",
                                   builder.getFunctionType(sig.argTypes, {}));
  func.setAllArgAttrs(sig.argAttrs);
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  for (auto [i, name] : llvm::enumerate(sig.argNames))
    values[name] = entry->getArgument(i);
  for (auto [arg, init] : llvm::zip(sig.paramArgs, sig.paramInits))
    paramData[entry->getArgument(arg)] = init;
  for (const onnx::TensorProto *init : sig.constInits) {
    FailureOr<DenseElementsAttr> attr =
        tensorToAttr(*init, "initializer '" + init->name() + "'");
    if (failed(attr))
      return failure();
    values[init->name()] = ConstantOp::create(builder, fileLoc, attr->getType(),
                                              cast<ElementsAttr>(*attr));
  }
  return func;
}

//===----------------------------------------------------------------------===//
// training_info's algorithm (--training-info)
//===----------------------------------------------------------------------===//

/// Builds the first training_info algorithm after the graph; returns its
/// update_binding as (parameter name, new value) pairs.
FailureOr<SmallVector<std::pair<std::string, Value>>>
Importer::importTrainingAlgorithm(const Signature &sig) {
  if (model.training_info_size() == 0)
    return error() << "--training-info: the model has no training_info";
  const onnx::TrainingInfoProto &info = model.training_info(0);
  const onnx::GraphProto &algo = info.algorithm();
  for (const auto &init : algo.initializer()) {
    FailureOr<DenseElementsAttr> attr =
        tensorToAttr(init, "algorithm initializer '" + init.name() + "'");
    if (failed(attr))
      return failure();
    values[init.name()] = ConstantOp::create(builder, fileLoc, attr->getType(),
                                             cast<ElementsAttr>(*attr));
  }
  for (auto [i, node] : llvm::enumerate(algo.node()))
    if (failed(importNode(node, model.graph().node_size() + i)))
      return failure();
  SmallVector<std::pair<std::string, Value>> updates;
  for (const auto &kv : info.update_binding()) {
    auto arg = llvm::find(sig.argNames, kv.key());
    unsigned index = arg - sig.argNames.begin();
    if (arg == sig.argNames.end() || !llvm::is_contained(sig.paramArgs, index))
      return error() << "training_info updates '" << kv.key()
                     << "', which is not a float initializer (ds updates "
                        "float parameters only)";
    auto v = values.find(kv.value());
    if (v == values.end())
      return error() << "training_info binds '" << kv.key() << "' to '"
                     << kv.value() << "', which is not computed";
    if (v->second.getType() != sig.argTypes[index])
      return error() << "training_info binds '" << kv.key()
                     << "' to a value of another type";
    updates.push_back({kv.key(), v->second});
  }
  return updates;
}

//===----------------------------------------------------------------------===//
// Results and the loss
//===----------------------------------------------------------------------===//

/// The graph outputs; the loss is --loss, or else the only scalar float
/// output. Several candidates and no --loss: no loss is marked; training
/// asks for one (the autodiff pass names the candidates), forward runs need
/// none.
FailureOr<GraphOutputs> Importer::collectOutputs() {
  GraphOutputs out;
  for (const auto &o : model.graph().output()) {
    auto it = values.find(o.name());
    if (it == values.end())
      return error() << "graph output '" << o.name()
                     << "' is not computed by any node";
    auto type = cast<ShapedType>(it->second.getType());
    if (type.getNumElements() == 1 && type.getRank() == 0 &&
        isa<FloatType>(type.getElementType()))
      out.scalarNames.push_back(o.name());
    out.values.push_back(it->second);
    out.names.push_back(o.name());
  }
  if (!options.lossName.empty()) {
    auto pos = llvm::find(out.names, options.lossName);
    if (pos == out.names.end())
      return error() << "--loss names '" << options.lossName
                     << "', which is not a graph output (outputs: "
                     << llvm::join(out.names, ", ") << ")";
    if (!llvm::is_contained(out.scalarNames, options.lossName))
      return error() << "--loss names '" << options.lossName
                     << "', which is not a scalar float output";
    out.loss = pos - out.names.begin();
  } else if (out.scalarNames.size() == 1) {
    out.loss = llvm::find(out.names, out.scalarNames[0]) - out.names.begin();
  }
  return out;
}

/// Marks parameters that reach the loss (or, without a loss, any float
/// output) through float values: those are the ones training updates.
static void markTrainable(func::FuncOp func, ArrayRef<unsigned> paramArgs,
                          std::optional<unsigned> lossResult) {
  // One backward sweep from the loss through float values (a parameter is
  // trainable when a chain of float values leads from it to the loss); a
  // forward search per parameter was O(parameters x ops): 1.2 s of GPT-3
  // 175B's import.
  Operation *ret = func.getBody().front().getTerminator();
  auto isFloat = [](Value v) {
    auto st = dyn_cast<ShapedType>(v.getType());
    return st && isa<FloatType>(st.getElementType());
  };
  SmallVector<Value> work;
  llvm::DenseSet<Value> reaching;
  for (auto [i, v] : llvm::enumerate(ret->getOperands()))
    if ((!lossResult || i == *lossResult) && isFloat(v) &&
        reaching.insert(v).second)
      work.push_back(v);
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def)
      continue;
    for (Value operand : def->getOperands())
      if (isFloat(operand) && reaching.insert(operand).second)
        work.push_back(operand);
  }
  for (unsigned arg : paramArgs) {
    Value start = func.getArgument(arg);
    if (isFloat(start) && !func.getArgAttr(arg, "ds.running_stat") &&
        reaching.contains(start))
      func.setArgAttr(arg, attrs::kTrainable, UnitAttr::get(func.getContext()));
  }
}

/// Returns the outputs and updates from @forward and marks them: output
/// names, the loss, updates, trainable parameters, loss candidates.
void Importer::finishFunction(func::FuncOp func, const Signature &sig,
                              const GraphOutputs &outputs,
                              ArrayRef<std::pair<std::string, Value>> updates) {
  SmallVector<Value> results(outputs.values);
  for (const auto &update : updates)
    results.push_back(update.second);
  func::ReturnOp::create(builder, fileLoc, results);
  func.setType(
      builder.getFunctionType(sig.argTypes, ValueRange(results).getTypes()));
  for (auto [i, name] : llvm::enumerate(outputs.names)) {
    func.setResultAttr(i, attrs::kOutput, builder.getStringAttr(name));
    if (outputs.loss && *outputs.loss == i)
      func.setResultAttr(i, attrs::kLoss, builder.getUnitAttr());
  }
  for (auto [i, update] : llvm::enumerate(updates)) {
    unsigned r = outputs.names.size() + i;
    func.setResultAttr(r, "ds.update", builder.getStringAttr(update.first));
    func.setResultAttr(r, attrs::kOutput,
                       builder.getStringAttr("update:" + update.first));
  }
  markTrainable(func, sig.paramArgs, outputs.loss);
  if (!outputs.loss && outputs.scalarNames.size() > 1) {
    SmallVector<StringRef> names(outputs.scalarNames.begin(),
                                 outputs.scalarNames.end());
    func->setAttr("ds.loss_candidates", builder.getStrArrayAttr(names));
  }
}

//===----------------------------------------------------------------------===//
// The whole import
//===----------------------------------------------------------------------===//

FailureOr<OwningOpRef<ModuleOp>> Importer::run() {
  const onnx::GraphProto &g = model.graph();
  if (failed(readOpset()) || failed(checkExport()))
    return failure();
  for (const auto &vi : g.value_info())
    inferredTypes[vi.name()] = &vi.type();
  for (const auto &vi : g.output())
    inferredTypes[vi.name()] = &vi.type();

  llvm::StringSet<> initNames;
  for (const auto &init : g.initializer())
    initNames.insert(init.name());
  if (failed(checkInputShapeNames(initNames)))
    return failure();

  OwningOpRef<ModuleOp> module = createModule();
  Signature sig;
  if (failed(addInputArguments(initNames, sig)) || failed(addInitializers(sig)))
    return failure();
  FailureOr<func::FuncOp> func = createFunction(sig);
  if (failed(func))
    return failure();

  for (auto [i, node] : llvm::enumerate(g.node()))
    if (failed(importNode(node, i)))
      return failure();

  SmallVector<std::pair<std::string, Value>> updates;
  if (options.runTrainingInfo) {
    auto algorithmUpdates = importTrainingAlgorithm(sig);
    if (failed(algorithmUpdates))
      return failure();
    updates = std::move(*algorithmUpdates);
  }
  for (auto &update : stateUpdates) {
    if (llvm::any_of(updates, [&](const auto &u) { return u.first == update.first; }))
      return error() << "initializer '" << update.first
                     << "' is updated both by training_info and by the graph";
    updates.push_back(update);
  }

  FailureOr<GraphOutputs> outputs = collectOutputs();
  if (failed(outputs))
    return failure();
  finishFunction(*func, sig, *outputs, updates);

  if (failed(importTrainingInfo(*module)))
    return failure();
  if (failed(mlir::verify(*module)))
    return failure();
  return module;
}
