//===- ImporterImpl.h - The ONNX importer's private interface ---*- C++ -*-===//
//
// Part of the ds project.
//
// What the importer's files share: the `Importer` (the model, the
// name->Value table, the builder), the `NodeContext` a handler sees of one
// node, and the `HandlerTable` that maps (domain, op type) to a handler.
// Each family of ONNX ops lives in its own file and registers its handlers
// with one `register...Handlers(HandlerTable &)` function, called from
// HandlerTable.cpp: adding a family is a new file and one line there.
//
// Only OnnxImporter.cpp talks to the throwing parts of libonnx (checker and
// shape inference); everything here is compiled without exceptions.
//
//===----------------------------------------------------------------------===//

#ifndef DS_LIB_IMPORT_IMPORTERIMPL_H
#define DS_LIB_IMPORT_IMPORTERIMPL_H

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"
#include "ds/Import/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mlir::ds::onnx_import {

/// The domain of ONNX's training ops (Gradient, Adam, Adagrad, Momentum).
constexpr llvm::StringLiteral kTrainingDomain = "ai.onnx.preview.training";

//===----------------------------------------------------------------------===//
// Types and tensors (Tensors.cpp)
//===----------------------------------------------------------------------===//

/// Maps an ONNX element type to a ds element type; null if unsupported.
Type elementType(MLIRContext *ctx, int32_t onnxType);
/// The ONNX name of an element type (`DOUBLE`), for messages.
std::string elementTypeName(int32_t onnxType);
inline std::string shapeStr(ArrayRef<int64_t> shape) {
  return shapes::toString(shape);
}

//===----------------------------------------------------------------------===//
// Shapes-only models (ShapesOnly.cpp; docs/planner.md "Models without
// weights")
//===----------------------------------------------------------------------===//

/// The metadata key that marks a model whose float initializers carry
/// shapes and no data; also the unit attribute the importer puts on the
/// module (the plan writer reads it: no weights to hash, a plan ds-run
/// refuses).
constexpr llvm::StringLiteral kShapesOnlyKey = "ds.shapes_only";

/// Whether `t` holds data (any data field, or external data).
bool hasTensorData(const onnx::TensorProto &t);
/// Whether the model is marked shapes-only; an error (at `loc`) when the
/// mark and the initializers disagree or the mark's value is not "1".
FailureOr<bool> readShapesOnly(const onnx::ModelProto &model, Location loc);

/// Data-less float initializers moved to graph inputs of the same type
/// while the ONNX checker and shape inference run.
struct LiftedInitializers {
  google::protobuf::RepeatedPtrField<onnx::TensorProto> saved;
  std::vector<std::string> addedInputs;
};
LiftedInitializers liftDatalessInitializers(onnx::ModelProto &model);
/// Puts the initializers back in their order and drops the added inputs.
void restoreInitializers(onnx::ModelProto &model, LiftedInitializers lifted);

//===----------------------------------------------------------------------===//
// Importer: one model being imported
//===----------------------------------------------------------------------===//

/// The function's arguments as they are collected: graph inputs first, then
/// float initializers (parameters); integer and bool initializers become
/// constants instead.
struct Signature {
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<std::string> argNames;
  /// Argument indices of the parameters, and their initializers.
  SmallVector<unsigned> paramArgs;
  SmallVector<const onnx::TensorProto *> paramInits;
  /// Initializers built as constants.
  SmallVector<const onnx::TensorProto *> constInits;
};

/// The graph outputs, and which of them is the loss.
struct GraphOutputs {
  SmallVector<Value> values;
  SmallVector<std::string> names;
  /// The outputs that are scalar floats: the loss candidates.
  SmallVector<std::string> scalarNames;
  std::optional<unsigned> loss;
};

/// Imports one ModelProto (already checked and shape-inferred) into a
/// module holding `func.func @forward`.
class Importer {
public:
  Importer(MLIRContext *ctx, const onnx::ModelProto &model, StringRef path,
           const ImportOptions &options);

  FailureOr<OwningOpRef<ModuleOp>> run();

  /// An error located at the model file.
  InFlightDiagnostic error() { return mlir::emitError(fileLoc); }

  // Types and tensors (Tensors.cpp).
  FailureOr<RankedTensorType> typeFromProto(const onnx::TypeProto &type,
                                            StringRef name, StringRef what);
  FailureOr<DenseElementsAttr> tensorToAttr(const onnx::TensorProto &tensor,
                                            StringRef what);
  /// Checks (and with `load`, reads) a tensor's external data file.
  FailureOr<std::string> readExternal(const onnx::TensorProto &tensor,
                                      StringRef what, bool load);

  /// The export as a whole, before anything is built (ExportChecks.cpp):
  /// eval mode, unsupported op types (errors), constant folding (a warning).
  LogicalResult checkExport();

  /// Builds one node through its handler (GraphImporter.cpp).
  LogicalResult importNode(const onnx::NodeProto &node, size_t index);
  /// Validates training_info and records it on the module (TrainingInfo.cpp).
  LogicalResult importTrainingInfo(ModuleOp module);

  MLIRContext *ctx;
  const onnx::ModelProto &model;
  std::string path, baseDir;
  const ImportOptions &options;
  OpBuilder builder;
  Location fileLoc;
  int64_t opset = 0;
  /// The name->Value table: every ONNX value built so far.
  llvm::StringMap<Value> values;
  /// Types from ONNX shape inference (value_info and graph outputs).
  llvm::StringMap<const onnx::TypeProto *> inferredTypes;
  /// The model is shapes-only (metadata ds.shapes_only): its float
  /// initializers have no data.
  bool shapesOnly = false;
  /// Initializers held as parameter arguments, for reading their data when
  /// a node needs a constant (a Dropout ratio, a Range bound).
  llvm::DenseMap<Value, const onnx::TensorProto *> paramData;
  /// State the step writes besides the optimizer's: (initializer name, new
  /// value), e.g. BatchNormalization's running statistics. They become
  /// `ds.update` results like training_info's updates.
  SmallVector<std::pair<std::string, Value>> stateUpdates;

  // DOUBLE scalar constants (Python number literals), built at each
  // consumer in its float type (DoubleConstants.cpp).
  struct DoubleScalar {
    double value;
    int64_t rank;
  };
  llvm::StringMap<DoubleScalar> doubleScalars;
  llvm::StringMap<llvm::DenseMap<Type, Value>> doubleConstants;
  /// Holds back a DOUBLE scalar Constant node (true), refuses a DOUBLE
  /// tensor, leaves any other node to its handler (false).
  FailureOr<bool> deferDoubleConstant(const onnx::NodeProto &node,
                                      Location loc);
  /// Builds the node's DOUBLE scalar inputs in its float type.
  LogicalResult resolveDoubleInputs(const onnx::NodeProto &node, Location loc,
                                    SmallVectorImpl<Value> &inputs);

private:
  // The phases of run() (GraphImporter.cpp).
  LogicalResult readOpset();
  LogicalResult checkInputShapeNames(const llvm::StringSet<> &initNames);
  OwningOpRef<ModuleOp> createModule();
  LogicalResult addInputArguments(const llvm::StringSet<> &initNames,
                                  Signature &sig);
  LogicalResult addInitializers(Signature &sig);
  FailureOr<func::FuncOp> createFunction(const Signature &sig);
  FailureOr<SmallVector<std::pair<std::string, Value>>>
  importTrainingAlgorithm(const Signature &sig);
  FailureOr<GraphOutputs> collectOutputs();
  void finishFunction(func::FuncOp func, const Signature &sig,
                      const GraphOutputs &outputs,
                      ArrayRef<std::pair<std::string, Value>> updates);
  Location nodeLoc(const onnx::NodeProto &node, size_t index);
  // The parts of checkExport() (ExportChecks.cpp).
  LogicalResult checkTrainingMode();
  LogicalResult checkSupportedOps();
  void warnConstantFolded();
};

/// How messages name a node: its name, or `OpType#index` when it has none.
std::string nodeName(const onnx::NodeProto &node, size_t index);

//===----------------------------------------------------------------------===//
// NodeContext: what a handler sees of one node
//===----------------------------------------------------------------------===//

class NodeContext {
public:
  NodeContext(Importer &importer, const onnx::NodeProto &node, Location loc,
              SmallVector<Value> inputs)
      : importer(importer), node(node), loc(loc), inputs(std::move(inputs)),
        errorFn([this] { return error(); }) {}

  /// An error located at the node, its message starting with the node.
  InFlightDiagnostic error() const {
    InFlightDiagnostic diag = mlir::emitError(loc);
    diag << "node '" << name() << "' (" << node.op_type() << "): ";
    return diag;
  }
  std::string name() const;

  size_t numInputs() const { return inputs.size(); }
  /// Input `i`, or null when absent (missing or empty name).
  Value input(size_t i) const {
    return i < inputs.size() ? inputs[i] : Value();
  }
  ArrayRef<int64_t> shape(size_t i) const {
    return cast<ShapedType>(inputs[i].getType()).getShape();
  }
  Type elementTypeOf(size_t i) const {
    return cast<ShapedType>(inputs[i].getType()).getElementType();
  }
  size_t numOutputs() const { return node.output_size(); }
  bool outputUsed(size_t i) const {
    return i < static_cast<size_t>(node.output_size()) &&
           !node.output(i).empty();
  }

  /// Requires inputs [0, min) present and at most `max` given.
  LogicalResult expectInputs(size_t min, size_t max) const;
  /// Requires input `i` to have a float element type.
  LogicalResult requireFloat(size_t i) const;

  const onnx::AttributeProto *attr(StringRef key) const;
  int64_t intAttr(StringRef key, int64_t dflt) const {
    const onnx::AttributeProto *a = attr(key);
    return a ? a->i() : dflt;
  }
  float floatAttr(StringRef key, float dflt) const {
    const onnx::AttributeProto *a = attr(key);
    return a ? a->f() : dflt;
  }
  std::string stringAttr(StringRef key, StringRef dflt) const {
    const onnx::AttributeProto *a = attr(key);
    return a ? a->s() : dflt.str();
  }
  std::optional<SmallVector<int64_t>> intsAttr(StringRef key) const;

  /// The values of a constant integer input; failure (with an error naming
  /// `what`) when the input is not a compile-time constant.
  FailureOr<SmallVector<int64_t>> constInts(size_t i, StringRef what) const;
  /// Same for a float scalar input.
  FailureOr<double> constFloat(size_t i, StringRef what) const;
  /// Same for a bool scalar input.
  FailureOr<bool> constBool(size_t i, StringRef what) const;
  /// Whether input `i` is known at compile time (a constant or an
  /// initializer).
  bool isConstant(size_t i) const;
  /// Axes of Squeeze/Unsqueeze/Reduce*: an attribute before opset
  /// `inputSince`, an optional constant input 1 from then on.
  FailureOr<std::optional<SmallVector<int64_t>>>
  axesOperand(int64_t inputSince) const;

  /// The static type ONNX shape inference gave output `i`, if any.
  RankedTensorType inferredOutputType(size_t i) const;
  /// The result type of a value-dependent shape op whose shape operand is
  /// not a constant, from ONNX shape inference; an error if it is unknown.
  FailureOr<RankedTensorType> requireInferredOutputType(StringRef what) const;

  /// Normalizes an axis against `rank`, reporting at the node.
  FailureOr<int64_t> axis(int64_t value, int64_t rank) const {
    return shapes::normalizeAxis(value, rank, [&] { return error(); });
  }
  shapes::EmitErrorFn emitFn() const { return errorFn; }

  /// Creates `OpTy`, folds it if its operands allow, and binds its results
  /// to the node's outputs in order.
  template <typename OpTy, typename... Args> LogicalResult emit(Args &&...args);
  /// Binds already computed values to the node's outputs.
  LogicalResult bind(ValueRange values);

  OpBuilder &builder() const { return importer.builder; }
  int64_t opset() const { return importer.opset; }
  MLIRContext *ctx() const { return loc.getContext(); }
  /// A result type (plain Type, so that builders taking Type or TypeRange
  /// are not ambiguous).
  Type tensor(ArrayRef<int64_t> shape, Type elt) const {
    return RankedTensorType::get(shape, elt);
  }
  Value constant(RankedTensorType type, Attribute value) const;

  Importer &importer;
  const onnx::NodeProto &node;
  Location loc;
  SmallVector<Value> inputs;
  std::function<InFlightDiagnostic()> errorFn;
};

template <typename OpTy, typename... Args>
LogicalResult NodeContext::emit(Args &&...args) {
  OpTy op = OpTy::create(builder(), loc, std::forward<Args>(args)...);
  SmallVector<Value> folded;
  if (succeeded(builder().tryFold(op, folded)) && !folded.empty()) {
    op->erase();
    return bind(folded);
  }
  return bind(op->getResults());
}

/// The constant value of `v`: a folded constant, or the data of an
/// initializer (a parameter argument) read at import time; null otherwise.
DenseElementsAttr constantValue(Importer &importer, Value v);
/// Records that graph input `v` (or the graph input it slices without
/// narrowing `axis`) holds the batch along `axis`: ds-run splits its data
/// over data-parallel ranks along that axis (`ds.batch_axis`).
void recordBatchAxis(Value v, int64_t axis);

//===----------------------------------------------------------------------===//
// HandlerTable: the handler of each ONNX op type
//===----------------------------------------------------------------------===//

using Handler = std::function<LogicalResult(NodeContext &)>;

/// Handlers by domain and op type. The default domain is "" (its alias
/// "ai.onnx" is looked up as "").
class HandlerTable {
public:
  /// Registers the handler of a default-domain op type.
  void add(StringRef opType, Handler handler) {
    add("", opType, std::move(handler));
  }
  void add(StringRef domain, StringRef opType, Handler handler);

  /// The handler of `opType` in `domain`; null when there is none.
  const Handler *lookup(StringRef domain, StringRef opType) const;

  /// Every op type with a handler, sorted: default-domain ones by name,
  /// others as `domain.OpType`.
  std::vector<std::string> opNames() const;

  /// Op types registered twice (a registration bug): the first handler is
  /// kept and the importer refuses to run with an error naming them.
  const std::vector<std::string> &duplicateOps() const { return duplicates; }

  static bool isDefaultDomain(StringRef domain) {
    return domain.empty() || domain == "ai.onnx";
  }

private:
  llvm::StringMap<llvm::StringMap<Handler>> byDomain;
  std::vector<std::string> duplicates;
};

/// The table of every handler, built once by the register functions below.
const HandlerTable &handlerTable();

// One function per family of ops, each in its own file.
void registerElementwiseHandlers(HandlerTable &table);
void registerLinalgHandlers(HandlerTable &table);
void registerConvHandlers(HandlerTable &table);
void registerMovementHandlers(HandlerTable &table);
void registerReductionHandlers(HandlerTable &table);
void registerElementIndexHandlers(HandlerTable &table);
void registerShapeHandlers(HandlerTable &table);
void registerLossHandlers(HandlerTable &table);
void registerTrainingDomainHandlers(HandlerTable &table);
void registerPoolingHandlers(HandlerTable &table);
void registerRecurrentHandlers(HandlerTable &table); // LSTM, GRU
void registerBatchNormHandlers(HandlerTable &table);
// Misc family (issue 22): TopK, Einsum, EmbeddingBag's graph.
void registerTopKHandlers(HandlerTable &table);
void registerEinsumHandlers(HandlerTable &table);
void registerLoopHandlers(HandlerTable &table);
/// torch's EmbeddingBag Loop (EmbeddingBagHandlers.cpp): whether body `g`
/// looks like one (a Gather of a parameter by a Slice); and its import as
/// ds.embedding_bag for a Loop of `trips` bags, bound to the Loop's
/// output. When the body does not match, `why` says what did not and
/// nothing is built.
bool looksLikeEmbeddingBag(Importer &imp, const onnx::GraphProto &g);
LogicalResult importEmbeddingBagLoop(NodeContext &n, const onnx::GraphProto &g,
                                     int64_t trips, std::string &why);
void registerSpatialHandlers(HandlerTable &table); // Resize, Pad, InstanceNorm

} // namespace mlir::ds::onnx_import

#endif // DS_LIB_IMPORT_IMPORTERIMPL_H
