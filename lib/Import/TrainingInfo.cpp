//===- TrainingInfo.cpp - Validate and record ONNX training_info ----------===//
//
// Part of the ds project.
//
// Checks each TrainingInfoProto against the model (its nodes' domains and
// inputs, the shape of its training-domain nodes, its bindings) and records
// it on the module as the `ds.training_info` attribute: an array of
// dictionaries holding the algorithm and initialization nodes and both
// bindings. Building the algorithm into the step (--training-info) is the
// graph importer's job.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

namespace {

/// Flattens one AttributeProto to an MLIR attribute; null for the kinds
/// (tensors, graphs) that are not recorded.
Attribute attrToMlir(Builder &b, const onnx::AttributeProto &a) {
  switch (a.type()) {
  case onnx::AttributeProto::INT:
    return b.getI64IntegerAttr(a.i());
  case onnx::AttributeProto::FLOAT:
    return b.getF32FloatAttr(a.f());
  case onnx::AttributeProto::STRING:
    return b.getStringAttr(a.s());
  case onnx::AttributeProto::INTS:
    return b.getI64ArrayAttr(
        SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
  case onnx::AttributeProto::FLOATS:
    return b.getF32ArrayAttr(
        SmallVector<float>(a.floats().begin(), a.floats().end()));
  case onnx::AttributeProto::STRINGS: {
    SmallVector<StringRef> s(a.strings().begin(), a.strings().end());
    return b.getStrArrayAttr(s);
  }
  default:
    return nullptr;
  }
}

/// One node as a dictionary: op_type, domain, name, inputs, outputs and
/// attributes.
DictionaryAttr nodeToAttr(Builder &b, const onnx::NodeProto &node) {
  SmallVector<NamedAttribute> nattrs;
  for (const auto &a : node.attribute())
    if (Attribute v = attrToMlir(b, a))
      nattrs.push_back(b.getNamedAttr(a.name(), v));
  SmallVector<StringRef> ins(node.input().begin(), node.input().end());
  SmallVector<StringRef> outs(node.output().begin(), node.output().end());
  return b.getDictionaryAttr({
      b.getNamedAttr("op_type", b.getStringAttr(node.op_type())),
      b.getNamedAttr("domain", b.getStringAttr(node.domain())),
      b.getNamedAttr("name", b.getStringAttr(node.name())),
      b.getNamedAttr("inputs", b.getStrArrayAttr(ins)),
      b.getNamedAttr("outputs", b.getStrArrayAttr(outs)),
      b.getNamedAttr("attributes", b.getDictionaryAttr(nattrs)),
  });
}

using Bindings =
    google::protobuf::RepeatedPtrField<onnx::StringStringEntryProto>;

/// Validates the training_info entries of one model against its main graph.
class TrainingInfoReader {
public:
  TrainingInfoReader(Importer &importer)
      : importer(importer), b(importer.builder) {
    const onnx::GraphProto &g = importer.model.graph();
    for (const auto &init : g.initializer()) {
      initializers.insert(init.name());
      mainValues.insert(init.name());
    }
    for (const auto &in : g.input())
      mainValues.insert(in.name());
    for (const auto &node : g.node())
      for (const auto &out : node.output())
        mainValues.insert(out);
  }

  /// training_info[`index`] as a dictionary attribute.
  FailureOr<DictionaryAttr> read(const onnx::TrainingInfoProto &info,
                                 size_t index);

private:
  LogicalResult readGraph(const onnx::GraphProto &graph, StringRef part,
                          llvm::StringSet<> &produced,
                          SmallVector<Attribute> &nodes);
  LogicalResult checkNode(const onnx::NodeProto &node, StringRef at,
                          const llvm::StringSet<> &produced);
  LogicalResult checkGradient(const onnx::NodeProto &node, StringRef at);
  FailureOr<DictionaryAttr> readBindings(const Bindings &list,
                                         const llvm::StringSet<> &produced,
                                         StringRef kind);

  Importer &importer;
  Builder &b;
  llvm::StringSet<> initializers, mainValues;
  /// "training_info[i]", the prefix of every message.
  std::string where;
};

} // namespace

FailureOr<DictionaryAttr>
TrainingInfoReader::read(const onnx::TrainingInfoProto &info, size_t index) {
  where = "training_info[" + std::to_string(index) + "]";
  llvm::StringSet<> algoValues, initValues;
  SmallVector<Attribute> algoNodes, initNodes;
  if (failed(readGraph(info.algorithm(), "algorithm", algoValues, algoNodes)) ||
      failed(readGraph(info.initialization(), "initialization", initValues,
                       initNodes)))
    return failure();
  FailureOr<DictionaryAttr> update =
      readBindings(info.update_binding(), algoValues, "update_binding");
  if (failed(update))
    return failure();
  FailureOr<DictionaryAttr> init = readBindings(
      info.initialization_binding(), initValues, "initialization_binding");
  if (failed(init))
    return failure();
  return b.getDictionaryAttr({
      b.getNamedAttr("algorithm", b.getArrayAttr(algoNodes)),
      b.getNamedAttr("initialization", b.getArrayAttr(initNodes)),
      b.getNamedAttr("update_binding", *update),
      b.getNamedAttr("initialization_binding", *init),
  });
}

LogicalResult TrainingInfoReader::readGraph(const onnx::GraphProto &graph,
                                            StringRef part,
                                            llvm::StringSet<> &produced,
                                            SmallVector<Attribute> &nodes) {
  for (const auto &in : graph.input())
    produced.insert(in.name());
  for (const auto &init : graph.initializer())
    produced.insert(init.name());
  for (const auto &node : graph.node()) {
    std::string nname = node.name().empty() ? node.op_type() : node.name();
    std::string at = where + "." + part.str() + " node '" + nname + "' (" +
                     node.op_type() + ")";
    if (failed(checkNode(node, at, produced)))
      return failure();
    for (const auto &out : node.output())
      produced.insert(out);
    nodes.push_back(nodeToAttr(b, node));
  }
  return success();
}

LogicalResult TrainingInfoReader::checkNode(const onnx::NodeProto &node,
                                            StringRef at,
                                            const llvm::StringSet<> &produced) {
  bool training = node.domain() == kTrainingDomain;
  if (!training && !HandlerTable::isDefaultDomain(node.domain()))
    return importer.error()
           << at << ": unsupported domain '" << node.domain() << "'";
  for (const auto &in : node.input())
    if (!in.empty() && !produced.contains(in) && !mainValues.contains(in))
      return importer.error()
             << at << ": input '" << in << "' names no value of the model";
  if (!training)
    return success();
  const std::string &op = node.op_type();
  if (op == "Gradient")
    return checkGradient(node, at);
  if (op == "Adam" || op == "Momentum" || op == "Adagrad") {
    size_t nin = node.input_size(), nout = node.output_size();
    size_t per = op == "Adam" ? 4 : 3;
    if (nin < 2 + per || (nin - 2) % per != 0 ||
        nout != (nin - 2) / per * (per - 1))
      return importer.error() << at << ": " << nin << " inputs and " << nout
                              << " outputs do not fit " << op << " (R, T, then "
                              << per << " tensors per parameter)";
    return success();
  }
  return importer.error() << at << ": unsupported training op '" << op << "'";
}

LogicalResult TrainingInfoReader::checkGradient(const onnx::NodeProto &node,
                                                StringRef at) {
  std::vector<std::string> xs;
  std::string y;
  for (const auto &a : node.attribute()) {
    if (a.name() == "xs")
      xs.assign(a.strings().begin(), a.strings().end());
    else if (a.name() == "y")
      y = a.s();
  }
  if (xs.empty() || y.empty())
    return importer.error() << at << ": needs attributes 'xs' and 'y'";
  for (const auto &x : xs)
    if (!mainValues.contains(x))
      return importer.error() << at << ": xs names '" << x
                              << "', which is not an input or initializer";
  if (!mainValues.contains(y))
    return importer.error()
           << at << ": y names '" << y << "', which is no value of the graph";
  size_t nout = node.output_size();
  if (nout != xs.size())
    return importer.error()
           << at << ": has " << nout << " outputs for " << xs.size() << " xs";
  return success();
}

FailureOr<DictionaryAttr> TrainingInfoReader::readBindings(
    const Bindings &list, const llvm::StringSet<> &produced, StringRef kind) {
  SmallVector<NamedAttribute> out;
  for (const auto &kv : list) {
    if (!initializers.contains(kv.key()))
      return importer.error() << where << "." << kind << ": key '" << kv.key()
                              << "' is not an initializer of the model";
    if (!produced.contains(kv.value()))
      return importer.error()
             << where << "." << kind << ": value '" << kv.value()
             << "' is not produced by the "
             << (kind == "update_binding" ? "algorithm" : "initialization");
    out.push_back(b.getNamedAttr(kv.key(), b.getStringAttr(kv.value())));
  }
  return b.getDictionaryAttr(out);
}

LogicalResult Importer::importTrainingInfo(ModuleOp module) {
  if (model.training_info_size() == 0)
    return success();
  TrainingInfoReader reader(*this);
  SmallVector<Attribute> infos;
  for (auto [index, info] : llvm::enumerate(model.training_info())) {
    FailureOr<DictionaryAttr> attr = reader.read(info, index);
    if (failed(attr))
      return failure();
    infos.push_back(*attr);
  }
  module->setAttr(attrs::kTrainingInfo, builder.getArrayAttr(infos));
  return success();
}
