//===- TensorParallel.cpp - Megatron MLP splitting on the ds IR -----------===//
//
// Part of the ds project.
//
// Each MLP block (matmul by a weight, elementwise activation, matmul by a
// weight contracting over the activation's width) is split over the
// tensor-parallel group: the first weight by columns, the second by rows,
// with `ds.tp_identity` on the block's input and `ds.tp_all_reduce` on its
// partial output. The pattern is found on the IR, not by names.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::ds {
#define GEN_PASS_DEF_TENSORPARALLELPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kTpSplit = "ds.tp_split";

bool isElementwise(Operation *op) {
  return isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, NegOp, AbsOp,
             ExpOp, LogOp, SqrtOp, ReciprocalOp, ErfOp, TanhOp, SigmoidOp,
             ReluOp, CastOp>(op);
}

RankedTensorType withDim(Type t, int64_t axis, int64_t size) {
  auto r = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(r.getShape());
  shape[axis] = size;
  return r.clone(shape);
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
  if (!arg || arg.getOwner() != &func.getBody().front() ||
      !func.getArgAttr(arg.getArgNumber(), attrs::kParam) ||
      !func.getArgAttr(arg.getArgNumber(), attrs::kTrainable) ||
      cast<RankedTensorType>(arg.getType()).getRank() != 2 || !arg.hasOneUse())
    return std::nullopt;
  w.param = arg;
  return w;
}

std::optional<BlockArgument> biasOf(func::FuncOp func, Value v, int64_t n) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &func.getBody().front() ||
      !func.getArgAttr(arg.getArgNumber(), attrs::kParam) ||
      !func.getArgAttr(arg.getArgNumber(), attrs::kTrainable) ||
      !arg.hasOneUse())
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

/// The linear layers by a weight that read `first`'s input, `first` first
/// (a gated MLP's gate and up, separate Q, K and V), each with its bias
/// add; `sameType`: only those of `first`'s result type. Empty when one is
/// not at least 2-D.
SmallVector<ColumnLinear> columnLinears(func::FuncOp func, const Linear &first,
                                        bool sameType) {
  SmallVector<Linear> linears{first};
  Type type = first.result().getType();
  for (Operation *user : first.input().getUsers())
    if (user != first.op && isa<MatMulOp, GemmOp>(user) &&
        user->getOperand(0) == first.input() &&
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
};

/// A vocabulary-parallel output layer: a linear layer by a [V, D] (or
/// [D, V]) parameter whose logits reach a softmax cross entropy through
/// reshapes that keep the classes last; the parameter's other uses are
/// embedding lookups (a tied embedding).
struct VocabHead {
  SoftmaxCrossEntropyLossOp loss;
  Operation *linear = nullptr; // matmul or Gemm
  BlockArgument table;         // the parameter
  int64_t axis = 0;            // its vocabulary axis
  TransposeOp transpose;       // a matmul's transpose of [V, D], or null
  std::optional<BlockArgument> bias;
  AddOp biasAdd;               // a bias added after a matmul, or null
  SmallVector<ReshapeOp> reshapes;
  SmallVector<GatherOp> lookups; // the tied embedding's gathers
  llvm::SmallSetVector<unsigned, 2> returned; // results that return logits
  int64_t vocab = 0;
};

/// Whether `v` is computed from the graph's inputs alone through ops that
/// keep index values (reshapes, casts, slices): token ids, not positions.
bool fromInput(func::FuncOp func, Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<ReshapeOp, CastOp, SliceOp>(def))
      return false;
    v = def->getOperand(0);
  }
  auto arg = cast<BlockArgument>(v);
  return func.getArgAttr(arg.getArgNumber(), attrs::kInput) != nullptr;
}

struct TensorParallelPass
    : impl::TensorParallelPassBase<TensorParallelPass> {
  using TensorParallelPassBase::TensorParallelPassBase;

  std::optional<AttentionBlock> matchAttention(func::FuncOp func,
                                               Operation *a) {
    AttentionBlock blk;
    auto first = linearOf(func, a);
    if (!first)
      return std::nullopt;
    // The projections: this one, and the other linear layers by a weight
    // that read the same input (separate Q, K and V).
    blk.projs = columnLinears(func, *first, /*sameType=*/false);
    if (blk.projs.empty())
      return std::nullopt;
    for (ColumnLinear &p : blk.projs) {
      Value v = p.out();
      int64_t last = cast<RankedTensorType>(v.getType()).getRank() - 1;
      blk.axis[v] = last;
      // A fused projection: split into equal parts along the features.
      if (blk.projs.size() == 1 && v.hasOneUse())
        if (auto split = dyn_cast<SplitOp>(*v.getUsers().begin());
            split && static_cast<int64_t>(split.getAxis()) == last &&
            split.getNumResults() > 1) {
          for (Value r : split.getResults())
            if (r.getType() != split.getResult(0).getType())
              return std::nullopt;
          blk.blocks = split.getNumResults();
          blk.ops.insert(split);
          for (Value r : split.getResults())
            blk.axis[r] = last;
        }
    }
    Operation *exit = nullptr;
    SmallVector<Value> work;
    for (auto &[val, ax] : blk.axis)
      work.push_back(val);
    auto inRegion = [&](Value x) { return blk.axis.count(x) != 0; };
    auto broadcastOk = [&](Value o, int64_t ax, int64_t rank) {
      auto t = dyn_cast<RankedTensorType>(o.getType());
      if (!t)
        return false;
      int64_t aligned = ax - (rank - t.getRank());
      return aligned < 0 || t.getDimSize(aligned) == 1;
    };
    while (!work.empty()) {
      Value x = work.pop_back_val();
      int64_t ax = blk.axis.lookup(x);
      for (OpOperand &use : x.getUses()) {
        Operation *user = use.getOwner();
        if (blk.ops.contains(user) || user == exit)
          continue;
        int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
        if (isa<MatMulOp, GemmOp>(user) && user->getOperand(0) == x &&
            ax == rank - 1) {
          // The output projection: contracts over the merged heads.
          if (exit && exit != user)
            return std::nullopt;
          exit = user;
          continue;
        }
        // The heads pass through the op by its split-axis rule.
        auto rule = dyn_cast<SplitAxisOpInterface>(user);
        if (!rule || isa<GemmOp>(user))
          return std::nullopt;
        int64_t newAxis = rule.getResultSplitAxis(use.getOperandNumber(), ax);
        if (auto r = dyn_cast<ReshapeOp>(user); r && newAxis >= 0) {
          // Features split into heads x head size: the heads carry it.
          ArrayRef<int64_t> out = r.getType().getShape();
          int64_t in = cast<RankedTensorType>(x.getType()).getDimSize(ax);
          int64_t heads =
              newAxis + 1 < static_cast<int64_t>(out.size()) &&
                      out[newAxis] != in &&
                      out[newAxis] * out[newAxis + 1] == in
                  ? out[newAxis]
                  : 0;
          if (heads) {
            if (blk.heads && blk.heads != heads)
              return std::nullopt;
            blk.heads = heads;
          }
        } else if (auto m = dyn_cast<MatMulOp>(user)) {
          // Per head: both operands carry the heads on the same batch axis.
          Value other = m.getLhs() == x ? m.getRhs() : m.getLhs();
          if (ax >= rank - 2 ||
              (inRegion(other) && blk.axis.lookup(other) != ax))
            return std::nullopt;
        }
        if (newAxis < 0 || user->getNumResults() != 1)
          return std::nullopt;
        blk.ops.insert(user);
        Value r = user->getResult(0);
        if (!blk.axis.count(r)) {
          blk.axis[r] = newAxis;
          work.push_back(r);
        } else if (blk.axis.lookup(r) != newAxis) {
          return std::nullopt;
        }
      }
    }
    if (!exit || !blk.heads)
      return std::nullopt;
    // Every operand of a region op: in the region (with the op's axis), or
    // broadcast along it.
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
        return std::nullopt;
      for (Value o : op->getOperands()) {
        if (inRegion(o) || isa<TransposeOp, ReshapeOp>(op))
          continue;
        if (isa<MatMulOp, ConcatOp>(op) || !broadcastOk(o, ax, rank))
          return std::nullopt;
      }
    }
    auto out = linearOf(func, exit);
    if (!out)
      return std::nullopt;
    blk.out = *out;
    return blk;
  }

  std::optional<MlpBlock> match(func::FuncOp func, Operation *a) {
    MlpBlock blk;
    auto first = linearOf(func, a);
    if (!first)
      return std::nullopt;
    // This linear layer and the others of the same input and width.
    blk.ups = columnLinears(func, *first, /*sameType=*/true);
    if (blk.ups.empty())
      return std::nullopt;
    auto outType = cast<RankedTensorType>(first->result().getType());
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
            user->getResult(0).getType() != outType.clone(
                cast<RankedTensorType>(user->getResult(0).getType())
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

  static bool isTrainableParam(func::FuncOp func, Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &func.getBody().front() &&
           func.getArgAttr(arg.getArgNumber(), attrs::kParam) &&
           func.getArgAttr(arg.getArgNumber(), attrs::kTrainable);
  }

  /// The output layer of a cross entropy, when its vocabulary can split.
  std::optional<VocabHead> matchVocabHead(func::FuncOp func,
                                          SoftmaxCrossEntropyLossOp ce) {
    VocabHead h;
    h.loss = ce;
    if (ce.getWeights() || (ce.getLogProb() && !ce.getLogProb().use_empty()))
      return std::nullopt;
    auto scores = cast<RankedTensorType>(ce.getScores().getType());
    if (scores.getRank() != 2 ||
        cast<RankedTensorType>(ce.getLabels().getType()).getRank() != 1)
      return std::nullopt;
    h.vocab = scores.getDimSize(1);
    Operation *ret = func.getBody().front().getTerminator();
    // Every other use of a logits value: the graph's results.
    auto onlyReturned = [&](Value v, Operation *next) {
      for (OpOperand &use : v.getUses()) {
        if (use.getOwner() == next)
          continue;
        if (use.getOwner() != ret)
          return false;
        h.returned.insert(use.getOperandNumber());
      }
      return true;
    };
    Value v = ce.getScores();
    Operation *next = ce;
    while (auto r = v.getDefiningOp<ReshapeOp>()) {
      if (r.getInput().getType().getShape().back() != h.vocab ||
          !onlyReturned(v, next))
        return std::nullopt;
      h.reshapes.push_back(r);
      next = r;
      v = r.getInput();
    }
    if (!onlyReturned(v, next))
      return std::nullopt;
    // A bias added to a matmul's logits.
    if (auto add = v.getDefiningOp<AddOp>()) {
      for (Value o : add->getOperands())
        if (auto arg = dyn_cast<BlockArgument>(o);
            arg && isTrainableParam(func, arg) && arg.hasOneUse() &&
            cast<RankedTensorType>(arg.getType()).getRank() == 1 &&
            cast<RankedTensorType>(arg.getType()).getDimSize(0) == h.vocab)
          h.bias = arg;
      if (!h.bias)
        return std::nullopt;
      Value other = add.getLhs() == *h.bias ? add.getRhs() : add.getLhs();
      if (add.getType() != other.getType() || !onlyReturned(other, add))
        return std::nullopt;
      h.biasAdd = add;
      v = other;
    }
    Operation *lin = v.getDefiningOp();
    Value w;
    bool transposed = false; // the parameter is [V, D]
    if (auto m = dyn_cast_or_null<MatMulOp>(lin)) {
      w = m.getRhs();
    } else if (auto g = dyn_cast_or_null<GemmOp>(lin)) {
      if (h.biasAdd || g.getTransA() || g.getAlpha().convertToFloat() != 1.0f ||
          g.getBeta().convertToFloat() != 1.0f)
        return std::nullopt;
      w = g.getB();
      transposed = g.getTransB();
      if (Value c = g.getC()) {
        auto arg = dyn_cast<BlockArgument>(c);
        if (!arg || !isTrainableParam(func, arg) || !arg.hasOneUse() ||
            cast<RankedTensorType>(arg.getType()).getRank() != 1)
          return std::nullopt;
        h.bias = arg;
      }
    } else {
      return std::nullopt;
    }
    if (lin->getOperand(0) == w)
      return std::nullopt;
    h.linear = lin;
    if (auto t = w.getDefiningOp<TransposeOp>(); t && isa<MatMulOp>(lin)) {
      ArrayRef<int64_t> perm = t.getPerm();
      if (perm.size() != 2 || perm[0] != 1 || perm[1] != 0 || !t->hasOneUse())
        return std::nullopt;
      h.transpose = t;
      transposed = true;
      w = t.getInput();
    }
    if (!isTrainableParam(func, w) ||
        cast<RankedTensorType>(w.getType()).getRank() != 2)
      return std::nullopt;
    h.table = cast<BlockArgument>(w);
    h.axis = transposed ? 0 : 1;
    if (cast<RankedTensorType>(w.getType()).getDimSize(h.axis) != h.vocab)
      return std::nullopt;
    // The parameter's other uses: lookups of its rows (a tied embedding).
    for (Operation *user : h.table.getUsers()) {
      if (user == lin || user == h.transpose.getOperation())
        continue;
      auto g = dyn_cast<GatherOp>(user);
      if (!g || g.getData() != h.table || g.getAxis() != 0 || h.axis != 0)
        return std::nullopt;
      h.lookups.push_back(g);
    }
    return h;
  }

  /// Split the vocabulary of an output layer (and its tied embedding) over
  /// the group: the table by rows, the logits by columns, the loss computed
  /// by `ds.vocab_cross_entropy`. Returns the logits results to drop.
  /// The slice size of a vocabulary, and its split attribute (padded to
  /// ceil(V / T) entries per rank when T does not divide V).
  int64_t vocabPart(int64_t vocab) const { return (vocab + size - 1) / size; }
  DenseI64ArrayAttr vocabSplit(OpBuilder &b, int64_t axis, int64_t vocab) {
    if (vocab % size == 0)
      return b.getDenseI64ArrayAttr({axis, size});
    return b.getDenseI64ArrayAttr({axis, size, 1, vocab});
  }
  IntegerAttr vocabAttr(OpBuilder &b, int64_t vocab) {
    return vocab % size == 0 ? IntegerAttr() : b.getI64IntegerAttr(vocab);
  }

  void splitVocabHead(func::FuncOp func, VocabHead &h, OpBuilder &b) {
    int64_t part = vocabPart(h.vocab);
    auto t = cast<RankedTensorType>(h.table.getType());
    h.table.setType(withDim(t, h.axis, part));
    func.setArgAttr(h.table.getArgNumber(), kTpSplit,
                    vocabSplit(b, h.axis, h.vocab));
    if (h.bias) {
      h.bias->setType(withDim(h.bias->getType(), 0, part));
      func.setArgAttr(h.bias->getArgNumber(), kTpSplit,
                      vocabSplit(b, 0, h.vocab));
    }
    if (h.transpose)
      h.transpose.getResult().setType(
          withDim(h.transpose.getType(), 1, part));
    Value x = h.linear->getOperand(0);
    auto xArg = dyn_cast<BlockArgument>(x);
    if (!xArg || !func.getArgAttr(xArg.getArgNumber(), attrs::kInput)) {
      b.setInsertionPoint(h.linear);
      h.linear->setOperand(0, TpIdentityOp::create(b, h.linear->getLoc(),
                                                   x.getType(), x,
                                                   b.getI64IntegerAttr(1)));
    }
    auto narrow = [&](Value v) {
      auto r = cast<RankedTensorType>(v.getType());
      v.setType(withDim(r, r.getRank() - 1, part));
    };
    narrow(h.linear->getResult(0));
    if (h.biasAdd)
      narrow(h.biasAdd.getResult());
    for (ReshapeOp r : h.reshapes)
      narrow(r.getResult());
    for (GatherOp g : h.lookups)
      embedLookup(g, b, h.vocab);
    SoftmaxCrossEntropyLossOp ce = h.loss;
    b.setInsertionPoint(ce);
    auto lse = RankedTensorType::get(
        {cast<RankedTensorType>(ce.getLabels().getType()).getDimSize(0)},
        b.getF32Type());
    auto vce = VocabCrossEntropyOp::create(
        b, ce.getLoc(), ce.getLoss().getType(), lse, ce.getScores(),
        ce.getLabels(), ce.getReductionAttr(), ce.getIgnoreIndexAttr(),
        b.getI64IntegerAttr(1), vocabAttr(b, h.vocab));
    ce.getLoss().replaceAllUsesWith(vce.getLoss());
    ce.erase();
  }

  /// An embedding lookup in a row-split table: the rows this rank holds,
  /// summed over the group.
  void embedLookup(GatherOp g, OpBuilder &b, int64_t vocab) {
    b.setInsertionPoint(g);
    auto vg = VocabGatherOp::create(b, g.getLoc(), g.getType(), g.getData(),
                                    g.getIndices(), b.getI64IntegerAttr(1),
                                    vocabAttr(b, vocab));
    auto sum = TpAllReduceOp::create(b, g.getLoc(), g.getType(), vg,
                                     b.getI64IntegerAttr(1));
    g.getResult().replaceAllUsesWith(sum.getResult());
    g.erase();
  }

  /// A [V, D] embedding table used only by lookups of token ids (indices
  /// from the graph's inputs): its rows split over the group.
  bool matchEmbedding(func::FuncOp func, BlockArgument arg,
                      SmallVectorImpl<GatherOp> &lookups) {
    auto t = dyn_cast<RankedTensorType>(arg.getType());
    if (!isTrainableParam(func, arg) || !t || t.getRank() != 2 ||
        arg.use_empty())
      return false;
    for (Operation *user : arg.getUsers()) {
      auto g = dyn_cast<GatherOp>(user);
      if (!g || g.getData() != arg || g.getAxis() != 0 ||
          !fromInput(func, g.getIndices()))
        return false;
      lookups.push_back(g);
    }
    return true;
  }

  /// Sequence parallelism: see the pass description. Runs after the
  /// blocks and the vocabulary are split. `axis` holds each split value's
  /// split dimension (retyped at the end).
  LogicalResult sequenceParallel(func::FuncOp func, OpBuilder &b) {
    Block &body = func.getBody().front();
    llvm::MapVector<Value, int64_t> axis;
    llvm::DenseMap<Value, Value> gathered, identity;
    llvm::DenseMap<std::pair<Value, int64_t>, Value> sliced;
    int64_t seeds = 0;
    SmallVector<int64_t> unsplit; // group sums' token counts T divides not
    auto rankOf = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getRank();
    };
    auto dim = [](Value v, int64_t d) {
      return cast<RankedTensorType>(v.getType()).getDimSize(d);
    };
    auto constant = [](Value v) {
      Operation *d = v.getDefiningOp();
      return d && d->hasTrait<OpTrait::ConstantLike>();
    };
    // The whole value of a split one, for a reader that needs it all.
    auto whole = [&](Value v) {
      auto [it, fresh] = gathered.try_emplace(v, Value());
      if (fresh) {
        b.setInsertionPointAfterValue(v);
        it->second = SpAllGatherOp::create(
            b, v.getLoc(), v.getType(), v, b.getI64IntegerAttr(axis.lookup(v)),
            b.getI64IntegerAttr(1), b.getBoolAttr(false));
      }
      return it->second;
    };
    // A broadcast operand: its gradient sums over the rows of every rank.
    // Placed before its first reader (ops are visited in order), so that a
    // parameter's copy is not live across the layers before it (a
    // pipeline cut would count it as a crossing activation).
    auto summed = [&](Value v, Operation *user) {
      if (constant(v))
        return v;
      auto [it, fresh] = identity.try_emplace(v, Value());
      if (fresh) {
        b.setInsertionPoint(user);
        it->second = TpIdentityOp::create(b, v.getLoc(), v.getType(), v,
                                          b.getI64IntegerAttr(1));
      }
      return it->second;
    };
    // A replicated full-size operand: this rank's rows of it, before its
    // first reader (as for `summed`).
    auto rowsOf = [&](Value v, int64_t a, Operation *user) {
      auto [it, fresh] = sliced.try_emplace({v, a}, Value());
      if (fresh) {
        b.setInsertionPoint(user);
        it->second = SpSliceOp::create(b, v.getLoc(), v.getType(), v,
                                       b.getI64IntegerAttr(a),
                                       b.getI64IntegerAttr(1));
        axis[it->second] = a;
      }
      return it->second;
    };
    // The split dimension of a group sum: the tokens just before the
    // features (the sequence of a [b, s, h] activation), else the leading
    // one; -1 when T divides neither.
    auto seedAxis = [&](Value v) -> int64_t {
      int64_t r = rankOf(v);
      if (r >= 2 && dim(v, r - 2) % size == 0)
        return r - 2;
      if (r >= 1 && dim(v, 0) % size == 0)
        return 0;
      if (r >= 2)
        unsplit.push_back(dim(v, r - 2));
      return -1;
    };
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (auto ar = dyn_cast<TpAllReduceOp>(op)) {
        if (int64_t a = seedAxis(ar.getResult()); a >= 0) {
          b.setInsertionPoint(ar);
          auto rs = SpReduceScatterOp::create(b, ar.getLoc(), ar.getType(),
                                              ar.getInput(),
                                              b.getI64IntegerAttr(a),
                                              ar.getGroupAttr());
          ar.getResult().replaceAllUsesWith(rs.getResult());
          ar.erase();
          axis[rs.getResult()] = a;
          ++seeds;
          continue;
        }
      }
      SmallVector<unsigned> splitOperands;
      for (OpOperand &o : op->getOpOperands())
        if (axis.count(o.get()))
          splitOperands.push_back(o.getOperandNumber());
      if (splitOperands.empty())
        continue;
      Value first = op->getOperand(splitOperands.front());
      int64_t a = axis.lookup(first);
      // A block's input f: gathered, its gradient reduce-scattered.
      if (auto f = dyn_cast<TpIdentityOp>(op)) {
        b.setInsertionPoint(f);
        auto g = SpAllGatherOp::create(b, f.getLoc(), f.getType(), f.getInput(),
                                       b.getI64IntegerAttr(a), f.getGroupAttr(),
                                       b.getBoolAttr(true));
        f.getResult().replaceAllUsesWith(g.getResult());
        f.erase();
        continue;
      }
      // Row by row along the split dimension? `ra`: the result's, by the
      // op's split-axis rule. A matmul passes its left operand's rows
      // (its weight is whole: its gradient sums over the rows); a layer
      // norm passes its input's.
      int64_t ra = -1;
      Value res = op->getNumResults() == 1 ? op->getResult(0) : Value();
      auto resType = res ? dyn_cast<RankedTensorType>(res.getType())
                         : RankedTensorType();
      auto rule = dyn_cast<SplitAxisOpInterface>(op);
      bool weightRule = !isa<MatMulOp>(op) ||
                        (splitOperands.size() == 1 &&
                         splitOperands.front() == 0 &&
                         rankOf(op->getOperand(1)) == 2);
      // (Only float results are kept split: the collectives move floats.)
      if (resType && isa<FloatType>(resType.getElementType()) && rule &&
          weightRule && !isa<GemmOp>(op)) {
        ra = rule.getResultSplitAxis(splitOperands.front(), a);
        if (ra >= 0 && (ra >= resType.getRank() ||
                        resType.getDimSize(ra) % size != 0 ||
                        resType.getDimSize(ra) != dim(first, a)))
          ra = -1;
      }
      // The other operands: split the same way, broadcast along the axis
      // (whole on every rank; a float one's gradient summed over the
      // group), or replicated at full size (this rank's rows of it).
      // Decided for all before any is rewritten.
      enum class Use { Split, Summed, Rows };
      SmallVector<std::pair<OpOperand *, Use>> plan;
      if (ra >= 0) {
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
            if (rule.getResultSplitAxis(o.getOperandNumber(),
                                        axis.lookup(v)) != ra) {
              ra = -1;
              break;
            }
            plan.push_back({&o, Use::Split});
          } else if (isa<MatMulOp>(op) || ao < 0 || vt.getDimSize(ao) == 1) {
            plan.push_back({&o, Use::Summed});
          } else if (vt.getDimSize(ao) == n && isFloat) {
            plan.push_back({&o, Use::Rows});
          } else {
            ra = -1;
            break;
          }
        }
      }
      if (ra >= 0) {
        int64_t R = resType.getRank();
        for (auto &[o, use] : plan) {
          Value v = o->get();
          bool isFloat = isa<FloatType>(
              cast<RankedTensorType>(v.getType()).getElementType());
          if (use == Use::Summed && isFloat)
            o->set(summed(v, op));
          else if (use == Use::Rows)
            o->set(rowsOf(v, ra - (R - rankOf(v)), op));
        }
      }
      if (ra >= 0) {
        axis[res] = ra;
        continue;
      }
      // Any other reader: the whole value.
      for (unsigned i : splitOperands)
        op->setOperand(i, whole(op->getOperand(i)));
    }
    if (seeds == 0) {
      InFlightDiagnostic d = func.emitError("--sequence-parallel: --tensor-parallel=")
                             << static_cast<int64_t>(size)
                             << " divides the token dimension of no block "
                                "output";
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
               << "--sequence-parallel: --tensor-parallel="
               << static_cast<int64_t>(size) << " does not divide dimension "
               << a << " (" << t.getDimSize(a) << ")";
      v.setType(withDim(t, a, t.getDimSize(a) / size));
    }
    func->setAttr("ds.sequence_parallel", b.getUnitAttr());
    return success();
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward" || size <= 1)
      return;
    Block &body = func.getBody().front();
    SmallVector<Operation *> linears;
    for (Operation &op : body)
      if (isa<MatMulOp, GemmOp>(op))
        linears.push_back(&op);
    SmallVector<MlpBlock> blocks;
    llvm::DenseSet<Operation *> used;
    for (Operation *a : linears) {
      if (used.count(a))
        continue;
      auto blk = match(func, a);
      if (!blk)
        continue;
      used.insert(blk->second.op);
      for (ColumnLinear &up : blk->ups)
        used.insert(up.l.op);
      blocks.push_back(std::move(*blk));
    }
    std::vector<AttentionBlock> attention;
    for (Operation *a : linears) {
      if (used.count(a))
        continue;
      auto blk = matchAttention(func, a);
      if (!blk)
        continue;
      used.insert(blk->out.op);
      for (ColumnLinear &p : blk->projs)
        used.insert(p.l.op);
      attention.push_back(std::move(*blk));
    }
    // The vocabulary: output layers of a cross entropy (and their tied
    // embeddings), and embedding tables of token ids, when T divides it.
    SmallVector<VocabHead> heads;
    llvm::DenseSet<Value> vocabTables;
    func.walk([&](SoftmaxCrossEntropyLossOp ce) {
      auto h = matchVocabHead(func, ce);
      if (h && !used.count(h->linear) && h->vocab >= size &&
          !vocabTables.count(h->table)) {
        vocabTables.insert(h->table);
        heads.push_back(std::move(*h));
      }
    });
    SmallVector<std::pair<BlockArgument, SmallVector<GatherOp>>> embeddings;
    for (BlockArgument arg : body.getArguments()) {
      SmallVector<GatherOp> lookups;
      if (!vocabTables.count(arg) && matchEmbedding(func, arg, lookups) &&
          cast<RankedTensorType>(arg.getType()).getDimSize(0) >= size)
        embeddings.push_back({arg, std::move(lookups)});
    }
    if (blocks.empty() && attention.empty() && heads.empty() &&
        embeddings.empty()) {
      func.emitError("--tensor-parallel=")
          << static_cast<int64_t>(size)
          << ": found no MLP block (a linear layer, an elementwise "
             "activation, a linear layer contracting over its width) to split";
      return signalPassFailure();
    }
    OpBuilder b(func.getContext());
    // A linear layer that contracts over split features: its weight by
    // rows; its partial sums summed over the group, and its own bias added
    // once, after the sum. `k` is the (already split) contracted width.
    auto rowSplit = [&](Linear &l, int64_t k) {
      Operation *c = l.op;
      auto arg = l.w.param;
      int64_t axis = l.w.axisOf(/*columns=*/false);
      auto t = cast<RankedTensorType>(arg.getType());
      arg.setType(withDim(t, axis, t.getDimSize(axis) / size));
      func.setArgAttr(arg.getArgNumber(), kTpSplit,
                      b.getDenseI64ArrayAttr({axis, size}));
      if (l.w.transpose)
        l.w.transpose.getResult().setType(
            withDim(l.w.transpose.getType(), 0, k));
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
      auto sum = TpAllReduceOp::create(b, c->getLoc(), partial.getType(),
                                       partial, b.getI64IntegerAttr(1));
      Value out = sum.getResult();
      if (l.bias)
        out = AddOp::create(b, c->getLoc(), partial.getType(), out, *l.bias);
      partial.replaceAllUsesExcept(out, sum);
    };
    // A parameter split along `axis` (in `blocks` blocks).
    auto splitArg = [&](BlockArgument arg, int64_t axis, int64_t blocks) {
      auto t = cast<RankedTensorType>(arg.getType());
      arg.setType(withDim(t, axis, t.getDimSize(axis) / size));
      SmallVector<int64_t> attr{axis, size};
      if (blocks > 1)
        attr.push_back(blocks);
      func.setArgAttr(arg.getArgNumber(), kTpSplit,
                      b.getDenseI64ArrayAttr(attr));
    };
    // The first layers of a block: their shared input marked (its gradient
    // sums over the group; a graph input needs none), then each weight and
    // bias split by columns and the results narrowed.
    auto splitColumns = [&](MutableArrayRef<ColumnLinear> cols,
                            int64_t blocks) {
      Operation *a = cols.front().l.op;
      for (ColumnLinear &c : cols)
        if (c.l.op->isBeforeInBlock(a))
          a = c.l.op;
      Value x = cols.front().l.input();
      auto xArg = dyn_cast<BlockArgument>(x);
      if (!xArg || !func.getArgAttr(xArg.getArgNumber(), attrs::kInput)) {
        b.setInsertionPoint(a);
        Value f = TpIdentityOp::create(b, a->getLoc(), x.getType(), x,
                                       b.getI64IntegerAttr(1));
        for (ColumnLinear &c : cols)
          c.l.op->setOperand(0, f);
      }
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
        int64_t last = cast<RankedTensorType>(c.l.result().getType()).getRank() - 1;
        c.l.result().setType(withDim(c.l.result().getType(), last, part));
        if (c.bias1)
          c.bias1.getResult().setType(withDim(c.bias1.getType(), last, part));
      }
    };
    for (MlpBlock &blk : blocks) {
      if (blk.width % size != 0) {
        blk.ups.front().l.op->emitError("--tensor-parallel=")
            << static_cast<int64_t>(size)
            << " does not divide this MLP's width " << blk.width;
        return signalPassFailure();
      }
      int64_t hs = blk.width / size;
      splitColumns(blk.ups, /*blocks=*/1);
      int64_t last =
          cast<RankedTensorType>(blk.ups.front().out().getType()).getRank() - 1;
      for (Operation *op : blk.region)
        op->getResult(0).setType(withDim(op->getResult(0).getType(), last, hs));
      rowSplit(blk.second, hs);
    }
    for (AttentionBlock &blk : attention) {
      if (blk.heads % size != 0) {
        blk.projs.front().l.op->emitError("--tensor-parallel=")
            << static_cast<int64_t>(size)
            << " does not divide this attention block's " << blk.heads
            << " heads";
        return signalPassFailure();
      }
      for (ColumnLinear &p : blk.projs)
        if (p.width % size != 0) {
          p.l.op->emitError("--tensor-parallel=")
              << static_cast<int64_t>(size)
              << " does not divide this projection's width " << p.width;
          return signalPassFailure();
        }
      // The projections by heads (each of a fused projection's blocks);
      // then every other value of the region along its heads axis.
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
    }
    // The vocabulary splits. A split output layer's logits are partial on
    // each rank: they stop being results of the graph.
    llvm::BitVector dropped(func.getNumResults());
    for (VocabHead &h : heads) {
      splitVocabHead(func, h, b);
      for (unsigned i : h.returned)
        dropped.set(i);
    }
    for (auto &[arg, lookups] : embeddings) {
      auto t = cast<RankedTensorType>(arg.getType());
      int64_t vocab = t.getDimSize(0);
      arg.setType(withDim(t, 0, vocabPart(vocab)));
      func.setArgAttr(arg.getArgNumber(), kTpSplit, vocabSplit(b, 0, vocab));
      for (GatherOp g : lookups)
        embedLookup(g, b, vocab);
    }
    if (dropped.any()) {
      body.getTerminator()->eraseOperands(dropped);
      if (failed(func.eraseResults(dropped)))
        return signalPassFailure();
    }
    if (sequence && failed(sequenceParallel(func, b)))
      return signalPassFailure();
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   func.getResultTypes()));
    func->setAttr("ds.tensor_parallel", b.getI64IntegerAttr(size));
    if (!heads.empty() || !embeddings.empty())
      func->setAttr("ds.vocab_parallel", b.getUnitAttr());
  }
};
} // namespace
} // namespace mlir::ds
