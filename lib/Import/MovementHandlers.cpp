//===- MovementHandlers.cpp - ONNX data movement ops to ds ----------------===//
//
// Part of the ds project.
//
// Ops that move or select elements without arithmetic: Gather, Reshape and
// its relatives (Flatten, Squeeze, Unsqueeze, all built as ds.reshape),
// Transpose, Concat, Split, Slice and Expand. Shape operands must be
// compile-time constants, or else ONNX shape inference must have fixed the
// result type.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

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

//===----------------------------------------------------------------------===//
// Reshape and its relatives
//===----------------------------------------------------------------------===//

LogicalResult emitReshape(NodeContext &n, ArrayRef<int64_t> shape) {
  return n.emit<ReshapeOp>(n.tensor(shape, n.elementTypeOf(0)), n.input(0));
}

LogicalResult reshape(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)))
    return failure();
  if (!n.isConstant(1)) {
    FailureOr<RankedTensorType> t =
        n.requireInferredOutputType("shape (input 1)");
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
  return emitReshape(
      n, {sh::product(s.take_front(axis)), sh::product(s.drop_front(axis))});
}

LogicalResult squeeze(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  auto axes = n.axesOperand(13);
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
  auto axes = n.axesOperand(13);
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

//===----------------------------------------------------------------------===//
// Concat, Split, Slice, Expand
//===----------------------------------------------------------------------===//

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

/// The part sizes of a Split along a dimension of `dim`: the `split`
/// attribute (before opset 13) or input, else equal parts (since opset 18
/// the last may be smaller).
FailureOr<SmallVector<int64_t>> splitSizes(NodeContext &n, int64_t dim) {
  SmallVector<int64_t> sizes;
  if (n.opset() < 13) {
    if (auto attr = n.intsAttr("split"))
      sizes = *attr;
  } else if (n.input(1)) {
    FailureOr<SmallVector<int64_t>> v = n.constInts(1, "split");
    if (failed(v))
      return failure();
    sizes = *v;
  }
  if (!sizes.empty())
    return sizes;
  int64_t numOutputs = n.intAttr("num_outputs", n.numOutputs());
  if (numOutputs <= 0)
    return n.error() << "cannot split into " << numOutputs << " parts";
  int64_t chunk = (dim + numOutputs - 1) / numOutputs;
  if (n.opset() < 18 && dim % numOutputs != 0)
    return n.error() << "dimension " << dim << " does not split into "
                     << numOutputs << " equal parts";
  for (int64_t i = 0, left = dim; i < numOutputs; ++i) {
    sizes.push_back(std::min(chunk, left));
    left -= sizes.back();
  }
  return sizes;
}

LogicalResult split(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)))
    return failure();
  ArrayRef<int64_t> s = n.shape(0);
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", 0), s.size());
  if (failed(axis))
    return failure();
  FailureOr<SmallVector<int64_t>> sizes = splitSizes(n, s[*axis]);
  if (failed(sizes))
    return failure();
  size_t parts = n.numOutputs();
  if (sizes->size() != parts)
    return n.error() << "split gives " << sizes->size() << " sizes for "
                     << parts << " outputs";
  int64_t total = 0;
  SmallVector<Type> types;
  for (int64_t size : *sizes) {
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
  if (n.opset() < 10) {
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
  return n.emit<SliceOp>(n.tensor(spec->shape, n.elementTypeOf(0)), n.input(0),
                         b.getDenseI64ArrayAttr(spec->starts),
                         b.getDenseI64ArrayAttr(spec->steps));
}

LogicalResult expand(NodeContext &n) {
  if (failed(n.expectInputs(2, 2)))
    return failure();
  sh::Shape shape;
  if (n.isConstant(1)) {
    FailureOr<SmallVector<int64_t>> req = n.constInts(1, "shape");
    if (failed(req))
      return failure();
    // Expand broadcasts both ways: the result is broadcast(input, shape).
    FailureOr<sh::Shape> b = sh::broadcast(n.shape(0), *req, n.emitFn());
    if (failed(b))
      return failure();
    shape = *b;
  } else {
    FailureOr<RankedTensorType> t =
        n.requireInferredOutputType("shape (input 1)");
    if (failed(t))
      return failure();
    shape.assign(t->getShape().begin(), t->getShape().end());
  }
  return n.emit<ExpandOp>(n.tensor(shape, n.elementTypeOf(0)), n.input(0));
}

} // namespace

void registerMovementHandlers(HandlerTable &t) {
  t.add("Gather", gather);
  t.add("Reshape", reshape);
  t.add("Flatten", flatten);
  t.add("Squeeze", squeeze);
  t.add("Unsqueeze", unsqueeze);
  t.add("Transpose", transpose);
  t.add("Concat", concat);
  t.add("Split", split);
  t.add("Slice", slice);
  t.add("Expand", expand);
}

} // namespace mlir::ds::onnx_import
