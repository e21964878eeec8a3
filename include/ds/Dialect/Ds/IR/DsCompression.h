//===- DsCompression.h - compressed-communication ops -----------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSCOMPRESSION_H
#define DS_DIALECT_DS_IR_DSCOMPRESSION_H

#include "ds/Dialect/Ds/IR/DsOps.h"

#define GET_OP_CLASSES
#include "ds/Dialect/Ds/IR/DsCompression.h.inc"

namespace mlir::ds::detail {
/// Checks the error-feedback buffers of a compressed optimizer op whose
/// parameter is `param`: 1-D f32, the worker error padded over some world
/// size (ds::onebit::paddedSize) and the server error its per-rank part.
LogicalResult verifyOneBitErrors(Operation *op, Type param, Type workerError,
                                 Type serverError);
} // namespace mlir::ds::detail

#endif // DS_DIALECT_DS_IR_DSCOMPRESSION_H
