//===- VocabParallel.cpp - vocabulary-parallel embedding and loss ---------===//
//
// Part of the ds project.
//
// The output layer of a softmax cross entropy (and its tied embedding), and
// embedding tables looked up by token ids, are split by vocabulary rows
// over the tensor-parallel group: lookups become `ds.vocab_gather` summed
// over the group, the loss `ds.vocab_cross_entropy`. The patterns are found
// on the IR, not by names.
//
//===----------------------------------------------------------------------===//

#include "TensorParallelUtils.h"

#include "ds/Transforms/Passes.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::ds {
#define GEN_PASS_DEF_VOCABPARALLELPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

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

/// An embedding table split on its own: a [V, D] parameter used only by
/// lookups of token ids.
struct Embedding {
  BlockArgument table;
  SmallVector<GatherOp> lookups;
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

/// Finds (`match*`) and splits the vocabularies of one function.
class VocabSplitter {
public:
  VocabSplitter(func::FuncOp func, int64_t size)
      : func(func), size(size), b(func.getContext()) {}

  /// Collects the output layers and embedding tables to split; false when
  /// there are none.
  bool find();
  LogicalResult split();

private:
  std::optional<VocabHead> matchVocabHead(SoftmaxCrossEntropyLossOp ce);
  LogicalResult matchLogitsPath(VocabHead &h, Value &v);
  LogicalResult matchOutputLinear(VocabHead &h, Value v);
  bool matchEmbedding(BlockArgument arg, SmallVectorImpl<GatherOp> &lookups);
  void splitVocabHead(VocabHead &h);
  void embedLookup(GatherOp g, int64_t vocab);

  /// The slice size of a vocabulary, and its split attribute (padded to
  /// ceil(V / T) entries per rank when T does not divide V).
  int64_t vocabPart(int64_t vocab) const { return (vocab + size - 1) / size; }
  DenseI64ArrayAttr vocabSplit(int64_t axis, int64_t vocab) {
    if (vocab % size == 0)
      return b.getDenseI64ArrayAttr({axis, size});
    return b.getDenseI64ArrayAttr({axis, size, 1, vocab});
  }
  IntegerAttr vocabAttr(int64_t vocab) {
    return vocab % size == 0 ? IntegerAttr() : b.getI64IntegerAttr(vocab);
  }

  func::FuncOp func;
  int64_t size;
  OpBuilder b;
  SmallVector<VocabHead> heads;
  SmallVector<Embedding> embeddings;
};

/// From the loss back to the output layer: reshapes that keep the classes
/// last, and a bias added to a matmul's logits. Every other use of a
/// logits value must be a graph result. `v` ends at the layer's result.
LogicalResult VocabSplitter::matchLogitsPath(VocabHead &h, Value &v) {
  Operation *ret = func.getBody().front().getTerminator();
  auto onlyReturned = [&](Value x, Operation *next) {
    for (OpOperand &use : x.getUses()) {
      if (use.getOwner() == next)
        continue;
      if (use.getOwner() != ret)
        return false;
      h.returned.insert(use.getOperandNumber());
    }
    return true;
  };
  v = h.loss.getScores();
  Operation *next = h.loss;
  while (auto r = v.getDefiningOp<ReshapeOp>()) {
    if (r.getInput().getType().getShape().back() != h.vocab ||
        !onlyReturned(v, next))
      return failure();
    h.reshapes.push_back(r);
    next = r;
    v = r.getInput();
  }
  if (!onlyReturned(v, next))
    return failure();
  auto add = v.getDefiningOp<AddOp>();
  if (!add)
    return success();
  for (Value o : add->getOperands())
    if (auto arg = dyn_cast<BlockArgument>(o);
        arg && isTrainableParam(func, arg) && arg.hasOneUse() &&
        cast<RankedTensorType>(arg.getType()).getRank() == 1 &&
        cast<RankedTensorType>(arg.getType()).getDimSize(0) == h.vocab)
      h.bias = arg;
  if (!h.bias)
    return failure();
  Value other = add.getLhs() == *h.bias ? add.getRhs() : add.getLhs();
  if (add.getType() != other.getType() || !onlyReturned(other, add))
    return failure();
  h.biasAdd = add;
  v = other;
  return success();
}

/// The output layer that makes the logits `v`: a matmul (by the table or
/// its transpose) or a Gemm (with its own bias), the table's vocabulary
/// axis of the logits' width, its other uses lookups of its rows.
LogicalResult VocabSplitter::matchOutputLinear(VocabHead &h, Value v) {
  Operation *lin = v.getDefiningOp();
  Value w;
  bool transposed = false; // the parameter is [V, D]
  if (auto m = dyn_cast_or_null<MatMulOp>(lin)) {
    w = m.getRhs();
  } else if (auto g = dyn_cast_or_null<GemmOp>(lin)) {
    if (h.biasAdd || g.getTransA() || g.getAlpha().convertToFloat() != 1.0f ||
        g.getBeta().convertToFloat() != 1.0f)
      return failure();
    w = g.getB();
    transposed = g.getTransB();
    if (Value c = g.getC()) {
      auto arg = dyn_cast<BlockArgument>(c);
      if (!arg || !isTrainableParam(func, arg) || !arg.hasOneUse() ||
          cast<RankedTensorType>(arg.getType()).getRank() != 1)
        return failure();
      h.bias = arg;
    }
  } else {
    return failure();
  }
  if (lin->getOperand(0) == w)
    return failure();
  h.linear = lin;
  if (auto t = w.getDefiningOp<TransposeOp>(); t && isa<MatMulOp>(lin)) {
    ArrayRef<int64_t> perm = t.getPerm();
    if (perm.size() != 2 || perm[0] != 1 || perm[1] != 0 || !t->hasOneUse())
      return failure();
    h.transpose = t;
    transposed = true;
    w = t.getInput();
  }
  if (!isTrainableParam(func, w) ||
      cast<RankedTensorType>(w.getType()).getRank() != 2)
    return failure();
  h.table = cast<BlockArgument>(w);
  h.axis = transposed ? 0 : 1;
  if (cast<RankedTensorType>(w.getType()).getDimSize(h.axis) != h.vocab)
    return failure();
  // The parameter's other uses: lookups of its rows (a tied embedding).
  for (Operation *user : h.table.getUsers()) {
    if (user == lin || user == h.transpose.getOperation())
      continue;
    auto g = dyn_cast<GatherOp>(user);
    if (!g || g.getData() != h.table || g.getAxis() != 0 || h.axis != 0)
      return failure();
    h.lookups.push_back(g);
  }
  return success();
}

/// The output layer of a cross entropy, when its vocabulary can split.
std::optional<VocabHead>
VocabSplitter::matchVocabHead(SoftmaxCrossEntropyLossOp ce) {
  VocabHead h;
  h.loss = ce;
  if (ce.getWeights() || (ce.getLogProb() && !ce.getLogProb().use_empty()))
    return std::nullopt;
  auto scores = cast<RankedTensorType>(ce.getScores().getType());
  if (scores.getRank() != 2 ||
      cast<RankedTensorType>(ce.getLabels().getType()).getRank() != 1)
    return std::nullopt;
  h.vocab = scores.getDimSize(1);
  Value v;
  if (failed(matchLogitsPath(h, v)) || failed(matchOutputLinear(h, v)))
    return std::nullopt;
  return h;
}

/// A [V, D] embedding table used only by lookups of token ids (indices
/// from the graph's inputs): its rows split over the group.
bool VocabSplitter::matchEmbedding(BlockArgument arg,
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

bool VocabSplitter::find() {
  // Output layers of a cross entropy (and their tied embeddings), and
  // embedding tables of token ids, when T divides it. A table already
  // split (the weight of a tensor-parallel block) is left alone.
  llvm::DenseSet<Value> vocabTables;
  func.walk([&](SoftmaxCrossEntropyLossOp ce) {
    auto h = matchVocabHead(ce);
    if (h && !func.getArgAttr(h->table.getArgNumber(), kTpSplit) &&
        h->vocab >= size && !vocabTables.count(h->table)) {
      vocabTables.insert(h->table);
      heads.push_back(std::move(*h));
    }
  });
  for (BlockArgument arg : func.getBody().front().getArguments()) {
    SmallVector<GatherOp> lookups;
    if (!vocabTables.count(arg) && matchEmbedding(arg, lookups) &&
        cast<RankedTensorType>(arg.getType()).getDimSize(0) >= size)
      embeddings.push_back({arg, std::move(lookups)});
  }
  return !heads.empty() || !embeddings.empty();
}

/// Split the vocabulary of an output layer (and its tied embedding) over
/// the group: the table by rows, the logits by columns, the loss computed
/// by `ds.vocab_cross_entropy`.
void VocabSplitter::splitVocabHead(VocabHead &h) {
  int64_t part = vocabPart(h.vocab);
  auto t = cast<RankedTensorType>(h.table.getType());
  h.table.setType(withDim(t, h.axis, part));
  func.setArgAttr(h.table.getArgNumber(), kTpSplit,
                  vocabSplit(h.axis, h.vocab));
  if (h.bias) {
    h.bias->setType(withDim(h.bias->getType(), 0, part));
    func.setArgAttr(h.bias->getArgNumber(), kTpSplit, vocabSplit(0, h.vocab));
  }
  if (h.transpose)
    h.transpose.getResult().setType(withDim(h.transpose.getType(), 1, part));
  h.linear->setOperand(
      0, markGroupInput(b, func, h.linear->getOperand(0), h.linear));
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
    embedLookup(g, h.vocab);
  SoftmaxCrossEntropyLossOp ce = h.loss;
  b.setInsertionPoint(ce);
  auto lse = RankedTensorType::get(
      {cast<RankedTensorType>(ce.getLabels().getType()).getDimSize(0)},
      b.getF32Type());
  auto vce = VocabCrossEntropyOp::create(
      b, ce.getLoc(), ce.getLoss().getType(), lse, ce.getScores(),
      ce.getLabels(), ce.getReductionAttr(), ce.getIgnoreIndexAttr(),
      b.getI64IntegerAttr(1), vocabAttr(h.vocab));
  ce.getLoss().replaceAllUsesWith(vce.getLoss());
  ce.erase();
}

/// An embedding lookup in a row-split table: the rows this rank holds,
/// summed over the group.
void VocabSplitter::embedLookup(GatherOp g, int64_t vocab) {
  b.setInsertionPoint(g);
  auto vg = VocabGatherOp::create(b, g.getLoc(), g.getType(), g.getData(),
                                  g.getIndices(), b.getI64IntegerAttr(1),
                                  vocabAttr(vocab));
  if (Attribute row = g->getAttr("ds.padding_idx"))
    vg->setAttr("ds.padding_idx", row); // global row ids: the VJP masks them
  auto sum = TpAllReduceOp::create(b, g.getLoc(), g.getType(), vg,
                                   b.getI64IntegerAttr(1));
  g.getResult().replaceAllUsesWith(sum.getResult());
  g.erase();
}

LogicalResult VocabSplitter::split() {
  // A split output layer's logits are partial on each rank: they stop
  // being results of the graph.
  Block &body = func.getBody().front();
  llvm::BitVector dropped(func.getNumResults());
  for (VocabHead &h : heads) {
    splitVocabHead(h);
    for (unsigned i : h.returned)
      dropped.set(i);
  }
  for (Embedding &e : embeddings) {
    auto t = cast<RankedTensorType>(e.table.getType());
    int64_t vocab = t.getDimSize(0);
    e.table.setType(withDim(t, 0, vocabPart(vocab)));
    func.setArgAttr(e.table.getArgNumber(), kTpSplit, vocabSplit(0, vocab));
    for (GatherOp g : e.lookups)
      embedLookup(g, vocab);
  }
  if (dropped.any()) {
    body.getTerminator()->eraseOperands(dropped);
    if (failed(func.eraseResults(dropped)))
      return failure();
  }
  func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                 func.getResultTypes()));
  func->setAttr("ds.tensor_parallel", b.getI64IntegerAttr(size));
  func->setAttr("ds.vocab_parallel", b.getUnitAttr());
  return success();
}

struct VocabParallelPass : impl::VocabParallelPassBase<VocabParallelPass> {
  using VocabParallelPassBase::VocabParallelPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getName() != "forward" || size <= 1)
      return;
    if (failed(splitVocabulary(func, size)))
      signalPassFailure();
  }
};

} // namespace

bool hasVocabulary(func::FuncOp func, int64_t size) {
  return VocabSplitter(func, size).find();
}

LogicalResult splitVocabulary(func::FuncOp func, int64_t size) {
  VocabSplitter splitter(func, size);
  if (!splitter.find())
    return success();
  return splitter.split();
}

} // namespace mlir::ds
