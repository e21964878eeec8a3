//===- TensorParallel.cpp - Megatron MLP and attention splitting ----------===//
//
// Part of the ds project.
//
// Each MLP block (matmul by a weight, elementwise activation, matmul by a
// weight contracting over the activation's width) and each attention block
// (projections by heads, the per-head ops, the output projection) is split
// over the tensor-parallel group: the first weights by columns (heads),
// the second by rows, with `ds.tp_identity` on the block's input and
// `ds.tp_all_reduce` on its partial output. The patterns are found on the
// IR, not by names. The vocabulary (VocabParallel.cpp) and sequence
// (SequenceParallel.cpp) splits run after it when its options ask.
//
//===----------------------------------------------------------------------===//

#include "TensorParallelUtils.h"

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::ds {
#define GEN_PASS_DEF_TENSORPARALLELPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

/// An op that computes each element from the same element of its operands
/// (the Ds_Elementwise trait: arithmetic, ds.activation, comparisons,
/// casts, selects), so that it runs on each rank's slice of the width as
/// it is. Collectives carry the trait too (they combine the same element
/// over ranks) but are not local.
bool isElementwise(Operation *op) {
  return op->hasTrait<DsElementwise>() && !isa<CollectiveOpInterface>(op) &&
         !isa<TpIdentityOp>(op);
}

/// A weight operand of a matmul: a trainable parameter argument used
/// directly ([K, N]) or through a 2-D transpose of a parameter ([N, K], as
/// torch.nn.Linear exports), and nothing else uses it.
struct Weight {
  BlockArgument param;
  TransposeOp transpose; // null when used directly
  bool transB = false;   // a Gemm's trans_b: the parameter is [N, K]
  /// The parameter axis that holds the matmul's N (columns) or K (rows).
  int64_t axisOf(bool columns) const {
    return transpose || transB ? (columns ? 0 : 1) : (columns ? 1 : 0);
  }
};

/// A linear layer: a matmul, or a Gemm (alpha 1, no trans_a) whose C is a
/// bias parameter or absent, by a weight parameter.
struct Linear {
  Operation *op = nullptr;
  Weight w;
  std::optional<BlockArgument> bias; // a Gemm's C
  Value input() const { return op->getOperand(0); }
  Value result() const { return op->getResult(0); }
};

std::optional<Weight> weightOf(func::FuncOp func, Value v,
                               bool transB = false) {
  Weight w;
  w.transB = transB;
  if (auto t = v.getDefiningOp<TransposeOp>(); t && !transB) {
    ArrayRef<int64_t> perm = t.getPerm();
    if (perm.size() != 2 || perm[0] != 1 || perm[1] != 0 || !t->hasOneUse())
      return std::nullopt;
    w.transpose = t;
    v = t.getInput();
  }
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || !isTrainableParam(func, arg) ||
      cast<RankedTensorType>(arg.getType()).getRank() != 2 || !arg.hasOneUse())
    return std::nullopt;
  w.param = arg;
  return w;
}

std::optional<BlockArgument> biasOf(func::FuncOp func, Value v, int64_t n) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || !isTrainableParam(func, arg) || !arg.hasOneUse())
    return std::nullopt;
  auto t = cast<RankedTensorType>(arg.getType());
  if (t.getRank() != 1 || t.getDimSize(0) != n)
    return std::nullopt;
  return arg;
}

std::optional<Linear> linearOf(func::FuncOp func, Operation *op) {
  Linear l;
  l.op = op;
  if (auto m = dyn_cast<MatMulOp>(op)) {
    auto w = weightOf(func, m.getRhs());
    if (!w)
      return std::nullopt;
    l.w = *w;
    return l;
  }
  auto g = dyn_cast<GemmOp>(op);
  if (!g || g.getTransA() || g.getAlpha().convertToFloat() != 1.0f ||
      g.getBeta().convertToFloat() != 1.0f)
    return std::nullopt;
  auto w = weightOf(func, g.getB(), g.getTransB());
  if (!w)
    return std::nullopt;
  l.w = *w;
  if (Value c = g.getC()) {
    auto n = cast<RankedTensorType>(g.getType()).getShape().back();
    l.bias = biasOf(func, c, n);
    if (!l.bias)
      return std::nullopt;
  }
  return l;
}

/// A linear layer split by columns (heads): its own bias (a Gemm's C), or
/// a bias parameter added to its result.
struct ColumnLinear {
  Linear l;
  std::optional<BlockArgument> b1;
  AddOp bias1;
  int64_t width = 0;
  /// What the block reads: the bias add's result, else the layer's.
  Value out() { return bias1 ? bias1.getResult() : l.result(); }
};

/// The linear layers by a weight that read `a`'s input, `a` first (a
/// gated MLP's gate and up, separate Q, K and V), each with its bias add;
/// `sameType`: only those of `a`'s result type. Empty when `a` is not a
/// linear layer or one is not at least 2-D.
SmallVector<ColumnLinear> columnLinears(func::FuncOp func, Operation *a,
                                        bool sameType) {
  auto first = linearOf(func, a);
  if (!first)
    return {};
  SmallVector<Linear> linears{*first};
  Type type = first->result().getType();
  for (Operation *user : first->input().getUsers())
    if (user != a && isa<MatMulOp, GemmOp>(user) &&
        user->getOperand(0) == first->input() &&
        (!sameType || user->getResult(0).getType() == type))
      if (auto l = linearOf(func, user))
        linears.push_back(*l);
  SmallVector<ColumnLinear> out;
  for (Linear &l : linears) {
    ColumnLinear c;
    c.l = l;
    auto t = cast<RankedTensorType>(l.result().getType());
    if (t.getRank() < 2)
      return {};
    c.width = t.getShape().back();
    Value v = l.result();
    if (!l.bias && v.hasOneUse())
      if (auto add = dyn_cast<AddOp>(*v.getUsers().begin()))
        for (Value other : add->getOperands())
          if (other != v)
            if (auto b = biasOf(func, other, c.width); b && add.getType() == t) {
              c.b1 = b;
              c.bias1 = add;
            }
    out.push_back(c);
  }
  return out;
}

struct MlpBlock {
  /// The first linear layers: one, or several of one input whose results
  /// the activation combines (a gated MLP: silu(gate(x)) * up(x)).
  SmallVector<ColumnLinear> ups;
  Linear second;
  llvm::SetVector<Operation *> region; // elementwise ops between them
  int64_t width = 0;                   // H

  SmallVector<Operation *> linearOps() const {
    SmallVector<Operation *> out{second.op};
    for (const ColumnLinear &up : ups)
      out.push_back(up.l.op);
    return out;
  }
};

/// An attention block: a projection (fused Q/K/V: its result split into
/// `blocks` equal parts; or one projection) whose result is reshaped into
/// heads, the per-head ops, and the output projection contracting over the
/// merged heads. `axis` is each region value's axis that holds the heads
/// (or the features that are heads x head size).
struct AttentionBlock {
  /// The projections: one fused Q/K/V, or separate ones of one input.
  SmallVector<ColumnLinear> projs;
  Linear out;
  int64_t blocks = 1, heads = 0;
  llvm::MapVector<Value, int64_t> axis; // region values (results of ops)
  llvm::SetVector<Operation *> ops;

  SmallVector<Operation *> linearOps() const {
    SmallVector<Operation *> out{this->out.op};
    for (const ColumnLinear &p : projs)
      out.push_back(p.l.op);
    return out;
  }
};

//===----------------------------------------------------------------------===//
// Matching
//===----------------------------------------------------------------------===//

/// An MLP block from its first linear layer `a`.
std::optional<MlpBlock> matchMlp(func::FuncOp func, Operation *a) {
  MlpBlock blk;
  // This linear layer and the others of the same input and width.
  blk.ups = columnLinears(func, a, /*sameType=*/true);
  if (blk.ups.empty())
    return std::nullopt;
  auto outType = cast<RankedTensorType>(blk.ups.front().l.result().getType());
  blk.width = blk.ups.front().width;
  SmallVector<Value> work;
  llvm::DenseSet<Value> inRegion;
  for (ColumnLinear &up : blk.ups) {
    work.push_back(up.out());
    inRegion.insert(up.out());
  }
  // The activation: elementwise ops of the block's shape until one
  // linear layer that contracts over the width.
  Operation *exit = nullptr;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    for (Operation *user : x.getUsers()) {
      if (blk.region.contains(user) || user == exit)
        continue;
      if (isa<MatMulOp, GemmOp>(user) && user->getOperand(0) == x) {
        if (exit && exit != user)
          return std::nullopt; // two exits
        exit = user;
        continue;
      }
      if (!isElementwise(user) || user->getNumResults() != 1 ||
          user->getResult(0).getType() !=
              outType.clone(cast<RankedTensorType>(user->getResult(0).getType())
                                .getElementType()))
        return std::nullopt;
      blk.region.insert(user);
      Value r = user->getResult(0);
      if (inRegion.insert(r).second)
        work.push_back(r);
    }
  }
  if (!exit)
    return std::nullopt;
  // Other operands of the activation: region values, or broadcasts
  // without the width (scalars, constants).
  for (Operation *op : blk.region)
    for (Value o : op->getOperands()) {
      if (inRegion.contains(o))
        continue;
      auto t = dyn_cast<RankedTensorType>(o.getType());
      if (!t || (t.getRank() > 0 && t.getShape().back() != 1))
        return std::nullopt;
    }
  auto second = linearOf(func, exit);
  if (!second)
    return std::nullopt;
  blk.second = *second;
  auto wType = cast<RankedTensorType>(second->w.param.getType());
  if (wType.getDimSize(second->w.axisOf(/*columns=*/false)) != blk.width)
    return std::nullopt;
  return blk;
}

/// The projections' results enter the region along their features; a
/// fused projection's split into equal parts too.
LogicalResult seedProjections(AttentionBlock &blk) {
  for (ColumnLinear &p : blk.projs) {
    Value v = p.out();
    int64_t last = cast<RankedTensorType>(v.getType()).getRank() - 1;
    blk.axis[v] = last;
    if (blk.projs.size() != 1 || !v.hasOneUse())
      continue;
    auto split = dyn_cast<SplitOp>(*v.getUsers().begin());
    if (!split || static_cast<int64_t>(split.getAxis()) != last ||
        split.getNumResults() <= 1)
      continue;
    for (Value r : split.getResults())
      if (r.getType() != split.getResult(0).getType())
        return failure();
    blk.blocks = split.getNumResults();
    blk.ops.insert(split);
    for (Value r : split.getResults())
      blk.axis[r] = last;
  }
  return success();
}

/// The heads of a reshape that splits the features `x` carries on `ax`
/// into heads x head size at `newAxis`; 0 when it does not.
int64_t headsOfReshape(ReshapeOp r, Value x, int64_t ax, int64_t newAxis) {
  ArrayRef<int64_t> out = r.getType().getShape();
  int64_t in = cast<RankedTensorType>(x.getType()).getDimSize(ax);
  bool splits = newAxis + 1 < static_cast<int64_t>(out.size()) &&
                out[newAxis] != in && out[newAxis] * out[newAxis + 1] == in;
  return splits ? out[newAxis] : 0;
}

/// Follows the heads from the projections through each reader's
/// split-axis rule until the output projection, which contracts over the
/// merged heads; returns it.
FailureOr<Operation *> followHeads(AttentionBlock &blk) {
  Operation *exit = nullptr;
  SmallVector<Value> work;
  for (auto &[val, ax] : blk.axis)
    work.push_back(val);
  while (!work.empty()) {
    Value x = work.pop_back_val();
    int64_t ax = blk.axis.lookup(x);
    int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
    for (OpOperand &use : x.getUses()) {
      Operation *user = use.getOwner();
      if (blk.ops.contains(user) || user == exit)
        continue;
      if (isa<MatMulOp, GemmOp>(user) && user->getOperand(0) == x &&
          ax == rank - 1) {
        if (exit && exit != user)
          return failure();
        exit = user;
        continue;
      }
      auto rule = dyn_cast<SplitAxisOpInterface>(user);
      if (!rule || isa<GemmOp>(user))
        return failure();
      int64_t newAxis = rule.getResultSplitAxis(use.getOperandNumber(), ax);
      if (auto r = dyn_cast<ReshapeOp>(user); r && newAxis >= 0) {
        // Features split into heads x head size: the heads carry it.
        if (int64_t heads = headsOfReshape(r, x, ax, newAxis)) {
          if (blk.heads && blk.heads != heads)
            return failure();
          blk.heads = heads;
        }
      } else if (auto m = dyn_cast<MatMulOp>(user)) {
        // Per head: both operands carry the heads on the same batch axis.
        Value other = m.getLhs() == x ? m.getRhs() : m.getLhs();
        if (ax >= rank - 2 ||
            (blk.axis.count(other) && blk.axis.lookup(other) != ax))
          return failure();
      }
      if (newAxis < 0 || user->getNumResults() != 1)
        return failure();
      blk.ops.insert(user);
      Value r = user->getResult(0);
      if (!blk.axis.count(r)) {
        blk.axis[r] = newAxis;
        work.push_back(r);
      } else if (blk.axis.lookup(r) != newAxis) {
        return failure();
      }
    }
  }
  if (!exit || !blk.heads)
    return failure();
  return exit;
}

/// Every operand of a region op: in the region (with the op's axis), or
/// broadcast along it.
bool regionOperandsFit(const AttentionBlock &blk) {
  auto inRegion = [&](Value x) { return blk.axis.count(x) != 0; };
  for (Operation *op : blk.ops) {
    if (isa<SplitOp>(op))
      continue;
    Value res = op->getResult(0);
    int64_t ax = blk.axis.lookup(res);
    int64_t rank = cast<RankedTensorType>(res.getType()).getRank();
    if (isa<MatMulOp, ConcatOp>(op) &&
        llvm::any_of(op->getOperands(), [&](Value o) {
          return !inRegion(o) || blk.axis.lookup(o) != ax;
        }))
      return false;
    for (Value o : op->getOperands()) {
      if (inRegion(o) || isa<TransposeOp, ReshapeOp>(op))
        continue;
      if (isa<MatMulOp, ConcatOp>(op))
        return false;
      auto t = dyn_cast<RankedTensorType>(o.getType());
      if (!t)
        return false;
      int64_t aligned = ax - (rank - t.getRank());
      if (aligned >= 0 && t.getDimSize(aligned) != 1)
        return false;
    }
  }
  return true;
}

/// An attention block from its (first) projection `a`.
std::optional<AttentionBlock> matchAttention(func::FuncOp func, Operation *a) {
  AttentionBlock blk;
  // The projections: this one, and the other linear layers by a weight
  // that read the same input (separate Q, K and V).
  blk.projs = columnLinears(func, a, /*sameType=*/false);
  if (blk.projs.empty() || failed(seedProjections(blk)))
    return std::nullopt;
  FailureOr<Operation *> exit = followHeads(blk);
  if (failed(exit) || !regionOperandsFit(blk))
    return std::nullopt;
  auto out = linearOf(func, *exit);
  if (!out)
    return std::nullopt;
  blk.out = *out;
  return blk;
}

/// The blocks of `func`, MLPs first; a linear layer belongs to one block.
void findBlocks(func::FuncOp func, SmallVectorImpl<MlpBlock> &mlps,
                SmallVectorImpl<AttentionBlock> &attention) {
  SmallVector<Operation *> linears;
  for (Operation &op : func.getBody().front())
    if (isa<MatMulOp, GemmOp>(op))
      linears.push_back(&op);
  llvm::DenseSet<Operation *> used;
  auto take = [&](auto match, auto &out) {
    for (Operation *a : linears) {
      if (used.count(a))
        continue;
      auto blk = match(func, a);
      if (!blk)
        continue;
      for (Operation *op : blk->linearOps())
        used.insert(op);
      out.push_back(std::move(*blk));
    }
  };
  take(matchMlp, mlps);
  take(matchAttention, attention);
}

//===----------------------------------------------------------------------===//
// Rewriting
//===----------------------------------------------------------------------===//

/// Splits the matched blocks' parameters and retypes their values.
class BlockSplitter {
public:
  BlockSplitter(func::FuncOp func, int64_t size)
      : func(func), size(size), b(func.getContext()) {}

  LogicalResult splitMlp(MlpBlock &blk);
  LogicalResult splitAttention(AttentionBlock &blk);

private:
  void splitArg(BlockArgument arg, int64_t axis, int64_t blocks);
  void splitColumns(MutableArrayRef<ColumnLinear> cols, int64_t blocks);
  void rowSplit(Linear &l, int64_t k);

  func::FuncOp func;
  int64_t size;
  OpBuilder b;
};

/// A parameter split along `axis` (in `blocks` blocks).
void BlockSplitter::splitArg(BlockArgument arg, int64_t axis, int64_t blocks) {
  auto t = cast<RankedTensorType>(arg.getType());
  arg.setType(withDim(t, axis, t.getDimSize(axis) / size));
  SmallVector<int64_t> attr{axis, size};
  if (blocks > 1)
    attr.push_back(blocks);
  func.setArgAttr(arg.getArgNumber(), kTpSplit, b.getDenseI64ArrayAttr(attr));
}

/// The first layers of a block: their shared input marked (its gradient
/// sums over the group; a graph input needs none), then each weight and
/// bias split by columns and the results narrowed.
void BlockSplitter::splitColumns(MutableArrayRef<ColumnLinear> cols,
                                 int64_t blocks) {
  Operation *a = cols.front().l.op;
  for (ColumnLinear &c : cols)
    if (c.l.op->isBeforeInBlock(a))
      a = c.l.op;
  Value f = markGroupInput(b, func, cols.front().l.input(), a);
  for (ColumnLinear &c : cols)
    c.l.op->setOperand(0, f);
  for (ColumnLinear &c : cols) {
    int64_t part = c.width / size;
    splitArg(c.l.w.param, c.l.w.axisOf(/*columns=*/true), blocks);
    if (c.l.w.transpose)
      c.l.w.transpose.getResult().setType(
          withDim(c.l.w.transpose.getType(), 1, part));
    if (c.l.bias)
      splitArg(*c.l.bias, 0, blocks);
    if (c.b1)
      splitArg(*c.b1, 0, blocks);
    int64_t last =
        cast<RankedTensorType>(c.l.result().getType()).getRank() - 1;
    c.l.result().setType(withDim(c.l.result().getType(), last, part));
    if (c.bias1)
      c.bias1.getResult().setType(withDim(c.bias1.getType(), last, part));
  }
}

/// A linear layer that contracts over split features: its weight by rows;
/// its partial sums summed over the group, and its own bias added once,
/// after the sum. `k` is the (already split) contracted width.
void BlockSplitter::rowSplit(Linear &l, int64_t k) {
  Operation *c = l.op;
  auto arg = l.w.param;
  int64_t axis = l.w.axisOf(/*columns=*/false);
  auto t = cast<RankedTensorType>(arg.getType());
  arg.setType(withDim(t, axis, t.getDimSize(axis) / size));
  func.setArgAttr(arg.getArgNumber(), kTpSplit,
                  b.getDenseI64ArrayAttr({axis, size}));
  if (l.w.transpose)
    l.w.transpose.getResult().setType(withDim(l.w.transpose.getType(), 0, k));
  if (auto g = dyn_cast<GemmOp>(c); g && l.bias) {
    b.setInsertionPoint(g);
    auto noBias = GemmOp::create(b, g.getLoc(), g.getType(), g.getA(),
                                 g.getB(), Value(), g.getAlphaAttr(),
                                 g.getBetaAttr(), g.getTransAAttr(),
                                 g.getTransBAttr());
    g.getResult().replaceAllUsesWith(noBias.getResult());
    g.erase();
    c = noBias;
  }
  b.setInsertionPointAfter(c);
  Value partial = c->getResult(0);
  auto sum = TpAllReduceOp::create(b, c->getLoc(), partial.getType(), partial,
                                   b.getI64IntegerAttr(1));
  Value out = sum.getResult();
  if (l.bias)
    out = AddOp::create(b, c->getLoc(), partial.getType(), out, *l.bias);
  partial.replaceAllUsesExcept(out, sum);
}

LogicalResult BlockSplitter::splitMlp(MlpBlock &blk) {
  if (blk.width % size != 0)
    return blk.ups.front().l.op->emitError("--tensor-parallel=")
           << size << " does not divide this MLP's width " << blk.width;
  int64_t hs = blk.width / size;
  splitColumns(blk.ups, /*blocks=*/1);
  int64_t last =
      cast<RankedTensorType>(blk.ups.front().out().getType()).getRank() - 1;
  for (Operation *op : blk.region)
    op->getResult(0).setType(withDim(op->getResult(0).getType(), last, hs));
  rowSplit(blk.second, hs);
  return success();
}

LogicalResult BlockSplitter::splitAttention(AttentionBlock &blk) {
  if (blk.heads % size != 0)
    return blk.projs.front().l.op->emitError("--tensor-parallel=")
           << size << " does not divide this attention block's " << blk.heads
           << " heads";
  for (ColumnLinear &p : blk.projs)
    if (p.width % size != 0)
      return p.l.op->emitError("--tensor-parallel=")
             << size << " does not divide this projection's width "
             << p.width;
  // The projections by heads (each of a fused projection's blocks); then
  // every other value of the region along its heads axis.
  splitColumns(blk.projs, blk.blocks);
  llvm::DenseSet<Value> done;
  for (ColumnLinear &p : blk.projs)
    done.insert(p.out());
  for (auto &[val, ax] : blk.axis) {
    if (done.contains(val))
      continue;
    auto t = cast<RankedTensorType>(val.getType());
    val.setType(withDim(t, ax, t.getDimSize(ax) / size));
  }
  rowSplit(blk.out,
           cast<RankedTensorType>(blk.out.input().getType()).getShape().back());
  return success();
}

struct TensorParallelPass
    : impl::TensorParallelPassBase<TensorParallelPass> {
  using TensorParallelPassBase::TensorParallelPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward" || size <= 1)
      return;
    SmallVector<MlpBlock> mlps;
    SmallVector<AttentionBlock> attention;
    findBlocks(func, mlps, attention);
    if (mlps.empty() && attention.empty() && !hasVocabulary(func, size)) {
      func.emitError("--tensor-parallel=")
          << static_cast<int64_t>(size)
          << ": found no MLP block (a linear layer, an elementwise "
             "activation, a linear layer contracting over its width) to split";
      return signalPassFailure();
    }
    BlockSplitter splitter(func, size);
    for (MlpBlock &blk : mlps)
      if (failed(splitter.splitMlp(blk)))
        return signalPassFailure();
    for (AttentionBlock &blk : attention)
      if (failed(splitter.splitAttention(blk)))
        return signalPassFailure();
    if (vocab && failed(splitVocabulary(func, size)))
      return signalPassFailure();
    if (sequence && failed(splitSequence(func, size)))
      return signalPassFailure();
    Block &body = func.getBody().front();
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   func.getResultTypes()));
    func->setAttr("ds.tensor_parallel",
                  Builder(func.getContext()).getI64IntegerAttr(size));
  }
};

} // namespace

Value markGroupInput(OpBuilder &b, func::FuncOp func, Value x,
                     Operation *before) {
  auto arg = dyn_cast<BlockArgument>(x);
  if (arg && func.getArgAttr(arg.getArgNumber(), attrs::kInput))
    return x;
  b.setInsertionPoint(before);
  return TpIdentityOp::create(b, before->getLoc(), x.getType(), x,
                              b.getI64IntegerAttr(1));
}

} // namespace mlir::ds
