//===- DsFold.cpp - constant folding of ds ops ----------------------------===//
//
// Part of the ds project.
//
// Folding evaluates ops whose operands are constants. It exists for the shape
// arithmetic that PyTorch exports (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape, causal masks from Range/Trilu/Equal ...), so it is written for
// clarity over speed and refuses tensors above kMaxFoldElements.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/Ds/IR/DsShapes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::ds;

namespace {

/// Largest tensor the folder evaluates.
constexpr int64_t kMaxFoldElements = 1 << 16;

/// A constant's elements widened to double (floats) or int64 (integers).
struct Values {
  bool isFloat = false;
  SmallVector<double> f;
  SmallVector<int64_t> i;
  size_t size() const { return isFloat ? f.size() : i.size(); }
  double asDouble(size_t k) const {
    return isFloat ? f[k] : static_cast<double>(i[k]);
  }
  int64_t asInt(size_t k) const {
    return isFloat ? static_cast<int64_t>(f[k]) : i[k];
  }
};

std::optional<Values> readValues(Attribute attr) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense || dense.getNumElements() > kMaxFoldElements)
    return std::nullopt;
  Values v;
  Type elt = dense.getElementType();
  if (isa<FloatType>(elt)) {
    v.isFloat = true;
    for (APFloat x : dense.getValues<APFloat>())
      v.f.push_back(x.convertToDouble());
  } else if (auto it = dyn_cast<IntegerType>(elt)) {
    bool isBool = it.getWidth() == 1;
    for (APInt x : dense.getValues<APInt>())
      v.i.push_back(isBool ? static_cast<int64_t>(x.getZExtValue())
                           : x.getSExtValue());
  } else {
    return std::nullopt;
  }
  return v;
}

Attribute makeDense(ShapedType type, const Values &v) {
  Type elt = type.getElementType();
  if (auto ft = dyn_cast<FloatType>(elt)) {
    SmallVector<APFloat> out;
    out.reserve(v.size());
    for (size_t k = 0; k < v.size(); ++k) {
      APFloat x(v.asDouble(k));
      bool lost;
      x.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      out.push_back(x);
    }
    return DenseElementsAttr::get(type, out);
  }
  auto it = cast<IntegerType>(elt);
  SmallVector<APInt> out;
  out.reserve(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    if (it.getWidth() == 1)
      out.push_back(APInt(1, v.isFloat ? v.f[k] != 0.0 : v.i[k] != 0));
    else
      out.push_back(APInt(it.getWidth(), static_cast<uint64_t>(v.asInt(k)),
                          /*isSigned=*/true));
  }
  return DenseElementsAttr::get(type, out);
}

SmallVector<int64_t> strides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// For each element of a tensor of shape `out` in row-major order, calls
/// `sourceIndex(position)` and collects the linear indices it returns.
SmallVector<int64_t>
mapIndices(ArrayRef<int64_t> out,
           llvm::function_ref<int64_t(ArrayRef<int64_t>)> sourceIndex) {
  int64_t n = shapes::product(out);
  SmallVector<int64_t> idx;
  idx.reserve(n);
  SmallVector<int64_t> pos(out.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    idx.push_back(sourceIndex(pos));
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      if (++pos[d] < out[d])
        break;
      pos[d] = 0;
    }
  }
  return idx;
}

/// For every element of `out`, the linear index of the element of an operand
/// of shape `in` that broadcasts to it.
SmallVector<int64_t> broadcastIndices(ArrayRef<int64_t> in,
                                      ArrayRef<int64_t> out) {
  SmallVector<int64_t> inStrides = strides(in);
  size_t off = out.size() - in.size();
  return mapIndices(out, [&](ArrayRef<int64_t> pos) {
    int64_t lin = 0;
    for (size_t d = 0; d < in.size(); ++d)
      if (in[d] != 1)
        lin += pos[d + off] * inStrides[d];
    return lin;
  });
}

/// Gathers `in` at `indices` into a fresh Values of the same kind.
Values permute(const Values &in, ArrayRef<int64_t> indices) {
  Values out;
  out.isFloat = in.isFloat;
  for (int64_t k : indices) {
    if (in.isFloat)
      out.f.push_back(in.f[k]);
    else
      out.i.push_back(in.i[k]);
  }
  return out;
}

bool isSplatOf(Attribute attr, double value) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return false;
  if (isa<FloatType>(dense.getElementType()))
    return dense.getSplatValue<APFloat>().convertToDouble() == value;
  if (auto it = dyn_cast<IntegerType>(dense.getElementType()))
    return it.getWidth() > 1 &&
           dense.getSplatValue<APInt>().getSExtValue() ==
               static_cast<int64_t>(value);
  return false;
}

ShapedType resultType(Operation *op, unsigned i = 0) {
  return cast<ShapedType>(op->getResult(i).getType());
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

OpFoldResult ds::detail::foldBinaryOp(Operation *op, BinaryKind kind,
                                      Attribute lhsAttr, Attribute rhsAttr) {
  ShapedType type = resultType(op);
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  // Identities, when the other operand already has the result type.
  if (lhs.getType() == type) {
    if ((kind == BinaryKind::Add || kind == BinaryKind::Sub) &&
        isSplatOf(rhsAttr, 0.0))
      return lhs;
    if ((kind == BinaryKind::Mul || kind == BinaryKind::Div) &&
        isSplatOf(rhsAttr, 1.0))
      return lhs;
  }
  if (rhs.getType() == type) {
    if (kind == BinaryKind::Add && isSplatOf(lhsAttr, 0.0))
      return rhs;
    if (kind == BinaryKind::Mul && isSplatOf(lhsAttr, 1.0))
      return rhs;
  }
  std::optional<Values> a = readValues(lhsAttr), b = readValues(rhsAttr);
  if (!a || !b || type.getNumElements() > kMaxFoldElements)
    return {};
  ArrayRef<int64_t> outShape = type.getShape();
  SmallVector<int64_t> ia = broadcastIndices(
      cast<ShapedType>(lhs.getType()).getShape(), outShape);
  SmallVector<int64_t> ib = broadcastIndices(
      cast<ShapedType>(rhs.getType()).getShape(), outShape);
  bool floatMath = a->isFloat || b->isFloat;
  Values out;
  out.isFloat = isa<FloatType>(type.getElementType());
  for (size_t k = 0; k < ia.size(); ++k) {
    if (floatMath) {
      double x = a->asDouble(ia[k]), y = b->asDouble(ib[k]);
      double r = 0;
      switch (kind) {
      case BinaryKind::Add: r = x + y; break;
      case BinaryKind::Sub: r = x - y; break;
      case BinaryKind::Mul: r = x * y; break;
      case BinaryKind::Div: r = x / y; break;
      case BinaryKind::Pow: r = std::pow(x, y); break;
      case BinaryKind::Max: r = std::max(x, y); break;
      case BinaryKind::Min: r = std::min(x, y); break;
      case BinaryKind::Equal: r = x == y; break;
      case BinaryKind::Less: r = x < y; break;
      case BinaryKind::LessOrEqual: r = x <= y; break;
      case BinaryKind::Greater: r = x > y; break;
      case BinaryKind::GreaterOrEqual: r = x >= y; break;
      case BinaryKind::And: r = (x != 0) && (y != 0); break;
      case BinaryKind::Or: r = (x != 0) || (y != 0); break;
      case BinaryKind::Xor: r = (x != 0) != (y != 0); break;
      }
      if (out.isFloat)
        out.f.push_back(r);
      else
        out.i.push_back(static_cast<int64_t>(r));
      continue;
    }
    int64_t x = a->i[ia[k]], y = b->i[ib[k]], r = 0;
    switch (kind) {
    case BinaryKind::Add: r = x + y; break;
    case BinaryKind::Sub: r = x - y; break;
    case BinaryKind::Mul: r = x * y; break;
    case BinaryKind::Div:
      if (y == 0)
        return {}; // leave division by zero to run time
      r = x / y;
      break;
    case BinaryKind::Pow: {
      if (y < 0)
        return {};
      r = 1;
      for (int64_t e = 0; e < y; ++e)
        r *= x;
      break;
    }
    case BinaryKind::Max: r = std::max(x, y); break;
    case BinaryKind::Min: r = std::min(x, y); break;
    case BinaryKind::Equal: r = x == y; break;
    case BinaryKind::Less: r = x < y; break;
    case BinaryKind::LessOrEqual: r = x <= y; break;
    case BinaryKind::Greater: r = x > y; break;
    case BinaryKind::GreaterOrEqual: r = x >= y; break;
    case BinaryKind::And: r = x && y; break;
    case BinaryKind::Or: r = x || y; break;
    case BinaryKind::Xor: r = (x != 0) != (y != 0); break;
    }
    out.i.push_back(r);
  }
  return makeDense(type, out);
}

OpFoldResult ds::detail::foldUnaryOp(Operation *op, UnaryKind kind,
                                     Attribute input) {
  std::optional<Values> a = readValues(input);
  if (!a)
    return {};
  ShapedType type = resultType(op);
  Values out;
  out.isFloat = a->isFloat;
  for (size_t k = 0; k < a->size(); ++k) {
    if (!a->isFloat) {
      int64_t x = a->i[k], r = 0;
      switch (kind) {
      case UnaryKind::Neg: r = -x; break;
      case UnaryKind::Abs: r = x < 0 ? -x : x; break;
      case UnaryKind::Relu: r = x < 0 ? 0 : x; break;
      case UnaryKind::Not: r = !x; break;
      default: return {};
      }
      out.i.push_back(r);
      continue;
    }
    double x = a->f[k], r = 0;
    switch (kind) {
    case UnaryKind::Neg: r = -x; break;
    case UnaryKind::Abs: r = std::fabs(x); break;
    case UnaryKind::Exp: r = std::exp(x); break;
    case UnaryKind::Log: r = std::log(x); break;
    case UnaryKind::Sqrt: r = std::sqrt(x); break;
    case UnaryKind::Reciprocal: r = 1.0 / x; break;
    case UnaryKind::Erf: r = std::erf(x); break;
    case UnaryKind::Tanh: r = std::tanh(x); break;
    case UnaryKind::Relu: r = x < 0 ? 0 : x; break;
    case UnaryKind::Sigmoid: r = 1.0 / (1.0 + std::exp(-x)); break;
    case UnaryKind::Not: r = x == 0; break;
    }
    out.f.push_back(r);
  }
  return makeDense(type, out);
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  std::optional<Values> a = readValues(adaptor.getInput());
  if (!a)
    return {};
  Values out = *a;
  // Float to integer truncates toward zero; makeDense does the rest.
  if (a->isFloat && !isa<FloatType>(getType().getElementType())) {
    out.isFloat = false;
    out.f.clear();
    for (double x : a->f)
      out.i.push_back(static_cast<int64_t>(std::trunc(x)));
  }
  return makeDense(getType(), out);
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  auto cond = dyn_cast_or_null<DenseElementsAttr>(adaptor.getCondition());
  if (cond && cond.isSplat()) {
    Value chosen = cond.getSplatValue<bool>() ? getX() : getY();
    if (chosen.getType() == getType())
      return chosen;
  }
  std::optional<Values> c = readValues(adaptor.getCondition());
  std::optional<Values> x = readValues(adaptor.getX());
  std::optional<Values> y = readValues(adaptor.getY());
  if (!c || !x || !y || getType().getNumElements() > kMaxFoldElements)
    return {};
  ArrayRef<int64_t> shape = getType().getShape();
  SmallVector<int64_t> ic =
      broadcastIndices(getCondition().getType().getShape(), shape);
  SmallVector<int64_t> ix = broadcastIndices(getX().getType().getShape(), shape);
  SmallVector<int64_t> iy = broadcastIndices(getY().getType().getShape(), shape);
  Values out;
  out.isFloat = x->isFloat;
  for (size_t k = 0; k < ic.size(); ++k) {
    const Values &src = c->i[ic[k]] ? *x : *y;
    int64_t at = c->i[ic[k]] ? ix[k] : iy[k];
    if (out.isFloat)
      out.f.push_back(src.f[at]);
    else
      out.i.push_back(src.i[at]);
  }
  return makeDense(getType(), out);
}

//===----------------------------------------------------------------------===//
// Constants and shape arithmetic
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult ShapeOp::fold(FoldAdaptor) {
  ArrayRef<int64_t> dims = getInput().getType().getShape();
  Values v;
  for (int64_t d = getStart(); d < static_cast<int64_t>(getEnd()); ++d)
    v.i.push_back(dims[d]);
  return makeDense(getType(), v);
}

OpFoldResult RangeOp::fold(FoldAdaptor adaptor) {
  std::optional<Values> s = readValues(adaptor.getStart());
  std::optional<Values> d = readValues(adaptor.getDelta());
  if (!s || !d || s->size() != 1 || d->size() != 1 ||
      getType().getNumElements() > kMaxFoldElements)
    return {};
  Values out;
  out.isFloat = s->isFloat;
  for (int64_t k = 0; k < getType().getNumElements(); ++k) {
    if (out.isFloat)
      out.f.push_back(s->f[0] + k * d->asDouble(0));
    else
      out.i.push_back(s->i[0] + k * d->asInt(0));
  }
  return makeDense(getType(), out);
}

OpFoldResult ConstantOfShapeOp::fold(FoldAdaptor) {
  auto value = cast<TypedAttr>(getValueAttr());
  return DenseElementsAttr::get(getType(), ArrayRef<Attribute>(value));
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

OpFoldResult ExpandOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput());
  if (dense && dense.isSplat())
    return DenseElementsAttr::get(getType(),
                                  ArrayRef<Attribute>(
                                      dense.getSplatValue<Attribute>()));
  std::optional<Values> a = readValues(adaptor.getInput());
  if (!a || getType().getNumElements() > kMaxFoldElements)
    return {};
  return makeDense(getType(),
                   permute(*a, broadcastIndices(
                                   getInput().getType().getShape(),
                                   getType().getShape())));
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int64_t> perm = getPerm();
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity &= perm[i] == static_cast<int64_t>(i);
  if (identity && getInput().getType() == getType())
    return getInput();
  // transpose(transpose(x, p1), p2) is x permuted by p1[p2[d]]: the inner
  // one vanishes (autodiff transposes a transposed weight back for the
  // input gradient; keeping both would keep a copy of the weight).
  if (auto inner = getInput().getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> p1 = inner.getPerm();
    SmallVector<int64_t> composed;
    bool id = true;
    for (size_t d = 0; d < perm.size(); ++d) {
      composed.push_back(p1[perm[d]]);
      id &= composed.back() == static_cast<int64_t>(d);
    }
    if (id && inner.getInput().getType() == getType())
      return inner.getInput();
    setOperand(inner.getInput());
    setPerm(composed);
    return getResult();
  }
  std::optional<Values> a = readValues(adaptor.getInput());
  if (!a)
    return {};
  ArrayRef<int64_t> in = getInput().getType().getShape();
  SmallVector<int64_t> inStrides = strides(in);
  SmallVector<int64_t> idx =
      mapIndices(getType().getShape(), [&](ArrayRef<int64_t> pos) {
        int64_t lin = 0;
        for (size_t d = 0; d < pos.size(); ++d)
          lin += pos[d] * inStrides[perm[d]];
        return lin;
      });
  return makeDense(getType(), permute(*a, idx));
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1 && getInputs()[0].getType() == getType())
    return getInputs()[0];
  if (getType().getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<Values> parts;
  for (Attribute attr : adaptor.getInputs()) {
    std::optional<Values> v = readValues(attr);
    if (!v)
      return {};
    parts.push_back(std::move(*v));
  }
  ArrayRef<int64_t> shape = getType().getShape();
  int64_t axis = getAxis();
  int64_t outer = shapes::product(shape.take_front(axis));
  int64_t inner = shapes::product(shape.drop_front(axis + 1));
  Values out;
  out.isFloat = parts.front().isFloat;
  for (int64_t o = 0; o < outer; ++o) {
    for (auto [v, operand] : llvm::zip(parts, getInputs())) {
      int64_t chunk =
          cast<ShapedType>(operand.getType()).getDimSize(axis) * inner;
      for (int64_t k = 0; k < chunk; ++k) {
        if (out.isFloat)
          out.f.push_back(v.f[o * chunk + k]);
        else
          out.i.push_back(v.i[o * chunk + k]);
      }
    }
  }
  return makeDense(getType(), out);
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  std::optional<Values> data = readValues(adaptor.getData());
  std::optional<Values> indices = readValues(adaptor.getIndices());
  if (!data || !indices || getType().getNumElements() > kMaxFoldElements)
    return {};
  ArrayRef<int64_t> dshape = getData().getType().getShape();
  int64_t axis = getAxis();
  int64_t outer = shapes::product(dshape.take_front(axis));
  int64_t dim = dshape[axis];
  int64_t inner = shapes::product(dshape.drop_front(axis + 1));
  SmallVector<int64_t> idx;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t ix : indices->i) {
      if (ix < -dim || ix >= dim)
        return {}; // out of range: a run-time error, not a fold
      int64_t j = ix < 0 ? ix + dim : ix;
      for (int64_t k = 0; k < inner; ++k)
        idx.push_back((o * dim + j) * inner + k);
    }
  }
  return makeDense(getType(), permute(*data, idx));
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  bool full = getInput().getType() == getType() &&
              llvm::all_of(getStarts(), [](int64_t s) { return s == 0; }) &&
              llvm::all_of(getSteps(), [](int64_t s) { return s == 1; });
  if (full)
    return getInput();
  std::optional<Values> a = readValues(adaptor.getInput());
  if (!a)
    return {};
  SmallVector<int64_t> inStrides = strides(getInput().getType().getShape());
  ArrayRef<int64_t> starts = getStarts(), steps = getSteps();
  SmallVector<int64_t> idx =
      mapIndices(getType().getShape(), [&](ArrayRef<int64_t> pos) {
        int64_t lin = 0;
        for (size_t d = 0; d < pos.size(); ++d)
          lin += (starts[d] + pos[d] * steps[d]) * inStrides[d];
        return lin;
      });
  return makeDense(getType(), permute(*a, idx));
}

OpFoldResult TriluOp::fold(FoldAdaptor adaptor) {
  std::optional<Values> a = readValues(adaptor.getInput());
  if (!a)
    return {};
  ArrayRef<int64_t> shape = getType().getShape();
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  int64_t diag = getKAttr().getInt();
  Values out = *a;
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t i = (k / cols) % rows, j = k % cols;
    bool keep = getUpper() ? (j - i >= diag) : (j - i <= diag);
    if (!keep) {
      if (out.isFloat)
        out.f[k] = 0;
      else
        out.i[k] = 0;
    }
  }
  return makeDense(getType(), out);
}
