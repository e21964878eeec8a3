//===- Lowering.h - ds to dsrt: the walk's state and the op families -*- C++
//-*-===//
//
// Part of the ds project.
//
// `--ds-lower-to-dsrt` walks @forward once, in program order, and offers each
// op to a table of op families (OpLowering); the first family that matches
// rewrites it into dsrt buffers and calls. Adding an op that needs more than
// the default kernel call (kernel id = op name, attributes as params) means
// adding it to one family, or a family to the table.
//
//===----------------------------------------------------------------------===//

#ifndef DS_CONVERSION_DSTODSRT_LOWERING_H
#define DS_CONVERSION_DSTODSRT_LOWERING_H

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Dialect/DsRt/IR/DsRtOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <memory>

namespace mlir::ds::lowering {

/// The part of the step each op of @forward belongs to (`ds.phase`,
/// Phase.cpp).
class PhaseMap {
public:
  explicit PhaseMap(func::FuncOp func);
  /// The phase of `op`, an op of @forward's body before the lowering.
  dsrt::KernelPhase phaseOf(Operation *op) const;

private:
  /// Positions in @forward's body before the lowering inserts anything.
  llvm::DenseMap<Operation *, unsigned> position;
  /// The position of the first optimizer step (past the end: none).
  unsigned optimizerStart;
  /// The forward ops.
  llvm::DenseSet<Operation *> forward;
};

/// What the walk over @forward carries from op to op.
struct LoweringState {
  LoweringState(func::FuncOp func)
      : func(func), builder(func.getContext()), phases(func) {}

  func::FuncOp func;
  OpBuilder builder;
  /// ds tensors to the dsrt buffers that hold them.
  IRMapping map;
  /// Transposes folded into the matmuls that read them: result to source.
  llvm::DenseMap<Value, Value> transposedFrom;
  /// Parameter and optimizer-state storage by name.
  llvm::StringMap<Value> storage;
  PhaseMap phases;
  /// The ds ops lowered so far, erased (users first) at the end.
  SmallVector<Operation *> toErase;
};

/// One family of ops and how it becomes dsrt. `lower` runs with the
/// builder's insertion point at the op.
class OpLowering {
public:
  virtual ~OpLowering() = default;
  virtual bool match(Operation *op) const = 0;
  virtual LogicalResult lower(Operation *op, LoweringState &state) const = 0;
};

/// A family of the ops `OpTys` (op classes or interfaces).
template <typename... OpTys> class LoweringOf : public OpLowering {
public:
  bool match(Operation *op) const override { return isa<OpTys...>(op); }
};

using OpLowerings = SmallVector<std::unique_ptr<OpLowering>>;

/// The buffer type that holds a tensor of type `tensor`.
MemRefType bufferType(Type tensor);

/// A kernel call being assembled from a ds op: inputs through folded
/// transposes, fresh result buffers, the op's attributes as params.
struct KernelCall {
  StringRef kernel;
  SmallVector<Value> ins, outs;
  NamedAttrList params;
  /// An offloaded op (`ds.on_host`): it runs on the host.
  bool onHost = false;
};

/// The default call of `op` (KernelCall.cpp): kernel id = op name without
/// `ds.`, params = the op's attributes less the compiler's marks; result
/// buffers in the host arena when `hostResults` or the op runs on the host.
FailureOr<KernelCall> prepareKernelCall(Operation *op, LoweringState &state,
                                        bool hostResults = false);
/// Emits `call` for `op` with its in-place inputs and its annotations
/// (`ds.flops`, `ds.bytes`, `ds.phase`) and marks `op` for erasure.
dsrt::KernelOp emitKernelCall(Operation *op, const KernelCall &call,
                              LoweringState &state);
/// The default call of `op`, emitted as it is.
LogicalResult lowerToKernel(Operation *op, LoweringState &state,
                            bool hostResults = false);

/// The op families, in the order the walk tries them; every ds op matches
/// the last one (the default kernel call).
void populateValueLowerings(OpLowerings &lowerings);      // Values.cpp
void populateCollectiveLowerings(OpLowerings &lowerings); // Collectives.cpp
void populateKernelLowerings(OpLowerings &lowerings);     // Kernels.cpp

/// @forward's arguments: parameter storage and input buffers, at the start
/// of its body (Signature.cpp).
void lowerArguments(LoweringState &state);
/// func.return: graph outputs and in-place parameter updates
/// (Signature.cpp).
LogicalResult lowerReturn(func::ReturnOp ret, LoweringState &state);

} // namespace mlir::ds::lowering

#endif // DS_CONVERSION_DSTODSRT_LOWERING_H
