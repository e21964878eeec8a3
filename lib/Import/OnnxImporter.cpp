//===- OnnxImporter.cpp - ONNX ModelProto to the ds dialect ---------------===//
//
// Part of the ds project.
//
// The importer reads a ModelProto with libonnx, runs the ONNX checker and
// shape inference, and builds `func.func @forward` of ds ops. Each ONNX op
// type has one handler; every handler computes its result types with the
// shape rules of DsShapes.h, so that a malformed model is reported at its
// node instead of failing an op verifier later. Ops are folded as they are
// built, which turns PyTorch's shape arithmetic into constants on the fly:
// later Reshape/Expand/Slice nodes then see constant operands.
//
// libonnx reports errors by throwing; this file is compiled with exceptions
// and no exception leaves it.
//
//===----------------------------------------------------------------------===//

#include "ds/Import/OnnxImporter.h"
#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>

using namespace mlir;
using namespace mlir::ds;
namespace sh = mlir::ds::shapes;

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

namespace {

constexpr StringLiteral kTrainingDomain = "ai.onnx.preview.training";

/// Maps an ONNX element type to a ds element type; null if unsupported.
Type elementType(MLIRContext *ctx, int32_t onnxType) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT: return Float32Type::get(ctx);
  case onnx::TensorProto::FLOAT16: return Float16Type::get(ctx);
  case onnx::TensorProto::BFLOAT16: return BFloat16Type::get(ctx);
  case onnx::TensorProto::INT64: return IntegerType::get(ctx, 64);
  case onnx::TensorProto::INT32: return IntegerType::get(ctx, 32);
  case onnx::TensorProto::BOOL: return IntegerType::get(ctx, 1);
  default: return nullptr;
  }
}

std::string elementTypeName(int32_t onnxType) {
  if (onnx::TensorProto::DataType_IsValid(onnxType))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(onnxType));
  return "type #" + std::to_string(onnxType);
}

std::string shapeStr(ArrayRef<int64_t> shape) { return sh::toString(shape); }

class Importer;

/// What a handler sees of one node.
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
  Value input(size_t i) const { return i < inputs.size() ? inputs[i] : Value(); }
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
  LogicalResult expectInputs(size_t min, size_t max) const {
    for (size_t i = 0; i < min; ++i)
      if (!input(i))
        return error() << "missing required input " << i;
    if (inputs.size() > max)
      return error() << "takes at most " << max << " inputs, got "
                     << inputs.size();
    return success();
  }

  const onnx::AttributeProto *attr(StringRef key) const {
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == key)
        return &a;
    return nullptr;
  }
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
  std::optional<SmallVector<int64_t>> intsAttr(StringRef key) const {
    const onnx::AttributeProto *a = attr(key);
    if (!a)
      return std::nullopt;
    return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
  }

  /// The values of a constant integer input; failure (with an error naming
  /// `what`) when the input is not a compile-time constant.
  FailureOr<SmallVector<int64_t>> constInts(size_t i, StringRef what) const;
  /// Same for a float scalar input.
  FailureOr<double> constFloat(size_t i, StringRef what) const;
  /// Same for a bool scalar input.
  FailureOr<bool> constBool(size_t i, StringRef what) const;

  /// The static type ONNX shape inference gave output `i`, if any.
  RankedTensorType inferredOutputType(size_t i) const;

  /// Normalizes an axis against `rank`, reporting at the node.
  FailureOr<int64_t> axis(int64_t value, int64_t rank) const {
    return sh::normalizeAxis(value, rank, [&] { return error(); });
  }
  sh::EmitErrorFn emitFn() const { return errorFn; }

  /// Creates `OpTy`, folds it if its operands allow, and binds its results
  /// to the node's outputs in order.
  template <typename OpTy, typename... Args>
  LogicalResult emit(Args &&...args);
  /// Binds already computed values to the node's outputs.
  LogicalResult bind(ValueRange values);

  OpBuilder &builder() const;
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

using Handler = std::function<LogicalResult(NodeContext &)>;

class Importer {
public:
  Importer(MLIRContext *ctx, const onnx::ModelProto &model, StringRef path,
           const ImportOptions &options)
      : ctx(ctx), model(model), path(path), options(options),
        builder(ctx), fileLoc(FileLineColLoc::get(ctx, llvm::sys::path::filename(path), 0, 0)) {
    baseDir = llvm::sys::path::parent_path(path).str();
  }

  FailureOr<OwningOpRef<ModuleOp>> run();

  InFlightDiagnostic error() { return mlir::emitError(fileLoc); }

  MLIRContext *ctx;
  const onnx::ModelProto &model;
  std::string path, baseDir;
  const ImportOptions &options;
  OpBuilder builder;
  Location fileLoc;
  int64_t opset = 0;
  llvm::StringMap<Value> values;
  llvm::StringMap<const onnx::TypeProto *> inferredTypes;
  /// Initializers held as parameter arguments, for reading their data when
  /// a node needs a constant (a Dropout ratio, a Range bound).
  llvm::DenseMap<Value, const onnx::TensorProto *> paramData;

  FailureOr<RankedTensorType> typeFromProto(const onnx::TypeProto &type,
                                            StringRef name, StringRef what);
  FailureOr<DenseElementsAttr> tensorToAttr(const onnx::TensorProto &tensor,
                                            StringRef what);
  FailureOr<std::string> readExternal(const onnx::TensorProto &tensor,
                                      StringRef what, bool load);
  LogicalResult importNode(const onnx::NodeProto &node, size_t index);
  LogicalResult importTrainingInfo(ModuleOp module);
  Location nodeLoc(const onnx::NodeProto &node, size_t index);

  static const llvm::StringMap<Handler> &handlers();
  /// Handlers of the ai.onnx.preview.training domain.
  static const llvm::StringMap<Handler> &trainingHandlers();
};

std::string NodeContext::name() const {
  return cast<NameLoc>(loc).getName().str();
}

OpBuilder &NodeContext::builder() const { return importer.builder; }

Value NodeContext::constant(RankedTensorType type, Attribute value) const {
  return ConstantOp::create(builder(), loc, type, cast<ElementsAttr>(value));
}

RankedTensorType NodeContext::inferredOutputType(size_t i) const {
  if (!outputUsed(i))
    return nullptr;
  auto it = importer.inferredTypes.find(node.output(i));
  if (it == importer.inferredTypes.end())
    return nullptr;
  const onnx::TypeProto &t = *it->second;
  if (!t.has_tensor_type() || !t.tensor_type().has_shape())
    return nullptr;
  Type elt = elementType(ctx(), t.tensor_type().elem_type());
  if (!elt)
    return nullptr;
  SmallVector<int64_t> shape;
  for (const auto &d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value())
      return nullptr;
    shape.push_back(d.dim_value());
  }
  return RankedTensorType::get(shape, elt);
}

/// The constant value of `v`: a folded constant, or the data of an
/// initializer (a parameter argument) read at import time.
static DenseElementsAttr constantValue(Importer &importer, Value v);

FailureOr<SmallVector<int64_t>> NodeContext::constInts(size_t i,
                                                       StringRef what) const {
  DenseElementsAttr attr = input(i) ? constantValue(importer, input(i)) : nullptr;
  if (!attr || !isa<IntegerType>(attr.getElementType())) {
    error() << what << " (input " << i
            << ") must be a compile-time constant: ds plans static shapes";
    return failure();
  }
  SmallVector<int64_t> out;
  for (APInt v : attr.getValues<APInt>())
    out.push_back(v.getSExtValue());
  return out;
}

FailureOr<double> NodeContext::constFloat(size_t i, StringRef what) const {
  DenseElementsAttr attr = input(i) ? constantValue(importer, input(i)) : nullptr;
  if (!attr || attr.getNumElements() != 1 ||
      !isa<FloatType>(attr.getElementType())) {
    error() << what << " (input " << i
            << ") must be a constant float scalar";
    return failure();
  }
  return (*attr.getValues<APFloat>().begin()).convertToDouble();
}

FailureOr<bool> NodeContext::constBool(size_t i, StringRef what) const {
  DenseElementsAttr attr = input(i) ? constantValue(importer, input(i)) : nullptr;
  if (!attr || attr.getNumElements() != 1 ||
      !attr.getElementType().isInteger(1)) {
    error() << what << " (input " << i << ") must be a constant bool scalar";
    return failure();
  }
  return *attr.getValues<bool>().begin();
}

LogicalResult NodeContext::bind(ValueRange values) {
  for (auto [i, v] : llvm::enumerate(values))
    if (outputUsed(i))
      importer.values[node.output(i)] = v;
  for (size_t i = values.size(); i < numOutputs(); ++i)
    if (outputUsed(i))
      return error() << "output " << i << " ('" << node.output(i)
                     << "') is not supported";
  return success();
}

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

static DenseElementsAttr constantValue(Importer &importer, Value v) {
  DenseElementsAttr attr;
  if (matchPattern(v, m_Constant(&attr)))
    return attr;
  auto it = importer.paramData.find(v);
  if (it == importer.paramData.end())
    return nullptr;
  FailureOr<DenseElementsAttr> data = importer.tensorToAttr(
      *it->second, "initializer '" + it->second->name() + "'");
  return succeeded(data) ? *data : nullptr;
}

//===----------------------------------------------------------------------===//
// Handlers
//===----------------------------------------------------------------------===//

template <typename OpTy>
LogicalResult binary(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)))
    return failure();
  // Before opset 7, broadcasting was opt-in through these attributes.
  if (n.intAttr("broadcast", 0) != 0 || n.attr("axis"))
    return n.error() << "unsupported attribute value: legacy (opset < 7) "
                        "broadcast attributes";
  Type lt = n.elementTypeOf(0), rt = n.elementTypeOf(1);
  bool isPow = std::is_same_v<OpTy, PowOp>;
  if (!isPow && lt != rt)
    return n.error() << "operand element types differ: " << lt << " and "
                     << rt;
  FailureOr<sh::Shape> shape = sh::broadcast(n.shape(0), n.shape(1), n.emitFn());
  if (failed(shape))
    return failure();
  Type elt = isPredicate(OpTy::getKind()) ? IntegerType::get(n.ctx(), 1) : lt;
  if (isLogical(OpTy::getKind()) != lt.isInteger(1))
    return n.error() << "unsupported operand element type " << lt;
  return n.emit<OpTy>(n.tensor(*shape, elt), n.input(0), n.input(1));
}

/// Max/Min/Sum are variadic in ONNX: fold them pairwise.
template <typename OpTy>
LogicalResult variadic(NodeContext &n) {
  if (n.numInputs() == 0 || !n.input(0))
    return n.error() << "needs at least one input";
  if (n.numInputs() == 1)
    return n.bind(n.input(0));
  Value acc = n.input(0);
  for (size_t i = 1; i < n.numInputs(); ++i) {
    Value rhs = n.input(i);
    auto lt = cast<ShapedType>(acc.getType());
    if (lt.getElementType() != n.elementTypeOf(i))
      return n.error() << "operand element types differ";
    FailureOr<sh::Shape> shape =
        sh::broadcast(lt.getShape(), n.shape(i), n.emitFn());
    if (failed(shape))
      return failure();
    acc = n.builder().createOrFold<OpTy>(
        n.loc, n.tensor(*shape, lt.getElementType()), acc, rhs);
  }
  return n.bind(acc);
}

template <typename OpTy>
LogicalResult unary(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  Type elt = n.elementTypeOf(0);
  UnaryKind kind = OpTy::getKind();
  bool floatOnly = kind == UnaryKind::Exp || kind == UnaryKind::Log ||
                   kind == UnaryKind::Sqrt || kind == UnaryKind::Reciprocal ||
                   kind == UnaryKind::Erf || kind == UnaryKind::Tanh ||
                   kind == UnaryKind::Sigmoid;
  if ((kind == UnaryKind::Not) != elt.isInteger(1) ||
      (floatOnly && !isa<FloatType>(elt)))
    return n.error() << "unsupported operand element type " << elt;
  return n.emit<OpTy>(n.input(0));
}

LogicalResult identity(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  return n.bind(n.input(0));
}

LogicalResult constantNode(NodeContext &n) {
  if (n.node.attribute_size() != 1)
    return n.error() << "expects exactly one value attribute";
  const onnx::AttributeProto &a = n.node.attribute(0);
  MLIRContext *ctx = n.ctx();
  if (a.name() == "value") {
    FailureOr<DenseElementsAttr> attr =
        n.importer.tensorToAttr(a.t(), "constant '" + n.name() + "'");
    if (failed(attr))
      return failure();
    return n.bind(n.constant(cast<RankedTensorType>(attr->getType()), *attr));
  }
  if (a.name() == "value_float" || a.name() == "value_floats") {
    SmallVector<float> v;
    if (a.name() == "value_float")
      v.push_back(a.f());
    else
      v.assign(a.floats().begin(), a.floats().end());
    auto type = a.name() == "value_float"
                    ? RankedTensorType::get({}, Float32Type::get(ctx))
                    : RankedTensorType::get({(int64_t)v.size()},
                                            Float32Type::get(ctx));
    return n.bind(
        n.constant(type, DenseElementsAttr::get(type, ArrayRef<float>(v))));
  }
  if (a.name() == "value_int" || a.name() == "value_ints") {
    SmallVector<int64_t> v;
    if (a.name() == "value_int")
      v.push_back(a.i());
    else
      v.assign(a.ints().begin(), a.ints().end());
    auto i64 = IntegerType::get(ctx, 64);
    auto type = a.name() == "value_int"
                    ? RankedTensorType::get({}, i64)
                    : RankedTensorType::get({(int64_t)v.size()}, i64);
    return n.bind(
        n.constant(type, DenseElementsAttr::get(type, ArrayRef<int64_t>(v))));
  }
  return n.error() << "unsupported attribute '" << a.name()
                   << "' (ds supports numeric tensor constants)";
}

LogicalResult castNode(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  int64_t to = n.intAttr("to", 0);
  Type elt = elementType(n.ctx(), to);
  if (!elt)
    return n.error() << "unsupported attribute value to="
                     << elementTypeName(to);
  return n.emit<CastOp>(n.tensor(n.shape(0), elt), n.input(0));
}

LogicalResult where(NodeContext &n) {
  if (failed(n.expectInputs(3, 3)))
    return failure();
  if (!n.elementTypeOf(0).isInteger(1))
    return n.error() << "condition must be bool";
  if (n.elementTypeOf(1) != n.elementTypeOf(2))
    return n.error() << "x and y element types differ";
  FailureOr<sh::Shape> xy = sh::broadcast(n.shape(1), n.shape(2), n.emitFn());
  if (failed(xy))
    return failure();
  FailureOr<sh::Shape> shape = sh::broadcast(n.shape(0), *xy, n.emitFn());
  if (failed(shape))
    return failure();
  return n.emit<WhereOp>(n.tensor(*shape, n.elementTypeOf(1)), n.input(0),
                         n.input(1), n.input(2));
}

LogicalResult requireFloat(NodeContext &n, size_t i) {
  if (!isa<FloatType>(n.elementTypeOf(i)))
    return n.error() << "unsupported element type " << n.elementTypeOf(i)
                     << " of input " << i << " (ds computes this op in "
                     << "f32, f16 or bf16)";
  return success();
}

LogicalResult matmul(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)) || failed(requireFloat(n, 0)) ||
      failed(requireFloat(n, 1)))
    return failure();
  if (n.elementTypeOf(0) != n.elementTypeOf(1))
    return n.error() << "operand element types differ";
  FailureOr<sh::Shape> shape = sh::matmul(n.shape(0), n.shape(1), n.emitFn());
  if (failed(shape))
    return failure();
  return n.emit<MatMulOp>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                          n.input(1));
}

LogicalResult gemm(NodeContext &n) {
  if (failed(n.expectInputs(2, 3)) || failed(requireFloat(n, 0)))
    return failure();
  bool ta = n.intAttr("transA", 0), tb = n.intAttr("transB", 0);
  std::optional<ArrayRef<int64_t>> c;
  if (n.input(2))
    c = n.shape(2);
  FailureOr<sh::Shape> shape =
      sh::gemm(n.shape(0), n.shape(1), c, ta, tb, n.emitFn());
  if (failed(shape))
    return failure();
  OpBuilder &b = n.builder();
  return n.emit<GemmOp>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                        n.input(1), n.input(2),
                        b.getF32FloatAttr(n.floatAttr("alpha", 1.0f)),
                        b.getF32FloatAttr(n.floatAttr("beta", 1.0f)),
                        b.getBoolAttr(ta), b.getBoolAttr(tb));
}

/// Softmax and LogSoftmax; before opset 13 they flatten to 2-D at `axis`.
template <typename OpTy>
LogicalResult softmax(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)) || failed(requireFloat(n, 0)))
    return failure();
  auto type = cast<RankedTensorType>(n.input(0).getType());
  int64_t rank = type.getRank();
  bool legacy = n.importer.opset < 13;
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", legacy ? 1 : -1), rank);
  if (failed(axis))
    return failure();
  OpBuilder &b = n.builder();
  if (!legacy || *axis == rank - 1)
    return n.emit<OpTy>(n.input(0), b.getI64IntegerAttr(*axis));
  // Coerced to 2-D: [prod(dims[:axis]), prod(dims[axis:])], softmax on 1.
  ArrayRef<int64_t> s = type.getShape();
  auto flat = n.tensor({sh::product(s.take_front(*axis)),
                        sh::product(s.drop_front(*axis))},
                       type.getElementType());
  Value x = ReshapeOp::create(n.builder(), n.loc, flat, n.input(0));
  Value y = OpTy::create(n.builder(), n.loc, x, b.getI64IntegerAttr(1));
  return n.bind(ReshapeOp::create(n.builder(), n.loc, type, y)->getResults());
}

LogicalResult layerNorm(NodeContext &n) {
  if (failed(n.expectInputs(2, 3)) || failed(requireFloat(n, 0)))
    return failure();
  if (n.intAttr("stash_type", 1) != 1)
    return n.error() << "unsupported attribute value stash_type="
                     << n.intAttr("stash_type", 1)
                     << " (ds keeps statistics in f32: stash_type=1)";
  auto type = cast<RankedTensorType>(n.input(0).getType());
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = type.getShape().drop_front(*axis);
  for (size_t i = 1; i < 3; ++i) {
    if (!n.input(i))
      continue;
    if (n.elementTypeOf(i) != type.getElementType())
      return n.error() << "input " << i << " element type differs from X";
    if (!llvm::equal(n.shape(i), normalized))
      return n.error() << "input " << i << " has shape "
                       << shapeStr(n.shape(i)) << ", expected "
                       << shapeStr(normalized);
  }
  OpBuilder &b = n.builder();
  float eps = n.floatAttr("epsilon", 1e-5f);
  auto ln = LayerNormOp::create(b, n.loc, type, n.input(0), n.input(1),
                                n.input(2), b.getI64IntegerAttr(*axis),
                                b.getF32FloatAttr(eps));
  SmallVector<Value> results{ln};
  if (n.outputUsed(1) || n.outputUsed(2)) {
    // The optional statistics outputs (f32, reduced dimensions kept as 1),
    // spelled out with reductions; training graphs from PyTorch never ask
    // for them.
    Type f32 = b.getF32Type();
    Value x = n.input(0);
    if (type.getElementType() != f32)
      x = CastOp::create(b, n.loc, RankedTensorType::get(type.getShape(), f32),
                         x);
    SmallVector<int64_t> axes;
    sh::Shape statShape(type.getShape().begin(), type.getShape().end());
    for (int64_t d = *axis; d < type.getRank(); ++d) {
      axes.push_back(d);
      statShape[d] = 1;
    }
    auto statType = RankedTensorType::get(statShape, f32);
    auto fullType = RankedTensorType::get(type.getShape(), f32);
    auto axesAttr = b.getDenseI64ArrayAttr(axes);
    Value mean = ReduceMeanOp::create(b, n.loc, statType, x, axesAttr,
                                      b.getBoolAttr(true));
    Value centred = SubOp::create(b, n.loc, fullType, x, mean);
    Value sq = MulOp::create(b, n.loc, fullType, centred, centred);
    Value var = ReduceMeanOp::create(b, n.loc, statType, sq, axesAttr,
                                     b.getBoolAttr(true));
    auto scalar = RankedTensorType::get({}, f32);
    Value epsV = ConstantOp::create(
        b, n.loc, scalar, DenseElementsAttr::get(scalar, ArrayRef<float>(eps)));
    Value inv = ReciprocalOp::create(
        b, n.loc,
        SqrtOp::create(b, n.loc, AddOp::create(b, n.loc, statType, var, epsV)));
    results.push_back(mean);
    results.push_back(inv);
  }
  return n.bind(results);
}

LogicalResult gather(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)))
    return failure();
  if (!isa<IntegerType>(n.elementTypeOf(1)) || n.elementTypeOf(1).isInteger(1))
    return n.error() << "indices must be int64 or int32";
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", 0), n.shape(0).size());
  if (failed(axis))
    return failure();
  FailureOr<sh::Shape> shape =
      sh::gather(n.shape(0), n.shape(1), *axis, n.emitFn());
  if (failed(shape))
    return failure();
  return n.emit<GatherOp>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                          n.input(1), n.builder().getI64IntegerAttr(*axis));
}

LogicalResult emitReshape(NodeContext &n, ArrayRef<int64_t> shape) {
  return n.emit<ReshapeOp>(n.tensor(shape, n.elementTypeOf(0)), n.input(0));
}

/// The result type of a value-dependent shape op whose shape operand is not
/// a constant, from ONNX shape inference; an error if it is unknown.
FailureOr<RankedTensorType> inferredOr(NodeContext &n, StringRef what) {
  if (RankedTensorType t = n.inferredOutputType(0))
    return t;
  n.error() << what
            << " must be a compile-time constant: ds plans static shapes";
  return failure();
}

LogicalResult reshape(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)))
    return failure();
  if (!constantValue(n.importer, n.input(1))) {
    FailureOr<RankedTensorType> t = inferredOr(n, "shape (input 1)");
    if (failed(t))
      return failure();
    return emitReshape(n, t->getShape());
  }
  FailureOr<SmallVector<int64_t>> req = n.constInts(1, "shape");
  if (failed(req))
    return failure();
  FailureOr<sh::Shape> shape = sh::reshapeTarget(
      n.shape(0), *req, n.intAttr("allowzero", 0) != 0, n.emitFn());
  if (failed(shape))
    return failure();
  return emitReshape(n, *shape);
}

LogicalResult flatten(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  ArrayRef<int64_t> s = n.shape(0);
  int64_t rank = s.size();
  int64_t axis = n.intAttr("axis", 1);
  if (axis < -rank || axis > rank)
    return n.error() << "axis " << axis << " out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  return emitReshape(n, {sh::product(s.take_front(axis)),
                         sh::product(s.drop_front(axis))});
}

/// Axes of Squeeze/Unsqueeze/Reduce*: an attribute before `inputSince`, an
/// optional input after.
FailureOr<std::optional<SmallVector<int64_t>>>
axesOperand(NodeContext &n, int64_t inputSince) {
  if (n.importer.opset < inputSince)
    return n.intsAttr("axes");
  if (!n.input(1))
    return std::optional<SmallVector<int64_t>>();
  FailureOr<SmallVector<int64_t>> v = n.constInts(1, "axes");
  if (failed(v))
    return failure();
  return std::optional<SmallVector<int64_t>>(*v);
}

LogicalResult squeeze(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  auto axes = axesOperand(n, 13);
  if (failed(axes))
    return failure();
  ArrayRef<int64_t> s = n.shape(0);
  SmallVector<bool> drop(s.size(), false);
  if (!*axes) {
    for (size_t d = 0; d < s.size(); ++d)
      drop[d] = s[d] == 1;
  } else {
    for (int64_t a : **axes) {
      FailureOr<int64_t> ax = n.axis(a, s.size());
      if (failed(ax))
        return failure();
      if (s[*ax] != 1)
        return n.error() << "cannot squeeze dimension " << *ax << " of size "
                         << s[*ax];
      drop[*ax] = true;
    }
  }
  sh::Shape out;
  for (size_t d = 0; d < s.size(); ++d)
    if (!drop[d])
      out.push_back(s[d]);
  return emitReshape(n, out);
}

LogicalResult unsqueeze(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  auto axes = axesOperand(n, 13);
  if (failed(axes))
    return failure();
  if (!*axes)
    return n.error() << "missing axes";
  ArrayRef<int64_t> s = n.shape(0);
  int64_t outRank = s.size() + (*axes)->size();
  SmallVector<bool> inserted(outRank, false);
  for (int64_t a : **axes) {
    FailureOr<int64_t> ax = n.axis(a, outRank);
    if (failed(ax))
      return failure();
    if (inserted[*ax])
      return n.error() << "axis " << a << " repeated";
    inserted[*ax] = true;
  }
  sh::Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < outRank; ++d)
    out.push_back(inserted[d] ? 1 : s[next++]);
  return emitReshape(n, out);
}

LogicalResult transpose(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  int64_t rank = n.shape(0).size();
  SmallVector<int64_t> perm;
  if (auto p = n.intsAttr("perm"))
    perm = *p;
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  FailureOr<sh::Shape> shape = sh::transpose(n.shape(0), perm, n.emitFn());
  if (failed(shape))
    return failure();
  return n.emit<TransposeOp>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                             n.builder().getDenseI64ArrayAttr(perm));
}

LogicalResult concat(NodeContext &n) {
  if (n.numInputs() == 0)
    return n.error() << "needs at least one input";
  SmallVector<ArrayRef<int64_t>> shapes;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    if (!n.input(i))
      return n.error() << "missing input " << i;
    if (n.elementTypeOf(i) != n.elementTypeOf(0))
      return n.error() << "input element types differ";
    shapes.push_back(n.shape(i));
  }
  const onnx::AttributeProto *axisAttr = n.attr("axis");
  if (!axisAttr)
    return n.error() << "missing required attribute 'axis'";
  FailureOr<int64_t> axis = n.axis(axisAttr->i(), shapes[0].size());
  if (failed(axis))
    return failure();
  FailureOr<sh::Shape> shape = sh::concat(shapes, *axis, n.emitFn());
  if (failed(shape))
    return failure();
  return n.emit<ConcatOp>(n.tensor(*shape, n.elementTypeOf(0)),
                          ValueRange(n.inputs),
                          n.builder().getI64IntegerAttr(*axis));
}

LogicalResult split(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  ArrayRef<int64_t> s = n.shape(0);
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", 0), s.size());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> sizes;
  if (n.importer.opset < 13) {
    if (auto attr = n.intsAttr("split"))
      sizes = *attr;
  } else if (n.input(1)) {
    FailureOr<SmallVector<int64_t>> v = n.constInts(1, "split");
    if (failed(v))
      return failure();
    sizes = *v;
  }
  size_t parts = n.numOutputs();
  if (sizes.empty()) {
    int64_t numOutputs = n.intAttr("num_outputs", parts);
    if (numOutputs <= 0)
      return n.error() << "cannot split into " << numOutputs << " parts";
    // Equal parts; since opset 18 the last may be smaller.
    int64_t chunk = (s[*axis] + numOutputs - 1) / numOutputs;
    if (n.importer.opset < 18 && s[*axis] % numOutputs != 0)
      return n.error() << "dimension " << s[*axis] << " does not split into "
                       << numOutputs << " equal parts";
    for (int64_t i = 0, left = s[*axis]; i < numOutputs; ++i) {
      sizes.push_back(std::min(chunk, left));
      left -= sizes.back();
    }
  }
  if (sizes.size() != parts)
    return n.error() << "split gives " << sizes.size() << " sizes for "
                     << parts << " outputs";
  int64_t total = 0;
  SmallVector<Type> types;
  for (int64_t size : sizes) {
    if (size < 0)
      return n.error() << "negative split size " << size;
    total += size;
    sh::Shape part(s.begin(), s.end());
    part[*axis] = size;
    types.push_back(n.tensor(part, n.elementTypeOf(0)));
  }
  if (total != s[*axis])
    return n.error() << "split sizes add up to " << total << ", dimension "
                     << *axis << " has " << s[*axis];
  auto op = SplitOp::create(n.builder(), n.loc, types, n.input(0),
                            n.builder().getI64IntegerAttr(*axis));
  return n.bind(op->getResults());
}

LogicalResult slice(NodeContext &n) {
  SmallVector<int64_t> starts, ends, axes, steps;
  if (n.importer.opset < 10) {
    if (failed(n.expectInputs(1, 1)))
      return failure();
    starts = n.intsAttr("starts").value_or(SmallVector<int64_t>());
    ends = n.intsAttr("ends").value_or(SmallVector<int64_t>());
    axes = n.intsAttr("axes").value_or(SmallVector<int64_t>());
  } else {
    if (failed(n.expectInputs(3, 5)))
      return failure();
    auto get = [&](size_t i, StringRef what,
                   SmallVector<int64_t> &out) -> LogicalResult {
      if (!n.input(i))
        return success();
      FailureOr<SmallVector<int64_t>> v = n.constInts(i, what);
      if (failed(v))
        return failure();
      out = *v;
      return success();
    };
    if (failed(get(1, "starts", starts)) || failed(get(2, "ends", ends)) ||
        failed(get(3, "axes", axes)) || failed(get(4, "steps", steps)))
      return failure();
  }
  FailureOr<sh::SliceSpec> spec =
      sh::normalizeSlice(n.shape(0), starts, ends, axes, steps, n.emitFn());
  if (failed(spec))
    return failure();
  OpBuilder &b = n.builder();
  return n.emit<SliceOp>(n.tensor(spec->shape, n.elementTypeOf(0)),
                         n.input(0), b.getDenseI64ArrayAttr(spec->starts),
                         b.getDenseI64ArrayAttr(spec->steps));
}

LogicalResult expand(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)))
    return failure();
  sh::Shape shape;
  if (constantValue(n.importer, n.input(1))) {
    FailureOr<SmallVector<int64_t>> req = n.constInts(1, "shape");
    if (failed(req))
      return failure();
    // Expand broadcasts both ways: the result is broadcast(input, shape).
    FailureOr<sh::Shape> b = sh::broadcast(n.shape(0), *req, n.emitFn());
    if (failed(b))
      return failure();
    shape = *b;
  } else {
    FailureOr<RankedTensorType> t = inferredOr(n, "shape (input 1)");
    if (failed(t))
      return failure();
    shape.assign(t->getShape().begin(), t->getShape().end());
  }
  return n.emit<ExpandOp>(n.tensor(shape, n.elementTypeOf(0)), n.input(0));
}

LogicalResult shapeNode(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  int64_t rank = n.shape(0).size();
  auto clampDim = [&](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  int64_t start = clampDim(n.intAttr("start", 0));
  int64_t end = clampDim(n.intAttr("end", rank));
  end = std::max(start, end);
  OpBuilder &b = n.builder();
  return n.emit<ShapeOp>(n.tensor({end - start}, b.getI64Type()), n.input(0),
                         b.getI64IntegerAttr(start), b.getI64IntegerAttr(end));
}

LogicalResult constantOfShape(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)))
    return failure();
  Attribute value;
  Type elt = Float32Type::get(n.ctx());
  if (const onnx::AttributeProto *a = n.attr("value")) {
    FailureOr<DenseElementsAttr> t =
        n.importer.tensorToAttr(a->t(), "value of '" + n.name() + "'");
    if (failed(t))
      return failure();
    if (t->getNumElements() != 1)
      return n.error() << "value must hold one element";
    value = t->getValues<Attribute>()[0];
    elt = t->getElementType();
  } else {
    value = FloatAttr::get(elt, 0.0);
  }
  RankedTensorType type;
  if (constantValue(n.importer, n.input(0))) {
    FailureOr<SmallVector<int64_t>> dims = n.constInts(0, "shape");
    if (failed(dims))
      return failure();
    for (int64_t d : *dims)
      if (d < 0)
        return n.error() << "negative dimension in shape " << shapeStr(*dims);
    type = RankedTensorType::get(*dims, elt);
  } else {
    FailureOr<RankedTensorType> t = inferredOr(n, "shape (input 0)");
    if (failed(t))
      return failure();
    type = *t;
  }
  if (n.shape(0).size() != 1)
    return n.error() << "shape input must be 1-D";
  return n.emit<ConstantOfShapeOp>(type, n.input(0), cast<TypedAttr>(value));
}

LogicalResult range(NodeContext &n) {
  if (failed(n.expectInputs(3, 3)))
    return failure();
  Type elt = n.elementTypeOf(0);
  for (size_t i = 0; i < 3; ++i) {
    if (n.elementTypeOf(i) != elt)
      return n.error() << "start, limit and delta element types differ";
    if (sh::product(n.shape(i)) != 1)
      return n.error() << "input " << i << " must be a scalar";
  }
  auto scalar = [&](size_t i) -> FailureOr<double> {
    if (isa<FloatType>(elt))
      return n.constFloat(i, i == 0 ? "start" : i == 1 ? "limit" : "delta");
    FailureOr<SmallVector<int64_t>> v =
        n.constInts(i, i == 0 ? "start" : i == 1 ? "limit" : "delta");
    if (failed(v))
      return failure();
    return static_cast<double>((*v)[0]);
  };
  FailureOr<double> start = scalar(0), limit = scalar(1), delta = scalar(2);
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  if (*delta == 0)
    return n.error() << "delta must not be 0";
  int64_t count = std::max<int64_t>(
      0, static_cast<int64_t>(std::ceil((*limit - *start) / *delta)));
  return n.emit<RangeOp>(n.tensor({count}, elt), n.input(0), n.input(1),
                         n.input(2));
}

LogicalResult trilu(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  if (n.shape(0).size() < 2)
    return n.error() << "input must have rank >= 2";
  int64_t k = 0;
  if (n.input(1)) {
    FailureOr<SmallVector<int64_t>> v = n.constInts(1, "k");
    if (failed(v))
      return failure();
    k = (*v)[0];
  }
  OpBuilder &b = n.builder();
  return n.emit<TriluOp>(n.input(0), b.getBoolAttr(n.intAttr("upper", 1)),
                         b.getI64IntegerAttr(k));
}

LogicalResult dropout(NodeContext &n) {
  if (failed(n.expectInputs(1, 3)) || failed(requireFloat(n, 0)))
    return failure();
  double ratio = 0.5;
  bool training = false;
  if (n.importer.opset < 12) {
    ratio = n.floatAttr("ratio", 0.5f);
    training = n.intAttr("is_test", 0) == 0 && n.importer.opset < 7;
  } else {
    if (n.input(1)) {
      FailureOr<double> r = n.constFloat(1, "ratio");
      if (failed(r))
        return failure();
      ratio = *r;
    }
    if (n.input(2)) {
      FailureOr<bool> t = n.constBool(2, "training_mode");
      if (failed(t))
        return failure();
      training = *t;
    }
  }
  if (ratio < 0.0 || ratio >= 1.0)
    return n.error() << "unsupported attribute value ratio=" << ratio
                     << " (must be in [0, 1))";
  OpBuilder &b = n.builder();
  IntegerAttr seed;
  if (const onnx::AttributeProto *s = n.attr("seed"))
    seed = b.getI64IntegerAttr(s->i());
  auto type = cast<RankedTensorType>(n.input(0).getType());
  auto op = DropoutOp::create(b, n.loc, type,
                              n.tensor(type.getShape(), b.getI1Type()),
                              n.input(0), b.getF64FloatAttr(ratio),
                              b.getBoolAttr(training), seed);
  return n.bind(op->getResults());
}

template <typename OpTy>
LogicalResult reduce(NodeContext &n, int64_t axesInputSince) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  auto axes = axesOperand(n, axesInputSince);
  if (failed(axes))
    return failure();
  ArrayRef<int64_t> s = n.shape(0);
  bool keepdims = n.intAttr("keepdims", 1) != 0;
  SmallVector<int64_t> norm;
  if (!*axes || (*axes)->empty()) {
    if (n.intAttr("noop_with_empty_axes", 0))
      return n.bind(n.input(0));
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
      norm.push_back(d);
  } else {
    for (int64_t a : **axes) {
      FailureOr<int64_t> ax = n.axis(a, s.size());
      if (failed(ax))
        return failure();
      norm.push_back(*ax);
    }
    llvm::sort(norm);
    if (std::adjacent_find(norm.begin(), norm.end()) != norm.end())
      return n.error() << "repeated reduction axis";
  }
  if (s.empty())
    return n.bind(n.input(0));
  if (isa<IntegerType>(n.elementTypeOf(0)) && n.elementTypeOf(0).isInteger(1))
    return n.error() << "cannot reduce bool tensors";
  FailureOr<sh::Shape> shape = sh::reduce(s, norm, keepdims, n.emitFn());
  if (failed(shape))
    return failure();
  OpBuilder &b = n.builder();
  return n.emit<OpTy>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                      b.getDenseI64ArrayAttr(norm), b.getBoolAttr(keepdims));
}

template <typename OpTy>
LogicalResult lossNode(NodeContext &n, bool hasLogProb) {
  if (failed(n.expectInputs(2, 3)) || failed(requireFloat(n, 0)))
    return failure();
  if (!isa<IntegerType>(n.elementTypeOf(1)) || n.elementTypeOf(1).isInteger(1))
    return n.error() << "labels must be int64 or int32";
  std::string reduction = n.stringAttr("reduction", "mean");
  std::optional<ArrayRef<int64_t>> w;
  if (n.input(2)) {
    w = n.shape(2);
    if (n.elementTypeOf(2) != n.elementTypeOf(0))
      return n.error() << "weights element type differs from the scores'";
  }
  FailureOr<sh::Shape> shape =
      sh::loss(n.shape(0), n.shape(1), w, reduction, [&] {
        auto d = n.error();
        d << "unsupported attribute value: ";
        return d;
      });
  if (failed(shape))
    return failure();
  OpBuilder &b = n.builder();
  IntegerAttr ignore;
  if (const onnx::AttributeProto *a = n.attr("ignore_index"))
    ignore = b.getI64IntegerAttr(a->i());
  Type elt = n.elementTypeOf(0);
  if constexpr (std::is_same_v<OpTy, SoftmaxCrossEntropyLossOp>) {
    Type logProb;
    if (hasLogProb && n.outputUsed(1))
      logProb = n.input(0).getType();
    auto op = OpTy::create(b, n.loc, n.tensor(*shape, elt), logProb,
                           n.input(0), n.input(1), n.input(2),
                           b.getStringAttr(reduction), ignore);
    return n.bind(op->getResults());
  } else {
    auto op = OpTy::create(b, n.loc, n.tensor(*shape, elt), n.input(0),
                           n.input(1), n.input(2), b.getStringAttr(reduction),
                           ignore);
    return n.bind(op->getResults());
  }
}

/// ONNX Adam, Adagrad and Momentum (ai.onnx.preview.training): R, T, then
/// groups of X, G and states, one ds.onnx_update per tensor.
LogicalResult onnxTrainingUpdate(NodeContext &n, StringRef op) {
  size_t states = op == "Adam" ? 2 : 1;
  size_t groups = 2 + states;
  if (n.numInputs() < 2 + groups || (n.numInputs() - 2) % groups != 0)
    return n.error() << "expects R, T and " << groups
                     << " tensors per parameter, got " << n.numInputs()
                     << " inputs";
  size_t count = (n.numInputs() - 2) / groups;
  if (n.numOutputs() != count * (1 + states))
    return n.error() << "expects " << count * (1 + states) << " outputs";
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (!n.input(i))
      return n.error() << "missing input " << i;
  if (!n.elementTypeOf(1).isInteger(64) || sh::product(n.shape(1)) != 1 ||
      !isa<FloatType>(n.elementTypeOf(0)) || sh::product(n.shape(0)) != 1)
    return n.error() << "R must be a float scalar and T an int64 scalar";
  std::string kind = op == "Adam" ? "adam" : op == "Adagrad" ? "adagrad" : "";
  if (op == "Momentum") {
    const onnx::AttributeProto *mode = n.attr("mode");
    if (!mode || (mode->s() != "standard" && mode->s() != "nesterov"))
      return n.error() << "unsupported attribute value mode (standard or "
                          "nesterov)";
    kind = mode->s() == "nesterov" ? "nesterov" : "momentum";
    for (const char *req : {"alpha", "beta", "norm_coefficient"})
      if (!n.attr(req))
        return n.error() << "missing required attribute '" << req << "'";
  }
  OpBuilder &b = n.builder();
  SmallVector<Value> outputs(n.numOutputs());
  for (size_t i = 0; i < count; ++i) {
    SmallVector<Value> operands{n.input(0), n.input(1)};
    for (size_t g = 0; g < groups; ++g)
      operands.push_back(n.input(2 + g * count + i));
    Type x = operands[2].getType();
    for (Value v : ArrayRef<Value>(operands).drop_front(2))
      if (v.getType() != x || !isa<FloatType>(cast<ShapedType>(x).getElementType()))
        return n.error() << "X, G and the states of tensor " << i
                         << " must be float tensors of one type";
    SmallVector<Type> types(1 + states, x);
    auto update = OnnxUpdateOp::create(
        b, n.loc, types, operands, b.getStringAttr(kind),
        b.getF64FloatAttr(n.floatAttr("alpha", 0.9f)),
        b.getF64FloatAttr(n.floatAttr("beta", op == "Adam" ? 0.999f : 0.0f)),
        b.getF64FloatAttr(n.floatAttr("epsilon", 0.0f)),
        b.getF64FloatAttr(n.floatAttr("decay_factor", 0.0f)),
        b.getF64FloatAttr(n.floatAttr("norm_coefficient", 0.0f)),
        b.getF64FloatAttr(n.floatAttr("norm_coefficient_post", 0.0f)));
    for (size_t r = 0; r <= states; ++r)
      outputs[r * count + i] = update.getResult(r);
  }
  return n.bind(outputs);
}

/// ONNX Gradient in the main graph: reverse mode from y to xs over the ops
/// built so far, through the same VJP rules as --ds-autodiff.
LogicalResult gradientNode(NodeContext &n) {
  const onnx::AttributeProto *xsAttr = n.attr("xs"), *yAttr = n.attr("y");
  if (!xsAttr || !yAttr)
    return n.error() << "needs attributes 'xs' and 'y'";
  auto yIt = n.importer.values.find(yAttr->s());
  if (yIt == n.importer.values.end())
    return n.error() << "y names '" << yAttr->s()
                     << "', which is not computed before this node";
  SmallVector<Value> xs;
  for (const std::string &x : xsAttr->strings()) {
    auto it = n.importer.values.find(x);
    if (it == n.importer.values.end())
      return n.error() << "xs names '" << x << "', which is not defined";
    xs.push_back(it->second);
  }
  if (n.numOutputs() != xs.size())
    return n.error() << "has " << n.numOutputs() << " outputs for "
                     << xs.size() << " xs";
  Value y = yIt->second;
  auto yType = cast<RankedTensorType>(y.getType());
  if (!isa<FloatType>(yType.getElementType()))
    return n.error() << "y must be a float tensor";
  OpBuilder &b = n.builder();
  Block *block = b.getInsertionBlock();
  SmallVector<Operation *> ops;
  for (Operation &op : *block)
    ops.push_back(&op);
  Value seed = ConstantOp::create(
      b, n.loc, yType,
      DenseElementsAttr::get(yType, ArrayRef<Attribute>(
                                        FloatAttr::get(yType.getElementType(), 1.0))));
  FailureOr<SmallVector<Value>> grads = buildGradients(b, ops, y, seed, xs);
  if (failed(grads))
    return failure();
  SmallVector<Value> outputs;
  for (auto [x, g] : llvm::zip(xs, *grads)) {
    auto t = cast<RankedTensorType>(x.getType());
    outputs.push_back(g ? g
                        : Value(ConstantOp::create(
                              b, n.loc, t,
                              DenseElementsAttr::get(
                                  t, ArrayRef<Attribute>(FloatAttr::get(
                                         t.getElementType(), 0.0))))));
  }
  return n.bind(outputs);
}

const llvm::StringMap<Handler> &Importer::trainingHandlers() {
  static const llvm::StringMap<Handler> table = [] {
    llvm::StringMap<Handler> t;
    t["Adam"] = [](NodeContext &n) { return onnxTrainingUpdate(n, "Adam"); };
    t["Adagrad"] = [](NodeContext &n) { return onnxTrainingUpdate(n, "Adagrad"); };
    t["Momentum"] = [](NodeContext &n) { return onnxTrainingUpdate(n, "Momentum"); };
    t["Gradient"] = gradientNode;
    return t;
  }();
  return table;
}

const llvm::StringMap<Handler> &Importer::handlers() {
  static const llvm::StringMap<Handler> table = [] {
    llvm::StringMap<Handler> t;
    t["Constant"] = constantNode;
    t["Identity"] = identity;
    t["Add"] = binary<AddOp>;
    t["Sub"] = binary<SubOp>;
    t["Mul"] = binary<MulOp>;
    t["Div"] = binary<DivOp>;
    t["Pow"] = binary<PowOp>;
    t["Equal"] = binary<EqualOp>;
    t["Less"] = binary<LessOp>;
    t["LessOrEqual"] = binary<LessOrEqualOp>;
    t["Greater"] = binary<GreaterOp>;
    t["GreaterOrEqual"] = binary<GreaterOrEqualOp>;
    t["And"] = binary<AndOp>;
    t["Or"] = binary<OrOp>;
    t["Xor"] = binary<XorOp>;
    t["Max"] = variadic<MaxOp>;
    t["Min"] = variadic<MinOp>;
    t["Sum"] = variadic<AddOp>;
    t["Neg"] = unary<NegOp>;
    t["Abs"] = unary<AbsOp>;
    t["Exp"] = unary<ExpOp>;
    t["Log"] = unary<LogOp>;
    t["Sqrt"] = unary<SqrtOp>;
    t["Reciprocal"] = unary<ReciprocalOp>;
    t["Erf"] = unary<ErfOp>;
    t["Tanh"] = unary<TanhOp>;
    t["Relu"] = unary<ReluOp>;
    t["Sigmoid"] = unary<SigmoidOp>;
    t["Not"] = unary<NotOp>;
    t["Cast"] = castNode;
    t["Where"] = where;
    t["MatMul"] = matmul;
    t["Gemm"] = gemm;
    t["Softmax"] = softmax<SoftmaxOp>;
    t["LogSoftmax"] = softmax<LogSoftmaxOp>;
    t["LayerNormalization"] = layerNorm;
    t["Gather"] = gather;
    t["Reshape"] = reshape;
    t["Flatten"] = flatten;
    t["Squeeze"] = squeeze;
    t["Unsqueeze"] = unsqueeze;
    t["Transpose"] = transpose;
    t["Concat"] = concat;
    t["Split"] = split;
    t["Slice"] = slice;
    t["Expand"] = expand;
    t["Shape"] = shapeNode;
    t["ConstantOfShape"] = constantOfShape;
    t["Range"] = range;
    t["Trilu"] = trilu;
    t["Dropout"] = dropout;
    t["ReduceSum"] = [](NodeContext &n) { return reduce<ReduceSumOp>(n, 13); };
    t["ReduceMean"] = [](NodeContext &n) {
      return reduce<ReduceMeanOp>(n, 18);
    };
    t["ReduceMax"] = [](NodeContext &n) { return reduce<ReduceMaxOp>(n, 18); };
    t["SoftmaxCrossEntropyLoss"] = [](NodeContext &n) {
      return lossNode<SoftmaxCrossEntropyLossOp>(n, true);
    };
    t["NegativeLogLikelihoodLoss"] = [](NodeContext &n) {
      return lossNode<NegativeLogLikelihoodLossOp>(n, false);
    };
    return t;
  }();
  return table;
}

//===----------------------------------------------------------------------===//
// Tensors, types, nodes
//===----------------------------------------------------------------------===//

FailureOr<RankedTensorType>
Importer::typeFromProto(const onnx::TypeProto &type, StringRef name,
                        StringRef what) {
  if (!type.has_tensor_type())
    return error() << what << " '" << name << "' is not a tensor";
  const auto &tt = type.tensor_type();
  Type elt = elementType(ctx, tt.elem_type());
  if (!elt)
    return error() << what << " '" << name
                   << "' has unsupported element type "
                   << elementTypeName(tt.elem_type())
                   << " (ds supports FLOAT, FLOAT16, BFLOAT16, INT64, INT32, "
                      "BOOL)";
  auto fixed = options.inputShapes.find(name);
  if (fixed != options.inputShapes.end()) {
    if (tt.has_shape() &&
        static_cast<size_t>(tt.shape().dim_size()) != fixed->second.size())
      return error() << "--input-shape gives '" << name << "' rank "
                     << fixed->second.size() << ", the model has rank "
                     << tt.shape().dim_size();
    if (tt.has_shape()) {
      for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto &d = tt.shape().dim(i);
        if (d.has_dim_value() && d.dim_value() != fixed->second[i])
          return error() << "--input-shape gives '" << name << "' dimension "
                         << i << " = " << fixed->second[i]
                         << ", the model fixes it to " << d.dim_value();
      }
    }
    return RankedTensorType::get(fixed->second, elt);
  }
  if (!tt.has_shape())
    return error() << what << " '" << name
                   << "' has no shape; give one with --input-shape=" << name
                   << ":DIMS";
  SmallVector<int64_t> shape;
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto &d = tt.shape().dim(i);
    if (!d.has_dim_value() || d.dim_value() < 0) {
      std::string sym = d.has_dim_param() ? " ('" + d.dim_param() + "')" : "";
      return error() << what << " '" << name << "' has dynamic dimension "
                     << i << sym << "; fix it with --input-shape=" << name
                     << ":DIMS (e.g. 4x64)";
    }
    shape.push_back(d.dim_value());
  }
  return RankedTensorType::get(shape, elt);
}

FailureOr<std::string> Importer::readExternal(const onnx::TensorProto &tensor,
                                              StringRef what, bool load) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &kv : tensor.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = std::strtoll(kv.value().c_str(), nullptr, 10);
    else if (kv.key() == "length")
      length = std::strtoll(kv.value().c_str(), nullptr, 10);
  }
  if (location.empty())
    return error() << what << " has external data without a location";
  if (llvm::sys::path::is_absolute(location) ||
      llvm::StringRef(location).contains(".."))
    return error() << what << " has external data at '" << location
                   << "', outside the model's folder";
  SmallString<256> file(baseDir);
  llvm::sys::path::append(file, location);
  uint64_t size;
  if (llvm::sys::fs::file_size(file, size))
    return error() << what << ": cannot open external data file '" << file
                   << "'";
  if (length < 0)
    length = static_cast<int64_t>(size) - offset;
  if (offset < 0 || static_cast<uint64_t>(offset + length) > size)
    return error() << what << ": external data [" << offset << ", "
                   << offset + length << ") lies outside '" << file
                   << "' of " << size << " bytes";
  if (!load)
    return std::string();
  auto buf = llvm::MemoryBuffer::getFileSlice(file, length, offset);
  if (!buf)
    return error() << what << ": cannot read '" << file << "'";
  return (*buf)->getBuffer().str();
}

FailureOr<DenseElementsAttr>
Importer::tensorToAttr(const onnx::TensorProto &t, StringRef what) {
  Type elt = elementType(ctx, t.data_type());
  if (!elt)
    return error() << what << " has unsupported element type "
                   << elementTypeName(t.data_type());
  SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0)
      return error() << what << " has a negative dimension";
  auto type = RankedTensorType::get(shape, elt);
  int64_t count = sh::product(shape);
  int64_t width = elt.isInteger(1) ? 1 : elt.getIntOrFloatBitWidth() / 8;

  std::string external;
  const std::string *raw = nullptr;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    FailureOr<std::string> data = readExternal(t, what, /*load=*/true);
    if (failed(data))
      return failure();
    external = std::move(*data);
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
  }
  if (raw) {
    if (static_cast<int64_t>(raw->size()) != count * width)
      return error() << what << " holds " << raw->size()
                     << " bytes, its shape " << shapeStr(shape) << " needs "
                     << count * width;
    if (elt.isInteger(1)) {
      SmallVector<bool> v;
      for (char c : *raw)
        v.push_back(c != 0);
      return DenseElementsAttr::get(type, ArrayRef<bool>(v));
    }
    return DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>(raw->data(), raw->size()));
  }
  auto countError = [&](int64_t have) {
    return error() << what << " holds " << have << " values, its shape "
                   << shapeStr(shape) << " needs " << count;
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT: {
    if (t.float_data_size() != count)
      return countError(t.float_data_size());
    SmallVector<float> v(t.float_data().begin(), t.float_data().end());
    return DenseElementsAttr::get(type, ArrayRef<float>(v));
  }
  case onnx::TensorProto::INT64: {
    if (t.int64_data_size() != count)
      return countError(t.int64_data_size());
    SmallVector<int64_t> v(t.int64_data().begin(), t.int64_data().end());
    return DenseElementsAttr::get(type, ArrayRef<int64_t>(v));
  }
  default: {
    // INT32, BOOL, FLOAT16 and BFLOAT16 live in int32_data.
    if (t.int32_data_size() != count)
      return countError(t.int32_data_size());
    if (elt.isInteger(1)) {
      SmallVector<bool> v;
      for (int32_t x : t.int32_data())
        v.push_back(x != 0);
      return DenseElementsAttr::get(type, ArrayRef<bool>(v));
    }
    if (elt.isInteger(32)) {
      SmallVector<int32_t> v(t.int32_data().begin(), t.int32_data().end());
      return DenseElementsAttr::get(type, ArrayRef<int32_t>(v));
    }
    const llvm::fltSemantics &sem = cast<FloatType>(elt).getFloatSemantics();
    SmallVector<APFloat> v;
    for (int32_t x : t.int32_data())
      v.push_back(APFloat(sem, APInt(16, static_cast<uint16_t>(x))));
    return DenseElementsAttr::get(type, v);
  }
  }
}

Location Importer::nodeLoc(const onnx::NodeProto &node, size_t index) {
  std::string name = node.name().empty()
                         ? node.op_type() + "#" + std::to_string(index)
                         : node.name();
  return NameLoc::get(StringAttr::get(ctx, name), fileLoc);
}

LogicalResult Importer::importNode(const onnx::NodeProto &node, size_t index) {
  Location loc = nodeLoc(node, index);
  SmallVector<Value> inputs;
  for (const std::string &in : node.input()) {
    if (in.empty()) {
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
  NodeContext n(*this, node, loc, std::move(inputs));
  const std::string &domain = node.domain();
  if (domain == kTrainingDomain) {
    auto h = trainingHandlers().find(node.op_type());
    if (h == trainingHandlers().end())
      return n.error() << "unsupported op '" << node.op_type()
                       << "' of domain '" << domain << "'";
    return h->second(n);
  }
  if (!domain.empty() && domain != "ai.onnx")
    return n.error() << "unsupported op '" << node.op_type() << "' of domain '"
                     << domain << "'";
  auto h = handlers().find(node.op_type());
  if (h == handlers().end())
    return n.error() << "unsupported op type '" << node.op_type()
                     << "' (opset " << opset << ")";
  return h->second(n);
}

/// Flattens one AttributeProto to an MLIR attribute for training_info.
Attribute attrToMlir(Builder &b, const onnx::AttributeProto &a) {
  switch (a.type()) {
  case onnx::AttributeProto::INT: return b.getI64IntegerAttr(a.i());
  case onnx::AttributeProto::FLOAT: return b.getF32FloatAttr(a.f());
  case onnx::AttributeProto::STRING: return b.getStringAttr(a.s());
  case onnx::AttributeProto::INTS:
    return b.getI64ArrayAttr(SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
  case onnx::AttributeProto::FLOATS:
    return b.getF32ArrayAttr(SmallVector<float>(a.floats().begin(), a.floats().end()));
  case onnx::AttributeProto::STRINGS: {
    SmallVector<StringRef> s(a.strings().begin(), a.strings().end());
    return b.getStrArrayAttr(s);
  }
  default: return nullptr;
  }
}

LogicalResult Importer::importTrainingInfo(ModuleOp module) {
  if (model.training_info_size() == 0)
    return success();
  const onnx::GraphProto &g = model.graph();
  llvm::StringSet<> initializers, mainValues;
  for (const auto &init : g.initializer()) {
    initializers.insert(init.name());
    mainValues.insert(init.name());
  }
  for (const auto &in : g.input())
    mainValues.insert(in.name());
  for (const auto &node : g.node())
    for (const auto &out : node.output())
      mainValues.insert(out);

  Builder &b = builder;
  SmallVector<Attribute> infos;
  for (auto [idx, info] : llvm::enumerate(model.training_info())) {
    std::string where = "training_info[" + std::to_string(idx) + "]";
    auto validateGraph = [&](const onnx::GraphProto &graph, StringRef part,
                             llvm::StringSet<> &produced,
                             SmallVector<Attribute> &nodesOut) -> LogicalResult {
      for (const auto &in : graph.input())
        produced.insert(in.name());
      for (const auto &init : graph.initializer())
        produced.insert(init.name());
      for (const auto &node : graph.node()) {
        std::string nname = node.name().empty() ? node.op_type() : node.name();
        std::string at = where + "." + part.str() + " node '" + nname + "' (" +
                         node.op_type() + ")";
        bool training = node.domain() == kTrainingDomain;
        if (!training && !node.domain().empty() && node.domain() != "ai.onnx")
          return error() << at << ": unsupported domain '" << node.domain()
                         << "'";
        for (const auto &in : node.input())
          if (!in.empty() && !produced.contains(in) && !mainValues.contains(in))
            return error() << at << ": input '" << in
                           << "' names no value of the model";
        size_t nin = node.input_size(), nout = node.output_size();
        if (training) {
          const std::string &op = node.op_type();
          if (op == "Gradient") {
            std::vector<std::string> xs;
            std::string y;
            for (const auto &a : node.attribute()) {
              if (a.name() == "xs")
                xs.assign(a.strings().begin(), a.strings().end());
              else if (a.name() == "y")
                y = a.s();
            }
            if (xs.empty() || y.empty())
              return error() << at << ": needs attributes 'xs' and 'y'";
            for (const auto &x : xs)
              if (!mainValues.contains(x))
                return error() << at << ": xs names '" << x
                               << "', which is not an input or initializer";
            if (!mainValues.contains(y))
              return error() << at << ": y names '" << y
                             << "', which is no value of the graph";
            if (nout != xs.size())
              return error() << at << ": has " << nout << " outputs for "
                             << xs.size() << " xs";
          } else if (op == "Adam" || op == "Momentum" || op == "Adagrad") {
            size_t per = op == "Adam" ? 4 : 3;
            if (nin < 2 + per || (nin - 2) % per != 0 ||
                nout != (nin - 2) / per * (per - 1))
              return error() << at << ": " << nin << " inputs and " << nout
                             << " outputs do not fit " << op
                             << " (R, T, then " << per
                             << " tensors per parameter)";
          } else {
            return error() << at << ": unsupported training op '" << op
                           << "'";
          }
        }
        for (const auto &out : node.output())
          produced.insert(out);
        SmallVector<NamedAttribute> nattrs;
        for (const auto &a : node.attribute())
          if (Attribute v = attrToMlir(b, a))
            nattrs.push_back(b.getNamedAttr(a.name(), v));
        SmallVector<StringRef> ins(node.input().begin(), node.input().end());
        SmallVector<StringRef> outs(node.output().begin(), node.output().end());
        nodesOut.push_back(b.getDictionaryAttr({
            b.getNamedAttr("op_type", b.getStringAttr(node.op_type())),
            b.getNamedAttr("domain", b.getStringAttr(node.domain())),
            b.getNamedAttr("name", b.getStringAttr(node.name())),
            b.getNamedAttr("inputs", b.getStrArrayAttr(ins)),
            b.getNamedAttr("outputs", b.getStrArrayAttr(outs)),
            b.getNamedAttr("attributes", b.getDictionaryAttr(nattrs)),
        }));
      }
      return success();
    };
    llvm::StringSet<> algoValues, initValues;
    SmallVector<Attribute> algoNodes, initNodes;
    if (failed(validateGraph(info.algorithm(), "algorithm", algoValues,
                             algoNodes)) ||
        failed(validateGraph(info.initialization(), "initialization",
                             initValues, initNodes)))
      return failure();
    auto bindings = [&](const auto &list, llvm::StringSet<> &produced,
                        StringRef kind) -> FailureOr<DictionaryAttr> {
      SmallVector<NamedAttribute> out;
      for (const auto &kv : list) {
        if (!initializers.contains(kv.key()))
          return error() << where << "." << kind << ": key '" << kv.key()
                         << "' is not an initializer of the model";
        if (!produced.contains(kv.value()))
          return error() << where << "." << kind << ": value '" << kv.value()
                         << "' is not produced by the "
                         << (kind == "update_binding" ? "algorithm"
                                                      : "initialization");
        out.push_back(b.getNamedAttr(kv.key(), b.getStringAttr(kv.value())));
      }
      return b.getDictionaryAttr(out);
    };
    FailureOr<DictionaryAttr> update =
        bindings(info.update_binding(), algoValues, "update_binding");
    if (failed(update))
      return failure();
    FailureOr<DictionaryAttr> init = bindings(info.initialization_binding(),
                                              initValues,
                                              "initialization_binding");
    if (failed(init))
      return failure();
    infos.push_back(b.getDictionaryAttr({
        b.getNamedAttr("algorithm", b.getArrayAttr(algoNodes)),
        b.getNamedAttr("initialization", b.getArrayAttr(initNodes)),
        b.getNamedAttr("update_binding", *update),
        b.getNamedAttr("initialization_binding", *init),
    }));
  }
  module->setAttr(attrs::kTrainingInfo, b.getArrayAttr(infos));
  return success();
}

/// Marks parameters that reach the loss (or, without a loss, any float
/// output) through float values: those are the ones training updates.
void markTrainable(func::FuncOp func, ArrayRef<unsigned> paramArgs,
                   std::optional<unsigned> lossResult) {
  Operation *ret = func.getBody().front().getTerminator();
  llvm::DenseSet<Value> targets;
  for (auto [i, v] : llvm::enumerate(ret->getOperands()))
    if (!lossResult || i == *lossResult)
      targets.insert(v);
  for (unsigned arg : paramArgs) {
    Value start = func.getArgument(arg);
    if (!isa<FloatType>(cast<ShapedType>(start.getType()).getElementType()))
      continue;
    SmallVector<Value> work{start};
    llvm::DenseSet<Value> seen{start};
    bool reaches = false;
    while (!work.empty() && !reaches) {
      Value v = work.pop_back_val();
      if (targets.contains(v)) {
        reaches = true;
        break;
      }
      for (Operation *user : v.getUsers()) {
        if (user == ret)
          continue;
        for (Value r : user->getResults()) {
          auto st = dyn_cast<ShapedType>(r.getType());
          if (st && isa<FloatType>(st.getElementType()) &&
              seen.insert(r).second)
            work.push_back(r);
        }
      }
    }
    if (reaches)
      func.setArgAttr(arg, attrs::kTrainable, UnitAttr::get(func.getContext()));
  }
}

FailureOr<OwningOpRef<ModuleOp>> Importer::run() {
  const onnx::GraphProto &g = model.graph();
  for (const auto &op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx")
      opset = op.version();
  if (opset == 0) {
    bool onlyTraining = llvm::all_of(g.node(), [](const onnx::NodeProto &n) {
      return n.domain() == kTrainingDomain;
    });
    if (!onlyTraining)
      return error() << "the model imports no default-domain opset";
    opset = 17; // nothing of the default domain is used
  }

  for (const auto &vi : g.value_info())
    inferredTypes[vi.name()] = &vi.type();
  for (const auto &vi : g.output())
    inferredTypes[vi.name()] = &vi.type();

  // --input-shape must name graph inputs.
  llvm::StringSet<> inputNames, initNames;
  for (const auto &init : g.initializer())
    initNames.insert(init.name());
  for (const auto &in : g.input())
    if (!initNames.contains(in.name()))
      inputNames.insert(in.name());
  for (const auto &entry : options.inputShapes) {
    if (!inputNames.contains(entry.getKey())) {
      std::string list;
      for (const auto &in : g.input())
        if (!initNames.contains(in.name()))
          list += (list.empty() ? "" : ", ") + in.name();
      return error() << "--input-shape names '" << entry.getKey()
                     << "', which is not a graph input (inputs: " << list
                     << ")";
    }
  }

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  builder.setInsertionPointToEnd(module->getBody());
  (*module)->setAttr(attrs::kSource,
                     builder.getStringAttr(llvm::sys::path::filename(path)));
  (*module)->setAttr(attrs::kOpset, builder.getI64IntegerAttr(opset));
  if (!model.producer_name().empty())
    (*module)->setAttr(
        attrs::kProducer,
        builder.getStringAttr(
            model.producer_version().empty()
                ? model.producer_name()
                : model.producer_name() + " " + model.producer_version()));

  // Arguments: graph inputs first, then float initializers (parameters).
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<std::string> argNames;
  for (const auto &in : g.input()) {
    if (initNames.contains(in.name()))
      continue;
    FailureOr<RankedTensorType> t = typeFromProto(in.type(), in.name(), "input");
    if (failed(t))
      return failure();
    argTypes.push_back(*t);
    argAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(attrs::kInput, builder.getStringAttr(in.name()))));
    argNames.push_back(in.name());
  }
  SmallVector<const onnx::TensorProto *> constInits;
  SmallVector<unsigned> paramArgs;
  SmallVector<const onnx::TensorProto *> paramInits;
  llvm::StringSet<> seenInit;
  for (const auto &init : g.initializer()) {
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
      constInits.push_back(&init);
      continue;
    }
    SmallVector<int64_t> shape(init.dims().begin(), init.dims().end());
    paramArgs.push_back(argTypes.size());
    paramInits.push_back(&init);
    argTypes.push_back(RankedTensorType::get(shape, elt));
    argAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        attrs::kParam, builder.getStringAttr(init.name()))));
    argNames.push_back(init.name());
  }

  auto func = func::FuncOp::create(builder, fileLoc, "forward",
                                   builder.getFunctionType(argTypes, {}));
  func.setAllArgAttrs(argAttrs);
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  for (auto [i, name] : llvm::enumerate(argNames))
    values[name] = entry->getArgument(i);
  for (auto [arg, init] : llvm::zip(paramArgs, paramInits))
    paramData[entry->getArgument(arg)] = init;
  for (const onnx::TensorProto *init : constInits) {
    FailureOr<DenseElementsAttr> attr =
        tensorToAttr(*init, "initializer '" + init->name() + "'");
    if (failed(attr))
      return failure();
    values[init->name()] = ConstantOp::create(
        builder, fileLoc, attr->getType(), cast<ElementsAttr>(*attr));
  }

  for (auto [i, node] : llvm::enumerate(g.node()))
    if (failed(importNode(node, i)))
      return failure();

  // training_info's algorithm, built after the graph.
  SmallVector<std::pair<std::string, Value>> updates;
  if (options.runTrainingInfo) {
    if (model.training_info_size() == 0)
      return error() << "--training-info: the model has no training_info";
    const onnx::TrainingInfoProto &info = model.training_info(0);
    const onnx::GraphProto &algo = info.algorithm();
    for (const auto &init : algo.initializer()) {
      FailureOr<DenseElementsAttr> attr =
          tensorToAttr(init, "algorithm initializer '" + init.name() + "'");
      if (failed(attr))
        return failure();
      values[init.name()] = ConstantOp::create(
          builder, fileLoc, attr->getType(), cast<ElementsAttr>(*attr));
    }
    for (auto [i, node] : llvm::enumerate(algo.node()))
      if (failed(importNode(node, g.node_size() + i)))
        return failure();
    for (const auto &kv : info.update_binding()) {
      auto arg = llvm::find(argNames, kv.key());
      unsigned index = arg - argNames.begin();
      if (arg == argNames.end() || !llvm::is_contained(paramArgs, index))
        return error() << "training_info updates '" << kv.key()
                       << "', which is not a float initializer (ds updates "
                          "float parameters only)";
      auto v = values.find(kv.value());
      if (v == values.end())
        return error() << "training_info binds '" << kv.key()
                       << "' to '" << kv.value() << "', which is not computed";
      if (v->second.getType() != argTypes[index])
        return error() << "training_info binds '" << kv.key()
                       << "' to a value of another type";
      updates.push_back({kv.key(), v->second});
    }
  }

  // Results: the graph outputs, the loss marked.
  SmallVector<Value> results;
  SmallVector<std::string> outNames;
  std::optional<unsigned> loss;
  SmallVector<std::string> scalarOutputs;
  for (const auto &out : g.output()) {
    auto it = values.find(out.name());
    if (it == values.end())
      return error() << "graph output '" << out.name()
                     << "' is not computed by any node";
    auto type = cast<ShapedType>(it->second.getType());
    if (type.getNumElements() == 1 && type.getRank() == 0 &&
        isa<FloatType>(type.getElementType()))
      scalarOutputs.push_back(out.name());
    results.push_back(it->second);
    outNames.push_back(out.name());
  }
  if (!options.lossName.empty()) {
    auto pos = llvm::find(outNames, options.lossName);
    if (pos == outNames.end())
      return error() << "--loss names '" << options.lossName
                     << "', which is not a graph output (outputs: "
                     << llvm::join(outNames, ", ") << ")";
    if (!llvm::is_contained(scalarOutputs, options.lossName))
      return error() << "--loss names '" << options.lossName
                     << "', which is not a scalar float output";
    loss = pos - outNames.begin();
  } else if (scalarOutputs.size() == 1) {
    loss = llvm::find(outNames, scalarOutputs[0]) - outNames.begin();
  }
  // Several candidates and no --loss: no loss is marked; training asks for
  // one (the autodiff pass names the candidates), forward runs need none.
  for (auto &[name, v] : updates)
    results.push_back(v);
  func::ReturnOp::create(builder, fileLoc, results);
  func.setType(builder.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (auto [i, name] : llvm::enumerate(outNames)) {
    func.setResultAttr(i, attrs::kOutput, builder.getStringAttr(name));
    if (loss && *loss == i)
      func.setResultAttr(i, attrs::kLoss, builder.getUnitAttr());
  }
  for (auto [i, update] : llvm::enumerate(updates)) {
    unsigned r = outNames.size() + i;
    func.setResultAttr(r, "ds.update", builder.getStringAttr(update.first));
    func.setResultAttr(r, attrs::kOutput,
                       builder.getStringAttr("update:" + update.first));
  }
  markTrainable(func, paramArgs, loss);
  if (!loss && scalarOutputs.size() > 1) {
    SmallVector<StringRef> names(scalarOutputs.begin(), scalarOutputs.end());
    func->setAttr("ds.loss_candidates", builder.getStrArrayAttr(names));
  }

  if (failed(importTrainingInfo(*module)))
    return failure();
  if (failed(mlir::verify(*module)))
    return failure();
  return module;
}

} // namespace

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

std::vector<std::string> ds::supportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &entry : Importer::handlers())
    ops.push_back(entry.getKey().str());
  for (const auto &entry : Importer::trainingHandlers())
    ops.push_back((kTrainingDomain + "." + entry.getKey()).str());
  llvm::sort(ops);
  return ops;
}

FailureOr<OwningOpRef<ModuleOp>>
ds::importOnnxFile(MLIRContext *context, StringRef path,
                   const ImportOptions &options) {
  context->loadDialect<DsDialect, func::FuncDialect>();
  Location fileLoc = FileLineColLoc::get(context, llvm::sys::path::filename(path), 0, 0);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return mlir::emitError(fileLoc)
           << "cannot read '" << path << "': " << buffer.getError().message();
  StringRef bytes = (*buffer)->getBuffer();
  auto phase = [&, t = std::chrono::steady_clock::now()](
                   const char *what) mutable {
    auto now = std::chrono::steady_clock::now();
    if (options.onPhase)
      options.onPhase(what,
                      std::chrono::duration<double, std::milli>(now - t).count());
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
  // The ONNX checker and shape inference throw on malformed models.
  try {
    checkModel(model, path);
  } catch (const std::exception &e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    return mlir::emitError(fileLoc)
           << "the ONNX checker rejects '" << path << "': " << msg;
  }

  phase("check");
  // Fix dynamic input dimensions before shape inference, so that inferred
  // shapes are static wherever they can be.
  for (auto &in : *model.mutable_graph()->mutable_input()) {
    auto it = options.inputShapes.find(in.name());
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
  try {
    onnx::shape_inference::InferShapes(model);
  } catch (const std::exception &e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    return mlir::emitError(fileLoc)
           << "ONNX shape inference fails on '" << path << "': " << msg;
  }

  phase("infer");
  Importer importer(context, model, path, options);
  auto result = importer.run();
  phase("build");
  return result;
}
