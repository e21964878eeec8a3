//===- DsOps.h - ds dialect operations --------------------------*- C++ -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSOPS_H
#define DS_DIALECT_DS_IR_DSOPS_H

#include "ds/Dialect/Ds/IR/DsDialect.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::ds {

/// Marks ops computed in f32 under mixed precision (Ds_F32Island).
template <typename ConcreteType>
class DsF32Island : public OpTrait::TraitBase<ConcreteType, DsF32Island> {};
/// Marks elementwise ops: result element i reads element i of each operand
/// only (Ds_Elementwise).
template <typename ConcreteType>
class DsElementwise : public OpTrait::TraitBase<ConcreteType, DsElementwise> {};
/// Marks reductions over axes (Ds_Reduction).
template <typename ConcreteType>
class DsReduction : public OpTrait::TraitBase<ConcreteType, DsReduction> {};
/// Marks optimizer steps (Ds_OptimizerStep).
template <typename ConcreteType>
class DsOptimizerStep
    : public OpTrait::TraitBase<ConcreteType, DsOptimizerStep> {};

/// What a collective does (CollectiveOpInterface).
enum class CollectiveKind { AllReduce, ReduceScatter, AllGather, Send, Recv };
/// The ranks a collective spans: every rank, or the ranks along one axis of
/// the DP x TP x PP grid (sequence parallelism communicates over the
/// tensor-parallel ranks).
enum class CommGroup { World, Data, Tensor, Pipeline };
/// Lower-case names ("all_reduce", "tensor", ...).
StringRef stringifyCollectiveKind(CollectiveKind kind);
StringRef stringifyCommGroup(CommGroup group);
/// The group a collective's integer `group` attribute names: -1 every
/// rank, 1 the tensor-parallel ranks, else (0) the data-parallel ranks.
CommGroup commGroupFromAttr(int64_t group);

/// The elementwise binary ops; shared verifier and folder dispatch on it.
enum class BinaryKind {
  Add, Sub, Mul, Div, Pow, Max, Min,
  Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
  And, Or, Xor
};

/// The elementwise unary ops.
enum class UnaryKind {
  Neg, Abs, Exp, Log, Sqrt, Reciprocal, Erf, Tanh, Relu, Sigmoid, Not
};

/// True for comparisons and logical ops, whose result is i1.
bool isPredicate(BinaryKind kind);
/// True for And/Or/Xor, whose operands are i1.
bool isLogical(BinaryKind kind);

namespace detail {
/// Number of elements of a static shaped type (1 for scalars).
int64_t numElements(Type type);
/// Bytes of one tensor type at its element type (i1 takes one byte).
int64_t tensorBytes(Type type);
/// Sum of tensorBytes over `types` (non-tensor types count zero).
int64_t sumTensorBytes(TypeRange types);

LogicalResult verifyBinaryOp(Operation *op, BinaryKind kind);
OpFoldResult foldBinaryOp(Operation *op, BinaryKind kind, Attribute lhs,
                          Attribute rhs);
OpFoldResult foldUnaryOp(Operation *op, UnaryKind kind, Attribute input);
LogicalResult verifyReduceOp(Operation *op, ArrayRef<int64_t> axes,
                             bool keepdims);
/// Attaches VJPOpInterface to every differentiable op (DsVJP.cpp).
void attachVJPModels(MLIRContext &context);
/// The SplitAxisOpInterface models (DsSplitAxis.cpp).
void attachSplitAxisModels(MLIRContext &context);
} // namespace detail

/// Reverse mode: builds, at `builder`'s insertion point, the gradients of
/// `y` (seeded with `seed`) with respect to each of `xs`, walking the ops of
/// `ops` (in program order) backwards through VJPOpInterface. A gradient of
/// an x that `y` does not depend on is null. Fails, with an error on the op,
/// if an op on the path has no gradient rule.
FailureOr<SmallVector<Value>> buildGradients(OpBuilder &builder,
                                             ArrayRef<Operation *> ops, Value y,
                                             Value seed, ValueRange xs);
/// The same with several seeded outputs: the gradients of the sum of
/// <y_i, seed_i> (a pipeline stage's outputs, seeded with the gradients the
/// next stage sent back).
FailureOr<SmallVector<Value>>
buildGradients(OpBuilder &builder, ArrayRef<Operation *> ops,
               ArrayRef<std::pair<Value, Value>> seeds, ValueRange xs);
namespace detail {
} // namespace detail
} // namespace mlir::ds

#include "ds/Dialect/Ds/IR/DsInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ds/Dialect/Ds/IR/DsOps.h.inc"

#endif // DS_DIALECT_DS_IR_DSOPS_H
