//===- DsConv.cpp - ds.conv and its two gradients -------------------------===//
//
// Part of the ds project.
//
// The convolution's shape rule (shared with the importer), the verifiers
// of ds.conv, ds.conv_grad_input and ds.conv_grad_weight (each checks its
// operands against the rule of the forward convolution it belongs to) and
// their costs.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"

using namespace mlir;
using namespace mlir::ds;

FailureOr<shapes::Shape>
shapes::conv(ArrayRef<int64_t> input, ArrayRef<int64_t> weight,
             ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
             ArrayRef<int64_t> dilations, int64_t group,
             EmitErrorFn emitError) {
  int64_t rank = static_cast<int64_t>(input.size());
  int64_t k = rank - 2;
  if (rank < 3 || rank > 5 || static_cast<int64_t>(weight.size()) != rank)
    return emitError() << "convolution expects input and weight of one rank "
                          "in 3..5 (1 to 3 spatial dimensions)";
  if (static_cast<int64_t>(strides.size()) != k ||
      static_cast<int64_t>(dilations.size()) != k ||
      static_cast<int64_t>(pads.size()) != 2 * k)
    return emitError() << "convolution expects " << k
                       << " strides and dilations and " << 2 * k << " pads";
  if (group < 1 || input[1] != weight[1] * group || weight[0] % group != 0)
    return emitError() << "convolution channels do not match: input "
                       << input[1] << ", weight " << weight[0] << " x "
                       << weight[1] << ", group " << group;
  Shape out{input[0], weight[0]};
  for (int64_t i = 0; i < k; ++i) {
    if (strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 || pads[k + i] < 0)
      return emitError() << "convolution strides and dilations must be "
                            "positive, pads non-negative";
    int64_t span = input[2 + i] + pads[i] + pads[k + i] -
                   dilations[i] * (weight[2 + i] - 1) - 1;
    if (span < 0)
      return emitError() << "convolution kernel larger than the padded input "
                            "along spatial dimension "
                         << i;
    out.push_back(span / strides[i] + 1);
  }
  return out;
}

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<ShapedType>(v.getType()).getShape();
}

/// Checks that the forward convolution of `input` by `weight` has the
/// `output` shape and that the three share an element type.
template <typename OpTy>
LogicalResult verifyConv(OpTy op, Value input, Value weight, Value output) {
  Type elt = cast<ShapedType>(output.getType()).getElementType();
  for (Value v : {input, weight})
    if (cast<ShapedType>(v.getType()).getElementType() != elt)
      return op.emitOpError("operand and result element types must agree");
  FailureOr<shapes::Shape> expected = shapes::conv(
      shapeOf(input), shapeOf(weight), op.getStrides(), op.getPads(),
      op.getDilations(), op.getGroup(), [&] { return op.emitOpError(); });
  if (failed(expected))
    return failure();
  if (!llvm::equal(*expected, shapeOf(output)))
    return op.emitOpError("the convolution's output shape does not match");
  return success();
}

/// Multiply-adds of the convolution with output `output` and weight
/// `weight`: each output element is a dot of C/group x K1..Kk.
int64_t convFlops(Value output, Value weight) {
  return 2 * ds::detail::numElements(output.getType()) *
         (ds::detail::numElements(weight.getType()) / shapeOf(weight)[0]);
}

} // namespace

LogicalResult ConvOp::verify() {
  if (failed(verifyConv(*this, getInput(), getWeight(), getResult())))
    return failure();
  if (getBias() && (shapeOf(getBias()).size() != 1 ||
                    shapeOf(getBias())[0] != shapeOf(getWeight())[0] ||
                    cast<ShapedType>(getBias().getType()).getElementType() !=
                        getType().getElementType()))
    return emitOpError("bias must be 1-D with one element per output channel");
  return success();
}

LogicalResult ConvGradInputOp::verify() {
  return verifyConv(*this, getResult(), getWeight(), getGrad());
}

LogicalResult ConvGradWeightOp::verify() {
  return verifyConv(*this, getInput(), getResult(), getGrad());
}

int64_t ConvOp::getFlops() { return convFlops(getResult(), getWeight()); }

int64_t ConvGradInputOp::getFlops() { return convFlops(getGrad(), getWeight()); }

int64_t ConvGradWeightOp::getFlops() {
  return convFlops(getGrad(), getResult());
}
