//===- DsZeroPP.h - ZeRO++'s quantized collectives --------------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSZEROPP_H
#define DS_DIALECT_DS_IR_DSZEROPP_H

#include "ds/Dialect/Ds/IR/DsOps.h"

#define GET_OP_CLASSES
#include "ds/Dialect/Ds/IR/DsZeroPP.h.inc"

#endif // DS_DIALECT_DS_IR_DSZEROPP_H
