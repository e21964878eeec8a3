//===- SpatialHandlers.cpp - Resize, Upsample, Pad, InstanceNormalization -===//
//
// Part of the ds project.
//
// Resize (opsets 10 to 19) and Upsample (7 to 9) import as ds.resize in
// the nearest and linear modes, as torch's nn.Upsample and F.interpolate
// export them (nearest: asymmetric + floor; (bi/tri)linear: half_pixel or
// align_corners). The scales or sizes must be compile-time constants and
// may only resize the spatial dimensions (2 on). Cubic mode,
// tf_crop_and_resize, antialias, exclude_outside, axes and a
// keep_aspect_ratio_policy other than stretch are refused naming the
// attribute and its value. The sampling rule is Support/Resize.h's.
//
// Pad (every mode; torch's F.pad and nn.*Pad*d) is a composition: along
// each axis with pads, a ds.gather of constant indices (negative pads crop;
// reflect mirrors without repeating the edge; edge clamps), whose VJP,
// ds.gather_grad, adds the reflected and repeated positions back; constant
// mode then concatenates blocks of the fill value.
//
// InstanceNormalization is ds.layer_norm over the spatial elements of each
// (n, c) plane (reshaped to N x C x S; statistics in f32), then the
// per-channel scale and bias (skipped when constant 1 and 0, as in torch's
// GroupNorm export: Reshape, InstanceNormalization, Reshape, Mul, Add).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"
#include "ds/Support/Resize.h"

#include <algorithm>

namespace mlir::ds::onnx_import {
namespace {

/// What a Resize / Upsample node asks for, once checked.
struct ResizeAttrs {
  std::string mode, coord, nearest;
  SmallVector<double> scales;    // one per spatial dimension
  SmallVector<int64_t> outShape; // the whole result shape
};

/// The float values of constant input `i`; failure (with an error naming
/// `what`) when it is not a compile-time constant float tensor.
FailureOr<SmallVector<double>> constFloats(NodeContext &n, size_t i,
                                           StringRef what) {
  DenseElementsAttr attr =
      n.input(i) ? constantValue(n.importer, n.input(i)) : nullptr;
  if (!attr || !isa<FloatType>(attr.getElementType())) {
    n.error() << what << " (input " << i
              << ") must be a compile-time constant float tensor";
    return failure();
  }
  SmallVector<double> out;
  for (const APFloat &v : attr.getValues<APFloat>())
    out.push_back(v.convertToDouble());
  return out;
}

/// Fills `a.scales` and `a.outShape` from per-dimension `scales` (sizes
/// empty) or `sizes`, requiring N and C kept.
LogicalResult resolveShape(NodeContext &n, ArrayRef<double> scales,
                           ArrayRef<int64_t> sizes, ResizeAttrs &a) {
  ArrayRef<int64_t> in = n.shape(0);
  size_t rank = in.size();
  if (rank < 3 || rank > 2 + ::ds::kMaxResizeDims)
    return n.error() << "expects an (N, C, spatial...) input with 1 to 3 "
                        "spatial dimensions, got rank "
                     << rank;
  if (!sizes.empty() ? sizes.size() != rank : scales.size() != rank)
    return n.error() << "expects " << rank << " "
                     << (sizes.empty() ? "scales" : "sizes") << ", got "
                     << (sizes.empty() ? scales.size() : sizes.size());
  for (size_t d = 0; d < rank; ++d) {
    int64_t out =
        sizes.empty() ? ::ds::resizedSize(in[d], scales[d]) : sizes[d];
    if (!sizes.empty() ? sizes[d] < 1 : !(scales[d] > 0.0) || out < 1)
      return n.error() << "dimension " << d << " resizes to nothing (scale "
                       << (sizes.empty() ? scales[d] : 0.0) << ", size " << out
                       << ")";
    if (d < 2 && out != in[d])
      return n.error() << "resizing dimension " << d
                       << " (batch or channel) is not supported";
    a.outShape.push_back(out);
    if (d >= 2)
      a.scales.push_back(sizes.empty() ? scales[d]
                                       : static_cast<double>(out) /
                                             static_cast<double>(in[d]));
  }
  return success();
}

/// Refuses the attributes ds does not implement, naming each value.
LogicalResult checkResizeAttrs(NodeContext &n, ResizeAttrs &a) {
  ::ds::ResizeRule rule;
  if (a.mode != "nearest" && a.mode != "linear")
    return n.error() << "mode '" << a.mode
                     << "' is not supported (nearest and linear are)";
  if (!::ds::resizeEnumFromName(::ds::kResizeCoordNames, a.coord.c_str(),
                                rule.coord))
    return n.error() << "coordinate_transformation_mode '" << a.coord
                     << "' is not supported";
  if (!::ds::resizeEnumFromName(::ds::kResizeNearestNames, a.nearest.c_str(),
                                rule.nearest))
    return n.error() << "nearest_mode '" << a.nearest << "' is not supported";
  if (n.intAttr("antialias", 0) != 0)
    return n.error() << "antialias " << n.intAttr("antialias", 0)
                     << " is not supported";
  if (n.intAttr("exclude_outside", 0) != 0)
    return n.error() << "exclude_outside " << n.intAttr("exclude_outside", 0)
                     << " is not supported";
  if (n.attr("axes"))
    return n.error() << "the axes attribute is not supported";
  std::string policy = n.stringAttr("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch")
    return n.error() << "keep_aspect_ratio_policy '" << policy
                     << "' is not supported";
  return success();
}

LogicalResult emitResize(NodeContext &n, const ResizeAttrs &a) {
  OpBuilder &b = n.builder();
  return n.emit<ResizeOp>(n.tensor(a.outShape, n.elementTypeOf(0)), n.input(0),
                          b.getStringAttr(a.mode), b.getStringAttr(a.coord),
                          b.getStringAttr(a.nearest),
                          b.getDenseF64ArrayAttr(a.scales));
}

/// Whether input `i` is given and has elements.
bool nonEmpty(NodeContext &n, size_t i) {
  if (!n.input(i))
    return false;
  auto t = cast<ShapedType>(n.input(i).getType());
  return t.getNumElements() != 0;
}

LogicalResult resize(NodeContext &n) {
  if (failed(n.expectInputs(1, 4)) || failed(n.requireFloat(0)))
    return failure();
  ResizeAttrs a;
  a.mode = n.stringAttr("mode", "nearest");
  a.coord = n.stringAttr("coordinate_transformation_mode",
                         n.opset() < 11 ? "asymmetric" : "half_pixel");
  a.nearest = n.stringAttr("nearest_mode", "round_prefer_floor");
  if (failed(checkResizeAttrs(n, a)))
    return failure();
  size_t scalesAt = n.opset() < 11 ? 1 : 2;
  SmallVector<double> scales;
  SmallVector<int64_t> sizes;
  if (n.opset() >= 11 && nonEmpty(n, 3)) {
    FailureOr<SmallVector<int64_t>> s = n.constInts(3, "Resize's sizes");
    if (failed(s))
      return failure();
    sizes = *s;
  } else if (nonEmpty(n, scalesAt)) {
    FailureOr<SmallVector<double>> s =
        constFloats(n, scalesAt, "Resize's scales");
    if (failed(s))
      return failure();
    scales = *s;
  } else {
    return n.error() << "expects scales or sizes";
  }
  if (failed(resolveShape(n, scales, sizes, a)))
    return failure();
  return emitResize(n, a);
}

/// Upsample (deprecated in opset 10): asymmetric coordinates, floor for
/// nearest; the scales an attribute (opset 7) or an input (9).
LogicalResult upsample(NodeContext &n) {
  if (failed(n.expectInputs(1, 2)) || failed(n.requireFloat(0)))
    return failure();
  ResizeAttrs a;
  a.mode = n.stringAttr("mode", "nearest");
  if (a.mode == "bilinear")
    a.mode = "linear";
  a.coord = "asymmetric";
  a.nearest = "floor";
  if (failed(checkResizeAttrs(n, a)))
    return failure();
  SmallVector<double> scales;
  if (n.input(1)) {
    FailureOr<SmallVector<double>> s = constFloats(n, 1, "Upsample's scales");
    if (failed(s))
      return failure();
    scales = *s;
  } else if (const onnx::AttributeProto *attr = n.attr("scales")) {
    scales.assign(attr->floats().begin(), attr->floats().end());
  } else {
    return n.error() << "expects scales";
  }
  if (failed(resolveShape(n, scales, {}, a)))
    return failure();
  return emitResize(n, a);
}

//===----------------------------------------------------------------------===//
// Pad
//===----------------------------------------------------------------------===//

/// The source index of padded position `i` along an axis of `size`
/// elements with `begin` padding: -1 for the fill of constant mode.
int64_t padSource(StringRef mode, int64_t i, int64_t begin, int64_t size) {
  int64_t j = i - begin;
  if (j >= 0 && j < size)
    return j;
  if (mode == "edge")
    return j < 0 ? 0 : size - 1;
  if (mode == "reflect")
    return j < 0 ? -j : 2 * (size - 1) - j;
  return -1;
}

/// `v` gathered along `axis` at `indices` (i64 constants).
Value gatherAxis(NodeContext &n, Value v, int64_t axis,
                 ArrayRef<int64_t> indices) {
  OpBuilder &b = n.builder();
  auto type = cast<RankedTensorType>(v.getType());
  auto idxType = RankedTensorType::get({static_cast<int64_t>(indices.size())},
                                       b.getI64Type());
  Value idx = n.constant(idxType, DenseElementsAttr::get(idxType, indices));
  SmallVector<int64_t> shape(type.getShape());
  shape[axis] = static_cast<int64_t>(indices.size());
  return GatherOp::create(b, n.loc, n.tensor(shape, type.getElementType()), v,
                          idx, b.getI64IntegerAttr(axis));
}

/// One axis of constant mode: the kept part (cropped by negative pads) and
/// blocks of `fill` for the positive ones.
Value padConstantAxis(NodeContext &n, Value cur, int64_t axis, int64_t begin,
                      int64_t end, double fill) {
  OpBuilder &b = n.builder();
  auto type = cast<RankedTensorType>(cur.getType());
  int64_t size = type.getDimSize(axis);
  if (begin < 0 || end < 0) {
    SmallVector<int64_t> keep;
    for (int64_t j = std::max<int64_t>(-begin, 0);
         j < size - std::max<int64_t>(-end, 0); ++j)
      keep.push_back(j);
    cur = gatherAxis(n, cur, axis, keep);
    size = static_cast<int64_t>(keep.size());
  }
  SmallVector<int64_t> shape(type.getShape());
  SmallVector<Value> parts;
  auto addBlock = [&](int64_t count) {
    if (count <= 0)
      return;
    shape[axis] = count;
    auto block = RankedTensorType::get(shape, type.getElementType());
    Type elt = type.getElementType();
    Attribute value = isa<FloatType>(elt)
                          ? Attribute(b.getFloatAttr(elt, fill))
                          : Attribute(b.getIntegerAttr(elt, int64_t(fill)));
    parts.push_back(n.constant(block, DenseElementsAttr::get(block, value)));
  };
  addBlock(begin);
  parts.push_back(cur);
  addBlock(end);
  if (parts.size() == 1)
    return cur;
  shape[axis] = size + std::max<int64_t>(begin, 0) + std::max<int64_t>(end, 0);
  return ConcatOp::create(b, n.loc, n.tensor(shape, type.getElementType()),
                          parts, b.getI64IntegerAttr(axis));
}

/// The pads (begins then ends) and the fill value of a Pad node.
LogicalResult padOperands(NodeContext &n, SmallVector<int64_t> &pads,
                          double &fill) {
  fill = n.floatAttr("value", 0.0f);
  if (n.opset() < 11) {
    pads = n.intsAttr("pads").value_or(SmallVector<int64_t>());
    return success();
  }
  if (n.input(3))
    return n.error() << "the axes input (opset 18) is not supported";
  FailureOr<SmallVector<int64_t>> p = n.constInts(1, "Pad's pads");
  if (failed(p))
    return failure();
  pads = *p;
  if (n.input(2) && isa<FloatType>(n.elementTypeOf(2))) {
    FailureOr<double> v = n.constFloat(2, "Pad's constant_value");
    if (failed(v))
      return failure();
    fill = *v;
  } else if (n.input(2)) {
    FailureOr<SmallVector<int64_t>> v = n.constInts(2, "Pad's constant_value");
    if (failed(v) || v->size() != 1)
      return failed(v) ? failure()
                       : n.error() << "Pad's constant_value must be a scalar";
    fill = static_cast<double>((*v)[0]);
  }
  return success();
}

/// Pad in constant, reflect and edge modes, of float or integer tensors.
LogicalResult pad(NodeContext &n) {
  if (failed(n.expectInputs(1, 4)))
    return failure();
  Type elt = n.elementTypeOf(0);
  if (!isa<FloatType>(elt) && !elt.isInteger(64) && !elt.isInteger(32))
    return n.error() << "expects a float, i64 or i32 input";
  std::string mode = n.stringAttr("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return n.error() << "mode '" << mode
                     << "' is not supported (constant, reflect and edge are)";
  SmallVector<int64_t> pads;
  double fill = 0.0;
  if (failed(padOperands(n, pads, fill)))
    return failure();
  ArrayRef<int64_t> in = n.shape(0);
  size_t rank = in.size();
  if (pads.size() != 2 * rank)
    return n.error() << "expects " << 2 * rank << " pads, got " << pads.size();
  for (size_t axis = 0; axis < rank; ++axis) {
    int64_t begin = pads[axis], end = pads[rank + axis], size = in[axis];
    if (size + begin + end < 1)
      return n.error() << "pads " << begin << " and " << end
                       << " leave nothing of axis " << axis << " (size " << size
                       << ")";
    if (mode == "reflect" && (begin >= size || end >= size))
      return n.error() << "reflect pads " << begin << " and " << end
                       << " of axis " << axis
                       << " must be smaller than its size " << size;
    if (mode == "edge" && size < 1)
      return n.error() << "edge padding of empty axis " << axis;
  }
  Value cur = n.input(0);
  for (size_t axis = 0; axis < rank; ++axis) {
    int64_t begin = pads[axis], end = pads[rank + axis], size = in[axis];
    if (begin == 0 && end == 0)
      continue;
    if (mode == "constant") {
      cur = padConstantAxis(n, cur, axis, begin, end, fill);
      continue;
    }
    SmallVector<int64_t> indices;
    for (int64_t i = 0; i < size + begin + end; ++i)
      indices.push_back(padSource(mode, i, begin, size));
    cur = gatherAxis(n, cur, axis, indices);
  }
  return n.bind(cur);
}

//===----------------------------------------------------------------------===//
// InstanceNormalization
//===----------------------------------------------------------------------===//

/// Whether `v` is a constant (not a parameter: those train, whatever
/// their initial values) whose every element is `x`.
bool isSplatOf(NodeContext &n, Value v, double x) {
  if (isa<BlockArgument>(v))
    return false;
  DenseElementsAttr attr = constantValue(n.importer, v);
  if (!attr || !isa<FloatType>(attr.getElementType()))
    return false;
  return llvm::all_of(attr.getValues<APFloat>(), [&](const APFloat &f) {
    return f.convertToDouble() == x;
  });
}

LogicalResult instanceNorm(NodeContext &n) {
  if (failed(n.expectInputs(3, 3)) || failed(n.requireFloat(0)))
    return failure();
  ArrayRef<int64_t> in = n.shape(0);
  if (in.size() < 3)
    return n.error() << "expects an (N, C, spatial...) input, got rank "
                     << in.size();
  Type elt = n.elementTypeOf(0);
  for (size_t i = 1; i < 3; ++i)
    if (n.shape(i).size() != 1 || n.shape(i)[0] != in[1] ||
        n.elementTypeOf(i) != elt)
      return n.error() << "input " << i << " must have shape [" << in[1]
                       << "] and the input's element type, got "
                       << shapeStr(n.shape(i));
  OpBuilder &b = n.builder();
  int64_t spatial = 1;
  for (int64_t d : in.drop_front(2))
    spatial *= d;
  auto flat = RankedTensorType::get({in[0], in[1], spatial}, elt);
  Value x = ReshapeOp::create(b, n.loc, flat, n.input(0));
  auto onesType = RankedTensorType::get({spatial}, elt);
  Value ones = n.constant(
      onesType, DenseElementsAttr::get(onesType, b.getFloatAttr(elt, 1.0)));
  Value y = LayerNormOp::create(
      b, n.loc, flat, x, ones, Value(), b.getI64IntegerAttr(2),
      b.getF32FloatAttr(n.floatAttr("epsilon", 1e-5f)));
  auto perChannel = RankedTensorType::get({in[1], 1}, elt);
  if (!isSplatOf(n, n.input(1), 1.0))
    y = MulOp::create(b, n.loc, flat, y,
                      ReshapeOp::create(b, n.loc, perChannel, n.input(1)));
  if (!isSplatOf(n, n.input(2), 0.0))
    y = AddOp::create(b, n.loc, flat, y,
                      ReshapeOp::create(b, n.loc, perChannel, n.input(2)));
  return n.bind(Value(ReshapeOp::create(b, n.loc, n.input(0).getType(), y)));
}

} // namespace

void registerSpatialHandlers(HandlerTable &t) {
  t.add("Resize", resize);
  t.add("Upsample", upsample);
  t.add("Pad", pad);
  t.add("InstanceNormalization", instanceNorm);
}

} // namespace mlir::ds::onnx_import
