//===- DsShapes.h - shape rules shared by verifiers and importer -*- C++ -*-===//
//
// Part of the ds project.
//
// One implementation of each op's shape rule. The op verifiers call these to
// check a result type; the ONNX importer calls them to compute it. Errors go
// to `emitError`, which the caller binds to an op or to an ONNX node.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSSHAPES_H
#define DS_DIALECT_DS_IR_DSSHAPES_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir::ds::shapes {

using Shape = llvm::SmallVector<int64_t, 4>;
using EmitErrorFn = llvm::function_ref<InFlightDiagnostic()>;

/// Normalizes a possibly negative axis into [0, rank).
FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank,
                                 EmitErrorFn emitError);

/// Multidirectional (numpy) broadcast of two shapes.
FailureOr<Shape> broadcast(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                           EmitErrorFn emitError);

/// True when `from` broadcasts to exactly `to` (unidirectional).
bool broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to);

/// numpy matmul, 1-D operands promoted.
FailureOr<Shape> matmul(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                        EmitErrorFn emitError);

/// Gemm of 2-D operands; `c` (if any) must broadcast to the result.
FailureOr<Shape> gemm(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                      std::optional<ArrayRef<int64_t>> c, bool transA,
                      bool transB, EmitErrorFn emitError);

/// The result of a convolution (ds.conv, DsConv.cpp): `input` N x C x
/// D1..Dk, `weight` M x C/group x K1..Kk (k in 1..3), one stride and
/// dilation per spatial dimension, the pads' begins then ends.
FailureOr<Shape> conv(ArrayRef<int64_t> input, ArrayRef<int64_t> weight,
                      ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                      ArrayRef<int64_t> dilations, int64_t group,
                      EmitErrorFn emitError);

/// data[:axis] ++ indices ++ data[axis+1:]; axis must be normalized.
FailureOr<Shape> gather(ArrayRef<int64_t> data, ArrayRef<int64_t> indices,
                        int64_t axis, EmitErrorFn emitError);

FailureOr<Shape> transpose(ArrayRef<int64_t> input, ArrayRef<int64_t> perm,
                           EmitErrorFn emitError);

FailureOr<Shape> concat(ArrayRef<ArrayRef<int64_t>> inputs, int64_t axis,
                        EmitErrorFn emitError);

/// Reduction over sorted unique non-negative axes.
FailureOr<Shape> reduce(ArrayRef<int64_t> input, ArrayRef<int64_t> axes,
                        bool keepdims, EmitErrorFn emitError);

/// Result count of element `i` along a dimension of size `dim` for a slice
/// starting at the normalized `start` with `step` (no end bound).
/// ONNX Slice normalization: clamps starts/ends as the ONNX spec says and
/// returns, per dimension of `input`, the start, step and count.
struct SliceSpec {
  SmallVector<int64_t> starts, steps;
  Shape shape;
};
FailureOr<SliceSpec> normalizeSlice(ArrayRef<int64_t> input,
                                    ArrayRef<int64_t> starts,
                                    ArrayRef<int64_t> ends,
                                    ArrayRef<int64_t> axes,
                                    ArrayRef<int64_t> steps,
                                    EmitErrorFn emitError);

/// Checks a normalized slice against `input` and returns its result shape
/// when the result type gives `counts` (used by the verifier).
LogicalResult verifySlice(ArrayRef<int64_t> input, ArrayRef<int64_t> starts,
                          ArrayRef<int64_t> steps, ArrayRef<int64_t> counts,
                          EmitErrorFn emitError);

/// ONNX Reshape target: 0 copies the input dimension (unless allowZero),
/// -1 is inferred.
FailureOr<Shape> reshapeTarget(ArrayRef<int64_t> input,
                               ArrayRef<int64_t> requested, bool allowZero,
                               EmitErrorFn emitError);

/// Loss result shape: `labels` for reduction none, else a scalar. Checks
/// `scores` is N x C x d1.. and labels N x d1...
FailureOr<Shape> loss(ArrayRef<int64_t> scores, ArrayRef<int64_t> labels,
                      std::optional<ArrayRef<int64_t>> weights,
                      StringRef reduction, EmitErrorFn emitError);

int64_t product(ArrayRef<int64_t> shape);

/// `[2, 3]`: how diagnostics print shapes.
std::string toString(ArrayRef<int64_t> shape);

} // namespace mlir::ds::shapes

#endif // DS_DIALECT_DS_IR_DSSHAPES_H
