//===- DsEmbeddingBag.cpp - ds.embedding_bag and its gradient -------------===//
//
// Part of the ds project.
//
// The verifiers and costs of ds.embedding_bag and ds.embedding_bag_grad
// (nn.EmbeddingBag with an offsets input, the misc family of issue 22).
// Their VJP is in DsVJP.cpp; the importer's match of torch's Loop in
// lib/Import/EmbeddingBagHandlers.cpp; the kernels in
// lib/Runtime/Cpu/EmbeddingBag.cpp and lib/Runtime/Cuda/EmbeddingBag.cu.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"

using namespace mlir;
using namespace mlir::ds;

/// The checks both ops share: the mode, 1-D indices and bounds, a [B, D]
/// bag tensor (`bags`) for a [V, D] table (`table`), and per-sample
/// weights of the indices' length with mode sum only.
static LogicalResult verifyBags(Operation *op, StringRef mode,
                                RankedTensorType table, RankedTensorType bags,
                                RankedTensorType indices,
                                RankedTensorType offsets, Value psw) {
  if (mode != "sum" && mode != "mean" && mode != "max")
    return op->emitOpError("mode must be \"sum\", \"mean\" or \"max\", got '")
           << mode << "'";
  if (indices.getRank() != 1 || offsets.getRank() != 1)
    return op->emitOpError("expects 1-D indices and offsets, got ")
           << indices << " and " << offsets;
  if (offsets.getDimSize(0) < 1)
    return op->emitOpError("expects at least one bag bound in offsets");
  if (table.getRank() != 2 || bags.getRank() != 2 ||
      bags.getDimSize(1) != table.getDimSize(1) ||
      bags.getDimSize(0) != offsets.getDimSize(0) - 1)
    return op->emitOpError("expects a [V, D] weight and [B, D] bags for B + 1 "
                           "offsets, got ")
           << table << ", " << bags << " and " << offsets;
  if (bags.getElementType() != table.getElementType())
    return op->emitOpError("weight and bags element types differ");
  if (!psw)
    return success();
  if (mode != "sum")
    return op->emitOpError("per_sample_weights are for mode \"sum\" only");
  auto t = cast<RankedTensorType>(psw.getType());
  if (t.getShape() != indices.getShape())
    return op->emitOpError("expects per_sample_weights of the indices' shape ")
           << indices << ", got " << t;
  return success();
}

LogicalResult EmbeddingBagOp::verify() {
  return verifyBags(*this, getMode(), getWeight().getType(),
                    getResult().getType(), getIndices().getType(),
                    getOffsets().getType(), getPerSampleWeights());
}

LogicalResult EmbeddingBagGradOp::verify() {
  auto out = getResult().getType();
  if (failed(verifyBags(*this, getMode(), out, getGrad().getType(),
                        getIndices().getType(), getOffsets().getType(),
                        getPerSampleWeights())))
    return failure();
  bool isMax = getMode() == "max";
  if (isMax != static_cast<bool>(getWeight()))
    return emitOpError("takes the weight in mode \"max\" (to find each "
                       "element's row), and only then");
  if (getWeight() && getWeight().getType() != out)
    return emitOpError("weight must have the result's type");
  return success();
}

/// One multiply-add per gathered element (plus the division of mean).
int64_t EmbeddingBagOp::getFlops() {
  int64_t n = getIndices().getType().getDimSize(0);
  return 2 * n * getWeight().getType().getDimSize(1) +
         detail::numElements(getResult().getType());
}

/// A zero fill of the table and one multiply-add per gathered element
/// (max also compares each to find its row).
int64_t EmbeddingBagGradOp::getFlops() {
  int64_t n = getIndices().getType().getDimSize(0);
  int64_t d = getGrad().getType().getDimSize(1);
  return detail::numElements(getResult().getType()) +
         (getWeight() ? 3 : 2) * n * d;
}
