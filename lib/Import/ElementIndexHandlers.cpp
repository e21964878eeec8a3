//===- ElementIndexHandlers.cpp - GatherElements and ScatterElements ------===//
//
// Part of the ds project.
//
// GatherElements and ScatterElements (reduction none or add) spelled with a
// one-hot mask, so that their gradients come from the parts' VJPs: for
// indices I and the data's length n along `axis`, mask[p, j] = (I[p] == j)
// (negative indices wrapped by n) has I's shape plus a last dimension n.
//   GatherElements:  out[p] = sum_j where(mask[p, j], data'[p, j], 0), with
//                    data' the data with its axis moved last (broadcast over
//                    the axis of p).
//   ScatterElements: s = the updates spread by the mask and summed over the
//                    axis of p, moved back to the data's layout; add gives
//                    data + s, none gives where(hit, s, data) (duplicate
//                    indices add, which ONNX leaves undefined for none).
// Costs O(|I| * n) memory. The indices must match the data's shape outside
// the axis (what torch.gather/scatter_add export in practice).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace sh = shapes;
namespace {

/// The operands' layout and the one-hot mask of the indices.
struct ElementIndex {
  int64_t axis = 0;
  int64_t len = 0;
  RankedTensorType data;
  RankedTensorType idx;
  Value mask;
  /// The data's dimensions with the axis moved last, and back.
  SmallVector<int64_t> toLast, fromLast;
};

Value intConstant(NodeContext &n, RankedTensorType type,
                  ArrayRef<int64_t> values) {
  unsigned width = type.getElementTypeBitWidth();
  SmallVector<APInt> v;
  for (int64_t x : values)
    v.push_back(APInt(width, x, /*isSigned=*/true));
  return n.constant(type, DenseElementsAttr::get(type, v));
}

/// mask[p, j] = (I[p] == j), I's negative entries counted from the end.
Value oneHot(NodeContext &n, const ElementIndex &e) {
  OpBuilder &b = n.builder();
  Type it = e.idx.getElementType();
  auto scalar = RankedTensorType::get({}, it);
  auto flags = RankedTensorType::get(e.idx.getShape(), b.getI1Type());
  Value idx = n.input(1);
  Value negative =
      LessOp::create(b, n.loc, flags, idx, intConstant(n, scalar, {0}));
  Value wrapped = AddOp::create(b, n.loc, e.idx, idx,
                                intConstant(n, scalar, {e.len}));
  idx = WhereOp::create(b, n.loc, e.idx, negative, wrapped, idx);
  sh::Shape col(e.idx.getShape());
  col.push_back(1);
  Value column =
      ReshapeOp::create(b, n.loc, RankedTensorType::get(col, it), idx);
  SmallVector<int64_t> iota;
  for (int64_t j = 0; j < e.len; ++j)
    iota.push_back(j);
  Value range =
      intConstant(n, RankedTensorType::get({e.len}, it), iota);
  col.back() = e.len;
  return EqualOp::create(b, n.loc, RankedTensorType::get(col, b.getI1Type()),
                         column, range);
}

FailureOr<ElementIndex> elementIndex(NodeContext &n, size_t numInputs) {
  if (failed(n.expectInputs(numInputs, numInputs)))
    return failure();
  ElementIndex e;
  e.data = cast<RankedTensorType>(n.input(0).getType());
  e.idx = cast<RankedTensorType>(n.input(1).getType());
  int64_t rank = e.data.getRank();
  if (rank == 0 || e.idx.getRank() != rank)
    return n.error() << "indices must have the data's rank (>= 1)";
  FailureOr<int64_t> axis = n.axis(n.intAttr("axis", 0), rank);
  if (failed(axis))
    return failure();
  e.axis = *axis;
  e.len = e.data.getDimSize(e.axis);
  for (int64_t d = 0; d < rank; ++d) {
    if (d != e.axis && e.idx.getDimSize(d) != e.data.getDimSize(d))
      return n.error() << "indices that differ from the data's shape outside "
                          "the axis are not supported";
    if (d != e.axis)
      e.toLast.push_back(d);
  }
  e.toLast.push_back(e.axis);
  e.fromLast.resize(rank);
  for (int64_t d = 0; d < rank; ++d)
    e.fromLast[e.toLast[d]] = d;
  e.mask = oneHot(n, e);
  return e;
}

/// `x`'s dimensions permuted by `perm`.
Value permute(NodeContext &n, Value x, ArrayRef<int64_t> perm) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> shape;
  for (int64_t d : perm)
    shape.push_back(type.getDimSize(d));
  return TransposeOp::create(n.builder(), n.loc,
                             RankedTensorType::get(shape, type.getElementType()),
                             x, n.builder().getDenseI64ArrayAttr(perm));
}

Value zero(NodeContext &n, Type elt) {
  auto scalar = RankedTensorType::get({}, elt);
  return n.constant(scalar, n.builder().getZeroAttr(scalar));
}

LogicalResult gatherElements(NodeContext &n) {
  FailureOr<ElementIndex> e = elementIndex(n, 2);
  if (failed(e))
    return failure();
  OpBuilder &b = n.builder();
  Type elt = e->data.getElementType();
  // The data with its axis last, the axis of the indices as 1 before it.
  sh::Shape rows(e->idx.getShape());
  rows[e->axis] = 1;
  rows.push_back(e->len);
  Value data = ReshapeOp::create(b, n.loc, RankedTensorType::get(rows, elt),
                                 permute(n, n.input(0), e->toLast));
  rows[e->axis] = e->idx.getDimSize(e->axis);
  Value picked = WhereOp::create(b, n.loc, RankedTensorType::get(rows, elt),
                                 e->mask, data, zero(n, elt));
  int64_t last = e->data.getRank();
  return n.emit<ReduceSumOp>(Type(RankedTensorType::get(e->idx.getShape(), elt)),
                             picked, b.getDenseI64ArrayAttr({last}),
                             b.getBoolAttr(false));
}

/// `full` (the mask's shape) summed over the indices' axis and laid out
/// like the data.
Value spread(NodeContext &n, const ElementIndex &e, Value full) {
  OpBuilder &b = n.builder();
  auto type = cast<RankedTensorType>(full.getType());
  sh::Shape summed(type.getShape());
  summed.erase(summed.begin() + e.axis);
  Value s = ReduceSumOp::create(
      b, n.loc, RankedTensorType::get(summed, type.getElementType()), full,
      b.getDenseI64ArrayAttr({e.axis}), b.getBoolAttr(false));
  return permute(n, s, e.fromLast);
}

LogicalResult scatterElements(NodeContext &n) {
  FailureOr<ElementIndex> e = elementIndex(n, 3);
  if (failed(e))
    return failure();
  std::string reduction = n.stringAttr("reduction", "none");
  if (reduction != "none" && reduction != "add")
    return n.error() << "unsupported reduction '" << reduction
                     << "' (none and add are)";
  if (n.shape(2) != e->idx.getShape())
    return n.error() << "updates must have the indices' shape";
  OpBuilder &b = n.builder();
  Type elt = e->data.getElementType();
  sh::Shape full(e->idx.getShape());
  full.push_back(1);
  Value updates = ReshapeOp::create(b, n.loc, RankedTensorType::get(full, elt),
                                    n.input(2));
  full.back() = e->len;
  auto fullType = RankedTensorType::get(full, elt);
  Value s = spread(n, *e, WhereOp::create(b, n.loc, fullType, e->mask, updates,
                                          zero(n, elt)));
  if (reduction == "add")
    return n.emit<AddOp>(Type(e->data), n.input(0), s);
  Value hits = spread(n, *e, CastOp::create(b, n.loc, fullType, e->mask));
  Value hit = GreaterOp::create(
      b, n.loc, RankedTensorType::get(e->data.getShape(), b.getI1Type()), hits,
      zero(n, elt));
  return n.emit<WhereOp>(Type(e->data), hit, s, n.input(0));
}

} // namespace

void registerElementIndexHandlers(HandlerTable &t) {
  t.add("GatherElements", gatherElements);
  t.add("ScatterElements", scatterElements);
}

} // namespace mlir::ds::onnx_import
