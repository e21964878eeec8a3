//===- Tensors.cpp - ONNX types and tensors to MLIR types and attributes --===//
//
// Part of the ds project.
//
// Element types, value types (with --input-shape fixing dynamic
// dimensions), and TensorProto data (raw bytes, typed fields, or an
// external file beside the model) as dense attributes, for initializers and
// Constant nodes.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstdlib>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;
namespace sh = mlir::ds::shapes;

Type onnx_import::elementType(MLIRContext *ctx, int32_t onnxType) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT:
    return Float32Type::get(ctx);
  case onnx::TensorProto::FLOAT16:
    return Float16Type::get(ctx);
  case onnx::TensorProto::BFLOAT16:
    return BFloat16Type::get(ctx);
  case onnx::TensorProto::INT64:
    return IntegerType::get(ctx, 64);
  case onnx::TensorProto::INT32:
    return IntegerType::get(ctx, 32);
  case onnx::TensorProto::BOOL:
    return IntegerType::get(ctx, 1);
  default:
    return nullptr;
  }
}

std::string onnx_import::elementTypeName(int32_t onnxType) {
  if (onnx::TensorProto::DataType_IsValid(onnxType))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(onnxType));
  return "type #" + std::to_string(onnxType);
}

//===----------------------------------------------------------------------===//
// Value types
//===----------------------------------------------------------------------===//

FailureOr<RankedTensorType> Importer::typeFromProto(const onnx::TypeProto &type,
                                                    StringRef name,
                                                    StringRef what) {
  if (!type.has_tensor_type())
    return error() << what << " '" << name << "' is not a tensor";
  const auto &tt = type.tensor_type();
  Type elt = elementType(ctx, tt.elem_type());
  if (!elt)
    return error() << what << " '" << name << "' has unsupported element type "
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
      return error() << what << " '" << name << "' has dynamic dimension " << i
                     << sym << "; fix it with --input-shape=" << name
                     << ":DIMS (e.g. 4x64)";
    }
    shape.push_back(d.dim_value());
  }
  return RankedTensorType::get(shape, elt);
}

//===----------------------------------------------------------------------===//
// Tensor data
//===----------------------------------------------------------------------===//

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
                   << offset + length << ") lies outside '" << file << "' of "
                   << size << " bytes";
  if (!load)
    return std::string();
  auto buf = llvm::MemoryBuffer::getFileSlice(file, length, offset);
  if (!buf)
    return error() << what << ": cannot read '" << file << "'";
  return (*buf)->getBuffer().str();
}

/// Little-endian bytes of `type`'s elements (one byte per bool), already
/// checked to be of the right size.
static DenseElementsAttr rawToAttr(RankedTensorType type,
                                   const std::string &raw) {
  if (type.getElementType().isInteger(1)) {
    SmallVector<bool> v;
    for (char c : raw)
      v.push_back(c != 0);
    return DenseElementsAttr::get(type, ArrayRef<bool>(v));
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, ArrayRef<char>(raw.data(), raw.size()));
}

/// The typed data fields of `t`: float_data, int64_data, or int32_data
/// (INT32, BOOL, and the bits of FLOAT16 and BFLOAT16).
static FailureOr<DenseElementsAttr>
fieldsToAttr(const onnx::TensorProto &t, RankedTensorType type,
             llvm::function_ref<InFlightDiagnostic(int64_t)> countError) {
  int64_t count = type.getNumElements();
  Type elt = type.getElementType();
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

FailureOr<DenseElementsAttr> Importer::tensorToAttr(const onnx::TensorProto &t,
                                                    StringRef what) {
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

  if (shapesOnly && count > 0 && !hasTensorData(t))
    return error() << what
                   << " has no data (the model is shapes-only, metadata '"
                   << kShapesOnlyKey
                   << "'), but its value is needed at compile time";

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
      return error() << what << " holds " << raw->size() << " bytes, its shape "
                     << shapeStr(shape) << " needs " << count * width;
    return rawToAttr(type, *raw);
  }
  return fieldsToAttr(t, type, [&](int64_t have) {
    return error() << what << " holds " << have << " values, its shape "
                   << shapeStr(shape) << " needs " << count;
  });
}
