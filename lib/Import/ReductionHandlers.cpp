//===- ReductionHandlers.cpp - ONNX reductions to ds ----------------------===//
//
// Part of the ds project.
//
// ReduceSum, ReduceMean and ReduceMax: axes as an attribute or (from the
// opset where each op moved them) a constant input, keepdims, and
// noop_with_empty_axes.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include <algorithm>

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

template <typename OpTy>
LogicalResult reduce(NodeContext &n, int64_t axesInputSince) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  auto axes = n.axesOperand(axesInputSince);
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

} // namespace

void registerReductionHandlers(HandlerTable &t) {
  // The opset from which each op takes its axes as an input.
  t.add("ReduceSum", [](NodeContext &n) { return reduce<ReduceSumOp>(n, 13); });
  t.add("ReduceMean",
        [](NodeContext &n) { return reduce<ReduceMeanOp>(n, 18); });
  t.add("ReduceMax", [](NodeContext &n) { return reduce<ReduceMaxOp>(n, 18); });
}

} // namespace mlir::ds::onnx_import
