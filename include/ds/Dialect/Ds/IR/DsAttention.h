//===- DsAttention.h - fused attention's strided operands -------*- C++ -*-===//
//
// Part of the ds project.
//
// What --ds-fold-transpose and the lowering share about ds.fused_attention
// and ds.fused_attention_grad (DsAttention.td): which operands their
// kernels can read through a permutation instead of a transposed copy.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSATTENTION_H
#define DS_DIALECT_DS_IR_DSATTENTION_H

#include "mlir/IR/Operation.h"

namespace mlir::ds {

/// The kernel parameter through which ds.fused_attention(_grad) reads its
/// operand `index` as transpose(source, perm) (--ds-fold-transpose; the
/// permutation must keep the innermost dimension last): "perm_q",
/// "perm_k", "perm_v" and, for the gradient, "perm_grad"; empty for any
/// other op or operand (DsAttention.cpp).
StringRef attentionStridedOperand(Operation *op, unsigned index);

} // namespace mlir::ds

#endif // DS_DIALECT_DS_IR_DSATTENTION_H
