//===- EmbeddingBagHandlers.cpp - torch's EmbeddingBag Loop as one op -----===//
//
// Part of the ds project.
//
// torch 1.13 exports nn.EmbeddingBag / F.embedding_bag (opset 11+) as a
// Loop over the bags. Its body takes bag i's bounds from two outer 1-D
// tensors, `starts` and `ends` (ends = starts[1:]):
//
//   Unsqueeze(Gather(starts, i), [0]) -> s
//   Unsqueeze(Gather(ends, i), [0])   -> e
//   Slice(indices, s, e[, [0]])       -> bag
//   Gather(weight, bag)               -> rows
//   [Mul(rows, Unsqueeze(Slice(per_sample_weights, s, e), [1]))]
//   ReduceSum | ReduceMean | ReduceMax (axes [0], keepdims 0) -> scan out
//
// plus Constant nodes and the condition (a Cast of the outer `true`).
// `starts` is torch's offsets with the number of indices appended
// (Concat), or with include_last_offset the offsets themselves; with 2-D
// input they are constants. This file matches that body node by node and
// builds one ds.embedding_bag(weight, indices, starts[, psw]) {mode}
// instead of unrolling the Loop: the bags' bounds may then be run-time
// data. When a body looks like it (a Gather of a parameter by a Slice)
// but does not match, the Loop is unrolled as any other, and if that
// fails too, its error says what in the body did not match.
//
// Data parallelism: an offsets graph input (or one with the length
// appended) gets `ds.bag_indices` = the number of indices its bags index
// (and `ds.bag_last_offset` with include_last_offset), so that ds-run
// re-bases each rank's offsets into its own indices, or refuses
// (docs/runtime.md).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::ds::onnx_import {
namespace {

/// Matches one Loop body against torch's EmbeddingBag form.
class BagMatcher {
public:
  BagMatcher(Importer &imp, const onnx::GraphProto &g) : imp(imp), g(g) {
    for (const onnx::NodeProto &node : g.node())
      for (const std::string &out : node.output())
        producer[out] = &node;
  }

  /// Fills the fields below, or returns false with `why` set.
  bool match();

  Importer &imp;
  const onnx::GraphProto &g;
  std::string why;
  std::string mode;
  Value weight, indices, starts, ends, psw;

private:
  /// The body node of type `opType` that produces `name`, marked as used;
  /// null (and `why`) otherwise.
  const onnx::NodeProto *node(const std::string &name, StringRef opType) {
    auto it = producer.find(name);
    if (it == producer.end() || it->second->op_type() != opType) {
      if (why.empty())
        why = "'" + name + "' is not a " + opType.str() + " in the body";
      return nullptr;
    }
    used.insert(it->second);
    return it->second;
  }

  /// An outer value by name (null and `why` when the body computes it).
  Value outer(const std::string &name, StringRef what) {
    Value v = producer.count(name) ? Value() : imp.values.lookup(name);
    if (!v && why.empty())
      why = "the " + what.str() + " '" + name + "' is not an outer value";
    return v;
  }

  /// The integers of a constant: a body Constant node or an outer one.
  std::optional<SmallVector<int64_t>> ints(const std::string &name);

  bool intsAre(const std::string &name, ArrayRef<int64_t> want,
               StringRef what) {
    std::optional<SmallVector<int64_t>> v = ints(name);
    if (v && ArrayRef<int64_t>(*v) == want)
      return true;
    if (why.empty())
      why = "the " + what.str() + " is not the constant " +
            shapeStr(want);
    return false;
  }

  static const onnx::AttributeProto *attr(const onnx::NodeProto &n,
                                          StringRef key) {
    for (const onnx::AttributeProto &a : n.attribute())
      if (a.name() == key)
        return &a;
    return nullptr;
  }

  /// Unsqueeze(x, [axis]) (axes as input from opset 13, else attribute).
  const onnx::NodeProto *unsqueeze(const std::string &name, int64_t axis);
  /// The outer tensor `t` of Unsqueeze(Gather(t, iteration), [0]).
  Value bound(const std::string &name, StringRef what);
  /// Slice(data, s, e[, [0][, [1]]]): the bag of `data`.
  const onnx::NodeProto *bagSlice(const std::string &name);
  bool reduction(const onnx::NodeProto &red);
  bool condition();

  llvm::StringMap<const onnx::NodeProto *> producer;
  llvm::SmallPtrSet<const onnx::NodeProto *, 16> used;
  std::string start, end; // the bag's bound names in the body
};

std::optional<SmallVector<int64_t>>
BagMatcher::ints(const std::string &name) {
  DenseElementsAttr c;
  if (auto it = producer.find(name); it != producer.end()) {
    const onnx::AttributeProto *v = it->second->op_type() == "Constant"
                                        ? attr(*it->second, "value")
                                        : nullptr;
    if (!v || !v->has_t())
      return std::nullopt;
    FailureOr<DenseElementsAttr> t = imp.tensorToAttr(v->t(), name);
    c = succeeded(t) ? *t : nullptr;
  } else if (Value o = imp.values.lookup(name)) {
    c = constantValue(imp, o);
  }
  if (!c || !c.getElementType().isInteger())
    return std::nullopt;
  SmallVector<int64_t> out;
  for (const APInt &v : c.getValues<APInt>())
    out.push_back(v.getSExtValue());
  return out;
}

const onnx::NodeProto *BagMatcher::unsqueeze(const std::string &name,
                                             int64_t axis) {
  const onnx::NodeProto *u = node(name, "Unsqueeze");
  if (!u)
    return nullptr;
  if (u->input_size() > 1)
    return intsAre(u->input(1), {axis}, "Unsqueeze's axes") ? u : nullptr;
  const onnx::AttributeProto *axes = attr(*u, "axes");
  if (axes && axes->ints_size() == 1 && axes->ints(0) == axis)
    return u;
  why = "an Unsqueeze is not on axis " + std::to_string(axis);
  return nullptr;
}

Value BagMatcher::bound(const std::string &name, StringRef what) {
  const onnx::NodeProto *u = unsqueeze(name, 0);
  const onnx::NodeProto *gather =
      u ? node(u->input(0), "Gather") : nullptr;
  if (!gather)
    return nullptr;
  const onnx::AttributeProto *axis = attr(*gather, "axis");
  if ((axis && axis->i() != 0) || gather->input_size() != 2 ||
      gather->input(1) != g.input(0).name()) {
    why = "the bag's " + what.str() +
          " is not Gather(bounds, iteration number)";
    return nullptr;
  }
  return outer(gather->input(0), what);
}

const onnx::NodeProto *BagMatcher::bagSlice(const std::string &name) {
  const onnx::NodeProto *s = node(name, "Slice");
  if (!s || s->input_size() < 3)
    return nullptr;
  if (s->input_size() > 3 && !s->input(3).empty() &&
      !intsAre(s->input(3), {0}, "bag Slice's axes"))
    return nullptr;
  if (s->input_size() > 4 && !s->input(4).empty() &&
      !intsAre(s->input(4), {1}, "bag Slice's steps"))
    return nullptr;
  if (start.empty()) {
    start = s->input(1);
    end = s->input(2);
  } else if (s->input(1) != start || s->input(2) != end) {
    why = "per_sample_weights are not sliced with the indices' bounds";
    return nullptr;
  }
  return s;
}

bool BagMatcher::reduction(const onnx::NodeProto &red) {
  StringRef op = red.op_type();
  mode = op == "ReduceSum" ? "sum" : op == "ReduceMean" ? "mean" : "max";
  const onnx::AttributeProto *keep = attr(red, "keepdims");
  const onnx::AttributeProto *noop = attr(red, "noop_with_empty_axes");
  if (!keep || keep->i() != 0 || (noop && noop->i() != 0)) {
    why = "the bag's " + op.str() + " keeps the reduced axis";
    return false;
  }
  if (red.input_size() > 1)
    return intsAre(red.input(1), {0}, op.str() + "'s axes");
  const onnx::AttributeProto *axes = attr(red, "axes");
  if (axes && axes->ints_size() == 1 && axes->ints(0) == 0)
    return true;
  why = "the bag's " + op.str() + " is not over axis 0";
  return false;
}

/// The body's condition: the loop's own, or a Cast or Identity of an
/// outer constant true.
bool BagMatcher::condition() {
  const std::string &c = g.output(0).name();
  if (c == g.input(1).name())
    return true;
  auto it = producer.find(c);
  if (it != producer.end() && (it->second->op_type() == "Cast" ||
                               it->second->op_type() == "Identity")) {
    used.insert(it->second);
    std::optional<SmallVector<int64_t>> v = ints(it->second->input(0));
    Value o = imp.values.lookup(it->second->input(0));
    DenseElementsAttr k = o ? constantValue(imp, o) : nullptr;
    if ((v && v->size() == 1 && v->front() != 0) ||
        (k && k.getNumElements() == 1 && k.getElementType().isInteger(1) &&
         *k.getValues<bool>().begin()))
      return true;
  }
  why = "the body's condition is not a constant true";
  return false;
}

bool BagMatcher::match() {
  if (g.input_size() != 2 || g.output_size() != 2) {
    why = "the Loop carries values besides the bags";
    return false;
  }
  auto it = producer.find(g.output(1).name());
  StringRef op =
      it == producer.end() ? StringRef() : StringRef(it->second->op_type());
  if (op != "ReduceSum" && op != "ReduceMean" && op != "ReduceMax") {
    why = "the bags are not reduced by ReduceSum, ReduceMean or ReduceMax "
          "(modes sum, mean, max)";
    return false;
  }
  const onnx::NodeProto &red = *it->second;
  used.insert(&red);
  if (!reduction(red))
    return false;
  std::string rowsName = red.input(0);
  if (const onnx::NodeProto *mul = producer.lookup(rowsName);
      mul && mul->op_type() == "Mul") {
    used.insert(mul);
    bool first = producer.lookup(mul->input(0)) &&
                 producer.lookup(mul->input(0))->op_type() == "Gather";
    rowsName = mul->input(first ? 0 : 1);
    const onnx::NodeProto *u = unsqueeze(mul->input(first ? 1 : 0), 1);
    const onnx::NodeProto *s = u ? bagSlice(u->input(0)) : nullptr;
    if (!s)
      return false;
    if (!(psw = outer(s->input(0), "per_sample_weights")))
      return false;
  }
  const onnx::NodeProto *rows = node(rowsName, "Gather");
  const onnx::NodeProto *s =
      rows && rows->input_size() == 2 ? bagSlice(rows->input(1)) : nullptr;
  if (!s)
    return false;
  if (const onnx::AttributeProto *axis = attr(*rows, "axis");
      axis && axis->i() != 0) {
    why = "the rows are not gathered along axis 0";
    return false;
  }
  if (!(weight = outer(rows->input(0), "weight")) ||
      !(indices = outer(s->input(0), "indices")) ||
      !(starts = bound(start, "starts")) || !(ends = bound(end, "ends")) ||
      !condition())
    return false;
  for (const onnx::NodeProto &n : g.node())
    if (!used.count(&n) && n.op_type() != "Constant") {
      why = "the body also computes '" + n.name() + "' (" + n.op_type() + ")";
      return false;
    }
  return true;
}

/// Whether `ends` is `starts[1:]` (a ds.slice of it, or equal constants).
bool endsFollowStarts(Importer &imp, Value starts, Value ends) {
  auto st = cast<RankedTensorType>(starts.getType());
  if (auto slice = ends.getDefiningOp<SliceOp>())
    return slice.getInput() == starts && slice.getStarts().size() == 1 &&
           slice.getStarts()[0] == 1 && slice.getSteps()[0] == 1 &&
           slice.getType().getDimSize(0) == st.getDimSize(0) - 1;
  DenseElementsAttr s = constantValue(imp, starts);
  DenseElementsAttr e = constantValue(imp, ends);
  if (!s || !e || e.getNumElements() + 1 != s.getNumElements())
    return false;
  auto sv = llvm::to_vector(s.getValues<APInt>());
  auto ev = llvm::to_vector(e.getValues<APInt>());
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i] != sv[i + 1])
      return false;
  return true;
}

/// A graph input (not a parameter), maybe reshaped, or a constant.
bool isInputOrConstant(Importer &imp, Value v) {
  while (auto r = v.getDefiningOp<ReshapeOp>())
    v = r.getInput();
  if (constantValue(imp, v))
    return true;
  auto arg = dyn_cast<BlockArgument>(v);
  auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                  : func::FuncOp();
  return func && func.getArgAttr(arg.getArgNumber(), attrs::kInput);
}

/// Marks the graph input that holds the offsets (alone, or with the
/// number of indices appended) with the number of indices its bags index.
void markOffsetsInput(Value starts, int64_t numIndices) {
  Value v = starts;
  bool lastOffset = true;
  if (auto concat = v.getDefiningOp<ConcatOp>()) {
    lastOffset = false;
    v = concat.getOperands().front();
    for (Value rest : concat.getOperands().drop_front())
      if (!rest.getDefiningOp<ConstantOp>())
        return;
  }
  auto arg = dyn_cast<BlockArgument>(v);
  auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                  : func::FuncOp();
  if (!func || !func.getArgAttr(arg.getArgNumber(), attrs::kInput))
    return;
  func.setArgAttr(arg.getArgNumber(), "ds.bag_indices",
                  IntegerAttr::get(IntegerType::get(func.getContext(), 64),
                                   numIndices));
  if (lastOffset)
    func.setArgAttr(arg.getArgNumber(), "ds.bag_last_offset",
                    UnitAttr::get(func.getContext()));
}

/// Why the matched bag's operands do not fit ds.embedding_bag; empty when
/// they do.
std::string checkOperands(Importer &imp, const BagMatcher &m, int64_t trips) {
  auto w = dyn_cast<RankedTensorType>(m.weight.getType());
  auto idx = dyn_cast<RankedTensorType>(m.indices.getType());
  auto st = dyn_cast<RankedTensorType>(m.starts.getType());
  if (!w || w.getRank() != 2 || !isa<FloatType>(w.getElementType()))
    return "the gathered table is not a 2-D float tensor";
  if (!idx || idx.getRank() != 1 || !st || st.getRank() != 1 ||
      !isa<IntegerType>(idx.getElementType()) ||
      !isa<IntegerType>(st.getElementType()))
    return "the indices and offsets are not 1-D integers";
  if (st.getDimSize(0) != trips + 1 || !endsFollowStarts(imp, m.starts, m.ends))
    return "the bags' ends are not the offsets that follow their starts";
  if (!m.psw)
    return "";
  if (m.mode != "sum")
    return "per_sample_weights with mode " + m.mode +
           " (torch takes them with sum only)";
  auto p = cast<RankedTensorType>(m.psw.getType());
  if (p.getShape() != idx.getShape() || p.getElementType() != w.getElementType())
    return "per_sample_weights do not have the indices' shape and type";
  if (!isInputOrConstant(imp, m.psw))
    return "per_sample_weights computed in the model would need a gradient, "
           "which ds does not build: give them as a graph input";
  return "";
}

} // namespace

bool looksLikeEmbeddingBag(Importer &imp, const onnx::GraphProto &g) {
  bool slice = false, gatherParam = false;
  for (const onnx::NodeProto &node : g.node()) {
    slice |= node.op_type() == "Slice";
    if (node.op_type() == "Gather" && node.input_size() > 0) {
      auto it = imp.values.find(node.input(0));
      gatherParam |= it != imp.values.end() && imp.paramData.count(it->second);
    }
  }
  return slice && gatherParam;
}

LogicalResult importEmbeddingBagLoop(NodeContext &n, const onnx::GraphProto &g,
                                     int64_t trips, std::string &why) {
  BagMatcher m(n.importer, g);
  why = m.match() ? checkOperands(n.importer, m, trips) : m.why;
  if (!why.empty())
    return success();
  OpBuilder &b = n.builder();
  auto w = cast<RankedTensorType>(m.weight.getType());
  auto type = RankedTensorType::get({trips, w.getDimSize(1)},
                                    w.getElementType());
  Value r = EmbeddingBagOp::create(b, n.loc, type, m.weight, m.indices,
                                   m.starts, m.psw, b.getStringAttr(m.mode));
  markOffsetsInput(m.starts,
                   cast<RankedTensorType>(m.indices.getType()).getDimSize(0));
  return n.bind(r);
}

} // namespace mlir::ds::onnx_import
