//===- DsSplitAxis.cpp - how a split axis passes through ds ops -----------===//
//
// Part of the ds project.
//
// SplitAxisOpInterface for the ops a tensor- or sequence-parallel split can
// pass through: elementwise ops (with broadcasting), normalizations and
// reductions over other axes, layout ops, matmuls along their batch and
// free dimensions. An op without the interface stops a split.
//
//===----------------------------------------------------------------------===//

#include "ds/Dialect/Ds/IR/DsOps.h"

namespace mlir::ds {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool inRange(int64_t axis, RankedTensorType t) {
  return axis >= 0 && axis < t.getRank();
}

/// Elementwise with numpy broadcasting: the right-aligned result axis,
/// unless the operand is broadcast along it.
int64_t aligned(Operation *op, unsigned operand, int64_t axis) {
  auto in = typeOf(op->getOperand(operand));
  auto out = typeOf(op->getResult(0));
  int64_t r = axis + out.getRank() - in.getRank();
  if (!inRange(axis, in) || r < 0 || in.getDimSize(axis) != out.getDimSize(r))
    return -1;
  return r;
}

template <typename OpTy>
struct Elementwise
    : SplitAxisOpInterface::ExternalModel<Elementwise<OpTy>, OpTy> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    return aligned(op, operand, axis);
  }
};

/// Along any axis but the normalized (softmax) or reduced ones.
template <typename OpTy>
struct Softmax : SplitAxisOpInterface::ExternalModel<Softmax<OpTy>, OpTy> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto s = cast<OpTy>(op);
    return static_cast<int64_t>(s.getAxis()) == axis ? -1 : axis;
  }
};

struct LayerNorm : SplitAxisOpInterface::ExternalModel<LayerNorm, LayerNormOp> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto ln = cast<LayerNormOp>(op);
    return operand == 0 && axis >= 0 && axis < static_cast<int64_t>(ln.getAxis())
               ? axis
               : -1;
  }
};

template <typename OpTy>
struct Reduce : SplitAxisOpInterface::ExternalModel<Reduce<OpTy>, OpTy> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto r = cast<OpTy>(op);
    ArrayRef<int64_t> axes = r.getAxes();
    if (!inRange(axis, typeOf(r.getInput())) || llvm::is_contained(axes, axis))
      return -1;
    if (r.getKeepdims())
      return axis;
    return axis - llvm::count_if(axes, [&](int64_t a) { return a < axis; });
  }
};

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

/// The axis keeps its blocks: kept as is, split into (blocks, rest) with
/// the blocks first (features into heads x head size), or merged with the
/// axis after it (heads x head size into features).
struct Reshape : SplitAxisOpInterface::ExternalModel<Reshape, ReshapeOp> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t a) const {
    auto r = cast<ReshapeOp>(op);
    ArrayRef<int64_t> in = r.getInput().getType().getShape();
    ArrayRef<int64_t> out = r.getType().getShape();
    if (a < 0 || a >= static_cast<int64_t>(in.size()))
      return -1;
    int64_t before = product(in.take_front(a));
    for (int64_t b = 0; b < static_cast<int64_t>(out.size()); ++b) {
      if (product(out.take_front(b)) != before)
        continue;
      if (out[b] == in[a] &&
          product(out.drop_front(b + 1)) == product(in.drop_front(a + 1)))
        return b;
      if (b + 1 < static_cast<int64_t>(out.size()) &&
          out[b] * out[b + 1] == in[a] &&
          product(out.drop_front(b + 2)) == product(in.drop_front(a + 1)))
        return b;
      if (a + 1 < static_cast<int64_t>(in.size()) &&
          out[b] == in[a] * in[a + 1] &&
          product(out.drop_front(b + 1)) == product(in.drop_front(a + 2)))
        return b;
    }
    return -1;
  }
};

struct Transpose : SplitAxisOpInterface::ExternalModel<Transpose, TransposeOp> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    ArrayRef<int64_t> perm = cast<TransposeOp>(op).getPerm();
    for (int64_t i = 0; i < static_cast<int64_t>(perm.size()); ++i)
      if (perm[i] == axis)
        return i;
    return -1;
  }
};

/// Batch dimensions (broadcast like elementwise), the left operand's rows
/// and the right operand's columns; not the contracted dimension (a split
/// there gives partial sums, not blocks of the result).
struct MatMul : SplitAxisOpInterface::ExternalModel<MatMul, MatMulOp> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto in = typeOf(op->getOperand(operand));
    int64_t rank = in.getRank();
    if (!inRange(axis, in) || rank < 2)
      return -1;
    if ((operand == 0 && axis == rank - 1) || (operand == 1 && axis == rank - 2))
      return -1;
    int64_t R = typeOf(op->getResult(0)).getRank();
    return axis + R - rank;
  }
};

/// A Gemm's rows of A (without trans_a) and columns of B.
struct Gemm : SplitAxisOpInterface::ExternalModel<Gemm, GemmOp> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto g = cast<GemmOp>(op);
    if (operand == 0)
      return axis == (g.getTransA() ? 1 : 0) ? 0 : -1;
    if (operand == 1)
      return axis == (g.getTransB() ? 0 : 1) ? 1 : -1;
    return -1;
  }
};

/// A slice that keeps the axis whole.
struct Slice : SplitAxisOpInterface::ExternalModel<Slice, SliceOp> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto s = cast<SliceOp>(op);
    auto in = s.getInput().getType();
    if (!inRange(axis, in) || s.getStarts()[axis] != 0 ||
        s.getSteps()[axis] != 1 ||
        s.getType().getDimSize(axis) != in.getDimSize(axis))
      return -1;
    return axis;
  }
};

/// Joined or split along another axis.
template <typename OpTy>
struct AlongOther
    : SplitAxisOpInterface::ExternalModel<AlongOther<OpTy>, OpTy> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto t = typeOf(op->getOperand(operand));
    return inRange(axis, t) &&
                   static_cast<int64_t>(cast<OpTy>(op).getAxis()) != axis
               ? axis
               : -1;
  }
};

/// The last two dimensions are the matrix the triangle is taken of.
struct Trilu : SplitAxisOpInterface::ExternalModel<Trilu, TriluOp> {
  int64_t getResultSplitAxis(Operation *op, unsigned operand,
                             int64_t axis) const {
    auto t = typeOf(op->getOperand(0));
    return operand == 0 && axis >= 0 && axis < t.getRank() - 2 ? axis : -1;
  }
};

template <typename... OpTys>
void attachElementwise(MLIRContext &ctx) {
  (OpTys::template attachInterface<Elementwise<OpTys>>(ctx), ...);
}

} // namespace

void detail::attachSplitAxisModels(MLIRContext &ctx) {
  attachElementwise<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqualOp,
                    LessOp, LessOrEqualOp, GreaterOp, GreaterOrEqualOp, AndOp,
                    OrOp, XorOp, NegOp, AbsOp, ExpOp, LogOp, SqrtOp,
                    ReciprocalOp, ErfOp, TanhOp, ReluOp, SigmoidOp, NotOp,
                    CastOp, WhereOp, ExpandOp, ActivationOp,
                    ActivationGradOp>(ctx);
  SoftmaxOp::attachInterface<Softmax<SoftmaxOp>>(ctx);
  LogSoftmaxOp::attachInterface<Softmax<LogSoftmaxOp>>(ctx);
  LayerNormOp::attachInterface<LayerNorm>(ctx);
  ReduceSumOp::attachInterface<Reduce<ReduceSumOp>>(ctx);
  ReduceMeanOp::attachInterface<Reduce<ReduceMeanOp>>(ctx);
  ReduceMaxOp::attachInterface<Reduce<ReduceMaxOp>>(ctx);
  ReshapeOp::attachInterface<Reshape>(ctx);
  TransposeOp::attachInterface<Transpose>(ctx);
  MatMulOp::attachInterface<MatMul>(ctx);
  GemmOp::attachInterface<Gemm>(ctx);
  SliceOp::attachInterface<Slice>(ctx);
  ConcatOp::attachInterface<AlongOther<ConcatOp>>(ctx);
  SplitOp::attachInterface<AlongOther<SplitOp>>(ctx);
  TriluOp::attachInterface<Trilu>(ctx);
}

} // namespace mlir::ds
