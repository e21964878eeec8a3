//===- DsTopK.cpp - ds.topk and its gradient ------------------------------===//
//
// Part of the ds project.
//
// The verifiers and costs of ds.topk and ds.topk_grad (the misc family of
// issue 22). Their VJP is in DsVJP.cpp; their kernels in
// lib/Runtime/Cpu/TopK.cpp and lib/Runtime/Cuda/TopK.cu.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"

#include <cmath>

using namespace mlir;
using namespace mlir::ds;

/// `selected` (values, indices or the incoming gradient) has `whole`'s
/// shape with `k` along `axis`.
static LogicalResult verifySelection(Operation *op, RankedTensorType whole,
                                     RankedTensorType selected, int64_t axis,
                                     int64_t k, StringRef what) {
  if (axis < 0 || axis >= whole.getRank())
    return op->emitOpError("axis ") << axis << " is out of range for "
                                    << whole;
  bool ok = selected.getRank() == whole.getRank();
  for (int64_t d = 0; ok && d < whole.getRank(); ++d)
    ok = selected.getDimSize(d) == (d == axis ? k : whole.getDimSize(d));
  if (!ok)
    return op->emitOpError("expects ")
           << what << " of shape " << whole << " with " << k << " along axis "
           << axis << ", got " << selected;
  return success();
}

LogicalResult TopKOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  int64_t k = static_cast<int64_t>(getK());
  int64_t axis = static_cast<int64_t>(getAxis());
  if (axis >= 0 && axis < in.getRank() && (k < 1 || k > in.getDimSize(axis)))
    return emitOpError("k = ") << k << " is outside [1, "
                               << in.getDimSize(axis) << "]";
  if (getValues().getType().getElementType() != in.getElementType())
    return emitOpError("values must have the input's element type");
  if (failed(verifySelection(*this, in, getValues().getType(), axis, k,
                             "values")))
    return failure();
  return verifySelection(*this, in, getIndices().getType(), axis, k,
                         "indices");
}

LogicalResult TopKGradOp::verify() {
  auto grad = getGrad().getType();
  auto out = getResult().getType();
  int64_t axis = static_cast<int64_t>(getAxis());
  if (grad.getElementType() != out.getElementType())
    return emitOpError("grad and result element types differ");
  if (getIndices().getType().getShape() != grad.getShape())
    return emitOpError("indices must have the gradient's shape");
  int64_t k = axis >= 0 && axis < grad.getRank() ? grad.getDimSize(axis) : 0;
  return verifySelection(*this, out, grad, axis, k, "grad");
}

/// Per row of n elements: about n log2(k) comparisons to select and order
/// k of them.
int64_t TopKOp::getFlops() {
  auto in = cast<RankedTensorType>(getInput().getType());
  int64_t k = static_cast<int64_t>(getK());
  int64_t logK = 1 + static_cast<int64_t>(std::log2(static_cast<double>(k)));
  return detail::numElements(in) * logK;
}

/// A zero fill and one add per selected element.
int64_t TopKGradOp::getFlops() {
  return detail::numElements(getResult().getType()) +
         detail::numElements(getGrad().getType());
}
