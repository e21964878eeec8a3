//===- EinsumHandlers.cpp - ONNX Einsum to transposes, reshapes, matmuls --===//
//
// Part of the ds project.
//
// Einsum is lowered at import, so that its gradient comes from the parts'
// VJPs. The equation is parsed into one label list per operand (`...`
// expanded into labels of their own, aligned from the right as numpy
// does) and the output's (explicit after `->`, or implicit: the ellipsis,
// then the labels that appear once, in alphabetical order). Operands are
// contracted left to right; at each step, for the labels of the running
// result A and the next operand B:
//   - a label of only one side that nothing later needs is summed away
//     first (ds.reduce_sum);
//   - batch labels (both sides, needed later) and contracted labels (both
//     sides, not needed) make A [batch, freeA, contracted] -> [Bt, M, K]
//     and B [batch, contracted, freeB] -> [Bt, K, N] (ds.transpose,
//     ds.reshape), one ds.matmul, and a reshape back to
//     [batch..., freeA..., freeB...];
// then a last ds.reduce_sum / ds.transpose gives the output's order. A
// single operand is a reduce and a permute. A label repeated within one
// operand (a diagonal: `ii->i`, `...ii->...i`, a trace `ii`) is taken
// first as ds.where(eye, x, 0) summed over the second dimension (exact:
// only zeros are added; the gradient lands on the diagonal). Identity
// transposes and reshapes are not emitted. Refused with an error naming
// the equation: a label repeated in the output or absent from the inputs,
// labels whose sizes differ (ds does not broadcast einsum dimensions),
// and non-float operands.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/ADT/STLExtras.h"

#include <cctype>

namespace mlir::ds::onnx_import {
namespace {

/// A label: a letter's character code, or kEllipsis + k for the k-th
/// dimension of the ellipsis counted from the right.
constexpr int kEllipsis = 1000;
using Labels = SmallVector<int>;

struct Equation {
  SmallVector<Labels> inputs;
  Labels output;
  llvm::DenseMap<int, int64_t> sizes;
};

std::string labelName(int l) {
  if (l < kEllipsis)
    return std::string(1, static_cast<char>(l));
  return "...[" + std::to_string(l - kEllipsis) + "]";
}

/// Parses one term (`bij`, `...ij`) of an operand of `rank` dimensions, or
/// of the output (rank < 0: the ellipsis takes `ellipsisRank` dims).
FailureOr<Labels> parseTerm(NodeContext &n, StringRef eq, StringRef term,
                            int64_t rank, int64_t ellipsisRank) {
  Labels labels;
  int64_t letters = 0;
  size_t dots = term.find("...");
  for (size_t i = 0; i < term.size(); ++i) {
    if (i == dots) {
      i += 2;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(term[i])))
      return n.error() << "equation '" << eq << "': unexpected character '"
                       << term[i] << "'";
    ++letters;
  }
  if (dots != StringRef::npos && term.find("...", dots + 3) != StringRef::npos)
    return n.error() << "equation '" << eq << "': more than one ellipsis in '"
                     << term << "'";
  int64_t ell = 0;
  if (dots != StringRef::npos)
    ell = rank >= 0 ? rank - letters : ellipsisRank;
  if (rank >= 0 && (ell < 0 || (dots == StringRef::npos && letters != rank)))
    return n.error() << "equation '" << eq << "': term '" << term
                     << "' does not match an operand of rank " << rank;
  for (size_t i = 0; i < term.size(); ++i) {
    if (i == dots) {
      for (int64_t k = ell - 1; k >= 0; --k)
        labels.push_back(kEllipsis + static_cast<int>(k));
      i += 2;
      continue;
    }
    labels.push_back(static_cast<unsigned char>(term[i]));
  }
  return labels;
}

FailureOr<Equation> parseEquation(NodeContext &n, StringRef eqAttr) {
  std::string compact;
  for (char c : eqAttr)
    if (!std::isspace(static_cast<unsigned char>(c)))
      compact.push_back(c);
  StringRef eq(compact);
  auto [lhs, rhs] = eq.split("->");
  bool explicitOut = eq.contains("->");
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  if (terms.size() != n.numInputs())
    return n.error() << "equation '" << eqAttr << "' has " << terms.size()
                     << " operand terms for " << n.numInputs() << " inputs";
  Equation e;
  int64_t maxEll = 0;
  llvm::DenseMap<int, int> count;
  for (auto [i, term] : llvm::enumerate(terms)) {
    auto type = cast<RankedTensorType>(n.input(i).getType());
    FailureOr<Labels> l = parseTerm(n, eqAttr, term, type.getRank(), 0);
    if (failed(l))
      return failure();
    for (auto [d, label] : llvm::enumerate(*l)) {
      int64_t size = type.getDimSize(d);
      auto [it, inserted] = e.sizes.try_emplace(label, size);
      if (!inserted && it->second != size)
        return n.error() << "equation '" << eqAttr << "': label '"
                         << labelName(label) << "' has sizes " << it->second
                         << " and " << size
                         << " (ds does not broadcast einsum dimensions)";
      if (label >= kEllipsis)
        maxEll = std::max<int64_t>(maxEll, label - kEllipsis + 1);
      ++count[label];
    }
    e.inputs.push_back(std::move(*l));
  }
  if (explicitOut) {
    FailureOr<Labels> out = parseTerm(n, eqAttr, rhs, -1, maxEll);
    if (failed(out))
      return failure();
    for (int label : *out) {
      if (llvm::count(*out, label) > 1)
        return n.error() << "equation '" << eqAttr << "' repeats label '"
                         << labelName(label) << "' in the output";
      if (!e.sizes.count(label))
        return n.error() << "equation '" << eqAttr << "': output label '"
                         << labelName(label) << "' is not in any operand";
    }
    e.output = std::move(*out);
    return e;
  }
  for (int64_t k = maxEll - 1; k >= 0; --k)
    e.output.push_back(kEllipsis + static_cast<int>(k));
  Labels once;
  for (auto &[label, c] : count)
    if (c == 1 && label < kEllipsis)
      once.push_back(label);
  llvm::sort(once);
  e.output.append(once.begin(), once.end());
  return e;
}

/// A value and the label of each of its dimensions.
struct Labeled {
  Value value;
  Labels labels;
};

class Lowering {
public:
  Lowering(NodeContext &n, const Equation &e) : n(n), e(e) {}

  /// Sums away the labels of `x` not in `keep`.
  Labeled reduce(Labeled x, ArrayRef<int> keep) {
    SmallVector<int64_t> axes;
    Labels rest;
    for (auto [d, l] : llvm::enumerate(x.labels)) {
      if (llvm::is_contained(keep, l))
        rest.push_back(l);
      else
        axes.push_back(d);
    }
    if (axes.empty())
      return x;
    OpBuilder &b = n.builder();
    Value r = ReduceSumOp::create(b, n.loc, typeOf(rest, x.value), x.value,
                                  b.getDenseI64ArrayAttr(axes),
                                  b.getBoolAttr(false));
    return {r, rest};
  }

  /// Permutes `x` into the order of `order` (the same labels).
  Value permute(const Labeled &x, ArrayRef<int> order) {
    SmallVector<int64_t> perm;
    for (int l : order)
      perm.push_back(llvm::find(x.labels, l) - x.labels.begin());
    if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
      return x.value;
    OpBuilder &b = n.builder();
    return TransposeOp::create(b, n.loc, typeOf(order, x.value), x.value,
                               b.getDenseI64ArrayAttr(perm));
  }

  Value reshape(Value x, ArrayRef<int64_t> shape) {
    auto t = cast<RankedTensorType>(x.getType());
    if (t.getShape() == shape)
      return x;
    return ReshapeOp::create(n.builder(), n.loc, t.clone(shape), x);
  }

  /// Contracts `a` with `c`, keeping the labels in `keep`.
  Labeled contract(Labeled a, Labeled c, ArrayRef<int> keep) {
    auto needed = [&](const Labels &other) {
      Labels k(keep.begin(), keep.end());
      k.append(other.begin(), other.end());
      return k;
    };
    a = reduce(a, needed(c.labels));
    c = reduce(c, needed(a.labels));
    Labels batch, contracted, freeA, freeC;
    for (int l : a.labels) {
      bool both = llvm::is_contained(c.labels, l);
      bool kept = llvm::is_contained(keep, l);
      (both ? (kept ? batch : contracted) : freeA).push_back(l);
    }
    for (int l : c.labels)
      if (!llvm::is_contained(a.labels, l))
        freeC.push_back(l);
    int64_t bt = product(batch), m = product(freeA), k = product(contracted),
            nn = product(freeC);
    Value x = permute(a, concat({batch, freeA, contracted}));
    Value y = permute(c, concat({batch, contracted, freeC}));
    bool batched = !batch.empty();
    auto shape3 = [&](int64_t r, int64_t s) {
      return batched ? SmallVector<int64_t>{bt, r, s}
                     : SmallVector<int64_t>{r, s};
    };
    x = reshape(x, shape3(m, k));
    y = reshape(y, shape3(k, nn));
    auto mmType = cast<RankedTensorType>(x.getType()).clone(shape3(m, nn));
    Value z = MatMulOp::create(n.builder(), n.loc, mmType, x, y);
    Labels result = concat({batch, freeA, freeC});
    return {reshape(z, sizesOf(result)), result};
  }

  /// Takes the diagonal of each label repeated in `x` (`ii` -> `i`):
  /// where(eye at the two dimensions, x, 0) summed over the second.
  Labeled diagonals(Labeled x) {
    OpBuilder &b = n.builder();
    for (size_t p = 0; p < x.labels.size(); ++p) {
      for (size_t q = p + 1; q < x.labels.size();) {
        if (x.labels[q] != x.labels[p]) {
          ++q;
          continue;
        }
        int64_t len = e.sizes.lookup(x.labels[p]);
        SmallVector<int64_t> maskShape(x.labels.size(), 1);
        maskShape[p] = maskShape[q] = len;
        SmallVector<bool> eye(len * len, false);
        for (int64_t i = 0; i < len; ++i)
          eye[i * len + i] = true;
        auto maskType = RankedTensorType::get(maskShape, b.getI1Type());
        Value mask = n.constant(
            maskType, DenseElementsAttr::get(maskType, ArrayRef<bool>(eye)));
        auto xType = cast<RankedTensorType>(x.value.getType());
        auto zeroType = RankedTensorType::get({}, xType.getElementType());
        Value zero = n.constant(zeroType, b.getZeroAttr(zeroType));
        Value kept = WhereOp::create(b, n.loc, xType, mask, x.value, zero);
        x.labels.erase(x.labels.begin() + q);
        x.value = ReduceSumOp::create(
            b, n.loc, typeOf(x.labels, kept), kept,
            b.getDenseI64ArrayAttr({static_cast<int64_t>(q)}),
            b.getBoolAttr(false));
      }
    }
    return x;
  }

  Value run() {
    Labeled cur = diagonals({n.input(0), e.inputs[0]});
    for (size_t i = 1; i < e.inputs.size(); ++i) {
      Labels keep = e.output;
      for (size_t j = i + 1; j < e.inputs.size(); ++j)
        keep.append(e.inputs[j].begin(), e.inputs[j].end());
      cur = contract(cur, diagonals({n.input(i), e.inputs[i]}), keep);
    }
    cur = reduce(cur, e.output);
    return permute(cur, e.output);
  }

private:
  int64_t product(ArrayRef<int> labels) const {
    int64_t p = 1;
    for (int l : labels)
      p *= e.sizes.lookup(l);
    return p;
  }
  SmallVector<int64_t> sizesOf(ArrayRef<int> labels) const {
    SmallVector<int64_t> s;
    for (int l : labels)
      s.push_back(e.sizes.lookup(l));
    return s;
  }
  Type typeOf(ArrayRef<int> labels, Value like) const {
    return cast<RankedTensorType>(like.getType()).clone(sizesOf(labels));
  }
  static Labels concat(std::initializer_list<ArrayRef<int>> parts) {
    Labels out;
    for (ArrayRef<int> p : parts)
      out.append(p.begin(), p.end());
    return out;
  }

  NodeContext &n;
  const Equation &e;
};

LogicalResult einsum(NodeContext &n) {
  if (n.numInputs() == 0)
    return n.error() << "expects at least one input";
  for (size_t i = 0; i < n.numInputs(); ++i) {
    if (!n.input(i))
      return n.error() << "missing required input " << i;
    if (failed(n.requireFloat(i)))
      return failure();
    if (n.elementTypeOf(i) != n.elementTypeOf(0))
      return n.error() << "operands of different element types";
  }
  const onnx::AttributeProto *eq = n.attr("equation");
  if (!eq)
    return n.error() << "missing attribute 'equation'";
  FailureOr<Equation> e = parseEquation(n, eq->s());
  if (failed(e))
    return failure();
  return n.bind(Lowering(n, *e).run());
}

} // namespace

void registerEinsumHandlers(HandlerTable &t) { t.add("Einsum", einsum); }

} // namespace mlir::ds::onnx_import
