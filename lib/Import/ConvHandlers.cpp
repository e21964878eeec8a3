//===- ConvHandlers.cpp - ONNX Conv and ConvTranspose to ds ---------------===//
//
// Part of the ds project.
//
// Conv imports as ds.conv, ConvTranspose as ds.conv_grad_input (the
// gradient of the convolution whose input is the transposed convolution's
// output) plus its bias. Both resolve auto_pad (and ConvTranspose's
// output_shape) into explicit pads here, so the ops carry pads only.
// f32 only: 16-bit convolutions are refused.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

/// The attributes both nodes share, defaults filled in.
struct ConvAttrs {
  SmallVector<int64_t> strides, pads, dilations, outputPadding;
  int64_t group = 1;
  std::string autoPad;
};

/// An ints attribute of `k` values (`dflt` each when absent).
FailureOr<SmallVector<int64_t>> intsOf(NodeContext &n, StringRef key,
                                       size_t k, int64_t dflt) {
  std::optional<SmallVector<int64_t>> v = n.intsAttr(key);
  if (!v)
    return SmallVector<int64_t>(k, dflt);
  if (v->size() != k)
    return n.error() << "'" << key << "' must have " << k << " values";
  return *v;
}

/// Checks operands (f32, ranks 3..5, kernel_shape if given) and reads the
/// attributes of a node whose weight is input 1.
FailureOr<ConvAttrs> readAttrs(NodeContext &n) {
  if (failed(n.expectInputs(2, 3)) || failed(n.requireFloat(0)))
    return failure();
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (n.input(i) && !n.elementTypeOf(i).isF32())
      return n.error() << "only f32 convolutions are supported (got "
                       << n.elementTypeOf(i) << ")";
  size_t rank = n.shape(0).size();
  if (rank < 3 || rank > 5 || n.shape(1).size() != rank)
    return n.error() << "expects input and weight of one rank in 3..5";
  size_t k = rank - 2;
  ConvAttrs a;
  if (std::optional<SmallVector<int64_t>> ks = n.intsAttr("kernel_shape"))
    if (ArrayRef<int64_t>(*ks) != n.shape(1).drop_front(2))
      return n.error() << "kernel_shape does not match the weight's shape";
  FailureOr<SmallVector<int64_t>> strides = intsOf(n, "strides", k, 1),
                                  dilations = intsOf(n, "dilations", k, 1),
                                  pads = intsOf(n, "pads", 2 * k, 0),
                                  outPad = intsOf(n, "output_padding", k, 0);
  if (failed(strides) || failed(dilations) || failed(pads) || failed(outPad))
    return failure();
  a.strides = *strides;
  a.dilations = *dilations;
  a.pads = *pads;
  a.outputPadding = *outPad;
  a.group = n.intAttr("group", 1);
  a.autoPad = n.stringAttr("auto_pad", "NOTSET");
  if (a.autoPad != "NOTSET" && a.autoPad != "VALID" &&
      a.autoPad != "SAME_UPPER" && a.autoPad != "SAME_LOWER")
    return n.error() << "unknown auto_pad '" << a.autoPad << "'";
  if (a.autoPad == "VALID")
    a.pads.assign(2 * k, 0);
  return a;
}

/// Splits a dimension's total padding between begin and end as SAME_UPPER
/// (the extra one at the end) or SAME_LOWER does.
void splitPad(ConvAttrs &a, size_t i, int64_t total, bool upper) {
  size_t k = a.strides.size();
  total = std::max<int64_t>(total, 0);
  a.pads[i] = upper ? total / 2 : total - total / 2;
  a.pads[k + i] = total - a.pads[i];
}

/// The span of a dilated kernel along spatial dimension `i`.
int64_t kernelSpan(const ConvAttrs &a, ArrayRef<int64_t> weight, size_t i) {
  return a.dilations[i] * (weight[2 + i] - 1) + 1;
}

LogicalResult conv(NodeContext &n) {
  FailureOr<ConvAttrs> a = readAttrs(n);
  if (failed(a))
    return failure();
  ArrayRef<int64_t> x = n.shape(0), w = n.shape(1);
  if (a->autoPad == "SAME_UPPER" || a->autoPad == "SAME_LOWER")
    for (size_t i = 0; i < a->strides.size(); ++i) {
      int64_t out = (x[2 + i] + a->strides[i] - 1) / a->strides[i];
      splitPad(*a, i,
               (out - 1) * a->strides[i] + kernelSpan(*a, w, i) - x[2 + i],
               a->autoPad == "SAME_UPPER");
    }
  FailureOr<sh::Shape> shape = sh::conv(x, w, a->strides, a->pads,
                                        a->dilations, a->group, n.emitFn());
  if (failed(shape))
    return failure();
  if (n.input(2) && (n.shape(2).size() != 1 || n.shape(2)[0] != w[0]))
    return n.error() << "bias must be 1-D with one element per output channel";
  OpBuilder &b = n.builder();
  return n.emit<ConvOp>(n.tensor(*shape, n.elementTypeOf(0)), n.input(0),
                        n.input(1), n.input(2),
                        b.getDenseI64ArrayAttr(a->strides),
                        b.getDenseI64ArrayAttr(a->pads),
                        b.getDenseI64ArrayAttr(a->dilations),
                        b.getI64IntegerAttr(a->group));
}

/// ConvTranspose's output shape: output_shape's spatial sizes (its pads
/// then follow from them, as auto_pad says) or the pads' result.
FailureOr<sh::Shape> transposedShape(NodeContext &n, ConvAttrs &a) {
  ArrayRef<int64_t> x = n.shape(0), w = n.shape(1);
  size_t k = a.strides.size();
  std::optional<SmallVector<int64_t>> given = n.intsAttr("output_shape");
  if (given && given->size() == k + 2)
    given->erase(given->begin(), given->begin() + 2);
  if (given && given->size() != k)
    return n.error() << "output_shape must have " << k << " spatial sizes";
  bool same = a.autoPad == "SAME_UPPER" || a.autoPad == "SAME_LOWER";
  sh::Shape out{x[0], w[1] * a.group};
  for (size_t i = 0; i < k; ++i) {
    int64_t full = a.strides[i] * (x[2 + i] - 1) + a.outputPadding[i] +
                   kernelSpan(a, w, i);
    int64_t size = given ? (*given)[i]
                   : same ? x[2 + i] * a.strides[i]
                          : full - a.pads[i] - a.pads[k + i];
    if (given || same)
      splitPad(a, i, full - size, a.autoPad == "SAME_UPPER");
    if (a.outputPadding[i] >= a.strides[i])
      return n.error() << "output_padding must be smaller than the stride";
    out.push_back(size);
  }
  return out;
}

LogicalResult convTranspose(NodeContext &n) {
  FailureOr<ConvAttrs> a = readAttrs(n);
  if (failed(a))
    return failure();
  FailureOr<sh::Shape> shape = transposedShape(n, *a);
  if (failed(shape))
    return failure();
  int64_t channels = (*shape)[1];
  if (n.input(2) && (n.shape(2).size() != 1 || n.shape(2)[0] != channels))
    return n.error() << "bias must be 1-D with one element per output channel";
  OpBuilder &b = n.builder();
  Type elt = n.elementTypeOf(0);
  auto type = cast<RankedTensorType>(n.tensor(*shape, elt));
  Value y = ConvGradInputOp::create(
      b, n.loc, type, n.input(0), n.input(1), b.getDenseI64ArrayAttr(a->strides),
      b.getDenseI64ArrayAttr(a->pads), b.getDenseI64ArrayAttr(a->dilations),
      b.getI64IntegerAttr(a->group));
  if (!n.input(2))
    return n.bind(y);
  sh::Shape biasShape(shape->size(), 1);
  biasShape[1] = channels;
  Value bias =
      ReshapeOp::create(b, n.loc, n.tensor(biasShape, elt), n.input(2));
  return n.emit<AddOp>(Type(type), y, bias);
}

} // namespace

void registerConvHandlers(HandlerTable &t) {
  t.add("Conv", conv);
  t.add("ConvTranspose", convTranspose);
}

} // namespace mlir::ds::onnx_import
