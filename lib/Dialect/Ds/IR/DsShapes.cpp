//===- DsShapes.cpp - shape rules shared by verifiers and importer --------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsShapes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::shapes;

std::string shapes::toString(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << '[';
  llvm::interleaveComma(shape, os);
  os << ']';
  return s;
}

int64_t shapes::product(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

FailureOr<int64_t> shapes::normalizeAxis(int64_t axis, int64_t rank,
                                         EmitErrorFn emitError) {
  if (axis < -rank || axis >= rank) {
    emitError() << "axis " << axis << " is out of range for rank " << rank;
    return failure();
  }
  return axis < 0 ? axis + rank : axis;
}

FailureOr<Shape> shapes::broadcast(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                                   EmitErrorFn emitError) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      emitError() << "shapes " << toString(a) << " and " << toString(b)
                  << " do not broadcast";
      return failure();
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool shapes::broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[i + off])
      return false;
  return true;
}

FailureOr<Shape> shapes::matmul(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                                EmitErrorFn emitError) {
  if (a.empty() || b.empty()) {
    emitError() << "matmul operands must have rank >= 1";
    return failure();
  }
  Shape la(a.begin(), a.end()), lb(b.begin(), b.end());
  bool promoteA = la.size() == 1, promoteB = lb.size() == 1;
  if (promoteA)
    la.insert(la.begin(), 1);
  if (promoteB)
    lb.push_back(1);
  int64_t k = la.back(), k2 = lb[lb.size() - 2];
  if (k != k2) {
    emitError() << "matmul contraction mismatch: " << toString(a) << " x "
                << toString(b);
    return failure();
  }
  ArrayRef<int64_t> batchA = ArrayRef<int64_t>(la).drop_back(2);
  ArrayRef<int64_t> batchB = ArrayRef<int64_t>(lb).drop_back(2);
  FailureOr<Shape> batch = broadcast(batchA, batchB, emitError);
  if (failed(batch))
    return failure();
  Shape out = *batch;
  if (!promoteA)
    out.push_back(la[la.size() - 2]);
  if (!promoteB)
    out.push_back(lb.back());
  return out;
}

FailureOr<Shape> shapes::gemm(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                              std::optional<ArrayRef<int64_t>> c, bool transA,
                              bool transB, EmitErrorFn emitError) {
  if (a.size() != 2 || b.size() != 2) {
    emitError() << "gemm operands must be 2-D, got " << toString(a) << " and "
                << toString(b);
    return failure();
  }
  int64_t m = transA ? a[1] : a[0], ka = transA ? a[0] : a[1];
  int64_t kb = transB ? b[1] : b[0], n = transB ? b[0] : b[1];
  if (ka != kb) {
    emitError() << "gemm contraction mismatch: " << ka << " vs " << kb;
    return failure();
  }
  Shape out{m, n};
  if (c && !broadcastsTo(*c, out)) {
    emitError() << "gemm bias " << toString(*c) << " does not broadcast to "
                << toString(out);
    return failure();
  }
  return out;
}

FailureOr<Shape> shapes::gather(ArrayRef<int64_t> data,
                                ArrayRef<int64_t> indices, int64_t axis,
                                EmitErrorFn emitError) {
  if (axis < 0 || axis >= static_cast<int64_t>(data.size())) {
    emitError() << "gather axis " << axis << " out of range for rank "
                << data.size();
    return failure();
  }
  Shape out(data.begin(), data.begin() + axis);
  out.append(indices.begin(), indices.end());
  out.append(data.begin() + axis + 1, data.end());
  return out;
}

FailureOr<Shape> shapes::transpose(ArrayRef<int64_t> input,
                                   ArrayRef<int64_t> perm,
                                   EmitErrorFn emitError) {
  if (perm.size() != input.size()) {
    emitError() << "permutation " << toString(perm) << " does not match rank "
                << input.size();
    return failure();
  }
  SmallVector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p]) {
      emitError() << "invalid permutation " << toString(perm);
      return failure();
    }
    seen[p] = true;
    out.push_back(input[p]);
  }
  return out;
}

FailureOr<Shape> shapes::concat(ArrayRef<ArrayRef<int64_t>> inputs,
                                int64_t axis, EmitErrorFn emitError) {
  if (inputs.empty()) {
    emitError() << "concat needs at least one operand";
    return failure();
  }
  Shape out(inputs[0].begin(), inputs[0].end());
  if (axis < 0 || axis >= static_cast<int64_t>(out.size())) {
    emitError() << "concat axis " << axis << " out of range for rank "
                << out.size();
    return failure();
  }
  for (ArrayRef<int64_t> in : inputs.drop_front()) {
    if (in.size() != out.size()) {
      emitError() << "concat operands differ in rank: " << toString(inputs[0])
                  << " and " << toString(in);
      return failure();
    }
    for (size_t d = 0; d < in.size(); ++d) {
      if (static_cast<int64_t>(d) == axis)
        continue;
      if (in[d] != out[d]) {
        emitError() << "concat operands differ outside axis " << axis << ": "
                    << toString(inputs[0]) << " and " << toString(in);
        return failure();
      }
    }
    out[axis] += in[axis];
  }
  return out;
}

FailureOr<Shape> shapes::reduce(ArrayRef<int64_t> input,
                                ArrayRef<int64_t> axes, bool keepdims,
                                EmitErrorFn emitError) {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(input.size()) ||
        (i > 0 && axes[i] <= axes[i - 1])) {
      emitError() << "reduction axes " << toString(axes)
                  << " must be sorted, unique and in [0, " << input.size()
                  << ")";
      return failure();
    }
  }
  if (axes.empty() && !input.empty()) {
    emitError() << "reduction axes must not be empty";
    return failure();
  }
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(input.size()); ++d) {
    if (llvm::is_contained(axes, d)) {
      if (keepdims)
        out.push_back(1);
    } else {
      out.push_back(input[d]);
    }
  }
  return out;
}

FailureOr<SliceSpec> shapes::normalizeSlice(ArrayRef<int64_t> input,
                                            ArrayRef<int64_t> starts,
                                            ArrayRef<int64_t> ends,
                                            ArrayRef<int64_t> axes,
                                            ArrayRef<int64_t> steps,
                                            EmitErrorFn emitError) {
  int64_t rank = input.size();
  if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()) ||
      (!steps.empty() && steps.size() != starts.size())) {
    emitError() << "slice starts, ends, axes and steps differ in length";
    return failure();
  }
  SliceSpec spec;
  spec.starts.assign(rank, 0);
  spec.steps.assign(rank, 1);
  spec.shape.assign(input.begin(), input.end());
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = axes.empty() ? static_cast<int64_t>(i) : axes[i];
    FailureOr<int64_t> a = normalizeAxis(axis, rank, emitError);
    if (failed(a))
      return failure();
    if (seen[*a]) {
      emitError() << "slice axis " << axis << " repeated";
      return failure();
    }
    seen[*a] = true;
    int64_t dim = input[*a];
    int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0) {
      emitError() << "slice step must not be 0";
      return failure();
    }
    // ONNX: negative start/end add the dimension, then clamp to [0, dim]
    // for positive steps and [-1, dim-1] for negative ones. Values past
    // int64 range (INT64_MAX as "to the end") clamp the same way.
    auto clampIdx = [&](int64_t v) {
      if (v < 0)
        v = (v < -dim) ? -1 : v + dim;
      if (step > 0)
        return std::clamp<int64_t>(v, 0, dim);
      return std::clamp<int64_t>(v, -1, dim - 1);
    };
    int64_t s = clampIdx(starts[i]), e = clampIdx(ends[i]);
    int64_t count = 0;
    if (step > 0 && e > s)
      count = (e - s + step - 1) / step;
    else if (step < 0 && s > e)
      count = (s - e + (-step) - 1) / (-step);
    spec.starts[*a] = count == 0 ? 0 : s;
    spec.steps[*a] = step;
    spec.shape[*a] = count;
  }
  return spec;
}

LogicalResult shapes::verifySlice(ArrayRef<int64_t> input,
                                  ArrayRef<int64_t> starts,
                                  ArrayRef<int64_t> steps,
                                  ArrayRef<int64_t> counts,
                                  EmitErrorFn emitError) {
  if (starts.size() != input.size() || steps.size() != input.size() ||
      counts.size() != input.size()) {
    emitError() << "slice needs one start and step per dimension of rank "
                << input.size();
    return failure();
  }
  for (size_t d = 0; d < input.size(); ++d) {
    if (steps[d] == 0) {
      emitError() << "slice step of dimension " << d << " is 0";
      return failure();
    }
    if (counts[d] == 0)
      continue;
    int64_t last = starts[d] + (counts[d] - 1) * steps[d];
    if (starts[d] < 0 || starts[d] >= input[d] || last < 0 ||
        last >= input[d]) {
      emitError() << "slice of dimension " << d << " (start " << starts[d]
                  << ", step " << steps[d] << ", count " << counts[d]
                  << ") leaves [0, " << input[d] << ")";
      return failure();
    }
  }
  return success();
}

FailureOr<Shape> shapes::reshapeTarget(ArrayRef<int64_t> input,
                                       ArrayRef<int64_t> requested,
                                       bool allowZero, EmitErrorFn emitError) {
  Shape out;
  int64_t inferAt = -1, known = 1;
  for (size_t i = 0; i < requested.size(); ++i) {
    int64_t d = requested[i];
    if (d == 0 && !allowZero) {
      if (i >= input.size()) {
        emitError() << "reshape copies dimension " << i
                    << " which the input of rank " << input.size()
                    << " lacks";
        return failure();
      }
      d = input[i];
    }
    if (d == -1) {
      if (inferAt >= 0) {
        emitError() << "reshape target " << toString(requested)
                    << " has more than one -1";
        return failure();
      }
      inferAt = i;
      out.push_back(1);
      continue;
    }
    if (d < 0) {
      emitError() << "reshape target " << toString(requested)
                  << " has a negative dimension";
      return failure();
    }
    known *= d;
    out.push_back(d);
  }
  int64_t total = product(input);
  if (inferAt >= 0) {
    if (known == 0 || total % known != 0) {
      emitError() << "cannot reshape " << toString(input) << " to "
                  << toString(requested);
      return failure();
    }
    out[inferAt] = total / known;
  } else if (known != total) {
    emitError() << "cannot reshape " << toString(input) << " (" << total
                << " elements) to " << toString(requested) << " (" << known
                << " elements)";
    return failure();
  }
  return out;
}

FailureOr<Shape> shapes::loss(ArrayRef<int64_t> scores,
                              ArrayRef<int64_t> labels,
                              std::optional<ArrayRef<int64_t>> weights,
                              StringRef reduction, EmitErrorFn emitError) {
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    emitError() << "reduction '" << reduction
                << "' is not one of 'none', 'sum', 'mean'";
    return failure();
  }
  if (scores.size() < 2 || labels.size() != scores.size() - 1 ||
      labels[0] != scores[0] ||
      !llvm::equal(labels.drop_front(), scores.drop_front(2))) {
    emitError() << "loss expects scores N x C x d1..dk and labels "
                   "N x d1..dk, got "
                << toString(scores) << " and " << toString(labels);
    return failure();
  }
  if (weights && (weights->size() != 1 || (*weights)[0] != scores[1])) {
    emitError() << "loss weights " << toString(*weights) << " must be [C] = ["
                << scores[1] << "]";
    return failure();
  }
  if (reduction == "none")
    return Shape(labels.begin(), labels.end());
  return Shape{};
}
