//===- DsMultiTensor.cpp - ds.multi_adam and ds.multi_sgd -----------------===//
//
// Part of the ds project.
//
// The verifiers and costs of the multi-tensor optimizer steps that
// `--ds-fuse-optimizer` makes (DsMultiTensor.td): N parameters, their N
// gradients and N of each state, parameter i's all of one f32 type, and one
// result per parameter and state in that order. Their kernels are in
// lib/Runtime/Cpu/MultiTensor.cpp and lib/Runtime/Cuda/MultiTensor.cu.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"

using namespace mlir;
using namespace mlir::ds;

namespace {

/// `groups` holds the params, the grads and each state's tensors; results
/// are the new params then the new states.
LogicalResult verifyMultiTensor(Operation *op, ArrayRef<OperandRange> groups,
                                Value step, double lr) {
  size_t n = groups[0].size();
  if (n == 0)
    return op->emitOpError("expects at least one parameter");
  for (OperandRange g : groups)
    if (g.size() != n)
      return op->emitOpError("expects as many gradients and states as "
                             "parameters (")
             << n << "), got " << g.size();
  size_t states = groups.size() - 2;
  if (op->getNumResults() != n * (1 + states))
    return op->emitOpError("expects ")
           << n * (1 + states) << " results (new parameters, then states), got "
           << op->getNumResults();
  for (size_t i = 0; i < n; ++i) {
    Type t = groups[0][i].getType();
    if (!cast<ShapedType>(t).getElementType().isF32())
      return op->emitOpError("parameter ") << i << " is not f32: " << t;
    for (OperandRange g : groups)
      if (g[i].getType() != t)
        return op->emitOpError("parameter ")
               << i << ", its gradient and states must have one type";
    for (size_t s = 0; s <= states; ++s)
      if (op->getResult(s * n + i).getType() != t)
        return op->emitOpError("result ")
               << s * n + i << " must have parameter " << i << "'s type";
  }
  if (cast<ShapedType>(step.getType()).getNumElements() != 1)
    return op->emitOpError("step must be a scalar");
  if (lr < 0)
    return op->emitOpError("learning rate ") << lr << " is negative";
  return success();
}

int64_t totalElements(OperandRange params) {
  int64_t n = 0;
  for (Value p : params)
    n += ds::detail::numElements(p.getType());
  return n;
}

} // namespace

LogicalResult MultiAdamOp::verify() {
  return verifyMultiTensor(
      *this, {getParams(), getGrads(), getExpAvgs(), getExpAvgSqs()},
      getStep(), getLr().convertToDouble());
}

LogicalResult MultiSgdOp::verify() {
  bool momentum = getMomentum().convertToDouble() != 0.0;
  if (momentum == getMomentumBuffers().empty())
    return emitOpError(momentum ? "expects a momentum buffer per parameter"
                                : "has momentum buffers but momentum 0");
  SmallVector<OperandRange> groups = {getParams(), getGrads()};
  if (momentum)
    groups.push_back(getMomentumBuffers());
  return verifyMultiTensor(*this, groups, getStep(),
                           getLr().convertToDouble());
}

// Per element as ds.adam and ds.sgd (DsOps.cpp).
int64_t MultiAdamOp::getFlops() { return 12 * totalElements(getParams()); }
int64_t MultiSgdOp::getFlops() { return 6 * totalElements(getParams()); }
