//===- TensorParallelUtils.h - shared by the tensor-parallel passes -*- C++ -*-===//
//
// Part of the ds project.
//
// Private to lib/Transforms: what the tensor, vocabulary and sequence
// parallelism passes share (the split attribute, type and parameter
// helpers, the group-input mark), and the entry points through which
// `--ds-tensor-parallel` runs the other two when its options ask for them.
//
//===----------------------------------------------------------------------===//

#ifndef DS_LIB_TRANSFORMS_TENSORPARALLELUTILS_H
#define DS_LIB_TRANSFORMS_TENSORPARALLELUTILS_H

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::ds {

/// The argument attribute that tells the runtime which slice of a
/// parameter each rank of the tensor-parallel group loads.
constexpr llvm::StringLiteral kTpSplit = "ds.tp_split";

/// `t` (a ranked tensor type) with dimension `axis` set to `size`.
inline RankedTensorType withDim(Type t, int64_t axis, int64_t size) {
  auto r = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(r.getShape());
  shape[axis] = size;
  return r.clone(shape);
}

/// Whether `v` is an argument of `func` marked as a trainable parameter.
inline bool isTrainableParam(func::FuncOp func, Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && arg.getOwner() == &func.getBody().front() &&
         func.getArgAttr(arg.getArgNumber(), attrs::kParam) &&
         func.getArgAttr(arg.getArgNumber(), attrs::kTrainable);
}

/// The input of a split block (Megatron's f): `x` marked `ds.tp_identity`
/// before `before` (its gradient is summed over the group), or `x` itself
/// when it is a graph input (which needs no gradient).
Value markGroupInput(OpBuilder &b, func::FuncOp func, Value x,
                     Operation *before);

/// Whether `--ds-vocab-parallel` finds an output layer or an embedding
/// table to split over `size` ranks in `func`.
bool hasVocabulary(func::FuncOp func, int64_t size);

/// `--ds-vocab-parallel` on `func`: splits every vocabulary it finds.
LogicalResult splitVocabulary(func::FuncOp func, int64_t size);

/// `--ds-sequence-parallel` on `func`, after its blocks are split.
LogicalResult splitSequence(func::FuncOp func, int64_t size);

} // namespace mlir::ds

#endif // DS_LIB_TRANSFORMS_TENSORPARALLELUTILS_H
