//===- DsPooling.cpp - ds.max_pool, ds.avg_pool and their gradients -------===//
//
// Part of the ds project.
//
// The verifiers and costs of the pooling ops. The output size rule is
// include/ds/Support/Pooling.h's, which the importer and the kernels read
// too.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Support/Pooling.h"

using namespace mlir;
using namespace mlir::ds;

namespace {

/// A pooling's window attributes (dilations empty for the average).
struct Window {
  ArrayRef<int64_t> kernel, strides, pads, dilations;
  bool ceilMode;
};

/// Checks the attributes against the input's rank and that `pooled` is
/// the pooling of `input`: N and C kept, each spatial size the rule's.
LogicalResult verifyPool(Operation *op, const Window &w, ShapedType input,
                         ShapedType pooled) {
  int64_t nd = input.getRank() - 2;
  if (nd < 1 || nd > ::ds::kMaxPoolDims)
    return op->emitOpError("expects 1 to 3 spatial dimensions, got ") << nd;
  if (static_cast<int64_t>(w.kernel.size()) != nd ||
      static_cast<int64_t>(w.strides.size()) != nd ||
      static_cast<int64_t>(w.pads.size()) != 2 * nd ||
      (!w.dilations.empty() && static_cast<int64_t>(w.dilations.size()) != nd))
    return op->emitOpError("expects kernel_shape, strides and dilations of ")
           << nd << " values and pads of " << 2 * nd;
  for (int64_t i = 0; i < nd; ++i) {
    int64_t dilation = w.dilations.empty() ? 1 : w.dilations[i];
    if (w.kernel[i] < 1 || w.strides[i] < 1 || dilation < 1 ||
        w.pads[i] < 0 || w.pads[nd + i] < 0)
      return op->emitOpError("expects positive kernel_shape, strides and "
                             "dilations and non-negative pads");
  }
  if (pooled.getRank() != input.getRank() ||
      pooled.getDimSize(0) != input.getDimSize(0) ||
      pooled.getDimSize(1) != input.getDimSize(1))
    return op->emitOpError("expects the pooled tensor to keep N and C");
  for (int64_t i = 0; i < nd; ++i) {
    int64_t want = ::ds::pooledSize(
        input.getDimSize(2 + i), w.kernel[i], w.strides[i], w.pads[i],
        w.pads[nd + i], w.dilations.empty() ? 1 : w.dilations[i], w.ceilMode);
    if (want < 1 || pooled.getDimSize(2 + i) != want)
      return op->emitOpError("spatial dimension ")
             << i << " of the pooled tensor is " << pooled.getDimSize(2 + i)
             << ", the window gives " << want;
  }
  return success();
}

ShapedType shaped(Value v) { return cast<ShapedType>(v.getType()); }

/// Taps per window times the pooled elements: one compare or add each.
int64_t windowFlops(ArrayRef<int64_t> kernel, Type pooled) {
  int64_t taps = 1;
  for (int64_t k : kernel)
    taps *= k;
  return mlir::ds::detail::numElements(pooled) * taps;
}

} // namespace

LogicalResult MaxPoolOp::verify() {
  if (shaped(getResult()).getElementType() !=
      shaped(getInput()).getElementType())
    return emitOpError("expects the input's element type");
  return verifyPool(*this,
                    {getKernelShape(), getStrides(), getPads(), getDilations(),
                     getCeilMode()},
                    shaped(getInput()), shaped(getResult()));
}

LogicalResult MaxPoolGradOp::verify() {
  if (getInput().getType() != getType())
    return emitOpError("expects the result typed as the input");
  return verifyPool(*this,
                    {getKernelShape(), getStrides(), getPads(), getDilations(),
                     getCeilMode()},
                    shaped(getInput()), shaped(getGrad()));
}

LogicalResult AvgPoolOp::verify() {
  if (shaped(getResult()).getElementType() !=
      shaped(getInput()).getElementType())
    return emitOpError("expects the input's element type");
  return verifyPool(*this,
                    {getKernelShape(), getStrides(), getPads(), {},
                     getCeilMode()},
                    shaped(getInput()), shaped(getResult()));
}

LogicalResult AvgPoolGradOp::verify() {
  if (shaped(getResult()).getElementType() !=
      shaped(getGrad()).getElementType())
    return emitOpError("expects the gradient's element type");
  return verifyPool(*this,
                    {getKernelShape(), getStrides(), getPads(), {},
                     getCeilMode()},
                    shaped(getResult()), shaped(getGrad()));
}

int64_t MaxPoolOp::getFlops() { return windowFlops(getKernelShape(), getType()); }

int64_t MaxPoolGradOp::getFlops() {
  return windowFlops(getKernelShape(), getGrad().getType());
}

int64_t AvgPoolOp::getFlops() { return windowFlops(getKernelShape(), getType()); }

int64_t AvgPoolGradOp::getFlops() {
  return windowFlops(getKernelShape(), getGrad().getType());
}
