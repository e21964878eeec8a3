//===- PoolingHandlers.cpp - MaxPool, AveragePool and the global ones -----===//
//
// Part of the ds project.
//
// MaxPool and GlobalMaxPool import as ds.max_pool, AveragePool and
// GlobalAveragePool as ds.avg_pool (a global pooling is a window of the
// whole plane). auto_pad is resolved to explicit pads here; the output
// size rule is include/ds/Support/Pooling.h's. MaxPool's Indices output
// and a column-major storage_order are refused. (Pad, which torch emits
// before AveragePool for count_include_pad=True, is in
// SpatialHandlers.cpp.)
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"
#include "ds/Support/Pooling.h"

#include <algorithm>

namespace mlir::ds::onnx_import {
namespace {

/// A pooling node's window, every list with its full length.
struct PoolAttrs {
  SmallVector<int64_t> kernel, strides, pads, dilations;
  bool ceilMode = false;
};

/// An optional ints attribute of `n` values (`dflt` each when absent).
FailureOr<SmallVector<int64_t>> listAttr(NodeContext &n, StringRef key,
                                         size_t size, int64_t dflt) {
  std::optional<SmallVector<int64_t>> v = n.intsAttr(key);
  if (!v)
    return SmallVector<int64_t>(size, dflt);
  if (v->size() != size)
    return n.error() << "expects " << size << " values in '" << key
                     << "', got " << v->size();
  return *v;
}

/// Explicit pads for auto_pad SAME_UPPER / SAME_LOWER: the output is
/// ceil(in / stride), the extra padding at the end (upper) or start.
void samePads(PoolAttrs &p, ArrayRef<int64_t> spatial, bool upper) {
  size_t nd = spatial.size();
  for (size_t i = 0; i < nd; ++i) {
    int64_t out = (spatial[i] + p.strides[i] - 1) / p.strides[i];
    int64_t span = (p.kernel[i] - 1) * p.dilations[i] + 1;
    int64_t total =
        std::max<int64_t>((out - 1) * p.strides[i] + span - spatial[i], 0);
    int64_t small = total / 2;
    p.pads[i] = upper ? small : total - small;
    p.pads[nd + i] = total - p.pads[i];
  }
}

/// Reads and checks the window attributes of MaxPool / AveragePool.
FailureOr<PoolAttrs> poolAttrs(NodeContext &n, bool dilations) {
  int64_t nd = static_cast<int64_t>(n.shape(0).size()) - 2;
  if (nd < 1 || nd > ::ds::kMaxPoolDims)
    return n.error() << "expects 1 to 3 spatial dimensions, got " << nd;
  PoolAttrs p;
  std::optional<SmallVector<int64_t>> kernel = n.intsAttr("kernel_shape");
  if (!kernel || static_cast<int64_t>(kernel->size()) != nd)
    return n.error() << "expects kernel_shape with " << nd << " values";
  p.kernel = *kernel;
  FailureOr<SmallVector<int64_t>> strides = listAttr(n, "strides", nd, 1);
  FailureOr<SmallVector<int64_t>> pads = listAttr(n, "pads", 2 * nd, 0);
  FailureOr<SmallVector<int64_t>> dil = listAttr(n, "dilations", nd, 1);
  if (failed(strides) || failed(pads) || failed(dil))
    return failure();
  p.strides = *strides;
  p.pads = *pads;
  p.dilations = *dil;
  if (!dilations && llvm::any_of(p.dilations, [](int64_t d) { return d != 1; }))
    return n.error() << "dilations other than 1 are not supported";
  p.ceilMode = n.intAttr("ceil_mode", 0) != 0;
  std::string autoPad = n.stringAttr("auto_pad", "NOTSET");
  ArrayRef<int64_t> spatial = n.shape(0).drop_front(2);
  if (autoPad == "VALID")
    p.pads.assign(2 * nd, 0);
  else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER")
    samePads(p, spatial, autoPad == "SAME_UPPER");
  else if (autoPad != "NOTSET")
    return n.error() << "unknown auto_pad '" << autoPad << "'";
  return p;
}

/// The pooled result type, or an error when no window fits.
FailureOr<Type> pooledType(NodeContext &n, const PoolAttrs &p) {
  ArrayRef<int64_t> in = n.shape(0);
  size_t nd = in.size() - 2;
  SmallVector<int64_t> out(in.take_front(2));
  for (size_t i = 0; i < nd; ++i) {
    int64_t size =
        ::ds::pooledSize(in[2 + i], p.kernel[i], p.strides[i], p.pads[i],
                         p.pads[nd + i], p.dilations[i], p.ceilMode);
    if (size < 1)
      return n.error() << "the window does not fit spatial dimension " << i;
    out.push_back(size);
  }
  return n.tensor(out, n.elementTypeOf(0));
}

/// The window of a global pooling: the whole plane, no padding.
PoolAttrs globalWindow(NodeContext &n) {
  PoolAttrs p;
  p.kernel.assign(n.shape(0).drop_front(2).begin(), n.shape(0).end());
  p.strides.assign(p.kernel.size(), 1);
  p.pads.assign(2 * p.kernel.size(), 0);
  p.dilations.assign(p.kernel.size(), 1);
  return p;
}

/// Common checks: one float input of rank 3 to 5.
LogicalResult poolInput(NodeContext &n) {
  if (failed(n.expectInputs(1, 1)) || failed(n.requireFloat(0)))
    return failure();
  int64_t nd = static_cast<int64_t>(n.shape(0).size()) - 2;
  if (nd < 1 || nd > ::ds::kMaxPoolDims)
    return n.error() << "expects 1 to 3 spatial dimensions, got " << nd;
  return success();
}

LogicalResult emitMaxPool(NodeContext &n, const PoolAttrs &p) {
  FailureOr<Type> type = pooledType(n, p);
  if (failed(type))
    return failure();
  OpBuilder &b = n.builder();
  return n.emit<MaxPoolOp>(*type, n.input(0), b.getDenseI64ArrayAttr(p.kernel),
                           b.getDenseI64ArrayAttr(p.strides),
                           b.getDenseI64ArrayAttr(p.pads),
                           b.getDenseI64ArrayAttr(p.dilations),
                           b.getBoolAttr(p.ceilMode));
}

LogicalResult emitAvgPool(NodeContext &n, const PoolAttrs &p,
                          bool countIncludePad) {
  FailureOr<Type> type = pooledType(n, p);
  if (failed(type))
    return failure();
  OpBuilder &b = n.builder();
  return n.emit<AvgPoolOp>(*type, n.input(0), b.getDenseI64ArrayAttr(p.kernel),
                           b.getDenseI64ArrayAttr(p.strides),
                           b.getDenseI64ArrayAttr(p.pads),
                           b.getBoolAttr(countIncludePad),
                           b.getBoolAttr(p.ceilMode));
}

LogicalResult maxPool(NodeContext &n) {
  if (failed(poolInput(n)))
    return failure();
  if (n.outputUsed(1))
    return n.error() << "the Indices output is not supported";
  if (n.intAttr("storage_order", 0) != 0)
    return n.error() << "storage_order 1 (column major) is not supported";
  FailureOr<PoolAttrs> p = poolAttrs(n, /*dilations=*/true);
  return failed(p) ? failure() : emitMaxPool(n, *p);
}

LogicalResult averagePool(NodeContext &n) {
  if (failed(poolInput(n)))
    return failure();
  FailureOr<PoolAttrs> p = poolAttrs(n, /*dilations=*/false);
  if (failed(p))
    return failure();
  return emitAvgPool(n, *p, n.intAttr("count_include_pad", 0) != 0);
}

} // namespace

void registerPoolingHandlers(HandlerTable &t) {
  t.add("MaxPool", maxPool);
  t.add("AveragePool", averagePool);
  t.add("GlobalMaxPool", [](NodeContext &n) {
    return failed(poolInput(n)) ? failure() : emitMaxPool(n, globalWindow(n));
  });
  t.add("GlobalAveragePool", [](NodeContext &n) {
    return failed(poolInput(n)) ? failure()
                                : emitAvgPool(n, globalWindow(n), false);
  });
}

} // namespace mlir::ds::onnx_import
