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

#endif // DS_DIALECT_DS_IR_DSCOMPRESSION_H
