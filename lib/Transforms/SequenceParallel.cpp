//===- SequenceParallel.cpp - Megatron sequence parallelism ---------------===//
//
// Part of the ds project.
//
// After the tensor-parallel split, every group sum becomes a reduce-scatter
// over its token dimension and the ops after it that work row by row run
// on the rank's rows; a block's input gathers them back. Which ops pass
// the rows through is each op's split-axis rule (SplitAxisOpInterface).
//
//===----------------------------------------------------------------------===//

#include "TensorParallelUtils.h"

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::ds {
#define GEN_PASS_DEF_SEQUENCEPARALLELPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

int64_t rankOf(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }

int64_t dim(Value v, int64_t d) {
  return cast<RankedTensorType>(v.getType()).getDimSize(d);
}

bool isConstant(Value v) {
  Operation *d = v.getDefiningOp();
  return d && d->hasTrait<OpTrait::ConstantLike>();
}

/// How a row-by-row op reads an operand that is not split: split the same
/// way, broadcast along the rows (whole on every rank; a float one's
/// gradient summed over the group), or replicated at full size (this
/// rank's rows of it).
enum class RowUse { Split, Summed, Rows };
using RowPlan = SmallVector<std::pair<OpOperand *, RowUse>>;

/// Walks the forward in order, keeping `axis`: each split value's split
/// dimension (values are retyped at the end).
class SequenceSplitter {
public:
  SequenceSplitter(func::FuncOp func, int64_t size)
      : func(func), size(size), b(func.getContext()) {}

  LogicalResult run();

private:
  // Seeds: the group sums.
  int64_t seedAxis(Value v);
  bool seed(TpAllReduceOp ar);
  // Propagation.
  void visit(Operation *op);
  int64_t rowAxis(Operation *op, ArrayRef<unsigned> splitOperands);
  LogicalResult planOperands(Operation *op, int64_t ra, RowPlan &plan);
  void applyPlan(Operation *op, int64_t ra, const RowPlan &plan);
  // What a reader gets instead of a split value or a whole one.
  Value whole(Value v);
  Value summed(Value v, Operation *user);
  Value rowsOf(Value v, int64_t a, Operation *user);
  // Bookkeeping at the end.
  LogicalResult retype();

  func::FuncOp func;
  int64_t size;
  OpBuilder b;
  llvm::MapVector<Value, int64_t> axis;
  llvm::DenseMap<Value, Value> gathered, identity;
  llvm::DenseMap<std::pair<Value, int64_t>, Value> sliced;
  int64_t seeds = 0;
  SmallVector<int64_t> unsplit; // group sums' token counts T divides not
};

/// The whole value of a split one, for a reader that needs it all.
Value SequenceSplitter::whole(Value v) {
  auto [it, fresh] = gathered.try_emplace(v, Value());
  if (fresh) {
    b.setInsertionPointAfterValue(v);
    it->second = SpAllGatherOp::create(
        b, v.getLoc(), v.getType(), v, b.getI64IntegerAttr(axis.lookup(v)),
        b.getI64IntegerAttr(1), b.getBoolAttr(false));
  }
  return it->second;
}

/// A broadcast operand: its gradient sums over the rows of every rank.
/// Placed before its first reader (ops are visited in order), so that a
/// parameter's copy is not live across the layers before it (a pipeline
/// cut would count it as a crossing activation).
Value SequenceSplitter::summed(Value v, Operation *user) {
  if (isConstant(v))
    return v;
  auto [it, fresh] = identity.try_emplace(v, Value());
  if (fresh) {
    b.setInsertionPoint(user);
    it->second = TpIdentityOp::create(b, v.getLoc(), v.getType(), v,
                                      b.getI64IntegerAttr(1));
  }
  return it->second;
}

/// A replicated full-size operand: this rank's rows of it, before its
/// first reader (as for `summed`).
Value SequenceSplitter::rowsOf(Value v, int64_t a, Operation *user) {
  auto [it, fresh] = sliced.try_emplace({v, a}, Value());
  if (fresh) {
    b.setInsertionPoint(user);
    it->second =
        SpSliceOp::create(b, v.getLoc(), v.getType(), v,
                          b.getI64IntegerAttr(a), b.getI64IntegerAttr(1));
    axis[it->second] = a;
  }
  return it->second;
}

/// The split dimension of a group sum: the tokens just before the
/// features (the sequence of a [b, s, h] activation), else the leading
/// one; -1 when T divides neither.
int64_t SequenceSplitter::seedAxis(Value v) {
  int64_t r = rankOf(v);
  if (r >= 2 && dim(v, r - 2) % size == 0)
    return r - 2;
  if (r >= 1 && dim(v, 0) % size == 0)
    return 0;
  if (r >= 2)
    unsplit.push_back(dim(v, r - 2));
  return -1;
}

/// A group sum becomes a reduce-scatter of the rows; false when T divides
/// none of its dimensions (it stays a sum).
bool SequenceSplitter::seed(TpAllReduceOp ar) {
  int64_t a = seedAxis(ar.getResult());
  if (a < 0)
    return false;
  b.setInsertionPoint(ar);
  auto rs = SpReduceScatterOp::create(b, ar.getLoc(), ar.getType(),
                                      ar.getInput(), b.getI64IntegerAttr(a),
                                      ar.getGroupAttr());
  ar.getResult().replaceAllUsesWith(rs.getResult());
  ar.erase();
  axis[rs.getResult()] = a;
  ++seeds;
  return true;
}

/// Whether `op` works row by row along its split operands' dimension:
/// the result's split axis by the op's split-axis rule, or -1. A matmul
/// passes its left operand's rows (its weight is whole: its gradient sums
/// over the rows); a layer norm passes its input's.
int64_t SequenceSplitter::rowAxis(Operation *op,
                                  ArrayRef<unsigned> splitOperands) {
  Value first = op->getOperand(splitOperands.front());
  int64_t a = axis.lookup(first);
  Value res = op->getNumResults() == 1 ? op->getResult(0) : Value();
  auto resType =
      res ? dyn_cast<RankedTensorType>(res.getType()) : RankedTensorType();
  auto rule = dyn_cast<SplitAxisOpInterface>(op);
  bool weightRule =
      !isa<MatMulOp>(op) ||
      (splitOperands.size() == 1 && splitOperands.front() == 0 &&
       rankOf(op->getOperand(1)) == 2);
  // (Only float results are kept split: the collectives move floats.)
  if (!resType || !isa<FloatType>(resType.getElementType()) || !rule ||
      !weightRule || isa<GemmOp>(op))
    return -1;
  int64_t ra = rule.getResultSplitAxis(splitOperands.front(), a);
  if (ra >= 0 &&
      (ra >= resType.getRank() || resType.getDimSize(ra) % size != 0 ||
       resType.getDimSize(ra) != dim(first, a)))
    return -1;
  return ra;
}

/// How `op` reads each operand when its result is split along `ra`;
/// decided for all before any is rewritten. Fails when an operand cannot
/// follow.
LogicalResult SequenceSplitter::planOperands(Operation *op, int64_t ra,
                                             RowPlan &plan) {
  auto rule = cast<SplitAxisOpInterface>(op);
  auto resType = cast<RankedTensorType>(op->getResult(0).getType());
  int64_t R = resType.getRank(), n = resType.getDimSize(ra);
  for (OpOperand &o : op->getOpOperands()) {
    Value v = o.get();
    auto vt = dyn_cast<RankedTensorType>(v.getType());
    if (!vt)
      continue;
    bool isFloat = isa<FloatType>(vt.getElementType());
    int64_t ao = ra - (R - vt.getRank()); // aligned (broadcasting)
    if (axis.count(v)) {
      // Every split operand carries its rows to the same result axis.
      if (rule.getResultSplitAxis(o.getOperandNumber(), axis.lookup(v)) != ra)
        return failure();
      plan.push_back({&o, RowUse::Split});
    } else if (isa<MatMulOp>(op) || ao < 0 || vt.getDimSize(ao) == 1) {
      plan.push_back({&o, RowUse::Summed});
    } else if (vt.getDimSize(ao) == n && isFloat) {
      plan.push_back({&o, RowUse::Rows});
    } else {
      return failure();
    }
  }
  return success();
}

void SequenceSplitter::applyPlan(Operation *op, int64_t ra,
                                 const RowPlan &plan) {
  int64_t R = rankOf(op->getResult(0));
  for (auto &[o, use] : plan) {
    Value v = o->get();
    bool isFloat =
        isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
    if (use == RowUse::Summed && isFloat)
      o->set(summed(v, op));
    else if (use == RowUse::Rows)
      o->set(rowsOf(v, ra - (R - rankOf(v)), op));
  }
}

void SequenceSplitter::visit(Operation *op) {
  if (auto ar = dyn_cast<TpAllReduceOp>(op); ar && seed(ar))
    return;
  SmallVector<unsigned> splitOperands;
  for (OpOperand &o : op->getOpOperands())
    if (axis.count(o.get()))
      splitOperands.push_back(o.getOperandNumber());
  if (splitOperands.empty())
    return;
  // A block's input f: gathered, its gradient reduce-scattered.
  if (auto f = dyn_cast<TpIdentityOp>(op)) {
    int64_t a = axis.lookup(op->getOperand(splitOperands.front()));
    b.setInsertionPoint(f);
    auto g = SpAllGatherOp::create(b, f.getLoc(), f.getType(), f.getInput(),
                                   b.getI64IntegerAttr(a), f.getGroupAttr(),
                                   b.getBoolAttr(true));
    f.getResult().replaceAllUsesWith(g.getResult());
    f.erase();
    return;
  }
  int64_t ra = rowAxis(op, splitOperands);
  RowPlan plan;
  if (ra >= 0 && succeeded(planOperands(op, ra, plan))) {
    applyPlan(op, ra, plan);
    axis[op->getResult(0)] = ra;
    return;
  }
  // Any other reader: the whole value.
  for (unsigned i : splitOperands)
    op->setOperand(i, whole(op->getOperand(i)));
}

/// Every split value narrowed to its rows; errors when no group sum could
/// be split, or T does not divide a split dimension.
LogicalResult SequenceSplitter::retype() {
  if (seeds == 0) {
    InFlightDiagnostic d =
        func.emitError("--sequence-parallel: --tensor-parallel=")
        << size << " divides the token dimension of no block output";
    if (!unsplit.empty())
      d << " (" << unsplit.front()
        << " tokens); give a batch or sequence length it divides";
    return d;
  }
  for (auto &[v, a] : axis) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getDimSize(a) % size != 0)
      return (v.getDefiningOp() ? v.getDefiningOp()->emitError()
                                : func.emitError())
             << "--sequence-parallel: --tensor-parallel=" << size
             << " does not divide dimension " << a << " (" << t.getDimSize(a)
             << ")";
    v.setType(withDim(t, a, t.getDimSize(a) / size));
  }
  return success();
}

LogicalResult SequenceSplitter::run() {
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front())
    ops.push_back(&op);
  for (Operation *op : ops)
    visit(op);
  if (failed(retype()))
    return failure();
  func->setAttr("ds.sequence_parallel", b.getUnitAttr());
  return success();
}

struct SequenceParallelPass
    : impl::SequenceParallelPassBase<SequenceParallelPass> {
  using SequenceParallelPassBase::SequenceParallelPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward" || size <= 1)
      return;
    if (failed(splitSequence(func, size)))
      signalPassFailure();
  }
};

} // namespace

LogicalResult splitSequence(func::FuncOp func, int64_t size) {
  return SequenceSplitter(func, size).run();
}

} // namespace mlir::ds
