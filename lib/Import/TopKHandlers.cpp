//===- TopKHandlers.cpp - ONNX TopK to ds.topk ----------------------------===//
//
// Part of the ds project.
//
// TopK (misc family, issue 22): K a constant (the `k` attribute before
// opset 10, a constant input from then on: ds plans static shapes), axis
// (negative counts from the end), largest. Both outputs come from one
// ds.topk; `sorted = 0` lets ONNX return the k elements in any order, and
// ds returns them sorted. The gradient flows through the values to the
// selected positions (ds.topk_grad); the indices have none. Float input
// only.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace {

LogicalResult topK(NodeContext &n) {
  bool kAsInput = n.opset() >= 10;
  if (failed(n.expectInputs(kAsInput ? 2 : 1, kAsInput ? 2 : 1)) ||
      failed(n.requireFloat(0)))
    return failure();
  auto type = cast<RankedTensorType>(n.input(0).getType());
  if (type.getRank() == 0)
    return n.error() << "expects an input of rank >= 1";
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  int64_t k = n.intAttr("k", -1);
  if (kAsInput) {
    FailureOr<SmallVector<int64_t>> kv = n.constInts(1, "K");
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return n.error() << "K (input 1) must hold one value, got "
                       << kv->size();
    k = kv->front();
  }
  int64_t len = type.getDimSize(*axis);
  if (k < 1 || k > len)
    return n.error() << "K = " << k << " is outside [1, " << len
                     << "] (the input's size along axis " << *axis << ")";
  SmallVector<int64_t> shape(type.getShape());
  shape[*axis] = k;
  OpBuilder &b = n.builder();
  return n.emit<TopKOp>(n.tensor(shape, type.getElementType()),
                        n.tensor(shape, b.getI64Type()), n.input(0),
                        b.getI64IntegerAttr(k), b.getI64IntegerAttr(*axis),
                        b.getBoolAttr(n.intAttr("largest", 1) != 0));
}

} // namespace

void registerTopKHandlers(HandlerTable &t) { t.add("TopK", topK); }

} // namespace mlir::ds::onnx_import
