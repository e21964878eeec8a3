//===- DsInterfaces.td - ds op interfaces ------------------*- tablegen -*-===//
//
// Per-op knowledge that passes query: cost (FLOPs, bytes), the
// vector-Jacobian product used by autodiff, and how a split axis passes
// through (tensor and sequence parallelism).
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSINTERFACES_TD
#define DS_DIALECT_DS_IR_DSINTERFACES_TD

include "mlir/IR/OpBase.td"

def Ds_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mlir::ds";
  let description = [{
    The cost of one execution of the op, for the cost model shared by the
    recompute, schedule and report passes. FLOPs count multiply and add as
    two operations (a GEMM of MxK by KxN is 2*M*N*K); transcendental
    functions count as one. Bytes are the sizes of the operand and result
    tensors at their element types (the traffic of an unfused kernel).
  }];
  let methods = [
    InterfaceMethod<"Floating-point (or integer) operations of one execution",
      "int64_t", "getFlops", (ins)>,
    InterfaceMethod<"Bytes the op reads", "int64_t", "getBytesRead", (ins), [{}],
      [{ return ::mlir::ds::detail::sumTensorBytes($_op->getOperandTypes()); }]>,
    InterfaceMethod<"Bytes the op writes", "int64_t", "getBytesWritten", (ins),
      [{}],
      [{ return ::mlir::ds::detail::sumTensorBytes($_op->getResultTypes()); }]>,
  ];
}

def Ds_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::mlir::ds";
  let description = [{
    An op that communicates between ranks: what it does (`CollectiveKind`:
    all_reduce, reduce_scatter, all_gather, send, recv), among which ranks
    (`CommGroup`: world, data, tensor, pipeline; by default the op's
    integer `group` attribute, -1 world, 1 tensor, else data) and how many
    bytes one rank puts on the wire per execution. Bytes count the payload
    once, whatever the algorithm (a ring all-reduce moves about twice as
    much, a factor that depends on the group's size): the tensor a rank
    reduces, its shard of a gather, the tensor it sends or receives. Its
    kernels are "communication" in the plan (`ds.phase`).
  }];
  let methods = [
    InterfaceMethod<"What the collective does",
      "::mlir::ds::CollectiveKind", "getCollectiveKind", (ins)>,
    InterfaceMethod<"The ranks it spans", "::mlir::ds::CommGroup",
      "getCommGroup", (ins), [{}], [{
        auto group = $_op->template getAttrOfType<::mlir::IntegerAttr>("group");
        return ::mlir::ds::commGroupFromAttr(group ? group.getInt() : 0);
      }]>,
    InterfaceMethod<"Bytes one rank sends (or receives) per execution",
      "int64_t", "getBytesPerRank", (ins), [{}],
      [{ return ::mlir::ds::detail::sumTensorBytes($_op->getOperandTypes()); }]>,
  ];
}

def Ds_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let cppNamespace = "::mlir::ds";
  let description = [{
    Reverse-mode derivative of an op. Given the gradients of the op's results
    (null for a result that does not reach the loss), build ops that compute
    the gradient of each operand (null for an operand that is not
    differentiable, such as indices). Implemented by the autodiff work.
  }];
  let methods = [
    InterfaceMethod<"Build the gradients of the operands",
      "::llvm::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

def Ds_SplitAxisOpInterface : OpInterface<"SplitAxisOpInterface"> {
  let cppNamespace = "::mlir::ds";
  let description = [{
    How a tensor split into equal blocks along one axis passes through the
    op: the sharding rule that tensor and sequence parallelism propagate
    (upstream MLIR's `shard` dialect's ShardingInterface, reduced to one
    split axis per tensor and equal blocks). Given that operand `operand`
    is split along `axis`, returns the result axis that holds the same
    blocks (every result's, for an op of several results), or -1 when the
    op mixes elements along that axis (a reduction over it, a softmax
    along it, a contraction) so that the split cannot pass. Operands whose
    aligned axis is broadcast (size 1 or absent) are left to the caller:
    they are whole on every rank.
  }];
  let methods = [
    InterfaceMethod<"The result axis that carries operand `operand`'s split "
                    "along `axis`, or -1",
      "int64_t", "getResultSplitAxis",
      (ins "unsigned":$operand, "int64_t":$axis)>,
  ];
}

#endif // DS_DIALECT_DS_IR_DSINTERFACES_TD
