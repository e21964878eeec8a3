//===- LoopHandlers.cpp - ONNX Loop unrolled at import --------------------===//
//
// Part of the ds project.
//
// ds plans static shapes, so a Loop is imported by unrolling it: with a
// constant trip count M, its body is imported M times, the iteration
// number and `cond` bound to constants and the loop-carried values to the
// previous iteration's; the scan outputs are stacked along a new first
// axis (ds.reshape + ds.concat). The gradient then comes from the body's
// ops. torch 1.13's export of nn.EmbeddingBag (misc family, issue 22), a
// Loop over the bags, is not unrolled: EmbeddingBagHandlers.cpp matches
// its body and builds one ds.embedding_bag (the bags' bounds may be
// run-time data); a body that looks like it but does not match is
// unrolled, and if that fails the error says what did not match.
//
// Refused with an error at the Loop: no or a non-constant trip count (a
// while loop), more than kMaxTrips iterations, a condition that is not a
// constant, 0 iterations with scan outputs, and any body node that cannot
// be imported with static shapes (its message included).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/IR/Diagnostics.h"

namespace mlir::ds::onnx_import {
namespace {

/// Unrolling more than this many iterations is refused (the IR grows with
/// each).
constexpr int64_t kMaxTrips = 4096;

Value scalarConstant(NodeContext &n, Type elt, int64_t v) {
  auto type = RankedTensorType::get({}, elt);
  Attribute a = elt.isInteger(1) ? Attribute(BoolAttr::get(n.ctx(), v != 0))
                                 : Attribute(IntegerAttr::get(elt, v));
  return n.constant(type, DenseElementsAttr::get(type, ArrayRef(a)));
}

/// Stacks same-typed values along a new first axis.
Value stack(NodeContext &n, ArrayRef<Value> parts) {
  OpBuilder &b = n.builder();
  auto t = cast<RankedTensorType>(parts.front().getType());
  SmallVector<int64_t> one{1};
  one.append(t.getShape().begin(), t.getShape().end());
  SmallVector<Value> rows;
  for (Value p : parts)
    rows.push_back(ReshapeOp::create(b, n.loc, t.clone(one), p));
  if (rows.size() == 1)
    return rows.front();
  one[0] = static_cast<int64_t>(rows.size());
  return ConcatOp::create(b, n.loc, t.clone(one), rows,
                          b.getI64IntegerAttr(0));
}

class Unroller {
public:
  Unroller(NodeContext &n, const onnx::GraphProto &g) : n(n), g(g) {}

  /// Imports the body once; `stop` when its condition is false.
  LogicalResult iteration(int64_t it, bool &stop) {
    Importer &imp = n.importer;
    imp.values[g.input(0).name()] =
        scalarConstant(n, n.builder().getI64Type(), it);
    imp.values[g.input(1).name()] =
        scalarConstant(n, n.builder().getI1Type(), 1);
    for (size_t j = 0; j < carried.size(); ++j)
      imp.values[g.input(2 + j).name()] = carried[j];
    for (const auto &[i, node] : llvm::enumerate(g.node()))
      if (failed(imp.importNode(node, 100000 + i)))
        return failure();
    Value cond = imp.values.lookup(g.output(0).name());
    DenseElementsAttr c = cond ? constantValue(imp, cond) : nullptr;
    if (!c || c.getNumElements() != 1 || !c.getElementType().isInteger(1)) {
      n.error() << "the body's condition output is not a compile-time "
                   "constant (ds unrolls loops of a constant trip count)";
      return failure();
    }
    stop = !*c.getValues<bool>().begin();
    for (size_t j = 0; j < carried.size(); ++j)
      carried[j] = imp.values.lookup(g.output(1 + j).name());
    for (size_t k = 0; k < scans.size(); ++k)
      scans[k].push_back(imp.values.lookup(g.output(1 + carried.size() + k).name()));
    return success();
  }

  NodeContext &n;
  const onnx::GraphProto &g;
  SmallVector<Value> carried;
  SmallVector<SmallVector<Value>> scans;
};

LogicalResult loop(NodeContext &n) {
  const onnx::AttributeProto *body = n.attr("body");
  if (!body || !body->has_g())
    return n.error() << "missing attribute 'body'";
  const onnx::GraphProto &g = body->g();
  size_t numCarried = n.numInputs() < 2 ? 0 : n.numInputs() - 2;
  if (g.input_size() != static_cast<int>(2 + numCarried) ||
      g.output_size() < static_cast<int>(1 + numCarried))
    return n.error() << "the body's inputs and outputs do not match the "
                        "Loop's loop-carried values";
  if (!n.input(0))
    return n.error() << "a Loop without a trip count (a while loop): ds "
                        "unrolls loops of a constant trip count only";
  FailureOr<SmallVector<int64_t>> trips = n.constInts(0, "the trip count M");
  if (failed(trips))
    return failure();
  bool stopAtOnce = false;
  if (n.input(1)) {
    FailureOr<bool> cond = n.constBool(1, "the condition");
    if (failed(cond))
      return failure();
    stopAtOnce = !*cond;
  }
  // torch's EmbeddingBag: one ds.embedding_bag (any number of bags, their
  // bounds run-time data).
  std::string bagWhy;
  bool bagLike = looksLikeEmbeddingBag(n.importer, g);
  if (bagLike && !stopAtOnce && trips->size() == 1 && trips->front() >= 1) {
    if (failed(importEmbeddingBagLoop(n, g, trips->front(), bagWhy)))
      return failure();
    if (bagWhy.empty())
      return success();
  }
  if (trips->size() != 1 || trips->front() < 0 ||
      trips->front() > kMaxTrips)
    return n.error() << "trip count must be one value in [0, " << kMaxTrips
                     << "] to be unrolled";
  if (stopAtOnce)
    trips->front() = 0;
  Unroller u(n, g);
  u.carried.assign(n.inputs.begin() + 2, n.inputs.end());
  u.scans.resize(g.output_size() - 1 - numCarried);
  if (trips->front() == 0 && !u.scans.empty())
    return n.error() << "a Loop of 0 iterations has empty scan outputs, "
                        "which ds does not build";
  // Capture the first error of the body, to say it at the Loop.
  std::string bodyError;
  LogicalResult result = success();
  {
    ScopedDiagnosticHandler capture(n.ctx(), [&](Diagnostic &d) {
      if (d.getSeverity() != DiagnosticSeverity::Error)
        return failure(); // warnings pass through
      if (bodyError.empty())
        bodyError = d.str();
      return success();
    });
    bool stop = false;
    for (int64_t it = 0; it < trips->front() && !stop && succeeded(result);
         ++it)
      result = u.iteration(it, stop);
  }
  if (failed(result)) {
    InFlightDiagnostic d = n.error();
    d << "cannot unroll the Loop with static shapes: " << bodyError;
    if (bagLike)
      d << "; this is torch's export of nn.EmbeddingBag with an offsets "
           "input in a form ds does not take: "
        << bagWhy
        << " (ds imports modes sum, mean and max, per_sample_weights with "
           "sum, include_last_offset)";
    return failure();
  }
  SmallVector<Value> outs(u.carried.begin(), u.carried.end());
  for (auto &parts : u.scans)
    outs.push_back(stack(n, parts));
  return n.bind(outs);
}

} // namespace

void registerLoopHandlers(HandlerTable &t) { t.add("Loop", loop); }

} // namespace mlir::ds::onnx_import
